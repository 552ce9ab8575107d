//! Signing in to a storage account by its URL: `--account-url` and the
//! `--auth` that names one credential (a Microsoft Entra ID identity, or a
//! SAS read from a file), and the first token, fetched before any
//! campaign, that shows the credential works.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use azure_core::credentials::{Secret, TokenCredential};
use azure_core::http::{ClientOptions, Url};
use azure_identity::{
    AzureCliCredential, ClientAssertionCredentialOptions, ClientSecretCredential,
    ClientSecretCredentialOptions, ManagedIdentityCredential, ManagedIdentityCredentialOptions,
    UserAssignedId, WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};
use blob_mutex::BlobSettings;

use crate::exit::UsageError;

/// The scope of Azure Storage's data plane.
const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";

/// How long the first token may take. The managed identity endpoint of a
/// VM answers in well under a second; an address that does not answer at
/// all (no identity endpoint on this host) is a setting to fix, said
/// within seconds rather than waited out.
pub(crate) const FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(10);

/// A storage account given by URL: its blob endpoint, its name, and the
/// container when the URL named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AccountUrl {
    /// The blob endpoint, without a trailing slash or the container.
    pub(crate) endpoint: String,
    /// The account name.
    pub(crate) account: String,
    /// The container the URL named, if any.
    pub(crate) container: Option<String>,
}

impl FromStr for AccountUrl {
    type Err = String;

    /// `https://<account>.blob.core.windows.net[/<container>]`, or, on an
    /// IP address or `localhost` (an emulator, a private gateway),
    /// `http(s)://<host>:<port>/<account>[/<container>]`.
    fn from_str(text: &str) -> Result<Self, String> {
        let url = Url::parse(text.trim()).map_err(|e| {
            format!("not a URL ({e}); expected https://<account>.blob.core.windows.net")
        })?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err("the account URL must start with https://".to_owned());
        }
        if url.query().is_some() {
            return Err("the account URL has a query: a SAS belongs in a file, \
                        given with --auth sas-file:PATH, not on the command line"
                .to_owned());
        }
        if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
            return Err("the account URL must have no user name or fragment".to_owned());
        }
        let host = url
            .host_str()
            .ok_or("the account URL has no host")?
            .to_owned();
        let mut segments: Vec<&str> = url
            .path_segments()
            .map(|s| s.filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        let path_style = host == "localhost"
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok();
        let base = match url.port() {
            Some(port) => format!("{}://{host}:{port}", url.scheme()),
            None => format!("{}://{host}", url.scheme()),
        };
        let (account, endpoint) = if path_style {
            if segments.is_empty() {
                return Err(format!(
                    "on {host}, the account is the URL's first path segment: {base}/<account>"
                ));
            }
            let account = segments.remove(0).to_owned();
            let endpoint = format!("{base}/{account}");
            (account, endpoint)
        } else {
            let account = host.split('.').next().unwrap_or_default().to_owned();
            (account, base)
        };
        let container = match segments.as_slice() {
            [] => None,
            [container] => Some((*container).to_owned()),
            _ => {
                return Err(
                    "the account URL names a blob: give the account or container URL \
                            and the blob with --blob"
                        .to_owned(),
                )
            }
        };
        Ok(AccountUrl {
            endpoint,
            account,
            container,
        })
    }
}

/// The credential `--auth` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Auth {
    /// The managed identity of the VM, App Service or container: the
    /// system-assigned one, or the user-assigned one of `--client-id`.
    ManagedIdentity,
    /// AKS workload identity: `AZURE_CLIENT_ID`, `AZURE_TENANT_ID`,
    /// `AZURE_FEDERATED_TOKEN_FILE`.
    WorkloadIdentity,
    /// A service principal's secret: `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`,
    /// `AZURE_CLIENT_SECRET`.
    ServicePrincipal,
    /// The account signed in with `az login`.
    AzureCli,
    /// A shared access signature read from this file.
    SasFile(PathBuf),
}

impl FromStr for Auth {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(path) = text.strip_prefix("sas-file:") {
            if path.is_empty() {
                return Err(
                    "sas-file needs a path: sas-file:/etc/blob-mutex/account.sas".to_owned(),
                );
            }
            return Ok(Auth::SasFile(PathBuf::from(path)));
        }
        match text {
            "managed-identity" => Ok(Auth::ManagedIdentity),
            "workload-identity" => Ok(Auth::WorkloadIdentity),
            "service-principal" => Ok(Auth::ServicePrincipal),
            "azure-cli" => Ok(Auth::AzureCli),
            _ => Err(format!(
                "unknown --auth {text:?}: expected managed-identity, workload-identity, \
                 service-principal, azure-cli or sas-file:PATH"
            )),
        }
    }
}

