//! One epoch per term on every account, when the accounts' own records
//! start at different epochs: over in-memory accounts that each start a
//! record at their own clock, as Azure's do (see `lift`).

use std::future::Future;
use std::time::Duration;

use super::QuorumLeaseStore;
use crate::error::Result;
use crate::store::memory::MemoryLeaseStore;
use crate::store::{Acquire, LeaseId, LeaseInfo, LeaseStore, StampOptions};

const D: Duration = Duration::from_secs(15);

/// An account whose record, when it has no epoch, starts at `first`
/// (unless the caller names an epoch above 1), as a blob's record starts at
/// the second after storage's clock.
#[derive(Clone)]
struct OwnClock {
    inner: MemoryLeaseStore,
    first: u64,
}

impl LeaseStore for OwnClock {
    fn acquire(&self, id: LeaseId, d: Duration) -> impl Future<Output = Result<Acquire>> + Send {
        self.inner.acquire(id, d)
    }
    fn renew(&self, id: LeaseId) -> impl Future<Output = Result<()>> + Send {
        self.inner.renew(id)
    }
    fn release(&self, id: LeaseId) -> impl Future<Output = Result<()>> + Send {
        self.inner.release(id)
    }
    fn stamp(
        &self,
        id: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> impl Future<Output = Result<u64>> + Send {
        let floor = if self.inner.epoch() == 0 && options.floor() <= 1 {
            self.first
        } else {
            options.floor()
        };
        let options = options.clone().with_floor(floor);
        async move { self.inner.stamp(id, holder, &options).await }
    }
    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>>> + Send {
        self.inner.inspect()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

/// The first term of a quorum whose stamp straddles a second of storage's
/// clock: one account starts its record a second later than the others.
#[tokio::test(start_paused = true)]
async fn every_account_carries_the_terms_epoch_when_their_records_start_apart() {
    let second = 1 << 20;
    let accounts: Vec<OwnClock> = [101, 100, 100]
        .into_iter()
        .enumerate()
        .map(|(i, s)| OwnClock {
            inner: MemoryLeaseStore::new(format!("account-{i}")),
            first: s * second,
        })
        .collect();
    let store = QuorumLeaseStore::new(accounts.clone()).unwrap();
    let id = LeaseId::new();
    assert_eq!(store.acquire(id, D).await.unwrap(), Acquire::Acquired);
    let epoch = store.stamp(id, "a", &StampOptions::new()).await.unwrap();
    let carried: Vec<u64> = accounts.iter().map(|a| a.inner.epoch()).collect();
    assert_eq!(
        carried, [epoch; 3],
        "every account carries the term's epoch"
    );
    let seen = store.inspect().await.unwrap().expect("the lease exists");
    assert_eq!(seen.epoch, epoch, "the merged view names the term's epoch");
    assert_eq!(epoch, 101 * second, "the largest start wins");
    store.release(id).await.unwrap();
}
