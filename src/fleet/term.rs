//! One term of a schedule: under the lease, read the record and storage's
//! clock, let the slots past the window go as missed, run the oldest slot
//! due, and write what became of it.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use tokio::sync::broadcast;
use tracing::{info, warn};

use super::due::Next;
use super::entries::{finish, open, start, Ended};
use super::metrics::SlotCounter;
use super::record::Record;
use super::slots::Slots;
use super::{Overlap, ScheduleOptions, Slot, SlotOutcome, SlotReport};
use crate::backoff::backoff;
use crate::bounded::bounded;
use crate::engine::leadership::LeaderContext;
use crate::error::{BoxError, Chain, Error, Result};
use crate::mutex::record::storage_time;
use crate::store::LeaseStore;

/// What one term needs to settle the slots due.
pub(super) struct Term<S> {
    pub(super) store: S,
    pub(super) slots: Slots,
    pub(super) options: ScheduleOptions,
    pub(super) reports: broadcast::Sender<SlotReport>,
    pub(super) counter: SlotCounter,
}

impl<S: LeaseStore> Term<S> {
    /// Under the term's lease: reads the record and storage's clock, lets
    /// the slots past the window go as missed, runs the oldest slot due,
    /// and writes the record.
    pub(super) async fn settle<F, Fut, E>(self, ctx: LeaderContext, job: Arc<F>) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        // Through the term's context: bounded, and the write fenced by the
        // term's lease. The record and storage's clock at once.
        let (state, now) = tokio::join!(ctx.read_state(), self.now());
        let mut record = Record::parse(&self.store.name(), &state?)?.unwrap_or_default();
        let now = now?;
        let before = record.clone();
        let d = open(
            &mut record,
            &self.slots,
            now,
            self.options.catch_up,
            self.options.retries,
        );
        if let Some(last) = d.last_missed {
            self.report(
                &ctx,
                last,
                SlotOutcome::Missed {
                    count: d.missed_count,
                },
            );
        }
        let Next::Run { slot, attempt } = d.next else {
            record.prune(now, self.options.catch_up);
            if record != before {
                self.store
                    .write_state(ctx.lease_id(), &record.to_bytes())
                    .await?;
            }
            return Ok(());
        };
        let given = Slot {
            at: SystemTime::from(slot),
            key: slot.to_string(),
            attempt,
        };
        self.mark_started(&ctx, &mut record, slot, attempt).await?;
        info!(holder = %ctx.holder(), epoch = ctx.epoch(), slot = %slot, attempt, "schedule: running the slot's job");
        let result = job(given, ctx.clone()).await.map_err(Into::into);
        let end = self.now().await?;
        let outcome = self.record_run(&ctx, &mut record, slot, attempt, now, end, result);
        record.prune(end, self.options.catch_up);
        let written = self
            .store
            .write_state(ctx.lease_id(), &record.to_bytes())
            .await;
        match written {
            Ok(()) => self.report(&ctx, slot, outcome),
            Err(e) => self.report(
                &ctx,
                slot,
                SlotOutcome::Unrecorded {
                    epoch: ctx.epoch(),
                    error: Chain(&e).to_string(),
                },
            ),
        }
        Ok(())
    }

    /// Before `slot`'s job runs: writes this run's start mark (see
    /// [`start`]), so that the next holder can tell if this run is
    /// cut short, and then reports a run of it that another term began and
    /// did not end. The job runs only once the mark is written.
    async fn mark_started(
        &self,
        ctx: &LeaderContext,
        record: &mut Record,
        slot: Timestamp,
        attempt: u32,
    ) -> Result<()> {
        let cut_short = start(record, slot, attempt, ctx.epoch(), ctx.holder())
            .map(|(holder, epoch)| SlotOutcome::CutShort { holder, epoch });
        // The term's own path: bounded, cut at its deadline, fenced.
        ctx.write_state(record.to_bytes()).await?;
        // Told once the slot is sure to run here.
        if let Some(outcome) = cut_short {
            self.report(ctx, slot, outcome);
        }
        Ok(())
    }

    /// Enters the run of `slot` (from `started` to `end`, storage's clock)
    /// in `record`, with the slots that came due meanwhile when they are
    /// skipped; returns the slot's outcome.
    #[allow(clippy::too_many_arguments)]
    fn record_run(
        &self,
        ctx: &LeaderContext,
        record: &mut Record,
        slot: Timestamp,
        attempt: u32,
        started: Timestamp,
        end: Timestamp,
        result: std::result::Result<(), BoxError>,
    ) -> SlotOutcome {
        let epoch = ctx.epoch();
        let (retry_after, outcome) = match result {
            Ok(()) => (None, SlotOutcome::Ran { epoch, attempt }),
            Err(e) => (
                Some(backoff(
                    self.options.retry_backoff,
                    Duration::from_secs(86_400),
                    attempt,
                )),
                SlotOutcome::Failed {
                    epoch,
                    attempt,
                    error: e.to_string(),
                },
            ),
        };
        let run = Ended {
            slot,
            attempt,
            epoch,
            holder: ctx.holder(),
            started,
            end,
            retry_after,
        };
        let skip = self.options.overlap == Overlap::Skip;
        for skipped in finish(record, &self.slots, &run, skip, self.options.catch_up) {
            self.report(ctx, skipped, SlotOutcome::Skipped);
        }
        outcome
    }

    /// Storage's clock, from an inspection.
    async fn now(&self) -> Result<Timestamp> {
        storage_now(&self.store, self.options.mutex.request_timeout).await
    }

    fn report(&self, ctx: &LeaderContext, slot: Timestamp, outcome: SlotOutcome) {
        self.counter.settled(&outcome);
        let holder = ctx.holder();
        match &outcome {
            SlotOutcome::Ran { epoch, attempt } => {
                info!(%holder, epoch, attempt, slot = %slot, "schedule: the slot ran");
            }
            SlotOutcome::Failed {
                epoch,
                attempt,
                error,
            } => {
                warn!(%holder, epoch, attempt, slot = %slot, %error, "schedule: the slot's job failed; it is retried while retries are left within the catch-up window");
            }
            SlotOutcome::Unrecorded { epoch, error } => {
                warn!(%holder, epoch, slot = %slot, %error, "schedule: the slot's job ran but its record could not be written (the lease was lost); the next holder runs it again");
            }
            SlotOutcome::Skipped => {
                warn!(%holder, slot = %slot, "schedule: the slot was skipped: it came due while the previous slot's job ran");
            }
            SlotOutcome::Missed { count } => {
                warn!(%holder, slot = %slot, count, "schedule: the slot was missed: nobody ran it within the catch-up window ({count} slots up to it)");
            }
            SlotOutcome::CutShort {
                holder: cut,
                epoch: cut_epoch,
            } => {
                warn!(%holder, slot = %slot, cut_short_on = %cut, cut_short_epoch = cut_epoch, "schedule: the slot's run on {cut} (epoch {cut_epoch}) was cut short: its host died, froze or lost the lease mid-job; running it again");
            }
            SlotOutcome::DoneElsewhere { .. } => {}
        }
        let _ = self.reports.send(SlotReport {
            slot: slot.to_string(),
            holder: ctx.holder().to_owned(),
            outcome,
        });
    }
}

/// Storage's clock, from one inspection bounded by `limit`.
///
/// # Errors
///
/// The inspection's, and [`Error::Unsupported`] for a store that does not
/// report its clock (or has no lease blob yet).
pub(super) async fn storage_now<S: LeaseStore>(store: &S, limit: Duration) -> Result<Timestamp> {
    bounded("inspect", limit, storage_time(store))
        .await?
        .map(timestamp)
        .ok_or(Error::Unsupported {
            operation: "read storage's clock (a schedule needs it)",
        })
}

/// A system time as a timestamp (the Unix epoch for one out of range).
pub(super) fn timestamp(time: SystemTime) -> Timestamp {
    Timestamp::try_from(time).unwrap_or(Timestamp::UNIX_EPOCH)
}
