//! Run once: campaign, lead one term, run the task once, return its output.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

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
    /// to stop.
    Ran {
        /// What the task returned.
        output: T,
        /// How the term ended.
        report: TermReport,
    },
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

    /// Campaigns until this instance leads, leads one term that runs `task`
    /// once, and returns the task's output with the term's [`TermReport`]
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
        let _one = OneCampaign::enter(&self.core)?;
        let output = Arc::new(Slot::default());
        let observer = MutexObserver::new(&self.core);
        let led = self
            .core
            .engine(&observer, once_task(task, output.clone()))
            .one_term(&token, Attempts::UntilLed)
            .await?;
        let report = match observer.take_last() {
            Some(report) if led => report,
            _ => return Err(Error::Cancelled),
        };
        match output.take() {
            Some(Ok(output)) => Ok(OnceOutcome::Ran { output, report }),
            Some(Err(source)) => Err(Error::TaskFailed {
                report: Box::new(report),
                source: Some(source),
            }),
            None => Err(Error::TaskFailed {
                report: Box::new(report),
                source: None,
            }),
        }
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
