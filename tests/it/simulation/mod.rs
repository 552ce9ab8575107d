//! The simulation: the crate's own shapes on paused Tokio time over the
//! in-memory stores behind the fault layer (`support/faulty.rs`), each
//! storage request failed in turn in each of four ways
//! (`support/plan.rs`: refused, lost before storage acted, lost after it
//! acted, acted on past the caller's time limit), and runs of several
//! seeded faults with an outage among them. Every run is judged by the
//! test kit's history checker and by its shape's own promises.
//!
//! A sweep makes one clean run of a shape, which lists the requests it
//! sent; then one run per request and way fails exactly that request. A
//! run is named by its shape and its fault (or its seed), and a failure
//! prints the one command that replays it (see [`replay`]).
//!
//! Paused time cannot reach what runs outside the runtime: the fail-stop
//! watcher's OS thread, child processes and sockets. The testing chapter
//! says where those are tested instead.

/// A sweep test per way of failing, for each shape.
macro_rules! sweeps {
    ($($module:ident, $row:ty;)*) => {
        $(
            mod $module {
                use super::*;
                use crate::support::plan::Way;
                use crate::simulation::sweep;

                #[test]
                fn every_request_refused_once() {
                    sweep::<$row>(&[Way::Refused]);
                }

                #[test]
                fn every_request_lost_before_storage_acted_once() {
                    sweep::<$row>(&[Way::LostBefore]);
                }

                #[test]
                fn every_request_lost_after_storage_acted_once() {
                    sweep::<$row>(&[Way::LostAfter]);
                }

                #[test]
                fn every_request_acted_on_late_once() {
                    sweep::<$row>(&[Way::Late]);
                }

                #[test]
                fn seeded_runs_with_faults_and_an_outage() {
                    crate::simulation::seeded::<$row>();
                }
            }
        )*
    };
}

mod history;
mod locks;
mod once;
mod rows;
mod run;
#[cfg(feature = "schedule")]
mod schedule;
mod state;

use std::time::Duration;

use crate::support::matrix::Mode;
use crate::support::plan::{Plan, Request, Way};

use run::{run, Judged};

/// What the simulation needs of a shape beyond its row of the matrix.
trait Simulated: Mode {
    /// How long a run lasts at least, from the shape's start.
    const LENGTH: Duration = Duration::from_secs(40);

    /// How soon after the last fault acted the shape is back to its
    /// steady state (every lease owned, the next slot run on time).
    const BOUND: Duration;

    /// Whether its leases may rest unowned once its work is done (a run
    /// once whose key is recorded): the history checker then leaves their
    /// steady state to [`judge`](Self::judge).
    const MAY_REST: bool = false;

