//! Section `scale`: how one lease set (`BlobLeaseSet`) scales with its
//! partitions on one storage account. Every N of `--scale-partitions` with
//! every P of `--scale-processes` is a row, run one after another: P
//! `fault-worker --partitions N` processes share one set, each behind a
//! counting proxy of its own, and the row measures
//!
//! 1. **the time to own everything**: from the spawns to the line after
//!    which every partition is owned and each live instance owns ⌊N/P⌋ or
//!    ⌈N/P⌉ (given up after `--scale-own-limit`, 600 s by default). A cold start is slow: a partition's
//!    first stamp makes its record anew and waits for storage's clock (about
//!    1–2 s). So the row also stops every worker with SIGTERM (each drains
//!    and releases), starts P new ones (new instance ids) on the same
//!    container, and times a warm start the same way; then one more
//!    instance joins the warm set (the time until it owns its share, against
//!    three balance cycles) and the first one is killed with SIGKILL (the
//!    time until its partitions are owned again and the set is balanced,
//!    against the lease plus a cycle plus an acquire retry);
//! 2. **a steady window** (`--scale-secs`) after the cold start's balance
//!    and a few seconds to settle: the workers' CPU (`utime + stime`) per
//!    renewal counted at the proxies (listings and everything else a worker
//!    does included), each process's share of a core, its peak (`VmHWM`)
//!    and steady (`VmRSS`) memory and the latter per partition it owns,
//!    renew latency at the proxies, requests per second by kind with
//!    renewals + listings against the formula of `src/lease_set.rs` summed
//!    over the instances, Azurite's CPU, and this process's (the proxies
//!    run here); and missed deadlines over the whole row (`RELEASED …
//!    reason=deadline` lines and log lines that mention a deadline);
//! 3. **Azurite alone at the same rate**: once the workers are gone, a load
//!    generator in this process takes N leases of its own in another
//!    container through the crate's store (`BlobLeaseSetStore`: one client
//!    for all, as a set has) and renews them straight to Azurite at the
//!    row's measured renewal rate, spread evenly over the renew interval,
//!    for the same window: Azurite's CPU, the generator's CPU per renewal,
//!    its renew latency, and the renewals answered more than 1 s after they
//!    were due or failed. What Azurite costs at that rate without the set
//!    tells the crate's share from the emulator's ceiling.
//!
//! Each row runs on an Azurite of its own, started for it and stopped after
//! it (with `--endpoint`, on fresh containers of that one, and without its
//! CPU): one node process keeps every blob and lease in memory, so a row on
//! the Azurite of the rows before it would carry their blobs in its heap
//! and its garbage collector, and Azurite's CPU, the figure the generator's
//! is compared with, would depend on the order of the rows. Starting one
//! takes a second or two.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use blob_mutex::azure::{BlobLeaseManager, BlobLeaseSetStore};
use blob_mutex::store::{Acquire, LeaseId, LeaseSetStore, LeaseStore};
use blob_mutex_testkit::azurite::{unique_container, Azurite};
use blob_mutex_testkit::proxy::{Kind, Proxy};
use tokio::task::JoinSet;

use crate::footprint::{cpu_secs, vm_kib};
use crate::group::Group;
use crate::json::{self, counts_json, Json};
use crate::report::{ms, percent, Report};
use crate::sets::{
    check_defaults, deadline_log_lines, formula, mib, released_json, spawn, until_balanced, Owners,
    BALANCE_SECS, SET_LEASE_SECS, SET_RENEW_SECS,
};
use crate::stats::{count_by_kind, fit, float, stats};
use crate::{bounded_all, Config, IDLE_WORK_MS, RETRY_SECS};

/// The section's options (see the module docs).
pub(crate) struct Scale {
    /// Partitions of the set: a row for each, with each process count.
    pub(crate) partitions: Vec<usize>,
    /// Worker processes sharing the set.
    pub(crate) processes: Vec<usize>,
    /// The steady window of a row, and of its load generator.
    pub(crate) window: Duration,
    /// The longest wait for a set to be owned and balanced, in each phase.
    pub(crate) own_limit: Duration,
    /// Whether a row ends with Azurite alone at the same rate (phase 3).
    pub(crate) load: bool,
}

/// Between a balance (or the generator's last acquire) and its window.
const SETTLE: Duration = Duration::from_secs(5);

/// A generator's renewal answered later than this after it was due is late.
const LATE: Duration = Duration::from_secs(1);

/// The generator's acquires in flight while it takes its leases.
const TAKE_IN_FLIGHT: usize = 32;

/// The target of the workers' CPU per renewal, in microseconds.
const CPU_TARGET_US: f64 = 250.0;

/// Where a row's storage runs: an Azurite of its own, or the one
/// `--endpoint` names.
enum Storage<'a> {
    Own(Azurite),
    Shared(&'a Azurite),
}

impl Storage<'_> {
    fn azurite(&self) -> &Azurite {
        match self {
            Storage::Own(a) => a,
            Storage::Shared(a) => a,
        }
    }
}

fn storage<'a>(config: &Config, shared: &'a Azurite, n: usize, p: usize) -> Result<Storage<'a>> {
    if config.endpoint.is_some() {
        return Ok(Storage::Shared(shared));
    }
    let log = config.out.join(format!("logs/azurite-scale-{n}x{p}.log"));
    Azurite::start_logged(&log)
        .map(Storage::Own)
        .map_err(anyhow::Error::msg)
}

