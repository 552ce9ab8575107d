//! A leader frozen (SIGSTOP) past its lease: a follower takes over after the
//! lease expired, and when the old leader wakes (SIGCONT) the mutex stops its
//! task at once and reports the end of the term with reason `deadline`.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::workers::{Cluster, What};

const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_millis(500);
/// The workers' renew interval (`--renew-ms`).
const RENEW: Duration = Duration::from_secs(2);
/// The bound asserted on the time from SIGCONT to the `STOPPED` line: the
/// renew interval, so that the stop is the wake's own (its first renewal
/// would be told of the lost lease no sooner). The figure itself is printed:
/// a few milliseconds on an idle machine, about 200 ms on a two-core one
/// with a load of 10, which is the scheduler's affair. What is promised is
/// checked apart: no unit of work starts after the wake.
const REPORT_BOUND: Duration = RENEW;

#[tokio::test]
async fn a_leader_woken_after_its_lease_reports_deadline_at_once() {
    woken_leader_reports_deadline(&[]).await;
}

/// A task that ignores cancellation is aborted on waking, and still gets its
/// `STOPPED` line: the report comes from the mutex, not from the task.
#[tokio::test]
async fn an_aborted_task_of_a_woken_leader_is_reported_too() {
    woken_leader_reports_deadline(&["--ignore-cancel"]).await;
}

async fn woken_leader_reports_deadline(extra: &[&str]) {
    let proxy = Proxy::start(azurite::shared().port);
    let mut cluster = Cluster::new();
    let mut flags = vec![
        "--acquire-retry-ms",
        "500",
        "--renew-ms",
        "2000",
        "--work-ms",
        "100",
    ];
    flags.extend_from_slice(extra);
    cluster.spawn_workers(
        2,
        &azurite::unique_container("frozen"),
        "frozen",
        &flags,
        |_| proxy.connection_string(),
    );
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    let lease = proxy.renewed_lease(Duration::from_secs(10)).await;

    let frozen_at = cluster.signal(leader, "STOP");
    let last = proxy
        .last_forwarded_for(&lease)
        .expect("the leader's requests were forwarded");
    let expiry = cluster.at(last) + LEASE;
    let (next, next_epoch, led_at) = cluster
        .wait_leading_after(frozen_at, LEASE + RETRY + Duration::from_secs(5))
        .await;
    assert_ne!(next, leader);
    assert!(next_epoch > epoch);
    assert!(
        led_at >= expiry,
        "the follower led at {led_at:?}, before the frozen leader's lease could expire ({expiry:?})\n{}",
        cluster.dump()
    );

    let resumed = cluster.signal(leader, "CONT");
    let (reason, stopped) = cluster
        .wait_stopped(leader, frozen_at, Duration::from_secs(10))
        .await;
    assert_eq!(reason, "deadline", "{}", cluster.dump());
    let took = stopped.saturating_sub(resumed);
    assert!(
        took <= REPORT_BOUND,
        "STOPPED came {took:?} after SIGCONT\n{}",
        cluster.dump()
    );
    // After a wake past the deadline no unit of work starts.
    let work_after: Vec<Duration> = cluster
        .lines_of(leader, |w| matches!(w, What::Work { .. }))
        .into_iter()
        .filter(|at| *at >= resumed)
        .collect();
    assert!(
        work_after.is_empty(),
        "the woken leader worked at {work_after:?}, after SIGCONT at {resumed:?}\n{}",
        cluster.dump()
    );
    // While it was frozen its task could not run; the record counts it as
    // leading until its STOPPED line, so the overlap ends there.
    let history = cluster.history();
    assert!(
        history.overlap <= stopped - led_at,
        "overlap {:?} goes past the STOPPED line\n{}",
        history.overlap,
        cluster.dump()
    );
    assert!(history.epochs_increase());
    println!(
        "frozen leader {extra:?}: frozen at {:.3}s, follower led at {:.3}s (lease expiry from {:.3}s), \
         resumed at {:.3}s, STOPPED reason=deadline {:.1} ms after the resume",
        frozen_at.as_secs_f64(),
        led_at.as_secs_f64(),
        expiry.as_secs_f64(),
        resumed.as_secs_f64(),
        took.as_secs_f64() * 1000.0
    );
    cluster.kill_all();
}
