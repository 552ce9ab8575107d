//! Planned handover to a preferred successor, over the in-memory store with
//! paused time: a leader hands the lease over (drain, then Change Lease) to
//! a live candidate with a strictly higher priority, exactly once; equal
//! priorities never hand over; a candidate that vanished leaves the lease
//! to expire; at every instant at most one task runs, and epochs increase.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::forward::{Forward, Wrap};
use blob_mutex::{
    store::Acquire, store::Candidate, store::LeaseId, store::LeaseStore, term::StopReason,
    term::TermReport, testing::MemoryLeaseStore, BlobDistributedMutex, CancellationToken, Error,
    LeaderContext, MutexOptions,
};
use tokio::sync::{broadcast, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

/// Each term: (holder, epoch, start, end).
type Record = Arc<Mutex<Vec<(String, u64, Instant, Option<Instant>)>>>;

/// Marks the end of a term's task when it is dropped (returned or aborted).
struct Running(Record, usize);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.lock().unwrap()[self.1].3 = Some(Instant::now());
    }
}

/// The lease store, counting the calls that candidates cost.
#[derive(Clone)]
struct Counting {
    inner: MemoryLeaseStore,
    listings: Arc<AtomicUsize>,
    adverts: Arc<AtomicUsize>,
    changes: Arc<AtomicUsize>,
    supports: bool,
    /// How long a record's advertise takes to reach the store: it lands
    /// then even if its caller stopped waiting, as a request already sent.
    advert_delay: Arc<Mutex<Duration>>,
    /// Told when an advertise is sent.
    advert_sent: Arc<Notify>,
}

impl Counting {
    fn new(supports: bool) -> Forward<Self> {
        Forward(Counting {
            inner: MemoryLeaseStore::new("handover"),
            listings: Arc::default(),
            adverts: Arc::default(),
            changes: Arc::default(),
            supports,
            advert_delay: Arc::default(),
            advert_sent: Arc::default(),
        })
    }
}

