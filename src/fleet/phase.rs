//! What a schedule's loop is doing, as its health reads it: not running,
//! waiting for its next slot, or at a slot (campaigning for it, or running
//! it).

use jiff::Timestamp;
use tokio::sync::watch;

/// Where a host's schedule stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// [`run`](super::BlobSchedule::run) is not running.
    Stopped,
    /// Asleep until the next slot's instant on storage's clock; `None`: no
    /// slot of the expression ever comes again.
    Waiting(Option<Timestamp>),
    /// Awake: reading the record, campaigning for a slot that is due, or
    /// running it.
    Awake,
    /// A slot is due, and a holder that is not one of the schedule's hosts
    /// (named) holds the lease: no slot can run.
    Blocked(std::sync::Arc<str>),
}

/// Keeps a schedule's phase while [`run`](super::BlobSchedule::run) runs,
/// and sets it [`Phase::Stopped`] when the run returns or is dropped.
pub(super) struct Running<'a>(&'a watch::Sender<Phase>);

impl<'a> Running<'a> {
    pub(super) fn start(phase: &'a watch::Sender<Phase>) -> Self {
        phase.send_replace(Phase::Awake);
        Running(phase)
    }

    pub(super) fn set(&self, phase: Phase) {
        self.0.send_replace(phase);
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.send_replace(Phase::Stopped);
    }
}
