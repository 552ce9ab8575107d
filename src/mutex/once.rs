//! Run once: campaign, lead one term, run the task once, return its output.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

use super::record::{self, Decision, OnceOptions, Record, SkipReason};
use super::{BlobDistributedMutex, MutexObserver, OneCampaign};
use crate::backoff::{backoff, Jitter};
use crate::bounded::bounded;
use crate::ending::{StopReason, TermReport};
use crate::engine::first_contact;
use crate::engine::leadership::LeaderContext;
use crate::engine::settled::Written;
use crate::engine::{Attempts, TaskFn, ACQUIRE_BACKOFF_MAX};
use crate::error::{BoxError, Chain, Error, Result};
use crate::store::LeaseStore;

/// What a [`run_once`](BlobDistributedMutex::run_once) call did.
#[derive(Debug)]
#[non_exhaustive]
pub enum OnceOutcome<T> {
    /// This instance led one term and its task returned `output`. The
    /// report says how the term ended: a task that returned after its
    /// token was cancelled (the lease was lost, the deadline came) still
    /// returned its output, and the report's reason says why it was asked
    /// to stop. With [`OnceOptions`] that keep a record, the record of
    /// this success was written under the term's lease.
    Ran {
        /// What the task returned.
        output: T,
        /// How the term ended.
        report: TermReport,
    },
    /// The task succeeded but its completion record was not written: the
    /// lease was lost before the write (`error` is then
    /// [`Error::StateWriteRefused`] and nothing landed), the write failed,
    /// or the term ended while the write was out (`error` is then
    /// [`Error::LeaseLost`], and the report's reason says why the term
    /// ended; a write sent before the lease was lost may still have
    /// landed). The next leader will then most likely find no record of
    /// this success and run the task again.
    Unrecorded {
        /// What the task returned.
        output: T,
        /// How the term ended.
        report: TermReport,
        /// Why the record was not written.
        error: Error,
    },
    /// The completion record said the task was not due, and it did not
    /// run. `report` is the term's when this instance led to look (the
    /// term ended as soon as it had read the record); `None` when the
    /// record, read before campaigning, already said so.
    Skipped {
        /// What the record said.
        reason: SkipReason,
        /// The term led to read the record, if one was.
        report: Option<TermReport>,
    },
}

/// What the run-once task of a term did; its output, when it returned
/// one, is in the term's [`Kept`].
enum Step {
    Ran,
    Unrecorded(Error),
    /// The record's write may have landed: its answer was lost with the
    /// lease. A read after the term tells (`key` and `at`, as written).
    Unconfirmed {
        error: Error,
        key: Option<String>,
        at: Option<u64>,
    },
    Skipped(SkipReason),
    /// The record could not be read, was not one or could not keep the
    /// key: the task did not run.
    Refused(Error),
}

impl<S: LeaseStore> BlobDistributedMutex<S> {
    /// Campaigns until this instance leads, leads one term, runs the task
    /// given at construction once, and returns when that term is over (its
    /// task stopped, the end reported, the lease released): the shape of a
    /// job that must run on one instance and then stop, such as a migration
    /// at deploy time. [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired)
    /// campaigns again after each term instead. See
    /// [`run_once_with`](Self::run_once_with) for the details.
    ///
    /// # Errors
    ///
    /// As [`run_once_with`](Self::run_once_with); [`Error::InvalidOption`]
    /// naming `task`, at once, on a mutex made for guards
    /// ([`for_guards`](BlobDistributedMutex::for_guards)), which has no
    /// task.
    ///
    /// # Cancellation safety
    ///
    /// As [`run_once_with`](Self::run_once_with).
    pub async fn run_once(&self, token: CancellationToken) -> Result<OnceOutcome<()>> {
        let task = self.core.task()?;
        self.run_once_with(token, move |ctx| task(ctx)).await
    }

