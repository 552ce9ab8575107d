//! A lease set over the in-memory store, with paused time, and over
//! Azurite: partitions are spread evenly, rebalanced when instances join and
//! leave, and no partition's task ever runs on two instances at once.

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    Acquire, BlobLeaseSet, BlobLeaseSetStore, CancellationToken, LeaseId, LeaseInfo,
    LeaseSetOptions, LeaseSetStore, LeaseStore, MemoryLeaseSetStore, MemoryLeaseStore,
    PartitionContext,
};
use support::azurite;
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

async fn work(ctx: PartitionContext, record: Record) -> Result<(), blob_mutex::Error> {
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
    let _running = Running(record, index);
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

/// Starts an instance named `name`, with jitter seeded from its name.
fn start_with<S: LeaseSetStore + Clone>(
    store: &S,
    name: &str,
    partitions: &[String],
    record: &Record,
    options: LeaseSetOptions,
) -> Instance {
    let seed = name
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mutex = options.mutex.clone();
    let options = options.with_mutex(mutex.with_holder(name.to_owned()).with_jitter_seed(seed));
    let record = record.clone();
    let set = BlobLeaseSet::with_store(store.clone(), partitions.to_vec(), options, move |ctx| {
        work(ctx, record.clone())
    })
    .unwrap();
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
    // A crash: the tasks stop at once, nothing is released.
    let crashed = Instant::now();
    b.handle.abort();
    let _ = b.handle.await;
    let b_partitions: Vec<String> = b.owned.borrow().keys().cloned().collect();
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

/// The in-memory set, with partition acquires that take `SLOW_ACQUIRE`:
/// storage that has slowed down.
#[derive(Clone)]
struct SlowSet {
    inner: MemoryLeaseSetStore,
    in_flight: Arc<InFlight>,
}

const SLOW_ACQUIRE: Duration = Duration::from_secs(2);

struct SlowLease {
    inner: MemoryLeaseStore,
    slow: bool,
    in_flight: Arc<InFlight>,
}

impl LeaseSetStore for SlowSet {
    type Lease = SlowLease;

    fn lease(&self, name: &str) -> blob_mutex::Result<SlowLease> {
        Ok(SlowLease {
            inner: self.inner.lease(name)?,
            slow: name.starts_with("partitions/"),
            in_flight: self.in_flight.clone(),
        })
    }

    fn list(
        &self,
        prefix: &str,
    ) -> impl Future<Output = blob_mutex::Result<Vec<(String, LeaseInfo)>>> + Send {
        self.inner.list(prefix)
    }
}

impl LeaseStore for SlowLease {
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

    fn renew(&self, lease: LeaseId) -> impl Future<Output = blob_mutex::Result<()>> + Send {
        self.inner.renew(lease)
    }

    fn release(&self, lease: LeaseId) -> impl Future<Output = blob_mutex::Result<()>> + Send {
        self.inner.release(lease)
    }

    fn stamp(
        &self,
        lease: LeaseId,
        holder: &str,
    ) -> impl Future<Output = blob_mutex::Result<u64>> + Send {
        self.inner.stamp(lease, holder)
    }

    fn inspect(&self) -> impl Future<Output = blob_mutex::Result<Option<LeaseInfo>>> + Send {
        self.inner.inspect()
    }

    fn name(&self) -> String {
        self.inner.name()
    }
}

/// When storage slows down, a cold start does not pile up requests: at most
/// `16` claims are in flight at once, however many partitions are free, so
/// that the member lease's and the owned partitions' renewals still get
/// through.
#[tokio::test(start_paused = true)]
async fn claims_in_flight_are_bounded_when_storage_is_slow() {
    let store = SlowSet {
        inner: MemoryLeaseSetStore::new(),
        in_flight: Arc::default(),
    };
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
