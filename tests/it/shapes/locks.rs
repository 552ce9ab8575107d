//! Locks by name from one provider, over the in-memory set store with
//! paused time: two providers contend for a name as two processes do, and
//! hold different names at once; one provider never hands out a second
//! guard of a name while the first lives; bad names are refused before any
//! lease is made; a name's mutex is for guards, or for the task given.

use std::time::Duration;

use blob_mutex::{
    store::LeaseSetStore, term::StopReason, testing::MemoryLeaseSetStore, BlobLocks,
    CancellationToken, Error, LeaderContext, MutexOptions, TryAcquire,
};
use tokio::time::Instant;

/// The default lease duration.
const LEASE: Duration = Duration::from_secs(15);
/// A follower's poll with the defaults (`acquire_retry` 1 s, jitter 0.2),
/// and slack for the release and the acquire requests.
const POLL: Duration = Duration::from_millis(1_500);

fn locks(store: &MemoryLeaseSetStore, holder: &str) -> BlobLocks<MemoryLeaseSetStore> {
    let options = MutexOptions::default().with_holder(holder.to_owned());
    BlobLocks::with_store(store.clone(), options).unwrap()
}

fn acquired(attempt: TryAcquire) -> blob_mutex::MutexGuard {
    match attempt {
        TryAcquire::Acquired(guard) => guard,
        held => panic!("a free lock was not acquired: {held:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn two_providers_contend_for_one_name_and_hold_different_names_at_once() {
    let store = MemoryLeaseSetStore::new();
    let (a, b) = (locks(&store, "a"), locks(&store, "b"));
    let order = acquired(a.try_acquire("order-42").await.unwrap());
    let TryAcquire::Held(Some(leader)) = b.try_acquire("order-42").await.unwrap() else {
        panic!("b got the lock a holds");
    };
    assert_eq!((leader.holder.as_str(), leader.epoch), ("a", order.epoch()));

    let other = b.acquire("order-43").await.unwrap();
    assert!(
        order.is_current() && other.is_current(),
        "both hold at once"
    );
    assert_eq!(store.get("order-42").holder().as_deref(), Some("a"));
    assert_eq!(store.get("order-43").holder().as_deref(), Some("b"));
    tokio::time::sleep(LEASE * 3).await;
    assert!(order.is_current() && other.is_current(), "both renewed");

    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.acquire("order-42").await.unwrap() }
    });
    tokio::time::sleep(LEASE * 2).await;
    assert!(!waiting.is_finished(), "b waits while a holds order-42");
    let released = Instant::now();
    let report = order.release().await.unwrap();
    assert_eq!(report.reason, StopReason::Finished);
    let taken = tokio::time::timeout(POLL * 2, waiting)
        .await
        .expect("b takes order-42 soon after a released it")
        .unwrap();
    assert!(Instant::now() - released <= POLL);
    assert_eq!(taken.epoch(), 2);
    assert_eq!(store.get("order-42").holder().as_deref(), Some("b"));
    taken.release().await.unwrap();
    other.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn one_provider_never_hands_out_a_second_guard_of_a_name_while_the_first_lives() {
    let store = MemoryLeaseSetStore::new();
    let locks = locks(&store, "a");
    let first = locks.acquire("job").await.unwrap();
    let TryAcquire::Held(Some(leader)) = locks.try_acquire("job").await.unwrap() else {
        panic!("a second guard of job was handed out");
    };
    assert_eq!(leader.epoch, first.epoch());
    let second = tokio::spawn({
        let locks = locks.clone();
        async move { locks.acquire("job").await.unwrap() }
    });
    tokio::time::sleep(LEASE * 4).await;
    assert!(!second.is_finished(), "the second acquire waits");
    assert!(
        first.is_current(),
        "and never takes the lease from the first"
    );
    drop(first);
    let second = tokio::time::timeout(POLL * 2, second)
        .await
        .expect("the second acquire holds once the first guard is gone")
        .unwrap();
    assert_eq!(second.epoch(), 2);
    second.release().await.unwrap();
}

