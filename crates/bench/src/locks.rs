//! Section `locks`: `--locks` names (1 000) held at once through one
//! `BlobLocks` provider in this process, at the default options (lease
//! 15 s, renewed every 5 s). Two phases, memory first so that what the
//! allocator kept from the second does not hide the first's growth:
//!
//! 1. straight to Azurite: this process's RSS before the provider is made,
//!    after, with every name held (after two renew intervals), and after
//!    every guard is released; per name = (held − provider made) / names;
//! 2. through a counting proxy: the requests of taking every name, then
//!    those of a steady window (`--locks-secs`) against the formula
//!    `names × 3600 / renew_interval` per hour, and how many guards were
//!    no longer current at its end.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use blob_mutex::{BlobLocks, BlobSettings, MutexGuard};
use tokio::task::JoinSet;

use blob_mutex_testkit::azurite::{unique_container, Azurite};
use blob_mutex_testkit::proxy::{Kind, Proxy};

use crate::footprint::vm_kib;
use crate::json::{self, counts_json};
use crate::report::{ms, percent, secs, Report};
use crate::stats::{count_by_kind, float, stats};
use crate::{bounded_all, Config, RENEW_SECS};

/// Acquires in flight at once while the names are taken. Each first
/// acquire of a name creates its blob and stamps a record made anew, which
/// reads storage's clock until its second is over (up to six reads): with
/// 100 at once, Azurite on this machine answered the held names' renewals
/// after more than the 3 s request timeout, and about a fifth of them were
/// lost at their deadline before all were taken. 25 keeps it answering.
const IN_FLIGHT: usize = 25;

/// This process's resident memory, in KiB.
fn rss_kib() -> Result<u64> {
    vm_kib(std::process::id(), "VmRSS")
}

#[allow(clippy::cast_precision_loss)] // KiB counts are small
fn kib_f(kib: u64) -> f64 {
    kib as f64
}

/// Takes every name through `locks`, `IN_FLIGHT` at a time; the guards, and
/// how long it took.
async fn hold_all(locks: &BlobLocks, names: usize) -> Result<(Vec<MutexGuard>, f64)> {
    let start = Instant::now();
    let guards = bounded_all(names, IN_FLIGHT, |i| {
        let locks = locks.clone();
        async move { Ok(locks.acquire(&format!("name-{i}")).await?) }
    })
    .await?;
    Ok((guards, start.elapsed().as_secs_f64()))
}

/// The guards that are no longer current, by the reason their term was
/// asked to stop.
async fn lost_by_reason(guards: &[MutexGuard]) -> BTreeMap<String, usize> {
    let mut lost = BTreeMap::new();
    for guard in guards.iter().filter(|g| !g.is_current()) {
        // Completes at once: the term was asked to stop already.
        let reason = guard.cancelled().await;
        *lost.entry(reason.to_string()).or_insert(0) += 1;
    }
    lost
}

async fn release_all(guards: Vec<MutexGuard>) -> Result<()> {
    let mut set = JoinSet::new();
    for guard in guards {
        set.spawn(guard.release());
    }
    while let Some(joined) = set.join_next().await {
        joined.context("a release panicked")??;
    }
    Ok(())
}

struct Memory {
    before: u64,
    provider: u64,
    held: u64,
    released: u64,
    to_hold_all: f64,
    /// Guards no longer current when memory was read, by stop reason.
    lost: BTreeMap<String, usize>,
}

/// Phase 1: this process's RSS around one provider holding every name.
async fn memory(azurite: &Azurite, names: usize) -> Result<Memory> {
    let settings = azurite.settings(&unique_container("locks-mem"), "locks");
    let before = rss_kib()?;
    let locks = BlobLocks::new(&settings)?;
    let provider = rss_kib()?;
    let (guards, to_hold_all) = hold_all(&locks, names).await?;
    tokio::time::sleep(Duration::from_secs_f64(2.0 * RENEW_SECS)).await;
    let held = rss_kib()?;
    let lost = lost_by_reason(&guards).await;
    release_all(guards).await?;
    let released = rss_kib()?;
    Ok(Memory {
        before,
        provider,
        held,
        released,
        to_hold_all,
        lost,
    })
}

struct Requests {
    to_hold_all: f64,
    taking: BTreeMap<Kind, usize>,
    window: f64,
    counts: BTreeMap<Kind, usize>,
    per_hour: f64,
    all_per_hour: f64,
    expected: f64,
    lost: usize,
    /// The guards no longer current at the window's end, by stop reason.
    lost_by_reason: BTreeMap<String, usize>,
    /// Renew latency at the proxy over the window, in seconds.
    renew: Vec<f64>,
}

/// Phase 2: the requests of taking every name, and of holding them.
async fn requests(config: &Config, azurite: &Azurite, names: usize) -> Result<Requests> {
    let proxy = Proxy::start(azurite.port);
    let settings: BlobSettings = proxy.settings(&unique_container("locks-req"), "locks");
    let locks = BlobLocks::new(&settings)?;
    let start = Instant::now();
    let (guards, to_hold_all) = hold_all(&locks, names).await?;
    let taking = count_by_kind(&proxy.kinds_between(start, Instant::now()));
    // Let the renewals of the acquires' burst spread before counting.
    tokio::time::sleep(Duration::from_secs_f64(RENEW_SECS)).await;
    eprintln!(
        "  {names} names held: steady window of {} s ...",
        config.locks_window.as_secs()
    );
    let from = Instant::now();
    tokio::time::sleep(config.locks_window).await;
    let to = Instant::now();
    let lost_by_reason = lost_by_reason(&guards).await;
    let lost = lost_by_reason.values().sum();
    release_all(guards).await?;
    let window = (to - from).as_secs_f64();
    let counted = proxy.kinds_between(from, to);
    let counts = count_by_kind(&counted);
    let renewals = counts.get(&Kind::Renew).copied().unwrap_or(0);
    Ok(Requests {
        to_hold_all,
        taking,
        window,
        per_hour: 3600.0 * float(renewals) / window,
        all_per_hour: 3600.0 * float(counted.len()) / window,
        expected: float(names) * 3600.0 / RENEW_SECS,
        counts,
        lost,
        lost_by_reason,
        renew: proxy
            .latencies(Kind::Renew, from, to)
            .iter()
            .map(Duration::as_secs_f64)
            .collect(),
    })
}

