//! The client options for an `azure_identity` 1.x credential that the
//! application builds itself: the crate's own HTTP transport.

use azure_core::http::ClientOptions;

use crate::error::Result;

/// `ClientOptions` for a credential of `azure_identity` 1.x (such as
/// `ManagedIdentityCredential` or `WorkloadIdentityCredential`) that reach
/// the token endpoint over the same HTTP client as the crate's stores: its
/// TLS names its own crypto provider, so the credential works whether or
/// not the application installed a process-wide rustls provider.
///
/// ```no_run
/// # fn main() -> blob_mutex::Result<()> {
/// use azure_identity::{ManagedIdentityCredential, ManagedIdentityCredentialOptions};
///
/// let options = ManagedIdentityCredentialOptions {
///     client_options: blob_mutex::azure::credential_options()?,
///     ..ManagedIdentityCredentialOptions::default()
/// };
/// let credential = ManagedIdentityCredential::new(Some(options))
///     .map_err(|e| blob_mutex::Error::Authentication {
///         status: 0,
///         code: "CredentialUnavailable".to_owned(),
///         message: e.to_string(),
///     })?;
/// let settings = blob_mutex::BlobSettings::with_token_credential(
///     "myaccount", credential, "leases", "nightly",
/// )?;
/// # let _ = settings;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`Error::Transport`](crate::Error::Transport) when the HTTP client
/// cannot be made.
pub fn credential_options() -> Result<ClientOptions> {
    Ok(ClientOptions {
        transport: Some(crate::azure::http::transport()?),
        ..ClientOptions::default()
    })
}
