//! Fail-stop: exit the process when a leader task can be neither stopped
//! nor aborted, before its lease could expire.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use tracing::error;

use crate::options::FAIL_STOP_SLACK;

/// The exit code of a process that [`MutexOptions::fail_stop`](crate::MutexOptions::fail_stop) ended.
pub const FAIL_STOP_EXIT_CODE: i32 = 70;

/// How long the exit waits for its log line to be written. A logger that
/// blocks (a full pipe on standard error, a held lock) must not delay it.
const LOG_WAIT: Duration = Duration::from_millis(50);

/// Logs why and exits with [`FAIL_STOP_EXIT_CODE`]. The log line is written
/// from another thread and waited for at most [`LOG_WAIT`].
pub(crate) fn exit(epoch: u64, why: &'static str) -> ! {
    let (written, wait) = mpsc::channel::<()>();
    let logger = std::thread::Builder::new()
        .name("blob-mutex-fail-stop-log".into())
        .spawn(move || {
            error!(
                epoch,
                code = FAIL_STOP_EXIT_CODE,
                why,
                "fail-stop: the leader task could not be stopped; exiting the process"
            );
            let _ = written.send(());
        });
    if logger.is_ok() {
        let _ = wait.recv_timeout(LOG_WAIT);
    }
    std::process::exit(FAIL_STOP_EXIT_CODE);
}

/// A plain OS thread that exits the process when a term's tasks still run
/// shortly before the deadline, or after their stop grace and abort have run
/// out. It cannot rely on the Tokio runtime, which a task blocking its thread
/// may have stalled, timers included.
///
/// Only [`FailStop::disarm`] (once the tasks are known to have stopped) or
/// the tasks' own end disarms it. Dropping the guard does not: when the
/// campaign future is dropped while a task blocks its thread, the watcher
/// still exits the process before the lease could expire.
pub(crate) struct FailStop {
    shared: Arc<Shared>,
    thread: Option<Thread>,
}

struct Shared {
    disarmed: AtomicBool,
    /// When the tasks must have stopped, once they have been asked to.
    stop_by: Mutex<Option<Instant>>,
}

impl FailStop {
    /// Arms the watcher. `deadline` gives the current deadline, which only
    /// ever moves forward; `done` tells whether nothing of the term can run
    /// any more: every task has ended and, for a guard's term, the guard is
    /// released (the engine aborts the task that waits for the release,
    /// never the holder's code).
    pub(crate) fn arm(
        deadline: impl Fn() -> Instant + Send + 'static,
        done: impl Fn() -> bool + Send + 'static,
        epoch: u64,
    ) -> Self {
        let shared = Arc::new(Shared {
            disarmed: AtomicBool::new(false),
            stop_by: Mutex::new(None),
        });
        let seen = shared.clone();
        let watcher = move || loop {
            if seen.disarmed.load(Ordering::SeqCst) {
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
                if seen.disarmed.load(Ordering::SeqCst) || done() {
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

    /// The tasks have been asked to stop and must have stopped by `instant`.
    pub(crate) fn stop_by(&self, instant: Instant) {
        *self
            .shared
            .stop_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(instant);
        self.wake();
    }

    /// Every task has stopped: the watcher ends.
    pub(crate) fn disarm(self) {
        self.shared.disarmed.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
    }
}
