//! One term of a schedule: under the lease, read the record and storage's
//! clock, let the slots past the window go as missed, run the oldest slot
//! due, and write what became of it. Every request is tried again within
//! the term after a failure that may pass, and a write whose answer was
//! lost is told for what it is.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use tokio::time::Instant;
use tracing::{info, warn};

use super::due::Next;
use super::entries::{finish, open, start, Ended};
use super::known::{under_way, Known};
use super::own::{Own, Told, Unconfirmed};
use super::record::Record;
use super::reporter::{Reporter, Retry};
use super::slots::Slots;
use super::{Overlap, ScheduleOptions, Slot, SlotOutcome};
use crate::backoff::backoff;
use crate::bounded::bounded;
use crate::engine::leadership::LeaderContext;
use crate::engine::settled::Written;
use crate::error::{BoxError, Chain, Error, Result};
use crate::mutex::record::storage_time;
use crate::store::LeaseStore;

/// What one term needs to settle the slots due.
pub(super) struct Term<S> {
    pub(super) store: S,
    pub(super) slots: Slots,
    pub(super) options: ScheduleOptions,
    pub(super) reporter: Reporter,
    pub(super) own: Arc<Mutex<Own>>,
    /// When this host's schedule began to run: a new record begins then.
    pub(super) started: Instant,
    pub(super) known: Arc<Mutex<Known>>,
}

/// The longest a failed slot waits for its retry.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(86_400);

