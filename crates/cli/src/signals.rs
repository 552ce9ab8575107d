//! The signals an operator sends a long-running command (`run`,
//! `schedule`): the first SIGINT, SIGTERM or SIGHUP stops it, its running
//! child getting the same signal; a second kills the child's group.

use anyhow::Result;
use blob_mutex::CancellationToken;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tracing::warn;

/// Notes a signal in a command's state: the first is recorded in
/// `signal` (`None` back: stop gracefully); a later one answers the
/// running child's group, to be killed.
pub(crate) fn note(
    signal: &mut Option<Signal>,
    running: Option<Pid>,
    received: Signal,
) -> Option<Pid> {
    if signal.is_none() {
        *signal = Some(received);
        None
    } else {
        running
    }
}

/// Waits for signals until the process ends. `note` records each one and
/// answers the running child's group when an earlier signal was recorded
/// already (the child is then killed); `stopping` logs the first; `token`
/// is cancelled at every signal, which stops the caller's work.
pub(crate) async fn forward(
    token: CancellationToken,
    mut note: impl FnMut(Signal) -> Option<Pid>,
    stopping: impl Fn(Signal),
) -> Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    loop {
        let received = tokio::select! {
            _ = interrupt.recv() => Signal::SIGINT,
            _ = terminate.recv() => Signal::SIGTERM,
            _ = hangup.recv() => Signal::SIGHUP,
        };
        if let Some(group) = note(received) {
            warn!(signal = %received, "second signal: killing the command");
            crate::group::signal_group(group, Signal::SIGKILL);
        } else {
            stopping(received);
        }
        token.cancel();
    }
}
