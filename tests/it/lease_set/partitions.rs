//! A lease set over the in-memory store, with paused time, and over
//! Azurite: partitions are spread evenly, rebalanced when instances join and
//! leave, and no partition's task ever runs on two instances at once.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::faulty;
use crate::support::forward::{Forward, Wrap, WrapSet};
use blob_mutex::{
    azure::BlobLeaseSetStore, partitions::PartitionReport, store::Acquire, store::LeaseId,
    store::LeaseInfo, store::LeaseSetStore, store::LeaseStore, store::StampOptions,
    term::StopReason, testing::MemoryLeaseSetStore, testing::MemoryLeaseStore, BlobLeaseSet,
    CancellationToken, LeaseSetOptions, PartitionContext,
};
use blob_mutex_testkit::azurite;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// When each partition's task ran, on which instance: (partition, holder, start, end).
type Record = Arc<Mutex<Vec<(String, String, Instant, Option<Instant>)>>>;

/// Marks the end of a task's run when the task is dropped (returned or aborted).
struct Running(Record, usize);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.lock().unwrap()[self.1].3 = Some(Instant::now());
    }
}

/// Records the start of a task's run; the end is recorded when the result
/// is dropped.
fn running(ctx: &PartitionContext, record: Record) -> Running {
    let index = {
        let mut r = record.lock().unwrap();
        r.push((
            ctx.partition().to_owned(),
            ctx.holder().to_owned(),
            Instant::now(),
            None,
        ));
        r.len() - 1
    };
    Running(record, index)
}

async fn work(ctx: PartitionContext, record: Record) -> Result<(), blob_mutex::Error> {
    let _running = running(&ctx, record);
    ctx.cancelled().await;
    Ok(())
}

struct Instance {
    owned: tokio::sync::watch::Receiver<BTreeMap<String, u64>>,
    token: CancellationToken,
    handle: JoinHandle<()>,
}

fn start<S: LeaseSetStore + Clone>(
    store: &S,
    name: &str,
    partitions: &[String],
    record: &Record,
) -> Instance {
    start_with(store, name, partitions, record, LeaseSetOptions::default())
}

/// An instance's set named `name`, with jitter seeded from its name, whose
/// partitions run `task`.
fn set_with<S, F, Fut>(
    store: &S,
    name: &str,
    partitions: &[String],
    options: LeaseSetOptions,
    task: F,
) -> BlobLeaseSet<S>
where
    S: LeaseSetStore + Clone,
    F: Fn(PartitionContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), blob_mutex::Error>> + Send + 'static,
{
    let seed = name
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mutex = options.mutex().clone();
    let options = options.with_mutex(mutex.with_holder(name.to_owned()).with_jitter_seed(seed));
    BlobLeaseSet::with_store(store.clone(), partitions.to_vec(), options, task).unwrap()
}

/// Starts an instance named `name`, with jitter seeded from its name.
fn start_with<S: LeaseSetStore + Clone>(
    store: &S,
    name: &str,
    partitions: &[String],
    record: &Record,
    options: LeaseSetOptions,
) -> Instance {
    let record = record.clone();
    let set = set_with(store, name, partitions, options, move |ctx| {
        work(ctx, record.clone())
    });
    let owned = set.watch();
    let token = CancellationToken::new();
    let run = token.clone();
    let handle = tokio::spawn(async move { set.run(run).await.unwrap() });
    Instance {
        owned,
        token,
        handle,
    }
}

fn counts(instances: &[&Instance]) -> Vec<usize> {
    instances.iter().map(|i| i.owned.borrow().len()).collect()
}

