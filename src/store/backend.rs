//! Which storage backend speaks to Azure: the choice, made once from the
//! settings, and the front-door stores that carry it.
//!
//! Two backends implement the lease calls: `official` (Microsoft's official
//! Azure SDK for Rust, `azure_storage_blob` 1.x; feature `official`, on by
//! default) and `sdk_v021` (the frozen `azure_storage_blobs` 0.21 crates;
//! feature `sdk-v021`). [`BlobSettings`] names one ([`Backend`]), and
//! [`BlobLeaseManager`] and [`BlobLeaseSetStore`] are the stores of
//! whichever it names: everything above `store/` (the mutex, the lease set,
//! the quorum, the CLI, the examples) builds those two from settings and
//! never names a backend.
//!
//! Why an enum over the two stores and not a trait object or a generic
//! parameter: [`LeaseStore`] returns `impl Future`, so it is not object
//! safe; a type parameter would make every user name a backend in their
//! types (`BlobDistributedMutex<OfficialLeaseManager>`), which is what the
//! default parameter `BlobLeaseManager` exists to avoid; and an enum keeps
//! the choice a value that settings, a flag or an environment variable can
//! carry, with one match per call and no allocation. Mixed quorums follow:
//! each account's `BlobLeaseManager` is on its own settings' backend.

// Built with no backend, the stores hold no value, and the code after a
// match on one is unreachable: expected there, and only there.
#![cfg_attr(
    not(any(feature = "official", feature = "sdk-v021")),
    allow(unreachable_code, unused_variables, unused_mut, clippy::unused_async)
)]

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::collect::Collection;
use crate::store::settings::BlobSettings;
use crate::store::{Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore, LeaseStore};

#[cfg(feature = "official")]
use crate::store::official::{OfficialLeaseManager, OfficialLeaseSetStore, OfficialSettings};
#[cfg(feature = "sdk-v021")]
use crate::store::sdk_v021::{SdkV021LeaseManager, SdkV021LeaseSetStore};

/// A storage backend: the SDK through which the lease calls reach Azure.
///
/// The same word names the backend's module, the prefix of its types, its
/// feature and its value on the command line and in
/// [`Backend::ENV`]: `official` (`OfficialLeaseManager`, feature
/// `official`) and `sdk-v021` (`SdkV021LeaseManager`, feature `sdk-v021`).
/// Both keep the same records and give the same answers: instances on
/// different backends can share one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Microsoft's official Azure SDK for Rust (`azure_core` and
    /// `azure_storage_blob` 1.x). The default when its feature `official`
    /// is on (it is by default).
    Official,
    /// The frozen `azure_storage_blobs` 0.21 crates, fully supported
    /// (feature `sdk-v021`).
    SdkV021,
}

impl Backend {
    /// The environment variable [`Backend::from_env`] reads, and the
    /// `blob-mutex` command's `--backend` falls back to.
    pub const ENV: &'static str = "BLOB_MUTEX_BACKEND";

    /// Every backend, built in or not.
    pub const ALL: [Backend; 2] = [Backend::Official, Backend::SdkV021];

    /// The backend's name: `official` or `sdk-v021`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Official => "official",
            Backend::SdkV021 => "sdk-v021",
        }
    }

    /// The crate feature that builds this backend in.
    #[must_use]
    pub fn feature(self) -> &'static str {
        self.as_str()
    }

    /// Whether this build of the crate has the backend (its feature is on).
    #[must_use]
    pub fn is_built_in(self) -> bool {
        match self {
            Backend::Official => cfg!(feature = "official"),
            Backend::SdkV021 => cfg!(feature = "sdk-v021"),
        }
    }

    /// The backend named by [`Backend::ENV`] (`BLOB_MUTEX_BACKEND`); the
    /// default when it is unset or empty.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `backend`) when it names no backend.
    pub fn from_env() -> Result<Backend> {
        match std::env::var(Self::ENV) {
            Ok(value) if !value.trim().is_empty() => value.parse(),
            _ => Ok(Backend::default()),
        }
    }

    /// Refuses a backend this build does not have, naming the feature.
    pub(crate) fn check_built_in(self) -> Result<()> {
        if self.is_built_in() {
            Ok(())
        } else {
            Err(Error::invalid(
                "backend",
                format!(
                    "the backend {self} is not built in: turn on the crate feature `{}`",
                    self.feature()
                ),
            ))
        }
    }
}

