//! The mutex: one lease, one leader task at a time, on the election engine.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::azure::settings::BlobSettings;
use crate::azure::BlobLeaseManager;
use crate::ending::TermReport;
use crate::engine::first_contact::FirstContact;
use crate::engine::leader::{Leader, LeaderWatch};
use crate::engine::leadership::{LeaderContext, Leadership};
use crate::engine::lingering::Lingering;
use crate::engine::metrics::Metrics;
use crate::engine::vitals::Vitals;
use crate::engine::{box_task, Engine, Observer, TaskFn};
use crate::error::{BoxError, Error, Result};
use crate::options::{default_holder, MutexOptions};
use crate::store::{check_request_timeout, LeaseStore};

mod guard;
mod once;
pub(crate) mod record;

pub use guard::{MutexGuard, TryAcquire};
pub use once::OnceOutcome;
pub use record::{OnceOptions, SkipReason};

/// How many term reports a slow receiver can fall behind.
const REPORTS_KEPT: usize = 16;

/// Leader election on an Azure blob lease: runs a task on at most one
/// instance at a time.
///
/// Every instance calls [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired)
/// with the same [`BlobSettings`]. The one that acquires the lease runs the
/// task while it keeps renewing; the others wait and try again. See the crate
/// documentation for the guarantees and their limits.
pub struct BlobDistributedMutex<S: LeaseStore = BlobLeaseManager> {
    core: Arc<Core<S>>,
}

/// What a mutex is made of, shared with the background work of its guards.
pub(crate) struct Core<S> {
    store: Arc<S>,
    options: MutexOptions,
    holder: Arc<str>,
    /// The task of the task form; `None` for a mutex made for guards.
    task: Option<Arc<TaskFn>>,
    state: watch::Sender<Leadership>,
    reports: broadcast::Sender<TermReport>,
    metrics: Metrics,
    /// Set while a campaign runs: one campaign per mutex at a time.
    campaigning: AtomicBool,
    /// Tasks of earlier terms that may still run.
    lingering: Lingering,
    /// Who leads, for [`leader`](BlobDistributedMutex::leader).
    leader: LeaderWatch,
    /// Whether storage has ever answered this mutex.
    contact: FirstContact,
}

impl<S: LeaseStore> std::fmt::Debug for BlobDistributedMutex<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobDistributedMutex")
            .field("lease", &self.core.store.name())
            .field("holder", &self.core.holder)
            .field("options", &self.core.options)
            .finish_non_exhaustive()
    }
}

impl BlobDistributedMutex<BlobLeaseManager> {
    /// A mutex with default [`MutexOptions`] that runs `task` while it leads.
    ///
    /// The task is called once per term with a [`LeaderContext`]; it must stop
    /// soon after the context's token is cancelled. It may return any error
    /// type that converts into a boxed error (`anyhow::Error` does).
    ///
    /// # Errors
    ///
    /// As [`BlobDistributedMutex::with_options`].
    pub fn new<F, Fut, E>(settings: BlobSettings, task: F) -> Result<Self>
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        Self::with_options(settings, MutexOptions::default(), task)
    }

    /// A mutex with the given options.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the first invalid option (see
    /// [`MutexOptions::validate`]), or [`Error::InvalidConnectionString`] when
    /// the settings' SAS token is malformed.
    pub fn with_options<F, Fut, E>(
        settings: BlobSettings,
        options: MutexOptions,
        task: F,
    ) -> Result<Self>
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        options.validate()?;
        let manager = BlobLeaseManager::from_settings(settings)?
            .with_request_timeout(options.request_timeout);
        Self::with_store(manager, options, task)
    }

    /// A mutex for guards only, with default [`MutexOptions`]: it has no
    /// task, and hands out its lease through
    /// [`acquire`](Self::acquire) and [`try_acquire`](Self::try_acquire).
    /// For many leases by name over one client, see
    /// [`BlobLocks`](crate::BlobLocks).
    ///
    /// # Errors
    ///
    /// As [`BlobDistributedMutex::for_guards_with_options`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), blob_mutex::Error> {
    /// use blob_mutex::{BlobDistributedMutex, BlobSettings};
    ///
    /// let settings = BlobSettings::azurite("leases", "reindex")?;
    /// let mutex = BlobDistributedMutex::for_guards(settings)?;
    /// let guard = mutex.acquire().await?;
    /// // ... steps, each begun only while guard.is_current() ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn for_guards(settings: BlobSettings) -> Result<Self> {
        Self::for_guards_with_options(settings, MutexOptions::default())
    }

    /// A mutex for guards only, with the given options.
    ///
    /// [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired)
    /// and [`run_once`](Self::run_once), which run the task given at
    /// construction, return [`Error::InvalidOption`] naming `task` on such
    /// a mutex, before any request; [`run_once_with`](Self::run_once_with)
    /// and [`run_once_with_options`](Self::run_once_with_options), which
    /// take their task as an argument, work.
    ///
    /// # Errors
    ///
    /// As [`BlobDistributedMutex::with_options`].
    pub fn for_guards_with_options(settings: BlobSettings, options: MutexOptions) -> Result<Self> {
        options.validate()?;
        let manager = BlobLeaseManager::from_settings(settings)?
            .with_request_timeout(options.request_timeout);
        Self::with_store_for_guards(manager, options)
    }

    /// Where the lease blob lives.
    #[must_use]
    pub fn settings(&self) -> &BlobSettings {
        self.core.store.settings()
    }
}

