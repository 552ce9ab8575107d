//! A fleet's schedule: a cron expression whose every slot runs once across
//! all the hosts that run the schedule, on storage's clock, under one
//! lease ([`BlobSchedule`]).
//!
//! Every host runs the same schedule. Each sleeps until the next slot, reads
//! the schedule's record and storage's clock (the lease blob's state and an
//! inspection, without the lease), and when a slot is due campaigns for one
//! term. The holder reads the record again under the lease, runs the oldest
//! slot due, and writes what became of it in the lease's fenced state: a
//! slot is done once that write landed, which storage refuses once the
//! lease is gone. A host that dies or freezes mid-job writes nothing: once
//! its lease has expired another host's campaign takes it, finds the slot
//! not done, and runs it. See the guide's [Choosing a
//! shape](crate::guide::shapes).

mod due;
mod record;
mod slots;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use self::due::{due, Next};
use self::record::{window_start, Entry, Fate, Record};
use self::slots::Slots;
use crate::azure::settings::BlobSettings;
use crate::azure::BlobLeaseManager;
use crate::backoff::backoff;
use crate::engine::leadership::LeaderContext;
use crate::error::{BoxError, Chain, Error, Result};
use crate::mutex::{BlobDistributedMutex, OnceOutcome};
use crate::options::MutexOptions;
use crate::store::LeaseStore;

/// What to do with a slot that comes due while the previous slot's job
/// still runs (never two jobs at once, whatever the policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Overlap {
    /// Record it as skipped: it never runs late. The default, as
    /// Temporal's, and what a job that must not pile up wants.
    #[default]
    Skip,
    /// Run it once the running job has ended, if it is still within the
    /// catch-up window.
    Wait,
}

/// The options of a [`BlobSchedule`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScheduleOptions {
    cron: String,
    time_zone: String,
    catch_up: Duration,
    overlap: Overlap,
    retries: u32,
    retry_backoff: Duration,
    mutex: MutexOptions,
}

impl ScheduleOptions {
    /// A schedule of `cron`: five fields (minute, hour, day of month,
    /// month, day of week) or six with seconds first, in UTC, with a
    /// catch-up window of a minute, [`Overlap::Skip`], two retries of a
    /// failed job 10 s apart (doubling), and the default mutex options.
    #[must_use]
    pub fn new(cron: impl Into<String>) -> Self {
        ScheduleOptions {
            cron: cron.into(),
            time_zone: "UTC".to_owned(),
            catch_up: Duration::from_secs(60),
            overlap: Overlap::default(),
            retries: 2,
            retry_backoff: Duration::from_secs(10),
            mutex: MutexOptions::default(),
        }
    }

    /// The IANA time zone the expression is read in (`Europe/Berlin`).
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = zone.into();
        self
    }

    /// How long after its instant, on storage's clock, a slot not done is
    /// still run (or retried); past it, it is recorded as missed and never
    /// runs. At least a second.
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_catch_up(mut self, window: Duration) -> Self {
        self.catch_up = window;
        self
    }

    /// See [`Overlap`].
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// How many times a slot whose job failed is run again, within the
    /// window, the first `backoff` after the failure and each next one
    /// twice as long after the last.
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.retries = retries;
        self.retry_backoff = backoff;
        self
    }

    /// The options of the lease's campaign and terms.
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_mutex(mut self, options: MutexOptions) -> Self {
        self.mutex = options;
        self
    }

    /// Checks the options, the expression and the time zone.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `cron`, `time_zone`, `catch_up`, or
    /// one of the mutex's options.
    pub fn validate(&self) -> Result<()> {
        Slots::new(&self.cron, &self.time_zone)?;
        if self.catch_up < Duration::from_secs(1) {
            return Err(Error::invalid("catch_up", "must be at least 1 s"));
        }
        self.mutex.validate()
    }
}

/// The slot a job runs for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Slot {
    /// The slot's instant.
    pub at: SystemTime,
    /// Its key in the record: the instant in UTC, RFC 3339
    /// (`2026-11-28T02:30:00Z`).
    pub key: String,
    /// This run's number: 1, then one more for each retry.
    pub attempt: u32,
}

