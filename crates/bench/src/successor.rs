//! Section `successor`: planned handover to a preferred successor
//! (`MutexOptions::priority`), at default options.
//!
//! - **Handover time.** Again and again, each time on a fresh blob: a worker
//!   with priority 0 leads, and a worker with priority 1 starts at a random
//!   moment of the leader's listing cycle. The time runs to the new worker's
//!   `LEADING` line from its first advertisement (the Set Metadata request
//!   that writes its candidate record, as its proxy saw it) and from its
//!   process start. The old leader's proxy shows the listing that found the
//!   candidate, the Change Lease and any release; a watcher reads the lease's
//!   state every 50 ms to see whether it was ever free.
//! - **Advertising cost.** Three workers without a priority and three with
//!   equal priorities (so that nothing hands over), at the same time on two
//!   blobs, each worker behind its own counting proxy: requests per hour by
//!   kind, compared with the formula in BENCHMARKS.md.

use blob_mutex::store::LeaseStore;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use blob_mutex::azure::BlobLeaseManager;
use blob_mutex_testkit::azurite::Azurite;
use blob_mutex_testkit::proxy::{Kind, Proxy};
use blob_mutex_testkit::workers::What;

use crate::group::{Event, Group};
use crate::json::{self, counts_json, Json};
use crate::report::{percent, secs, Report};
use crate::stats::{count_by_kind, float, fresh_rng, stats, Stats};
use crate::{Config, IDLE_WORK_MS, JITTER, RENEW_SECS, RETRY_SECS};

/// How often the watcher reads the lease's state during a handover.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// Instances in each group of the cost measurement.
const INSTANCES: usize = 3;

/// The instants of one handover.
#[derive(Debug, Clone, Copy)]
struct Timeline {
    /// The new worker's process was started.
    started: Instant,
    /// Its first Set Metadata request: the write of its candidate record.
    advertised: Option<Instant>,
    /// The old leader's last List Blobs request before its Change Lease:
    /// the listing that found the candidate.
    listed: Option<Instant>,
    /// The old leader's first Change Lease request.
    changed: Option<Instant>,
    /// The old leader's `STOPPED` line.
    stopped: Option<Instant>,
    /// The new worker's `LEADING` line.
    led: Instant,
}

/// The first request of `kind` sent in `[from, to)`.
fn first(requests: &[(Instant, Kind)], kind: Kind, from: Instant, to: Instant) -> Option<Instant> {
    requests
        .iter()
        .find(|(at, k)| *k == kind && *at >= from && *at < to)
        .map(|(at, _)| *at)
}

/// The last request of `kind` sent in `[from, to)`.
fn last(requests: &[(Instant, Kind)], kind: Kind, from: Instant, to: Instant) -> Option<Instant> {
    requests
        .iter()
        .rev()
        .find(|(at, k)| *k == kind && *at >= from && *at < to)
        .map(|(at, _)| *at)
}

/// How many requests of `kind` were sent in `[from, to)`.
fn how_many(requests: &[(Instant, Kind)], kind: Kind, from: Instant, to: Instant) -> usize {
    requests
        .iter()
        .filter(|(at, k)| *k == kind && *at >= from && *at < to)
        .count()
}

/// Seconds from `a` to `b`, negative when `b` came first; `NaN` when
/// either is unknown.
fn span(a: Option<Instant>, b: Option<Instant>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) => {
            b.saturating_duration_since(a).as_secs_f64()
                - a.saturating_duration_since(b).as_secs_f64()
        }
        _ => f64::NAN,
    }
}

impl Timeline {
    /// The moments, from the requests of the old leader and of the new
    /// worker (in the order their proxies logged them) and the two lines.
    fn read(
        old: &[(Instant, Kind)],
        new: &[(Instant, Kind)],
        started: Instant,
        stopped: Option<Instant>,
        led: Instant,
    ) -> Timeline {
        // The new worker stamps the main blob's metadata only after it
        // acquired, just before `LEADING`; its first Set Metadata before
        // that is its candidate record.
        let advertised = first(new, Kind::SetMetadata, started, led);
        let changed = first(old, Kind::Change, started, led);
        let listed = changed.and_then(|c| last(old, Kind::List, started, c));
        Timeline {
            started,
            advertised,
            listed,
            changed,
            stopped,
            led,
        }
    }

