//! The election loop: campaign, lead while renewing, stop the task, release, campaign again.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinError;
use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, trace, warn};

use crate::backoff::{backoff, Jitter};
use crate::error::{BoxError, Error, Result};
use crate::fail_stop::{self, FailStop};
use crate::leadership::{Heartbeat, LeaderContext, Leadership, StopReason};
use crate::lease::{Acquire, BlobLeaseManager, LeaseId, LeaseStore};
use crate::options::{default_holder, MutexOptions, ABORT_WAIT, FAIL_STOP_SLACK};
use crate::settings::BlobSettings;

/// How long before the deadline an unresponsive task is aborted, so that the
/// abort (or a fail-stop exit) lands before the deadline.
const ABORT_SLACK: Duration = Duration::from_millis(500);
/// The first and the longest wait between renew attempts that failed.
const RENEW_RETRY_FIRST: Duration = Duration::from_millis(200);
const RENEW_RETRY_MAX: Duration = Duration::from_secs(2);
/// The longest wait between acquire attempts that failed (before jitter),
/// unless `acquire_retry` is longer.
const ACQUIRE_BACKOFF_MAX: Duration = Duration::from_secs(5);

type TaskFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
pub(crate) type TaskFn = dyn Fn(LeaderContext) -> TaskFuture + Send + Sync;

/// Leader election on an Azure blob lease: runs a task on at most one
/// instance at a time.
///
/// Every instance calls [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired)
/// with the same [`BlobSettings`]. The one that acquires the lease runs the
/// task while it keeps renewing; the others wait and try again. See the crate
/// documentation for the guarantees and their limits.
pub struct BlobDistributedMutex {
    settings: BlobSettings,
    manager: Arc<BlobLeaseManager>,
    options: MutexOptions,
    holder: Arc<str>,
    task: Arc<TaskFn>,
    state: Arc<watch::Sender<Leadership>>,
    /// Set while a campaign runs: one campaign per mutex at a time.
    campaigning: AtomicBool,
}

impl std::fmt::Debug for BlobDistributedMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobDistributedMutex")
            .field("manager", &self.manager)
            .field("holder", &self.holder)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl BlobDistributedMutex {
    /// A mutex with default [`MutexOptions`] that runs `task` while it leads.
    ///
    /// The task is called once per term with a [`LeaderContext`]; it must stop
    /// soon after the context's token is cancelled. It may return any error
    /// type that converts into a boxed error (`anyhow::Error` does).
    ///
    /// # Errors
    ///
    /// As [`BlobDistributedMutex::with_options`].
    pub fn new<F, Fut, E>(settings: BlobSettings, task: F) -> Result<Self>
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        Self::with_options(settings, MutexOptions::default(), task)
    }

    /// A mutex with the given options.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the first invalid option (see
    /// [`MutexOptions::validate`]), or [`Error::InvalidConnectionString`] when
    /// the settings' SAS token is malformed.
    pub fn with_options<F, Fut, E>(
        settings: BlobSettings,
        options: MutexOptions,
        task: F,
    ) -> Result<Self>
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        options.validate()?;
        let manager =
            BlobLeaseManager::new(&settings)?.with_request_timeout(options.request_timeout);
        let holder: Arc<str> = options.holder.clone().unwrap_or_else(default_holder).into();
        Ok(BlobDistributedMutex {
            settings,
            manager: Arc::new(manager),
            options,
            holder,
            task: box_task(task),
            state: Arc::new(watch::channel(Leadership::Follower).0),
            campaigning: AtomicBool::new(false),
        })
    }

    /// Where the lease blob lives.
    #[must_use]
    pub fn settings(&self) -> &BlobSettings {
        &self.settings
    }

    /// This instance's holder name.
    #[must_use]
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The options in force.
    #[must_use]
    pub fn options(&self) -> &MutexOptions {
        &self.options
    }

    /// The lease manager this mutex uses, for inspecting the blob.
    #[must_use]
    pub fn lease_manager(&self) -> &BlobLeaseManager {
        &self.manager
    }

    /// A receiver of the leadership state. Like any `watch` channel it holds
    /// the latest state only, so changes that follow each other quickly may
    /// be seen as one; the `tracing` events log every transition.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.state.subscribe()
    }

    /// Campaigns for the lease and runs the task whenever this instance
    /// leads, until `token` is cancelled.
    ///
    /// One round: acquire the lease (or wait `acquire_retry` with jitter while
    /// someone else holds it); stamp `holder`, `epoch` and `acquired_at` into
    /// the blob's metadata; run the task with a child token while renewing
    /// every `renew_interval`; when the task ends, the lease is lost, the
    /// deadline comes or `token` is cancelled, stop the task first (cancel,
    /// wait up to `stop_grace`, abort) and only then release the lease; then
    /// campaign again.
    ///
    /// # Errors
    ///
    /// Returns `Ok(())` once `token` is cancelled and the task has stopped.
    /// Returns early with a fatal error: [`Error::Authentication`], a storage
    /// answer 400 ([`Error::Storage`]), or [`Error::TaskNotStopped`] when the
    /// task could neither be stopped nor aborted (the lease is then left to
    /// expire; with [`MutexOptions::fail_stop`] the process exits instead).
    /// Transient failures are retried with backoff and logged.
    ///
    /// # Cancellation safety
    ///
    /// Cancel through `token`, not by dropping the future: dropping it aborts
    /// a running leader task without waiting for it and leaves the lease to
    /// expire on its own.
    pub async fn run_task_when_mutex_acquired(&self, token: CancellationToken) -> Result<()> {
        let _one = OneCampaign::enter(&self.campaigning)?;
        let engine = Engine {
            store: self.manager.clone(),
            options: &self.options,
            holder: self.holder.clone(),
            task: self.task.clone(),
            state: &self.state,
        };
        engine.run(token).await
    }
}