impl Default for Backend {
    /// [`Backend::Official`] when its feature is on (the default), else
    /// [`Backend::SdkV021`] when that one is, else `Official`.
    fn default() -> Self {
        if cfg!(feature = "official") || !cfg!(feature = "sdk-v021") {
            Backend::Official
        } else {
            Backend::SdkV021
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// `official` or `sdk-v021`, without regard to case.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        Backend::ALL
            .into_iter()
            .find(|backend| backend.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let shown = if s.len() <= 20 && s.chars().all(|c| c.is_ascii_graphic()) {
                    s
                } else {
                    "(unreadable)"
                };
                Error::invalid(
                    "backend",
                    format!("{shown:?} is no backend: official or sdk-v021"),
                )
            })
    }
}

/// Calls `$body` with `$store` bound to the backend's store in `$inner`, a
/// place of the enum `$enum`. The calls below box the backend's future:
/// the official SDK's futures are large (kilobytes), and unboxed they would
/// make every future that awaits a store call as large (the mutex's
/// campaign among them); one allocation per storage request is nothing
/// beside the request.
macro_rules! each {
    ($enum:ident, $inner:expr, $store:ident => $body:expr) => {
        match $inner {
            #[cfg(feature = "official")]
            $enum::Official(ref $store) => $body,
            #[cfg(feature = "sdk-v021")]
            $enum::SdkV021(ref $store) => $body,
            #[cfg(not(any(feature = "official", feature = "sdk-v021")))]
            $enum::None(never) => match never {},
        }
    };
}

/// The same backend's store, rebuilt by `$body` from the store `$store`
/// taken out of `$inner`.
macro_rules! rebuild {
    ($enum:ident, $inner:expr, $store:ident => $body:expr) => {
        match $inner {
            #[cfg(feature = "official")]
            $enum::Official($store) => $enum::Official($body),
            #[cfg(feature = "sdk-v021")]
            $enum::SdkV021($store) => $enum::SdkV021($body),
            #[cfg(not(any(feature = "official", feature = "sdk-v021")))]
            $enum::None(never) => match never {},
        }
    };
}

/// One backend's store of one lease.
#[derive(Clone)]
enum LeaseInner {
    #[cfg(feature = "official")]
    Official(OfficialLeaseManager),
    #[cfg(feature = "sdk-v021")]
    SdkV021(SdkV021LeaseManager),
    /// No backend is built in: no value exists.
    #[cfg(not(any(feature = "official", feature = "sdk-v021")))]
    #[allow(dead_code)] // never constructed, by design
    None(std::convert::Infallible),
}

/// One backend's store of a lease set.
#[derive(Clone)]
enum SetInner {
    #[cfg(feature = "official")]
    Official(OfficialLeaseSetStore),
    #[cfg(feature = "sdk-v021")]
    SdkV021(SdkV021LeaseSetStore),
    /// No backend is built in: no value exists.
    #[cfg(not(any(feature = "official", feature = "sdk-v021")))]
    #[allow(dead_code)] // never constructed, by design
    None(std::convert::Infallible),
}

/// Acquires, renews, releases, breaks, changes and inspects the lease on one
/// blob, through the backend its [`BlobSettings`] name ([`Backend`]). Every
/// call is capped by the request timeout, and the SDKs' own retries are
/// off: the caller (usually [`BlobDistributedMutex`](crate::BlobDistributedMutex))
/// decides when to retry, so that nothing runs past a leader's deadline.
///
/// The same calls, the same records and the same answers on every backend;
/// `OfficialLeaseManager` and `SdkV021LeaseManager` are the backends' own
/// managers, for code that wants to name one.
#[derive(Clone)]
pub struct BlobLeaseManager {
    settings: BlobSettings,
    inner: LeaseInner,
}

