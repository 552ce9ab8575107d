//! The fault matrix, in one process: every scenario against every mode,
//! over the in-memory stores (paused time, except where a task blocks its
//! thread). Each cell makes the same three checks (see
//! `support/promises.rs`): never two owners of one lease; every end of a term
//! reported once, with report, `watch()` and metrics in agreement; the next
//! owner only after the earliest possible expiry. A mode is one `Mode`
//! (its set-up) in `support/matrix.rs` and one `row!` line here, which
//! gives it every scenario; process kill and fail-stop are in the
//! multi-process half. The guard's rows run a holder's steps between
//! `acquire` and `release`: each begun only while the guard is current,
//! each taking `GUARD_STEP` without a look at the token (`Mode::STEP`), so
//! a lease let go under a running step is seen; their caller's stops are
//! releases, reported as `finished` (`Mode::caller_ended`). The second
//! guard row hands over to a preferred successor.

use std::time::Duration;

use crate::support::faulty::{self, Storage};
use crate::support::matrix::{
    self, finish, hit_ended, next_owners, storage, until, Behaviour, Cell, GuardHandoverRow,
    GuardRow, HandoverRow, LeaseSetRow, Metrics, Mode, MutexRow, Outcome, QuorumLeaseSetRow,
    QuorumMutexRow, D, LOST_GRACE,
};
use blob_mutex::{term::StopReason, CancellationToken, Error};
use tokio::time::Instant;

/// The victim is stopped through its token: it drains and releases.
async fn graceful_stop<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("graceful_stop", metrics, false, |o| o);
    let mut instances = M::start(&cell).await;
    let (fault, victim) = (Instant::now(), cell.victim());
    let hit = cell.running_on(victim);
    instances[victim].token.cancel();
    let outcome = instances[victim].join().await;
    assert!(matches!(outcome, Outcome::Returned(Ok(()))), "{outcome:?}");
    hit_ended(&cell, &instances, &hit, &[M::caller_ended("shutdown")]).await;
    next_owners(&cell, &hit).await;
    finish::<M>(
        &cell,
        instances,
        fault,
        &hit,
        &[M::caller_ended("shutdown")],
    )
    .await;
}

/// The victim's campaign future is dropped, as `tokio::select!` drops the
/// branch that lost: its tasks are aborted, its leases left to expire.
async fn campaign_dropped<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("campaign_dropped", metrics, false, |o| o);
    let mut instances = M::start(&cell).await;
    let (fault, victim) = (Instant::now(), cell.victim());
    let hit = cell.running_on(victim);
    instances[victim].drop_campaign();
    let outcome = instances[victim].join().await;
    assert!(matches!(outcome, Outcome::Dropped), "{outcome:?}");
    hit_ended(
        &cell,
        &instances,
        &hit,
        &[M::caller_ended(StopReason::Dropped.as_str())],
    )
    .await;
    next_owners(&cell, &hit).await;
    finish::<M>(
        &cell,
        instances,
        fault,
        &hit,
        &[M::caller_ended(StopReason::Dropped.as_str())],
    )
    .await;
}

/// The whole process freezes past every deadline (time jumps with nothing
/// running), then wakes: each task sees at once that it must stop, starts
/// no unit of work, and every term ends as `deadline`.
async fn freeze_then_wake<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("freeze_then_wake", metrics, false, |o| o);
    let instances = M::start(&cell).await;
    let fault = Instant::now();
    let hit = cell.running();
    tokio::time::advance(D + Duration::from_secs(5)).await;
    hit_ended(&cell, &instances, &hit, &["deadline"]).await;
    next_owners(&cell, &hit).await;
    finish::<M>(&cell, instances, fault, &hit, &["deadline"]).await;
}

/// One of the victim's tasks returns while its sub-task blocks its thread
/// (fail-stop off): the campaign ends with `TaskNotStopped`, the lease is
/// left to expire, and a later campaign in the same process returns
/// `TaskNotStopped` at once while the stuck task may still run.
async fn stuck_task<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("stuck_task", metrics, true, |o| o);
    let mut instances = M::start(&cell).await;
    let (fault, victim) = (Instant::now(), cell.victim());
    let hit = cell.running_on(victim);
    cell.arm(Behaviour::StuckOnce);
    until(&cell, "a task is stuck", || {
        cell.runs().iter().any(|r| r.misbehaving)
    })
    .await;
    let stuck = cell.runs().into_iter().find(|r| r.misbehaving).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), instances[victim].join()).await;
    assert!(
        matches!(outcome, Ok(Outcome::Returned(Err(Error::TaskNotStopped)))),
        "{}: the victim's campaign with a stuck task ended with {outcome:?}",
        cell.name
    );
    let again = instances[victim].campaign_again(CancellationToken::new());
    let again = tokio::time::timeout(Duration::from_millis(300), again).await;
    let still_stuck = cell.runs().iter().any(|r| r.misbehaving && r.end.is_none());
    assert!(
        still_stuck,
        "{}: the stuck task ended too soon to tell",
        cell.name
    );
    assert!(
        matches!(again, Ok(Err(Error::TaskNotStopped))),
        "{}: a campaign while a task is stuck ended with {again:?} (or not within 300 ms)",
        cell.name
    );
    hit_ended(&cell, &instances, &hit, &["finished", "shutdown"]).await;
    let report = cell
        .reports()
        .into_iter()
        .find(|r| r.key == stuck.key && r.epoch == stuck.epoch);
    assert!(
        report
            .as_ref()
            .is_some_and(|r| r.reason == "finished" && r.tasks == "stuck"),
        "{}: the stuck term was reported as {report:?}",
        cell.name
    );
    finish::<M>(&cell, instances, fault, &hit, &["finished", "shutdown"]).await;
}

