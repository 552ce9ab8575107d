//! Leadership on a quorum of three accounts (three Azurites, each behind a
//! fault proxy), with worker processes: one account down changes nothing;
//! two down stop the leader before its deadline and nobody leads until one
//! comes back; an asymmetric partition never makes two leaders. And, from
//! this process, the epoch across accounts that fell behind or lost their
//! blobs: it never goes back, and renewals bring every account up to it.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex::{
    azure::BlobLeaseManager, quorum::QuorumLeaseStore, store::Acquire, store::LeaseId,
    store::LeaseState, store::LeaseStore, store::StampOptions,
};
use blob_mutex_testkit::azurite::{self, Azurite};
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::workers::{Cluster, Spec};

const LEASE: Duration = Duration::from_secs(15);
/// The default safety margin (1 s, scaled for clock drift), as in the
/// single-account fault tests.
const MARGIN: Duration = Duration::from_millis(1150);
/// Longer than a lease: a lease held on an account that goes away expires.
const OUTAGE: Duration = Duration::from_secs(17);
const WORKERS: usize = 3;
const OPTIONS: &[&str] = &["--acquire-retry-ms", "500"];

fn three() -> [Azurite; 3] {
    [Azurite::start(), Azurite::start(), Azurite::start()]
}

/// Starts `WORKERS` quorum workers; worker `i` reaches account `k` through
/// `proxy(i, k)`.
fn spawn(cluster: &mut Cluster, container: &str, proxy: impl Fn(usize, usize) -> String) {
    for i in 0..WORKERS {
        let strings: Vec<String> = (0..3).map(|k| proxy(i, k)).collect();
        cluster.spawn(Spec::quorum_worker(
            &format!("w{i}"),
            &strings,
            container,
            "quorum",
            OPTIONS,
        ));
    }
}

/// Waits until the leader's first renewal round has reached every account
/// through the leader's proxies (a renew, or an acquire under the same id
/// for an account another candidate held when it won), every account is
/// leased, and every account carries the term's `epoch` (an account that
/// missed the stamp is brought up to it after that renewal; until then it
/// shows no epoch, and could not count for the next term).
async fn settled(leader_proxies: &[Proxy], accounts: &[Azurite], container: &str, epoch: u64) {
    let (lease, first) =
        blob_mutex_testkit::wait_for("the leader's first renewal", LEASE, || async {
            leader_proxies.iter().find_map(|proxy| {
                proxy
                    .log()
                    .into_iter()
                    .find(|r| r.is("renew") && r.forwarded_at.is_some())
                    .and_then(|r| Some((r.lease_id?, r.forwarded_at?)))
            })
        })
        .await;
    // The round's requests go out together, a renew interval after the
    // acquires that won the term.
    let round = first - Duration::from_secs(1);
    for proxy in leader_proxies {
        blob_mutex_testkit::wait_for(
            "the first renewal round on every account",
            LEASE,
            || async { (proxy.last_forwarded_for(&lease)? >= round).then_some(()) },
        )
        .await;
    }
    for account in accounts {
        blob_mutex_testkit::wait_for("every account leased", LEASE, || async {
            (state_on(account, container).await == Some(LeaseState::Leased)).then_some(())
        })
        .await;
        // The leader leases an account it did not win only at a renewal
        // that finds it free; the followers' attempts hold it for moments
        // (longer on a loaded machine), so this can take several renewals:
        // on two loaded cores, six renewals (two leases) once did not do.
        blob_mutex_testkit::wait_for(
            "every account carrying the term's epoch",
            4 * LEASE,
            || async { (stamp_on(account, container).await.1 == epoch).then_some(()) },
        )
        .await;
    }
}

/// The lease state on one account, read straight from its Azurite.
async fn state_on(account: &Azurite, container: &str) -> Option<LeaseState> {
    let manager = BlobLeaseManager::new(&account.settings(container, "quorum")).unwrap();
    manager.inspect().await.unwrap().map(|info| info.state)
}