pub(crate) async fn locks(config: &Config, azurite: &Azurite, report: &mut Report) -> Result<()> {
    let names = config.locks;
    ensure!(names >= 1, "--locks needs at least one name");
    eprintln!("  memory of {names} names held ...");
    let m = memory(azurite, names).await?;
    eprintln!(
        "    held in {}; RSS {} KiB → {} KiB; lost {:?}",
        secs(m.to_hold_all),
        m.provider,
        m.held,
        m.lost
    );
    eprintln!("  requests of {names} names held ...");
    let r = requests(config, azurite, names).await?;
    let per_name_kib = (kib_f(m.held) - kib_f(m.provider)) / float(names);
    let deviation = r.per_hour / r.expected - 1.0;
    report.target(
        &format!("{names} locks held by one provider: renewals per hour vs names × 720"),
        format!(
            "{:.0} vs {:.0} ({})",
            r.per_hour,
            r.expected,
            percent(deviation)
        ),
        "within ± 5 %".to_owned(),
        Some(deviation.abs() <= 0.05),
    );
    report.target(
        &format!("{names} locks held by one provider: memory per name"),
        format!("{per_name_kib:.1} KiB"),
        "(no target)".to_owned(),
        None,
    );
    report.target(
        &format!("{names} locks held by one provider: guards lost in the window"),
        r.lost.to_string(),
        "none".to_owned(),
        Some(r.lost == 0),
    );
    report.section(
        "locks",
        json::obj([
            ("names", json::count(names)),
            ("renew_interval_seconds", json::num(RENEW_SECS)),
            ("rss_kib_before", json::count(usize::try_from(m.before)?)),
            (
                "rss_kib_provider",
                json::count(usize::try_from(m.provider)?),
            ),
            ("rss_kib_held", json::count(usize::try_from(m.held)?)),
            (
                "rss_kib_released",
                json::count(usize::try_from(m.released)?),
            ),
            ("kib_per_name", json::num(per_name_kib)),
            ("seconds_to_hold_all_memory_phase", json::num(m.to_hold_all)),
            (
                "guards_lost_memory_phase",
                json::obj(m.lost.iter().map(|(k, n)| (k.as_str(), json::count(*n)))),
            ),
            ("seconds_to_hold_all", json::num(r.to_hold_all)),
            ("requests_to_take_all", counts_json(&r.taking)),
            ("window_seconds", json::num(r.window)),
            ("requests_in_window", counts_json(&r.counts)),
            ("renewals_per_hour", json::num(r.per_hour)),
            ("all_requests_per_hour", json::num(r.all_per_hour)),
            ("formula_per_hour", json::num(r.expected)),
            ("guards_lost", json::count(r.lost)),
            (
                "guards_lost_by_reason",
                json::obj(
                    r.lost_by_reason
                        .iter()
                        .map(|(k, n)| (k.as_str(), json::count(*n))),
                ),
            ),
            ("renew_latency_seconds", json::stats(&stats(&r.renew))),
        ]),
    );
    details(report, names, &m, &r);
    Ok(())
}

fn details(report: &mut Report, names: usize, m: &Memory, r: &Requests) {
    let d = &mut report.details;
    let _ = writeln!(
        d,
        "### Locks by name: {names} held at once through one provider\n"
    );
    let _ = writeln!(
        d,
        "One `BlobLocks` in the bench's own process, default options (lease 15 s, renewed \
         every {RENEW_SECS:.0} s), {IN_FLIGHT} acquires in flight while the names are taken. \
         Memory straight to Azurite (RSS of the process); requests through a counting proxy \
         over a {:.0} s steady window, against {names} × 3600 / {RENEW_SECS:.0} per hour.\n",
        r.window
    );
    let taking: usize = r.taking.values().sum();
    let _ = writeln!(
        d,
        "| time to hold all | requests to take all (per name) | renewals /h vs formula | all requests /h | renew latency p50 / p99 / max (n) | RSS before / provider / held / released | per name | lost (by reason) |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|---|---|---|");
    let s = stats(&r.renew);
    let _ = writeln!(
        d,
        "| {} | {} ({:.1}) | {:.0} vs {:.0} ({}) | {:.0} | {} / {} / {} ({}) | {:.1} / {:.1} / {:.1} / {:.1} MiB | {:.1} KiB | {} {:?} |\n",
        secs(r.to_hold_all),
        taking,
        float(taking) / float(names),
        r.per_hour,
        r.expected,
        percent(r.per_hour / r.expected - 1.0),
        r.all_per_hour,
        ms(s.median),
        ms(s.p99),
        ms(s.max),
        s.n,
        kib_f(m.before) / 1024.0,
        kib_f(m.provider) / 1024.0,
        kib_f(m.held) / 1024.0,
        kib_f(m.released) / 1024.0,
        (kib_f(m.held) - kib_f(m.provider)) / float(names),
        r.lost,
        r.lost_by_reason,
    );
}
