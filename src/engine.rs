//! The election engine: campaign, lead one term while renewing, stop the
//! term's tasks (cancel, grace, abort), report, release, campaign again.
//! [`BlobDistributedMutex`](crate::BlobDistributedMutex) runs it on one
//! lease; a [`BlobLeaseSet`](crate::BlobLeaseSet) runs one term of it per
//! partition. It never learns which store it runs on.
//!
//! This folder holds the engine and what only it uses: the campaign and
//! its acquire (`campaign`; this file leads one term), a term's tasks
//! (`term_tasks`), the end of a term (`stop`, `report`, and its vocabulary
//! in `ending`), planned handover
//! (`successor`), the fenced state (`state`) and fail-stop (`fail_stop`).
//! Three more live here although the mutex and the lease set name them,
//! because they are the engine's own inputs and outputs that those two only
//! pass along when they build an engine: a term's context and how
//! leadership is observed (`leadership`), the tasks of ended terms that may still run
//! (`lingering`), and the metrics (`metrics`), which carry the vitals
//! (`vitals`) that the `health` module judges: the engine writes them
//! and never imports the judge. The helpers other layers
//! share stay at the crate root: `bounded` (every store caps its calls with
//! it) and `backoff` (the lease set's balancer backs off with it).

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info_span, trace, warn, Instrument, Span};

use crate::backoff::{backoff, Jitter};
use crate::bounded::bounded;
use crate::ending::StopReason;
use crate::engine::fail_stop::FailStop;
use crate::engine::first_contact::FirstContact;
use crate::engine::leader::LeaderWatch;
use crate::engine::leadership::{Heartbeat, LeaderContext, Leadership};
use crate::engine::lingering::Lingering;
use crate::engine::metrics::Metrics;
use crate::engine::state::Fenced;
use crate::engine::term_tasks::{Ended, TermTasks};
use crate::error::{BoxError, Chain, Error, Result};
use crate::options::{MutexOptions, ABORT_WAIT, STOP_SLACK};
use crate::store::stamp::NEW_RECORD_WAIT;
use crate::store::{LeaseId, LeaseStore, StampOptions};

pub(crate) use one_term::Attempts;
pub(crate) use report::Observer;
use report::{Reporter, TermGuard};

/// The first and the longest wait between renew attempts that failed.
pub(crate) const RENEW_RETRY_FIRST: Duration = Duration::from_millis(200);
const RENEW_RETRY_MAX: Duration = Duration::from_secs(2);
/// The longest wait between acquire attempts that failed (before jitter),
/// unless `acquire_retry` is longer.
pub(crate) const ACQUIRE_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long the tasks of a term whose lease was definitively lost (broken,
/// changed, taken) have to return after their token is cancelled before
/// they are aborted, instead of the whole `stop_grace`: another holder may
/// lead already. Long enough for a task that checks its token to return by
/// itself (its report then says `returned`), short against the renew
/// interval that bounds how late the loss is seen.
pub(crate) const LOST_GRACE: Duration = Duration::from_millis(100);

type TaskFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
pub(crate) type TaskFn = dyn Fn(LeaderContext) -> TaskFuture + Send + Sync;

/// Erases the task's types so the mutex needs no type parameters.
pub(crate) fn box_task<F, Fut, E>(task: F) -> Arc<TaskFn>
where
    F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<BoxError> + 'static,
{
    Arc::new(move |ctx| {
        let fut = task(ctx);
        Box::pin(async move { fut.await.map_err(Into::into) })
    })
}

/// The leader's deadline, moved forward by each renewal and read by the
/// stop logic, the fail-stop thread and the leader task (through
/// [`LeaderContext::deadline`]).
pub(crate) struct Deadline(watch::Sender<Instant>);

impl Deadline {
    fn new(instant: Instant) -> Self {
        Deadline(watch::channel(instant).0)
    }

    fn get(&self) -> Instant {
        *self.0.borrow()
    }

    fn set(&self, instant: Instant) {
        self.0.send_replace(instant);
    }

    fn subscribe(&self) -> watch::Receiver<Instant> {
        self.0.subscribe()
    }
}

/// How a term ended, for the campaign.
#[derive(Debug)]
enum Term {
    /// The caller cancelled; the tasks have stopped and the lease is released.
    Shutdown,
    /// A task failed, panicked or stalled: back off before campaigning again.
    Failed,
    /// The term ended for this reason; campaign again after a retry period.
    Ended(StopReason),
    /// The lease was acquired but the term could not be stamped (the
    /// stamp's error), or the caller cancelled first (`None`): no task ran,
    /// and the lease was given back.
    Unstamped(Option<Error>),
}

/// When an acquire loop gives up.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    /// After this, the first attempt that does not acquire ends the loop.
    give_up_at: Option<Instant>,
    /// After this, the first attempt that fails ends the loop, unless
    /// storage has answered meanwhile.
    contact_by: Option<Instant>,
}

