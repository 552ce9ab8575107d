//! The leader's process dies (SIGKILL) or is asked to stop (SIGTERM): a
//! follower takes over, never while the old lease could still be valid.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::workers::Cluster;

const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_millis(500);

/// Three workers on one blob, all through `proxy`.
fn start(proxy: &Proxy, blob: &str) -> Cluster {
    let mut cluster = Cluster::new();
    cluster.spawn_workers(
        3,
        &azurite::unique_container(blob),
        blob,
        &["--acquire-retry-ms", "500", "--renew-ms", "2000"],
        |_| proxy.connection_string(),
    );
    cluster
}

#[tokio::test]
async fn sigkill_of_the_leader_hands_over_after_the_lease_expired() {
    let proxy = Proxy::start(azurite::shared().port);
    let cluster = start(&proxy, "kill");
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    // Let it renew at least once, so that its lease id is known from the
    // renew requests (only the leader renews).
    let lease = proxy.renewed_lease(Duration::from_secs(10)).await;
    // Kill it between two renewals (every 2 s).
    tokio::time::sleep(Duration::from_millis(700)).await;

    let killed_at = cluster.kill(leader);
    let last = proxy
        .last_forwarded_for(&lease)
        .expect("the leader's requests were forwarded");
    // The server's expiry is at least this: the last acquire or renew reached
    // it no earlier than the proxy wrote it.
    let expiry = cluster.at(last) + LEASE;

    let (next, next_epoch, led_at) = cluster
        .wait_leading_after(killed_at, LEASE + RETRY + Duration::from_secs(5))
        .await;
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    assert_ne!(next, leader);
    assert!(next_epoch > epoch);
    assert!(
        led_at >= expiry,
        "a follower led at {led_at:?}, before the killed leader's lease expired at {expiry:?}\n{}",
        cluster.dump()
    );
    let handover = led_at - killed_at;
    let limit = LEASE + RETRY + Duration::from_secs(1);
    assert!(
        handover <= limit,
        "handover took {handover:?}, more than {limit:?}\n{}",
        cluster.dump()
    );
    println!(
        "SIGKILL: follower led {:.3}s after the kill, {:.3}s after the earliest server-side expiry; {}",
        handover.as_secs_f64(),
        (led_at - expiry).as_secs_f64(),
        history.summary()
    );
}

#[tokio::test]
async fn sigterm_of_the_leader_hands_over_at_once() {
    let proxy = Proxy::start(azurite::shared().port);
    let cluster = start(&proxy, "term");
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    // A moment of steady leadership before the signal.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let sent = cluster.terminate(leader);
    let (reason, stopped_at) = cluster
        .wait_stopped(leader, sent, Duration::from_secs(5))
        .await;
    assert_eq!(reason, "shutdown");
    let (next, next_epoch, led_at) = cluster
        .wait_leading_after(sent, Duration::from_secs(10))
        .await;
    let status = cluster.wait_exit(leader, Duration::from_secs(10)).await;
    assert!(status.success(), "the leader exited with {status}");

    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    assert_ne!(next, leader);
    assert!(next_epoch > epoch);
    assert!(
        stopped_at < led_at,
        "the new leader started at {led_at:?}, before the old one stopped at {stopped_at:?}"
    );
    let handover = led_at - sent;
    // The follower retries every 500 ms ± 20 %; then acquire and the epoch
    // write take three requests.
    let limit = RETRY + Duration::from_secs(1);
    assert!(
        handover <= limit,
        "handover took {handover:?}, more than {limit:?}\n{}",
        cluster.dump()
    );
    println!(
        "SIGTERM: old leader stopped {:.3}s after the signal, new leader {:.3}s after it; {}",
        (stopped_at - sent).as_secs_f64(),
        handover.as_secs_f64(),
        history.summary()
    );
}
