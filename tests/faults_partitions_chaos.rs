//! Chaos soak for lease sets: five worker processes share 16 partitions; at
//! random intervals one is killed (SIGKILL) or terminated (SIGTERM) and a
//! fresh one joins in its place. Whatever happens: no partition is owned by
//! two processes at once, each partition's epochs strictly increase, and
//! every partition a killed process owned is owned again within the lease
//! plus two balance cycles and a little.
//!
//! Runs for `BLOB_MUTEX_PARTITION_CHAOS_SECS` seconds (default 120); the
//! random choices come from `BLOB_MUTEX_CHAOS_SEED` (default: from the clock,
//! printed so that a run can be repeated).

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

mod support;

use std::time::Duration;

use support::azurite;
use support::chaos::{env_u64, seed, Rng};
use support::partitions::{assert_safe, terms, Term};
use support::workers::{Cluster, Spec};

const WORKERS: usize = 5;
const LEASE: Duration = Duration::from_secs(15);
/// The partitions of the set, as `--partitions` below says.
const PARTITIONS: usize = 16;
const FLAGS: &[&str] = &[
    "--partitions",
    "16",
    "--lease-secs",
    "15",
    "--balance-ms",
    "1000",
    "--acquire-retry-ms",
    "500",
];
/// The lease, two balance cycles (1 s, +20 %), claims spread over a cycle,
/// and room for a loaded two-core machine.
const REOWN_BOUND: Duration = LEASE.saturating_add(Duration::from_secs(8));

fn spawn(cluster: &mut Cluster, container: &str) -> usize {
    let name = format!("w{}", cluster.len());
    cluster.spawn(Spec::worker(
        &name,
        &azurite::shared().connection_string(),
        container,
        "set",
        FLAGS,
    ))
}

#[tokio::test]
async fn partition_chaos_soak_never_owns_a_partition_twice() {
    let secs = env_u64("BLOB_MUTEX_PARTITION_CHAOS_SECS").unwrap_or(120);
    let seed = seed();
    println!(
        "partition chaos: {secs}s, seed {seed} (BLOB_MUTEX_CHAOS_SEED={seed} repeats the choices)"
    );
    let mut rng = Rng(seed);
    let container = azurite::unique_container("partition-chaos");
    let mut cluster = Cluster::new();
    let mut live: Vec<usize> = (0..WORKERS)
        .map(|_| spawn(&mut cluster, &container))
        .collect();
    let end = cluster.now() + Duration::from_secs(secs);
    let mut kills: Vec<(usize, Duration)> = Vec::new();
    let (mut terminated, mut joined) = (0, 0);
    while cluster.now() < end {
        tokio::time::sleep(Duration::from_millis(3_000 + rng.below(5_000))).await;
        let victim = live.remove(usize::try_from(rng.below(live.len() as u64)).unwrap());
        if rng.below(2) == 0 {
            kills.push((victim, cluster.kill(victim)));
        } else {
            cluster.terminate(victim);
            terminated += 1;
        }
        live.push(spawn(&mut cluster, &container));
        joined += 1;
    }
    // Every partition owned again (by a live worker) before judging; the
    // bound per kill is checked below.
    cluster
        .wait_for(
            "every partition to be owned",
            REOWN_BOUND + Duration::from_secs(5),
            |events| {
                let owned = terms(events)
                    .values()
                    .filter(|ts| ts.last().is_some_and(|t| t.end.is_none()))
                    .count();
                (owned == PARTITIONS).then_some(())
            },
        )
        .await;
    let all = terms(&cluster.events());
    assert_safe(&all, cluster.now(), &cluster.dump());

    let mut worst = Duration::ZERO;
    for (victim, killed) in &kills {
        for (partition, ts) in &all {
            let held = ts
                .iter()
                .any(|t: &Term| t.worker == *victim && t.end == Some(*killed));
            if !held {
                continue;
            }
            let next = ts.iter().find(|t| t.start > *killed).unwrap_or_else(|| {
                panic!(
                    "partition {partition} of killed worker {victim} never owned again\n{}",
                    cluster.dump()
                )
            });
            let took = next.start - *killed;
            assert!(
                took <= REOWN_BOUND,
                "partition {partition} owned again {took:?} after worker {victim} was killed\n{}",
                cluster.dump()
            );
            worst = worst.max(took);
        }
    }
    let moves: usize = all.values().map(Vec::len).sum();
    println!(
        "partition chaos: {} kills, {terminated} graceful stops, {joined} joins, {moves} partition terms; \
         slowest re-own after a kill {:.1}s (bound {:.0}s)",
        kills.len(),
        worst.as_secs_f64(),
        REOWN_BOUND.as_secs_f64()
    );
    assert!(!kills.is_empty() || secs < 10, "the soak killed nobody");
    cluster.kill_all();
}