/// How the renew loop ended.
enum RenewEnd {
    Lost(Error),
    Deadline,
}

/// What a term needs once its tasks run.
struct Running<'t> {
    /// Reports the end of the term, from `Drop` if nothing else did.
    guard: TermGuard<'t>,
    epoch: u64,
    lease: LeaseId,
    deadline: Arc<Deadline>,
    tasks: &'t TermTasks,
    leader: JoinHandle<Ended>,
    reason: Arc<OnceLock<StopReason>>,
    child: CancellationToken,
    /// When the term's tasks are aborted, once the term stops: the
    /// crate's own requests in them end by themselves before it.
    abort_at: watch::Sender<Option<Instant>>,
    fail_stop: Option<FailStop>,
    /// The proposed lease id of the candidate the term hands over to.
    successor: Option<LeaseId>,
}

pub(crate) struct Engine<'a, S> {
    pub(crate) store: Arc<S>,
    pub(crate) options: &'a MutexOptions,
    pub(crate) holder: Arc<str>,
    pub(crate) task: Arc<TaskFn>,
    pub(crate) state: &'a watch::Sender<Leadership>,
    /// Told of each term's start and end (see [`Observer`]).
    pub(crate) observer: &'a dyn Observer,
    pub(crate) metrics: &'a Metrics,
    /// Tasks of earlier terms that may still run: no campaign starts while
    /// one does.
    pub(crate) lingering: &'a Lingering,
    /// Who leads, kept up to date by the campaign's polls while somebody
    /// watches; `None` for a lease set's partitions, whose set lists them.
    pub(crate) leader: Option<&'a LeaderWatch>,
    /// Whether storage has ever answered the mutex; `None` for a lease
    /// set's partitions, whose set's member lease was answered first.
    pub(crate) contact: Option<&'a FirstContact>,
    /// The term's task stands for a guard's holder when this is the
    /// guard's release, cancelled when the guard is released or dropped:
    /// the task returns then, and the holder's code, which the engine
    /// cannot stop, may run until then. The lease then leaves the term
    /// only after that return, or by being lost (see `stop`); and
    /// fail-stop counts the term's tasks as ended only once the guard is
    /// released, whatever became of the task that waited for it.
    pub(crate) caller_holds: Option<CancellationToken>,
}

tokio::task_local! {
    /// The lease and holder that a shape's span around this task's work
    /// names already: an engine for the same two adds no span of its own,
    /// so that each line lists the lease once.
    static NAMED: (String, Arc<str>);
}

/// Runs `work` in a span of the caller's that names `lease` and `holder`
/// (see [`Engine::span`]).
#[cfg(feature = "schedule")]
pub(crate) async fn in_named_span<F: Future>(
    lease: String,
    holder: Arc<str>,
    work: F,
) -> F::Output {
    NAMED.scope((lease, holder), work).await
}