    fn advert_to_leading(&self) -> f64 {
        span(self.advertised, Some(self.led))
    }

    fn start_to_leading(&self) -> f64 {
        span(Some(self.started), Some(self.led))
    }

    /// The wait for the leader's listing cycle.
    fn advert_to_listing(&self) -> f64 {
        span(self.advertised, self.listed)
    }

    /// The listing's answer, the term's drain and its report.
    fn listing_to_change(&self) -> f64 {
        span(self.listed, self.changed)
    }

    /// The candidate's next attempt, its acquire and its epoch stamp.
    fn change_to_leading(&self) -> f64 {
        span(self.changed, Some(self.led))
    }

    /// The old leader's `STOPPED` to the new one's `LEADING`.
    fn gap(&self) -> f64 {
        span(self.stopped, Some(self.led))
    }
}

/// One handover and what could go wrong in it.
struct Sample {
    timeline: Timeline,
    /// The old leader's `STOPPED` line named the handover as the reason.
    reason_handover: bool,
    /// The new term's epoch was the old one's + 1.
    next_epoch: bool,
    /// The old leader's Change Lease and Release requests from the new
    /// worker's start to its `LEADING`, and Break requests of either, ever.
    changes: usize,
    releases: usize,
    breaks: usize,
    /// The watcher's reads of the lease state, and how many found it free.
    reads: usize,
    free_reads: usize,
}

impl Sample {
    /// The lease was (or may have been) free: a read found it so, or the
    /// old leader released it instead of changing it.
    fn lease_was_free(&self) -> bool {
        self.free_reads > 0 || self.releases > 0 || self.changes == 0
    }
}

/// Reads the lease's state every [`WATCH_EVERY`] until stopped.
struct Watcher {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(usize, usize)>,
}

impl Watcher {
    fn start(lease: BlobLeaseManager) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let (mut reads, mut free) = (0, 0);
            while !flag.load(Ordering::SeqCst) {
                if let Ok(Some(info)) = lease.inspect().await {
                    reads += 1;
                    if info.state.is_free() {
                        free += 1;
                    }
                }
                tokio::time::sleep(WATCH_EVERY).await;
            }
            (reads, free)
        });
        Watcher { stop, task }
    }

    /// The number of reads, and of reads that found the lease free.
    async fn stop(self) -> Result<(usize, usize)> {
        self.stop.store(true, Ordering::SeqCst);
        Ok(self.task.await?)
    }
}

/// One handover on a blob of its own: priority 0 leads, priority 1 starts
/// `pause` after that, and leads after the handover.
async fn handover_once(
    config: &Config,
    azurite: &Azurite,
    rep: usize,
    pause: Duration,
) -> Result<Sample> {
    let began = Instant::now();
    let mut group = Group::new(
        config,
        &format!("successor{rep}"),
        &["--work-ms", IDLE_WORK_MS],
    );
    let (old_proxy, new_proxy) = (Proxy::start(azurite.port), Proxy::start(azurite.port));
    let old = group.spawn_with(&old_proxy.endpoint(), &["--priority", "0"]);
    let (first_term, _) = group.next_leader(None, Duration::from_secs(60)).await?;
    // The leader's listing cycle starts with its term.
    tokio::time::sleep(pause).await;
    let lease = BlobLeaseManager::new(&azurite.settings(group.container(), "leader"))?;
    let watcher = Watcher::start(lease);
    let started = Instant::now();
    let new = group.spawn_with(&new_proxy.endpoint(), &["--priority", "1"]);
    let (next, seen) = group
        .next_leader(Some(&old), Duration::from_secs(60))
        .await?;
    let (reads, free_reads) = watcher.stop().await?;
    ensure!(next.id == new, "{} led instead of {new}", next.id);
    let stopped = seen.iter().find(|e| e.id == old && e.is_stopped());
    let now = Instant::now();
    let (old_log, new_log) = (
        old_proxy.kinds_between(began, now),
        new_proxy.kinds_between(began, now),
    );
    let led = next.at;
    let sample = Sample {
        timeline: Timeline::read(&old_log, &new_log, started, stopped.map(|e| e.at), led),
        reason_handover: stopped.is_some_and(
            |e| matches!(&e.what, What::Stopped { reason, .. } if reason == "handover"),
        ),
        next_epoch: matches!((first_term.epoch(), next.epoch()), (Some(a), Some(b)) if b == a + 1),
        changes: how_many(&old_log, Kind::Change, started, led),
        releases: how_many(&old_log, Kind::Release, started, led),
        breaks: how_many(&old_log, Kind::Break, began, now)
            + how_many(&new_log, Kind::Break, began, now),
        reads,
        free_reads,
    };
    group.stop_all();
    Ok(sample)
}

