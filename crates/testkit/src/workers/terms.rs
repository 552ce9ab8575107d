//! The record of a [`Cluster`](super::Cluster) as leadership intervals:
//! who led when, overlap, gaps, epochs and handovers ([`History`]).

use std::time::Duration;

use super::{Event, What};

/// How a leadership interval ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    Stopped(String),
    Aborted,
    Killed,
    Exited,
}

/// One term of one worker, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    pub worker: usize,
    pub epoch: u64,
    pub start: Duration,
    /// `None` while it still leads.
    pub end: Option<Duration>,
    pub ended: Option<Ended>,
}

/// The analysis of a record up to an instant.
#[derive(Clone, Debug)]
pub struct History {
    /// Leadership intervals in order of their start.
    pub intervals: Vec<Interval>,
    /// The instant the analysis runs to (open intervals end here).
    pub until: Duration,
    /// Total time two or more workers were leading at once.
    pub overlap: Duration,
    /// Periods with no leader between the first `LEADING` and the last one,
    /// as (from, to).
    pub gaps: Vec<(Duration, Duration)>,
    /// A period with no leader that has not ended by `until`, from its start.
    pub open_gap: Option<Duration>,
    /// Pairs of consecutive terms (by start) whose epoch did not increase.
    pub epoch_violations: Vec<(Interval, Interval)>,
}

impl History {
    /// Analyses `events` up to `until`.
    pub fn new(mut events: Vec<Event>, until: Duration) -> History {
        events.sort_by_key(|e| e.at);
        let mut intervals: Vec<Interval> = Vec::new();
        let mut open: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for e in events {
            let ended = match e.what {
                What::Leading { epoch } => {
                    if let Some(i) = open.remove(&e.worker) {
                        // A second LEADING without STOPPED: the first term
                        // ended at the latest here.
                        intervals[i].end = Some(e.at);
                    }
                    open.insert(e.worker, intervals.len());
                    intervals.push(Interval {
                        worker: e.worker,
                        epoch,
                        start: e.at,
                        end: None,
                        ended: None,
                    });
                    continue;
                }
                What::Stopped { reason, .. } => Ended::Stopped(reason),
                What::Aborted => Ended::Aborted,
                What::Killed => Ended::Killed,
                What::Exited { .. } => Ended::Exited,
                What::ExitedLine
                | What::Terminated
                | What::Log(_)
                | What::Stuck { .. }
                | What::Work { .. }
                | What::Owning { .. }
                | What::Released { .. }
                | What::ReleasedStuck { .. }
                | What::StateWritten { .. }
                | What::StateRead { .. }
                | What::StateRefused { .. }
                | What::Fenced { .. } => continue,
            };
            if let Some(i) = open.remove(&e.worker) {
                intervals[i].end = Some(e.at);
                intervals[i].ended = Some(ended);
            }
        }

        // Sweep the interval boundaries: overlap where two or more lead,
        // gaps where none does.
        let mut points: Vec<(Duration, i32)> = Vec::new();
        for i in &intervals {
            points.push((i.start, 1));
            points.push((i.end.unwrap_or(until).max(i.start), -1));
        }
        // Ends before starts at the same instant: touching is no overlap.
        points.sort_by_key(|&(at, delta)| (at, delta));
        let mut overlap = Duration::ZERO;
        let mut gaps = Vec::new();
        let mut open_gap = None;
        let mut leading = 0;
        let mut since = Duration::ZERO;
        let mut gap_from: Option<Duration> = None;
        for (at, delta) in points {
            if leading >= 2 {
                overlap += at.saturating_sub(since);
            }
            leading += delta;
            since = at;
            if leading == 0 {
                gap_from = Some(at);
            } else if let Some(from) = gap_from.take() {
                if at > from {
                    gaps.push((from, at));
                }
            }
        }
        if let Some(from) = gap_from {
            if until > from {
                open_gap = Some(from);
            }
        }

        let epoch_violations = intervals
            .windows(2)
            .filter(|w| w[1].epoch <= w[0].epoch)
            .map(|w| (w[0].clone(), w[1].clone()))
            .collect();
        History {
            intervals,
            until,
            overlap,
            gaps,
            open_gap,
            epoch_violations,
        }
    }

    /// Whether every term's epoch is larger than the one before it.
    pub fn epochs_increase(&self) -> bool {
        self.epoch_violations.is_empty()
    }

    /// The number of changes from one term to the next.
    pub fn transitions(&self) -> usize {
        self.intervals.len().saturating_sub(1)
    }

    /// The longest closed gap.
    pub fn max_gap(&self) -> Duration {
        self.gaps
            .iter()
            .map(|(from, to)| to.saturating_sub(*from))
            .max()
            .unwrap_or_default()
    }

    /// The median of the closed gaps (each one a handover time).
    pub fn median_gap(&self) -> Duration {
        let mut gaps: Vec<Duration> = self
            .gaps
            .iter()
            .map(|(from, to)| to.saturating_sub(*from))
            .collect();
        gaps.sort();
        gaps.get(gaps.len() / 2).copied().unwrap_or_default()
    }

    /// Asserts the safety properties: no overlap, epochs increase.
    pub fn assert_safe(&self, record: &str) {
        assert_eq!(
            self.overlap,
            Duration::ZERO,
            "two leaders overlapped for {:?}\n{self:#?}\n{record}",
            self.overlap
        );
        assert!(
            self.epochs_increase(),
            "epochs did not increase: {:?}\n{record}",
            self.epoch_violations
        );
    }

    /// One line of figures.
    pub fn summary(&self) -> String {
        format!(
            "terms={} transitions={} overlap={:?} gaps={} max_gap={:.3}s median_gap={:.3}s epochs_increase={}",
            self.intervals.len(),
            self.transitions(),
            self.overlap,
            self.gaps.len(),
            self.max_gap().as_secs_f64(),
            self.median_gap().as_secs_f64(),
            self.epochs_increase()
        )
    }
}