impl<S: LeaseStore> Engine<'_, S> {
    /// The span of everything this engine does: the lease (as its store
    /// names it) and the holder, so that the lines of two mutexes in one
    /// process are told apart.
    pub(crate) fn span(&self) -> Span {
        let name = self.store.name();
        let named = NAMED
            .try_with(|(lease, holder)| *lease == name && **holder == *self.holder)
            .unwrap_or(false);
        if named {
            // Inside a shape's span that names both already (a schedule's).
            return Span::none();
        }
        info_span!("lease", lease = %name, holder = %self.holder)
    }

    /// One attempt to acquire and, if it succeeds, one whole term: what a
    /// lease set runs for each partition it claims. `Ok(false)` when the
    /// lease was held by another instance or the caller cancelled first.
    ///
    /// # Errors
    ///
    /// A failed acquire attempt, a fatal error of the term, or
    /// [`Error::TaskNotStopped`].
    pub(crate) async fn lead_once(&self, token: &CancellationToken) -> Result<bool> {
        self.lead_once_here(token).instrument(self.span()).await
    }

    async fn lead_once_here(&self, token: &CancellationToken) -> Result<bool> {
        self.lingering.settle(ABORT_WAIT).await?;
        let mut jitter = Jitter::new(self.options.jitter_seed, self.options.acquire_jitter);
        // A partition's term never advertises nor hands over.
        let acquired = match self
            .acquire_as(
                LeaseId::new(),
                token,
                &mut jitter,
                Limits {
                    give_up_at: Some(Instant::now()),
                    contact_by: None,
                },
                None,
            )
            .await
        {
            Ok(Some(acquired)) => acquired,
            Ok(None) | Err(Error::NotAcquired { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let (lease, deadline) = acquired;
        self.observer.acquired();
        // Many terms of one set may start together: their first renewal
        // comes at a random point of the second half of the renew interval,
        // so that their renewals do not come in bursts.
        let interval = self.options.effective_renew_interval();
        let first = Jitter::new(self.options.jitter_seed, 1.0 / 3.0).apply(interval.mul_f64(0.75));
        self.lead(lease, deadline, first.min(interval), token)
            .await?;
        self.state.send_replace(Leadership::Stopped);
        Ok(true)
    }

    /// One term: stamp the epoch, run the task, keep renewing (the first
    /// renewal `first_renewal` after the acquire was sent), stop the term's
    /// tasks, report, release.
    async fn lead(
        &self,
        lease: LeaseId,
        deadline: Instant,
        first_renewal: Duration,
        token: &CancellationToken,
    ) -> Result<Term> {
        let deadline = Arc::new(Deadline::new(deadline));
        let epoch = match self.stamp(lease, &deadline, token).await {
            Ok(epoch) => epoch,
            Err(over) => return over,
        };
        // Everything of the term, its tasks included (they are spawned in
        // the span current then), is in a span that names its epoch.
        self.lead_term(lease, deadline, epoch, first_renewal, token)
            .instrument(info_span!("term", epoch))
            .await
    }

    /// The term of `epoch`, once stamped: run the task, keep renewing, stop
    /// the term's tasks, report, release.
    async fn lead_term(
        &self,
        lease: LeaseId,
        deadline: Arc<Deadline>,
        epoch: u64,
        first_renewal: Duration,
        token: &CancellationToken,
    ) -> Result<Term> {
        let child = token.child_token();
        // Dropping `tasks` (with this future) cancels and aborts the term's work.
        let tasks = TermTasks::new(epoch, child.clone());
        let reason = Arc::new(OnceLock::new());
        let (heartbeat, mut beats) = Heartbeat::new();
        let (abort_at, aborted_at) = watch::channel(None);
        let context = LeaderContext {
            epoch,
            holder: self.holder.clone(),
            token: child.clone(),
            reason: reason.clone(),
            heartbeat,
            deadline: deadline.subscribe(),
            abort_at: aborted_at,
            tasks: tasks.spawner(),
            state: Arc::new(Fenced::new(
                self.store.clone(),
                lease,
                deadline.subscribe(),
                self.options.request_timeout,
            )),
        };
        let fail_stop = self.options.fail_stop.then(|| {
            let deadline = deadline.clone();
            let ended = tasks.done_check();
            let released = self.caller_holds.clone();
            let done = move || {
                ended()
                    && released
                        .as_ref()
                        .is_none_or(CancellationToken::is_cancelled)
            };
            FailStop::arm(move || deadline.get().into_std(), done, epoch)
        });
        let reporter = self.reporter();
        reporter.started(epoch, deadline.subscribe());
        let guard = TermGuard {
            reporter,
            epoch,
            deadline: deadline.clone(),
            reason: reason.clone(),
            tasks: &tasks,
            armed: true,
        };
        let leader = tasks.spawn_leader((self.task)(context));
        let renewed = deadline.clone();
        let mut term = Running {
            guard,
            epoch,
            lease,
            deadline,
            tasks: &tasks,
            leader,
            reason,
            child,
            abort_at,
            fail_stop,
            successor: None,
        };
        let mut renewal = pin!(self.keep_renewing(lease, &renewed, first_renewal));
        let watchdog = watchdog(self.options.heartbeat_timeout, &mut beats);
        let successor = self.successor();
        let (stop, failure) = self
            .until_stop(&mut term, renewal.as_mut(), watchdog, successor, token)
            .await;
        self.stop(term, stop, failure, renewal).await
    }

    /// Stamps the epoch; on failure gives the lease back and says how the
    /// term is over.
    async fn stamp(
        &self,
        lease: LeaseId,
        deadline: &Deadline,
        token: &CancellationToken,
    ) -> std::result::Result<u64, Result<Term>> {
        let left = deadline
            .get()
            .saturating_duration_since(Instant::now() + self.options.stop_grace + STOP_SLACK);
        // A stamp that makes the lease's record anew waits for storage's
        // clock: it may take `NEW_RECORD_WAIT` more than a request.
        let limit = self
            .options
            .request_timeout
            .saturating_add(NEW_RECORD_WAIT)
            .min(left);
        let stamped = tokio::select! {
            () = token.cancelled() => Err(Error::Cancelled),
            r = bounded("stamp", limit, self.stamp_term(lease)) => r,
        };
        let e = match stamped {
            Ok(epoch) => return Ok(epoch),
            Err(e) => e,
        };
        if !matches!(e, Error::Cancelled) {
            warn!(holder = %self.holder, error = %Chain(&e), "could not write the epoch; giving the lease back");
        }
        self.release(lease, self.options.request_timeout).await;
        Err(match e {
            e if e.is_fatal() => Err(e),
            _ if token.is_cancelled() => Ok(Term::Unstamped(None)),
            e => Ok(Term::Unstamped(Some(e))),
        })
    }

    /// The stamp of a new term: with what this instance advertises, if
    /// anything.
    async fn stamp_term(&self, lease: LeaseId) -> Result<u64> {
        let mut options = StampOptions::new();
        if let Some(value) = &self.options.advertised {
            options = options.with_advertised(value.as_str());
        }
        self.store.stamp(lease, &self.holder, &options).await
    }

    /// Leads until something ends the term; returns why, with the leader
    /// task's failure if that is what ended it.
    async fn until_stop(
        &self,
        term: &mut Running<'_>,
        renewal: Pin<&mut impl Future<Output = RenewEnd>>,
        watchdog: impl Future<Output = ()>,
        successor: impl Future<Output = LeaseId>,
        token: &CancellationToken,
    ) -> (StopReason, Option<String>) {
        let epoch = term.epoch;
        let (stop, failure) = tokio::select! {
            joined = &mut term.leader => {
                let ended = joined_task(joined);
                (ended.reason(), ended.failure())
            }
            failure = term.tasks.failed() => (failure.reason, Some(failure.message)),
            end = renewal => match end {
                RenewEnd::Lost(e) => {
                    warn!(holder = %self.holder, epoch, error = %Chain(&e), "lease lost; stopping the leader task");
                    (StopReason::LeaseLost, None)
                }
                RenewEnd::Deadline => {
                    warn!(holder = %self.holder, epoch, "renewals failed until the deadline; stopping the leader task");
                    (StopReason::Deadline, None)
                }
            },
            () = watchdog => {
                warn!(holder = %self.holder, epoch, "leader task missed its heartbeat; stepping down");
                (StopReason::Stalled, None)
            }
            () = token.cancelled() => (StopReason::Shutdown, None),
            to = successor => {
                term.successor = Some(to);
                (StopReason::Handover, None)
            }
        };
        match (&failure, stop) {
            (Some(message), StopReason::Panicked) => {
                error!(holder = %self.holder, epoch, panic = %message, "leader task panicked");
            }
            (Some(message), _) => {
                error!(holder = %self.holder, epoch, error = %message, "leader task failed");
            }
            (None, _) => {}
        }
        // A process that was frozen past its deadline wakes to whichever
        // timer comes first; what matters is that the deadline has passed.
        if Instant::now() >= term.deadline.get() && stop != StopReason::LeaseLost {
            return (StopReason::Deadline, failure);
        }
        // A task that returned, failed or panicked because the caller's
        // cancellation reached it first (the term's token is a child of the
        // caller's) was shut down; its failure is still reported.
        let ended_by_itself = matches!(
            stop,
            StopReason::Finished | StopReason::Failed | StopReason::Panicked
        );
        if ended_by_itself && token.is_cancelled() {
            return (StopReason::Shutdown, failure);
        }
        (stop, failure)
    }

    /// What reports the end of this engine's terms.
    fn reporter(&self) -> Reporter<'_> {
        Reporter {
            holder: &self.holder,
            state: self.state,
            observer: self.observer,
            metrics: self.metrics,
            lingering: self.lingering,
            stop_grace: self.options.stop_grace,
        }
    }

    /// Releases the lease within `limit`: whether storage answered the
    /// release (if not, the lease is left to expire, and counted).
    async fn release(&self, lease: LeaseId, limit: Duration) -> bool {
        match bounded("release", limit, self.store.release(lease)).await {
            Ok(()) => {
                debug!(holder = %self.holder, "released lease");
                true
            }
            Err(e) => {
                self.metrics.release_failed();
                warn!(holder = %self.holder, error = %Chain(&e), "release failed; the lease will expire");
                false
            }
        }
    }

    /// Renews every `renew_interval` (the first time `first` after the
    /// acquire was sent) and moves the deadline forward. Returns
    /// when the lease is lost or when `deadline − stop_grace − STOP_SLACK`
    /// comes before a renewal succeeds. Every request is cut at that instant.
    async fn keep_renewing(
        &self,
        lease: LeaseId,
        deadline: &Deadline,
        first: Duration,
    ) -> RenewEnd {
        let lease_duration = self.options.lease_duration;
        let margin = self.options.effective_safety_margin();
        let interval = self.options.effective_renew_interval();
        let stop_budget = self.options.stop_grace + STOP_SLACK;
        let mut next = deadline.get() + margin - lease_duration + first;
        let mut failures: u32 = 0;
        loop {
            let stop_at = deadline.get() - stop_budget;
            sleep_until(next.min(stop_at)).await;
            let sent = Instant::now();
            if sent >= stop_at {
                return RenewEnd::Deadline;
            }
            let limit = self.options.request_timeout.min(stop_at - sent);
            let renewal = bounded("renew", limit, self.store.renew(lease)).await;
            self.metrics.vitals().heard(sent, renewal.as_ref().err());
            match renewal {
                Ok(()) => {
                    self.metrics.renewed(sent.elapsed());
                    deadline.set(sent + lease_duration - margin);
                    next = sent + interval;
                    failures = 0;
                    trace!(holder = %self.holder, "renewed lease");
                }
                Err(e @ Error::LeaseLost(_)) => {
                    self.metrics.renew_failed();
                    return RenewEnd::Lost(e);
                }
                Err(e) => {
                    self.metrics.renew_failed();
                    failures = failures.saturating_add(1);
                    let wait = backoff(RENEW_RETRY_FIRST, RENEW_RETRY_MAX, failures);
                    warn!(holder = %self.holder, error = %Chain(&e), failures, retry_in = ?wait, "renew failed");
                    next = Instant::now() + wait;
                }
            }
        }
    }
}

/// Completes when the task has not beaten for `timeout`; never without a
/// timeout. A task that dropped its heartbeat beats no more.
async fn watchdog(timeout: Option<Duration>, beats: &mut watch::Receiver<u64>) {
    let Some(timeout) = timeout else {
        return std::future::pending().await;
    };
    let mut last = Instant::now();
    loop {
        match tokio::time::timeout_at(last + timeout, beats.changed()).await {
            Ok(Ok(())) => last = Instant::now(),
            Ok(Err(_)) => return sleep_until(last + timeout).await,
            Err(_) => return,
        }
    }
}

/// How the leader task ended, from its handle. Its future catches its own
/// panics, so the handle fails only when the task was aborted, which the
/// report tells as [`TaskStop::Aborted`], not as a failure.
fn joined_task(joined: std::result::Result<Ended, JoinError>) -> Ended {
    match joined {
        Ok(ended) => ended,
        Err(e) if e.is_cancelled() => Ended::Returned,
        Err(e) => Ended::Failed(e.to_string()),
    }
}

mod campaign;
pub(crate) mod fail_stop;
pub(crate) mod first_contact;
pub(crate) mod handover;
pub(crate) mod leader;
pub(crate) mod leadership;
pub(crate) mod lingering;
pub(crate) mod metrics;
mod one_term;
mod report;
pub(crate) mod settled;
pub(crate) mod state;
mod stop;
mod successor;
pub(crate) mod term_tasks;
#[cfg(test)]
mod tests;
pub(crate) mod vitals;
