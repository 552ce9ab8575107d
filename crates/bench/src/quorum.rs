//! Section `quorum`: leadership on a majority of three accounts (three
//! Azurites) against one account: crash failover, graceful handover and
//! storage requests per hour, measured with worker processes; then a
//! simulation of leader availability when accounts fail independently,
//! with the measured failover times.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use blob_mutex_testkit::azurite::Azurite;
use blob_mutex_testkit::proxy::{Kind, Proxy};

use crate::failover::Exit;
use crate::group::{Event, Group};
use crate::json::{self, counts_json, Json};
use crate::report::{secs, Report};
use crate::stats::{count_by_kind, float, fresh_rng, stats, Rng};
use crate::{Config, IDLE_WORK_MS};

const HOURS_PER_YEAR: f64 = 8766.0;

/// Where the workers lead: one account, or a quorum of three.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Single,
    Quorum,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Quorum => "quorum",
        }
    }
}

/// What one mode measured.
struct Measured {
    crash: Vec<f64>,
    handover: Vec<f64>,
    requests_per_hour: f64,
    /// Of which reads and metadata writes (the stamps, and on a quorum the
    /// catch-up of accounts behind), per hour.
    reads_and_stamps_per_hour: f64,
    /// The window's requests, by kind.
    by_kind: BTreeMap<Kind, usize>,
    epochs_increasing: bool,
}

pub(crate) async fn quorum(config: &Config, azurite: &Azurite, report: &mut Report) -> Result<()> {
    let logs = config.out.join("logs");
    let others = [
        Azurite::start_logged(&logs.join("azurite-quorum-1.log")).map_err(anyhow::Error::msg)?,
        Azurite::start_logged(&logs.join("azurite-quorum-2.log")).map_err(anyhow::Error::msg)?,
    ];
    let proxies: Vec<Proxy> = [azurite.port, others[0].port, others[1].port]
        .into_iter()
        .map(Proxy::start)
        .collect();
    let endpoints: Vec<String> = proxies.iter().map(Proxy::endpoint).collect();
    let mut measured = Vec::new();
    for mode in [Mode::Single, Mode::Quorum] {
        let accounts = match mode {
            Mode::Single => &endpoints[..1],
            Mode::Quorum => &endpoints[..],
        };
        eprintln!("  quorum section, {} mode ...", mode.name());
        let (requests_per_hour, reads_and_stamps_per_hour, by_kind) =
            requests_per_hour(config, mode, accounts, &proxies).await?;
        let (crash, up1) = failovers(config, mode, accounts, Exit::Crash).await?;
        let (handover, up2) = failovers(config, mode, accounts, Exit::Graceful).await?;
        measured.push(Measured {
            crash,
            handover,
            requests_per_hour,
            reads_and_stamps_per_hour,
            by_kind,
            epochs_increasing: up1 && up2,
        });
    }
    let simulated = simulations(config);
    write(report, &measured, &simulated);
    Ok(())
}

/// Starts one worker of `mode` in `group`.
fn spawn(group: &mut Group, mode: Mode, accounts: &[String]) -> String {
    match mode {
        Mode::Single => group.spawn(&accounts[0]),
        Mode::Quorum => group.spawn_quorum(accounts),
    }
}

/// Three workers (one leader, two followers) for the configured window:
/// the storage requests they send, over all accounts, per hour; the reads
/// and metadata writes among them, per hour; and the requests by kind.
async fn requests_per_hour(
    config: &Config,
    mode: Mode,
    accounts: &[String],
    proxies: &[Proxy],
) -> Result<(f64, f64, BTreeMap<Kind, usize>)> {
    let mut group = Group::new(
        config,
        &format!("quorum-cost-{}", mode.name()),
        &["--work-ms", IDLE_WORK_MS],
    );
    for _ in 0..3 {
        spawn(&mut group, mode, accounts);
    }
    group.next_leader(None, Duration::from_secs(60)).await?;
    // The window starts after the leader's first renewal (5 s after its
    // acquire), which leases and brings up to the stamp an account that a
    // follower's attempt held when the leader won: the steady state.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let from = Instant::now();
    tokio::time::sleep(config.quorum_window).await;
    let to = Instant::now();
    let requests: Vec<_> = proxies
        .iter()
        .flat_map(|p| p.kinds_between(from, to))
        .collect();
    group.stop_all();
    let counts = count_by_kind(&requests);
    let reads_and_stamps: usize = [Kind::GetProperties, Kind::SetMetadata]
        .iter()
        .filter_map(|kind| counts.get(kind))
        .sum();
    let per_hour = |n: usize| float(n) * 3600.0 / (to - from).as_secs_f64();
    Ok((per_hour(requests.len()), per_hour(reads_and_stamps), counts))
}

