//! The section `cost`'s footprint part: each worker's CPU and memory,
//! measured over the same window as its requests.

use std::fmt::Write as _;

use anyhow::{Context, Result};

use super::Measured;
use crate::json::{self, Json};
use crate::report::Report;

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
        json::obj([
            ("window_seconds", json::num(window)),
            ("clock_ticks_per_second", json::num(ticks)),
            (
                "workers",
                Json::Array(defaults.iter().map(|m| m.json(false)).collect()),
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
