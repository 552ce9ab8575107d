//! A schedule's figure through the `metrics` facade (feature `metrics`):
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `blob_mutex_schedule_last_success_timestamp_seconds` | gauge | `container`, `blob` | the instant of the last slot this host saw succeed, run here or elsewhere (0 before): alert on `time() - x` |
//! | `blob_mutex_schedule_job_started_timestamp_seconds` | gauge | `container`, `blob` | when the job running here began, the host's clock; 0 while none runs: alert on a hung job with `x > 0 and time() - x > limit` |
//! | `blob_mutex_schedule_slots_given_up_total` | counter | `container`, `blob` | failed slots that gave up: retries spent, or the next past the window |
//! | `blob_mutex_schedule_slots_total` | counter | `container`, `blob`, `outcome` | slots this host settled, by [`SlotOutcome`] word: `ran`, `failed`, `unrecorded`, `stopped` (its job was stopped with its term, and runs again as the same attempt), `blocked` (due while a holder that is not a schedule's host held the lease), `skipped`, `missed` (a run of missed slots counts each), `done_elsewhere` (another host ran it), `cut_short` (another term's run of it was cut short; this host runs it again) |
//!
//! The lease's own figures (terms, renewals) are the mutex's
//! (`engine::metrics`); no label carries a secret or a lease id.

use super::SlotOutcome;

/// The outcome words, each counted from 0 at the start.
const OUTCOMES: [&str; 9] = [
    "ran",
    "failed",
    "unrecorded",
    "stopped",
    "blocked",
    "skipped",
    "missed",
    "done_elsewhere",
    "cut_short",
];

/// The word of an outcome, and how many slots it stands for.
fn word(outcome: &SlotOutcome) -> (&'static str, u64) {
    match outcome {
        SlotOutcome::Ran { .. } => ("ran", 1),
        SlotOutcome::Failed { .. } => ("failed", 1),
        SlotOutcome::Unrecorded { .. } => ("unrecorded", 1),
        SlotOutcome::Stopped { .. } => ("stopped", 1),
        SlotOutcome::Blocked { .. } => ("blocked", 1),
        SlotOutcome::Skipped => ("skipped", 1),
        SlotOutcome::Missed { count } => ("missed", *count),
        SlotOutcome::DoneElsewhere { .. } => ("done_elsewhere", 1),
        SlotOutcome::CutShort { .. } => ("cut_short", 1),
    }
}

/// The slot counter of one schedule's lease (a no-op without the feature).
#[derive(Debug, Clone)]
pub(super) struct SlotCounter {
    #[cfg(feature = "metrics")]
    labels: [(&'static str, String); 2],
}

impl SlotCounter {
    /// The counter of the lease `name` (`container/blob`), every outcome
    /// at 0: an alert on `increase()` needs the series before the first
    /// slot.
    pub(super) fn new(name: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            let (container, blob) = name.split_once('/').unwrap_or(("", name));
            let counter = SlotCounter {
                labels: [
                    ("container", container.to_owned()),
                    ("blob", blob.to_owned()),
                ],
            };
            ::metrics::describe_counter!(
                "blob_mutex_schedule_slots_total",
                "slots this host settled, by outcome"
            );
            ::metrics::describe_gauge!(
                "blob_mutex_schedule_last_success_timestamp_seconds",
                "the instant of the last slot this host saw succeed, here or elsewhere (Unix seconds; 0 before)"
            );
            ::metrics::describe_gauge!(
                "blob_mutex_schedule_job_started_timestamp_seconds",
                "when the slot's job running here began (Unix seconds, the host's clock); 0 while none runs"
            );
            ::metrics::describe_counter!(
                "blob_mutex_schedule_slots_given_up_total",
                "failed slots whose retries were spent, or whose next attempt would come past the window"
            );
            ::metrics::gauge!(
                "blob_mutex_schedule_last_success_timestamp_seconds",
                &counter.labels
            )
            .set(0.0);
            ::metrics::gauge!(
                "blob_mutex_schedule_job_started_timestamp_seconds",
                &counter.labels
            )
            .set(0.0);
            ::metrics::counter!("blob_mutex_schedule_slots_given_up_total", &counter.labels)
                .increment(0);
            for outcome in OUTCOMES {
                ::metrics::counter!("blob_mutex_schedule_slots_total", &counter.with(outcome))
                    .increment(0);
            }
            counter
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (name, OUTCOMES);
            SlotCounter {}
        }
    }

    /// Counts a slot settled as `outcome`.
    #[cfg_attr(not(feature = "metrics"), allow(clippy::unused_self))]
    pub(super) fn settled(&self, outcome: &SlotOutcome) {
        let (word, slots) = word(outcome);
        #[cfg(feature = "metrics")]
        ::metrics::counter!("blob_mutex_schedule_slots_total", &self.with(word)).increment(slots);
        #[cfg(not(feature = "metrics"))]
        let _ = (word, slots);
    }

    /// A slot succeeded, here or elsewhere: `slot` is its instant.
    #[cfg_attr(not(feature = "metrics"), allow(clippy::unused_self))]
    pub(super) fn succeeded(&self, slot: jiff::Timestamp) {
        #[cfg(feature = "metrics")]
        {
            #[allow(clippy::cast_precision_loss)] // seconds of a date fit an f64
            let at = slot.as_second() as f64;
            let gauge = ::metrics::gauge!(
                "blob_mutex_schedule_last_success_timestamp_seconds",
                &self.labels
            );
            gauge.set(at);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = slot;
    }

    /// A slot's job began here at `at` (its host's clock, Unix seconds),
    /// or ended (`None`).
    #[cfg_attr(not(feature = "metrics"), allow(clippy::unused_self))]
    pub(super) fn job(&self, at: Option<std::time::SystemTime>) {
        #[cfg(feature = "metrics")]
        {
            let since = at
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0.0, |d| d.as_secs_f64());
            ::metrics::gauge!(
                "blob_mutex_schedule_job_started_timestamp_seconds",
                &self.labels
            )
            .set(since);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = at;
    }

    /// A failed slot gave up.
    #[cfg_attr(not(feature = "metrics"), allow(clippy::unused_self))]
    pub(super) fn gave_up(&self) {
        #[cfg(feature = "metrics")]
        ::metrics::counter!("blob_mutex_schedule_slots_given_up_total", &self.labels).increment(1);
    }

    #[cfg(feature = "metrics")]
    fn with(&self, outcome: &'static str) -> [(&'static str, String); 3] {
        let [container, blob] = self.labels.clone();
        [container, blob, ("outcome", outcome.to_owned())]
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::collections::BTreeMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    /// The counter's value for each outcome it has a series of, from one
    /// snapshot (which takes the counts since the last).
    fn counts(recorder: &DebuggingRecorder) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
            let key = key.key();
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            if let (true, [("container", "c"), ("blob", "nightly"), ("outcome", outcome)]) = (
                key.name() == "blob_mutex_schedule_slots_total",
                labels.as_slice(),
            ) {
                if let DebugValue::Counter(n) = value {
                    counts.insert((*outcome).to_owned(), n);
                }
            }
        }
        counts
    }

