//! The guard: a small process that kills the command's process group when
//! `run` can no longer be trusted to, before the lease could expire.
//!
//! # Why a separate process
//!
//! `run` stops its command when leadership ends, but nothing inside `run`
//! helps when `run` itself dies (SIGKILL, the OOM killer) or stops running
//! (SIGSTOP, a frozen VM's process, a wedged runtime): the command would go
//! on without the lease while another host's command starts. So every
//! command gets a guard, which is this same binary re-executed with a hidden
//! subcommand ([`SUBCOMMAND`]):
//!
//! - The guard starts first, in a new process group, and the command is then
//!   started *into the guard's group*. While the guard lives (or is an
//!   unreaped zombie of `run`) its process id, hence the group id, cannot be
//!   reused, and one `killpg` stops the guard, the command and everything
//!   the command started that stayed in the group.
//! - `run` holds the write end of a pipe to the guard's stdin and writes the
//!   term's deadline (see `LeaderContext::deadline`) to it whenever the
//!   deadline moves, as an absolute `CLOCK_MONOTONIC` time in nanoseconds.
//!   `CLOCK_MONOTONIC` is one clock for the whole system on Linux, so both
//!   processes read the same time; `run` reads the clock first and adds the
//!   time left to the deadline after, so a pause between the two reads can
//!   only make the deadline it writes earlier.
//! - The guard kills the group with SIGKILL when its stdin ends (`run` died:
//!   the kernel closes the pipe), or when its clock reaches the deadline
//!   minus [`SLACK`] without a newer deadline (`run` is frozen, or cannot
//!   renew and did not stop the command). The deadline comes at least the
//!   safety margin before the server could expire the lease, so the command
//!   never runs past that instant, whatever happens to `run`.
//! - The guard answers the first deadline with a line, and `run` starts the
//!   command only after that answer: there is never a command without a
//!   guard that knows its deadline.
//! - `run` forwards SIGINT, SIGTERM and SIGHUP to the command's group, which
//!   is the guard's group, so the guard ignores them. The crate forbids
//!   `unsafe`, so it cannot set them to `SIG_IGN`; it registers handlers
//!   (through Tokio) that do nothing, which has the same effect. Handlers
//!   are registered before the guard answers, hence before anyone can send
//!   it a forwarded signal.
//!
//! A thread in `run` instead of a process would die or freeze with `run`;
//! `PR_SET_PDEATHSIG` on the command covers neither a frozen `run` nor the
//! command's own children, and needs `unsafe` to set up. A process per
//! command costs one fork and exec per term.
//!
//! The guard does not help when the guard itself is stopped or killed alone
//! (then `run`, if it runs, sees the guard exit and kills the command), nor
//! across a suspend of the whole machine (`CLOCK_MONOTONIC` stops while
//! suspended; so does the library's own clock).

