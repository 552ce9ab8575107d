//! Leader state kept in the lease blob itself, written under the lease, so
//! that storage refuses the write of a leader that lost its lease.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::store::{check_state_len, LeaseId, LeaseStore};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The state calls of one term, with the store's type erased, so that
/// [`LeaderContext`](crate::LeaderContext) needs no type parameter.
pub(crate) trait TermState: Send + Sync {
    fn read(&self) -> BoxFuture<'_, Result<Vec<u8>>>;
    fn write<'a>(&'a self, state: &'a [u8]) -> BoxFuture<'a, Result<()>>;
    fn lease_id(&self) -> LeaseId;
}

/// A term's view of the store: its lease id, and its deadline, which caps
/// every call like the election's own storage calls.
pub(crate) struct Fenced<S> {
    store: Arc<S>,
    lease: LeaseId,
    deadline: watch::Receiver<Instant>,
    request_timeout: Duration,
}

impl<S: LeaseStore> Fenced<S> {
    pub(crate) fn new(
        store: Arc<S>,
        lease: LeaseId,
        deadline: watch::Receiver<Instant>,
        request_timeout: Duration,
    ) -> Self {
        Fenced {
            store,
            lease,
            deadline,
            request_timeout,
        }
    }

    /// The time a call may take: the request timeout, cut at the deadline.
    fn limit(&self) -> Duration {
        let left = self
            .deadline
            .borrow()
            .saturating_duration_since(Instant::now());
        self.request_timeout.min(left)
    }
}

impl<S: LeaseStore> TermState for Fenced<S> {
    fn read(&self) -> BoxFuture<'_, Result<Vec<u8>>> {
        Box::pin(async move {
            let limit = self.limit();
            capped("read state", limit, self.store.read_state()).await
        })
    }

    fn write<'a>(&'a self, state: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            check_state_len(state)?;
            let limit = self.limit();
            if limit.is_zero() {
                return Err(Error::StateWriteRefused(
                    "the term's deadline has passed; nothing was sent".to_owned(),
                ));
            }
            capped(
                "write state",
                limit,
                self.store.write_state(self.lease, state),
            )
            .await
        })
    }

    fn lease_id(&self) -> LeaseId {
        self.lease
    }
}

async fn capped<T>(
    operation: &'static str,
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    if limit.is_zero() {
        return Err(Error::Timeout {
            operation,
            after: limit,
        });
    }
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or(Err(Error::Timeout {
            operation,
            after: limit,
        }))
}