    /// The checks of a run once every instance stopped, beyond the test
    /// kit's history checker: panics with what broke.
    fn judge(judged: &Judged<'_>);

    /// Adds what the shape recorded beyond its terms (state writes and
    /// reads) to the run's history, before the checker judges it.
    fn add_to(history: &mut blob_mutex_testkit::history::History, judged: &Judged<'_>) {
        let _ = (history, judged);
    }
}

/// Every run of a single-fault sweep of `M` in the ways `ways`: one clean
/// run lists the requests, then each request fails once in each way.
/// Panics with every failing run and the command that replays it.
fn sweep<M: Simulated>(ways: &[Way]) {
    let started = std::time::Instant::now();
    let clean = run::<M>(Plan::default(), &format!("{} clean", M::NAME));
    if let Err(e) = &clean.verdict {
        panic!("{}: the clean run failed: {e}", M::NAME);
    }
    let mut failed = Vec::new();
    let (mut runs, mut missed) = (0, 0);
    for sent in &clean.sent {
        for &way in ways {
            runs += 1;
            let name = format!("{} {} {}", M::NAME, sent.request, way.as_str());
            let outcome = run::<M>(Plan::one(sent.request.clone(), way), &name);
            if !outcome.sent.iter().any(|s| s.way.is_some()) {
                // The run took another path before this request (the
                // order in which tasks ready at one instant run is
                // Tokio's), and sent no request of this name.
                missed += 1;
            }
            if let Err(e) = outcome.verdict {
                failed.push(format!(
                    "{name}: {e}\n  replay: {}",
                    replay_command(M::NAME, &sent.request, way)
                ));
            }
        }
    }
    let took = started.elapsed().as_secs_f64();
    eprintln!(
        "simulation of {} ({}): {} requests in the clean run, {runs} runs ({:.0} a second), {} broke a promise, {missed} whose request was never sent",
        M::NAME,
        ways.iter().map(|w| w.as_str()).collect::<Vec<_>>().join(", "),
        clean.sent.len(),
        f64::from(runs) / took.max(1e-9),
        failed.len()
    );
    // Nearly every run fails the request it names: a sweep whose runs
    // mostly went another way tested little.
    assert!(
        missed * 10 <= runs,
        "{missed} of {runs} runs never sent the request they were to fail"
    );
    assert!(
        failed.is_empty(),
        "{} of {runs} runs broke a promise:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// The chance of each request to fail in a seeded run (besides its outage).
const CHANCE: f64 = 0.05;

/// `BLOB_MUTEX_SIM_SEEDS` seeded runs of `M` (8 unless set), from seed
/// `BLOB_MUTEX_SIM_SEED_BASE` (1 unless set) on: each request fails with a
/// chance of 5 % in a way drawn from the seed, and storage is unreachable
/// for a stretch (see [`Plan::seeded`]). Panics with every failing seed and
/// the command that replays it; prints the figures.
fn seeded<M: Simulated>() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default)
    };
    let (count, base) = (
        env("BLOB_MUTEX_SIM_SEEDS", 8),
        env("BLOB_MUTEX_SIM_SEED_BASE", 1),
    );
    let started = std::time::Instant::now();
    let (mut sent, mut faults, mut failed) = (0, 0, Vec::new());
    for seed in base..base + count {
        let outcome = run::<M>(
            Plan::seeded(seed, CHANCE),
            &format!("{} seed {seed}", M::NAME),
        );
        sent += outcome.sent.len();
        faults += outcome.sent.iter().filter(|s| s.way.is_some()).count();
        if let Err(e) = outcome.verdict {
            failed.push(format!(
                "{} seed {seed}: {e}\n  replay: BLOB_MUTEX_SIM_SHAPE={} BLOB_MUTEX_SIM_SEED={seed} \
                 cargo nextest run --all-features -p blob-mutex --test it -E 'test(=simulation::replay)' --no-capture",
                M::NAME,
                M::NAME
            ));
        }
    }
    let took = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)] // counts of a few thousand
    let rate = count as f64 / took.max(1e-9);
    eprintln!(
        "simulation of {} (seeds {base}..{}): {count} runs ({rate:.0} a second), {sent} requests, {faults} failed, {} broke a promise",
        M::NAME,
        base + count,
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} seeded runs broke a promise:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// The command that replays one run of a sweep.
fn replay_command(shape: &str, request: &Request, way: Way) -> String {
    format!(
        "BLOB_MUTEX_SIM_SHAPE={shape} BLOB_MUTEX_SIM_FAULT='{request}' BLOB_MUTEX_SIM_WAY={} \
         cargo nextest run --all-features -p blob-mutex --test it -E 'test(=simulation::replay)' --no-capture",
        way.as_str()
    )
}

/// Replays the run named by `BLOB_MUTEX_SIM_SHAPE` and either
/// `BLOB_MUTEX_SIM_FAULT` and `BLOB_MUTEX_SIM_WAY` or `BLOB_MUTEX_SIM_SEED`
/// (as a failing sweep or seeded run prints them), and prints
/// the requests it sent, with the crate's log at the level of
/// `BLOB_MUTEX_SIM_LOG` (`info` unless set). Without them, replays a clean
/// run of the mutex.
#[test]
fn replay() {
    run::SHOW_LOG.store(true, std::sync::atomic::Ordering::Relaxed);
    let shape = std::env::var("BLOB_MUTEX_SIM_SHAPE").unwrap_or_else(|_| "mutex".to_owned());
    let seed = std::env::var("BLOB_MUTEX_SIM_SEED").ok();
    let plan = match std::env::var("BLOB_MUTEX_SIM_FAULT") {
        Err(_) if seed.is_some() => Plan::seeded(seed.unwrap_or_default().parse().unwrap(), CHANCE),
        Ok(fault) => {
            let request: Request = fault.parse().unwrap();
            let way = std::env::var("BLOB_MUTEX_SIM_WAY").unwrap_or_default();
            let way = Way::parse(&way).unwrap_or_else(|| panic!("BLOB_MUTEX_SIM_WAY: {way:?}"));
            Plan::one(request, way)
        }
        Err(_) => Plan::default(),
    };
    let outcome = rows::run_named(&shape, plan);
    for sent in &outcome.sent {
        eprintln!(
            "{:>8.3}s {} {}",
            sent.at.as_secs_f64(),
            sent.request,
            sent.way.map_or("", Way::as_str)
        );
    }
    if let Err(e) = outcome.verdict {
        panic!("{e}");
    }
}
