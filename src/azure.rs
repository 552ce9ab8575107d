//! Azure Blob Storage specifics: the stores on blobs
//! ([`BlobLeaseManager`], one lease; [`BlobLeaseSetStore`], a lease set's
//! container), the SDK they speak through ([`Backend`]), credentials from
//! the environment, the emulator's well-known account, and the
//! [`metadata`] a lease blob carries.
//!
//! The mutex and the lease set make their stores from
//! [`BlobSettings`](crate::BlobSettings) themselves. Name these to inspect,
//! break or stamp a lease by hand, to put leases under a
//! [quorum](crate::quorum), or to build a mutex over a store
//! ([`BlobDistributedMutex::with_store`](crate::BlobDistributedMutex::with_store)).

// For contributors: how this module is laid out.
// Everything that speaks Azure Blob Storage: the settings and credentials,
// the choice of SDK, and the blob protocol written once over the calls
// each SDK offers.
//
// The layers, top down:
// - the stores users build from [`BlobSettings`]: [`BlobLeaseManager`]
// (`lease`, with the leader's state in `state` and the candidates of a
// handover in `candidates`) and [`BlobLeaseSetStore`] (`set`); every
// call they make is bounded by their request timeout, on every path;
// - what a lease record holds and what storage's answers mean
// (`protocol`); the collection of stale blobs is the store seam's
// (`store::collect`), since the memory store collects as Azure's does;
// - the blob calls, one request each (`calls`: the trait [`BlobCalls`]),
// and the SDK the settings name (`backend`: [`Backend`] and the enum of
// the SDKs' calls), each request in a slot of its client's requests in
// flight (the store seam's `in_flight`, which the memory store's paced
// requests share);
// - one folder per SDK, the only code that names one: `official`
// (Microsoft's official SDK, feature `official`, on by default) and
// `sdk_v021` (the frozen 0.21 crates, feature `sdk-v021`);
// - settings and connection strings (`settings`), the HTTP client of the
// 1.x pipeline (`http`), the credential chosen from the environment
// (`default_credential`, feature `azure_identity`).
//
// Nothing here knows the engine, the mutex or the lease set, and no
// `#[cfg]` on a backend's feature lives outside this folder.
//
// [`BlobCalls`]: calls::BlobCalls

// Built with no backend, the SDKs' calls hold no value, and the code after
// one is unreachable: expected there, and only there.
#![cfg_attr(
    not(any(feature = "official", feature = "sdk-v021")),
    allow(unreachable_code, unused_variables, dead_code, clippy::unused_async)
)]

pub(crate) mod backend;
pub(crate) mod calls;
mod candidates;
#[cfg(feature = "azure_identity")]
pub(crate) mod credential_options;
#[cfg(feature = "azure_identity")]
pub(crate) mod default_credential;
#[cfg(any(feature = "official", feature = "azure_identity"))]
pub(crate) mod http;
mod lease;
#[cfg(feature = "official")]
pub(crate) mod official;
pub(crate) mod protocol;
#[cfg(feature = "sdk-v021")]
pub(crate) mod sdk_v021;
mod set;
pub(crate) mod settings;
mod state;

#[cfg(feature = "azure_identity")]
#[cfg_attr(docsrs, doc(cfg(feature = "azure_identity")))]
pub use credential_options::credential_options;
#[cfg(feature = "azure_identity")]
#[cfg_attr(docsrs, doc(cfg(feature = "azure_identity")))]
pub use default_credential::default_credential;
pub use lease::BlobLeaseManager;
pub use set::BlobLeaseSetStore;
pub use settings::{Backend, AZURITE_ACCOUNT, AZURITE_ENDPOINT};

/// The metadata keys of a lease blob, for tools that read the blob beside
/// the crate (the guide's [state chapter](crate::guide::state) shows a
/// lease blob's metadata). The crate writes and reads them; nothing else
/// needs to.
pub mod metadata {
    pub use super::protocol::{
        ACQUIRED_AT_KEY, ADVERTISED_KEY, EPOCH_KEY, HOLDER_KEY, MEMBER_KEY, PRIORITY_KEY,
        PROPOSED_KEY,
    };
}
