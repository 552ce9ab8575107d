//! The leader is cut off from storage (its connections are blackholed): its
//! task stops before the lease can have expired at the server, and a
//! follower leads only after that expiry.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::workers::{Cluster, What};

const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_millis(500);

#[tokio::test]
async fn a_partitioned_leader_stops_before_its_lease_expires() {
    partitioned(&[], "partition").await;
}

/// The same with the lease held through guards (the worker's `--guard`):
/// the guard's cancellation fires before the lease can have expired, and
/// the worker's code, which works only while `is_current()`, does no work
/// after it (the history's safety check).
#[tokio::test]
async fn a_partitioned_guard_is_cancelled_before_its_lease_expires() {
    partitioned(&["--guard"], "partition-guard").await;
}

/// Three workers (with `extra` flags), each behind a proxy of its own; the
/// leader is cut off a while after it renewed.
async fn partitioned(extra: &[&str], name: &str) {
    let container = azurite::unique_container(name);
    // One proxy per worker, so that only the leader is cut off.
    let proxies = Proxy::start_many(3, azurite::shared().port);
    let mut cluster = Cluster::new();
    let mut args = vec!["--acquire-retry-ms", "500"];
    args.extend_from_slice(extra);
    cluster.spawn_workers(3, &container, "partition", &args, |i| {
        proxies[i].connection_string()
    });
    let (leader, epoch, led_at) = cluster.wait_first_leader().await;
    let proxy = &proxies[leader];
    // Partition it a while after it last renewed (default renew interval 5 s).
    tokio::time::sleep(Duration::from_millis(6_500)).await;
    proxy.partition();
    let cut_at = cluster.now();
    let last = proxy
        .last_lease_request_forwarded()
        .expect("the leader's lease requests reached storage");
    let expiry = cluster.at(last) + LEASE;

    let (reason, stopped_at) = cluster
        .wait_stopped(leader, cut_at, LEASE + Duration::from_secs(5))
        .await;
    assert_eq!(reason, "deadline");
    let margin = expiry.saturating_sub(stopped_at);
    assert!(
        stopped_at < expiry,
        "the partitioned leader's task stopped at {stopped_at:?}, after the earliest server-side expiry {expiry:?}\n{}",
        cluster.dump()
    );

    let (next, next_epoch, next_at) = cluster
        .wait_leading_after(cut_at, LEASE + RETRY + Duration::from_secs(5))
        .await;
    assert_ne!(next, leader);
    assert!(next_epoch > epoch);
    assert!(
        next_at >= expiry,
        "a follower led at {next_at:?}, before the partitioned leader's lease expired at {expiry:?}\n{}",
        cluster.dump()
    );
    // Its code did no work of the cut term after the stop: it works only
    // while `is_current()` (checked until a follower led, past the expiry).
    let late = cluster
        .events()
        .into_iter()
        .filter(|e| e.worker == leader && e.at > stopped_at)
        .filter(|e| matches!(e.what, What::Work { epoch: worked, .. } if worked == epoch))
        .count();
    assert_eq!(
        late,
        0,
        "the cut leader worked after its stop\n{}",
        cluster.dump()
    );
    let after_expiry = next_at - expiry;
    assert!(
        after_expiry <= RETRY + Duration::from_secs(2),
        "a follower led {after_expiry:?} after the expiry\n{}",
        cluster.dump()
    );

    // Healed, the old leader campaigns again as a follower: after several of
    // its acquire rounds, still one leader.
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    assert_eq!(cluster.leaders(), vec![next], "{}", cluster.dump());
    println!(
        "{name}: led at {:.3}s, cut at {:.3}s, last renew reached storage at {:.3}s; task stopped at {:.3}s, \
         {:.3}s before the earliest server-side expiry ({:.3}s); follower led {:.3}s after the expiry; {}",
        led_at.as_secs_f64(),
        cut_at.as_secs_f64(),
        cluster.at(last).as_secs_f64(),
        stopped_at.as_secs_f64(),
        margin.as_secs_f64(),
        expiry.as_secs_f64(),
        after_expiry.as_secs_f64(),
        history.summary()
    );
}