/// The victim's tasks each start a sub-task that ignores cancellation; the
/// victim is stopped through its token: the sub-tasks are aborted after the
/// grace, then the leases are released.
async fn sub_task_ignores_cancellation<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("sub_task_ignores_cancellation", metrics, false, |o| o);
    let mut instances = M::start(&cell).await;
    let victim = cell.victim();
    lingering(&cell, victim).await;
    let fault = Instant::now();
    let hit = cell.running_on(victim);
    instances[victim].token.cancel();
    let outcome = instances[victim].join().await;
    assert!(matches!(outcome, Outcome::Returned(Ok(()))), "{outcome:?}");
    hit_ended(&cell, &instances, &hit, &[M::caller_ended("shutdown")]).await;
    assert_tasks(&cell, &hit, "aborted");
    next_owners(&cell, &hit).await;
    finish::<M>(
        &cell,
        instances,
        fault,
        &hit,
        &[M::caller_ended("shutdown")],
    )
    .await;
}

/// An operator breaks the victim's leases (on every account). Its tasks,
/// each with a sub-task that ignores cancellation, must stop within
/// `LOST_GRACE` of the renewal that learns of it, not after the whole grace.
async fn definitive_loss<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("definitive_loss", metrics, false, |o| o);
    let instances = M::start(&cell).await;
    let victim = cell.victim();
    lingering(&cell, victim).await;
    let fault = Instant::now();
    let hit = cell.running_on(victim);
    for run in &hit {
        cell.accounts.break_lease(&run.key);
    }
    hit_ended(&cell, &instances, &hit, &["lost"]).await;
    let (runs, calls) = (cell.runs(), cell.accounts.calls());
    for h in &hit {
        let end = runs
            .iter()
            .find(|r| r.lease == h.lease)
            .and_then(|r| r.end)
            .unwrap();
        let learned = calls
            .iter()
            .filter(|c| c.lease == h.lease && matches!(c.effect, faulty::Effect::Lost))
            .map(|c| c.at)
            .min()
            .unwrap();
        assert!(
            end <= learned + LOST_GRACE.max(cell.step),
            "{}: {} epoch {} learned of its loss at {learned:?} and its tasks ran until {end:?}",
            cell.name,
            h.key,
            h.epoch
        );
    }
    next_owners(&cell, &hit).await;
    finish::<M>(&cell, instances, fault, &hit, &["lost"]).await;
}

/// Every call fails at once until every term has ended; then storage comes
/// back.
async fn storage_down<M: Mode>(metrics: Metrics) {
    unreachable_storage::<M>("storage_down", metrics, Storage::Down).await;
}

/// No call reaches storage and none answers until every term has ended;
/// then storage comes back.
async fn blackhole<M: Mode>(metrics: Metrics) {
    unreachable_storage::<M>("blackhole", metrics, Storage::Blackhole).await;
}

async fn unreachable_storage<M: Mode>(scenario: &str, metrics: Metrics, fault: Storage) {
    let cell = Cell::new::<M>(scenario, metrics, false, |o| o);
    let instances = M::start(&cell).await;
    let at = Instant::now();
    let hit = cell.running();
    storage(&cell, fault);
    let reasons = storage_reasons::<M>();
    hit_ended(&cell, &instances, &hit, reasons).await;
    storage(&cell, Storage::Up);
    next_owners(&cell, &hit).await;
    finish::<M>(&cell, instances, at, &hit, reasons).await;
}

/// How a term hit by a storage outage ends: at its deadline; a partition's
/// term may be stopped first by its membership term's own deadline.
fn storage_reasons<M: Mode>() -> &'static [&'static str] {
    if M::SET {
        &["deadline", "shutdown"]
    } else {
        &["deadline"]
    }
}

/// Every call reaches storage a second late and answers a second later,
/// for a minute: slower than ever, but within the request timeout, so no
/// term ends.
async fn slow_storage<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("slow_storage", metrics, false, |o| o);
    let instances = M::start(&cell).await;
    let fault = Instant::now();
    storage(&cell, Storage::Slow(Duration::from_secs(1)));
    // The fault lasts a minute: no condition to wait for.
    tokio::time::sleep(Duration::from_secs(60)).await;
    storage(&cell, Storage::Up);
    finish::<M>(&cell, instances, fault, &[], &[]).await;
}

