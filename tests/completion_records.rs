//! Completion records, over the in-memory store with paused time: once per
//! key across three instances, a leader that crashed mid-job leaves no
//! record, a record write refused because the lease was lost is not
//! reported as recorded, at most once per period on the store's clock (two
//! periods missed run once), state that is not a record is refused, and a
//! quorum, which keeps no state, refuses the options before campaigning.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use blob_mutex::{
    BlobDistributedMutex, CancellationToken, Error, LeaderContext, LeaseStore, MemoryLeaseStore,
    MutexOptions, OnceOptions, OnceOutcome, QuorumLeaseStore, SkipReason,
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
    let first = call(&store, "a", options.clone(), Duration::from_secs(5), &runs).await;
    assert!(matches!(first, OnceOutcome::Ran { .. }), "{first:?}");
    let recorded = store.storage_time();
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
        (Duration::from_secs(29)..=Duration::from_secs(32)).contains(&age),
        "measured on the store's clock: {age:?}"
    );
    assert!(
        recorded.duration_since(last).unwrap() < Duration::from_secs(2),
        "the record's time is the store's when it was written"
    );
    tokio::time::sleep(Duration::from_secs(31)).await;
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
