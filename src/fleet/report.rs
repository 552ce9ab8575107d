//! What a job is given ([`Slot`]) and what a host reports of each slot it
//! settles ([`SlotReport`], [`SlotOutcome`]).

use std::time::SystemTime;

/// The slot a job runs for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Slot {
    /// The slot's instant.
    pub at: SystemTime,
    /// Its key in the record: the instant in UTC, RFC 3339
    /// (`2026-11-28T02:30:00Z`).
    pub key: String,
    /// This run's number: 1, then one more for each retry.
    pub attempt: u32,
}

/// What became of a slot, as the host that settled it reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotOutcome {
    /// Its job succeeded and the record says so. When the answer to the
    /// record's write was lost with the lease, this is told at this host's
    /// next read of the record, once it shows the write landed.
    Ran {
        /// The term's epoch (the fencing token the job was given).
        epoch: u64,
        /// Which run of the slot it was.
        attempt: u32,
    },
    /// Its job failed (`error`); it is retried while retries are left.
    Failed {
        /// The term's epoch.
        epoch: u64,
        /// Which run of the slot it was.
        attempt: u32,
        /// The job's error.
        error: String,
    },
    /// Its job ran but its record did not land: the lease was lost
    /// before the write could (a write that fails while the lease is held
    /// is tried again), or its answer was lost and a later read of the
    /// record showed it had not landed. The next holder runs it again.
    Unrecorded {
        /// The term's epoch.
        epoch: u64,
        /// Why the write failed.
        error: String,
    },
    /// Its job failed after its term was told to stop (`reason`: this
    /// host's shutdown, a lost lease, the deadline): the run counts as no
    /// attempt, as a death does not, and the record keeps the mark of its
    /// start, so that the next holder runs it again as the same attempt
    /// (reporting this run as cut short).
    Stopped {
        /// The term's epoch.
        epoch: u64,
        /// Why its term was told to stop.
        reason: crate::ending::StopReason,
    },
    /// It was due, and a holder that is not one of the schedule's hosts
    /// (its term advertised no schedule: a `blob-mutex run`, a guard)
    /// held the lease: it could not run. Each host reports each such slot
    /// once; if it leaves its window before the lease is free, the next
    /// term records it missed.
    Blocked {
        /// The lease's holder.
        holder: String,
    },
    /// It came due while the previous slot's job ran ([`Overlap::Skip`](super::Overlap::Skip)).
    Skipped,
    /// Another host ran its job to its end; this host skipped it as done.
    /// Each host reports each slot that comes due while it runs once: the
    /// host that ran it as [`Ran`](Self::Ran), every other as this.
    DoneElsewhere {
        /// The holder that ran it.
        holder: String,
        /// The epoch of its term.
        epoch: u64,
    },
    /// Another term marked a run of it begun and never recorded its end:
    /// that term's host died, froze or lost its lease before it could (the
    /// record holds the mark the term wrote before the job, and nothing
    /// after). Rarely, the mark's answer was lost with the lease and its
    /// job never began; that host's log says so. This host runs it again,
    /// as the same attempt, and reports how that run ends next.
    CutShort {
        /// The holder whose run was cut short.
        holder: String,
        /// The epoch of its term.
        epoch: u64,
    },
    /// Nobody ran it within the catch-up window; `count` slots up to this
    /// one were.
    Missed {
        /// How many slots went past the window together.
        count: u64,
    },
}

/// A report of one slot, sent by the host that settled it, or that found it
/// settled by another ([`SlotOutcome::DoneElsewhere`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotReport {
    /// The slot's key ([`Slot::key`]).
    pub slot: String,
    /// The holder that reports it: this host.
    pub holder: String,
    /// What became of it.
    pub outcome: SlotOutcome,
}
