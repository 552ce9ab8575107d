//! The 0.21 SDK's client of a container (the settings' credential, the
//! SDK's retries off, a pool of kept-alive connections), and its answers in
//! the crate's words: errors by status and `x-ms-error-code` (see
//! `blob_protocol`), failures that got no answer by their kind, and lease
//! states.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use azure_core_v021::error::ErrorKind;
use azure_core_v021::{HttpClient, RetryOptions, TransportOptions};
use azure_storage::CloudLocation;
use azure_storage_blobs::blob::BlobProperties;
use azure_storage_blobs::prelude::{ClientBuilder, ContainerClient};

use crate::error::{redact, Cause, Error, Result};
use crate::store::blob_protocol::{
    parse_epoch, said, status_error, ACQUIRED_AT_KEY, ADVERTISED_KEY, HOLDER_KEY, MEMBER_KEY,
};
use crate::store::settings::BlobSettings;
use crate::store::{LeaseInfo, LeaseState};

use super::settings::credentials;

/// A client of the settings' container, with the SDK's retries off.
pub(super) fn container_client(settings: &BlobSettings) -> Result<ContainerClient> {
    let credentials = credentials(settings)?;
    let location = CloudLocation::Custom {
        account: settings.account().to_owned(),
        uri: settings.endpoint().to_owned(),
    };
    Ok(ClientBuilder::with_location(location, credentials)
        .retry(RetryOptions::none())
        .transport(TransportOptions::new(http_client()?))
        .container_client(settings.container()))
}

/// How long an idle connection stays in the pool: under the 5 s after which
/// Azurite (Node's default) closes an idle connection, so that a request is
/// not sent on a connection the server is closing. Azure keeps idle
/// connections longer; this only costs a new connection after a pause.
const POOL_IDLE: Duration = Duration::from_secs(4);
/// The most idle connections kept to the endpoint.
const POOL_MAX_IDLE: usize = 32;

/// The HTTP client of one manager or one lease set: a pool of kept-alive
/// connections. The SDK's default client keeps none, which opens a new
/// connection (and, to Azure, a new TLS session) for every request.
fn http_client() -> Result<Arc<dyn HttpClient>> {
    let client = reqwest_v012::Client::builder()
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(POOL_MAX_IDLE)
        .build()
        .map_err(|e| Error::Transport {
            operation: "create the HTTP client",
            source: Cause::new(e.to_string()),
        })?;
    Ok(Arc::new(client))
}

/// The status and `x-ms-error-code` of an error answer; `None` when no
/// answer came.
pub(super) fn http_status(error: &azure_core_v021::Error) -> Option<(u16, Option<String>)> {
    match error.kind() {
        ErrorKind::HttpResponse { status, error_code } => {
            Some((u16::from(*status), error_code.clone()))
        }
        _ => None,
    }
}

pub(super) fn is_not_found(error: &azure_core_v021::Error) -> bool {
    matches!(http_status(error), Some((404, _)))
}

/// The error of a call on a lease we hold (renew, release): as
/// [`map_error`], and a blob that is gone (deleted, as a withdrawn or
/// collected record is, or its container) is a lost lease.
pub(super) fn lease_call_error(operation: &'static str, error: &azure_core_v021::Error) -> Error {
    match http_status(error) {
        Some((404, code)) => Error::LeaseLost(format!(
            "{operation}: {} (the blob no longer exists)",
            code.as_deref().unwrap_or("404")
        )),
        _ => map_error(operation, error),
    }
}

/// The message storage sent with an error status (see [`said`]); empty when
/// it sent none.
fn service_message(error: &azure_core_v021::Error) -> String {
    error
        .as_http_error()
        .and_then(|e| e.error_message())
        .map(said)
        .unwrap_or_default()
}