/// The CPU seconds the workers, Azurite (when its process is known) and
/// this process have used so far.
struct CpuMark {
    at: Instant,
    workers: BTreeMap<String, f64>,
    azurite: Option<f64>,
    bench: f64,
}

impl CpuMark {
    fn take(workers: &[(String, u32)], azurite: Option<u32>) -> Result<CpuMark> {
        let mut cpu = BTreeMap::new();
        for (id, pid) in workers {
            cpu.insert(id.clone(), cpu_secs(*pid)?);
        }
        Ok(CpuMark {
            at: Instant::now(),
            workers: cpu,
            azurite: azurite.and_then(|pid| cpu_secs(pid).ok()),
            bench: cpu_secs(std::process::id())?,
        })
    }

    /// Azurite's CPU seconds from `before` to this mark; `NaN` unknown.
    fn azurite_since(&self, before: &CpuMark) -> f64 {
        match (before.azurite, self.azurite) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        }
    }

    fn window_since(&self, before: &CpuMark) -> f64 {
        (self.at - before.at).as_secs_f64()
    }
}

/// Events per second over a window.
fn per_second(count: usize, window: f64) -> f64 {
    float(count) / window
}

/// CPU seconds per renewal, in microseconds; `NaN` without renewals.
fn per_renewal_us(cpu_secs: f64, renewals: usize) -> f64 {
    if renewals == 0 {
        return f64::NAN;
    }
    cpu_secs / float(renewals) * 1e6
}

/// The formula's renewals and listings per second of instances owning
/// these numbers of partitions.
fn formula_per_second(owned: impl Iterator<Item = usize>) -> f64 {
    owned.map(formula).sum::<f64>() / 3600.0
}

/// The slope of resident memory over partitions owned, in KiB per
/// partition, fitted to `(owned, rss_kib)` of processes; `None` unless
/// there are three or more with at least two different counts.
fn kib_per_partition_slope(points: &[(usize, u64)]) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)] // KiB counts are small
    let points: Vec<(f64, f64)> = points.iter().map(|&(k, r)| (float(k), r as f64)).collect();
    fit(&points).map(|(slope, _)| slope)
}

/// One worker process over the steady window.
struct Process {
    id: String,
    owned: usize,
    /// CPU seconds over the window.
    cpu: f64,
    hwm_kib: u64,
    rss_kib: u64,
}

impl Process {
    /// Its steady memory per partition it owns, in KiB (its base included);
    /// `NaN` when it owns none.
    fn kib_per_partition(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // KiB counts are small
        let rss = self.rss_kib as f64;
        if self.owned == 0 {
            return f64::NAN;
        }
        rss / float(self.owned)
    }

    fn json(&self, window: f64) -> Json {
        json::obj([
            ("id", json::str(&self.id)),
            ("partitions_owned", json::count(self.owned)),
            ("cpu_seconds", json::num(self.cpu)),
            ("cpu_share_of_one_core", json::num(self.cpu / window)),
            ("peak_rss_kib", json::int(self.hwm_kib)),
            ("rss_kib", json::int(self.rss_kib)),
            (
                "rss_kib_per_partition_owned",
                json::num(self.kib_per_partition()),
            ),
        ])
    }
}

/// The steady window of a row.
struct Steady {
    window: f64,
    processes: Vec<Process>,
    counts: BTreeMap<Kind, usize>,
    /// Renew latency at the proxies, in seconds.
    renew: Vec<f64>,
    /// `OWNING` or `RELEASED` lines during the window.
    moves: usize,
    azurite_cpu: f64,
    bench_cpu: f64,
}

