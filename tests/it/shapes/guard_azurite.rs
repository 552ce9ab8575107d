//! A guard with a preferred successor on a real Azurite: the holder runs
//! steps of three seconds, each begun only while `is_current()` says so;
//! a candidate of a higher priority is handed the lease only after the
//! holder's step in flight ended and the guard was released, never under
//! it (Change Lease, then the candidate's next acquire).

use std::time::Duration;

use blob_mutex::{
    term::StopReason, term::TaskStop, BlobDistributedMutex, Error, LeaderContext, MutexOptions,
};
use blob_mutex_testkit::azurite;
use tokio::time::{sleep, Instant};

const STEP: Duration = Duration::from_secs(3);

async fn never_runs(_: LeaderContext) -> Result<(), Error> {
    unreachable!("a guard's term runs the holder's code")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_is_handed_to_a_preferred_successor_only_after_its_holders_step_ended() {
    let container = azurite::unique_container("guard-handover");
    let settings = azurite::shared().settings(&container, "lock");
    let low = BlobDistributedMutex::with_options(
        settings.clone(),
        MutexOptions::default()
            .with_holder("low".to_owned())
            .with_priority(1),
        never_runs,
    )
    .unwrap();
    let high = BlobDistributedMutex::with_options(
        settings,
        MutexOptions::default()
            .with_holder("high".to_owned())
            .with_priority(5),
        never_runs,
    )
    .unwrap();
    let guard = low.acquire().await.unwrap();
    let start = Instant::now();
    let successor = tokio::spawn(async move {
        let guard = high.acquire().await.unwrap();
        let first_act = Instant::now();
        let epoch = guard.epoch();
        guard.release().await.unwrap();
        (first_act, epoch)
    });
    let mut last_step = None;
    while guard.is_current() {
        let begun = Instant::now();
        sleep(STEP).await;
        last_step = Some((begun, Instant::now()));
    }
    let first_epoch = guard.epoch();
    let report = guard.release().await.unwrap();
    assert_eq!(report.reason, StopReason::Handover, "{report:?}");
    assert_eq!(report.tasks, TaskStop::Returned);
    let (first_act, epoch) = tokio::time::timeout(Duration::from_secs(30), successor)
        .await
        .expect("the successor leads soon after the release")
        .unwrap();
    let (begun, ended) = last_step.expect("the holder ran steps");
    assert!(
        ended <= first_act,
        "the step begun at {:?} ran until {:?}, after the successor's first act at {:?}",
        begun - start,
        ended - start,
        first_act - start
    );
    assert!(
        epoch > first_epoch,
        "the successor's epoch {epoch} follows {first_epoch}"
    );
}
