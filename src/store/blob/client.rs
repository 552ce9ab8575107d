//! The 0.21 SDK's client of a container: the settings' credential, the
//! SDK's retries off, and a pool of kept-alive connections.

use std::sync::Arc;
use std::time::Duration;

use azure_core::{HttpClient, RetryOptions, TransportOptions};
use azure_storage::{CloudLocation, StorageCredentials};
use azure_storage_blobs::prelude::{ClientBuilder, ContainerClient};

use crate::error::{Cause, Error, Result};
use crate::settings::{BlobSettings, Credential};

/// A client of the settings' container, with the SDK's retries off.
pub(super) fn container_client(settings: &BlobSettings) -> Result<ContainerClient> {
    let credentials = match settings.credential() {
        Credential::SharedKey(key) => {
            StorageCredentials::access_key(settings.account(), key.clone())
        }
        Credential::Sas(sas) => StorageCredentials::sas_token(sas)
            .map_err(|_| Error::InvalidConnectionString("the SAS token is malformed".to_owned()))?,
        Credential::Token(token) => StorageCredentials::token_credential(token.clone()),
    };
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
    let client = reqwest::Client::builder()
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(POOL_MAX_IDLE)
        .build()
        .map_err(|e| Error::Transport {
            operation: "create the HTTP client",
            source: Cause::new(e.to_string()),
        })?;
    Ok(Arc::new(client))
}
