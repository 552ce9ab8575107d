//! The blob calls of whichever SDK the settings name ([`AnyCalls`]); the
//! choice itself is [`Backend`], made once from the settings.
//!
//! Two SDKs implement the blob calls: `official` (Microsoft's official
//! Azure SDK for Rust, `azure_storage_blob` 1.x; feature `official`, on by
//! default) and `sdk_v021` (the frozen `azure_storage_blobs` 0.21 crates;
//! feature `sdk-v021`). [`BlobSettings`] names one ([`Backend`]); the
//! protocol above the calls, and everything above `azure/`, never does.
//!
//! Why an enum over the SDKs' calls and not a trait object or a generic
//! parameter: [`BlobCalls`] returns `impl Future`, so it is not object
//! safe; a type parameter would make every user name a backend in their
//! types (`BlobDistributedMutex<BlobLeaseManager<Official>>`); and an enum
//! keeps the choice a value that settings, a flag or an environment
//! variable can carry, with one match per call. Mixed quorums follow: each
//! account's `BlobLeaseManager` is on its own settings' backend.

// Built with no backend, the stores hold no value, and the code after a
// match on one is unreachable: expected there, and only there.
#![cfg_attr(
    not(any(feature = "official", feature = "sdk-v021")),
    allow(unreachable_code, unused_variables, unused_mut, clippy::unused_async)
)]

use std::sync::Arc;

use tokio::time::Instant;
use tracing::trace;

use crate::azure::calls::{BlobCalls, Call, Listed, Metadata, Properties, Put};
use crate::azure::settings::{Backend, BlobSettings};
use crate::error::{Error, Result};
use crate::store::in_flight::{InFlight, Kind};
use crate::store::LeaseId;

#[cfg(feature = "official")]
use crate::azure::official::{OfficialCalls, OfficialSettings};
#[cfg(feature = "sdk-v021")]
use crate::azure::sdk_v021::SdkV021Calls;

/// Calls `$body` with `$calls` bound to the SDK's calls in `$any`, in a
/// slot of the client's requests in flight ([`InFlight`]) for a request of
/// `$kind`. The official SDK's futures are large (kilobytes): the stores'
/// public calls box each call once, the SDK's request in it (`lease.rs`,
/// `set.rs`), so that every future that awaits a storage call (the mutex's
/// campaign among them) stays small, at one allocation per request.
///
/// A member lease's requests are recorded at trace level (target
/// [`MEMBER_REQUESTS`]): when each took its slot, how long it waited for
/// it, and how long the SDK then took to answer (the HTTP client's pool,
/// the wire and storage). The blob is named, never a lease id.
macro_rules! each {
    ($any:expr, $kind:expr, $op:literal, $blob:expr, $calls:ident => $body:expr) => {{
        let lane = $any.lane($kind);
        let asked = (lane == Kind::Member).then(Instant::now);
        let _slot = $any.in_flight.enter(lane).await;
        let taken = asked.map(|asked| {
            trace!(target: MEMBER_REQUESTS, op = $op, blob = $blob, waited_us = micros(asked.elapsed()), "member request took its slot");
            Instant::now()
        });
        let answer: Call<_> = match &$any.sdk {
            #[cfg(feature = "official")]
            Sdk::Official($calls) => $body.await,
            #[cfg(feature = "sdk-v021")]
            Sdk::SdkV021($calls) => $body.await,
            #[cfg(not(any(feature = "official", feature = "sdk-v021")))]
            Sdk::None(never) => match *never {},
        };
        if let Some(taken) = taken {
            trace!(target: MEMBER_REQUESTS, op = $op, blob = $blob, took_us = micros(taken.elapsed()), ok = answer.is_ok(), "member request answered");
        }
        answer
    }};
}

/// The tracing target of the member lease's request records (see `each!`).
pub(crate) const MEMBER_REQUESTS: &str = "blob_mutex::member_requests";

/// Whole microseconds, saturating: a field of the member request records.
fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The blob calls of the SDK that the settings name, and the slots of
/// its client's requests in flight (shared by every clone, as the client
/// is).
#[derive(Clone)]
pub(crate) struct AnyCalls {
    sdk: Sdk,
    in_flight: Arc<InFlight>,
    /// Whether these are a lease set's member lease's calls, whose
    /// requests take the slots kept for members ([`Kind::Member`]).
    member: bool,
}

/// The calls of one SDK.
#[derive(Clone)]
enum Sdk {
    #[cfg(feature = "official")]
    Official(OfficialCalls),
    #[cfg(feature = "sdk-v021")]
    SdkV021(SdkV021Calls),
    /// No backend is built in: no value exists.
    #[cfg(not(any(feature = "official", feature = "sdk-v021")))]
    #[allow(dead_code)] // never constructed, by design
    None(std::convert::Infallible),
}

