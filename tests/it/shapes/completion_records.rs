//! Completion records, over the in-memory store with paused time: once per
//! key across three instances, every key kept (an older key after a newer
//! one still skips) up to the state's size, a key that cannot be kept
//! refused before the job runs, records of the first format still read, a
//! leader that crashed mid-job leaves no record, a record write refused
//! because the lease was lost (or cut off by the loss) is not reported as
//! recorded and the output is returned, at most once per period on the
//! store's clock counted from the start of the last run (two periods missed
//! run once; a job longer than the schedule less the period runs on
//! schedule), a transient error reading the record before campaigning is
//! retried within the first-contact window, state that is not a record is
//! refused, and a quorum, which keeps no state, refuses the options before
//! campaigning.

use crate::support::forward::{Forward, Wrap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;
use std::time::UNIX_EPOCH;

use blob_mutex::{
    quorum::QuorumLeaseStore, store::LeaseId, store::LeaseStore, store::MAX_STATE_LEN,
    term::StopReason, testing::MemoryLeaseStore, BlobDistributedMutex, CancellationToken, Error,
    LeaderContext, MutexOptions, OnceOptions, OnceOutcome, SkipReason,
};

const PERIOD: Duration = Duration::from_secs(60);

/// A mutex over `store` (its own task is never used here).
fn mutex(store: &MemoryLeaseStore, holder: &str) -> BlobDistributedMutex<MemoryLeaseStore> {
    let options = MutexOptions::default().with_holder(holder.to_owned());
    BlobDistributedMutex::with_store(store.clone(), options, |_ctx: LeaderContext| async {
        Ok::<(), Error>(())
    })
    .unwrap()
}

/// One run-once call by a new instance `holder` whose job takes `job` and
/// counts its runs in `runs`.
async fn call(
    store: &MemoryLeaseStore,
    holder: &str,
    options: OnceOptions,
    job: Duration,
    runs: &Arc<AtomicUsize>,
) -> OnceOutcome<u64> {
    let runs = runs.clone();
    mutex(store, holder)
        .run_once_with_options(
            CancellationToken::new(),
            options,
            move |ctx: LeaderContext| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(job).await;
                Ok::<_, Error>(ctx.epoch())
            },
        )
        .await
        .unwrap()
}

/// Three instances called together; their outcomes.
async fn three_together(
    store: &MemoryLeaseStore,
    options: &OnceOptions,
    runs: &Arc<AtomicUsize>,
) -> Vec<OnceOutcome<u64>> {
    let calls: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|holder| {
            let (store, options, runs) = (store.clone(), options.clone(), runs.clone());
            tokio::spawn(async move {
                call(&store, holder, options, Duration::from_secs(20), &runs).await
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await.unwrap());
    }
    outcomes
}

fn ran(outcomes: &[OnceOutcome<u64>]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, OnceOutcome::Ran { .. }))
        .count()
}

fn skipped_done(outcomes: &[OnceOutcome<u64>], key: &str) -> usize {
    outcomes
        .iter()
        .filter(|o| {
            matches!(o, OnceOutcome::Skipped { reason: SkipReason::Done { key: k }, .. } if k == key)
        })
        .count()
}