impl Steady {
    fn count(&self, kind: Kind) -> usize {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// Renewals per second counted at the proxies.
    fn rate(&self) -> f64 {
        per_second(self.count(Kind::Renew), self.window)
    }

    fn worker_cpu(&self) -> f64 {
        self.processes.iter().map(|p| p.cpu).sum()
    }

    fn cpu_per_renewal_us(&self) -> f64 {
        per_renewal_us(self.worker_cpu(), self.count(Kind::Renew))
    }

    /// Renewals and listings per second, as the formula counts them.
    fn scheduled(&self) -> f64 {
        per_second(
            self.count(Kind::Renew) + self.count(Kind::List),
            self.window,
        )
    }

    fn expected(&self) -> f64 {
        formula_per_second(self.processes.iter().map(|p| p.owned))
    }

    /// The mean and the largest of a figure of the processes.
    /// The mean and the largest of a figure over the processes that have
    /// it (not `NaN`); `NaN` for both when none has.
    fn mean_max(&self, figure: impl Fn(&Process) -> f64) -> (f64, f64) {
        let values: Vec<f64> = self
            .processes
            .iter()
            .map(figure)
            .filter(|v| !v.is_nan())
            .collect();
        let max = values.iter().copied().fold(f64::NAN, f64::max);
        (values.iter().sum::<f64>() / float(values.len()), max)
    }
}

/// Reads the steady window: CPU around it, memory at its end, and the
/// proxies' requests within it.
async fn steady(
    group: &mut Group,
    owners: &mut Owners,
    proxies: &BTreeMap<String, Proxy>,
    azurite: Option<u32>,
    window: Duration,
) -> Result<Steady> {
    owners.catch_up(group);
    let owned = owners.counts();
    let pids: Vec<(String, u32)> = group.workers().into_iter().map(|w| (w.id, w.pid)).collect();
    let before = CpuMark::take(&pids, azurite)?;
    tokio::time::sleep(window).await;
    let after = CpuMark::take(&pids, azurite)?;
    let (from, to) = (before.at, after.at);
    let mut processes = Vec::with_capacity(pids.len());
    for (id, pid) in &pids {
        processes.push(Process {
            id: id.clone(),
            owned: owned.get(id).copied().unwrap_or(0),
            cpu: after.workers[id] - before.workers[id],
            hwm_kib: vm_kib(*pid, "VmHWM")?,
            rss_kib: vm_kib(*pid, "VmRSS")?,
        });
    }
    let moves = group.drain().iter().filter(|e| owners.apply(e)).count();
    let (mut requests, mut renew) = (Vec::new(), Vec::new());
    for proxy in proxies.values() {
        requests.extend(proxy.kinds_between(from, to));
        let latencies = proxy.latencies(Kind::Renew, from, to);
        renew.extend(latencies.iter().map(Duration::as_secs_f64));
    }
    Ok(Steady {
        window: after.window_since(&before),
        processes,
        counts: count_by_kind(&requests),
        renew,
        moves,
        azurite_cpu: after.azurite_since(&before),
        bench_cpu: after.bench - before.bench,
    })
}

/// Starts `p` workers at once; the seconds until the set is owned and
/// balanced, `NaN` when it was not within `limit`.
async fn start_all(
    group: &mut Group,
    azurite: &Azurite,
    proxies: &mut BTreeMap<String, Proxy>,
    owners: &mut Owners,
    p: usize,
    limit: Duration,
) -> f64 {
    let start = Instant::now();
    for _ in 0..p {
        spawn(group, azurite, proxies, owners);
    }
    until_balanced(group, owners, start, limit).await
}

/// Sends SIGTERM to every worker and waits for them to drain, release
/// and exit.
async fn stop_gracefully(group: &mut Group, owners: &mut Owners) -> Result<()> {
    let ids: Vec<String> = group.workers().into_iter().map(|w| w.id).collect();
    for id in &ids {
        group.terminate(id)?;
        owners.live.remove(id);
    }
    for id in &ids {
        group.reap(id).await?;
    }
    owners.catch_up(group);
    Ok(())
}

/// A lease the generator holds, and the id it holds it under.
type Held = (BlobLeaseManager, LeaseId);

/// Acquires one lease, retrying a transient failure twice with the same
/// proposed id (an acquire with it is idempotent); `None` when storage did
/// not answer in time on the third try either (an emulator past its
/// ceiling), so that the generator renews the leases it has.
async fn take_one(lease: BlobLeaseManager) -> Result<Option<Held>> {
    let id = LeaseId::new();
    let duration = Duration::from_secs_f64(SET_LEASE_SECS);
    let mut attempt = 0;
    loop {
        match lease.acquire(id, duration).await {
            Ok(Acquire::Acquired) => return Ok(Some((lease, id))),
            Ok(Acquire::Held) => bail!("a lease of the load generator was held by another"),
            Err(_) if attempt >= 2 => return Ok(None),
            Err(_) => attempt += 1,
        }
    }
}

/// Takes `k` leases of their own, `partitions/l<i>` of the set `load` in
/// a new container, all through one store (one client): those taken.
async fn take(azurite: &Azurite, k: usize) -> Result<Vec<Held>> {
    let settings = azurite.settings(&unique_container("scale-load"), "load");
    let store = BlobLeaseSetStore::new(&settings)?;
    let taken = bounded_all(k, TAKE_IN_FLIGHT, |i| {
        let lease = store.lease(&format!("partitions/l{i:05}"));
        async move { take_one(lease?).await }
    })
    .await?;
    Ok(taken.into_iter().flatten().collect())
}

/// When the `j`-th renewal is due, from the start, at `rate` a second.
fn slot(j: u64, rate: f64) -> Duration {
    #[allow(clippy::cast_precision_loss)] // far below 2^52 renewals
    let j = j as f64;
    Duration::from_secs_f64(j / rate)
}

/// Which of `k` leases the `j`-th renewal renews: each in turn, so each is
/// renewed every `k / rate` seconds and the renewals are spread evenly.
fn lease_of(j: u64, k: usize) -> usize {
    let k = u64::try_from(k).unwrap_or(u64::MAX).max(1);
    usize::try_from(j % k).unwrap_or(0)
}

/// One renewal the generator sent.
#[derive(Debug, Clone, Copy)]
struct Renewal {
    due: Instant,
    sent: Instant,
    answered: Instant,
    ok: bool,
}

/// Renews the leases in turn at `rate` a second until `until`; every
/// renewal sent, once answered (each is bounded by the request timeout).
async fn drive(held: Arc<Vec<Held>>, rate: f64, until: Instant) -> Result<Vec<Renewal>> {
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let mut done = Vec::new();
    for j in 0_u64.. {
        let due = start + slot(j, rate);
        if due >= until {
            break;
        }
        // Only sleep when ahead: a sleep lasts at least a timer tick (1 ms),
        // and more than one renewal a millisecond may be due.
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        let (held, i) = (held.clone(), lease_of(j, held.len()));
        tasks.spawn(async move {
            let (lease, id) = &held[i];
            let sent = Instant::now();
            let ok = lease.renew(*id).await.is_ok();
            let answered = Instant::now();
            Renewal {
                due,
                sent,
                answered,
                ok,
            }
        });
        while let Some(r) = tasks.try_join_next() {
            done.push(r.context("a renewal panicked")?);
        }
    }
    while let Some(r) = tasks.join_next().await {
        done.push(r.context("a renewal panicked")?);
    }
    Ok(done)
}

/// The renewals due in `[from, to)`: how many, the latency of those that
/// succeeded (seconds, from send to answer), how many were answered later
/// than [`LATE`] after they were due, and how many failed.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    sent: usize,
    latencies: Vec<f64>,
    late: usize,
    failed: usize,
}

