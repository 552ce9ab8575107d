//! The settings as the 0.21 SDK takes them: the account key, the SAS, or a
//! token credential of `azure_core` 1.x behind the 0.21 SDK's own
//! `TokenCredential` trait.

use std::sync::Arc;

use azure_core_v021::auth::{AccessToken, Secret, TokenCredential};
use azure_core_v021::error::ErrorKind;
use azure_storage::StorageCredentials;

use crate::azure::settings::{BlobSettings, Credential};
use crate::error::{Error, Result};

/// The 0.21 SDK's credentials for the settings' credential.
pub(super) fn credentials(settings: &BlobSettings) -> Result<StorageCredentials> {
    Ok(match settings.credential() {
        Credential::SharedKey(key) => {
            StorageCredentials::access_key(settings.account(), key.clone())
        }
        Credential::Sas(sas) => StorageCredentials::sas_token(sas)
            .map_err(|_| Error::InvalidConnectionString("the SAS token is malformed".to_owned()))?,
        Credential::Token(token) => {
            StorageCredentials::token_credential(Arc::new(TokenOf(token.clone())))
        }
    })
}

/// An `azure_core` 1.x credential, seen through the 0.21 SDK's trait: the
/// token credentials a service already has (`azure_identity` 1.x) work on
/// this backend too.
#[derive(Debug)]
struct TokenOf(Arc<dyn azure_core::credentials::TokenCredential>);

#[async_trait::async_trait]
impl TokenCredential for TokenOf {
    async fn get_token(&self, scopes: &[&str]) -> azure_core_v021::Result<AccessToken> {
        let token = self
            .0
            .get_token(scopes, None)
            .await
            .map_err(|e| azure_core_v021::Error::new(ErrorKind::Credential, e))?;
        Ok(AccessToken::new(
            Secret::new(token.token.secret().to_owned()),
            token.expires_on,
        ))
    }

    async fn clear_cache(&self) -> azure_core_v021::Result<()> {
        Ok(())
    }
}
