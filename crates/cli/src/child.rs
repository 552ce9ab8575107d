//! The command `run` supervises: started into its guard's process group (see
//! [`crate::guard`]), so that stopping the group stops everything it
//! started, and so that the guard can stop it when `run` cannot. No
//! command starts while a process of an earlier command's group may still
//! run (see [`reap`]).

mod output;
mod reap;

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::process::ExitStatus;
use std::time::Duration;

use blob_mutex::term::STOP_SLACK;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::watch;
use tokio::time::{timeout_at, Instant};
use tracing::{debug, warn};

use crate::exit;
use crate::group::{signal_group, test_kill_delay};
use crate::guard::Guard;
use crate::orphans;
use output::Output;
pub(crate) use reap::Groups;
use reap::{gone_by, Live, REAP_WAIT};

/// The environment variable that carries the fencing token.
pub(crate) const EPOCH_ENV: &str = "BLOB_MUTEX_EPOCH";
/// The environment variable that carries the slot a `schedule` job runs
/// for: its instant in UTC, RFC 3339.
pub(crate) const SLOT_ENV: &str = "BLOB_MUTEX_SLOT";
/// The environment variable that carries this host's holder name.
pub(crate) const HOLDER_ENV: &str = "BLOB_MUTEX_HOLDER";
/// The environment variable that carries the term's lease id, for
/// `blob-mutex state put` in the command. Never printed.
pub(crate) const LEASE_ID_ENV: &str = "BLOB_MUTEX_LEASE_ID";
/// The environment variable that carries the lease blob's container.
pub(crate) const CONTAINER_ENV: &str = "BLOB_MUTEX_CONTAINER";
/// The environment variable that carries the lease blob's name.
pub(crate) const BLOB_ENV: &str = "BLOB_MUTEX_BLOB";
/// Set to `true` when `run` was given `--dev` (Azurite's default account).
pub(crate) const DEV_ENV: &str = "BLOB_MUTEX_DEV";
/// The account URL `run` was given (`--account-url`), without a container.
pub(crate) const ACCOUNT_URL_ENV: &str = "BLOB_MUTEX_ACCOUNT_URL";
/// How `run` signed in to it (`--auth`).
pub(crate) const AUTH_ENV: &str = "BLOB_MUTEX_AUTH";

/// The most by which SIGKILL comes before the end of the stop, so that the
/// command is gone before the library would abort the leader task.
const KILL_SLACK_MAX: Duration = Duration::from_secs(1);
/// The least time SIGKILL is given before the command counts as unkillable.
const KILL_WAIT_MIN: Duration = Duration::from_millis(50);

/// Why the command could not be started.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// Its guard could not be started: no command runs without one.
    Guard(io::Error),
    /// The command itself could not be started.
    Command(io::Error),
}

/// How watching a running command ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Watched {
    /// The command exited (by itself, or killed by its guard).
    Exited(ExitStatus),
    /// The guard ended while the command ran; the command was then killed.
    GuardEnded(ExitStatus),
}

/// A running command, its guard, and their process group.
///
/// Dropping it before its group was found gone (an aborted leader task)
/// kills the whole group, and a task left behind waits for the group to be
/// gone: no later command starts before (see [`Groups::settled`]), and the
/// process exits with [`exit::UNKILLABLE`] if the group outlives SIGKILL.
pub(crate) struct Child {
    process: tokio::process::Child,
    guard: Guard,
    pid: u32,
    /// Counts the group among those that may still run, until it is gone.
    live: Option<Live>,
    groups: Groups,
    /// Passes its output on as JSON lines, under that format.
    output: Output,
}

