//! The schedule on the in-memory store with paused time: hosts that run
//! one schedule, killed and stopped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{BlobSchedule, ScheduleOptions, SlotOutcome, SlotReport};
use crate::error::Error;
use crate::options::MutexOptions;
use crate::store::memory::MemoryLeaseStore;

/// One run of a job: the slot's key, the holder, the epoch, when it began
/// and ended (local instants), and storage's clock when it began.
#[derive(Debug, Clone)]
struct Run {
    slot: String,
    holder: String,
    epoch: u64,
    began: Instant,
    ended: Option<Instant>,
    storage_at_start: jiff::Timestamp,
}

type Runs = Arc<Mutex<Vec<Run>>>;

struct Host {
    token: CancellationToken,
    run: JoinHandle<crate::Result<()>>,
    reports: tokio::sync::broadcast::Receiver<SlotReport>,
}

/// A host named `holder` running `options` on `store`; each job takes
/// `work` and is recorded in `runs`.
fn host(
    store: &MemoryLeaseStore,
    holder: &str,
    options: ScheduleOptions,
    runs: &Runs,
    work: Duration,
) -> Host {
    let mutex = MutexOptions::default()
        .with_holder(holder.to_owned())
        .with_jitter_seed(holder.len() as u64 * 7 + 1);
    let schedule = BlobSchedule::with_store(store.clone(), options.with_mutex(mutex)).unwrap();
    let reports = schedule.slot_reports();
    let (runs, clock) = (runs.clone(), store.clone());
    let token = CancellationToken::new();
    let stop = token.clone();
    let run = tokio::spawn(async move {
        schedule
            .run(stop, move |slot, ctx| {
                let (runs, clock) = (runs.clone(), clock.clone());
                async move {
                    let index = {
                        let mut runs = runs.lock().unwrap();
                        runs.push(Run {
                            slot: slot.key.clone(),
                            holder: ctx.holder().to_owned(),
                            epoch: ctx.epoch(),
                            began: Instant::now(),
                            ended: None,
                            storage_at_start: jiff::Timestamp::try_from(clock.storage_time())
                                .unwrap(),
                        });
                        runs.len() - 1
                    };
                    tokio::select! {
                        () = tokio::time::sleep(work) => {}
                        _ = ctx.cancelled() => {}
                    }
                    runs.lock().unwrap()[index].ended = Some(Instant::now());
                    Ok::<(), Error>(())
                }
            })
            .await
    });
    Host {
        token,
        run,
        reports,
    }
}

