//! Section `backends`: the official SDK's backend (the default) beside the
//! 0.21 SDK's (feature `sdk-v021`), both from the same settings with the
//! account key (the official one signs SAS tokens from it), in one run:
//! acquire and renew latency,
//! interleaved on the same Azurite; the CPU per renewal of one process that
//! owns `--set-size` partitions with a 15 s lease (1 000 partitions renew
//! 200 times a second), each backend in turn; and the crates each feature
//! set compiles (`cargo tree -e normal`).

use blob_mutex::store::LeaseStore;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use blob_mutex::{azure::Backend, azure::BlobLeaseManager, store::Acquire, store::LeaseId};
use blob_mutex_testkit::azurite::{unique_container, Azurite};
use blob_mutex_testkit::proxy::{Kind, Proxy};
use blob_mutex_testkit::workers::{parse_line, What};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::footprint::{clock_ticks, cpu_ns, cpu_ticks};
use crate::json::{self, Json};
use crate::report::{ms, Report};
use crate::stats::{float, stats};
use crate::{Config, IDLE_WORK_MS};

/// Calls timed and thrown away before the measured ones.
const WARMUP: usize = 50;
/// The lease of the latency blobs and of the set's partitions: 15 s, renewed
/// every 5 s, so that 1 000 partitions make 200 renewals a second.
const LEASE: Duration = Duration::from_secs(15);

/// The feature sets whose crates are counted, with their cargo flags.
const FEATURE_SETS: [(&str, &str); 6] = [
    ("none", "--no-default-features"),
    (
        "`official` only",
        "--no-default-features --features official",
    ),
    ("default (`official`, `azure_identity`)", ""),
    (
        "`sdk-v021` only",
        "--no-default-features --features sdk-v021",
    ),
    ("default + `sdk-v021`", "--features sdk-v021"),
    ("all", "--all-features"),
];

pub(crate) async fn backends(
    config: &Config,
    azurite: &Azurite,
    report: &mut Report,
) -> Result<()> {
    eprintln!("backends: the official SDK's and the 0.21 SDK's ...");
    let latency = latency(config, azurite).await?;
    let mut cpu = Vec::new();
    if config.set_size > 0 {
        for backend in Backend::ALL {
            eprintln!(
                "  {backend}: one process owning {} partitions ...",
                config.set_size
            );
            cpu.push(renewal_cpu(config, azurite, backend).await?);
        }
    }
    let crates = crate_counts();
    write(config, report, &latency, &cpu, &crates);
    Ok(())
}

/// Seconds per call of each operation and backend.
struct Latency {
    /// `(operation, backend, seconds of each call)`.
    samples: Vec<(&'static str, &'static str, Vec<f64>)>,
}

/// Acquire (201, the lease ours) and renew (200) with each backend on a
/// blob of its own, interleaved call by call, alternating which backend
/// goes first.
async fn latency(config: &Config, azurite: &Azurite) -> Result<Latency> {
    let container = unique_container("bench-backends");
    let managers = Backend::ALL
        .into_iter()
        .map(|backend| {
            let settings = azurite.settings(&container, backend.as_str());
            Ok(BlobLeaseManager::new(&settings.with_backend(backend))?)
        })
        .collect::<Result<Vec<_>>>()?;
    let id = LeaseId::new();
    for m in &managers {
        ensure!(
            m.acquire(id, LEASE).await? == Acquire::Acquired,
            "set-up acquire"
        );
    }
    let mut samples = Vec::new();
    for operation in ["acquire (201, lease ours)", "renew (200)"] {
        let mut times = [Vec::new(), Vec::new()];
        for i in 0..config.overhead_samples + WARMUP {
            let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
            for b in order {
                let started = Instant::now();
                if operation.starts_with("acquire") {
                    ensure!(
                        managers[b].acquire(id, LEASE).await? == Acquire::Acquired,
                        "acquire"
                    );
                } else {
                    managers[b].renew(id).await?;
                }
                if i >= WARMUP {
                    times[b].push(started.elapsed().as_secs_f64());
                }
            }
        }
        let [official, v021] = times;
        samples.push((operation, Backend::ALL[0].as_str(), official));
        samples.push((operation, Backend::ALL[1].as_str(), v021));
    }
    for m in &managers {
        let _ = m.release(id).await;
    }
    Ok(Latency { samples })
}

/// What one process owning the set measured with one backend.
struct RenewalCpu {
    backend: &'static str,
    to_own_all: f64,
    window: f64,
    renewals: usize,
    cpu_seconds: f64,
    cpu_seconds_ns: f64,
}