impl Child {
    /// Starts a guard that knows `deadline`, then `command` (program and
    /// arguments) in the guard's process group, with the epoch and holder in
    /// its environment, and `env` besides. The group counts among `groups`
    /// until it is gone; wait for [`Groups::settled`] first.
    pub(crate) async fn spawn(
        command: &[OsString],
        epoch: u64,
        holder: &str,
        env: &[(&str, String)],
        deadline: Instant,
        groups: &Groups,
    ) -> Result<Child, SpawnError> {
        let (program, args) = command.split_first().ok_or_else(|| {
            SpawnError::Command(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no command given",
            ))
        })?;
        let guard = Guard::start(deadline).await.map_err(SpawnError::Guard)?;
        // Counted before the command joins the group. If spawning fails,
        // dropping the guard kills it (it is reaped as an orphan).
        let live = groups.enter();
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .env(EPOCH_ENV, epoch.to_string())
            .env(HOLDER_ENV, holder)
            .envs(env.iter().map(|(key, value)| (*key, value)))
            .process_group(guard.group().as_raw())
            .kill_on_drop(test_kill_delay().is_none());
        Output::pipe(&mut command);
        let mut process = orphans::spawn(|| command.spawn()).map_err(SpawnError::Command)?;
        let pid = process.id().ok_or_else(|| {
            SpawnError::Command(io::Error::other(
                "the command exited before it could be watched",
            ))
        })?;
        let output = Output::start(&mut process, pid);
        debug!(
            pid,
            group = guard.group().as_raw(),
            epoch,
            "started the command"
        );
        Ok(Child {
            process,
            guard,
            pid,
            live: Some(live),
            groups: groups.clone(),
            output,
        })
    }

    /// The command's process group, which is its guard's process id.
    pub(crate) fn group(&self) -> Pid {
        self.guard.group()
    }

    /// The command's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits until the command exits, telling the guard every new deadline
    /// meanwhile; then kills what is left in the group. If the guard ends
    /// first, the command is killed: it must not run unguarded.
    ///
    /// Cancellation safe: dropping the future leaves the command running.
    pub(crate) async fn watch(
        &mut self,
        deadlines: &mut watch::Receiver<Instant>,
    ) -> io::Result<Watched> {
        let mut moving = true;
        loop {
            tokio::select! {
                status = self.process.wait() => return Ok(Watched::Exited(self.reaped(status?).await)),
                changed = deadlines.changed(), if moving => {
                    if changed.is_err() {
                        // The term is over; the deadline moves no more.
                        moving = false;
                        continue;
                    }
                    let deadline = *deadlines.borrow_and_update();
                    if let Err(e) = self.guard.tell(deadline).await {
                        debug!(error = %e, "cannot tell the guard the deadline");
                    }
                }
                guard = self.guard.wait() => {
                    let guard = guard.map_or_else(|e| e.to_string(), exit::describe);
                    warn!(pid = self.pid, %guard, "the guard ended while the command ran; killing the command");
                    signal_group(self.group(), Signal::SIGKILL);
                    let status = self.process.wait().await?;
                    return Ok(Watched::GuardEnded(self.reaped(status).await));
                }
            }
        }
    }

    /// Stops the command (see [`stop_group`]); when it (or anything of its
    /// group) survives SIGKILL, exits the process (see
    /// [`Groups::unkillable`]) and never returns.
    pub(crate) async fn stop(&mut self, first: Signal, times: StopTimes) -> io::Result<ExitStatus> {
        let group = self.group();
        let groups = self.groups.clone();
        let status = stop_group(
            |signal| signal_group(group, signal),
            self.process.wait(),
            first,
            times,
            |_| groups.unkillable(group),
        )
        .await?;
        Ok(self.reaped(status).await)
    }

    /// The command has been reaped: kill what it left in its group, the
    /// guard included, reap the guard, and wait until nothing of the group
    /// may run; exit the process if something of it survives SIGKILL.
    async fn reaped(&mut self, status: ExitStatus) -> ExitStatus {
        let group = self.group();
        signal_group(group, Signal::SIGKILL);
        let until = Instant::now() + REAP_WAIT;
        orphans::waited(self.pid);
        if timeout_at(until, self.guard.wait()).await.is_err() {
            warn!(pid = group.as_raw(), "the guard was not reaped in time");
        } else {
            orphans::waited(group.as_raw().unsigned_abs());
        }
        if !gone_by(group, until).await {
            self.groups.unkillable(group);
        }
        self.live = None;
        // Its last lines before what is said of its end: the pipes are
        // closed, and what is left in them is read at once.
        self.output.drained(Instant::now() + REAP_WAIT).await;
        status
    }
}

impl Drop for Child {
    /// The group was not found gone (the leader task was aborted): kill it,
    /// and leave a task that keeps it counted until it is gone, or exits the
    /// process if it survives SIGKILL.
    fn drop(&mut self) {
        let Some(live) = self.live.take() else {
            return;
        };
        let group = self.group();
        signal_group(group, Signal::SIGKILL);
        // Dropping the command and the guard leaves them to Tokio, which
        // reaps them as orphans; a zombie of the group runs nothing.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // The process is ending.
        };
        let groups = self.groups.clone();
        runtime.spawn(async move {
            if !gone_by(group, Instant::now() + REAP_WAIT).await {
                groups.unkillable(group);
            }
            debug!(pid = group.as_raw(), "the aborted command's group is gone");
            drop(live);
        });
    }
}

/// When a stop sends SIGKILL, and when it gives up on the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StopTimes {
    /// When the group gets SIGKILL if the command has not exited.
    pub(crate) kill_at: Instant,
    /// When a command that has still not been reaped counts as unkillable.
    pub(crate) give_up_at: Instant,
}

impl StopTimes {
    /// For a stop that begins `now`, with the library's stop `grace`, in a
    /// term whose deadline is `deadline`. The stop ends before the library
    /// would abort the leader task (`now + grace`, or [`STOP_SLACK`] before
    /// the deadline): an aborted task drops the command, and the library then
    /// releases the lease whether or not the command is gone. SIGKILL comes
    /// a quarter of the grace (at most 1 s) before that, and the command has
    /// half of that to be reaped.
    pub(crate) fn new(now: Instant, grace: Duration, deadline: Instant) -> StopTimes {
        let abort = (now + grace).min(deadline.checked_sub(STOP_SLACK).unwrap_or(deadline));
        let slack = (grace / 4).min(KILL_SLACK_MAX);
        let kill_at = abort.checked_sub(slack).unwrap_or(now).max(now);
        let give_up_at = (abort - slack / 2).max(kill_at + KILL_WAIT_MIN);
        StopTimes {
            kill_at,
            give_up_at,
        }
    }
}

