//! The backends' own store types of earlier releases, kept so that code
//! that names them still builds: each is now the one protocol
//! ([`BlobLeaseManager`], [`BlobLeaseSetStore`]) on its SDK's calls.

#![allow(deprecated)] // the deprecated types are defined and forwarded here

use std::ops::Deref;
use std::time::Duration;

use super::collect::Collection;
use super::{BlobLeaseManager, BlobLeaseSetStore};
use crate::error::Result;
use crate::store::{Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore, LeaseStore};

/// A wrapper of the one protocol's store that forwards every method of
/// [`LeaseStore`] (or [`LeaseSetStore`]) to it, derefs to it, and keeps its
/// builder methods returning itself.
macro_rules! wrapper {
    (lease $name:ident) => {
        impl Deref for $name {
            type Target = BlobLeaseManager;
            fn deref(&self) -> &BlobLeaseManager {
                &self.inner
            }
        }

        impl $name {
            /// The same manager with another cap on each call (default 3 s).
            #[must_use = "the manager is returned by value"]
            pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
                self.inner = self.inner.with_request_timeout(timeout);
                self
            }

            /// The same manager with another collection of stale candidate
            /// records (default [`Collection::default`]).
            #[must_use = "the manager is returned by value"]
            pub fn with_collection(mut self, collection: Collection) -> Self {
                self.inner = self.inner.with_collection(collection);
                self
            }
        }

        #[deny(clippy::missing_trait_methods)]
        impl LeaseStore for $name {
            async fn acquire(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire> {
                LeaseStore::acquire(&self.inner, proposed, duration).await
            }
            async fn renew(&self, lease: LeaseId) -> Result<()> {
                LeaseStore::renew(&self.inner, lease).await
            }
            async fn release(&self, lease: LeaseId) -> Result<()> {
                LeaseStore::release(&self.inner, lease).await
            }
            async fn stamp(&self, lease: LeaseId, holder: &str) -> Result<u64> {
                LeaseStore::stamp(&self.inner, lease, holder).await
            }
            async fn inspect(&self) -> Result<Option<LeaseInfo>> {
                LeaseStore::inspect(&self.inner).await
            }
            fn name(&self) -> String {
                self.inner.name()
            }
            async fn read_state(&self) -> Result<Vec<u8>> {
                LeaseStore::read_state(&self.inner).await
            }
            async fn change(&self, from: LeaseId, to: LeaseId) -> Result<()> {
                LeaseStore::change(&self.inner, from, to).await
            }
            async fn stamp_with(
                &self,
                lease: LeaseId,
                holder: &str,
                options: &$crate::StampOptions,
            ) -> Result<u64> {
                self.inner.stamp_with(lease, holder, options).await
            }
            async fn stamp_at_least(
                &self,
                lease: LeaseId,
                holder: &str,
                floor: u64,
            ) -> Result<u64> {
                self.inner
                    .stamp_with(
                        lease,
                        holder,
                        &$crate::StampOptions::new().with_floor(floor),
                    )
                    .await
            }
            async fn stamp_advertised(
                &self,
                lease: LeaseId,
                holder: &str,
                advertised: &str,
                floor: u64,
            ) -> Result<u64> {
                let options = $crate::StampOptions::new()
                    .with_floor(floor)
                    .with_advertised(advertised);
                self.inner.stamp_with(lease, holder, &options).await
            }
            fn supports_advertised(&self) -> bool {
                self.inner.supports_advertised()
            }
            fn min_request_timeout(&self) -> Option<Duration> {
                LeaseStore::min_request_timeout(&self.inner)
            }
            fn supports_candidates(&self) -> bool {
                self.inner.supports_candidates()
            }
            async fn advertise(
                &self,
                record: LeaseId,
                candidate: &Candidate,
                duration: Duration,
            ) -> Result<Acquire> {
                self.inner.advertise(record, candidate, duration).await
            }
            async fn keep_advertising(&self, record: LeaseId, holder: &str) -> Result<()> {
                self.inner.keep_advertising(record, holder).await
            }
            async fn withdraw(&self, record: LeaseId, holder: &str) -> Result<()> {
                self.inner.withdraw(record, holder).await
            }
            async fn candidates(&self) -> Result<Vec<Candidate>> {
                self.inner.candidates().await
            }
            async fn write_state(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
                LeaseStore::write_state(&self.inner, lease, state).await
            }
        }
    };
    (set $name:ident) => {
        impl $name {
            /// The same store with another collection of stale member and
            /// candidate blobs (default [`Collection::default`]).
            #[must_use = "the store is returned by value"]
            pub fn with_collection(mut self, collection: Collection) -> Self {
                self.inner = self.inner.with_collection(collection);
                self
            }

            /// The same store with another cap on each call (default 3 s).
            #[must_use = "the store is returned by value"]
            pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
                self.inner = self.inner.with_request_timeout(timeout);
                self
            }
        }

        #[deny(clippy::missing_trait_methods)]
        impl LeaseSetStore for $name {
            type Lease = BlobLeaseManager;
            fn lease(&self, name: &str) -> Result<BlobLeaseManager> {
                self.inner.lease(name)
            }
            fn min_request_timeout(&self) -> Option<Duration> {
                LeaseSetStore::min_request_timeout(&self.inner)
            }
            async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseInfo)>> {
                self.inner.list(prefix).await
            }
            async fn collect(&self, listing: &[(String, LeaseInfo)]) -> usize {
                self.inner.collect(listing).await
            }
            async fn remove(&self, name: &str) -> bool {
                self.inner.remove(name).await
            }
        }
    };
}