    /// As [`run_once_with_options`](Self::run_once_with_options) with no
    /// completion record: campaigns until this instance leads, leads one
    /// term that runs `task` once, and returns the task's output with the term's [`TermReport`]
    /// once the term is over. The term is the engine's own: stamped with
    /// its epoch, renewed, stopped before the local deadline, shown by
    /// [`watch`](Self::watch) and reported by
    /// [`term_reports`](Self::term_reports) like every term of
    /// [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired).
    ///
    /// The task is called with the term's [`LeaderContext`] and must stop
    /// soon after its token is cancelled, as any leader task.
    ///
    /// # Errors
    ///
    /// - [`Error::TaskFailed`] when the task returned an error (its
    ///   `source`), panicked or was aborted: the term is over and the
    ///   report in the error says how.
    /// - [`Error::Cancelled`] when `token` was cancelled before this
    ///   instance led.
    /// - As [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired):
    ///   a fatal error, [`Error::TaskNotStopped`],
    ///   [`Error::AlreadyCampaigning`], and with
    ///   [`MutexOptions::acquire_timeout`](crate::MutexOptions::acquire_timeout)
    ///   [`Error::NotAcquired`].
    ///
    /// # Cancellation safety
    ///
    /// As [`run_task_when_mutex_acquired`](Self::run_task_when_mutex_acquired):
    /// cancel through `token` for a clean stop; a dropped future aborts the
    /// task and leaves the lease to expire, and the term is still reported.
    pub async fn run_once_with<T, F, Fut, E>(
        &self,
        token: CancellationToken,
        task: F,
    ) -> Result<OnceOutcome<T>>
    where
        F: FnOnce(LeaderContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.run_once_with_options(token, OnceOptions::default(), task)
            .await
    }

