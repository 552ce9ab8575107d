//! The shapes the simulation runs, each as its row of the fault matrix
//! (`support/matrix.rs`), with its bound and its judge, and one sweep
//! test per way of failing.

use std::time::Duration;

use super::run::{run, Outcome};
use super::{Judged, Simulated};
use crate::support::matrix::{
    GuardHandoverRow, GuardRow, HandoverRow, LeaseSetRow, Mode, MutexRow, QuorumLeaseSetRow,
    QuorumMutexRow, D,
};
use crate::support::plan::Plan;
use crate::support::promises;

/// A lease whose holder's renewals failed is free a lease after the last
/// one storage took; a follower's next attempt, a second or two later,
/// takes it.
const ONE_LEASE: Duration = Duration::from_secs(D.as_secs() + 5);

/// Every lease owned just before the stop, and the matrix's three
/// promises over the record.
fn owned_and_promises<M: Mode>(judged: &Judged<'_>) {
    for key in M::keys() {
        assert!(
            judged.owned.iter().any(|o| o.contains_key(&key)),
            "{key} was not owned at the end, {:?} after the last fault: {:?}",
            judged.stopped - judged.calm,
            judged.owned
        );
    }
    promises::always::<M>(judged.cell, judged.instances);
}

macro_rules! simulated {
    ($($row:ty, $bound:expr;)*) => {
        $(
            impl Simulated for $row {
                const BOUND: Duration = $bound;
                fn judge(judged: &Judged<'_>) {
                    owned_and_promises::<$row>(judged);
                }
            }
        )*
    };
}

simulated! {
    MutexRow, ONE_LEASE;
    GuardRow, ONE_LEASE;
    HandoverRow, ONE_LEASE;
    GuardHandoverRow, ONE_LEASE;
    LeaseSetRow, Duration::from_secs(40);
    QuorumMutexRow, ONE_LEASE;
    QuorumLeaseSetRow, Duration::from_secs(40);
}

/// A run of the shape named `shape` (its row's name).
pub(super) fn run_named(shape: &str, plan: Plan) -> Outcome {
    let name = format!("{shape} replay");
    match shape {
        "mutex" => run::<MutexRow>(plan, &name),
        "guard" => run::<GuardRow>(plan, &name),
        "handover" => run::<HandoverRow>(plan, &name),
        "guard-handover" => run::<GuardHandoverRow>(plan, &name),
        "lease-set" => run::<LeaseSetRow>(plan, &name),
        "quorum-mutex" => run::<QuorumMutexRow>(plan, &name),
        "quorum-lease-set" => run::<QuorumLeaseSetRow>(plan, &name),
        "once-key" => run::<super::once::DoneKeyRow>(plan, &name),
        "once-period" => run::<super::once::PeriodRow>(plan, &name),
        "locks" => run::<super::locks::LocksRow>(plan, &name),
        "state" => run::<super::state::StateRow>(plan, &name),
        #[cfg(feature = "schedule")]
        "schedule" => run::<super::schedule::ScheduleRow>(plan, &name),
        other => panic!("no shape named {other}"),
    }
}

sweeps! {
    mutex, MutexRow;
    guard, GuardRow;
    handover, HandoverRow;
    guard_handover, GuardHandoverRow;
    lease_set, LeaseSetRow;
    mutex_on_a_quorum, QuorumMutexRow;
    lease_set_on_a_quorum, QuorumLeaseSetRow;
}
