//! Storage answers later than the request timeout: the leader cannot
//! confirm a renewal, so it steps down at its deadline and not later, while
//! a follower on a healthy path takes over.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::backend::{Backend, BackendExt};
use blob_mutex_testkit::proxy::{Direction, Mode, Proxy};

const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_millis(500);
const GRACE: Duration = Duration::from_secs(3);
/// The default safety margin: 1 s + 1 % of the lease for clock drift.
const MARGIN: Duration = Duration::from_millis(1150);

#[tokio::test]
async fn a_leader_on_slow_storage_steps_down_at_its_deadline() {
    slow_storage(blob_mutex_testkit::backend::current()).await;
}

async fn slow_storage(backend: Backend) {
    let container = azurite::unique_container("slow");
    // One proxy per worker, so that only the leader's storage is slow.
    let proxies = Proxy::start_many(2, azurite::shared().port);
    let mut cluster = backend.cluster();
    cluster.spawn_workers(
        2,
        &container,
        "slow",
        &["--acquire-retry-ms", "500", "--request-timeout-ms", "1000"],
        |i| backend.connection_string(&proxies[i].endpoint()),
    );
    let (leader, epoch, led_at) = cluster.wait_first_leader().await;
    let proxy = &proxies[leader];
    // Right after a renewal succeeded, every answer starts to take 2 s, twice
    // the request timeout; requests still reach storage.
    let renewed = blob_mutex_testkit::wait_for("a renewal", Duration::from_secs(10), || async {
        proxy
            .log()
            .iter()
            .rev()
            .find(|r| r.is("renew"))
            .and_then(|r| r.forwarded_at)
    })
    .await;
    // Time for that renewal's answer to pass (the log has requests, not answers).
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set(Direction::ToClient, Mode::Delay(Duration::from_secs(2)));
    let slow_at = cluster.now();
    let renewed = cluster.at(renewed);
    // The renewal was sent at most when it reached the proxy, so:
    let deadline = renewed + LEASE - MARGIN;

    let (reason, stopped_at) = cluster
        .wait_stopped(leader, slow_at, LEASE + Duration::from_secs(5))
        .await;
    assert_eq!(reason, "deadline", "{}", cluster.dump());
    assert!(
        stopped_at <= deadline,
        "the leader task stopped at {stopped_at:?}, after its deadline {deadline:?}\n{}",
        cluster.dump()
    );
    // It is cancelled `stop_grace` and the stop slack before the deadline,
    // not much earlier: slow answers alone are no reason to give up.
    let expected = deadline - GRACE - blob_mutex::term::STOP_SLACK;
    assert!(
        stopped_at + Duration::from_millis(250) >= expected,
        "the leader gave up at {stopped_at:?}, well before {expected:?}\n{}",
        cluster.dump()
    );

    let (next, next_epoch, next_at) = cluster
        .wait_leading_after(stopped_at, LEASE + RETRY + Duration::from_secs(5))
        .await;
    assert_ne!(next, leader);
    assert!(next_epoch > epoch);
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    println!(
        "slow storage ({backend:?}): led at {:.3}s, last confirmed renewal {:.3}s, slow from {:.3}s; task stopped at {:.3}s \
         ({:.3}s before the deadline {:.3}s); follower led at {:.3}s; {}",
        led_at.as_secs_f64(),
        renewed.as_secs_f64(),
        slow_at.as_secs_f64(),
        stopped_at.as_secs_f64(),
        (deadline - stopped_at).as_secs_f64(),
        deadline.as_secs_f64(),
        next_at.as_secs_f64(),
        history.summary()
    );
}
