//! Who leads, and where, on a real Azurite and the backend that
//! `BLOB_MUTEX_BACKEND` names: followers' `leader()` watches name the
//! leader with what it advertised, and the next one within a poll of a
//! clean handover; a lease set's `owners()` lists every partition's owner
//! and address; a quorum of three containers names its leader too (one
//! account standing in for three: `with_labels`, which `from_settings`
//! refuses for counting one account thrice).

use std::sync::Arc;
use std::time::Duration;

use blob_mutex::{
    azure::BlobLeaseManager, azure::BlobLeaseSetStore, quorum::QuorumLeaseStore, term::Leader,
    BlobDistributedMutex, CancellationToken, LeaderContext, MutexOptions,
};
use blob_mutex_testkit::azurite;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One renew interval (5 s) after the first held attempt (1.2 s at most),
/// plus room for a loaded two-core machine's requests.
const POLL_BOUND: Duration = Duration::from_secs(6 + 6);

fn options(name: &str) -> MutexOptions {
    MutexOptions::default()
        .with_holder(name.to_owned())
        .with_advertised(format!("http://{name}.internal:8080"))
}

async fn lead(ctx: LeaderContext) -> anyhow::Result<()> {
    ctx.cancelled().await;
    Ok(())
}

struct Instance {
    /// Held for the whole test: a follower polls only while its watch has
    /// a receiver.
    leader: watch::Receiver<Option<Leader>>,
    token: CancellationToken,
    run: JoinHandle<blob_mutex::Result<()>>,
}

fn start<S: blob_mutex::store::LeaseStore>(mutex: BlobDistributedMutex<S>) -> Instance {
    let mutex = Arc::new(mutex);
    let token = CancellationToken::new();
    let (m, t) = (mutex.clone(), token.clone());
    let run = tokio::spawn(async move { m.run_task_when_mutex_acquired(t).await });
    let leader = mutex.leader();
    Instance { leader, token, run }
}

impl Instance {
    async fn stop(self) {
        self.token.cancel();
        self.run.await.unwrap().unwrap();
    }
}

/// Waits until every watch names the same term, held by `who` (any holder
/// when `None`); returns that leader.
async fn all_name(
    instances: &[&Instance],
    who: Option<&str>,
    after_epoch: u64,
    limit: Duration,
) -> Leader {
    let until = Instant::now() + limit;
    loop {
        let shown: Vec<Option<Leader>> = instances
            .iter()
            .map(|i| i.leader.borrow().clone())
            .collect();
        let key = |l: &Leader| (l.holder.clone(), l.epoch, l.advertised.clone());
        if let Some(Some(first)) = shown.first() {
            let agreed = shown
                .iter()
                .all(|s| s.as_ref().map(key) == Some(key(first)));
            if agreed && first.epoch > after_epoch && who.is_none_or(|w| first.holder == w) {
                return first.clone();
            }
        }
        assert!(
            Instant::now() < until,
            "no agreement on {who:?} after epoch {after_epoch} within {limit:?}: {shown:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn followers_name_the_leader_and_its_address_and_the_next_one_within_a_poll() {
    let container = azurite::unique_container("leader");
    let settings = azurite::shared().settings(&container, "lock");
    let mutex = |name: &str| {
        BlobDistributedMutex::with_options(settings.clone(), options(name), lead).unwrap()
    };
    let a = start(mutex("a"));
    all_name(&[&a], Some("a"), 0, Duration::from_secs(20)).await;
    let (b, c) = (start(mutex("b")), start(mutex("c")));
    let first = all_name(&[&a, &b, &c], Some("a"), 0, POLL_BOUND).await;
    assert_eq!(first.advertised.as_deref(), Some("http://a.internal:8080"));
    assert!(first.since.is_some(), "the stamp's time is read back");

    a.stop().await;
    let released = Instant::now();
    let next = all_name(&[&b, &c], None, first.epoch, POLL_BOUND).await;
    let took = released.elapsed();
    assert_eq!(
        next.advertised,
        Some(format!("http://{}.internal:8080", next.holder))
    );
    eprintln!(
        "every follower named {} {took:?} after the release",
        next.holder
    );
    b.stop().await;
    c.stop().await;
}

#[tokio::test]
async fn a_lease_set_lists_each_partitions_owner_and_address() {
    let container = azurite::unique_container("owners");
    let settings = azurite::shared().settings(&container, "jobs");
    let store = || BlobLeaseSetStore::new(&settings).unwrap();
    let (balance, limit) = (Duration::from_secs(1), Duration::from_secs(90));
    blob_mutex_testkit::owners::owners_are_listed(store, 4, balance, limit).await;
}

#[tokio::test]
async fn a_quorum_of_three_containers_names_its_leader() {
    let container = azurite::unique_container("leader-quorum");
    let settings: Vec<_> = (0..3)
        .map(|i| azurite::shared().settings(&format!("{container}-{i}"), "lock"))
        .collect();
    assert!(
        QuorumLeaseStore::from_settings(&settings).is_err(),
        "one account"
    );
    let mutex = |name: &str| {
        let accounts = settings
            .iter()
            .map(|s| (s.container().to_owned(), BlobLeaseManager::new(s).unwrap()))
            .collect();
        let quorum = QuorumLeaseStore::with_labels(accounts).unwrap();
        BlobDistributedMutex::with_store(quorum, options(name), lead).unwrap()
    };
    let a = start(mutex("a"));
    all_name(&[&a], Some("a"), 0, Duration::from_secs(20)).await;
    let b = start(mutex("b"));
    let shown = all_name(&[&a, &b], Some("a"), 0, POLL_BOUND).await;
    assert_eq!(shown.advertised.as_deref(), Some("http://a.internal:8080"));
    a.stop().await;
    b.stop().await;
}
