//! A guard: acquire the lease, hold it while the caller's code runs, release
//! it. The term is the engine's own, led in the background by a task that
//! only waits for the guard's release; the guard hands out the term's epoch,
//! its cancellation and its state.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{BlobDistributedMutex, MutexObserver, OneCampaign};
use crate::bounded::bounded;
use crate::ending::{StopReason, TaskStop, TermReport};
use crate::engine::leader::Leader;
use crate::engine::leadership::LeaderContext;
use crate::engine::vitals::{Outlived, Vitals};
use crate::engine::{Attempts, Engine, TaskFn};
use crate::error::{Error, Result};
use crate::store::LeaseStore;

/// The background work of a guard: one term, and its report.
type TermHandle = JoinHandle<Result<Option<TermReport>>>;

/// A held lease: one term of a [`BlobDistributedMutex`], given by
/// [`acquire`](BlobDistributedMutex::acquire) or
/// [`try_acquire`](BlobDistributedMutex::try_acquire), renewed in the
/// background for as long as the guard lives.
///
/// Its [`token`](Self::token) is cancelled before the lease could expire:
/// when renewals have failed until `stop_grace` before the term's local
/// deadline, when storage says the lease is lost, and when the guard is
/// released. Unlike the task form, a guard **cannot stop the caller's
/// code**: code that holds a guard and does not watch its token keeps
/// running after the lease is gone. Check [`is_current`](Self::is_current)
/// right before each unit of work, pass [`epoch`](Self::epoch) downstream
/// as a fencing token, or race the work against
/// [`cancelled`](Self::cancelled). Work that must be stopped at the deadline
/// whatever it does belongs in the task form
/// ([`run_task_when_mutex_acquired`](BlobDistributedMutex::run_task_when_mutex_acquired),
/// [`run_once_with`](BlobDistributedMutex::run_once_with)), which aborts
/// a task that has not stopped when its grace or the deadline comes.
///
/// Release with [`release`](Self::release), which waits until the lease is
/// given back and returns the term's report. Dropping the guard releases
/// too, without blocking: the release runs on in a spawned task (a
/// runtime that shuts down first leaves the lease to expire).
///
/// # How a guard's term ends
///
/// While a guard is held, the lease leaves this instance only when the
/// guard is released or dropped, or when it is lost; never under the
/// holder's code. Every way the term ends, with the
/// [`StopReason`] that [`cancelled`](Self::cancelled) and the report give:
///
/// - **Released or dropped** ([`StopReason::Finished`]): the term's
///   sub-tasks are stopped, the end reported, and the lease released (or,
///   with a waiting candidate of a higher
///   [`priority`](crate::MutexOptions::priority), handed to it).
/// - **Lost** ([`StopReason::LeaseLost`]): storage said the lease is not
///   ours (broken by an operator, or taken by another after it expired). The
///   token is cancelled at once and the term ends; the lease is someone
///   else's already, so nothing waits for the holder, whose step in flight
///   may overlap the new holder's: only the [`epoch`](Self::epoch) checked
///   downstream protects against that.
/// - **Must end otherwise**: a candidate of a higher priority waits
///   ([`StopReason::Handover`]), renewals failed until the stop budget
///   before the deadline ([`StopReason::Deadline`]), the holder missed its
///   [`heartbeat_timeout`](crate::MutexOptions::heartbeat_timeout)
///   ([`StopReason::Stalled`]). The token is cancelled and
///   `is_current()` says `false` from then on; the term then waits for the
///   holder's release. While it waits after a handover request it keeps
///   renewing for [`stop_grace`](crate::MutexOptions::stop_grace), then no
///   more; after `Deadline` (renewals were failing) or `Stalled` (the
///   holder makes no progress) it renews no more at all, so that the lease
///   ends as soon as it can. A release that comes
///   before `deadline − STOP_SLACK` lets the lease go as above: released,
///   or handed over only then. A holder that has not released by then has
///   its lease left to expire: the report says
///   [`TaskStop::Unreleased`](crate::term::TaskStop::Unreleased), the next holder
///   leads only once storage has expired the lease, and with
///   [`fail_stop`](crate::MutexOptions::fail_stop) the process exits
///   before the lease could expire. Either way a step begun while
///   `is_current()` was `true` and ended before that instant never overlaps
///   the next holder.
/// - **Frozen past the deadline** ([`StopReason::Deadline`]): the process
///   woke after the lease could have expired; the term ends at once
///   without a release ([`TaskStop::Unreleased`](crate::term::TaskStop::Unreleased)),
///   and `is_current()` says `false` before any renewal runs.
///
/// The report reaches [`release`](Self::release) (and
/// [`term_reports`](BlobDistributedMutex::term_reports)) once the term is
/// over. While the guard lives, even after its term ended, the mutex does
/// not campaign again: [`acquire`](BlobDistributedMutex::acquire) returns
/// [`Error::AlreadyCampaigning`].
///
/// Every [`MutexOptions`](crate::MutexOptions) field applies to a guard as
/// described above, except `failure_backoff`, which spaces the task form's
/// terms and has no effect on a guard's single term; the task given at the
/// mutex's construction never runs for a guard.
#[derive(Debug)]
pub struct MutexGuard {
    context: LeaderContext,
    release: CancellationToken,
    term: Option<TermHandle>,
    /// Told when the guard is gone, for the probes of a guard that outlives
    /// its term.
    vitals: Arc<Vitals>,
    /// Keeps the mutex from campaigning again while the guard lives, even
    /// once its term is over: the holder's code may still run.
    _one: Arc<dyn Send + Sync + std::fmt::Debug>,
    /// What else lives as long as the guard (a name held in its provider).
    kept: Option<Box<dyn Send + Sync + std::fmt::Debug>>,
}