fn tally(renewals: &[Renewal], from: Instant, to: Instant) -> Tally {
    let mut t = Tally::default();
    for r in renewals.iter().filter(|r| r.due >= from && r.due < to) {
        t.sent += 1;
        if r.answered.saturating_duration_since(r.due) > LATE {
            t.late += 1;
        }
        if r.ok {
            t.latencies
                .push(r.answered.saturating_duration_since(r.sent).as_secs_f64());
        } else {
            t.failed += 1;
        }
    }
    t
}

/// The load generator's run.
struct Load {
    leases: usize,
    rate: f64,
    to_take: f64,
    window: f64,
    tally: Tally,
    azurite_cpu: f64,
    bench_cpu: f64,
}

/// Phase 3: `k` leases of the generator renewed straight to Azurite at
/// `rate` a second; `None` without leases or renewals to send.
async fn load(azurite: &Azurite, k: usize, rate: f64, window: Duration) -> Result<Option<Load>> {
    if k == 0 || rate.is_nan() || rate <= 0.0 {
        return Ok(None);
    }
    let began = Instant::now();
    let held = Arc::new(take(azurite, k).await?);
    let leases = held.len();
    let to_take = began.elapsed().as_secs_f64();
    if held.is_empty() {
        eprintln!("    load generator: none of {k} leases taken in {to_take:.1} s");
        return Ok(None);
    }
    eprintln!(
        "    load generator: {} of {k} leases taken in {to_take:.1} s; renewing {rate:.1} a \
         second (each every {:.1} s) for {} s ...",
        held.len(),
        float(held.len()) / rate,
        window.as_secs()
    );
    let pid = azurite.pid();
    let (from, to) = (Instant::now() + SETTLE, Instant::now() + SETTLE + window);
    let marks = async {
        tokio::time::sleep_until(from.into()).await;
        let before = CpuMark::take(&[], pid)?;
        tokio::time::sleep_until(to.into()).await;
        let after = CpuMark::take(&[], pid)?;
        anyhow::Ok((before, after))
    };
    let (renewals, marks) = tokio::join!(drive(held, rate, to), marks);
    let ((before, after), renewals) = (marks?, renewals?);
    Ok(Some(Load {
        leases,
        rate,
        to_take,
        window: after.window_since(&before),
        tally: tally(&renewals, before.at, after.at),
        azurite_cpu: after.azurite_since(&before),
        bench_cpu: after.bench - before.bench,
    }))
}

/// One row: N partitions over P processes.
struct Row {
    n: usize,
    p: usize,
    cold: f64,
    warm: f64,
    /// From the spawn of a newcomer (P + 1) to the set balanced again.
    join: f64,
    /// From a SIGKILL of one instance to the set balanced again without it.
    crash: f64,
    steady: Steady,
    load: Option<Load>,
    deadlines: usize,
    deadline_log_lines: usize,
    released: BTreeMap<String, usize>,
    seconds: f64,
}

impl Row {
    /// Whether any term ended by its deadline: a `RELEASED … reason=deadline`
    /// line, or a log line that mentions a deadline.
    fn missed_any(&self) -> bool {
        self.deadlines + self.deadline_log_lines > 0
    }

    /// Terms ended by their deadline, and the log lines that mention one (a
    /// term stopped at its deadline logs two).
    fn missed(&self) -> String {
        format!("{} ({} log lines)", self.deadlines, self.deadline_log_lines)
    }
}

/// Phases 1 and 2 on the row's storage; the steady window, the cold and
/// warm times, and the ids of every worker that ran.
async fn workers(
    config: &Config,
    azurite: &Azurite,
    n: usize,
    p: usize,
) -> Result<(Steady, Times, Owners, Vec<String>)> {
    let count = n.to_string();
    let mut group = Group::new(
        config,
        &format!("scale{n}x{p}"),
        &["--partitions", &count, "--work-ms", IDLE_WORK_MS],
    );
    let (mut owners, mut proxies) = (Owners::new(n), BTreeMap::new());
    let limit = config.scale.own_limit;
    let cold = start_all(&mut group, azurite, &mut proxies, &mut owners, p, limit).await;
    eprintln!("    cold start: owned and balanced in {}", own(cold));
    tokio::time::sleep(SETTLE).await;
    eprintln!(
        "    steady window of {} s ...",
        config.scale.window.as_secs()
    );
    let window = config.scale.window;
    let steady = steady(&mut group, &mut owners, &proxies, azurite.pid(), window).await?;
    print_steady(&steady);
    let mut ids: Vec<String> = proxies.keys().cloned().collect();
    stop_gracefully(&mut group, &mut owners).await?;
    // The old proxies' records are read; free them before the new ones.
    proxies.clear();
    let warm = start_all(&mut group, azurite, &mut proxies, &mut owners, p, limit).await;
    eprintln!("    warm start: owned and balanced in {}", own(warm));
    let (join, crash) =
        join_and_crash(&mut group, azurite, &mut proxies, &mut owners, limit).await?;
    ids.extend(proxies.keys().cloned());
    owners.catch_up(&mut group);
    group.stop_all();
    Ok((
        steady,
        Times {
            cold,
            warm,
            join,
            crash,
        },
        owners,
        ids,
    ))
}

