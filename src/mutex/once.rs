//! Run once: campaign, lead one term, run the task once, return its output.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::record::{self, OnceOptions, SkipReason};
use super::{BlobDistributedMutex, MutexObserver, OneCampaign};
use crate::engine::leadership::{LeaderContext, TermReport};
use crate::engine::{Attempts, TaskFn};
use crate::error::{BoxError, Error, Result};
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
    /// [`Error::StateWriteRefused`] and nothing landed), or the write
    /// failed. The next leader will find no record of this success and
    /// run the task again.
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

/// What the run-once task of a term with completion options did.
enum Step<T> {
    Ran(T),
    Unrecorded(T, Error),
    Skipped(SkipReason),
    /// The record could not be read or was not one: the task did not run.
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
    /// As [`run_once_with`](Self::run_once_with).
    ///
    /// # Cancellation safety
    ///
    /// As [`run_once_with`](Self::run_once_with).
    pub async fn run_once(&self, token: CancellationToken) -> Result<OnceOutcome<()>> {
        let task = self.core.task.clone();
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
    /// [`done_key`](OnceOptions::done_key) succeeded, or the last success
    /// is younger than [`at_most_every`](OnceOptions::at_most_every) on
    /// storage's clock), it returns [`OnceOutcome::Skipped`] without
    /// running the task, and logs why at `info`. After the task succeeded,
    /// still in the term, it inspects the lease for storage's clock and
    /// writes the record (the key and that time) under the term's lease;
    /// storage refuses the write once the lease is gone, and the call then
    /// returns [`OnceOutcome::Unrecorded`], never [`OnceOutcome::Ran`]. A
    /// task that failed, or a leader that crashed before the write, leaves
    /// no record: the next call runs the task.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidOption`] for invalid options
    ///   ([`OnceOptions::validate`]).
    /// - [`Error::StateNotARecord`] when the lease's state is something
    ///   else than a completion record: it is left as it is.
    /// - [`Error::Unsupported`] for `at_most_every` on a store that does
    ///   not report storage's clock
    ///   ([`LeaseInfo::storage_time`](crate::LeaseInfo::storage_time)).
    /// - A failed read of the record, and as
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
        let store = &self.core.store;
        if options.records() {
            let state = store.read_state().await?;
            if let Some(reason) = record::skip_reason(&**store, &state, &options).await? {
                info!(lease = %store.name(), %reason, "skipped the task before campaigning");
                return Ok(OnceOutcome::Skipped {
                    reason,
                    report: None,
                });
            }
        }
        let output = Arc::new(Slot::default());
        let observer = MutexObserver::new(&self.core);
        let task = recorded(task, store.clone(), options);
        let led = self
            .core
            .engine(&observer, once_task(task, output.clone()))
            .one_term(&token, Attempts::UntilLed)
            .await?;
        let report = match observer.take_last() {
            Some(report) if led => report,
            _ => return Err(Error::Cancelled),
        };
        let source = match output.take() {
            Some(Ok(step)) => return self.outcome(step, report),
            Some(Err(source)) => Some(source),
            None => None,
        };
        Err(Error::TaskFailed {
            report: Box::new(report),
            source,
        })
    }

    /// What a term's step comes to, logged.
    fn outcome<T>(&self, step: Step<T>, report: TermReport) -> Result<OnceOutcome<T>> {
        let lease = self.core.store.name();
        match step {
            Step::Ran(output) => Ok(OnceOutcome::Ran { output, report }),
            Step::Unrecorded(output, error) => {
                warn!(%lease, epoch = report.epoch, %error, "the task succeeded; its completion record was not written");
                Ok(OnceOutcome::Unrecorded {
                    output,
                    report,
                    error,
                })
            }
            Step::Skipped(reason) => {
                info!(%lease, epoch = report.epoch, %reason, "skipped the task");
                Ok(OnceOutcome::Skipped {
                    reason,
                    report: Some(report),
                })
            }
            Step::Refused(error) => Err(error),
        }
    }
}

/// What the task of [`recorded`] returns.
type StepFuture<T> = Pin<Box<dyn Future<Output = Result<Step<T>, BoxError>> + Send>>;

/// The task of a run-once term with completion `options`: reads the
/// record through the term's fenced state, runs `task` when it is due,
/// and records its success.
fn recorded<S, T, F, Fut, E>(
    task: F,
    store: Arc<S>,
    options: OnceOptions,
) -> impl FnOnce(LeaderContext) -> StepFuture<T> + Send + 'static
where
    S: LeaseStore,
    F: FnOnce(LeaderContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Into<BoxError> + 'static,
{
    move |ctx: LeaderContext| {
        Box::pin(async move {
            if options.records() {
                let skip = match ctx.read_state().await {
                    Ok(state) => record::skip_reason(&*store, &state, &options).await,
                    Err(e) => Err(e),
                };
                match skip {
                    Ok(None) => {}
                    Ok(Some(reason)) => return Ok(Step::Skipped(reason)),
                    Err(e) => return Ok(Step::Refused(e)),
                }
            }
            let output = task(ctx.clone()).await.map_err(Into::into)?;
            if !options.records() {
                return Ok(Step::Ran(output));
            }
            Ok(
                match record::record_success(&*store, &ctx, &options).await {
                    Ok(()) => Step::Ran(output),
                    Err(e) => Step::Unrecorded(output, e),
                },
            )
        })
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