/// Waits (in virtual time) until the owned counts are `want`.
async fn settle(instances: &[&Instance], want: &[usize], limit: Duration) -> Duration {
    let start = Instant::now();
    while counts(instances) != want {
        assert!(
            start.elapsed() < limit,
            "counts {:?} after {limit:?}, want {want:?}",
            counts(instances)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

/// No partition ran on two instances at once.
fn assert_no_overlap(record: &Record) {
    let now = Instant::now();
    let mut by_partition: BTreeMap<String, Vec<(Instant, Instant)>> = BTreeMap::new();
    for (p, _, start, end) in record.lock().unwrap().iter() {
        by_partition
            .entry(p.clone())
            .or_default()
            .push((*start, end.unwrap_or(now)));
    }
    for (p, mut runs) in by_partition {
        runs.sort();
        for w in runs.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "partition {p} ran twice at once: {runs:?}"
            );
        }
    }
}

fn partitions(m: usize) -> Vec<String> {
    (0..m).map(|i| format!("p{i:02}")).collect()
}

#[tokio::test(start_paused = true)]
async fn twelve_partitions_spread_over_three_then_four_instances_then_three() {
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let all = partitions(12);
    let a = start(&store, "a", &all, &record);
    let b = start(&store, "b", &all, &record);
    let c = start(&store, "c", &all, &record);
    // Cycles of 5 s, claims spread over the 5 s renew interval: a cold start
    // balances in a few cycles.
    let took = settle(&[&a, &b, &c], &[4, 4, 4], Duration::from_secs(60)).await;
    println!("3 instances balanced 12 partitions in {took:?}");

    let d = start(&store, "d", &all, &record);
    // One voluntary release per instance per cycle, drained then released.
    let took = settle(&[&a, &b, &c, &d], &[3, 3, 3, 3], Duration::from_secs(60)).await;
    println!("a 4th instance got its share in {took:?}");
    assert_no_overlap(&record);

    // b leaves gracefully: its partitions are drained, released and taken.
    b.token.cancel();
    b.handle.await.unwrap();
    let took = settle(&[&a, &c, &d], &[4, 4, 4], Duration::from_secs(60)).await;
    println!("b's partitions owned again in {took:?}");
    assert_no_overlap(&record);
    for i in [a, c, d] {
        i.token.cancel();
        i.handle.await.unwrap();
    }
    assert!(
        record.lock().unwrap().iter().all(|r| r.3.is_some()),
        "every task stopped"
    );
}

/// A join moves many partitions (two instances with 64 each → three with
/// 22, 21, 21) within three balance cycles of 5 s (± 20 %): the over-loaded
/// instances give up their whole excess in one cycle.
#[tokio::test(start_paused = true)]
async fn a_join_is_balanced_within_three_cycles_however_many_partitions_move() {
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let all = partitions(64);
    let a = start(&store, "a", &all, &record);
    let b = start(&store, "b", &all, &record);
    settle(&[&a, &b], &[32, 32], Duration::from_secs(60)).await;
    let c = start(&store, "c", &all, &record);
    let took = settle(&[&a, &b, &c], &[22, 21, 21], Duration::from_secs(18)).await;
    println!("a third instance got its 21 of 64 partitions in {took:?}");
    assert_no_overlap(&record);
    for i in [a, b, c] {
        i.token.cancel();
        i.handle.await.unwrap();
    }
}

/// With `max_releases_per_cycle` 1, each over-loaded instance gives up one
/// partition per balance cycle (5 s ± 20 %): two instances with 12 each give
/// a newcomer its 8 in four cycles or more, and no instance ends two of its
/// terms in the same cycle.
#[tokio::test(start_paused = true)]
async fn one_release_per_cycle_when_so_configured() {
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let all = partitions(24);
    let options = LeaseSetOptions::default().with_max_releases_per_cycle(1);
    let a = start_with(&store, "a", &all, &record, options.clone());
    let b = start_with(&store, "b", &all, &record, options.clone());
    settle(&[&a, &b], &[12, 12], Duration::from_secs(60)).await;
    let joined = Instant::now();
    let c = start_with(&store, "c", &all, &record, options);
    let took = settle(&[&a, &b, &c], &[8, 8, 8], Duration::from_secs(90)).await;
    println!("one release per cycle: the newcomer got its 8 of 24 partitions in {took:?}");
    for holder in ["a", "b"] {
        let mut ends: Vec<Instant> = record
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, h, start, end)| h == holder && *start < joined && end.is_some())
            .filter_map(|r| r.3)
            .collect();
        ends.sort();
        assert_eq!(ends.len(), 4, "{holder} gave up {} partitions", ends.len());
        for w in ends.windows(2) {
            assert!(
                w[1] - w[0] >= Duration::from_secs(3),
                "{holder} gave up two partitions {:?} apart: more than one in a cycle",
                w[1] - w[0]
            );
        }
    }
    assert_no_overlap(&record);
    for i in [a, b, c] {
        i.token.cancel();
        i.handle.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_crashed_instance_partitions_are_owned_again_only_after_their_leases_expired() {
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let all = partitions(6);
    let a = start(&store, "a", &all, &record);
    let b = start(&store, "b", &all, &record);
    settle(&[&a, &b], &[3, 3], Duration::from_secs(60)).await;
    let b_partitions: Vec<String> = b.owned.borrow().keys().cloned().collect();
    // A crash: the tasks stop at once, nothing is released.
    let crashed = Instant::now();
    b.handle.abort();
    let _ = b.handle.await;
    assert!(b.owned.borrow().is_empty(), "a dropped set owns nothing");
    let took = settle(&[&a], &[6], Duration::from_secs(60)).await;
    let retaken: Vec<Instant> = record
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, holder, start, _)| {
            holder == "a" && *start > crashed && b_partitions.contains(p)
        })
        .map(|r| r.2)
        .collect();
    assert_eq!(retaken.len(), 3);
    assert!(
        retaken
            .iter()
            .all(|t| *t - crashed >= Duration::from_secs(10)),
        "taken before the crashed instance's leases could expire: {:?}",
        retaken.iter().map(|t| *t - crashed).collect::<Vec<_>>()
    );
    println!("a crashed instance's partitions owned again {took:?} after the crash");
    assert_no_overlap(&record);
    a.token.cancel();
    a.handle.await.unwrap();
}