/// The times to own everything of one row.
struct Times {
    cold: f64,
    warm: f64,
    join: f64,
    crash: f64,
}

/// Point 4 of the row: a newcomer joins the warm set (the time until every
/// instance, the newcomer included, owns its share), then the first
/// instance is killed with SIGKILL (the time until its partitions are
/// owned again and the set is balanced without it).
async fn join_and_crash(
    group: &mut Group,
    azurite: &Azurite,
    proxies: &mut BTreeMap<String, Proxy>,
    owners: &mut Owners,
    limit: Duration,
) -> Result<(f64, f64)> {
    let at = Instant::now();
    spawn(group, azurite, proxies, owners);
    let join = until_balanced(group, owners, at, limit).await;
    eprintln!("    join of one more instance: balanced in {}", own(join));
    let victim = group
        .workers()
        .first()
        .context("a worker to crash")?
        .id
        .clone();
    let at = Instant::now();
    group.kill(&victim)?;
    owners.live.remove(&victim);
    let crash = until_balanced(group, owners, at, limit).await;
    eprintln!(
        "    crash of one instance (SIGKILL): owned again and balanced in {}",
        own(crash)
    );
    Ok((join, crash))
}

async fn row(config: &Config, shared: &Azurite, n: usize, p: usize) -> Result<Row> {
    let began = Instant::now();
    let storage = storage(config, shared, n, p)?;
    let azurite = storage.azurite();
    let (steady, times, owners, ids) = workers(config, azurite, n, p).await?;
    let load = if config.scale.load {
        load(azurite, n, steady.rate(), config.scale.window).await?
    } else {
        None
    };
    if let Some(l) = &load {
        print_load(l);
    }
    Ok(Row {
        n,
        p,
        cold: times.cold,
        warm: times.warm,
        join: times.join,
        crash: times.crash,
        steady,
        load,
        deadlines: owners.deadlines,
        deadline_log_lines: ids.iter().map(|id| deadline_log_lines(config, id)).sum(),
        released: owners.released,
        seconds: began.elapsed().as_secs_f64(),
    })
}

/// A time to own everything, or that it did not within the limit.
fn own(seconds: f64) -> String {
    if seconds.is_nan() {
        "not within the limit".to_owned()
    } else {
        format!("{seconds:.1} s")
    }
}

/// A share of one core, `12.3 %`; `—` when unknown.
fn core(share: f64) -> String {
    if share.is_nan() {
        "—".to_owned()
    } else {
        format!("{:.1} %", share * 100.0)
    }
}

fn print_steady(s: &Steady) {
    let (_, hwm) = s.mean_max(|p| mib(p.hwm_kib));
    let (_, rss) = s.mean_max(|p| mib(p.rss_kib));
    let r = stats(&s.renew);
    eprintln!(
        "    CPU per renewal: {:.0} µs ({} renewals, {:.2} s of CPU); peak / steady RSS \
         (max) {hwm:.1} / {rss:.1} MiB; renew p50 / p99 {} / {}; renewals + listings \
         {:.1}/s vs {:.1}/s by the formula; Azurite {}, bench {}",
        s.cpu_per_renewal_us(),
        s.count(Kind::Renew),
        s.worker_cpu(),
        ms(r.median),
        ms(r.p99),
        s.scheduled(),
        s.expected(),
        core(s.azurite_cpu / s.window),
        core(s.bench_cpu / s.window),
    );
}

fn print_load(l: &Load) {
    let r = stats(&l.tally.latencies);
    eprintln!(
        "    Azurite alone at {:.1} renewals/s: Azurite {}, generator {:.0} µs per renewal; \
         renew p50 / p99 {} / {}; late {}, failed {} of {}",
        l.rate,
        core(l.azurite_cpu / l.window),
        per_renewal_us(l.bench_cpu, l.tally.sent),
        ms(r.median),
        ms(r.p99),
        l.tally.late,
        l.tally.failed,
        l.tally.sent,
    );
}

pub(crate) async fn scale(config: &Config, azurite: &Azurite, report: &mut Report) -> Result<()> {
    check_defaults()?;
    let mut rows = Vec::new();
    for &n in &config.scale.partitions {
        for &p in &config.scale.processes {
            eprintln!("  {n} partitions over {p} processes ...");
            let row = row(config, azurite, n, p).await?;
            eprintln!("    row took {:.0} s", row.seconds);
            rows.push(row);
        }
    }
    targets(report, &rows);
    report.section("scale", json(&rows, config.scale.own_limit));
    details(report, &rows);
    Ok(())
}