    /// As [`run_once_with`](Self::run_once_with), keeping a completion
    /// record in the lease's fenced state when `options` ask for one (see
    /// the guide's [Choosing a shape](crate::guide::shapes)).
    ///
    /// Before it campaigns, and again in its term before the task, it reads
    /// the record; when the record says the task is not due (the
    /// [`done_key`](OnceOptions::done_key) succeeded, or the last
    /// successful run started less than
    /// [`at_most_every`](OnceOptions::at_most_every) ago on storage's
    /// clock), it returns [`OnceOutcome::Skipped`] without running the
    /// task, and logs why at `info`. A read before campaigning that fails
    /// in a way that may pass (see [`Error::is_transient`]) is tried again
    /// within the campaign's own limits, counted from the call's start:
    /// [`first_contact_timeout`](crate::MutexOptions::first_contact_timeout)
    /// while storage has never answered this mutex, and
    /// [`acquire_timeout`](crate::MutexOptions::acquire_timeout). In the
    /// term, just before the task, it inspects the lease for storage's
    /// clock: that is the run's start. After the task succeeded, still in
    /// the term, it writes the record (every key recorded so far with this
    /// one, and the run's start) under the term's lease; storage refuses
    /// the write once the lease is gone, and the call then returns
    /// [`OnceOutcome::Unrecorded`] with the task's output, never
    /// [`OnceOutcome::Ran`]. A task that failed, or a leader that crashed
    /// before the write, leaves no record: the next call runs the task.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidOption`] for invalid options
    ///   ([`OnceOptions::validate`]).
    /// - [`Error::StateNotARecord`] when the lease's state is something
    ///   else than a completion record: it is left as it is.
    /// - [`Error::RecordFull`] when the record could not keep the
    ///   [`done_key`](OnceOptions::done_key): the task did not run.
    /// - [`Error::Unsupported`] for `at_most_every` on a store that does
    ///   not report storage's clock
    ///   ([`LeaseInfo::storage_time`](crate::store::LeaseInfo::storage_time)).
    /// - [`Error::FirstContactFailed`] when storage never answered the
    ///   reads before campaigning within the first-contact timeout; another
    ///   failed read of the record; and as
    ///   [`run_once_with`](Self::run_once_with).
    ///
    /// # Cancellation safety
    ///
    /// As [`run_once_with`](Self::run_once_with); a dropped call writes no
    /// record.
    pub async fn run_once_with_options<T, F, Fut, E>(
        &self,
        token: CancellationToken,
        options: OnceOptions,
        task: F,
    ) -> Result<OnceOutcome<T>>
    where
        F: FnOnce(LeaderContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<BoxError> + 'static,
    {
        options.validate()?;
        let _one = OneCampaign::enter(&self.core)?;
        let started = Instant::now();
        if options.records() {
            // In the span of the lease, as the campaign's own events are.
            let span =
                info_span!("lease", lease = %self.core.store.name(), holder = %self.core.holder);
            let read = self.before_campaigning(&token, &options, started);
            if let Some(reason) = read.instrument(span.clone()).await? {
                span.in_scope(|| info!(%reason, "skipped the task before campaigning"));
                return Ok(OnceOutcome::Skipped {
                    reason,
                    report: None,
                });
            }
        }
        let steps = Arc::new(Slot::default());
        let kept = Arc::new(Kept::default());
        let observer = MutexObserver::new(&self.core);
        let limit = self.core.options.request_timeout;
        let task = recorded(task, self.core.store.clone(), options, limit, kept.clone());
        let led = self
            .core
            .engine(&observer, once_task(task, steps.clone()))
            .one_term(&token, Attempts::UntilLed, started)
            .await?;
        let report = match observer.take_last() {
            Some(report) if led => report,
            _ => return Err(Error::Cancelled),
        };
        let (output, writing) = kept.take();
        let source = match (steps.take(), output) {
            (Some(Ok(step)), output) => {
                let step = self.confirmed(step).await;
                return self.outcome(step, output, report);
            }
            // The term ended while the record was being written: the task
            // was aborted after its output was kept. A read tells whether
            // the write landed.
            (None, Some(output)) => {
                let error = cut_off(report.reason);
                let step = match writing {
                    Some((key, at)) => self.confirmed(Step::Unconfirmed { error, key, at }).await,
                    None => Step::Unrecorded(error),
                };
                return self.outcome(step, Some(output), report);
            }
            (Some(Err(source)), _) => Some(source),
            (None, None) => None,
        };
        Err(Error::TaskFailed {
            report: Box::new(report),
            source,
        })
    }

    /// Reads the record before campaigning: whether it says to skip the
    /// task. A transient failure is tried again, with the campaign's
    /// back-off and jitter, until the limits of a campaign that began at
    /// `started`.
    async fn before_campaigning(
        &self,
        token: &CancellationToken,
        options: &OnceOptions,
        started: Instant,
    ) -> Result<Option<SkipReason>> {
        let core = &self.core;
        let first_contact = core.options.first_contact_timeout;
        let contact_by = core.contact.give_up_at(started, first_contact);
        let give_up_at = core.options.acquire_timeout.map(|t| started + t);
        let retry = core.options.acquire_retry;
        let mut jitter = Jitter::new(core.options.jitter_seed, core.options.acquire_jitter);
        let mut failures: u32 = 0;
        loop {
            let read = tokio::select! {
                () = token.cancelled() => return Err(Error::Cancelled),
                read = self.read_record(options) => read,
            };
            let error = match read {
                Ok(Decision::Skip(reason)) => return Ok(Some(reason)),
                Ok(Decision::Due(_)) => return Ok(None),
                Err(e) if !e.is_transient() => return Err(e),
                Err(e) => e,
            };
            let now = Instant::now();
            if contact_by.is_some_and(|by| now >= by) {
                let after = first_contact.unwrap_or_default();
                return Err(first_contact::failed(core.store.name(), after, error));
            }
            if give_up_at.is_some_and(|at| now >= at) {
                return Err(error);
            }
            failures = failures.saturating_add(1);
            let wait = [contact_by, give_up_at]
                .into_iter()
                .flatten()
                .map(|by| by - now)
                .fold(
                    jitter.apply(backoff(retry, retry.max(ACQUIRE_BACKOFF_MAX), failures)),
                    Duration::min,
                );
            warn!(error = %Chain(&error), failures, retry_in = ?wait, "reading the completion record failed");
            tokio::select! {
                () = token.cancelled() => return Err(Error::Cancelled),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// A success whose record's answer was lost, told by a read of the
    /// record after the term: ran when it holds the success, unrecorded
    /// when it does not or cannot be read.
    async fn confirmed(&self, step: Step) -> Step {
        let Step::Unconfirmed { error, key, at } = step else {
            return step;
        };
        let store = &*self.core.store;
        let limit = self.core.options.request_timeout;
        match bounded("read state", limit, store.read_state()).await {
            Ok(state) => match Record::parse(&store.name(), &state) {
                Ok(Some(record)) if record.has_success(key.as_deref(), at) => Step::Ran,
                _ => Step::Unrecorded(error),
            },
            Err(read) => {
                warn!(error = %Chain(&read), "the completion record's write may have landed, and reading it back failed: counted as not written");
                Step::Unrecorded(error)
            }
        }
    }

    /// One read of the record, and storage's clock when the options need it.
    async fn read_record(&self, options: &OnceOptions) -> Result<Decision> {
        let store = &*self.core.store;
        let limit = self.core.options.request_timeout;
        let state = bounded("read state", limit, store.read_state()).await?;
        let now = match options.at_most_every {
            Some(_) => bounded("inspect", limit, record::storage_time(store)).await?,
            None => None,
        };
        record::decide(&store.name(), &state, options, now)
    }

    /// What a term's step comes to, with the task's output if it
    /// returned one, logged.
    fn outcome<T>(
        &self,
        step: Step,
        output: Option<T>,
        report: TermReport,
    ) -> Result<OnceOutcome<T>> {
        let lease = self.core.store.name();
        match (step, output) {
            (Step::Ran, Some(output)) => Ok(OnceOutcome::Ran { output, report }),
            (Step::Unrecorded(error), Some(output)) => {
                warn!(%lease, epoch = report.epoch, %error, "the task succeeded; its completion record was not written");
                Ok(OnceOutcome::Unrecorded {
                    output,
                    report,
                    error,
                })
            }
            (Step::Skipped(reason), _) => {
                info!(%lease, epoch = report.epoch, %reason, "skipped the task");
                Ok(OnceOutcome::Skipped {
                    reason,
                    report: Some(report),
                })
            }
            (Step::Refused(error), _) => Err(error),
            // A step that ran with no output kept: not made by `recorded`.
            (Step::Unconfirmed { error, .. }, Some(output)) => {
                warn!(%lease, epoch = report.epoch, %error, "the task succeeded; its completion record was not written");
                Ok(OnceOutcome::Unrecorded {
                    output,
                    report,
                    error,
                })
            }
            (Step::Ran | Step::Unrecorded(_) | Step::Unconfirmed { .. }, None) => {
                Err(Error::TaskFailed {
                    report: Box::new(report),
                    source: None,
                })
            }
        }
    }
}

/// The error of a record whose write the end of the term cut off.
fn cut_off(reason: StopReason) -> Error {
    Error::LeaseLost(format!(
        "the term ended ({reason}) while the completion record was being written; the write \
         was abandoned, and landed only if storage took it before the lease was lost"
    ))
}

/// What the task of [`recorded`] returns.
type StepFuture = Pin<Box<dyn Future<Output = Result<Step, BoxError>> + Send>>;

/// The task of a run-once term: with completion `options`, reads the
/// record and storage's clock through the term, runs `task` when it is
/// due, keeps its output in `kept` and records its success. The output is
/// kept before the record is written, so that a term that ends during the
/// write still returns it.
fn recorded<S, T, F, Fut, E>(
    task: F,
    store: Arc<S>,
    options: OnceOptions,
    limit: Duration,
    kept: Arc<Kept<T>>,
) -> impl FnOnce(LeaderContext) -> StepFuture + Send + 'static
where
    S: LeaseStore,
    F: FnOnce(LeaderContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Into<BoxError> + 'static,
{
    move |ctx: LeaderContext| {
        Box::pin(async move {
            if !options.records() {
                kept.put(task(ctx).await.map_err(Into::into)?);
                return Ok(Step::Ran);
            }
            let (record, started) = match due(&*store, &ctx, &options, limit).await {
                Ok(Due::Run(record, started)) => (record, started),
                Ok(Due::Skip(reason)) => return Ok(Step::Skipped(reason)),
                Err(e) => return Ok(Step::Refused(e)),
            };
            kept.put(task(ctx.clone()).await.map_err(Into::into)?);
            let key = options.done_key.clone();
            let record = record.after_success(key.as_deref(), started);
            kept.writing((key.clone(), started));
            // Tried again while the lease is held, as the schedule's are.
            Ok(match ctx.write_state_settled(&record.to_bytes()).await {
                Ok(Written::Landed) => Step::Ran,
                Ok(Written::Refused(e)) | Err(e) => Step::Unrecorded(e),
                Ok(Written::Unknown(error)) => Step::Unconfirmed {
                    error,
                    key,
                    at: started,
                },
            })
        })
    }
}

/// What the record read in the term says.
enum Due {
    /// Run the task: the record as read, and the run's start (storage's
    /// clock, in Unix seconds, when the store reports it).
    Run(Record, Option<u64>),
    Skip(SkipReason),
}

/// Reads the record and storage's clock in the term, just before the
/// task, each call within `limit`. A transient failure is tried again,
/// with the campaign's back-off, until the term must end.
async fn due<S: LeaseStore>(
    store: &S,
    ctx: &LeaderContext,
    options: &OnceOptions,
    limit: Duration,
) -> Result<Due> {
    let mut failures: u32 = 0;
    loop {
        let error = match due_once(store, ctx, options, limit).await {
            Err(e) if e.is_transient() && !ctx.is_cancelled() => e,
            other => return other,
        };
        failures = failures.saturating_add(1);
        let wait = backoff(Duration::from_millis(500), ACQUIRE_BACKOFF_MAX, failures);
        warn!(error = %Chain(&error), failures, retry_in = ?wait, "reading the completion record in the term failed");
        tokio::select! {
            _ = ctx.cancelled() => return Err(error),
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// One read of the record and of storage's clock in the term.
async fn due_once<S: LeaseStore>(
    store: &S,
    ctx: &LeaderContext,
    options: &OnceOptions,
    limit: Duration,
) -> Result<Due> {
    let state = ctx.read_state().await?;
    let now = bounded("inspect", limit, record::storage_time(store)).await?;
    if now.is_none() && options.at_most_every.is_some() {
        return Err(record::no_clock());
    }
    Ok(match record::decide(&store.name(), &state, options, now)? {
        Decision::Skip(reason) => Due::Skip(reason),
        Decision::Due(record) => Due::Run(record, now.map(record::unix_seconds)),
    })
}

/// The success a completion record's write records: its key and start.
type Success = (Option<String>, Option<u64>);

/// Where the task of a run-once term keeps its output, before its record
/// is written, and the success that record is to hold once its write
/// began (a term that ends during the write tells by reading it back).
struct Kept<T>(Mutex<(Option<T>, Option<Success>)>);

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept(Mutex::new((None, None)))
    }
}

impl<T> Kept<T> {
    fn put(&self, output: T) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).0 = Some(output);
    }

    fn writing(&self, success: Success) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).1 = Some(success);
    }

    fn take(&self) -> (Option<T>, Option<Success>) {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Where the task of a run-once term leaves what it returned.
pub(crate) struct Slot<T>(Mutex<Option<Result<T, BoxError>>>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(Mutex::new(None))
    }
}

impl<T> Slot<T> {
    fn put(&self, value: Result<T, BoxError>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
    }

    pub(crate) fn take(&self) -> Option<Result<T, BoxError>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// The engine's task for a term that runs `task` once: it leaves the
/// output (or the error itself) in `slot`, and fails the term with the
/// error's text when there is one.
pub(crate) fn once_task<T, F, Fut, E>(task: F, slot: Arc<Slot<T>>) -> Arc<TaskFn>
where
    F: FnOnce(LeaderContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Into<BoxError> + 'static,
{
    let task = Mutex::new(Some(task));
    Arc::new(move |ctx| {
        let task = task.lock().unwrap_or_else(PoisonError::into_inner).take();
        let slot = slot.clone();
        Box::pin(async move {
            let Some(task) = task else {
                return Err("a run-once task was started a second time".into());
            };
            match task(ctx).await {
                Ok(output) => {
                    slot.put(Ok(output));
                    Ok(())
                }
                Err(e) => {
                    let e: BoxError = e.into();
                    let text = crate::error::Chain(&*e).to_string();
                    slot.put(Err(e));
                    Err(text.into())
                }
            }
        })
    })
}
