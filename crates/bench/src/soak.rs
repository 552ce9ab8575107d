//! Section `soak`: this process runs for `--soak-secs` with churn, and its own
//! resident memory, open file descriptors, live tokio tasks and CPU are
//! sampled, to show that nothing grows after a warm-up.
//!
//! What runs, all against one Azurite:
//! - **A lease set of `--set-size` partitions** (1 000 by default): one
//!   instance (`steady`) the whole time, and a second one that joins for half
//!   of every cycle (`--soak-cycle-secs`, 120 s) and then leaves, gracefully
//!   (its token cancelled, its partitions drained and released, its member
//!   blob deleted) and by a crash (its `run` future aborted, so its leases
//!   expire and its member blob is left to collection) in turn. Every rejoin
//!   is a new holder name, as a restarted process would be.
//! - **One mutex with churn**: two contenders in this process and one
//!   `fault-worker` process on the same blob. Every `--soak-churn-secs` (20 s)
//!   one of the three is stopped and started again, in turn, alternately
//!   gracefully (token cancelled, or SIGTERM) and by a crash (the campaign's
//!   task aborted, or SIGKILL); each restart builds a new mutex, with its own
//!   HTTP client, as a restarted process does.
//!
//! Two series are sampled from `/proc/self` and the tokio runtime: one every
//! few seconds (for the curves in `results.json`), and one at the same point
//! of every cycle (just before the second instance rejoins, when `steady`
//! owns the whole set again), which is what the slopes are fitted to: the
//! figures swing by a factor of two within a cycle as partitions move, so
//! only samples taken at the same phase can be compared. The first
//! `--soak-warmup-secs` (a sixth of the run by default) are left out of the
//! fit. A figure "grows beyond noise" when its fitted growth over the run
//! after warm-up exceeds twice the standard deviation of the residuals (and
//! a floor: 1 MiB, one descriptor, one task, 0.2 % of a core).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use blob_mutex::{
    term::Leadership, BlobDistributedMutex, BlobLeaseSet, BlobSettings, CancellationToken,
    LeaseSetOptions, PartitionContext,
};
use blob_mutex_testkit::azurite::{unique_container, Azurite};
use tokio::task::JoinHandle;

use crate::footprint::{clock_ticks, cpu_ticks, vm_kib};
use crate::group::Group;
use crate::json::{self, Json};
use crate::report::Report;
use crate::stats::fit;
use crate::{Config, IDLE_WORK_MS};

/// One reading of this process.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Seconds since the section started.
    at: f64,
    rss_kib: u64,
    fds: usize,
    tasks: usize,
    cpu_ticks: u64,
    /// Partitions `steady` owned when the sample was taken.
    owned: usize,
}

impl Sample {
    fn take(began: Instant, owned: usize) -> Result<Sample> {
        let pid = std::process::id();
        Ok(Sample {
            at: began.elapsed().as_secs_f64(),
            rss_kib: vm_kib(pid, "VmRSS")?,
            fds: std::fs::read_dir("/proc/self/fd")
                .context("list /proc/self/fd")?
                .count(),
            tasks: tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
            cpu_ticks: cpu_ticks(pid)?,
            owned,
        })
    }

    fn json(&self) -> Json {
        json::obj([
            ("at_seconds", json::num(self.at)),
            ("rss_kib", json::int(self.rss_kib)),
            ("fds", json::count(self.fds)),
            ("tokio_tasks", json::count(self.tasks)),
            ("cpu_ticks", json::int(self.cpu_ticks)),
            ("steady_owned", json::count(self.owned)),
        ])
    }
}

/// What the churn did, counted as it happened.
#[derive(Default)]
struct Churn {
    set_graceful: AtomicUsize,
    set_crashes: AtomicUsize,
    set_errors: AtomicUsize,
    mutex_graceful: AtomicUsize,
    mutex_crashes: AtomicUsize,
    mutex_terms: AtomicUsize,
    mutex_errors: AtomicUsize,
}

impl Churn {
    fn json(&self) -> Json {
        let n = |a: &AtomicUsize| json::count(a.load(Ordering::Relaxed));
        json::obj([
            ("set_graceful_leaves", n(&self.set_graceful)),
            ("set_crashes", n(&self.set_crashes)),
            ("set_runs_ended_with_error", n(&self.set_errors)),
            ("mutex_graceful_stops", n(&self.mutex_graceful)),
            ("mutex_crashes", n(&self.mutex_crashes)),
            ("mutex_terms_started", n(&self.mutex_terms)),
            ("mutex_campaigns_ended_with_error", n(&self.mutex_errors)),
        ])
    }
}

