//! The CPU and memory of a worker process, from `/proc`.

use std::sync::OnceLock;

use anyhow::{Context, Result};

/// Clock ticks per second (`getconf CLK_TCK`, else 100), asked once.
pub(crate) fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// [`cpu_ticks`] in seconds.
pub(crate) fn cpu_secs(pid: u32) -> Result<f64> {
    #[allow(clippy::cast_precision_loss)] // tick counts are small
    let ticks = cpu_ticks(pid)? as f64;
    Ok(ticks / clock_ticks())
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
