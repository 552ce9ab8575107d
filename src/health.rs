//! Liveness and readiness of a mutex, a lease set or a schedule, for an
//! orchestrator's probes: [`BlobDistributedMutex::health`](crate::BlobDistributedMutex::health),
//! [`BlobLeaseSet::health`](crate::BlobLeaseSet::health) and (feature
//! `schedule`) `BlobSchedule::health` give a
//! [`Health`], whose [`live`](Health::live) and [`ready`](Health::ready)
//! say pass or fail with a reason to print. No HTTP here: serve them with
//! the server you have (the `health` example uses hyper; the command line
//! serves them as `/livez` and `/readyz`). Why each rule is what it is:
//! the guide's [operations chapter](crate::guide::operations#probes).
//!
//! A [`Health`] reads what the engine already learns as it campaigns and
//! leads (every counted step, storage's answers to its acquires and
//! renewals, each term's deadline): asking it sends no request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::leadership::Leadership;
use crate::engine::vitals::{Snapshot, Vitals};
use crate::engine::ACQUIRE_BACKOFF_MAX;
#[cfg(feature = "schedule")]
use crate::fleet::Phase;
use crate::lease_set::BlobLeaseSet;
use crate::mutex::BlobDistributedMutex;
use crate::options::MutexOptions;
use crate::store::{LeaseSetStore, LeaseStore};

/// How long storage may fail every acquire and renewal, counted from the
/// sending of the first that failed, before [`Health::ready`] fails: 10 s.
/// One failed request is not an outage (the engine tries again within
/// 0.2 to 2 s while it leads, an acquire retry while it follows); ten
/// seconds of nothing but failures is one.
pub const UNREACHABLE_AFTER: Duration = Duration::from_secs(10);

/// The least [`Health::quiet_limit`].
const QUIET_LIMIT_MIN: Duration = Duration::from_secs(60);

/// Whether a mutex or a lease set is live and ready, asked at any time and
/// answered from what its campaign has learned (see the [module](self)).
/// Cheap to clone; it follows its mutex or set for as long as it lives.
#[derive(Debug, Clone)]
pub struct Health {
    vitals: Arc<Vitals>,
    role: Role,
    quiet_limit: Duration,
    /// How long a guard may outlive its term before liveness fails: the
    /// stop grace.
    guard_grace: Duration,
}

/// What says the instance's part in the election.
#[derive(Debug, Clone)]
enum Role {
    /// A mutex's state.
    Mutex(watch::Receiver<Leadership>),
    /// The partitions a lease set owns, with the epoch of each term.
    Set(watch::Receiver<BTreeMap<String, u64>>),
    /// A schedule's phase, and the state of the mutex that runs its slots.
    #[cfg(feature = "schedule")]
    Schedule(watch::Receiver<Phase>, watch::Receiver<Leadership>),
}

/// A probe's answer: it passes or fails, and says why in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Verdict {
    pass: bool,
    reason: String,
}

impl Verdict {
    fn pass(reason: impl Into<String>) -> Self {
        Verdict {
            pass: true,
            reason: reason.into(),
        }
    }

    fn fail(reason: impl Into<String>) -> Self {
        Verdict {
            pass: false,
            reason: reason.into(),
        }
    }

    /// Whether the probe passes (HTTP 200), or fails (HTTP 503).
    #[must_use]
    pub fn passes(&self) -> bool {
        self.pass
    }

    /// One line for the probe's answer: `ok`, `ready: follower`, or why it
    /// fails.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl Health {
    /// The health of a mutex whose state is `state`.
    pub(crate) fn of_mutex(
        vitals: Arc<Vitals>,
        state: watch::Receiver<Leadership>,
        options: &MutexOptions,
    ) -> Self {
        Health {
            vitals,
            role: Role::Mutex(state),
            quiet_limit: quiet_limit(options),
            guard_grace: options.stop_grace,
        }
    }

    /// The health of a lease set that owns `owned`, whose slowest engine
    /// runs with `options`.
    pub(crate) fn of_set(
        vitals: Arc<Vitals>,
        owned: watch::Receiver<BTreeMap<String, u64>>,
        options: &MutexOptions,
    ) -> Self {
        Health {
            vitals,
            role: Role::Set(owned),
            quiet_limit: quiet_limit(options),
            guard_grace: options.stop_grace,
        }
    }