use std::io::{self, BufRead, Write};
use std::process::{ExitCode, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::{getpgrp, Pid};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::time::Instant;
use tracing::debug;

/// The hidden subcommand that makes this binary a guard.
pub(crate) const SUBCOMMAND: &str = "__guard";

/// How long before the deadline the guard kills the group: room for its
/// one-line message and for the kernel to deliver SIGKILL.
pub(crate) const SLACK: Duration = Duration::from_millis(250);

/// The longest the guard waits for its message to be written (stderr may
/// be a pipe nobody reads) before it kills the group anyway.
const MESSAGE_WAIT: Duration = Duration::from_millis(50);

/// The guard's answer to the first deadline.
const READY: &str = "ready";

/// `CLOCK_MONOTONIC` now, as the time since its origin.
fn monotonic_now() -> io::Result<Duration> {
    Ok(clock_gettime(ClockId::CLOCK_MONOTONIC)?.into())
}

/// `deadline` on `CLOCK_MONOTONIC`, never later than the real one: the raw
/// clock is read first, the time left to the deadline after.
fn to_monotonic(deadline: Instant) -> io::Result<Duration> {
    let now = monotonic_now()?;
    Ok(now + deadline.saturating_duration_since(Instant::now()))
}

/// The `run` side of a guard: the process and the pipe to its stdin.
pub(crate) struct Guard {
    process: tokio::process::Child,
    stdin: ChildStdin,
    group: Pid,
}

impl Guard {
    /// Starts a guard in a new process group, tells it `deadline`, and
    /// returns once it has answered.
    ///
    /// # Errors
    ///
    /// When the guard cannot be started, or does not answer before the
    /// deadline (it then is killed).
    pub(crate) async fn start(deadline: Instant) -> io::Result<Guard> {
        let mut command = Command::new(own_executable()?);
        command
            // Named for `ps`, not `/proc/self/exe`.
            .arg0("blob-mutex")
            .arg(SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(crate::group::test_kill_delay().is_none());
        let mut process = crate::orphans::spawn(|| command.spawn())?;
        let id = process
            .id()
            .ok_or_else(|| io::Error::other("the guard exited at once"))?;
        let group = Pid::from_raw(
            i32::try_from(id).map_err(|_| io::Error::other("process id out of range"))?,
        );
        let (Some(stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
            return Err(io::Error::other("the guard's pipes are missing"));
        };
        let mut guard = Guard {
            process,
            stdin,
            group,
        };
        guard.tell(deadline).await?;
        let mut answer = String::new();
        let mut stdout = BufReader::new(stdout);
        match tokio::time::timeout_at(deadline, stdout.read_line(&mut answer)).await {
            Ok(Ok(_)) if answer.trim_end() == READY => {
                debug!(pid = id, "guard ready");
                Ok(guard)
            }
            Ok(Ok(_)) => Err(io::Error::other("the guard ended before it was ready")),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other("the guard did not answer in time")),
        }
    }

    /// The guard's process group, which the command joins.
    pub(crate) fn group(&self) -> Pid {
        self.group
    }

    /// Tells the guard the current deadline.
    ///
    /// Cancellation safe as far as the guard is concerned: the line is far
    /// shorter than `PIPE_BUF`, so a pipe write puts all of it or none.
    ///
    /// # Errors
    ///
    /// When the guard is gone.
    pub(crate) async fn tell(&mut self, deadline: Instant) -> io::Result<()> {
        let line = format!("{}\n", to_monotonic(deadline)?.as_nanos());
        self.stdin.write_all(line.as_bytes()).await
    }

    /// Waits until the guard has exited.
    ///
    /// Cancellation safe.
    pub(crate) async fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        self.process.wait().await
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Whatever joined the guard's group must not outlive it.
        crate::group::signal_group(self.group, Signal::SIGKILL);
    }
}

/// This binary, to run again as a guard. `/proc/self/exe` still works when
/// the file was replaced or removed since `run` started (an upgrade).
fn own_executable() -> io::Result<std::path::PathBuf> {
    let proc_exe = std::path::PathBuf::from("/proc/self/exe");
    if proc_exe.exists() {
        Ok(proc_exe)
    } else {
        std::env::current_exe()
    }
}

/// The guard process: reads deadlines on stdin, kills its process group on
/// end of input or when the deadline comes. Returns only on a failure to set
/// up, before it has answered (and so before any command joined it).
pub(crate) fn serve() -> ExitCode {
    // Handlers that do nothing: the signals `run` forwards to the command's
    // group must not end the guard.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("blob-mutex: guard: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let handlers = runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
        ]
        .into_iter()
        .map(signal)
        .collect::<io::Result<Vec<_>>>()
    });
    let _handlers = match handlers {
        Ok(handlers) => handlers,
        Err(e) => {
            eprintln!("blob-mutex: guard: cannot ignore signals: {e}");
            return ExitCode::FAILURE;
        }
    };

    let (tx, deadlines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let Ok(nanos) = line
                .map_err(drop)
                .and_then(|l| l.trim().parse::<u64>().map_err(drop))
            else {
                break;
            };
            if tx.send(Duration::from_nanos(nanos)).is_err() {
                return;
            }
        }
        // Dropping `tx` is the end of input.
    });
    let Ok(mut deadline) = deadlines.recv() else {
        // `run` went away before a command could join: nothing to guard.
        return ExitCode::SUCCESS;
    };
    let mut stdout = io::stdout();
    if writeln!(stdout, "{READY}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    loop {
        let Ok(now) = monotonic_now() else {
            kill_own_group("cannot read the clock");
        };
        let left = deadline.saturating_sub(SLACK).saturating_sub(now);
        if left.is_zero() {
            kill_own_group(
                "the deadline came without a renewal (the blob-mutex that holds the lease, run or schedule, is stopped or cannot renew)",
            );
        }
        match deadlines.recv_timeout(left) {
            Ok(newer) => deadline = deadline.max(newer),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                kill_own_group("the blob-mutex that holds the lease (run or schedule) ended")
            }
        }
    }
}

/// Says why (waiting at most [`MESSAGE_WAIT`]), then kills the guard's
/// whole process group, the guard included.
fn kill_own_group(why: &'static str) -> ! {
    let (said, written) = mpsc::channel();
    std::thread::spawn(move || {
        eprintln!("blob-mutex: guard: {why}; killing the command's process group");
        let _ = said.send(());
    });
    let _ = written.recv_timeout(MESSAGE_WAIT);
    if let Some(delay) = crate::group::test_kill_delay() {
        std::thread::sleep(delay);
    }
    let _ = killpg(getpgrp(), Signal::SIGKILL);
    // SIGKILL to its own group ends the guard; should it somehow not have,
    // exiting still closes nothing the command needs and says it failed.
    std::process::exit(1);
}
