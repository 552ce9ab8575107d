//! Section `cost`: storage requests per hour of a leader and of a follower,
//! for the defaults and for other lease and retry settings, and the workers'
//! footprint over the same window (reported by `footprint.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use blob_mutex_testkit::azurite::Azurite;
use blob_mutex_testkit::proxy::{Kind, Proxy};

mod resources;

use crate::footprint::{clock_ticks, cpu_ns, cpu_ticks, vm_kib};
use crate::group::{Event, Group, Worker};
use crate::json::{self, counts_json, Json};
use crate::report::{percent, secs, Report};
use crate::stats::{count_by_kind, float};
use crate::{Config, IDLE_WORK_MS, JITTER};

/// Options of one run of workers; the renew interval is the default, a
/// third of the lease.
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    lease: Duration,
    retry: Duration,
    followers: usize,
    /// Every worker watches who leads (`leader()`), so that followers poll.
    watch: bool,
}

const fn variant(name: &'static str, lease_secs: u64, retry_ms: u64, followers: usize) -> Variant {
    Variant {
        name,
        lease: Duration::from_secs(lease_secs),
        retry: Duration::from_millis(retry_ms),
        followers,
        watch: false,
    }
}

const fn watching(variant: Variant) -> Variant {
    Variant {
        watch: true,
        ..variant
    }
}

/// The first is the defaults, whose workers are also the footprint's.
const VARIANTS: [Variant; 7] = [
    variant("defaults", 15, 1000, 2),
    variant("acquire retry 250 ms", 15, 250, 1),
    variant("acquire retry 2 s", 15, 2000, 1),
    variant("acquire retry 5 s", 15, 5000, 1),
    variant("lease 30 s", 30, 1000, 1),
    variant("lease 60 s", 60, 1000, 1),
    watching(variant("defaults, watching who leads", 15, 1000, 2)),
];

/// One worker over the window.
pub(crate) struct Measured {
    pub(crate) id: String,
    pub(crate) leader: bool,
    counts: BTreeMap<Kind, usize>,
    /// Of the request kind the role's schedule is made of (renew or acquire).
    main: Kind,
    per_hour_by_count: f64,
    per_hour_by_interval: f64,
    expected_per_hour: f64,
    /// Inspections (Get Blob Properties) per hour, by count: a watching
    /// follower's polls.
    inspections_per_hour: f64,
    /// Whether inspections belong to its schedule (a watching follower).
    watching: bool,
    /// From the clock ticks of `/proc/<pid>/stat`.
    pub(crate) cpu_share: f64,
    /// The same from the live threads' run time (`NaN` when unavailable).
    pub(crate) cpu_share_ns: f64,
    pub(crate) hwm_kib: u64,
    pub(crate) rss_kib: u64,
}

impl Measured {
    pub(crate) fn role(&self) -> &'static str {
        if self.leader {
            "leader"
        } else {
            "follower"
        }
    }

    /// Requests of other kinds than the schedule's.
    fn extra(&self) -> usize {
        self.counts
            .iter()
            .filter(|(k, _)| **k != self.main && !(self.watching && **k == Kind::GetProperties))
            .map(|(_, n)| n)
            .sum()
    }

    fn deviation(&self) -> f64 {
        self.per_hour_by_interval / self.expected_per_hour - 1.0
    }

    /// The worker's JSON object: its footprint, after its requests when
    /// `with_requests`.
    pub(crate) fn json(&self, with_requests: bool) -> Json {
        let mut fields = vec![
            ("id", json::str(&self.id)),
            ("role", json::str(self.role())),
        ];
        if with_requests {
            fields.extend([
                ("requests_in_window", counts_json(&self.counts)),
                ("requests_outside_schedule", json::count(self.extra())),
                ("per_hour_by_count", json::num(self.per_hour_by_count)),
                ("per_hour_by_interval", json::num(self.per_hour_by_interval)),
                ("expected_per_hour", json::num(self.expected_per_hour)),
                ("inspections_per_hour", json::num(self.inspections_per_hour)),
            ]);
        }
        fields.extend([
            ("cpu_share_of_one_core", json::num(self.cpu_share)),
            ("cpu_share_live_threads", json::num(self.cpu_share_ns)),
            ("peak_rss_kib", json::int(self.hwm_kib)),
            ("rss_kib", json::int(self.rss_kib)),
        ]);
        json::obj(fields)
    }

    /// A summary row: requests per hour against the schedule, none extra.
    fn target(&self, report: &mut Report, measure: &str) {
        report.target(
            measure,
            format!(
                "{:.0} ({}), outside the schedule: {}",
                self.per_hour_by_interval,
                percent(self.deviation()),
                self.extra()
            ),
            format!("{:.0} ± 5 %, none extra", self.expected_per_hour),
            Some(self.deviation().abs() <= 0.05 && self.extra() == 0),
        );
    }
}

