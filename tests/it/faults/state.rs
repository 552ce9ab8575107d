//! Leader state written through the context, fenced by storage: with
//! worker processes writing `epoch=<n> tick=<k>` every 200 ms, a leader that
//! lost its lease (frozen past it, or broken by a foreign client) never
//! lands a write once the next leader has led, and the state survives a
//! handover and a crash.

// Times here are instants of one monotonic record, subtracted in the order
// they happened.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex_testkit::azurite::{unique_container, Azurite};
use blob_mutex_testkit::foreign::Foreign;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::workers::{Cluster, What};

const LEASE: Duration = Duration::from_secs(15);

fn azurite() -> Azurite {
    Azurite::start_with_args(&["--skipApiVersionCheck"])
}

/// Two workers on `container`; worker `i` reaches storage through
/// `connection_string(i)`.
fn workers_through(container: &str, connection_string: impl Fn(usize) -> String) -> Cluster {
    let mut cluster = Cluster::new();
    cluster.spawn_workers(
        2,
        container,
        "state",
        &[
            "--acquire-retry-ms",
            "500",
            "--renew-ms",
            "2000",
            "--write-state-ms",
            "200",
        ],
        connection_string,
    );
    cluster
}

fn workers(azurite: &Azurite, container: &str) -> Cluster {
    workers_through(container, |_| azurite.connection_string())
}

/// Waits until `proxy` has forwarded a renewal that arrived after `after`.
async fn renewed_after(proxy: &Proxy, after: std::time::Instant) {
    blob_mutex_testkit::wait_for(
        "a renewal of the leader",
        Duration::from_secs(10),
        || async {
            proxy
                .log()
                .iter()
                .any(|r| r.is("renew") && r.at >= after && r.forwarded_at.is_some())
                .then_some(())
        },
    )
    .await;
}

/// Every state write of `epoch` that landed, with its time and tick.
fn written(cluster: &Cluster, epoch: u64) -> Vec<(Duration, u64)> {
    cluster
        .events()
        .into_iter()
        .filter_map(|e| match e.what {
            What::StateWritten { epoch: n, tick, .. } if n == epoch => Some((e.at, tick)),
            _ => None,
        })
        .collect()
}

fn refused(cluster: &Cluster, epoch: u64) -> Vec<Duration> {
    cluster
        .events()
        .into_iter()
        .filter_map(|e| match e.what {
            What::StateRefused { epoch: n, .. } if n == epoch => Some(e.at),
            _ => None,
        })
        .collect()
}

/// Waits for the first landed write of `epoch`.
async fn first_write(cluster: &Cluster, epoch: u64, limit: Duration) -> Duration {
    cluster
        .wait_for("a STATE-WRITTEN line", limit, |events| {
            events.iter().find_map(|e| match e.what {
                What::StateWritten { epoch: n, .. } if n == epoch => Some(e.at),
                _ => None,
            })
        })
        .await
}

/// What the term of `epoch` read when it began.
async fn read_at_start(cluster: &Cluster, epoch: u64) -> String {
    cluster
        .wait_for("a STATE-READ line", Duration::from_secs(10), |events| {
            events.iter().find_map(|e| match &e.what {
                What::StateRead { epoch: n, last } if *n == epoch => Some(last.clone()),
                _ => None,
            })
        })
        .await
}

#[tokio::test]
async fn a_leader_whose_lease_was_broken_is_refused_by_storage() {
    let azurite = azurite();
    let container = unique_container("state-break");
    // Each worker through a proxy of its own, to see when the leader renews.
    let proxies = Proxy::start_many(2, azurite.port);
    let cluster = workers_through(&container, |i| proxies[i].connection_string());
    let (old, epoch, _) = cluster.wait_first_leader().await;
    first_write(&cluster, epoch, Duration::from_secs(10)).await;
    let foreign = Foreign::new(&azurite.connection_string(), &container, "state");
    // Break right after a renewal, so that the leader keeps writing (every
    // 200 ms) for most of the 2 s until its next renewal tells it: at a
    // random moment, the renewal could come before the next write.
    renewed_after(&proxies[old], std::time::Instant::now()).await;
    let before = cluster.now();
    foreign.break_lease();
    // The foreign client returns a moment after the break took effect: the
    // other worker may lead before `broke` is read.
    let broke = cluster.now();
    // The other worker leads at its next retry; the old leader learns of the
    // break only at its next renewal (up to 2 s later) and meanwhile keeps
    // writing: storage refuses those writes.
    let (next, next_epoch, _) = cluster
        .wait_leading_after(before, Duration::from_secs(10))
        .await;
    assert_ne!(next, old);
    let new_first = first_write(&cluster, next_epoch, Duration::from_secs(10)).await;
    cluster
        .wait_stopped(old, before, Duration::from_secs(10))
        .await;
    let late: Vec<_> = written(&cluster, epoch)
        .into_iter()
        .filter(|(at, _)| *at >= broke)
        .collect();
    assert!(
        late.is_empty(),
        "writes of the broken term landed after the break: {late:?}\n{}",
        cluster.dump()
    );
    let refusals = refused(&cluster, epoch);
    assert!(
        !refusals.is_empty(),
        "the broken leader's writes were refused by storage\n{}",
        cluster.dump()
    );
    let seen = foreign.get();
    assert!(
        seen.content.starts_with(&format!("epoch={next_epoch} ")),
        "{seen:?}"
    );
    assert_eq!(
        seen.epoch,
        Some(next_epoch),
        "the metadata is kept by state writes"
    );
    println!(
        "broken at {:.3}s: {} writes of epoch {epoch} refused by storage ({:.3}s..{:.3}s), \
         epoch {next_epoch} first wrote at {:.3}s",
        broke.as_secs_f64(),
        refusals.len(),
        refusals[0].as_secs_f64(),
        refusals[refusals.len() - 1].as_secs_f64(),
        new_first.as_secs_f64(),
    );
    cluster.kill_all();
}

