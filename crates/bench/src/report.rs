//! What the sections measured: the JSON fields of `results.json` and the
//! Markdown of `table.md` (the summary of targets, then one part per section).

use std::fmt::Write as _;

use crate::json::{self, Json};

#[derive(Default)]
pub(crate) struct Report {
    /// The top-level fields of `results.json`, one per section.
    pub(crate) json: Vec<(String, Json)>,
    /// Rows of the "Targets at default settings" table.
    summary: Vec<[String; 4]>,
    /// The sections' own Markdown, in the order they ran.
    pub(crate) details: String,
}

impl Report {
    pub(crate) fn section(&mut self, key: &str, value: Json) {
        self.json.push((key.to_owned(), value));
    }

    /// A row of the summary; `met` is `None` for a figure without a target.
    pub(crate) fn target(
        &mut self,
        measure: &str,
        measured: String,
        target: String,
        met: Option<bool>,
    ) {
        let met = match met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "—",
        };
        self.summary
            .push([measure.to_owned(), measured, target, met.to_owned()]);
    }

    pub(crate) fn markdown(&self, header: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{header}\n");
        let _ = writeln!(out, "### Targets at default settings\n");
        let _ = writeln!(out, "| measure | measured | target | |");
        let _ = writeln!(out, "|---|---|---|---|");
        for [a, b, c, d] in &self.summary {
            let _ = writeln!(out, "| {a} | {b} | {c} | {d} |");
        }
        out.push('\n');
        out.push_str(&self.details);
        out
    }
}

pub(crate) fn secs(v: f64) -> String {
    format!("{v:.3} s")
}

pub(crate) fn ms(v: f64) -> String {
    format!("{:.3} ms", v * 1e3)
}

/// A share as a signed percentage, `+1.4 %`.
pub(crate) fn percent(share: f64) -> String {
    format!("{:+.1} %", share * 100.0)
}

/// The CPUs, memory and load of this machine, from `/proc`.
pub(crate) fn machine() -> Json {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    json::obj([
        (
            "cpus",
            json::count(std::thread::available_parallelism().map_or(0, usize::from)),
        ),
        ("cpu_model", json::str(model)),
        ("memory_kib", json::int(mem_kib)),
        ("load_average_at_start", json::str(load_average())),
    ])
}

/// The first line of `/proc/loadavg`.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}
