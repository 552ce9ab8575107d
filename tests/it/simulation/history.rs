//! A run's record as the test kit's history, judged by its checker: every
//! run of a leader task (or a job, or a holder's steps) is a term of its
//! lease, ended when its last task stopped, with the reports of its end;
//! each lease must be owned again within the shape's bound after the
//! last fault.

use std::time::Duration;

use blob_mutex_testkit::checker;
use blob_mutex_testkit::history::{History, Term};

use super::{Judged, Simulated};
use crate::support::matrix::reports_run;

/// The history of a finished run.
pub(super) fn of<M: Simulated>(judged: &Judged<'_>) -> History {
    let since = |at: tokio::time::Instant| at.saturating_duration_since(judged.t0);
    let reports = judged.cell.reports();
    let mut terms: Vec<Term> = judged
        .cell
        .runs()
        .iter()
        .map(|r| Term {
            resource: r.key.clone(),
            worker: r.instance,
            epoch: r.epoch,
            start: since(r.start),
            end: r.end.map(since),
            reports: reports.iter().filter(|p| reports_run(p, r)).count(),
            silenced: false,
        })
        .collect();
    terms.sort_by_key(|t| t.start);
    let stopped = since(judged.stopped);
    History {
        terms,
        bounds: M::keys().into_iter().map(|k| (k, M::BOUND)).collect(),
        may_rest: if M::MAY_REST {
            M::keys().into_iter().collect()
        } else {
            std::collections::BTreeSet::new()
        },
        calm: since(judged.calm),
        stopped,
        // Ownership is judged up to the stop; the terms it ended end after.
        until: stopped,
        break_grace: Duration::ZERO,
        wake_grace: Duration::ZERO,
        ..History::default()
    }
}

/// Panics with every violation the checker finds in the run.
pub(super) fn check<M: Simulated>(judged: &Judged<'_>) {
    let mut history = of::<M>(judged);
    M::add_to(&mut history, judged);
    let violations = checker::check(&history);
    assert!(
        violations.is_empty(),
        "the history checker found {} violations:\n{}\nterms: {:#?}",
        violations.len(),
        violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        history.terms
    );
}
