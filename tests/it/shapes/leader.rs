//! Who leads, and where, over the in-memory stores with paused time: every
//! follower's `leader()` watch names a new leader within one poll, never a
//! leader whose lease is gone past that bound, costs nothing while nobody
//! watches and one inspection per renew interval otherwise; a lease set
//! lists every partition's owner with what it advertised, on one store and
//! on a quorum; a planned handover's successor is named within a poll; a
//! quorum names the leader its majority carries; bad values and stores
//! that cannot keep them are refused.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    quorum::QuorumLeaseSetStore, quorum::QuorumLeaseStore, store::LeaseInfo, store::LeaseStore,
    term::Leader, testing::MemoryLeaseSetStore, testing::MemoryLeaseStore, BlobDistributedMutex,
    BlobLeaseSet, CancellationToken, Error, LeaderContext, LeaseSetOptions, MutexOptions,
};
use owners::owners_are_listed;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::forward::{Forward, Wrap};

// Only this part of the kit: the rest needs Azurite.
#[allow(unreachable_pub)]
use blob_mutex_testkit::owners;

/// The set's default balance interval, and how long its instances may take
/// to list every owner (paused time).
const SET_BALANCE: Duration = Duration::from_secs(5);
const SET_LIMIT: Duration = Duration::from_secs(90);

/// The in-memory lease, counting inspections; `advertises` says whether it
/// keeps what a stamp advertises.
#[derive(Clone)]
struct Counting {
    inner: MemoryLeaseStore,
    inspections: Arc<AtomicUsize>,
    advertises: bool,
}

impl Counting {
    fn new(advertises: bool) -> Forward<Self> {
        Forward(Counting {
            inner: MemoryLeaseStore::new("leader"),
            inspections: Arc::default(),
            advertises,
        })
    }
}

impl Wrap for Counting {
    type Inner = MemoryLeaseStore;
    fn inner(&self) -> &MemoryLeaseStore {
        &self.inner
    }
    fn supports_advertised(&self) -> bool {
        self.advertises
    }
    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>, Error>> + Send {
        self.inspections.fetch_add(1, Ordering::SeqCst);
        self.inner.inspect()
    }
}

/// Options of instance `n`: default timing, advertising `n:80`.
fn options(n: &str, seed: u64) -> MutexOptions {
    MutexOptions::default()
        .with_holder(n.to_owned())
        .with_advertised(format!("{n}:80"))
        .with_jitter_seed(seed)
}

/// A task that leads until its token is cancelled.
async fn lead(ctx: LeaderContext) -> Result<(), Error> {
    ctx.cancelled().await;
    Ok(())
}

/// Every value a watch showed, with when.
type Seen = Arc<Mutex<Vec<(Instant, Option<Leader>)>>>;

fn record(mut watch: watch::Receiver<Option<Leader>>) -> Seen {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    log.lock()
        .unwrap()
        .push((Instant::now(), watch.borrow_and_update().clone()));
    tokio::spawn(async move {
        while watch.changed().await.is_ok() {
            let value = watch.borrow_and_update().clone();
            log.lock().unwrap().push((Instant::now(), value));
        }
    });
    seen
}

/// The value shown at `at` (the last change at or before it).
fn shown_at(seen: &Seen, at: Instant) -> Option<Leader> {
    seen.lock()
        .unwrap()
        .iter()
        .rev()
        .find(|(when, _)| *when <= at)
        .and_then(|(_, value)| value.clone())
}

struct Instance {
    mutex: Arc<BlobDistributedMutex<Forward<Counting>>>,
    token: CancellationToken,
    run: JoinHandle<Result<(), Error>>,
    seen: Seen,
}