impl fmt::Display for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::ManagedIdentity => f.write_str("managed-identity"),
            Auth::WorkloadIdentity => f.write_str("workload-identity"),
            Auth::ServicePrincipal => f.write_str("service-principal"),
            Auth::AzureCli => f.write_str("azure-cli"),
            Auth::SasFile(path) => write!(f, "sas-file:{}", path.display()),
        }
    }
}

/// An account given by URL and how to sign in to it.
#[derive(Debug, Clone)]
pub(crate) struct UrlAccount {
    pub(crate) url: AccountUrl,
    pub(crate) auth: Auth,
    /// The user-assigned identity or application to sign in as.
    pub(crate) client_id: Option<String>,
    /// The token credential, once made (see [`UrlAccount::sign_in`]).
    credential: Option<Arc<dyn TokenCredential>>,
}

impl UrlAccount {
    pub(crate) fn new(url: AccountUrl, auth: Auth, client_id: Option<String>) -> Self {
        UrlAccount {
            url,
            auth,
            client_id,
            credential: None,
        }
    }

    /// Makes the credential and gets one token with it, within
    /// [`FIRST_TOKEN_TIMEOUT`]: a credential that cannot is a
    /// [`UsageError`] saying what to check. A SAS file is read and checked
    /// for being non-empty.
    pub(crate) async fn sign_in(&mut self) -> Result<()> {
        if let Auth::SasFile(path) = &self.auth {
            read_sas(path)?;
            return Ok(());
        }
        let credential = self.credential()?;
        let failed = |reason: String| {
            UsageError(format!(
                "--auth {} cannot get a token for {}: {reason}; {}",
                self.auth,
                self.url.endpoint,
                hint(&self.auth)
            ))
        };
        match tokio::time::timeout(
            FIRST_TOKEN_TIMEOUT,
            credential.get_token(&[STORAGE_SCOPE], None),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(failed(one_line(&e.to_string())).into()),
            Err(_) => {
                return Err(failed(format!(
                    "no answer within {}s",
                    FIRST_TOKEN_TIMEOUT.as_secs()
                ))
                .into())
            }
        }
        tracing::info!(auth = %self.auth, endpoint = %self.url.endpoint, "signed in");
        self.credential = Some(credential);
        Ok(())
    }

    /// The library's settings for `blob` in `container` on this account.
    pub(crate) fn settings(&self, container: &str, blob: &str) -> Result<BlobSettings> {
        if let Auth::SasFile(path) = &self.auth {
            let sas = read_sas(path)?;
            let connection = format!(
                "BlobEndpoint={};SharedAccessSignature={sas}",
                self.url.endpoint
            );
            return Ok(BlobSettings::from_connection_string(
                &connection,
                container,
                blob,
            )?);
        }
        let credential = match &self.credential {
            Some(credential) => credential.clone(),
            None => self.credential()?,
        };
        Ok(
            BlobSettings::with_token_credential(&self.url.account, credential, container, blob)?
                .with_endpoint(&self.url.endpoint)?,
        )
    }

    /// The token credential `--auth` names, from the environment.
    fn credential(&self) -> Result<Arc<dyn TokenCredential>> {
        let client_options = blob_mutex::azure::credential_options()?;
        let unusable = |e: &azure_core::Error| {
            UsageError(format!(
                "--auth {}: {}; {}",
                self.auth,
                one_line(&e.to_string()),
                hint(&self.auth)
            ))
        };
        let credential: Arc<dyn TokenCredential> = match &self.auth {
            Auth::ManagedIdentity => {
                ManagedIdentityCredential::new(Some(ManagedIdentityCredentialOptions {
                    user_assigned_id: self.client_id.clone().map(UserAssignedId::ClientId),
                    client_options,
                }))
                .map_err(|e| unusable(&e))?
            }
            Auth::WorkloadIdentity => {
                need_env(
                    &self.auth,
                    &["AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE"],
                )?;
                let client_id = self.need_client_id()?;
                let options = WorkloadIdentityCredentialOptions {
                    credential_options: ClientAssertionCredentialOptions { client_options },
                    client_id: Some(client_id),
                    ..WorkloadIdentityCredentialOptions::default()
                };
                WorkloadIdentityCredential::new(Some(options)).map_err(|e| unusable(&e))?
            }
            Auth::ServicePrincipal => self.service_principal(client_options)?,
            Auth::AzureCli => AzureCliCredential::new(None).map_err(|e| unusable(&e))?,
            Auth::SasFile(_) => {
                return Err(
                    UsageError(format!("--auth {} is not a token credential", self.auth)).into(),
                )
            }
        };
        Ok(credential)
    }

