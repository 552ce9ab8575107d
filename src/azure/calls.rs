//! The blob calls that one Azure SDK offers the crate, and nothing more.
//!
//! Each SDK adapter (`official`, `sdk_v021`) implements [`BlobCalls`]: one
//! request per method, its answer in the words below, no retries, no time
//! limit and no protocol. Everything the crate builds from these calls —
//! epochs and stamps, candidates, fenced state, listings, collection, and
//! the time limit on every call — is written once above them, for every
//! SDK (`lease`, `state`, `candidates`, `set`). A new SDK, or a fake that
//! records calls, implements this trait and nothing else.

use std::collections::HashMap;
use std::future::Future;

use crate::azure::protocol::{
    parse_epoch, status_error, ACQUIRED_AT_KEY, ADVERTISED_KEY, HOLDER_KEY, MEMBER_KEY,
};
use crate::error::{redact, Cause, Error};
use crate::store::{LeaseId, LeaseInfo, LeaseState};

/// A blob's metadata, as sent and as read.
pub(crate) type Metadata = HashMap<String, String>;

/// The outcome of one call.
pub(crate) type Call<T> = std::result::Result<T, CallError>;

/// A call that failed, as the protocol tells failures apart: by the status
/// and `x-ms-error-code` storage answered, or by why no answer came.
#[derive(Debug)]
pub(crate) enum CallError {
    /// Storage answered with an error status.
    Status {
        /// The HTTP status.
        status: u16,
        /// The `x-ms-error-code`, when storage sent one.
        code: Option<String>,
        /// What storage said, as `" (storage said: …)"`, secrets removed;
        /// empty when it said nothing.
        said: String,
    },
    /// The credential gave no token.
    Credential(Cause),
    /// An answer came that could not be read.
    Unreadable(String),
    /// An error status without the `x-ms-error-code` that the Blob service
    /// sends with every error: not storage's answer.
    NotStorage(u16),
    /// The blob is longer than the most the caller would read (the limit).
    TooLong(usize),
    /// No answer came: the connection failed or was cut.
    Transport(Cause),
}

/// What an SDK tells of a failed call: the status and error code storage
/// answered, or why no answer could be used.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Storage answered this status, with this `x-ms-error-code`.
    Status(u16, Option<String>),
    /// The credential gave no token.
    Credential,
    /// The answer could not be read.
    Unreadable,
    /// No answer came.
    Transport,
}