impl Wrap for Counting {
    type Inner = MemoryLeaseStore;
    fn inner(&self) -> &MemoryLeaseStore {
        &self.inner
    }
    fn change(&self, from: LeaseId, to: LeaseId) -> impl Future<Output = Result<(), Error>> + Send {
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.inner.change(from, to)
    }
    fn supports_candidates(&self) -> bool {
        self.supports
    }
    fn advertise(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire, Error>> + Send {
        self.adverts.fetch_add(1, Ordering::SeqCst);
        self.advert_sent.notify_one();
        let delay = *self.advert_delay.lock().unwrap();
        let (inner, candidate) = (self.inner.clone(), candidate.clone());
        let sent = tokio::spawn(async move {
            sleep(delay).await;
            inner.advertise(record, &candidate, duration).await
        });
        async move { sent.await.expect("the advertise reached the store") }
    }
    fn keep_advertising(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.adverts.fetch_add(1, Ordering::SeqCst);
        self.inner.keep_advertising(record, holder)
    }
    fn withdraw(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.adverts.fetch_add(1, Ordering::SeqCst);
        self.inner.withdraw(record, holder)
    }
    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>, Error>> + Send {
        self.listings.fetch_add(1, Ordering::SeqCst);
        self.inner.candidates()
    }
}

struct Instance {
    token: CancellationToken,
    handle: JoinHandle<Result<(), Error>>,
    reports: broadcast::Receiver<TermReport>,
}

impl Instance {
    fn reports(&mut self) -> Vec<TermReport> {
        std::iter::from_fn(|| self.reports.try_recv().ok()).collect()
    }
}

/// How a test's leader task behaves once cancelled.
#[derive(Clone, Copy)]
struct Linger(Duration);

/// Starts an instance named `name` with `priority`; its task records its
/// term, and after cancellation lingers as told, then returns.
fn start(
    store: &Forward<Counting>,
    name: &str,
    priority: Option<i64>,
    record: &Record,
    linger: Linger,
    cancelled: Option<tokio::sync::mpsc::UnboundedSender<(String, StopReason)>>,
) -> Instance {
    let seed = name
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mut options = MutexOptions::default()
        .with_holder(name.to_owned())
        .with_jitter_seed(seed);
    if let Some(priority) = priority {
        options = options.with_priority(priority);
    }
    let record = record.clone();
    let mutex =
        BlobDistributedMutex::with_store(store.clone(), options, move |ctx: LeaderContext| {
            let (record, cancelled) = (record.clone(), cancelled.clone());
            async move {
                let index = {
                    let mut r = record.lock().unwrap();
                    r.push((ctx.holder().to_owned(), ctx.epoch(), Instant::now(), None));
                    r.len() - 1
                };
                let _running = Running(record, index);
                let reason = ctx.cancelled().await;
                if let Some(tx) = cancelled {
                    let _ = tx.send((ctx.holder().to_owned(), reason));
                }
                sleep(linger.0).await;
                Ok::<(), Error>(())
            }
        })
        .unwrap();
    let token = CancellationToken::new();
    let reports = mutex.term_reports();
    let run = token.clone();
    let handle = tokio::spawn(async move { mutex.run_task_when_mutex_acquired(run).await });
    Instance {
        token,
        handle,
        reports,
    }
}

fn quick(
    store: &Forward<Counting>,
    name: &str,
    priority: Option<i64>,
    record: &Record,
) -> Instance {
    start(store, name, priority, record, Linger(Duration::ZERO), None)
}

/// Stops every instance cleanly and checks that none failed.
async fn stop_all(instances: Vec<Instance>) {
    for i in &instances {
        i.token.cancel();
    }
    for i in instances {
        i.handle.await.unwrap().unwrap();
    }
}

/// The terms in order; asserts that no two overlapped and that epochs
/// strictly increased.
fn terms(record: &Record) -> Vec<(String, u64, Instant, Option<Instant>)> {
    let mut terms = record.lock().unwrap().clone();
    terms.sort_by_key(|t| t.2);
    for pair in terms.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let end =
            a.3.unwrap_or_else(|| panic!("{} still ran when {} began: {terms:?}", a.0, b.0));
        assert!(
            end <= b.2,
            "{} ran until {end:?}, after {} began at {:?}",
            a.0,
            b.0,
            b.2
        );
        assert!(b.1 > a.1, "epochs did not increase: {terms:?}");
    }
    terms
}

