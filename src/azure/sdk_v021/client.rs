//! The 0.21 SDK's client of a container (the settings' credential, the
//! SDK's retries off, a pool of kept-alive connections), and its answers in
//! the crate's words: errors by status and `x-ms-error-code` (see
//! `blob_protocol`), failures that got no answer by their kind, and lease
//! states.

use std::sync::Arc;
use std::time::Duration;

use azure_core_v021::error::ErrorKind;
use azure_core_v021::{HttpClient, RetryOptions, TransportOptions};
use azure_storage::CloudLocation;
use azure_storage_blobs::prelude::{ClientBuilder, ContainerClient};

use crate::azure::calls::{CallError, Failure};
use crate::azure::protocol::said;
use crate::azure::settings::BlobSettings;
use crate::error::{Cause, Error, Result};

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

/// The message storage sent with an error status (see [`said`]); empty when
/// it sent none.
fn service_message(error: &azure_core_v021::Error) -> String {
    error
        .as_http_error()
        .and_then(|e| e.error_message())
        .map(said)
        .unwrap_or_default()
}

/// An SDK error in the words of the blob calls: a status with its code
/// and message, a credential without a token, an answer that could not be
/// read, or no answer.
pub(super) fn call_error(error: &azure_core_v021::Error) -> CallError {
    let failure = match error.kind() {
        ErrorKind::HttpResponse { status, error_code } => {
            Failure::Status(u16::from(*status), error_code.clone())
        }
        ErrorKind::Credential => Failure::Credential,
        ErrorKind::DataConversion => Failure::Unreadable,
        _ => Failure::Transport,
    };
    CallError::from_sdk(error, failure, || service_message(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_error(operation: &'static str, error: &azure_core_v021::Error) -> Error {
        call_error(error).into_error(operation)
    }

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