impl<S: LeaseStore> BlobDistributedMutex<S> {
    /// A mutex over any [`LeaseStore`]: for example the in-memory store of
    /// the `testing` feature, to test leader code with paused Tokio time and
    /// no emulator, or a store of your own that meets the trait's contract.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the first invalid option (see
    /// [`MutexOptions::validate`]), or `request_timeout` when it is shorter
    /// than the store's [`min_request_timeout`](LeaseStore::min_request_timeout);
    /// [`Error::Unsupported`] for a [`priority`](MutexOptions::priority) on
    /// a store that cannot keep candidates.
    pub fn with_store<F, Fut, E>(store: S, options: MutexOptions, task: F) -> Result<Self>
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        Self::sharing(store, options, task, Arc::default())
    }

    /// A mutex for guards only over any [`LeaseStore`]: as
    /// [`for_guards_with_options`](BlobDistributedMutex::for_guards_with_options),
    /// on the store given.
    ///
    /// # Errors
    ///
    /// As [`with_store`](Self::with_store).
    pub fn with_store_for_guards(store: S, options: MutexOptions) -> Result<Self> {
        Self::build(store, options, None, Arc::default())
    }

    /// As [`with_store`](Self::with_store), its steps going to `vitals`
    /// (a lease set's membership shares the set's).
    pub(crate) fn sharing<F, Fut, E>(
        store: S,
        options: MutexOptions,
        task: F,
        vitals: Arc<Vitals>,
    ) -> Result<Self>
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        Self::build(store, options, Some(box_task(task)), vitals)
    }

    /// The one constructor: `task` is `None` for a mutex made for guards.
    fn build(
        store: S,
        options: MutexOptions,
        task: Option<Arc<TaskFn>>,
        vitals: Arc<Vitals>,
    ) -> Result<Self> {
        options.validate()?;
        check_request_timeout(store.min_request_timeout(), options.request_timeout)?;
        if options.priority.is_some() && !store.supports_candidates() {
            return Err(Error::Unsupported {
                operation: "candidates beside the lease (the priority option)",
            });
        }
        if options.advertised.is_some() && !store.supports_advertised() {
            return Err(Error::Unsupported {
                operation: "a value advertised with the stamp (the advertised option)",
            });
        }
        let holder: Arc<str> = options.holder.clone().unwrap_or_else(default_holder).into();
        let leader = LeaderWatch::new(&holder, options.advertised.as_deref());
        Ok(BlobDistributedMutex {
            core: Arc::new(Core {
                metrics: Metrics::new(&store.name(), vitals),
                store: Arc::new(store),
                options,
                holder,
                task,
                state: watch::channel(Leadership::Follower).0,
                reports: broadcast::channel(REPORTS_KEPT).0,
                campaigning: AtomicBool::new(false),
                lingering: Lingering::default(),
                leader,
                contact: FirstContact::default(),
            }),
        })
    }

    /// The lease store this mutex runs on.
    #[must_use]
    pub fn store(&self) -> &S {
        &self.core.store
    }

    /// This instance's holder name.
    #[must_use]
    pub fn holder(&self) -> &str {
        &self.core.holder
    }

    /// The options in force.
    #[must_use]
    pub fn options(&self) -> &MutexOptions {
        &self.core.options
    }

    /// A receiver of the leadership state. Like any `watch` channel it holds
    /// the latest state only, so changes that follow each other quickly may
    /// be seen as one; the `tracing` events log every transition.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.core.state.subscribe()
    }

    /// Whether storage has ever answered this mutex: a shape that talks to
    /// storage outside the campaign (a schedule's looks) tells it so.
    #[cfg(feature = "schedule")]
    pub(crate) fn first_contact(&self) -> &FirstContact {
        &self.core.contact
    }

    /// What the engine learns of this mutex's campaigns and guards, for
    /// [`health`](Self::health).
    pub(crate) fn vitals(&self) -> Arc<Vitals> {
        self.core.metrics.vitals().clone()
    }

    /// A receiver of who leads this lease, as this instance last saw it:
    /// `None` while it does not know of a leader (the lease is free, or
    /// taken and not yet stamped, or storage did not answer for a lease
    /// duration), otherwise the [`Leader`] with its holder, epoch, start
    /// and [`advertised`](MutexOptions::advertised) value. Followers and
    /// the leader alike.
    ///
    /// The leader fills it when its term starts and empties it when the
    /// term ends; it names nobody once the campaign has ended. A follower
    /// fills it while
    /// [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired)
    /// runs, from an inspection of the lease each time an acquire attempt
    /// finds the lease held, at most once per renew interval: one request
    /// per renew interval more, and none while no receiver is alive. A new
    /// leader is therefore seen within a renew interval plus an acquire
    /// retry (6.2 s with the defaults, plus the request), and a leader
    /// whose lease is gone is no longer shown within the same time once
    /// storage shows the lease free (see the guide's section
    /// [Who leads, and where](crate::guide::election#who-leads-and-where)).
    #[must_use]
    pub fn leader(&self) -> watch::Receiver<Option<Leader>> {
        self.core.leader.subscribe()
    }

    /// A receiver of a [`TermReport`] for every term this mutex leads from
    /// now on, sent by the mutex itself whatever ended the term (the task
    /// returned, failed, panicked, was aborted or could not be stopped, the
    /// lease was lost, the deadline passed while the process was frozen).
    ///
    /// Unlike [`watch`](Self::watch) it does not coalesce: a receiver that
    /// reads as fast as terms end sees each one. It keeps the last
    /// 16 reports for a slow receiver, which is told how many it missed.
    #[must_use]
    pub fn term_reports(&self) -> broadcast::Receiver<TermReport> {
        self.core.reports.subscribe()
    }

    /// Campaigns for the lease and runs the task whenever this instance
    /// leads, until `token` is cancelled.
    ///
    /// One round: acquire the lease (or wait `acquire_retry` with jitter while
    /// someone else holds it); stamp `holder`, `epoch` and `acquired_at` into
    /// the blob's metadata; run the task with a child token while renewing
    /// every `renew_interval`; when the task ends, a task fails, the lease is
    /// lost, the deadline comes or `token` is cancelled, stop the term's tasks
    /// first (cancel, wait up to `stop_grace`, abort), report the end of the
    /// term, and only then release the lease; then campaign again after a
    /// retry period (or `failure_backoff` after a failure).
    ///
    /// # Errors
    ///
    /// Returns `Ok(())` once `token` is cancelled and the tasks have stopped.
    /// Returns early with a fatal error: [`Error::Authentication`], a storage
    /// answer 400 ([`Error::Storage`]), [`Error::InvalidEpoch`] when the blob's
    /// epoch cannot be increased, [`Error::TaskNotStopped`] when a task could
    /// neither be stopped nor aborted (the lease is then left to expire; with
    /// [`MutexOptions::fail_stop`] the process exits instead; every later
    /// campaign of this mutex returns it too, at once, while that task may
    /// still run),
    /// [`Error::AlreadyCampaigning`] when this mutex is campaigning already,
    /// [`Error::InvalidOption`] naming `task`, at once, on a mutex made
    /// for guards ([`for_guards`](BlobDistributedMutex::for_guards)),
    /// and, with [`MutexOptions::acquire_timeout`], [`Error::NotAcquired`] or
    /// the last attempt's error when it did not lead in time. Transient
    /// failures are retried with backoff and logged.
    ///
    /// # Cancellation safety
    ///
    /// Cancel through `token` for a clean stop: tasks drained, lease
    /// released. Dropping the future instead (as `tokio::select!` does with
    /// the branch that lost, or a runtime that shuts down) is safe but not
    /// clean: the term's token is cancelled and its leader task and
    /// sub-tasks are aborted at once, without a grace; the lease is not
    /// released and expires on its own, so no other instance leads before
    /// then. The end of the term is still reported: a [`TermReport`] with
    /// [`StopReason::Dropped`](crate::term::StopReason::Dropped) (or `Deadline`
    /// when the deadline had passed), the metrics, and [`watch`](Self::watch)
    /// showing [`Leadership::Stopped`] once the future is gone. A task that blocks its thread cannot be aborted: with
    /// [`MutexOptions::fail_stop`] the process still exits before the lease
    /// could expire.
    pub async fn run_task_when_mutex_acquired(&self, token: CancellationToken) -> Result<()> {
        let task = self.core.task()?;
        let _one = OneCampaign::enter(&self.core)?;
        let observer = MutexObserver::new(&self.core);
        self.core.engine(&observer, task).run(token).await
    }
}

