//! Partition term reports on the in-memory set store with paused time: a
//! receiver that reads only after a set lost its membership sees the end of
//! every partition term it had, however many partitions the set has.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::broadcast::error::TryRecvError;
use tokio_util::sync::CancellationToken;

use super::{BlobLeaseSet, LeaseSetOptions, MEMBERS};
use crate::error::Error;
use crate::store::memory::MemoryLeaseSetStore;

#[tokio::test(start_paused = true)]
async fn a_receiver_reading_after_a_hundred_partitions_were_lost_at_once_sees_every_report() {
    const N: usize = 100;
    let store = MemoryLeaseSetStore::new();
    let options = LeaseSetOptions::default().with_mutex(
        LeaseSetOptions::default()
            .mutex
            .with_holder("a".to_owned())
            .with_jitter_seed(1),
    );
    let partitions: Vec<String> = (0..N).map(|i| format!("p{i:03}")).collect();
    let set = BlobLeaseSet::with_store(store.clone(), partitions, options, |ctx| async move {
        ctx.cancelled().await;
        Ok::<(), Error>(())
    })
    .unwrap();
    let mut reports = set.partition_reports();
    let mut owned = set.watch();
    let token = CancellationToken::new();
    let run = tokio::spawn({
        let token = token.clone();
        async move { set.run(token).await }
    });
    let limit = Duration::from_secs(120);
    tokio::time::timeout(limit, owned.wait_for(|o| o.len() == N))
        .await
        .expect("every partition owned")
        .unwrap();
    // The membership is lost: every partition term ends at once.
    store.get(&format!("{MEMBERS}a")).break_lease();
    tokio::time::timeout(limit, owned.wait_for(BTreeMap::is_empty))
        .await
        .expect("every partition term ended")
        .unwrap();
    let (mut ended, mut missed) = (BTreeSet::new(), 0);
    loop {
        match reports.try_recv() {
            Ok(r) => {
                ended.insert(r.partition);
            }
            Err(TryRecvError::Lagged(n)) => missed += n,
            Err(_) => break,
        }
    }
    assert_eq!((ended.len(), missed), (N, 0), "reports of every partition");
    token.cancel();
    run.await.unwrap().unwrap();
}