/// Real time on Azurite: the listing is one List Blobs call with metadata.
#[tokio::test]
async fn on_azurite_two_instances_share_four_partitions_and_one_takes_all_when_the_other_leaves() {
    let settings = azurite::shared().settings(&azurite::unique_container("partitions"), "set");
    let store = BlobLeaseSetStore::new(&settings).unwrap();
    let record: Record = Arc::default();
    let all = partitions(4);
    let options = LeaseSetOptions::default().with_balance_interval(Duration::from_secs(1));
    let a = start_with(&store, "a", &all, &record, options.clone());
    let b = start_with(&store, "b", &all, &record, options);
    let took = settle(&[&a, &b], &[2, 2], Duration::from_secs(30)).await;
    println!("on Azurite, 2 instances balanced 4 partitions in {took:?}");
    b.token.cancel();
    b.handle.await.unwrap();
    let took = settle(&[&a], &[4], Duration::from_secs(20)).await;
    println!("on Azurite, b's partitions were owned again {took:?} after it left");
    assert_no_overlap(&record);
    a.token.cancel();
    a.handle.await.unwrap();
}

/// A partition whose lease cannot be reached (transient errors) stays free
/// until it can; the instance's other partitions are not disturbed.
#[tokio::test(start_paused = true)]
async fn a_partition_that_cannot_be_acquired_does_not_disturb_the_others() {
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let all = partitions(4);
    store.get("partitions/p00").set_unavailable(true);
    let a = start(&store, "a", &all, &record);
    settle(&[&a], &[3], Duration::from_secs(60)).await;
    // Several cycles in which p00's acquire fails.
    tokio::time::sleep(Duration::from_secs(30)).await;
    store.get("partitions/p00").set_unavailable(false);
    settle(&[&a], &[4], Duration::from_secs(30)).await;
    let ended: Vec<String> = record
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.3.is_some())
        .map(|r| r.0.clone())
        .collect();
    assert!(
        ended.is_empty(),
        "terms ended while another partition failed: {ended:?}"
    );
    a.token.cancel();
    a.handle.await.unwrap();
}

/// Claims in flight (acquired or acquiring, not yet stamped), now and at most.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// The in-memory set with faults: partition acquires that take
/// `SLOW_ACQUIRE` (storage that has slowed down), one partition whose epoch
/// is garbled, a listing refused for lack of permission.
#[derive(Clone, Default)]
struct FaultSet {
    inner: MemoryLeaseSetStore,
    in_flight: Arc<InFlight>,
    slow: bool,
    /// Partition stamps take `SLOW_STAMP`, as the first stamp of a blob made
    /// anew does while it waits for storage's clock to pass a second.
    slow_stamp: bool,
    /// This partition's stamp answers `InvalidEpoch`.
    garbled: Option<&'static str>,
    list_refused: Arc<AtomicBool>,
}

const SLOW_ACQUIRE: Duration = Duration::from_secs(2);
const SLOW_STAMP: Duration = Duration::from_millis(1200);

struct FaultLease {
    inner: MemoryLeaseStore,
    slow: bool,
    slow_stamp: bool,
    garbled: bool,
    in_flight: Arc<InFlight>,
}

impl WrapSet for FaultSet {
    type Inner = MemoryLeaseSetStore;
    type Lease = Forward<FaultLease>;

    fn inner(&self) -> &MemoryLeaseSetStore {
        &self.inner
    }

