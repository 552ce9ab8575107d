//! The stores built from [`OfficialSettings`] rather than from
//! [`BlobSettings`](crate::BlobSettings): for a container URL with a SAS
//! that no connection string spells, or settings made for this SDK alone.

use super::{OfficialCalls, OfficialSettings};
use crate::azure::backend::AnyCalls;
use crate::azure::{BlobLeaseManager, BlobLeaseSetStore};
use crate::error::Result;

impl BlobLeaseManager {
    /// A manager for the blob named in `settings`, on the official SDK, with
    /// its own HTTP client and a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) when the SDK
    /// refuses the container URL; [`Error::Transport`](crate::Error::Transport)
    /// when the HTTP client cannot be built.
    pub fn from_official(settings: &OfficialSettings) -> Result<Self> {
        let calls = AnyCalls::official(OfficialCalls::new(settings)?);
        Ok(BlobLeaseManager::on(calls, settings.names()?))
    }
}

impl BlobLeaseSetStore {
    /// The set named by the settings' blob name, in the settings' container,
    /// on the official SDK, with a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// As [`BlobLeaseManager::from_official`].
    pub fn from_official(settings: &OfficialSettings) -> Result<Self> {
        let calls = AnyCalls::official(OfficialCalls::new(settings)?);
        Ok(BlobLeaseSetStore::on(calls, settings.names()?))
    }
}
