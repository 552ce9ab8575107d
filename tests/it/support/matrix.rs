//! The fault matrix's shared half: the modes (one row of set-up each),
//! the leader task every cell runs, and the record of what happened, which
//! `promises.rs` checks.
// Shared with the tests that need it; not every item is used by each.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    quorum::QuorumLeaseSetStore, quorum::QuorumLeaseStore, store::LeaseId, store::LeaseSetStore,
    store::LeaseStore, term::Leadership, BlobDistributedMutex, BlobLeaseSet, CancellationToken,
    Error, LeaderContext, LeaseSetOptions, MutexOptions,
};
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

use super::faulty::{Accounts, Storage};

/// A step of a guard's holder ([`Mode::STEP`]): longer than a follower's
/// poll, so that a lease let go under a running step would be taken
/// before the step ends.
pub const GUARD_STEP: Duration = Duration::from_secs(2);

/// The lease of every mode.
pub const D: Duration = Duration::from_secs(15);
/// How long a term's tasks may run on once a renewal learned that the
/// lease is someone else's.
pub const LOST_GRACE: Duration = Duration::from_millis(100);
/// One unit of the leader task's work.
pub const UNIT: Duration = Duration::from_millis(500);
/// How long a stuck sub-task blocks its thread once cancelled.
pub const STUCK_FOR: Duration = Duration::from_millis(1500);

/// Runs a cell on a current-thread runtime with paused time, with its own
/// metrics recorder.
pub fn paused<F: Future<Output = ()>>(cell: impl FnOnce(Metrics) -> F) {
    let recorder = DebuggingRecorder::new();
    let metrics = Metrics(recorder.snapshotter());
    let _local = metrics::set_default_local_recorder(&recorder);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(cell(metrics));
}

/// Runs a cell on two worker threads in real time (a task that blocks its
/// thread needs another to run the election), every thread recording into
/// the cell's metrics recorder.
pub fn real<F: Future<Output = ()>>(cell: impl FnOnce(Metrics) -> F) {
    // Each worker thread keeps the recorder for as long as it lives.
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    let metrics = Metrics(recorder.snapshotter());
    let _local = metrics::set_default_local_recorder(recorder);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || std::mem::forget(metrics::set_default_local_recorder(recorder)))
        .build()
        .unwrap()
        .block_on(cell(metrics));
}

/// The metrics a cell's instances recorded.
pub struct Metrics(pub Snapshotter);

/// What the victim's leader tasks do besides their units of work, from
/// the unit after the scenario arms it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    Cooperative,
    /// Each term starts a sub-task that ignores cancellation (it must be
    /// aborted).
    Lingers,
    /// One term starts a sub-task that blocks its thread once cancelled,
    /// and returns.
    StuckOnce,
}

/// One task run: one term's tasks on one instance.
#[derive(Clone, Debug)]
pub struct Run {
    pub instance: usize,
    pub key: String,
    pub epoch: u64,
    pub lease: LeaseId,
    pub start: Instant,
    pub end: Option<Instant>,
    /// Units of work started while the term was not current.
    pub late_units: u32,
    /// Whether it started the misbehaving sub-task of [`Behaviour`].
    pub misbehaving: bool,
}

/// One term's report, from `term_reports()` or `partition_reports()`.
#[derive(Clone, Debug)]
pub struct Report {
    pub instance: usize,
    pub key: String,
    pub epoch: u64,
    pub reason: &'static str,
    pub tasks: &'static str,
}

/// One cell: its storage, its victim's behaviour, and the record.
pub struct Cell {
    pub name: String,
    pub accounts: Arc<Accounts>,
    pub options: MutexOptions,
    pub balance_interval: Duration,
    pub victim: Mutex<usize>,
    behaviour: Mutex<Behaviour>,
    stuck_taken: AtomicBool,
    pub beating: AtomicBool,
    /// The mode's [`Mode::STEP`].
    pub step: Duration,
    runs: Mutex<Vec<Run>>,
    reports: Mutex<Vec<Report>>,
    pub metrics: Metrics,
}

