//! The default storage backend: Microsoft's official Azure SDK for Rust
//! (`azure_core` and `azure_storage_blob` 1.x), feature `official`, on by
//! default; the only module (with its children) that uses
//! `azure_storage_blob`. Its floor plan is the `sdk_v021` backend's: the
//! blob calls (`calls`, one request each, the whole of what the protocol
//! above needs), the settings as this SDK takes them (`settings`, with
//! `sas`, the tokens signed from an account key), and the client with its
//! errors (`client`).
//!
//! Decisions, and why (the guide's chapter `docs/guide/backends.md` says
//! how to choose):
//!
//! - **Settings:** built from [`BlobSettings`](crate::BlobSettings) like
//!   every backend's (`OfficialSettings::from_blob_settings`). The
//!   official SDK has no shared key, so an account key signs short-lived
//!   SAS tokens here (`sas`), put on each request by a pipeline policy
//!   (`sas_policy`) that keeps them on storage's clock.
//! - **Same semantics, same answers.** The protocol (`azure::lease` and
//!   its neighbours: the epoch rule, candidates, fenced state, listings,
//!   the refusals' wording and what to grant) is written once above the
//!   calls, for both SDKs: the records one backend writes are the records
//!   the other reads.
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

mod calls;
mod client;
mod sas;
mod sas_policy;
mod settings;

pub(crate) use calls::OfficialCalls;
pub(crate) use settings::OfficialSettings;