#[cfg(feature = "official")]
mod official {
    use super::{Acquire, Candidate, LeaseId};
    use super::{
        BlobLeaseManager, BlobLeaseSetStore, Collection, Deref, Duration, LeaseInfo, LeaseSetStore,
        LeaseStore, Result,
    };
    use crate::azure::backend::AnyCalls;
    use crate::azure::official::{OfficialCalls, OfficialSettings};

    /// The lease on one blob through the official SDK: now
    /// [`BlobLeaseManager`] on [`Backend::Official`](crate::Backend::Official),
    /// which this derefs to.
    #[deprecated(
        since = "0.2.0",
        note = "use BlobLeaseManager: BlobSettings name the backend (Backend::Official is the default)"
    )]
    #[derive(Clone, Debug)]
    pub struct OfficialLeaseManager {
        inner: BlobLeaseManager,
        settings: OfficialSettings,
    }

    impl OfficialLeaseManager {
        /// A manager for the blob named in `settings`, with its own HTTP
        /// client and a 3 s request timeout.
        ///
        /// # Errors
        ///
        /// [`Error::InvalidOption`](crate::Error::InvalidOption) when the SDK
        /// refuses the container URL; [`Error::Transport`](crate::Error::Transport)
        /// when the HTTP client cannot be built.
        pub fn new(settings: &OfficialSettings) -> Result<Self> {
            let calls = AnyCalls::Official(OfficialCalls::new(settings)?);
            Ok(OfficialLeaseManager {
                inner: BlobLeaseManager::on(calls, settings.names()?),
                settings: settings.clone(),
            })
        }

        /// Where the lease blob lives.
        #[must_use]
        pub fn settings(&self) -> &OfficialSettings {
            &self.settings
        }
    }

    wrapper!(lease OfficialLeaseManager);

    /// A lease set's leases through the official SDK: now
    /// [`BlobLeaseSetStore`] on [`Backend::Official`](crate::Backend::Official).
    #[deprecated(
        since = "0.2.0",
        note = "use BlobLeaseSetStore: BlobSettings name the backend (Backend::Official is the default)"
    )]
    #[derive(Clone, Debug)]
    pub struct OfficialLeaseSetStore {
        inner: BlobLeaseSetStore,
    }

    impl OfficialLeaseSetStore {
        /// The set named by the settings' blob name, in the settings'
        /// container, with a 3 s request timeout.
        ///
        /// # Errors
        ///
        /// As [`OfficialLeaseManager::new`].
        pub fn new(settings: &OfficialSettings) -> Result<Self> {
            let calls = AnyCalls::Official(OfficialCalls::new(settings)?);
            Ok(OfficialLeaseSetStore {
                inner: BlobLeaseSetStore::on(calls, settings.names()?),
            })
        }
    }

    wrapper!(set OfficialLeaseSetStore);
}

#[cfg(feature = "official")]
pub use official::{OfficialLeaseManager, OfficialLeaseSetStore};

#[cfg(feature = "sdk-v021")]
mod sdk_v021 {
    use super::{Acquire, Candidate, LeaseId};
    use super::{
        BlobLeaseManager, BlobLeaseSetStore, Collection, Deref, Duration, LeaseInfo, LeaseSetStore,
        LeaseStore, Result,
    };
    use crate::{Backend, BlobSettings};

    /// The lease on one blob through the 0.21 SDK: now [`BlobLeaseManager`]
    /// on [`Backend::SdkV021`], which this derefs to.
    #[deprecated(
        since = "0.2.0",
        note = "use BlobLeaseManager with BlobSettings::with_backend(Backend::SdkV021)"
    )]
    #[derive(Clone, Debug)]
    pub struct SdkV021LeaseManager {
        inner: BlobLeaseManager,
    }

    impl SdkV021LeaseManager {
        /// A manager for the blob named in `settings`, on the 0.21 SDK
        /// whatever backend the settings name, with a 3 s request timeout.
        ///
        /// # Errors
        ///
        /// As [`BlobLeaseManager::new`].
        pub fn new(settings: &BlobSettings) -> Result<Self> {
            let settings = settings.clone().with_backend(Backend::SdkV021);
            Ok(SdkV021LeaseManager {
                inner: BlobLeaseManager::new(&settings)?,
            })
        }
    }

    wrapper!(lease SdkV021LeaseManager);

    /// A lease set's leases through the 0.21 SDK: now [`BlobLeaseSetStore`]
    /// on [`Backend::SdkV021`].
    #[deprecated(
        since = "0.2.0",
        note = "use BlobLeaseSetStore with BlobSettings::with_backend(Backend::SdkV021)"
    )]
    #[derive(Clone, Debug)]
    pub struct SdkV021LeaseSetStore {
        inner: BlobLeaseSetStore,
    }

    impl SdkV021LeaseSetStore {
        /// The set named by the settings' blob name, on the 0.21 SDK
        /// whatever backend the settings name, with a 3 s request timeout.
        ///
        /// # Errors
        ///
        /// As [`BlobLeaseManager::new`].
        pub fn new(settings: &BlobSettings) -> Result<Self> {
            let settings = settings.clone().with_backend(Backend::SdkV021);
            Ok(SdkV021LeaseSetStore {
                inner: BlobLeaseSetStore::new(&settings)?,
            })
        }
    }

    wrapper!(set SdkV021LeaseSetStore);
}

#[cfg(feature = "sdk-v021")]
pub use sdk_v021::{SdkV021LeaseManager, SdkV021LeaseSetStore};
