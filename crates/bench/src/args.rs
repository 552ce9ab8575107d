//! The bench's command line (clap), and the [`Config`] it makes: every
//! figure's default depends on `--quick`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use clap::builder::PossibleValuesParser;
use clap::Parser;

use crate::{scale, soak, Config, SECTIONS};

/// Benchmark of the election against a local Azurite. Figures are printed,
/// never asserted (see the top of crates/bench/src/main.rs).
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// Fewer repetitions and shorter windows (the defaults after the slash).
    #[arg(long)]
    quick: bool,
    /// Crash failovers [12 / 5].
    #[arg(long, value_name = "N")]
    crash_reps: Option<usize>,
    /// Crash failovers under Azure's 60 s hold on a lease that expired
    /// unreleased, section `crash-azure` [4 / 2].
    #[arg(long, value_name = "N")]
    crash_azure_reps: Option<usize>,
    /// Handovers [30 / 10].
    #[arg(long, value_name = "N")]
    handover_reps: Option<usize>,
    /// Request-cost and footprint window, in seconds [180 / 60].
    #[arg(long, value_name = "N")]
    cost_secs: Option<u64>,
    /// Samples of the crate's latency over a bare call [2000 / 500].
    #[arg(long, value_name = "N")]
    overhead_samples: Option<usize>,
    /// Contenders of the contention section.
    #[arg(long, value_name = "N", default_value_t = 50)]
    candidates: usize,
    /// The contention section's window, in seconds [30 / 15].
    #[arg(long, value_name = "N")]
    contention_secs: Option<u64>,
    /// Handovers to a preferred successor [20 / 5].
    #[arg(long, value_name = "N")]
    successor_reps: Option<usize>,
    /// The successor section's advertising-cost window, in seconds [60 / 20].
    #[arg(long, value_name = "N")]
    successor_secs: Option<u64>,
    /// Instances per lease set [3,4,8 / 3,4].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    partition_n: Option<Vec<usize>>,
    /// Partitions per set [16,64,256 / 16,64].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    partition_m: Option<Vec<usize>>,
    /// The steady window of each set, in seconds [60 / 30].
    #[arg(long, value_name = "N")]
    partition_secs: Option<u64>,
    /// Partitions owned by one process; 0 skips it.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    set_size: usize,
    /// Its steady window, in seconds [120 / 60].
    #[arg(long, value_name = "N")]
    set_secs: Option<u64>,
    /// Crash failovers per mode of the quorum section; twice as many
    /// handovers [8 / 3].
    #[arg(long, value_name = "N")]
    quorum_reps: Option<usize>,
    /// The quorum section's request-count window per mode, in seconds [60 / 20].
    #[arg(long, value_name = "N")]
    quorum_secs: Option<u64>,
    /// The soak's length, in seconds; run 3600 for the figures [3600 / 600].
    #[arg(long, value_name = "N")]
    soak_secs: Option<u64>,
    /// A set instance's join-and-leave cycle in the soak, in seconds.
    #[arg(long, value_name = "N", default_value_t = 120)]
    soak_cycle_secs: u64,
    /// Seconds between two restarts of a mutex contender in the soak.
    #[arg(long, value_name = "N", default_value_t = 20)]
    soak_churn_secs: u64,
    /// Seconds left out of the soak's fit [a sixth of the run].
    #[arg(long, value_name = "N")]
    soak_warmup_secs: Option<u64>,
    /// Names held at once through one provider.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    locks: usize,
    /// The locks section's request-count window, in seconds [120 / 60].
    #[arg(long, value_name = "N")]
    locks_secs: Option<u64>,
    /// Partitions of one set in the scale section, a row each with each
    /// process count.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1000"
    )]
    scale_partitions: Vec<usize>,
    /// Worker processes sharing it.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "4")]
    scale_processes: Vec<usize>,
    /// Each scale row's steady window, and its load generator's, in
    /// seconds [120 / 60].
    #[arg(long, value_name = "N")]
    scale_secs: Option<u64>,
    /// The longest wait, in seconds, for each scale phase's set to be owned
    /// and balanced.
    #[arg(long, value_name = "N", default_value_t = 600)]
    scale_own_limit: u64,
    /// No phase 3 in the scale section: Azurite alone at the row's rate.
    #[arg(long)]
    scale_no_load: bool,
    /// The sections to run, in their order [all but crash-azure, soak,
    /// backends, locks and scale; --quick leaves partitions out unless it
    /// is named].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = PossibleValuesParser::new(SECTIONS))]
    sections: Option<Vec<String>>,
    /// Where the results, the table and the logs go.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out: PathBuf,
    /// A running Azurite's blob endpoint on this host
    /// (`http://127.0.0.1:<port>/devstoreaccount1`) instead of starting one.
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
}

/// `value` when given, else the default of a full run or of `--quick`.
fn or<T>(value: Option<T>, quick: bool, full: T, short: T) -> T {
    value.unwrap_or(if quick { short } else { full })
}

/// Seconds given, else the default of a full run or of `--quick`.
fn secs(value: Option<u64>, quick: bool, full: u64, short: u64) -> Duration {
    Duration::from_secs(or(value, quick, full, short))
}

impl Config {
    /// The configuration of this run's command line.
    pub(crate) fn parse() -> Result<Config> {
        Config::from_args(Args::parse())
    }

