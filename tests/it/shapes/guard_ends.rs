//! Every end of a guard's term that its holder did not ask for waits for
//! the holder: over the in-memory store with paused time, a holder that
//! checks `is_current()` before each step of three seconds sees no step
//! overlap the next holder's first act, whether the term ends by a handover
//! to a preferred successor, by renewals failing until the deadline while
//! storage flaps, or by the watchdog. A holder that does not release before
//! the lease could expire has its lease left to expire, and the report says
//! so.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    term::StopReason, term::TaskStop, testing::MemoryLeaseStore, BlobDistributedMutex, Error,
    LeaderContext, MutexGuard, MutexOptions,
};
use tokio::time::{sleep, Instant};

/// One step of the holder's work.
const STEP: Duration = Duration::from_secs(3);
/// The default lease duration.
const LEASE: Duration = Duration::from_secs(15);

/// A mutex over `store` held only through guards.
fn mutex(
    store: &MemoryLeaseStore,
    options: MutexOptions,
) -> Arc<BlobDistributedMutex<MemoryLeaseStore>> {
    Arc::new(BlobDistributedMutex::with_store(store.clone(), options, never_runs).unwrap())
}

async fn never_runs(_: LeaderContext) -> Result<(), Error> {
    unreachable!("a guard's term runs the holder's code, not the mutex's task")
}

/// The steps a holder ran: when each began and ended.
type Steps = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// Runs steps of `step` while the guard is current (checked right before
/// each), then releases it; returns the steps and the term's report.
async fn hold(guard: MutexGuard, step: Duration) -> (Vec<(Instant, Instant)>, TaskStop) {
    let mut steps = Vec::new();
    while guard.is_current() {
        let begun = Instant::now();
        sleep(step).await;
        steps.push((begun, Instant::now()));
    }
    let report = guard.release().await.unwrap();
    (steps, report.tasks)
}

/// Starts a second instance whose guard records when it was given (its
/// first act) and holds it for a while.
fn next_holder(next: Arc<BlobDistributedMutex<MemoryLeaseStore>>) -> Steps {
    let acts: Steps = Arc::default();
    let seen = acts.clone();
    tokio::spawn(async move {
        let guard = next.acquire().await.unwrap();
        let now = Instant::now();
        seen.lock().unwrap().push((now, now));
        sleep(LEASE * 4).await;
        drop(guard);
    });
    acts
}

/// Waits until the next holder acted; its first act.
async fn first_act(acts: &Steps) -> Instant {
    loop {
        if let Some((at, _)) = acts.lock().unwrap().first() {
            return *at;
        }
        sleep(Duration::from_millis(10)).await;
    }
}

fn assert_no_overlap(start: Instant, steps: &[(Instant, Instant)], next: Instant) {
    assert!(!steps.is_empty(), "the holder ran steps");
    let (begun, ended) = *steps.last().unwrap();
    assert!(
        ended <= next,
        "the step begun at {:?} ran until {:?}, after the next holder's first act at {:?}",
        begun - start,
        ended - start,
        next - start
    );
}

#[tokio::test(start_paused = true)]
async fn a_guard_hands_over_to_a_preferred_successor_only_after_its_holders_step_and_release() {
    let start = Instant::now();
    let store = MemoryLeaseStore::new("guard-handover");
    let low = mutex(
        &store,
        MutexOptions::default()
            .with_holder("low".to_owned())
            .with_priority(1),
    );
    let high = mutex(
        &store,
        MutexOptions::default()
            .with_holder("high".to_owned())
            .with_priority(5),
    );
    let mut reports = low.term_reports();
    let guard = low.acquire().await.unwrap();
    let holder = tokio::spawn(hold(guard, STEP));
    sleep(Duration::from_millis(50)).await;
    let acts = next_holder(high);
    let next = first_act(&acts).await;
    let (steps, tasks) = holder.await.unwrap();
    assert_no_overlap(start, &steps, next);
    let report = reports.recv().await.unwrap();
    assert_eq!(report.reason, StopReason::Handover);
    assert_eq!(tasks, TaskStop::Returned);
    assert_eq!(store.holder().as_deref(), Some("high"), "handed over");
}

#[tokio::test(start_paused = true)]
async fn a_guard_whose_renewals_fail_until_the_deadline_lets_go_only_after_its_holders_release() {
    let start = Instant::now();
    let store = MemoryLeaseStore::new("guard-deadline");
    let a = mutex(&store, MutexOptions::default().with_holder("a".to_owned()));
    let b = mutex(&store, MutexOptions::default().with_holder("b".to_owned()));
    let guard = a.acquire().await.unwrap();
    // Storage stops answering just before a step begins, and answers again
    // the moment the term is told to stop: the release would get through.
    sleep(LEASE).await;
    store.set_unavailable(true);
    // The next instance campaigns from then on.
    let cancelled = guard.token().clone();
    let flapping = store.clone();
    let acts = tokio::spawn(async move {
        cancelled.cancelled().await;
        flapping.set_unavailable(false);
        next_holder(b)
    });
    let (steps, tasks) = hold(guard, STEP).await;
    let acts = acts.await.unwrap();
    let next = first_act(&acts).await;
    assert_no_overlap(start, &steps, next);
    assert_eq!(tasks, TaskStop::Returned);
}

