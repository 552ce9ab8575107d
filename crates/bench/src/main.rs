//! Benchmark of the election against a local Azurite: failover and handover
//! times, storage requests per hour, the crate's latency over a bare SDK
//! call, the worker's CPU and memory footprint, 50-way contention, planned
//! handover to a preferred successor, lease sets of many partitions, and a
//! quorum of three accounts against one (with a simulation of leader
//! availability under independent account outages), a soak of one
//! process with churn (its memory, descriptors, tasks and CPU over an hour),
//! many locks by name held at once through one provider, and how one lease
//! set scales to thousands of partitions over several processes.
//!
//! ```text
//! cargo build --release -p blob-mutex-bench -p blob-mutex-testkit --examples --bins
//! target/release/bench [--quick] [--out DIR] [--sections LIST] ...
//! ```
//!
//! `scripts/bench` installs Azurite, builds and runs this. It prints a table
//! and writes `<out>/results.json` and `<out>/table.md` (default out:
//! `bench-results`), and the logs of Azurite and the workers to
//! `<out>/logs/`. Figures are printed, never asserted; the exit status is
//! non-zero only when a measurement could not be taken at all.
//!
//! Options: `bench --help` (clap, in `args.rs`) lists each with its
//! default, and after a slash its `--quick` default. `--sections LIST`
//! runs those sections in their order (`overhead`, `contention`, `cost`,
//! `handover`, `crash`, `crash-azure`, `successor`, `partitions`, `quorum`,
//! `soak`, `backends`, `locks`, `scale`); by default all but `crash-azure`,
//! `soak`, `backends`, `locks` and `scale`, which run only when named, and
//! `--quick` leaves `partitions` out unless it is named. The `scale` rows
//! each start an Azurite of their own (see `scale.rs`). The worker
//! processes are the test kit's `fault-worker` example
//! (`crates/testkit/examples/fault_worker.rs`), in `examples/` beside this
//! program.
//!
//! One module per section (`overhead.rs`, `contention.rs`, `cost.rs` with
//! `footprint.rs`, `failover.rs` for `handover` and `crash`, `successor.rs`,
//! `partitions.rs`, `quorum.rs`, `soak.rs`, `backends.rs`, `locks.rs`, `scale.rs`); the
//! rest is shared: `group.rs` (the worker processes of a measurement), `sets.rs`
//! (what the sections on lease sets share), `stats.rs`, `json.rs`, `report.rs` and `args.rs`. Azurite, the counting proxy and the workers'
//! lines are the test kit's (`blob-mutex-testkit`: `azurite`, `proxy`,
//! `workers`).

mod args;
mod backends;
mod contention;
mod cost;
mod failover;
mod footprint;
mod group;
mod json;
mod locks;
mod overhead;
mod partitions;
mod quorum;
mod report;
mod scale;
mod sets;
mod soak;
mod stats;
mod successor;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use blob_mutex::MutexOptions;
use blob_mutex_testkit::azurite::Azurite;

use crate::failover::Exit;
use crate::json::Json;
use crate::report::Report;

/// The defaults of [`MutexOptions`], restated so that the targets can be
/// computed; checked against the crate at start-up.
const LEASE_SECS: f64 = 15.0;
const RENEW_SECS: f64 = 5.0;
const RETRY_SECS: f64 = 1.0;
const JITTER: f64 = 0.2;

/// The leader task of the worker processes ticks this rarely, so that the
/// footprint is the election's own and not the demo task's.
const IDLE_WORK_MS: &str = "600000";

/// The sections, in the order they run.
const SECTIONS: [&str; 13] = [
    "overhead",
    "contention",
    "cost",
    "handover",
    "crash",
    "crash-azure",
    "successor",
    "partitions",
    "quorum",
    "soak",
    "backends",
    "locks",
    "scale",
];

struct Config {
    crash_reps: usize,
    /// Crash failovers under Azure's hold (section `crash-azure`).
    crash_azure_reps: usize,
    handover_reps: usize,
    cost_window: Duration,
    overhead_samples: usize,
    candidates: usize,
    contention_window: Duration,
    successor_reps: usize,
    successor_window: Duration,
    partition_ns: Vec<usize>,
    partition_ms: Vec<usize>,
    partition_window: Duration,
    set_size: usize,
    partition_window_big: Duration,
    /// Crash failovers per mode in the quorum section (twice as many handovers).
    quorum_reps: usize,
    /// How long the quorum section counts requests, per mode.
    quorum_window: Duration,
    soak: soak::Soak,
    /// Names held at once through one provider in the `locks` section.
    locks: usize,
    /// How long the `locks` section counts requests.
    locks_window: Duration,
    /// The rows of the `scale` section and their window.
    scale: scale::Scale,
    sections: Vec<String>,
    out: PathBuf,
    endpoint: Option<String>,
    worker: PathBuf,
    quick: bool,
}

impl Config {
    fn runs(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }
}

/// Runs the tasks `each(0)` … `each(count - 1)`, at most `in_flight` at
/// once; their outputs, in the order they finished.
async fn bounded_all<T, F>(
    count: usize,
    in_flight: usize,
    each: impl Fn(usize) -> F,
) -> Result<Vec<T>>
where
    F: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..count {
        let (permits, task) = (permits.clone(), each(i));
        set.spawn(async move {
            let _permit = permits.acquire_owned().await?;
            task.await
        });
    }
    let mut out = Vec::with_capacity(count);
    while let Some(joined) = set.join_next().await {
        out.push(joined.context("a task panicked")??);
    }
    Ok(out)
}