    fn from_args(args: Args) -> Result<Config> {
        let quick = args.quick;
        let worker = std::env::current_exe()
            .context("locate this program")?
            .with_file_name("examples")
            .join(format!("fault-worker{}", std::env::consts::EXE_SUFFIX));
        let sections = args.sections.unwrap_or_else(|| {
            SECTIONS
                .iter()
                .filter(|s| {
                    let only_when_named =
                        matches!(**s, "crash-azure" | "soak" | "backends" | "locks" | "scale");
                    let long = quick && **s == "partitions";
                    !only_when_named && !long
                })
                .map(|s| (*s).to_owned())
                .collect()
        });
        let config = Config {
            crash_reps: or(args.crash_reps, quick, 12, 5),
            crash_azure_reps: or(args.crash_azure_reps, quick, 4, 2),
            handover_reps: or(args.handover_reps, quick, 30, 10),
            cost_window: secs(args.cost_secs, quick, 180, 60),
            overhead_samples: or(args.overhead_samples, quick, 2000, 500),
            candidates: args.candidates,
            contention_window: secs(args.contention_secs, quick, 30, 15),
            successor_reps: or(args.successor_reps, quick, 20, 5),
            successor_window: secs(args.successor_secs, quick, 60, 20),
            partition_ns: or(args.partition_n, quick, vec![3, 4, 8], vec![3, 4]),
            partition_ms: or(args.partition_m, quick, vec![16, 64, 256], vec![16, 64]),
            partition_window: secs(args.partition_secs, quick, 60, 30),
            set_size: args.set_size,
            partition_window_big: secs(args.set_secs, quick, 120, 60),
            quorum_reps: or(args.quorum_reps, quick, 8, 3),
            quorum_window: secs(args.quorum_secs, quick, 60, 20),
            soak: soak::Soak {
                duration: secs(args.soak_secs, quick, 3600, 600),
                cycle: Duration::from_secs(args.soak_cycle_secs),
                churn: Duration::from_secs(args.soak_churn_secs),
                warmup: args.soak_warmup_secs.map(Duration::from_secs),
            },
            locks: args.locks,
            locks_window: secs(args.locks_secs, quick, 120, 60),
            scale: scale::Scale {
                partitions: args.scale_partitions,
                processes: args.scale_processes,
                window: secs(args.scale_secs, quick, 120, 60),
                own_limit: Duration::from_secs(args.scale_own_limit),
                load: !args.scale_no_load,
            },
            sections,
            out: args.out,
            endpoint: args.endpoint,
            worker,
            quick,
        };
        config.check()?;
        Ok(config)
    }

    /// Refuses figures no section can measure with.
    fn check(&self) -> Result<()> {
        ensure!(
            self.crash_reps >= 1
                && self.crash_azure_reps >= 1
                && self.handover_reps >= 1
                && self.successor_reps >= 1,
            "need at least one repetition"
        );
        ensure!(
            self.successor_window >= Duration::from_secs(1),
            "--successor-secs needs at least one second"
        );
        ensure!(
            self.partition_ns.iter().all(|n| *n >= 2),
            "a lease set needs at least two instances (one is crashed)"
        );
        ensure!(
            self.candidates >= 2,
            "contention needs at least two candidates"
        );
        ensure!(
            self.soak.cycle >= Duration::from_secs(80) && self.soak.churn >= Duration::from_secs(1),
            "--soak-cycle-secs needs at least 80 (a crashed instance's 30 s leases expire in the \
             second half) and --soak-churn-secs at least 1"
        );
        ensure!(
            !self.runs("soak") || self.set_size >= 1,
            "the soak needs --set-size of at least 1"
        );
        ensure!(
            self.overhead_samples >= 10,
            "overhead needs at least 10 samples"
        );
        let scale = &self.scale;
        ensure!(
            !self.runs("scale")
                || (!scale.partitions.is_empty()
                    && !scale.processes.is_empty()
                    && scale.partitions.iter().all(|n| *n >= 1)
                    && scale.processes.iter().all(|p| *p >= 1)
                    && scale.window >= Duration::from_secs(1)
                    && scale.own_limit >= Duration::from_secs(1)),
            "scale needs partitions and processes of at least 1 each, and --scale-secs and \
             --scale-own-limit of at least 1"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(words: &[&str]) -> Result<Config> {
        let mut argv = vec!["bench"];
        argv.extend_from_slice(words);
        Config::from_args(Args::try_parse_from(argv)?)
    }

    #[test]
    fn quick_shortens_what_is_not_given_and_leaves_partitions_out() {
        let c = config(&["--quick", "--crash-reps", "7", "--partition-n", "3,5"]).unwrap();
        assert_eq!(c.crash_reps, 7);
        assert_eq!(c.handover_reps, 10);
        assert_eq!(c.partition_ns, [3, 5]);
        assert_eq!(c.partition_ms, [16, 64]);
        assert_eq!(c.cost_window, Duration::from_secs(60));
        assert!(!c.runs("partitions") && c.runs("crash") && !c.runs("soak"));
        let full = config(&[]).unwrap();
        assert_eq!((full.crash_reps, full.handover_reps), (12, 30));
        assert!(full.runs("partitions"));
    }

    #[test]
    fn unknown_sections_flags_and_impossible_figures_are_refused() {
        assert!(config(&["--sections", "crash,nosuch"]).is_err());
        assert!(config(&["--crash-rep", "3"]).is_err());
        assert!(config(&["--crash-reps", "x"]).is_err());
        assert!(config(&["--crash-reps", "0"]).is_err());
        assert!(config(&["--partition-n", "1,3"]).is_err());
        let named = config(&["--sections", "soak,crash"]).unwrap();
        assert_eq!(named.sections, ["soak", "crash"]);
    }
}
