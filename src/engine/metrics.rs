//! Leadership figures through the `metrics` facade (feature `metrics`), so
//! that any exporter (Prometheus, `StatsD`, `OpenTelemetry`) shows them. They
//! observe the election and never steer it.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `blob_mutex_is_leader` | gauge | `container`, `blob` | 1 while this instance leads, else 0 |
//! | `blob_mutex_terms_total` | counter | `container`, `blob` | terms started (the epoch was stamped) |
//! | `blob_mutex_term_ends_total` | counter | `container`, `blob`, `reason` | terms ended, by [`StopReason`](crate::term::StopReason) word: `lost`, `deadline`, `stalled`, `shutdown`, `finished`, `failed`, `panicked`, `handover`, `dropped` |
//! | `blob_mutex_acquire_attempts_total` | counter | `container`, `blob`, `outcome` | acquire attempts: `acquired`, `held`, `error` |
//! | `blob_mutex_renewals_total` | counter | `container`, `blob` | successful renewals |
//! | `blob_mutex_renew_failures_total` | counter | `container`, `blob` | failed renewals (transient or not) |
//! | `blob_mutex_renew_seconds` | histogram | `container`, `blob` | time from sending a successful renewal to its answer |
//! | `blob_mutex_task_failures_total` | counter | `container`, `blob` | terms whose leader task or a sub-task failed or panicked |
//! | `blob_mutex_task_aborts_total` | counter | `container`, `blob` | terms whose tasks had to be aborted |
//! | `blob_mutex_tasks_stuck_total` | counter | `container`, `blob` | terms with a task that could be neither stopped nor aborted |
//! | `blob_mutex_guards_unreleased_total` | counter | `container`, `blob` | guards' terms that had to end and were not released before the lease could expire (left to expire) |
//! | `blob_mutex_release_failures_total` | counter | `container`, `blob` | releases that failed or timed out at the end of a term (the lease is left to expire: the next holder waits for its expiry) |
//! | `blob_mutex_partitions_shed_total` | counter | `container`, `blob` (of the partition) | partition terms a lease set gave up at their deadline while it kept its membership: renewals that could not be sent in time (slow or unreachable storage, more renewals than the client's slots carry); the set claims them again as it rebalances |
//! | `blob_mutex_collect_refused_total` | counter | `code` | deletions of stale member and candidate blobs that storage refused with a 409 that stays until someone acts, by code: `SnapshotsPresent`, `BlobImmutableDueToPolicy`, `BlobImmutableDueToLegalHold`, `other` (see [`Collection`](crate::store::Collection)) |
//!
//! `container` and `blob` come from [`LeaseStore::name`](crate::store::LeaseStore::name)
//! (`container/blob`; a name without `/` is all `blob`). No label ever
//! carries a secret or a lease id.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

#[cfg(feature = "metrics")]
use crate::ending::StopReason;
use crate::ending::{TaskStop, TermReport};
use crate::engine::vitals::Vitals;

/// The figures of one lease (a no-op without the `metrics` feature), and
/// the [`Vitals`] of the mutex or set it belongs to, which every step also
/// goes to.
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    counters: Counters,
    lease: Arc<str>,
    vitals: Arc<Vitals>,
}

impl Metrics {
    /// The figures of `lease`, whose steps go to `vitals` too.
    pub(crate) fn new(lease: &str, vitals: Arc<Vitals>) -> Self {
        Metrics {
            counters: Counters::new(lease),
            lease: lease.into(),
            vitals,
        }
    }

    /// Where the steps go besides the figures.
    pub(crate) fn vitals(&self) -> &Arc<Vitals> {
        &self.vitals
    }

    pub(crate) fn attempt(&self, outcome: Attempt) {
        self.vitals.stepped();
        self.counters.attempt(outcome);
    }

    /// Term `epoch` started; `deadline` moves with each renewal.
    pub(crate) fn term_started(&self, epoch: u64, deadline: watch::Receiver<Instant>) {
        self.vitals
            .term_started(self.lease.clone(), epoch, deadline);
        self.counters.term_started(epoch);
    }