impl CallError {
    /// An SDK's `error`, which failed as `failure`, in the calls' words;
    /// `said` is what storage said with an error status (see
    /// [`said`](crate::azure::protocol::said)), asked only then.
    pub(crate) fn from_sdk(
        error: &(dyn std::error::Error + 'static),
        failure: Failure,
        said: impl FnOnce() -> String,
    ) -> CallError {
        let failure = match failure {
            // An SDK that found no `x-ms-error-code` may put the status in
            // its place; storage's codes are words, never numbers.
            Failure::Status(status, Some(code)) if code.bytes().all(|b| b.is_ascii_digit()) => {
                Failure::Status(status, None)
            }
            other => other,
        };
        match failure {
            Failure::Status(status, None) if !storage_could_omit_the_code(status) => {
                CallError::NotStorage(status)
            }
            Failure::Status(status, code) => CallError::Status {
                status,
                code,
                said: said(),
            },
            Failure::Credential => CallError::Credential(Cause::of(error)),
            Failure::Unreadable => CallError::Unreadable(redact(&error.to_string())),
            Failure::Transport => CallError::Transport(Cause::of(error)),
        }
    }

    /// The status storage answered; `None` when no answer came.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            CallError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The `x-ms-error-code` storage answered.
    pub(crate) fn code(&self) -> Option<&str> {
        match self {
            CallError::Status { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// Whether storage answered `status` with the error code `code`.
    pub(crate) fn is(&self, status: u16, code: &str) -> bool {
        self.status() == Some(status) && self.code() == Some(code)
    }

    /// The crate's error for this failure of `operation`: by status and
    /// code (a lost lease, a refusal naming what to grant, a storage
    /// error), or by the reason no answer came.
    pub(crate) fn into_error(self, operation: &'static str) -> Error {
        match self {
            CallError::Status { status, code, said } => {
                status_error(operation, status, code, &said)
            }
            CallError::Credential(source) => Error::CredentialUnavailable { operation, source },
            CallError::Unreadable(message) => Error::UnexpectedResponse { operation, message },
            CallError::NotStorage(status) => Error::NotStorage { operation, status },
            CallError::TooLong(limit) => Error::UnexpectedResponse {
                operation,
                message: format!("the blob is longer than the limit of {limit} bytes"),
            },
            CallError::Transport(source) => Error::Transport { operation, source },
        }
    }

    /// As [`into_error`](Self::into_error), for a call on a lease we hold
    /// (renew, release): a blob that is gone is a lost lease.
    pub(crate) fn on_held_lease(self, operation: &'static str) -> Error {
        match self {
            CallError::Status {
                status: 404, code, ..
            } => Error::LeaseLost(format!(
                "{operation}: {} (the blob no longer exists)",
                code.as_deref().unwrap_or("404")
            )),
            other => other.into_error(operation),
        }
    }
}

/// Whether an error status without an `x-ms-error-code` may still be the
/// Blob service's: one that a proxy or load balancer in front of it may
/// answer for it (408, 429 and 5xx: transient), and the refusals 401 and
/// 403, told by their status alone. Any other (404 above all, which would
/// read as a free lease) is not storage's answer.
fn storage_could_omit_the_code(status: u16) -> bool {
    matches!(status, 401 | 403 | 408 | 429) || status >= 500
}

/// What Get Blob Properties (and each blob of a listing) says of a blob.
#[derive(Debug, Clone, Default)]
pub(crate) struct Properties {
    /// The lease state.
    pub(crate) state: Option<LeaseState>,
    /// Whether the lease is infinite.
    pub(crate) infinite: bool,
    /// The blob's metadata.
    pub(crate) metadata: Metadata,
    /// The content length in bytes.
    pub(crate) content_length: u64,
    /// The blob's `ETag`.
    pub(crate) etag: Option<String>,
    /// Storage's clock when it answered (the answer's `Date` header); `None`
    /// in a listing.
    pub(crate) date: Option<time::OffsetDateTime>,
}

impl Properties {
    /// What the properties say of the lease: its state, and the last
    /// term's record in the metadata.
    pub(crate) fn info(&self) -> LeaseInfo {
        let state = self.state.unwrap_or(LeaseState::Available);
        let metadata = &self.metadata;
        let mut info = LeaseInfo::new(state);
        info.infinite = (state == LeaseState::Leased).then_some(self.infinite);
        info.holder = metadata.get(HOLDER_KEY).cloned();
        info.epoch = parse_epoch(metadata);
        info.acquired_at = metadata.get(ACQUIRED_AT_KEY).cloned();
        info.member = metadata.contains_key(MEMBER_KEY);
        info.advertised = metadata.get(ADVERTISED_KEY).cloned();
        info.content_length = self.content_length;
        info.etag = self.etag.clone().unwrap_or_default();
        info.storage_time = self.date.map(std::time::SystemTime::from);
        info
    }
}

/// One blob of a listing: its full name and properties.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    /// The blob's name in the container.
    pub(crate) name: String,
    /// Its properties and metadata.
    pub(crate) properties: Properties,
}

/// A Put Blob: the content, the metadata it replaces all metadata with,
/// and its conditions.
#[derive(Debug, Default)]
pub(crate) struct Put<'a> {
    /// The content.
    pub(crate) body: Vec<u8>,
    /// The metadata to write; none when `None`.
    pub(crate) metadata: Option<&'a Metadata>,
    /// The lease id the blob's lease must be held under.
    pub(crate) lease: Option<LeaseId>,
    /// `If-Match`: the `ETag` the blob must have.
    pub(crate) if_match: Option<&'a str>,
    /// `If-None-Match: *`: only when the blob does not exist.
    pub(crate) if_none_match_any: bool,
}

/// The blob calls of one SDK, on one container. `blob` is a blob's name in
/// that container. Each method sends one request (a listing one per page)
/// and answers as storage did; the caller bounds the time.
pub(crate) trait BlobCalls: Clone + Send + Sync + 'static {
    /// A short name of the container for logs: `container`. Never a secret.
    fn container(&self) -> &str;

    /// Acquire Lease for `seconds` under `proposed`; the lease id answered.
    fn acquire_lease(
        &self,
        blob: &str,
        proposed: LeaseId,
        seconds: u8,
    ) -> impl Future<Output = Call<Option<LeaseId>>> + Send;

    /// Renew Lease under `lease`; the lease id answered.
    fn renew_lease(
        &self,
        blob: &str,
        lease: LeaseId,
    ) -> impl Future<Output = Call<Option<LeaseId>>> + Send;

    /// Change Lease from `from` to `to`; the lease id answered.
    fn change_lease(
        &self,
        blob: &str,
        from: LeaseId,
        to: LeaseId,
    ) -> impl Future<Output = Call<Option<LeaseId>>> + Send;

    /// Release Lease under `lease`.
    fn release_lease(&self, blob: &str, lease: LeaseId) -> impl Future<Output = Call<()>> + Send;

    /// Break Lease with a break period of `seconds` (0 to 60); the seconds
    /// until the lease is broken.
    fn break_lease(&self, blob: &str, seconds: u8) -> impl Future<Output = Call<u64>> + Send;

    /// Get Blob Properties, under `lease` when given.
    fn properties(
        &self,
        blob: &str,
        lease: Option<LeaseId>,
    ) -> impl Future<Output = Call<Properties>> + Send;

    /// Set Blob Metadata under `lease`, with `If-Match` when given.
    fn set_metadata(
        &self,
        blob: &str,
        metadata: &Metadata,
        lease: LeaseId,
        if_match: Option<&str>,
    ) -> impl Future<Output = Call<()>> + Send;

    /// Put Blob (a block blob in one request).
    fn put(&self, blob: &str, put: Put<'_>) -> impl Future<Output = Call<()>> + Send;

    /// Get Blob: the content, refused without being read whole when it is
    /// longer than `max_len` ([`CallError::TooLong`]).
    fn get(&self, blob: &str, max_len: usize) -> impl Future<Output = Call<Vec<u8>>> + Send;

    /// Delete Blob, with `If-Match` when given and no lease id.
    fn delete(&self, blob: &str, if_match: Option<&str>) -> impl Future<Output = Call<()>> + Send;

    /// Create Container.
    fn create_container(&self) -> impl Future<Output = Call<()>> + Send;

    /// List Blobs with metadata: every blob whose name starts with
    /// `prefix`, over as many pages as it takes.
    fn list(&self, prefix: &str) -> impl Future<Output = Call<Vec<Listed>>> + Send;
}