/// The soak's options (see the module docs).
pub(crate) struct Soak {
    pub(crate) duration: Duration,
    pub(crate) cycle: Duration,
    pub(crate) churn: Duration,
    pub(crate) warmup: Option<Duration>,
}

/// A partition's task: owns it until told to stop.
async fn idle_partition(ctx: PartitionContext) -> Result<()> {
    ctx.cancelled().await;
    Ok(())
}

pub(crate) async fn soak(config: &Config, azurite: &Azurite, report: &mut Report) -> Result<()> {
    let soak = &config.soak;
    let began = Instant::now();
    let stop = CancellationToken::new();
    let churn = Arc::new(Churn::default());
    let readings = Arc::new(Mutex::new(Vec::new()));

    let container = unique_container("bench-soak");
    let set_settings = azurite.settings(&container, "set");
    let partitions: Vec<String> = (0..config.set_size).map(|i| format!("p{i:04}")).collect();
    let steady = Arc::new(lease_set(&set_settings, &partitions, "steady")?);
    let steady_stop = stop.child_token();
    let steady_run = tokio::spawn({
        let (steady, token) = (steady.clone(), steady_stop.clone());
        async move { steady.run(token).await }
    });
    let owned = steady.watch();
    let sampler = tokio::spawn(sample_every(
        Duration::from_secs(5),
        began,
        owned.clone(),
        readings.clone(),
        stop.clone(),
    ));
    let mutex_churn = mutex_churn(config, azurite, soak.churn, churn.clone(), stop.clone());
    let set_churn = set_churn(
        SetChurn {
            settings: &set_settings,
            partitions: &partitions,
            cycle: soak.cycle,
            began,
            owned,
            churn: &churn,
        },
        stop.clone(),
    );
    let (phase, mutex_result, ()) = tokio::join!(set_churn, mutex_churn, async {
        tokio::time::sleep(soak.duration).await;
        stop.cancel();
    });
    let _ = sampler.await;
    steady_stop.cancel();
    match tokio::time::timeout(Duration::from_secs(60), steady_run).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => eprintln!("  steady lease set ended with an error: {e}"),
        Ok(Err(e)) => eprintln!("  steady lease set's task failed: {e}"),
        Err(_) => eprintln!("  steady lease set did not stop within 60 s"),
    }
    mutex_result?;
    let phase = phase?;
    let continuous = readings.lock().expect("readings").clone();
    let warmup = soak.warmup.unwrap_or(soak.duration / 6).as_secs_f64();
    write_report(config, report, &phase, &continuous, warmup, &churn);
    Ok(())
}

fn lease_set(
    settings: &BlobSettings,
    partitions: &[String],
    holder: &str,
) -> Result<BlobLeaseSet<blob_mutex::azure::BlobLeaseSetStore>> {
    let options = LeaseSetOptions::default();
    let mutex = options.mutex().clone().with_holder(holder.to_owned());
    Ok(BlobLeaseSet::new(
        settings,
        partitions.iter().cloned(),
        options.with_mutex(mutex),
        idle_partition,
    )?)
}

async fn sample_every(
    every: Duration,
    began: Instant,
    owned: tokio::sync::watch::Receiver<std::collections::BTreeMap<String, u64>>,
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = ticks.tick() => {
                let owned = owned.borrow().len();
                match Sample::take(began, owned) {
                    Ok(s) => samples.lock().expect("samples").push(s),
                    Err(e) => eprintln!("  soak: sample failed: {e:#}"),
                }
            }
        }
    }
}

struct SetChurn<'a> {
    settings: &'a BlobSettings,
    partitions: &'a [String],
    cycle: Duration,
    began: Instant,
    owned: tokio::sync::watch::Receiver<std::collections::BTreeMap<String, u64>>,
    churn: &'a Churn,
}

