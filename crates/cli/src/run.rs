//! `blob-mutex run`: campaign for the lease and run a command while leader
//! (with `--once`, for one term: see [`once`]).

mod once;

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, Result};
use blob_mutex::{
    store::LeaseStore, term::StopReason, BlobDistributedMutex, CancellationToken, LeaderContext,
    OnceOptions,
};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::time::Instant;
use tracing::{info, warn, Instrument};

use crate::child::{self, Child, Groups, SpawnError, StopTimes, Watched};
use crate::cli::RunArgs;
use crate::endpoint::Endpoint;
use crate::logs::{self, LEADER};
use crate::{exit, guard};

/// How the run ended; it chooses the exit code.
enum Outcome {
    /// The command exited by itself.
    Exited(ExitStatus),
    /// The command exited after a forwarded signal (SIGINT, SIGTERM or
    /// SIGHUP to `run`).
    Signalled(ExitStatus),
    /// The lease was lost and the command was stopped; no status when the
    /// library aborted the leader task (the command was killed then).
    Lost(StopReason, Option<ExitStatus>),
    /// The command could not be started.
    SpawnFailed(io::Error),
    /// The command's guard could not be started, or ended while the
    /// command ran; the message says which.
    GuardFailed(String),
    /// `--hold`: the term ended for this reason.
    HoldEnded(StopReason),
}

/// What the leader task, the signal handler and the exit code share.
#[derive(Default)]
struct State {
    /// The first SIGINT, SIGTERM or SIGHUP received, to forward to the command.
    signal: Option<Signal>,
    /// The process group of the running command.
    running: Option<Pid>,
    /// How the run ended, when it did.
    outcome: Option<Outcome>,
}

