//! The CPU and memory of a worker process, from `/proc`, and the section
//! `cost`'s footprint part (measured over the same window as its requests).

use std::fmt::Write as _;

use anyhow::{Context, Result};

use crate::cost::Measured;
use crate::json::Json;
use crate::report::Report;

/// Clock ticks per second (`getconf CLK_TCK`, else 100).
pub(crate) fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system CPU time of a process, in clock ticks (including its
/// threads that have ended).
pub(crate) fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("parse stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat; the first field after the name is field 3.
    let utime: u64 = fields.get(11).context("utime")?.parse()?;
    let stime: u64 = fields.get(12).context("stime")?.parse()?;
    Ok(utime + stime)
}

/// Time on the CPU of a process's live threads, in nanoseconds, from
/// `/proc/<pid>/task/*/schedstat`: finer than clock ticks, but it misses
/// threads that have ended.
pub(crate) fn cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let text = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// A `Vm*` line of /proc/<pid>/status, in KiB.
pub(crate) fn vm_kib(pid: u32, key: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("{key} of {pid}"))
}

#[allow(clippy::cast_precision_loss)] // KiB counts are small
fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The footprint of the default variant's workers: targets, JSON and table.
pub(crate) fn report(
    report: &mut Report,
    defaults: &[Measured],
    window: f64,
    ticks: f64,
) -> Result<()> {
    let leader = defaults
        .iter()
        .find(|m| m.leader)
        .context("default leader")?;
    let followers: Vec<&Measured> = defaults.iter().filter(|m| !m.leader).collect();
    let worst_follower_cpu = followers.iter().map(|f| f.cpu_share).fold(0.0, f64::max);
    report.target(
        &format!("idle follower CPU (worst of {})", followers.len()),
        format!("{:.3} % of a core", worst_follower_cpu * 100.0),
        "≤ 0.1 %".to_owned(),
        Some(worst_follower_cpu <= 0.001),
    );
    report.target(
        "idle leader CPU",
        format!("{:.3} % of a core", leader.cpu_share * 100.0),
        "(no target)".to_owned(),
        None,
    );
    let worst_hwm = defaults.iter().map(|m| m.hwm_kib).max().unwrap_or(0);
    report.target(
        "peak RSS per worker (leader / worst follower)",
        format!(
            "{:.1} MiB / {:.1} MiB",
            mib(leader.hwm_kib),
            mib(followers.iter().map(|f| f.hwm_kib).max().unwrap_or(0))
        ),
        "≤ 20 MiB".to_owned(),
        Some(mib(worst_hwm) <= 20.0),
    );
    report.section(
        "footprint",
        Json::obj([
            ("window_seconds", Json::Num(window)),
            ("clock_ticks_per_second", Json::Num(ticks)),
            (
                "workers",
                Json::Arr(defaults.iter().map(|m| m.json(false)).collect()),
            ),
        ]),
    );
    let d = &mut report.details;
    let _ = writeln!(d, "### Footprint (default settings, same window)\n");
    let _ = writeln!(
        d,
        "| worker | role | CPU, share of one core (clock ticks / live threads' run time) | peak RSS (VmHWM) | RSS at end |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|");
    for m in defaults {
        let _ = writeln!(
            d,
            "| {} | {} | {:.3} % / {:.4} % | {:.1} MiB | {:.1} MiB |",
            m.id,
            m.role(),
            m.cpu_share * 100.0,
            m.cpu_share_ns * 100.0,
            mib(m.hwm_kib),
            mib(m.rss_kib)
        );
    }
    d.push('\n');
    Ok(())
}
