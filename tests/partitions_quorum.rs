//! A lease set on a quorum of three in-memory accounts, with paused time:
//! partitions spread as on one account, and losing an account moves none.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    BlobLeaseSet, CancellationToken, LeaseSetOptions, MemoryLeaseSetStore, PartitionContext,
    QuorumLeaseSetStore,
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
    let options = LeaseSetOptions::default();
    let mutex = options
        .mutex
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
    tokio::spawn(async move { set.run(run).await.unwrap() });
    (owned, token)
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