impl<S: LeaseStore> Core<S> {
    /// The task given at construction; refused on a mutex made for guards.
    pub(crate) fn task(&self) -> Result<Arc<TaskFn>> {
        self.task.clone().ok_or_else(|| {
            Error::invalid(
                "task",
                "this mutex was made for guards (for_guards) and has no task to run: hold its \
                 lease with acquire or try_acquire, give run_once_with a task, or make the mutex \
                 with new, with_options or with_store and a task",
            )
        })
    }

    /// The engine of this mutex, running `task` and telling `observer`.
    pub(crate) fn engine<'a>(
        &'a self,
        observer: &'a dyn Observer,
        task: Arc<TaskFn>,
    ) -> Engine<'a, S> {
        Engine {
            store: self.store.clone(),
            options: &self.options,
            holder: self.holder.clone(),
            task,
            state: &self.state,
            observer,
            metrics: &self.metrics,
            lingering: &self.lingering,
            leader: Some(&self.leader),
            contact: Some(&self.contact),
            caller_holds: None,
        }
    }
}

/// What hears of the mutex's terms: its term reports, and its leader watch;
/// it keeps the last report for a caller that leads one term.
pub(crate) struct MutexObserver<'a> {
    reports: &'a broadcast::Sender<TermReport>,
    leader: &'a LeaderWatch,
    last: std::sync::Mutex<Option<TermReport>>,
}