    /// Term `epoch` has been asked to stop.
    pub(crate) fn term_stopping(&self, epoch: u64) {
        self.vitals.term_stopping(&self.lease, epoch);
    }

    /// The lease these figures are of, as the vitals name it.
    pub(crate) fn lease(&self) -> &Arc<str> {
        &self.lease
    }

    pub(crate) fn term_ended(&self, report: &TermReport) {
        let stuck = report.tasks == TaskStop::Stuck;
        self.vitals.term_ended(&self.lease, report.epoch, stuck);
        self.counters.term_ended(report);
    }

    /// A release failed or timed out: the lease is left to expire.
    pub(crate) fn release_failed(&self) {
        self.counters.release_failed();
    }

    /// A lease set gave this partition's term up at its deadline.
    pub(crate) fn partition_shed(&self) {
        self.counters.partition_shed();
    }

    pub(crate) fn renewed(&self, took: Duration) {
        self.vitals.stepped();
        self.counters.renewed(took);
    }

    pub(crate) fn renew_failed(&self) {
        self.vitals.stepped();
        self.counters.renew_failed();
    }
}

/// The counters, gauges and histograms of one lease.
#[derive(Clone, Debug)]
struct Counters {
    #[cfg(feature = "metrics")]
    labels: [(&'static str, String); 2],
}

/// The counters of a lease with its two labels alone, exported at 0 from
/// the start.
#[cfg(feature = "metrics")]
const ZERO_FROM_START: &[&str] = &[
    "blob_mutex_terms_total",
    "blob_mutex_task_failures_total",
    "blob_mutex_task_aborts_total",
    "blob_mutex_tasks_stuck_total",
    "blob_mutex_guards_unreleased_total",
    "blob_mutex_renewals_total",
    "blob_mutex_renew_failures_total",
    "blob_mutex_release_failures_total",
];

/// Describes every metric to the recorder (`# HELP` and `# TYPE` in the
/// Prometheus text format), once per recorder that asks.
#[cfg(feature = "metrics")]
fn describe() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_gauge!(
        "blob_mutex_is_leader",
        "1 while this instance leads the lease, else 0"
    );
    describe_gauge!(
        "blob_mutex_epoch",
        "the fencing token (epoch) of this instance's last term of the lease"
    );
    describe_counter!(
        "blob_mutex_acquire_attempts_total",
        "acquire attempts, by outcome (acquired, held, error)"
    );
    describe_counter!("blob_mutex_terms_total", "terms led (leaderships won)");
    describe_counter!("blob_mutex_term_ends_total", "ends of terms, by reason");
    describe_counter!(
        "blob_mutex_task_failures_total",
        "terms whose leader task or a sub-task failed or panicked"
    );
    describe_counter!(
        "blob_mutex_task_aborts_total",
        "terms whose tasks were aborted after their grace"
    );
    describe_counter!(
        "blob_mutex_tasks_stuck_total",
        "terms whose tasks could be neither stopped nor aborted"
    );
    describe_counter!(
        "blob_mutex_guards_unreleased_total",
        "guards not released before their lease could expire"
    );
    describe_counter!("blob_mutex_renewals_total", "successful renewals");
    describe_counter!("blob_mutex_renew_failures_total", "failed renewal attempts");
    describe_counter!(
        "blob_mutex_release_failures_total",
        "releases that failed or timed out; the lease is left to expire"
    );
    describe_counter!(
        "blob_mutex_partitions_shed_total",
        "partition terms a lease set gave up at their deadline while it kept its membership"
    );
    describe_histogram!(
        "blob_mutex_renew_seconds",
        Unit::Seconds,
        "how long each successful renewal took"
    );
}

/// The outcome of an acquire attempt, as a label.
#[derive(Clone, Copy)]
pub(crate) enum Attempt {
    Acquired,
    Held,
    Error,
}

#[cfg(feature = "metrics")]
impl Counters {
    fn new(lease: &str) -> Self {
        let (container, blob) = lease.split_once('/').unwrap_or(("", lease));
        let metrics = Counters {
            labels: [
                ("container", container.to_owned()),
                ("blob", blob.to_owned()),
            ],
        };
        describe();
        ::metrics::gauge!("blob_mutex_is_leader", &metrics.labels).set(0.0);
        // Every counter from the start, at 0: an alert on `increase()`
        // needs the series before the first event.
        for outcome in ["acquired", "held", "error"] {
            let labels = metrics.with("outcome", outcome);
            ::metrics::counter!("blob_mutex_acquire_attempts_total", &labels).increment(0);
        }
        for reason in StopReason::ALL {
            let labels = metrics.with("reason", reason.as_str());
            ::metrics::counter!("blob_mutex_term_ends_total", &labels).increment(0);
        }
        for name in ZERO_FROM_START {
            ::metrics::counter!(*name, &metrics.labels).increment(0);
        }
        metrics
    }

