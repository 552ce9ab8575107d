//! The schedule in the simulation: two hosts run a slot every 10 s whose
//! job takes 2 s. Each job run is a term of the history (no two at once,
//! each ended by one report of what became of it: ran, failed or
//! unrecorded); beyond that, the record and the reports must agree:
//!
//! - every slot from the schedule's beginning to the stop is accounted in
//!   the record: done, skipped or missed (no job here fails);
//! - a slot reported `Ran` is done in the record under that epoch; one
//!   reported `Unrecorded` is not;
//! - a slot runs again only after a run of it whose record was not
//!   written, and a cut-short report names such a run of another term;
//! - once the bound has passed after the last fault, every slot runs on
//!   time.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use blob_mutex::schedule::{
    BlobSchedule, RecordedOutcome, ScheduleOptions, ScheduleRecord, SlotOutcome, SlotReport,
};
use blob_mutex::store::LeaseStore;
use blob_mutex::{CancellationToken, Error};
use futures_util::FutureExt;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::{sleep, Instant};

use super::{Judged, Simulated};
use crate::support::matrix::{Campaign, Cell, Instance, Mode, Report, D};

/// How long each job runs.
const JOB: Duration = Duration::from_secs(2);
/// The schedule's period.
const PERIOD: Duration = Duration::from_secs(10);
const HOSTS: usize = 2;

pub(super) struct ScheduleRow;

/// One job run, as the job saw it.
#[derive(Clone, Debug)]
struct JobRun {
    instance: usize,
    slot: String,
    epoch: u64,
    /// Storage's clock when the job began.
    began: SystemTime,
}

/// What the hosts of this run did, beside the cell's runs and reports.
#[derive(Default)]
struct Log {
    jobs: Vec<JobRun>,
    reports: Vec<SlotReport>,
}

thread_local! {
    // The run's hosts all run on this thread (a paused current-thread
    // runtime), one run at a time.
    static LOG: RefCell<Log> = RefCell::default();
}

fn options() -> ScheduleOptions {
    ScheduleOptions::new("*/10 * * * * *").with_catch_up(Duration::from_secs(60))
}

fn lease(cell: &Cell) -> blob_mutex::testing::MemoryLeaseStore {
    cell.accounts.sets[0].get("schedule")
}

/// Host `index` of the schedule.
fn host(cell: &Arc<Cell>, index: usize) -> Instance {
    let store = cell.accounts.lease(0, &cell.name, "schedule").by(index);
    let options = options().with_mutex(cell.options_for(index));
    let schedule = Arc::new(BlobSchedule::with_store(store, options).unwrap());
    collect_reports(cell, index, &schedule);
    let leader = schedule.leader();
    let holder = schedule.holder().to_owned();
    let owned = Box::new(move || {
        leader
            .borrow()
            .iter()
            .filter(|l| l.holder == holder)
            .map(|l| ("schedule".to_owned(), l.epoch))
            .collect()
    });
    let cell = cell.clone();
    let again = Box::new(move |token: CancellationToken| {
        let (schedule, cell) = (schedule.clone(), cell.clone());
        Box::pin(async move { schedule.run(token, job(cell, index)).await }) as Campaign
    });
    Instance::start(index, owned, Box::new(|| true), again)
}

/// The job of host `index`: a run of the cell, for [`JOB`] or until told
/// to stop.
fn job(
    cell: Arc<Cell>,
    index: usize,
) -> impl Fn(
    blob_mutex::schedule::Slot,
    blob_mutex::LeaderContext,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + Send>>
       + Send
       + Sync
       + 'static {
    move |slot, ctx| {
        let cell = cell.clone();
        Box::pin(async move {
            let run = cell.started(index, "schedule", &ctx);
            LOG.with(|log| {
                log.borrow_mut().jobs.push(JobRun {
                    instance: index,
                    slot: slot.key.clone(),
                    epoch: ctx.epoch(),
                    began: lease(&cell).storage_time(),
                });
            });
            tokio::select! {
                () = sleep(JOB) => {}
                _ = ctx.cancelled() => {}
            }
            drop(run);
            Ok(())
        })
    }
}

