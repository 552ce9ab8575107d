//! A lease set on a quorum of three in-memory accounts, with paused time:
//! partitions spread as on one account, losing an account moves none, and
//! stale members are collected in every account.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    quorum::QuorumLeaseSetStore, store::Collection, store::LeaseSetStore, store::LeaseState,
    testing::MemoryLeaseSetStore, BlobLeaseSet, CancellationToken, LeaseSetOptions,
    PartitionContext,
};
use tokio::time::Instant;

/// Each partition task's start: (partition, holder).
type Started = Arc<Mutex<Vec<(String, String)>>>;

fn start(
    store: &QuorumLeaseSetStore<MemoryLeaseSetStore>,
    name: &str,
    partitions: &[String],
    started: &Started,
) -> (
    tokio::sync::watch::Receiver<std::collections::BTreeMap<String, u64>>,
    CancellationToken,
) {
    let (owned, token, _) = spawn_set(store, name, partitions, started);
    (owned, token)
}

/// As [`start`], with the task that runs the set.
fn spawn_set(
    store: &QuorumLeaseSetStore<MemoryLeaseSetStore>,
    name: &str,
    partitions: &[String],
    started: &Started,
) -> (
    tokio::sync::watch::Receiver<std::collections::BTreeMap<String, u64>>,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let options = LeaseSetOptions::default();
    let mutex = options
        .mutex()
        .clone()
        .with_holder(name.to_owned())
        .with_jitter_seed(name.len() as u64);
    let started = started.clone();
    let set = BlobLeaseSet::with_store(
        store.clone(),
        partitions.to_vec(),
        options.with_mutex(mutex),
        move |ctx: PartitionContext| {
            let started = started.clone();
            async move {
                started
                    .lock()
                    .unwrap()
                    .push((ctx.partition().to_owned(), ctx.holder().to_owned()));
                ctx.cancelled().await;
                Ok::<(), blob_mutex::Error>(())
            }
        },
    )
    .unwrap();
    let owned = set.watch();
    let token = CancellationToken::new();
    let run = token.clone();
    let task = tokio::spawn(async move { set.run(run).await.unwrap() });
    (owned, token, task)
}

/// The members each account lists, with whether each is leased.
async fn members(accounts: &[MemoryLeaseSetStore]) -> Vec<Vec<(String, bool)>> {
    let mut out = Vec::new();
    for account in accounts {
        let listed = account.list("members/").await.unwrap();
        out.push(
            listed
                .into_iter()
                .map(|(name, info)| (name, info.state == LeaseState::Leased))
                .collect(),
        );
    }
    out
}

#[tokio::test(start_paused = true)]
async fn stale_members_are_collected_in_every_account_and_a_leave_deletes_its_own() {
    let stale_after = Duration::from_secs(60);
    let accounts: Vec<MemoryLeaseSetStore> = (0..3)
        .map(|_| {
            MemoryLeaseSetStore::new()
                .with_collection(Collection::default().with_stale_after(stale_after))
        })
        .collect();
    let store = QuorumLeaseSetStore::with_labels(
        accounts
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("account-{i}"), a.clone()))
            .collect(),
    )
    .unwrap();
    let all: Vec<String> = (0..6).map(|i| format!("p{i:02}")).collect();
    let started = Started::default();
    let mut sets: Vec<_> = ["a", "b", "gone-x", "gone-y", "gone-z"]
        .iter()
        .map(|name| spawn_set(&store, name, &all, &started))
        .collect();
    let begin = Instant::now();
    while members(&accounts).await.iter().any(|m| m.len() < 5) {
        assert!(
            begin.elapsed() < Duration::from_secs(60),
            "{:?}",
            members(&accounts).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Three instances crash: their member leases expire and are left behind.
    for (_, _, task) in sets.drain(2..) {
        task.abort();
    }
    let live = vec![
        ("members/a".to_owned(), true),
        ("members/b".to_owned(), true),
    ];
    let crashed = Instant::now();
    while members(&accounts).await.iter().any(|m| *m != live) {
        assert!(
            crashed.elapsed() < Duration::from_secs(300),
            "the crashed members were not collected: {:?}",
            members(&accounts).await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Not before they were stale: a 30 s lease, then the bound.
    assert!(
        crashed.elapsed() > stale_after + Duration::from_secs(30),
        "{:?}",
        crashed.elapsed()
    );
    let counts = || (sets[0].0.borrow().len(), sets[1].0.borrow().len());
    while counts() != (3, 3) {
        assert!(
            crashed.elapsed() < Duration::from_secs(400),
            "{:?}",
            counts()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A graceful leave deletes its own member lease in every account.
    let (_, stop_a, run_a) = sets.remove(0);
    stop_a.cancel();
    run_a.await.unwrap();
    assert_eq!(
        members(&accounts).await,
        vec![vec![("members/b".to_owned(), true)]; 3]
    );
    sets[0].1.cancel();
}

#[tokio::test(start_paused = true)]
async fn partitions_spread_on_a_quorum_and_stay_put_when_an_account_is_lost() {
    let accounts = [
        MemoryLeaseSetStore::new(),
        MemoryLeaseSetStore::new(),
        MemoryLeaseSetStore::new(),
    ];
    let store = QuorumLeaseSetStore::with_labels(
        accounts
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("account-{i}"), a.clone()))
            .collect(),
    )
    .unwrap();
    let all: Vec<String> = (0..6).map(|i| format!("p{i:02}")).collect();
    let started = Started::default();
    let (a, stop_a) = start(&store, "a", &all, &started);
    let (b, stop_b) = start(&store, "b", &all, &started);
    let counts = || (a.borrow().len(), b.borrow().len());
    let begin = Instant::now();
    while counts() != (3, 3) {
        assert!(begin.elapsed() < Duration::from_secs(60), "{:?}", counts());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let terms = started.lock().unwrap().len();
    // Account 0 goes away for every lease of the set, longer than a lease.
    for name in all
        .iter()
        .map(|p| format!("partitions/{p}"))
        .chain(["members/a".to_owned(), "members/b".to_owned()])
    {
        accounts[0].get(&name).set_unavailable(true);
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(counts(), (3, 3));
    assert_eq!(
        started.lock().unwrap().len(),
        terms,
        "no partition changed hands: {:?}",
        started.lock().unwrap()
    );
    let mut seen = started.lock().unwrap().clone();
    seen.sort();
    seen.dedup_by(|x, y| x.0 == y.0);
    assert_eq!(seen.len(), 6, "each partition owned once");
    stop_a.cancel();
    stop_b.cancel();
}