impl Cell {
    /// A cell of mode `M` with the default options (adjusted by `options`),
    /// on a paused clock or in real time (short graces and intervals).
    pub fn new<M: Mode>(
        scenario: &str,
        metrics: Metrics,
        real_time: bool,
        options: impl FnOnce(MutexOptions) -> MutexOptions,
    ) -> Arc<Self> {
        // A fault may begin before a follower's first attempt was answered
        // (a quorum's answer needs a majority), and the first-contact bound
        // would then end its campaign: that bound has its own tests
        // (tests/it/store/first_contact.rs); the matrix is about storage that had
        // answered.
        let mut base = MutexOptions::default()
            .with_lease_duration(D)
            .with_first_contact_timeout(None);
        let mut balance_interval = Duration::from_secs(5);
        if real_time {
            base = base
                .with_stop_grace(Duration::from_millis(100))
                .with_renew_interval(Duration::from_secs(1))
                .with_acquire_retry(Duration::from_millis(200));
            balance_interval = Duration::from_millis(200);
        }
        Arc::new(Cell {
            name: format!("{}-{scenario}", M::NAME),
            accounts: Accounts::new(M::ACCOUNTS),
            options: options(base),
            balance_interval,
            victim: Mutex::new(0),
            behaviour: Mutex::new(Behaviour::Cooperative),
            stuck_taken: AtomicBool::new(false),
            beating: AtomicBool::new(true),
            step: M::STEP,
            runs: Mutex::default(),
            reports: Mutex::default(),
            metrics,
        })
    }

    /// From now on, the victim's tasks behave so.
    pub fn arm(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    pub fn victim(&self) -> usize {
        *self.victim.lock().unwrap()
    }

    pub fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }

    pub fn reports(&self) -> Vec<Report> {
        self.reports.lock().unwrap().clone()
    }

    /// The runs going on now.
    pub fn running(&self) -> Vec<Run> {
        self.runs()
            .into_iter()
            .filter(|r| r.end.is_none())
            .collect()
    }

    /// The runs of `instance` going on now.
    pub fn running_on(&self, instance: usize) -> Vec<Run> {
        let mut runs = self.running();
        runs.retain(|r| r.instance == instance);
        runs
    }

    pub fn options_for(&self, index: usize) -> MutexOptions {
        self.options
            .clone()
            .with_holder(format!("i{index}"))
            .with_jitter_seed(7 + index as u64)
    }

    /// Marks the start of a run; the run ends when the last clone of the
    /// returned guard is dropped.
    pub fn started(
        self: &Arc<Self>,
        instance: usize,
        key: &str,
        ctx: &LeaderContext,
    ) -> Arc<RunGuard> {
        let mut runs = self.runs.lock().unwrap();
        runs.push(Run {
            instance,
            key: key.to_owned(),
            epoch: ctx.epoch(),
            lease: ctx.lease_id(),
            start: Instant::now(),
            end: None,
            late_units: 0,
            misbehaving: false,
        });
        Arc::new(RunGuard(self.clone(), runs.len() - 1))
    }

    pub fn report(&self, report: Report) {
        self.reports.lock().unwrap().push(report);
    }
}

/// Marks the end of a run when dropped.
pub struct RunGuard(Arc<Cell>, usize);

impl RunGuard {
    pub fn unit(&self, ctx: &LeaderContext) {
        if !ctx.is_current() {
            self.0.runs.lock().unwrap()[self.1].late_units += 1;
        }
    }

    fn misbehaves(&self) {
        self.0.runs.lock().unwrap()[self.1].misbehaving = true;
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.0.runs.lock().unwrap()[self.1].end = Some(Instant::now());
    }
}

/// The leader task of every mode: a unit of work every [`UNIT`] until
/// cancelled, checking first (`biased`) whether it must stop; on the
/// victim, the behaviour armed.
async fn lead(
    cell: Arc<Cell>,
    instance: usize,
    key: String,
    ctx: LeaderContext,
) -> Result<(), Error> {
    let run = cell.started(instance, &key, &ctx);
    loop {
        tokio::select! {
            biased;
            _ = ctx.cancelled() => return Ok(()),
            () = sleep(UNIT) => {}
        }
        run.unit(&ctx);
        let victim = instance == cell.victim();
        if !victim || cell.beating.load(Ordering::SeqCst) {
            ctx.heartbeat().beat();
        }
        if victim && misbehave(&cell, &run, &ctx) {
            return Ok(());
        }
    }
}

