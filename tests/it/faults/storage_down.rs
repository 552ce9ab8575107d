//! Storage is down for 20 s (Azurite stopped, then started again on the
//! same port with the same data): no new leader while it is down, the old
//! one steps down by its deadline, someone leads soon after storage is back,
//! and the workers back off instead of hammering it.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::{Duration, Instant};

use blob_mutex_testkit::azurite::Azurite;
use blob_mutex_testkit::backend::{Backend, BackendExt};
use blob_mutex_testkit::proxy::{Fate, Proxy};

const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_millis(500);
const MARGIN: Duration = Duration::from_millis(1150);
const DOWN: Duration = Duration::from_secs(20);
const WORKERS: usize = 3;

#[tokio::test]
async fn nobody_new_leads_while_storage_is_down_and_someone_leads_soon_after() {
    storage_down(blob_mutex_testkit::backend::current()).await;
}

async fn storage_down(backend: Backend) {
    let mut azurite = Azurite::start_persistent();
    // One proxy in front of all workers, to count their requests.
    let proxy = Proxy::start(azurite.port);
    let container = blob_mutex_testkit::azurite::unique_container("down");
    let mut cluster = backend.cluster();
    cluster.spawn_workers(
        WORKERS,
        &container,
        "down",
        &["--acquire-retry-ms", "500"],
        |_| backend.connection_string(&proxy.endpoint()),
    );
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    // A steady state before the outage: the leader leads, the followers poll.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let last_ok = proxy
        .log()
        .iter()
        .filter(|r| (r.is("renew") || r.is("acquire")) && r.fate == Fate::Forwarded)
        .filter_map(|r| r.forwarded_at)
        .max()
        .expect("lease requests reached storage");
    azurite.stop();
    let down_at = cluster.now();
    let down_instant = Instant::now();
    // The old leader's deadline comes at the latest this long after its last
    // successful request.
    let deadline = cluster.at(last_ok) + LEASE - MARGIN;
    let (reason, stopped_at) = cluster.wait_stopped(leader, down_at, DOWN).await;
    assert_eq!(reason, "deadline");
    assert!(stopped_at <= deadline, "{stopped_at:?} > {deadline:?}");
    // Storage stays down for DOWN in all: the scenario.
    let remaining = DOWN.saturating_sub(down_instant.elapsed());
    tokio::time::sleep(remaining).await;
    let restart_at = cluster.now();
    let restart_instant = Instant::now();
    azurite.restart();
    let up_at = cluster.now();

    let leading_while_down = cluster.leading_between(down_at, up_at);
    assert!(
        leading_while_down.is_empty(),
        "someone led while storage was down: {leading_while_down:?}"
    );
    assert!(cluster.leaders().is_empty(), "{}", cluster.dump());

    // Request rate while down, from the first second (the leader's fast
    // renew retries) to the restart; and over its second half, when every
    // worker has backed off.
    let all = proxy.requests_between(down_instant, restart_instant);
    let later = proxy.requests_between(down_instant + DOWN / 2, restart_instant);
    #[allow(clippy::cast_precision_loss)] // small counts
    let (rate, later_rate) = (
        all as f64 / DOWN.as_secs_f64() / WORKERS as f64,
        later as f64 / (DOWN / 2).as_secs_f64() / WORKERS as f64,
    );
    // A follower retries every 500 ms when storage answers; without backoff
    // that alone is 2 requests/s per worker.
    assert!(
        rate <= 1.0,
        "{rate:.2} requests/s per worker while storage was down"
    );
    assert!(
        later_rate <= 0.5,
        "{later_rate:.2} requests/s per worker in the second half of the outage"
    );

    let limit = LEASE + RETRY + Duration::from_secs(2);
    let (_, next_epoch, next_at) = cluster.wait_leading_after(up_at, limit).await;
    assert!(next_epoch > epoch, "the epoch survives a storage restart");
    for worker in 0..WORKERS {
        assert!(
            cluster.exited(worker).is_none(),
            "worker {worker} exited\n{}",
            cluster.dump_all()
        );
        assert!(
            cluster.log_lines(worker, "panicked").is_empty(),
            "worker {worker} panicked\n{}",
            cluster.dump_all()
        );
    }
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    println!(
        "storage down ({backend:?}) {:.1}s: old leader stopped {:.3}s after the outage began; {all} requests while down \
         ({rate:.2}/s per worker, {later_rate:.2}/s in the second half); restart took {:.3}s; \
         new leader {:.3}s after storage was back; {}",
        (restart_at - down_at).as_secs_f64(),
        (stopped_at - down_at).as_secs_f64(),
        (up_at - restart_at).as_secs_f64(),
        (next_at - up_at).as_secs_f64(),
        history.summary()
    );
}
