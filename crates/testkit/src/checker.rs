//! The checker of a chaos run: judges a [`History`] against the promises
//! every mode keeps, and counts the figures.
//!
//! Per resource:
//! 1. never two owners: a term stops acting (ends, is paused, or its lease
//!    is broken) before the next one starts;
//! 2. no unit of work of a term inside another term's acting interval (a
//!    broken owner's units are allowed for the break grace), and none
//!    outside every term of its worker;
//! 3. epochs strictly increase from term to term;
//! 4. every term's end reported exactly once (at most once when its process
//!    was killed by SIGKILL or fail-stopped), and no report of a term that never
//!    began;
//! 5. every write of a term that was no longer current (a term with a
//!    higher epoch had begun) refused: none accepted that was sent after a
//!    newer term began, and none accepted that a newer term's first read of
//!    the state did not see;
//! 6. after the nemesis stopped, owned again within its bound.
//!
//! And every process exits after the final SIGTERM. The record is checked
//! too: the runner's register accepts epochs in order, so no write it
//! accepted can have been sent after it answered a higher epoch (else a
//! reader fell behind and stamped lines late, and the violations around it
//! are the record's).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::history::{History, Term, Write};

/// One broken promise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub at: Duration,
    pub resource: String,
    /// Which promise: `two-owners`, `unit`, `epoch`, `report`, `write`,
    /// `liveness`, `hung`; or `stamps`: the record is out of order.
    pub rule: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>9.3}s {:<12} {:<10} {}",
            self.at.as_secs_f64(),
            self.resource,
            self.rule,
            self.detail
        )
    }
}

/// Every violation in `history`, in time order.
pub fn check(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    for resource in history.bounds.keys() {
        let terms: Vec<&Term> = history.terms_of(resource).collect();
        two_owners(history, &terms, &mut found);
        epochs(&terms, &mut found);
        if !history.may_rest.contains(resource) {
            liveness(history, resource, &terms, &mut found);
        }
    }
    units(history, &mut found);
    reports(history, &mut found);
    writes(history, &mut found);
    read_backs(history, &mut found);
    stamps(history, &mut found);
    for &worker in &history.hung {
        found.push(violation(
            history.until,
            "-",
            "hung",
            format!("worker {worker} did not exit after SIGTERM"),
        ));
    }
    found.sort_by_key(|v| v.at);
    found
}

fn violation(at: Duration, resource: &str, rule: &'static str, detail: String) -> Violation {
    Violation {
        at,
        resource: resource.to_owned(),
        rule,
        detail,
    }
}

/// Promise 1.
fn two_owners(history: &History, terms: &[&Term], found: &mut Vec<Violation>) {
    for (i, a) in terms.iter().enumerate() {
        let acted = history.acted_until(a);
        for b in terms[i + 1..].iter().filter(|b| b.start < acted) {
            found.push(violation(
                b.start,
                &a.resource,
                "two-owners",
                format!("{b:?} began while {a:?} still acted (until {acted:?})"),
            ));
        }
    }
}

/// Promise 3.
fn epochs(terms: &[&Term], found: &mut Vec<Violation>) {
    for (i, b) in terms.iter().enumerate() {
        if let Some(a) = terms[..i].iter().find(|a| a.epoch >= b.epoch) {
            found.push(violation(
                b.start,
                &b.resource,
                "epoch",
                format!(
                    "epoch {} began after epoch {}: {b:?} after {a:?}",
                    b.epoch, a.epoch
                ),
            ));
        }
    }
}

