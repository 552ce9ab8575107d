//! The work of one term: the leader task and the sub-tasks it spawns through
//! its context. All of it is tracked, so that the lease is released only once
//! every piece has ended, and all of it is aborted when the term is dropped.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, Instrument};

use crate::ending::StopReason;
use crate::error::{BoxError, Chain};

/// How one piece of a term's work ended by itself.
#[derive(Debug)]
pub(crate) enum Ended {
    Returned,
    Failed(String),
    Panicked(String),
}

impl Ended {
    /// The reason a term ends when its leader task ended so.
    pub(crate) fn reason(&self) -> StopReason {
        match self {
            Ended::Returned => StopReason::Finished,
            Ended::Failed(_) => StopReason::Failed,
            Ended::Panicked(_) => StopReason::Panicked,
        }
    }

    pub(crate) fn failure(self) -> Option<String> {
        match self {
            Ended::Returned => None,
            Ended::Failed(message) | Ended::Panicked(message) => Some(message),
        }
    }
}

/// The first sub-task failure of a term.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) reason: StopReason,
    pub(crate) message: String,
}

/// Every task a term runs. Dropping it cancels the term's token and aborts
/// every task that is still running: whatever drops the term (a dropped
/// campaign future, a runtime that shuts down) stops its work.
pub(crate) struct TermTasks {
    shared: Arc<Shared>,
}

/// What the term and the contexts that spawn into it share.
pub(crate) struct Shared {
    epoch: u64,
    token: CancellationToken,
    tracker: TaskTracker,
    /// Cancelled on the first sub-task failure.
    failed: CancellationToken,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    aborts: Vec<AbortHandle>,
    failure: Option<Failure>,
    /// The term's work has ended: nothing more may start.
    over: bool,
}

impl TermTasks {
    pub(crate) fn new(epoch: u64, token: CancellationToken) -> Self {
        TermTasks {
            shared: Arc::new(Shared {
                epoch,
                token,
                tracker: TaskTracker::new(),
                failed: CancellationToken::new(),
                inner: Mutex::new(Inner::default()),
            }),
        }
    }

    /// What a [`LeaderContext`](crate::LeaderContext) holds to spawn sub-tasks.
    pub(crate) fn spawner(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Starts the leader task; its handle tells how it ended.
    pub(crate) fn spawn_leader<F>(&self, task: F) -> JoinHandle<Ended>
    where
        F: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.shared.start(classify(task))
    }

    /// A check for the fail-stop thread: whether every task has ended.
    pub(crate) fn done_check(&self) -> impl Fn() -> bool + Send + 'static {
        let tracker = self.shared.tracker.clone();
        move || tracker.is_empty()
    }

    /// Completes on the first sub-task failure.
    pub(crate) async fn failed(&self) -> Failure {
        self.shared.failed.cancelled().await;
        self.shared
            .lock()
            .failure
            .clone()
            .unwrap_or_else(|| Failure {
                reason: StopReason::Failed,
                message: String::new(),
            })
    }

    /// The first sub-task failure, if any.
    pub(crate) fn failure(&self) -> Option<Failure> {
        self.shared.lock().failure.clone()
    }

    /// Completes once every task has ended; then no new one may start.
    ///
    /// Cancellation safe.
    pub(crate) async fn all_ended(&self) {
        self.shared.tracker.close();
        loop {
            self.shared.tracker.wait().await;
            let mut inner = self.shared.lock();
            inner.over = true;
            if self.shared.tracker.is_empty() {
                return;
            }
        }
    }

    /// Whether every task has ended.
    pub(crate) fn all_done(&self) -> bool {
        self.shared.tracker.is_empty()
    }

    /// The tracker of the term's tasks, to wait for them after the term.
    pub(crate) fn tracker(&self) -> TaskTracker {
        self.shared.tracker.clone()
    }

    /// Cancels the term's token and aborts every task still running: what
    /// dropping the term does.
    pub(crate) fn stop_now(&self) {
        self.shared.token.cancel();
        self.abort_all();
    }

    /// Aborts every task still running.
    pub(crate) fn abort_all(&self) {
        let mut inner = self.shared.lock();
        inner.over = true;
        for task in inner.aborts.drain(..) {
            task.abort();
        }
    }
}

impl Drop for TermTasks {
    fn drop(&mut self) {
        self.stop_now();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts `future` as a tracked, abortable task of the term, unless the
    /// term's work is over already.
    fn start<F, T>(&self, future: F) -> JoinHandle<T>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let mut inner = self.lock();
        if inner.over {
            drop(inner);
            error!(
                epoch = self.epoch,
                "a sub-task was spawned after its term ended; it was not started"
            );
            let handle = tokio::spawn(std::future::pending::<T>());
            handle.abort();
            return handle;
        }
        // In the span current where it is spawned: the term's for the
        // leader task, the caller's for a sub-task.
        let handle = self.tracker.spawn(future.in_current_span());
        inner.aborts.retain(|task| !task.is_finished());
        inner.aborts.push(handle.abort_handle());
        handle
    }

    /// Starts a sub-task; its failure ends the term.
    pub(crate) fn spawn_sub_task<F>(self: &Arc<Self>, task: F) -> JoinHandle<()>
    where
        F: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        let shared = self.clone();
        self.start(async move {
            let ended = classify(task).await;
            let message = match &ended {
                Ended::Returned => return,
                Ended::Failed(message) | Ended::Panicked(message) => message.clone(),
            };
            let mut inner = shared.lock();
            if inner.failure.is_none() {
                inner.failure = Some(Failure {
                    reason: ended.reason(),
                    message,
                });
                shared.failed.cancel();
            }
        })
    }
}

/// Runs a task to its end and says how it ended, panics included.
async fn classify<F>(task: F) -> Ended
where
    F: Future<Output = Result<(), BoxError>> + Send,
{
    match (CatchUnwind(Box::pin(task))).await {
        Ok(Ok(())) => Ended::Returned,
        Ok(Err(e)) => Ended::Failed(Chain(&*e).to_string()),
        Err(payload) => Ended::Panicked(panic_message(&*payload)),
    }
}

/// The text of a panic's payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

/// A future that turns a panic while polling into an error.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}
