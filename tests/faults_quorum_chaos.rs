//! Chaos soak on a quorum: four worker processes lead on three accounts
//! (three Azurites, each behind a fault proxy). At random intervals the
//! leader is killed (SIGKILL) or terminated (SIGTERM) and replaced, and
//! accounts go out (blackholed, answering 503, resetting connections, or
//! slow), one at a time or two at once. Whatever happens: never two
//! leaders at once, epochs strictly increase, and with at most one account
//! out no gap without a leader is longer than lease + acquire backoff.
//!
//! Runs for `BLOB_MUTEX_QUORUM_CHAOS_SECS` seconds (default 90); the random
//! choices come from `BLOB_MUTEX_CHAOS_SEED` (default: from the clock,
//! printed so that a run can be repeated).
//!
//! Outages are on the network only: an emulator restart would forget the
//! leases it granted (Azurite does, Azure does not), which no quorum can
//! survive on two accounts at once.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

mod support;

use std::time::{Duration, Instant};

use support::azurite::{self, Azurite};
use support::chaos::{env_u64, seed, Rng};
use support::proxy::{Direction, Injected, Mode, Proxy};
use support::workers::{Cluster, Spec};

const WORKERS: usize = 4;
const ACCOUNTS: usize = 3;
const LEASE: Duration = Duration::from_secs(15);

#[tokio::test]
#[allow(clippy::too_many_lines)] // one scenario, read top to bottom
async fn quorum_chaos_keeps_one_leader_at_a_time() {
    let secs = env_u64("BLOB_MUTEX_QUORUM_CHAOS_SECS").unwrap_or(90);
    let seed = seed();
    println!(
        "quorum chaos: {secs}s, seed {seed} (BLOB_MUTEX_CHAOS_SEED={seed} repeats the choices)"
    );
    let mut rng = Rng(seed);
    let accounts: Vec<Azurite> = (0..ACCOUNTS).map(|_| Azurite::start()).collect();
    let proxies: Vec<Proxy> = accounts.iter().map(|a| Proxy::start(a.port)).collect();
    let strings: Vec<String> = proxies.iter().map(Proxy::connection_string).collect();
    let container = azurite::unique_container("quorum-chaos");
    let mut cluster = Cluster::new();
    let spawn = |cluster: &mut Cluster, slot: usize, generation: usize| {
        cluster.spawn(Spec::quorum_worker(
            &format!("w{slot}.{generation}"),
            &strings,
            &container,
            "chaos",
            &["--acquire-retry-ms", "500", "--work-ms", "200"],
        ))
    };
    let mut slots: Vec<(usize, usize)> = (0..WORKERS)
        .map(|slot| (spawn(&mut cluster, slot, 0), 0))
        .collect();
    cluster.wait_first_leader().await;

    let end = Instant::now() + Duration::from_secs(secs);
    let (mut kills, mut outages, mut double_outages) = (0, 0, 0);
    // account → when it comes back
    let mut out: Vec<Option<Instant>> = vec![None; ACCOUNTS];
    // Spans with two accounts out, in the cluster's time: gaps there are expected.
    let mut majority_out: Vec<(Duration, Duration)> = Vec::new();
    let mut next_disruption = Instant::now() + rng.millis(2_000, 6_000);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for (account, back_at) in out.iter_mut().enumerate() {
            if back_at.is_some_and(|at| Instant::now() >= at) {
                proxies[account].heal();
                *back_at = None;
            }
        }
        for (slot, entry) in slots.iter_mut().enumerate() {
            if cluster.exited(entry.0).is_some() {
                entry.1 += 1;
                entry.0 = spawn(&mut cluster, slot, entry.1);
            }
        }
        if Instant::now() < next_disruption {
            continue;
        }
        next_disruption = Instant::now() + rng.millis(2_000, 8_000);
        let leaders = cluster.leaders();
        match (rng.below(10), leaders.as_slice()) {
            (0..=1, [leader]) => {
                cluster.kill(*leader);
                kills += 1;
            }
            (2, [leader]) => {
                cluster.terminate(*leader);
                kills += 1;
            }
            _ => {
                let up: Vec<usize> = (0..ACCOUNTS).filter(|a| out[*a].is_none()).collect();
                // One account out at a time, and now and then a second.
                let already_out = ACCOUNTS - up.len();
                if up.is_empty() || already_out >= 2 || (already_out == 1 && rng.below(4) != 0) {
                    continue;
                }
                let account = up[usize::try_from(rng.below(up.len() as u64)).unwrap()];
                let proxy = &proxies[account];
                match rng.below(4) {
                    0 => proxy.partition(),
                    1 => proxy.fail_share(1.0, Injected::ServerBusy),
                    2 => proxy.reset_share(0.7),
                    _ => proxy.set(Direction::ToClient, Mode::Delay(Duration::from_secs(4))),
                }
                let length = rng.millis(2_000, 20_000);
                out[account] = Some(Instant::now() + length);
                outages += 1;
                if already_out == 1 {
                    double_outages += 1;
                    let other_back = out
                        .iter()
                        .enumerate()
                        .filter(|(a, _)| *a != account)
                        .filter_map(|(_, at)| *at)
                        .min()
                        .unwrap_or_else(Instant::now);
                    let now = cluster.now();
                    let until = now + (other_back.min(Instant::now() + length) - Instant::now());
                    majority_out.push((now, until));
                }
            }
        }
    }
    for proxy in &proxies {
        proxy.heal();
    }
    let settle_from = cluster.now();
    if cluster.leaders().is_empty() {
        cluster
            .wait_leading_after(settle_from, LEASE + Duration::from_secs(15))
            .await;
    }

    let history = cluster.history();
    let record = cluster.dump();
    history.assert_safe(&record);
    // A gap may last a lease (the dead leader's lease expiring), plus the
    // acquire backoff after failed attempts (up to 5 s), a request timeout
    // (3 s), and slack for a loaded machine; unless two accounts were out.
    let bound = LEASE + Duration::from_secs(12);
    let long: Vec<_> = history
        .gaps
        .iter()
        .filter(|(from, to)| *to - *from > bound)
        .filter(|(from, to)| {
            !majority_out
                .iter()
                .any(|(out_from, out_to)| out_from < to && from < &(*out_to + LEASE))
        })
        .collect();
    assert!(
        long.is_empty(),
        "gaps longer than {bound:?} with a majority up: {long:?}\n{record}"
    );
    cluster.assert_no_panics_or_failed_exits(&record);
    assert!(
        history.transitions() >= 2,
        "too few transitions to mean anything\n{record}"
    );
    println!(
        "quorum chaos: {secs}s, {} processes, {kills} leader kills, {outages} account outages \
         ({double_outages} with two accounts out); transitions {}, max gap {:.3}s, median gap {:.3}s; \
         overlap {:?}; epochs increase: {}",
        cluster.len(),
        history.transitions(),
        history.max_gap().as_secs_f64(),
        history.median_gap().as_secs_f64(),
        history.overlap,
        history.epochs_increase()
    );
}