/// The workers of one variant, each behind its own proxy.
struct Run {
    variant: &'static Variant,
    group: Group,
    proxies: BTreeMap<String, Proxy>,
    leader: String,
}

/// The counting window, and each worker's CPU time at its start.
struct Window {
    start: Instant,
    end: Instant,
    seconds: f64,
    /// Clock ticks per second.
    ticks: f64,
    /// Each worker's clock ticks and live threads' nanoseconds at `start`.
    cpu_before: BTreeMap<String, (u64, Option<u64>)>,
}

/// Starts every variant at once (each its own blob, each worker behind its
/// own counting proxy) and waits until each has a leader.
async fn start(config: &Config, azurite: &Azurite) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for (index, variant) in VARIANTS.iter().enumerate() {
        let lease = variant.lease.as_secs().to_string();
        let retry = variant.retry.as_millis().to_string();
        let mut args = vec![
            "--lease-secs",
            &lease,
            "--acquire-retry-ms",
            &retry,
            "--work-ms",
            IDLE_WORK_MS,
        ];
        if variant.watch {
            args.push("--watch-leader");
        }
        let mut group = Group::new(config, &format!("cost{index}"), &args);
        let mut proxies = BTreeMap::new();
        for _ in 0..=variant.followers {
            let proxy = Proxy::start(azurite.port);
            let id = group.spawn(&proxy.endpoint());
            proxies.insert(id, proxy);
        }
        runs.push(Run {
            variant,
            group,
            proxies,
            leader: String::new(),
        });
    }
    for run in &mut runs {
        run.leader = run
            .group
            .next_leader(None, Duration::from_secs(60))
            .await?
            .0
            .id;
    }
    Ok(runs)
}

/// Waits out the window, noting each worker's CPU time at its start.
async fn count(runs: &[Run], length: Duration) -> Result<Window> {
    let ticks = clock_ticks();
    let start = Instant::now();
    let mut cpu_before = BTreeMap::new();
    for run in runs {
        for w in run.group.workers() {
            cpu_before.insert(w.id.clone(), (cpu_ticks(w.pid)?, cpu_ns(w.pid)));
        }
    }
    eprintln!(
        "  counting requests for {} s ({} worker processes) ...",
        length.as_secs(),
        cpu_before.len()
    );
    tokio::time::sleep(length).await;
    let end = Instant::now();
    Ok(Window {
        start,
        end,
        seconds: (end - start).as_secs_f64(),
        ticks,
        cpu_before,
    })
}