/// One fault worker owning `--set-size` partitions through a counting
/// proxy, with `backend`: its CPU over `--set-secs`, and the renewals the
/// proxy saw in the same window.
async fn renewal_cpu(config: &Config, azurite: &Azurite, backend: Backend) -> Result<RenewalCpu> {
    let proxy = Proxy::start(azurite.port);
    let connection = proxy.connection_string();
    let size = config.set_size.to_string();
    let lease = LEASE.as_secs().to_string();
    let id = format!("backends-{backend}");
    let log = std::fs::File::create(config.out.join("logs").join(format!("{id}.log")))?;
    let started = Instant::now();
    let mut child = Command::new(&config.worker)
        .args([&unique_container("bench-backends-set"), "set", &id])
        .args(["--partitions", &size, "--lease-secs", &lease])
        .args(["--work-ms", IDLE_WORK_MS])
        .env("AZURE_STORAGE_CONNECTION_STRING", connection)
        .env(Backend::ENV, backend.as_str())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {}", config.worker.display()))?;
    let pid = child.id().context("worker pid")?;
    owns_all(&mut child, config.set_size).await?;
    let to_own_all = started.elapsed().as_secs_f64();
    // A renew interval for the claims' first renewals to spread out.
    tokio::time::sleep(LEASE / 3).await;

    let ticks = clock_ticks();
    let (ticks_before, ns_before) = (cpu_ticks(pid)?, cpu_ns(pid).unwrap_or(0));
    let from = Instant::now();
    tokio::time::sleep(config.partition_window_big).await;
    let to = Instant::now();
    let (ticks_after, ns_after) = (cpu_ticks(pid)?, cpu_ns(pid).unwrap_or(0));
    let renewals = proxy
        .kinds_between(from, to)
        .iter()
        .filter(|(_, kind)| *kind == Kind::Renew)
        .count();
    let _ = child.start_kill();
    let _ = child.wait().await;
    #[allow(clippy::cast_precision_loss)] // tick and nanosecond counts are small
    Ok(RenewalCpu {
        backend: backend.as_str(),
        to_own_all,
        window: (to - from).as_secs_f64(),
        renewals,
        cpu_seconds: (ticks_after.saturating_sub(ticks_before)) as f64 / ticks,
        cpu_seconds_ns: (ns_after.saturating_sub(ns_before)) as f64 / 1e9,
    })
}

