//! The three promises every cell of the fault matrix checks, from the
//! record `matrix.rs` keeps:
//!
//! 1. Never two owners of one lease, judged from outside: every task run is
//!    recorded (start, and end when the last of its tasks' futures is
//!    dropped), and no two runs of one lease overlap. The only exception is
//!    a lease broken from outside: its old owner may run on until it has
//!    learned of the loss and [`LOST_GRACE`] has passed. No run starts a
//!    unit of work once it is not current (cancelled or past its deadline).
//! 2. Every end of a term reported once: each run has exactly one report
//!    with its epoch; `watch()` no longer shows a term once it ended; the
//!    metrics count the same ends, and `blob_mutex_is_leader` is back to 0.
//! 3. The next owner only after the earliest possible expiry: a run starts
//!    only once every earlier holder's lease was freed (released, handed
//!    over, broken) or had expired on a majority of the accounts, counting
//!    from the instant storage saw its last acquire or renewal.
// Shared with the tests that need it; not every item is used by each.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

use blob_mutex::store::LeaseId;
use metrics_util::debugging::DebugValue;
use tokio::time::Instant;

use super::faulty::Effect;
use super::matrix::{reports_run, same, Cell, Instance, Metrics, Mode, Report, Run, D, LOST_GRACE};

/// The three checks of every cell, once every instance has stopped.
/// `hit` are the runs the fault was meant to end, `reasons` how they may
/// end; every other run that was going on at `fault` must go on until the
/// final stop at `stopped`.
pub fn check<M: Mode>(
    cell: &Cell,
    instances: &[Instance],
    fault: Instant,
    stopped: Instant,
    hit: &[Run],
    reasons: &[&str],
) {
    always::<M>(cell, instances);
    let runs = cell.runs();
    let reports = cell.reports();
    let record = format!("runs: {runs:#?}\nreports: {reports:#?}");
    for r in &runs {
        let report = reports.iter().find(|p| reports_run(p, r));
        let Some(report) = report else { continue };
        if hit.iter().any(|h| same(h, r)) {
            assert!(
                reasons.contains(&report.reason),
                "{}: {report:?} not one of {reasons:?}",
                cell.name
            );
        } else if r.start <= fault && r.end.is_some_and(|end| end > fault && end < stopped) {
            panic!(
                "{}: the term of {} epoch {} on instance {} was not hit by the fault, yet ended before the stop: {report:?}\n{record}",
                cell.name, r.key, r.epoch, r.instance
            );
        }
    }
}

/// The three checks, whatever the fault was, once every instance has
/// stopped.
pub fn always<M: Mode>(cell: &Cell, instances: &[Instance]) {
    let runs = cell.runs();
    let reports = cell.reports();
    let record = format!("runs: {runs:#?}\nreports: {reports:#?}");
    no_two_owners(cell, &runs, &record);
    every_end_reported_once::<M>(cell, instances, &runs, &reports, &record);
    next_owner_after_expiry::<M>(cell, &runs, &record);
}

/// Check 1, and no unit of work started by a term that was not current.
fn no_two_owners(cell: &Cell, runs: &[Run], record: &str) {
    let breaks = cell.accounts.breaks.lock().unwrap().clone();
    let calls = cell.accounts.calls();
    for a in runs {
        assert_eq!(
            a.late_units, 0,
            "{}: {} unit(s) of work started by {} epoch {} on instance {} once it was not current\n{record}",
            cell.name, a.late_units, a.key, a.epoch, a.instance
        );
        for b in runs.iter().filter(|b| b.key == a.key && b.start > a.start) {
            let a_end = a.end.expect("every run has ended");
            if a_end <= b.start {
                continue;
            }
            // Broken from outside while it ran: it may run on until it
            // learned of the loss, and LOST_GRACE more.
            let broken = breaks
                .get(&a.key)
                .into_iter()
                .flatten()
                .any(|t| *t >= a.start && *t <= b.start);
            let learned = calls
                .iter()
                .filter(|c| c.lease == a.lease && matches!(c.effect, Effect::Lost))
                .map(|c| c.at)
                .min();
            let allowed = learned
                .filter(|_| broken)
                .map(|t| t + LOST_GRACE.max(cell.step));
            assert!(
                allowed.is_some_and(|allowed| a_end <= allowed),
                "{}: two owners of {}: epoch {} on instance {} until {:?}, epoch {} on instance {} from {:?} (loss learned at {:?})\n{record}",
                cell.name,
                a.key,
                a.epoch,
                a.instance,
                a_end,
                b.epoch,
                b.instance,
                b.start,
                learned
            );
        }
    }
}