/// A worker's requests, CPU and memory over the window.
fn measure(run: &Run, worker: &Worker, window: &Window) -> Result<Measured> {
    let requests = run.proxies[&worker.id].kinds_between(window.start, window.end);
    let leader = worker.id == run.leader;
    let main = if leader { Kind::Renew } else { Kind::Acquire };
    let times: Vec<Instant> = requests
        .iter()
        .filter(|(_, k)| *k == main)
        .map(|(at, _)| *at)
        .collect();
    let per_hour_by_interval = match (times.first(), times.last()) {
        (Some(first), Some(last)) if times.len() >= 2 => {
            3600.0 * float(times.len() - 1) / (*last - *first).as_secs_f64()
        }
        _ => f64::NAN,
    };
    let schedule = if leader {
        run.variant.lease / 3
    } else {
        run.variant.retry
    };
    let inspections = requests
        .iter()
        .filter(|(_, k)| *k == Kind::GetProperties)
        .count();
    let (ticks_before, ns_before) = window.cpu_before[&worker.id];
    let cpu = cpu_ticks(worker.pid)?.saturating_sub(ticks_before);
    #[allow(clippy::cast_precision_loss)] // tick counts are small
    let cpu_share = cpu as f64 / window.ticks / window.seconds;
    #[allow(clippy::cast_precision_loss)] // nanoseconds of CPU stay far below 2^52
    let cpu_share_ns = match (ns_before, cpu_ns(worker.pid)) {
        (Some(before), Some(after)) => after.saturating_sub(before) as f64 / 1e9 / window.seconds,
        _ => f64::NAN,
    };
    Ok(Measured {
        id: worker.id.clone(),
        leader,
        counts: count_by_kind(&requests),
        main,
        per_hour_by_count: 3600.0 * float(requests.len()) / window.seconds,
        per_hour_by_interval,
        expected_per_hour: 3600.0 / schedule.as_secs_f64(),
        inspections_per_hour: 3600.0 * float(inspections) / window.seconds,
        watching: run.variant.watch && !leader,
        cpu_share,
        cpu_share_ns,
        hwm_kib: vm_kib(worker.pid, "VmHWM")?,
        rss_kib: vm_kib(worker.pid, "VmRSS")?,
    })
}

/// A variant's row of the table (the followers' rate is their mean) and its
/// JSON object.
fn summarize(variant: &Variant, measured: &[Measured], changed: bool) -> Result<(String, Json)> {
    let renew_secs = variant.lease.as_secs_f64() / 3.0;
    let retry_secs = variant.retry.as_secs_f64();
    let leader = measured
        .iter()
        .find(|m| m.leader)
        .context("leader measured")?;
    let followers: Vec<&Measured> = measured.iter().filter(|m| !m.leader).collect();
    let follower_rate = followers
        .iter()
        .map(|m| m.per_hour_by_interval)
        .sum::<f64>()
        / float(followers.len());
    let inspections = followers
        .iter()
        .map(|m| m.inspections_per_hour)
        .sum::<f64>()
        / float(followers.len());
    let follower_cell = if variant.watch {
        format!(
            "{follower_rate:.0} ({}) + {inspections:.0} inspections",
            percent(follower_rate / (3600.0 / retry_secs) - 1.0)
        )
    } else {
        format!(
            "{follower_rate:.0} ({})",
            percent(follower_rate / (3600.0 / retry_secs) - 1.0)
        )
    };
    // The worst-case waits these options imply: one follower retry for
    // a graceful handover, the whole lease and a retry for a crash.
    let worst_graceful = retry_secs * (1.0 + JITTER);
    let worst_crash = variant.lease.as_secs_f64() + worst_graceful;
    let row = format!(
        "| {} | {} s / {renew_secs:.0} s / {} | {:.0} ({}) | {follower_cell} | {:.0} | {} | {} |",
        variant.name,
        variant.lease.as_secs(),
        if variant.retry >= Duration::from_secs(1) {
            format!("{retry_secs:.0} s")
        } else {
            format!("{} ms", variant.retry.as_millis())
        },
        leader.per_hour_by_interval,
        percent(leader.deviation()),
        leader.per_hour_by_interval + 2.0 * (follower_rate + inspections),
        secs(worst_graceful),
        secs(worst_crash),
    );
    let json = json::obj([
        ("name", json::str(variant.name)),
        ("lease_seconds", json::int(variant.lease.as_secs())),
        ("renew_seconds", json::num(renew_secs)),
        ("acquire_retry_seconds", json::num(retry_secs)),
        ("followers_watch_the_leader", Json::Bool(variant.watch)),
        ("leadership_changed_during_window", Json::Bool(changed)),
        ("worst_graceful_wait_seconds", json::num(worst_graceful)),
        ("worst_crash_wait_seconds", json::num(worst_crash)),
        (
            "workers",
            Json::Array(measured.iter().map(|m| m.json(true)).collect()),
        ),
    ]);
    Ok((row, json))
}