/// Reads the worker's lines until it owns `size` partitions (five minutes
/// at most).
async fn owns_all(child: &mut Child, size: usize) -> Result<()> {
    let stdout = child.stdout.take().context("worker stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut owned = BTreeSet::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(300);
    while owned.len() < size {
        let Ok(line) = tokio::time::timeout_at(until, lines.next_line()).await else {
            bail!("owned {} of {size} partitions after 300 s", owned.len());
        };
        let Some(line) = line? else {
            bail!("the worker exited; see its log");
        };
        match parse_line(&line) {
            Some(What::Owning { partition, .. }) => {
                owned.insert(partition);
            }
            Some(What::Released { partition, .. } | What::ReleasedStuck { partition, .. }) => {
                owned.remove(&partition);
            }
            _ => {}
        }
    }
    // Keep reading, so that the worker never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(())
}

/// The crates of each feature set: distinct crate versions in the normal
/// dependency tree of `Cargo.lock`, this crate not counted; empty when cargo
/// cannot be run here.
fn crate_counts() -> Vec<(&'static str, &'static str, usize)> {
    // The library's manifest, at the workspace's root.
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let mut counts = Vec::new();
    for (name, flags) in FEATURE_SETS {
        let output = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args([
                "tree",
                "-e",
                "normal",
                "--prefix",
                "none",
                "--manifest-path",
                manifest,
                "-p",
                "blob-mutex",
            ])
            .args(flags.split_whitespace())
            .output();
        let Ok(output) = output.map_err(|e| eprintln!("  cargo tree: {e}")) else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let crates: BTreeSet<&str> = text
            .lines()
            .map(|l| l.trim_end_matches(" (*)"))
            .filter(|l| !l.is_empty() && !l.starts_with("blob-mutex "))
            .collect();
        counts.push((name, flags, crates.len()));
    }
    counts
}

fn write(
    config: &Config,
    report: &mut Report,
    latency: &Latency,
    cpu: &[RenewalCpu],
    crates: &[(&str, &str, usize)],
) {
    let _ = writeln!(
        report.details,
        "### Storage backends: the 0.21 SDK and the official SDK\n"
    );
    let latency = write_latency(config, report, latency);
    let cpu = write_cpu(config, report, cpu);
    let crates = write_crates(report, crates);
    report.section(
        "backends",
        json::obj([
            ("latency", latency),
            ("renewal_cpu", cpu),
            ("crates", crates),
        ]),
    );
}

fn write_latency(config: &Config, report: &mut Report, latency: &Latency) -> Json {
    let d = &mut report.details;
    let _ = writeln!(
        d,
        "`BlobLeaseManager` on the backend `official` (azure_storage_blob 1.x, SAS tokens signed \
         from the account key) and on `sdk-v021` (azure_storage_blobs 0.21, the key) on the same Azurite without a proxy, a blob each, \
         {} calls per operation and backend after {WARMUP} warm-up calls, interleaved call by \
         call, alternating which backend goes first.\n",
        config.overhead_samples
    );
    let _ = writeln!(d, "| operation | backend | median | p95 | p99 |");
    let _ = writeln!(d, "|---|---|---|---|---|");
    let mut json = Vec::new();
    for (operation, backend, times) in &latency.samples {
        let s = stats(times);
        let _ = writeln!(
            d,
            "| {operation} | {backend} | {} | {} | {} |",
            ms(s.median),
            ms(s.p95),
            ms(s.p99)
        );
        json.push(json::obj([
            ("operation", json::str(*operation)),
            ("backend", json::str(*backend)),
            ("seconds", json::stats(&s)),
        ]));
    }
    d.push('\n');
    for pair in latency.samples.chunks(2) {
        if let [(operation, _, official), (_, _, v021)] = pair {
            let ratio = stats(official).median / stats(v021).median;
            report.target(
                &format!("official SDK backend, {operation}, median over the 0.21 backend's"),
                format!("{ratio:.3}"),
                "(no target)".to_owned(),
                None,
            );
        }
    }
    Json::Array(json)
}

fn write_cpu(config: &Config, report: &mut Report, cpu: &[RenewalCpu]) -> Json {
    if !cpu.is_empty() {
        let d = &mut report.details;
        let _ = writeln!(
            d,
            "One worker process (`fault-worker --partitions {} --lease-secs 15`) owning every \
             partition through a counting proxy, each backend in turn; CPU (user + system, clock \
             ticks; and the live threads' run time) over a {} s window that starts a renew \
             interval after it owns them all, renewals counted by the proxy in the same window.\n",
            config.set_size,
            config.partition_window_big.as_secs()
        );
        let _ = writeln!(d, "| backend | owned all after | renewals/s | CPU, share of one core | CPU per renewal (ticks / run time) |");
        let _ = writeln!(d, "|---|---|---|---|---|");
    }
    let mut json = Vec::new();
    for c in cpu {
        let rate = float(c.renewals) / c.window;
        let per = |seconds: f64| seconds / float(c.renewals.max(1)) * 1e6;
        let _ = writeln!(
            report.details,
            "| {} | {:.1} s | {rate:.1} | {:.2} % | {:.0} µs / {:.0} µs |",
            c.backend,
            c.to_own_all,
            c.cpu_seconds / c.window * 100.0,
            per(c.cpu_seconds),
            per(c.cpu_seconds_ns)
        );
        report.target(
            &format!(
                "CPU per renewal at {rate:.0} renewals/s, {} backend",
                c.backend
            ),
            format!("{:.0} µs", per(c.cpu_seconds)),
            "(no target)".to_owned(),
            None,
        );
        json.push(json::obj([
            ("backend", json::str(c.backend)),
            ("partitions", json::count(config.set_size)),
            ("to_own_all_seconds", json::num(c.to_own_all)),
            ("window_seconds", json::num(c.window)),
            ("renewals", json::count(c.renewals)),
            ("cpu_seconds_ticks", json::num(c.cpu_seconds)),
            ("cpu_seconds_run_time", json::num(c.cpu_seconds_ns)),
        ]));
    }
    Json::Array(json)
}

fn write_crates(report: &mut Report, crates: &[(&str, &str, usize)]) -> Json {
    let d = &mut report.details;
    if !crates.is_empty() {
        let _ = writeln!(d, "\n| feature set | cargo flags | crates |");
        let _ = writeln!(d, "|---|---|---|");
        for (name, flags, count) in crates {
            let flags = if flags.is_empty() {
                "(none)".to_owned()
            } else {
                format!("`{flags}`")
            };
            let _ = writeln!(d, "| {name} | {flags} | {count} |");
        }
    }
    d.push('\n');
    Json::Array(
        crates
            .iter()
            .map(|(name, flags, count)| {
                json::obj([
                    ("feature_set", json::str(*name)),
                    ("flags", json::str(*flags)),
                    ("crates", json::count(*count)),
                ])
            })
            .collect(),
    )
}