/// Maps an SDK error to the crate's kinds by status and `x-ms-error-code`,
/// with a message that carries no secret.
pub(super) fn map_error(operation: &'static str, error: &azure_core_v021::Error) -> Error {
    if let Some((status, code)) = http_status(error) {
        return status_error(operation, status, code, &service_message(error));
    }
    match error.kind() {
        ErrorKind::Credential => Error::CredentialUnavailable {
            operation,
            source: Cause::of(error),
        },
        ErrorKind::DataConversion => Error::UnexpectedResponse {
            operation,
            message: redact(&error.to_string()),
        },
        _ => Error::Transport {
            operation,
            source: Cause::of(error),
        },
    }
}

/// What a blob's properties and metadata say of its lease.
pub(super) fn lease_info(
    properties: &BlobProperties,
    metadata: Option<&HashMap<String, String>>,
) -> LeaseInfo {
    let empty = HashMap::new();
    let metadata = metadata.unwrap_or(&empty);
    let state = match properties.lease_state {
        Some(azure_core_v021::LeaseState::Leased) => LeaseState::Leased,
        Some(azure_core_v021::LeaseState::Expired) => LeaseState::Expired,
        Some(azure_core_v021::LeaseState::Breaking) => LeaseState::Breaking,
        Some(azure_core_v021::LeaseState::Broken) => LeaseState::Broken,
        _ => LeaseState::Available,
    };
    let mut info = LeaseInfo::new(state);
    info.infinite = match (state, properties.lease_duration) {
        (LeaseState::Leased, Some(azure_core_v021::LeaseDuration::Infinite)) => Some(true),
        (LeaseState::Leased, _) => Some(false),
        _ => None,
    };
    info.holder = metadata.get(HOLDER_KEY).cloned();
    info.epoch = parse_epoch(metadata);
    info.acquired_at = metadata.get(ACQUIRED_AT_KEY).cloned();
    info.member = metadata.contains_key(MEMBER_KEY);
    info.advertised = metadata.get(ADVERTISED_KEY).cloned();
    info.content_length = properties.content_length;
    info.etag = properties.etag.to_string();
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_that_gives_no_token_is_transient() {
        let error = azure_core_v021::Error::message(ErrorKind::Credential, "IMDS timed out");
        let mapped = map_error("acquire", &error);
        assert!(
            matches!(mapped, Error::CredentialUnavailable { .. })
                && mapped.is_transient()
                && !mapped.is_fatal(),
            "{mapped:?}"
        );
    }

    #[test]
    fn errors_map_by_code() {
        let http = |status: u16, code: &str| {
            azure_core_v021::Error::new(
                ErrorKind::HttpResponse {
                    status: azure_core_v021::StatusCode::try_from(status).unwrap(),
                    error_code: Some(code.to_owned()),
                },
                "x",
            )
        };
        assert!(matches!(
            map_error("renew", &http(409, "LeaseIdMismatchWithLeaseOperation")),
            Error::LeaseLost(_)
        ));
        assert!(matches!(
            map_error("renew", &http(412, "LeaseLost")),
            Error::LeaseLost(_)
        ));
        assert!(matches!(
            map_error("acquire", &http(403, "AuthenticationFailed")),
            Error::Authentication { status: 403, .. }
        ));
        assert!(map_error("acquire", &http(401, "InvalidAuthenticationInfo")).is_fatal());
        // A missing permission names what to grant; a credential that was
        // not accepted says what to check.
        let list = map_error("list", &http(403, "AuthorizationPermissionMismatch")).to_string();
        assert!(list.contains("grant list (l) on the container"), "{list}");
        let write = map_error("write state", &http(403, "AuthorizationPermissionMismatch"));
        assert!(write.to_string().contains("grant write (w)"), "{write}");
        let signature = map_error("renew", &http(403, "AuthenticationFailed")).to_string();
        assert!(
            signature.contains("SAS's signature, start and expiry"),
            "{signature}"
        );
        let busy = map_error("renew", &http(503, "ServerBusy"));
        assert!(busy.is_transient(), "{busy:?}");
        assert!(map_error("acquire", &http(400, "InvalidHeaderValue")).is_fatal());
    }
}