/// Keeps every slot report of host `index`; those that end a job run
/// (ran, failed, unrecorded) are the run's report in the cell.
fn collect_reports<S: LeaseStore + Clone>(
    cell: &Arc<Cell>,
    index: usize,
    schedule: &BlobSchedule<S>,
) {
    let mut reports = schedule.slot_reports();
    let cell = cell.clone();
    tokio::spawn(async move {
        loop {
            let report = match reports.recv().await {
                Ok(report) => report,
                Err(RecvError::Closed) => return,
                Err(e) => panic!("slot reports lost: {e}"),
            };
            let ended = match &report.outcome {
                SlotOutcome::Ran { epoch, .. } => Some((*epoch, "ran")),
                SlotOutcome::Failed { epoch, .. } => Some((*epoch, "failed")),
                SlotOutcome::Unrecorded { epoch, .. } => Some((*epoch, "unrecorded")),
                SlotOutcome::Stopped { epoch, .. } => Some((*epoch, "stopped")),
                _ => None,
            };
            if let Some((epoch, reason)) = ended {
                cell.report(Report {
                    instance: index,
                    key: "schedule".to_owned(),
                    epoch,
                    reason,
                    tasks: "",
                });
            }
            LOG.with(|log| log.borrow_mut().reports.push(report));
        }
    });
}

impl Mode for ScheduleRow {
    const NAME: &'static str = "schedule";
    const ACCOUNTS: usize = 1;
    const SET: bool = false;

    async fn start(cell: &Arc<Cell>) -> Vec<Instance> {
        LOG.with(|log| *log.borrow_mut() = Log::default());
        (0..HOSTS).map(|i| host(cell, i)).collect()
    }

    fn keys() -> Vec<String> {
        vec!["schedule".to_owned()]
    }
}

impl Simulated for ScheduleRow {
    const LENGTH: Duration = Duration::from_secs(60);
    /// A slot after a lease's expiry and a campaign's retry.
    const BOUND: Duration = Duration::from_secs(PERIOD.as_secs() + D.as_secs() + 10);

    fn judge(judged: &Judged<'_>) {
        let log = LOG.with(|log| std::mem::take(&mut *log.borrow_mut()));
        let state = lease(judged.cell)
            .read_state()
            .now_or_never()
            .expect("the store in memory answers at once")
            .unwrap();
        let record = ScheduleRecord::from_state(&state)
            .unwrap()
            .expect("the schedule began a record");
        let context = format!(
            "record: {record:#?}\njobs: {:#?}\nreports: {:#?}",
            log.jobs, log.reports
        );
        let storage_at = |at: Instant| {
            let now = lease(judged.cell).storage_time();
            now - Instant::now().saturating_duration_since(at)
        };
        accounted(&record, storage_at(judged.stopped) - JOB - PERIOD, &context);
        // One failed request changes nothing: no slot runs twice.
        if judged.faults <= 1 {
            let mut slots: Vec<&str> = log.jobs.iter().map(|j| j.slot.as_str()).collect();
            slots.sort_unstable();
            let runs = slots.len();
            slots.dedup();
            assert_eq!(
                slots.len(),
                runs,
                "a slot ran twice after {} failed request(s)\n{context}",
                judged.faults
            );
        }
        reports_true(&record, &log, &context);
        runs_again_only_when_unrecorded(&log, &context);
        on_time_after_calm(&log, storage_at(judged.calm + Self::BOUND), &context);
    }
}

/// Every slot after the record's beginning and up to `until` is done,
/// skipped or missed in the record.
fn accounted(record: &ScheduleRecord, until: SystemTime, context: &str) {
    let begun = record.through.expect("a record begun has a `through`");
    let options = options();
    let mut at = begun;
    while let Some(slot) = options.next_slot_after(at).unwrap() {
        if slot > until {
            break;
        }
        at = slot;
        let entry = record.slots.iter().find(|s| s.at == slot);
        assert!(
            entry.is_some_and(|e| matches!(
                e.outcome,
                RecordedOutcome::Done | RecordedOutcome::Skipped | RecordedOutcome::Missed
            )),
            "the slot {slot:?} is not accounted in the record: {entry:?}\n{context}"
        );
    }
}

