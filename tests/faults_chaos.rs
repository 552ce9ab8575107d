//! Chaos soak: five worker processes on one blob; at random intervals the
//! leader is killed (SIGKILL) or terminated (SIGTERM) (and replaced by a fresh process), or one
//! worker's path to storage flaps (partition, slow answers, 503s, resets).
//! Whatever happens: never two leaders at once, epochs strictly increase,
//! and no gap without a leader is longer than lease + acquire retry + 2 s.
//!
//! Runs for `BLOB_MUTEX_CHAOS_SECS` seconds (default 180); the random
//! choices come from `BLOB_MUTEX_CHAOS_SEED` (default: from the clock,
//! printed so that a run can be repeated).

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

mod support;

use std::time::{Duration, Instant};

use support::azurite;
use support::chaos::{env_u64, seed, Rng};
use support::proxy::{Direction, Injected, Mode, Proxy};
use support::workers::{Cluster, Spec};

const WORKERS: usize = 5;
const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_millis(500);

#[derive(Default)]
struct Tally {
    kills: usize,
    terms: usize,
    flaps: usize,
    /// From each signal to the leader until the next `LEADING`.
    handovers: Vec<(&'static str, Duration)>,
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one scenario, read top to bottom
async fn chaos_soak_keeps_one_leader_at_a_time() {
    let secs = env_u64("BLOB_MUTEX_CHAOS_SECS").unwrap_or(180);
    let seed = seed();
    println!("chaos: {secs}s, seed {seed} (BLOB_MUTEX_CHAOS_SEED={seed} repeats the choices)");
    let mut rng = Rng(seed);
    let container = azurite::unique_container("chaos");
    // One proxy per slot, so that one worker's path can flap alone.
    let proxies = Proxy::start_many(WORKERS, azurite::shared().port);
    let mut cluster = Cluster::new();
    let spawn = |cluster: &mut Cluster, slot: usize, generation: usize| {
        cluster.spawn(Spec::worker(
            &format!("w{slot}.{generation}"),
            &proxies[slot].connection_string(),
            &container,
            "chaos",
            &["--acquire-retry-ms", "500", "--work-ms", "200"],
        ))
    };
    // slot → (worker index, generation)
    let mut slots: Vec<(usize, usize)> = (0..WORKERS)
        .map(|slot| (spawn(&mut cluster, slot, 0), 0))
        .collect();
    cluster.wait_first_leader().await;

    let end = Instant::now() + Duration::from_secs(secs);
    let mut tally = Tally::default();
    let mut signals: Vec<(&'static str, Duration)> = Vec::new();
    let mut flapping: Option<(usize, Instant)> = None;
    let mut next_disruption = Instant::now() + rng.millis(2_000, 8_000);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some((slot, heal_at)) = flapping {
            if Instant::now() >= heal_at {
                proxies[slot].heal();
                flapping = None;
            }
        }
        // Replace exited workers.
        for (slot, entry) in slots.iter_mut().enumerate() {
            if cluster.exited(entry.0).is_some() {
                entry.1 += 1;
                entry.0 = spawn(&mut cluster, slot, entry.1);
            }
        }
        if Instant::now() < next_disruption {
            continue;
        }
        next_disruption = Instant::now() + rng.millis(3_000, 12_000);
        let leaders = cluster.leaders();
        let choice = rng.below(10);
        match (choice, leaders.as_slice()) {
            (0..=3, [leader]) => {
                signals.push(("kill", cluster.kill(*leader)));
                tally.kills += 1;
            }
            (4..=6, [leader]) => {
                signals.push(("term", cluster.terminate(*leader)));
                tally.terms += 1;
            }
            _ if flapping.is_none() => {
                // Flap the leader's path half of the time, else anyone's.
                let slot = match leaders.as_slice() {
                    [leader] if rng.below(2) == 0 => slots
                        .iter()
                        .position(|(worker, _)| worker == leader)
                        .unwrap_or(0),
                    _ => usize::try_from(rng.below(WORKERS as u64)).unwrap(),
                };
                let proxy = &proxies[slot];
                match rng.below(4) {
                    0 => proxy.partition(),
                    1 => proxy.set(Direction::ToClient, Mode::Delay(Duration::from_secs(4))),
                    2 => proxy.fail_share(0.5, Injected::ServerBusy),
                    _ => proxy.reset_share(0.5),
                }
                tally.flaps += 1;
                flapping = Some((slot, Instant::now() + rng.millis(1_000, 8_000)));
            }
            _ => {}
        }
    }
    for proxy in &proxies {
        proxy.heal();
    }
    // Settle: the last disruption may have left no leader yet.
    let settle_from = cluster.now();
    if cluster.leaders().is_empty() {
        cluster
            .wait_leading_after(settle_from, LEASE + RETRY + Duration::from_secs(10))
            .await;
    }

    let history = cluster.history();
    let record = cluster.dump();
    for (kind, at) in signals {
        if let Some(term) = history.intervals.iter().find(|i| i.start > at) {
            tally.handovers.push((kind, term.start - at));
        }
    }
    history.assert_safe(&record);
    let bound = LEASE + RETRY + Duration::from_secs(2);
    let long: Vec<_> = history
        .gaps
        .iter()
        .filter(|(from, to)| *to - *from > bound)
        .collect();
    assert!(
        long.is_empty(),
        "gaps longer than {bound:?}: {long:?}\n{record}"
    );
    cluster.assert_no_panics_or_failed_exits(&record);
    assert!(
        history.transitions() >= 3,
        "too few transitions to mean anything\n{record}"
    );

    let mut handovers: Vec<Duration> = tally.handovers.iter().map(|(_, d)| *d).collect();
    handovers.sort();
    let median = handovers
        .get(handovers.len() / 2)
        .copied()
        .unwrap_or_default();
    let worst = |kind: &str| {
        tally
            .handovers
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    };
    println!(
        "chaos: {secs}s, {} processes, {} SIGKILL, {} SIGTERM, {} proxy flaps; transitions {}, max gap {:.3}s, \
         median gap {:.3}s, median handover after a signal {:.3}s (worst after SIGKILL {:.3}s, after SIGTERM {:.3}s); \
         overlap {:?}; epochs increase: {}",
        cluster.len(),
        tally.kills,
        tally.terms,
        tally.flaps,
        history.transitions(),
        history.max_gap().as_secs_f64(),
        history.median_gap().as_secs_f64(),
        median.as_secs_f64(),
        worst("kill").as_secs_f64(),
        worst("term").as_secs_f64(),
        history.overlap,
        history.epochs_increase()
    );
}
