//! Every storage call runs with a time limit: the crate owns the deadline,
//! not the SDK or the HTTP client.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// The request timeout of [`MutexOptions`](crate::MutexOptions) and of a
/// store made without one (a bare [`BlobLeaseManager`](crate::azure::BlobLeaseManager), say).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

tokio::task_local! {
    /// The instant at which the caller cuts the call being awaited, set by
    /// [`bounded`] around its call: a store's own limit inside it
    /// ([`within`]) needs no timer when this comes first.
    static CUT: Instant;
}

/// Runs `call` for at most `limit`; [`Error::Timeout`] naming `operation`
/// when it runs out (at once for a zero limit, without starting the call).
/// The call is told the cut, so that a store's own limit inside it adds no
/// second timer ([`within`]).
pub(crate) async fn bounded<T>(
    operation: &'static str,
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    if limit.is_zero() {
        return Err(timed_out(operation, limit));
    }
    // A limit past the clock's reach (`Duration::MAX`) cuts nothing.
    let Some(cut) = Instant::now().checked_add(limit) else {
        return call.await;
    };
    tokio::time::timeout_at(cut, CUT.scope(cut, call))
        .await
        .unwrap_or_else(|_| Err(timed_out(operation, limit)))
}

/// A store's own limit on one of its calls: as [`bounded`], except that
/// when its caller cuts the call no later (the engine, which cuts every
/// call at the request timeout or sooner), the call runs under that one
/// timer and starts none of its own. Called on its own (a store used
/// directly), it is [`bounded`].
pub(crate) async fn within<T>(
    operation: &'static str,
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    let outer_first = !limit.is_zero()
        && CUT
            .try_with(|&outer| {
                Instant::now()
                    .checked_add(limit)
                    .is_none_or(|own| outer <= own)
            })
            .unwrap_or(false);
    if outer_first {
        call.await
    } else {
        bounded(operation, limit, call).await
    }
}

/// As [`within`], for a step of an operation that began at `start` and
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
    let Some(cut) = Instant::now().checked_add(left) else {
        return call.await;
    };
    if CUT.try_with(|&outer| outer <= cut).unwrap_or(false) {
        return call.await;
    }
    tokio::time::timeout_at(cut, CUT.scope(cut, call))
        .await
        .unwrap_or_else(|_| Err(timed_out(operation, limit)))
}

fn timed_out(operation: &'static str, after: Duration) -> Error {
    Error::Timeout { operation, after }
}

#[cfg(test)]
mod tests {
    use std::future::pending;

    use super::*;

    fn operation<T>(result: Result<T>) -> (&'static str, Duration) {
        match result {
            Err(Error::Timeout { operation, after }) => (operation, after),
            Err(e) => panic!("not a time-out: {e}"),
            Ok(_) => panic!("the call ended"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stores_own_limit_inside_a_callers_that_cuts_no_later_starts_no_timer() {
        let start = Instant::now();
        let cut = bounded("renew", Duration::from_secs(3), async {
            within(
                "store renew",
                Duration::from_secs(3),
                pending::<Result<()>>(),
            )
            .await
        })
        .await;
        // The caller's one timer ended the call: with a second timer of
        // the store's, at the same instant, the store's would have.
        assert_eq!(operation(cut), ("renew", Duration::from_secs(3)));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stores_own_limit_shorter_than_its_callers_keeps_its_timer() {
        let start = Instant::now();
        let cut = bounded("renew", Duration::from_secs(3), async {
            within(
                "store renew",
                Duration::from_secs(1),
                pending::<Result<()>>(),
            )
            .await
        })
        .await;
        assert_eq!(operation(cut), ("store renew", Duration::from_secs(1)));
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_called_on_its_own_keeps_its_limit() {
        let start = Instant::now();
        let cut = within("inspect", Duration::from_secs(2), pending::<Result<()>>()).await;
        assert_eq!(operation(cut), ("inspect", Duration::from_secs(2)));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        let step = bounded_since(
            "stamp",
            start,
            Duration::from_secs(5),
            pending::<Result<()>>(),
        );
        assert_eq!(operation(step.await), ("stamp", Duration::from_secs(5)));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_whose_caller_cuts_first_runs_under_the_callers_timer() {
        let start = Instant::now();
        let cut = bounded("stamp", Duration::from_secs(2), async {
            bounded_since(
                "stamp step",
                start,
                Duration::from_secs(6),
                pending::<Result<()>>(),
            )
            .await
        })
        .await;
        assert_eq!(operation(cut), ("stamp", Duration::from_secs(2)));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_limit_fails_at_once_without_starting_the_call() {
        let called = std::cell::Cell::new(false);
        let call = async {
            called.set(true);
            Ok(())
        };
        let cut = bounded(
            "renew",
            Duration::from_secs(3),
            within("renew", Duration::ZERO, call),
        )
        .await;
        assert_eq!(operation(cut), ("renew", Duration::ZERO));
        assert!(!called.get());
    }
}