#[tokio::test]
async fn one_account_down_changes_nothing_for_the_leader() {
    let mut accounts = three();
    let proxies: Vec<Proxy> = accounts.iter().map(|a| Proxy::start(a.port)).collect();
    let container = azurite::unique_container("quorum-one");
    let mut cluster = Cluster::new();
    spawn(&mut cluster, &container, |_, k| {
        proxies[k].connection_string()
    });
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    settled(&proxies, &accounts, &container, epoch).await;

    // Account 0 blackholed, longer than a lease; then back.
    proxies[0].partition();
    tokio::time::sleep(OUTAGE).await;
    proxies[0].heal();
    blob_mutex_testkit::wait_for("account 0 leased again", LEASE, || async {
        (state_on(&accounts[0], &container).await == Some(LeaseState::Leased)).then_some(())
    })
    .await;
    // Account 2 stopped (an in-memory Azurite: it comes back empty).
    accounts[2].stop();
    tokio::time::sleep(OUTAGE).await;
    accounts[2].restart();
    blob_mutex_testkit::wait_for("account 2 leased again", LEASE, || async {
        (state_on(&accounts[2], &container).await == Some(LeaseState::Leased)).then_some(())
    })
    .await;

    let history = cluster.history();
    let record = cluster.dump();
    history.assert_safe(&record);
    assert_eq!(
        history.intervals.len(),
        1,
        "one term, no gap\n{}",
        cluster.dump_all()
    );
    let term = &history.intervals[0];
    assert_eq!(
        (term.worker, term.epoch, term.end),
        (leader, epoch, None),
        "the first leader still leads with its epoch\n{record}"
    );
    println!(
        "one account down twice (blackholed, then stopped, {}s each): one term, epoch {epoch}",
        OUTAGE.as_secs()
    );
}

#[tokio::test]
async fn two_accounts_down_stop_the_leader_and_nobody_leads_until_one_is_back() {
    let accounts = three();
    let proxies: Vec<Proxy> = accounts.iter().map(|a| Proxy::start(a.port)).collect();
    let container = azurite::unique_container("quorum-two");
    let mut cluster = Cluster::new();
    spawn(&mut cluster, &container, |_, k| {
        proxies[k].connection_string()
    });
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    settled(&proxies, &accounts, &container, epoch).await;

    proxies[0].partition();
    proxies[1].partition();
    let down_at = cluster.now();
    // Every renewal reached account 0 until now: the last successful one was
    // sent before the last request forwarded there, so the leader's deadline
    // comes at the latest a lease after it, less the margin.
    let last_forwarded = proxies[0]
        .last_lease_request_forwarded()
        .expect("lease requests reached account 0");
    let deadline = cluster.at(last_forwarded) + LEASE - MARGIN;
    let (reason, stopped_at) = cluster
        .wait_stopped(leader, down_at, LEASE + Duration::from_secs(5))
        .await;
    assert_eq!(reason, "deadline", "{}", cluster.dump());
    assert!(
        stopped_at <= deadline,
        "stopped at {stopped_at:?}, after the deadline {deadline:?}\n{}",
        cluster.dump()
    );
    // Nobody leads on one account, for longer than a lease.
    tokio::time::sleep(LEASE + Duration::from_secs(2)).await;
    let up_at = cluster.now();
    let leading = cluster.leading_between(down_at, up_at);
    assert!(leading.is_empty(), "led on a minority: {leading:?}");

    proxies[1].heal();
    // A follower backs off up to 5 s after failed attempts, and an attempt
    // may take a request timeout (3 s); slack for a loaded machine.
    let (_, next_epoch, next_at) = cluster
        .wait_leading_after(up_at, Duration::from_secs(15))
        .await;
    assert!(next_epoch > epoch, "{next_epoch} after {epoch}");
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    println!(
        "two accounts down: leader stopped {:.3}s after the outage ({:.3}s before its deadline bound); \
         next leader {:.3}s after one account was back; {}",
        (stopped_at - down_at).as_secs_f64(),
        (deadline - stopped_at).as_secs_f64(),
        (next_at - up_at).as_secs_f64(),
        history.summary()
    );
}

