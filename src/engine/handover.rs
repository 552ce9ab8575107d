//! The decisions of a planned handover (see `successor`), as pure functions
//! (std only: no clock, no I/O), so that the model checker (crates/model/tests/model)
//! compiles this file as it is and runs the same decisions: which candidate
//! is the successor, what a term does with its lease at its end, and what
//! follows an attempt at Change Lease.

use std::cmp::Reverse;

/// How many times a handover tries Change Lease before it releases instead.
pub(crate) const CHANGE_ATTEMPTS: u32 = 2;

/// Which of `candidates` (each its holder name and priority) a leader of
/// priority `mine`, named `me`, hands over to: the highest priority
/// strictly above its own, and among equals the smallest holder name, so
/// that every leader chooses alike. Its own record (left from before it
/// led) never counts. The index in `candidates`.
pub(crate) fn successor<'c>(
    candidates: impl IntoIterator<Item = (&'c str, i64)>,
    me: &str,
    mine: i64,
) -> Option<usize> {
    candidates
        .into_iter()
        .enumerate()
        .filter(|(_, (holder, priority))| *priority > mine && *holder != me)
        .min_by_key(|(_, (holder, priority))| (Reverse(*priority), *holder))
        .map(|(index, _)| index)
}

/// What a term does with its lease once it is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Ending<T> {
    /// Change Lease to the successor's proposed id `T`.
    HandOver(T),
    /// Release the lease.
    Release,
    /// Nothing: the lease is not the term's any more, or a task of the
    /// term may still run (the lease is left to expire).
    LeaveIt,
}

/// The end of a term: the lease changes hands (handed over or released)
/// only once every task of the term has stopped (`tasks_stopped`) and while
/// it is still the term's (`lease_held`); it is handed over only when the
/// term stopped for a handover (`handing_over`) to a chosen `successor`.
pub(crate) fn ending<T>(
    tasks_stopped: bool,
    lease_held: bool,
    handing_over: bool,
    successor: Option<T>,
) -> Ending<T> {
    match (tasks_stopped && lease_held, handing_over, successor) {
        (false, _, _) => Ending::LeaveIt,
        (true, true, Some(to)) => Ending::HandOver(to),
        (true, _, _) => Ending::Release,
    }
}

/// How an attempt at Change Lease went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Changed {
    /// The lease is the successor's.
    Done,
    /// Storage said the lease is not ours any more.
    NotOurs,
    /// Any other failure (transient: timed out, throttled, refused).
    Failed,
}

/// What follows an attempt at Change Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AfterChange {
    /// Nothing more: handed over, or not ours to hand over.
    Stop,
    /// Try Change Lease again.
    Again,
    /// Release the lease instead, so that it does not wait out its expiry
    /// (a change that took effect unseen makes the release fail, harmlessly).
    Release,
}

/// After attempt number `attempt` (from 1) went as `changed`.
pub(crate) fn after_change(attempt: u32, changed: Changed) -> AfterChange {
    match changed {
        Changed::Done | Changed::NotOurs => AfterChange::Stop,
        Changed::Failed if attempt < CHANGE_ATTEMPTS => AfterChange::Again,
        Changed::Failed => AfterChange::Release,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_changes_hands_only_once_the_tasks_stopped_and_while_it_is_held() {
        assert_eq!(ending(false, true, true, Some(1)), Ending::LeaveIt);
        assert_eq!(ending(true, false, true, Some(1)), Ending::LeaveIt);
        assert_eq!(ending(true, true, true, Some(1)), Ending::HandOver(1));
        assert_eq!(ending(true, true, false, Some(1)), Ending::Release);
        assert_eq!(ending::<u8>(true, true, true, None), Ending::Release);
    }

    #[test]
    fn a_change_is_tried_twice_then_the_lease_released() {
        assert_eq!(after_change(1, Changed::Failed), AfterChange::Again);
        assert_eq!(after_change(2, Changed::Failed), AfterChange::Release);
        assert_eq!(after_change(1, Changed::NotOurs), AfterChange::Stop);
        assert_eq!(after_change(1, Changed::Done), AfterChange::Stop);
    }
}