/// What became of a slot, as the host that settled it reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotOutcome {
    /// Its job succeeded and the record says so.
    Ran {
        /// The term's epoch (the fencing token the job was given).
        epoch: u64,
        /// Which run of the slot it was.
        attempt: u32,
    },
    /// Its job failed (`error`); it is retried while retries are left.
    Failed {
        /// The term's epoch.
        epoch: u64,
        /// Which run of the slot it was.
        attempt: u32,
        /// The job's error.
        error: String,
    },
    /// Its job ran but the record could not be written (the lease was
    /// lost): the next holder runs it again.
    Unrecorded {
        /// The term's epoch.
        epoch: u64,
        /// Why the write failed.
        error: String,
    },
    /// It came due while the previous slot's job ran ([`Overlap::Skip`]).
    Skipped,
    /// Nobody ran it within the catch-up window; `count` slots up to this
    /// one were.
    Missed {
        /// How many slots went past the window together.
        count: u64,
    },
}

/// A report of one slot, sent by the host that settled it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotReport {
    /// The slot's key ([`Slot::key`]).
    pub slot: String,
    /// The holder that settled it.
    pub holder: String,
    /// What became of it.
    pub outcome: SlotOutcome,
}

/// A cron schedule whose every slot runs once across the fleet.
///
/// Every host runs the same schedule on the same lease; a slot's job runs
/// on one of them, once its instant has come on storage's clock (never the
/// host's: a host whose clock is off runs no slot early), never two jobs at
/// once. The job gets the [`Slot`] and the term's [`LeaderContext`], whose
/// epoch fences its writes.
///
/// **At least once per slot.** A slot is done when its record, written
/// under the lease after the job succeeded, landed. A host that dies or
/// freezes after its job's effects and before that write leaves the slot
/// not done: another host runs it again, with a higher epoch, once the
/// lease has expired. Make the job idempotent, or check the epoch where it
/// writes.
///
/// **The record** is the lease blob's state: the slots within the catch-up
/// window and the last 16 done, each with its outcome, holder, epoch and
/// attempts; a slot past the window and never run is counted as missed and
/// let go. At most (window ÷ period + 16) lines of about 110 bytes.
///
/// **Cost.** Between slots a host sleeps. At a slot each host reads the
/// record and storage's clock (two requests), and the hosts that find it
/// due campaign: the holder runs it, the others take their turn once it
/// released, find it done and give the lease back.
pub struct BlobSchedule<S: LeaseStore = BlobLeaseManager> {
    mutex: BlobDistributedMutex<S>,
    store: S,
    slots: Slots,
    options: ScheduleOptions,
    reports: broadcast::Sender<SlotReport>,
}

impl BlobSchedule<BlobLeaseManager> {
    /// A schedule on the lease blob of `settings`.
    ///
    /// # Errors
    ///
    /// As [`ScheduleOptions::validate`], and as
    /// [`BlobLeaseManager::new`].
    pub fn new(settings: &BlobSettings, options: ScheduleOptions) -> Result<Self> {
        Self::with_store(BlobLeaseManager::new(settings)?, options)
    }
}

