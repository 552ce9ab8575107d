//! How a host reports what became of a slot: one log line, the slot
//! metric, and a [`SlotReport`] to every receiver.

use std::sync::Arc;

use jiff::Timestamp;
use tokio::sync::broadcast;
use tracing::{info, warn};

use super::metrics::SlotCounter;
use super::{SlotOutcome, SlotReport};

/// A failed run's next attempt, as its report's log line tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Not before this instant of storage's clock.
    At(Timestamp),
    /// Never: the retries are spent, or the next would come past the
    /// catch-up window.
    GaveUp,
}

/// The reports of one host's schedule.
#[derive(Debug, Clone)]
pub(super) struct Reporter {
    holder: Arc<str>,
    reports: broadcast::Sender<SlotReport>,
    counter: SlotCounter,
}

impl Reporter {
    /// The reports of the host `holder` of the lease `lease`; the last 64
    /// are kept for a slow receiver.
    pub(super) fn new(holder: &str, lease: &str) -> Self {
        Reporter {
            holder: holder.into(),
            reports: broadcast::channel(64).0,
            counter: SlotCounter::new(lease),
        }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<SlotReport> {
        self.reports.subscribe()
    }

    /// Reports the end of a run of `slot`: a failure says when it is
    /// tried again.
    pub(super) fn ended(&self, slot: Timestamp, outcome: SlotOutcome, retry: Retry) {
        if matches!(outcome, SlotOutcome::Failed { .. }) {
            self.failed(slot, outcome, retry);
        } else {
            self.report(slot, outcome);
        }
    }

    /// Reports a failed run of `slot`, saying when it is tried again.
    fn failed(&self, slot: Timestamp, outcome: SlotOutcome, retry: Retry) {
        if let SlotOutcome::Failed {
            epoch,
            attempt,
            error,
        } = &outcome
        {
            let holder = &*self.holder;
            match retry {
                Retry::At(at) => {
                    warn!(%holder, epoch, attempt, slot = %slot, %error, retry_at = %at, "schedule: the slot's job failed; it is tried again at {at}");
                }
                Retry::GaveUp => {
                    self.counter.gave_up();
                    warn!(%holder, epoch, attempt, slot = %slot, %error, "schedule: the slot's job failed, and the slot gave up: its retries are spent, or the next would come past the catch-up window");
                }
            }
        }
        self.send(slot, outcome);
    }

    /// Reports `outcome` of `slot` (a failed run through [`failed`](Self::failed)).
    pub(super) fn report(&self, slot: Timestamp, outcome: SlotOutcome) {
        let holder = &*self.holder;
        match &outcome {
            SlotOutcome::Ran { epoch, attempt } => {
                info!(%holder, epoch, attempt, slot = %slot, "schedule: the slot ran");
            }
            SlotOutcome::Failed {
                epoch,
                attempt,
                error,
            } => {
                warn!(%holder, epoch, attempt, slot = %slot, %error, "schedule: the slot's job failed");
            }
            SlotOutcome::Unrecorded { epoch, error } => {
                warn!(%holder, epoch, slot = %slot, %error, "schedule: the slot's job ran but its record did not land (the lease was lost before it could); the next holder runs it again");
            }
            SlotOutcome::Stopped { epoch, reason } => {
                warn!(%holder, epoch, slot = %slot, %reason, "schedule: the slot's job was stopped with its term ({reason}); it counts as no attempt, and the next holder runs it again");
            }
            SlotOutcome::Blocked { holder: by } => {
                warn!(%holder, slot = %slot, by = %by, "schedule: the slot is due and cannot run: the lease is held by {by}, which is not one of the schedule's hosts (its term advertised no schedule: a `blob-mutex run`, a guard, another program); give the schedule a blob of its own");
            }
            SlotOutcome::Skipped => {
                // Warned of when it came due.
                info!(%holder, slot = %slot, "schedule: the slot was recorded skipped: it came due while the previous slot's job ran");
            }
            SlotOutcome::Missed { count } => {
                warn!(%holder, slot = %slot, count, "schedule: the slot was missed: nobody ran it to its end within the catch-up window ({count} slots up to it)");
            }
            SlotOutcome::CutShort {
                holder: cut,
                epoch: cut_epoch,
            } => {
                warn!(%holder, slot = %slot, cut_short_on = %cut, cut_short_epoch = cut_epoch, "schedule: the slot's run on {cut} (epoch {cut_epoch}) was cut short: it marked the slot begun and never recorded its end (its host died, froze or lost the lease mid-job, or as it wrote the mark); running it again");
            }
            SlotOutcome::DoneElsewhere { holder: by, epoch } => {
                info!(slot = %slot, %by, epoch, "schedule: the slot was done elsewhere; skipped");
            }
        }
        self.send(slot, outcome);
    }

    /// A slot's job begins here: the job's metric says so until the
    /// returned guard is dropped (when the job ends, or its term's task is
    /// aborted).
    pub(super) fn job_running(&self) -> JobRunning<'_> {
        self.counter.job(Some(std::time::SystemTime::now()));
        JobRunning(&self.counter)
    }

    fn send(&self, slot: Timestamp, outcome: SlotOutcome) {
        self.counter.settled(&outcome);
        if matches!(
            outcome,
            SlotOutcome::Ran { .. } | SlotOutcome::DoneElsewhere { .. }
        ) {
            self.counter.succeeded(slot);
        }
        let _ = self.reports.send(SlotReport {
            slot: slot.to_string(),
            holder: self.holder.to_string(),
            outcome,
        });
    }
}

/// The job of a slot runs here while this lives (see
/// [`Reporter::job_running`]).
pub(super) struct JobRunning<'a>(&'a SlotCounter);

impl Drop for JobRunning<'_> {
    fn drop(&mut self) {
        self.0.job(None);
    }
}