/// Promise 2.
fn units(history: &History, found: &mut Vec<Violation>) {
    for u in &history.units {
        let own = history
            .terms_of(&u.resource)
            .filter(|t| t.worker == u.worker && t.epoch == u.epoch && t.start <= u.at)
            .last();
        let Some(own) = own else {
            found.push(violation(
                u.at,
                &u.resource,
                "unit",
                format!("{u:?} outside any term of its worker"),
            ));
            continue;
        };
        // A broken owner works on until it learns of the break, at most
        // until its deadline (less than a lease after its last renewal).
        let broken = history.breaks.iter().any(|(r, from, returned)| {
            *r == u.resource
                && *returned >= own.start
                && *from <= u.at
                && u.at <= *returned + history.break_grace
        });
        if broken {
            continue;
        }
        let inside = history
            .terms_of(&u.resource)
            .find(|t| *t != own && t.start <= u.at && u.at < history.acted_until(t));
        if let Some(other) = inside {
            found.push(violation(
                u.at,
                &u.resource,
                "unit",
                format!("{u:?} of epoch {} inside the term {other:?}", own.epoch),
            ));
        }
    }
}

/// Promise 4.
fn reports(history: &History, found: &mut Vec<Violation>) {
    for t in &history.terms {
        let least = usize::from(!t.silenced);
        if !(least..=1).contains(&t.reports) {
            found.push(violation(
                t.end.unwrap_or(history.until),
                &t.resource,
                "report",
                format!("the end of {t:?} was reported {} times", t.reports),
            ));
        }
    }
    for o in &history.orphans {
        found.push(violation(
            o.at,
            &o.resource,
            "report",
            format!("a report of a term that never began: {o:?}"),
        ));
    }
}

/// The record itself: the runner's register accepts epochs in order, so a
/// write it accepted cannot have been sent after it had answered a write of
/// a higher epoch. If the record says so, a reader fell behind its pipe and
/// stamped lines late, and every judgement of that stretch is in doubt.
fn stamps(history: &History, found: &mut Vec<Violation>) {
    let mut accepted: BTreeMap<&str, Vec<&Write>> = BTreeMap::new();
    for w in history.writes.iter().filter(|w| w.register && w.accepted) {
        accepted.entry(&w.resource).or_default().push(w);
    }
    for writes in accepted.values_mut() {
        writes.sort_by_key(|w| w.at);
        // highest[i]: the highest epoch (and its worker) answered by the
        // i + 1 first answers.
        let highest: Vec<(u64, usize)> = writes
            .iter()
            .scan((0, 0), |top, w| {
                if w.epoch > top.0 {
                    *top = (w.epoch, w.worker);
                }
                Some(*top)
            })
            .collect();
        for w in writes.iter() {
            let answered = writes.partition_point(|a| a.at < w.sent);
            let Some(&(top, by)) = answered.checked_sub(1).map(|i| &highest[i]) else {
                continue;
            };
            if w.epoch < top {
                found.push(violation(
                    w.at,
                    &w.resource,
                    "stamps",
                    format!(
                        "{w:?} was accepted by the register, yet stamped as sent after it had answered epoch {top} of worker {by}: the record is out of order"
                    ),
                ));
            }
        }
    }
}

/// Promise 5, as far as the record can tell. A write lands somewhere
/// between when it was sent and when its answer was printed, and a term
/// begins (its lease acquired) before its `LEADING` line. So an accepted
/// write sent after a term of a higher epoch began landed in that term: a
/// violation. A write sent before the next term began and answered after
/// it is judged by [`read_backs`] instead.
fn writes(history: &History, found: &mut Vec<Violation>) {
    for w in history.writes.iter().filter(|w| w.accepted) {
        let newer = history
            .terms_of(&w.resource)
            .find(|t| t.epoch > w.epoch && t.start < w.sent);
        if let Some(newer) = newer {
            found.push(violation(
                w.at,
                &w.resource,
                "write",
                format!("{w:?} accepted, sent after {newer:?} began"),
            ));
        }
    }
}

/// Promise 5, by what storage showed: a term reads the state when it
/// begins, after its lease was acquired. An accepted state write of an
/// older term that the read did not see (the read found the state of a
/// term older still) landed after the read, in the reader's term (or an
/// even older write landed after it, which is as bad). Within one term a
/// late retry may overwrite a later tick, so ticks are not compared.
fn read_backs(history: &History, found: &mut Vec<Violation>) {
    for r in &history.reads {
        let seen = r.last.map_or(0, |(epoch, _)| epoch);
        let unseen = history.writes.iter().find(|w| {
            w.accepted
                && !w.register
                && w.resource == r.resource
                && seen < w.epoch
                && w.epoch < r.epoch
        });
        if let Some(w) = unseen {
            found.push(violation(
                r.at,
                &r.resource,
                "write",
                format!(
                    "the term of epoch {} read the state of epoch {seen}, so {w:?} landed after that term began",
                    r.epoch
                ),
            ));
        }
    }
}

