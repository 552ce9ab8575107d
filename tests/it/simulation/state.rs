//! State fenced by storage in the simulation: two instances of the task
//! form whose leader task reads the lease blob's state when its term
//! begins and writes `epoch=<e>_tick=<k>` every 500 ms. The history
//! checker judges the writes as it judges a chaos run's: none accepted
//! that a newer term had begun before it was sent, and every accepted one
//! of an older term seen by a newer term's first read (the state is never
//! lost or rolled back across terms).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use blob_mutex::{BlobDistributedMutex, CancellationToken, Error, LeaderContext};
use blob_mutex_testkit::history::{History, Read, Write};
use tokio::time::{sleep, Instant};

use super::{Judged, Simulated};
use crate::support::matrix::{collect, Campaign, Cell, Instance, Mode, Report, D, UNIT};

/// The state's resource in the history.
const KEY: &str = "state";

/// Worker, epoch, when, and the epoch and tick it found.
type Seen = (usize, u64, Instant, Option<(u64, u64)>);

#[derive(Default)]
struct Log {
    reads: Vec<Seen>,
    /// Worker, epoch, tick, sent, answered, accepted.
    writes: Vec<(usize, u64, u64, Instant, Instant, bool)>,
}

thread_local! {
    static LOG: RefCell<Log> = RefCell::default();
}

pub(super) struct StateRow;

fn instance(cell: &Arc<Cell>, index: usize) -> Instance {
    let store = cell.accounts.lease(0, &cell.name, KEY).by(index);
    let task_cell = cell.clone();
    let mutex = Arc::new(
        BlobDistributedMutex::with_store(store, cell.options_for(index), move |ctx| {
            lead(task_cell.clone(), index, ctx)
        })
        .unwrap(),
    );
    collect(cell, mutex.term_reports(), move |r| Report {
        instance: index,
        key: KEY.to_owned(),
        epoch: r.epoch,
        reason: r.reason.as_str(),
        tasks: r.tasks.as_str(),
    });
    let watch = mutex.watch();
    let owned = Box::new(move || {
        watch
            .borrow()
            .epoch()
            .map(|e| (KEY.to_owned(), e))
            .into_iter()
            .collect()
    });
    let again = Box::new(move |token: CancellationToken| {
        let mutex = mutex.clone();
        Box::pin(async move { mutex.run_task_when_mutex_acquired(token).await }) as Campaign
    });
    Instance::start(index, owned, Box::new(|| true), again)
}

/// The state as the fault worker writes it.
fn parse(state: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(state).ok()?;
    let (epoch, tick) = text.strip_prefix("epoch=")?.split_once("_tick=")?;
    Some((epoch.parse().ok()?, tick.parse().ok()?))
}

async fn lead(cell: Arc<Cell>, index: usize, ctx: LeaderContext) -> Result<(), Error> {
    let run = cell.started(index, KEY, &ctx);
    let epoch = ctx.epoch();
    let state = loop {
        match ctx.read_state().await {
            Ok(state) => break state,
            Err(_) if !ctx.is_cancelled() => sleep(UNIT).await,
            Err(_) => return Ok(()),
        }
    };
    let read = (index, epoch, Instant::now(), parse(&state));
    LOG.with(|l| l.borrow_mut().reads.push(read));
    let mut tick = 0;
    loop {
        tokio::select! {
            biased;
            _ = ctx.cancelled() => return Ok(()),
            () = sleep(UNIT) => {}
        }
        run.unit(&ctx);
        tick += 1;
        let sent = Instant::now();
        let written = ctx.write_state(format!("epoch={epoch}_tick={tick}")).await;
        // A write whose answer was lost may or may not have landed: it is
        // no write the history can judge.
        let accepted = match written {
            Ok(()) => true,
            Err(Error::StateWriteRefused(_)) => false,
            Err(_) => continue,
        };
        let write = (index, epoch, tick, sent, Instant::now(), accepted);
        LOG.with(|l| l.borrow_mut().writes.push(write));
    }
}

impl Mode for StateRow {
    const NAME: &'static str = "state";
    const ACCOUNTS: usize = 1;
    const SET: bool = false;

    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        LOG.with(|l| *l.borrow_mut() = Log::default());
        (0..2).map(|i| instance(cell, i)).collect()
    }

    fn keys() -> Vec<String> {
        vec![KEY.to_owned()]
    }
}

impl Simulated for StateRow {
    const BOUND: Duration = Duration::from_secs(D.as_secs() + 5);

    fn judge(_: &Judged<'_>) {}

    fn add_to(history: &mut History, judged: &Judged<'_>) {
        let since = |at: Instant| at.saturating_duration_since(judged.t0);
        let log = LOG.with(|l| std::mem::take(&mut *l.borrow_mut()));
        for (worker, epoch, at, last) in log.reads {
            history.reads.push(Read {
                resource: KEY.to_owned(),
                worker,
                epoch,
                at: since(at),
                last,
            });
        }
        for (worker, epoch, tick, sent, at, accepted) in log.writes {
            history.writes.push(Write {
                resource: KEY.to_owned(),
                worker,
                epoch,
                tick: Some(tick),
                sent: since(sent),
                at: since(at),
                accepted,
                register: false,
            });
        }
    }
}

sweeps! {
    fenced_state, StateRow;
}