impl fmt::Debug for BlobLeaseManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobLeaseManager")
            .field("backend", &self.settings.backend())
            .field("container", &self.settings.container())
            .field("blob", &self.settings.blob())
            .field("request_timeout", &self.request_timeout())
            .finish_non_exhaustive()
    }
}

impl BlobLeaseManager {
    /// A manager for the blob named in `settings`, on the settings'
    /// backend, with a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `backend` when the settings' backend
    /// is not built in (naming the feature to turn on);
    /// [`Error::InvalidConnectionString`] when the SAS token cannot be
    /// parsed.
    pub fn new(settings: &BlobSettings) -> Result<Self> {
        Self::from_settings(settings.clone())
    }

    /// As [`BlobLeaseManager::new`], keeping the settings given.
    pub(crate) fn from_settings(settings: BlobSettings) -> Result<Self> {
        let backend = settings.backend();
        backend.check_built_in()?;
        let inner = match backend {
            #[cfg(feature = "official")]
            Backend::Official => LeaseInner::Official(OfficialLeaseManager::new(
                &OfficialSettings::from_blob_settings(&settings)?,
            )?),
            #[cfg(feature = "sdk-v021")]
            Backend::SdkV021 => LeaseInner::SdkV021(SdkV021LeaseManager::new(&settings)?),
            #[allow(unreachable_patterns)] // every backend when all are built in
            _ => unreachable!("check_built_in refused {backend}"),
        };
        Ok(BlobLeaseManager { settings, inner })
    }

    /// The same manager with another collection of the stale candidate
    /// records that a leader with a priority finds when it lists the
    /// candidates (default [`Collection::default`]).
    #[must_use = "the manager is returned by value"]
    pub fn with_collection(mut self, collection: Collection) -> Self {
        self.inner = rebuild!(LeaseInner, self.inner, m => m.with_collection(collection));
        self
    }