/// One summary row per N × P.
fn targets(report: &mut Report, rows: &[Row]) {
    for r in rows {
        let us = r.steady.cpu_per_renewal_us();
        let (_, hwm) = r.steady.mean_max(|p| mib(p.hwm_kib));
        report.target(
            &format!(
                "scale: {} partitions over {} processes (CPU per renewal; missed deadlines; \
                 own all from cold / warm; peak RSS of a process)",
                r.n, r.p
            ),
            format!(
                "{us:.0} µs; {}; {} / {}; {hwm:.1} MiB",
                r.missed(),
                own(r.cold),
                own(r.warm)
            ),
            format!("≤ {CPU_TARGET_US:.0} µs; 0 (0 log lines)"),
            Some(us <= CPU_TARGET_US && !r.missed_any()),
        );
        let (cycles, crash) = (JOIN_TARGET_SECS, CRASH_TARGET_SECS);
        report.target(
            &format!(
                "scale: {} partitions over {} processes (balanced after a join; after a crash)",
                r.n, r.p
            ),
            format!("{} ; {}", own(r.join), own(r.crash)),
            format!("≤ 3 cycles ({cycles:.0} s); ≤ D + cycle + retry ({crash:.0} s)"),
            Some(r.join <= cycles && r.crash <= crash),
        );
    }
}

/// A newcomer owns its share within three balance cycles.
const JOIN_TARGET_SECS: f64 = 3.0 * BALANCE_SECS;
/// A crashed instance's partitions are owned again within the lease, a
/// cycle and an acquire retry.
const CRASH_TARGET_SECS: f64 = SET_LEASE_SECS + BALANCE_SECS + RETRY_SECS;

fn steady_json(s: &Steady) -> Json {
    let by_kind = s
        .counts
        .iter()
        .map(|(k, n)| (k.name(), json::num(per_second(*n, s.window))));
    let all: usize = s.counts.values().sum();
    json::obj([
        ("window_seconds", json::num(s.window)),
        ("renewals", json::count(s.count(Kind::Renew))),
        ("renewals_per_second", json::num(s.rate())),
        ("worker_cpu_seconds", json::num(s.worker_cpu())),
        ("cpu_per_renewal_us", json::num(s.cpu_per_renewal_us())),
        ("requests_in_window", counts_json(&s.counts)),
        ("requests_per_second", json::obj(by_kind)),
        ("renew_and_list_per_second", json::num(s.scheduled())),
        ("formula_per_second", json::num(s.expected())),
        (
            "all_requests_per_second",
            json::num(per_second(all, s.window)),
        ),
        ("renew_latency_seconds", json::stats(&stats(&s.renew))),
        ("moves_in_window", json::count(s.moves)),
        ("azurite_cpu_share", json::num(s.azurite_cpu / s.window)),
        ("bench_cpu_share", json::num(s.bench_cpu / s.window)),
        (
            "processes",
            Json::Array(s.processes.iter().map(|p| p.json(s.window)).collect()),
        ),
    ])
}

fn load_json(l: &Load) -> Json {
    json::obj([
        ("leases", json::count(l.leases)),
        ("renewals_per_second", json::num(l.rate)),
        ("seconds_to_take", json::num(l.to_take)),
        ("window_seconds", json::num(l.window)),
        ("renewals_sent", json::count(l.tally.sent)),
        ("late", json::count(l.tally.late)),
        ("failed", json::count(l.tally.failed)),
        (
            "renew_latency_seconds",
            json::stats(&stats(&l.tally.latencies)),
        ),
        ("azurite_cpu_share", json::num(l.azurite_cpu / l.window)),
        (
            "generator_cpu_per_renewal_us",
            json::num(per_renewal_us(l.bench_cpu, l.tally.sent)),
        ),
    ])
}

fn row_json(r: &Row) -> Json {
    json::obj([
        ("partitions", json::count(r.n)),
        ("processes", json::count(r.p)),
        ("cold_start_seconds", json::num(r.cold)),
        ("warm_start_seconds", json::num(r.warm)),
        ("join_seconds", json::num(r.join)),
        ("crash_seconds", json::num(r.crash)),
        ("steady", steady_json(&r.steady)),
        (
            "azurite_alone",
            r.load.as_ref().map_or(json::num(f64::NAN), load_json),
        ),
        ("released_deadline", json::count(r.deadlines)),
        ("deadline_log_lines", json::count(r.deadline_log_lines)),
        ("released_by_reason", released_json(&r.released)),
        ("row_seconds", json::num(r.seconds)),
    ])
}

/// Steady memory over partitions owned, every process of every row.
fn slope(rows: &[Row]) -> Option<f64> {
    let points: Vec<(usize, u64)> = rows
        .iter()
        .flat_map(|r| r.steady.processes.iter().map(|p| (p.owned, p.rss_kib)))
        .collect();
    kib_per_partition_slope(&points)
}

