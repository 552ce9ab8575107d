//! Every storage call runs with a time limit: the crate owns the deadline,
//! not the SDK or the HTTP client.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// The request timeout of [`MutexOptions`](crate::MutexOptions) and of a
/// store made without one (a bare [`BlobLeaseManager`](crate::azure::BlobLeaseManager), say).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs `call` for at most `limit`; [`Error::Timeout`] naming `operation`
/// when it runs out (at once for a zero limit, without starting the call).
pub(crate) async fn bounded<T>(
    operation: &'static str,
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    if limit.is_zero() {
        return Err(timed_out(operation, limit));
    }
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or_else(|_| Err(timed_out(operation, limit)))
}

/// As [`bounded`], for a step of an operation that began at `start` and
/// has `limit` in all: the step runs for what is left of it.
pub(crate) async fn bounded_since<T>(
    operation: &'static str,
    start: Instant,
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    let left = limit.saturating_sub(start.elapsed());
    if left.is_zero() {
        return Err(timed_out(operation, limit));
    }
    tokio::time::timeout(left, call)
        .await
        .unwrap_or_else(|_| Err(timed_out(operation, limit)))
}

fn timed_out(operation: &'static str, after: Duration) -> Error {
    Error::Timeout { operation, after }
}
