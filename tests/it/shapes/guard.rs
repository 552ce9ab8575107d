//! The guard, over the in-memory store with paused time: renewals keep the
//! lease for as long as the guard lives; when storage stops answering, its
//! cancellation fires before the lease could expire and `is_current()` says
//! `false` after; dropping it releases, so the next acquirer leads within a
//! poll; `try_acquire` on a held lease returns the leader at once, and the
//! error when it acquired the lease but could not stamp its term.

use crate::support::forward::{Forward, Wrap};
use std::future::Future;
use std::time::Duration;

use blob_mutex::{
    store::LeaseId, store::StampOptions, term::Leadership, term::StopReason,
    testing::MemoryLeaseStore, BlobDistributedMutex, Error, LeaderContext, MutexOptions,
    TryAcquire,
};
use tokio::time::Instant;

/// The default lease duration.
const LEASE: Duration = Duration::from_secs(15);
/// A follower's poll with the defaults (`acquire_retry` 1 s, jitter 0.2),
/// and slack for the release and the acquire requests.
const POLL: Duration = Duration::from_millis(1_500);

/// A mutex over `store` whose own task holds the lease until told to stop.
fn mutex(store: &MemoryLeaseStore, holder: &str) -> BlobDistributedMutex<MemoryLeaseStore> {
    let options = MutexOptions::default().with_holder(holder.to_owned());
    BlobDistributedMutex::with_store(store.clone(), options, |ctx: LeaderContext| async move {
        ctx.cancelled().await;
        Ok::<(), Error>(())
    })
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn renewals_keep_the_lease_while_the_guard_lives_and_release_gives_it_back() {
    let store = MemoryLeaseStore::new("guard");
    let mutex = mutex(&store, "a");
    let guard = mutex.acquire().await.unwrap();
    assert_eq!(guard.epoch(), 1);
    assert_eq!(*mutex.watch().borrow(), Leadership::Leader { epoch: 1 });
    tokio::time::sleep(LEASE * 4).await;
    assert!(guard.is_current(), "renewed in the background");
    assert!(store.is_held());
    assert_eq!((store.epoch(), store.holder().as_deref()), (1, Some("a")));
    let report = guard.release().await.unwrap();
    assert_eq!((report.epoch, report.reason), (1, StopReason::Finished));
    assert!(!store.is_held(), "released");
    assert_eq!(*mutex.watch().borrow(), Leadership::Stopped);
    let again = mutex.acquire().await.unwrap();
    assert_eq!(again.epoch(), 2, "acquired again after a release");
}

#[tokio::test(start_paused = true)]
async fn when_storage_stops_answering_the_guard_is_cancelled_before_the_lease_could_expire() {
    let store = MemoryLeaseStore::new("guard");
    let mutex = mutex(&store, "a");
    let mut reports = mutex.term_reports();
    let guard = mutex.acquire().await.unwrap();
    tokio::time::sleep(LEASE).await;
    // The lease cannot expire before the last renewal's send + LEASE, and
    // the deadline is that instant less the safety margin.
    let deadline = guard.deadline();
    store.set_unavailable(true);
    let reason = guard.cancelled().await;
    let fired = Instant::now();
    assert!(
        fired < deadline,
        "fired {:?} before the deadline",
        deadline - fired
    );
    assert!(store.is_held(), "the lease has not expired yet");
    assert!(guard.token().is_cancelled());
    assert_eq!(reason, StopReason::Deadline);
    assert!(!guard.is_current());
    let report = reports.recv().await.unwrap();
    assert_eq!(report.reason, StopReason::Deadline);
    store.set_unavailable(false);
    assert_eq!(guard.release().await.unwrap(), report);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_guard_releases_and_the_next_acquirer_leads_within_a_poll() {
    let store = MemoryLeaseStore::new("guard");
    let (a, b) = (mutex(&store, "a"), mutex(&store, "b"));
    let guard = a.acquire().await.unwrap();
    let next = tokio::spawn(async move {
        let guard = b.acquire().await.unwrap();
        (Instant::now(), guard.epoch())
    });
    tokio::time::sleep(LEASE * 2).await;
    assert!(!next.is_finished(), "b waits while a holds the guard");
    let dropped = Instant::now();
    drop(guard);
    let (led, epoch) = tokio::time::timeout(POLL * 2, next)
        .await
        .expect("b leads soon after the drop")
        .unwrap();
    assert_eq!(epoch, 2);
    assert!(
        led - dropped <= POLL,
        "b led {:?} after the drop",
        led - dropped
    );
}

#[tokio::test(start_paused = true)]
async fn try_acquire_on_a_held_lease_returns_the_leader_at_once() {
    let store = MemoryLeaseStore::new("guard");
    let (a, b) = (mutex(&store, "a"), mutex(&store, "b"));
    let guard = match a.try_acquire().await.unwrap() {
        TryAcquire::Acquired(guard) => guard,
        held => panic!("a free lease was not acquired: {held:?}"),
    };
    let asked = Instant::now();
    let held = b.try_acquire().await.unwrap();
    assert_eq!(Instant::now(), asked, "no wait");
    let TryAcquire::Held(Some(leader)) = held else {
        panic!("not the leader: {held:?}");
    };
    assert_eq!((leader.holder.as_str(), leader.epoch), ("a", guard.epoch()));
    assert!(
        b.watch().borrow().epoch().is_none(),
        "b does not lead after its attempt"
    );
    guard.release().await.unwrap();
    assert!(matches!(
        b.try_acquire().await.unwrap(),
        TryAcquire::Acquired(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn an_acquire_dropped_before_it_leads_leaves_nothing_behind() {
    let store = MemoryLeaseStore::new("guard");
    let (a, b) = (mutex(&store, "a"), mutex(&store, "b"));
    let guard = a.acquire().await.unwrap();
    let waiting = tokio::time::timeout(LEASE, b.acquire()).await;
    assert!(waiting.is_err(), "b did not lead while a held the guard");
    guard.release().await.unwrap();
    tokio::time::sleep(POLL * 2).await;
    assert!(
        !store.is_held(),
        "the dropped acquire did not take the lease"
    );
    assert_eq!(b.acquire().await.unwrap().epoch(), 2, "b may acquire again");
}

/// A store whose lease is acquired as usual, but whose stamps fail as when
/// storage stops answering between the acquire and the stamp.
#[derive(Clone)]
struct StampFails(MemoryLeaseStore);

impl Wrap for StampFails {
    type Inner = MemoryLeaseStore;
    fn inner(&self) -> &MemoryLeaseStore {
        &self.0
    }
    async fn stamp(&self, _: LeaseId, _: &str, _: &StampOptions) -> Result<u64, Error> {
        Err(Error::transport("stamp", "storage did not answer"))
    }
}

#[tokio::test(start_paused = true)]
async fn try_acquire_returns_the_error_when_the_lease_was_acquired_but_the_stamp_failed() {
    let memory = MemoryLeaseStore::new("guard");
    let options = MutexOptions::default().with_holder("a".to_owned());
    let mutex = BlobDistributedMutex::with_store(
        Forward(StampFails(memory.clone())),
        options,
        |ctx: LeaderContext| async move {
            ctx.cancelled().await;
            Ok::<(), Error>(())
        },
    )
    .unwrap();
    let tried = mutex.try_acquire().await;
    assert!(
        matches!(&tried, Err(e) if e.is_transient()),
        "a failed stamp is not a lease held by another: {tried:?}"
    );
    assert!(!memory.is_held(), "the lease was given back");
}

#[tokio::test(start_paused = true)]
async fn a_mutex_made_for_guards_hands_out_guards_and_refuses_to_run_a_task_it_does_not_have() {
    let store = MemoryLeaseStore::new("guard");
    let mutex = BlobDistributedMutex::with_store_for_guards(
        store.clone(),
        MutexOptions::default().with_holder("a".to_owned()),
    )
    .unwrap();
    let token = blob_mutex::CancellationToken::new();
    for refused in [
        mutex.run_task_when_mutex_acquired(token.clone()).await,
        mutex.run_once(token.clone()).await.map(|_| ()),
    ] {
        match refused {
            Err(Error::InvalidOption {
                field: "task",
                reason,
            }) => {
                assert!(reason.contains("for_guards"), "{reason}");
            }
            other => panic!("expected the task refused, got {other:?}"),
        }
    }
    assert!(
        !store.is_held(),
        "nothing was acquired for the refused calls"
    );
    assert_eq!(store.epoch(), 0);
    let guard = mutex.acquire().await.unwrap();
    assert_eq!((store.epoch(), store.holder().as_deref()), (1, Some("a")));
    guard.release().await.unwrap();
    let TryAcquire::Acquired(guard) = mutex.try_acquire().await.unwrap() else {
        panic!("the lease is free");
    };
    assert_eq!(guard.epoch(), 2);
    guard.release().await.unwrap();
    let outcome = mutex
        .run_once_with(token, |ctx: LeaderContext| async move {
            Ok::<_, Error>(ctx.epoch())
        })
        .await
        .unwrap();
    let blob_mutex::OnceOutcome::Ran { output: led, .. } = outcome else {
        panic!("a task given to run_once_with did not run: {outcome:?}");
    };
    assert_eq!(led, 3, "a task given to run_once_with runs");
}

/// A waker that counts its wakes, to tell when a future that is not polled
/// would be ready.
struct CountWakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountWakes {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `acquire()` polled once, then dropped unpolled once its term has taken
/// the lease and handed over the guard's context: as a `tokio::select!`
/// drops it when its other branch is ready in the same wake-up.
#[tokio::test(start_paused = true)]
async fn an_acquire_dropped_after_its_term_took_the_lease_releases_it_at_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Context;

    let store = MemoryLeaseStore::new("guard");
    let options = MutexOptions::default()
        .with_holder("a".to_owned())
        .with_fail_stop(true);
    let mutex = BlobDistributedMutex::with_store_for_guards(store.clone(), options).unwrap();
    let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
    let on_wake = std::task::Waker::from(wakes.clone());
    let mut acquiring = Box::pin(mutex.acquire());
    let first = acquiring.as_mut().poll(&mut Context::from_waker(&on_wake));
    assert!(first.is_pending(), "the lease is taken in the background");
    // The only thing the future waits on is the term's context: a wake
    // means the term holds the lease and has sent it.
    while wakes.0.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(store.is_held());
    let dropped = Instant::now();
    drop(acquiring);
    while store.is_held() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let held_for = dropped.elapsed();
    assert!(
        held_for < Duration::from_secs(1),
        "released {held_for:?} after the drop, not within one request"
    );
    let again = tokio::time::timeout(Duration::from_secs(1), mutex.acquire())
        .await
        .expect("the same mutex acquires again at once")
        .unwrap();
    assert_eq!(again.epoch(), 2);
    again.release().await.unwrap();
}
