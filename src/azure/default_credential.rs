//! A credential chosen from the environment, from `azure_identity` 1.x
//! (feature `azure_identity`): what `DefaultAzureCredential` of the 0.21
//! line did, which `azure_identity` 1.x no longer has.
//!
//! The order, first match wins:
//! 1. `AZURE_FEDERATED_TOKEN_FILE` set: `WorkloadIdentityCredential`
//!    (Kubernetes workload identity; with `AZURE_CLIENT_ID` and
//!    `AZURE_TENANT_ID`).
//! 2. `AZURE_CLIENT_SECRET` set: `ClientSecretCredential` of a service
//!    principal (with `AZURE_CLIENT_ID` and `AZURE_TENANT_ID`).
//! 3. Otherwise, at the first token: `ManagedIdentityCredential` (the
//!    user-assigned identity of `AZURE_CLIENT_ID` when set), then
//!    `DeveloperToolsCredential` (the Azure CLI, then the Azure Developer
//!    CLI); the first that gives a token is used from then on.
//!
//! In production, prefer naming the credential: build it from
//! `azure_identity` and pass it to
//! [`BlobSettings::with_token_credential`](crate::BlobSettings::with_token_credential).

use std::sync::{Arc, Mutex, PoisonError};

use azure_core::credentials::{AccessToken, Secret, TokenCredential, TokenRequestOptions};
use azure_core::http::ClientOptions;
use azure_identity::{
    ClientAssertionCredentialOptions, ClientSecretCredential, ClientSecretCredentialOptions,
    DeveloperToolsCredential, ManagedIdentityCredential, ManagedIdentityCredentialOptions,
    UserAssignedId, WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};

use crate::error::{redact, Error, Result};

/// A token credential of `azure_core` 1.x chosen from the environment, in
/// the order the module `default_credential` documents: workload
/// identity, a service principal's secret, then managed identity and the
/// developer tools (Azure CLI, Azure Developer CLI). Works on every
/// backend.
///
/// # Errors
///
/// [`Error::Authentication`] with code `CredentialUnavailable` when the
/// environment names a credential that cannot be set up (for example
/// `AZURE_CLIENT_SECRET` without `AZURE_TENANT_ID`). The message never
/// repeats a secret.
pub fn default_credential() -> Result<Arc<dyn TokenCredential>> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let client_options = || -> Result<ClientOptions> {
        Ok(ClientOptions {
            transport: Some(crate::azure::http::transport()?),
            ..ClientOptions::default()
        })
    };
    if var("AZURE_FEDERATED_TOKEN_FILE").is_some() {
        let options = WorkloadIdentityCredentialOptions {
            credential_options: ClientAssertionCredentialOptions {
                client_options: client_options()?,
            },
            ..WorkloadIdentityCredentialOptions::default()
        };
        return Ok(WorkloadIdentityCredential::new(Some(options)).map_err(unavailable)?);
    }
    if let Some(secret) = var("AZURE_CLIENT_SECRET") {
        let (Some(tenant), Some(client)) = (var("AZURE_TENANT_ID"), var("AZURE_CLIENT_ID")) else {
            return Err(unavailable_because(
                "AZURE_CLIENT_SECRET needs AZURE_TENANT_ID and AZURE_CLIENT_ID",
            ));
        };
        let options = ClientSecretCredentialOptions {
            client_options: client_options()?,
        };
        return Ok(ClientSecretCredential::new(
            &tenant,
            client,
            Secret::new(secret),
            Some(options),
        )
        .map_err(unavailable)?);
    }
    let managed = ManagedIdentityCredential::new(Some(ManagedIdentityCredentialOptions {
        user_assigned_id: var("AZURE_CLIENT_ID").map(UserAssignedId::ClientId),
        client_options: client_options()?,
    }))
    .map_err(unavailable)?;
    let tools = DeveloperToolsCredential::new(None).map_err(unavailable)?;
    Ok(Arc::new(Chain {
        sources: vec![managed, tools],
        chosen: Mutex::new(None),
    }))
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
fn unavailable(error: azure_core::Error) -> Error {
    unavailable_because(&redact(&error.to_string()))
}

fn unavailable_because(message: &str) -> Error {
    Error::Authentication {
        status: 0,
        code: "CredentialUnavailable".to_owned(),
        message: message.to_owned(),
    }
}

/// Sources tried in turn until one gives a token; that one is kept.
#[derive(Debug)]
struct Chain {
    sources: Vec<Arc<dyn TokenCredential>>,
    chosen: Mutex<Option<usize>>,
}

#[async_trait::async_trait]
impl TokenCredential for Chain {
    async fn get_token(
        &self,
        scopes: &[&str],
        options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        let chosen = *self.chosen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = chosen {
            return self.sources[index].get_token(scopes, options).await;
        }
        let mut failures = Vec::new();
        for (index, source) in self.sources.iter().enumerate() {
            match source.get_token(scopes, options.clone()).await {
                Ok(token) => {
                    *self.chosen.lock().unwrap_or_else(PoisonError::into_inner) = Some(index);
                    return Ok(token);
                }
                Err(error) => failures.push(redact(&error.to_string())),
            }
        }
        Err(azure_core::Error::with_message(
            azure_core::error::ErrorKind::Credential,
            format!(
                "no credential gave a token (managed identity, then developer tools): {}",
                failures.join("; ")
            ),
        ))
    }
}