struct Shared {
    /// Empty with `--hold`: the leader task holds the lease and runs no
    /// command.
    command: Vec<OsString>,
    name: String,
    /// The command's environment besides the epoch and holder.
    env: Vec<(&'static str, String)>,
    forever: bool,
    /// `--once`: the library leads one term, and ending the run needs no
    /// cancellation.
    once: bool,
    /// Whether a completion record is kept (`--done-key`,
    /// `--at-most-every`): it owns the blob's state, so the command gets no
    /// lease id for `state put`, and only a command that exited 0 by
    /// itself counts as a success.
    records: bool,
    /// The library's stop grace: how long the leader task may take to stop.
    grace: Duration,
    token: CancellationToken,
    state: Mutex<State>,
    /// The process groups of earlier commands that may still run.
    groups: Groups,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records how the run ended and stops the campaign (with `--once`,
    /// the term's end ends it).
    fn finish(&self, outcome: Outcome) {
        self.state().outcome = Some(outcome);
        if !self.once {
            self.token.cancel();
        }
    }
}

/// Runs `blob-mutex run` and returns its exit code.
pub(crate) async fn run(args: RunArgs) -> Result<u8> {
    let once = once::options(&args)?;
    // What the command leaves behind is reparented to `run` (process 1 of a
    // container, or a subreaper anyway) and must be reaped here.
    crate::orphans::reap_orphans();
    // Several accounts make a quorum; one is the blob store itself.
    let store = match args.target.quorum()? {
        Some(quorum) => Ok(quorum),
        None => Err(args.target.settings()?),
    };
    let mut options = args.lease.options(args.target.request_timeout());
    if let Some(wait) = args.wait {
        // The library makes one complete attempt at least, so `--wait 0`
        // makes exactly one, and it tells a held lease from a failed attempt.
        options = options.with_acquire_timeout(wait);
    }
    if let Some(priority) = args.priority {
        options = options.with_priority(priority);
    }
    let shared = Arc::new(Shared {
        command: args.command,
        name: args.target.name(),
        env: args.target.command_env(),
        forever: args.forever,
        once: once.is_some(),
        records: once.as_ref().is_some_and(once::records),
        grace: options.stop_grace(),
        token: CancellationToken::new(),
        state: Mutex::new(State::default()),
        groups: Groups::new(args.target.name()),
    });
    // Before the mutex is made, so that its figures are recorded from the start.
    let endpoint = match args.metrics_addr {
        Some(addr) => Some(Endpoint::bind(addr, args.target.backend()).await?),
        None => None,
    };
    let task_shared = shared.clone();
    let task = move |ctx| lead(ctx, task_shared.clone());
    match store {
        Ok(quorum) => {
            let accounts = quorum.len();
            let mutex = BlobDistributedMutex::with_store(quorum, options, task)?;
            let span = run_span(&shared, mutex.holder());
            span.in_scope(|| info!(accounts, "on a quorum of storage accounts"));
            let campaigning = campaign(&mutex, &shared, args.wait, endpoint, once);
            campaigning.instrument(span).await
        }
        Err(settings) => {
            let backend = settings.backend();
            let mutex = BlobDistributedMutex::with_options(settings, options, task)?;
            let span = run_span(&shared, mutex.holder());
            span.in_scope(|| info!(%backend, "on one storage account"));
            let campaigning = campaign(&mutex, &shared, args.wait, endpoint, once);
            campaigning.instrument(span).await
        }
    }
}

/// The span of everything `run` does once its mutex is made, so that every
/// line (JSON lines included) names the lease and the holder; and the same
/// two for the command's own lines (see [`logs::say`]).
fn run_span(shared: &Shared, holder: &str) -> tracing::Span {
    logs::identify(&shared.name, holder);
    tracing::info_span!("run", lease = %shared.name, holder)
}

/// Campaigns until the command's end (or for ever) and returns the exit code.
async fn campaign<S: LeaseStore>(
    mutex: &BlobDistributedMutex<S>,
    shared: &Arc<Shared>,
    wait: Option<Duration>,
    endpoint: Option<Endpoint>,
    once: Option<OnceOptions>,
) -> Result<u8> {
    let signals = tokio::spawn(forward_signals(shared.clone()));
    info!("campaigning for the lease");
    let serving = async {
        if let Some(endpoint) = endpoint {
            endpoint.serve(mutex.health(), mutex.leader()).await;
        }
        std::future::pending::<()>().await;
    };
    let once_given = once.is_some();
    let elected = async {
        match once {
            None => mutex
                .run_task_when_mutex_acquired(shared.token.clone())
                .await
                .map(|()| None),
            Some(options) => once::lead_one_term(mutex, shared, options).await.map(Some),
        }
    };
    // Serving never ends: the campaign's end ends it.
    let result = tokio::select! {
        result = elected => result,
        () = serving => Ok(None),
    };
    signals.abort();
    // An aborted term's command may not be gone yet: `run` ends only once
    // it is (or exits with the unkillable code).
    shared.groups.settled().await;
    match (result, wait) {
        (Ok(None), _) => Ok(exit_code(shared)),
        (Ok(Some(outcome)), _) => Ok(once::exit_code(shared, outcome)),
        (Err(blob_mutex::Error::NotAcquired { .. }), _) => {
            logs::say(&format!(
                "the lease on {} is held by another instance; gave up waiting",
                shared.name
            ));
            Ok(exit::FREE_OR_NOT_ACQUIRED)
        }
        // The last attempt failed: say so, not that the lease is held.
        (Err(e), Some(wait)) if e.is_transient() => {
            Err(anyhow::Error::new(e).context(format!("not leader within --wait {wait:?}")))
        }
        (Err(e), _) if once_given => once::of_error(shared, e),
        (Err(e), _) => Err(e.into()),
    }
}

/// The exit code once the campaign has ended, with a line on stderr when
/// the command did not run to its own end.
fn exit_code(shared: &Shared) -> u8 {
    let mut state = shared.state();
    match state.outcome.take() {
        Some(Outcome::Exited(status) | Outcome::Signalled(status)) => exit::of_status(status),
        Some(Outcome::Lost(reason, status)) => {
            let how = status.map_or_else(|| "killed".to_owned(), exit::describe);
            logs::say(&format!(
                "the lease on {} {}; the command was stopped ({how})",
                shared.name,
                lost_because(reason)
            ));
            exit::LEASE_LOST
        }
        Some(Outcome::SpawnFailed(e)) => {
            logs::say(&format!(
                "cannot run {}: {e}",
                shared.command[0].to_string_lossy()
            ));
            if e.kind() == io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            }
        }
        Some(Outcome::GuardFailed(message)) => {
            logs::say(&message);
            exit::ERROR
        }
        Some(Outcome::HoldEnded(StopReason::Shutdown)) => exit::OK,
        Some(Outcome::HoldEnded(reason)) => {
            logs::say(&format!(
                "the lease on {} {}; no longer holding it",
                shared.name,
                lost_because(reason)
            ));
            exit::LEASE_LOST
        }
        None => match state.signal {
            // Stopped by a signal before the command ran: the shell's convention.
            Some(signal) => u8::try_from(128 + signal as i32).unwrap_or(u8::MAX),
            None => exit::OK,
        },
    }
}

/// Why a term ended that was not stopped by a signal, for the last line.
fn lost_because(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Deadline => "could not be renewed before its deadline",
        StopReason::Handover => "was handed over to a waiting host with a higher priority",
        _ => "was broken or taken by another holder",
    }
}

