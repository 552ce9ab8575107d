//! What the engine learns as it goes and keeps for whoever judges its
//! health: when it last took a counted step, what storage last answered its
//! acquires and renewals, the deadline of every term still running, and a
//! term whose tasks could be neither stopped nor aborted. The engine only
//! writes here; it never reads it back, and never learns who reads it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Chain, Error};

/// One mutex's or one lease set's vitals, shared by every engine that runs
/// for it (a set's membership and each partition term).
#[derive(Debug, Default)]
pub(crate) struct Vitals(Mutex<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// How many campaign loops run now.
    campaigns: usize,
    /// The last counted step (acquire attempt, renewal or failed renewal,
    /// term start or end), or the start of the running campaign when later.
    stepped: Option<Instant>,
    /// When storage last answered an acquire or a renewal.
    answered: Option<Instant>,
    /// When the first request that failed since that answer was sent.
    failing_since: Option<Instant>,
    /// Why the last request failed, while requests fail.
    failure: Option<String>,
    /// The terms that have started and not yet reported their end.
    terms: Vec<RunningTerm>,
    /// A term whose tasks could be neither stopped nor aborted: its lease
    /// name and epoch. Kept for good: such a task may run for ever.
    stuck: Option<(Arc<str>, u64)>,
    /// A guard that is still held although its term has ended, until it is
    /// released or dropped.
    outlived: Option<Outlived>,
}

#[derive(Debug)]
struct RunningTerm {
    lease: Arc<str>,
    epoch: u64,
    deadline: watch::Receiver<Instant>,
    /// Whether the term has been asked to stop.
    stopping: bool,
}

/// A guard held after its term ended: the holder's code may run without
/// the lease, and the mutex cannot campaign again until it is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outlived {
    pub(crate) lease: Arc<str>,
    pub(crate) epoch: u64,
    /// When the term reported its end.
    pub(crate) ended: Instant,
    /// Whether the term ended because the guard was not released before the
    /// lease could expire ([`TaskStop::Unreleased`](crate::term::TaskStop::Unreleased)).
    pub(crate) unreleased: bool,
}

/// The vitals at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Whether a campaign loop runs.
    pub(crate) campaigning: bool,
    /// The last counted step of the running campaign.
    pub(crate) stepped: Option<Instant>,
    pub(crate) answered: Option<Instant>,
    pub(crate) failing_since: Option<Instant>,
    pub(crate) failure: Option<String>,
    /// Every running term's lease, epoch and current deadline.
    pub(crate) deadlines: Vec<(Arc<str>, u64, Instant)>,
    /// The epochs of the running terms that have been asked to stop.
    pub(crate) stopping: Vec<u64>,
    pub(crate) stuck: Option<(Arc<str>, u64)>,
    pub(crate) outlived: Option<Outlived>,
}

/// Counts a campaign loop as running for as long as it lives.
pub(crate) struct Campaigning(Arc<Vitals>);

impl Drop for Campaigning {
    fn drop(&mut self) {
        let mut inner = self.0.lock();
        inner.campaigns = inner.campaigns.saturating_sub(1);
    }
}

impl Vitals {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A campaign loop starts; it counts as running until the value
    /// returned is dropped.
    pub(crate) fn campaign(self: &Arc<Self>) -> Campaigning {
        let mut inner = self.lock();
        inner.campaigns += 1;
        inner.stepped = Some(Instant::now());
        Campaigning(self.clone())
    }

    /// A counted step of the election.
    pub(crate) fn stepped(&self) {
        self.lock().stepped = Some(Instant::now());
    }

    /// Storage's answer to a request sent at `sent`: `None` when it
    /// succeeded. An error that is not transient (a lease held or lost, a
    /// refusal) is an answer too; a transient one (no answer in time, a
    /// transport error, 408, 429 or 5xx) is not.
    pub(crate) fn heard(&self, sent: Instant, error: Option<&Error>) {
        let mut inner = self.lock();
        match error {
            Some(e) if e.is_transient() => {
                inner.failing_since.get_or_insert(sent);
                inner.failure = Some(Chain(e).to_string());
            }
            _ => {
                inner.answered = Some(Instant::now());
                inner.failing_since = None;
                inner.failure = None;
            }
        }
    }

    /// Term `epoch` of `lease` has started; its deadline moves with each
    /// renewal.
    pub(crate) fn term_started(
        &self,
        lease: Arc<str>,
        epoch: u64,
        deadline: watch::Receiver<Instant>,
    ) {
        let mut inner = self.lock();
        inner.stepped = Some(Instant::now());
        inner.terms.push(RunningTerm {
            lease,
            epoch,
            deadline,
            stopping: false,
        });
    }

    /// Term `epoch` of `lease` has been asked to stop: it leads no more,
    /// although its end is not reported yet.
    pub(crate) fn term_stopping(&self, lease: &str, epoch: u64) {
        let mut inner = self.lock();
        for term in &mut inner.terms {
            if term.epoch == epoch && &*term.lease == lease {
                term.stopping = true;
            }
        }
    }

    /// The term of a guard has ended: recorded as outlived when `held()`
    /// says its guard is still held, asked under the lock that
    /// [`guard_gone`](Self::guard_gone) takes, so that a guard released
    /// meanwhile is never recorded after its release.
    pub(crate) fn guard_outlives(&self, outlived: Outlived, held: impl FnOnce() -> bool) {
        let mut inner = self.lock();
        if held() {
            inner.outlived = Some(outlived);
        }
    }

    /// The guard of term `epoch` is released or dropped.
    pub(crate) fn guard_gone(&self, epoch: u64) {
        let mut inner = self.lock();
        if inner.outlived.as_ref().is_some_and(|o| o.epoch == epoch) {
            inner.outlived = None;
        }
    }

    /// Term `epoch` of `lease` has reported its end; `stuck` when its tasks
    /// could be neither stopped nor aborted.
    pub(crate) fn term_ended(&self, lease: &str, epoch: u64, stuck: bool) {
        let mut inner = self.lock();
        inner.stepped = Some(Instant::now());
        inner
            .terms
            .retain(|t| !(t.epoch == epoch && &*t.lease == lease));
        if stuck {
            inner.stuck = Some((lease.into(), epoch));
        }
    }

    /// The vitals now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let inner = self.lock();
        Snapshot {
            campaigning: inner.campaigns > 0,
            stepped: inner.stepped,
            answered: inner.answered,
            failing_since: inner.failing_since,
            failure: inner.failure.clone(),
            deadlines: inner
                .terms
                .iter()
                .map(|t| (t.lease.clone(), t.epoch, *t.deadline.borrow()))
                .collect(),
            stopping: inner
                .terms
                .iter()
                .filter(|t| t.stopping)
                .map(|t| t.epoch)
                .collect(),
            stuck: inner.stuck.clone(),
            outlived: inner.outlived.clone(),
        }
    }
}
