//! Two instances of a lease set whose owners every instance lists: the
//! check that `tests/it/shapes/leader.rs` (in memory) and `tests/it/shapes/leader_azurite.rs`
//! (on Azurite) share. Included by path from the memory tests, which do
//! not build the rest of the support module.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use blob_mutex::{store::LeaseSetStore, BlobLeaseSet, CancellationToken, LeaseSetOptions};
use tokio::time::Instant;

/// What instance `name` advertises.
pub fn address(name: &str) -> String {
    format!("http://{name}.internal:8080")
}

/// Two instances, `a` and `b`, of a set of `count` partitions, each on a
/// store from `store`, balancing every `balance`: both instances' `owners()`
/// come, within `limit`, to list every partition with the owner and epoch
/// that the owners' own `watch()` shows, and what each owner advertised;
/// once their runs have returned, they list nothing.
pub async fn owners_are_listed<S: LeaseSetStore>(
    store: impl Fn() -> S,
    count: usize,
    balance: Duration,
    limit: Duration,
) {
    let partitions: Vec<String> = (0..count).map(|i| format!("p{i}")).collect();
    let mut sets = Vec::new();
    for (seed, name) in ["a", "b"].into_iter().enumerate() {
        let mutex = LeaseSetOptions::default()
            .mutex()
            .clone()
            .clone()
            .with_holder(name.to_owned())
            .with_advertised(address(name))
            .with_jitter_seed(seed as u64);
        let options = LeaseSetOptions::default()
            .with_mutex(mutex)
            .with_balance_interval(balance);
        let set =
            BlobLeaseSet::with_store(store(), partitions.clone(), options, |ctx| async move {
                ctx.cancelled().await;
                Ok::<(), blob_mutex::Error>(())
            })
            .unwrap();
        let set = Arc::new(set);
        let token = CancellationToken::new();
        let (s, t) = (set.clone(), token.clone());
        let run = tokio::spawn(async move { s.run(t).await });
        sets.push((set, token, run));
    }
    let until = Instant::now() + limit;
    loop {
        let owned: BTreeMap<String, (String, u64)> = sets
            .iter()
            .flat_map(|(set, _, _)| {
                let holder = set.holder().to_owned();
                let owned = set.watch().borrow().clone();
                owned
                    .into_iter()
                    .map(move |(p, e)| (p, (holder.clone(), e)))
            })
            .collect();
        let listed: Vec<BTreeMap<String, (String, u64)>> = sets
            .iter()
            .map(|(set, _, _)| {
                let owners = set.owners().borrow().clone();
                owners
                    .into_iter()
                    .map(|(p, l)| {
                        assert_eq!(l.advertised, Some(address(&l.holder)), "{p}");
                        (p, (l.holder, l.epoch))
                    })
                    .collect()
            })
            .collect();
        let holders: BTreeSet<&String> = owned.values().map(|(h, _)| h).collect();
        if owned.len() == partitions.len()
            && holders.len() == 2
            && listed.iter().all(|l| *l == owned)
        {
            break;
        }
        assert!(Instant::now() < until, "owned {owned:?}, listed {listed:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (set, token, run) in sets {
        token.cancel();
        run.await.unwrap().unwrap();
        assert!(
            set.owners().borrow().is_empty(),
            "nothing keeps it up to date"
        );
    }
}