/// Makes the leader of three workers go (`exit`) the configured number of
/// times; the seconds from each signal to the next `LEADING` line, and
/// whether the epochs increased throughout.
async fn failovers(
    config: &Config,
    mode: Mode,
    accounts: &[String],
    exit: Exit,
) -> Result<(Vec<f64>, bool)> {
    let prefix = format!("quorum-{}-{}", exit.name(), mode.name());
    let mut group = Group::new(config, &prefix, &["--work-ms", IDLE_WORK_MS]);
    for _ in 0..3 {
        spawn(&mut group, mode, accounts);
    }
    let (mut leader, _) = group.next_leader(None, Duration::from_secs(60)).await?;
    let mut rng = fresh_rng();
    let (mut samples, mut increasing) = (Vec::new(), true);
    let reps = match exit {
        Exit::Crash | Exit::CrashOnAzure => config.quorum_reps,
        Exit::Graceful => config.quorum_reps * 2,
    };
    for rep in 1..=reps {
        tokio::time::sleep(rng.between(Duration::from_secs(1), Duration::from_secs(6))).await;
        let changes = group.drain().into_iter().filter(Event::is_leading).count();
        ensure!(changes == 0, "leadership changed without a signal");
        let at = Instant::now();
        match exit {
            Exit::Crash | Exit::CrashOnAzure => group.kill(&leader.id)?,
            Exit::Graceful => group.terminate(&leader.id)?,
        }
        let (next, _) = group
            .next_leader(Some(&leader.id), Duration::from_secs(60))
            .await?;
        let took = (next.at - at).as_secs_f64();
        increasing &= next.epoch() > leader.epoch();
        eprintln!(
            "  {} {} {rep}/{reps}: {}",
            mode.name(),
            exit.name(),
            secs(took)
        );
        samples.push(took);
        group.reap(&leader.id).await?;
        spawn(&mut group, mode, accounts);
        leader = next;
    }
    group.stop_all();
    Ok((samples, increasing))
}

/// The accounts' failure model of one simulation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outages {
    /// The share of the time each account is unavailable.
    pub(crate) unavailability: f64,
    /// The mean length of one outage, in hours (exponential).
    pub(crate) mean_hours: f64,
}

/// What a simulation found: how long per year no majority of the accounts
/// was up, and how often a majority was lost.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Simulated {
    pub(crate) down_hours_per_year: f64,
    pub(crate) losses_per_year: f64,
}

impl Simulated {
    /// The leader's unavailability in minutes per year, counting `recovery`
    /// seconds (the failover time) after each loss.
    pub(crate) fn minutes_per_year(&self, recovery: f64) -> f64 {
        self.down_hours_per_year * 60.0 + self.losses_per_year * recovery / 60.0
    }
}

/// Simulates `accounts` accounts whose outages come and go independently
/// (exponential up and down times) for `years`: the time a majority is
/// down, and how often it is lost.
pub(crate) fn simulate(accounts: usize, outages: Outages, years: f64, seed: u64) -> Simulated {
    let mut rng = Rng(seed);
    let horizon = years * HOURS_PER_YEAR;
    let mean_up = outages.mean_hours * (1.0 - outages.unavailability) / outages.unavailability;
    let mut exponential = |mean: f64| -mean * (1.0 - rng.unit()).ln();
    // (hour, +1 when an account comes back, -1 when it goes down)
    let mut changes: Vec<(f64, i32)> = Vec::new();
    for _ in 0..accounts {
        // Start in the stationary state: down with the unavailability's chance.
        let mut at = 0.0;
        let mut up = exponential(1.0) > outages.unavailability;
        if !up {
            changes.push((0.0, -1));
        }
        while at < horizon {
            at += exponential(if up { mean_up } else { outages.mean_hours });
            up = !up;
            changes.push((at, if up { 1 } else { -1 }));
        }
    }
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let majority = i32::try_from(accounts / 2 + 1).unwrap_or(i32::MAX);
    let mut up = i32::try_from(accounts).unwrap_or(i32::MAX);
    let (mut down_since, mut down_hours, mut losses) = (None, 0.0, 0usize);
    for (at, change) in changes {
        let at = at.min(horizon);
        up += change;
        match (up >= majority, down_since) {
            (false, None) => {
                down_since = Some(at);
                losses += 1;
            }
            (true, Some(since)) => {
                down_hours += at - since;
                down_since = None;
            }
            _ => {}
        }
    }
    if let Some(since) = down_since {
        down_hours += horizon - since;
    }
    Simulated {
        down_hours_per_year: down_hours / years,
        losses_per_year: float(losses) / years,
    }
}

/// The failure models the report shows.
const MODELS: [Outages; 3] = [
    Outages {
        unavailability: 0.001,
        mean_hours: 1.0,
    },
    Outages {
        unavailability: 0.001,
        mean_hours: 6.0,
    },
    Outages {
        unavailability: 0.0001,
        mean_hours: 1.0,
    },
];