/// A guard's holder: a step of [`Cell::step`] at a time, each begun only
/// while the guard is current and run to its end without a look at the
/// token; then it returns, and its caller releases the guard.
async fn steps(
    cell: Arc<Cell>,
    instance: usize,
    key: String,
    ctx: LeaderContext,
) -> Result<(), Error> {
    let run = cell.started(instance, &key, &ctx);
    while ctx.is_current() {
        run.unit(&ctx);
        sleep(cell.step).await;
        let victim = instance == cell.victim();
        if !victim || cell.beating.load(Ordering::SeqCst) {
            ctx.heartbeat().beat();
        }
        if victim && misbehave(&cell, &run, &ctx) {
            return Ok(());
        }
    }
    Ok(())
}

/// Starts the armed behaviour's sub-task, once per run; `true` when the
/// task must return now.
fn misbehave(cell: &Cell, run: &Arc<RunGuard>, ctx: &LeaderContext) -> bool {
    let behaviour = *cell.behaviour.lock().unwrap();
    if cell.runs.lock().unwrap()[run.1].misbehaving {
        return false;
    }
    let sub_task = run.clone();
    match behaviour {
        Behaviour::Cooperative => return false,
        Behaviour::Lingers => {
            ctx.spawn(async move {
                let _run = sub_task;
                std::future::pending::<Result<(), Error>>().await
            });
        }
        Behaviour::StuckOnce => {
            if cell.stuck_taken.swap(true, Ordering::SeqCst) {
                return false;
            }
            let token = ctx.token().clone();
            ctx.spawn(async move {
                let _run = sub_task;
                token.cancelled().await;
                // Blocks its thread: neither cancellation nor abort stops it.
                std::thread::sleep(STUCK_FOR);
                Ok::<(), Error>(())
            });
        }
    }
    run.misbehaves();
    behaviour == Behaviour::StuckOnce
}

pub type Campaign = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// How an instance's campaign ended.
#[derive(Debug)]
pub enum Outcome {
    Returned(Result<(), Error>),
    /// The campaign future was dropped.
    Dropped,
}

/// One instance of a mode: a mutex or a lease set, campaigning.
pub struct Instance {
    pub index: usize,
    pub token: CancellationToken,
    dropper: CancellationToken,
    handle: Option<JoinHandle<Outcome>>,
    owned: Box<dyn Fn() -> BTreeMap<String, u64> + Send + Sync>,
    stopped: Box<dyn Fn() -> bool + Send + Sync>,
    again: Box<dyn Fn(CancellationToken) -> Campaign + Send + Sync>,
}

impl Instance {
    pub fn start(
        index: usize,
        owned: Box<dyn Fn() -> BTreeMap<String, u64> + Send + Sync>,
        stopped: Box<dyn Fn() -> bool + Send + Sync>,
        again: Box<dyn Fn(CancellationToken) -> Campaign + Send + Sync>,
    ) -> Self {
        let (token, dropper) = (CancellationToken::new(), CancellationToken::new());
        let campaign = again(token.clone());
        let drop_now = dropper.clone();
        let handle = tokio::spawn(async move {
            tokio::select! {
                r = campaign => Outcome::Returned(r),
                () = drop_now.cancelled() => Outcome::Dropped,
            }
        });
        Instance {
            index,
            token,
            dropper,
            handle: Some(handle),
            owned,
            stopped,
            again,
        }
    }

    /// What `watch()` shows this instance leading or owning now, by key.
    pub fn owned(&self) -> BTreeMap<String, u64> {
        (self.owned)()
    }

    /// Whether `watch()` shows the campaign stopped (a mutex's
    /// `Leadership::Stopped`).
    pub fn watch_stopped(&self) -> bool {
        (self.stopped)()
    }

    /// Drops the campaign future, as `tokio::select!` does with a branch
    /// that lost.
    pub fn drop_campaign(&self) {
        self.dropper.cancel();
    }

