//! Elections on a real Azurite: creation, exclusion, handover, expiry,
//! outside breaks, and tasks that finish or panic.

use blob_mutex::store::LeaseStore;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    azure::BlobLeaseManager, store::LeaseState, term::Leadership, term::StopReason,
    BlobDistributedMutex, BlobSettings, CancellationToken, LeaderContext, MutexOptions,
};
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::{azurite, wait_for};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The upper bound of one jittered acquire retry at default options.
const RETRY_MAX: Duration = Duration::from_millis(1200);
const LEASE: Duration = Duration::from_secs(15);

/// When, who, what (`start`, `stop` or a stop reason), and the epoch.
type Entry = (Instant, String, &'static str, u64);

/// A leader-task log shared by the instances of one test.
#[derive(Clone, Default)]
struct Log {
    events: Arc<Mutex<Vec<Entry>>>,
    running: Arc<AtomicUsize>,
    most_running: Arc<AtomicUsize>,
}

impl Log {
    fn push(&self, who: &str, what: &'static str, epoch: u64) {
        self.events
            .lock()
            .unwrap()
            .push((Instant::now(), who.to_owned(), what, epoch));
    }

    fn find(&self, who: &str, what: &str) -> Option<(Instant, u64)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .find(|(_, w, e, _)| w == who && *e == what)
            .map(|(t, _, _, epoch)| (*t, *epoch))
    }
}

/// A leader task that records its term and runs until cancelled.
async fn until_cancelled(log: Log, ctx: LeaderContext) -> anyhow::Result<()> {
    let now = log.running.fetch_add(1, Ordering::SeqCst) + 1;
    log.most_running.fetch_max(now, Ordering::SeqCst);
    log.push(ctx.holder(), "start", ctx.epoch());
    let reason = ctx.cancelled().await;
    log.push(ctx.holder(), reason.as_str(), ctx.epoch());
    log.running.fetch_sub(1, Ordering::SeqCst);
    log.push(ctx.holder(), "stop", ctx.epoch());
    Ok(())
}

struct Instance {
    mutex: Arc<BlobDistributedMutex>,
    token: CancellationToken,
    run: JoinHandle<blob_mutex::Result<()>>,
}

fn start(settings: &BlobSettings, holder: &str, log: &Log) -> Instance {
    let options = MutexOptions::default().with_holder(holder.to_owned());
    let mutex = Arc::new(
        BlobDistributedMutex::with_options(settings.clone(), options, {
            let log = log.clone();
            move |ctx| until_cancelled(log.clone(), ctx)
        })
        .unwrap(),
    );
    let token = CancellationToken::new();
    let run = tokio::spawn({
        let (mutex, token) = (mutex.clone(), token.clone());
        async move { mutex.run_task_when_mutex_acquired(token).await }
    });
    Instance { mutex, token, run }
}

async fn leader_of(instances: &[&Instance]) -> usize {
    wait_for("a leader", Duration::from_secs(30), || async {
        instances
            .iter()
            .position(|i| matches!(*i.mutex.watch().borrow(), Leadership::Leader { .. }))
    })
    .await
}

#[tokio::test]
async fn first_election_creates_the_container_and_blob() {
    blob_mutex_testkit::init_tracing();
    let container = azurite::unique_container("creates");
    let settings = azurite::shared().settings(&container, "leader");
    let manager = BlobLeaseManager::new(&settings).unwrap();
    assert_eq!(manager.inspect().await.unwrap(), None);

    let log = Log::default();
    let a = start(&settings, "a", &log);
    leader_of(&[&a]).await;
    let info = manager.inspect().await.unwrap().expect("the blob exists");
    assert_eq!(info.state, LeaseState::Leased);
    assert_eq!(info.holder.as_deref(), Some("a"));
    assert_eq!(
        Leadership::Leader { epoch: info.epoch },
        *a.mutex.watch().borrow(),
        "the stored epoch is the leader's"
    );
    assert_eq!(info.content_length, 0);

    a.token.cancel();
    a.run.await.unwrap().unwrap();
    let info = manager.inspect().await.unwrap().unwrap();
    assert_eq!(info.state, LeaseState::Available, "released on shutdown");
    assert_eq!(
        log.find("a", "shutdown").map(|(_, e)| e),
        Some(info.epoch),
        "the term that shut down is the stored one"
    );
}

