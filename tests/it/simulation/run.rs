//! One run of the simulation: a shape's instances on a paused runtime,
//! requests failing as the plan says, until the shape has run its length
//! and its bound past the last fault; then every instance stopped and
//! the run judged.

use std::cell::Cell as Flag;
use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::{history, Simulated};
use crate::support::lines::Lines;
use crate::support::matrix::{paused, stop_all, Cell, Instance, Outcome as Ended};
use crate::support::plan::{Plan, Request, Way, LATE};

/// A request as a run logged it: when it was sent, from the shape's
/// start, and how it failed, if it did.
#[derive(Clone, Debug)]
pub(super) struct Logged {
    pub(super) request: Request,
    pub(super) at: Duration,
    pub(super) way: Option<Way>,
}

/// What a run sent, and whether it kept every promise (else what broke).
pub(super) struct Outcome {
    pub(super) sent: Vec<Logged>,
    pub(super) verdict: Result<(), String>,
}

/// What a shape's judge reads of a finished run.
pub(super) struct Judged<'a> {
    pub(super) cell: &'a Arc<Cell>,
    pub(super) instances: &'a [Instance],
    /// The shape's start.
    pub t0: Instant,
    /// When the last fault acted (the shape's start when none did).
    pub(super) calm: Instant,
    /// When the instances were told to stop.
    pub(super) stopped: Instant,
    /// What each instance's `watch()` showed it owning just before.
    pub(super) owned: Vec<BTreeMap<String, u64>>,
    /// How many requests failed: with one at most, the shapes promise
    /// that nothing changed ("one failed request changes nothing").
    pub(super) faults: usize,
}

/// Runs `M` once under `plan`; `name` names the run in what it reports.
pub(super) fn run<M: Simulated>(plan: Plan, name: &str) -> Outcome {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let log = sent.clone();
    // The cell's name is the container of its leases' names: no `/`.
    let name = name.replace('/', "-");
    let errors = Lines::default();
    let written = errors.clone();
    let verdict = quietly(move || {
        let _logs = tracing::subscriber::set_default(logs(written));
        paused(move |metrics| async move {
            let cell = Cell::new::<M>(&name, metrics, false, |o| o);
            cell.accounts.set_plan(plan);
            let t0 = Instant::now();
            let mut instances = M::start(&cell).await;
            let calm = until_calm::<M>(&cell, t0).await;
            let owned = instances.iter().map(Instance::owned).collect();
            let stopped = Instant::now();
            let outcomes = stop_all(&mut instances).await;
            *log.lock().unwrap() = logged(&cell, t0);
            for (i, outcome) in outcomes.iter().enumerate() {
                if let Some(outcome) = outcome {
                    assert!(
                        matches!(outcome, Ended::Returned(Ok(()))),
                        "instance {i} ended with {outcome:?}"
                    );
                }
            }
            let faults = cell
                .accounts
                .sent()
                .iter()
                .filter(|s| s.way.is_some())
                .count();
            let judged = Judged {
                cell: &cell,
                instances: &instances,
                t0,
                calm,
                stopped,
                owned,
                faults,
            };
            history::check::<M>(&judged);
            M::judge(&judged);
        });
    });
    // Every failure of a request here is one the shapes handle: a line at
    // ERROR says something went wrong that did not.
    let verdict = verdict.and_then(|()| match errors.text() {
        lines if lines.is_empty() => Ok(()),
        lines => Err(format!(
            "an outage the shape handles was logged as an error:\n{lines}"
        )),
    });
    let sent = std::mem::take(&mut *sent.lock().unwrap());
    Outcome { sent, verdict }
}

/// Runs for [`Simulated::LENGTH`], and on until [`Simulated::BOUND`] has
/// passed since the last fault acted; returns when that fault acted.
async fn until_calm<M: Simulated>(cell: &Cell, t0: Instant) -> Instant {
    loop {
        let calm = last_fault(cell).unwrap_or(t0);
        if t0.elapsed() >= M::LENGTH && calm.elapsed() >= M::BOUND {
            return calm;
        }
        sleep(Duration::from_millis(500)).await;
    }
}

/// When the last fault so far acted: a late request acts [`LATE`] after
/// it was sent.
fn last_fault(cell: &Cell) -> Option<Instant> {
    cell.accounts
        .sent()
        .iter()
        .filter_map(|s| match s.way? {
            Way::Late => Some(s.at + LATE),
            _ => Some(s.at),
        })
        .max()
}

fn logged(cell: &Cell, t0: Instant) -> Vec<Logged> {
    cell.accounts
        .sent()
        .into_iter()
        .map(|s| Logged {
            request: s.request,
            at: s.at.saturating_duration_since(t0),
            way: s.way,
        })
        .collect()
}

/// Set by [`replay`](super::replay): runs show the crate's log.
pub(super) static SHOW_LOG: AtomicBool = AtomicBool::new(false);

/// The run's subscriber: ERROR lines into `errors`, and, in a replay, the
/// crate's log at the level of `BLOB_MUTEX_SIM_LOG` (`info` unless set) to
/// the test's output.
fn logs(errors: Lines) -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::{EnvFilter, Layer};
    let shown = SHOW_LOG.load(Ordering::Relaxed).then(|| {
        let level = std::env::var("BLOB_MUTEX_SIM_LOG").unwrap_or_else(|_| "info".to_owned());
        tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(EnvFilter::new(level))
    });
    let kept = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(errors)
        .with_filter(tracing_subscriber::filter::LevelFilter::ERROR);
    tracing_subscriber::registry().with(shown).with(kept)
}

thread_local! {
    /// Set while a run on this thread may panic on purpose.
    static QUIET: Flag<bool> = const { Flag::new(false) };
}

/// Runs `f`, catching a panic as its message; the panic hook says nothing
/// of a panic on this thread meanwhile (a sweep reports its failures
/// itself), and everything of any other thread's.
fn quietly(f: impl FnOnce()) -> Result<(), String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Flag::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    result.map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic without a message".to_owned())
    })
}