#[tokio::test]
async fn an_asymmetric_partition_never_makes_two_leaders() {
    let accounts = three();
    // Each worker reaches each account through a proxy of its own.
    let proxies: Vec<Vec<Proxy>> = (0..WORKERS)
        .map(|_| accounts.iter().map(|a| Proxy::start(a.port)).collect())
        .collect();
    let container = azurite::unique_container("quorum-asym");
    let mut cluster = Cluster::new();
    spawn(&mut cluster, &container, |i, k| {
        proxies[i][k].connection_string()
    });
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    let follower = (leader + 1) % WORKERS;
    settled(&proxies[leader], &accounts, &container, epoch).await;

    // The leader reaches accounts 0 and 1; a follower only account 2.
    proxies[leader][2].partition();
    proxies[follower][0].partition();
    proxies[follower][1].partition();
    let phase_one = cluster.now();
    tokio::time::sleep(OUTAGE + Duration::from_secs(3)).await;
    let leading = cluster.leading_between(phase_one, cluster.now());
    assert!(leading.is_empty(), "{leading:?}\n{}", cluster.dump());
    assert_eq!(cluster.leaders(), [leader], "{}", cluster.dump());

    // Turned around: the leader reaches only account 2, the follower all.
    for proxy in proxies.iter().flatten() {
        proxy.heal();
    }
    proxies[leader][0].partition();
    proxies[leader][1].partition();
    let phase_two = cluster.now();
    let (reason, stopped_at) = cluster
        .wait_stopped(leader, phase_two, LEASE + Duration::from_secs(5))
        .await;
    assert_eq!(reason, "deadline", "{}", cluster.dump());
    let (next, next_epoch, next_at) = cluster
        .wait_leading_after(phase_two, LEASE + Duration::from_secs(15))
        .await;
    assert_ne!(next, leader);
    assert!(next_epoch > epoch);
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    println!(
        "asymmetric partition: one term through phase one; the cut-off leader stopped {:.3}s after, \
         the next led {:.3}s after ({:.3}s after the stop); {}",
        (stopped_at - phase_two).as_secs_f64(),
        (next_at - phase_two).as_secs_f64(),
        (next_at - stopped_at).as_secs_f64(),
        history.summary()
    );
}

/// A quorum over the three accounts' proxies, from this process.
fn quorum_over(proxies: &[Proxy], container: &str) -> QuorumLeaseStore {
    let settings: Vec<_> = proxies
        .iter()
        .map(|p| p.settings(container, "quorum"))
        .collect();
    QuorumLeaseStore::from_settings(&settings).unwrap()
}

/// Acquires the quorum's lease under a new id, retrying while an account
/// is slow to create its blob.
async fn acquire(store: &QuorumLeaseStore) -> LeaseId {
    let id = LeaseId::new();
    blob_mutex_testkit::wait_for("the quorum acquired", LEASE, || async {
        matches!(store.acquire(id, LEASE).await, Ok(Acquire::Acquired)).then_some(())
    })
    .await;
    id
}

/// Acquires the quorum's lease under a new id, retrying while an account
/// is slow to create its blob; `None` once it is answered as held.
async fn acquired_or_held(store: &QuorumLeaseStore) -> Option<LeaseId> {
    let id = LeaseId::new();
    blob_mutex_testkit::wait_for("the quorum acquired or held", LEASE, || async {
        match store.acquire(id, LEASE).await {
            Ok(Acquire::Acquired) => Some(Some(id)),
            Ok(Acquire::Held) => Some(None),
            Err(_) => None,
        }
    })
    .await
}

/// One term: acquire, stamp, release; the stamp's answer.
async fn term(store: &QuorumLeaseStore, holder: &str) -> Result<u64, blob_mutex::Error> {
    let id = acquire(store).await;
    let stamped = store.stamp(id, holder, &StampOptions::new()).await;
    let _ = store.release(id).await;
    stamped
}

