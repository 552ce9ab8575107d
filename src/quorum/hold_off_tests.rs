//! A new term on accounts that forgot the lease, on in-memory accounts with
//! paused time: held off while a lease granted before the forgetting may
//! still carry another holder's deadline, and not a moment more.

use std::time::Duration;

use tokio::time::{advance, Instant};

use super::hold_off::HOLD_OFF;
use super::{QuorumLeaseSetStore, QuorumLeaseStore};
use crate::error::Error;
use crate::store::{Acquire, LeaseId, LeaseSetStore, LeaseStore, StampOptions};
use crate::{testing::MemoryLeaseSetStore, testing::MemoryLeaseStore, MutexOptions};

const D: Duration = Duration::from_secs(15);

fn accounts(n: usize) -> Vec<MemoryLeaseStore> {
    (0..n)
        .map(|i| MemoryLeaseStore::new(format!("account-{i}")))
        .collect()
}

fn quorum(accounts: &[MemoryLeaseStore]) -> QuorumLeaseStore<MemoryLeaseStore> {
    QuorumLeaseStore::new(accounts.to_vec()).unwrap()
}

/// The leader's deadline after a call made at `call`, as the engine
/// computes it with the default options.
fn deadline(call: Instant) -> Instant {
    let options = MutexOptions {
        lease_duration: D,
        ..MutexOptions::default()
    };
    call + D - options.effective_safety_margin()
}