/// Stops a command: sends `first` to its group, waits for it (`wait`)
/// until `kill_at`, then sends SIGKILL and waits until `give_up_at`.
///
/// A command still there then cannot be killed (uninterruptible sleep in
/// the kernel): it may run on for as long as it likes. Returning would let
/// the library release the lease and campaign again while it runs, so this
/// calls `unkillable` with [`exit::UNKILLABLE`] (which exits the process, and
/// the lease expires on its own) and never returns.
pub(crate) async fn stop_group(
    mut signal: impl FnMut(Signal),
    wait: impl Future<Output = io::Result<ExitStatus>>,
    first: Signal,
    times: StopTimes,
    unkillable: impl FnOnce(u8),
) -> io::Result<ExitStatus> {
    let mut wait = pin!(wait);
    debug!(signal = %first, ?times, "stopping the command");
    signal(first);
    if let Ok(status) = timeout_at(times.kill_at, &mut wait).await {
        return status;
    }
    warn!("the command did not exit in time; sending SIGKILL");
    signal(Signal::SIGKILL);
    if let Ok(status) = timeout_at(times.give_up_at, &mut wait).await {
        return status;
    }
    unkillable(exit::UNKILLABLE);
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::os::unix::process::ExitStatusExt;
    use std::sync::{Arc, Mutex};

    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[tokio::test(start_paused = true)]
    async fn stop_times_end_before_the_library_aborts() {
        let now = Instant::now();
        // A signal: the deadline is far; the library aborts at now + grace.
        let times = StopTimes::new(now, S(3), now + S(12));
        assert_eq!(times.kill_at, now + Duration::from_millis(2_250));
        assert_eq!(times.give_up_at, now + Duration::from_millis(2_625));
        // Renewals failed: the library aborts STOP_SLACK (0.45 s) before the deadline.
        let times = StopTimes::new(now, S(3), now + S(3));
        assert_eq!(times.kill_at, now + Duration::from_millis(1_800));
        assert_eq!(times.give_up_at, now + Duration::from_millis(2_175));
        // Too close to the deadline for a grace: SIGKILL at once, and still
        // a moment for it.
        let times = StopTimes::new(now, S(3), now + Duration::from_millis(200));
        assert_eq!(times.kill_at, now);
        assert_eq!(times.give_up_at, now + KILL_WAIT_MIN);
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_that_exits_after_sigterm_gets_no_sigkill() {
        let now = Instant::now();
        let times = StopTimes::new(now, S(3), now + S(12));
        let sent = RefCell::new(Vec::new());
        let wait = async {
            tokio::time::sleep(S(1)).await;
            Ok(ExitStatus::from_raw(143 << 8))
        };
        let status = stop_group(
            |s| sent.borrow_mut().push(s),
            wait,
            Signal::SIGTERM,
            times,
            |_| panic!("not unkillable"),
        )
        .await
        .unwrap();
        assert_eq!(status.code(), Some(143));
        assert_eq!(*sent.borrow(), [Signal::SIGTERM]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unkillable_command_exits_the_process_with_its_own_code_and_never_returns() {
        let now = Instant::now();
        let times = StopTimes::new(now, S(3), now + S(12));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let exited = Arc::new(Mutex::new(Vec::new()));
        let (signals, exits) = (sent.clone(), exited.clone());
        // A wait that never completes: the command survives SIGKILL.
        let stop = tokio::spawn(async move {
            stop_group(
                move |s| signals.lock().unwrap().push((s, Instant::now())),
                std::future::pending(),
                Signal::SIGINT,
                times,
                move |code| exits.lock().unwrap().push((code, Instant::now())),
            )
            .await
        });
        // Long past the deadline: the stop has still not returned, so the
        // leader task has not ended and the library cannot release the lease.
        tokio::time::sleep(S(60)).await;
        assert!(!stop.is_finished(), "returned to the library");
        let sent = sent.lock().unwrap().clone();
        assert_eq!(
            sent,
            [(Signal::SIGINT, now), (Signal::SIGKILL, times.kill_at)]
        );
        let exited = exited.lock().unwrap().clone();
        assert_eq!(exited, [(exit::UNKILLABLE, times.give_up_at)]);
        assert!(times.give_up_at < now + S(3), "before the library aborts");
        assert!(
            ![
                exit::OK,
                exit::ERROR,
                exit::USAGE,
                exit::FREE_OR_NOT_ACQUIRED
            ]
            .contains(&exit::UNKILLABLE)
                && exit::UNKILLABLE != exit::LEASE_LOST,
            "a code of its own"
        );
        stop.abort();
    }
}