    /// A service principal's secret credential.
    fn service_principal(&self, client_options: ClientOptions) -> Result<Arc<dyn TokenCredential>> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if var("AZURE_CLIENT_SECRET").is_none() && var("AZURE_CLIENT_CERTIFICATE_PATH").is_some() {
            return Err(UsageError(
                "--auth service-principal: a certificate (AZURE_CLIENT_CERTIFICATE_PATH) is not \
                 supported by this build; set AZURE_CLIENT_SECRET, or use workload-identity"
                    .to_owned(),
            )
            .into());
        }
        need_env(&self.auth, &["AZURE_TENANT_ID", "AZURE_CLIENT_SECRET"])?;
        let client_id = self.need_client_id()?;
        let (Some(tenant), Some(secret)) = (var("AZURE_TENANT_ID"), var("AZURE_CLIENT_SECRET"))
        else {
            return Err(
                UsageError("--auth service-principal: the environment changed".to_owned()).into(),
            );
        };
        ClientSecretCredential::new(
            &tenant,
            client_id,
            Secret::new(secret),
            Some(ClientSecretCredentialOptions { client_options }),
        )
        .map(|c| c as Arc<dyn TokenCredential>)
        .map_err(|e| {
            UsageError(format!(
                "--auth service-principal: {}; {}",
                one_line(&e.to_string()),
                hint(&self.auth)
            ))
            .into()
        })
    }

    fn need_client_id(&self) -> Result<String> {
        self.client_id.clone().ok_or_else(|| {
            UsageError(format!(
                "--auth {} needs the application's client id: --client-id or AZURE_CLIENT_ID",
                self.auth
            ))
            .into()
        })
    }
}

/// A usage error unless each of `names` is set in the environment.
fn need_env(auth: &Auth, names: &[&str]) -> Result<()> {
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| std::env::var_os(name).is_none_or(|v| v.is_empty()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(UsageError(format!(
        "--auth {auth} needs {} in the environment",
        missing.join(" and ")
    ))
    .into())
}

/// What to check when `auth` cannot get a token.
fn hint(auth: &Auth) -> &'static str {
    match auth {
        Auth::ManagedIdentity => {
            "check that this host (VM, App Service, container) has a managed identity, \
             and that --client-id (or AZURE_CLIENT_ID) names a user-assigned one it has"
        }
        Auth::WorkloadIdentity => {
            "check AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE (set by the \
             AKS workload identity webhook) and the application's federated credential"
        }
        Auth::ServicePrincipal => "check AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET",
        Auth::AzureCli => "run `az login` as the user that runs blob-mutex",
        Auth::SasFile(_) => "check the SAS file",
    }
}

/// The SAS in `path`: its content, trimmed, without a leading `?`.
fn read_sas(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "--auth sas-file: cannot read {}: {e}",
            path.display()
        ))
    })?;
    let sas = text.trim().trim_start_matches('?');
    if sas.is_empty() {
        return Err(UsageError(format!("--auth sas-file: {} is empty", path.display())).into());
    }
    Ok(sas.to_owned())
}

/// An error's message on one line (`azure_identity` appends a troubleshooting
/// link on its own line).
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_urls() {
        let url: AccountUrl = "https://acct.blob.core.windows.net".parse().unwrap();
        assert_eq!(url.endpoint, "https://acct.blob.core.windows.net");
        assert_eq!(url.account, "acct");
        assert_eq!(url.container, None);
        let url: AccountUrl = "https://acct.blob.core.windows.net/leases/"
            .parse()
            .unwrap();
        assert_eq!(url.endpoint, "https://acct.blob.core.windows.net");
        assert_eq!(url.container.as_deref(), Some("leases"));
        let url: AccountUrl = "https://127.0.0.1:10000/devstoreaccount1/leases"
            .parse()
            .unwrap();
        assert_eq!(url.endpoint, "https://127.0.0.1:10000/devstoreaccount1");
        assert_eq!(url.account, "devstoreaccount1");
        assert_eq!(url.container.as_deref(), Some("leases"));
        for bad in [
            "acct.blob.core.windows.net",
            "ftp://acct.blob.core.windows.net",
            "https://acct.blob.core.windows.net/c?sv=2024&sig=x",
            "https://acct.blob.core.windows.net/c/blob",
            "https://127.0.0.1:10000",
            "https://user@acct.blob.core.windows.net",
        ] {
            assert!(bad.parse::<AccountUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn auth_kinds() {
        for kind in [
            "managed-identity",
            "workload-identity",
            "service-principal",
            "azure-cli",
            "sas-file:/etc/a.sas",
        ] {
            assert_eq!(kind.parse::<Auth>().unwrap().to_string(), kind);
        }
        assert!("sas-file:".parse::<Auth>().is_err());
        assert!("default".parse::<Auth>().is_err());
    }
}