// Long: the sections in the order they run, each a few lines; the work is
// in their modules.
#[allow(clippy::too_many_lines)]
async fn run(config: Config) -> Result<()> {
    let defaults = MutexOptions::default();
    ensure!(
        (defaults.lease_duration().as_secs_f64() - LEASE_SECS).abs() < 1e-9
            && (defaults.effective_renew_interval().as_secs_f64() - RENEW_SECS).abs() < 1e-9
            && (defaults.acquire_retry().as_secs_f64() - RETRY_SECS).abs() < 1e-9
            && (defaults.acquire_jitter() - JITTER).abs() < 1e-9,
        "the crate's defaults changed; update the constants at the top of crates/bench/src/main.rs"
    );
    std::fs::create_dir_all(config.out.join("logs"))?;
    ensure!(
        config.worker.exists(),
        "worker not found at {}; run scripts/bench, which builds it",
        config.worker.display()
    );
    let azurite = azurite(&config)?;
    let began = Instant::now();
    let mut report = Report::default();
    report.section("machine", report::machine());
    if config.runs("overhead") {
        eprintln!("overhead: crate vs bare SDK ...");
        overhead::overhead(&config, &azurite, &mut report).await?;
    }
    if config.runs("contention") {
        eprintln!("contention: {} candidates ...", config.candidates);
        contention::contention(&config, &azurite, &mut report).await?;
    }
    if config.runs("cost") {
        eprintln!("request cost and footprint ...");
        cost::cost(&config, &azurite, &mut report).await?;
    }
    for (exit, reps) in [
        (Exit::Graceful, config.handover_reps),
        (Exit::Crash, config.crash_reps),
        (Exit::CrashOnAzure, config.crash_azure_reps),
    ] {
        if config.runs(exit.name()) {
            eprintln!("{} x {reps} ...", exit.title());
            let h = failover::handover(&config, &azurite, exit, reps).await?;
            failover::report(&mut report, &h);
        }
    }
    if config.runs("successor") {
        eprintln!(
            "handover to a preferred successor x {} ...",
            config.successor_reps
        );
        successor::successor(&config, &azurite, &mut report).await?;
    }
    if config.runs("partitions") {
        eprintln!(
            "partitions: N in {:?} x M in {:?}, then one process owning {} ...",
            config.partition_ns, config.partition_ms, config.set_size
        );
        partitions::partitions(&config, &azurite, &mut report).await?;
    }
    if config.runs("quorum") {
        eprintln!("quorum: three accounts against one ...");
        quorum::quorum(&config, &azurite, &mut report).await?;
    }
    if config.runs("soak") {
        eprintln!(
            "soak: {} s, {} partitions, with churn ...",
            config.soak.duration.as_secs(),
            config.set_size
        );
        soak::soak(&config, &azurite, &mut report).await?;
    }
    if config.runs("backends") {
        backends::backends(&config, &azurite, &mut report).await?;
    }
    if config.runs("locks") {
        eprintln!(
            "locks: {} names held through one provider ...",
            config.locks
        );
        locks::locks(&config, &azurite, &mut report).await?;
    }
    if config.runs("scale") {
        eprintln!(
            "scale: {:?} partitions x {:?} processes, {} s windows ...",
            config.scale.partitions,
            config.scale.processes,
            config.scale.window.as_secs()
        );
        scale::scale(&config, &azurite, &mut report).await?;
    }
    let elapsed = began.elapsed().as_secs_f64();
    report.section(
        "run",
        json::obj([
            ("quick", Json::Bool(config.quick)),
            ("seconds", json::num(elapsed)),
            (
                "sections",
                Json::Array(config.sections.iter().map(json::str).collect()),
            ),
            ("load_average_at_end", json::str(report::load_average())),
        ]),
    );
    let header = format!(
        "Measured against Azurite on 127.0.0.1 in {elapsed:.0} s{}. Default options: lease 15 s, \
         renew every 5 s, acquire retry 1 s ± 20 %.",
        if config.quick { " (--quick)" } else { "" }
    );
    let table = report.markdown(&header);
    let results = config.out.join("results.json");
    let table_md = config.out.join("table.md");
    std::fs::write(&results, json::to_text(&json::obj(report.json)))?;
    std::fs::write(&table_md, &table)?;
    println!("{table}");
    eprintln!("wrote {} and {}", results.display(), table_md.display());
    Ok(())
}

/// The Azurite to measure against: a new one logging to
/// `<out>/logs/azurite.log`, or the running one `--endpoint` names, on
/// 127.0.0.1 where the counting proxies forward to.
fn azurite(config: &Config) -> Result<Azurite> {
    let Some(endpoint) = &config.endpoint else {
        return Azurite::start_logged(&config.out.join("logs/azurite.log"))
            .map_err(anyhow::Error::msg);
    };
    let host = endpoint
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.split('/').next())
        .context("--endpoint must be http://127.0.0.1:<port>/<account>")?;
    host.parse::<u16>()
        .with_context(|| format!("--endpoint names no port: {endpoint}"))?;
    Ok(Azurite::external(endpoint))
}

#[tokio::main]
async fn main() -> Result<()> {
    let config = Config::parse()?;
    tokio::select! {
        result = run(config) => result,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    }
}
