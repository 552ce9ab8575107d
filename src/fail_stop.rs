//! Fail-stop: exit the process when a leader task can be neither stopped
//! nor aborted, before its lease could expire.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;
use std::time::Instant;

use tracing::error;

/// The exit code of a process that [`MutexOptions::fail_stop`](crate::MutexOptions::fail_stop) ended.
pub const FAIL_STOP_EXIT_CODE: i32 = 70;

use crate::options::FAIL_STOP_SLACK;

/// Logs why and exits with [`FAIL_STOP_EXIT_CODE`].
pub(crate) fn exit(epoch: u64, why: &str) -> ! {
    error!(
        epoch,
        code = FAIL_STOP_EXIT_CODE,
        why,
        "fail-stop: the leader task could not be stopped; exiting the process"
    );
    std::process::exit(FAIL_STOP_EXIT_CODE);
}

/// A plain OS thread that exits the process when the leader task is still
/// running shortly before the deadline, or after its stop grace and abort
/// have run out. It cannot rely on the Tokio runtime, which a task blocking
/// its thread may have stalled, timers included. Dropping the guard (once
/// the task is known to have stopped) disarms it.
pub(crate) struct FailStop {
    shared: Arc<Shared>,
    thread: Option<Thread>,
}

struct Shared {
    done: AtomicBool,
    /// When the task must have stopped, once it has been asked to stop.
    stop_by: Mutex<Option<Instant>>,
}

impl FailStop {
    /// Arms the watcher; `deadline` gives the current deadline, which only
    /// ever moves forward.
    pub(crate) fn arm(deadline: impl Fn() -> Instant + Send + 'static, epoch: u64) -> Self {
        let shared = Arc::new(Shared {
            done: AtomicBool::new(false),
            stop_by: Mutex::new(None),
        });
        let seen = shared.clone();
        let watcher = move || loop {
            if seen.done.load(Ordering::SeqCst) {
                return;
            }
            // The deadline only moves forward and `stop_by` is set with an
            // unpark, so parking until the current limit never misses either.
            let deadline = deadline();
            let mut limit = deadline.checked_sub(FAIL_STOP_SLACK).unwrap_or(deadline);
            if let Some(stop_by) = *seen.stop_by.lock().unwrap_or_else(PoisonError::into_inner) {
                limit = limit.min(stop_by);
            }
            let now = Instant::now();
            if now >= limit {
                if seen.done.load(Ordering::SeqCst) {
                    return;
                }
                exit(epoch, "the leader task is still running at its limit");
            }
            std::thread::park_timeout(limit - now);
        };
        let thread = match std::thread::Builder::new()
            .name("blob-mutex-fail-stop".into())
            .spawn(watcher)
        {
            Ok(handle) => Some(handle.thread().clone()),
            Err(e) => {
                error!(error = %e, "cannot start the fail-stop thread");
                None
            }
        };
        FailStop { shared, thread }
    }

    /// The task has been asked to stop and must have stopped by `instant`.
    pub(crate) fn stop_by(&self, instant: Instant) {
        *self
            .shared
            .stop_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(instant);
        self.wake();
    }

    fn wake(&self) {
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
    }
}

impl Drop for FailStop {
    fn drop(&mut self) {
        self.shared.done.store(true, Ordering::SeqCst);
        self.wake();
    }
}
