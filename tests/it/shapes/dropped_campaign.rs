//! The campaign future dropped by `tokio::select!`, as ordinary Rust does
//! with the branch that lost: its leader task stops at once, cooperative or
//! not, and a second instance on the same blob leads only after that, once
//! the lease left to expire has expired.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{BlobDistributedMutex, CancellationToken, LeaderContext, MutexOptions};
use blob_mutex_testkit::azurite;
use tokio::time::Instant;

type Log = Arc<Mutex<Vec<(Instant, &'static str)>>>;

/// A leader task that records a tick every 50 ms; it obeys cancellation
/// only if `cooperative`.
async fn ticker(
    ctx: LeaderContext,
    log: Log,
    name: &'static str,
    cooperative: bool,
) -> anyhow::Result<()> {
    loop {
        tokio::select! {
            _ = ctx.cancelled(), if cooperative => return Ok(()),
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                log.lock().unwrap().push((Instant::now(), name));
            }
        }
    }
}

fn ticks(log: &Log, name: &str) -> Vec<Instant> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| *n == name)
        .map(|(t, _)| *t)
        .collect()
}

async fn dropped_campaign_stops_its_task(cooperative: bool) {
    let container = azurite::unique_container("dropped");
    let settings = azurite::shared().settings(&container, "dropped");
    let options = MutexOptions::default().with_acquire_retry(Duration::from_millis(300));
    let log: Log = Arc::default();
    let (la, lb) = (log.clone(), log.clone());
    let a = BlobDistributedMutex::with_options(settings.clone(), options.clone(), move |ctx| {
        ticker(ctx, la.clone(), "a", cooperative)
    })
    .unwrap();
    let b = Arc::new(
        BlobDistributedMutex::with_options(settings, options, move |ctx| {
            ticker(ctx, lb.clone(), "b", true)
        })
        .unwrap(),
    );

    let a_led = async {
        blob_mutex_testkit::wait_for("a to lead and work", Duration::from_secs(20), || async {
            (ticks(&log, "a").len() >= 5).then_some(())
        })
        .await;
    };
    // The shape under test: the campaign is the branch that loses.
    tokio::select! {
        r = a.run_task_when_mutex_acquired(CancellationToken::new()) => panic!("a's campaign ended: {r:?}"),
        () = a_led => {}
    }
    let dropped = Instant::now();
    let b_token = CancellationToken::new();
    let b_campaign = tokio::spawn({
        let (b, token) = (b.clone(), b_token.clone());
        async move { b.run_task_when_mutex_acquired(token).await }
    });
    let b_first = blob_mutex_testkit::wait_for("b to lead", Duration::from_secs(25), || async {
        ticks(&log, "b").first().copied()
    })
    .await;

    let a_ticks = ticks(&log, "a");
    let a_after = a_ticks.iter().filter(|&&t| t > dropped).count();
    assert_eq!(
        a_after, 0,
        "a worked {a_after} times after its campaign was dropped"
    );
    let a_last = *a_ticks.last().unwrap();
    assert!(b_first > a_last);
    // The lease was left to expire, not released: b waited for it.
    assert!(
        b_first - dropped >= Duration::from_secs(10),
        "b led {:?} after the drop",
        b_first - dropped
    );
    println!(
        "dropped campaign (cooperative: {cooperative}): a's last tick {:?} before the drop, b led {:?} after it",
        dropped - a_last,
        b_first - dropped
    );
    b_token.cancel();
    b_campaign.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_campaign_stops_a_cooperative_task() {
    dropped_campaign_stops_its_task(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_campaign_stops_a_task_that_ignores_cancellation() {
    dropped_campaign_stops_its_task(false).await;
}