/// For each model: what one account and a quorum of three went through.
fn simulations(config: &Config) -> Vec<(Outages, Simulated, Simulated)> {
    let years = if config.quick { 20_000.0 } else { 200_000.0 };
    MODELS
        .iter()
        .enumerate()
        .map(|(i, model)| {
            let seed = 0x5eed + u64::try_from(i).unwrap_or(0);
            (
                *model,
                simulate(1, *model, years, seed),
                simulate(3, *model, years, seed),
            )
        })
        .collect()
}

// Long: the section's table rows and JSON fields, written one after the
// other; nothing in it branches.
fn write(
    report: &mut Report,
    measured: &[Measured],
    simulated: &[(Outages, Simulated, Simulated)],
) {
    let recovery = [
        stats(&measured[0].crash).median,
        stats(&measured[1].crash).median,
    ];
    let mut modes = Vec::new();
    let d = &mut report.details;
    let _ = writeln!(d, "### Quorum of three accounts against one account\n");
    let _ = writeln!(
        d,
        "Three worker processes at default settings, on one Azurite account or on a quorum of \
         three (three Azurites, each behind a counting proxy). Failover and handover run from \
         the signal to the next leader's `LEADING` line.\n"
    );
    let _ = writeln!(
        d,
        "| mode | crash failover median (max) | graceful handover median (max) | requests per hour, 3 processes | of which reads and stamps | epochs increasing |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|---|");
    for (mode, m) in [Mode::Single, Mode::Quorum].iter().zip(measured) {
        let (c, h) = (stats(&m.crash), stats(&m.handover));
        let _ = writeln!(
            d,
            "| {} | {} ({}), n = {} | {} ({}), n = {} | {:.0} | {:.0} | {} |",
            mode.name(),
            secs(c.median),
            secs(c.max),
            c.n,
            secs(h.median),
            secs(h.max),
            h.n,
            m.requests_per_hour,
            m.reads_and_stamps_per_hour,
            if m.epochs_increasing { "yes" } else { "**no**" }
        );
        modes.push((
            mode.name(),
            json::obj([
                ("crash_failover_seconds", json::stats(&c)),
                ("graceful_handover_seconds", json::stats(&h)),
                ("requests_per_hour", json::num(m.requests_per_hour)),
                (
                    "reads_and_stamps_per_hour",
                    json::num(m.reads_and_stamps_per_hour),
                ),
                ("requests_by_kind", counts_json(&m.by_kind)),
                (
                    "epochs_strictly_increasing",
                    Json::Bool(m.epochs_increasing),
                ),
            ]),
        ));
    }
    let _ = writeln!(
        d,
        "\nSimulated leader unavailability when each account fails on its own (exponential up \
         and down times), counting each account outage that takes the leader's majority, plus \
         the measured median crash failover after it ({} single, {} quorum):\n",
        secs(recovery[0]),
        secs(recovery[1])
    );
    let _ = writeln!(
        d,
        "| account unavailability | mean outage | one account: minutes/year | quorum of 3: minutes/year | ratio |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|");
    let mut sims = Vec::new();
    for (model, single, quorum) in simulated {
        let (s, q) = (
            single.minutes_per_year(recovery[0]),
            quorum.minutes_per_year(recovery[1]),
        );
        let _ = writeln!(
            d,
            "| {:.2} % | {} h | {s:.1} | {q:.3} | {:.0}× |",
            model.unavailability * 100.0,
            model.mean_hours,
            s / q.max(1e-9)
        );
        sims.push(json::obj([
            ("unavailability", json::num(model.unavailability)),
            ("mean_outage_hours", json::num(model.mean_hours)),
            ("single_minutes_per_year", json::num(s)),
            ("quorum_minutes_per_year", json::num(q)),
        ]));
    }
    let _ = writeln!(d);
    modes.push(("simulation", Json::Array(sims)));
    report.section("quorum", json::obj(modes));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_account_is_down_for_its_unavailability() {
        let model = Outages {
            unavailability: 0.01,
            mean_hours: 1.0,
        };
        let single = simulate(1, model, 2_000.0, 7);
        let share = single.down_hours_per_year / HOURS_PER_YEAR;
        assert!((share - 0.01).abs() < 0.001, "{share}");
        // One loss per outage: unavailability × hours per year / mean length.
        assert!((single.losses_per_year - 87.7).abs() < 5.0, "{single:?}");
    }

    #[test]
    fn three_accounts_lose_a_majority_about_three_u_squared_of_the_time() {
        let model = Outages {
            unavailability: 0.01,
            mean_hours: 1.0,
        };
        let quorum = simulate(3, model, 20_000.0, 11);
        let share = quorum.down_hours_per_year / HOURS_PER_YEAR;
        // Two or three of three down: 3u²(1 − u) + u³.
        let expected = 3.0 * 0.01 * 0.01 * 0.99 + 0.01f64.powi(3);
        assert!(
            (share / expected - 1.0).abs() < 0.1,
            "{share} against {expected}"
        );
    }
}