    /// The same manager with another cap on each call (default 3 s).
    #[must_use = "the manager is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.inner = rebuild!(LeaseInner, self.inner, m => m.with_request_timeout(timeout));
        self
    }

    /// Where the lease blob lives, and on which backend.
    #[must_use]
    pub fn settings(&self) -> &BlobSettings {
        &self.settings
    }

    /// The request timeout in force.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        each!(LeaseInner, self.inner, m => m.request_timeout())
    }

    /// Acquires a lease of `duration` (15 to 60 whole seconds) with the proposed
    /// id. Creates the container and an empty blob when missing, never
    /// overwriting an existing blob. Acquiring again with the id that already
    /// holds the lease succeeds, so a retried attempt is idempotent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a duration out of range;
    /// [`Error::Authentication`], [`Error::Storage`], [`Error::Transport`] or
    /// [`Error::Timeout`] when storage cannot be asked or refuses.
    ///
    /// # Cancellation safety
    ///
    /// Dropping the future may or may not leave the lease acquired; acquire
    /// again with the same id to learn which.
    pub async fn acquire(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire> {
        each!(LeaseInner, self.inner, m => Box::pin(m.acquire(proposed, duration)).await)
    }

    /// Renews the lease held under `lease`.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease is no longer ours; otherwise as
    /// [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: the renewal may or may not have happened.
    pub async fn renew(&self, lease: LeaseId) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(m.renew(lease)).await)
    }

    /// Releases the lease held under `lease`, so that another instance may
    /// acquire it at once.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease is held under another id; otherwise
    /// as [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: the release may or may not have happened; the lease
    /// then expires by itself.
    pub async fn release(&self, lease: LeaseId) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(m.release(lease)).await)
    }

    /// Breaks whatever lease the blob has: at once with `None` or a zero
    /// period, else after `period` (at most 60 s). Returns the time until
    /// the lease is broken. For operators: a running leader finds out at its
    /// next renewal and stops its task.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a period over 60 s; otherwise as
    /// [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: the break may or may not have happened.
    pub async fn break_lease(&self, period: Option<Duration>) -> Result<Duration> {
        each!(LeaseInner, self.inner, m => Box::pin(m.break_lease(period)).await)
    }

    /// Passes the lease held under `from` to the id `to` (Change Lease).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when neither id holds the lease; otherwise as
    /// [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: change again with the same ids to learn the outcome.
    pub async fn change(&self, from: LeaseId, to: LeaseId) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::change(m, from, to)).await)
    }

    /// Creates the container and the empty lease blob when missing, never
    /// overwriting either.
    ///
    /// # Errors
    ///
    /// As [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: call again.
    pub async fn create_if_missing(&self) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(m.create_if_missing()).await)
    }

    /// The lease's state and the last term's holder and epoch; `None` when
    /// the blob does not exist.
    ///
    /// # Errors
    ///
    /// As [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: it only reads.
    pub async fn inspect(&self) -> Result<Option<LeaseInfo>> {
        each!(LeaseInner, self.inner, m => Box::pin(m.inspect()).await)
    }

    /// Records `holder` as the holder of a new term under the lease `lease`
    /// and returns the term's epoch, one more than the last.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease is not ours;
    /// [`Error::InvalidEpoch`] when the stored epoch cannot be increased;
    /// otherwise as [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: the epoch may or may not have been written; a new
    /// stamp writes a larger one.
    pub async fn stamp(&self, lease: LeaseId, holder: &str) -> Result<u64> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::stamp(m, lease, holder)).await)
    }

    /// The leader state in the lease blob's content (see
    /// [`LeaseStore::read_state`]).
    ///
    /// # Errors
    ///
    /// As [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: it only reads.
    pub async fn read_state(&self) -> Result<Vec<u8>> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::read_state(m)).await)
    }

    /// Replaces the leader state under the lease `lease` (see
    /// [`LeaseStore::write_state`]).
    ///
    /// # Errors
    ///
    /// [`Error::StateWriteRefused`] when the lease is no longer ours;
    /// [`Error::InvalidOption`] for state over [`MAX_STATE_LEN`](crate::MAX_STATE_LEN);
    /// otherwise as [`BlobLeaseManager::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: the write may or may not have landed, and only under
    /// the lease.
    pub async fn write_state(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::write_state(m, lease, state)).await)
    }
}

impl LeaseStore for BlobLeaseManager {
    async fn acquire(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::acquire(m, proposed, duration)).await)
    }

    async fn renew(&self, lease: LeaseId) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::renew(m, lease)).await)
    }

    async fn release(&self, lease: LeaseId) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::release(m, lease)).await)
    }

    async fn stamp(&self, lease: LeaseId, holder: &str) -> Result<u64> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::stamp(m, lease, holder)).await)
    }

    async fn stamp_at_least(&self, lease: LeaseId, holder: &str, floor: u64) -> Result<u64> {
        each!(LeaseInner, self.inner, m => Box::pin(m.stamp_at_least(lease, holder, floor)).await)
    }

    async fn stamp_advertised(
        &self,
        lease: LeaseId,
        holder: &str,
        advertised: &str,
        floor: u64,
    ) -> Result<u64> {
        each!(LeaseInner, self.inner, m => Box::pin(m.stamp_advertised(lease, holder, advertised, floor)).await)
    }

    fn supports_advertised(&self) -> bool {
        each!(LeaseInner, self.inner, m => m.supports_advertised())
    }

    async fn change(&self, from: LeaseId, to: LeaseId) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::change(m, from, to)).await)
    }

    async fn inspect(&self) -> Result<Option<LeaseInfo>> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::inspect(m)).await)
    }

    fn name(&self) -> String {
        each!(LeaseInner, self.inner, m => m.name())
    }

    fn min_request_timeout(&self) -> Option<Duration> {
        each!(LeaseInner, self.inner, m => LeaseStore::min_request_timeout(m))
    }

    async fn read_state(&self) -> Result<Vec<u8>> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::read_state(m)).await)
    }

    async fn write_state(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(LeaseStore::write_state(m, lease, state)).await)
    }

    fn supports_candidates(&self) -> bool {
        each!(LeaseInner, self.inner, m => m.supports_candidates())
    }

    async fn advertise(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> Result<Acquire> {
        each!(LeaseInner, self.inner, m => Box::pin(m.advertise(record, candidate, duration)).await)
    }

    async fn keep_advertising(&self, record: LeaseId, holder: &str) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(m.keep_advertising(record, holder)).await)
    }

    async fn withdraw(&self, record: LeaseId, holder: &str) -> Result<()> {
        each!(LeaseInner, self.inner, m => Box::pin(m.withdraw(record, holder)).await)
    }

    async fn candidates(&self) -> Result<Vec<Candidate>> {
        each!(LeaseInner, self.inner, m => Box::pin(m.candidates()).await)
    }
}

