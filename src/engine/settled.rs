//! A term's own reads and writes of its state, tried again after each
//! failure that may pass until they succeed, storage refuses them, or the
//! term ends: what the shapes that keep a record in the lease's state (run
//! once, the schedule) do with a request that one failure cut short.

use std::time::Duration;

use tracing::warn;

use crate::backoff::backoff;
use crate::engine::leadership::LeaderContext;
use crate::error::{Chain, Error, Result};

/// The first wait after a failed attempt; each next one doubles, up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// What became of a state write tried until it settled.
#[derive(Debug)]
pub(crate) enum Written {
    /// It landed.
    Landed,
    /// It did not land, and never will: storage refused it (the lease is
    /// gone, or the term's deadline passed before it was sent) and no
    /// earlier attempt's answer was lost.
    Refused(Error),
    /// Whether it landed is unknown: an attempt's answer was lost (a
    /// time-out, a broken connection, a 500), and the term ended or lost
    /// its lease before another attempt landed. A reader of the state
    /// tells, later.
    Unknown(Error),
}

/// Whether a write that failed with `e` may have landed, or may still:
/// every failure but a refusal, an answer that storage did not act
/// (503 `ServerBusy`, 429), and what is refused before anything is sent.
pub(crate) fn may_have_landed(e: &Error) -> bool {
    !matches!(
        e,
        Error::StateWriteRefused(_) | Error::InvalidOption { .. } | Error::Unsupported { .. }
    ) && !matches!(
        e,
        Error::Storage {
            status: 503 | 429,
            ..
        }
    )
}

impl LeaderContext {
    /// Writes `state` as [`write_state`](Self::write_state) does, and
    /// again after each failure that may pass, until it lands or storage
    /// refuses it: the lease is gone, or the term's deadline has passed. A
    /// term told to stop (a shutdown) goes on trying while it holds the
    /// lease: the record of work done is part of the work, and the stop's
    /// grace bounds it.
    ///
    /// # Errors
    ///
    /// A failure that no retry can help ([`Error::is_fatal`]): the state is
    /// too long, the store keeps none.
    pub(crate) async fn write_state_settled(&self, state: &[u8]) -> Result<Written> {
        let mut failures: u32 = 0;
        let mut unknown = false;
        loop {
            let error = match self.write_state(state).await {
                Ok(()) => return Ok(Written::Landed),
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => e,
            };
            unknown |= may_have_landed(&error);
            if !error.is_transient() {
                return Ok(if unknown {
                    Written::Unknown(error)
                } else {
                    Written::Refused(error)
                });
            }
            failures = failures.saturating_add(1);
            let wait = backoff(RETRY_FIRST, RETRY_MAX, failures);
            warn!(epoch = self.epoch(), error = %Chain(&error), failures, retry_in = ?wait, "writing the term's record failed; trying again while the lease is held");
            tokio::time::sleep(wait).await;
        }
    }

    /// Reads the state as [`read_state`](Self::read_state) does, and
    /// again after each failure that may pass, until it succeeds or the
    /// term is cancelled.
    ///
    /// # Errors
    ///
    /// The last failure: one that may not pass, or the one before the
    /// term was cancelled.
    #[cfg(feature = "schedule")]
    pub(crate) async fn read_state_settled(&self) -> Result<Vec<u8>> {
        self.retried("reading the term's record", || self.read_state())
            .await
    }

    /// `call`, again after each failure that may pass, until it succeeds
    /// or the term is cancelled; each failure logged as `what` failed.
    ///
    /// # Errors
    ///
    /// The last failure: one that may not pass, or the one before the
    /// term was cancelled.
    #[cfg(feature = "schedule")]
    pub(crate) async fn retried<T, F>(&self, what: &str, mut call: impl FnMut() -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let mut failures: u32 = 0;
        loop {
            let error = match call().await {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            if !error.is_transient() || self.is_cancelled() {
                return Err(error);
            }
            failures = failures.saturating_add(1);
            let wait = backoff(RETRY_FIRST, RETRY_MAX, failures);
            warn!(epoch = self.epoch(), error = %Chain(&error), failures, retry_in = ?wait, "{what} failed; trying again while the lease is held");
            tokio::select! {
                _ = self.cancelled() => return Err(error),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}
