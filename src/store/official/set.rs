//! The store of a lease set on the official SDK: the leases of a set in one
//! container share one client, and one List Blobs call with metadata (one
//! request per 5 000 names) reads them all, for the set and for the
//! candidates.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use azure_storage_blob::models::{BlobContainerClientListBlobsOptions, ListBlobsIncludeItem};
use azure_storage_blob::BlobContainerClient;
use futures_util::StreamExt;

use super::client::{container_client, is_not_found, lease_info, map_error};
use super::delete::{delete_stale, delete_unleased};
use super::{OfficialLeaseManager, OfficialSettings};
use crate::bounded::bounded;
use crate::error::Result;
use crate::options::DEFAULT_REQUEST_TIMEOUT;
use crate::store::collect::{Collection, Collector};
use crate::store::names::{collectable, SetLease};
use crate::store::{LeaseInfo, LeaseSetStore};

/// A set of leases in one container through the official SDK, as
/// [`BlobLeaseSetStore`](crate::BlobLeaseSetStore) keeps it: each lease is
/// the blob `<set>/<name>`, where `<set>` is the settings' blob name. All
/// its leases share one HTTP client, and one List Blobs call (with
/// metadata) reads the state of all of them.
#[derive(Clone)]
pub struct OfficialLeaseSetStore {
    container: Arc<BlobContainerClient>,
    settings: OfficialSettings,
    request_timeout: Duration,
    collector: Arc<Collector>,
}

impl fmt::Debug for OfficialLeaseSetStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OfficialLeaseSetStore")
            .field("container", &self.settings.container())
            .field("set", &self.settings.blob())
            .finish_non_exhaustive()
    }
}

impl OfficialLeaseSetStore {
    /// The set named by the settings' blob name, in the settings'
    /// container, with a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// As [`OfficialLeaseManager::new`].
    pub fn new(settings: &OfficialSettings) -> Result<Self> {
        Ok(OfficialLeaseSetStore {
            container: Arc::new(container_client(settings)?),
            settings: settings.clone(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            collector: Arc::new(Collector::new(Collection::default())),
        })
    }

    /// The same store with another collection of stale member and
    /// candidate blobs (default [`Collection::default`]).
    #[must_use = "the store is returned by value"]
    pub fn with_collection(mut self, collection: Collection) -> Self {
        self.collector = Arc::new(Collector::new(collection));
        self
    }

    /// The same store with another cap on each listing and deletion
    /// (default 3 s).
    #[must_use = "the store is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    fn blob_name(&self, name: &str) -> String {
        crate::store::names::set_blob(self.settings.blob(), name)
    }

    async fn list_uncapped(&self, prefix: String) -> Result<Vec<(String, LeaseInfo)>> {
        let set = format!("{}/", self.settings.blob());
        let listed = list(&self.container, &format!("{set}{prefix}"), "list").await?;
        Ok(listed
            .into_iter()
            .filter_map(|(name, info, _)| Some((name.strip_prefix(&set)?.to_owned(), info)))
            .collect())
    }
}

impl LeaseSetStore for OfficialLeaseSetStore {
    type Lease = OfficialLeaseManager;

    fn lease(&self, name: &str) -> Result<OfficialLeaseManager> {
        let (settings, kind) = self.settings.in_set(name)?;
        let lease = OfficialLeaseManager::on(&self.container, settings)
            .with_request_timeout(self.request_timeout)
            .with_collection(self.collector.collection());
        Ok(match kind {
            SetLease::Member => lease.marking_member(),
            SetLease::Partition | SetLease::Other => lease,
        })
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>>> + Send {
        bounded(
            "list",
            self.request_timeout,
            self.list_uncapped(prefix.to_owned()),
        )
    }

    fn collect(&self, listing: &[(String, LeaseInfo)]) -> impl Future<Output = usize> + Send {
        let set = self.settings.blob();
        let due = self.collector.due(
            listing
                .iter()
                .filter(|(name, info)| collectable(name, info))
                .map(|(name, info)| (format!("{set}/{name}"), info)),
            tokio::time::Instant::now(),
        );
        let (container, collector, limit) = (
            self.container.clone(),
            self.collector.clone(),
            self.request_timeout,
        );
        async move { delete_stale(&container, &collector, due, limit).await }
    }

    fn remove(&self, name: &str) -> impl Future<Output = bool> + Send {
        let blob = self.container.blob_client(&self.blob_name(name));
        let limit = self.request_timeout;
        async move { delete_unleased(&blob, limit).await }
    }
}

/// A listed blob: its full name, its lease, and its metadata.
pub(super) type Listed = (String, LeaseInfo, HashMap<String, String>);

/// Every blob of `container` whose name starts with `prefix`, with its
/// lease and metadata; empty when the container does not exist.
pub(super) async fn list(
    container: &BlobContainerClient,
    prefix: &str,
    operation: &'static str,
) -> Result<Vec<Listed>> {
    let options = BlobContainerClientListBlobsOptions {
        prefix: Some(prefix.to_owned()),
        include: Some(vec![ListBlobsIncludeItem::Metadata]),
        ..Default::default()
    };
    let mut pages = container
        .list_blobs(Some(options))
        .map_err(|e| map_error(operation, &e))?
        .into_pages();
    let mut listed = Vec::new();
    while let Some(page) = pages.next().await {
        let page = match page {
            Ok(page) => page,
            Err(e) if is_not_found(&e) => break,
            Err(e) => return Err(map_error(operation, &e)),
        };
        let page = page.into_model().map_err(|e| map_error(operation, &e))?;
        for blob in page.blob_items {
            let Some(name) = blob.name else { continue };
            let metadata = blob.metadata.and_then(|m| m.values).unwrap_or_default();
            let properties = blob.properties.unwrap_or_default();
            let info = lease_info(
                properties.lease_state,
                properties.lease_duration,
                &metadata,
                properties.content_length,
                properties.etag.map(|e| e.to_string()),
            );
            listed.push((name, info, metadata));
        }
    }
    Ok(listed)
}