/// Check 2: reports, watch and metrics agree, once everything stopped.
fn every_end_reported_once<M: Mode>(
    cell: &Cell,
    instances: &[Instance],
    runs: &[Run],
    reports: &[Report],
    record: &str,
) {
    for r in runs {
        let n = reports.iter().filter(|p| reports_run(p, r)).count();
        assert_eq!(
            n, 1,
            "{}: the term of {} epoch {} on instance {} was reported {n} times\n{record}",
            cell.name, r.key, r.epoch, r.instance
        );
    }
    for (i, p) in reports.iter().enumerate() {
        assert!(
            !reports[..i]
                .iter()
                .any(|q| q.instance == p.instance && q.key == p.key && q.epoch == p.epoch),
            "{}: reported twice: {p:?}\n{record}",
            cell.name
        );
    }
    for i in instances {
        assert!(
            i.watch_stopped(),
            "{}: watch() of instance {} does not show it stopped after its campaign ended",
            cell.name,
            i.index
        );
        assert!(
            i.owned().is_empty(),
            "{}: watch() of instance {} shows {:?} after every instance stopped",
            cell.name,
            i.index,
            i.owned()
        );
    }
    let (leading, ends) = cell.metrics.read();
    for key in M::keys() {
        assert!(
            !leading.get(&key).copied().unwrap_or(false),
            "{}: blob_mutex_is_leader of {key} is still 1 after every instance stopped",
            cell.name
        );
        let mut reported: BTreeMap<String, u64> = BTreeMap::new();
        for p in reports.iter().filter(|p| p.key == key) {
            *reported.entry(p.reason.to_owned()).or_default() += 1;
        }
        let counted = ends.get(&key).cloned().unwrap_or_default();
        assert_eq!(
            counted, reported,
            "{}: blob_mutex_term_ends_total of {key} by reason, against the reports",
            cell.name
        );
    }
}

/// Figures by lease key.
type ByLease<T> = BTreeMap<String, T>;

impl Metrics {
    /// `blob_mutex_is_leader` and `blob_mutex_term_ends_total` by reason,
    /// by lease key (the `blob` label). Reads once: the recorder resets
    /// what it reads.
    fn read(&self) -> (ByLease<bool>, ByLease<BTreeMap<String, u64>>) {
        let (mut leading, mut ends) = (BTreeMap::new(), BTreeMap::new());
        for (key, _, _, value) in self.0.snapshot().into_vec() {
            let label = |name: &str| {
                key.key()
                    .labels()
                    .find(|l| l.key() == name)
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default()
            };
            match (key.key().name(), value) {
                ("blob_mutex_is_leader", DebugValue::Gauge(v)) => {
                    // The gauge is 1 or 0.
                    leading.insert(label("blob"), v.0 > 0.5);
                }
                ("blob_mutex_term_ends_total", DebugValue::Counter(n)) if n > 0 => {
                    let by_reason: &mut BTreeMap<String, u64> =
                        ends.entry(label("blob")).or_default();
                    *by_reason.entry(label("reason")).or_default() += n;
                }
                _ => {}
            }
        }
        (leading, ends)
    }
}

/// Check 3: a run starts only once every earlier holder's lease was freed
/// or expired on a majority of the accounts.
fn next_owner_after_expiry<M: Mode>(cell: &Cell, runs: &[Run], record: &str) {
    for a in runs {
        let Some(free) = freed_at::<M>(cell, &a.key, a.lease) else {
            continue;
        };
        for b in runs
            .iter()
            .filter(|b| b.key == a.key && b.start > a.start && b.lease != a.lease)
        {
            assert!(
                b.start >= free,
                "{}: {} epoch {} on instance {} started at {:?}, before the lease of epoch {} could have expired or been freed ({free:?})\n{record}",
                cell.name,
                b.key,
                b.epoch,
                b.instance,
                b.start,
                a.epoch
            );
        }
    }
}

/// The earliest instant a majority of the accounts no longer held `lease`
/// (`None`: a majority never granted it).
fn freed_at<M: Mode>(cell: &Cell, key: &str, lease: LeaseId) -> Option<Instant> {
    let calls = cell.accounts.calls();
    let breaks = cell
        .accounts
        .breaks
        .lock()
        .unwrap()
        .get(key)
        .cloned()
        .unwrap_or_default();
    let mut free: Vec<Option<Instant>> = (0..M::ACCOUNTS)
        .map(|account| {
            let mine = calls
                .iter()
                .filter(|c| c.account == account && c.key == key && c.lease == lease);
            let granted = mine
                .clone()
                .filter(|c| matches!(c.effect, Effect::Granted))
                .map(|c| c.at);
            let (first, last) = (granted.clone().min()?, granted.max()?);
            let freed = mine
                .filter(|c| matches!(c.effect, Effect::Freed))
                .map(|c| c.at);
            let broken = breaks.iter().copied().filter(|t| *t >= first);
            Some(freed.chain(broken).fold(last + D, Instant::min))
        })
        .collect();
    free.sort();
    let majority = M::ACCOUNTS / 2 + 1;
    free[majority - 1]
}
