//! What a set tells of its partition leases when it leaves, on the
//! in-memory set store with paused time: one line with how many releases
//! were answered and how many were not.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Level;

use super::{BlobLeaseSet, LeaseSetOptions, PARTITIONS as PREFIX};
use crate::captured_logs::capture;
use crate::error::{Error, Result};
use crate::store::memory::MemoryLeaseSetStore;

/// Slots of the instance's client: three for partitions, one for its
/// membership.
const SLOTS: usize = 4;

/// Runs one instance "a" of `n` partitions until it owns them all, slows
/// storage to `latency`, and has the set leave. Returns the log lines of
/// its leaving, and how many partition leases are free once `run` returned.
async fn leave(n: usize, latency: Duration) -> (String, usize) {
    // From the start: the spans the set's tasks run in are made meanwhile.
    let (logs, _logging) = capture(Level::INFO);
    let shared = MemoryLeaseSetStore::new();
    let store = shared.clone().with_pace(Duration::ZERO, SLOTS);
    let options = LeaseSetOptions::default().with_mutex(
        LeaseSetOptions::default()
            .mutex
            .with_holder("a".to_owned())
            .with_jitter_seed(5),
    );
    let partitions: Vec<String> = (0..n).map(|i| format!("p{i:03}")).collect();
    let set = BlobLeaseSet::with_store(
        store.clone(),
        partitions.clone(),
        options,
        |ctx| async move {
            ctx.cancelled().await;
            Ok::<(), Error>(())
        },
    )
    .unwrap();
    let mut owned = set.watch();
    let token = CancellationToken::new();
    let run = tokio::spawn({
        let token = token.clone();
        async move { set.run(token).await }
    });
    tokio::time::timeout(Duration::from_secs(120), owned.wait_for(|o| o.len() == n))
        .await
        .expect("every partition owned")
        .unwrap();
    store.pace().unwrap().set_latency(latency);
    token.cancel();
    run.await.unwrap().unwrap();
    let free = partitions
        .iter()
        .filter(|p| !shared.get(&format!("{PREFIX}{p}")).is_held())
        .count();
    (logs.text(), free)
}

/// The figure `name=<count>` of the line that says `what`.
fn figure(logs: &str, what: &str, name: &str) -> Result<usize, String> {
    let line = logs
        .lines()
        .find(|l| l.contains(what))
        .ok_or_else(|| format!("no line says {what:?}: {logs}"))?;
    let value = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .ok_or_else(|| format!("no {name} in {line}"))?;
    value.parse().map_err(|e| format!("{name} in {line}: {e}"))
}

#[tokio::test(start_paused = true)]
async fn a_set_leaving_through_quick_storage_says_it_released_every_partition_lease() {
    let (logs, free) = leave(20, Duration::ZERO).await;
    assert_eq!(free, 20, "{logs}");
    let said = "every partition lease it held was released";
    assert_eq!(figure(&logs, said, "released"), Ok(20));
    assert!(logs.lines().any(|l| l.contains(said) && l.contains("INFO")));
    // In the membership term's span, which names the member lease.
    assert!(
        logs.lines()
            .any(|l| l.contains(said) && l.contains("lease=members/a")),
        "{logs}"
    );
    assert!(!logs.contains("left to expire"), "{logs}");
}

/// Releases of 200 partitions, four slots at half a second each: about 24
/// are answered within the 3 s request timeout; the line says how many
/// were and were not, and the figures add up.
#[tokio::test(start_paused = true)]
async fn a_set_leaving_through_slow_storage_says_how_many_releases_were_not_answered() {
    const N: usize = 200;
    let (logs, free) = leave(N, Duration::from_millis(500)).await;
    let said = "partition leases whose release was not answered";
    let released = figure(&logs, said, "released").unwrap();
    let unanswered = figure(&logs, said, "unanswered").unwrap();
    assert_eq!(released + unanswered, N, "{logs}");
    assert!(released > 0 && unanswered > 0, "{logs}");
    assert!(logs.lines().any(|l| l.contains(said) && l.contains("WARN")));
    // Every release said answered freed its lease. A release whose time ran
    // out just as it got a slot may have acted too: the rest are not
    // known to be free.
    assert!(
        free >= released,
        "{free} leases free, {released} said released"
    );
}
