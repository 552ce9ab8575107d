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

mod differs;
mod due;
mod elsewhere;
mod entries;
mod foreign;
mod known;
mod metrics;
mod options;
mod own;
mod phase;
mod record;
mod report;
mod reporter;
mod slots;
mod term;
#[cfg(test)]
mod tests;
mod view;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info_span, warn, Instrument};

use self::differs::{differs, words, Differences};
use self::due::{wake, Wake};
use self::elsewhere::Elsewhere;
use self::foreign::{foreign_holder, Strangers};
use self::known::Known;
use self::own::Own;
use self::phase::Running;
use self::record::Record;
use self::reporter::Reporter;
use self::slots::Slots;
use self::term::{tell, timestamp, Term};
use crate::azure::settings::BlobSettings;
use crate::azure::BlobLeaseManager;
use crate::backoff::backoff;
use crate::bounded::bounded;
use crate::engine::first_contact;
use crate::engine::in_named_span;
use crate::engine::leader::Leader;
use crate::engine::leadership::LeaderContext;
use crate::error::{BoxError, Chain, Error, Result};
use crate::mutex::{BlobDistributedMutex, OnceOutcome};
use crate::store::{LeaseInfo, LeaseStore};

pub use self::options::{Overlap, ScheduleOptions};
pub(crate) use self::phase::Phase;
pub use self::report::{Slot, SlotOutcome, SlotReport};
pub use self::view::{RecordedOutcome, RecordedSlot, ScheduleRecord};

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
/// writes. The holder marks the slot before the job starts; the host that
/// runs it again finds the mark and reports [`SlotOutcome::CutShort`] with
/// the holder and epoch whose run was cut short, and runs it as the same
/// attempt (a death does not use up a retry).
///
/// **One failed request changes nothing.** Every read and write of a term
/// is tried again while its lease is held, and the run's end is timed from
/// the term's first reading of storage's clock and the host's monotonic
/// clock, with no request to fail. A job that ran is reported as what
/// happened: [`SlotOutcome::Ran`] once its record landed (told at the next
/// read of the record when the write's answer was lost),
/// [`SlotOutcome::Unrecorded`] when it did not.
///
/// **The record** is the lease blob's state: the slots within the catch-up
/// window and the last 16 done, each with its outcome, holder, epoch and
/// attempts; a slot past the window and never run is counted as missed and
/// let go. At most (window ÷ period + 16) lines of about 110 bytes.
///
/// **What its terms advertise.** Each term's stamp carries the expression
/// and zone (`schedule tz=ZONE cron=EXPR`, read back by
/// [`ScheduleOptions::from_advertised`]), so that a reader of the lease,
/// `blob-mutex status` among them, tells the next slot without being told
/// the expression, and so that a host whose look finds that the last term
/// ran another expression or zone warns, once per difference (each host
/// runs its own expression's slots). Not when the mutex options advertise
/// a value of their own, the store keeps none, or the value would be over
/// 256 bytes.
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
    reporter: Reporter,
    elsewhere: Mutex<Elsewhere>,
    strangers: Mutex<Strangers>,
    differences: Mutex<Differences>,
    own: Arc<Mutex<Own>>,
    known: Arc<Mutex<Known>>,
    phase: watch::Sender<Phase>,
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
    /// As [`ScheduleOptions::validate`], with this host's holder name.
    pub fn with_store(store: S, options: ScheduleOptions) -> Result<Self> {
        let slots = Slots::new(&options.cron, &options.time_zone)?;
        let terms = options.term_options(store.supports_advertised());
        let mutex = BlobDistributedMutex::with_store_for_guards(store.clone(), terms)?;
        options.validate_for(mutex.holder().len())?;
        Ok(BlobSchedule {
            reporter: Reporter::new(mutex.holder(), &store.name()),
            mutex,
            store,
            slots,
            options,
            elsewhere: Mutex::default(),
            strangers: Mutex::default(),
            differences: Mutex::default(),
            own: Arc::default(),
            known: Arc::default(),
            phase: watch::Sender::new(Phase::Stopped),
        })
    }

    /// The holder name of this host.
    #[must_use]
    pub fn holder(&self) -> &str {
        self.mutex.holder()
    }

    /// A receiver of who leads the schedule's lease, as this host last saw
    /// it: the holder of the slot being run, `None` between slots (see
    /// [`BlobDistributedMutex::leader`]).
    #[must_use]
    pub fn leader(&self) -> watch::Receiver<Option<Leader>> {
        self.mutex.leader()
    }

    /// Where this host's schedule stands, for its health.
    pub(crate) fn phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// The mutex whose terms run the slots, for its health.
    pub(crate) fn mutex(&self) -> &BlobDistributedMutex<S> {
        &self.mutex
    }

    /// A receiver of a report for every slot this host settles from now on
    /// (ran, failed, unrecorded, skipped, missed), and for every slot it
    /// finds another host ran (done elsewhere). It keeps the last 64 for a
    /// slow receiver.
    #[must_use]
    pub fn slot_reports(&self) -> broadcast::Receiver<SlotReport> {
        self.reporter.subscribe()
    }

    /// Runs the schedule until `token` is cancelled: `job` for each slot
    /// this host leads.
    ///
    /// # Errors
    ///
    /// A fatal error of the store or the campaign;
    /// [`Error::StateNotARecord`] when the lease blob holds state that is
    /// not a schedule's record; [`Error::TaskNotStopped`] when a job could
    /// be neither stopped nor aborted, with fail-stop off (see
    /// [`ScheduleOptions::with_fail_stop`]; with it on, the process exits).
    pub async fn run<F, Fut, E>(&self, token: CancellationToken, job: F) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        // Every line of the schedule's names its lease and holder, as the
        // engine's do (its terms nest their own spans in this one).
        let span = info_span!("lease", lease = %self.store.name(), holder = %self.holder());
        // Boxed: a term's futures nest deep, and a caller's future holds this.
        let work = Box::pin(self.run_here(token, Arc::new(job)));
        in_named_span(self.store.name(), self.holder().into(), work)
            .instrument(span)
            .await
    }

    /// [`run`](Self::run), in its span.
    async fn run_here<F, Fut, E>(&self, token: CancellationToken, job: Arc<F>) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let mut failures = 0;
        let started = Instant::now();
        let phase = Running::start(&self.phase);
        // Until storage first answers, a failure is a setting to fix: give
        // up after the first-contact timeout, as a campaign does.
        let first_contact = self.options.mutex.first_contact_timeout;
        let contact = self.mutex.first_contact();
        let contact_by = contact.give_up_at(Instant::now(), first_contact);
        while !token.is_cancelled() {
            phase.set(Phase::Awake);
            let looked = self.look().await;
            if looked.is_ok() {
                contact.answered();
            }
            let never_answered = contact_by.filter(|_| !contact.has_answered());
            let wait = match looked {
                Ok(Look::Wait { at, seen }) => {
                    failures = 0;
                    phase.set(Phase::Waiting(at));
                    at.map(|at| until(seen, at))
                }
                Ok(Look::Blocked { holder, wait }) => {
                    failures = 0;
                    phase.set(Phase::Blocked(holder.into()));
                    Some(wait)
                }
                Ok(Look::Due) => match self.lead(&token, job.clone(), started).await {
                    Ok(()) => {
                        failures = 0;
                        Some(Duration::ZERO)
                    }
                    // A job that could not be stopped may still run here:
                    // no other slot starts on this host (nor, with
                    // fail-stop, on any: the process has exited).
                    Err(e) if e.is_fatal() || matches!(e, Error::TaskNotStopped) => return Err(e),
                    Err(e) => Some(self.failed(
                        &mut failures,
                        "a term ended before it settled its slot",
                        &e,
                    )),
                },
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) if never_answered.is_some_and(|by| Instant::now() >= by) => {
                    let after = first_contact.unwrap_or_default();
                    return Err(first_contact::failed(self.store.name(), after, e));
                }
                Err(e) => {
                    let wait = self.failed(&mut failures, "could not read its record", &e);
                    // The last look comes at the first-contact timeout.
                    Some(never_answered.map_or(wait, |by| {
                        wait.min(by.saturating_duration_since(Instant::now()))
                    }))
                }
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

    /// Counts a failure (`what` happened) and says how long to wait
    /// before the next look.
    fn failed(&self, failures: &mut u32, what: &str, e: &Error) -> Duration {
        *failures = failures.saturating_add(1);
        let wait = backoff(Duration::from_secs(1), Duration::from_secs(30), *failures);
        warn!(holder = %self.holder(), error = %Chain(e), retry_in = ?wait, "schedule: {what}");
        wait
    }

    /// Reads the record and storage's clock without the lease, both at
    /// once: one round trip tells a host that wakes whether to campaign or
    /// to sleep again.
    async fn look(&self) -> Result<Look> {
        let limit = self.options.mutex.request_timeout;
        let sent = Instant::now();
        let (state, info) = tokio::join!(
            bounded("read state", limit, self.store.read_state()),
            bounded("inspect", limit, self.store.inspect())
        );
        // Storage's answers to the looks count for the schedule's health as
        // the campaign's do for a mutex's: between slots they are all it
        // hears.
        let failed = state.as_ref().err().or(info.as_ref().err());
        self.mutex.vitals().heard(sent, failed);
        let state = state?;
        let info = info?;
        // No lease blob yet (no clock to read): the first term makes it
        // and begins the record.
        let Some((info, now)) = info.and_then(|i| {
            let now = i.storage_time.map(timestamp)?;
            Some((i, now))
        }) else {
            return Ok(Look::Due);
        };
        self.differing(&info);
        let seen = Instant::now();
        let record = Record::parse(&self.store.name(), &state)?.unwrap_or_default();
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .knew(&record);
        tell(&self.reporter, self.own().tell(&record));
        self.report_elsewhere(&record, now);
        let wake = wake(
            &self.slots,
            &record,
            now,
            self.options.catch_up,
            self.options.retries,
        );
        let stranger = foreign_holder(&info, self.holder(), self.store.supports_advertised());
        Ok(match (wake, stranger) {
            (Wake::Campaign, Some(holder)) => self.blocked(&record, now, holder),
            (Wake::Campaign, None) => Look::Due,
            (Wake::Sleep(at), _) => Look::Wait {
                at,
                seen: (seen, now),
            },
        })
    }

    /// A slot is due at storage's `now` and `holder`, not one of the
    /// schedule's hosts, holds the lease: says so once a slot, and looks
    /// again at the next slot or a lease from now, whichever comes first.
    fn blocked(&self, record: &Record, now: Timestamp, holder: String) -> Look {
        let mut strangers = self
            .strangers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let d = due::due(
            &self.slots,
            record,
            now,
            self.options.catch_up,
            self.options.retries,
        );
        if let due::Next::Run { slot, .. } = d.next {
            if strangers.blocked(slot) {
                drop(strangers);
                self.reporter.report(
                    slot,
                    SlotOutcome::Blocked {
                        holder: holder.clone(),
                    },
                );
            }
        }
        let lease = self.options.mutex.lease_duration;
        let next = self.slots.after(now).map_or(lease, |at| {
            Duration::try_from(at.duration_since(now)).unwrap_or_default()
        });
        Look::Blocked {
            holder,
            wait: next.min(lease),
        }
    }

    /// Warns, once per difference, when the lease's last term advertised
    /// another expression or zone than this host's: hosts of one blob with
    /// different expressions each run their own slots.
    fn differing(&self, info: &LeaseInfo) {
        let Some(other) = info
            .advertised
            .as_deref()
            .and_then(|advertised| differs(advertised, &self.options))
        else {
            return;
        };
        let news = self
            .differences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .news(&other);
        if news {
            let last = info.holder.as_deref().unwrap_or("-");
            warn!(holder = %self.holder(), last_holder = %last, last_epoch = info.epoch, other = %other, mine = %words(&self.options), "schedule: the lease's last term ({last}, epoch {}) ran another expression, {other}, than this host's, {}: each host runs its own expression's slots until every host of the blob runs the same", info.epoch, words(&self.options));
        }
    }

    /// Reports each slot of `record` up to `now` that another host ran and
    /// that this host has not reported yet.
    fn report_elsewhere(&self, record: &Record, now: Timestamp) {
        let news = self
            .elsewhere
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .news(record, now, self.holder());
        for (slot, entry) in news {
            let outcome = SlotOutcome::DoneElsewhere {
                holder: entry.holder,
                epoch: entry.epoch,
            };
            self.reporter.report(slot, outcome);
        }
    }

    fn own(&self) -> std::sync::MutexGuard<'_, Own> {
        self.own.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Campaigns for one term and settles what is due in it; this host's
    /// schedule began to run at `started`.
    async fn lead<F, Fut, E>(
        &self,
        token: &CancellationToken,
        job: Arc<F>,
        started: Instant,
    ) -> Result<()>
    where
        F: Fn(Slot, LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let term = Term {
            store: self.store.clone(),
            slots: self.slots.clone(),
            options: self.options.clone(),
            reporter: self.reporter.clone(),
            own: self.own.clone(),
            started,
            known: self.known.clone(),
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
    /// Something is due, and `holder`, not one of the schedule's hosts,
    /// holds the lease: look again after `wait`.
    Blocked { holder: String, wait: Duration },
    /// Nothing is due before `at` on storage's clock (never, when `None`);
    /// `seen` is when storage's clock was read, and what it read.
    Wait {
        at: Option<Timestamp>,
        seen: (Instant, Timestamp),
    },
}

/// How long from now until storage's clock reads `at`, from `seen`: the
/// local instant at which it read `now`. The host's own clock is never
/// read.
fn until((seen, now): (Instant, Timestamp), at: Timestamp) -> Duration {
    let ahead = Duration::try_from(at.duration_since(now)).unwrap_or_default();
    (seen + ahead).saturating_duration_since(Instant::now())
}
