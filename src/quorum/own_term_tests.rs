//! The hold-off's record after this store's own term: an account that the
//! term stamped or renewed carried an epoch, or the term's lease, since the
//! store first saw it without one, and may have forgotten since only once
//! the term was over. Found by the model checker (`crates/model/tests/model`).

use std::time::Duration;

use tokio::time::{advance, Instant};

use super::QuorumLeaseStore;
use crate::store::{Acquire, LeaseId, LeaseStore, StampOptions};
use crate::{testing::MemoryLeaseStore, MutexOptions};

const D: Duration = Duration::from_secs(15);

/// A leads the first term of a new quorum (its acquire saw every account
/// without an epoch) for longer than the hold-off, with account 2 down
/// for the last lease of it, and ends its term. B leads on {0, 1}.
/// Account 1 restarts empty and account 2 comes back: A, campaigning
/// again, is granted {1, 2}, a majority, while B's deadline rests on
/// {0, 1}. A saw account 1 without an epoch before its own term stamped
/// it: that must not count toward the hold-off.
#[tokio::test(start_paused = true)]
async fn a_term_that_stamped_an_account_starts_its_hold_off_over() {
    let accounts: Vec<MemoryLeaseStore> = (0..3)
        .map(|i| MemoryLeaseStore::new(format!("account-{i}")))
        .collect();
    let a = QuorumLeaseStore::new(accounts.clone()).unwrap();
    let b = QuorumLeaseStore::new(accounts.clone()).unwrap();
    let lease_a = LeaseId::new();
    assert_eq!(a.acquire(lease_a, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(
        a.stamp(lease_a, "a", &StampOptions::new()).await.unwrap(),
        1
    );
    for _ in 0..15 {
        advance(D / 3).await;
        a.renew(lease_a).await.unwrap();
    }
    accounts[2].set_unavailable(true);
    for _ in 0..4 {
        advance(D / 3).await;
        a.renew(lease_a).await.unwrap();
    }
    a.release(lease_a).await.unwrap();
    assert!(!accounts[2].is_held(), "A's lease on account 2 has expired");

    let lease_b = LeaseId::new();
    let b_call = Instant::now();
    assert_eq!(b.acquire(lease_b, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(
        b.stamp(lease_b, "b", &StampOptions::new()).await.unwrap(),
        2
    );
    let options = MutexOptions {
        lease_duration: D,
        ..MutexOptions::default()
    };
    let b_deadline = b_call + D - options.effective_safety_margin();

    accounts[1].lose_blob();
    accounts[2].set_unavailable(false);
    let attempt = a.acquire(LeaseId::new(), D).await.unwrap();
    assert!(Instant::now() < b_deadline, "B still leads");
    assert_eq!(
        attempt,
        Acquire::Held,
        "A counted account 1, restarted empty, while B's deadline rests on it"
    );
}
