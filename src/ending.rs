//! How a term ends: why it was asked to stop ([`StopReason`]), how its
//! tasks ended ([`TaskStop`]), and the report of both ([`TermReport`]),
//! which the end of a term (the engine's `stop` and `report`) makes and
//! every observer reads. It names nothing of the crate: the floor, so that
//! an [`Error`](crate::Error) can carry a report.

use std::fmt;

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
    /// A live candidate with a higher priority was waiting: the term was
    /// stopped and the lease handed to that candidate (see
    /// [`MutexOptions::priority`](crate::MutexOptions::priority)).
    Handover,
    /// The future that ran the term was dropped while the term ran (a
    /// `tokio::select!` branch that lost, a runtime shutting down, a lease
    /// set's membership term that ended): its tasks were aborted at once and
    /// the lease was left to expire.
    Dropped,
}

impl StopReason {
    /// Every reason, for the metrics exported at 0 from the start.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const ALL: [StopReason; 9] = [
        StopReason::Shutdown,
        StopReason::LeaseLost,
        StopReason::Deadline,
        StopReason::Stalled,
        StopReason::Finished,
        StopReason::Failed,
        StopReason::Panicked,
        StopReason::Handover,
        StopReason::Dropped,
    ];

    /// One lower-case word: `shutdown`, `lost`, `deadline`, `stalled`,
    /// `finished`, `failed`, `panicked`, `handover` or `dropped`.
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
            StopReason::Handover => "handover",
            StopReason::Dropped => "dropped",
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
    /// ended now (for a dropped term: all were aborted as it was reported,
    /// see [`TermReport`]).
    Aborted,
    /// Some task could be neither stopped nor aborted: it may still run. The
    /// lease was not released, and the campaign ends with
    /// [`Error::TaskNotStopped`](crate::Error::TaskNotStopped) (or the
    /// process exits, with [`MutexOptions::fail_stop`](crate::MutexOptions::fail_stop)).
    Stuck,
    /// A guard's term that had to end (a handover, the deadline, the
    /// watchdog) was not released by its holder before the lease could
    /// expire: the lease was neither released nor handed over but left to
    /// expire, since the holder's code may still run (see
    /// [`MutexGuard`](crate::MutexGuard)). The term's own sub-tasks were
    /// aborted.
    Unreleased,
}

impl TaskStop {
    /// One lower-case word: `returned`, `aborted`, `stuck` or `unreleased`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStop::Returned => "returned",
            TaskStop::Aborted => "aborted",
            TaskStop::Stuck => "stuck",
            TaskStop::Unreleased => "unreleased",
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
/// unless [`TaskStop::Stuck`] says otherwise. A term whose future was
/// dropped (reason [`StopReason::Dropped`], or `Deadline` when its deadline
/// had passed) cannot wait: it is reported as its tasks are aborted, which
/// end at their next await. Its lease is left to expire, and nothing is
/// claimed again by the same mutex or set in this process until those
/// tasks have ended.
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