/// Requests per hour from the times of one kind: `3600 × (n − 1) / (last −
/// first)`; 0 when there are none, `NaN` when there is one.
fn per_hour_by_interval(times: &[Instant]) -> f64 {
    match (times.first(), times.last()) {
        (None, _) | (_, None) => 0.0,
        (Some(first), Some(last)) if times.len() >= 2 && last > first => {
            3600.0 * float(times.len() - 1) / (*last - *first).as_secs_f64()
        }
        _ => f64::NAN,
    }
}

/// What the formula in BENCHMARKS.md says `instances` instances with a
/// priority add per hour: the leader's listings and each waiting
/// candidate's renewals, one of each per renew interval.
fn formula_extra_per_hour(instances: usize, renew_secs: f64) -> f64 {
    float(instances) * 3600.0 / renew_secs
}

/// One worker of the cost measurement, over the window.
struct Member {
    id: String,
    leader: bool,
    requests: Vec<(Instant, Kind)>,
}

impl Member {
    fn times(&self, kind: Kind) -> Vec<Instant> {
        self.requests
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(at, _)| *at)
            .collect()
    }

    /// Per hour, of the kinds advertising adds: the leader's List Blobs
    /// calls, a follower's renewals (of its candidate record; a follower
    /// renews nothing else).
    fn advertising_per_hour(&self) -> f64 {
        let kind = if self.leader { Kind::List } else { Kind::Renew };
        per_hour_by_interval(&self.times(kind))
    }
}

/// Three workers on one blob, with or without a priority.
struct Flock {
    name: &'static str,
    priority: bool,
    members: Vec<Member>,
    /// Leadership changed during the window.
    changed: bool,
}

impl Flock {
    fn total_per_hour(&self, seconds: f64) -> f64 {
        let n: usize = self.members.iter().map(|m| m.requests.len()).sum();
        3600.0 * float(n) / seconds
    }

    fn advertising_per_hour(&self) -> f64 {
        self.members.iter().map(Member::advertising_per_hour).sum()
    }

    fn counts(&self) -> BTreeMap<Kind, usize> {
        let all: Vec<(Instant, Kind)> = self
            .members
            .iter()
            .flat_map(|m| m.requests.iter().copied())
            .collect();
        count_by_kind(&all)
    }
}

