//! What the leader task is given, and how leadership is observed.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::BoxError;
use crate::term_tasks::Shared as TermShared;

/// The state of one [`BlobDistributedMutex`](crate::BlobDistributedMutex), as
/// seen through [`BlobDistributedMutex::watch`](crate::BlobDistributedMutex::watch).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leadership {
    /// Campaigning, or waiting for the current leader's lease to end.
    Follower,
    /// This instance holds the lease and its leader task runs.
    Leader {
        /// The fencing token of this term (see [`LeaderContext::epoch`]).
        epoch: u64,
    },
    /// A term has ended as the report says: every task of the term has
    /// stopped (unless the report says [`TaskStop::Stuck`]). Campaigning
    /// again, or about to stop.
    Ended(TermReport),
    /// `run_task_when_mutex_acquired` has returned.
    Stopped,
}

impl Leadership {
    /// The epoch if this instance leads.
    #[must_use]
    pub fn epoch(&self) -> Option<u64> {
        match self {
            Leadership::Leader { epoch } => Some(*epoch),
            _ => None,
        }
    }
}

/// Why a leader task was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The caller's cancellation token was cancelled.
    Shutdown,
    /// Storage said the lease is no longer ours (broken, changed, taken).
    LeaseLost,
    /// Renewals did not succeed before the deadline.
    Deadline,
    /// The task missed its heartbeat; the watchdog stepped down.
    Stalled,
    /// The leader task returned `Ok`.
    Finished,
    /// The leader task, or one of its sub-tasks, returned an error.
    Failed,
    /// The leader task, or one of its sub-tasks, panicked.
    Panicked,
}

impl StopReason {
    /// One lower-case word: `shutdown`, `lost`, `deadline`, `stalled`,
    /// `finished`, `failed` or `panicked`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Shutdown => "shutdown",
            StopReason::LeaseLost => "lost",
            StopReason::Deadline => "deadline",
            StopReason::Stalled => "stalled",
            StopReason::Finished => "finished",
            StopReason::Failed => "failed",
            StopReason::Panicked => "panicked",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the tasks of a term ended once the term was over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskStop {
    /// Every task returned (by itself, or after its token was cancelled).
    Returned,
    /// Some task did not return within its grace and was aborted; all have
    /// ended now.
    Aborted,
    /// Some task could be neither stopped nor aborted: it may still run. The
    /// lease was not released, and the campaign ends with
    /// [`Error::TaskNotStopped`](crate::Error::TaskNotStopped) (or the
    /// process exits, with [`MutexOptions::fail_stop`](crate::MutexOptions::fail_stop)).
    Stuck,
}

impl TaskStop {
    /// One lower-case word: `returned`, `aborted` or `stuck`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStop::Returned => "returned",
            TaskStop::Aborted => "aborted",
            TaskStop::Stuck => "stuck",
        }
    }
}

impl fmt::Display for TaskStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one term ended, reported by the mutex itself whatever ended it (see
/// [`BlobDistributedMutex::term_reports`](crate::BlobDistributedMutex::term_reports)).
///
/// It is sent once the term's tasks have stopped and before the lease is
/// released, so a report means that no task of the term runs any more,
/// unless [`TaskStop::Stuck`] says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TermReport {
    /// The term's epoch.
    pub epoch: u64,
    /// Why the term ended.
    pub reason: StopReason,
    /// How its tasks ended.
    pub tasks: TaskStop,
    /// The error or panic message, when a task failed or panicked.
    pub failure: Option<String>,
}

/// What a leader task is given: its term's fencing token, this instance's
/// name, the cancellation token it must obey, and a heartbeat.
///
/// The task must return soon after [`LeaderContext::cancelled`] completes;
/// after [`MutexOptions::stop_grace`](crate::MutexOptions::stop_grace) it is aborted.
#[derive(Clone)]
pub struct LeaderContext {
    pub(crate) epoch: u64,
    pub(crate) holder: Arc<str>,
    pub(crate) token: CancellationToken,
    pub(crate) reason: Arc<OnceLock<StopReason>>,
    pub(crate) heartbeat: Heartbeat,
    pub(crate) deadline: watch::Receiver<Instant>,
    pub(crate) tasks: Arc<TermShared>,
}