#[tokio::test(start_paused = true)]
async fn a_guard_stopped_by_its_watchdog_lets_go_only_after_its_holders_release() {
    let start = Instant::now();
    let store = MemoryLeaseStore::new("guard-watchdog");
    let options = MutexOptions::default().with_heartbeat_timeout(Duration::from_secs(2));
    let a = mutex(&store, options.clone().with_holder("a".to_owned()));
    let b = mutex(&store, options.with_holder("b".to_owned()));
    let mut reports = a.term_reports();
    let guard = a.acquire().await.unwrap();
    let acts = next_holder(b);
    // Steps of three seconds that never beat: the watchdog stops the term
    // during the first.
    let (steps, tasks) = hold(guard, STEP).await;
    let next = first_act(&acts).await;
    assert_no_overlap(start, &steps, next);
    assert_eq!(reports.recv().await.unwrap().reason, StopReason::Stalled);
    assert_eq!(tasks, TaskStop::Returned);
}

#[tokio::test(start_paused = true)]
async fn a_guard_not_released_before_its_lease_could_expire_is_left_to_expire_and_says_so() {
    let start = Instant::now();
    let store = MemoryLeaseStore::new("guard-unreleased");
    let low = mutex(
        &store,
        MutexOptions::default()
            .with_holder("low".to_owned())
            .with_priority(1),
    );
    let high = mutex(
        &store,
        MutexOptions::default()
            .with_holder("high".to_owned())
            .with_priority(5),
    );
    let mut reports = low.term_reports();
    let guard = low.acquire().await.unwrap();
    let acts = next_holder(high);
    let reason = guard.cancelled().await;
    assert_eq!(reason, StopReason::Handover);
    let asked = Instant::now();
    // The holder goes on far past the lease.
    let report = reports.recv().await.unwrap();
    let ended = Instant::now();
    assert_eq!(report.tasks, TaskStop::Unreleased, "{report:?}");
    assert!(
        ended - asked < LEASE,
        "the term ended {:?} after it was asked to stop",
        ended - asked
    );
    assert!(store.is_held(), "not released: left to expire");
    assert_eq!(store.holder().as_deref(), Some("low"), "not handed over");
    let next = first_act(&acts).await;
    assert!(
        next > ended,
        "the successor led at {:?}, before the term ended at {:?}",
        next - start,
        ended - start
    );
    assert!(
        matches!(low.try_acquire().await, Err(Error::AlreadyCampaigning)),
        "no new guard of this mutex while the old one is held"
    );
    assert_eq!(guard.release().await.unwrap(), report);
}

/// What the probes say of a guard whose holder wedges: it never beats and
/// never releases. Sampled every 100 ms from the acquire until well past
/// the lease.
#[tokio::test(start_paused = true)]
async fn the_probes_of_a_wedged_guard_never_say_leader_once_it_is_not_current_and_fail_liveness_once_its_term_ended_unreleased(
) {
    let store = MemoryLeaseStore::new("guard-wedged");
    let options = MutexOptions::default()
        .with_holder("a".to_owned())
        .with_heartbeat_timeout(Duration::from_secs(2));
    let a = mutex(&store, options);
    let health = a.health();
    let mut reports = a.term_reports();
    let guard = a.acquire().await.unwrap();
    assert!(health.live().passes() && health.ready_to_lead().passes());
    let mut ended = None;
    let until = Instant::now() + LEASE * 2;
    while Instant::now() < until {
        let (live, ready, to_lead) = (health.live(), health.ready(), health.ready_to_lead());
        if !guard.is_current() {
            assert!(!to_lead.passes(), "not current, yet: {to_lead}");
        }
        if ended.is_none() {
            if let Ok(report) = reports.try_recv() {
                assert_eq!(report.reason, StopReason::Stalled);
                assert_eq!(report.tasks, TaskStop::Unreleased, "{report:?}");
                ended = Some(Instant::now());
            }
        }
        if ended.is_some() {
            assert!(
                !live.passes(),
                "a guard held past its unreleased term: live says {live}"
            );
            assert!(
                !ready.passes(),
                "a mutex that cannot lead again: ready says {ready}"
            );
        } else {
            assert!(live.passes(), "before its term ended: {live}");
        }
        sleep(Duration::from_millis(100)).await;
    }
    assert!(ended.is_some(), "the term ended while the guard was held");
    drop(guard);
    assert!(
        health.live().passes(),
        "once the guard is gone: {}",
        health.live()
    );
}

/// As the guard's docs say: a term stopped by its watchdog renews no more
/// while it waits for the release (its deadline stays put); one asked to
/// hand over renews for the stop grace (its deadline moves).
#[tokio::test(start_paused = true)]
async fn a_guard_stopped_by_its_watchdog_renews_no_more_and_one_asked_to_hand_over_renews_for_the_grace(
) {
    let store = MemoryLeaseStore::new("guard-stalled-renewals");
    let options = MutexOptions::default()
        .with_holder("a".to_owned())
        .with_heartbeat_timeout(Duration::from_secs(2));
    let a = mutex(&store, options);
    let guard = a.acquire().await.unwrap();
    assert_eq!(guard.cancelled().await, StopReason::Stalled);
    let at_stop = guard.deadline();
    sleep(LEASE / 2).await;
    assert_eq!(
        guard.deadline(),
        at_stop,
        "renewed after the watchdog fired"
    );
    drop(guard);

    let store = MemoryLeaseStore::new("guard-handover-renewals");
    let low = mutex(
        &store,
        MutexOptions::default()
            .with_holder("low".to_owned())
            .with_priority(1)
            .with_renew_interval(Duration::from_secs(1)),
    );
    let high = mutex(
        &store,
        MutexOptions::default()
            .with_holder("high".to_owned())
            .with_priority(5),
    );
    let guard = low.acquire().await.unwrap();
    let _acts = next_holder(high);
    assert_eq!(guard.cancelled().await, StopReason::Handover);
    let at_stop = guard.deadline();
    sleep(low.options().stop_grace()).await;
    assert!(guard.deadline() > at_stop, "not renewed during the grace");
}
