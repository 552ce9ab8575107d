//! The record of a cluster of lease-set workers, partition by partition:
//! who owned what when, and whether two owned one partition at once.

use std::collections::BTreeMap;
use std::time::Duration;

use super::workers::{Event, What};

/// One term of one partition on one worker, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub worker: usize,
    pub epoch: u64,
    pub start: Duration,
    /// `None` while it still owns the partition.
    pub end: Option<Duration>,
}

/// Every partition's terms, in order of their start. A term ends at its
/// `RELEASED` line, or when its worker was killed (SIGKILL) or exited.
pub fn terms(events: &[Event]) -> BTreeMap<String, Vec<Term>> {
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.at);
    let mut terms: BTreeMap<String, Vec<Term>> = BTreeMap::new();
    for e in &events {
        match &e.what {
            What::Owning { partition, epoch } => {
                terms.entry(partition.clone()).or_default().push(Term {
                    worker: e.worker,
                    epoch: *epoch,
                    start: e.at,
                    end: None,
                });
            }
            What::Released {
                partition, epoch, ..
            } => {
                if let Some(term) = terms.get_mut(partition).and_then(|ts| {
                    ts.iter_mut()
                        .find(|t| t.worker == e.worker && t.epoch == *epoch && t.end.is_none())
                }) {
                    term.end = Some(e.at);
                }
            }
            What::Killed | What::Exited { .. } => {
                for term in terms.values_mut().flatten() {
                    if term.worker == e.worker && term.end.is_none() {
                        term.end = Some(e.at);
                    }
                }
            }
            _ => {}
        }
    }
    terms
}

/// The partitions each worker owns at the end of the record.
pub fn owned_now(terms: &BTreeMap<String, Vec<Term>>, workers: usize) -> Vec<usize> {
    let mut counts = vec![0; workers];
    for term in terms.values().flatten() {
        if term.end.is_none() {
            counts[term.worker] += 1;
        }
    }
    counts
}

/// Panics if any partition was owned by two workers at once, or if its
/// epochs did not strictly increase.
pub fn assert_safe(terms: &BTreeMap<String, Vec<Term>>, until: Duration, record: &str) {
    for (partition, ts) in terms {
        for w in ts.windows(2) {
            let first_end = w[0].end.unwrap_or(until);
            assert!(
                first_end <= w[1].start,
                "partition {partition} owned twice at once: {:?} and {:?}\n{record}",
                w[0],
                w[1]
            );
            assert!(
                w[1].epoch > w[0].epoch,
                "partition {partition}: epoch {} after {}\n{record}",
                w[1].epoch,
                w[0].epoch
            );
        }
    }
}