/// The runs that ended, sorted by start; asserts that no two overlapped.
fn finished(runs: &Runs) -> Vec<Run> {
    let mut runs: Vec<Run> = runs
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.ended.is_some())
        .cloned()
        .collect();
    runs.sort_by_key(|r| r.began);
    for pair in runs.windows(2) {
        assert!(
            pair[0].ended.unwrap() <= pair[1].began,
            "two jobs at once: {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
    runs
}

/// Hosts named `names` running `options` on `store` for `how_long`, each
/// job taking 2 s, then stopped: the runs that ended (see [`finished`]).
async fn run_for(
    store: &MemoryLeaseStore,
    names: &[&str],
    options: impl Fn() -> ScheduleOptions,
    how_long: Duration,
) -> Vec<Run> {
    let runs = Runs::default();
    let hosts: Vec<Host> = names
        .iter()
        .map(|h| host(store, h, options(), &runs, Duration::from_secs(2)))
        .collect();
    tokio::time::sleep(how_long).await;
    stop(hosts).await;
    finished(&runs)
}

/// Stops every host and waits for each to end without an error.
async fn stop(hosts: Vec<Host>) {
    for h in &hosts {
        h.token.cancel();
    }
    for h in hosts {
        h.run.await.unwrap().unwrap();
    }
}

/// Asserts that every run began at its slot on storage's clock: never
/// before it, and within 3 s.
fn on_time(runs: &[Run]) {
    for run in runs {
        let slot: jiff::Timestamp = run.slot.parse().unwrap();
        assert!(run.storage_at_start >= slot, "ran early: {run:?}");
        assert!(
            run.storage_at_start.duration_since(slot) < jiff::SignedDuration::from_secs(3),
            "ran late: {run:?}"
        );
    }
}

fn every_ten() -> ScheduleOptions {
    ScheduleOptions::new("*/10 * * * * *").with_catch_up(Duration::from_secs(30))
}

#[tokio::test(start_paused = true)]
async fn three_hosts_run_every_slot_once_in_order_never_early_never_two_at_once() {
    let store = MemoryLeaseStore::new("c/schedule");
    let hour = Duration::from_secs(3600);
    let runs = run_for(&store, &["h0", "h1", "h2"], every_ten, hour).await;
    assert!(runs.len() >= 355, "{} runs in an hour", runs.len());
    let slots: Vec<jiff::Timestamp> = runs.iter().map(|r| r.slot.parse().unwrap()).collect();
    for (pair, run) in slots.windows(2).zip(&runs) {
        assert_eq!(
            pair[1].duration_since(pair[0]),
            jiff::SignedDuration::from_secs(10),
            "a slot ran twice or not at all after {run:?}"
        );
    }
    on_time(&runs);
    let holders: std::collections::BTreeSet<&str> =
        runs.iter().map(|r| r.holder.as_str()).collect();
    assert!(!holders.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_host_killed_mid_job_leaves_its_slot_to_another_within_the_lease_and_a_retry() {
    let store = MemoryLeaseStore::new("c/schedule");
    let runs = Runs::default();
    // Jobs of 5 s: the one killed is mid-job.
    let hosts: Vec<Host> = ["h0", "h1", "h2"]
        .iter()
        .map(|h| host(&store, h, every_ten(), &runs, Duration::from_secs(5)))
        .collect();
    // A few slots in, the moment a job is running (slots fall on storage's
    // whole ten seconds, whenever the test began).
    tokio::time::sleep(Duration::from_secs(40)).await;
    let running = loop {
        let last = runs.lock().unwrap().last().cloned();
        if let Some(run) = last.filter(|r| r.ended.is_none()) {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let killed_at = Instant::now();
    let names = ["h0", "h1", "h2"];
    let victim = names.iter().position(|h| *h == running.holder).unwrap();
    hosts[victim].run.abort();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let others: Vec<&Host> = hosts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, h)| h)
        .collect();
    for h in &others {
        h.token.cancel();
    }
    let done = finished(&runs);
    let again = done
        .iter()
        .find(|r| r.slot == running.slot)
        .unwrap_or_else(|| panic!("slot {} never completed: {done:?}", running.slot));
    assert_ne!(again.holder, running.holder);
    assert!(again.epoch > running.epoch);
    let after = again.began - killed_at;
    // The lease (15 s) and an acquire retry (1 s + 20 %), with slack.
    assert!(
        after <= Duration::from_secs(15) + Duration::from_millis(1500),
        "{after:?}"
    );
    assert_eq!(
        done.iter().filter(|r| r.slot == running.slot).count(),
        1,
        "the slot completed twice"
    );
    // The host that ran it again says whose run was cut short, and nobody
    // else says it of any slot.
    let mut told = Vec::new();
    for mut h in hosts {
        while let Ok(report) = h.reports.try_recv() {
            if let SlotOutcome::CutShort { holder, epoch } = report.outcome {
                told.push((report.slot, report.holder, holder, epoch));
            }
        }
    }
    assert_eq!(
        told,
        [(
            running.slot.clone(),
            again.holder.clone(),
            running.holder.clone(),
            running.epoch
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn slots_missed_while_every_host_was_down_run_in_order_within_the_window_and_older_ones_are_recorded_missed(
) {
    let store = MemoryLeaseStore::new("c/schedule");
    let runs = Runs::default();
    // Overlap::Wait: a slot that comes due while a caught-up one runs is
    // run after it (with Skip it would be recorded skipped, as it should).
    let waiting = || every_ten().with_overlap(super::Overlap::Wait);
    let first = host(&store, "h0", waiting(), &runs, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(35)).await;
    first.token.cancel();
    first.run.await.unwrap().unwrap();
    let before = finished(&runs).len();
    // Down for 100 s: ten slots, of which the last three (30 s window) are
    // still worth running when a host comes back.
    tokio::time::sleep(Duration::from_secs(100)).await;
    let restart = jiff::Timestamp::try_from(store.storage_time()).unwrap();
    let mut back = host(&store, "h1", waiting(), &runs, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(25)).await;
    back.token.cancel();
    back.run.await.unwrap().unwrap();
    let done = finished(&runs);
    let caught_up: Vec<&Run> = done[before..].iter().collect();
    let slots: Vec<jiff::Timestamp> = caught_up.iter().map(|r| r.slot.parse().unwrap()).collect();
    let ten = jiff::SignedDuration::from_secs(10);
    assert!(
        slots.windows(2).all(|w| w[1].duration_since(w[0]) == ten),
        "out of order or a gap: {slots:?}"
    );
    // The first slot run is the oldest within the window at the restart.
    let window_start = restart - jiff::SignedDuration::from_secs(30);
    assert!(
        slots[0] >= window_start && slots[0].duration_since(window_start) < ten,
        "{slots:?} at {restart}"
    );
    let last_before: jiff::Timestamp = done[before - 1].slot.parse().unwrap();
    let mut missed = 0;
    while let Ok(report) = back.reports.try_recv() {
        if let SlotOutcome::Missed { count } = report.outcome {
            missed += count;
        }
    }
    let between = slots[0].duration_since(last_before).as_secs() / 10 - 1;
    assert_eq!(
        missed,
        u64::try_from(between).unwrap(),
        "{slots:?}, last before {last_before}"
    );
    assert!(missed >= 6, "{missed}");
}

#[tokio::test(start_paused = true)]
async fn a_host_that_wakes_to_a_done_slot_knows_it_after_one_round_trip() {
    // A paced store: its answers take what `set_latency` says (none yet).
    let storage = crate::store::memory::MemoryLeaseSetStore::new().with_pace(Duration::ZERO, 8);
    let store = crate::store::LeaseSetStore::lease(&storage, "schedule").unwrap();
    let runs = Runs::default();
    let first = host(&store, "h0", every_ten(), &runs, Duration::from_millis(10));
    while finished(&runs).is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.token.cancel();
    first.run.await.unwrap().unwrap();
    // Every answer now takes a second: the record and storage's clock are
    // read at once, so a look costs one.
    storage.pace().unwrap().set_latency(Duration::from_secs(1));
    let schedule = BlobSchedule::with_store(store.clone(), every_ten()).unwrap();
    let start = Instant::now();
    let look = schedule.look().await.unwrap();
    assert!(
        matches!(look, super::Look::Wait { .. }),
        "the slot just done is due again"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

/// A new schedule started 2 s before a slot, on a storage that takes a
/// second to answer (its first term reads storage's clock after the slot,
/// as a blob made anew, whose first epoch waits for storage's clock, does
/// on Azure), runs that slot: a new record begins when the host started,
/// not when its first term read the clock. The slot due before the host
/// started is not run.
#[tokio::test(start_paused = true)]
async fn a_new_schedule_started_just_before_a_slot_runs_it_though_its_first_term_comes_after() {
    let started: jiff::Timestamp = "2026-11-28T10:00:08Z".parse().unwrap();
    let storage = crate::store::memory::MemoryLeaseSetStore::new()
        .with_clock(started.into())
        .with_pace(Duration::from_secs(1), 8);
    let store = crate::store::LeaseSetStore::lease(&storage, "schedule").unwrap();
    let runs = Runs::default();
    let first = host(&store, "h0", every_ten(), &runs, Duration::from_millis(10));
    tokio::time::sleep(Duration::from_secs(20)).await;
    stop(vec![first]).await;
    let slots: Vec<String> = finished(&runs).into_iter().map(|r| r.slot).collect();
    assert_eq!(
        slots.first().map(String::as_str),
        Some("2026-11-28T10:00:10Z"),
        "{slots:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn every_host_reports_each_slot_once_as_ran_or_as_done_elsewhere() {
    let store = MemoryLeaseStore::new("c/schedule");
    let runs = Runs::default();
    let names = ["h0", "h1", "h2"];
    let mut hosts: Vec<Host> = names
        .iter()
        .map(|h| host(&store, h, every_ten(), &runs, Duration::from_secs(2)))
        .collect();
    // Five minutes: 30 slots, fewer reports than a receiver keeps.
    tokio::time::sleep(Duration::from_secs(300)).await;
    for h in &hosts {
        h.token.cancel();
    }
    let mut reports = Vec::new();
    for h in &mut hosts {
        let mut of_host = Vec::new();
        while let Ok(report) = h.reports.try_recv() {
            of_host.push(report);
        }
        reports.push(of_host);
    }
    for h in hosts {
        h.run.await.unwrap().unwrap();
    }
    let runs = finished(&runs);
    assert!(runs.len() >= 28, "{} runs", runs.len());
    // The last slot may end while the others campaign for it, unreported.
    for run in &runs[..runs.len() - 1] {
        for (name, of_host) in names.iter().zip(&reports) {
            let of_slot: Vec<&SlotReport> = of_host.iter().filter(|r| r.slot == run.slot).collect();
            let expected = if *name == run.holder {
                SlotOutcome::Ran {
                    epoch: run.epoch,
                    attempt: 1,
                }
            } else {
                SlotOutcome::DoneElsewhere {
                    holder: run.holder.clone(),
                    epoch: run.epoch,
                }
            };
            assert_eq!(
                of_slot.iter().map(|r| &r.outcome).collect::<Vec<_>>(),
                [&expected],
                "{name}'s reports of {}",
                run.slot
            );
            assert_eq!(of_slot[0].holder, *name, "a report names its host");
        }
    }
}

/// A schedule's terms advertise its expression and zone, from which a
/// reader of the lease tells the next slot; a value of the options' own is
/// advertised instead.
#[tokio::test(start_paused = true)]
async fn a_schedules_terms_advertise_its_expression_unless_told_a_value_of_their_own() {
    use crate::store::LeaseStore as _;
    for (own, expected) in [
        (None, "schedule tz=Europe/Berlin cron=*/10 * * * * *"),
        (Some("10.0.0.7:8080"), "10.0.0.7:8080"),
    ] {
        let store = MemoryLeaseStore::new("c/schedule");
        let mut mutex = MutexOptions::default().with_holder("h0".to_owned());
        if let Some(own) = own {
            mutex = mutex.with_advertised(own.to_owned());
        }
        let options = every_ten().with_time_zone("Europe/Berlin");
        let schedule = BlobSchedule::with_store(store.clone(), options.with_mutex(mutex)).unwrap();
        let token = CancellationToken::new();
        let ran = tokio::spawn({
            let token = token.clone();
            async move {
                schedule
                    .run(token, |_, _| async { Ok::<(), Error>(()) })
                    .await
            }
        });
        // Two slots in: both ran, each under its own term.
        tokio::time::sleep(Duration::from_secs(25)).await;
        token.cancel();
        ran.await.unwrap().unwrap();
        let info = store.inspect().await.unwrap().unwrap();
        assert!(info.epoch >= 2, "{info:?}");
        assert_eq!(info.advertised.as_deref(), Some(expected));
        if own.is_none() {
            let read = ScheduleOptions::from_advertised(expected).unwrap();
            let now = store.storage_time();
            let next = read.next_slot_after(now).unwrap().unwrap();
            assert_eq!(next, every_ten().next_slot_after(now).unwrap().unwrap());
        }
    }
}

/// Hosts whose clocks are ten minutes ahead of storage's, or behind it:
/// every slot runs at its instant on storage's clock, never early and
/// never ten minutes late. (The store's clock is set apart from the
/// hosts', which read their own `SystemTime`.)
#[tokio::test(start_paused = true)]
async fn hosts_whose_clocks_are_ten_minutes_off_run_each_slot_at_its_instant_on_storages_clock() {
    let ten_minutes = Duration::from_secs(600);
    let now = std::time::SystemTime::now();
    for storage in [now - ten_minutes, now + ten_minutes] {
        let store = MemoryLeaseStore::new("c/schedule").with_clock(storage);
        let two_minutes = Duration::from_secs(120);
        let runs = run_for(&store, &["h0", "h1"], every_ten, two_minutes).await;
        assert!(runs.len() >= 11, "{} runs in two minutes", runs.len());
        on_time(&runs);
    }
}

/// A nightly job at 02:30 in Europe/Berlin across both of 2026's changes
/// (the docs' rule, croner's): on 29 March 02:30 does not exist and the job
/// runs at 03:00 (01:00 UTC); on 25 October 02:30 comes twice and the job
/// runs once, at the first pass (00:30 UTC).
#[tokio::test(start_paused = true)]
async fn a_nightly_job_in_a_named_zone_runs_the_slots_the_docs_say_across_daylight_saving_changes()
{
    let nightly = || {
        ScheduleOptions::new("30 2 * * *")
            .with_time_zone("Europe/Berlin")
            .with_catch_up(Duration::from_secs(60))
    };
    for (from, expected) in [
        (
            "2026-03-27T12:00:00Z",
            [
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z",
            ],
        ),
        (
            "2026-10-23T12:00:00Z",
            [
                "2026-10-24T00:30:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-26T01:30:00Z",
            ],
        ),
    ] {
        let at: jiff::Timestamp = from.parse().unwrap();
        let store = MemoryLeaseStore::new("c/nightly").with_clock(at.into());
        // Three days and a little, from noon.
        let days = Duration::from_secs(3 * 86_400 + 3_600);
        let runs = run_for(&store, &["h0", "h1"], nightly, days).await;
        let slots: Vec<String> = runs.into_iter().map(|r| r.slot).collect();
        assert_eq!(slots, expected, "from {from}");
    }
}

/// Two hosts with a window of 10 s, a lease of 15 s and jobs of 5 s; the
/// holder is killed 2 s into a job. Its lease outlives the window, so
/// nobody runs the slot again: the host that takes the lease next reports
/// it missed, once, and the record lists it as missed.
#[tokio::test(start_paused = true)]
async fn a_slot_cut_short_that_leaves_its_window_before_a_rerun_is_reported_missed_once() {
    let store = MemoryLeaseStore::new("c/schedule");
    let runs = Runs::default();
    let options = || ScheduleOptions::new("*/30 * * * * *").with_catch_up(Duration::from_secs(10));
    let mut hosts: Vec<Host> = ["h0", "h1"]
        .iter()
        .map(|h| host(&store, h, options(), &runs, Duration::from_secs(5)))
        .collect();
    let running = loop {
        let last = runs.lock().unwrap().last().cloned();
        if let Some(run) = last.filter(|r| r.ended.is_none()) {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let victim = usize::from(running.holder == "h1");
    hosts[victim].run.abort();
    tokio::time::sleep(Duration::from_secs(45)).await;
    let survivor = hosts.remove(1 - victim);
    survivor.token.cancel();
    survivor.run.await.unwrap().unwrap();
    let mut survivor_reports = survivor.reports;
    let mut missed = Vec::new();
    while let Ok(report) = survivor_reports.try_recv() {
        if let SlotOutcome::Missed { count } = report.outcome {
            missed.push((report.slot, count));
        }
    }
    assert_eq!(missed, [(running.slot.clone(), 1)]);
    assert!(
        !runs
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.slot == running.slot && r.epoch != running.epoch),
        "the slot ran again past its window"
    );
    let state = crate::store::LeaseStore::read_state(&store).await.unwrap();
    let record = super::ScheduleRecord::from_state(&state).unwrap().unwrap();
    let entry = record
        .slots
        .iter()
        .find(|s| s.key == running.slot)
        .unwrap_or_else(|| panic!("the slot is not in the record: {record:?}"));
    assert_eq!(entry.outcome, super::RecordedOutcome::Missed);
    assert_eq!(entry.holder.as_deref(), Some(running.holder.as_str()));
}

/// A lease blob that holds a run once's completion record is no schedule's
/// record: the schedule stops at its first look with the error, naming the
/// blob and what it holds, and leaves the state as it is.
#[tokio::test(start_paused = true)]
async fn a_schedule_on_a_blob_that_holds_another_record_stops_with_an_error_that_says_what_it_holds(
) {
    use crate::store::{Acquire, LeaseId, LeaseStore};
    let store = MemoryLeaseStore::new("c/nightly");
    let lease = LeaseId::new();
    assert_eq!(
        store.acquire(lease, Duration::from_secs(15)).await.unwrap(),
        Acquire::Acquired
    );
    let held = b"blob-mutex record v2\nkey=v1\n".to_vec();
    store.write_state(lease, &held).await.unwrap();
    store.release(lease).await.unwrap();
    let schedule = BlobSchedule::with_store(store.clone(), every_ten()).unwrap();
    let started = Instant::now();
    let ran = tokio::time::timeout(
        Duration::from_secs(120),
        schedule.run(CancellationToken::new(), |_, _| async {
            Ok::<(), Error>(())
        }),
    )
    .await;
    let Ok(Err(Error::StateNotARecord(what))) = ran else {
        panic!("{ran:?}");
    };
    assert!(
        what.contains("c/nightly") && what.contains("completion record of a run once"),
        "{what}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "retried for {:?}",
        started.elapsed()
    );
    assert_eq!(store.read_state().await.unwrap(), held);
}

/// A schedule that storage never answers gives up after the first-contact
/// timeout, as a campaign does: its looks are the only requests it makes
/// between slots. One that storage answered once keeps looking through an
/// outage.
#[tokio::test(start_paused = true)]
async fn a_schedule_storage_never_answered_gives_up_after_the_first_contact_timeout() {
    let options = || {
        every_ten().with_mutex(
            MutexOptions::default().with_first_contact_timeout(Some(Duration::from_secs(5))),
        )
    };
    let store = MemoryLeaseStore::new("c/unreachable");
    store.set_unavailable(true);
    let schedule = BlobSchedule::with_store(store, options()).unwrap();
    let started = Instant::now();
    let ran = tokio::time::timeout(
        Duration::from_secs(120),
        schedule.run(CancellationToken::new(), |_, _| async {
            Ok::<(), Error>(())
        }),
    )
    .await;
    let Ok(Err(Error::FirstContactFailed { lease, after, .. })) = ran else {
        panic!("{ran:?}");
    };
    assert_eq!(
        (lease.as_str(), after),
        ("c/unreachable", Duration::from_secs(5))
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(6),
        "{took:?}"
    );

    let store = MemoryLeaseStore::new("c/outage");
    let schedule = BlobSchedule::with_store(store.clone(), options()).unwrap();
    let token = CancellationToken::new();
    let running = tokio::spawn({
        let token = token.clone();
        async move {
            schedule
                .run(token, |_, _| async { Ok::<(), Error>(()) })
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(25)).await;
    store.set_unavailable(true);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!running.is_finished(), "{:?}", running.await);
    token.cancel();
    running.await.unwrap().unwrap();
}

/// A job stopped with its term (a deploy's SIGTERM: the host's schedule is
/// cancelled mid-job, and the job fails for it) counts as no attempt, as a
/// death does not: the host reports it stopped, and the next host runs the
/// slot again as the same attempt, even with no retry allowed.
#[tokio::test(start_paused = true)]
async fn a_job_stopped_with_its_term_counts_as_no_attempt_and_runs_again_elsewhere() {
    let store = MemoryLeaseStore::new("c/schedule");
    let attempts: Arc<Mutex<Vec<(String, String, u32)>>> = Arc::default();
    let start = |holder: &str| {
        let options = every_ten()
            .with_retries(0, Duration::from_secs(1))
            .with_mutex(MutexOptions::default().with_holder(holder.to_owned()));
        let schedule = BlobSchedule::with_store(store.clone(), options).unwrap();
        let reports = schedule.slot_reports();
        let token = CancellationToken::new();
        let (stop, attempts) = (token.clone(), attempts.clone());
        let run = tokio::spawn(async move {
            schedule
                .run(stop, move |slot, ctx| {
                    let attempts = attempts.clone();
                    async move {
                        attempts.lock().unwrap().push((
                            slot.key.clone(),
                            ctx.holder().to_owned(),
                            slot.attempt,
                        ));
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_secs(5)) => Ok(()),
                            _ = ctx.cancelled() => Err(Error::Cancelled),
                        }
                    }
                })
                .await
        });
        (token, run, reports)
    };
    let (first, first_run, mut first_reports) = start("h0");
    while attempts.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.cancel();
    first_run.await.unwrap().unwrap();
    let (second, second_run, _) = start("h1");
    tokio::time::sleep(Duration::from_secs(8)).await;
    second.cancel();
    second_run.await.unwrap().unwrap();
    let attempts = attempts.lock().unwrap().clone();
    let slot = attempts[0].0.clone();
    assert_eq!(
        attempts[..2],
        [
            (slot.clone(), "h0".to_owned(), 1),
            (slot.clone(), "h1".to_owned(), 1)
        ]
    );
    let report = first_reports.try_recv().unwrap();
    assert!(
        matches!(
            report.outcome,
            SlotOutcome::Stopped {
                reason: crate::term::StopReason::Shutdown,
                ..
            }
        ),
        "{report:?}"
    );
    let state = crate::store::LeaseStore::read_state(&store).await.unwrap();
    let record = super::ScheduleRecord::from_state(&state).unwrap().unwrap();
    let entry = record.slots.iter().find(|s| s.key == slot).unwrap();
    assert_eq!(
        (entry.outcome, entry.attempts),
        (super::RecordedOutcome::Done, 1)
    );
}

/// A lease held for long by a process that is not a schedule's host (a
/// `blob-mutex run --forever`): each slot that comes due is reported
/// blocked, once, naming the holder, and the schedule is not ready; once
/// the lease is free, the next slot runs and the ones that went past
/// their window meanwhile are recorded missed.
#[tokio::test(start_paused = true)]
async fn a_lease_held_by_a_stranger_blocks_each_slot_with_a_report_naming_it() {
    use crate::store::{Acquire, LeaseId, LeaseStore, StampOptions};
    let store = MemoryLeaseStore::new("c/schedule");
    let runs = Runs::default();
    let options = || every_ten().with_catch_up(Duration::from_secs(5));
    let first = host(&store, "h0", options(), &runs, Duration::from_secs(1));
    // The record begun, then the stranger takes the lease between slots.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let stranger = LeaseId::new();
    let take = loop {
        if store
            .acquire(stranger, Duration::from_secs(15))
            .await
            .unwrap()
            == Acquire::Acquired
        {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    store
        .stamp(stranger, "runner", &StampOptions::new())
        .await
        .unwrap();
    let keeper = tokio::spawn({
        let store = store.clone();
        async move {
            while take.elapsed() < Duration::from_secs(40) {
                tokio::time::sleep(Duration::from_secs(5)).await;
                store.renew(stranger).await.unwrap();
            }
            store.release(stranger).await.unwrap();
        }
    });
    tokio::time::sleep(Duration::from_secs(30)).await;
    keeper.await.unwrap();
    tokio::time::sleep(Duration::from_secs(25)).await;
    let mut reports = first.reports;
    first.token.cancel();
    first.run.await.unwrap().unwrap();
    let (mut blocked, mut missed) = (Vec::new(), 0);
    while let Ok(r) = reports.try_recv() {
        match r.outcome {
            SlotOutcome::Blocked { holder } => blocked.push((r.slot, holder)),
            SlotOutcome::Missed { count } => missed += count,
            _ => {}
        }
    }
    assert!(blocked.len() >= 3, "{blocked:?}");
    assert!(blocked.iter().all(|(_, h)| h == "runner"), "{blocked:?}");
    let slots: std::collections::BTreeSet<&String> = blocked.iter().map(|(s, _)| s).collect();
    assert_eq!(
        slots.len(),
        blocked.len(),
        "a slot reported twice: {blocked:?}"
    );
    assert!(missed >= 3, "{missed} missed");
    let after = runs
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.began > take)
        .count();
    assert!(after >= 1, "no slot ran once the lease was free");
}

/// A slot that comes due while a long job runs is said when it comes due,
/// not only when the job ends.
#[tokio::test(start_paused = true)]
async fn a_slot_that_comes_due_during_a_long_job_is_logged_when_it_comes_due() {
    let (logs, _guard) = crate::captured_logs::capture(tracing::Level::WARN);
    let store = MemoryLeaseStore::new("c/schedule");
    let runs = Runs::default();
    let h = host(&store, "h0", every_ten(), &runs, Duration::from_secs(25));
    let started = loop {
        if let Some(run) = runs.lock().unwrap().first().cloned() {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        runs.lock().unwrap()[0].ended.is_none(),
        "the job ended: {started:?}"
    );
    let said = logs.text();
    assert!(
        said.contains("came due while the job of") && said.contains(&started.slot),
        "{said}"
    );
    h.token.cancel();
    h.run.await.unwrap().unwrap();
}

/// Storage unreachable from just before a job's end until well past the
/// lease: the term's own retries of the record's write stop by themselves
/// before the engine would abort them, so the term's tasks returned, no
/// line is an error (an outage the schedule handles is a warning), the
/// run is reported unrecorded once a read tells, and the slot runs again.
#[tokio::test(start_paused = true)]
async fn an_outage_as_a_job_ends_is_handled_without_an_abort_or_an_error() {
    let (logs, _guard) = crate::captured_logs::capture(tracing::Level::WARN);
    let store = MemoryLeaseStore::new("c/schedule");
    let options = every_ten().with_mutex(MutexOptions::default().with_holder("h0".to_owned()));
    let schedule = BlobSchedule::with_store(store.clone(), options).unwrap();
    let mut terms = schedule.mutex().term_reports();
    let mut reports = schedule.slot_reports();
    let token = CancellationToken::new();
    let runs = Runs::default();
    let (stop, jobs) = (token.clone(), runs.clone());
    let run = tokio::spawn(async move {
        schedule
            .run(stop, move |slot, ctx| {
                let jobs = jobs.clone();
                async move {
                    jobs.lock().unwrap().push(Run {
                        slot: slot.key.clone(),
                        holder: ctx.holder().to_owned(),
                        epoch: ctx.epoch(),
                        began: Instant::now(),
                        ended: None,
                        storage_at_start: jiff::Timestamp::UNIX_EPOCH,
                    });
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Ok::<(), Error>(())
                }
            })
            .await
    });
    while runs.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_900)).await;
    store.set_unavailable(true);
    let epoch = runs.lock().unwrap()[0].epoch;
    let report = loop {
        let report = terms.recv().await.unwrap();
        if report.epoch == epoch {
            break report;
        }
    };
    assert_eq!(
        (report.reason, report.tasks),
        (
            crate::term::StopReason::Deadline,
            crate::term::TaskStop::Returned
        ),
        "{report:?}"
    );
    store.set_unavailable(false);
    let slot = runs.lock().unwrap()[0].slot.clone();
    let outcome = loop {
        let report = reports.recv().await.unwrap();
        if report.slot == slot {
            break report.outcome;
        }
    };
    assert!(
        matches!(outcome, SlotOutcome::Unrecorded { .. }),
        "{outcome:?}"
    );
    while runs.lock().unwrap().len() < 2 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(runs.lock().unwrap()[1].slot, slot, "run again");
    token.cancel();
    run.await.unwrap().unwrap();
    let said = logs.text();
    assert!(!said.contains("ERROR"), "{said}");
}

/// Storage that loses the lease blob mid-job (restarted empty, or the blob
/// deleted): the term is lost, and the next one finds no record. It says
/// so, naming the slot whose run was under way, and runs that slot again
/// within its window, since the new record begins when the host started.
#[tokio::test(start_paused = true)]
async fn a_record_lost_mid_job_is_said_naming_the_slot_under_way_which_runs_again() {
    let (logs, _guard) = crate::captured_logs::capture(tracing::Level::WARN);
    let store = MemoryLeaseStore::new("c/schedule");
    let runs = Runs::default();
    let h = host(&store, "h0", every_ten(), &runs, Duration::from_secs(5));
    let running = loop {
        if let Some(run) = runs.lock().unwrap().first().cloned() {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    store.lose_blob();
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop(vec![h]).await;
    let said = logs.text();
    let line = said
        .lines()
        .find(|l| l.contains("the record is gone"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.contains(&running.slot) && line.contains("h0"),
        "{line}"
    );
    assert_eq!(said.matches("the record is gone").count(), 1, "{said}");
    let again = finished(&runs)
        .into_iter()
        .filter(|r| r.slot == running.slot)
        .count();
    assert_eq!(again, 2, "{:?}", runs.lock().unwrap());
}

/// Two hosts on one blob with different expressions (a rolling change of
/// `--cron`): each runs its own slots, and each warns once, at the first
/// look that finds the other's term, naming both expressions.
#[tokio::test(start_paused = true)]
async fn hosts_with_different_expressions_on_one_blob_each_warn_once_naming_both() {
    let (logs, _guard) = crate::captured_logs::capture(tracing::Level::WARN);
    let store = MemoryLeaseStore::new("c/schedule");
    let runs = Runs::default();
    let old = ScheduleOptions::new("*/10 * * * * *").with_catch_up(Duration::from_secs(30));
    let new = ScheduleOptions::new("*/15 * * * * *").with_catch_up(Duration::from_secs(30));
    let hosts = vec![
        host(&store, "h0", old, &runs, Duration::from_secs(1)),
        host(&store, "h1", new, &runs, Duration::from_secs(1)),
    ];
    tokio::time::sleep(Duration::from_secs(120)).await;
    stop(hosts).await;
    let said = logs.text();
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("another expression"))
        .collect();
    assert_eq!(lines.len(), 2, "{said}");
    for (me, other) in [("h0", "*/15 * * * * *"), ("h1", "*/10 * * * * *")] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("holder={me}")) && l.contains(other)),
            "{me} names {other}: {lines:?}"
        );
    }
}
