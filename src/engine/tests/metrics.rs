//! Each transition moves the right figure (feature `metrics`), seen through
//! a recording backend.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use super::*;

/// The figures after a run, as `(name, extra label value, value)`; the
/// `container` and `blob` labels are checked to be the store's.
fn figures(recorder: &DebuggingRecorder) -> Vec<(String, Option<String>, DebugValue)> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            assert_eq!(labels[0], ("container".into(), "memory".into()));
            assert_eq!(labels[1], ("blob".into(), "test".into()));
            let extra = labels.get(2).map(|(_, v)| v.clone());
            (key.name().to_owned(), extra, value)
        })
        .collect()
}

fn counter(all: &[(String, Option<String>, DebugValue)], name: &str, extra: Option<&str>) -> u64 {
    all.iter()
        .find_map(|(n, e, v)| match v {
            DebugValue::Counter(c) if n == name && e.as_deref() == extra => Some(*c),
            _ => None,
        })
        .unwrap_or(0)
}

/// Runs `work` on a paused current-thread runtime with `recorder` as this
/// thread's metrics recorder.
fn recorded<T>(recorder: &DebuggingRecorder, work: impl Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    ::metrics::with_local_recorder(recorder, || runtime.block_on(work))
}

#[test]
fn each_transition_moves_its_figure() {
    let recorder = DebuggingRecorder::new();
    let leading_seen = recorded(&recorder, async {
        let h = Harness::new(defaults());
        let task = recording_task(h.store.clone(), Some(Duration::ZERO));
        // Broken at 12 s, found lost by the renewal at 15 s; a second
        // term after the retry period; shut down at 30 s.
        let mut state = h.state.subscribe();
        let watcher = async {
            state.wait_for(|s| s.epoch() == Some(1)).await.unwrap();
        };
        let (result, ()) = tokio::join!(
            h.run_and(
                task,
                Duration::from_secs(30),
                Duration::from_secs(12),
                MemoryStore::break_lease
            ),
            watcher
        );
        result.unwrap();
        h.store.events()
    });
    let renewals = leading_seen
        .iter()
        .filter(|(_, e)| *e == Event::Renewed)
        .count();
    let all = figures(&recorder);
    assert_eq!(counter(&all, "blob_mutex_terms_total", None), 2, "{all:?}");
    assert_eq!(counter(&all, "blob_mutex_term_ends_total", Some("lost")), 1);
    assert_eq!(
        counter(&all, "blob_mutex_term_ends_total", Some("shutdown")),
        1
    );
    assert_eq!(
        counter(&all, "blob_mutex_acquire_attempts_total", Some("acquired")),
        2
    );
    assert_eq!(counter(&all, "blob_mutex_renew_failures_total", None), 1);
    assert_eq!(
        counter(&all, "blob_mutex_renewals_total", None),
        u64::try_from(renewals).unwrap()
    );
    let latencies = all
        .iter()
        .find_map(|(n, _, v)| match v {
            DebugValue::Histogram(h) if n == "blob_mutex_renew_seconds" => Some(h.len()),
            _ => None,
        })
        .unwrap();
    assert_eq!(latencies, renewals);
    let leader = all
        .iter()
        .find_map(|(n, _, v)| match v {
            DebugValue::Gauge(g) if n == "blob_mutex_is_leader" => Some(g.into_inner()),
            _ => None,
        })
        .unwrap();
    assert!(leader.abs() < f64::EPSILON, "not leader after the shutdown");
    assert_eq!(counter(&all, "blob_mutex_task_failures_total", None), 0);
    assert_eq!(counter(&all, "blob_mutex_task_aborts_total", None), 0);
}

#[test]
fn failures_and_aborts_are_counted() {
    let recorder = DebuggingRecorder::new();
    recorded(&recorder, async {
        let h = Harness::new(defaults());
        // The first term's task fails; the second ignores its cancellation.
        let store = h.store.clone();
        let task = box_task(move |ctx: LeaderContext| {
            let store = store.clone();
            async move {
                if ctx.epoch() == 1 {
                    return Err(Error::transport("work", "gone"));
                }
                store.record(Event::TaskStarted(ctx.epoch()));
                std::future::pending::<()>().await;
                Ok(())
            }
        });
        h.run(task, Duration::from_secs(10)).await.unwrap();
    });
    let all = figures(&recorder);
    assert_eq!(
        counter(&all, "blob_mutex_task_failures_total", None),
        1,
        "{all:?}"
    );
    assert_eq!(
        counter(&all, "blob_mutex_term_ends_total", Some("failed")),
        1
    );
    assert_eq!(counter(&all, "blob_mutex_task_aborts_total", None), 1);
}