    /// Waits for the campaign to end (at most once).
    pub async fn join(&mut self) -> Outcome {
        match self.handle.take() {
            Some(handle) => handle.await.unwrap(),
            None => panic!("instance {} joined twice", self.index),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Campaigns again, with a new token.
    pub fn campaign_again(&self, token: CancellationToken) -> Campaign {
        (self.again)(token)
    }
}

pub fn collect<R: Clone + Send + 'static>(
    cell: &Arc<Cell>,
    mut reports: broadcast::Receiver<R>,
    convert: impl Fn(R) -> Report + Send + 'static,
) {
    let cell = cell.clone();
    tokio::spawn(async move {
        loop {
            match reports.recv().await {
                Ok(r) => cell.report(convert(r)),
                Err(broadcast::error::RecvError::Closed) => return,
                Err(e) => panic!("reports lost: {e}"),
            }
        }
    });
}

/// A mutex instance over `store`, recording into `cell`.
pub fn mutex<S: LeaseStore>(
    cell: &Arc<Cell>,
    index: usize,
    store: S,
    options: MutexOptions,
) -> Instance {
    let task_cell = cell.clone();
    let mutex = Arc::new(
        BlobDistributedMutex::with_store(store, options, move |ctx: LeaderContext| {
            lead(task_cell.clone(), index, "mutex".to_owned(), ctx)
        })
        .unwrap(),
    );
    collect(cell, mutex.term_reports(), move |r| Report {
        instance: index,
        key: "mutex".to_owned(),
        epoch: r.epoch,
        reason: r.reason.as_str(),
        tasks: r.tasks.as_str(),
    });
    let (owned, stopped) = watch_of(&mutex);
    let again = Box::new(move |token| {
        let mutex = mutex.clone();
        Box::pin(async move { mutex.run_task_when_mutex_acquired(token).await }) as Campaign
    });
    Instance::start(index, owned, stopped, again)
}

/// A mutex instance over `store` held through its guard, recording into
/// `cell`: acquire, work while the guard is current (the same leader task,
/// run by the caller on the guard's context), release; again after an
/// acquire retry, until `token` is cancelled. The caller's code stops when
/// the guard's cancellation fires, as the guard's contract asks: the guard
/// cannot stop it. Its term ends as the caller releases it, so a caller's
/// stop is reported as `finished` (see [`Mode::caller_ended`]).
pub fn guard<S: LeaseStore>(
    cell: &Arc<Cell>,
    index: usize,
    store: S,
    options: MutexOptions,
) -> Instance {
    // The task given at construction never runs: a guard's term runs the
    // caller's code.
    let mutex = Arc::new(
        BlobDistributedMutex::with_store(store, options, |ctx: LeaderContext| async move {
            ctx.cancelled().await;
            Ok::<(), Error>(())
        })
        .unwrap(),
    );
    collect(cell, mutex.term_reports(), move |r| Report {
        instance: index,
        key: "mutex".to_owned(),
        epoch: r.epoch,
        reason: r.reason.as_str(),
        tasks: r.tasks.as_str(),
    });
    let (owned, stopped) = watch_of(&mutex);
    let cell = cell.clone();
    let again = Box::new(move |token| {
        let (mutex, cell) = (mutex.clone(), cell.clone());
        Box::pin(hold_guards(cell, index, mutex, token)) as Campaign
    });
    Instance::start(index, owned, stopped, again)
}

/// The caller's loop of a guard instance (see [`guard`]).
async fn hold_guards<S: LeaseStore>(
    cell: Arc<Cell>,
    index: usize,
    mutex: Arc<BlobDistributedMutex<S>>,
    token: CancellationToken,
) -> Result<(), Error> {
    loop {
        let guard = tokio::select! {
            guard = mutex.acquire() => guard?,
            () = token.cancelled() => return Ok(()),
        };
        let work = steps(
            cell.clone(),
            index,
            "mutex".to_owned(),
            guard.context().clone(),
        );
        tokio::select! {
            // The caller's work is dropped before the release: nothing
            // of it runs once the release begins.
            _ = work => {}
            () = token.cancelled() => {}
        }
        guard.release().await?;
        tokio::select! {
            () = sleep(mutex.options().acquire_retry()) => {}
            () = token.cancelled() => return Ok(()),
        }
    }
}

/// What `watch()` of `mutex` shows: the lease it leads, and whether it
/// stopped.
#[allow(clippy::type_complexity)]
fn watch_of<S: LeaseStore>(
    mutex: &BlobDistributedMutex<S>,
) -> (
    Box<dyn Fn() -> BTreeMap<String, u64> + Send + Sync>,
    Box<dyn Fn() -> bool + Send + Sync>,
) {
    let watch = mutex.watch();
    let stopped_watch = watch.clone();
    let stopped = Box::new(move || *stopped_watch.borrow() == Leadership::Stopped);
    let owned = Box::new(move || match &*watch.borrow() {
        Leadership::Leader { epoch } => BTreeMap::from([("mutex".to_owned(), *epoch)]),
        _ => BTreeMap::new(),
    });
    (owned, stopped)
}

/// A lease-set instance over `store`, recording into `cell`.
pub fn lease_set<S: LeaseSetStore>(cell: &Arc<Cell>, index: usize, store: S) -> Instance {
    let options = LeaseSetOptions::default()
        .with_mutex(cell.options_for(index))
        .with_balance_interval(cell.balance_interval);
    let task_cell = cell.clone();
    let set = Arc::new(
        BlobLeaseSet::with_store(store, PARTITIONS, options, move |ctx| {
            let key = format!("partitions/{}", ctx.partition());
            lead(task_cell.clone(), index, key, (*ctx).clone())
        })
        .unwrap(),
    );
    collect(cell, set.partition_reports(), move |r| Report {
        instance: index,
        key: format!("partitions/{}", r.partition),
        epoch: r.report.epoch,
        reason: r.report.reason.as_str(),
        tasks: r.report.tasks.as_str(),
    });
    let watch = set.watch();
    let owned = Box::new(move || {
        let owned = watch.borrow();
        owned
            .iter()
            .map(|(p, epoch)| (format!("partitions/{p}"), *epoch))
            .collect()
    });
    let again = Box::new(move |token| {
        let set = set.clone();
        Box::pin(async move { set.run(token).await }) as Campaign
    });
    // A set's watch() has no stopped state: it shows nothing owned.
    let stopped = Box::new(|| true);
    Instance::start(index, owned, stopped, again)
}

pub const PARTITIONS: [&str; 4] = ["p0", "p1", "p2", "p3"];

/// One row of the matrix: how a mode's instances are set up.
pub trait Mode {
    const NAME: &'static str;
    const ACCOUNTS: usize;
    /// Whether it is a lease set (many leases) rather than one lease.
    const SET: bool;
    /// Starts the instances and returns once the victim leads (or owns its
    /// share) and every lease is owned.
    fn start(cell: &Arc<Cell>) -> impl Future<Output = Vec<Instance>>;

