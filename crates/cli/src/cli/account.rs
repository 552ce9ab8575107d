//! The flags every command shares to reach the storage account (or a
//! quorum of accounts): a connection string, an account URL and how to sign
//! in to it, an accounts file, `--dev`, the request timeout and the backend;
//! and the library's settings and stores made from them.
//!
//! The account itself (connection strings, account URL and its sign-in,
//! accounts file, `--dev`) is taken whole, from the flags when any of them
//! is given, else from the `BLOB_MUTEX_*` variables of the same names, else
//! from `AZURE_STORAGE_CONNECTION_STRING`: never a part from each, so that
//! a command started inside `run`'s command (which has `run`'s account in
//! its environment) and given its own account never becomes a quorum of
//! both, nor signs in to its account with its parent's credential.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use blob_mutex::{azure::Backend, quorum::QuorumLeaseStore, BlobSettings, MutexOptions};
use clap::{ArgAction, Args};

use super::{parse_backend, parse_positive_duration, parse_switch};
use crate::child::{ACCOUNT_URL_ENV, AUTH_ENV, DEV_ENV};
use crate::exit::UsageError;
use crate::signin::{AccountUrl, Auth, UrlAccount};

/// Azure's environment variable of the connection string, read last.
const CONNECTION_STRING_ENV: &str = "AZURE_STORAGE_CONNECTION_STRING";
/// The command's own variable of the connection string.
const OWN_CONNECTION_STRING_ENV: &str = "BLOB_MUTEX_CONNECTION_STRING";
/// The variable of the accounts file.
const ACCOUNTS_FILE_ENV: &str = "BLOB_MUTEX_ACCOUNTS_FILE";

/// How to reach the storage account: the flags every command shares.
#[derive(Debug, Args)]
// The doc comments here are the `--help` text, where Markdown backticks would
// show. `account_url` is the flag's name, --account-url.
#[allow(clippy::struct_field_names, clippy::doc_markdown)]
// The fields are the parent's too: `state` takes the same flags under its
// own help and builds an `Account` from them.
pub(crate) struct Account {
    /// Storage connection string (never printed). Given once per account,
    /// several times, `run`, `status` and `partitions` use a quorum of the
    /// accounts: the lease is held while a majority of them is. The account
    /// is taken whole from these flags (this one, --account-url with
    /// --auth, --accounts-file, --dev) when any is given, else from their
    /// variables, else from AZURE_STORAGE_CONNECTION_STRING.
    /// [env: BLOB_MUTEX_CONNECTION_STRING]
    #[arg(long, value_name = "STRING", action = ArgAction::Append)]
    pub(super) connection_string: Vec<String>,
    /// The storage account by URL, signed in to with --auth (no key or
    /// secret on the command line): https://<account>.blob.core.windows.net,
    /// or a container's URL https://<account>.blob.core.windows.net/<container>
    /// (then --container may be left out). On an IP address or localhost,
    /// the account is the first path segment: https://127.0.0.1:10000/<account>.
    /// [env: BLOB_MUTEX_ACCOUNT_URL, with BLOB_MUTEX_AUTH]
    #[arg(long, value_name = "URL", requires = "auth")]
    pub(super) account_url: Option<String>,
    /// How to sign in to --account-url and to the accounts of --accounts-file
    /// that name none: managed-identity (the host's managed identity;
    /// user-assigned with --client-id), workload-identity (AKS:
    /// AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE),
    /// service-principal (AZURE_TENANT_ID, AZURE_CLIENT_ID,
    /// AZURE_CLIENT_SECRET), azure-cli (`az login`), or sas-file:PATH (a SAS
    /// read from the file PATH at start). The identity needs the role
    /// Storage Blob Data Contributor. One token is fetched before anything
    /// else: a credential that cannot get one within 10s exits with code 2,
    /// saying what to check. [env: BLOB_MUTEX_AUTH, with the account of
    /// the variables only]
    #[arg(long, value_name = "KIND")]
    pub(super) auth: Option<Auth>,
    /// The client id of the user-assigned managed identity, or of the
    /// application (workload-identity, service-principal).
    /// [default: system-assigned identity]
    #[arg(long, value_name = "ID", env = "AZURE_CLIENT_ID")]
    pub(super) client_id: Option<String>,
    /// A file of storage accounts, one per line, for a quorum of the
    /// accounts, with any --connection-string or --account-url given: a
    /// connection string, or an account URL followed by its --auth kind
    /// (`https://acct2.blob.core.windows.net managed-identity`; the kind of
    /// --auth when left out). Blank lines and lines starting with # are
    /// skipped; nothing of it is printed. [env: BLOB_MUTEX_ACCOUNTS_FILE]
    #[arg(long, value_name = "FILE")]
    pub(super) accounts_file: Option<PathBuf>,
    /// Use Azurite's default account at http://127.0.0.1:10000 (ignores any
    /// connection string). [env: BLOB_MUTEX_DEV]
    #[arg(long)]
    pub(super) dev: bool,
    /// The longest any single storage request may take [default: 3s].
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, env = "BLOB_MUTEX_REQUEST_TIMEOUT")]
    pub(super) request_timeout: Option<Duration>,
    /// The storage backend: official (Microsoft's official Azure SDK,
    /// azure_storage_blob 1.x) or sdk-v021 (the azure_storage_blobs 0.21
    /// SDK, when built with the feature sdk-v021). Both take the same
    /// connection strings and keep the same lease blob the same way, so
    /// hosts on either share one lease. [default: official]
    #[arg(long, env = Backend::ENV, value_name = "BACKEND", value_parser = parse_backend)]
    pub(super) backend: Option<Backend>,
    /// The accounts, once signed in (see [`Account::sign_in`]).
    #[arg(skip)]
    pub(super) signed_in: Option<Vec<Given>>,
}

