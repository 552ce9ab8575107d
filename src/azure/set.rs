//! The leases of a lease set in one container, for every SDK: they share
//! one client and connection pool, and one List Blobs call with metadata
//! (one request per 5 000 names) reads them all. Also the deletes of
//! member and candidate blobs: on leaving, and once stale.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::backend::AnyCalls;
use super::calls::{BlobCalls, Listed};
use super::settings::BlobSettings;
use super::BlobLeaseManager;
use crate::bounded::within;
use crate::bounded::DEFAULT_REQUEST_TIMEOUT;
use crate::error::Result;
use crate::store::collect::{self, Collection, Collector};
use crate::store::names::{collectable, SetLease};
use crate::store::{LeaseInfo, LeaseSetStore};

/// The leases of a lease set in one container, through the backend its
/// [`BlobSettings`] name: each lease is the blob `<set>/<name>`, where
/// `<set>` is the settings' blob name. All its leases share one HTTP client
/// and connection pool, and one List Blobs call (with metadata) reads the
/// state of all of them. Every call is bounded by the request timeout.
#[derive(Clone)]
pub struct BlobLeaseSetStore {
    settings: BlobSettings,
    calls: AnyCalls,
    request_timeout: Duration,
    /// The stale member and candidate blobs the balancer's listings collect.
    collector: Arc<Collector>,
}

impl fmt::Debug for BlobLeaseSetStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobLeaseSetStore")
            .field("backend", &self.settings.backend())
            .field("container", &self.settings.container())
            .field("set", &self.settings.blob())
            .finish_non_exhaustive()
    }
}

impl BlobLeaseSetStore {
    /// The store of the set named by the settings' blob name, in the
    /// settings' container, on the settings' backend, with a 3 s request
    /// timeout.
    ///
    /// # Errors
    ///
    /// As [`BlobLeaseManager::new`].
    pub fn new(settings: &BlobSettings) -> Result<Self> {
        Ok(Self::on(AnyCalls::new(settings)?, settings.clone()))
    }

    /// The store of the set over `calls`.
    pub(crate) fn on(calls: AnyCalls, settings: BlobSettings) -> Self {
        BlobLeaseSetStore {
            settings,
            calls,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            collector: Arc::new(Collector::new(Collection::default())),
        }
    }

    /// The same store with another collection of stale member and candidate
    /// blobs (default [`Collection::default`]).
    #[must_use = "the store is returned by value"]
    pub fn with_collection(mut self, collection: Collection) -> Self {
        self.collector = Arc::new(Collector::new(collection));
        self
    }

    /// The same store with another cap on each call of its leases and
    /// listings (default 3 s).
    #[must_use = "the store is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Where the set lives, and on which backend.
    #[must_use]
    pub fn settings(&self) -> &BlobSettings {
        &self.settings
    }
}

impl LeaseSetStore for BlobLeaseSetStore {
    type Lease = BlobLeaseManager;

    fn lease(&self, name: &str) -> Result<BlobLeaseManager> {
        let (settings, kind) = self.settings.in_set(name)?;
        let lease = BlobLeaseManager::on(self.calls.clone(), settings)
            .with_request_timeout(self.request_timeout)
            .with_collection(self.collector.collection());
        Ok(match kind {
            SetLease::Member => lease.marking_member(),
            SetLease::Partition | SetLease::Other => lease,
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseInfo)>> {
        let set = format!("{}/", self.settings.blob());
        let listed = Box::pin(within(
            "list",
            self.request_timeout,
            list(&self.calls, &format!("{set}{prefix}"), "list"),
        ))
        .await?;
        Ok(listed
            .into_iter()
            .filter_map(|l| Some((l.name.strip_prefix(&set)?.to_owned(), l.properties.info())))
            .collect())
    }

    async fn collect(&self, listing: &[(String, LeaseInfo)]) -> usize {
        let set = self.settings.blob();
        let due = self.collector.due(
            listing
                .iter()
                .filter(|(name, info)| collectable(name, info))
                .map(|(name, info)| (format!("{set}/{name}"), info)),
            tokio::time::Instant::now(),
        );
        Box::pin(delete_stale(
            &self.calls,
            &self.collector,
            due,
            self.request_timeout,
        ))
        .await
    }

    async fn remove(&self, name: &str) -> bool {
        let blob = crate::store::names::set_blob(self.settings.blob(), name);
        delete_unleased(&self.calls, &blob, self.request_timeout).await
    }
}

/// Every blob whose name starts with `prefix`, with its properties; empty
/// when the container does not exist.
pub(super) async fn list<C: BlobCalls>(
    calls: &C,
    prefix: &str,
    operation: &'static str,
) -> Result<Vec<Listed>> {
    match calls.list(prefix).await {
        Ok(listed) => Ok(listed),
        Err(e) if e.status() == Some(404) => Ok(Vec::new()),
        Err(e) => Err(e.into_error(operation)),
    }
}

/// Deletes the stale blobs `due` (full names, with the `ETag` each was seen
/// with), each only if unchanged and not leased (no lease id is sent), as
/// [`collect::delete_stale`] drives it.
pub(super) async fn delete_stale<C: BlobCalls>(
    calls: &C,
    collector: &Arc<Collector>,
    due: Vec<(String, String)>,
    limit: Duration,
) -> usize {
    collect::delete_stale(collector.clone(), due, limit, |name, etag| {
        let calls = calls.clone();
        async move {
            calls
                .delete(&name, Some(&etag))
                .await
                .map_err(|e| e.into_error("delete"))
        }
    })
    .await
}

/// Deletes `blob` unless it is leased (no lease id is sent, so storage
/// refuses while anyone holds a lease); `true` when deleted.
pub(super) async fn delete_unleased<C: BlobCalls>(calls: &C, blob: &str, limit: Duration) -> bool {
    match tokio::time::timeout(limit, calls.delete(blob, None)).await {
        Ok(Ok(())) => {
            debug!(blob, "deleted on leaving");
            true
        }
        Ok(Err(e)) => {
            debug!(blob, status = ?e.status(), "not deleted on leaving; it will be collected when stale");
            false
        }
        Err(_) => false,
    }
}