    /// How a term ends that the caller stopped: `shutdown` when its token
    /// was cancelled, `dropped` when its campaign's future was dropped. A
    /// guard's caller ends its term by releasing the guard (a dropped guard
    /// releases too), which is reported as `finished`.
    fn caller_ended(reason: &'static str) -> &'static str {
        reason
    }

    /// How long one unit of the caller's work takes once begun, with no
    /// look at its token meanwhile: zero for the task modes (their units
    /// are instants between checks of the token); a step of a guard's
    /// holder, which checks `is_current()` before each, for the guard rows.
    /// The crate cannot stop such a step, so after a loss that storage
    /// tells it of (a break from outside) the checks allow it to run out.
    const STEP: Duration = Duration::ZERO;

    fn keys() -> Vec<String> {
        if Self::SET {
            PARTITIONS
                .iter()
                .map(|p| format!("partitions/{p}"))
                .collect()
        } else {
            vec!["mutex".to_owned()]
        }
    }
}

pub struct MutexRow;
pub struct LeaseSetRow;
pub struct QuorumMutexRow;
pub struct QuorumLeaseSetRow;
pub struct HandoverRow;
pub struct GuardRow;
pub struct GuardHandoverRow;

fn quorum_lease(cell: &Arc<Cell>, caller: usize) -> QuorumLeaseStore<super::faulty::Faulty> {
    let accounts = (0..cell.accounts.sets.len())
        .map(|a| cell.accounts.lease(a, &cell.name, "mutex").by(caller))
        .collect();
    QuorumLeaseStore::new(accounts).unwrap()
}

fn quorum_set(cell: &Arc<Cell>, caller: usize) -> QuorumLeaseSetStore<super::faulty::FaultySet> {
    let sets = (0..cell.accounts.sets.len())
        .map(|a| {
            (
                format!("account-{a}"),
                cell.accounts.set(a, &cell.name).by(caller),
            )
        })
        .collect();
    QuorumLeaseSetStore::with_labels(sets).unwrap()
}

/// Starts two mutex instances, the second once the first leads; `store(i)`
/// is instance `i`'s.
async fn two_mutexes<S: LeaseStore>(cell: &Arc<Cell>, store: impl Fn(usize) -> S) -> Vec<Instance> {
    let first = mutex(cell, 0, store(0), cell.options_for(0));
    leads(cell, 0).await;
    vec![first, mutex(cell, 1, store(1), cell.options_for(1))]
}

/// Starts two lease-set instances, the second once the first owns every
/// partition, and waits until each owns half.
async fn two_sets<S: LeaseSetStore>(cell: &Arc<Cell>, store: impl Fn(usize) -> S) -> Vec<Instance> {
    let first = lease_set(cell, 0, store(0));
    until(cell, "instance 0 owns every partition", || {
        cell.running_on(0).len() == PARTITIONS.len()
    })
    .await;
    let second = lease_set(cell, 1, store(1));
    until(cell, "the partitions are shared", || {
        cell.running_on(0).len() == 2 && cell.running_on(1).len() == 2
    })
    .await;
    vec![first, second]
}

async fn leads(cell: &Arc<Cell>, instance: usize) {
    until(cell, &format!("instance {instance} leads"), || {
        !cell.running_on(instance).is_empty()
    })
    .await;
}

impl Mode for MutexRow {
    const NAME: &'static str = "mutex";
    const ACCOUNTS: usize = 1;
    const SET: bool = false;
    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        two_mutexes(cell, |i| cell.accounts.lease(0, &cell.name, "mutex").by(i)).await
    }
}

impl Mode for QuorumMutexRow {
    const NAME: &'static str = "quorum-mutex";
    const ACCOUNTS: usize = 3;
    const SET: bool = false;
    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        two_mutexes(cell, |i| quorum_lease(cell, i)).await
    }
}

