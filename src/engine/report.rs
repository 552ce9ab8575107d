//! How the end of a term is made known, exactly once, whatever ended it:
//! the `tracing` event, the state channel, the metrics and the observer (the
//! mutex's term reports, or a lease set's partition reports and map of owned
//! partitions). A [`TermGuard`] sends the report when the term's future is
//! dropped before the term could report by itself.

use std::sync::{Arc, OnceLock};

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tracing::{debug, error, warn};

use super::Deadline;
use crate::ending::{StopReason, TaskStop, TermReport};
use crate::engine::leadership::Leadership;
use crate::engine::lingering::Lingering;
use crate::engine::metrics::Metrics;
use crate::engine::term_tasks::TermTasks;

/// Who hears of a term's start and end besides the state channel and the
/// metrics. Called synchronously, so that a dropped term can still report.
pub(crate) trait Observer: Send + Sync {
    /// The lease is held and the term is about to be stamped (a term of
    /// [`Engine::lead_once`](crate::engine::Engine::lead_once): a partition's).
    fn acquired(&self) {}

    /// A term has started with this epoch; its task is about to run.
    fn started(&self, _epoch: u64) {}

    /// A term has ended, as the report says.
    fn ended(&self, report: &TermReport);

    /// The lease of a term that ended was released (`true`), or its release
    /// failed or timed out and it is left to expire (`false`). Called after
    /// [`ended`](Self::ended), and only for a term whose ending was a
    /// release: not for a lease lost, handed over, or left to expire at
    /// once (a task that could not be stopped, a guard not released).
    fn released(&self, _released: bool) {}
}

/// The mutex's term reports.
impl Observer for broadcast::Sender<TermReport> {
    fn ended(&self, report: &TermReport) {
        // Nobody listening is fine.
        let _ = self.send(report.clone());
    }
}

/// What reports the end of a term: copied out of the engine so that a
/// [`TermGuard`] can report from `Drop`.
#[derive(Clone, Copy)]
pub(crate) struct Reporter<'a> {
    pub(crate) holder: &'a str,
    pub(crate) state: &'a watch::Sender<Leadership>,
    pub(crate) observer: &'a dyn Observer,
    pub(crate) metrics: &'a Metrics,
    pub(crate) lingering: &'a Lingering,
    pub(crate) stop_grace: std::time::Duration,
}

impl Reporter<'_> {
    /// A term has started: the state, the metrics and the observer say so.
    /// `deadline` moves with each renewal.
    pub(crate) fn started(&self, epoch: u64, deadline: watch::Receiver<Instant>) {
        self.observer.started(epoch);
        self.state.send_replace(Leadership::Leader { epoch });
        self.metrics.term_started(epoch, deadline);
        debug!(holder = %self.holder, epoch, "became leader");
    }

    /// Says how a term ended: a `tracing` event, the state channel, the
    /// metrics and the observer.
    pub(crate) fn ended(&self, report: &TermReport) {
        let (epoch, reason, tasks) = (report.epoch, report.reason, report.tasks);
        let failure = report.failure.as_deref().unwrap_or("");
        let holder = self.holder;
        match tasks {
            TaskStop::Stuck => {
                error!(%holder, epoch, %reason, "leader task could not be stopped; the lease is left to expire");
            }
            TaskStop::Aborted => {
                error!(%holder, epoch, %reason, grace = ?self.stop_grace, "leader task had not stopped when its grace or the deadline came, and was aborted");
            }
            TaskStop::Unreleased => {
                warn!(%holder, epoch, %reason, "the guard was not released before the lease could expire; the lease is left to expire");
            }
            TaskStop::Returned => {}
        }
        if matches!(reason, StopReason::Shutdown | StopReason::Finished) && failure.is_empty() {
            debug!(%holder, epoch, %reason, %tasks, "term ended");
        } else {
            warn!(%holder, epoch, %reason, %tasks, failure, "term ended");
        }
        self.metrics.term_ended(report);
        self.state.send_replace(Leadership::Ended(report.clone()));
        self.observer.ended(report);
    }
}

/// Reports the end of a term when the term's future is dropped before it
/// reported by itself: its tasks are cancelled and aborted first (as
/// dropping the term does anyway), and tasks that had not ended yet are
/// kept in [`Lingering`] so that nothing is claimed again while they may
/// run.
pub(crate) struct TermGuard<'t> {
    pub(crate) reporter: Reporter<'t>,
    pub(crate) epoch: u64,
    pub(crate) deadline: Arc<Deadline>,
    pub(crate) reason: Arc<OnceLock<StopReason>>,
    pub(crate) tasks: &'t TermTasks,
    pub(crate) armed: bool,
}

impl TermGuard<'_> {
    /// Reports the end of the term, once.
    pub(crate) fn report(&mut self, report: &TermReport) {
        if std::mem::take(&mut self.armed) {
            if report.tasks == TaskStop::Stuck {
                self.reporter.lingering.add(self.tasks.tracker());
            }
            self.reporter.ended(report);
        }
    }
}

impl Drop for TermGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // A term that was stopping says why; one whose deadline has passed
        // (a process that woke after a freeze, a membership term that ended)
        // ended at its deadline; anything else was dropped.
        let reason = match self.reason.get() {
            Some(reason) => *reason,
            None if Instant::now() >= self.deadline.get() => StopReason::Deadline,
            None => StopReason::Dropped,
        };
        let _ = self.reason.set(reason);
        self.tasks.stop_now();
        let tasks = if self.tasks.all_done() {
            TaskStop::Returned
        } else {
            TaskStop::Aborted
        };
        self.reporter.lingering.add(self.tasks.tracker());
        let report = TermReport {
            epoch: self.epoch,
            reason,
            tasks,
            failure: self.tasks.failure().map(|f| f.message),
        };
        self.report(&report);
    }
}