/// Runs both groups at once, waits until each has a leader and past the
/// first term's requests, then counts over `--successor-secs`.
async fn advertising_cost(config: &Config, azurite: &Azurite) -> Result<(Vec<Flock>, f64)> {
    let mut runs = Vec::new();
    for (name, prefix, args) in [
        ("without priorities", "advert-none", &[][..]),
        ("with priorities", "advert-prio", &["--priority", "1"][..]),
    ] {
        let mut group = Group::new(config, prefix, &["--work-ms", IDLE_WORK_MS]);
        let mut proxies = BTreeMap::new();
        for _ in 0..INSTANCES {
            let proxy = Proxy::start(azurite.port);
            proxies.insert(group.spawn_with(&proxy.endpoint(), args), proxy);
        }
        runs.push((name, !args.is_empty(), group, proxies));
    }
    let mut leaders = Vec::new();
    for (_, _, group, _) in &mut runs {
        leaders.push(group.next_leader(None, Duration::from_secs(60)).await?.0.id);
    }
    // Past the first term's acquire and stamp and the candidates' first
    // advertisement, into the steady state.
    tokio::time::sleep(Duration::from_secs(3)).await;
    eprintln!(
        "  counting requests for {} s (2 × {INSTANCES} workers) ...",
        config.successor_window.as_secs()
    );
    let start = Instant::now();
    tokio::time::sleep(config.successor_window).await;
    let end = Instant::now();
    let mut flocks = Vec::new();
    for ((name, priority, mut group, proxies), leader) in runs.into_iter().zip(leaders) {
        let changed = group.drain().iter().any(Event::is_leading);
        let members = proxies
            .iter()
            .map(|(id, proxy)| Member {
                id: id.clone(),
                leader: *id == leader,
                requests: proxy.kinds_between(start, end),
            })
            .collect();
        group.stop_all();
        flocks.push(Flock {
            name,
            priority,
            members,
            changed,
        });
    }
    Ok((flocks, (end - start).as_secs_f64()))
}

/// Measures both and reports them.
pub(crate) async fn successor(
    config: &Config,
    azurite: &Azurite,
    report: &mut Report,
) -> Result<()> {
    let mut rng = fresh_rng();
    let mut samples = Vec::new();
    let reps = config.successor_reps;
    for rep in 1..=reps {
        // Anywhere in the leader's 5 s listing cycle.
        let pause = rng.between(Duration::from_millis(500), Duration::from_millis(5500));
        let sample = handover_once(config, azurite, rep, pause).await?;
        eprintln!(
            "  successor {rep}/{reps}: led {} after the advertisement, {} after the start; \
             gap {}",
            secs(sample.timeline.advert_to_leading()),
            secs(sample.timeline.start_to_leading()),
            secs(sample.timeline.gap())
        );
        samples.push(sample);
    }
    report_handover(report, &samples);
    eprintln!("advertising cost: {INSTANCES} instances without and with priorities ...");
    let (flocks, seconds) = advertising_cost(config, azurite).await?;
    report_cost(report, &flocks, seconds).context("report the advertising cost")
}

/// The finite values of one measure over the samples.
fn column(samples: &[Sample], measure: Measure) -> Vec<f64> {
    samples
        .iter()
        .map(|s| measure(&s.timeline))
        .filter(|v| v.is_finite())
        .collect()
}

/// One renew interval (the leader's listing cycle) plus the candidate's
/// longest retry.
fn handover_bound() -> f64 {
    RENEW_SECS + RETRY_SECS * (1.0 + JITTER)
}

fn stats_row(name: &str, s: &Stats) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} |",
        s.n,
        secs(s.min),
        secs(s.median),
        secs(s.p95),
        secs(s.max),
        secs(s.mean)
    )
}

/// One measure of a handover, in seconds.
type Measure = fn(&Timeline) -> f64;

/// The measures of the handover table: name, JSON key, how to read it.
const MEASURES: [(&str, &str, Measure); 6] = [
    (
        "first advertisement → new `LEADING`",
        "advertisement_to_leading",
        Timeline::advert_to_leading,
    ),
    (
        "new process start → new `LEADING`",
        "process_start_to_leading",
        Timeline::start_to_leading,
    ),
    (
        "advertisement → the listing that found it",
        "advertisement_to_listing",
        Timeline::advert_to_listing,
    ),
    (
        "that listing → Change Lease (drain)",
        "listing_to_change",
        Timeline::listing_to_change,
    ),
    (
        "Change Lease → new `LEADING`",
        "change_to_leading",
        Timeline::change_to_leading,
    ),
    (
        "gap: old `STOPPED` → new `LEADING`",
        "gap_stopped_to_leading",
        Timeline::gap,
    ),
];