impl Mode for LeaseSetRow {
    const NAME: &'static str = "lease-set";
    const ACCOUNTS: usize = 1;
    const SET: bool = true;
    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        two_sets(cell, |i| cell.accounts.set(0, &cell.name).by(i)).await
    }
}

impl Mode for QuorumLeaseSetRow {
    const NAME: &'static str = "quorum-lease-set";
    const ACCOUNTS: usize = 3;
    const SET: bool = true;
    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        two_sets(cell, |i| quorum_set(cell, i)).await
    }
}

/// A leader with priority 1, then a candidate with priority 2 that it hands
/// the lease over to: the candidate, leading right after the handover, is
/// the victim.
impl Mode for HandoverRow {
    const NAME: &'static str = "handover";
    const ACCOUNTS: usize = 1;
    const SET: bool = false;
    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        *cell.victim.lock().unwrap() = 1;
        let store = |i| cell.accounts.lease(0, &cell.name, "mutex").by(i);
        let low = mutex(cell, 0, store(0), cell.options_for(0).with_priority(1));
        leads(cell, 0).await;
        let high = mutex(cell, 1, store(1), cell.options_for(1).with_priority(2));
        leads(cell, 1).await;
        vec![low, high]
    }
}

/// Two mutex instances held through guards, the second started once the
/// first leads.
impl Mode for GuardRow {
    const NAME: &'static str = "guard";
    const ACCOUNTS: usize = 1;
    const SET: bool = false;
    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        let store = |i| cell.accounts.lease(0, &cell.name, "mutex").by(i);
        let first = guard(cell, 0, store(0), cell.options_for(0));
        leads(cell, 0).await;
        vec![first, guard(cell, 1, store(1), cell.options_for(1))]
    }

    fn caller_ended(reason: &'static str) -> &'static str {
        match reason {
            "shutdown" | "dropped" => "finished",
            other => other,
        }
    }

    const STEP: Duration = GUARD_STEP;
}

/// Two mutex instances held through guards with priorities, as
/// [`HandoverRow`]: the second, of the higher priority, starts once the
/// first leads and is handed the lease after the first's holder released
/// its guard at the end of a step.
impl Mode for GuardHandoverRow {
    const NAME: &'static str = "guard-handover";
    const ACCOUNTS: usize = 1;
    const SET: bool = false;
    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        *cell.victim.lock().unwrap() = 1;
        let store = |i| cell.accounts.lease(0, &cell.name, "mutex").by(i);
        let low = guard(cell, 0, store(0), cell.options_for(0).with_priority(1));
        leads(cell, 0).await;
        let high = guard(cell, 1, store(1), cell.options_for(1).with_priority(2));
        leads(cell, 1).await;
        vec![low, high]
    }

    fn caller_ended(reason: &'static str) -> &'static str {
        GuardRow::caller_ended(reason)
    }

    const STEP: Duration = GUARD_STEP;
}