    fn lease(&self, name: &str) -> blob_mutex::Result<Forward<FaultLease>> {
        let partition = name.strip_prefix("partitions/");
        Ok(Forward(FaultLease {
            inner: self.inner.lease(name)?,
            slow: self.slow && partition.is_some(),
            slow_stamp: self.slow_stamp && partition.is_some(),
            garbled: partition.is_some() && partition == self.garbled,
            in_flight: self.in_flight.clone(),
        }))
    }

    async fn list(&self, prefix: &str) -> blob_mutex::Result<Vec<(String, LeaseInfo)>> {
        if self.list_refused.load(Ordering::SeqCst) {
            return Err(blob_mutex::Error::Authentication {
                status: 403,
                code: "AuthorizationPermissionMismatch".into(),
                message: "list blobs was refused".into(),
            });
        }
        self.inner.list(prefix).await
    }
}

impl Wrap for FaultLease {
    type Inner = MemoryLeaseStore;

    fn inner(&self) -> &MemoryLeaseStore {
        &self.inner
    }

    async fn acquire(&self, proposed: LeaseId, duration: Duration) -> blob_mutex::Result<Acquire> {
        if !self.slow {
            return self.inner.acquire(proposed, duration).await;
        }
        let now = self.in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.in_flight.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(SLOW_ACQUIRE).await;
        let acquired = self.inner.acquire(proposed, duration).await;
        self.in_flight.now.fetch_sub(1, Ordering::SeqCst);
        acquired
    }

    async fn stamp(
        &self,
        lease: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> blob_mutex::Result<u64> {
        if self.garbled {
            return Err(blob_mutex::Error::InvalidEpoch {
                found: "not-a-number".into(),
            });
        }
        if self.slow_stamp {
            tokio::time::sleep(SLOW_STAMP).await;
        }
        self.inner.stamp(lease, holder, options).await
    }
}

/// When storage slows down, a cold start does not pile up requests: at most
/// `16` claims are in flight at once, however many partitions are free, so
/// that the member lease's and the owned partitions' renewals still get
/// through.
#[tokio::test(start_paused = true)]
async fn claims_in_flight_are_bounded_when_storage_is_slow() {
    let store = Forward(FaultSet {
        slow: true,
        ..FaultSet::default()
    });
    let record: Record = Arc::default();
    let all = partitions(100);
    let a = start(&store, "a", &all, &record);
    let took = settle(&[&a], &[100], Duration::from_secs(120)).await;
    let most = store.in_flight.most.load(Ordering::SeqCst);
    println!("100 slow claims owned in {took:?}, at most {most} in flight");
    assert!(most <= 16, "{most} claims in flight at once");
    assert!(most >= 8, "claims were not concurrent at all: {most}");
    a.token.cancel();
    a.handle.await.unwrap();
}

/// A cold start on blobs made anew is paced by the claims, not by the
/// first stamps' wait for storage's clock: a claim's slot is given back
/// once its lease is held, so 200 stamps that each wait 1.2 s overlap,
/// and every partition is owned in about the pace (200 × 5 ms) plus one
/// wait. Were the slot kept until the stamp, 16 at a time would take
/// 200 / 16 × 1.2 s = 15 s.
#[tokio::test(start_paused = true)]
async fn a_cold_start_on_new_blobs_is_not_held_back_by_their_first_stamps() {
    let store = Forward(FaultSet {
        slow_stamp: true,
        ..FaultSet::default()
    });
    let record: Record = Arc::default();
    let all = partitions(200);
    let a = start(&store, "a", &all, &record);
    let took = settle(&[&a], &[200], Duration::from_secs(60)).await;
    assert!(
        took < Duration::from_secs(5),
        "200 partitions whose first stamp waits {SLOW_STAMP:?} were owned in {took:?}"
    );
    a.token.cancel();
    a.handle.await.unwrap();
}

/// A set running in a task of its own, whose result and partition reports
/// the test reads.
struct Observed<S: LeaseSetStore> {
    set: Arc<BlobLeaseSet<S>>,
    reports: broadcast::Receiver<PartitionReport>,
    token: CancellationToken,
    handle: JoinHandle<blob_mutex::Result<()>>,
}

fn observe<S: LeaseSetStore>(set: BlobLeaseSet<S>) -> Observed<S> {
    let set = Arc::new(set);
    let reports = set.partition_reports();
    let token = CancellationToken::new();
    let (run, running) = (set.clone(), token.clone());
    let handle = tokio::spawn(async move { run.run(running).await });
    Observed {
        set,
        reports,
        token,
        handle,
    }
}

impl<S: LeaseSetStore> Observed<S> {
    /// Waits until `count` partitions are owned; returns them with their epochs.
    async fn owning(&self, count: usize, limit: Duration) -> BTreeMap<String, u64> {
        let mut owned = self.set.watch();
        let found = tokio::time::timeout(limit, owned.wait_for(|o| o.len() == count))
            .await
            .unwrap_or_else(|_| panic!("{count} partitions not owned within {limit:?}"))
            .unwrap()
            .clone();
        found
    }

