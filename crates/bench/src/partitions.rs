//! Section `partitions`: lease sets (`BlobLeaseSet`) of M partitions over N
//! worker processes (`fault-worker --partitions M`, default options, each
//! behind its own counting proxy). For each N and M: the time until every
//! live instance owns ⌊M/N⌋ or ⌈M/N⌉ partitions from a cold start, after a
//! join, after a graceful leave (SIGTERM) and after a crash (SIGKILL), read
//! from the workers' `OWNING` and `RELEASED` lines; and each instance's
//! requests per hour in the steady state against the formula of
//! `src/lease_set.rs`. Then one process owning `--set-size` partitions: its
//! CPU, peak RSS, renew latency at the proxy and missed deadlines.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use blob_mutex_testkit::azurite::Azurite;
use blob_mutex_testkit::proxy::Kind;

use crate::footprint::{clock_ticks, cpu_ticks, vm_kib};
use crate::group::Group;
use crate::json::{self, counts_json, Json};
use crate::report::{ms, percent, secs, Report};
use crate::sets::{
    check_defaults, deadline_log_lines, formula, mib, released_json, spawn, until_balanced, Owners,
    BALANCE_SECS, SET_LEASE_SECS,
};
use crate::stats::{count_by_kind, float, stats};
use crate::{Config, IDLE_WORK_MS, RETRY_SECS};

/// The longest wait for a set to balance before the figure is given up.
const BALANCE_LIMIT: Duration = Duration::from_secs(300);

/// The requests per hour of one instance over the steady window.
struct Cost {
    id: String,
    owned: usize,
    counts: BTreeMap<Kind, usize>,
    /// Renewals and listings per hour.
    per_hour: f64,
    /// All requests per hour.
    all_per_hour: f64,
    /// `360 × (k + 1) + 720`.
    expected: f64,
}

impl Cost {
    fn deviation(&self) -> f64 {
        self.per_hour / self.expected - 1.0
    }

    fn json(&self) -> Json {
        json::obj([
            ("id", json::str(&self.id)),
            ("partitions_owned", json::count(self.owned)),
            ("requests_in_window", counts_json(&self.counts)),
            ("renew_and_list_per_hour", json::num(self.per_hour)),
            ("all_requests_per_hour", json::num(self.all_per_hour)),
            ("formula_per_hour", json::num(self.expected)),
        ])
    }
}

/// One cell of the grid.
struct Cell {
    n: usize,
    m: usize,
    cold: f64,
    join: f64,
    leave: f64,
    crash: f64,
    costs: Vec<Cost>,
    window: f64,
    /// `OWNING` or `RELEASED` lines during the steady window.
    moves_in_window: usize,
    released: BTreeMap<String, usize>,
    seconds: f64,
}

impl Cell {
    fn json(&self) -> Json {
        json::obj([
            ("instances", json::count(self.n)),
            ("partitions", json::count(self.m)),
            ("cold_start_seconds", json::num(self.cold)),
            ("join_seconds", json::num(self.join)),
            ("graceful_leave_seconds", json::num(self.leave)),
            ("crash_seconds", json::num(self.crash)),
            ("window_seconds", json::num(self.window)),
            ("moves_in_window", json::count(self.moves_in_window)),
            ("released_by_reason", released_json(&self.released)),
            (
                "instances_cost",
                Json::Array(self.costs.iter().map(Cost::json).collect()),
            ),
            ("cell_seconds", json::num(self.seconds)),
        ])
    }

    /// The smallest and largest deviation from the formula.
    fn deviations(&self) -> (f64, f64) {
        let d = self.costs.iter().map(Cost::deviation);
        (
            d.clone().fold(f64::INFINITY, f64::min),
            d.fold(f64::NEG_INFINITY, f64::max),
        )
    }
}