fn json(rows: &[Row], own_limit: Duration) -> Json {
    json::obj([
        (
            "method",
            json::str(
                "per row: P fault-worker processes in --partitions N mode, default options, each \
                 behind its own counting proxy, on an Azurite of the row's own; cold and warm \
                 starts timed to the line after which every live instance owns floor(N/P) or \
                 ceil(N/P); a steady window after the cold start; then a load generator in the \
                 bench renews N leases of its own straight to Azurite at the measured renewal \
                 rate for the same window",
            ),
        ),
        ("own_limit_seconds", json::num(own_limit.as_secs_f64())),
        ("late_after_seconds", json::num(LATE.as_secs_f64())),
        (
            "rss_kib_per_partition_slope",
            json::num(slope(rows).unwrap_or(f64::NAN)),
        ),
        ("rows", Json::Array(rows.iter().map(row_json).collect())),
    ])
}

/// The row of the first table.
fn steady_line(d: &mut String, r: &Row) {
    let s = &r.steady;
    let (cpu_mean, cpu_max) = s.mean_max(|p| p.cpu / s.window);
    let (hwm_mean, hwm_max) = s.mean_max(|p| mib(p.hwm_kib));
    let (rss_mean, rss_max) = s.mean_max(|p| mib(p.rss_kib));
    let (per_partition, _) = s.mean_max(Process::kib_per_partition);
    let lat = stats(&s.renew);
    let alone = r
        .load
        .as_ref()
        .map_or(f64::NAN, |l| l.azurite_cpu / l.window);
    let _ = writeln!(
        d,
        "| {} | {} | {} | {} | {:.0} µs | {} / {} | {hwm_max:.1} / {rss_max:.1} MiB ({hwm_mean:.1} / \
         {rss_mean:.1}) | {per_partition:.1} | {} / {} | {} | {:.1} vs {:.1} ({}) | {:.2} | {} | {} | {} | {:.0} s |",
        r.n,
        r.p,
        own(r.cold),
        own(r.warm),
        s.cpu_per_renewal_us(),
        core(cpu_mean),
        core(cpu_max),
        ms(lat.median),
        ms(lat.p99),
        r.missed(),
        s.scheduled(),
        s.expected(),
        percent(s.scheduled() / s.expected() - 1.0),
        per_second(s.count(Kind::List), s.window),
        core(s.azurite_cpu / s.window),
        core(alone),
        core(s.bench_cpu / s.window),
        r.seconds,
    );
}

fn load_line(d: &mut String, r: &Row) {
    let Some(l) = &r.load else {
        let _ = writeln!(d, "| {} | {} | (no renewals to replay) |||||||", r.n, r.p);
        return;
    };
    let lat = stats(&l.tally.latencies);
    let _ = writeln!(
        d,
        "| {} | {} | {} | {:.1} | {:.1} s | {} | {:.0} µs | {} / {} | {} | {} | {} |",
        r.n,
        r.p,
        l.leases,
        l.rate,
        l.to_take,
        core(l.azurite_cpu / l.window),
        per_renewal_us(l.bench_cpu, l.tally.sent),
        ms(lat.median),
        ms(lat.p99),
        l.tally.late,
        l.tally.failed,
        l.tally.sent,
    );
}

fn requests_line(d: &mut String, r: &Row) {
    let s = &r.steady;
    let kinds: Vec<String> = s
        .counts
        .iter()
        .map(|(k, n)| format!("{} {:.2}", k.name(), per_second(*n, s.window)))
        .collect();
    let all: usize = s.counts.values().sum();
    let _ = writeln!(
        d,
        "| {} | {} | {} | {:.1} | {} | {:?} |",
        r.n,
        r.p,
        kinds.join(", "),
        per_second(all, s.window),
        s.moves,
        r.released,
    );
}