    /// The partition reports received so far.
    fn reports(&mut self) -> Vec<PartitionReport> {
        std::iter::from_fn(|| self.reports.try_recv().ok()).collect()
    }
}

/// A frozen process (VM paused, SIGSTOP) wakes up long after every lease it
/// held expired: its membership term ends at once, and each partition term
/// it had is still reported, once, with reason `deadline`, even though the
/// membership's stop aborts the partition terms.
#[tokio::test(start_paused = true)]
async fn a_frozen_instance_reports_every_partition_term_it_lost() {
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let rec = record.clone();
    let set = set_with(
        &store,
        "a",
        &partitions(4),
        LeaseSetOptions::default(),
        move |ctx| work(ctx, rec.clone()),
    );
    let mut a = observe(set);
    let owned = a.owning(4, Duration::from_secs(60)).await;
    // The freeze: time jumps past every deadline while nothing of the
    // instance runs.
    tokio::time::advance(Duration::from_secs(45)).await;
    let mut reports = Vec::new();
    for _ in 0..100 {
        reports.extend(a.reports());
        if owned.iter().all(|(p, e)| {
            reports
                .iter()
                .any(|r| &r.partition == p && r.report.epoch == *e)
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (partition, epoch) in &owned {
        let ends: Vec<_> = reports
            .iter()
            .filter(|r| &r.partition == partition && r.report.epoch == *epoch)
            .collect();
        assert_eq!(
            ends.len(),
            1,
            "partition {partition} epoch {epoch}: reports {reports:?}"
        );
        assert_eq!(ends[0].report.reason, StopReason::Deadline, "{ends:?}");
    }
    assert_no_overlap(&record);
    a.token.cancel();
    a.handle.await.unwrap().unwrap();
}

/// A partition task that can be neither stopped nor aborted (it blocks its
/// thread) after its lease was broken: the set's run ends with
/// `TaskNotStopped` once its other partitions were drained, the partition
/// is never claimed again while the task runs, and a second run refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_partition_task_ends_the_run_and_is_never_claimed_twice() {
    const BLOCK: Duration = Duration::from_secs(4);
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let rec = record.clone();
    let mutex = LeaseSetOptions::default()
        .mutex()
        .clone()
        .with_lease_duration(Duration::from_secs(15))
        .with_renew_interval(Duration::from_millis(500))
        .with_stop_grace(Duration::from_millis(200))
        .with_acquire_retry(Duration::from_millis(100));
    let options = LeaseSetOptions::default()
        .with_mutex(mutex)
        .with_balance_interval(Duration::from_millis(200));
    let set = set_with(&store, "a", &partitions(2), options, move |ctx| {
        let rec = rec.clone();
        async move {
            let blocks = ctx.partition() == "p00";
            let token = ctx.token().clone();
            let worked = work(ctx, rec);
            worked.await?;
            if blocks && token.is_cancelled() {
                // Neither cancellation nor abort can stop this; the rest
                // of the runtime goes on on other threads.
                tokio::task::block_in_place(|| std::thread::sleep(BLOCK));
            }
            Ok(())
        }
    });
    let a = observe(set);
    a.owning(2, Duration::from_secs(10)).await;
    let broken = std::time::Instant::now();
    store.get("partitions/p00").break_lease();
    let ended = tokio::time::timeout(Duration::from_secs(10), a.handle)
        .await
        .expect("the run ends")
        .unwrap();
    assert!(
        matches!(ended, Err(blob_mutex::Error::TaskNotStopped)),
        "{ended:?}"
    );
    // While the task still blocks, a new run claims nothing.
    let again = a.set.run(CancellationToken::new()).await;
    assert!(
        matches!(again, Err(blob_mutex::Error::TaskNotStopped)),
        "{again:?}"
    );
    assert!(broken.elapsed() < BLOCK, "the test ran too slowly to tell");
    let runs = record.lock().unwrap().clone();
    let p00 = runs.iter().filter(|r| r.0 == "p00").count();
    assert_eq!(p00, 1, "p00 claimed again: {runs:?}");
    assert_no_overlap(&record);
}

/// `heartbeat_timeout` watches the partition tasks; the balancer that runs
/// the membership term never beats and must not be stepped down for it.
#[tokio::test(start_paused = true)]
async fn a_heartbeat_timeout_watches_partition_tasks_not_the_balancer() {
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let rec = record.clone();
    let mutex = LeaseSetOptions::default()
        .mutex()
        .clone()
        .with_heartbeat_timeout(Duration::from_secs(2));
    let options = LeaseSetOptions::default().with_mutex(mutex);
    let set = set_with(&store, "a", &partitions(4), options, move |ctx| {
        let rec = rec.clone();
        async move {
            let beats = ctx.heartbeat().clone();
            let beating = async {
                loop {
                    beats.beat();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            };
            tokio::select! {
                r = work(ctx, rec) => r,
                () = beating => Ok(()),
            }
        }
    });
    let a = observe(set);
    a.owning(4, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    let terms = record.lock().unwrap().len();
    assert_eq!(terms, 4, "{terms} partition terms in 300 s");
    a.token.cancel();
    a.handle.await.unwrap().unwrap();
}

/// One partition whose epoch cannot be increased is skipped, with backoff;
/// the healthy partitions keep their terms.
#[tokio::test(start_paused = true)]
async fn a_partition_that_cannot_be_led_is_skipped_and_the_others_keep_their_terms() {
    let store = Forward(FaultSet {
        garbled: Some("p01"),
        ..FaultSet::default()
    });
    let record: Record = Arc::default();
    let a = start(&store, "a", &partitions(4), &record);
    settle(&[&a], &[3], Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    let runs = record.lock().unwrap().clone();
    assert_eq!(runs.len(), 3, "healthy partitions restarted: {runs:?}");
    assert!(
        runs.iter().all(|r| r.0 != "p01" && r.3.is_none()),
        "{runs:?}"
    );
    a.token.cancel();
    a.handle.await.unwrap();
}

/// A listing refused for lack of permission ends the run with that error
/// (after draining), as an authentication error ends the mutex's campaign.
#[tokio::test(start_paused = true)]
async fn a_refused_listing_ends_the_run_with_the_error() {
    let store = Forward(FaultSet::default());
    let record: Record = Arc::default();
    let rec = record.clone();
    let set = set_with(
        &store,
        "a",
        &partitions(2),
        LeaseSetOptions::default(),
        move |ctx| work(ctx, rec.clone()),
    );
    let a = observe(set);
    a.owning(2, Duration::from_secs(60)).await;
    store.list_refused.store(true, Ordering::SeqCst);
    let ended = tokio::time::timeout(Duration::from_secs(60), a.handle)
        .await
        .expect("the run ends")
        .unwrap();
    assert!(
        matches!(
            ended,
            Err(blob_mutex::Error::Authentication { status: 403, .. })
        ),
        "{ended:?}"
    );
    // Every partition was drained and released first.
    assert!(record.lock().unwrap().iter().all(|r| r.3.is_some()));
    assert!(!store.inner.get("partitions/p00").is_held());
}

/// A request timeout as long as the lease, on storage that takes 0.6 s a
/// call: the membership's grace still leaves its first renewal the time to
/// answer before the cancel point, so nothing churns.
#[tokio::test(start_paused = true)]
async fn a_request_timeout_as_long_as_the_lease_keeps_membership_on_slow_storage() {
    let accounts = faulty::Accounts::new(1);
    accounts.set_storage(faulty::Storage::Slow(Duration::from_millis(300)));
    let store = accounts.set(0, "slow");
    let record: Record = Arc::default();
    let rec = record.clone();
    let defaults = LeaseSetOptions::default();
    let mutex = defaults
        .mutex()
        .clone()
        .with_request_timeout(defaults.mutex().lease_duration());
    let set = set_with(
        &store,
        "a",
        &partitions(4),
        defaults.with_mutex(mutex),
        move |ctx| work(ctx, rec.clone()),
    );
    let a = observe(set);
    a.owning(4, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    let terms = record.lock().unwrap().len();
    assert_eq!(terms, 4, "{terms} partition terms in 300 s");
    a.token.cancel();
    a.handle.await.unwrap().unwrap();
}

/// Two instances crash one after the other, the second before the first
/// one's leases expire. The first one's partitions are free while the
/// second still counts as a member (its member blob is leased), so the
/// shares over three members leave one partition to nobody: it is owned
/// again within the lease and a few cycles of its crash all the same, by
/// an instance already at its share.
#[tokio::test(start_paused = true)]
async fn partitions_of_instances_crashed_one_after_another_are_owned_again_within_the_bound() {
    let store = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let all = partitions(12);
    let cycle = Duration::from_secs(1);
    let options = LeaseSetOptions::default().with_balance_interval(cycle);
    let lease = options.mutex().lease_duration();
    let names = ["a", "b", "c", "d"];
    let instances: Vec<Instance> = names
        .iter()
        .map(|n| start_with(&store, n, &all, &record, options.clone()))
        .collect();
    let refs: Vec<&Instance> = instances.iter().collect();
    settle(&refs, &[3, 3, 3, 3], Duration::from_secs(60)).await;
    let mut crashes = Vec::new();
    for victim in [2, 3] {
        let owned: Vec<String> = instances[victim].owned.borrow().keys().cloned().collect();
        instances[victim].handle.abort();
        crashes.push((Instant::now(), owned));
        tokio::time::sleep(lease / 3).await;
    }
    settle(&refs[..2], &[6, 6], lease * 3).await;
    // The lease, the grace of two cycles after which a free partition is
    // anyone's, and the cycle that claims it, each jittered by up to 20 %.
    let bound = lease + cycle * 4;
    for (crashed, owned) in &crashes {
        for partition in owned {
            let again = record
                .lock()
                .unwrap()
                .iter()
                .filter(|(p, holder, start, _)| {
                    p == partition && (holder == "a" || holder == "b") && start > crashed
                })
                .map(|r| r.2 - *crashed)
                .min()
                .unwrap();
            assert!(
                again <= bound,
                "partition {partition} owned again {again:?} after its owner crashed (bound {bound:?})"
            );
        }
    }
    assert_no_overlap(&record);
    for i in &instances[..2] {
        i.token.cancel();
    }
    for i in instances {
        let _ = i.handle.await;
    }
}

/// The in-memory set, counting its listings: of the whole set, and of the
/// members only.
#[derive(Clone)]
struct Counting {
    inner: MemoryLeaseSetStore,
    whole: Arc<AtomicUsize>,
    members: Arc<AtomicUsize>,
}

impl Counting {
    fn over(inner: &MemoryLeaseSetStore) -> Forward<Self> {
        Forward(Counting {
            inner: inner.clone(),
            whole: Arc::default(),
            members: Arc::default(),
        })
    }

    /// Listings of the whole set and of the members so far.
    fn listed(&self) -> (usize, usize) {
        (
            self.whole.load(Ordering::SeqCst),
            self.members.load(Ordering::SeqCst),
        )
    }
}

impl WrapSet for Counting {
    type Inner = MemoryLeaseSetStore;
    type Lease = MemoryLeaseStore;

    fn inner(&self) -> &MemoryLeaseSetStore {
        &self.inner
    }

    fn lease(&self, name: &str) -> blob_mutex::Result<MemoryLeaseStore> {
        self.inner.lease(name)
    }

    async fn list(&self, prefix: &str) -> blob_mutex::Result<Vec<(String, LeaseInfo)>> {
        match prefix {
            "" => self.whole.fetch_add(1, Ordering::SeqCst),
            "members/" => self.members.fetch_add(1, Ordering::SeqCst),
            other => panic!("a listing of {other:?}"),
        };
        self.inner.list(prefix).await
    }
}

/// In a settled set (nobody joins or leaves, every partition owned by a
/// live member at its share), a cycle lists the members only, and the
/// whole set at most every fourth cycle: over 60 s (twelve cycles of 5 s,
/// jittered) each of two instances with 32 of 64 partitions lists the whole
/// set at most 60 / 5 / 4 + 1 times.
#[tokio::test(start_paused = true)]
async fn a_settled_set_lists_the_whole_set_only_every_fourth_cycle() {
    let memory = MemoryLeaseSetStore::new();
    let stores = [Counting::over(&memory), Counting::over(&memory)];
    let record: Record = Arc::default();
    let all = partitions(64);
    let a = start(&stores[0], "a", &all, &record);
    let b = start(&stores[1], "b", &all, &record);
    settle(&[&a, &b], &[32, 32], Duration::from_secs(60)).await;
    // The cycles that follow the last claims still list the whole set.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before = stores.each_ref().map(|store| store.listed());
    tokio::time::sleep(Duration::from_secs(60)).await;
    for (name, (store, (whole0, members0))) in ["a", "b"].iter().zip(stores.iter().zip(before)) {
        let (whole, members) = store.listed();
        let (whole, members) = (whole - whole0, members - members0);
        println!(
            "{name} listed the whole set {whole} times and its members {members} times in 60 s"
        );
        assert!(
            whole <= 60 / 5 / 4 + 1,
            "{name} listed the whole set {whole} times in 60 s ({members} listings of its members)"
        );
        assert!(
            whole + members >= 10,
            "{name} listed {whole} + {members} times in 60 s"
        );
    }
    assert_eq!(counts(&[&a, &b]), [32, 32]);
    assert_eq!(record.lock().unwrap().len(), 64, "a partition moved");
    for i in [a, b] {
        i.token.cancel();
        i.handle.await.unwrap();
    }
}

/// Runs until cancelled, or fails once its partition is named in `fail`
/// (and takes the name out).
async fn work_until_failed(
    ctx: PartitionContext,
    record: Record,
    fail: Arc<Mutex<Vec<String>>>,
) -> Result<(), blob_mutex::Error> {
    let _running = running(&ctx, record);
    loop {
        {
            let mut fail = fail.lock().unwrap();
            if let Some(i) = fail.iter().position(|p| p == ctx.partition()) {
                fail.remove(i);
                return Err(blob_mutex::Error::LeaseLost("failed as told".into()));
            }
        }
        tokio::select! {
            _ = ctx.cancelled() => return Ok(()),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// How a partition's term ends by itself in the test below.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// Its lease is broken, as an operator would.
    Broken,
    /// Its task returns an error.
    Failed,
}

/// In a settled set of two instances, one partition's term ends by itself;
/// returns how long after that end the partition was owned again.
async fn owned_again_after(ending: Ending) -> Duration {
    let memory = MemoryLeaseSetStore::new();
    let record: Record = Arc::default();
    let fail: Arc<Mutex<Vec<String>>> = Arc::default();
    let all = partitions(8);
    let instances: Vec<Instance> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let (record, fail) = (record.clone(), fail.clone());
            let set = set_with(
                &memory,
                name,
                &all,
                LeaseSetOptions::default(),
                move |ctx| work_until_failed(ctx, record.clone(), fail.clone()),
            );
            let owned = set.watch();
            let token = CancellationToken::new();
            let run = token.clone();
            let handle = tokio::spawn(async move { set.run(run).await.unwrap() });
            Instance {
                owned,
                token,
                handle,
            }
        })
        .collect();
    let refs: Vec<&Instance> = instances.iter().collect();
    settle(&refs, &[4, 4], Duration::from_secs(60)).await;
    // Settled for a few cycles: the members only are listed.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let partition = instances[0].owned.borrow().keys().next().unwrap().clone();
    match ending {
        Ending::Broken => memory.get(&format!("partitions/{partition}")).break_lease(),
        Ending::Failed => fail.lock().unwrap().push(partition.clone()),
    }
    let ended = loop {
        let end = record
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.0 == partition)
            .and_then(|r| r.3);
        if let Some(end) = end {
            break end;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let again = loop {
        let start = record
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.0 == partition && r.2 >= ended)
            .map(|r| r.2);
        if let Some(start) = start {
            break start;
        }
        assert!(
            ended.elapsed() < Duration::from_secs(120),
            "{partition} not owned again in 120 s after its term ended ({ending:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    settle(&refs, &[4, 4], Duration::from_secs(60)).await;
    assert_no_overlap(&record);
    for i in instances {
        i.token.cancel();
        i.handle.await.unwrap();
    }
    again - ended
}

/// A partition whose term ends by itself on one instance of a settled set
/// (its lease broken, or its task failing) is owned again within
/// `FULL_LISTING_EVERY` (4) + 2 cycles of 5 s, jittered by up to 20 %.
#[tokio::test(start_paused = true)]
async fn a_partition_whose_term_ends_by_itself_in_a_settled_set_is_owned_again_within_six_cycles() {
    let bound = Duration::from_secs(5) * 6 * 6 / 5;
    for ending in [Ending::Broken, Ending::Failed] {
        let took = owned_again_after(ending).await;
        println!("{ending:?}: owned again {took:?} after its term ended");
        assert!(
            took <= bound,
            "{ending:?}: owned again {took:?} after its term ended (bound {bound:?})"
        );
    }
}
