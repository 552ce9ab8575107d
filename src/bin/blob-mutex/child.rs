//! The command `run` supervises: started in its own process group, so that
//! stopping it stops everything it started.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tracing::{debug, warn};

/// The environment variable that carries the fencing token.
pub(crate) const EPOCH_ENV: &str = "BLOB_MUTEX_EPOCH";
/// The environment variable that carries this host's holder name.
pub(crate) const HOLDER_ENV: &str = "BLOB_MUTEX_HOLDER";

/// A running command and its process group.
///
/// Dropping it before it was reaped kills the whole group, so a command never
/// outlives an aborted leader task.
pub(crate) struct Child {
    process: tokio::process::Child,
    group: Pid,
    reaped: bool,
}

impl Child {
    /// Starts `command` (program and arguments) in a new process group, with
    /// the epoch and holder in its environment.
    pub(crate) fn spawn(command: &[OsString], epoch: u64, holder: &str) -> io::Result<Child> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
        let process = tokio::process::Command::new(program)
            .args(args)
            .env(EPOCH_ENV, epoch.to_string())
            .env(HOLDER_ENV, holder)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let id = process
            .id()
            .ok_or_else(|| io::Error::other("the command exited before it could be watched"))?;
        let group = Pid::from_raw(
            i32::try_from(id).map_err(|_| io::Error::other("process id out of range"))?,
        );
        debug!(pid = id, epoch, "started the command");
        Ok(Child {
            process,
            group,
            reaped: false,
        })
    }

    /// The process group, which is the command's process id.
    pub(crate) fn group(&self) -> Pid {
        self.group
    }

    /// Waits until the command exits, then kills what it left behind in its
    /// process group: those processes would run without the lease.
    ///
    /// Cancellation safe: dropping the future leaves the command running.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = self.process.wait().await?;
        self.reaped = true;
        signal_group(self.group, Signal::SIGKILL);
        Ok(status)
    }

    /// Sends `first` to the process group, waits up to `grace` for the
    /// command to exit, then kills the group and reaps the command.
    pub(crate) async fn stop(&mut self, first: Signal, grace: Duration) -> io::Result<ExitStatus> {
        debug!(pid = %self.group, signal = %first, ?grace, "stopping the command");
        signal_group(self.group, first);
        if let Ok(status) = tokio::time::timeout(grace, self.wait()).await {
            return status;
        }
        warn!(pid = %self.group, ?grace, "the command did not exit in time; sending SIGKILL");
        signal_group(self.group, Signal::SIGKILL);
        self.wait().await
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            signal_group(self.group, Signal::SIGKILL);
        }
    }
}

/// Sends `signal` to every process of `group`; a group that is gone already
/// is not an error.
pub(crate) fn signal_group(group: Pid, signal: Signal) {
    match killpg(group, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => warn!(pid = %group, %signal, error = %e, "could not signal the command"),
    }
}