/// `Ran` only when the record says done under the epoch; `Unrecorded`
/// only when it does not.
fn reports_true(record: &ScheduleRecord, log: &Log, context: &str) {
    for report in &log.reports {
        let entry = record.slots.iter().find(|s| s.key == report.slot);
        let done_by = |epoch: u64| {
            entry.is_some_and(|e| e.outcome == RecordedOutcome::Done && e.epoch == epoch)
        };
        match &report.outcome {
            SlotOutcome::Ran { epoch, .. } => assert!(
                done_by(*epoch),
                "{report:?} is not what the record says: {entry:?}\n{context}"
            ),
            SlotOutcome::Unrecorded { epoch, .. } => assert!(
                !done_by(*epoch),
                "{report:?}, yet the record says it is done under that epoch\n{context}"
            ),
            _ => {}
        }
    }
}

/// A slot's second run follows a run of it whose record was not written
/// (reported `Unrecorded`, or `Stopped` with its term); a cut-short report
/// names such a run of another term, or a term of another host whose mark
/// landed as its lease was lost, and whose job never began.
fn runs_again_only_when_unrecorded(log: &Log, context: &str) {
    let unrecorded = |slot: &str, epoch: u64| {
        log.reports.iter().any(|r| {
            r.slot == slot
                && matches!(r.outcome,
                    SlotOutcome::Unrecorded { epoch: e, .. } | SlotOutcome::Stopped { epoch: e, .. }
                        if e == epoch)
        })
    };
    for (i, run) in log.jobs.iter().enumerate() {
        if let Some(first) = log.jobs[..i].iter().find(|r| r.slot == run.slot) {
            let earlier = log.jobs[..i].iter().filter(|r| r.slot == run.slot);
            let all_unrecorded = earlier.clone().all(|r| unrecorded(&r.slot, r.epoch));
            assert!(
                all_unrecorded,
                "the slot {} ran again under epoch {}, after a run under epoch {} whose record was written or was never reported missing\n{context}",
                run.slot, run.epoch, first.epoch
            );
        }
    }
    for report in &log.reports {
        let SlotOutcome::CutShort { holder, epoch } = &report.outcome else {
            continue;
        };
        let cut = log.jobs.iter().find(|r| {
            r.slot == report.slot && r.epoch == *epoch && format!("i{}", r.instance) == *holder
        });
        // A run that began and was not recorded, or a mark whose answer was
        // lost with the lease (its job never began), as the outcome's docs
        // say: never a run whose end was recorded.
        assert!(
            cut.is_none_or(|r| unrecorded(&r.slot, r.epoch)) && *holder != report.holder,
            "{report:?} names no run of another term whose record was not written\n{context}"
        );
    }
}

/// Every job of a slot after `from` began within 3 s of its slot on
/// storage's clock.
fn on_time_after_calm(log: &Log, from: SystemTime, context: &str) {
    let options = options();
    let mut at = from;
    let last = log.jobs.last().map(|r| r.began);
    while let Some(slot) = options.next_slot_after(at).unwrap() {
        if last.is_none_or(|last| slot > last) {
            break;
        }
        at = slot;
        let key = jiff::Timestamp::try_from(slot).unwrap().to_string();
        let ran = log.jobs.iter().find(|r| r.slot == key);
        assert!(
            ran.is_some_and(|r| r.began.duration_since(slot).is_ok_and(|late| late < Duration::from_secs(3))),
            "the slot {key}, after the bound past the last fault, did not run on time: {ran:?}\n{context}"
        );
    }
}

sweeps! {
    schedule, ScheduleRow;
}

/// The seeded runs that found defects, kept: seed 3, where a term aborted
/// at its deadline while it retried its record's write reported nothing
/// of a job that had run; seed 12, where a term aborted while it wrote its
/// start mark left a mark that the same host's next term named cut short,
/// though its job never began; seeds 50 and 73, where a term cut off by an
/// outage while it read its record was logged as a failed task at ERROR.
/// A seed fixes a run's faults, not the order in which Tokio polls the
/// ready branches of a `select!`: each is run ten times.
#[test]
fn the_seeds_that_found_defects_keep_every_promise() {
    for seed in [3, 12, 50, 73] {
        for _ in 0..10 {
            let outcome = super::run::<ScheduleRow>(
                crate::support::plan::Plan::seeded(seed, super::CHANCE),
                &format!("schedule seed {seed}"),
            );
            if let Err(e) = outcome.verdict {
                panic!("seed {seed}: {e}");
            }
        }
    }
}