impl<'a> MutexObserver<'a> {
    pub(crate) fn new<S>(core: &'a Core<S>) -> Self {
        MutexObserver {
            reports: &core.reports,
            leader: &core.leader,
            last: std::sync::Mutex::new(None),
        }
    }

    /// The report of the last term that ended, taken.
    pub(crate) fn take_last(&self) -> Option<TermReport> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl Observer for MutexObserver<'_> {
    fn started(&self, epoch: u64) {
        self.leader.leading(epoch);
    }

    fn ended(&self, report: &TermReport) {
        self.leader.stepped_down(report.epoch);
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(report.clone());
        self.reports.ended(report);
    }
}

/// Marks a mutex as campaigning for as long as it lives; when it goes (the
/// campaign returned or its future was dropped, a guard's term ended), the
/// state says [`Leadership::Stopped`] and the leader watch names nobody.
pub(crate) struct OneCampaign<S: LeaseStore>(Arc<Core<S>>);

impl<S: LeaseStore> std::fmt::Debug for OneCampaign<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OneCampaign").field(&self.0.holder).finish()
    }
}

impl<S: LeaseStore> OneCampaign<S> {
    pub(crate) fn enter(core: &Arc<Core<S>>) -> Result<Self> {
        core.campaigning
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map_err(|_| Error::AlreadyCampaigning)?;
        Ok(OneCampaign(core.clone()))
    }
}

impl<S: LeaseStore> Drop for OneCampaign<S> {
    fn drop(&mut self) {
        self.0.state.send_replace(Leadership::Stopped);
        self.0.leader.campaign_ended();
        self.0.campaigning.store(false, Ordering::SeqCst);
    }
}

/// The campaign future can be spawned on a multi-threaded runtime.
#[allow(dead_code)]
fn assert_send() {
    fn is_send<T: Send>(_: &T) {}
    fn check(mutex: &BlobDistributedMutex<BlobLeaseManager>) {
        is_send(&mutex.run_task_when_mutex_acquired(CancellationToken::new()));
    }
}