fn report_handover(report: &mut Report, samples: &[Sample]) {
    let bound = handover_bound();
    let main = stats(&column(samples, Timeline::advert_to_leading));
    let from_start = stats(&column(samples, Timeline::start_to_leading));
    let free = samples.iter().filter(|s| s.lease_was_free()).count();
    let not_handover = samples.iter().filter(|s| !s.reason_handover).count();
    let bad_epoch = samples.iter().filter(|s| !s.next_epoch).count();
    let breaks: usize = samples.iter().map(|s| s.breaks).sum();
    let changes: usize = samples.iter().map(|s| s.changes).sum();
    let releases: usize = samples.iter().map(|s| s.releases).sum();
    let reads: usize = samples.iter().map(|s| s.reads).sum();
    let free_reads: usize = samples.iter().map(|s| s.free_reads).sum();
    let mut fields: Vec<(&str, Json)> = MEASURES
        .iter()
        .map(|(_, key, measure)| (*key, json::stats(&stats(&column(samples, *measure)))))
        .collect();
    fields.extend([
        (
            "advertisement_to_leading_samples",
            json::nums(&column(samples, Timeline::advert_to_leading)),
        ),
        ("bound_seconds", json::num(bound)),
        ("repetitions", json::count(samples.len())),
        ("lease_free_in", json::count(free)),
        ("stopped_not_for_handover", json::count(not_handover)),
        ("epoch_not_plus_one", json::count(bad_epoch)),
        ("change_requests", json::count(changes)),
        ("release_requests_by_old_leader", json::count(releases)),
        ("break_requests", json::count(breaks)),
        ("lease_state_reads", json::count(reads)),
        ("lease_state_reads_free", json::count(free_reads)),
    ]);
    report.section("successor_handover", json::obj(fields));
    report.target(
        &format!("handover to a preferred successor p95 (n = {})", main.n),
        format!(
            "{} (median {}, max {}); from process start: p95 {}",
            secs(main.p95),
            secs(main.median),
            secs(main.max),
            secs(from_start.p95)
        ),
        format!("≤ {} (renew + one retry)", secs(bound)),
        Some(main.p95 <= bound),
    );
    report.target(
        "lease free during a handover",
        format!("{free} of {}", samples.len()),
        "never".to_owned(),
        Some(free == 0 && not_handover == 0 && bad_epoch == 0 && breaks == 0),
    );
    let d = &mut report.details;
    let _ = writeln!(d, "### Handover to a preferred successor\n");
    let _ = writeln!(
        d,
        "Two worker processes per repetition, on a blob of their own, each behind its own \
         counting proxy, at default options: priority 0 leads; priority 1 starts 0.5–5.5 s \
         after that (anywhere in the leader's 5 s listing cycle). The advertisement is the \
         new worker's first Set Metadata request (the write of its candidate record; its \
         record acquire goes one round trip before). The listing and the Change Lease are \
         the old leader's requests. Bound: one renew interval + the longest retry = {}.\n",
        secs(bound)
    );
    let _ = writeln!(d, "| from → to | n | min | median | p95 | max | mean |");
    let _ = writeln!(d, "|---|---|---|---|---|---|---|");
    for (name, _, measure) in &MEASURES {
        let _ = writeln!(d, "{}", stats_row(name, &stats(&column(samples, *measure))));
    }
    let _ = writeln!(
        d,
        "\nLease free in {free} of {n} handovers ({reads} reads of its state every 50 ms, \
         {free_reads} found it free; {changes} Change Lease and {releases} Release requests \
         from the old leaders). Old leader stopped for another reason than the handover: \
         {not_handover}; new epoch not the old + 1: {bad_epoch}; Break requests: {breaks}.\n",
        n = samples.len()
    );
}