/// One storage account as given: by connection string, or by URL with
/// the way to sign in to it.
#[derive(Debug, Clone)]
pub(super) enum Given {
    Connection(String),
    Url(UrlAccount),
}

impl Given {
    fn settings(&self, container: &str, blob: &str, backend: Backend) -> Result<BlobSettings> {
        let settings = match self {
            Given::Connection(connection) => {
                BlobSettings::from_connection_string(connection, container, blob)?
            }
            Given::Url(account) => account.settings(container, blob)?,
        };
        Ok(settings.with_backend(backend))
    }
}

impl Account {
    /// Signs in to every account given by URL: makes its credential and
    /// gets one token with it (a SAS file is read), each within
    /// [`FIRST_TOKEN_TIMEOUT`](crate::signin::FIRST_TOKEN_TIMEOUT), all at once. The settings made afterwards
    /// use these credentials.
    pub(crate) async fn sign_in(&mut self) -> Result<()> {
        if self.dev {
            return Ok(());
        }
        let mut given = self.given()?;
        let signing = given.iter_mut().filter_map(|given| match given {
            Given::Url(account) => Some(account.sign_in()),
            Given::Connection(_) => None,
        });
        for result in futures_util::future::join_all(signing).await {
            result?;
        }
        self.signed_in = Some(given);
        Ok(())
    }

    /// The library's settings for `blob` in `container`.
    pub(crate) fn settings(&self, container: &str, blob: &str) -> Result<BlobSettings> {
        if self.dev {
            return Ok(BlobSettings::azurite(container, blob)?.with_backend(self.backend()));
        }
        match self.given()?.as_slice() {
            [] => Err(UsageError(
                "no storage account: pass --account-url with --auth, --connection-string, \
                 --accounts-file, or --dev for Azurite; or set BLOB_MUTEX_ACCOUNT_URL with \
                 BLOB_MUTEX_AUTH, BLOB_MUTEX_CONNECTION_STRING, BLOB_MUTEX_ACCOUNTS_FILE, \
                 BLOB_MUTEX_DEV or AZURE_STORAGE_CONNECTION_STRING"
                    .to_owned(),
            )
            .into()),
            [one] => one.settings(container, blob, self.backend()),
            several => Err(UsageError(format!(
                "this command works on one storage account, not a quorum of {}; \
                 run, status and partitions work on a quorum",
                several.len()
            ))
            .into()),
        }
    }

    /// A quorum of the accounts given, when more than one was (and not
    /// --dev), over `blob` in `container`.
    pub(crate) fn quorum(&self, container: &str, blob: &str) -> Result<Option<QuorumLeaseStore>> {
        let Some(settings) = self.quorum_settings(container, blob)? else {
            return Ok(None);
        };
        Ok(Some(
            QuorumLeaseStore::from_settings(&settings)?
                .with_request_timeout(self.request_timeout()),
        ))
    }