/// What [`try_acquire`](BlobDistributedMutex::try_acquire) found.
#[derive(Debug)]
#[non_exhaustive]
pub enum TryAcquire {
    /// The lease was free: this instance holds it now.
    Acquired(MutexGuard),
    /// Another instance holds the lease: its [`Leader`], as storage showed
    /// it just after the attempt (`None` when it had not stamped its term
    /// yet, or had let the lease go meanwhile).
    Held(Option<Leader>),
}

impl<S: LeaseStore> BlobDistributedMutex<S> {
    /// Campaigns until this instance holds the lease, and returns a guard
    /// that holds it (see [`MutexGuard`]). The task given at construction
    /// does not run.
    ///
    /// # Errors
    ///
    /// As [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired):
    /// a fatal error; [`Error::AlreadyCampaigning`] while a campaign or
    /// another guard of this mutex is alive, or a dropped guard's release
    /// still runs (release with [`MutexGuard::release`] to acquire again at
    /// once); with [`MutexOptions::acquire_timeout`](crate::MutexOptions::acquire_timeout),
    /// [`Error::NotAcquired`].
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: dropping the future stops the campaign, and a
    /// lease acquired meanwhile is released in the background.
    pub async fn acquire(&self) -> Result<MutexGuard> {
        self.hold(Attempts::UntilLed).await?.ok_or(Error::Cancelled)
    }

    /// One attempt to acquire the lease: a guard when it was free, the
    /// current [`Leader`] at once when another instance holds it.
    ///
    /// # Errors
    ///
    /// The attempt's error when storage could not be asked (one attempt,
    /// no retry), or when the lease was acquired but the term could not be
    /// stamped (the lease is given back); a fatal error; [`Error::AlreadyCampaigning`] as for
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancellation safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<TryAcquire> {
        if let Some(guard) = self.hold(Attempts::One).await? {
            return Ok(TryAcquire::Acquired(guard));
        }
        let core = &self.core;
        let info = bounded(
            "inspect",
            core.options.request_timeout,
            core.store.inspect(),
        )
        .await?;
        Ok(TryAcquire::Held(info.as_ref().and_then(Leader::from_info)))
    }

