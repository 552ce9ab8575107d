//! Run once in the simulation: two instances call `run_once_with_options`
//! every 5 s, with a done key (once for ever) or with a period (at most
//! once per 20 s on storage's clock); the task takes 2 s. Each task run
//! is a term of the history, reported once by the mutex; beyond that:
//!
//! - `Ran` only when the record holds the run (the key, or a start);
//! - with the key, no run begins once a run's call returned `Ran`;
//! - with the period, a run begins no sooner than the period after the
//!   start of a run whose record landed (storage's clock counts whole
//!   seconds: a second early at most);
//! - once the bound has passed after the last fault, the key is recorded
//!   (the period: a run every period and a call).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use blob_mutex::store::LeaseStore;
use blob_mutex::{
    BlobDistributedMutex, CancellationToken, Error, LeaderContext, OnceOptions, OnceOutcome,
};
use futures_util::FutureExt;
use tokio::time::{sleep, Instant};

use super::{Judged, Simulated};
use crate::support::faulty::Faulty;
use crate::support::matrix::{collect, Campaign, Cell, Instance, Mode, Report, D};

const TASK: Duration = Duration::from_secs(2);
const CALLS_EVERY: Duration = Duration::from_secs(5);
const PERIOD: Duration = Duration::from_secs(20);

/// A call's outcome, as the instance saw it.
#[derive(Clone, Debug)]
struct Call {
    instance: usize,
    /// The epoch of the term that ran the task, for a run.
    epoch: Option<u64>,
    /// `ran`, `unrecorded`, `skipped`, or the error.
    outcome: String,
    at: Instant,
}

thread_local! {
    static CALLS: RefCell<Vec<Call>> = const { RefCell::new(Vec::new()) };
}

/// Run once with `with_done_key("v1")`.
pub(super) struct DoneKeyRow;
/// Run once with `with_at_most_every(20 s)`.
pub(super) struct PeriodRow;

fn lease(cell: &Cell) -> blob_mutex::testing::MemoryLeaseStore {
    cell.accounts.sets[0].get("once")
}

/// Instance `index`: calls every [`CALLS_EVERY`] until stopped.
fn instance(cell: &Arc<Cell>, index: usize, options: OnceOptions) -> Instance {
    let store = cell.accounts.lease(0, &cell.name, "once").by(index);
    let mutex = Arc::new(
        BlobDistributedMutex::with_store_for_guards(store, cell.options_for(index)).unwrap(),
    );
    collect(cell, mutex.term_reports(), move |r| Report {
        instance: index,
        key: "once".to_owned(),
        epoch: r.epoch,
        reason: r.reason.as_str(),
        tasks: r.tasks.as_str(),
    });
    let cell = cell.clone();
    let again = Box::new(move |token: CancellationToken| {
        let (mutex, cell, options) = (mutex.clone(), cell.clone(), options.clone());
        Box::pin(calls(cell, index, mutex, options, token)) as Campaign
    });
    Instance::start(
        index,
        Box::new(std::collections::BTreeMap::new),
        Box::new(|| true),
        again,
    )
}

async fn calls(
    cell: Arc<Cell>,
    index: usize,
    mutex: Arc<BlobDistributedMutex<Faulty>>,
    options: OnceOptions,
    token: CancellationToken,
) -> Result<(), Error> {
    while !token.is_cancelled() {
        let task_cell = cell.clone();
        let task = move |ctx: LeaderContext| async move {
            let run = task_cell.started(index, "once", &ctx);
            tokio::select! {
                () = sleep(TASK) => {}
                _ = ctx.cancelled() => {}
            }
            drop(run);
            Ok::<(), Error>(())
        };
        let called = mutex
            .run_once_with_options(token.child_token(), options.clone(), task)
            .await;
        let (epoch, outcome) = match called {
            Ok(OnceOutcome::Ran { report, .. }) => (Some(report.epoch), "ran".to_owned()),
            Ok(OnceOutcome::Unrecorded { report, .. }) => {
                (Some(report.epoch), "unrecorded".to_owned())
            }
            Ok(OnceOutcome::Skipped { .. }) => (None, "skipped".to_owned()),
            Ok(other) => (None, format!("{other:?}")),
            Err(e) => (None, format!("error: {e}")),
        };
        CALLS.with(|c| {
            c.borrow_mut().push(Call {
                instance: index,
                epoch,
                outcome,
                at: Instant::now(),
            });
        });
        tokio::select! {
            () = sleep(CALLS_EVERY) => {}
            () = token.cancelled() => {}
        }
    }
    Ok(())
}