fn start(store: &Forward<Counting>, name: &str, seed: u64) -> Instance {
    let mutex = BlobDistributedMutex::with_store(store.clone(), options(name, seed), lead).unwrap();
    let mutex = Arc::new(mutex);
    let shown = record(mutex.leader());
    let token = CancellationToken::new();
    let (m, t) = (mutex.clone(), token.clone());
    let run = tokio::spawn(async move { m.run_task_when_mutex_acquired(t).await });
    Instance {
        mutex,
        token,
        run,
        seen: shown,
    }
}

/// Waits until every instance's watch names `holder`'s term, in paused
/// time; returns when, and that term's leader as shown.
async fn all_show(instances: &[&Instance], holder: &str, limit: Duration) -> (Instant, Leader) {
    let until = Instant::now() + limit;
    loop {
        let now = Instant::now();
        let shown: Vec<Option<Leader>> = instances
            .iter()
            .map(|i| i.mutex.leader().borrow().clone())
            .collect();
        let term = |s: &Option<Leader>| {
            s.as_ref()
                .map(|l| (l.holder.clone(), l.epoch, l.advertised.clone()))
        };
        if let Some(Some(first)) = shown.first() {
            if first.holder == holder && shown.iter().all(|s| term(s) == term(&shown[0])) {
                return (now, first.clone());
            }
        }
        assert!(
            now < until,
            "not every watch named {holder} within {limit:?}: {shown:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The follower's bound with the default timing: one poll (a renew
/// interval, 5 s) after the first acquire attempt that finds the new term
/// (an acquire retry with jitter, 1.2 s), plus the memory store's instant
/// answers and the 50 ms of the check's own pace.
const POLL_BOUND: Duration = Duration::from_millis(6_300);

#[tokio::test(start_paused = true)]
async fn every_follower_names_a_new_leader_within_one_poll_and_never_a_gone_one() {
    let store = Counting::new(true);
    let a = start(&store, "a", 1);
    // a leads before the others start: the lease is free for it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = start(&store, "b", 2);
    let c = start(&store, "c", 3);
    let (_, first) = all_show(&[&a, &b, &c], "a", POLL_BOUND).await;
    assert_eq!(first.advertised.as_deref(), Some("a:80"));
    assert!(first.since.is_some());

    // a steps down cleanly: its lease is released at once.
    a.token.cancel();
    a.run.await.unwrap().unwrap();
    let released = Instant::now();
    assert_eq!(*a.mutex.leader().borrow(), None, "a no longer leads");
    let next = tokio::time::timeout(POLL_BOUND, async {
        loop {
            if let Some(l) = b
                .mutex
                .leader()
                .borrow()
                .clone()
                .filter(|l| l.holder != "a")
            {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("b names the next leader within one poll");
    assert!(next.epoch > first.epoch);
    let (seen_at, second) = all_show(&[&b, &c], &next.holder, POLL_BOUND).await;
    assert!(seen_at - released <= POLL_BOUND, "{:?}", seen_at - released);
    assert_eq!(second.advertised, Some(format!("{}:80", second.holder)));

    // The new leader crashes: its lease stays until it expires.
    let (leader, follower) = if second.holder == "b" { (b, c) } else { (c, b) };
    leader.run.abort();
    let crashed = Instant::now();
    let held_until = crashed + Duration::from_secs(15);
    // It still holds the lease: naming it is right, until the lease is gone.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        follower.mutex.leader().borrow().as_ref().map(|l| &l.holder),
        Some(&second.holder)
    );
    let (_, third) = all_show(
        &[&follower],
        follower.mutex.holder(),
        Duration::from_secs(15),
    )
    .await;
    assert!(third.epoch > second.epoch);
    // Never the crashed leader once its lease was gone and one poll passed.
    let after = held_until + POLL_BOUND;
    let late: Vec<_> = follower
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(when, value)| {
            *when >= after && value.as_ref().is_some_and(|l| l.holder == second.holder)
        })
        .cloned()
        .collect();
    assert!(
        late.is_empty(),
        "the gone leader shown after its lease: {late:?}"
    );
    assert!(shown_at(&follower.seen, after).is_none_or(|l| l.holder != second.holder));
    follower.token.cancel();
    follower.run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn nobody_watching_costs_nothing_and_a_watcher_one_inspection_per_renew_interval() {
    let store = Counting::new(true);
    let leader = start(&store, "a", 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A follower nobody watches: `start` records, so build this one by hand.
    let mutex =
        Arc::new(BlobDistributedMutex::with_store(store.clone(), options("b", 2), lead).unwrap());
    let token = CancellationToken::new();
    let (m, t) = (mutex.clone(), token.clone());
    // The leader's own recorder does not poll: a leader never inspects.
    let run = tokio::spawn(async move { m.run_task_when_mutex_acquired(t).await });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        store.inspections.load(Ordering::SeqCst),
        0,
        "nobody watches b"
    );

    let watch = mutex.leader();
    let before = store.inspections.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let polls = store.inspections.load(Ordering::SeqCst) - before;
    // Due every 5 s, sent at the first held attempt after that (attempts
    // 0.8 to 1.2 s apart): 60 s hold 9 to 12 polls, and the first at once.
    assert!((9..=13).contains(&polls), "{polls} inspections in 60 s");
    assert_eq!(
        watch.borrow().as_ref().map(|l| l.holder.as_str()),
        Some("a")
    );

    drop(watch);
    let before = store.inspections.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        store.inspections.load(Ordering::SeqCst),
        before,
        "the watcher left"
    );
    token.cancel();
    run.await.unwrap().unwrap();
    leader.token.cancel();
    leader.run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_set_lists_each_partitions_owner_with_what_it_advertised() {
    let store = MemoryLeaseSetStore::new();
    owners_are_listed(|| store.clone(), 6, SET_BALANCE, SET_LIMIT).await;
}

#[tokio::test(start_paused = true)]
async fn a_quorum_lease_set_lists_each_partitions_owner_with_what_it_advertised() {
    let accounts: Vec<MemoryLeaseSetStore> = (0..3).map(|_| MemoryLeaseSetStore::new()).collect();
    let store = || {
        let labelled = accounts
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("account-{i}"), a.clone()))
            .collect();
        QuorumLeaseSetStore::with_labels(labelled).unwrap()
    };
    owners_are_listed(store, 6, SET_BALANCE, SET_LIMIT).await;
}

#[tokio::test(start_paused = true)]
async fn after_a_planned_handover_followers_name_the_successor_within_a_poll() {
    let store = MemoryLeaseStore::new("handover");
    let mutex = |name: &str, priority: i64| {
        let options = options(name, priority.unsigned_abs()).with_priority(priority);
        Arc::new(BlobDistributedMutex::with_store(store.clone(), options, lead).unwrap())
    };
    let start = |mutex: &Arc<BlobDistributedMutex<MemoryLeaseStore>>| {
        let (m, token) = (mutex.clone(), CancellationToken::new());
        let t = token.clone();
        (
            token,
            tokio::spawn(async move { m.run_task_when_mutex_acquired(t).await }),
        )
    };
    let (a, c) = (mutex("a", 0), mutex("c", 0));
    let (a_watch, c_watch) = (a.leader(), c.leader());
    let runs = vec![start(&a)];
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut runs = runs;
    runs.push(start(&c));
    let mut c_sees = c_watch.clone();
    let first = tokio::time::timeout(POLL_BOUND, c_sees.wait_for(Option::is_some))
        .await
        .expect("c names a")
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(first.holder, "a");
    // b has a higher priority: a drains and hands the lease over to it.
    let b = mutex("b", 1);
    let mut b_watch = b.leader();
    runs.push(start(&b));
    let led = tokio::time::timeout(
        Duration::from_secs(30),
        b_watch.wait_for(|l| l.as_ref().is_some_and(|l| l.holder == "b")),
    )
    .await
    .expect("b leads after the handover")
    .unwrap()
    .clone()
    .unwrap();
    let handed = Instant::now();
    assert!(led.epoch > first.epoch);
    for (name, mut watch) in [("a", a_watch), ("c", c_watch)] {
        let seen = tokio::time::timeout(
            POLL_BOUND,
            watch.wait_for(|l| l.as_ref().is_some_and(|l| l.holder == "b")),
        )
        .await
        .unwrap_or_else(|_| panic!("{name} names b within a poll of the handover"))
        .unwrap()
        .clone()
        .unwrap();
        assert_eq!(
            (seen.epoch, seen.advertised.as_deref()),
            (led.epoch, Some("b:80"))
        );
    }
    assert!(handed.elapsed() <= POLL_BOUND);
    for (token, run) in runs {
        token.cancel();
        run.await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_quorum_names_the_leader_its_majority_carries_with_an_account_down() {
    let accounts: Vec<MemoryLeaseStore> = (0..3)
        .map(|i| MemoryLeaseStore::new(format!("account-{i}")))
        .collect();
    let quorum = QuorumLeaseStore::new(accounts.clone()).unwrap();
    let mut instances = Vec::new();
    for (seed, name) in ["a", "b"].into_iter().enumerate() {
        let options = options(name, seed as u64);
        let mutex =
            Arc::new(BlobDistributedMutex::with_store(quorum.clone(), options, lead).unwrap());
        let token = CancellationToken::new();
        let (m, t) = (mutex.clone(), token.clone());
        let run = tokio::spawn(async move { m.run_task_when_mutex_acquired(t).await });
        instances.push((mutex, token, run));
        // The first term is stamped on every account; then one goes down.
        let mut leads = instances[0].0.leader();
        leads.wait_for(Option::is_some).await.unwrap();
        accounts[2].set_unavailable(true);
    }
    let watch = instances[1].0.leader();
    let shown = tokio::time::timeout(POLL_BOUND, async {
        let mut watch = watch.clone();
        let shown = watch.wait_for(Option::is_some).await.unwrap().clone();
        shown.unwrap()
    })
    .await
    .expect("the follower names the leader");
    assert_eq!(shown.holder, "a");
    assert_eq!(shown.advertised.as_deref(), Some("a:80"));
    assert_eq!(shown.epoch, accounts[0].epoch().max(accounts[1].epoch()));
    for (_, token, run) in instances {
        token.cancel();
        run.await.unwrap().unwrap();
    }
    assert_eq!(*watch.borrow(), None, "the campaign has ended");
}

#[test]
fn bad_values_and_stores_that_cannot_keep_them_are_refused() {
    let field = |r: Result<BlobDistributedMutex<Forward<Counting>>, Error>| match r {
        Err(Error::InvalidOption { field, .. }) => field,
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("accepted"),
    };
    for bad in [
        String::new(),
        "x".repeat(257),
        "tab\there".to_owned(),
        " x".to_owned(),
    ] {
        let options = MutexOptions::default().with_advertised(bad);
        assert_eq!(
            field(BlobDistributedMutex::with_store(
                Counting::new(true),
                options,
                lead
            )),
            "advertised"
        );
    }
    let options = MutexOptions::default().with_advertised("10.0.0.7:8080".to_owned());
    match BlobDistributedMutex::with_store(Counting::new(false), options, lead) {
        Err(Error::Unsupported { operation }) => assert!(operation.contains("advertised")),
        other => panic!("{other:?}"),
    }
    let set = LeaseSetOptions::default().with_mutex(
        LeaseSetOptions::default()
            .mutex()
            .clone()
            .with_advertised("é".to_owned()),
    );
    match BlobLeaseSet::with_store(MemoryLeaseSetStore::new(), ["p"], set, |_ctx| async {
        Ok::<(), Error>(())
    }) {
        Err(Error::InvalidOption { field, .. }) => assert_eq!(field, "advertised"),
        other => panic!("{:?}", other.err()),
    }
}