/// The content and metadata of a blob written by someone else stay as
/// they are; the crate only adds its own keys.
#[cfg(feature = "official")]
#[tokio::test]
async fn an_existing_blob_keeps_its_content_and_metadata() {
    use blob_mutex_testkit::raw;

    blob_mutex_testkit::init_tracing();
    let container = azurite::unique_container("existing");
    let az = azurite::shared();
    let client = raw::container(&container);
    raw::create(&client).await;
    let content = b"important bytes \x00\x01\x02 that are not ours".to_vec();
    let foreign = [("owner".to_owned(), "someone-else".to_owned())];
    raw::put(&client, "leader", content.clone(), foreign.into()).await;

    let log = Log::default();
    let a = start(&az.settings(&container, "leader"), "a", &log);
    leader_of(&[&a]).await;
    a.token.cancel();
    a.run.await.unwrap().unwrap();

    assert_eq!(
        raw::content(&client, "leader").await,
        content,
        "content byte for byte"
    );
    let metadata = raw::metadata(&client, "leader").await;
    assert_eq!(
        metadata.get("owner").map(String::as_str),
        Some("someone-else")
    );
    let epoch: u64 = metadata["epoch"].parse().expect("an epoch");
    assert!(
        epoch >= 1 << 20,
        "a record without an epoch starts at storage's clock: {epoch}"
    );
}

#[tokio::test]
async fn one_leader_of_two_and_a_quick_handover_on_release() {
    blob_mutex_testkit::init_tracing();
    let container = azurite::unique_container("handover");
    // Through the proxy, which sees when storage answered the release and
    // when the follower's acquire came.
    let proxy = Proxy::start(azurite::shared().port);
    let settings = proxy.settings(&container, "leader");
    let log = Log::default();
    let a = start(&settings, "a", &log);
    let b = start(&settings, "b", &log);
    let first = leader_of(&[&a, &b]).await;
    let (leader, follower, names) = if first == 0 {
        (a, b, ("a", "b"))
    } else {
        (b, a, ("b", "a"))
    };

    // An observation window, not a wait for a condition: let the follower
    // make several acquire attempts, then check that only one task ever ran.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(log.most_running.load(Ordering::SeqCst), 1);
    assert_eq!(
        follower.mutex.watch().borrow().clone(),
        Leadership::Follower
    );

    let (_, epoch) = log.find(names.0, "start").unwrap();
    leader.token.cancel();
    leader.run.await.unwrap().unwrap();
    let (stopped, _) = log.find(names.0, "stop").unwrap();
    let (took_over, next_epoch) =
        wait_for("the follower to lead", Duration::from_secs(10), || async {
            log.find(names.1, "start")
        })
        .await;
    println!("handover after release: {:?}", took_over - stopped);
    // The promise: the follower's acquire that takes the lease is sent
    // within one acquire retry of storage answering the release (its
    // attempt before was refused before that). What storage then takes to
    // answer it and the stamp is storage's (a loaded machine's Azurite
    // took 0.5 s for the release alone); 500 ms of slack for late timers.
    let requests = proxy.log();
    let released = requests
        .iter()
        .find(|r| r.lease_action.as_deref() == Some("release"))
        .and_then(|r| r.answered_at)
        .expect("storage answered the release");
    let taken = requests
        .iter()
        .rfind(|r| r.lease_action.as_deref() == Some("acquire") && r.status == Some(201))
        .expect("an acquire took the lease");
    let sent_after = taken.at.saturating_duration_since(released);
    println!("the follower's acquire {sent_after:?} after the release was answered");
    assert!(
        sent_after <= RETRY_MAX + Duration::from_millis(500),
        "the follower's acquire came {sent_after:?} after the release was answered"
    );
    assert!(took_over.into_std() >= taken.answered_at.expect("answered"));
    assert_eq!(next_epoch, epoch + 1);
    assert_eq!(
        log.most_running.load(Ordering::SeqCst),
        1,
        "never two tasks at once"
    );

    follower.token.cancel();
    follower.run.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_vanished_leader_is_replaced_only_after_its_lease_expired() {
    blob_mutex_testkit::init_tracing();
    let container = azurite::unique_container("vanish");
    let settings = azurite::shared().settings(&container, "leader");
    let log = Log::default();
    // The lease cannot have been acquired before `a` was started, so it
    // cannot expire earlier than 15 s after this instant.
    let a_started = Instant::now();
    let a = start(&settings, "a", &log);
    leader_of(&[&a]).await;
    let b = start(&settings, "b", &log);

    // `a` vanishes before its first renewal: its campaign is dropped
    // mid-term, so nothing releases the lease.
    a.run.abort();
    let _ = a.run.await;
    let vanished = Instant::now();

    let (took_over, epoch) = wait_for("b to lead", LEASE + Duration::from_secs(10), || async {
        log.find("b", "start")
    })
    .await;
    let after_start = took_over.duration_since(a_started);
    let waited = took_over.duration_since(vanished);
    println!("takeover {waited:?} after the leader vanished, {after_start:?} after it started");
    assert!(
        after_start >= LEASE,
        "took over before the lease expired: {after_start:?}"
    );
    assert!(
        waited <= LEASE + RETRY_MAX + Duration::from_secs(1),
        "took {waited:?}"
    );
    assert_eq!(
        epoch,
        log.find("a", "start").expect("a led").1 + 1,
        "b's term is the next"
    );
    b.token.cancel();
    b.run.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_lease_broken_from_outside_stops_the_leader_at_the_next_renewal() {
    blob_mutex_testkit::init_tracing();
    let container = azurite::unique_container("broken");
    let settings = azurite::shared().settings(&container, "leader");
    let log = Log::default();
    let a = start(&settings, "a", &log);
    leader_of(&[&a]).await;

    let operator = BlobLeaseManager::new(&settings).unwrap();
    let broke_at = Instant::now();
    operator.break_lease(None).await.unwrap();
    let (lost_at, epoch) = wait_for(
        "the task to see the loss",
        Duration::from_secs(10),
        || async { log.find("a", StopReason::LeaseLost.as_str()) },
    )
    .await;
    let after = lost_at - broke_at;
    println!("leader stopped {after:?} after the break");
    assert!(
        after <= Duration::from_secs(5) + Duration::from_secs(1),
        "{after:?}"
    );
    let first = log.find("a", "start").expect("a led").1;
    assert_eq!(epoch, first, "the term that saw the loss is the first");

    // It campaigns again and leads with the next epoch.
    let (_, again) = wait_for("a to lead again", Duration::from_secs(10), || async {
        log.events
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(_, _, what, epoch)| *what == "start" && *epoch > first)
            .map(|(t, _, _, e)| (*t, *e))
    })
    .await;
    assert_eq!(again, first + 1);
    a.token.cancel();
    a.run.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_task_that_finishes_releases_and_campaigns_again() {
    blob_mutex_testkit::init_tracing();
    let container = azurite::unique_container("finishes");
    let settings = azurite::shared().settings(&container, "leader");
    let epochs = Arc::new(Mutex::new(Vec::new()));
    let seen = epochs.clone();
    let mutex = BlobDistributedMutex::new(settings.clone(), move |ctx: LeaderContext| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(ctx.epoch());
            tokio::time::sleep(Duration::from_millis(200)).await;
            anyhow::Ok(())
        }
    })
    .unwrap();
    let token = CancellationToken::new();
    let run = mutex.run_task_when_mutex_acquired(token.clone());
    let check = async {
        wait_for("three terms", Duration::from_secs(20), || async {
            (epochs.lock().unwrap().len() >= 3).then_some(())
        })
        .await;
        token.cancel();
    };
    let (result, ()) = tokio::join!(run, check);
    result.unwrap();
    let epochs = epochs.lock().unwrap().clone();
    assert_eq!(epochs[..3], [epochs[0], epochs[0] + 1, epochs[0] + 2]);
    let info = BlobLeaseManager::new(&settings)
        .unwrap()
        .inspect()
        .await
        .unwrap()
        .unwrap();
    assert!(
        info.state.is_free(),
        "released at the end: {:?}",
        info.state
    );
}