/// Marks a mutex as campaigning for as long as it lives.
struct OneCampaign<'a>(&'a AtomicBool);

impl<'a> OneCampaign<'a> {
    fn enter(flag: &'a AtomicBool) -> Result<Self> {
        flag.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map_err(|_| Error::AlreadyCampaigning)?;
        Ok(OneCampaign(flag))
    }
}

impl Drop for OneCampaign<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

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

/// How a term ended.
#[derive(Debug)]
enum Term {
    /// The caller cancelled; the task has stopped and the lease is released.
    Shutdown,
    /// The task returned `Ok` by itself.
    Finished,
    /// The task returned an error, panicked or stalled.
    Failed,
    /// Leadership ended for the given reason.
    SteppedDown(StopReason),
}

/// How the renew loop ended.
enum RenewEnd {
    Lost(Error),
    Deadline,
}

/// How the task ended once it was asked to stop.
enum Stopped {
    Joined(std::result::Result<Result<(), BoxError>, JoinError>),
    Aborted,
    Stuck,
}

pub(crate) struct Engine<'a, S> {
    pub(crate) store: Arc<S>,
    pub(crate) options: &'a MutexOptions,
    pub(crate) holder: Arc<str>,
    pub(crate) task: Arc<TaskFn>,
    pub(crate) state: &'a watch::Sender<Leadership>,
}