macro_rules! once_row {
    ($row:ty, $name:literal, $options:expr) => {
        impl Mode for $row {
            const NAME: &'static str = $name;
            const ACCOUNTS: usize = 1;
            const SET: bool = false;

            async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
                CALLS.with(|c| c.borrow_mut().clear());
                (0..2).map(|i| instance(cell, i, $options)).collect()
            }

            fn keys() -> Vec<String> {
                vec!["once".to_owned()]
            }
        }
    };
}

once_row!(
    DoneKeyRow,
    "once-key",
    OnceOptions::default().with_done_key("v1")
);
once_row!(
    PeriodRow,
    "once-period",
    OnceOptions::default().with_at_most_every(PERIOD)
);

/// The state of the lease blob now.
fn state(cell: &Cell) -> String {
    let state = lease(cell)
        .read_state()
        .now_or_never()
        .expect("the store in memory answers at once")
        .unwrap();
    String::from_utf8_lossy(&state).into_owned()
}

impl Simulated for DoneKeyRow {
    /// A lease's expiry, a call's interval and the task.
    const BOUND: Duration = Duration::from_secs(D.as_secs() + 10);
    /// Once its key is recorded, nothing runs.
    const MAY_REST: bool = true;

    fn judge(judged: &Judged<'_>) {
        let calls = CALLS.with(|c| std::mem::take(&mut *c.borrow_mut()));
        let runs = judged.cell.runs();
        let record = state(judged.cell);
        let context = format!("record: {record:?}\ncalls: {calls:#?}\nruns: {runs:#?}");
        let recorded = record.lines().any(|l| l == "key=v1");
        let ran: Vec<&Call> = calls.iter().filter(|c| c.outcome == "ran").collect();
        assert!(
            ran.is_empty() || recorded,
            "a call returned Ran, and the record holds no key\n{context}"
        );
        if let Some(first) = ran.first() {
            let after = runs.iter().filter(|r| r.start > first.at).count();
            assert_eq!(after, 0, "runs began after a call returned Ran\n{context}");
        }
        // One failed request changes nothing: the task runs once.
        if judged.faults <= 1 {
            assert_eq!(
                runs.len(),
                1,
                "{} failed request(s) made the task run {} times\n{context}",
                judged.faults,
                runs.len()
            );
        }
        assert!(
            recorded,
            "the key is not recorded {:?} after the last fault\n{context}",
            judged.stopped - judged.calm
        );
    }
}

impl Simulated for PeriodRow {
    const LENGTH: Duration = Duration::from_secs(90);
    /// A lease's expiry, a period and a call's interval.
    const BOUND: Duration = Duration::from_secs(D.as_secs() + PERIOD.as_secs() + 10);

    fn judge(judged: &Judged<'_>) {
        let calls = CALLS.with(|c| std::mem::take(&mut *c.borrow_mut()));
        let runs = judged.cell.runs();
        let context = format!(
            "record: {:?}\ncalls: {calls:#?}\nruns: {runs:#?}",
            state(judged.cell)
        );
        let recorded: Vec<Instant> = runs
            .iter()
            .filter(|r| {
                calls.iter().any(|c| {
                    c.instance == r.instance && c.epoch == Some(r.epoch) && c.outcome == "ran"
                })
            })
            .map(|r| r.start)
            .collect();
        let slack = Duration::from_secs(1);
        // One failed request changes nothing: every run is recorded, but
        // one the stop cut into (a shutdown and a fault are two events).
        if judged.faults <= 1 {
            let before_stop = runs
                .iter()
                .filter(|r| r.end.is_some_and(|end| end < judged.stopped))
                .count();
            assert!(
                recorded.len() >= before_stop,
                "{} failed request(s) left a run unrecorded\n{context}",
                judged.faults
            );
        }
        for r in &runs {
            if let Some(last) = recorded.iter().filter(|s| **s < r.start).max() {
                assert!(
                    r.start - *last + slack >= PERIOD,
                    "a run began {:?} after a recorded run's start, within the period\n{context}",
                    r.start - *last
                );
            }
        }
        // Steady: a recorded run every period and a call after the bound.
        let from = judged.calm + Self::BOUND;
        let steady: Vec<&Instant> = recorded.iter().filter(|s| **s >= from).collect();
        let room = judged.stopped.saturating_duration_since(from);
        let expected = (room.as_secs() / (PERIOD + CALLS_EVERY).as_secs()).saturating_sub(1);
        assert!(
            steady.len() as u64 >= expected,
            "{} recorded runs in the {room:?} after the bound past the last fault, expected {expected}\n{context}",
            steady.len()
        );
    }
}

sweeps! {
    once_with_a_key, DoneKeyRow;
    once_a_period, PeriodRow;
}
