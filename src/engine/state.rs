//! Leader state kept in the lease blob itself, written under the lease, so
//! that storage refuses the write of a leader that lost its lease.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::bounded::bounded;
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
            bounded("read state", limit, self.store.read_state()).await
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
            bounded(
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

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::{mpsc, oneshot, watch, Mutex};
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    use super::{Fenced, TermState};
    use crate::{
        store::Acquire, store::LeaseId, store::LeaseStore, store::MAX_STATE_LEN,
        testing::MemoryLeaseStore, BlobDistributedMutex, Error, LeaderContext, MutexOptions,
    };

    /// Runs a campaign of a mutex over `store` until `token` is cancelled.
    fn campaign<F, Fut>(
        store: &MemoryLeaseStore,
        token: &CancellationToken,
        task: F,
    ) -> tokio::task::JoinHandle<crate::Result<()>>
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), Error>> + Send + 'static,
    {
        let mutex =
            BlobDistributedMutex::with_store(store.clone(), MutexOptions::default(), task).unwrap();
        let token = token.clone();
        tokio::spawn(async move { mutex.run_task_when_mutex_acquired(token).await })
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_leader_reads_what_the_last_one_wrote() {
        let store = MemoryLeaseStore::new("state");
        let (seen, mut seen_rx) = mpsc::unbounded_channel();
        let first = CancellationToken::new();
        let handle = campaign(&store, &first, move |ctx: LeaderContext| {
            let seen = seen.clone();
            async move {
                seen.send(ctx.read_state().await?).unwrap();
                ctx.write_state(format!("epoch={}", ctx.epoch())).await?;
                seen.send(Vec::new()).unwrap();
                ctx.cancelled().await;
                Ok(())
            }
        });
        assert_eq!(
            seen_rx.recv().await.unwrap(),
            b"",
            "no state before the first write"
        );
        seen_rx.recv().await.unwrap();
        first.cancel();
        handle.await.unwrap().unwrap();

        let (seen, mut seen_rx) = mpsc::unbounded_channel();
        let second = CancellationToken::new();
        let handle = campaign(&store, &second, move |ctx: LeaderContext| {
            let seen = seen.clone();
            async move {
                seen.send((ctx.epoch(), ctx.read_state().await?)).unwrap();
                ctx.cancelled().await;
                Ok(())
            }
        });
        let (epoch, state) = seen_rx.recv().await.unwrap();
        assert_eq!((epoch, state.as_slice()), (2, b"epoch=1".as_slice()));
        second.cancel();
        handle.await.unwrap().unwrap();
        assert_eq!(store.epoch(), 2, "a state write keeps the epoch");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_after_the_lease_was_broken_is_refused_and_does_not_land() {
        let store = MemoryLeaseStore::new("state");
        let (written_tx, written_rx) = oneshot::channel::<()>();
        let (go_tx, go_rx) = oneshot::channel::<()>();
        let (result_tx, result_rx) = oneshot::channel();
        let steps = Arc::new(Mutex::new(Some((written_tx, go_rx, result_tx))));
        let token = CancellationToken::new();
        let handle = campaign(&store, &token, move |ctx: LeaderContext| {
            let steps = steps.clone();
            async move {
                let Some((written, go, result)) = steps.lock().await.take() else {
                    return Ok(()); // a later term: nothing to do
                };
                ctx.write_state("one").await?;
                written.send(()).unwrap();
                go.await.unwrap();
                result.send(ctx.write_state("two").await).unwrap();
                ctx.cancelled().await;
                Ok(())
            }
        });
        written_rx.await.unwrap();
        store.break_lease();
        go_tx.send(()).unwrap();
        let refused = result_rx.await.unwrap();
        assert!(
            matches!(refused, Err(Error::StateWriteRefused(_))),
            "{refused:?}"
        );
        assert_eq!(store.read_state().await.unwrap(), b"one");
        token.cancel();
        handle.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_past_the_deadline_is_refused_without_being_sent() {
        let store = Arc::new(MemoryLeaseStore::new("state"));
        let lease = LeaseId::new();
        assert_eq!(
            store.acquire(lease, Duration::from_secs(15)).await.unwrap(),
            Acquire::Acquired
        );
        let (deadline, deadline_rx) = watch::channel(Instant::now() + Duration::from_secs(10));
        let fenced = Fenced::new(store.clone(), lease, deadline_rx, Duration::from_secs(3));
        fenced.write(b"before").await.unwrap();
        deadline.send_replace(Instant::now());
        let late = fenced.write(b"after").await;
        assert!(matches!(late, Err(Error::StateWriteRefused(_))), "{late:?}");
        assert!(store.is_held(), "the lease is still held on the store");
        assert_eq!(store.read_state().await.unwrap(), b"before");
    }

    #[tokio::test(start_paused = true)]
    async fn state_over_the_limit_is_refused() {
        let store = Arc::new(MemoryLeaseStore::new("state"));
        let lease = LeaseId::new();
        store.acquire(lease, Duration::from_secs(15)).await.unwrap();
        let (_deadline, deadline_rx) = watch::channel(Instant::now() + Duration::from_secs(10));
        let fenced = Fenced::new(store.clone(), lease, deadline_rx, Duration::from_secs(3));
        fenced.write(&vec![0; MAX_STATE_LEN]).await.unwrap();
        let long = fenced.write(&vec![0; MAX_STATE_LEN + 1]).await;
        assert!(
            matches!(long, Err(Error::InvalidOption { field: "state", .. })),
            "{long:?}"
        );
        assert_eq!(store.read_state().await.unwrap().len(), MAX_STATE_LEN);
    }
}
