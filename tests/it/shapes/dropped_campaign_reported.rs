//! The campaign future dropped mid-term (as `tokio::select!` drops the
//! branch that lost): what observes the mutex agrees that the term ended.
//! One term report with reason `dropped`, `watch()` at `Stopped`, the
//! `is_leader` gauge back to 0 and one end counted, while another mutex
//! leads only once the abandoned lease has expired.

use std::time::Duration;

use blob_mutex::{
    term::Leadership, term::StopReason, term::TaskStop, testing::MemoryLeaseStore,
    BlobDistributedMutex, CancellationToken, LeaderContext, MutexOptions,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tokio::time::Instant;

async fn lead(ctx: LeaderContext) -> Result<(), blob_mutex::Error> {
    ctx.cancelled().await;
    Ok(())
}

type Figures = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The value of the gauge or counter `name` whose labels include `reason`
/// (any reason when `None`), in one snapshot (taking it resets the values).
fn figure(figures: &Figures, name: &str, reason: Option<&str>) -> Option<f64> {
    figures.iter().find_map(|(key, _, _, value)| {
        let key = key.key();
        let matches_reason =
            reason.is_none_or(|r| key.labels().any(|l| l.key() == "reason" && l.value() == r));
        if key.name() != name || !matches_reason {
            return None;
        }
        match value {
            DebugValue::Gauge(g) => Some(g.into_inner()),
            #[allow(clippy::cast_precision_loss)] // small counts
            DebugValue::Counter(c) => Some(*c as f64),
            DebugValue::Histogram(_) => None,
        }
    })
}

#[test]
fn a_dropped_campaign_is_reported_by_every_observer() {
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = MemoryLeaseStore::new("leases/dropped");
            let options = MutexOptions::default()
                .with_holder("a".to_owned())
                .with_jitter_seed(1);
            let a = BlobDistributedMutex::with_store(store.clone(), options.clone(), lead).unwrap();
            let b = BlobDistributedMutex::with_store(
                store.clone(),
                options.with_holder("b".to_owned()),
                lead,
            )
            .unwrap();
            let mut reports = a.term_reports();
            let mut state = a.watch();
            tokio::select! {
                r = a.run_task_when_mutex_acquired(CancellationToken::new()) => panic!("{r:?}"),
                () = tokio::time::sleep(Duration::from_secs(7)) => {}
            }
            let dropped = Instant::now();

            let report = reports.try_recv().expect("a report for the dropped term");
            assert_eq!(
                (report.epoch, report.reason, report.tasks),
                (1, StopReason::Dropped, TaskStop::Aborted)
            );
            assert!(reports.try_recv().is_err(), "one report per term");
            assert_eq!(*state.borrow_and_update(), Leadership::Stopped);
            let figures = recorder.snapshotter().snapshot().into_vec();
            assert_eq!(figure(&figures, "blob_mutex_is_leader", None), Some(0.0));
            assert_eq!(
                figure(&figures, "blob_mutex_term_ends_total", Some("dropped")),
                Some(1.0)
            );

            // The lease was left to expire: b leads only after that.
            let token = CancellationToken::new();
            let mut b_state = b.watch();
            let b_run = b.run_task_when_mutex_acquired(token.clone());
            let b_leads = async {
                b_state.wait_for(|s| s.epoch().is_some()).await.unwrap();
                Instant::now()
            };
            let led = tokio::select! {
                r = b_run => panic!("{r:?}"),
                at = b_leads => at,
            };
            // a renewed last at 5 s; the lease lasts 15 s from then.
            assert!(
                led - dropped >= Duration::from_secs(13),
                "b led {:?} after the drop",
                led - dropped
            );
            assert!(store.epoch() >= 2);
        });
    });
}
