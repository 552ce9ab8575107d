//! Interference by a client that is not this crate (the Python
//! `azure-storage-blob` SDK): a broken lease stops our leader, a foreign
//! lease keeps every instance here a follower until it ends, and content
//! written by someone else is never overwritten.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use blob_mutex::store::LeaseStore;

use std::time::Duration;

use std::time::Instant;

use blob_mutex::{azure::BlobLeaseManager, BlobSettings};
use blob_mutex_testkit::azurite::{unique_container, Azurite};
use blob_mutex_testkit::backend::{Backend, BackendExt};
use blob_mutex_testkit::foreign::{Foreign, CALL};
use blob_mutex_testkit::proxy::{Direction, Mode, Proxy};
use blob_mutex_testkit::workers::{Cluster, Spec};

const RETRY: Duration = Duration::from_millis(500);
const RENEW: Duration = Duration::from_secs(2);

fn azurite() -> Azurite {
    Azurite::start_with_args(&["--skipApiVersionCheck"])
}

/// Two workers on `container`/`blob`, straight to `azurite`.
fn workers(azurite: &Azurite, container: &str, blob: &str) -> Cluster {
    workers_on(
        blob_mutex_testkit::backend::current(),
        azurite,
        container,
        blob,
    )
}

/// Two workers on `container`/`blob` through `backend`, straight to `azurite`.
fn workers_on(backend: Backend, azurite: &Azurite, container: &str, blob: &str) -> Cluster {
    let mut cluster = backend.cluster();
    cluster.spawn_workers(
        2,
        container,
        blob,
        &["--acquire-retry-ms", "500", "--renew-ms", "2000"],
        |_| backend.connection_string(&azurite.endpoint),
    );
    cluster
}

#[tokio::test]
async fn foreign_content_and_metadata_are_never_overwritten() {
    let azurite = azurite();
    let container = unique_container("foreign-content");
    let foreign = Foreign::new(&azurite.connection_string(), &container, "content");
    // The container and the blob exist before any worker starts.
    let setup = blob_mutex_testkit::azurite::connection_string(&azurite.endpoint);
    let manager = blob_mutex::azure::BlobLeaseManager::new(
        &blob_mutex::BlobSettings::from_connection_string(&setup, container.clone(), "content")
            .unwrap(),
    )
    .unwrap();
    // Creates the container (and an empty blob), then lets go.
    let id = blob_mutex::store::LeaseId::new();
    manager.acquire(id, Duration::from_secs(15)).await.unwrap();
    manager.release(id).await.unwrap();
    foreign.put("foreign payload", None);

    let cluster = workers(&azurite, &container, "content");
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    let seen = foreign.get();
    assert_eq!(seen.content, "foreign payload");
    assert_eq!(
        seen.owner.as_deref(),
        Some("foreign"),
        "foreign metadata is kept"
    );
    assert_eq!(seen.epoch, Some(epoch));

    // A handover stamps the blob again; the content stays.
    let sent = cluster.terminate(leader);
    let (_, next_epoch, _) = cluster
        .wait_leading_after(sent, Duration::from_secs(10))
        .await;
    let seen = foreign.get();
    assert_eq!(seen.content, "foreign payload");
    assert_eq!(seen.owner.as_deref(), Some("foreign"));
    assert_eq!(seen.epoch, Some(next_epoch));
    cluster.history().assert_safe(&cluster.dump());
    println!("foreign content kept across epochs {epoch} and {next_epoch}: {seen:?}");
}

#[tokio::test]
async fn a_broken_lease_stops_the_leader() {
    broken_lease(blob_mutex_testkit::backend::current()).await;
}