impl<S: LeaseStore> Term<S> {
    /// Under the term's lease: reads the record and storage's clock, lets
    /// the slots past the window go as missed, runs the oldest slot due,
    /// and writes the record.
    ///
    /// A request that fails in a way that may pass is tried again until the
    /// term ends; one the term's end cut off (an outage past its deadline,
    /// a shutdown) is said here and the task returns, so that the next
    /// term begins again from the record: an outage is not a failure of
    /// the term's task.
    pub(super) async fn settle<F, Fut, E>(self, ctx: LeaderContext, job: Arc<F>) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        match self.settle_due(&ctx, job).await {
            Err(e) if e.is_transient() => {
                warn!(holder = %ctx.holder(), epoch = ctx.epoch(), error = %Chain(&e), "schedule: the term ended before storage answered its reads; the next term reads the record again");
                Ok(())
            }
            settled => settled,
        }
    }

    /// [`settle`](Self::settle), with a failure that may pass returned.
    async fn settle_due<F, Fut, E>(self, ctx: &LeaderContext, job: Arc<F>) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        // Through the term's context: bounded, cut at the deadline, tried
        // again within the term. The record and storage's clock at once.
        let (state, now) = tokio::join!(
            ctx.read_state_settled(),
            ctx.retried("reading storage's clock", || self.now())
        );
        let mut record = Record::parse(&self.store.name(), &state?)?.unwrap_or_default();
        let now = now?;
        self.vanished(ctx, &record);
        // Storage's clock later in the term: this reading plus the time
        // the host's monotonic clock counts since (no request to fail).
        let read = Instant::now();
        let clock = move || later(now, read.elapsed());
        // Storage's clock when this host began, as the monotonic clock
        // counts back from this reading: never later than it was (the
        // reading was taken before `read`).
        let began = earlier(now, read.saturating_duration_since(self.started));
        self.tell(&record);
        let before = record.clone();
        let d = open(
            &mut record,
            &self.slots,
            began,
            now,
            self.options.catch_up,
            self.options.retries,
        );
        if let Some(last) = d.last_missed {
            self.reporter.report(
                last,
                SlotOutcome::Missed {
                    count: d.missed_count,
                },
            );
        }
        let Next::Run { slot, attempt } = d.next else {
            record.prune(now, self.options.catch_up);
            if record != before {
                // Only slots let go: a write that does not land is made
                // again by the next term.
                if let Written::Refused(e) | Written::Unknown(e) =
                    ctx.write_state_settled(&record.to_bytes()).await?
                {
                    warn!(holder = %ctx.holder(), epoch = ctx.epoch(), error = %Chain(&e), "schedule: the record of the slots let go did not land; the next term writes it");
                }
            }
            return Ok(());
        };
        if !self.mark_started(ctx, &mut record, slot, attempt).await? {
            return Ok(());
        }
        let given = Slot {
            at: SystemTime::from(slot),
            key: slot.to_string(),
            attempt,
        };
        info!(holder = %ctx.holder(), epoch = ctx.epoch(), slot = %slot, attempt, "schedule: running the slot's job");
        let running = self.reporter.job_running();
        let result = tokio::select! {
            result = job(given, ctx.clone()) => result.map_err(Into::into),
            never = self.coming_due(ctx.holder(), slot, &clock) => match never {},
        };
        drop(running);
        if let (Err(_), Some(reason)) = (&result, ctx.stop_reason()) {
            // Stopped with its term (a deploy's SIGTERM, a lost lease): no
            // attempt, as a death is none. The mark stays for the next
            // holder, and names no run cut short to this host.
            self.own().explain(slot, ctx.epoch());
            self.reporter.report(
                slot,
                SlotOutcome::Stopped {
                    epoch: ctx.epoch(),
                    reason,
                },
            );
            return Ok(());
        }
        let end = clock();
        let (outcome, retry) = self.record_run(ctx, &mut record, slot, attempt, now, end, result);
        record.prune(end, self.options.catch_up);
        self.before_the_write(ctx, slot, outcome, retry);
        let written = ctx.write_state_settled(&record.to_bytes()).await;
        if let Ok(Written::Landed) = written {
            self.known().knew(&record);
        }
        self.ended(ctx, slot, written)
    }

    /// What a run's end leaves before its record is written, so that a
    /// term cut off during the write (aborted at its deadline) loses no
    /// report: a failure is reported now (it is one whether its record
    /// lands or not), a success is held unconfirmed until the write, or a
    /// later read of the record, tells whether it landed. The mark this
    /// term left names no run cut short, whatever the record holds now.
    fn before_the_write(
        &self,
        ctx: &LeaderContext,
        slot: Timestamp,
        outcome: SlotOutcome,
        retry: Retry,
    ) {
        let epoch = ctx.epoch();
        self.own().explain(slot, epoch);
        match outcome {
            SlotOutcome::Ran { attempt, .. } => self.own().unconfirmed(
                slot,
                Unconfirmed {
                    epoch,
                    attempt,
                    error: "the term ended while its record was being written".to_owned(),
                },
            ),
            outcome => self.reporter.ended(slot, outcome, retry),
        }
    }

    /// Reports a success once its record's write settled as `written`: ran
    /// when it landed, unrecorded when it did not, and once a later read of
    /// the record tells, when its answer was lost.
    fn ended(&self, ctx: &LeaderContext, slot: Timestamp, written: Result<Written>) -> Result<()> {
        let epoch = ctx.epoch();
        let (error, fatal) = match written {
            Ok(Written::Landed) => (None, None),
            Ok(Written::Refused(e)) => (Some(Chain(&e).to_string()), None),
            Ok(Written::Unknown(e)) => {
                let error = Chain(&e).to_string();
                warn!(holder = %ctx.holder(), epoch, slot = %slot, %error, "schedule: the slot's record may not have landed; whether it did is told at the next read of the record");
                self.own().lost_answer(slot, error);
                return Ok(());
            }
            Err(e) => (Some(Chain(&e).to_string()), Some(e)),
        };
        let Some(run) = self.own().confirmed(slot) else {
            // A failure, reported already.
            if let Some(error) = &error {
                warn!(holder = %ctx.holder(), epoch, slot = %slot, %error, "schedule: the record of the slot's failed run did not land; the next holder runs it again as the same attempt");
            }
            return fatal.map_or(Ok(()), Err);
        };
        let outcome = match error {
            None => SlotOutcome::Ran {
                epoch,
                attempt: run.attempt,
            },
            Some(error) => SlotOutcome::Unrecorded { epoch, error },
        };
        self.reporter.report(slot, outcome);
        fatal.map_or(Ok(()), Err)
    }

    /// While `slot`'s job runs: says of each later slot, when it comes due
    /// on storage's clock (as `clock` tells it), that it waits for the job
    /// or will be skipped. Never returns.
    async fn coming_due(
        &self,
        holder: &str,
        slot: Timestamp,
        clock: &impl Fn() -> Timestamp,
    ) -> std::convert::Infallible {
        let mut cursor = slot;
        while let Some(next) = self.slots.after(cursor) {
            let wait = Duration::try_from(next.duration_since(clock())).unwrap_or_default();
            tokio::time::sleep(wait).await;
            cursor = next;
            if self.options.overlap == Overlap::Skip {
                warn!(%holder, slot = %next, running = %slot, "schedule: the slot came due while the job of {slot} runs; the overlap policy skips it, and it is recorded skipped when that job ends");
            } else {
                info!(%holder, slot = %next, running = %slot, "schedule: the slot came due while the job of {slot} runs; it runs after it, if still within the catch-up window");
            }
        }
        std::future::pending().await
    }

    /// Reports the runs of this host whose record's answer was lost, as
    /// `record` tells of them.
    fn tell(&self, record: &Record) {
        let told = self.own().tell(record);
        tell(&self.reporter, told);
    }

    fn own(&self) -> std::sync::MutexGuard<'_, Own> {
        self.own.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Says so when `record`, just read, is not begun and this host knew
    /// one that was: storage lost it (the blob deleted or made anew, an
    /// emulator restarted empty), with the runs it held under way. The new
    /// record begins when this host started (see [`open`]), so those runs'
    /// slots, and the slots done since, run again within the window.
    fn vanished(&self, ctx: &LeaderContext, record: &Record) {
        if let Some(runs) = self.known().vanished(record) {
            warn!(holder = %ctx.holder(), epoch = ctx.epoch(), "schedule: the record is gone (the lease blob was deleted or made anew, or storage lost its data); {}; a new record begins, and the slots since this host started that are within the catch-up window run, again if they ran", under_way(&runs));
        }
    }

    /// Before `slot`'s job runs: writes this run's start mark (see
    /// [`start`]), so that the next holder can tell if this run is cut
    /// short, and then reports a run of it that another term began and
    /// did not end. `true` when the job may run: the mark landed.
    async fn mark_started(
        &self,
        ctx: &LeaderContext,
        record: &mut Record,
        slot: Timestamp,
        attempt: u32,
    ) -> Result<bool> {
        let cut_short = start(record, slot, attempt, ctx.epoch(), ctx.holder())
            .filter(|(_, epoch)| !self.own().explains(slot, *epoch))
            .map(|(holder, epoch)| SlotOutcome::CutShort { holder, epoch });
        // Until the mark is known to have landed, it names no run: a term
        // cut off while writing it (aborted at its deadline) began none.
        self.own().explain(slot, ctx.epoch());
        match ctx.write_state_settled(&record.to_bytes()).await? {
            Written::Landed => {
                self.own().unexplain(slot, ctx.epoch());
                self.known().knew(record);
            }
            Written::Refused(e) => {
                warn!(holder = %ctx.holder(), epoch = ctx.epoch(), slot = %slot, error = %Chain(&e), "schedule: the slot's start mark did not land (the lease was lost); its job did not run, and the next holder runs it");
                return Ok(false);
            }
            Written::Unknown(e) => {
                // A mark that landed names no run: this host says so when
                // it finds it, and this line says so to whoever else does.
                warn!(holder = %ctx.holder(), epoch = ctx.epoch(), slot = %slot, error = %Chain(&e), "schedule: the slot's start mark may have landed, and the lease was lost; its job did not run, and the next holder runs it (reporting it cut short if the mark landed)");
                return Ok(false);
            }
        }
        // Told once the slot is sure to run here.
        if let Some(outcome) = cut_short {
            self.reporter.report(slot, outcome);
        }
        Ok(true)
    }

    /// Enters the run of `slot` (from `started` to `end`, storage's clock)
    /// in `record`, with the slots that came due meanwhile when they are
    /// skipped; returns the slot's outcome and, for a failure, when it is
    /// tried again.
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
    ) -> (SlotOutcome, Retry) {
        let epoch = ctx.epoch();
        let (retry_after, outcome) = match result {
            Ok(()) => (None, SlotOutcome::Ran { epoch, attempt }),
            Err(e) => (
                Some(backoff(
                    self.options.retry_backoff,
                    RETRY_BACKOFF_MAX,
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
            retries: self.options.retries,
        };
        let skip = self.options.overlap == Overlap::Skip;
        for skipped in finish(record, &self.slots, &run, skip, self.options.catch_up) {
            self.reporter.report(skipped, SlotOutcome::Skipped);
        }
        let retry = match record.slots.get(&slot).and_then(|e| e.retry_at) {
            Some(at) => Retry::At(at),
            None => Retry::GaveUp,
        };
        (outcome, retry)
    }

    /// Storage's clock, from an inspection.
    async fn now(&self) -> Result<Timestamp> {
        storage_now(&self.store, self.options.mutex.request_timeout).await
    }
}

/// Reports what a read of the record told of this host's unconfirmed runs.
pub(super) fn tell(reporter: &Reporter, told: Vec<Told>) {
    for told in told {
        match told {
            Told::Landed(slot, run) => reporter.report(
                slot,
                SlotOutcome::Ran {
                    epoch: run.epoch,
                    attempt: run.attempt,
                },
            ),
            Told::Lost(slot, run) => reporter.report(
                slot,
                SlotOutcome::Unrecorded {
                    epoch: run.epoch,
                    error: run.error,
                },
            ),
        }
    }
}

/// `d` after `at` (the last instant a timestamp can be, past it).
fn later(at: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| at.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `d` before `at` (the first instant a timestamp can be, before it).
fn earlier(at: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| at.checked_sub(d).ok())
        .unwrap_or(Timestamp::MIN)
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