    /// Liveness: fails only where a restart of the process helps, passes
    /// (`ok`) otherwise. It fails when
    ///
    /// - a term's tasks could be neither stopped nor aborted
    ///   ([`TaskStop::Stuck`](crate::term::TaskStop::Stuck)): such a task may run
    ///   for ever, and the mutex or set leads no more in this process. It
    ///   stays failed;
    /// - a term leads past its deadline and has not reported its end: a
    ///   leader that cannot renew stops its tasks before the deadline and
    ///   stays live, so one past it is frozen or its stop is wedged;
    /// - a running campaign has taken no counted step (acquire attempt,
    ///   renewal, failed renewal, term start or end) for
    ///   [`quiet_limit`](Self::quiet_limit): its loop is wedged;
    /// - a [`MutexGuard`](crate::MutexGuard) is still held after its term
    ///   ended: at once when the term ended because the guard was not
    ///   released before the lease could expire
    ///   ([`TaskStop::Unreleased`](crate::term::TaskStop::Unreleased)),
    ///   otherwise once the term has been over for
    ///   [`stop_grace`](MutexOptions::stop_grace). Its holder's code may
    ///   run without the lease, and the mutex cannot lead again until the
    ///   guard is gone: a restart ends both.
    ///
    /// It never fails because storage is down, and never on a follower for
    /// that reason: every replica would fail at once, all would be
    /// restarted together, and the orchestrator's back-off would delay the
    /// next election after storage came back. client-go's `HealthzAdaptor`
    /// likewise fails only a leader whose renewals are overdue.
    pub fn live(&self) -> Verdict {
        match self.liveness(&self.vitals.snapshot(), Instant::now()) {
            Some(reason) => Verdict::fail(reason),
            None => Verdict::pass("ok"),
        }
    }

    /// Readiness: passes while the instance takes part in the election and
    /// storage answers it, with its part: `ready: leader of term N` or
    /// `ready: follower` for a mutex, `ready: owner of N partitions` or
    /// `ready: member, owning no partition` for a lease set. It fails when
    /// [`live`](Self::live) fails; before storage has first answered an
    /// acquire; once every acquire and renewal has failed for
    /// [`UNREACHABLE_AFTER`]; while no campaign runs (before it starts,
    /// and after it returned); and while a guard outlives its term. A
    /// mutex whose term has been asked to stop (its
    /// [`is_current`](crate::LeaderContext::is_current) says `false`) and
    /// has not ended yet is `ready: ending term N`, not the leader.
    ///
    /// Storage's answers are those to the requests the campaign sends
    /// anyway, no probe of its own: a follower tries an acquire every
    /// `acquire_retry`, a leader renews
    /// every renew interval and retries a failed renewal within 2 s, so
    /// while the campaign runs storage's last word is never older than one
    /// of those; and they are the requests that matter, with the
    /// campaign's credential and timeouts. A lease held by another or lost
    /// is an answer; a timeout, a transport error, 408, 429 and 5xx are not.
    pub fn ready(&self) -> Verdict {
        self.readiness(false)
    }

    /// As [`ready`](Self::ready), and fails on a mutex that does not lead
    /// (`not the leader`) or a set that owns no partition: for routing to
    /// the leader only.
    pub fn ready_to_lead(&self) -> Verdict {
        self.readiness(true)
    }

    /// How long a running campaign may go without a counted step before
    /// [`live`](Self::live) calls it wedged: the lease duration, the stop
    /// grace, three request timeouts and twice the longest wait between
    /// campaigns (the acquire retry, the failure back-off, or the 5 s
    /// back-off after a failed acquire; twice, for the jitter), and at
    /// least a minute. That is more than the longest healthy stretch
    /// between two counted steps, which is a term's end: the last renewal
    /// attempt, the stop, a release, a pause and an acquire attempt. 60 s
    /// with the defaults.
    #[must_use]
    pub fn quiet_limit(&self) -> Duration {
        self.quiet_limit
    }

    fn readiness(&self, leader_only: bool) -> Verdict {
        let vitals = self.vitals.snapshot();
        let now = Instant::now();
        let unlive = self.liveness(&vitals, now);
        let part = match &self.role {
            Role::Mutex(state) => mutex_part(&state.borrow(), &vitals, leader_only),
            Role::Set(owned) => set_part(vitals.campaigning, owned.borrow().len(), leader_only),
            #[cfg(feature = "schedule")]
            Role::Schedule(phase, state) => schedule::part(
                phase.borrow().clone(),
                &state.borrow(),
                &vitals,
                leader_only,
            ),
        };
        match readiness(unlive, &vitals, now, part) {
            Ok(reason) => Verdict::pass(reason),
            Err(reason) => Verdict::fail(reason),
        }
    }
}

/// The longest a campaign may go without a counted step: see
/// [`Health::quiet_limit`].
pub(crate) fn quiet_limit(options: &MutexOptions) -> Duration {
    let longest_wait = options
        .acquire_retry
        .max(options.failure_backoff)
        .max(ACQUIRE_BACKOFF_MAX);
    let stretch = options.lease_duration
        + options.stop_grace
        + options.request_timeout.saturating_mul(3)
        + longest_wait.saturating_mul(2);
    stretch.max(QUIET_LIMIT_MIN)
}

