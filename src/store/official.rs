//! The second storage backend: Microsoft's official Azure SDK for Rust
//! (`azure_core` and `azure_storage_blob` 1.x), behind the feature
//! `official-sdk`, off by default. [`BlobLeaseManager`](crate::BlobLeaseManager)
//! on the frozen 0.21 crates stays the default backend.
//!
//! Decisions, and why (the guide's chapter `docs/guide/backends.md` says
//! how to choose):
//!
//! - **Settings:** a sibling type, [`OfficialSettings`], not
//!   [`BlobSettings`](crate::BlobSettings). The official SDK has no shared
//!   key, and its `TokenCredential` is another trait than the 0.21 one
//!   `BlobSettings` holds; a SAS is what both can share, so a SAS
//!   connection string converts ([`OfficialSettings::from_blob_settings`]).
//! - **Same semantics, same answers.** The lease calls, the epoch rule, the
//!   refusals' wording and what to grant, and the kinds of [`Error`](crate::Error)
//!   per storage answer come from `store::blob_protocol`, which the 0.21
//!   backend uses too: the records one backend writes are the records the
//!   other reads.
//! - **No SDK retries, one pooled client.** The pipeline's retry policy is
//!   `RetryOptions::none()`; every call is bounded by the caller (the mutex,
//!   the lease set's listing) from its send time. One reqwest client, with
//!   kept-alive connections, per manager or set, shared by all its blobs.
//! - **TLS:** the SDK's own client would build rustls on aws-lc (a C build
//!   with cmake); this backend builds the reqwest 0.13 client itself with
//!   rustls on ring and the webpki roots, as the 0.21 backend's.
//! - **Service version:** `x-ms-version` is pinned to 2025-11-05, the
//!   newest that the Azurite 3.35 the project pins accepts; the SDK's
//!   default (2026-04-06) needs Azurite's `--skipApiVersionCheck`.
//! - **Missing calls:** none. Acquire with a proposed id, renew, change,
//!   release, break, conditional Set Blob Metadata and Put Blob with a
//!   lease id, and List Blobs with metadata are all in `azure_storage_blob`
//!   1.1, so no raw request through the pipeline is needed.
//! - **Names in URLs:** the SDK appends a blob name as one path segment,
//!   so the `/` of a name such as `set/members/x` travels as `%2F`; the
//!   service decodes it to the same blob.

mod candidates;
mod client;
mod lease;
mod list;
mod set;
mod settings;

pub use lease::OfficialLeaseManager;
pub use set::OfficialLeaseSetStore;
pub use settings::OfficialSettings;
