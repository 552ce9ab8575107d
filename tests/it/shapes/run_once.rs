//! Run once, over the in-memory store with paused time: a call campaigns,
//! leads one term, runs its task once and returns the task's output with
//! the term's report; three instances called together each lead once, one
//! after the other, and all return; a task's error comes back as it was
//! returned; a call cancelled before it leads says so.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use blob_mutex::{
    term::Leadership, term::StopReason, term::TaskStop, testing::MemoryLeaseStore,
    BlobDistributedMutex, CancellationToken, Error, LeaderContext, MutexOptions, OnceOutcome,
};

/// A mutex over `store` whose own task holds the lease until told to stop.
fn mutex(store: &MemoryLeaseStore, holder: &str) -> BlobDistributedMutex<MemoryLeaseStore> {
    let options = MutexOptions::default().with_holder(holder.to_owned());
    BlobDistributedMutex::with_store(store.clone(), options, |ctx: LeaderContext| async move {
        ctx.cancelled().await;
        Ok::<(), Error>(())
    })
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn three_instances_called_together_each_lead_one_term_in_turn_and_return() {
    let store = MemoryLeaseStore::new("once");
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for holder in ["a", "b", "c"] {
        let mutex = mutex(&store, holder);
        let (running, most) = (running.clone(), most.clone());
        calls.push(tokio::spawn(async move {
            let mut reports = mutex.term_reports();
            let outcome = mutex
                .run_once_with(
                    CancellationToken::new(),
                    move |ctx: LeaderContext| async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(20)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Error>(ctx.epoch())
                    },
                )
                .await
                .unwrap();
            let reported = reports.recv().await.unwrap();
            assert_eq!(*mutex.watch().borrow(), Leadership::Stopped);
            (outcome, reported)
        }));
    }
    let mut epochs = Vec::new();
    for call in calls {
        let (outcome, reported) = call.await.unwrap();
        let OnceOutcome::Ran { output, report } = outcome else {
            panic!("not run: {outcome:?}");
        };
        assert_eq!(output, report.epoch, "the output is the task's");
        assert_eq!(report, reported, "the report is the term's own");
        assert_eq!(
            (report.reason, report.tasks),
            (StopReason::Finished, TaskStop::Returned)
        );
        epochs.push(output);
    }
    epochs.sort_unstable();
    assert_eq!(epochs, [1, 2, 3], "one term each");
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two at once");
    assert!(!store.is_held(), "the last term released the lease");
}

#[derive(Debug, thiserror::Error)]
#[error("the migration failed")]
struct MigrationFailed;

#[tokio::test(start_paused = true)]
async fn a_task_error_is_returned_as_the_task_returned_it() {
    let store = MemoryLeaseStore::new("once");
    let mutex = mutex(&store, "a");
    let failed = mutex
        .run_once_with(CancellationToken::new(), |_ctx: LeaderContext| async {
            Err::<(), _>(MigrationFailed)
        })
        .await;
    let Err(Error::TaskFailed { report, source }) = failed else {
        panic!("not a task failure: {failed:?}");
    };
    assert_eq!(report.reason, StopReason::Failed);
    assert_eq!(report.failure.as_deref(), Some("the migration failed"));
    assert!(source.unwrap().downcast_ref::<MigrationFailed>().is_some());
    assert!(!store.is_held(), "released after the failure");
}

#[tokio::test(start_paused = true)]
async fn the_task_given_at_construction_runs_once() {
    let store = MemoryLeaseStore::new("once");
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let mutex = BlobDistributedMutex::with_store(
        store.clone(),
        MutexOptions::default(),
        move |_ctx: LeaderContext| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<(), Error>(()) }
        },
    )
    .unwrap();
    let outcome = mutex.run_once(CancellationToken::new()).await.unwrap();
    assert!(matches!(outcome, OnceOutcome::Ran { output: (), .. }));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "no second term");
}

#[tokio::test(start_paused = true)]
async fn a_call_cancelled_before_it_leads_returns_cancelled() {
    let store = MemoryLeaseStore::new("once");
    let holder = mutex(&store, "holder");
    let token = CancellationToken::new();
    let hold = tokio::spawn({
        let token = token.clone();
        async move {
            holder.run_task_when_mutex_acquired(token).await.unwrap();
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(store.is_held());
    let waiting = mutex(&store, "waiting");
    let cancel = CancellationToken::new();
    let call = waiting.run_once_with(cancel.clone(), |_ctx: LeaderContext| async {
        Ok::<(), Error>(())
    });
    let (result, ()) = tokio::join!(call, async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        cancel.cancel();
    });
    assert!(matches!(result, Err(Error::Cancelled)), "{result:?}");
    token.cancel();
    hold.await.unwrap();
}