/// The leader task of `--hold`: holds the lease, with no command, until the
/// term is stopped; then the run ends, or with `--forever` (unless stopped
/// by a signal) the campaign goes on.
async fn hold(ctx: LeaderContext, shared: Arc<Shared>) -> Result<()> {
    let epoch = ctx.epoch();
    info!(target: LEADER, epoch, "leader: holding the lease (no command)");
    let reason = ctx.cancelled().await;
    info!(target: LEADER, epoch, %reason, "leader: the term ended; the lease is released unless it was lost");
    if reason == StopReason::Shutdown || !shared.forever {
        shared.finish(Outcome::HoldEnded(reason));
    } else {
        warn!(epoch, %reason, "leadership ended; campaigning again");
    }
    Ok(())
}

/// The leader task: run the command, with its guard, until it exits or
/// leadership ends (with `--hold`, see [`hold`]).
async fn lead(ctx: LeaderContext, shared: Arc<Shared>) -> Result<()> {
    if shared.command.is_empty() {
        return hold(ctx, shared).await;
    }
    // What `blob-mutex state get/put` needs inside the command. The lease id
    // is this holder's own: the command is its process, and it is never printed.
    let mut env = shared.env.clone();
    if !shared.records {
        env.push((child::LEASE_ID_ENV, ctx.lease_id().to_string()));
    }
    // No command starts while a process of an earlier term's may still run.
    tokio::select! {
        () = shared.groups.settled() => {}
        _ = ctx.cancelled() => return Ok(()),
    }
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
            shared.finish(Outcome::SpawnFailed(e));
            return Ok(());
        }
        Err(SpawnError::Guard(e)) => {
            return guard_failed(&shared, format!("cannot start the guard process: {e}"));
        }
    };
    info!(target: LEADER, epoch = ctx.epoch(), pid = child.pid(), group = child.group().as_raw(), "leader: started the command");
    shared.state().running = Some(child.group());
    let mut abort = AbortGuard {
        ctx: &ctx,
        shared: &shared,
        armed: true,
    };
    let mut deadlines = ctx.watch_deadline();
    let ended = tokio::select! {
        watched = child.watch(&mut deadlines) => match watched? {
            // Past the deadline, the guard killed it (`run` was frozen).
            Watched::Exited(status) | Watched::GuardEnded(status)
                if Instant::now() + guard::SLACK >= ctx.deadline() =>
            {
                Ended::Stopped(StopReason::Deadline, status)
            }
            Watched::Exited(status) => Ended::ByItself(status),
            Watched::GuardEnded(status) => {
                shared.state().running = None;
                return guard_failed(
                    &shared,
                    format!(
                        "the guard process ended while the command ran; the command was killed ({})",
                        exit::describe(status)
                    ),
                );
            }
        },
        reason = ctx.cancelled() => {
            let first = match reason {
                StopReason::Shutdown => shared.state().signal.unwrap_or(Signal::SIGTERM),
                _ => Signal::SIGTERM,
            };
            let times = StopTimes::new(Instant::now(), shared.grace, ctx.deadline());
            let status = child.stop(first, times).await?;
            Ended::Stopped(reason, status)
        }
    };
    abort.armed = false;
    shared.state().running = None;
    conclude(&ctx, &shared, ended)
}