/// Runs every variant at once, waits until each has a leader, then counts
/// requests and CPU over `--cost-secs` in the steady state.
pub(crate) async fn cost(config: &Config, azurite: &Azurite, report: &mut Report) -> Result<()> {
    let mut runs = start(config, azurite).await?;
    // Past the first term's acquire and metadata stamp, into the steady state.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let window = count(&runs, config.cost_window).await?;

    let mut variants_json = Vec::new();
    let mut rows = String::new();
    let mut defaults: Vec<Measured> = Vec::new();
    let mut watchers: Vec<Measured> = Vec::new();
    for run in &mut runs {
        let changed = run.group.drain().iter().any(Event::is_leading);
        let measured = run
            .group
            .workers()
            .iter()
            .map(|w| measure(run, w, &window))
            .collect::<Result<Vec<_>>>()?;
        let (row, json) = summarize(run.variant, &measured, changed)?;
        let _ = writeln!(rows, "{row}");
        variants_json.push(json);
        if run.variant.name == VARIANTS[0].name {
            if changed {
                eprintln!("  warning: leadership changed during the default run's window");
            }
            defaults = measured;
        } else if run.variant.watch {
            watchers = measured.into_iter().filter(|m| !m.leader).collect();
        }
        run.group.stop_all();
    }

    report.section(
        "request_cost",
        json::obj([
            ("window_seconds", json::num(window.seconds)),
            (
                "method",
                json::str(
                    "requests counted at a proxy per worker over the window; per hour = 3600 × \
                     (n − 1) / (last − first) over the schedule's requests (renew for the leader, \
                     acquire for followers), and also count × 3600 / window",
                ),
            ),
            ("variants", Json::Array(variants_json)),
        ]),
    );
    for m in defaults.iter().filter(|m| m.leader) {
        m.target(report, "leader requests/h");
    }
    for m in defaults.iter().filter(|m| !m.leader) {
        m.target(report, &format!("follower requests/h ({})", m.id));
    }
    // A poll per renew interval at most (5 s: 720 an hour), on top of an
    // unchanged acquire schedule.
    for m in &watchers {
        let most = 3600.0 / (VARIANTS[6].lease / 3).as_secs_f64();
        report.target(
            &format!("watching follower inspections/h ({})", m.id),
            format!(
                "{:.0}, acquire {:.0} ({}), outside the schedule: {}",
                m.inspections_per_hour,
                m.per_hour_by_interval,
                percent(m.deviation()),
                m.extra()
            ),
            format!("≤ {most:.0} + 5 %, acquire 3600 ± 5 %"),
            Some(
                m.inspections_per_hour <= most * 1.05
                    && m.deviation().abs() <= 0.05
                    && m.extra() == 0,
            ),
        );
    }

    let d = &mut report.details;
    let _ = writeln!(d, "### Request cost and how it scales\n");
    let _ = writeln!(
        d,
        "Each worker process reaches Azurite through its own counting proxy. All variants run \
         at the same time, each on its own blob, with one leader and one or two followers. \
         Requests are counted over a {:.0} s window in the steady state (after the first \
         term's acquire and metadata stamp) and extrapolated to an hour from the mean interval \
         between the schedule's requests (renew for the leader, acquire for a follower). \
         Lease / renew / retry: lease duration, renew interval (a third of the lease), acquire \
         retry (±20 % jitter). The last two columns are the worst-case waits the options imply \
         for a graceful handover (one follower retry) and for a crash failover (the lease plus \
         one retry). In the last variant every worker holds a receiver of `leader()`, so that \
         each follower also inspects the lease (Get Blob Properties) at most once per renew \
         interval.\n",
        window.seconds
    );
    let _ = writeln!(
        d,
        "| variant | lease / renew / retry | leader req/h (vs schedule) | follower req/h (vs schedule) | 1 leader + 2 followers req/h | worst handover wait | worst failover wait |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|---|---|");
    d.push_str(&rows);
    d.push('\n');
    let _ = writeln!(
        d,
        "Per term a leader also makes 1 acquire, 1 metadata read and 1 metadata write (the \
         epoch stamp) and 1 release when it stops.\n"
    );
    resources::report(report, &defaults, window.seconds, window.ticks)
}
