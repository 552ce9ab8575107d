//! Every storage call runs with a time limit: the crate owns the deadline,
//! not the SDK or the HTTP client.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};

/// The request timeout of [`MutexOptions`](crate::MutexOptions) and of a
/// store made without one (a bare [`BlobLeaseManager`](crate::BlobLeaseManager), say).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs `call` for at most `limit`; [`Error::Timeout`] naming `operation`
/// when it runs out (at once for a zero limit, without starting the call).
pub(crate) async fn bounded<T>(
    operation: &'static str,
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    let timeout = || Error::Timeout {
        operation,
        after: limit,
    };
    if limit.is_zero() {
        return Err(timeout());
    }
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or_else(|_| Err(timeout()))
}