/// One cell: N instances from cold, the steady window, then a join, a
/// graceful leave of the newcomer and a crash of the first instance.
// Long: the cell's phases (cold start, steady window, join, leave, crash)
// in sequence, each a wait on the owners' lines; kept together so that
// the order of the phases reads top to bottom.
async fn cell(config: &Config, azurite: &Azurite, n: usize, m: usize) -> Result<Cell> {
    let began = Instant::now();
    let count = m.to_string();
    let mut group = Group::new(
        config,
        &format!("part{n}x{m}"),
        &["--partitions", &count, "--work-ms", IDLE_WORK_MS],
    );
    let mut proxies = BTreeMap::new();
    let mut owners = Owners::new(m);

    let start = Instant::now();
    for _ in 0..n {
        spawn(&mut group, azurite, &mut proxies, &mut owners);
    }
    let cold = until_balanced(&mut group, &mut owners, start, BALANCE_LIMIT).await;

    // Past the last claims' stamps, into the steady state.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let owned_before = owners.counts();
    let from = Instant::now();
    tokio::time::sleep(config.partition_window).await;
    let to = Instant::now();
    let window = (to - from).as_secs_f64();
    let mut moves_in_window = 0;
    for e in group.drain() {
        if owners.apply(&e) {
            moves_in_window += 1;
        }
    }
    let costs = owned_before
        .iter()
        .map(|(id, owned)| {
            let requests = proxies[id].kinds_between(from, to);
            let counts = count_by_kind(&requests);
            let schedule =
                counts.get(&Kind::Renew).unwrap_or(&0) + counts.get(&Kind::List).unwrap_or(&0);
            Cost {
                id: id.clone(),
                owned: *owned,
                counts,
                per_hour: 3600.0 * float(schedule) / window,
                all_per_hour: 3600.0 * float(requests.len()) / window,
                expected: formula(*owned),
            }
        })
        .collect();

    let at = Instant::now();
    let newcomer = spawn(&mut group, azurite, &mut proxies, &mut owners);
    let join = until_balanced(&mut group, &mut owners, at, BALANCE_LIMIT).await;

    let at = Instant::now();
    group.terminate(&newcomer)?;
    owners.live.remove(&newcomer);
    let leave = until_balanced(&mut group, &mut owners, at, BALANCE_LIMIT).await;
    // Its RELEASED lines came before it balanced; wait for it to exit.
    owners.catch_up(&mut group);
    group.reap(&newcomer).await?;

    let victim = group
        .workers()
        .first()
        .context("a worker to crash")?
        .id
        .clone();
    let at = Instant::now();
    group.kill(&victim)?;
    owners.live.remove(&victim);
    let crash = until_balanced(&mut group, &mut owners, at, BALANCE_LIMIT).await;

    owners.catch_up(&mut group);
    group.stop_all();
    Ok(Cell {
        n,
        m,
        cold,
        join,
        leave,
        crash,
        costs,
        window,
        moves_in_window,
        released: owners.released,
        seconds: began.elapsed().as_secs_f64(),
    })
}

/// One process owning many partitions.
struct Big {
    partitions: usize,
    to_own_all: f64,
    window: f64,
    cpu_share: f64,
    hwm_kib: u64,
    rss_kib: u64,
    renew: Vec<f64>,
    counts: BTreeMap<Kind, usize>,
    per_hour: f64,
    expected: f64,
    deadlines: usize,
    deadline_log_lines: usize,
    released: BTreeMap<String, usize>,
    owned_at_end: usize,
}

async fn big(config: &Config, azurite: &Azurite, size: usize) -> Result<Big> {
    let count = size.to_string();
    let mut group = Group::new(
        config,
        "partbig",
        &["--partitions", &count, "--work-ms", IDLE_WORK_MS],
    );
    let mut proxies = BTreeMap::new();
    let mut owners = Owners::new(size);
    let start = Instant::now();
    let id = spawn(&mut group, azurite, &mut proxies, &mut owners);
    let to_own_all = until_balanced(&mut group, &mut owners, start, BALANCE_LIMIT).await;
    let pid = group.workers().first().context("the worker")?.pid;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let ticks = clock_ticks();
    let from = Instant::now();
    let cpu_before = cpu_ticks(pid)?;
    eprintln!(
        "  one process owning {size} partitions: steady window of {} s ...",
        config.partition_window_big.as_secs()
    );
    tokio::time::sleep(config.partition_window_big).await;
    let cpu = cpu_ticks(pid)?.saturating_sub(cpu_before);
    let to = Instant::now();
    let window = (to - from).as_secs_f64();
    #[allow(clippy::cast_precision_loss)] // tick counts are small
    let cpu_share = cpu as f64 / ticks / window;
    let (hwm_kib, rss_kib) = (vm_kib(pid, "VmHWM")?, vm_kib(pid, "VmRSS")?);
    owners.catch_up(&mut group);
    let proxy = &proxies[&id];
    let requests = proxy.kinds_between(from, to);
    let counts = count_by_kind(&requests);
    let schedule = counts.get(&Kind::Renew).unwrap_or(&0) + counts.get(&Kind::List).unwrap_or(&0);
    let renew: Vec<f64> = proxy
        .latencies(Kind::Renew, from, to)
        .iter()
        .map(Duration::as_secs_f64)
        .collect();
    group.stop_all();
    Ok(Big {
        partitions: size,
        to_own_all,
        window,
        cpu_share,
        hwm_kib,
        rss_kib,
        renew,
        counts,
        per_hour: 3600.0 * float(schedule) / window,
        expected: formula(size),
        deadlines: owners.deadlines,
        deadline_log_lines: deadline_log_lines(config, &id),
        owned_at_end: owners.counts().values().sum(),
        released: owners.released,
    })
}