impl Health {
    /// Why the instance is not live at `now`, if it is not.
    fn liveness(&self, vitals: &Snapshot, now: Instant) -> Option<String> {
        if let Some(outlived) = &vitals.outlived {
            let over = now.saturating_duration_since(outlived.ended);
            if outlived.unreleased || over > self.guard_grace {
                return Some(format!(
                    "the guard of term {} of {} is still held {:.1}s after its term ended{}: its \
                     holder may act without the lease, and the mutex cannot lead until it is \
                     released",
                    outlived.epoch,
                    outlived.lease,
                    over.as_secs_f64(),
                    if outlived.unreleased {
                        " unreleased"
                    } else {
                        ""
                    },
                ));
            }
        }
        liveness(vitals, now, self.quiet_limit)
    }
}

/// Why the instance is not live at `now`, if it is not, from its campaigns
/// and terms.
fn liveness(vitals: &Snapshot, now: Instant, quiet_limit: Duration) -> Option<String> {
    if let Some((lease, epoch)) = &vitals.stuck {
        return Some(format!(
            "the task of term {epoch} of {lease} could be neither stopped nor aborted"
        ));
    }
    let late = vitals
        .deadlines
        .iter()
        .filter(|(_, _, deadline)| now > *deadline)
        .max_by_key(|(_, _, deadline)| now - *deadline);
    if let Some((lease, epoch, deadline)) = late {
        return Some(format!(
            "the leader of term {epoch} of {lease} has not stopped {:.1}s past its deadline",
            (now - *deadline).as_secs_f64()
        ));
    }
    let quiet = vitals
        .stepped
        .filter(|_| vitals.campaigning)
        .map(|stepped| now.saturating_duration_since(stepped))?;
    (quiet > quiet_limit).then(|| {
        format!(
            "the election has made no progress for {}s (no acquire attempt, renewal or term \
             counted; the bound is {}s)",
            quiet.as_secs(),
            quiet_limit.as_secs()
        )
    })
}

/// A mutex's part, from its state and its terms: the line for a pass, or
/// why it fails.
fn mutex_part(state: &Leadership, vitals: &Snapshot, leader_only: bool) -> Result<String, String> {
    if let Some(outlived) = &vitals.outlived {
        return Err(format!(
            "term {} has ended and its guard is still held: not campaigning until it is released",
            outlived.epoch
        ));
    }
    match (state, leader_only) {
        (Leadership::Leader { epoch }, false) if vitals.stopping.contains(epoch) => {
            Ok(format!("ready: ending term {epoch}"))
        }
        (Leadership::Leader { epoch }, true) if vitals.stopping.contains(epoch) => {
            Err(format!("term {epoch} is ending: not the leader"))
        }
        (Leadership::Leader { epoch }, _) => Ok(format!("ready: leader of term {epoch}")),
        (Leadership::Stopped, _) => Err("not campaigning".to_owned()),
        (_, false) => Ok("ready: follower".to_owned()),
        (_, true) => Err("not the leader".to_owned()),
    }
}

/// A lease set's part, from whether it runs and how many partitions it owns.
fn set_part(running: bool, owned: usize, leader_only: bool) -> Result<String, String> {
    match (running, owned, leader_only) {
        (false, _, _) => Err("not taking part in the set".to_owned()),
        (true, 0, false) => Ok("ready: member, owning no partition".to_owned()),
        (true, 0, true) => Err("owns no partition".to_owned()),
        (true, 1, _) => Ok("ready: owner of 1 partition".to_owned()),
        (true, n, _) => Ok(format!("ready: owner of {n} partitions")),
    }
}

/// The readiness at `now`: the line for a pass, or why it fails. `unlive`
/// is why liveness fails; `part`, the instance's part in the election.
fn readiness(
    unlive: Option<String>,
    vitals: &Snapshot,
    now: Instant,
    part: Result<String, String>,
) -> Result<String, String> {
    if let Some(reason) = unlive {
        return Err(reason);
    }
    let failure = vitals.failure.as_deref().unwrap_or("no answer yet");
    let Some(answered) = vitals.answered else {
        return Err(format!("storage has not answered yet: {failure}"));
    };
    if let Some(since) = vitals.failing_since {
        if now.saturating_duration_since(since) > UNREACHABLE_AFTER {
            return Err(format!(
                "storage has not answered for {}s: {failure}",
                now.saturating_duration_since(answered).as_secs()
            ));
        }
    }
    part
}

impl<S: LeaseStore> BlobDistributedMutex<S> {
    /// Whether this mutex is live and ready, for an orchestrator's probes
    /// (see [`Health`]): read from what its campaign and guards learn, at
    /// no request.
    #[must_use]
    pub fn health(&self) -> Health {
        Health::of_mutex(self.vitals(), self.watch(), self.options())
    }
}

impl<S: LeaseSetStore> BlobLeaseSet<S> {
    /// Whether this instance of the set is live and ready, for an
    /// orchestrator's probes (see [`Health`]): read from what its
    /// membership and partition terms learn, at no request. Ready while
    /// [`run`](Self::run) runs and storage answers.
    #[must_use]
    pub fn health(&self) -> Health {
        let (vitals, membership) = self.vitals();
        Health::of_set(vitals, self.watch(), &membership)
    }
}

#[cfg(feature = "schedule")]
mod schedule;

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