    fn attempt(&self, outcome: Attempt) {
        let outcome = match outcome {
            Attempt::Acquired => "acquired",
            Attempt::Held => "held",
            Attempt::Error => "error",
        };
        let labels = self.with("outcome", outcome);
        ::metrics::counter!("blob_mutex_acquire_attempts_total", &labels).increment(1);
    }

    fn term_started(&self, epoch: u64) {
        ::metrics::gauge!("blob_mutex_is_leader", &self.labels).set(1.0);
        // Epochs are below 2^53 (microseconds of storage's clock): exact.
        #[allow(clippy::cast_precision_loss)]
        ::metrics::gauge!("blob_mutex_epoch", &self.labels).set(epoch as f64);
        ::metrics::counter!("blob_mutex_terms_total", &self.labels).increment(1);
    }

    fn term_ended(&self, report: &TermReport) {
        ::metrics::gauge!("blob_mutex_is_leader", &self.labels).set(0.0);
        let labels = self.with("reason", report.reason.as_str());
        ::metrics::counter!("blob_mutex_term_ends_total", &labels).increment(1);
        if report.failure.is_some() {
            ::metrics::counter!("blob_mutex_task_failures_total", &self.labels).increment(1);
        }
        match report.tasks {
            TaskStop::Aborted => {
                ::metrics::counter!("blob_mutex_task_aborts_total", &self.labels).increment(1);
            }
            TaskStop::Stuck => {
                ::metrics::counter!("blob_mutex_tasks_stuck_total", &self.labels).increment(1);
            }
            TaskStop::Unreleased => {
                ::metrics::counter!("blob_mutex_guards_unreleased_total", &self.labels)
                    .increment(1);
            }
            TaskStop::Returned => {}
        }
    }

    fn renewed(&self, took: Duration) {
        ::metrics::counter!("blob_mutex_renewals_total", &self.labels).increment(1);
        ::metrics::histogram!("blob_mutex_renew_seconds", &self.labels).record(took.as_secs_f64());
    }

    fn renew_failed(&self) {
        ::metrics::counter!("blob_mutex_renew_failures_total", &self.labels).increment(1);
    }

    fn release_failed(&self) {
        ::metrics::counter!("blob_mutex_release_failures_total", &self.labels).increment(1);
    }

    fn partition_shed(&self) {
        ::metrics::counter!("blob_mutex_partitions_shed_total", &self.labels).increment(1);
    }

    fn with(&self, key: &'static str, value: &'static str) -> [(&'static str, String); 3] {
        let [container, blob] = self.labels.clone();
        [container, blob, (key, value.to_owned())]
    }
}

// The same methods as with the feature, doing nothing, so that the engine
// calls them unconditionally.
#[cfg(not(feature = "metrics"))]
#[allow(clippy::unused_self)]
impl Counters {
    fn new(_lease: &str) -> Self {
        Counters {}
    }

    fn attempt(&self, _outcome: Attempt) {}

    fn term_started(&self, _epoch: u64) {}

    fn term_ended(&self, _report: &TermReport) {}

    fn renewed(&self, _took: Duration) {}

    fn renew_failed(&self) {}

    fn release_failed(&self) {}

    fn partition_shed(&self) {}
}
