//! What the leader task is given, and how leadership is observed.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
}

impl StopReason {
    /// One lower-case word: `shutdown`, `lost`, `deadline` or `stalled`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Shutdown => "shutdown",
            StopReason::LeaseLost => "lost",
            StopReason::Deadline => "deadline",
            StopReason::Stalled => "stalled",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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

    /// The token cancelled when the task must stop; clone it for sub-tasks.
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
