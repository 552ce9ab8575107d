//! What the leader task is given, and how leadership is observed.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ending::{StopReason, TermReport};
use crate::engine::state::TermState;
use crate::engine::term_tasks::Shared as TermShared;
use crate::error::{BoxError, Result};
use crate::options::{OWN_STOP, STOP_SLACK};
use crate::store::LeaseId;

/// The state of one [`BlobDistributedMutex`](crate::BlobDistributedMutex), as
/// seen through [`BlobDistributedMutex::watch`](crate::BlobDistributedMutex::watch).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leadership {
    /// Campaigning, or waiting for the current leader's lease to end.
    Follower,
    /// This instance holds the lease and its leader task runs.
    Leader {
        /// The fencing token of this term (see [`LeaderContext::epoch`]).
        epoch: u64,
    },
    /// A term has ended as the report says: every task of the term has
    /// stopped (unless the report says [`TaskStop::Stuck`](crate::term::TaskStop::Stuck)). Campaigning
    /// again, or about to stop.
    Ended(TermReport),
    /// `run_task_when_mutex_acquired` has returned.
    Stopped,
}

impl Leadership {
    /// The epoch if this instance leads.
    #[must_use]
    pub fn epoch(&self) -> Option<u64> {
        match self {
            Leadership::Leader { epoch } => Some(*epoch),
            _ => None,
        }
    }
}

/// What a leader task is given: its term's fencing token, this instance's
/// name, the cancellation token it must obey, and a heartbeat.
///
/// The task must return soon after [`LeaderContext::cancelled`] completes;
/// after [`MutexOptions::stop_grace`](crate::MutexOptions::stop_grace) it is aborted.
#[derive(Clone)]
pub struct LeaderContext {
    pub(crate) epoch: u64,
    pub(crate) holder: Arc<str>,
    pub(crate) token: CancellationToken,
    pub(crate) reason: Arc<OnceLock<StopReason>>,
    pub(crate) heartbeat: Heartbeat,
    pub(crate) deadline: watch::Receiver<Instant>,
    /// When the engine aborts the term's tasks, once it has told them to
    /// stop (see [`before_abort`](Self::before_abort)).
    pub(crate) abort_at: watch::Receiver<Option<Instant>>,
    pub(crate) tasks: Arc<TermShared>,
    pub(crate) state: Arc<dyn TermState>,
}