/// Promise 6: the first instant after the nemesis stopped at which a term
/// acted as owner is within the bound.
fn liveness(history: &History, resource: &str, terms: &[&Term], found: &mut Vec<Violation>) {
    let calm = history.calm;
    let bound = history.bounds[resource];
    let owned_from = terms
        .iter()
        .filter(|t| history.acted_until(t) > calm)
        .map(|t| t.start.max(calm))
        .min();
    match owned_from {
        Some(at) if at <= calm + bound => {}
        other => found.push(violation(
            calm,
            resource,
            "liveness",
            format!(
                "not owned within {bound:?} after the nemesis stopped at {calm:?} (first owned at {other:?})"
            ),
        )),
    }
}

/// The figures of a run.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub seed: u64,
    pub faults: BTreeMap<&'static str, usize>,
    pub terms: usize,
    pub units: usize,
    pub writes_accepted: usize,
    pub writes_refused: usize,
    pub violations: usize,
    /// Per resource: the share of time it had an owner, and the longest
    /// time without one (from its first term to the end of the record).
    pub owned: BTreeMap<String, (f64, Duration)>,
    pub length: Duration,
}

/// Counts the figures of `history`, with `violations` found in it.
pub fn figures(history: &History, violations: usize) -> Figures {
    let mut faults = BTreeMap::new();
    for f in &history.faults {
        *faults.entry(f.kind).or_default() += 1;
    }
    let owned = history
        .bounds
        .keys()
        .map(|r| (r.clone(), ownership(history, r)))
        .collect();
    Figures {
        seed: history.seed,
        faults,
        terms: history.terms.len(),
        units: history.units.len(),
        writes_accepted: history.writes.iter().filter(|w| w.accepted).count(),
        writes_refused: history.writes.iter().filter(|w| !w.accepted).count(),
        violations,
        owned,
        length: history.stopped.max(history.until),
    }
}

/// The share of time from the resource's first term to the final stop
/// during which a term acted as its owner, and the longest time without one.
fn ownership(history: &History, resource: &str) -> (f64, Duration) {
    let until = if history.stopped.is_zero() {
        history.until
    } else {
        history.stopped
    };
    let mut spans: Vec<(Duration, Duration)> = history
        .terms_of(resource)
        .map(|t| (t.start, history.acted_until(t).min(until)))
        .collect();
    spans.sort();
    let Some(first) = spans.first().map(|s| s.0) else {
        return (0.0, until);
    };
    let (mut covered, mut longest) = (Duration::ZERO, Duration::ZERO);
    let mut reach = first;
    for (start, end) in spans {
        if start > reach {
            longest = longest.max(start.saturating_sub(reach));
        }
        let start = start.max(reach);
        if end > start {
            covered += end.saturating_sub(start);
            reach = end;
        }
    }
    longest = longest.max(until.saturating_sub(reach));
    let total = until.saturating_sub(first);
    let share = if total.is_zero() {
        1.0
    } else {
        covered.as_secs_f64() / total.as_secs_f64()
    };
    (share, longest)
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "chaos figures (seed {}, {:.0}s recorded)",
            self.seed,
            self.length.as_secs_f64()
        )?;
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(f, "  faults: {}", faults.join(", "))?;
        writeln!(
            f,
            "  terms {}, units of work {}, writes accepted {}, writes refused {}, violations {}",
            self.terms, self.units, self.writes_accepted, self.writes_refused, self.violations
        )?;
        for (resource, (share, longest)) in &self.owned {
            writeln!(
                f,
                "  {resource:<12} owned {:>5.1}% of the time, longest without an owner {:.1}s",
                share * 100.0,
                longest.as_secs_f64()
            )?;
        }
        Ok(())
    }
}