/// The leases of a lease set in one container, through the backend its
/// [`BlobSettings`] name: each lease is the blob `<set>/<name>`, where
/// `<set>` is the settings' blob name. All its leases share one HTTP client
/// and connection pool, and one List Blobs call (with metadata) reads the
/// state of all of them.
#[derive(Clone)]
pub struct BlobLeaseSetStore {
    settings: BlobSettings,
    inner: SetInner,
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
        let backend = settings.backend();
        backend.check_built_in()?;
        let inner = match backend {
            #[cfg(feature = "official")]
            Backend::Official => SetInner::Official(OfficialLeaseSetStore::new(
                &OfficialSettings::from_blob_settings(settings)?,
            )?),
            #[cfg(feature = "sdk-v021")]
            Backend::SdkV021 => SetInner::SdkV021(SdkV021LeaseSetStore::new(settings)?),
            #[allow(unreachable_patterns)] // every backend when all are built in
            _ => unreachable!("check_built_in refused {backend}"),
        };
        Ok(BlobLeaseSetStore {
            settings: settings.clone(),
            inner,
        })
    }

    /// The same store with another collection of stale member and candidate
    /// blobs (default [`Collection::default`]).
    #[must_use = "the store is returned by value"]
    pub fn with_collection(mut self, collection: Collection) -> Self {
        self.inner = rebuild!(SetInner, self.inner, s => s.with_collection(collection));
        self
    }

    /// The same store with another cap on each call of its leases and
    /// listings (default 3 s).
    #[must_use = "the store is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.inner = rebuild!(SetInner, self.inner, s => s.with_request_timeout(timeout));
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
        let (settings, _) = self.settings.in_set(name)?;
        let inner = match self.inner {
            #[cfg(feature = "official")]
            SetInner::Official(ref s) => LeaseInner::Official(s.lease(name)?),
            #[cfg(feature = "sdk-v021")]
            SetInner::SdkV021(ref s) => LeaseInner::SdkV021(s.lease(name)?),
            #[cfg(not(any(feature = "official", feature = "sdk-v021")))]
            SetInner::None(never) => match never {},
        };
        Ok(BlobLeaseManager { settings, inner })
    }

    fn min_request_timeout(&self) -> Option<Duration> {
        each!(SetInner, self.inner, s => LeaseSetStore::min_request_timeout(s))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseInfo)>> {
        each!(SetInner, self.inner, s => Box::pin(s.list(prefix)).await)
    }

    async fn collect(&self, listing: &[(String, LeaseInfo)]) -> usize {
        each!(SetInner, self.inner, s => Box::pin(s.collect(listing)).await)
    }

    async fn remove(&self, name: &str) -> bool {
        each!(SetInner, self.inner, s => Box::pin(s.remove(name)).await)
    }
}
