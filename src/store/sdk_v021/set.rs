//! The store of a lease set on the 0.21 SDK: the leases of a set in one
//! container share one client, and one listing reads them all.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use azure_storage_blobs::prelude::ContainerClient;
use futures_util::StreamExt;

use super::client::container_client;
use super::client::lease_info;
use super::client::{is_not_found, map_error};
use super::delete::{delete_stale, delete_unleased};
use super::SdkV021LeaseManager;
use crate::bounded::bounded;
use crate::error::Result;
use crate::options::DEFAULT_REQUEST_TIMEOUT;
use crate::store::collect::{Collection, Collector};
use crate::store::names::{collectable, SetLease};
use crate::store::settings::BlobSettings;
use crate::store::{LeaseInfo, LeaseSetStore};

/// A set of leases in one container: each lease is the blob `<set>/<name>`,
/// where `<set>` is the settings' blob name. All its leases share one HTTP
/// client and connection pool, and one List Blobs call (with metadata)
/// reads the state of all of them.
#[derive(Clone)]
pub struct SdkV021LeaseSetStore {
    container: ContainerClient,
    settings: BlobSettings,
    request_timeout: Duration,
    /// The stale member and candidate blobs the balancer's listings collect.
    collector: Arc<Collector>,
}

impl fmt::Debug for SdkV021LeaseSetStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SdkV021LeaseSetStore")
            .field("container", &self.settings.container())
            .field("set", &self.settings.blob())
            .finish_non_exhaustive()
    }
}

impl SdkV021LeaseSetStore {
    /// The set named by the settings' blob name, in the settings' container,
    /// with a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConnectionString`](crate::Error::InvalidConnectionString)
    /// when the SAS token cannot be parsed.
    pub fn new(settings: &BlobSettings) -> Result<Self> {
        Ok(SdkV021LeaseSetStore {
            container: container_client(settings)?,
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

    /// The same store with another cap on each call (default 3 s).
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
        let mut pages = self
            .container
            .list_blobs()
            .prefix(format!("{set}{prefix}"))
            .include_metadata(true)
            .into_stream();
        let mut listed = Vec::new();
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(page) => page,
                Err(e) if is_not_found(&e) => return Ok(listed),
                Err(e) => return Err(map_error("list", &e)),
            };
            for blob in page.blobs.blobs() {
                if let Some(name) = blob.name.strip_prefix(&set) {
                    listed.push((
                        name.to_owned(),
                        lease_info(&blob.properties, blob.metadata.as_ref()),
                    ));
                }
            }
        }
        Ok(listed)
    }
}

impl LeaseSetStore for SdkV021LeaseSetStore {
    type Lease = SdkV021LeaseManager;

    fn lease(&self, name: &str) -> Result<SdkV021LeaseManager> {
        let (settings, kind) = self.settings.in_set(name)?;
        let lease = SdkV021LeaseManager::on(self.container.blob_client(settings.blob()), settings)
            .with_request_timeout(self.request_timeout)
            .with_collection(self.collector.collection());
        Ok(match kind {
            SetLease::Member => lease.marking_member(),
            SetLease::Partition | SetLease::Other => lease,
        })
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
        delete_stale(
            self.container.clone(),
            self.collector.clone(),
            due,
            self.request_timeout,
        )
    }

    fn remove(&self, name: &str) -> impl Future<Output = bool> + Send {
        let blob = self.container.blob_client(self.blob_name(name));
        delete_unleased(blob, self.request_timeout)
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>>> + Send {
        bounded(
            "list",
            self.request_timeout,
            self.list_uncapped(prefix.to_owned()),
        )
    }
}