impl AnyCalls {
    /// The calls on the settings' container, through the settings' backend.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `backend` when it is not built in,
    /// `transport` or `client_options` when the settings carry a transport
    /// or client options for a backend other than the official one; the errors of the SDK's settings otherwise.
    pub(crate) fn new(settings: &BlobSettings) -> Result<Self> {
        let backend = settings.backend();
        backend.check_built_in()?;
        if settings.transport().is_some() && backend != Backend::Official {
            return Err(Error::invalid(
                "transport",
                format!(
                    "the {backend} backend takes no azure_core 1.x transport: use the official backend, or no transport"
                ),
            ));
        }
        if settings.client_options().is_some() && backend != Backend::Official {
            return Err(Error::invalid(
                "client_options",
                format!(
                    "the {backend} backend takes no azure_core 1.x client options: use the official backend, or none"
                ),
            ));
        }
        let sdk = match backend {
            #[cfg(feature = "official")]
            Backend::Official => Sdk::Official(OfficialCalls::new(
                &OfficialSettings::from_blob_settings(settings)?,
            )?),
            #[cfg(feature = "sdk-v021")]
            Backend::SdkV021 => Sdk::SdkV021(SdkV021Calls::from_settings(settings)?),
            #[allow(unreachable_patterns)] // every backend when all are built in
            _ => unreachable!("check_built_in refused {backend}"),
        };
        Ok(AnyCalls::of(sdk))
    }

    fn of(sdk: Sdk) -> Self {
        AnyCalls {
            sdk,
            in_flight: Arc::default(),
            member: false,
        }
    }

    /// The same calls, on the same client, for a lease set's member lease:
    /// every request takes a slot kept for members, so the membership
    /// never waits behind the partitions' renewals.
    pub(crate) fn for_member(mut self) -> Self {
        self.member = true;
        self
    }

    /// The slots a request of `kind` takes through these calls.
    fn lane(&self, kind: Kind) -> Kind {
        if self.member {
            Kind::Member
        } else {
            kind
        }
    }
}

impl AnyCalls {
    /// Whether `self` and `other` send through one client (one connection
    /// pool, one credential).
    #[cfg(test)]
    pub(crate) fn same_client(&self, other: &AnyCalls) -> bool {
        let same_sdk_client = match (&self.sdk, &other.sdk) {
            #[cfg(feature = "official")]
            (Sdk::Official(a), Sdk::Official(b)) => a.same_client(b),
            #[cfg(feature = "sdk-v021")]
            (Sdk::SdkV021(a), Sdk::SdkV021(b)) => a.same_client(b),
            #[allow(unreachable_patterns)] // with one backend built in
            _ => false,
        };
        same_sdk_client && Arc::ptr_eq(&self.in_flight, &other.in_flight)
    }
}

impl BlobCalls for AnyCalls {
    fn container(&self) -> &str {
        match &self.sdk {
            #[cfg(feature = "official")]
            Sdk::Official(calls) => calls.container(),
            #[cfg(feature = "sdk-v021")]
            Sdk::SdkV021(calls) => calls.container(),
            #[cfg(not(any(feature = "official", feature = "sdk-v021")))]
            Sdk::None(never) => match *never {},
        }
    }

    async fn acquire_lease(
        &self,
        blob: &str,
        proposed: LeaseId,
        seconds: u8,
    ) -> Call<Option<LeaseId>> {
        each!(self, Kind::Other, "acquire", blob, c => c.acquire_lease(blob, proposed, seconds))
    }

    async fn renew_lease(&self, blob: &str, lease: LeaseId) -> Call<Option<LeaseId>> {
        each!(self, Kind::Keeps, "renew", blob, c => c.renew_lease(blob, lease))
    }

    async fn change_lease(&self, blob: &str, from: LeaseId, to: LeaseId) -> Call<Option<LeaseId>> {
        each!(self, Kind::Keeps, "change", blob, c => c.change_lease(blob, from, to))
    }

    async fn release_lease(&self, blob: &str, lease: LeaseId) -> Call<()> {
        each!(self, Kind::Keeps, "release", blob, c => c.release_lease(blob, lease))
    }

    async fn break_lease(&self, blob: &str, seconds: u8) -> Call<u64> {
        each!(self, Kind::Other, "break", blob, c => c.break_lease(blob, seconds))
    }

    async fn properties(&self, blob: &str, lease: Option<LeaseId>) -> Call<Properties> {
        each!(self, Kind::Other, "properties", blob, c => c.properties(blob, lease))
    }

    async fn set_metadata(
        &self,
        blob: &str,
        metadata: &Metadata,
        lease: LeaseId,
        if_match: Option<&str>,
    ) -> Call<()> {
        each!(self, Kind::Other, "set_metadata", blob, c => c.set_metadata(blob, metadata, lease, if_match))
    }

    async fn put(&self, blob: &str, put: Put<'_>) -> Call<()> {
        each!(self, Kind::Other, "put", blob, c => c.put(blob, put))
    }

    async fn get(&self, blob: &str, max_len: usize) -> Call<Vec<u8>> {
        each!(self, Kind::Other, "get", blob, c => c.get(blob, max_len))
    }

    async fn delete(&self, blob: &str, if_match: Option<&str>) -> Call<()> {
        each!(self, Kind::Other, "delete", blob, c => c.delete(blob, if_match))
    }

    async fn create_container(&self) -> Call<()> {
        each!(self, Kind::Other, "create_container", "", c => c.create_container())
    }

    async fn list(&self, prefix: &str) -> Call<Vec<Listed>> {
        each!(self, Kind::Other, "list", prefix, c => c.list(prefix))
    }
}