    /// Leads one term in the background whose task waits for the guard's
    /// release; the guard once the term has started, `None` when the
    /// attempts ended without leading.
    async fn hold(&self, attempts: Attempts) -> Result<Option<MutexGuard>> {
        let one = Arc::new(OneCampaign::enter(&self.core)?);
        let kept = one.clone();
        // Dropping this future before the guard exists stops the campaign
        // and releases a lease the term took meanwhile: the context it sent
        // was never read, so no holder can be waited for.
        let abandoned = CancellationToken::new();
        let token = abandoned.child_token();
        let release = abandoned.child_token();
        let abandon = abandoned.drop_guard();
        let (started, context) = oneshot::channel();
        let task = guard_task(started, release.clone());
        let released = release.clone();
        let term: TermHandle = tokio::spawn(
            async move {
                let core = one.0.clone();
                let observer = MutexObserver::new(&core);
                let engine = Engine {
                    caller_holds: Some(released.clone()),
                    ..core.engine(&observer, task)
                };
                let led = engine
                    .one_term(&token, attempts, tokio::time::Instant::now())
                    .await?;
                drop(one);
                let report = led.then(|| observer.take_last()).flatten();
                if let Some(report) = &report {
                    let outlived = Outlived {
                        lease: core.metrics.lease().clone(),
                        epoch: report.epoch,
                        ended: Instant::now(),
                        unreleased: report.tasks == TaskStop::Unreleased,
                    };
                    let vitals = core.metrics.vitals();
                    vitals.guard_outlives(outlived, || !released.is_cancelled());
                }
                Ok(report)
            }
            .in_current_span(),
        );
        if let Ok(context) = context.await {
            abandon.disarm();
            return Ok(Some(MutexGuard {
                context,
                release,
                term: Some(term),
                vitals: self.core.metrics.vitals().clone(),
                _one: kept,
                kept: None,
            }));
        }
        match term.await {
            Ok(Ok(_)) => Ok(None),
            Ok(Err(e)) => Err(e),
            // Only a runtime that shuts down cancels it; it never panics.
            Err(_) => Err(Error::Cancelled),
        }
    }
}

/// The engine's task for a guard's term: hands the term's context to the
/// guard, then waits until the guard is released or dropped. It does not
/// return when the term must stop: the holder's code may still run, and
/// the engine lets go of the lease only once this task returns (or the
/// lease could expire).
fn guard_task(started: oneshot::Sender<LeaderContext>, release: CancellationToken) -> Arc<TaskFn> {
    let started = Mutex::new(Some(started));
    Arc::new(move |ctx| {
        let started = started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let release = release.clone();
        Box::pin(async move {
            // Nobody waits for the guard any more: give the lease back.
            let Some(Ok(())) = started.map(|s| s.send(ctx.clone())) else {
                return Ok(());
            };
            release.cancelled().await;
            Ok(())
        })
    })
}

impl MutexGuard {
    /// The guard, keeping `kept` until it is released or dropped.
    pub(crate) fn keeping(mut self, kept: impl Send + Sync + std::fmt::Debug + 'static) -> Self {
        self.kept = Some(Box::new(kept));
        self
    }

    /// The fencing token of this term (see [`LeaderContext::epoch`]).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.context.epoch()
    }

    /// Whether the lease may still be acted on: the term has not been asked
    /// to stop and its local deadline has not passed. Check it right before
    /// each unit of work; after a freeze it says `false` before the
    /// background renewals have run (see [`LeaderContext::is_current`]).
    #[must_use]
    pub fn is_current(&self) -> bool {
        self.context.is_current()
    }

    /// The term's token: cancelled when the term must stop (renewals failed
    /// until `stop_grace` before the deadline, the lease was lost, the guard
    /// was released), always before the lease could expire while the process
    /// runs. Give it to the work that holds the guard.
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        self.context.token()
    }

    /// Completes when the term must stop, with the reason; at the latest at
    /// the term's deadline (see [`LeaderContext::cancelled`]).
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: it only waits.
    pub async fn cancelled(&self) -> StopReason {
        self.context.cancelled().await
    }

    /// The term's current local deadline (see [`LeaderContext::deadline`]).
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.context.deadline()
    }

    /// The term's context: its fenced state ([`LeaderContext::read_state`],
    /// [`LeaderContext::write_state`]), heartbeat and sub-tasks.
    #[must_use]
    pub fn context(&self) -> &LeaderContext {
        &self.context
    }

    /// Releases the lease and waits until the term is over: the end
    /// reported, the lease given back (or, when it was lost, left to
    /// whoever holds it now). Returns the term's report.
    ///
    /// # Errors
    ///
    /// A fatal error of the term, [`Error::TaskNotStopped`] when a sub-task
    /// spawned through the context could not be stopped, or
    /// [`Error::Cancelled`] when the runtime is shutting down.
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: a dropped release still releases, in the
    /// background.
    pub async fn release(mut self) -> Result<TermReport> {
        self.release.cancel();
        let Some(term) = self.term.take() else {
            return Err(Error::Cancelled);
        };
        match term.await {
            Ok(Ok(Some(report))) => Ok(report),
            Ok(Ok(None)) | Err(_) => Err(Error::Cancelled),
            Ok(Err(e)) => Err(e),
        }
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        // Cancelled first: a term that ends from now on sees the release
        // (see `Vitals::guard_outlives`).
        self.release.cancel();
        self.vitals.guard_gone(self.context.epoch());
    }
}