fn handovers(reports: &[TermReport]) -> usize {
    reports
        .iter()
        .filter(|r| r.reason == StopReason::Handover)
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_higher_priority_candidate_leads_after_one_handover() {
    let store = Counting::new(true);
    let record = Record::default();
    let mut old = quick(&store, "v1", Some(0), &record);
    sleep(Duration::from_secs(30)).await;
    let started = Instant::now();
    let mut new = quick(&store, "v2", Some(1), &record);
    // Two more minutes: the new version keeps the lease; the old one,
    // now the lower priority, never gets it back.
    sleep(Duration::from_secs(120)).await;
    let (old_reports, new_reports) = (old.reports(), new.reports());
    stop_all(vec![old, new]).await;

    let terms = terms(&record);
    let who: Vec<(&str, u64)> = terms.iter().map(|t| (t.0.as_str(), t.1)).collect();
    assert_eq!(who, [("v1", 1), ("v2", 2)], "{terms:?}");
    assert_eq!(handovers(&old_reports), 1, "{old_reports:?}");
    assert!(new_reports.is_empty(), "{new_reports:?}");
    // Handed over by Change Lease, not released to whoever came first.
    assert_eq!(store.changes.load(Ordering::SeqCst), 1);
    // One leader cycle (the leader lists once per renew interval, 5 s) and
    // one follower retry (1 s + 20 % jitter), with the candidate's first
    // attempt and the drain on top.
    let took = terms[1].2 - started;
    assert!(
        took <= Duration::from_secs(5) + Duration::from_millis(1200 * 2 + 100),
        "the candidate led {took:?} after it started"
    );
    assert!(store.inner.holder().as_deref() == Some("v2"));
}

#[tokio::test(start_paused = true)]
async fn equal_priorities_never_hand_over() {
    let store = Counting::new(true);
    let record = Record::default();
    let mut instances: Vec<Instance> = ["a", "b", "c"]
        .iter()
        .map(|name| quick(&store, name, Some(7), &record))
        .collect();
    sleep(Duration::from_secs(600)).await;
    let reports: Vec<TermReport> = instances.iter_mut().flat_map(Instance::reports).collect();
    stop_all(instances).await;
    let terms = terms(&record);
    assert_eq!(terms.len(), 1, "{terms:?}");
    assert!(reports.is_empty(), "{reports:?}");
    assert_eq!(store.changes.load(Ordering::SeqCst), 0);
    // The leader listed the candidates once per renew interval.
    let listings = store.listings.load(Ordering::SeqCst);
    assert!(
        (115..=121).contains(&listings),
        "{listings} listings in 600 s"
    );
}

#[tokio::test(start_paused = true)]
async fn the_highest_priority_then_the_smallest_name_is_chosen() {
    let store = Counting::new(true);
    let record = Record::default();
    let mut instances = vec![quick(&store, "a", Some(0), &record)];
    sleep(Duration::from_secs(10)).await;
    for (name, priority) in [("b", 1), ("d", 3), ("c", 3)] {
        instances.push(quick(&store, name, Some(priority), &record));
    }
    sleep(Duration::from_secs(120)).await;
    let reports: Vec<TermReport> = instances.iter_mut().flat_map(Instance::reports).collect();
    stop_all(instances).await;
    let terms = terms(&record);
    let who: Vec<&str> = terms.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(who, ["a", "c"], "{terms:?}");
    assert_eq!(handovers(&reports), 1, "{reports:?}");
}

#[tokio::test(start_paused = true)]
async fn a_candidate_that_vanished_leaves_the_lease_to_expire() {
    let store = Counting::new(true);
    let record = Record::default();
    let (tx, mut cancelled) = tokio::sync::mpsc::unbounded_channel();
    // The leader's task takes 2 s to stop: the candidate dies meanwhile.
    let leader = start(
        &store,
        "old",
        Some(0),
        &record,
        Linger(Duration::from_secs(2)),
        Some(tx),
    );
    sleep(Duration::from_secs(10)).await;
    let other = quick(&store, "other", Some(0), &record);
    let doomed = quick(&store, "doomed", Some(5), &record);
    let (who, reason) = cancelled.recv().await.unwrap();
    assert_eq!((who.as_str(), reason), ("old", StopReason::Handover));
    // A crash: the candidate's future is dropped, nothing is withdrawn.
    doomed.handle.abort();
    let crashed = Instant::now();
    sleep(Duration::from_secs(60)).await;
    stop_all(vec![leader, other]).await;

    let terms = terms(&record);
    assert_eq!(terms.len(), 2, "{terms:?}");
    assert_eq!(terms[0].0, "old");
    assert_ne!(terms[1].0, "doomed");
    let handed_at = terms[0].3.unwrap();
    let next = terms[1].2;
    // Held under the dead candidate's id, the lease expires within one
    // lease duration of the leader's last renewal; until then nobody leads.
    assert!(
        next >= handed_at + Duration::from_secs(5),
        "someone led {:?} after the handover, before the lease could expire",
        next - handed_at
    );
    assert!(
        next <= crashed + Duration::from_secs(15) + Duration::from_millis(1300),
        "nobody led within a lease duration and a retry: {:?}",
        next - crashed
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_priority_no_candidate_call_is_made() {
    let store = Counting::new(true);
    let record = Record::default();
    let instances: Vec<Instance> = ["a", "b"]
        .iter()
        .map(|name| quick(&store, name, None, &record))
        .collect();
    sleep(Duration::from_secs(120)).await;
    stop_all(instances).await;
    assert_eq!(store.listings.load(Ordering::SeqCst), 0);
    assert_eq!(store.adverts.load(Ordering::SeqCst), 0);
    assert_eq!(terms(&record).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_follower_advertises_once_and_keeps_its_record_alive() {
    let store = Counting::new(true);
    let record = Record::default();
    let a = quick(&store, "a", Some(1), &record);
    sleep(Duration::from_secs(1)).await;
    let b = quick(&store, "b", Some(1), &record);
    sleep(Duration::from_secs(100)).await;
    let listed = store.inner.candidates().await.unwrap();
    assert_eq!(
        listed.iter().map(|c| c.holder.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    assert_eq!(listed[0].priority, 1);
    // One advertisement, then one renewal per renew interval (5 s).
    let adverts = store.adverts.load(Ordering::SeqCst);
    assert!((20..=22).contains(&adverts), "{adverts} calls in 100 s");
    stop_all(vec![a, b]).await;
    // Both withdrew when their campaigns ended.
    assert!(store.inner.candidates().await.unwrap().is_empty());
}

/// The race seen on Azurite: the round ends while the advertise of the
/// candidate's record is on its way to storage. The withdraw waits for
/// that advertise's answer, so the record it made is withdrawn, not left
/// listed until it expires.
#[tokio::test(start_paused = true)]
async fn a_round_cancelled_while_its_advertise_is_in_flight_still_withdraws_the_record() {
    let store = Counting::new(true);
    let record = Record::default();
    let leader = quick(&store, "leader", Some(5), &record);
    sleep(Duration::from_secs(1)).await;
    let delay = Duration::from_secs(1);
    *store.advert_delay.lock().unwrap() = delay;
    let candidate = quick(&store, "candidate", Some(0), &record);
    store.advert_sent.notified().await;
    // Half-way: the advertise has been sent, and has not landed yet.
    sleep(delay / 2).await;
    let cancelled = Instant::now();
    candidate.token.cancel();
    candidate.handle.await.unwrap().unwrap();
    let ended = cancelled.elapsed();
    // By now the advertise has landed, whenever the round ended.
    sleep(delay).await;
    let listed = store.inner.candidates().await.unwrap();
    assert!(
        listed.is_empty(),
        "the record outlived the round that withdrew it ({ended:?} after the cancel): {listed:?}"
    );
    // The round waited only for the advertise's answer and the withdraw.
    assert!(ended <= delay, "the round ended {ended:?} after the cancel");
    stop_all(vec![leader]).await;
    assert_eq!(terms(&record).len(), 1);
}

/// Two instances given the same holder name by hand (`--holder web` on
/// two hosts): the candidate record is keyed by the name, and each
/// instance holds it under a record id of its own. The second is refused
/// and takes nothing over; its stop withdraws nothing of the first's.
#[tokio::test(start_paused = true)]
async fn two_instances_given_one_holder_by_hand_never_share_or_withdraw_a_record() {
    let store = Counting::new(true);
    let record = Record::default();
    // A leader of a higher priority: nobody is handed the lease.
    let leader = quick(&store, "leader", Some(9), &record);
    sleep(Duration::from_secs(1)).await;
    let first = quick(&store, "twin", Some(1), &record);
    sleep(Duration::from_secs(5)).await;
    let second = quick(&store, "twin", Some(1), &record);
    let listed = store.inner.candidates().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let kept = listed[0].clone();
    // A minute of both keeping (and retrying) their record: the first's
    // is listed at every instant, never replaced by the second's.
    for _ in 0..600 {
        sleep(Duration::from_millis(100)).await;
        let listed = store.inner.candidates().await.unwrap();
        assert_eq!(
            listed,
            std::slice::from_ref(&kept),
            "the record changed hands"
        );
    }
    second.token.cancel();
    second.handle.await.unwrap().unwrap();
    assert_eq!(
        store.inner.candidates().await.unwrap(),
        [kept],
        "the second instance's stop withdrew the first's record"
    );
    first.token.cancel();
    first.handle.await.unwrap().unwrap();
    assert!(store.inner.candidates().await.unwrap().is_empty());
    stop_all(vec![leader]).await;
    assert_eq!(terms(&record).len(), 1);
}

/// Two instances of one holder name and a higher priority than the
/// leader's: the lease is handed over once, to the one whose record was
/// listed, and never to both.
#[tokio::test(start_paused = true)]
async fn two_instances_of_one_holder_name_are_handed_the_lease_once() {
    let store = Counting::new(true);
    let record = Record::default();
    let mut leader = quick(&store, "leader", Some(0), &record);
    sleep(Duration::from_secs(1)).await;
    let twins = vec![
        quick(&store, "twin", Some(1), &record),
        quick(&store, "twin", Some(1), &record),
    ];
    sleep(Duration::from_secs(120)).await;
    let reports = leader.reports();
    let mut instances = twins;
    instances.push(leader);
    stop_all(instances).await;
    let who: Vec<(String, u64)> = terms(&record).into_iter().map(|t| (t.0, t.1)).collect();
    assert_eq!(who, [("leader".into(), 1), ("twin".into(), 2)]);
    assert_eq!(handovers(&reports), 1, "{reports:?}");
    assert_eq!(store.changes.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_store_without_candidates_refuses_a_priority() {
    let store = Counting::new(false);
    let options = MutexOptions::default().with_priority(1);
    let made = BlobDistributedMutex::with_store(store.clone(), options, |_ctx| async {
        Ok::<(), Error>(())
    });
    assert!(matches!(made, Err(Error::Unsupported { .. })), "{made:?}");
    BlobDistributedMutex::with_store(store, MutexOptions::default(), |_ctx| async {
        Ok::<(), Error>(())
    })
    .unwrap();
}

/// The child's part of
/// [`two_instances_each_the_first_process_of_a_pid_namespace_on_one_host_have_different_default_holders`]:
/// prints the default holder.
fn print_default_holder() {
    let store = MemoryLeaseStore::new("holder");
    let mutex =
        BlobDistributedMutex::with_store_for_guards(store, MutexOptions::default()).unwrap();
    println!("holder {} pid {}", mutex.holder(), std::process::id());
}

/// Candidate records and handovers are keyed by the holder: two containers
/// of one host (the host's name, `--network host`), each process 1 of its
/// own PID namespace, must not share the default. Run as root (`unshare`).
#[test]
fn two_instances_each_the_first_process_of_a_pid_namespace_on_one_host_have_different_default_holders(
) {
    const NAME: &str =
        "two_instances_each_the_first_process_of_a_pid_namespace_on_one_host_have_different_default_holders";
    if std::env::var_os("BLOB_MUTEX_PRINT_HOLDER").is_some() {
        return print_default_holder();
    }
    let holder = || {
        let output = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--"])
            .arg(std::env::current_exe().unwrap())
            .arg(crate::support::test_path(module_path!(), NAME))
            .args(["--exact", "--nocapture", "--test-threads=1"])
            .env("BLOB_MUTEX_PRINT_HOLDER", "1")
            .output()
            .expect("unshare (util-linux) runs, as root");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{output:?}");
        let line = stdout
            .split("holder ")
            .nth(1)
            .unwrap_or_else(|| panic!("no holder printed: {stdout}"));
        let (holder, pid) = line.split_once(" pid ").unwrap();
        assert_eq!(
            pid.split_whitespace().next(),
            Some("1"),
            "process 1 of its namespace"
        );
        holder.to_owned()
    };
    let (a, b) = (holder(), holder());
    assert_ne!(
        a, b,
        "two containers' first processes share the default holder"
    );
}
