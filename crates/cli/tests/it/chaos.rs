//! Chaos: worker processes in every mode at once (mutex, lease set, both on
//! a quorum of three accounts, handover by priority, `blob-mutex run`), on
//! both backends, while a nemesis drawn from a seed kills, terminates and
//! pauses them, cuts, slows and fails their paths to storage (per account
//! and per request kind), wipes a quorum account, breaks leases as an
//! operator would, and has members join and leave. Every term, unit of
//! work and fenced write goes into one history, and the checker
//! (`crates/testkit/src/checker.rs`) judges it; a violation fails the test with
//! the seed, the command that repeats the run, and the record around it.
//!
//! `scripts/chaos [--minutes N] [--seed S] [--backend B] [--modes …]` runs
//! `chaos` for as long as asked. `scripts/test` runs both tests here as
//! they are: 40 s of faults each, one on a fixed seed, one on a random
//! seed that it prints.
//!
//! Seeds that found a violation, kept with the test that now covers each
//! (repeat one with `scripts/chaos --seconds 1800 --seed S --backend B`):
//! - 28 (`all`, the fixed seed): an operator's break in flight when a
//!   handover's term began (`chaos_checker::a_break_in_flight_when_a_term_began_may_have_broken_that_term`);
//! - 1973173869 (`official`): a write printed on waking that had been sent
//!   before the pause (`chaos_checker::a_write_answered_late_counts_from_when_it_was_sent`);
//! - 1731546683 (`official`): two leaders on the quorum for 1.1 s, an
//!   account restarted empty while another was down
//!   (`quorum::tests::a_lease_forgotten_by_an_account_of_a_bare_majority_ends_the_term`);
//!   the same wake in the register's order
//!   (`chaos_checker::a_register_write_answered_late_keeps_the_registers_order`);
//!   replayed after the fix, a frozen `blob-mutex run` whose command worked
//!   on after a break until its deadline (the break grace is now a lease)
//!   and a handover write answered late that its successor had read back
//!   (`chaos_checker::a_write_a_successor_did_not_read_landed_in_its_term`);
//!   replayed again, two `run` terms begun around a break whose commands
//!   printed their start in the wrong order, and units excused by a later
//!   break (`chaos_checker::a_run_terms_start_is_its_logged_start_not_its_commands_line`,
//!   `chaos_checker::a_later_break_excuses_no_earlier_unit`);
//! - 1638074026 (`sdk-v021`): a `blob-mutex run` whose exit came 3 s after
//!   its logged end, behind a slow release
//!   (`chaos_checker::a_run_terms_end_is_its_logged_end_not_its_exit`).
//!
//! The quorum group's trace of a 40 s run of each of these seeds is kept in
//! `tests/fixtures/traces`, where the model checker replays it through the
//! quorum model (`crates/model/tests/model/replay.rs`), as it replays the runs here when
//! `BLOB_MUTEX_TRACE_DIR` is set (`scripts/test` sets it).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use blob_mutex_testkit::chaos_rig::{ChaosRig, Config};
use blob_mutex_testkit::checker::{check, figures};
use blob_mutex_testkit::history::History;
use blob_mutex_testkit::trace::Trace;
use blob_mutex_testkit::workers::{Cluster, What};

