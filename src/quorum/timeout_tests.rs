//! The quorum store's calls with the longest request timeout a caller can
//! give: each returns, none overflows the clock.

use std::time::Duration;

use super::{QuorumLeaseSetStore, QuorumLeaseStore};
use crate::store::{Acquire, LeaseId, LeaseSetStore, LeaseStore, StampOptions};
use crate::{testing::MemoryLeaseSetStore, testing::MemoryLeaseStore};

const D: Duration = Duration::from_secs(15);

#[tokio::test(start_paused = true)]
async fn every_call_returns_with_a_request_timeout_of_duration_max() {
    let accounts: Vec<MemoryLeaseStore> = (0..3)
        .map(|i| MemoryLeaseStore::new(format!("account-{i}")))
        .collect();
    let store = QuorumLeaseStore::new(accounts.clone())
        .unwrap()
        .with_request_timeout(Duration::MAX);
    let other = QuorumLeaseStore::new(accounts.clone())
        .unwrap()
        .with_request_timeout(Duration::MAX);
    let (id, next) = (LeaseId::new(), LeaseId::new());
    assert_eq!(store.acquire(id, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(other.acquire(next, D).await.unwrap(), Acquire::Held);
    store.renew(id).await.unwrap();
    assert_eq!(store.stamp(id, "a", &StampOptions::new()).await.unwrap(), 1);
    let floor = StampOptions::new().with_floor(5);
    assert_eq!(store.stamp(id, "a", &floor).await.unwrap(), 5);
    let advertising = StampOptions::new().with_advertised("10.0.0.1:80");
    assert_eq!(store.stamp(id, "a", &advertising).await.unwrap(), 6);
    store.change(id, next).await.unwrap();
    store.renew(next).await.unwrap();
    assert!(store.inspect().await.unwrap().is_some());
    assert_eq!(store.inspect_each().await.len(), 3);
    store.release(next).await.unwrap();
    assert!(store.release(next).await.is_err(), "released already");
    // A split vote: the lease granted is given back within the cleanup limit.
    accounts[0].set_unavailable(true);
    accounts[1].set_unavailable(true);
    assert!(store.acquire(id, D).await.is_err());
    assert!(!accounts[2].is_held(), "given back");
}

#[tokio::test(start_paused = true)]
async fn a_quorum_lease_set_lists_and_leases_with_a_request_timeout_of_duration_max() {
    let sets = (0..3)
        .map(|i| (format!("account-{i}"), MemoryLeaseSetStore::new()))
        .collect();
    let set = QuorumLeaseSetStore::with_labels(sets)
        .unwrap()
        .with_request_timeout(Duration::MAX);
    let lease = set.lease("partitions/0").unwrap();
    let id = LeaseId::new();
    assert_eq!(lease.acquire(id, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(set.list("partitions/").await.unwrap().len(), 1);
    lease.release(id).await.unwrap();
}