/// The first guard's holder wedges: its term ends unreleased (watchdog)
/// and storage expires its lease, yet the guard lives, and with it the
/// holder's code.
#[tokio::test(start_paused = true)]
async fn one_provider_hands_out_no_second_guard_of_a_name_while_the_first_lives_past_its_lease() {
    let store = MemoryLeaseSetStore::new();
    let options = MutexOptions::default()
        .with_holder("a".to_owned())
        .with_heartbeat_timeout(Duration::from_secs(2));
    let locks = BlobLocks::with_store(store.clone(), options).unwrap();
    let first = locks.acquire("job").await.unwrap();
    let second = tokio::spawn({
        let locks = locks.clone();
        async move { locks.acquire("job").await.unwrap() }
    });
    first.cancelled().await;
    tokio::time::sleep(LEASE * 3).await;
    assert!(!first.is_current());
    assert!(
        !store.get("job").is_held(),
        "the first guard's lease expired"
    );
    assert!(!second.is_finished(), "the second acquire still waits");
    assert!(
        matches!(locks.try_acquire("job").await.unwrap(), TryAcquire::Held(_)),
        "try_acquire says held while the first guard lives"
    );
    drop(first);
    let second = tokio::time::timeout(POLL * 2, second)
        .await
        .expect("the second acquire holds once the first guard is gone")
        .unwrap();
    assert_eq!(second.epoch(), 2);
    second.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn names_that_cannot_name_a_lock_are_refused_before_any_lease_is_made() {
    let store = MemoryLeaseSetStore::new();
    let locks = locks(&store, "a");
    for bad in [
        "",
        "members/a",
        "partitions/p",
        "a/members/b",
        "x.candidates",
        "a//b",
        "a\0",
    ] {
        for refused in [
            locks.acquire(bad).await.map(drop),
            locks.try_acquire(bad).await.map(drop),
            locks.mutex(bad).map(drop),
            locks
                .mutex_with_task(bad, |_: LeaderContext| async { Ok::<(), Error>(()) })
                .map(drop),
        ] {
            match refused {
                Err(Error::InvalidOption { field: "name", .. }) => {}
                other => panic!("{bad:?} was not refused: {other:?}"),
            }
        }
    }
    assert!(
        store.list("").await.unwrap().is_empty(),
        "no lease was made"
    );
}

#[tokio::test(start_paused = true)]
async fn a_names_mutex_is_for_guards_unless_made_with_a_task() {
    let store = MemoryLeaseSetStore::new();
    let locks = locks(&store, "a");
    let token = CancellationToken::new();
    match locks
        .mutex("job")
        .unwrap()
        .run_task_when_mutex_acquired(token.clone())
        .await
    {
        Err(Error::InvalidOption { field: "task", .. }) => {}
        other => panic!("a guard-only mutex ran a task: {other:?}"),
    }
    let mutex = locks
        .mutex_with_task("job", |ctx: LeaderContext| async move {
            assert_eq!(ctx.epoch(), 1);
            Ok::<(), Error>(())
        })
        .unwrap();
    assert_eq!(mutex.holder(), "a", "the provider's options");
    let outcome = mutex.run_once(token).await.unwrap();
    assert!(
        matches!(outcome, blob_mutex::OnceOutcome::Ran { .. }),
        "{outcome:?}"
    );
    assert_eq!(store.get("job").epoch(), 1);
}

#[test]
fn the_providers_options_are_checked_when_it_is_made_and_a_default_holder_taken_once() {
    let store = MemoryLeaseSetStore::new();
    let bad = MutexOptions::default().with_lease_duration(Duration::from_secs(5));
    assert!(matches!(
        BlobLocks::with_store(store.clone(), bad),
        Err(Error::InvalidOption {
            field: "lease_duration",
            ..
        })
    ));
    let locks = BlobLocks::with_store(store, MutexOptions::default()).unwrap();
    let holder = locks.options().holder().expect("a holder taken once");
    assert_eq!(locks.mutex("x").unwrap().holder(), holder);
    assert_eq!(locks.mutex("y").unwrap().holder(), holder);
}