fn report_cost(report: &mut Report, flocks: &[Flock], seconds: f64) -> Result<()> {
    let none = flocks
        .iter()
        .find(|f| !f.priority)
        .context("group without priorities")?;
    let prio = flocks
        .iter()
        .find(|f| f.priority)
        .context("group with priorities")?;
    let formula = formula_extra_per_hour(INSTANCES, RENEW_SECS);
    let extra = prio.advertising_per_hour() - none.advertising_per_hour();
    let total_none = none.total_per_hour(seconds);
    let total_prio = prio.total_per_hour(seconds);
    let deviation = extra / formula - 1.0;
    let flock_json = |f: &Flock| {
        json::obj([
            ("name", json::str(f.name)),
            ("leadership_changed_during_window", Json::Bool(f.changed)),
            ("requests_in_window", counts_json(&f.counts())),
            ("per_hour_by_count", json::num(f.total_per_hour(seconds))),
            (
                "advertising_per_hour_by_interval",
                json::num(f.advertising_per_hour()),
            ),
            (
                "workers",
                Json::Array(
                    f.members
                        .iter()
                        .map(|m| {
                            json::obj([
                                ("id", json::str(&m.id)),
                                (
                                    "role",
                                    json::str(if m.leader { "leader" } else { "follower" }),
                                ),
                                (
                                    "requests_in_window",
                                    counts_json(&count_by_kind(&m.requests)),
                                ),
                                ("advertising_per_hour", json::num(m.advertising_per_hour())),
                            ])
                        })
                        .collect(),
                ),
            ),
        ])
    };
    report.section(
        "successor_advertising_cost",
        json::obj([
            ("window_seconds", json::num(seconds)),
            ("formula_extra_per_hour", json::num(formula)),
            ("extra_per_hour_by_interval", json::num(extra)),
            (
                "extra_per_hour_by_count",
                json::num(total_prio - total_none),
            ),
            (
                "groups",
                Json::Array(flocks.iter().map(flock_json).collect()),
            ),
        ]),
    );
    report.target(
        &format!("advertising, {INSTANCES} instances with priorities, req/h"),
        format!("+{extra:.0} ({})", percent(deviation)),
        format!("+{formula:.0} ± 5 %"),
        Some(deviation.abs() <= 0.05 && !prio.changed && !none.changed),
    );
    cost_details(report, flocks, seconds, extra, formula);
    Ok(())
}