#[tokio::test]
async fn a_leader_frozen_past_its_lease_lands_no_write_after_it_wakes() {
    let azurite = azurite();
    let container = unique_container("state-frozen");
    let cluster = workers(&azurite, &container);
    let (old, epoch, _) = cluster.wait_first_leader().await;
    first_write(&cluster, epoch, Duration::from_secs(10)).await;
    let frozen = cluster.signal(old, "STOP");
    let (next, next_epoch, _) = cluster
        .wait_leading_after(frozen, LEASE + Duration::from_secs(10))
        .await;
    assert_ne!(next, old);
    first_write(&cluster, next_epoch, Duration::from_secs(10)).await;
    let resumed = cluster.signal(old, "CONT");
    cluster
        .wait_stopped(old, frozen, Duration::from_secs(10))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late: Vec<_> = written(&cluster, epoch)
        .into_iter()
        .filter(|(at, _)| *at >= frozen)
        .collect();
    assert!(
        late.is_empty(),
        "the frozen leader landed writes after it was frozen: {late:?}\n{}",
        cluster.dump()
    );
    let foreign = Foreign::new(&azurite.connection_string(), &container, "state");
    let seen = foreign.get();
    assert!(
        seen.content.starts_with(&format!("epoch={next_epoch} ")),
        "only the new leader's writes: {seen:?}"
    );
    println!(
        "frozen at {:.3}s, resumed at {:.3}s: {} writes of epoch {epoch} refused after the resume, none landed",
        frozen.as_secs_f64(),
        resumed.as_secs_f64(),
        refused(&cluster, epoch).len()
    );
    cluster.kill_all();
}

#[tokio::test]
async fn the_state_survives_a_handover_and_a_crash() {
    let azurite = azurite();
    let container = unique_container("state-survives");
    let mut cluster = workers(&azurite, &container);
    let (first, epoch, _) = cluster.wait_first_leader().await;
    first_write(&cluster, epoch, Duration::from_secs(10)).await;

    // Handover: the task stops (no more writes), then the lease is released.
    let sent = cluster.terminate(first);
    let (second, epoch2, _) = cluster
        .wait_leading_after(sent, Duration::from_secs(10))
        .await;
    let last = written(&cluster, epoch).last().copied().unwrap().1;
    assert_eq!(
        read_at_start(&cluster, epoch2).await,
        format!("epoch={epoch}_tick={last}"),
        "{}",
        cluster.dump()
    );

    // Crash: a third worker waits; the leader is SIGKILLed.
    cluster.spawn_workers(
        1,
        &container,
        "state",
        &["--acquire-retry-ms", "500", "--write-state-ms", "200"],
        |_| azurite.connection_string(),
    );
    first_write(&cluster, epoch2, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = cluster.kill(second);
    let (_, epoch3, _) = cluster
        .wait_leading_after(killed, LEASE + Duration::from_secs(10))
        .await;
    // The write in flight at the kill may have landed before the worker
    // could say so: the next leader reads the last write said, or that one.
    let last = written(&cluster, epoch2).last().copied().unwrap().1;
    let read = read_at_start(&cluster, epoch3).await;
    assert!(
        [last, last + 1]
            .iter()
            .any(|tick| read == format!("epoch={epoch2}_tick={tick}")),
        "read {read:?}, the last write said was tick {last} of epoch {epoch2}\n{}",
        cluster.dump()
    );
    cluster.history().assert_safe(&cluster.dump());
    cluster.kill_all();
}