/// With a heartbeat timeout, the victim's tasks stop beating: their terms
/// end as `stalled`, and only theirs.
async fn watchdog<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("watchdog", metrics, false, |o| {
        o.with_heartbeat_timeout(Duration::from_secs(2))
    });
    let instances = M::start(&cell).await;
    let (fault, victim) = (Instant::now(), cell.victim());
    let hit = cell.running_on(victim);
    cell.beating
        .store(false, std::sync::atomic::Ordering::SeqCst);
    hit_ended(&cell, &instances, &hit, &["stalled"]).await;
    cell.beating
        .store(true, std::sync::atomic::Ordering::SeqCst);
    next_owners(&cell, &hit).await;
    finish::<M>(&cell, instances, fault, &hit, &["stalled"]).await;
}

/// One lease's epoch is garbled (its stamp answers `InvalidEpoch`), and the
/// victim that leads it leaves. Nobody leads that lease again; a mutex's
/// campaign ends with the error, a lease set skips the partition and leaves
/// the others as they are.
async fn garbled_epoch<M: Mode>(metrics: Metrics) {
    let cell = Cell::new::<M>("garbled_epoch", metrics, false, |o| o);
    let mut instances = M::start(&cell).await;
    let (fault, victim) = (Instant::now(), cell.victim());
    let hit = cell.running_on(victim);
    let garbled = hit[0].key.clone();
    *cell.accounts.garbled.lock().unwrap() = Some(garbled.clone());
    instances[victim].token.cancel();
    let outcome = instances[victim].join().await;
    assert!(matches!(outcome, Outcome::Returned(Ok(()))), "{outcome:?}");
    hit_ended(&cell, &instances, &hit, &[M::caller_ended("shutdown")]).await;
    // Time for the others to try the garbled lease, again and again.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let again: Vec<_> = cell
        .runs()
        .into_iter()
        .filter(|r| r.key == garbled && r.start > fault)
        .collect();
    assert!(
        again.is_empty(),
        "{}: {garbled} led again: {again:?}",
        cell.name
    );
    for i in instances.iter_mut().filter(|i| i.index != victim) {
        if M::SET {
            if i.is_finished() {
                let (index, outcome) = (i.index, i.join().await);
                panic!("{}: instance {index} stopped: {outcome:?}", cell.name);
            }
        } else {
            let outcome = i.join().await;
            assert!(
                matches!(outcome, Outcome::Returned(Err(Error::InvalidEpoch { .. }))),
                "{}: instance {} ended with {outcome:?}",
                cell.name,
                i.index
            );
        }
    }
    finish::<M>(
        &cell,
        instances,
        fault,
        &hit,
        &[M::caller_ended("shutdown")],
    )
    .await;
}

/// Arms `Lingers` and waits until every task of `victim` runs its
/// lingering sub-task.
async fn lingering(cell: &Cell, victim: usize) {
    cell.arm(Behaviour::Lingers);
    until(cell, "every task of the victim lingers", || {
        cell.running_on(victim).iter().all(|r| r.misbehaving)
    })
    .await;
}

fn assert_tasks(cell: &Cell, hit: &[matrix::Run], tasks: &str) {
    let reports = cell.reports();
    for h in hit {
        let report = reports
            .iter()
            .find(|r| r.key == h.key && r.epoch == h.epoch && r.instance == h.instance);
        assert!(
            report.is_some_and(|r| r.tasks == tasks),
            "{}: expected tasks {tasks}: {report:?}",
            cell.name
        );
    }
}

/// One test per scenario of one mode: `$row` is the mode's set-up.
macro_rules! row {
    ($mode:ident, $row:ty) => {
        mod $mode {
            use super::*;

            cells!(matrix::paused, $row: graceful_stop, campaign_dropped, freeze_then_wake,
                sub_task_ignores_cancellation, definitive_loss, storage_down, slow_storage,
                blackhole, watchdog, garbled_epoch);
            // A task that blocks its thread needs real time and a second thread.
            cells!(matrix::real, $row: stuck_task);
        }
    };
}

macro_rules! cells {
    ($runtime:path, $row:ty: $($scenario:ident),* $(,)?) => {
        $(
            #[test]
            fn $scenario() {
                $runtime(super::$scenario::<$row>);
            }
        )*
    };
}

row!(mutex, MutexRow);
row!(lease_set, LeaseSetRow);
row!(mutex_on_a_quorum, QuorumMutexRow);
row!(lease_set_on_a_quorum, QuorumLeaseSetRow);
row!(handover, HandoverRow);
row!(guard, GuardRow);
row!(guard_handover, GuardHandoverRow);
