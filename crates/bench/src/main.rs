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
//! Options (defaults in brackets, `--quick` ones after the slash):
//! `--quick` (fewer repetitions and shorter windows),
//! `--crash-reps N` [12 / 5], `--handover-reps N` [30 / 10],
//! `--crash-azure-reps N` (crash failovers under Azure's 60 s hold on a
//! lease that expired unreleased, section `crash-azure`) [4 / 2],
//! `--cost-secs N` (request-cost and footprint window) [180 / 60],
//! `--overhead-samples N` [2000 / 500], `--candidates N` [50],
//! `--contention-secs N` [30 / 15],
//! `--successor-reps N` (handovers to a preferred successor) [20 / 5],
//! `--successor-secs N` (its advertising-cost window) [60 / 20],
//! `--partition-n LIST` (instances per lease set) [3,4,8 / 3,4],
//! `--partition-m LIST` (partitions per set) [16,64,256 / 16,64],
//! `--partition-secs N` (steady window of each set) [60 / 30],
//! `--set-size N` (partitions owned by one process; 0 skips it) [1000],
//! `--set-secs N` (its steady window) [120 / 60],
//! `--quorum-reps N` (crash failovers per mode; twice as many handovers) [8 / 3],
//! `--quorum-secs N` (request-count window per mode) [60 / 20],
//! `--soak-secs N` (the soak's length; run 3600 for the figures) [3600 / 600],
//! `--soak-cycle-secs N` (a set instance's join-and-leave cycle) [120],
//! `--soak-churn-secs N` (between two restarts of a mutex contender) [20],
//! `--soak-warmup-secs N` (left out of the soak's fit) [a sixth of the run],
//! `--locks N` (names held at once through one provider) [1000],
//! `--locks-secs N` (their request-count window) [120 / 60],
//! `--scale-partitions LIST` (partitions of one set, a row each with each
//! process count) [1000], `--scale-processes LIST` (worker processes sharing
//! it) [4], `--scale-secs N` (each row's steady window, and its load
//! generator's) [120 / 60], `--scale-own-limit N` (the longest wait, in
//! seconds, for each phase's set to be owned and balanced) [600],
//! `--scale-no-load` (no phase 3, Azurite alone at the row's rate); every row starts an Azurite of its own, see
//! `scale.rs`,
//! `--sections overhead,contention,cost,handover,crash,crash-azure,successor,partitions,quorum,soak,backends,locks,scale`
//! [all but `crash-azure`, `soak`, `backends`, `locks` and `scale`, in that order; `soak` runs only when
//! named, and so do `crash-azure`, `backends`, `locks` and `scale`; `--quick`
//! leaves `partitions` out unless it is named],
//! `--out DIR` [`bench-results`], `--endpoint URL` (use a running Azurite's
//! blob endpoint on this host, `http://127.0.0.1:<port>/devstoreaccount1`,
//! instead of starting one). The worker processes are the test kit's
//! `fault-worker` example (`crates/testkit/examples/fault_worker.rs`), in
//! `examples/` beside this program.
//!
//! One module per section (`overhead.rs`, `contention.rs`, `cost.rs` with
//! `footprint.rs`, `failover.rs` for `handover` and `crash`, `successor.rs`,
//! `partitions.rs`, `quorum.rs`, `soak.rs`, `backends.rs`, `locks.rs`, `scale.rs`); the
//! rest is shared: `group.rs` (the worker processes of a measurement), `sets.rs`
//! (what the sections on lease sets share), `stats.rs`, `json.rs` and `report.rs`. Azurite, the counting proxy and the workers'
//! lines are the test kit's (`blob-mutex-testkit`: `azurite`, `proxy`,
//! `workers`).

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
    // Long: one flat match arm per flag, each a line or two; splitting it
    // would scatter the flags over several functions.
    #[allow(clippy::too_many_lines)]
    fn parse() -> Result<Config> {
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        let quick = args.iter().any(|a| a == "--quick");
        args.retain(|a| a != "--quick");
        let worker = std::env::current_exe()
            .context("locate this program")?
            .with_file_name("examples")
            .join(format!("fault-worker{}", std::env::consts::EXE_SUFFIX));
        let mut config = Config {
            crash_reps: if quick { 5 } else { 12 },
            crash_azure_reps: if quick { 2 } else { 4 },
            handover_reps: if quick { 10 } else { 30 },
            cost_window: Duration::from_secs(if quick { 60 } else { 180 }),
            overhead_samples: if quick { 500 } else { 2000 },
            candidates: 50,
            contention_window: Duration::from_secs(if quick { 15 } else { 30 }),
            successor_reps: if quick { 5 } else { 20 },
            successor_window: Duration::from_secs(if quick { 20 } else { 60 }),
            partition_ns: if quick { vec![3, 4] } else { vec![3, 4, 8] },
            partition_ms: if quick {
                vec![16, 64]
            } else {
                vec![16, 64, 256]
            },
            partition_window: Duration::from_secs(if quick { 30 } else { 60 }),
            set_size: 1000,
            partition_window_big: Duration::from_secs(if quick { 60 } else { 120 }),
            quorum_reps: if quick { 3 } else { 8 },
            quorum_window: Duration::from_secs(if quick { 20 } else { 60 }),
            soak: soak::Soak {
                duration: Duration::from_secs(if quick { 600 } else { 3600 }),
                cycle: Duration::from_secs(120),
                churn: Duration::from_secs(20),
                warmup: None,
            },
            locks: 1000,
            locks_window: Duration::from_secs(if quick { 60 } else { 120 }),
            scale: scale::Scale {
                partitions: vec![1000],
                processes: vec![4],
                window: Duration::from_secs(if quick { 60 } else { 120 }),
                own_limit: Duration::from_secs(600),
                load: true,
            },
            sections: SECTIONS
                .iter()
                .filter(|s| {
                    let only_when_named =
                        matches!(**s, "crash-azure" | "soak" | "backends" | "locks" | "scale");
                    let long = quick && **s == "partitions";
                    !only_when_named && !long
                })
                .map(|s| (*s).to_owned())
                .collect(),
            out: PathBuf::from("bench-results"),
            endpoint: None,
            worker,
            quick,
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--crash-reps" => config.crash_reps = value()?.parse()?,
                "--crash-azure-reps" => config.crash_azure_reps = value()?.parse()?,
                "--handover-reps" => config.handover_reps = value()?.parse()?,
                "--cost-secs" => config.cost_window = Duration::from_secs(value()?.parse()?),
                "--overhead-samples" => config.overhead_samples = value()?.parse()?,
                "--candidates" => config.candidates = value()?.parse()?,
                "--contention-secs" => {
                    config.contention_window = Duration::from_secs(value()?.parse()?);
                }
                "--successor-reps" => config.successor_reps = value()?.parse()?,
                "--successor-secs" => {
                    config.successor_window = Duration::from_secs(value()?.parse()?);
                }
                "--partition-n" => config.partition_ns = list(&value()?)?,
                "--partition-m" => config.partition_ms = list(&value()?)?,
                "--partition-secs" => {
                    config.partition_window = Duration::from_secs(value()?.parse()?);
                }
                "--set-size" => config.set_size = value()?.parse()?,
                "--set-secs" => {
                    config.partition_window_big = Duration::from_secs(value()?.parse()?);
                }
                "--sections" => {
                    config.sections = value()?.split(',').map(str::to_owned).collect();
                    for s in &config.sections {
                        ensure!(SECTIONS.contains(&s.as_str()), "unknown section {s}");
                    }
                }
                "--quorum-reps" => config.quorum_reps = value()?.parse()?,
                "--quorum-secs" => config.quorum_window = Duration::from_secs(value()?.parse()?),
                "--soak-secs" => config.soak.duration = Duration::from_secs(value()?.parse()?),
                "--soak-cycle-secs" => config.soak.cycle = Duration::from_secs(value()?.parse()?),
                "--soak-churn-secs" => config.soak.churn = Duration::from_secs(value()?.parse()?),
                "--soak-warmup-secs" => {
                    config.soak.warmup = Some(Duration::from_secs(value()?.parse()?));
                }
                "--locks" => config.locks = value()?.parse()?,
                "--locks-secs" => config.locks_window = Duration::from_secs(value()?.parse()?),
                "--scale-partitions" => config.scale.partitions = list(&value()?)?,
                "--scale-processes" => config.scale.processes = list(&value()?)?,
                "--scale-secs" => config.scale.window = Duration::from_secs(value()?.parse()?),
                "--scale-no-load" => config.scale.load = false,
                "--scale-own-limit" => {
                    config.scale.own_limit = Duration::from_secs(value()?.parse()?);
                }
                "--out" => config.out = PathBuf::from(value()?),
                "--endpoint" => config.endpoint = Some(value()?),
                other => bail!("unknown option {other} (see the top of crates/bench/src/main.rs)"),
            }
        }
        ensure!(
            config.crash_reps >= 1
                && config.crash_azure_reps >= 1
                && config.handover_reps >= 1
                && config.successor_reps >= 1,
            "need at least one repetition"
        );
        ensure!(
            config.successor_window >= Duration::from_secs(1),
            "--successor-secs needs at least one second"
        );
        ensure!(
            config.partition_ns.iter().all(|n| *n >= 2),
            "a lease set needs at least two instances (one is crashed)"
        );
        ensure!(
            config.candidates >= 2,
            "contention needs at least two candidates"
        );
        ensure!(
            config.soak.cycle >= Duration::from_secs(80)
                && config.soak.churn >= Duration::from_secs(1),
            "--soak-cycle-secs needs at least 80 (a crashed instance's 30 s leases expire in the \
             second half) and --soak-churn-secs at least 1"
        );
        ensure!(
            !config.runs("soak") || config.set_size >= 1,
            "the soak needs --set-size of at least 1"
        );
        ensure!(
            config.overhead_samples >= 10,
            "overhead needs at least 10 samples"
        );
        ensure!(
            !config.runs("scale")
                || (!config.scale.partitions.is_empty()
                    && !config.scale.processes.is_empty()
                    && config.scale.partitions.iter().all(|n| *n >= 1)
                    && config.scale.processes.iter().all(|p| *p >= 1)
                    && config.scale.window >= Duration::from_secs(1)
                    && config.scale.own_limit >= Duration::from_secs(1)),
            "scale needs partitions and processes of at least 1 each, and --scale-secs and \
             --scale-own-limit of at least 1"
        );
        Ok(config)
    }

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

/// A comma-separated list of numbers; empty for none.
fn list(text: &str) -> Result<Vec<usize>> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().with_context(|| format!("not a number: {s}")))
        .collect()
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
        Json::obj([
            ("quick", Json::Bool(config.quick)),
            ("seconds", Json::Num(elapsed)),
            (
                "sections",
                Json::Arr(config.sections.iter().map(Json::str).collect()),
            ),
            ("load_average_at_end", Json::str(report::load_average())),
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
    std::fs::write(&results, Json::Obj(report.json).to_text())?;
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