impl LeaderContext {
    /// The fencing token of this term: it strictly increases from one leader
    /// of the blob to the next, as long as only this crate writes the blob
    /// (a foreign Put Blob replaces the metadata that holds it). Pass it with every write the task makes and
    /// have the downstream system refuse writes with a smaller epoch than it
    /// has seen; that is the only protection against a leader that was
    /// paused (GC, VM freeze) past its lease and acts late.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This instance's holder name, as written to the blob.
    #[must_use]
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Starts a sub-task that belongs to this term.
    ///
    /// A sub-task is stopped like the leader task: when the term ends, its
    /// token (this context's) is cancelled, it gets the same
    /// [`stop_grace`](crate::MutexOptions::stop_grace), then it is aborted,
    /// and the lease is released only once every sub-task has ended. A
    /// sub-task that returns an error or panics ends the term like a failed
    /// leader task (the report carries its message and the term's epoch).
    ///
    /// The term is the leader task: when the leader task returns, the term
    /// ends and its sub-tasks are cancelled. Await them in the leader task
    /// (through the returned handle) if they must finish first. A sub-task
    /// spawned after its term ended is not started: the returned handle
    /// completes at once as cancelled, and an error is logged.
    ///
    /// Spawn with `tokio::spawn` only work that may outlive the lease.
    pub fn spawn<F, E>(&self, task: F) -> JoinHandle<()>
    where
        F: std::future::Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.tasks
            .spawn_sub_task(async move { task.await.map_err(Into::into) })
    }

    /// The token cancelled when the task must stop; give clones of it (or of
    /// this context) to the sub-tasks started with [`spawn`](Self::spawn).
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Whether the task has been asked to stop.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Why the task was asked to stop, once it has been.
    #[must_use]
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.reason.get().copied()
    }

    /// Completes when the task must stop, with the reason.
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: it only waits.
    pub async fn cancelled(&self) -> StopReason {
        self.token.cancelled().await;
        self.stop_reason().unwrap_or(StopReason::Shutdown)
    }

    /// The term's current deadline: the instant by which the task must have
    /// stopped (see [`MutexOptions`](crate::MutexOptions#the-deadline)). It
    /// moves forward with each successful renewal and never moves back.
    /// The mutex stops the task before it on its own; this is for work that
    /// outlives the task's process, such as a child process that must be
    /// killed at the deadline even if this process freezes.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    /// A receiver that sees every move of [`deadline`](Self::deadline).
    #[must_use]
    pub fn watch_deadline(&self) -> watch::Receiver<Instant> {
        self.deadline.clone()
    }

    /// The task's heartbeat handle (see [`MutexOptions::heartbeat_timeout`](crate::MutexOptions::heartbeat_timeout)).
    #[must_use]
    pub fn heartbeat(&self) -> &Heartbeat {
        &self.heartbeat
    }
}

impl fmt::Debug for LeaderContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderContext")
            .field("epoch", &self.epoch)
            .field("holder", &self.holder)
            .field("cancelled", &self.token.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// Proof of progress from a leader task. Call [`Heartbeat::beat`] whenever
/// the task has done a unit of work; when a heartbeat timeout is configured
/// and no beat comes in time, the mutex steps down.
#[derive(Debug, Clone)]
pub struct Heartbeat(pub(crate) Arc<watch::Sender<u64>>);

impl Heartbeat {
    pub(crate) fn new() -> (Self, watch::Receiver<u64>) {
        let (tx, rx) = watch::channel(0);
        (Heartbeat(Arc::new(tx)), rx)
    }

    /// Records that the task is alive and making progress.
    pub fn beat(&self) {
        self.0.send_modify(|beats| *beats = beats.wrapping_add(1));
    }
}