impl<S: LeaseStore> Engine<'_, S> {
    pub(crate) async fn run(&self, token: CancellationToken) -> Result<()> {
        let mut jitter = Jitter::new(self.options.jitter_seed, self.options.acquire_jitter);
        debug!(holder = %self.holder, "campaign started");
        let result = self.campaign(&token, &mut jitter).await;
        self.state.send_replace(Leadership::Stopped);
        match &result {
            Ok(()) => debug!(holder = %self.holder, "campaign stopped"),
            Err(e) => {
                // The caller gets the error itself; logging it loudly too would show it twice.
                debug!(holder = %self.holder, error = %e, "campaign stopped by a fatal error");
            }
        }
        result
    }

    async fn campaign(&self, token: &CancellationToken, jitter: &mut Jitter) -> Result<()> {
        let mut give_up_at = self.options.acquire_timeout.map(|t| Instant::now() + t);
        loop {
            let Some((lease, deadline)) = self.acquire(token, jitter, give_up_at).await? else {
                return Ok(());
            };
            give_up_at = None;
            let pause = match self.lead(lease, deadline, token).await? {
                Term::Shutdown => return Ok(()),
                Term::Failed => jitter.apply(self.options.failure_backoff),
                Term::Finished => self.options.pause_after_term(),
                Term::SteppedDown(reason) => {
                    trace!(holder = %self.holder, %reason, "campaigning again after stepping down");
                    self.options.pause_after_term()
                }
            };
            if !self.pause(token, pause).await {
                return Ok(());
            }
        }
    }

    /// Waits; `false` when cancelled first.
    async fn pause(&self, token: &CancellationToken, wait: Duration) -> bool {
        tokio::select! {
            () = token.cancelled() => false,
            () = sleep(wait) => true,
        }
    }

    /// Tries until the lease is ours; `None` when cancelled first. Past
    /// `give_up_at`, the first attempt that does not acquire ends the campaign.
    async fn acquire(
        &self,
        token: &CancellationToken,
        jitter: &mut Jitter,
        give_up_at: Option<Instant>,
    ) -> Result<Option<(LeaseId, Instant)>> {
        let proposed = LeaseId::new();
        let mut failures: u32 = 0;
        loop {
            if token.is_cancelled() {
                return Ok(None);
            }
            let sent = Instant::now();
            let attempt = tokio::select! {
                () = token.cancelled() => {
                    // The dropped request may have acquired the lease on the
                    // server already: give it back rather than leave it to expire.
                    // Bounded short so that shutdown stays quick.
                    let limit = self.options.request_timeout.min(Duration::from_secs(1));
                    self.release(proposed, limit).await;
                    return Ok(None);
                }
                r = bounded(
                    "acquire",
                    self.options.request_timeout,
                    self.store.acquire(proposed, self.options.lease_duration),
                ) => r,
            };
            let (wait, failed) = match attempt {
                Ok(Acquire::Acquired) => {
                    let deadline =
                        sent + self.options.lease_duration - self.options.effective_safety_margin();
                    return Ok(Some((proposed, deadline)));
                }
                Ok(Acquire::Held) => {
                    failures = 0;
                    trace!(holder = %self.holder, "lease held by another instance");
                    (self.options.acquire_retry, None)
                }
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = backoff(
                        self.options.acquire_retry,
                        self.options.acquire_retry.max(ACQUIRE_BACKOFF_MAX),
                        failures,
                    );
                    warn!(holder = %self.holder, error = %e, failures, retry_in = ?wait, "acquire failed");
                    (wait, Some(e))
                }
            };
            let mut wait = jitter.apply(wait);
            if let Some(give_up_at) = give_up_at {
                let now = Instant::now();
                if now >= give_up_at {
                    // The acquire may have reached storage before it failed.
                    if failed.is_some() {
                        self.release(proposed, self.options.request_timeout).await;
                    }
                    return Err(failed.unwrap_or(Error::NotAcquired {
                        after: self.options.acquire_timeout.unwrap_or_default(),
                    }));
                }
                wait = wait.min(give_up_at - now);
            }
            if !self.pause(token, wait).await {
                return Ok(None);
            }
        }
    }

    /// One term: stamp the epoch, run the task, keep renewing, stop, release.
    #[allow(clippy::too_many_lines)] // one sequence, easier to check in one place
    async fn lead(
        &self,
        lease: LeaseId,
        deadline: Instant,
        token: &CancellationToken,
    ) -> Result<Term> {
        let deadline = Arc::new(Deadline::new(deadline));
        let grace = self.options.stop_grace;

        let stamp_limit = self.options.request_timeout.min(
            deadline
                .get()
                .saturating_duration_since(Instant::now() + grace),
        );
        let stamped = tokio::select! {
            () = token.cancelled() => Err(Error::Cancelled),
            r = bounded("stamp", stamp_limit, self.store.stamp(lease, &self.holder)) => r,
        };
        let epoch = match stamped {
            Ok(epoch) => epoch,
            Err(e) => {
                if !matches!(e, Error::Cancelled) {
                    warn!(holder = %self.holder, error = %e, "could not write the epoch; giving the lease back");
                }
                self.release(lease, self.options.request_timeout).await;
                return match e {
                    Error::Cancelled => Ok(Term::Shutdown),
                    e if e.is_fatal() => Err(e),
                    _ => Ok(Term::SteppedDown(StopReason::LeaseLost)),
                };
            }
        };

        self.state.send_replace(Leadership::Leader { epoch });
        debug!(holder = %self.holder, epoch, "became leader");

        let child = token.child_token();
        let reason = Arc::new(OnceLock::new());
        let (heartbeat, mut beats) = Heartbeat::new();
        let context = LeaderContext {
            epoch,
            holder: self.holder.clone(),
            token: child.clone(),
            reason: reason.clone(),
            heartbeat,
            deadline: deadline.subscribe(),
        };
        let fail_stop_guard = self.options.fail_stop.then(|| {
            let deadline = deadline.clone();
            FailStop::arm(move || deadline.get().into_std(), epoch)
        });
        let mut handle = tokio::spawn((self.task)(context));
        let mut renewal = pin!(self.keep_renewing(lease, &deadline));
        let mut watchdog = pin!(watchdog(self.options.heartbeat_timeout, &mut beats));

        // Phase 1: lead until something ends the term.
        let stop = tokio::select! {
            joined = &mut handle => {
                let term = self.report(epoch, joined, false);
                drop(fail_stop_guard);
                self.finish(lease, epoch, true).await;
                return Ok(term);
            }
            end = &mut renewal => match end {
                RenewEnd::Lost(e) => {
                    warn!(holder = %self.holder, epoch, error = %e, "lease lost; stopping the leader task");
                    StopReason::LeaseLost
                }
                RenewEnd::Deadline => {
                    warn!(holder = %self.holder, epoch, "renewals failed until the deadline; stopping the leader task");
                    StopReason::Deadline
                }
            },
            () = &mut watchdog => {
                warn!(holder = %self.holder, epoch, "leader task missed its heartbeat; stepping down");
                StopReason::Stalled
            }
            () = token.cancelled() => StopReason::Shutdown,
        };

        // Phase 2: ask the task to stop; while the lease is still ours keep
        // renewing, and abort the task before the deadline if it lingers.
        let _ = reason.set(stop);
        child.cancel();
        debug!(holder = %self.holder, epoch, reason = %stop, "stopping the leader task");
        let mut renewing = stop == StopReason::Shutdown;
        let mut lease_held = stop != StopReason::LeaseLost;
        let mut abort_at = Instant::now() + grace;
        if matches!(stop, StopReason::Deadline | StopReason::Stalled) {
            abort_at = abort_at.min(deadline.get() - ABORT_SLACK);
        }
        if let Some(guard) = &fail_stop_guard {
            // Grace, abort, and a little for the abort to land; then exit.
            guard.stop_by((abort_at + ABORT_WAIT + FAIL_STOP_SLACK).into_std());
        }
        let stopped = loop {
            tokio::select! {
                joined = &mut handle => break Stopped::Joined(joined),
                end = &mut renewal, if renewing => {
                    renewing = false;
                    match end {
                        RenewEnd::Lost(e) => {
                            warn!(holder = %self.holder, epoch, error = %e, "lease lost while the leader task stops");
                            lease_held = false;
                        }
                        RenewEnd::Deadline => abort_at = abort_at.min(deadline.get() - ABORT_SLACK),
                    }
                }
                () = sleep_until(abort_at) => {
                    handle.abort();
                    break match tokio::time::timeout(ABORT_WAIT, &mut handle).await {
                        Ok(_) => Stopped::Aborted,
                        Err(_) => Stopped::Stuck,
                    };
                }
            }
        };
        match stopped {
            Stopped::Joined(joined) => {
                self.report(epoch, joined, true);
            }
            Stopped::Aborted => {
                error!(holder = %self.holder, epoch, grace = ?grace, "leader task ignored cancellation and was aborted");
            }
            Stopped::Stuck => {
                error!(holder = %self.holder, epoch, "leader task could not be stopped; the lease is left to expire");
                if self.options.fail_stop {
                    fail_stop::exit(epoch, "the leader task could not be aborted");
                }
                self.state.send_replace(Leadership::Follower);
                return Err(Error::TaskNotStopped);
            }
        }
        drop(fail_stop_guard);
        self.finish(lease, epoch, lease_held).await;
        Ok(match stop {
            StopReason::Shutdown => Term::Shutdown,
            // A task that stopped making progress has failed: back off like
            // after an error, so that a healthy instance takes over first.
            StopReason::Stalled => Term::Failed,
            other => Term::SteppedDown(other),
        })
    }

    /// After the task has stopped: follower again, and give the lease back.
    async fn finish(&self, lease: LeaseId, epoch: u64, lease_held: bool) {
        self.state.send_replace(Leadership::Follower);
        if lease_held {
            self.release(lease, self.options.request_timeout).await;
        }
        debug!(holder = %self.holder, epoch, "no longer leader");
    }

    /// Reports how the task ended and says what that means for the campaign.
    fn report(
        &self,
        epoch: u64,
        joined: std::result::Result<Result<(), BoxError>, JoinError>,
        asked_to_stop: bool,
    ) -> Term {
        match joined {
            Ok(Ok(())) => {
                debug!(holder = %self.holder, epoch, asked_to_stop, "leader task finished");
                Term::Finished
            }
            Ok(Err(e)) => {
                error!(holder = %self.holder, epoch, error = %e, "leader task failed");
                Term::Failed
            }
            Err(e) => {
                let what = panic_message(e);
                error!(holder = %self.holder, epoch, panic = %what, "leader task panicked");
                Term::Failed
            }
        }
    }

    async fn release(&self, lease: LeaseId, limit: Duration) {
        match bounded("release", limit, self.store.release(lease)).await {
            Ok(()) => debug!(holder = %self.holder, "released lease"),
            Err(e) => {
                debug!(holder = %self.holder, error = %e, "release failed; the lease will expire");
            }
        }
    }

    /// Renews every `renew_interval` and moves the deadline forward. Returns
    /// when the lease is lost or when `deadline − stop_grace` comes before a
    /// renewal succeeds. Every request is cut at that instant.
    async fn keep_renewing(&self, lease: LeaseId, deadline: &Deadline) -> RenewEnd {
        let lease_duration = self.options.lease_duration;
        let margin = self.options.effective_safety_margin();
        let interval = self.options.effective_renew_interval();
        let grace = self.options.stop_grace;
        let mut next = deadline.get() + margin - lease_duration + interval;
        let mut failures: u32 = 0;
        loop {
            let stop_at = deadline.get() - grace;
            sleep_until(next.min(stop_at)).await;
            let sent = Instant::now();
            if sent >= stop_at {
                return RenewEnd::Deadline;
            }
            let limit = self.options.request_timeout.min(stop_at - sent);
            match bounded("renew", limit, self.store.renew(lease)).await {
                Ok(()) => {
                    deadline.set(sent + lease_duration - margin);
                    next = sent + interval;
                    failures = 0;
                    trace!(holder = %self.holder, "renewed lease");
                }
                Err(e @ Error::LeaseLost(_)) => return RenewEnd::Lost(e),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = backoff(RENEW_RETRY_FIRST, RENEW_RETRY_MAX, failures);
                    warn!(holder = %self.holder, error = %e, failures, retry_in = ?wait, "renew failed");
                    next = Instant::now() + wait;
                }
            }
        }
    }
}

