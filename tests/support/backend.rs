//! The two storage backends the backend tests run on: the 0.21 SDK's
//! (`BlobLeaseManager`, the account key) and the official SDK's
//! (`OfficialLeaseManager`, feature `official-sdk`), which has no shared key
//! and authenticates here with an account SAS signed by `sas`.

use std::time::Duration;

use blob_mutex::{Acquire, BlobLeaseManager, Error, LeaseId, LeaseInfo};

use super::sas;

/// The environment variable the fault worker and the examples read to pick
/// a backend: `official` for the official SDK, anything else for 0.21.
pub const BACKEND_ENV: &str = "BLOB_MUTEX_BACKEND";

/// A storage backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `azure_storage_blobs` 0.21, with the development account's key.
    Legacy,
    /// `azure_storage_blob` 1.x, with an account SAS.
    Official,
}

impl Backend {
    /// The connection string of the development account at `endpoint` for
    /// this backend: the key, or an account SAS on every container (the
    /// backend creates the test's container, so a container SAS is not
    /// enough).
    pub fn connection_string(self, endpoint: &str) -> String {
        match self {
            Backend::Legacy => super::azurite::connection_string(endpoint),
            Backend::Official => sas::sas_connection_string(endpoint, &account_sas()),
        }
    }

    /// The value of [`BACKEND_ENV`] for this backend.
    pub fn env(self) -> &'static str {
        match self {
            Backend::Legacy => "legacy",
            Backend::Official => "official",
        }
    }
}

/// An account SAS with everything the crate does: containers and objects,
/// read, write, delete, list, add, create.
pub fn account_sas() -> String {
    sas::account_sas("co", "rwdlac")
}

/// The official backend's settings for `container`/`blob` at `endpoint`.
#[cfg(feature = "official-sdk")]
pub fn official_settings(
    endpoint: &str,
    container: &str,
    blob: &str,
) -> blob_mutex::OfficialSettings {
    blob_mutex::OfficialSettings::from_container_url(
        &format!("{endpoint}/{container}?{}", account_sas()),
        blob,
    )
    .expect("valid official settings")
}

/// The calls of a lease manager that bound themselves by its request
/// timeout, whichever backend: what a test of one backend's answers to
/// faults calls.
pub trait Capped {
    async fn acquire(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire, Error>;
    async fn renew(&self, lease: LeaseId) -> Result<(), Error>;
    async fn release(&self, lease: LeaseId) -> Result<(), Error>;
    async fn inspect(&self) -> Result<Option<LeaseInfo>, Error>;
    async fn create_if_missing(&self) -> Result<(), Error>;
}

/// Implements [`Capped`] by the manager's own (capped) methods.
macro_rules! capped {
    ($manager:ty) => {
        impl Capped for $manager {
            async fn acquire(
                &self,
                proposed: LeaseId,
                duration: Duration,
            ) -> Result<Acquire, Error> {
                <$manager>::acquire(self, proposed, duration).await
            }
            async fn renew(&self, lease: LeaseId) -> Result<(), Error> {
                <$manager>::renew(self, lease).await
            }
            async fn release(&self, lease: LeaseId) -> Result<(), Error> {
                <$manager>::release(self, lease).await
            }
            async fn inspect(&self) -> Result<Option<LeaseInfo>, Error> {
                <$manager>::inspect(self).await
            }
            async fn create_if_missing(&self) -> Result<(), Error> {
                <$manager>::create_if_missing(self).await
            }
        }
    };
}

capped!(BlobLeaseManager);
#[cfg(feature = "official-sdk")]
capped!(blob_mutex::OfficialLeaseManager);

impl Backend {
    /// An empty cluster whose workers reach storage through this backend.
    pub fn cluster(self) -> super::workers::Cluster {
        match self {
            Backend::Legacy => super::workers::Cluster::new(),
            Backend::Official => super::workers::Cluster::on_backend(self.env()),
        }
    }
}