    /// Each account's settings for `blob` in `container`, when more than
    /// one account was given (and not --dev).
    pub(crate) fn quorum_settings(
        &self,
        container: &str,
        blob: &str,
    ) -> Result<Option<Vec<BlobSettings>>> {
        let given = self.given()?;
        if self.dev || given.len() < 2 {
            return Ok(None);
        }
        let settings = given
            .iter()
            .map(|given| given.settings(container, blob, self.backend()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(settings))
    }

    /// The accounts of the flags (or the environment) and of the accounts
    /// file, in that order: the signed-in ones once [`Account::sign_in`]
    /// ran.
    fn given(&self) -> Result<Vec<Given>> {
        if let Some(given) = &self.signed_in {
            return Ok(given.clone());
        }
        let mut given: Vec<Given> = self
            .connection_strings()
            .into_iter()
            .map(Given::Connection)
            .collect();
        if let Some(url) = self.account_url()? {
            let auth = self.auth.clone().ok_or_else(|| {
                UsageError("--account-url needs --auth to say how to sign in".to_owned())
            })?;
            given.push(Given::Url(UrlAccount::new(
                url,
                auth,
                self.client_id.clone(),
            )));
        }
        if let Some(path) = &self.accounts_file {
            given.extend(self.accounts_file_lines(path)?);
        }
        Ok(given)
    }

    /// The connection strings of the flags (or of their variables), or of
    /// `AZURE_STORAGE_CONNECTION_STRING` when no account is given otherwise.
    fn connection_strings(&self) -> Vec<String> {
        if !self.connection_string.is_empty()
            || self.account_url.is_some()
            || self.accounts_file.is_some()
        {
            return self.connection_string.clone();
        }
        std::env::var(CONNECTION_STRING_ENV)
            .ok()
            .filter(|s| !s.trim().is_empty())
            .into_iter()
            .collect()
    }

    /// Takes the account from the `BLOB_MUTEX_*` variables `var` reads when
    /// no flag gives one: all of it from one side, never a part from each.
    /// Variables set to an empty value count as unset.
    ///
    /// # Errors
    ///
    /// A usage error when `BLOB_MUTEX_DEV` is not a yes or a no.
    pub(crate) fn read_environment(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<()> {
        let given = !self.connection_string.is_empty()
            || self.account_url.is_some()
            || self.auth.is_some()
            || self.accounts_file.is_some()
            || self.dev;
        if given {
            return Ok(());
        }
        let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        if let Some(dev) = var(DEV_ENV) {
            self.dev = parse_switch(DEV_ENV, &dev)?;
        }
        self.connection_string
            .extend(var(OWN_CONNECTION_STRING_ENV));
        self.account_url = var(ACCOUNT_URL_ENV);
        if let Some(auth) = var(AUTH_ENV) {
            let auth = auth
                .parse()
                .map_err(|reason| UsageError(format!("{AUTH_ENV}: {reason}")))?;
            self.auth = Some(auth);
        }
        if self.account_url.is_some() && self.auth.is_none() {
            return Err(UsageError(format!(
                "{ACCOUNT_URL_ENV} needs {AUTH_ENV} to say how to sign in"
            ))
            .into());
        }
        self.accounts_file = var(ACCOUNTS_FILE_ENV).map(PathBuf::from);
        Ok(())
    }

    /// The accounts of the accounts file: a connection string, or an
    /// account URL and the way to sign in to it, per line.
    fn accounts_file_lines(&self, path: &std::path::Path) -> Result<Vec<Given>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            UsageError(format!(
                "cannot read --accounts-file {}: {e}",
                path.display()
            ))
        })?;
        let mut given = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if !(line.starts_with("https://") || line.starts_with("http://")) {
                given.push(Given::Connection(line.to_owned()));
                continue;
            }
            let bad = |reason: String| {
                UsageError(format!(
                    "--accounts-file {} line {}: {reason}",
                    path.display(),
                    index + 1
                ))
            };
            let (url, auth) = line
                .split_once(char::is_whitespace)
                .map_or((line, None), |(url, auth)| (url, Some(auth.trim())));
            let url: AccountUrl = url.parse().map_err(bad)?;
            if url.container.is_some() {
                return Err(bad(
                    "an account URL here names the account only; give the container with \
                     --container"
                        .to_owned(),
                )
                .into());
            }
            let auth = match auth {
                Some(auth) => auth.parse().map_err(bad)?,
                None => self.auth.clone().ok_or_else(|| {
                    bad("no way to sign in: add it after the URL, or pass --auth".to_owned())
                })?,
            };
            given.push(Given::Url(UrlAccount::new(
                url,
                auth,
                self.client_id.clone(),
            )));
        }
        Ok(given)
    }

    /// The container: --container's, or the one --account-url names (a
    /// usage error when both name one and they differ, or neither does).
    pub(crate) fn container(&self, flag: Option<&str>) -> Result<String> {
        let url = self.account_url()?;
        let from_url = url.as_ref().and_then(|url| url.container.as_deref());
        match (flag, from_url) {
            (Some(flag), Some(url)) if flag != url => Err(UsageError(format!(
                "--container {flag} differs from the container of --account-url ({url})"
            ))
            .into()),
            (Some(name), _) | (None, Some(name)) => Ok(name.to_owned()),
            (None, None) => Err(UsageError(
                "no container: pass --container, or a container's URL as --account-url".to_owned(),
            )
            .into()),
        }
    }

    /// --account-url, parsed here rather than by clap, whose message
    /// would repeat the value (a SAS pasted into it, say).
    fn account_url(&self) -> Result<Option<AccountUrl>> {
        self.account_url
            .as_deref()
            .map(|url| {
                url.parse()
                    .map_err(|reason| UsageError(format!("--account-url: {reason}")).into())
            })
            .transpose()
    }

    /// The request timeout to use: the flag's value or the library's default.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
            .unwrap_or(MutexOptions::default().request_timeout())
    }

    /// The backend to use: the flag's (or the environment's) or the library's default.
    pub(crate) fn backend(&self) -> Backend {
        self.backend.unwrap_or_default()
    }

    /// How a command run under `run` reaches the account as `run` was given
    /// it: the backend, and `--dev`, or the account URL with its sign-in,
    /// or a connection string given as a flag (in the environment, never on
    /// a command line). A quorum's accounts are not passed on: the leader
    /// state lives in one account, and `state` refuses a quorum.
    pub(crate) fn command_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![(Backend::ENV, self.backend().to_string())];
        if self.dev {
            env.push((DEV_ENV, "true".to_owned()));
        } else if let (Some(url), Some(auth), [], None) = (
            self.account_url().ok().flatten(),
            &self.auth,
            self.connection_string.as_slice(),
            &self.accounts_file,
        ) {
            env.push((ACCOUNT_URL_ENV, url.endpoint));
            env.push((AUTH_ENV, auth.to_string()));
            if let Some(id) = &self.client_id {
                env.push(("AZURE_CLIENT_ID", id.clone()));
            }
        } else if let ([connection], None, None) = (
            self.connection_string.as_slice(),
            &self.account_url,
            &self.accounts_file,
        ) {
            env.push((CONNECTION_STRING_ENV, connection.clone()));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    /// The account of `status` with `args`.
    fn account(args: &[&str]) -> Account {
        let mut words = vec!["blob-mutex", "status", "--blob", "b"];
        words.extend(args);
        match Cli::try_parse_from(words).expect("parses").command {
            Command::Status(args) => args.target.account,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_accounts_file_takes_connection_strings_and_account_urls() {
        let path = std::env::temp_dir().join(format!("blob-mutex-accounts-{}", std::process::id()));
        std::fs::write(
            &path,
            "# three accounts\n\
             DefaultEndpointsProtocol=https;AccountName=one;AccountKey=a2V5;EndpointSuffix=core.windows.net\n\
             \n\
             https://two.blob.core.windows.net   sas-file:/run/secrets/two.sas\n\
             https://three.blob.core.windows.net\n",
        )
        .expect("write the file");
        let file = path.display().to_string();
        let given = account(&["--accounts-file", &file, "--auth", "managed-identity"])
            .given()
            .expect("reads");
        let described: Vec<String> = given
            .iter()
            .map(|given| match given {
                Given::Connection(_) => "connection".to_owned(),
                Given::Url(account) => format!("{} {}", account.url.endpoint, account.auth),
            })
            .collect();
        assert_eq!(
            described,
            [
                "connection",
                "https://two.blob.core.windows.net sas-file:/run/secrets/two.sas",
                "https://three.blob.core.windows.net managed-identity",
            ]
        );
        // Without --auth, a URL line must name its kind.
        let error = account(&["--accounts-file", &file]).given().unwrap_err();
        assert!(error.to_string().contains("line 5"), "{error}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn the_container_comes_from_the_flag_or_the_account_url() {
        let url = [
            "--account-url",
            "https://a1.blob.core.windows.net/leases",
            "--auth",
            "azure-cli",
        ];
        assert_eq!(account(&url).container(None).unwrap(), "leases");
        assert_eq!(account(&url).container(Some("leases")).unwrap(), "leases");
        assert!(account(&url).container(Some("other")).is_err());
        assert!(account(&[]).container(None).is_err());
    }
}
