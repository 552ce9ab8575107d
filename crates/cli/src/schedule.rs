//! `blob-mutex schedule`: every slot of a cron expression runs its command
//! once across the hosts, through the library's `BlobSchedule`; the
//! command runs as `run` runs it (see [`crate::child`]).

use std::ffi::OsString;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, Result};
use blob_mutex::schedule::{BlobSchedule, Overlap, ScheduleOptions, Slot, SlotOutcome, SlotReport};
use blob_mutex::{term::StopReason, CancellationToken, LeaderContext};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tracing::{info, warn, Instrument};

use crate::child::{Child, Groups, SpawnError, StopTimes, Watched, SLOT_ENV};
use crate::cli::{OverlapArg, ScheduleArgs};
use crate::endpoint::Endpoint;
use crate::exit::{self, UsageError};
use crate::logs::{self, LEADER};

/// The back-off before a failed slot's first retry (then doubling).
const RETRY_BACKOFF: Duration = Duration::from_secs(10);

/// What the jobs, the signal handler and the exit code share.
struct Shared {
    command: Vec<OsString>,
    /// The command's environment besides the epoch, holder and slot.
    env: Vec<(&'static str, String)>,
    /// The library's stop grace: how long a job may take to stop.
    grace: Duration,
    /// `--timeout`: how long a slot's command may run.
    timeout: Option<Duration>,
    token: CancellationToken,
    /// The process groups of jobs that may still run.
    groups: Groups,
    state: Mutex<State>,
}

/// What a signal changes.
#[derive(Default)]
struct State {
    /// The first SIGINT, SIGTERM or SIGHUP received, forwarded to the job.
    signal: Option<Signal>,
    /// The process group of the running job.
    running: Option<Pid>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs `blob-mutex schedule` until a signal stops it; returns its exit
/// code (128 + the signal's number).
pub(crate) async fn schedule(args: ScheduleArgs) -> Result<u8> {
    let options = options(&args)?;
    if args.target.quorum()?.is_some() {
        return Err(UsageError(
            "schedule keeps its record in one storage account: a quorum of accounts is refused"
                .to_owned(),
        )
        .into());
    }
    crate::orphans::reap_orphans();
    let settings = args.target.settings()?;
    let backend = settings.backend();
    // Before the schedule is made, so that its figures are recorded from
    // the start.
    let endpoint = match args.metrics_addr {
        Some(addr) => Some(Endpoint::bind(addr, backend).await?),
        None => None,
    };
    let schedule = BlobSchedule::new(&settings, options.clone())?;
    let name = args.target.name();
    let shared = Arc::new(Shared {
        command: args.command,
        env: args.target.command_env(),
        grace: args
            .lease
            .options(args.target.request_timeout())
            .stop_grace(),
        timeout: args.timeout,
        token: CancellationToken::new(),
        groups: Groups::new(name.clone()),
        state: Mutex::new(State::default()),
    });
    logs::identify(&name, schedule.holder());
    let span = tracing::info_span!("schedule", lease = %name, holder = schedule.holder());
    span.in_scope(|| started(&args.cron, args.tz.as_deref(), &options, backend));
    let signals = tokio::spawn(forward_signals(shared.clone()).instrument(span.clone()));
    let reports = tokio::spawn(log_reports(schedule.slot_reports()).instrument(span.clone()));
    let job_shared = shared.clone();
    let running = schedule
        .run(shared.token.clone(), move |slot, ctx| {
            job(slot, ctx, job_shared.clone())
        })
        .instrument(span);
    let serving = async {
        if let Some(endpoint) = endpoint {
            endpoint.serve(schedule.health(), schedule.leader()).await;
        }
        std::future::pending::<()>().await;
    };
    // Serving never ends: the schedule's end ends it.
    let ran = tokio::select! {
        ran = running => ran,
        () = serving => Ok(()),
    };
    signals.abort();
    // The last reports are logged before the exit.
    tokio::task::yield_now().await;
    reports.abort();
    shared.groups.settled().await;
    if let Err(blob_mutex::Error::StateNotARecord(what)) = &ran {
        return Err(UsageError(format!(
            "schedule keeps its record in the lease blob's state, and {what}: give the \
             schedule a blob of its own (--blob)"
        ))
        .into());
    }
    ran?;
    let signal = shared.state().signal;
    Ok(signal.map_or(exit::OK, |s| {
        u8::try_from(128 + s as i32).unwrap_or(u8::MAX)
    }))
}

/// Says at start, at the level shown by default, what runs: the
/// expression, its zone and window, and the next slot (by this host's
/// clock: storage's is read at the first look); the span names the lease
/// and the holder.
fn started(
    cron: &str,
    zone: Option<&str>,
    options: &ScheduleOptions,
    backend: impl std::fmt::Display,
) {
    let zone = zone.unwrap_or("UTC");
    let next = options
        .next_slot_after(std::time::SystemTime::now())
        .ok()
        .flatten()
        .and_then(|at| jiff::Timestamp::try_from(at).ok())
        .map_or_else(|| "none".to_owned(), |at| at.to_string());
    let catch_up = options.catch_up();
    info!(target: LEADER, %backend, %cron, %zone, ?catch_up, next_slot = %next, "schedule: running `{cron}` in {zone} (catch-up window {catch_up:?}); the next slot is at {next} by this host's clock");
}

/// The library's options from the flags, checked: a bad expression, zone
/// or window is a usage error naming its flag.
fn options(args: &ScheduleArgs) -> Result<ScheduleOptions> {
    // The command's own guard kills its process group before the lease
    // could expire, whatever this process does: the job future is always
    // abortable, and the library's fail-stop (which would end a process
    // frozen past its lease and then woken) is not needed here.
    let mut options = ScheduleOptions::new(args.cron.clone())
        .with_fail_stop(false)
        .with_mutex(args.lease.options(args.target.request_timeout()));
    if let Some(zone) = &args.tz {
        options = options.with_time_zone(zone.clone());
    }
    if let Some(window) = args.catch_up {
        options = options.with_catch_up(window);
    }
    if let Some(overlap) = args.overlap {
        options = options.with_overlap(match overlap {
            OverlapArg::Skip => Overlap::Skip,
            OverlapArg::Wait => Overlap::Wait,
        });
    }
    if let Some(retries) = args.retries {
        options = options.with_retries(retries, RETRY_BACKOFF);
    }
    options.validate()?;
    Ok(options)
}

/// One slot's job: the command, with the slot and the epoch in its
/// environment, until it exits, runs past `--timeout` (a failed attempt),
/// or the term ends (then it is stopped as `run` stops it). Succeeds when
/// the command exited 0 by itself.
async fn job(slot: Slot, ctx: LeaderContext, shared: Arc<Shared>) -> Result<()> {
    // No job starts while a process of an earlier one's may still run.
    tokio::select! {
        () = shared.groups.settled() => {}
        reason = ctx.cancelled() => return Err(anyhow!("the term ended ({reason}) before the command started")),
    }
    let mut env = shared.env.clone();
    env.push((SLOT_ENV, slot.key.clone()));
    let spawned = Child::spawn(
        &shared.command,
        ctx.epoch(),
        ctx.holder(),
        &env,
        ctx.deadline(),
        &shared.groups,
    )
    .await;
    let mut child = match spawned {
        Ok(child) => child,
        Err(SpawnError::Command(e)) => {
            return Err(anyhow!(
                "cannot run {}: {e}",
                shared.command[0].to_string_lossy()
            ))
        }
        Err(SpawnError::Guard(e)) => return Err(anyhow!("cannot start the guard process: {e}")),
    };
    info!(target: LEADER, slot = %slot.key, attempt = slot.attempt, epoch = ctx.epoch(), pid = child.pid(), "leader: started the slot's command");
    let _running = Running::new(&shared, child.group());
    let mut deadlines = ctx.watch_deadline();
    let timed_out = async {
        match shared.timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = timed_out => {
            let times = StopTimes::new(Instant::now(), shared.grace, ctx.deadline());
            let status = child.stop(Signal::SIGTERM, times).await?;
            let limit = jiff::SignedDuration::try_from(shared.timeout.unwrap_or_default())
                .map_or_else(|_| String::from("?"), |d| format!("{d:#}"));
            Err(anyhow!("the command ran past --timeout {limit} and was stopped ({})", exit::describe(status)))
        }
        watched = child.watch(&mut deadlines) => match watched? {
            Watched::Exited(status) if status.success() => Ok(()),
            Watched::Exited(status) => Err(anyhow!("the command ended with {}", exit::describe(status))),
            Watched::GuardEnded(status) => Err(anyhow!(
                "the guard process ended while the command ran; the command was killed ({})",
                exit::describe(status)
            )),
        },
        reason = ctx.cancelled() => {
            let first = match reason {
                StopReason::Shutdown => shared.state().signal.unwrap_or(Signal::SIGTERM),
                _ => Signal::SIGTERM,
            };
            let times = StopTimes::new(Instant::now(), shared.grace, ctx.deadline());
            let status = child.stop(first, times).await?;
            Err(anyhow!("the term ended ({reason}); the command was stopped ({})", exit::describe(status)))
        }
    }
}

/// Marks the job's process group as the one a second signal kills, until
/// dropped (also when the library aborts the job).
struct Running<'a>(&'a Shared);

impl<'a> Running<'a> {
    fn new(shared: &'a Shared, group: Pid) -> Self {
        shared.state().running = Some(group);
        Running(shared)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.state().running = None;
    }
}

/// The leader's line of each slot this host ran or found done by another,
/// shown by default: the library logs these at info only, and every other
/// outcome at warn itself.
async fn log_reports(mut reports: broadcast::Receiver<SlotReport>) {
    loop {
        match reports.recv().await {
            Ok(report) => log_report(&report),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                warn!(lost = n, "schedule: some slots' reports were not logged");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// The leader's line of one slot's outcome, if it has one.
fn log_report(report: &SlotReport) {
    let (slot, holder) = (&report.slot, &report.holder);
    match &report.outcome {
        SlotOutcome::Ran { epoch, attempt } => {
            info!(target: LEADER, %slot, %holder, epoch, attempt, "slot: ran on {holder} with epoch {epoch}");
        }
        SlotOutcome::DoneElsewhere { holder: by, epoch } => {
            info!(target: LEADER, %slot, %holder, by = %by, epoch, "slot: done on {by} with epoch {epoch}; skipped here");
        }
        _ => {}
    }
}

/// Forwards the first SIGINT, SIGTERM or SIGHUP: stops the schedule, whose
/// running job gets the same signal, then the lease is released. A second
/// signal kills the job.
async fn forward_signals(shared: Arc<Shared>) -> Result<()> {
    let token = shared.token.clone();
    let note = |received| {
        let mut state = shared.state();
        let running = state.running;
        crate::signals::note(&mut state.signal, running, received)
    };
    let stopping = |received: Signal| {
        if shared.state().running.is_some() {
            info!(target: LEADER, signal = %received, "stopping: the slot's running job gets the signal, then the lease is released");
        } else {
            info!(target: LEADER, signal = %received, "stopping: no job runs; the schedule ends, releasing the lease if it holds it");
        }
    };
    crate::signals::forward(token, note, stopping).await
}