fn cost_details(report: &mut Report, flocks: &[Flock], seconds: f64, extra: f64, formula: f64) {
    let d = &mut report.details;
    let _ = writeln!(d, "### What advertising costs\n");
    let _ = writeln!(
        d,
        "{INSTANCES} worker processes without a priority and {INSTANCES} with priority 1 each \
         (equal, so that nothing hands over), at the same time on two blobs, each worker \
         behind its own counting proxy, at default options; requests counted over {seconds:.0} \
         s in the steady state. Per hour by count = 3600 × requests / window; the advertising \
         kinds (the leader's List Blobs, the followers' renewals of their candidate records) \
         also per hour from the mean interval between them.\n"
    );
    let _ = writeln!(d, "| group | requests in window, by kind | all, per hour by count | List + record renewals, per hour by interval |");
    let _ = writeln!(d, "|---|---|---|---|");
    for f in flocks {
        let kinds: Vec<String> = f
            .counts()
            .iter()
            .map(|(k, n)| format!("{} {n}", k.name()))
            .collect();
        let _ = writeln!(
            d,
            "| {}{} | {} | {:.0} | {:.0} |",
            f.name,
            if f.changed {
                " (leadership changed)"
            } else {
                ""
            },
            kinds.join(", "),
            f.total_per_hour(seconds),
            f.advertising_per_hour()
        );
    }
    let _ = writeln!(
        d,
        "\nAdded by priorities: {extra:.0} requests per hour by interval; the formula says \
         {INSTANCES} × 3600 / {RENEW_SECS:.0} s = {formula:.0}.\n"
    );
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact small values
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn a_timeline_takes_the_advertisement_the_deciding_listing_and_the_change() {
        let t0 = Instant::now();
        let old = [
            (at(t0, 100), Kind::List),
            (at(t0, 1000), Kind::Renew),
            (at(t0, 5100), Kind::List),
            (at(t0, 5120), Kind::Change),
            (at(t0, 7000), Kind::Acquire),
        ];
        let new = [
            (at(t0, 20), Kind::Acquire),
            (at(t0, 30), Kind::Acquire),
            (at(t0, 40), Kind::SetMetadata),
            (at(t0, 6010), Kind::Acquire),
            (at(t0, 6020), Kind::SetMetadata),
        ];
        let t = Timeline::read(&old, &new, at(t0, 10), Some(at(t0, 5110)), at(t0, 6030));
        assert_eq!(t.advertised, Some(at(t0, 40)));
        assert_eq!(t.listed, Some(at(t0, 5100)));
        assert_eq!(t.changed, Some(at(t0, 5120)));
        assert!((t.advert_to_leading() - 5.99).abs() < 1e-9);
        assert!((t.start_to_leading() - 6.02).abs() < 1e-9);
        assert!((t.advert_to_listing() - 5.06).abs() < 1e-9);
        assert!((t.listing_to_change() - 0.02).abs() < 1e-9);
        assert!((t.change_to_leading() - 0.91).abs() < 1e-9);
        assert!((t.gap() - 0.92).abs() < 1e-9);
    }

    #[test]
    fn missing_moments_are_nan_and_order_is_signed() {
        let t0 = Instant::now();
        let t = Timeline::read(&[], &[], t0, None, at(t0, 500));
        assert!(t.advertised.is_none() && t.listed.is_none() && t.changed.is_none());
        assert!(t.advert_to_leading().is_nan());
        assert!(t.gap().is_nan());
        assert!((t.start_to_leading() - 0.5).abs() < 1e-9);
        assert!((span(Some(at(t0, 300)), Some(at(t0, 100))) + 0.2).abs() < 1e-9);
    }

    #[test]
    fn a_lease_is_free_when_read_so_or_released_or_never_changed() {
        let t0 = Instant::now();
        let sample = |changes, releases, free_reads| Sample {
            timeline: Timeline::read(&[], &[], t0, None, t0),
            reason_handover: true,
            next_epoch: true,
            changes,
            releases,
            breaks: 0,
            reads: 10,
            free_reads,
        };
        assert!(!sample(1, 0, 0).lease_was_free());
        assert!(sample(0, 0, 0).lease_was_free());
        assert!(sample(1, 1, 0).lease_was_free());
        assert!(sample(1, 0, 1).lease_was_free());
    }

    #[test]
    fn rates_per_hour_from_intervals() {
        let t0 = Instant::now();
        assert_eq!(per_hour_by_interval(&[]), 0.0);
        assert!(per_hour_by_interval(&[t0]).is_nan());
        let every_five: Vec<Instant> = (0..13).map(|i| at(t0, i * 5000)).collect();
        assert!((per_hour_by_interval(&every_five) - 720.0).abs() < 1e-9);
    }

    #[test]
    fn the_formula_is_one_request_per_instance_per_renew_interval() {
        assert_eq!(formula_extra_per_hour(3, 5.0), 2160.0);
        assert_eq!(formula_extra_per_hour(1, 2.0), 1800.0);
    }

    #[test]
    fn advertising_kinds_are_the_leaders_lists_and_the_followers_renewals() {
        let t0 = Instant::now();
        let requests: Vec<(Instant, Kind)> = (0..5)
            .flat_map(|i| {
                [
                    (at(t0, i * 5000), Kind::List),
                    (at(t0, i * 5000 + 10), Kind::Renew),
                ]
            })
            .collect();
        let member = |leader| Member {
            id: "w".to_owned(),
            leader,
            requests: requests.clone(),
        };
        assert!((member(true).advertising_per_hour() - 720.0).abs() < 1e-9);
        assert!((member(false).advertising_per_hour() - 720.0).abs() < 1e-9);
        let flock = Flock {
            name: "x",
            priority: true,
            members: vec![member(true), member(false)],
            changed: false,
        };
        assert!((flock.advertising_per_hour() - 1440.0).abs() < 1e-9);
        assert!((flock.total_per_hour(20.0) - 3600.0).abs() < 1e-9);
        assert_eq!(flock.counts()[&Kind::List], 10);
    }
}
