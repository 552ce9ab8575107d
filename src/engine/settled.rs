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
    /// lease: the record of work done is part of the work. It gives up
    /// [`OWN_STOP`](crate::options::OWN_STOP) before the engine would abort the task (see
    /// [`before_abort`](Self::before_abort)), so that the task returns by
    /// itself and says what it left: [`Written::Unknown`] for an attempt
    /// then in flight, or after one whose answer was lost.
    ///
    /// # Errors
    ///
    /// A failure that no retry can help ([`Error::is_fatal`]): the state is
    /// too long, the store keeps none.
    pub(crate) async fn write_state_settled(&self, state: &[u8]) -> Result<Written> {
        let mut failures: u32 = 0;
        let mut unknown = false;
        loop {
            let sent = tokio::time::Instant::now();
            let attempt = tokio::select! {
                biased;
                written = self.write_state(state) => written,
                // Cut off in flight: it may land yet.
                () = self.before_abort() => {
                    return Ok(Written::Unknown(self.write_cut_off(sent.elapsed())));
                }
            };
            let error = match attempt {
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
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.before_abort() => {
                    return Ok(if unknown {
                        Written::Unknown(error)
                    } else {
                        Written::Refused(error)
                    });
                }
            }
        }
    }

    /// The error of a write that the term's end cut off `after` it was
    /// sent: the lease is as good as lost once the term stops (its stop
    /// reason named), a time-out when the deadline came first.
    fn write_cut_off(&self, after: Duration) -> Error {
        match self.stop_reason() {
            Some(reason) => Error::LeaseLost(format!(
                "the term ended ({reason}) while its record was being written; the write was \
                 abandoned after {after:?}, and landed only if storage took it before the lease \
                 was lost"
            )),
            None => cut_off("write state", after),
        }
    }

    /// Reads the state as [`read_state`](Self::read_state) does, and
    /// again after each failure that may pass, until it succeeds or the
    /// term ends (see [`retried`](Self::retried)).
    ///
    /// # Errors
    ///
    /// The last failure: one that may not pass, or the one before the
    /// term ended.
    #[cfg(feature = "schedule")]
    pub(crate) async fn read_state_settled(&self) -> Result<Vec<u8>> {
        self.retried("reading the term's record", || self.read_state())
            .await
    }

    /// `call`, again after each failure that may pass, until it succeeds
    /// or the term ends: it is cancelled, its deadline has passed, or the
    /// engine is about to abort its tasks (a call then in flight is cut off
    /// as a time-out); each failure logged as `what` failed.
    ///
    /// # Errors
    ///
    /// The last failure: one that may not pass, or the one before the
    /// term ended.
    #[cfg(feature = "schedule")]
    pub(crate) async fn retried<T, F>(&self, what: &str, mut call: impl FnMut() -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let mut failures: u32 = 0;
        loop {
            let sent = tokio::time::Instant::now();
            let error = tokio::select! {
                biased;
                called = call() => match called {
                    Ok(value) => return Ok(value),
                    Err(e) => e,
                },
                () = self.before_abort() => cut_off("a read of the term's", sent.elapsed()),
            };
            if !error.is_transient() || self.is_cancelled() || !self.is_current() {
                return Err(error);
            }
            failures = failures.saturating_add(1);
            let wait = backoff(RETRY_FIRST, RETRY_MAX, failures);
            warn!(epoch = self.epoch(), error = %Chain(&error), failures, retry_in = ?wait, "{what} failed; trying again while the lease is held");
            tokio::select! {
                _ = self.cancelled() => return Err(error),
                () = self.before_abort() => return Err(error),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// The error of a request of the term's own cut off `after` it was sent,
/// before the engine would abort the task that made it: a time-out, since
/// its answer never came.
fn cut_off(operation: &'static str, after: Duration) -> Error {
    Error::Timeout { operation, after }
}
