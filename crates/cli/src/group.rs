//! Signals to a command's process group, which `run` and the command's
//! guard both send, and the test hook that delays a SIGKILL.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tracing::warn;

/// Test only, read in debug builds only: `BLOB_MUTEX_TEST_KILL_DELAY=<ms>`
/// delivers every SIGKILL to a command's group (by `run` or by its guard)
/// that many milliseconds late, as the kernel does to a process in
/// uninterruptible sleep, and keeps Tokio from killing the command and the
/// guard when their handles are dropped, so that tests can see what `run`
/// does while a group outlives SIGKILL. Release builds ignore it.
const KILL_DELAY_ENV: &str = "BLOB_MUTEX_TEST_KILL_DELAY";

/// The delay [`KILL_DELAY_ENV`] asks for, in a debug build.
pub(crate) fn test_kill_delay() -> Option<Duration> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let millis = std::env::var(KILL_DELAY_ENV).ok()?.parse().ok()?;
    Some(Duration::from_millis(millis))
}

/// Sends `signal` to every process of `group`; a group that is gone already
/// is not an error.
pub(crate) fn signal_group(group: Pid, signal: Signal) {
    if signal == Signal::SIGKILL {
        if let Some(delay) = test_kill_delay() {
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                let _ = killpg(group, signal);
            });
            return;
        }
    }
    match killpg(group, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => warn!(pid = group.as_raw(), %signal, error = %e, "could not signal the command"),
    }
}