/// The worst of some figures, `NaN` (a figure not taken) counting as worst.
fn worst(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(f64::NEG_INFINITY, |a, b| {
        if b.is_nan() || a.is_nan() {
            f64::NAN
        } else {
            a.max(b)
        }
    })
}

pub(crate) async fn partitions(
    config: &Config,
    azurite: &Azurite,
    report: &mut Report,
) -> Result<()> {
    check_defaults()?;
    let mut cells = Vec::new();
    for &n in &config.partition_ns {
        for &m in &config.partition_ms {
            eprintln!("  {n} instances, {m} partitions ...");
            let c = cell(config, azurite, n, m).await?;
            eprintln!(
                "    cold {} / join {} / leave {} / crash {} ({:.0} s)",
                secs(c.cold),
                secs(c.join),
                secs(c.leave),
                secs(c.crash),
                c.seconds
            );
            cells.push(c);
        }
    }
    let big = match config.set_size {
        0 => None,
        size => Some(big(config, azurite, size).await?),
    };
    targets(report, &cells, big.as_ref());
    report.section("partitions", json(&cells, big.as_ref()));
    details(config, report, &cells, big.as_ref());
    Ok(())
}

/// The rows of the summary: rebalance and re-own times, the request rate,
/// and the one process's deadlines, CPU and memory.
fn targets(report: &mut Report, cells: &[Cell], big: Option<&Big>) {
    let cycle_target = 3.0 * BALANCE_SECS;
    let crash_target = SET_LEASE_SECS + BALANCE_SECS + RETRY_SECS;
    if !cells.is_empty() {
        for (what, pick) in [
            ("join", (|c: &Cell| c.join) as fn(&Cell) -> f64),
            ("graceful leave", |c: &Cell| c.leave),
        ] {
            let w = worst(cells.iter().map(pick));
            report.target(
                &format!(
                    "partitions: rebalance after a {what} (worst of {} cells)",
                    cells.len()
                ),
                secs(w),
                format!("≤ 3 cycles ({})", secs(cycle_target)),
                Some(w <= cycle_target),
            );
        }
        let w = worst(cells.iter().map(|c| c.crash));
        report.target(
            &format!(
                "partitions: re-own after a crash (worst of {} cells)",
                cells.len()
            ),
            secs(w),
            format!("≤ D + cycle + retry ({})", secs(crash_target)),
            Some(w <= crash_target),
        );
        let (low, high) = cells
            .iter()
            .map(Cell::deviations)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), (a, b)| {
                (l.min(a), h.max(b))
            });
        report.target(
            "partitions: renewals + listings per hour per instance vs 360 × (k + 1) + 720",
            format!("{} to {}", percent(low), percent(high)),
            "(no target)".to_owned(),
            None,
        );
    }
    if let Some(b) = big {
        let missed = b.deadlines + b.deadline_log_lines;
        report.target(
            &format!(
                "{} partitions in one process: missed deadlines",
                b.partitions
            ),
            format!(
                "{} RELEASED reason=deadline, {} log lines",
                b.deadlines, b.deadline_log_lines
            ),
            "none".to_owned(),
            Some(missed == 0 && b.owned_at_end == b.partitions),
        );
        report.target(
            &format!("{} partitions in one process: CPU", b.partitions),
            format!("{:.2} % of a core", b.cpu_share * 100.0),
            "≤ 5 %".to_owned(),
            Some(b.cpu_share <= 0.05),
        );
        report.target(
            &format!("{} partitions in one process: peak RSS", b.partitions),
            format!("{:.1} MiB", mib(b.hwm_kib)),
            "≤ 64 MiB".to_owned(),
            Some(mib(b.hwm_kib) <= 64.0),
        );
    }
}