/// The seed of the fixed run.
const FIXED_SEED: u64 = 28;
/// How long the nemesis runs unless `BLOB_MUTEX_CHAOS_SECS` says otherwise.
const SHORT: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos() {
    run(Config::from_env(SHORT, None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_the_fixed_seed() {
    let mut config = Config::from_env(SHORT, Some(FIXED_SEED));
    config.seed = FIXED_SEED;
    run(config).await;
}

async fn run(config: Config) {
    let command = repeat_command(&config);
    println!(
        "chaos: seed {} for {}s; repeat with: {command}",
        config.seed, config.secs
    );
    let mut rig = ChaosRig::start(config);
    settle(
        &mut rig,
        Duration::from_secs(90),
        "the first owner of every resource",
    )
    .await;
    let calm_at = rig.cluster.now() + Duration::from_secs(rig.config().secs);
    let mut next = rig.cluster.now() + rig.nemesis.gap();
    while rig.cluster.now() < calm_at {
        tokio::time::sleep(Duration::from_millis(100)).await;
        rig.tick();
        if rig.cluster.now() >= next {
            if let Some(fault) = rig.strike() {
                println!(
                    "nemesis {:>8.3}s {:<10} {}",
                    fault.at.as_secs_f64(),
                    fault.kind,
                    fault.detail
                );
            }
            next = rig.cluster.now() + rig.nemesis.gap();
        }
    }
    rig.calm();
    let longest = rig
        .history
        .bounds
        .values()
        .max()
        .copied()
        .unwrap_or_default();
    settle(&mut rig, longest + Duration::from_secs(5), "").await;
    let (history, cluster) = rig.finish(Duration::from_secs(30)).await;
    keep_trace(&history, &cluster, &command);
    let failure = judge(&history, &cluster, &command);
    // Dropped first: a cluster dropped while panicking prints its whole record.
    drop(cluster);
    if let Some(message) = failure {
        panic!("{message}");
    }
}

/// Ticks until every resource is owned, for up to `limit`; panics with
/// `what` when it is not empty and the limit passes (the checker judges the
/// bound after the nemesis).
async fn settle(rig: &mut ChaosRig, limit: Duration, what: &str) {
    let until = rig.cluster.now() + limit;
    while !rig.all_owned() {
        if rig.cluster.now() >= until {
            assert!(
                what.is_empty(),
                "timed out waiting for {what}\n{}",
                rig.cluster.dump()
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        rig.tick();
    }
}

/// Prints the figures; on violations, returns the failure: the first
/// violations, the seed, the command and the record around the first one
/// (the whole record, without log lines, goes to a file it names).
fn judge(history: &History, cluster: &Cluster, command: &str) -> Option<String> {
    let violations = check(history);
    println!("{}", figures(history, violations.len()));
    if violations.is_empty() {
        return None;
    }
    let path = std::env::temp_dir().join(format!("blob-mutex-chaos-{}.txt", history.seed));
    let saved = std::fs::write(&path, cluster.dump()).map_or_else(
        |e| format!("(the record could not be saved: {e})"),
        |()| format!("the whole record: {}", path.display()),
    );
    let mut by_rule: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for v in &violations {
        let group = v.resource.split('/').next().unwrap_or(&v.resource);
        *by_rule.entry((v.rule, group)).or_default() += 1;
    }
    let by_rule: Vec<String> = by_rule
        .iter()
        .map(|((rule, group), n)| format!("{rule} on {group}: {n}"))
        .collect();
    let mut message = format!(
        "{} violation(s) ({}), seed {}; repeat with: {command}\n{saved}\n",
        violations.len(),
        by_rule.join(", "),
        history.seed
    );
    for v in violations.iter().take(20) {
        let _ = writeln!(message, "  {v}");
    }
    message.push_str(&excerpt(cluster, violations[0].at, &violations[0].resource));
    Some(message)
}

/// The record of the group of `resource` from 15 s before `at` to 3 s after.
fn excerpt(cluster: &Cluster, at: Duration, resource: &str) -> String {
    let group = resource.split('/').next().unwrap_or(resource);
    let from = at.saturating_sub(Duration::from_secs(15));
    let mut out = format!(
        "--- record of {group} around {:.3}s ---\n",
        at.as_secs_f64()
    );
    for e in cluster.events() {
        let name = cluster.name(e.worker);
        let mine = name.split('.').next() == Some(group);
        if !mine || e.at < from || e.at > at + Duration::from_secs(3) {
            continue;
        }
        if matches!(&e.what, What::Log(l) if !l.contains("WARN") && !l.contains("ERROR")) {
            continue;
        }
        let _ = writeln!(out, "{:>9.3}s {name:<12} {:?}", e.at.as_secs_f64(), e.what);
    }
    out
}

/// Writes the quorum group's trace into `BLOB_MUTEX_TRACE_DIR`, when set,
/// for the model checker to replay (`crates/model/tests/model/replay.rs`); `scripts/test`
/// sets it, and its model step replays what the runs here wrote.
fn keep_trace(history: &History, cluster: &Cluster, command: &str) {
    let Some(dir) = std::env::var_os("BLOB_MUTEX_TRACE_DIR") else {
        return;
    };
    let trace = Trace::of(history, cluster);
    if trace.workers.is_empty() {
        return;
    }
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("make BLOB_MUTEX_TRACE_DIR");
    let path = dir.join(format!("{}.trace", history.seed));
    let text = format!("# {command}\n{}", trace.to_text());
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    println!("the quorum group's trace: {}", path.display());
}

/// The command that repeats a run's schedule.
fn repeat_command(config: &Config) -> String {
    let backend = config.backend.map_or("all", |b| b.as_str());
    let modes: Vec<&str> = config.kinds.iter().map(|k| k.name()).collect();
    format!(
        "scripts/chaos --seconds {} --seed {} --backend {backend} --modes {}",
        config.secs,
        config.seed,
        modes.join(",")
    )
}