/// Waits until `condition` holds, polling every 10 ms; panics after 120 s
/// (virtual time in paused cells).
pub async fn until(cell: &Cell, what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{}: timed out waiting until {what}\nruns: {:#?}\nreports: {:#?}",
            cell.name,
            cell.runs(),
            cell.reports()
        );
        sleep(Duration::from_millis(10)).await;
    }
}

/// Lets every task that can run now run (and time move on a little).
pub async fn settle() {
    sleep(Duration::from_millis(50)).await;
}

/// Waits until every run of `hit` has ended, then checks that each was
/// reported once with one of `reasons` and that `watch()` no longer shows
/// it.
pub async fn hit_ended(cell: &Cell, instances: &[Instance], hit: &[Run], reasons: &[&str]) {
    until(cell, "the runs hit have ended", || {
        let runs = cell.runs();
        hit.iter()
            .all(|h| runs.iter().any(|r| same(r, h) && r.end.is_some()))
    })
    .await;
    settle().await;
    let reports = cell.reports();
    for h in hit {
        let found: Vec<&Report> = reports.iter().filter(|r| reports_run(r, h)).collect();
        assert!(
            found.len() == 1,
            "{}: the term of {} epoch {} on instance {} ended with {} reports: {found:?}\nall reports: {reports:#?}",
            cell.name,
            h.key,
            h.epoch,
            h.instance,
            found.len()
        );
        assert!(
            reasons.contains(&found[0].reason),
            "{}: the term of {} epoch {} on instance {} ended as {:?}, expected one of {reasons:?}",
            cell.name,
            h.key,
            h.epoch,
            h.instance,
            found[0]
        );
        let owned = instances[h.instance].owned();
        assert!(
            owned.get(&h.key) != Some(&h.epoch),
            "{}: watch() of instance {} still shows {} epoch {} after its term ended: {owned:?}",
            cell.name,
            h.instance,
            h.key,
            h.epoch
        );
    }
}

/// Waits until every lease of `hit` has a new run, started after its hit
/// run ended.
pub async fn next_owners(cell: &Cell, hit: &[Run]) {
    until(cell, "every lease hit has a next owner", || {
        let runs = cell.runs();
        hit.iter().all(|h| {
            runs.iter()
                .any(|r| r.key == h.key && r.start > h.start && r.lease != h.lease)
        })
    })
    .await;
}

pub fn same(a: &Run, b: &Run) -> bool {
    a.instance == b.instance && a.key == b.key && a.epoch == b.epoch && a.start == b.start
}

pub fn reports_run(report: &Report, run: &Run) -> bool {
    report.instance == run.instance && report.key == run.key && report.epoch == run.epoch
}

/// Stops every instance still campaigning (cancel, then wait), and returns
/// every instance's outcome, by index (`None` for those joined already).
pub async fn stop_all(instances: &mut [Instance]) -> Vec<Option<Outcome>> {
    for i in instances.iter() {
        i.token.cancel();
    }
    let mut outcomes = Vec::new();
    for i in instances.iter_mut() {
        outcomes.push(if i.handle.is_some() {
            Some(i.join().await)
        } else {
            None
        });
    }
    settle().await;
    outcomes
}

/// The storage switch, for the scenarios.
pub fn storage(cell: &Cell, storage: Storage) {
    cell.accounts.set_storage(storage);
}

/// Stops every instance still campaigning, expects each to return
/// `Ok(())`, and makes the three checks.
pub async fn finish<M: Mode>(
    cell: &Cell,
    mut instances: Vec<Instance>,
    fault: Instant,
    hit: &[Run],
    reasons: &[&str],
) {
    let stopped = Instant::now();
    let outcomes = stop_all(&mut instances).await;
    for (i, outcome) in outcomes.iter().enumerate() {
        if let Some(outcome) = outcome {
            assert!(
                matches!(outcome, Outcome::Returned(Ok(()))),
                "{}: instance {i} ended with {outcome:?}",
                cell.name
            );
        }
    }
    super::promises::check::<M>(cell, &instances, fault, stopped, hit, reasons);
}
