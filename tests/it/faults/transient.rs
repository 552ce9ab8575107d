//! Bursts of `503 ServerBusy`, `500 InternalError` and connection resets:
//! retried with backoff, and the leader keeps leading while its renewals get
//! through before the deadline. A single failed request changes nothing.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::{Duration, Instant};

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::{Fate, Injected, Proxy};
use blob_mutex_testkit::workers::{Cluster, What};

/// Renew every 2 s, so that a burst meets many renewals.
const RENEW: Duration = Duration::from_secs(2);

#[tokio::test]
#[allow(clippy::too_many_lines)] // one scenario, read top to bottom
async fn leadership_survives_bursts_of_transient_failures() {
    let container = azurite::unique_container("transient");
    // All three workers behind one proxy: followers see the faults too.
    let proxy = Proxy::start(azurite::shared().port);
    proxy.seed(0x5eed);
    let mut cluster = Cluster::new();
    cluster.spawn_workers(
        3,
        &container,
        "transient",
        &["--acquire-retry-ms", "500", "--renew-ms", "2000"],
        |_| proxy.connection_string(),
    );
    let (leader, epoch, _) = cluster.wait_first_leader().await;

    // Single failures of the leader's renewals, one of each kind.
    for kind in [
        Injected::ServerBusy,
        Injected::Reset,
        Injected::InternalError,
    ] {
        proxy.fail_next_of("renew", kind);
        blob_mutex_testkit::wait_for(
            &format!("a renew answered with {kind:?}"),
            RENEW * 3,
            || async { (proxy.queued_faults() == 0).then_some(()) },
        )
        .await;
        // The retry, 200 ms later, gets through.
        let failed_at = Instant::now();
        blob_mutex_testkit::wait_for("the retried renew", Duration::from_secs(3), || async {
            proxy
                .log()
                .iter()
                .any(|r| r.is("renew") && r.at > failed_at && r.fate == Fate::Forwarded)
                .then_some(())
        })
        .await;
    }
    let singles = proxy.log();
    let retry_gaps: Vec<Duration> = singles
        .iter()
        .filter(|r| r.is("renew") && matches!(r.fate, Fate::Injected(_)))
        .filter_map(|failed| {
            singles
                .iter()
                .find(|r| r.is("renew") && r.at > failed.at)
                .map(|r| r.at - failed.at)
        })
        .collect();

    // Bursts: 30 % of all requests fail (503 or reset) for 8 s, then 30 % get
    // a 500 for 4 s.
    let burst_start = Instant::now();
    proxy.fail_share(0.2, Injected::ServerBusy);
    proxy.reset_share(0.1);
    // Make sure the burst meets the leader's renewals, whatever the draw.
    proxy.fail_next_of("renew", Injected::ServerBusy);
    proxy.fail_next_of("renew", Injected::Reset);
    tokio::time::sleep(Duration::from_secs(8)).await;
    proxy.reset_share(0.0);
    proxy.fail_share(0.3, Injected::InternalError);
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.heal();
    let burst_end = Instant::now();
    // One more renewal after the burst, so that a loss it caused would show.
    tokio::time::sleep(RENEW).await;

    let events = cluster.events();
    let changes: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.what, What::Leading { .. } | What::Stopped { .. }))
        .skip(1)
        .collect();
    assert!(
        changes.is_empty(),
        "leadership changed under transient failures: {changes:?}\n{}",
        cluster.dump()
    );
    assert_eq!(cluster.leaders(), vec![leader]);

    let log = proxy.log();
    let in_burst: Vec<_> = log
        .iter()
        .filter(|r| r.at >= burst_start && r.at < burst_end)
        .collect();
    let renews = in_burst.iter().filter(|r| r.is("renew")).count();
    let failed = in_burst
        .iter()
        .filter(|r| matches!(r.fate, Fate::Injected(_)))
        .count();
    let failed_renews = in_burst
        .iter()
        .filter(|r| r.is("renew") && matches!(r.fate, Fate::Injected(_)))
        .count();
    let seconds = (burst_end - burst_start).as_secs_f64();
    // Renewals every 2 s plus retries after 200 ms, 400 ms, ...: far from a
    // busy loop. Three workers in all.
    #[allow(clippy::cast_precision_loss)] // small counts
    let rate = in_burst.len() as f64 / seconds;
    assert!(
        failed_renews >= 2,
        "the burst failed {failed_renews} renewals"
    );
    assert!(
        renews <= 20,
        "{renews} renewals in {seconds:.1}s of faults: retries without backoff?"
    );
    assert!(rate <= 10.0, "{rate:.1} requests/s from three workers");
    assert!(
        retry_gaps.iter().all(|g| *g >= Duration::from_millis(150)),
        "a failed renew was retried at once: {retry_gaps:?}"
    );
    cluster.history().assert_safe(&cluster.dump());
    println!(
        "transient: leader w{leader} (epoch {epoch}) kept leading; single failures retried after {:?}; \
         burst of {seconds:.1}s: {} requests ({rate:.2}/s), {failed} failed, {renews} renewals of which {failed_renews} failed",
        retry_gaps,
        in_burst.len()
    );
}