    #[test]
    fn every_outcome_is_counted_from_zero_and_missed_slots_each() {
        let recorder = DebuggingRecorder::new();
        let at_start = ::metrics::with_local_recorder(&recorder, || {
            let counter = SlotCounter::new("c/nightly");
            let at_start = counts(&recorder);
            counter.settled(&SlotOutcome::Ran {
                epoch: 7,
                attempt: 1,
            });
            counter.settled(&SlotOutcome::Missed { count: 3 });
            counter.settled(&SlotOutcome::Skipped);
            counter.settled(&SlotOutcome::DoneElsewhere {
                holder: "h1".to_owned(),
                epoch: 8,
            });
            counter.settled(&SlotOutcome::CutShort {
                holder: "h2".to_owned(),
                epoch: 6,
            });
            at_start
        });
        let zero: BTreeMap<String, u64> = OUTCOMES.iter().map(|o| ((*o).to_owned(), 0)).collect();
        assert_eq!(at_start, zero);
        let after = counts(&recorder);
        let expected = [
            ("cut_short", 1),
            ("done_elsewhere", 1),
            ("failed", 0),
            ("missed", 3),
            ("ran", 1),
            ("skipped", 1),
            ("unrecorded", 0),
            ("stopped", 0),
            ("blocked", 0),
        ];
        let expected: BTreeMap<String, u64> = expected
            .iter()
            .map(|(o, n)| ((*o).to_owned(), *n))
            .collect();
        assert_eq!(after, expected);
    }

    /// The gauge of a value by name, from one snapshot.
    fn gauges(recorder: &DebuggingRecorder) -> BTreeMap<String, f64> {
        let mut gauges = BTreeMap::new();
        for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
            match value {
                DebugValue::Gauge(v) => {
                    gauges.insert(key.key().name().to_owned(), v.0);
                }
                DebugValue::Counter(n) if key.key().name().ends_with("given_up_total") => {
                    #[allow(clippy::cast_precision_loss)] // a few slots
                    gauges.insert(key.key().name().to_owned(), n as f64);
                }
                _ => {}
            }
        }
        gauges
    }

    /// What an alert keys on: the last success, a job's start (0 while
    /// none runs), the slots given up; each exported from the start.
    #[test]
    fn the_last_success_the_running_jobs_start_and_the_slots_given_up_are_exported() {
        let recorder = DebuggingRecorder::new();
        let (at_start, running) = ::metrics::with_local_recorder(&recorder, || {
            let counter = SlotCounter::new("c/nightly");
            let at_start = gauges(&recorder);
            counter.succeeded("2026-11-28T02:30:00Z".parse().unwrap());
            counter.job(Some(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000),
            ));
            counter.gave_up();
            let running = gauges(&recorder);
            counter.job(None);
            (at_start, running)
        });
        let start = [
            ("blob_mutex_schedule_job_started_timestamp_seconds", 0.0),
            ("blob_mutex_schedule_last_success_timestamp_seconds", 0.0),
            ("blob_mutex_schedule_slots_given_up_total", 0.0),
        ];
        let named = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        assert_eq!(at_start, named(&start));
        assert_eq!(
            running,
            named(&[
                (
                    "blob_mutex_schedule_job_started_timestamp_seconds",
                    1_800_000_000.0
                ),
                (
                    "blob_mutex_schedule_last_success_timestamp_seconds",
                    1_795_833_000.0
                ),
                ("blob_mutex_schedule_slots_given_up_total", 1.0),
            ])
        );
        let ended = gauges(&recorder)["blob_mutex_schedule_job_started_timestamp_seconds"];
        assert!(ended.abs() < f64::EPSILON, "{ended}");
    }
}