async fn broken_lease(backend: Backend) {
    let azurite = azurite();
    let container = unique_container("foreign-break");
    let foreign = Foreign::new(&azurite.connection_string(), &container, "break");
    let cluster = workers_on(backend, &azurite, &container, "break");
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    // A moment of steady leadership before the break.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = cluster.now();
    foreign.break_lease();
    let broken = cluster.now();
    let (reason, stopped_at) = cluster
        .wait_stopped(leader, before, RENEW + CALL + Duration::from_secs(2))
        .await;
    assert_eq!(reason, "lost");
    // It notices at its next renewal.
    assert!(
        stopped_at <= broken + RENEW + Duration::from_secs(1),
        "the leader stopped {:?} after the break",
        stopped_at.saturating_sub(broken)
    );
    let (_, next_epoch, next_at) = cluster
        .wait_leading_after(before, Duration::from_secs(10))
        .await;
    assert!(next_epoch > epoch);
    let history = cluster.history();
    // A foreign break lets a follower in at once, while the old leader only
    // learns of it at its next renewal: the terms may overlap by up to one
    // renew interval. Only the epoch (fencing) protects against that.
    assert!(history.epochs_increase(), "{}", cluster.dump());
    assert!(
        history.overlap <= RENEW + Duration::from_secs(1),
        "{}",
        history.summary()
    );
    println!(
        "foreign break ({backend:?}): leader stopped {:.3}s after the break (renew interval {:.1}s), \
         next leader (epoch {next_epoch}) {:.3}s after it; overlap caused by the break {:.3}s; {}",
        // The foreign client returns a moment after the break took effect:
        // the leader may have stopped before `broken` was read.
        stopped_at.saturating_sub(broken).as_secs_f64(),
        RENEW.as_secs_f64(),
        next_at.saturating_sub(broken).as_secs_f64(),
        history.overlap.as_secs_f64(),
        history.summary()
    );
}

/// The overlap a break allows, as `docs/guide/guarantees.md` states it: the
/// leader learns of the break from its next renewal's answer, so the terms
/// may overlap by the rest of the renew interval, plus that renewal's
/// latency, plus the 100 ms grace before the abort. Here every answer to
/// the leader takes 1.5 s (the proxy delays them) and the break comes just
/// after a renewal reached storage.
#[tokio::test]
async fn a_break_overlaps_by_at_most_the_renew_interval_the_detecting_renewal_and_the_abort() {
    const DELAY: Duration = Duration::from_millis(1_500);
    const LOST_GRACE: Duration = Duration::from_millis(100);
    // Process scheduling on a loaded two-core machine.
    const SLACK: Duration = Duration::from_secs(1);
    let backend = blob_mutex_testkit::backend::current();
    let azurite = azurite();
    let proxy = Proxy::start(azurite.port);
    let container = unique_container("break-overlap");
    let options = ["--acquire-retry-ms", "500", "--renew-ms", "2000"];
    let mut cluster = backend.cluster();
    let old = cluster.spawn(Spec::worker(
        "behind-the-proxy",
        &backend.connection_string(&proxy.endpoint()),
        &container,
        "overlap",
        &options,
    ));
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    assert_eq!(leader, old);
    cluster.spawn(Spec::worker(
        "direct",
        &backend.connection_string(&azurite.endpoint),
        &container,
        "overlap",
        &options,
    ));
    proxy.set(Direction::ToClient, Mode::Delay(DELAY));
    let delayed = Instant::now();
    let renewals = |after: Instant| -> Vec<Instant> {
        proxy
            .log()
            .into_iter()
            .filter(|r| r.is("renew") && r.at >= after)
            .map(|r| r.at)
            .collect()
    };
    cluster
        .poll("a renewal through the delay", RENEW * 3, || {
            renewals(delayed).first().copied()
        })
        .await;
    let before = cluster.now();
    let settings = BlobSettings::from_connection_string(
        &blob_mutex_testkit::azurite::connection_string(&azurite.endpoint),
        container.clone(),
        "overlap",
    )
    .unwrap()
    .with_backend(backend);
    BlobLeaseManager::new(&settings)
        .unwrap()
        .break_lease(Some(Duration::ZERO))
        .await
        .unwrap();
    let broken = cluster.now();
    let limit = RENEW + DELAY + LOST_GRACE + SLACK;
    let (reason, stopped) = cluster.wait_stopped(old, before, limit * 2).await;
    assert_eq!(reason, "lost");
    let (_, next_epoch, _) = cluster.wait_leading_after(before, RENEW * 5).await;
    assert!(next_epoch > epoch);
    // The renewal that learnt of the break: the last one sent before the stop.
    let detecting = renewals(delayed)
        .into_iter()
        .map(|at| cluster.at(at))
        .filter(|at| *at < stopped)
        .max()
        .unwrap();
    assert!(
        detecting <= broken + RENEW + SLACK,
        "the detecting renewal went {:?} after the break",
        detecting.saturating_sub(broken)
    );
    let answered = stopped - detecting;
    assert!(
        answered >= DELAY && answered <= DELAY + LOST_GRACE + SLACK,
        "the leader stopped {answered:?} after the renewal that learnt of the break"
    );
    let history = cluster.history();
    assert!(history.epochs_increase(), "{}", cluster.dump());
    assert!(
        history.overlap <= limit,
        "overlap {:?} over the bound {limit:?}\n{}",
        history.overlap,
        cluster.dump()
    );
    println!(
        "break with {:.1}s answers ({backend:?}): leader stopped {:.3}s after the break, \
         {:.3}s after the renewal that learnt of it; overlap {:.3}s (bound {:.1}s)",
        DELAY.as_secs_f64(),
        stopped.saturating_sub(broken).as_secs_f64(),
        answered.as_secs_f64(),
        history.overlap.as_secs_f64(),
        limit.as_secs_f64()
    );
    cluster.kill_all();
}