/// The second instance of the set joins for half a cycle and leaves, in
/// turn gracefully and by a crash; one sample is taken at the end of every
/// cycle, before it rejoins. Returns those samples.
async fn set_churn(c: SetChurn<'_>, stop: CancellationToken) -> Result<Vec<Sample>> {
    let mut phase = Vec::new();
    let half = c.cycle / 2;
    for round in 0usize.. {
        if stop.is_cancelled() {
            break;
        }
        let mut owned = c.owned.clone();
        let settled = tokio::time::timeout(half, owned.wait_for(|o| o.len() == c.partitions.len()));
        let _ = settled.await;
        if stop.is_cancelled() {
            break;
        }
        phase.push(Sample::take(c.began, c.owned.borrow().len())?);
        let set = Arc::new(lease_set(
            c.settings,
            c.partitions,
            &format!("restart-{round}"),
        )?);
        let token = CancellationToken::new();
        let run: JoinHandle<blob_mutex::Result<()>> = tokio::spawn({
            let (set, token) = (set.clone(), token.clone());
            async move { set.run(token).await }
        });
        tokio::select! {
            () = tokio::time::sleep(half) => {}
            () = stop.cancelled() => {}
        }
        if round % 2 == 0 {
            token.cancel();
            c.churn.set_graceful.fetch_add(1, Ordering::Relaxed);
            match tokio::time::timeout(Duration::from_secs(60), run).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    c.churn.set_errors.fetch_add(1, Ordering::Relaxed);
                    eprintln!("  soak: a set instance ended with an error: {e}");
                }
                Ok(Err(e)) => eprintln!("  soak: a set instance's task failed: {e}"),
                Err(_) => eprintln!("  soak: a set instance did not leave within 60 s"),
            }
        } else {
            run.abort();
            let _ = run.await;
            c.churn.set_crashes.fetch_add(1, Ordering::Relaxed);
        }
        drop(set);
        // The crash's leases expire and `steady` takes them back before the
        // next phase sample (the wait at the top of the loop).
        tokio::select! {
            () = tokio::time::sleep(half) => {}
            () = stop.cancelled() => {}
        }
    }
    Ok(phase)
}

/// One contender of the mutex in this process: its campaign's task and the
/// token that stops it gracefully.
struct Contender {
    run: JoinHandle<()>,
    token: CancellationToken,
}