/// Ends the run (without `--forever`) when the library aborts the leader
/// task, which then never reaches its own end. The library aborts a task
/// that has not stopped in time: 100 ms after a lost lease (broken or
/// taken) was seen, else at the end of the grace, which this stop path
/// meets unless `run` was frozen past its deadline (the guard has killed
/// the command then). Dropping the task's [`Child`] kills whatever is left
/// of the group, and no command starts, nor does `run` exit, before the
/// group is gone (see [`Groups`]).
struct AbortGuard<'a> {
    ctx: &'a LeaderContext,
    shared: &'a Shared,
    /// Cleared once the task reaches its own end.
    armed: bool,
}

impl Drop for AbortGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.shared.state().running = None;
        let reason = self.ctx.stop_reason().unwrap_or(StopReason::Deadline);
        warn!(epoch = self.ctx.epoch(), %reason, "the leader task was aborted; the command was killed");
        if !self.shared.forever && reason != StopReason::Shutdown {
            self.shared.finish(Outcome::Lost(reason, None));
        }
    }
}

/// The guard failed: the run ends with an error, or with `--forever` the
/// term counts as failed and the campaign goes on after a back-off.
fn guard_failed(shared: &Shared, message: String) -> Result<()> {
    if shared.forever {
        return Err(anyhow!(message));
    }
    shared.finish(Outcome::GuardFailed(message));
    Ok(())
}

/// How the command ended during one term.
#[derive(Clone, Copy)]
enum Ended {
    ByItself(ExitStatus),
    Stopped(StopReason, ExitStatus),
}

/// Decides what a term's end means: the end of the run, or (with
/// `--forever`) another campaign.
fn conclude(ctx: &LeaderContext, shared: &Shared, ended: Ended) -> Result<()> {
    let epoch = ctx.epoch();
    match &ended {
        Ended::ByItself(status) => {
            info!(target: LEADER, epoch, status = %exit::describe(*status), "leader: the command ended; the lease is released");
        }
        Ended::Stopped(reason, status) => {
            info!(target: LEADER, epoch, %reason, status = %exit::describe(*status), "leader: the command was stopped; the lease is released unless it was lost");
        }
    }
    match ended {
        Ended::ByItself(status) if !shared.forever || shared.token.is_cancelled() => {
            shared.finish(Outcome::Exited(status));
            Ok(())
        }
        Ended::Stopped(StopReason::Shutdown, status)
            if !shared.forever || shared.token.is_cancelled() =>
        {
            shared.finish(Outcome::Signalled(status));
            Ok(())
        }
        Ended::Stopped(reason, status) if !shared.forever => {
            shared.finish(Outcome::Lost(reason, Some(status)));
            Ok(())
        }
        Ended::Stopped(reason, status) => {
            warn!(epoch, %reason, status = %exit::describe(status), "leadership ended; the command was stopped; campaigning again");
            Ok(())
        }
        Ended::ByItself(status) if status.success() => {
            info!(epoch, "the command exited; campaigning again");
            Ok(())
        }
        Ended::ByItself(status) => Err(anyhow!(
            "the command ended with {}; restarting it after a back-off",
            exit::describe(status)
        )),
    }
}

/// Forwards the first SIGINT, SIGTERM or SIGHUP: stops the campaign, which
/// stops the command with the same signal. A second signal kills the command.
async fn forward_signals(shared: Arc<Shared>) -> Result<()> {
    let token = shared.token.clone();
    let note = |received| {
        let mut state = shared.state();
        let running = state.running;
        crate::signals::note(&mut state.signal, running, received)
    };
    let stopping = |received: Signal| {
        info!(signal = %received, "stopping: the command gets the signal, then the lease is released");
    };
    crate::signals::forward(token, note, stopping).await
}