fn json(cells: &[Cell], big: Option<&Big>) -> Json {
    let mut fields = vec![
        ("balance_interval_seconds", json::num(BALANCE_SECS)),
        (
            "method",
            json::str(
                "per cell: N fault-worker processes in --partitions mode, each behind its own \
                 counting proxy; a time to balance runs from the spawn or signal to the OWNING or \
                 RELEASED line after which every live instance owns floor(M/N) or ceil(M/N); \
                 requests counted over the steady window after the cold start",
            ),
        ),
        ("cells", Json::Array(cells.iter().map(Cell::json).collect())),
    ];
    if let Some(b) = big {
        let s = stats(&b.renew);
        fields.push((
            "one_process",
            json::obj([
                ("partitions", json::count(b.partitions)),
                ("seconds_to_own_all", json::num(b.to_own_all)),
                ("window_seconds", json::num(b.window)),
                ("cpu_share_of_one_core", json::num(b.cpu_share)),
                ("peak_rss_kib", json::int(b.hwm_kib)),
                ("rss_kib", json::int(b.rss_kib)),
                ("renew_latency_seconds", json::stats(&s)),
                ("requests_in_window", counts_json(&b.counts)),
                ("renew_and_list_per_hour", json::num(b.per_hour)),
                ("formula_per_hour", json::num(b.expected)),
                ("released_deadline", json::count(b.deadlines)),
                ("deadline_log_lines", json::count(b.deadline_log_lines)),
                ("released_by_reason", released_json(&b.released)),
                ("owned_at_end", json::count(b.owned_at_end)),
            ]),
        ));
    }
    json::obj(fields)
}

/// The section's Markdown: the grid's table and the one process's.
fn details(config: &Config, report: &mut Report, cells: &[Cell], big: Option<&Big>) {
    let d = &mut report.details;
    let _ = writeln!(d, "### Partitions: lease sets over worker processes\n");
    if !cells.is_empty() {
        let _ = writeln!(
            d,
            "N `fault-worker --partitions M` processes at the lease set's default options (lease 30 s renewed every 10 s, balance every 5 s), \
             each behind its own counting proxy. Times run from the spawn or the signal to the \
             line after which every live instance owns ⌊M/N⌋ or ⌈M/N⌉: cold start of N; a \
             newcomer joins (N + 1); the newcomer leaves on SIGTERM (N); the first instance is \
             killed (N − 1). Requests are counted over a {:.0} s steady window after the cold \
             start: renewals + listings per hour per instance against 360 × (k + 1) + 720 for \
             k partitions owned.\n",
            config.partition_window.as_secs_f64()
        );
        let _ = writeln!(
            d,
            "| N | M | cold start | join | graceful leave | crash | owned k (min–max) | renew + list /h per instance vs formula | all requests /h (max) | moves in window | cell took |"
        );
        let _ = writeln!(d, "|---|---|---|---|---|---|---|---|---|---|---|");
        for c in cells {
            let (low, high) = c.deviations();
            let k = c.costs.iter().map(|x| x.owned);
            let _ = writeln!(
                d,
                "| {} | {} | {} | {} | {} | {} | {}–{} | {:.0}–{:.0} ({} to {}) | {:.0} | {} | {:.0} s |",
                c.n,
                c.m,
                secs(c.cold),
                secs(c.join),
                secs(c.leave),
                secs(c.crash),
                k.clone().min().unwrap_or(0),
                k.max().unwrap_or(0),
                c.costs.iter().map(|x| x.per_hour).fold(f64::INFINITY, f64::min),
                c.costs.iter().map(|x| x.per_hour).fold(0.0, f64::max),
                percent(low),
                percent(high),
                c.costs.iter().map(|x| x.all_per_hour).fold(0.0, f64::max),
                c.moves_in_window,
                c.seconds,
            );
        }
        d.push('\n');
    }
    if let Some(b) = big {
        let s = stats(&b.renew);
        let _ = writeln!(
            d,
            "One `fault-worker --partitions {}` process alone, default options, behind a \
             counting proxy; renew latency is from the request's head at the proxy to the \
             first byte of its response, over a {:.0} s steady window.\n",
            b.partitions, b.window
        );
        let _ = writeln!(
            d,
            "| time to own all | CPU (share of a core) | peak RSS / at end | renew latency p50 / p99 (n) | renew + list /h vs formula | RELEASED (by reason) | `deadline` in log | owned at end |"
        );
        let _ = writeln!(d, "|---|---|---|---|---|---|---|---|");
        let _ = writeln!(
            d,
            "| {} | {:.2} % | {:.1} / {:.1} MiB | {} / {} ({}) | {:.0} vs {:.0} ({}) | {:?} | {} | {} |\n",
            secs(b.to_own_all),
            b.cpu_share * 100.0,
            mib(b.hwm_kib),
            mib(b.rss_kib),
            ms(s.median),
            ms(s.p99),
            s.n,
            b.per_hour,
            b.expected,
            percent(b.per_hour / b.expected - 1.0),
            b.released,
            b.deadline_log_lines,
            b.owned_at_end,
        );
    }
}