fn contender(settings: &BlobSettings, churn: &Arc<Churn>) -> Result<Contender> {
    let mutex = BlobDistributedMutex::new(settings.clone(), |ctx| async move {
        ctx.cancelled().await;
        Ok::<(), std::convert::Infallible>(())
    })?;
    let token = CancellationToken::new();
    let churn = churn.clone();
    let stop = token.clone();
    let run = tokio::spawn(async move {
        let mut watch = mutex.watch();
        let counter = churn.clone();
        let terms = async move {
            while watch.changed().await.is_ok() {
                if matches!(*watch.borrow_and_update(), Leadership::Leader { .. }) {
                    counter.mutex_terms.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        tokio::select! {
            result = mutex.run_task_when_mutex_acquired(stop) => if let Err(e) = result {
                churn.mutex_errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("  soak: a mutex campaign ended with an error: {e}");
            },
            () = terms => {}
        }
    });
    Ok(Contender { run, token })
}

/// Stops one of the three contenders every `every`, in turn, alternately
/// gracefully and by a crash, and starts it again.
async fn mutex_churn(
    config: &Config,
    azurite: &Azurite,
    every: Duration,
    churn: Arc<Churn>,
    stop: CancellationToken,
) -> Result<()> {
    let mut group = Group::new(config, "soakmutex", &["--work-ms", IDLE_WORK_MS]);
    let settings = azurite.settings(group.container(), "leader");
    let mut local = [contender(&settings, &churn)?, contender(&settings, &churn)?];
    let mut worker = group.spawn(&azurite.endpoint);
    for round in 0usize.. {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => break,
        }
        let graceful = (round / 3) % 2 == 0;
        let counter = if graceful {
            &churn.mutex_graceful
        } else {
            &churn.mutex_crashes
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let slot = round % 3;
        if slot < 2 {
            let old = std::mem::replace(&mut local[slot], contender(&settings, &churn)?);
            if graceful {
                old.token.cancel();
            } else {
                old.run.abort();
            }
            let _ = old.run.await;
        } else {
            if graceful {
                group.terminate(&worker)?;
            } else {
                group.kill(&worker)?;
            }
            group.reap(&worker).await?;
            worker = group.spawn(&azurite.endpoint);
        }
        for event in group.drain() {
            if event.is_leading() {
                churn.mutex_terms.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    for c in local {
        c.token.cancel();
        let _ = c.run.await;
    }
    group.stop_all();
    Ok(())
}

/// One figure's trend after warm-up.
struct Trend {
    name: &'static str,
    unit: &'static str,
    first: f64,
    last: f64,
    per_hour: f64,
    growth: f64,
    noise: f64,
}

impl Trend {
    fn of(name: &'static str, unit: &'static str, floor: f64, points: &[(f64, f64)]) -> Trend {
        let (slope, sd) = fit(points).unwrap_or((f64::NAN, f64::NAN));
        let span = points.last().map_or(0.0, |p| p.0) - points.first().map_or(0.0, |p| p.0);
        Trend {
            name,
            unit,
            first: points.first().map_or(f64::NAN, |p| p.1),
            last: points.last().map_or(f64::NAN, |p| p.1),
            per_hour: slope * 3600.0,
            growth: slope * span,
            noise: (2.0 * sd).max(floor),
        }
    }

    /// Whether the fitted growth stays within the noise (`None`: too few points).
    fn flat(&self) -> Option<bool> {
        (!self.growth.is_nan()).then_some(self.growth <= self.noise)
    }

    fn json(&self) -> Json {
        json::obj([
            ("unit", json::str(self.unit)),
            ("first_after_warmup", json::num(self.first)),
            ("last", json::num(self.last)),
            ("slope_per_hour", json::num(self.per_hour)),
            ("fitted_growth", json::num(self.growth)),
            ("noise", json::num(self.noise)),
        ])
    }
}

#[allow(clippy::cast_precision_loss)] // KiB, descriptor, task and tick counts are small
fn trends(phase: &[Sample], warmup: f64) -> Vec<Trend> {
    let kept: Vec<&Sample> = phase.iter().filter(|s| s.at >= warmup).collect();
    let series = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        kept.iter().map(|s| (s.at, f(s))).collect()
    };
    let ticks = clock_ticks();
    let cpu: Vec<(f64, f64)> = kept
        .windows(2)
        .map(|w| {
            let share = (w[1].cpu_ticks - w[0].cpu_ticks) as f64 / ticks / (w[1].at - w[0].at);
            (w[1].at, 100.0 * share)
        })
        .collect();
    vec![
        Trend::of(
            "resident memory",
            "MiB",
            1.0,
            &series(&|s| s.rss_kib as f64 / 1024.0),
        ),
        Trend::of(
            "open file descriptors",
            "count",
            1.0,
            &series(&|s| s.fds as f64),
        ),
        Trend::of(
            "live tokio tasks",
            "count",
            1.0,
            &series(&|s| s.tasks as f64),
        ),
        Trend::of("CPU over the last cycle", "% of a core", 0.2, &cpu),
    ]
}

fn write_report(
    config: &Config,
    report: &mut Report,
    phase: &[Sample],
    continuous: &[Sample],
    warmup: f64,
    churn: &Churn,
) {
    let trends = trends(phase, warmup);
    for t in &trends {
        report.target(
            &format!("soak: {} after warm-up", t.name),
            format!(
                "{:.1} → {:.1} {}, {:+.2}/h",
                t.first, t.last, t.unit, t.per_hour
            ),
            "no growth beyond noise".to_owned(),
            t.flat(),
        );
    }
    report.section(
        "soak",
        json::obj([
            ("seconds", json::num(config.soak.duration.as_secs_f64())),
            ("warmup_seconds", json::num(warmup)),
            ("partitions", json::count(config.set_size)),
            ("churn", churn.json()),
            (
                "trends",
                json::obj(trends.iter().map(|t| (t.name.to_owned(), t.json()))),
            ),
            (
                "phase_samples",
                Json::Array(phase.iter().map(Sample::json).collect()),
            ),
            (
                "samples",
                Json::Array(continuous.iter().map(Sample::json).collect()),
            ),
        ]),
    );
    let d = &mut report.details;
    let _ = writeln!(
        d,
        "### Soak ({:.0} min, {} partitions, warm-up {:.0} min)\n",
        config.soak.duration.as_secs_f64() / 60.0,
        config.set_size,
        warmup / 60.0
    );
    let _ = writeln!(
        d,
        "Sampled once a cycle, just before the second set instance rejoins; fitted after warm-up.\n"
    );
    let _ = writeln!(
        d,
        "| figure | first | last | slope per hour | fitted growth | noise (2 σ) |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|---|");
    for t in &trends {
        let _ = writeln!(
            d,
            "| {} ({}) | {:.1} | {:.1} | {:+.2} | {:+.2} | {:.2} |",
            t.name, t.unit, t.first, t.last, t.per_hour, t.growth, t.noise
        );
    }
    let n = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let _ = writeln!(
        d,
        "\nChurn: the set's second instance left {} times gracefully and crashed {} times \
         ({} runs ended with an error); the mutex's contenders stopped {} times gracefully and \
         crashed {} times, {} terms started ({} campaigns ended with an error).\n",
        n(&churn.set_graceful),
        n(&churn.set_crashes),
        n(&churn.set_errors),
        n(&churn.mutex_graceful),
        n(&churn.mutex_crashes),
        n(&churn.mutex_terms),
        n(&churn.mutex_errors),
    );
}