/// The holder and epoch one account carries, read straight from its
/// Azurite (no holder and epoch 0 without a blob).
async fn stamp_on(account: &Azurite, container: &str) -> (Option<String>, u64) {
    let manager = BlobLeaseManager::new(&account.settings(container, "quorum")).unwrap();
    match manager.inspect().await.ok().flatten() {
        Some(info) => (info.holder, info.epoch),
        None => (None, 0),
    }
}

/// Renews `id` until every account carries `stamp` (holder and epoch).
async fn renewed_until_every_account_carries(
    store: &QuorumLeaseStore,
    id: LeaseId,
    accounts: &[Azurite],
    container: &str,
    stamp: &(Option<String>, u64),
) {
    blob_mutex_testkit::wait_for("every account brought up to the stamp", LEASE, || async {
        store.renew(id).await.unwrap();
        for account in accounts {
            if stamp_on(account, container).await != *stamp {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// A first term, renewed until every account carries it (an account that
/// answers the stamp late is brought up to it by the renewals).
async fn first_term(store: &QuorumLeaseStore, accounts: &[Azurite], container: &str) -> u64 {
    let id = acquire(store).await;
    let epoch = store.stamp(id, "t1", &StampOptions::new()).await.unwrap();
    let stamp = (Some("t1".to_owned()), epoch);
    renewed_until_every_account_carries(store, id, accounts, container, &stamp).await;
    store.release(id).await.unwrap();
    epoch
}

#[tokio::test]
async fn the_epoch_never_goes_back_after_one_account_behind_and_another_restarted_empty() {
    let mut accounts = three();
    let proxies: Vec<Proxy> = accounts.iter().map(|a| Proxy::start(a.port)).collect();
    let container = azurite::unique_container("quorum-epoch");
    let store = quorum_over(&proxies, &container);
    let mut epochs = vec![first_term(&store, &accounts, &container).await];
    // Account 2 blackholed during two terms: it keeps the first epoch.
    proxies[2].partition();
    for holder in ["t2", "t3"] {
        epochs.push(term(&store, holder).await.unwrap());
    }
    proxies[2].heal();
    // Account 0 restarted empty, and account 1 (the only one left with the
    // last epoch) silent: the next term's first majority is accounts 0 and
    // 2. It is held off (account 0 forgot, while 2 carries an epoch), or
    // its stamp fails (no majority carries an epoch).
    accounts[0].restart();
    proxies[1].partition();
    if let Some(id) = acquired_or_held(&store).await {
        match store.stamp(id, "t4", &StampOptions::new()).await {
            Ok(epoch) => epochs.push(epoch),
            Err(e) => assert!(e.is_transient(), "{e}"),
        }
        let _ = store.release(id).await;
    }
    proxies[1].heal();
    epochs.push(term(&store, "t5").await.unwrap());
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "the epoch went back: {epochs:?}"
    );
    println!("one account behind, another restarted empty: epochs {epochs:?}");
}

#[tokio::test]
async fn a_renewal_brings_an_account_that_missed_the_stamp_up_to_it() {
    let mut accounts = three();
    let proxies: Vec<Proxy> = accounts.iter().map(|a| Proxy::start(a.port)).collect();
    let container = azurite::unique_container("quorum-catch-up");
    let store = quorum_over(&proxies, &container);
    first_term(&store, &accounts, &container).await;
    let id = acquire(&store).await;
    proxies[2].partition();
    let epoch = store.stamp(id, "t2", &StampOptions::new()).await.unwrap();
    proxies[2].heal();
    let carried = (Some("t2".to_owned()), epoch);
    renewed_until_every_account_carries(&store, id, &accounts, &container, &carried).await;
    // Restarted empty: leased and stamped again by the next renewals.
    accounts[1].restart();
    renewed_until_every_account_carries(&store, id, &accounts, &container, &carried).await;
    store.release(id).await.unwrap();
}
