//! The hung-leader watchdog: a leader task that stops beating its heartbeat
//! loses leadership within the heartbeat interval, and another instance
//! takes over.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::workers::{Cluster, What};

const HEARTBEAT: Duration = Duration::from_secs(1);
const STALL_AFTER: Duration = Duration::from_secs(3);
const WORK: Duration = Duration::from_millis(200);
const RETRY: Duration = Duration::from_millis(500);
const GRACE: Duration = Duration::from_secs(1);

async fn stalled_leader_is_replaced(blob: &str, extra: &[&str]) {
    let container = azurite::unique_container(blob);
    let proxy = Proxy::start(azurite::shared().port);
    let mut cluster = Cluster::new();
    let mut options = vec![
        "--acquire-retry-ms",
        "500",
        "--heartbeat-ms",
        "1000",
        "--stall-after-ms",
        "3000",
        "--work-ms",
        "200",
        "--grace-ms",
        "1000",
    ];
    options.extend_from_slice(extra);
    cluster.spawn_workers(2, &container, blob, &options, |_| proxy.connection_string());
    let (leader, epoch, led_at) = cluster.wait_first_leader().await;
    // The last beat comes at the first work tick at or after STALL_AFTER.
    let stall_from = led_at + STALL_AFTER;
    let (next, next_epoch, next_at) = cluster
        .wait_leading_after(led_at + Duration::from_millis(1), Duration::from_secs(15))
        .await;
    let stopped_at = cluster
        .events()
        .iter()
        .find(|e| {
            let ended = e.what == What::Aborted
                || matches!(&e.what, What::Stopped { reason, .. } if reason == "stalled");
            e.worker == leader && e.at > led_at && ended
        })
        .map_or_else(
            || panic!("the stalled leader's task did not end\n{}", cluster.dump()),
            |e| e.at,
        );
    let lost_after = stopped_at.saturating_sub(stall_from);
    assert!(
        !cluster.log_lines(leader, "missed its heartbeat").is_empty(),
        "the watchdog reported nothing\n{}",
        cluster.dump_all()
    );
    // The watchdog fires HEARTBEAT after the last beat (which can be one
    // work tick after STALL_AFTER); a task that ignores cancellation gets its
    // grace before the abort. One second of slack for a loaded machine.
    let ignores = extra.contains(&"--ignore-cancel");
    let limit =
        HEARTBEAT + WORK + if ignores { GRACE } else { Duration::ZERO } + Duration::from_secs(1);
    assert!(
        lost_after <= limit,
        "the stalled task ended {lost_after:?} after it stalled, more than {limit:?}\n{}",
        cluster.dump()
    );
    assert!(
        stopped_at >= stall_from + HEARTBEAT - WORK,
        "the watchdog fired while the task was still beating\n{}",
        cluster.dump()
    );
    assert_ne!(next, leader);
    assert!(next_epoch > epoch);
    assert!(next_at > stopped_at);
    let takeover = next_at - stopped_at;
    assert!(
        takeover <= RETRY + Duration::from_secs(1),
        "takeover took {takeover:?}\n{}",
        cluster.dump()
    );
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    println!(
        "watchdog{}: task stalled at {:.3}s, ended {:.3}s later, follower led {:.3}s after that; {}",
        if ignores { " (task ignores cancellation)" } else { "" },
        stall_from.as_secs_f64(),
        lost_after.as_secs_f64(),
        takeover.as_secs_f64(),
        history.summary()
    );
}

#[tokio::test]
async fn a_stalled_leader_task_loses_leadership_to_another_instance() {
    stalled_leader_is_replaced("watchdog", &[]).await;
}

#[tokio::test]
async fn a_stalled_task_that_ignores_cancellation_is_aborted_and_replaced() {
    stalled_leader_is_replaced("watchdog-hung", &["--ignore-cancel"]).await;
}