/// Completes when the task has not beaten for `timeout`; never without a timeout.
async fn watchdog(timeout: Option<Duration>, beats: &mut watch::Receiver<u64>) {
    let Some(timeout) = timeout else {
        return std::future::pending().await;
    };
    loop {
        match tokio::time::timeout(timeout, beats.changed()).await {
            Ok(Ok(())) => {}
            // The task is gone; the join branch will see it.
            Ok(Err(_)) => return std::future::pending().await,
            Err(_) => return,
        }
    }
}

/// Runs a storage call with a time limit.
async fn bounded<T>(
    operation: &'static str,
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    if limit.is_zero() {
        return Err(Error::Timeout {
            operation,
            after: limit,
        });
    }
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(Error::Timeout {
            operation,
            after: limit,
        }),
    }
}

fn panic_message(error: JoinError) -> String {
    if !error.is_panic() {
        return error.to_string();
    }
    let payload = error.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

#[cfg(test)]
mod tests;

/// The campaign future can be spawned on a multi-threaded runtime.
#[allow(dead_code)]
fn assert_send() {
    fn is_send<T: Send>(_: &T) {}
    fn check(mutex: &BlobDistributedMutex) {
        is_send(&mutex.run_task_when_mutex_acquired(CancellationToken::new()));
    }
}
