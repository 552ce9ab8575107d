//! The official SDK's clients as this crate needs them (one pooled HTTP
//! client, no retries, a pinned service version), and its answers in the
//! crate's words: errors by status and `x-ms-error-code`, lease states.

use std::sync::Arc;

use azure_core::error::ErrorKind;
use azure_core::http::policies::Policy;
use azure_core::http::{ClientOptions, RetryOptions};
use azure_storage_blob::{BlobContainerClient, BlobContainerClientOptions};

use crate::azure::calls::{CallError, Failure};
use crate::azure::protocol::said;
use crate::error::{redact, Error};

use super::sas_policy::SignWithKey;
use super::OfficialSettings;

/// The service version sent (`x-ms-version`): the newest that Azurite
/// 3.35 knows, so that the backend runs on the emulator the project pins
/// without `--skipApiVersionCheck`. Azure accepts it; every call this
/// crate makes has been in the REST API since 2019.
pub(super) const SERVICE_VERSION: &str = "2025-11-05";

/// A container client of the settings: one HTTP client with a pool of
/// kept-alive connections, shared by every blob client made from it, the
/// SDK's retries off (the crate owns retries and deadlines), and a SAS
/// signed from the account key on every request when the settings hold a
/// key.
///
/// The caller's client options, when the settings carry them, give
/// everything else (user agent, instrumentation, cloud, logging, and their
/// policies, run after the signer): retries stay off whatever they say,
/// since every call is bounded by the caller against the lease's deadline.
pub(super) fn container_client(settings: &OfficialSettings) -> Result<BlobContainerClient, Error> {
    let mut per_call_policies: Vec<Arc<dyn Policy>> = match settings.signer() {
        Some(signer) => vec![Arc::new(SignWithKey(signer))],
        None => Vec::new(),
    };
    let mut client_options = settings.client_options().cloned().unwrap_or_default();
    if let Some(id) = &client_options.user_agent.application_id {
        check_application_id(id)?;
    }
    per_call_policies.append(&mut client_options.per_call_policies);
    let options = BlobContainerClientOptions {
        client_options: ClientOptions {
            retry: RetryOptions::none(),
            transport: Some(match settings.transport() {
                Some(transport) => transport.clone(),
                None => crate::azure::http::transport()?,
            }),
            per_call_policies,
            ..client_options
        },
        version: SERVICE_VERSION.to_owned(),
    };
    BlobContainerClient::new(
        settings.container_url().clone(),
        settings.credential(),
        Some(options),
    )
    .map_err(|e| Error::invalid("container_url", redact(&e.to_string())))
}

/// Refuses an application id that the SDK's user-agent policy would panic
/// on: more than 24 characters, or a character outside RFC 9110's tokens.
fn check_application_id(id: &str) -> Result<(), Error> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if id.len() > 24 || !id.chars().all(token) {
        return Err(Error::invalid(
            "client_options",
            format!(
                "user_agent.application_id {id:?} must be at most 24 characters of an HTTP token (letters, digits and !#$%&'*+-.^_`|~)"
            ),
        ));
    }
    Ok(())
}

/// The `<Message>` storage sent with an error status (see [`said`]);
/// empty when it sent none (a `HEAD` answer has no body).
fn service_message(error: &azure_core::Error) -> String {
    let ErrorKind::HttpResponse {
        raw_response: Some(raw),
        ..
    } = error.kind()
    else {
        return String::new();
    };
    let body = String::from_utf8_lossy(raw.body());
    body.split_once("<Message>")
        .and_then(|(_, rest)| rest.split_once("</Message>"))
        .map(|(message, _)| said(message))
        .unwrap_or_default()
}

/// An SDK error in the words of the blob calls: a status with its code
/// and message, a credential without a token, an answer that could not be
/// read, or no answer.
pub(super) fn call_error(error: &azure_core::Error) -> CallError {
    let failure = match error.kind() {
        ErrorKind::HttpResponse {
            status, error_code, ..
        } => Failure::Status(u16::from(*status), error_code.clone()),
        ErrorKind::Credential => Failure::Credential,
        ErrorKind::DataConversion => Failure::Unreadable,
        _ => Failure::Transport,
    };
    CallError::from_sdk(error, failure, || service_message(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_error(operation: &'static str, error: &azure_core::Error) -> Error {
        call_error(error).into_error(operation)
    }

    fn lease_call_error(operation: &'static str, error: &azure_core::Error) -> Error {
        call_error(error).on_held_lease(operation)
    }

    fn http(status: u16, code: &str) -> azure_core::Error {
        ErrorKind::HttpResponse {
            status: azure_core::http::StatusCode::from(status),
            error_code: Some(code.to_owned()),
            raw_response: None,
        }
        .into_error()
    }

    #[test]
    fn errors_map_as_the_sdk_v021_backend_maps_them() {
        assert!(matches!(
            map_error("renew", &http(409, "LeaseIdMismatchWithLeaseOperation")),
            Error::LeaseLost(_)
        ));
        assert!(matches!(
            map_error("renew", &http(412, "LeaseLost")),
            Error::LeaseLost(_)
        ));
        assert!(map_error("acquire", &http(403, "AuthenticationFailed")).is_fatal());
        let list = map_error("list", &http(403, "AuthorizationPermissionMismatch")).to_string();
        assert!(list.contains("grant list (l) on the container"), "{list}");
        assert!(map_error("renew", &http(503, "ServerBusy")).is_transient());
        assert!(map_error("acquire", &http(400, "InvalidHeaderValue")).is_fatal());
        assert!(matches!(
            lease_call_error("renew", &http(404, "BlobNotFound")),
            Error::LeaseLost(_)
        ));
        let no_token = azure_core::Error::with_message(ErrorKind::Credential, "IMDS timed out");
        let mapped = map_error("acquire", &no_token);
        assert!(mapped.is_transient() && !mapped.is_fatal(), "{mapped:?}");
        let refused = azure_core::Error::with_message(ErrorKind::Connection, "refused");
        assert!(map_error("renew", &refused).is_transient());
    }

    #[test]
    fn the_service_message_is_kept_on_one_line_without_secrets() {
        let body = "<?xml version=\"1.0\"?><Error><Code>ServerBusy</Code><Message>Busy.\n\
                    RequestId:1 https://a.blob.core.windows.net/c/b?sig=SECRET</Message></Error>";
        let raw = azure_core::http::RawResponse::from_bytes(
            azure_core::http::StatusCode::from(503),
            azure_core::http::headers::Headers::new(),
            body.as_bytes().to_vec(),
        );
        let error = ErrorKind::HttpResponse {
            status: azure_core::http::StatusCode::from(503),
            error_code: Some("ServerBusy".to_owned()),
            raw_response: Some(Box::new(raw)),
        }
        .into_error();
        let text = map_error("renew", &error).to_string();
        assert!(text.contains("storage said: Busy.; RequestId:1"), "{text}");
        assert!(!text.contains("SECRET"), "{text}");
    }
}