impl LeaderContext {
    /// The fencing token of this term: it strictly increases from one leader
    /// of the blob to the next, as long as only this crate writes the blob
    /// (a foreign Put Blob replaces the metadata that holds it). Pass it with every write the task makes and
    /// have the downstream system refuse writes with a smaller epoch than it
    /// has seen; that is the only protection against a leader that was
    /// paused (GC, VM freeze) past its lease and acts late.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This instance's holder name, as written to the blob.
    #[must_use]
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Starts a sub-task that belongs to this term.
    ///
    /// A sub-task is stopped like the leader task: when the term ends, its
    /// token (this context's) is cancelled, it gets the same
    /// [`stop_grace`](crate::MutexOptions::stop_grace), then it is aborted,
    /// and the lease is released only once every sub-task has ended. A
    /// sub-task that returns an error or panics ends the term like a failed
    /// leader task (the report carries its message and the term's epoch).
    ///
    /// The term is the leader task: when the leader task returns, the term
    /// ends and its sub-tasks are cancelled. Await them in the leader task
    /// (through the returned handle) if they must finish first. A sub-task
    /// spawned after its term ended is not started: the returned handle
    /// completes at once as cancelled, and an error is logged.
    ///
    /// Spawn with `tokio::spawn` only work that may outlive the lease.
    pub fn spawn<F, E>(&self, task: F) -> JoinHandle<()>
    where
        F: std::future::Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.tasks
            .spawn_sub_task(async move { task.await.map_err(Into::into) })
    }

    /// The token cancelled when the task must stop; give clones of it (or of
    /// this context) to the sub-tasks started with [`spawn`](Self::spawn).
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Whether the task has been asked to stop.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Whether this term may still act: the task has not been asked to stop
    /// and the term's [`deadline`](Self::deadline) has not passed. Check it
    /// right before each unit of work: a process that was frozen (a VM
    /// paused, a long GC, SIGSTOP) wakes up with its timers and its
    /// cancellation ready at once, and this says `false` before the mutex
    /// has had a chance to cancel the task.
    #[must_use]
    pub fn is_current(&self) -> bool {
        !self.token.is_cancelled() && Instant::now() < *self.deadline.borrow()
    }

    /// Why the task was asked to stop, once it has been.
    #[must_use]
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.reason.get().copied()
    }

    /// Completes when the task must stop, with the reason: when its token is
    /// cancelled, or at the latest when the term's deadline passes (then
    /// with [`StopReason::Deadline`] if the mutex has not said otherwise).
    ///
    /// It is ready at its first poll when either has happened already, so
    /// a `tokio::select!` with `biased;` and this branch first never starts
    /// a unit of work after a wake past the deadline:
    ///
    /// ```no_run
    /// # async fn lead(ctx: blob_mutex::LeaderContext) -> Result<(), blob_mutex::Error> {
    /// use std::time::Duration;
    ///
    /// loop {
    ///     tokio::select! {
    ///         biased;
    ///         _ = ctx.cancelled() => return Ok(()),
    ///         () = tokio::time::sleep(Duration::from_secs(1)) => {
    ///             if !ctx.is_current() {
    ///                 return Ok(());
    ///             }
    ///             // One unit of work, written with ctx.epoch().
    ///         }
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: it only waits.
    pub async fn cancelled(&self) -> StopReason {
        let mut deadline = self.deadline.clone();
        loop {
            let at = *deadline.borrow_and_update();
            if self.token.is_cancelled() {
                break;
            }
            if Instant::now() >= at {
                return self.stop_reason().unwrap_or(StopReason::Deadline);
            }
            tokio::select! {
                biased;
                () = self.token.cancelled() => break,
                () = tokio::time::sleep_until(at) => {}
                changed = deadline.changed() => {
                    if changed.is_err() {
                        // The term is over: its token is cancelled already
                        // or is about to be.
                        self.token.cancelled().await;
                        break;
                    }
                }
            }
        }
        self.stop_reason().unwrap_or(StopReason::Shutdown)
    }

    /// Completes [`OWN_STOP`] before the engine would abort the term's
    /// tasks: the deadline's abort (`deadline − STOP_SLACK`, later with each
    /// renewal) or, once the term stops, the end of its grace, whichever
    /// comes first. The crate's own requests in a term race it, so that a
    /// task cut off by an outage returns by itself and says what it left,
    /// rather than being aborted mid-request.
    pub(crate) async fn before_abort(&self) {
        let (mut deadline, mut told) = (self.deadline.clone(), self.abort_at.clone());
        loop {
            let latest = deadline.borrow_and_update().checked_sub(STOP_SLACK);
            let told_at = *told.borrow_and_update();
            let at = latest
                .map(|latest| told_at.map_or(latest, |told| told.min(latest)))
                .and_then(|at| at.checked_sub(OWN_STOP));
            // Before the clock's first instant: the abort is due now.
            let Some(at) = at else {
                return;
            };
            tokio::select! {
                () = tokio::time::sleep_until(at) => return,
                Ok(()) = deadline.changed() => {}
                Ok(()) = told.changed() => {}
            }
        }
    }

    /// The term's current deadline: the instant by which the task must have
    /// stopped (see [`MutexOptions`](crate::MutexOptions#the-deadline)). It
    /// moves forward with each successful renewal and never moves back.
    /// The mutex stops the task before it on its own; this is for work that
    /// outlives the task's process, such as a child process that must be
    /// killed at the deadline even if this process freezes.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    /// A receiver that sees every move of [`deadline`](Self::deadline).
    #[must_use]
    pub fn watch_deadline(&self) -> watch::Receiver<Instant> {
        self.deadline.clone()
    }

    /// The task's heartbeat handle (see [`MutexOptions::heartbeat_timeout`](crate::MutexOptions::heartbeat_timeout)).
    #[must_use]
    pub fn heartbeat(&self) -> &Heartbeat {
        &self.heartbeat
    }

    /// The leader state: the bytes the last leader wrote with
    /// [`write_state`](Self::write_state) (a checkpoint, an offset, the time
    /// of the last run), kept in the lease blob itself. Empty when no leader
    /// has written yet; content the blob had before the first election is
    /// kept until a leader writes.
    ///
    /// Reads are not fenced: they need no lease. Within a term, no other
    /// leader's write can land while this term's lease is held, so what this
    /// term read stays the state until this term writes.
    ///
    /// # Errors
    ///
    /// The kinds of [`Error`](crate::Error) for a failed storage call;
    /// [`Error::Timeout`](crate::Error::Timeout) when the call did not finish
    /// within the request timeout or before the term's deadline.
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: it only reads.
    pub async fn read_state(&self) -> Result<Vec<u8>> {
        self.state.read().await
    }

    /// Replaces the leader state with `state`, fenced by storage: the write
    /// carries this term's lease id, and storage lands it only while that
    /// lease holds the blob. The term's metadata (`holder`, `epoch`,
    /// `acquired_at`, and any other) is kept.
    ///
    /// This is the protection a downstream epoch check gives, without the
    /// downstream system: a leader that was paused past its lease and writes
    /// late is refused by storage itself. It covers this one blob and only
    /// writes made through this call (or `blob-mutex state put`).
    ///
    /// A checkpoint that a new leader resumes from:
    ///
    /// ```no_run
    /// use blob_mutex::{Error, LeaderContext};
    ///
    /// async fn lead(ctx: LeaderContext) -> Result<(), Error> {
    ///     // Resume where the last leader stopped (empty: start from 0).
    ///     let state = ctx.read_state().await?;
    ///     let mut offset: u64 = std::str::from_utf8(&state)
    ///         .ok()
    ///         .and_then(|s| s.trim().parse().ok())
    ///         .unwrap_or(0);
    ///     while !ctx.is_cancelled() {
    ///         offset += 1; // process one item
    ///         match ctx.write_state(offset.to_string()).await {
    ///             Ok(()) => {}
    ///             // The lease is gone: another leader owns the checkpoint now.
    ///             Err(Error::StateWriteRefused(_)) => return Ok(()),
    ///             Err(e) => return Err(e),
    ///         }
    ///     }
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::StateWriteRefused`](crate::Error::StateWriteRefused) when
    ///   storage refused the lease id (the lease expired, was broken,
    ///   released or passed on), or the term's deadline has passed: nothing
    ///   was written, and nothing ever will be under this term. Stop.
    /// - [`Error::InvalidOption`](crate::Error::InvalidOption) for state
    ///   longer than [`MAX_STATE_LEN`](crate::store::MAX_STATE_LEN) (4 MiB).
    /// - [`Error::Timeout`](crate::Error::Timeout) and the other kinds of a
    ///   failed storage call: the write may or may not have landed (and if
    ///   it did, it was under this term's lease).
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: a dropped write may or may not have landed.
    pub async fn write_state(&self, state: impl AsRef<[u8]>) -> Result<()> {
        self.state.write(state.as_ref()).await
    }

    /// This term's lease id, for a process of this leader's own that writes
    /// the state on its behalf (the `blob-mutex` CLI passes it to its
    /// command). Whoever has it can write the state, release the lease and
    /// change it: never log it or hand it outside this leader.
    #[must_use]
    pub fn lease_id(&self) -> LeaseId {
        self.state.lease_id()
    }
}

impl fmt::Debug for LeaderContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderContext")
            .field("epoch", &self.epoch)
            .field("holder", &self.holder)
            .field("cancelled", &self.token.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// Proof of progress from a leader task. Call [`Heartbeat::beat`] whenever
/// the task has done a unit of work; when a heartbeat timeout is configured
/// and no beat comes in time, the mutex steps down.
#[derive(Debug, Clone)]
pub struct Heartbeat(pub(crate) Arc<watch::Sender<u64>>);

impl Heartbeat {
    pub(crate) fn new() -> (Self, watch::Receiver<u64>) {
        let (tx, rx) = watch::channel(0);
        (Heartbeat(Arc::new(tx)), rx)
    }

    /// Records that the task is alive and making progress.
    pub fn beat(&self) {
        self.0.send_modify(|beats| *beats = beats.wrapping_add(1));
    }
}
