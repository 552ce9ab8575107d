//! A schedule's figure through the `metrics` facade (feature `metrics`):
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
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
}