impl<S: LeaseStore + Clone + 'static> BlobSchedule<S> {
    /// A schedule on `store`, which must keep state (its record) and
    /// report storage's clock.
    ///
    /// # Errors
    ///
    /// As [`ScheduleOptions::validate`].
    pub fn with_store(store: S, options: ScheduleOptions) -> Result<Self> {
        options.validate()?;
        let slots = Slots::new(&options.cron, &options.time_zone)?;
        let mutex =
            BlobDistributedMutex::with_store_for_guards(store.clone(), options.mutex.clone())?;
        Ok(BlobSchedule {
            mutex,
            store,
            slots,
            options,
            reports: broadcast::channel(64).0,
        })
    }

    /// The holder name of this host.
    #[must_use]
    pub fn holder(&self) -> &str {
        self.mutex.holder()
    }

    /// A receiver of a report for every slot this host settles from now on
    /// (ran, failed, unrecorded, skipped, missed). It keeps the last 64 for
    /// a slow receiver.
    #[must_use]
    pub fn slot_reports(&self) -> broadcast::Receiver<SlotReport> {
        self.reports.subscribe()
    }

    /// Runs the schedule until `token` is cancelled: `job` for each slot
    /// this host leads.
    ///
    /// # Errors
    ///
    /// A fatal error of the store or the campaign, and
    /// [`Error::StateNotARecord`] when the lease blob holds state that is
    /// not a schedule's record.
    pub async fn run<F, Fut, E>(&self, token: CancellationToken, job: F) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let job = Arc::new(job);
        let mut failures = 0;
        while !token.is_cancelled() {
            let wait = match self.look().await {
                Ok(Look::Wait { at, seen }) => {
                    failures = 0;
                    at.map(|at| until(seen, at))
                }
                Ok(Look::Due) => match self.lead(&token, job.clone()).await {
                    Ok(()) => {
                        failures = 0;
                        Some(Duration::ZERO)
                    }
                    Err(e) if e.is_fatal() => return Err(e),
                    Err(e) => Some(self.failed(&mut failures, &e)),
                },
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => Some(self.failed(&mut failures, &e)),
            };
            let sleeping = async {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    // No slot ever comes again.
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = sleeping => {}
                () = token.cancelled() => {}
            }
        }
        Ok(())
    }

    /// Counts a failure and says how long to wait before the next look.
    fn failed(&self, failures: &mut u32, e: &Error) -> Duration {
        *failures = failures.saturating_add(1);
        let wait = backoff(Duration::from_secs(1), Duration::from_secs(30), *failures);
        warn!(holder = %self.holder(), error = %Chain(e), retry_in = ?wait, "schedule: could not read its record");
        wait
    }

    /// Reads the record and storage's clock without the lease.
    async fn look(&self) -> Result<Look> {
        let state = self.store.read_state().await?;
        let info = self.store.inspect().await?;
        let seen = Instant::now();
        // No lease blob yet: the first term makes it and begins the record.
        let Some(now) = info.and_then(|i| i.storage_time) else {
            return Ok(Look::Due);
        };
        let now = timestamp(now);
        let record = Record::parse(&self.store.name(), &state)?.unwrap_or_default();
        if record.through.is_none() && record.slots.is_empty() {
            return Ok(Look::Due);
        }
        let d = due(
            &self.slots,
            &record,
            now,
            self.options.catch_up,
            self.options.retries,
        );
        Ok(match d.next {
            // Missed slots are recorded (and reported) by a term too.
            Next::Run { .. } => Look::Due,
            Next::Wait(_) if d.missed_count > 0 => Look::Due,
            Next::Wait(at) => Look::Wait {
                at,
                seen: (seen, now),
            },
        })
    }

    /// Campaigns for one term and settles what is due in it.
    async fn lead<F, Fut, E>(&self, token: &CancellationToken, job: Arc<F>) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let term = Term {
            store: self.store.clone(),
            slots: self.slots.clone(),
            options: self.options.clone(),
            reports: self.reports.clone(),
        };
        let ran = self
            .mutex
            .run_once_with(token.child_token(), move |ctx| term.settle(ctx, job))
            .await;
        match ran {
            Ok(
                OnceOutcome::Ran { .. }
                | OnceOutcome::Unrecorded { .. }
                | OnceOutcome::Skipped { .. },
            ) => Ok(()),
            // The term's own store errors come back as the task's: the
            // error itself, so that a fatal one stops the schedule.
            Err(Error::TaskFailed {
                source: Some(source),
                report,
            }) => match source.downcast::<Error>() {
                Ok(e) => Err(*e),
                Err(source) => Err(Error::TaskFailed {
                    source: Some(source),
                    report,
                }),
            },
            Err(e) => Err(e),
        }
    }
}

/// What a look without the lease found.
enum Look {
    /// Something is due, or the record is not begun: campaign.
    Due,
    /// Nothing is due before `at` on storage's clock (never, when `None`);
    /// `seen` is when storage's clock was read, and what it read.
    Wait {
        at: Option<Timestamp>,
        seen: (Instant, Timestamp),
    },
}

