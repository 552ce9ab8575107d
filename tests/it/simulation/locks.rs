//! Locks by name in the simulation: two instances of `BlobLocks` over one
//! set, each taking the locks `order-42` and `order-7` in turn with
//! `acquire`, holding each for a few steps of 2 s (each begun only while
//! the guard is current) and releasing it. Each hold is a term of the
//! history, reported once by its release; every lock is held again within
//! the bound after the last fault.

use std::sync::Arc;
use std::time::Duration;

use blob_mutex::{BlobLocks, CancellationToken, Error};
use tokio::time::sleep;

use super::{Judged, Simulated};
use crate::support::faulty::FaultySet;
use crate::support::matrix::{Campaign, Cell, Instance, Mode, Report, GUARD_STEP};

const NAMES: [&str; 2] = ["order-42", "order-7"];
const STEPS: u32 = 3;

pub(super) struct LocksRow;

fn instance(cell: &Arc<Cell>, index: usize) -> Instance {
    let store = cell.accounts.set(0, &cell.name).by(index);
    let locks = BlobLocks::with_store(store, cell.options_for(index)).unwrap();
    let cell = cell.clone();
    let again = Box::new(move |token: CancellationToken| {
        let (locks, cell) = (locks.clone(), cell.clone());
        Box::pin(take_turns(cell, index, locks, token)) as Campaign
    });
    Instance::start(
        index,
        Box::new(std::collections::BTreeMap::new),
        Box::new(|| true),
        again,
    )
}

/// Takes each lock in turn until stopped.
async fn take_turns(
    cell: Arc<Cell>,
    index: usize,
    locks: BlobLocks<FaultySet>,
    token: CancellationToken,
) -> Result<(), Error> {
    for name in NAMES.iter().cycle() {
        let guard = tokio::select! {
            guard = locks.acquire(name) => guard,
            () = token.cancelled() => return Ok(()),
        };
        // A failed campaign (storage down past its limits) is tried again
        // after a pause, as a caller would.
        let Ok(guard) = guard else {
            sleep(Duration::from_secs(1)).await;
            continue;
        };
        let ctx = guard.context().clone();
        let run = cell.started(index, name, &ctx);
        for _ in 0..STEPS {
            if !guard.is_current() || token.is_cancelled() {
                break;
            }
            run.unit(&ctx);
            sleep(GUARD_STEP).await;
        }
        drop(run);
        let report = guard.release().await?;
        cell.report(Report {
            instance: index,
            key: (*name).to_owned(),
            epoch: report.epoch,
            reason: report.reason.as_str(),
            tasks: report.tasks.as_str(),
        });
    }
    Ok(())
}

impl Mode for LocksRow {
    const NAME: &'static str = "locks";
    const ACCOUNTS: usize = 1;
    const SET: bool = false;

    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        (0..2).map(|i| instance(cell, i)).collect()
    }

    fn keys() -> Vec<String> {
        NAMES.iter().map(|n| (*n).to_owned()).collect()
    }

    const STEP: Duration = GUARD_STEP;
}

impl Simulated for LocksRow {
    /// A lease's expiry, and the other lock's hold before this one's turn.
    const BOUND: Duration = Duration::from_secs(40);

    fn judge(_: &Judged<'_>) {}
}

sweeps! {
    locks, LocksRow;
}