/// The chaos run's two owners (seed 1248734272, sdk-v021): account 1
/// blackholed past the leader's lease there, so its deadline rests on
/// {0, 2}; account 2 restarted empty; a candidate granted {1, 2}, a
/// majority, 84 ms into its term, while the leader worked on until the
/// renewal that found account 2 gone.
#[tokio::test(start_paused = true)]
async fn a_candidate_granted_an_account_restarted_empty_and_one_back_waits_for_the_leaders_deadline(
) {
    let accounts = accounts(3);
    let (a, b) = (quorum(&accounts), quorum(&accounts));
    let lease_a = LeaseId::new();
    let mut last_call = Instant::now();
    assert_eq!(a.acquire(lease_a, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(
        a.stamp(lease_a, "a", &StampOptions::new()).await.unwrap(),
        1
    );
    accounts[1].set_unavailable(true);
    for _ in 0..4 {
        advance(D / 3).await;
        let call = Instant::now();
        a.renew(lease_a).await.unwrap();
        last_call = call;
    }
    assert!(!accounts[1].is_held(), "A's lease on account 1 has expired");
    accounts[1].set_unavailable(false);
    accounts[2].lose_blob();
    let a_deadline = deadline(last_call);

    // B campaigns every second; A renews every D / 3 until its term ends.
    let lease_b = LeaseId::new();
    let (mut a_leads, mut next_renewal) = (true, last_call + D / 3);
    let b_acquired = loop {
        if b.acquire(lease_b, D).await.unwrap() == Acquire::Acquired {
            break Instant::now();
        }
        if a_leads && Instant::now() >= next_renewal {
            let call = Instant::now();
            match a.renew(lease_a).await {
                Ok(()) => next_renewal = call + D / 3,
                Err(e) => {
                    assert!(matches!(e, Error::LeaseLost(_)), "{e:?}");
                    assert!(call < a_deadline, "A's renewal ran before its deadline");
                    a_leads = false;
                }
            }
        }
        assert!(
            Instant::now() < last_call + HOLD_OFF * 2,
            "B never acquired"
        );
        advance(Duration::from_secs(1)).await;
    };
    assert!(
        b_acquired > a_deadline,
        "B acquired {:?} before A's deadline",
        a_deadline.saturating_duration_since(b_acquired)
    );
    assert!(!a_leads, "A's next renewal ended its term");
    let epoch = b.stamp(lease_b, "b", &StampOptions::new()).await.unwrap();
    assert!(epoch > 1, "B's epoch {epoch} after A's 1");
}

#[tokio::test(start_paused = true)]
async fn one_account_restarted_empty_beside_two_healthy_ones_costs_no_wait() {
    let accounts = accounts(3);
    let (a, b) = (quorum(&accounts), quorum(&accounts));
    let lease_a = LeaseId::new();
    a.acquire(lease_a, D).await.unwrap();
    assert_eq!(
        a.stamp(lease_a, "a", &StampOptions::new()).await.unwrap(),
        1
    );
    a.release(lease_a).await.unwrap();
    accounts[2].lose_blob();
    let lease_b = LeaseId::new();
    assert_eq!(b.acquire(lease_b, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(
        b.stamp(lease_b, "b", &StampOptions::new()).await.unwrap(),
        2
    );
    assert!(
        accounts.iter().all(MemoryLeaseStore::is_held),
        "the account restarted empty is held too"
    );
}

#[tokio::test(start_paused = true)]
async fn a_brand_new_quorum_elects_at_once() {
    let accounts = accounts(3);
    let store = quorum(&accounts);
    let id = LeaseId::new();
    let start = Instant::now();
    assert_eq!(store.acquire(id, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(
        store
            .stamp(id, "first", &StampOptions::new())
            .await
            .unwrap(),
        1
    );
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

/// Account 0 held under a lease of its own (another application's, or
/// an instance that campaigns on it alone), renewed as long as the test
/// runs: readable, never granted.
async fn held_elsewhere(account: &MemoryLeaseStore) -> LeaseId {
    let foreign = LeaseId::new();
    assert_eq!(
        account
            .acquire(foreign, Duration::from_secs(60))
            .await
            .unwrap(),
        Acquire::Acquired
    );
    foreign
}

/// With account 0 held elsewhere and account 2 restarted empty, the only
/// majority is {1, 2}: a new term waits the hold-off from the first time
/// it saw account 2 empty, gives back what it was granted meanwhile, then
/// leads with an epoch above the last.
#[tokio::test(start_paused = true)]
async fn a_failover_that_needs_an_account_restarted_empty_waits_the_hold_off() {
    let accounts = accounts(3);
    let a = quorum(&accounts);
    let lease_a = LeaseId::new();
    a.acquire(lease_a, D).await.unwrap();
    assert_eq!(
        a.stamp(lease_a, "a", &StampOptions::new()).await.unwrap(),
        1
    );
    a.release(lease_a).await.unwrap();
    let foreign = held_elsewhere(&accounts[0]).await;
    accounts[2].lose_blob();
    let b = quorum(&accounts);
    let lease_b = LeaseId::new();
    let first = Instant::now();
    let acquired = loop {
        accounts[0].renew(foreign).await.unwrap();
        match b.acquire(lease_b, D).await {
            Ok(Acquire::Acquired) => break Instant::now(),
            Ok(Acquire::Held) => {}
            Err(e) => panic!("{e:?}"),
        }
        assert!(
            !accounts[1].is_held() && !accounts[2].is_held(),
            "a held-off attempt gives back what it was granted"
        );
        advance(Duration::from_secs(1)).await;
    };
    let waited = acquired - first;
    assert!(
        waited >= HOLD_OFF && waited < HOLD_OFF + Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(
        b.stamp(lease_b, "b", &StampOptions::new()).await.unwrap(),
        2
    );
}

/// A read that finds the account carrying an epoch again (a term stamped
/// it) starts the wait over: the account may forget again, and the lease
/// of that term with it.
#[tokio::test(start_paused = true)]
async fn the_wait_starts_over_once_the_account_is_seen_with_an_epoch() {
    let accounts = accounts(3);
    let a = quorum(&accounts);
    let lease_a = LeaseId::new();
    a.acquire(lease_a, D).await.unwrap();
    a.stamp(lease_a, "a", &StampOptions::new()).await.unwrap();
    a.release(lease_a).await.unwrap();
    let foreign = held_elsewhere(&accounts[0]).await;
    accounts[2].lose_blob();
    let (b, c) = (quorum(&accounts), quorum(&accounts));
    let (lease_b, lease_c) = (LeaseId::new(), LeaseId::new());
    assert_eq!(b.acquire(lease_b, D).await.unwrap(), Acquire::Held);
    advance(HOLD_OFF / 2).await;
    accounts[0].renew(foreign).await.unwrap();
    // Another instance, which first saw account 2 empty now, leads once
    // its own hold-off is over, and stamps account 2.
    assert_eq!(c.acquire(lease_c, D).await.unwrap(), Acquire::Held);
    for _ in 0..2 {
        advance(HOLD_OFF / 2).await;
        accounts[0].renew(foreign).await.unwrap();
    }
    assert_eq!(c.acquire(lease_c, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(
        c.stamp(lease_c, "c", &StampOptions::new()).await.unwrap(),
        2
    );
    c.release(lease_c).await.unwrap();
    assert_eq!(
        b.acquire(lease_b, D).await.unwrap(),
        Acquire::Acquired,
        "2 carries an epoch now"
    );
    b.release(lease_b).await.unwrap();
    accounts[2].lose_blob();
    assert_eq!(
        b.acquire(lease_b, D).await.unwrap(),
        Acquire::Held,
        "seen with an epoch since: the wait starts over, though b first saw it empty long ago"
    );
}

/// A lease set makes a store per attempt on a partition: the record of
/// accounts seen without an epoch is kept across them, so the hold-off
/// ends.
#[tokio::test(start_paused = true)]
async fn a_lease_sets_attempts_share_the_hold_off() {
    let sets: Vec<(String, MemoryLeaseSetStore)> = (0..3)
        .map(|i| (format!("account-{i}"), MemoryLeaseSetStore::new()))
        .collect();
    let accounts: Vec<MemoryLeaseStore> = sets.iter().map(|(_, s)| s.get("p")).collect();
    let set = QuorumLeaseSetStore::with_labels(sets).unwrap();
    let a = set.lease("p").unwrap();
    let lease_a = LeaseId::new();
    a.acquire(lease_a, D).await.unwrap();
    assert_eq!(
        a.stamp(lease_a, "a", &StampOptions::new()).await.unwrap(),
        1
    );
    a.release(lease_a).await.unwrap();
    let foreign = held_elsewhere(&accounts[0]).await;
    accounts[2].lose_blob();
    let first = Instant::now();
    let acquired = loop {
        accounts[0].renew(foreign).await.unwrap();
        let attempt = set.lease("p").unwrap();
        if attempt.acquire(LeaseId::new(), D).await.unwrap() == Acquire::Acquired {
            break Instant::now();
        }
        assert!(
            first.elapsed() < HOLD_OFF * 2,
            "the hold-off never ended across attempts"
        );
        advance(Duration::from_secs(1)).await;
    };
    let waited = acquired - first;
    assert!(
        waited >= HOLD_OFF && waited < HOLD_OFF + Duration::from_secs(2),
        "{waited:?}"
    );
}

/// An attempt that finds the account held by another id starts the wait
/// over, though no majority granted it: that holder may stamp the account,
/// and it may forget again, with that holder's lease.
#[tokio::test(start_paused = true)]
async fn the_wait_starts_over_once_the_account_is_seen_held_by_another() {
    let accounts = accounts(3);
    let a = quorum(&accounts);
    let lease_a = LeaseId::new();
    a.acquire(lease_a, D).await.unwrap();
    a.stamp(lease_a, "a", &StampOptions::new()).await.unwrap();
    a.release(lease_a).await.unwrap();
    let foreign = held_elsewhere(&accounts[0]).await;
    accounts[2].lose_blob();
    let b = quorum(&accounts);
    let lease_b = LeaseId::new();
    assert_eq!(b.acquire(lease_b, D).await.unwrap(), Acquire::Held);
    // Another holder leases account 2 for a while, then it forgets again.
    advance(HOLD_OFF / 2).await;
    accounts[0].renew(foreign).await.unwrap();
    let other = LeaseId::new();
    assert_eq!(
        accounts[2].acquire(other, D).await.unwrap(),
        Acquire::Acquired
    );
    assert_eq!(b.acquire(lease_b, D).await.unwrap(), Acquire::Held);
    accounts[2].lose_blob();
    advance(HOLD_OFF / 2 + Duration::from_secs(1)).await;
    accounts[0].renew(foreign).await.unwrap();
    assert_eq!(
        b.acquire(lease_b, D).await.unwrap(),
        Acquire::Held,
        "seen held by another since: the wait starts over"
    );
    advance(HOLD_OFF).await;
    accounts[0].renew(foreign).await.unwrap();
    assert_eq!(b.acquire(lease_b, D).await.unwrap(), Acquire::Acquired);
}

/// A candidate held off on an account that lost its blob, then silent for
/// longer than the hold-off (frozen, say) while a term acquired and stamped
/// that account, must not count it at once when it finds it without an
/// epoch again: the blob it first saw so is not the one it sees now, and
/// the term's lease there may carry a live deadline until the blob was
/// lost again. (The model checker's counterexample with freezes.)
#[tokio::test(start_paused = true)]
async fn a_candidate_silent_past_the_hold_off_starts_it_over_on_a_blob_made_anew() {
    let accounts = accounts(3);
    let (candidate, leader) = (quorum(&accounts), quorum(&accounts));
    // An old term stamped every account; account 2 then lost its blob, and
    // another application holds account 1 (for a minute at a time).
    let old = LeaseId::new();
    let stamped = quorum(&accounts);
    assert_eq!(stamped.acquire(old, D).await.unwrap(), Acquire::Acquired);
    stamped
        .stamp(old, "old", &StampOptions::new())
        .await
        .unwrap();
    stamped.release(old).await.unwrap();
    accounts[2].lose_blob();
    let foreign = held_elsewhere(&accounts[1]).await;

    // The candidate is granted {0, 2}, holds off on 2, and falls silent.
    let first_seen = Instant::now();
    let lease_c = LeaseId::new();
    assert_eq!(candidate.acquire(lease_c, D).await.unwrap(), Acquire::Held);

    // The leader waits out its own hold-off and leads on {0, 2}: account 2
    // carries its epoch.
    let lease_l = LeaseId::new();
    while leader.acquire(lease_l, D).await.unwrap() != Acquire::Acquired {
        advance(Duration::from_secs(1)).await;
        accounts[1].renew(foreign).await.unwrap();
    }
    leader
        .stamp(lease_l, "leader", &StampOptions::new())
        .await
        .unwrap();
    assert!(
        accounts[2].epoch() > 0,
        "account 2 carries the leader's epoch"
    );

    // Right after a renewal, account 0 goes down, account 2 loses its blob
    // again, and account 1 is let go: the leader's deadline rests on
    // leases that nobody can see any more.
    advance(D / 3).await;
    accounts[1].renew(foreign).await.unwrap();
    let call = Instant::now();
    leader.renew(lease_l).await.unwrap();
    let leader_deadline = deadline(call);
    accounts[0].set_unavailable(true);
    accounts[2].lose_blob();
    accounts[1].release(foreign).await.unwrap();
    assert!(first_seen.elapsed() > HOLD_OFF, "silent past the hold-off");

    // The candidate wakes and campaigns every second: granted {1, 2}.
    let acquired = loop {
        if candidate.acquire(lease_c, D).await.unwrap() == Acquire::Acquired {
            break Instant::now();
        }
        advance(Duration::from_secs(1)).await;
    };
    assert!(
        acquired >= leader_deadline,
        "the candidate acquired {:?} before the leader's deadline",
        leader_deadline - acquired
    );
}