/// What one term needs to settle the slots due.
struct Term<S> {
    store: S,
    slots: Slots,
    options: ScheduleOptions,
    reports: broadcast::Sender<SlotReport>,
}

impl<S: LeaseStore> Term<S> {
    /// Under the term's lease: reads the record and storage's clock, lets
    /// the slots past the window go as missed, runs the oldest slot due,
    /// and writes the record.
    async fn settle<F, Fut, E>(self, ctx: LeaderContext, job: Arc<F>) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let state = self.store.read_state().await?;
        let mut record = Record::parse(&self.store.name(), &state)?.unwrap_or_default();
        let now = self.now().await?;
        let before = record.clone();
        if record.through.is_none() && record.slots.is_empty() {
            // A new schedule begins now: no slot before it is run.
            record.through = Some(now);
        }
        let d = due(
            &self.slots,
            &record,
            now,
            self.options.catch_up,
            self.options.retries,
        );
        if let Some(last) = d.missed.last() {
            record.through = Some(record.through.map_or(*last, |t| t.max(*last)));
            self.report(
                &ctx,
                *last,
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
        let (fate, retry_at, outcome) = match result {
            Ok(()) => (
                Fate::Done,
                None,
                SlotOutcome::Ran {
                    epoch: ctx.epoch(),
                    attempt,
                },
            ),
            Err(e) => {
                let wait = backoff(
                    self.options.retry_backoff,
                    Duration::from_secs(86_400),
                    attempt,
                );
                let retry = end
                    .checked_add(jiff::SignedDuration::try_from(wait).unwrap_or_default())
                    .ok();
                let error = e.to_string();
                (
                    Fate::Failed,
                    retry,
                    SlotOutcome::Failed {
                        epoch: ctx.epoch(),
                        attempt,
                        error,
                    },
                )
            }
        };
        record.slots.insert(
            slot,
            Entry {
                fate,
                attempts: attempt,
                epoch: ctx.epoch(),
                retry_at,
                holder: ctx.holder().to_owned(),
            },
        );
        if self.options.overlap == Overlap::Skip {
            let mut cursor = started.max(slot);
            while let Some(next) = self.slots.after(cursor).filter(|s| *s <= end) {
                cursor = next;
                if !record.slots.contains_key(&next)
                    && next >= window_start(end, self.options.catch_up)
                {
                    record.slots.insert(next, skipped());
                    self.report(ctx, next, SlotOutcome::Skipped);
                }
            }
        }
        outcome
    }

    /// Storage's clock, from an inspection.
    async fn now(&self) -> Result<Timestamp> {
        let info = self.store.inspect().await?;
        info.and_then(|i| i.storage_time)
            .map(timestamp)
            .ok_or(Error::Unsupported {
                operation: "read storage's clock (a schedule needs it)",
            })
    }

    fn report(&self, ctx: &LeaderContext, slot: Timestamp, outcome: SlotOutcome) {
        match &outcome {
            SlotOutcome::Ran { epoch, attempt } => {
                info!(holder = %ctx.holder(), epoch, attempt, slot = %slot, "schedule: the slot ran");
            }
            other => {
                warn!(holder = %ctx.holder(), slot = %slot, outcome = ?other, "schedule: the slot did not run to its end");
            }
        }
        let _ = self.reports.send(SlotReport {
            slot: slot.to_string(),
            holder: ctx.holder().to_owned(),
            outcome,
        });
    }
}

/// A skipped slot's entry.
fn skipped() -> Entry {
    Entry {
        fate: Fate::Skipped,
        attempts: 0,
        epoch: 0,
        retry_at: None,
        holder: String::new(),
    }
}

/// A system time as a timestamp (the Unix epoch for one out of range).
fn timestamp(time: SystemTime) -> Timestamp {
    Timestamp::try_from(time).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// How long from now until storage's clock reads `at`, from `seen`: the
/// local instant at which it read `now`. The host's own clock is never
/// read.
fn until((seen, now): (Instant, Timestamp), at: Timestamp) -> Duration {
    let ahead = Duration::try_from(at.duration_since(now)).unwrap_or_default();
    (seen + ahead).saturating_duration_since(Instant::now())
}
