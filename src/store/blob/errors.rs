//! The 0.21 SDK's errors as the crate's: an answer by its status and error
//! code (see `blob_protocol`), a failure that got no answer by its kind.

use azure_core::error::ErrorKind;

use crate::error::{redact, Cause, Error};
use crate::store::blob_protocol::{said, status_error};

/// The status and `x-ms-error-code` of an error answer; `None` when no
/// answer came.
pub(super) fn http_status(error: &azure_core::Error) -> Option<(u16, Option<String>)> {
    match error.kind() {
        ErrorKind::HttpResponse { status, error_code } => {
            Some((u16::from(*status), error_code.clone()))
        }
        _ => None,
    }
}

pub(super) fn is_not_found(error: &azure_core::Error) -> bool {
    matches!(http_status(error), Some((404, _)))
}

/// The error of a call on a lease we hold (renew, release): as
/// [`map_error`], and a blob that is gone (deleted, as a withdrawn or
/// collected record is, or its container) is a lost lease.
pub(super) fn lease_call_error(operation: &'static str, error: &azure_core::Error) -> Error {
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
fn service_message(error: &azure_core::Error) -> String {
    error
        .as_http_error()
        .and_then(|e| e.error_message())
        .map(said)
        .unwrap_or_default()
}

/// Maps an SDK error to the crate's kinds by status and `x-ms-error-code`,
/// with a message that carries no secret.
pub(super) fn map_error(operation: &'static str, error: &azure_core::Error) -> Error {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_that_gives_no_token_is_transient() {
        let error = azure_core::Error::message(ErrorKind::Credential, "IMDS timed out");
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
            azure_core::Error::new(
                ErrorKind::HttpResponse {
                    status: azure_core::StatusCode::try_from(status).unwrap(),
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