#[tokio::test(start_paused = true)]
async fn once_per_key_one_of_three_runs_the_job_and_nobody_runs_it_again() {
    let store = MemoryLeaseStore::new("migrate");
    let options = OnceOptions::default().with_done_key("v42");
    let runs = Arc::new(AtomicUsize::new(0));
    let first = three_together(&store, &options, &runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{first:?}");
    assert_eq!(
        (ran(&first), skipped_done(&first, "v42")),
        (1, 2),
        "{first:?}"
    );
    let again = three_together(&store, &options, &runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{again:?}");
    assert_eq!(skipped_done(&again, "v42"), 3, "{again:?}");
    assert!(
        again
            .iter()
            .all(|o| matches!(o, OnceOutcome::Skipped { report: None, .. })),
        "a follower reads the record and returns without leading: {again:?}"
    );
    let next = call(
        &store,
        "d",
        OnceOptions::default().with_done_key("v43"),
        Duration::ZERO,
        &runs,
    )
    .await;
    assert!(matches!(next, OnceOutcome::Ran { .. }), "{next:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "another key runs");
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_crashed_mid_job_leaves_no_record_and_the_next_one_runs_it() {
    let store = MemoryLeaseStore::new("migrate");
    let options = OnceOptions::default().with_done_key("v42");
    let runs = Arc::new(AtomicUsize::new(0));
    let crashed = tokio::spawn({
        let (store, options, runs) = (store.clone(), options.clone(), runs.clone());
        async move { call(&store, "crashed", options, Duration::from_secs(3600), &runs).await }
    });
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    crashed.abort();
    assert!(crashed.await.unwrap_err().is_cancelled());
    assert_eq!(store.read_state().await.unwrap(), b"", "no record");
    let next = call(&store, "next", options.clone(), Duration::ZERO, &runs).await;
    assert!(matches!(next, OnceOutcome::Ran { .. }), "{next:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the job ran again");
    let after = call(&store, "after", options, Duration::ZERO, &runs).await;
    assert!(matches!(after, OnceOutcome::Skipped { .. }), "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_record_write_refused_because_the_lease_was_lost_is_not_reported_as_recorded() {
    let store = MemoryLeaseStore::new("migrate");
    let options = OnceOptions::default().with_done_key("v42");
    let broken = store.clone();
    let outcome = mutex(&store, "deposed")
        .run_once_with_options(
            CancellationToken::new(),
            options.clone(),
            move |_ctx: LeaderContext| async move {
                // The lease is lost while the job ends.
                broken.break_lease();
                Ok::<_, Error>("migrated")
            },
        )
        .await
        .unwrap();
    let OnceOutcome::Unrecorded { output, error, .. } = outcome else {
        panic!("reported as recorded: {outcome:?}");
    };
    assert_eq!(output, "migrated", "the job's result is still returned");
    assert!(matches!(error, Error::StateWriteRefused(_)), "{error:?}");
    assert_eq!(store.read_state().await.unwrap(), b"", "nothing landed");
    let runs = Arc::new(AtomicUsize::new(0));
    let next = call(&store, "next", options, Duration::ZERO, &runs).await;
    assert!(matches!(next, OnceOutcome::Ran { .. }), "{next:?}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the next leader ran the job"
    );
}

#[tokio::test(start_paused = true)]
async fn at_most_every_runs_skips_within_the_period_and_runs_after_it() {
    let store = MemoryLeaseStore::new("nightly");
    let options = OnceOptions::default().with_at_most_every(PERIOD);
    let runs = Arc::new(AtomicUsize::new(0));
    let started = store.storage_time();
    let first = call(&store, "a", options.clone(), Duration::from_secs(5), &runs).await;
    assert!(matches!(first, OnceOutcome::Ran { .. }), "{first:?}");
    tokio::time::sleep(Duration::from_secs(30)).await;
    let within = call(&store, "b", options.clone(), Duration::ZERO, &runs).await;
    let OnceOutcome::Skipped {
        reason: SkipReason::TooSoon { last, now, period },
        ..
    } = within
    else {
        panic!("ran within the period: {within:?}");
    };
    assert_eq!(period, PERIOD);
    let age = now.duration_since(last).unwrap();
    assert!(
        (Duration::from_secs(34)..=Duration::from_secs(37)).contains(&age),
        "measured on the store's clock from the run's start: {age:?}"
    );
    assert!(
        started.duration_since(last).unwrap_or_default() < Duration::from_secs(1)
            && last.duration_since(started).unwrap_or_default() < Duration::from_secs(1),
        "the record's time is the store's when the run started: {last:?}, {started:?}"
    );
    tokio::time::sleep(Duration::from_secs(26)).await;
    let after = call(&store, "c", options, Duration::ZERO, &runs).await;
    assert!(matches!(after, OnceOutcome::Ran { .. }), "{after:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn two_periods_missed_run_the_job_once() {
    let store = MemoryLeaseStore::new("nightly");
    let options = OnceOptions::default().with_at_most_every(PERIOD);
    let runs = Arc::new(AtomicUsize::new(0));
    let first = call(&store, "a", options.clone(), Duration::ZERO, &runs).await;
    assert!(matches!(first, OnceOutcome::Ran { .. }), "{first:?}");
    tokio::time::sleep(PERIOD * 5 / 2).await;
    let late = three_together(&store, &options, &runs).await;
    assert_eq!(ran(&late), 1, "once, not once per missed period: {late:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn state_that_is_not_a_record_is_refused_and_kept() {
    let store = MemoryLeaseStore::new("checkpointed");
    let wrote = mutex(&store, "a")
        .run_once_with(CancellationToken::new(), |ctx: LeaderContext| async move {
            ctx.write_state("offset=7").await
        })
        .await
        .unwrap();
    assert!(matches!(wrote, OnceOutcome::Ran { .. }));
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let refused = mutex(&store, "b")
        .run_once_with_options(
            CancellationToken::new(),
            OnceOptions::default().with_done_key("v1"),
            move |_ctx: LeaderContext| async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<(), Error>(())
            },
        )
        .await;
    assert!(
        matches!(refused, Err(Error::StateNotARecord(_))),
        "{refused:?}"
    );
    assert_eq!(store.read_state().await.unwrap(), b"offset=7", "kept");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn invalid_options_are_refused_before_campaigning() {
    let store = MemoryLeaseStore::new("migrate");
    let refused = mutex(&store, "a")
        .run_once_with_options(
            CancellationToken::new(),
            OnceOptions::default().with_done_key("v\n42"),
            |_ctx: LeaderContext| async { Ok::<(), Error>(()) },
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::InvalidOption {
                field: "done_key",
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(!store.is_held());
}

#[tokio::test(start_paused = true)]
async fn a_quorum_keeps_no_record_and_says_so_before_campaigning() {
    let accounts: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(MemoryLeaseStore::new)
        .collect();
    let quorum = QuorumLeaseStore::new(accounts.clone()).unwrap();
    let mutex = BlobDistributedMutex::with_store(
        quorum,
        MutexOptions::default(),
        |_ctx: LeaderContext| async { Ok::<(), Error>(()) },
    )
    .unwrap();
    let refused = mutex
        .run_once_with_options(
            CancellationToken::new(),
            OnceOptions::default().with_done_key("v42"),
            |_ctx: LeaderContext| async { Ok::<(), Error>(()) },
        )
        .await;
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "{refused:?}"
    );
    assert!(accounts.iter().all(|a| !a.is_held()), "never campaigned");
}

/// Fires `call` every `schedule`, `firings` times, with a job of `job` and
/// `at_most_every(period)`; the outcomes.
async fn on_schedule(
    store: &MemoryLeaseStore,
    schedule: Duration,
    period: Duration,
    job: Duration,
    firings: usize,
    runs: &Arc<AtomicUsize>,
) -> Vec<OnceOutcome<u64>> {
    let options = OnceOptions::default().with_at_most_every(period);
    let start = tokio::time::Instant::now();
    let mut outcomes = Vec::new();
    for firing in 0..firings {
        tokio::time::sleep_until(start + schedule * u32::try_from(firing).unwrap()).await;
        outcomes.push(call(store, &format!("h{firing}"), options.clone(), job, runs).await);
    }
    outcomes
}

#[tokio::test(start_paused = true)]
async fn at_most_every_counts_from_the_last_runs_start_so_a_job_longer_than_the_schedule_less_the_period_runs_on_schedule(
) {
    // Every 30 s with a period of 25 s, a job of 12 s (longer than 30 − 25).
    let store = MemoryLeaseStore::new("often");
    let runs = Arc::new(AtomicUsize::new(0));
    let started = store.storage_time();
    let outcomes = on_schedule(
        &store,
        Duration::from_secs(30),
        Duration::from_secs(25),
        Duration::from_secs(12),
        3,
        &runs,
    )
    .await;
    assert_eq!(ran(&outcomes), 3, "every firing runs: {outcomes:?}");
    // Within the period of the last start (20 s after it, 8 s after its
    // end): skipped, and the reason counts from the start.
    tokio::time::sleep(Duration::from_secs(20 - 12)).await;
    let options = OnceOptions::default().with_at_most_every(Duration::from_secs(25));
    let within = call(&store, "early", options, Duration::ZERO, &runs).await;
    let OnceOutcome::Skipped {
        reason: SkipReason::TooSoon { last, now, .. },
        ..
    } = within
    else {
        panic!("ran within the period: {within:?}");
    };
    let last_start = started + Duration::from_secs(60);
    assert!(
        last_start.duration_since(last).unwrap() < Duration::from_secs(1),
        "the record holds the last run's start: {last:?}, started {last_start:?}"
    );
    assert!(
        (Duration::from_secs(19)..=Duration::from_secs(21))
            .contains(&now.duration_since(last).unwrap()),
        "{now:?} − {last:?}"
    );

    // A daily job of 5 h with a period of 20 h runs every day.
    let store = MemoryLeaseStore::new("daily");
    let runs = Arc::new(AtomicUsize::new(0));
    let outcomes = on_schedule(
        &store,
        Duration::from_secs(24 * 3600),
        Duration::from_secs(20 * 3600),
        Duration::from_secs(5 * 3600),
        3,
        &runs,
    )
    .await;
    assert_eq!(ran(&outcomes), 3, "every day: {outcomes:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn every_done_key_is_kept_so_an_older_key_after_a_newer_one_still_skips() {
    let store = MemoryLeaseStore::new("migrate");
    let runs = Arc::new(AtomicUsize::new(0));
    for (host, key) in [("a", "v1"), ("b", "v2")] {
        let options = OnceOptions::default().with_done_key(key);
        let outcome = call(&store, host, options, Duration::ZERO, &runs).await;
        assert!(matches!(outcome, OnceOutcome::Ran { .. }), "{outcome:?}");
    }
    // A host still on the old version, or a rollback.
    for (host, key) in [("old", "v1"), ("new", "v2")] {
        let options = OnceOptions::default().with_done_key(key);
        let outcome = call(&store, host, options, Duration::ZERO, &runs).await;
        assert!(
            matches!(&outcome, OnceOutcome::Skipped { reason: SkipReason::Done { key: k }, report: None } if k == key),
            "{key}: {outcome:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "v1 ran once, v2 once");
}

/// Writes `state` into the lease's state, as a term of the task form would.
async fn put_state(store: &MemoryLeaseStore, state: Vec<u8>) {
    let wrote = mutex(store, "writer")
        .run_once_with(
            CancellationToken::new(),
            move |ctx: LeaderContext| async move { ctx.write_state(state).await },
        )
        .await
        .unwrap();
    assert!(matches!(wrote, OnceOutcome::Ran { .. }), "{wrote:?}");
}

#[tokio::test(start_paused = true)]
async fn a_record_of_the_first_format_still_reads_and_keeps_its_key() {
    let store = MemoryLeaseStore::new("migrate");
    let at = store
        .storage_time()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    put_state(
        &store,
        format!("blob-mutex record v1\nkey=v42\nat={at}\n").into_bytes(),
    )
    .await;
    let runs = Arc::new(AtomicUsize::new(0));
    let done = call(
        &store,
        "a",
        OnceOptions::default().with_done_key("v42"),
        Duration::ZERO,
        &runs,
    )
    .await;
    assert!(
        matches!(
            &done,
            OnceOutcome::Skipped {
                reason: SkipReason::Done { .. },
                ..
            }
        ),
        "{done:?}"
    );
    let soon = call(
        &store,
        "b",
        OnceOptions::default().with_at_most_every(PERIOD),
        Duration::ZERO,
        &runs,
    )
    .await;
    assert!(
        matches!(
            &soon,
            OnceOutcome::Skipped {
                reason: SkipReason::TooSoon { .. },
                ..
            }
        ),
        "{soon:?}"
    );
    let next = call(
        &store,
        "c",
        OnceOptions::default().with_done_key("v43"),
        Duration::ZERO,
        &runs,
    )
    .await;
    assert!(matches!(next, OnceOutcome::Ran { .. }), "{next:?}");
    let old = call(
        &store,
        "d",
        OnceOptions::default().with_done_key("v42"),
        Duration::ZERO,
        &runs,
    )
    .await;
    assert!(
        matches!(old, OnceOutcome::Skipped { .. }),
        "v42 is kept: {old:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The most keys of [`OnceOptions::DONE_KEY_MAX`] bytes a record keeps.
const LONGEST_KEYS_KEPT: usize = 16_069;

/// A key of [`OnceOptions::DONE_KEY_MAX`] bytes, told apart by `n`.
fn longest_key(n: usize) -> String {
    format!("{n:0width$}", width = OnceOptions::DONE_KEY_MAX)
}

#[tokio::test(start_paused = true)]
async fn a_key_the_record_cannot_keep_is_refused_before_the_job_runs_and_none_is_dropped() {
    let store = MemoryLeaseStore::new("migrate");
    let mut record = String::from("blob-mutex record v2\n");
    for n in 0..LONGEST_KEYS_KEPT - 1 {
        record.push_str("key=");
        record.push_str(&longest_key(n));
        record.push('\n');
    }
    put_state(&store, record.into_bytes()).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let last = OnceOptions::default()
        .with_done_key(longest_key(LONGEST_KEYS_KEPT - 1))
        .with_at_most_every(Duration::from_secs(1));
    let fits = call(&store, "a", last, Duration::ZERO, &runs).await;
    assert!(
        matches!(fits, OnceOutcome::Ran { .. }),
        "the last key that fits: {fits:?}"
    );
    let full = store.read_state().await.unwrap();
    assert!(full.len() <= MAX_STATE_LEN, "{}", full.len());

    let counted = runs.clone();
    let refused = mutex(&store, "b")
        .run_once_with_options(
            CancellationToken::new(),
            OnceOptions::default().with_done_key(longest_key(LONGEST_KEYS_KEPT)),
            move |_ctx: LeaderContext| async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<(), Error>(())
            },
        )
        .await;
    let Err(error @ Error::RecordFull { .. }) = refused else {
        panic!("not refused: {refused:?}");
    };
    let text = error.to_string();
    assert!(
        text.contains("16069 keys") && text.contains("migrate"),
        "{text}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the job did not run");
    assert!(!store.is_held(), "refused before campaigning");
    assert_eq!(store.read_state().await.unwrap(), full, "no key dropped");
    let first = call(
        &store,
        "c",
        OnceOptions::default().with_done_key(longest_key(0)),
        Duration::ZERO,
        &runs,
    )
    .await;
    assert!(matches!(first, OnceOutcome::Skipped { .. }), "{first:?}");
}

#[tokio::test(start_paused = true)]
async fn a_transient_error_reading_the_record_before_campaigning_is_retried_within_the_first_contact_window(
) {
    let store = MemoryLeaseStore::new("migrate");
    let runs = Arc::new(AtomicUsize::new(0));
    store.set_unavailable(true);
    let call_store = store.clone();
    let counted = runs.clone();
    let calling = tokio::spawn(async move {
        call(
            &call_store,
            "a",
            OnceOptions::default().with_done_key("v1"),
            Duration::ZERO,
            &counted,
        )
        .await
    });
    tokio::time::sleep(Duration::from_secs(10)).await;
    store.set_unavailable(false);
    let outcome = calling.await.unwrap();
    assert!(matches!(outcome, OnceOutcome::Ran { .. }), "{outcome:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Storage that never answers: the first-contact error, at its time.
    let down = MemoryLeaseStore::new("down");
    down.set_unavailable(true);
    let begun = tokio::time::Instant::now();
    let refused = mutex(&down, "b")
        .run_once_with_options(
            CancellationToken::new(),
            OnceOptions::default().with_done_key("v1"),
            |_ctx: LeaderContext| async { Ok::<(), Error>(()) },
        )
        .await;
    assert!(
        matches!(refused, Err(Error::FirstContactFailed { .. })),
        "{refused:?}"
    );
    let took = begun.elapsed();
    assert!(
        (Duration::from_secs(30)..Duration::from_secs(36)).contains(&took),
        "one window, not one for the read and one for the campaign: {took:?}"
    );
}

/// A memory store whose state writes never answer.
#[derive(Clone)]
struct HangingWrites(MemoryLeaseStore);

impl Wrap for HangingWrites {
    type Inner = MemoryLeaseStore;
    fn inner(&self) -> &MemoryLeaseStore {
        &self.0
    }
    fn write_state(
        &self,
        _lease: LeaseId,
        _state: &[u8],
    ) -> impl Future<Output = blob_mutex::Result<()>> + Send {
        std::future::pending()
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_while_the_record_is_written_still_returns_the_output_as_unrecorded() {
    let store = MemoryLeaseStore::new("migrate");
    let broken = store.clone();
    let mutex = BlobDistributedMutex::with_store(
        Forward(HangingWrites(store.clone())),
        MutexOptions::default(),
        |_ctx: LeaderContext| async { Ok::<(), Error>(()) },
    )
    .unwrap();
    let outcome = mutex
        .run_once_with_options(
            CancellationToken::new(),
            OnceOptions::default().with_done_key("v42"),
            move |_ctx: LeaderContext| async move {
                // The job ends just before a renewal, and the lease is
                // lost: the renewal finds it so while the write is out.
                tokio::time::sleep(Duration::from_millis(4500)).await;
                broken.break_lease();
                Ok::<_, Error>("migrated")
            },
        )
        .await;
    let Ok(OnceOutcome::Unrecorded {
        output,
        report,
        error,
    }) = outcome
    else {
        panic!("the output is lost: {outcome:?}");
    };
    assert_eq!(output, "migrated");
    assert_eq!(report.reason, StopReason::LeaseLost, "{report:?}");
    assert!(matches!(error, Error::LeaseLost(_)), "{error:?}");
    assert_eq!(store.read_state().await.unwrap(), b"", "nothing landed");
}