#[tokio::test]
async fn a_task_that_panics_is_reported_and_the_instance_recovers() {
    blob_mutex_testkit::init_tracing();
    let container = azurite::unique_container("panics");
    let settings = azurite::shared().settings(&container, "leader");
    let epochs = Arc::new(Mutex::new(Vec::new()));
    let seen = epochs.clone();
    let options = MutexOptions::default().with_failure_backoff(Duration::from_millis(500));
    let mutex =
        BlobDistributedMutex::with_options(settings.clone(), options, move |ctx: LeaderContext| {
            let seen = seen.clone();
            async move {
                let first = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(ctx.epoch());
                    seen.len() == 1
                };
                assert!(!first, "the first term panics on purpose");
                ctx.cancelled().await;
                anyhow::Ok(())
            }
        })
        .unwrap();
    let token = CancellationToken::new();
    let run = mutex.run_task_when_mutex_acquired(token.clone());
    let check = async {
        wait_for(
            "leads again after the panic",
            Duration::from_secs(20),
            || async { (epochs.lock().unwrap().len() >= 2).then_some(()) },
        )
        .await;
        token.cancel();
    };
    let (result, ()) =
        tokio::time::timeout(Duration::from_secs(20), async { tokio::join!(run, check) })
            .await
            .expect("bounded");
    result.unwrap();
    let epochs = epochs.lock().unwrap().clone();
    assert_eq!(epochs, vec![epochs[0], epochs[0] + 1]);
}