/// The section's Markdown: the rows, their requests, and the generator's.
fn details(report: &mut Report, rows: &[Row]) {
    let d = &mut report.details;
    let _ = writeln!(
        d,
        "### Scale: one lease set, N partitions over P processes\n"
    );
    let _ = writeln!(
        d,
        "P `fault-worker --partitions N` processes at the lease set's defaults (lease 30 s \
         renewed every {SET_RENEW_SECS:.0} s, balance every 5 s), each behind its own counting \
         proxy, on an Azurite of the row's own. Own all: from the spawns to every partition owned \
         and every instance at ⌊N/P⌋ or ⌈N/P⌉; cold (new blobs) and warm (P new instances after a \
         SIGTERM of all). Steady window after the cold start: CPU per renewal = the workers' CPU \
         ÷ renewals at the proxies; RSS peak / steady as max (mean) over the processes; KiB per \
         partition = steady RSS ÷ partitions owned (base included), mean over the processes; \
         missed deadlines over the whole row. Azurite alone: N leases of a generator in the bench \
         renewed straight to Azurite at the row's renewal rate.\n"
    );
    let _ = writeln!(
        d,
        "| N | P | cold own | warm own | CPU/renewal | CPU per process mean / max | RSS per process peak / steady, max (mean) | KiB/partition | renew p50 / p99 | missed deadlines | renew + list /s vs formula | listing /s | Azurite CPU | Azurite alone, same rate | bench CPU | row took |"
    );
    let _ = writeln!(
        d,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        steady_line(d, r);
    }
    match slope(rows) {
        Some(s) => {
            let _ = writeln!(
                d,
                "\nSteady RSS against partitions owned, every process of every row (least \
                 squares): {s:.1} KiB per partition.\n"
            );
        }
        None => d.push_str(
            "\nSteady RSS against partitions owned: no slope (it needs processes owning \
             different numbers of partitions, from rows of different N / P).\n\n",
        ),
    }
    let _ = writeln!(
        d,
        "| N | P | join of one more (≤ {JOIN_TARGET_SECS:.0} s) | crash of one, SIGKILL (≤ {CRASH_TARGET_SECS:.0} s) |"
    );
    let _ = writeln!(d, "|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            d,
            "| {} | {} | {} | {} |",
            r.n,
            r.p,
            own(r.join),
            own(r.crash)
        );
    }
    d.push('\n');
    let _ = writeln!(
        d,
        "| N | P | requests per second by kind (steady window) | all /s | moves in window | RELEASED by reason (whole row) |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|---|");
    for r in rows {
        requests_line(d, r);
    }
    let _ = writeln!(
        d,
        "\nAzurite alone: the generator's renewals straight to Azurite at the row's rate; \
         latency from send to answer in the generator; late = answered more than {} s after \
         due.\n",
        LATE.as_secs()
    );
    let _ = writeln!(
        d,
        "| N | P | leases | renewals /s | taken in | Azurite CPU | generator CPU per renewal | renew p50 / p99 | late | failed | sent |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        load_line(d, r);
    }
    d.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formula_sums_over_the_instances_per_second() {
        // 1000 partitions over 4 instances: 1004 leases renewed every 10 s
        // and 4 listings every 5 s.
        let expected = 1004.0 / 10.0 + 4.0 / 5.0;
        assert!((formula_per_second([250; 4].into_iter()) - expected).abs() < 1e-9);
        assert!(formula_per_second(std::iter::empty()).abs() < 1e-12);
    }

    #[test]
    fn cpu_per_renewal_is_in_microseconds_and_nan_without_renewals() {
        assert!((per_renewal_us(1.5, 6000) - 250.0).abs() < 1e-9);
        assert!(per_renewal_us(1.0, 0).is_nan());
        assert!((per_second(300, 60.0) - 5.0).abs() < 1e-12);
    }

    #[test]
    fn the_generator_spreads_renewals_evenly_over_each_leases_interval() {
        let (k, rate) = (4, 2.0);
        let due: Vec<Duration> = (0..8).map(|j| slot(j, rate)).collect();
        assert_eq!(due[0], Duration::ZERO);
        assert_eq!(due[1], Duration::from_millis(500));
        assert_eq!(due[7], Duration::from_millis(3500));
        let leases: Vec<usize> = (0..8).map(|j| lease_of(j, k)).collect();
        assert_eq!(leases, [0, 1, 2, 3, 0, 1, 2, 3]);
        // Each lease comes round every k / rate seconds.
        assert_eq!(due[4], due[0] + Duration::from_secs(2));
        assert_eq!(lease_of(5, 0), 0, "no leases does not divide by zero");
    }

    #[test]
    fn a_tally_counts_the_window_and_tells_late_and_failed_renewals() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let renewal = |due, sent, answered, ok| Renewal {
            due: at(due),
            sent: at(sent),
            answered: at(answered),
            ok,
        };
        let renewals = [
            renewal(0, 0, 5, true),          // before the window
            renewal(100, 100, 110, true),    // 10 ms
            renewal(200, 900, 1300, true),   // sent late: answered 1.1 s after due
            renewal(300, 300, 3300, false),  // failed, and late
            renewal(1000, 1000, 1002, true), // at the window's end: out
        ];
        let t = tally(&renewals, at(100), at(1000));
        assert_eq!((t.sent, t.late, t.failed), (3, 2, 1));
        assert_eq!(t.latencies.len(), 2);
        assert!((t.latencies[0] - 0.010).abs() < 1e-9);
        assert!((t.latencies[1] - 0.400).abs() < 1e-9);
    }

    #[test]
    fn memory_per_partition_leaves_out_a_process_that_owns_none() {
        let process = |owned, rss_kib| Process {
            id: String::new(),
            owned,
            cpu: 0.0,
            hwm_kib: rss_kib,
            rss_kib,
        };
        let steady = Steady {
            window: 1.0,
            processes: vec![
                process(0, 30_000),
                process(100, 20_000),
                process(200, 30_000),
            ],
            counts: BTreeMap::new(),
            renew: Vec::new(),
            moves: 0,
            azurite_cpu: 0.0,
            bench_cpu: 0.0,
        };
        let (mean, max) = steady.mean_max(Process::kib_per_partition);
        assert!(
            (mean - 175.0).abs() < 1e-9 && (max - 200.0).abs() < 1e-9,
            "{mean} {max}"
        );
        let none = Steady {
            processes: vec![process(0, 30_000)],
            ..steady
        };
        assert!(none.mean_max(Process::kib_per_partition).0.is_nan());
    }

    #[test]
    fn memory_per_partition_is_a_slope_only_across_different_counts() {
        assert_eq!(kib_per_partition_slope(&[(250, 40_000); 4]), None);
        let points = [(100, 10_000), (100, 10_000), (250, 13_000), (250, 13_000)];
        let slope = kib_per_partition_slope(&points).expect("a slope");
        assert!((slope - 20.0).abs() < 1e-9, "{slope}");
    }

    #[test]
    fn an_own_time_not_taken_says_so() {
        assert_eq!(own(f64::NAN), "not within the limit");
        assert_eq!(own(12.34), "12.3 s");
        assert_eq!(core(0.1234), "12.3 %");
        assert_eq!(core(f64::NAN), "—");
    }
}