#[tokio::test]
async fn a_foreign_lease_keeps_everyone_a_follower_until_it_ends() {
    let azurite = azurite();
    let container = unique_container("foreign-lease");
    let foreign = Foreign::new(&azurite.connection_string(), &container, "lease");
    let cluster = workers(&azurite, &container, "lease");
    let (leader, epoch, _) = cluster.wait_first_leader().await;

    let lease = "f0f0f0f0-0000-4000-8000-000000000001";
    let before = cluster.now();
    foreign.acquire(-1, lease);
    let taken = cluster.now();
    let (reason, _) = cluster
        .wait_stopped(leader, before, RENEW + CALL + Duration::from_secs(2))
        .await;
    assert_eq!(reason, "lost");
    // The foreign lease is held for 5 s: the scenario.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held_until = cluster.now();
    let led_while_foreign = cluster.leading_between(taken, held_until);
    assert!(
        led_while_foreign.is_empty(),
        "an instance led while a foreign lease was held: {led_while_foreign:?}"
    );
    assert!(cluster.leaders().is_empty(), "{}", cluster.dump());

    foreign.release(lease);
    let released = cluster.now();
    let (_, next_epoch, next_at) = cluster
        .wait_leading_after(held_until, Duration::from_secs(10))
        .await;
    let after = next_at.saturating_sub(released);
    assert!(
        after <= RETRY + Duration::from_secs(1),
        "took {after:?} to lead after the foreign lease ended"
    );
    assert!(next_epoch > epoch);
    // The foreign client takes the lease by breaking it and acquiring, so a
    // follower may slip in between: the break overlap of the test above,
    // bounded by a renew interval, which only the epoch protects against.
    let history = cluster.history();
    assert!(history.epochs_increase(), "{}", cluster.dump());
    assert!(
        history.overlap <= RENEW + Duration::from_secs(1),
        "{}",
        history.summary()
    );
    println!(
        "foreign lease: held {:.1}s with no leader here; a worker led {:.3}s after it was released; {}",
        (released - taken).as_secs_f64(),
        after.as_secs_f64(),
        cluster.history().summary()
    );
}

#[tokio::test]
async fn a_foreign_rewrite_of_the_blob_is_kept_and_a_new_term_follows() {
    let azurite = azurite();
    let container = unique_container("foreign-rewrite");
    let foreign = Foreign::new(&azurite.connection_string(), &container, "rewrite");
    let cluster = workers(&azurite, &container, "rewrite");
    let (leader, _, _) = cluster.wait_first_leader().await;
    // A second term, so that the epoch is above 1.
    let sent = cluster.terminate(leader);
    let (_, epoch, _) = cluster
        .wait_leading_after(sent, Duration::from_secs(10))
        .await;

    // A foreign client takes the lease and rewrites the blob: Put Blob
    // replaces the content and all metadata, the epoch included.
    let lease = "f0f0f0f0-0000-4000-8000-000000000002";
    let before = cluster.now();
    foreign.acquire(-1, lease);
    foreign.put("written under a foreign lease", Some(lease));
    foreign.release(lease);
    let (_, next_epoch, _) = cluster
        .wait_leading_after(before, Duration::from_secs(10))
        .await;
    let seen = foreign.get();
    assert_eq!(seen.content, "written under a foreign lease");
    assert_eq!(seen.owner.as_deref(), Some("foreign"));
    // Put Blob replaces all metadata, the epoch included: a client outside
    // this crate that rewrites the blob restarts the fencing token (a
    // documented limit; the content above is what must survive).
    println!("epoch before the foreign rewrite {epoch}, after it {next_epoch}");
}
