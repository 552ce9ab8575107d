//! Where the lease blob lives, how to authenticate to it, and which backend
//! speaks to it: the settings every backend is built from. Nothing here
//! names an SDK's client; the rules both backends share (connection
//! strings, account, container and blob names, Azurite's defaults) are
//! written once, here.

use std::fmt;
use std::sync::Arc;

use azure_core::credentials::TokenCredential;

use crate::azure::backend::Backend;
use crate::error::{Error, Result};
use crate::store::names::{self, SetLease};

/// The account name Azurite and the old storage emulator use.
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";

/// The well-known, public account key of Azurite's default account. It is
/// not a secret, but it is still never printed.
pub(crate) const AZURITE_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Azurite's default blob endpoint.
pub const AZURITE_ENDPOINT: &str = "http://127.0.0.1:10000/devstoreaccount1";

/// How requests are authenticated.
#[derive(Clone)]
#[cfg_attr(not(any(feature = "official", feature = "sdk-v021")), allow(dead_code))] // read by the backends
pub(crate) enum Credential {
    /// Shared Key: the account key, base64.
    SharedKey(String),
    /// A shared access signature (the query string, without a leading `?`).
    Sas(String),
    /// A Microsoft Entra ID token source of `azure_core` 1.x, such as the
    /// credentials of `azure_identity` 1.x.
    Token(Arc<dyn TokenCredential>),
}

/// Where the lease blob lives: the storage account's blob endpoint, the
/// credential, the container and the blob name; and the storage backend
/// that speaks to it ([`Backend`], by default the official Azure SDK's).
///
/// The same settings work on every backend: an account key (a connection
/// string's `AccountKey`, or `UseDevelopmentStorage=true`), a SAS, or a
/// token credential of `azure_core` 1.x. Pick the backend with
/// [`BlobSettings::with_backend`] (for example from the environment with
/// [`Backend::from_env`]); every store, mutex, lease set and quorum built
/// from the settings then runs on it.
///
/// Build it from a connection string ([`BlobSettings::from_connection_string`]),
/// for Azurite ([`BlobSettings::azurite`]) or with a Microsoft Entra ID token
/// credential ([`BlobSettings::with_token_credential`]). Container and blob
/// names are checked against Azure's naming rules when the settings are made,
/// and so is what the blob name may not be, since a lease set or a lease
/// owns it: a path segment `members` or `partitions` after the first (a set
/// named `jobs` keeps its leases under `jobs/members/` and
/// `jobs/partitions/`), or one ending in `.candidates` (a lease's
/// candidates); see [`BlobLeaseSet`](crate::BlobLeaseSet#names-a-set-owns).
/// The same rules hold whether the blob name is a lease's or a set's.
///
/// `Debug` shows the endpoint, container and blob, and never the key or SAS.
#[derive(Clone)]
pub struct BlobSettings {
    account: String,
    endpoint: String,
    credential: Credential,
    container: String,
    blob: String,
    backend: Backend,
}

impl BlobSettings {
    /// Settings from a storage connection string.
    ///
    /// Understood keys: `AccountName`, `AccountKey`, `SharedAccessSignature`,
    /// `BlobEndpoint`, `DefaultEndpointsProtocol`, `EndpointSuffix` and
    /// `UseDevelopmentStorage=true` (Azurite on 127.0.0.1:10000, or on the host
    /// of `DevelopmentStorageProxyUri`). Endpoints of other services (`QueueEndpoint`,
    /// `TableEndpoint`, `FileEndpoint` and their secondaries) are accepted and
    /// ignored. Keys are matched without regard to case.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConnectionString`] when the string is malformed, names an
    /// unknown key, has no credential, or has both a key and a SAS; its message
    /// never repeats a value from the string. [`Error::InvalidOption`] when the
    /// container or blob name breaks Azure's naming rules.
    pub fn from_connection_string(
        connection_string: &str,
        container: impl Into<String>,
        blob: impl Into<String>,
    ) -> Result<Self> {
        let parsed = ConnectionString::parse(connection_string)?;
        let (account, endpoint, credential) = parsed.resolve()?;
        Self::build(account, endpoint, credential, container.into(), blob.into())
    }

    /// Settings for Azurite's default account at its default address,
    /// `http://127.0.0.1:10000/devstoreaccount1`; change the address with
    /// [`BlobSettings::with_endpoint`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the container or blob name is invalid.
    pub fn azurite(container: impl Into<String>, blob: impl Into<String>) -> Result<Self> {
        Self::build(
            AZURITE_ACCOUNT.to_owned(),
            AZURITE_ENDPOINT.to_owned(),
            Credential::SharedKey(AZURITE_ACCOUNT_KEY.to_owned()),
            container.into(),
            blob.into(),
        )
    }

    /// Settings that authenticate with a Microsoft Entra ID token credential
    /// of `azure_core` 1.x (for example one from `azure_identity` 1.x, such
    /// as `ManagedIdentityCredential` or `WorkloadIdentityCredential`) against
    /// `https://{account}.blob.core.windows.net`. The identity needs the
    /// *Storage Blob Data Contributor* role on the container.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the account, container or blob name is invalid.
    pub fn with_token_credential(
        account: impl Into<String>,
        credential: Arc<dyn TokenCredential>,
        container: impl Into<String>,
        blob: impl Into<String>,
    ) -> Result<Self> {
        let account = account.into();
        validate_account(&account)?;
        let endpoint = format!("https://{account}.blob.core.windows.net");
        Self::build(
            account,
            endpoint,
            Credential::Token(credential),
            container.into(),
            blob.into(),
        )
    }

    /// Settings that authenticate with a credential chosen from the
    /// environment by `azure_identity` 1.x's credentials (see
    /// [`default_credential`](crate::default_credential) for the order)
    /// against `https://{account}.blob.core.windows.net`.
    ///
    /// Needs the `azure_identity` feature (on by default). Without it, build a
    /// `TokenCredential` yourself and pass it to
    /// [`BlobSettings::with_token_credential`].
    ///
    /// # Errors
    ///
    /// [`Error::Authentication`] with code `CredentialUnavailable` when no
    /// credential source can be set up; [`Error::InvalidOption`] naming the
    /// field of a name that is invalid.
    #[cfg(feature = "azure_identity")]
    #[cfg_attr(docsrs, doc(cfg(feature = "azure_identity")))]
    pub fn with_default_credential(
        account: impl Into<String>,
        container: impl Into<String>,
        blob: impl Into<String>,
    ) -> Result<Self> {
        let credential = crate::azure::default_credential::default_credential()?;
        Self::with_token_credential(account, credential, container, blob)
    }

    /// The same settings on another storage backend. Which backends exist
    /// depends on the crate's features (`official`, on by default, and
    /// `sdk-v021`); a backend that was not built in is refused when a store
    /// is made from the settings, with [`Error::InvalidOption`] naming
    /// `backend` and the feature to turn on.
    #[must_use = "the settings are returned by value"]
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// The storage backend the settings choose.
    #[must_use]
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The same settings with another blob endpoint, such as
    /// `http://127.0.0.1:10001/devstoreaccount1` for an Azurite on another port
    /// or a private endpoint's address.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `endpoint`) unless the endpoint is an
    /// `http://` or `https://` URL without a query string.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Result<Self> {
        let endpoint = endpoint.into();
        validate_endpoint(&endpoint).map_err(|reason| Error::invalid("endpoint", reason))?;
        endpoint
            .trim_end_matches('/')
            .clone_into(&mut self.endpoint);
        Ok(self)
    }

    /// The same settings for another blob in the same account.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the container or blob name is invalid.
    pub fn for_blob(&self, container: impl Into<String>, blob: impl Into<String>) -> Result<Self> {
        Self::build(
            self.account.clone(),
            self.endpoint.clone(),
            self.credential.clone(),
            container.into(),
            blob.into(),
        )
        .map(|settings| settings.with_backend(self.backend))
    }

    /// The settings of the lease `name` within the set that these settings
    /// name (`<set>/<name>`), and what it is within the set (see
    /// `names::set_lease`): a set's own names pass Azure's rules only.
    pub(crate) fn in_set(&self, name: &str) -> Result<(Self, SetLease)> {
        let kind = names::set_lease(name)?;
        let blob = names::set_blob(&self.blob, name);
        validate_blob_name(&blob)?;
        let settings = BlobSettings {
            blob,
            ..self.clone()
        };
        Ok((settings, kind))
    }

    /// Settings that name a container and blob at `endpoint` on the
    /// official backend, for their names only: no credential, so that no
    /// client is ever built from them.
    #[cfg(feature = "official")]
    pub(crate) fn naming(endpoint: &str, container: &str, blob: &str) -> Result<Self> {
        let mut settings = Self::build(
            String::new(),
            endpoint.to_owned(),
            Credential::Sas(String::new()),
            container.to_owned(),
            blob.to_owned(),
        )?;
        settings.backend = Backend::Official;
        Ok(settings)
    }

    fn build(
        account: String,
        endpoint: String,
        credential: Credential,
        container: String,
        blob: String,
    ) -> Result<Self> {
        validate_container(&container)?;
        validate_blob(&blob)?;
        Ok(BlobSettings {
            account,
            endpoint,
            credential,
            container,
            blob,
            backend: Backend::default(),
        })
    }

    /// The storage account name.
    #[must_use]
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The blob service endpoint, without a trailing slash or query string.
    #[must_use]
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The container that holds the lease blob.
    #[must_use]
    pub fn container(&self) -> &str {
        &self.container
    }

    /// The lease blob's name.
    #[must_use]
    pub fn blob(&self) -> &str {
        &self.blob
    }

    #[cfg_attr(not(any(feature = "official", feature = "sdk-v021")), allow(dead_code))] // read by the backends
    pub(crate) fn credential(&self) -> &Credential {
        &self.credential
    }
}

impl fmt::Debug for BlobSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let credential = match self.credential {
            Credential::SharedKey(_) => "shared key (redacted)",
            Credential::Sas(_) => "SAS (redacted)",
            Credential::Token(_) => "token credential",
        };
        f.debug_struct("BlobSettings")
            .field("account", &self.account)
            .field("endpoint", &self.endpoint)
            .field("credential", &credential)
            .field("container", &self.container)
            .field("blob", &self.blob)
            .field("backend", &self.backend)
            .finish()
    }
}

/// The parts of a connection string this crate reads; values borrowed.
#[derive(Default)]
struct ConnectionString<'a> {
    account_name: Option<&'a str>,
    account_key: Option<&'a str>,
    sas: Option<&'a str>,
    blob_endpoint: Option<&'a str>,
    protocol: Option<&'a str>,
    endpoint_suffix: Option<&'a str>,
    development: bool,
    development_proxy: Option<&'a str>,
}

impl<'a> ConnectionString<'a> {
    fn parse(text: &'a str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidConnectionString(reason);
        let mut cs = ConnectionString::default();
        let mut any = false;
        for (index, part) in text.split(';').enumerate() {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            any = true;
            let Some((key, value)) = part.split_once('=') else {
                return Err(bad(format!(
                    "part {} has no '=' (expected Key=Value)",
                    index + 1
                )));
            };
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(bad(format!("part {} has an empty key", index + 1)));
            }
            if value.is_empty() {
                return Err(bad(format!("{key} has an empty value")));
            }
            let slot = match key.to_ascii_lowercase().as_str() {
                "accountname" => &mut cs.account_name,
                "accountkey" => &mut cs.account_key,
                "sharedaccesssignature" => &mut cs.sas,
                "blobendpoint" => &mut cs.blob_endpoint,
                "defaultendpointsprotocol" => &mut cs.protocol,
                "endpointsuffix" => &mut cs.endpoint_suffix,
                "developmentstorageproxyuri" => &mut cs.development_proxy,
                "usedevelopmentstorage" => {
                    cs.development = match value.to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad("UseDevelopmentStorage must be true or false".into())),
                    };
                    continue;
                }
                "queueendpoint"
                | "tableendpoint"
                | "fileendpoint"
                | "dfsendpoint"
                | "blobsecondaryendpoint"
                | "queuesecondaryendpoint"
                | "tablesecondaryendpoint"
                | "filesecondaryendpoint" => continue,
                _ => {
                    // Key names are not secret, but an unknown "key" may be a
                    // value that lost its name; print it only if it looks like a name.
                    let shown = if key.chars().all(|c| c.is_ascii_alphabetic()) && key.len() <= 40 {
                        key
                    } else {
                        "(unreadable)"
                    };
                    return Err(bad(format!("unknown key {shown}")));
                }
            };
            if slot.replace(value).is_some() {
                return Err(bad(format!("{key} is given twice")));
            }
        }
        if !any {
            return Err(bad("it is empty".into()));
        }
        Ok(cs)
    }

    fn resolve(&self) -> Result<(String, String, Credential)> {
        let bad = |reason: &str| Error::InvalidConnectionString(reason.to_owned());
        if self.development {
            let endpoint = match self.development_proxy {
                None => AZURITE_ENDPOINT.to_owned(),
                Some(proxy) => {
                    validate_endpoint(proxy)
                        .map_err(|r| bad(&format!("DevelopmentStorageProxyUri {r}")))?;
                    format!("{}:10000/{AZURITE_ACCOUNT}", proxy.trim_end_matches('/'))
                }
            };
            return Ok((
                AZURITE_ACCOUNT.to_owned(),
                endpoint,
                Credential::SharedKey(AZURITE_ACCOUNT_KEY.to_owned()),
            ));
        }
        let credential = match (self.account_key, self.sas) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "both AccountKey and SharedAccessSignature are given; keep one",
                ))
            }
            (Some(key), None) => {
                if !is_base64(key) {
                    return Err(bad("AccountKey is not valid base64"));
                }
                if self.account_name.is_none() {
                    return Err(bad("AccountKey needs AccountName"));
                }
                Credential::SharedKey(key.to_owned())
            }
            (None, Some(sas)) => Credential::Sas(sas.trim_start_matches('?').to_owned()),
            (None, None) => {
                return Err(bad(
                    "no credential: give AccountKey or SharedAccessSignature, or use UseDevelopmentStorage=true",
                ))
            }
        };
        if let Some(account) = self.account_name {
            validate_account(account)
                .map_err(|_| bad("AccountName is not a valid account name"))?;
        }
        let endpoint = match self.blob_endpoint {
            Some(endpoint) => {
                validate_endpoint(endpoint).map_err(|r| bad(&format!("BlobEndpoint {r}")))?;
                endpoint.trim_end_matches('/').to_owned()
            }
            None => self.public_endpoint()?,
        };
        let account = match self.account_name {
            Some(account) => account.to_owned(),
            None => account_from_endpoint(&endpoint),
        };
        Ok((account, endpoint, credential))
    }

    /// `{protocol}://{account}.blob.{suffix}`, from `DefaultEndpointsProtocol`
    /// (default https), `AccountName` and `EndpointSuffix` (default
    /// `core.windows.net`).
    fn public_endpoint(&self) -> Result<String> {
        let bad = |reason: &str| Error::InvalidConnectionString(reason.to_owned());
        let account = self
            .account_name
            .ok_or_else(|| bad("AccountName or BlobEndpoint is needed"))?;
        let protocol = match self.protocol.map(str::to_ascii_lowercase).as_deref() {
            None | Some("https") => "https",
            Some("http") => "http",
            Some(_) => return Err(bad("DefaultEndpointsProtocol must be http or https")),
        };
        let suffix = self.endpoint_suffix.unwrap_or("core.windows.net");
        if suffix.contains(['/', '?', '#', ' ']) {
            return Err(bad("EndpointSuffix must be a host name suffix"));
        }
        Ok(format!("{protocol}://{account}.blob.{suffix}"))
    }
}

/// The account name in a blob endpoint: the first path segment for the
/// path-style URLs of emulators and IP addresses, else the first host label.
fn account_from_endpoint(endpoint: &str) -> String {
    let without_scheme = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let (host, path) = without_scheme
        .split_once('/')
        .unwrap_or((without_scheme, ""));
    let first_segment = path.split('/').next().unwrap_or("");
    if !first_segment.is_empty() {
        return first_segment.to_owned();
    }
    host.split(['.', ':']).next().unwrap_or(host).to_owned()
}

fn validate_endpoint(endpoint: &str) -> std::result::Result<(), &'static str> {
    let rest = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))
        .ok_or("must start with http:// or https://")?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("has no host");
    }
    if endpoint.contains(['?', '#']) || endpoint.chars().any(char::is_whitespace) {
        return Err("must be a plain URL without query, fragment or spaces");
    }
    Ok(())
}

pub(crate) fn validate_account(account: &str) -> Result<()> {
    let ok = (3..=24).contains(&account.len())
        && account
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "account",
            "a storage account name has 3 to 24 lowercase letters and digits",
        ))
    }
}

/// Azure's container naming rules: 3 to 63 characters of lowercase letters,
/// digits and hyphens, starting and ending with a letter or digit, with no
/// two hyphens in a row.
pub(crate) fn validate_container(name: &str) -> Result<()> {
    let fail = |reason: &str| Err(Error::invalid("container", format!("{name:?} {reason}")));
    if !(3..=63).contains(&name.len()) {
        return fail("must be 3 to 63 characters long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return fail("may hold only lowercase letters, digits and hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return fail("must start and end with a letter or digit");
    }
    if name.contains("--") {
        return fail("must not hold two hyphens in a row");
    }
    Ok(())
}

/// The name of a lease blob or of a lease set, as a user gives it: Azure's
/// rules ([`validate_blob_name`]), and no name that a set or a lease owns
/// (a path segment `members` or `partitions` after the first, or one ending
/// in `.candidates`; see `store::names`).
pub(crate) fn validate_blob(name: &str) -> Result<()> {
    validate_blob_name(name)?;
    match names::reserved(name) {
        Some(reason) => Err(Error::invalid("blob", reason)),
        None => Ok(()),
    }
}

/// Azure's blob naming rules, plus what a URL path cannot carry unchanged:
/// 1 to 1024 characters, no control characters or backslashes, at most 254
/// path segments, no empty, `.` or `..` segment, and no trailing dot; and
/// no segment ending in `.candidates`. Every name the crate makes passes it;
/// a set's own leases (`<set>/members/<holder>`, `<set>/partitions/<name>`)
/// pass only this one.
pub(crate) fn validate_blob_name(name: &str) -> Result<()> {
    let fail = |reason: &str| Err(Error::invalid("blob", format!("{name:?} {reason}")));
    if name.is_empty() || name.len() > 1024 {
        return fail("must be 1 to 1024 characters long");
    }
    if name.chars().any(|c| c.is_control() || c == '\\') {
        return fail("must not hold control characters or backslashes");
    }
    if name.ends_with('.') {
        return fail("must not end with a dot");
    }
    let segments: Vec<&str> = name.split('/').collect();
    if segments.len() > 254 {
        return fail("must not have more than 254 path segments");
    }
    if segments
        .iter()
        .any(|s| s.is_empty() || *s == "." || *s == "..")
    {
        return fail(
            "must not have empty, '.' or '..' path segments (or a leading or trailing '/')",
        );
    }
    // `<lease blob>.candidates/…` holds the candidates of a lease (see
    // `MutexOptions::priority`): no lease may live there.
    if let Some(reason) = names::candidates_segment(name) {
        return Err(Error::invalid("blob", reason));
    }
    Ok(())
}

fn is_base64(text: &str) -> bool {
    !text.is_empty()
        && text.len().is_multiple_of(4)
        && text.trim_end_matches('=').len() + 2 >= text.len()
        && text
            .trim_end_matches('=')
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "c2VjcmV0LWtleS1ub3QtZm9yLXByaW50aW5n";

    fn from_cs(cs: &str) -> Result<BlobSettings> {
        BlobSettings::from_connection_string(cs, "leases", "leader")
    }

    #[test]
    fn account_key_connection_string() {
        let s = from_cs(&format!(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};EndpointSuffix=core.chinacloudapi.cn"
        ))
        .unwrap();
        assert_eq!(s.endpoint(), "https://acct.blob.core.chinacloudapi.cn");
        assert_eq!(s.account(), "acct");
        assert!(matches!(s.credential(), Credential::SharedKey(_)));
    }

    #[test]
    fn blob_endpoint_and_sas() {
        let s = from_cs("BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=2022&sig=abc%3D").unwrap();
        assert_eq!(s.endpoint(), "https://acct.blob.core.windows.net");
        assert_eq!(s.account(), "acct");
        assert!(matches!(s.credential(), Credential::Sas(sas) if sas == "sv=2022&sig=abc%3D"));
    }

    #[test]
    fn azurite_forms() {
        let dev = from_cs("UseDevelopmentStorage=true").unwrap();
        assert_eq!(dev.endpoint(), AZURITE_ENDPOINT);
        assert_eq!(dev.account(), AZURITE_ACCOUNT);

        let explicit = from_cs(&format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_ACCOUNT_KEY};BlobEndpoint=http://127.0.0.1:41234/devstoreaccount1;QueueEndpoint=http://127.0.0.1:1/x;"
        ))
        .unwrap();
        assert_eq!(
            explicit.endpoint(),
            "http://127.0.0.1:41234/devstoreaccount1"
        );

        let proxied =
            from_cs("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite")
                .unwrap();
        assert_eq!(proxied.endpoint(), "http://azurite:10000/devstoreaccount1");

        let moved = BlobSettings::azurite("leases", "leader")
            .unwrap()
            .with_endpoint("http://127.0.0.1:4000/devstoreaccount1/")
            .unwrap();
        assert_eq!(moved.endpoint(), "http://127.0.0.1:4000/devstoreaccount1");
    }

    #[test]
    fn malformed_connection_strings_never_echo_the_key() {
        let cases = [
            String::new(),
            "   ;  ".to_owned(),
            format!("AccountName=acct;{KEY}"),
            format!("AccountName=acct;AccountKey={KEY};Bogus=1"),
            format!("AccountName=acct;AccountKey={KEY};SharedAccessSignature=sig={KEY}"),
            format!("AccountName=acct;AccountKey={KEY}!!"),
            format!("AccountKey={KEY}"),
            format!("AccountName=acct;AccountKey={KEY};DefaultEndpointsProtocol=ftp"),
            format!("AccountName=acct;AccountKey={KEY};BlobEndpoint=ftp://x"),
            format!("AccountName=acct;AccountKey={KEY};AccountKey={KEY}"),
            "AccountName=acct".to_owned(),
            "UseDevelopmentStorage=maybe".to_owned(),
            "AccountName=acct;AccountKey=".to_owned(),
            format!("{KEY}={KEY}"),
        ];
        for cs in cases {
            let err = from_cs(&cs).expect_err(&cs);
            assert!(matches!(err, Error::InvalidConnectionString(_)), "{err:?}");
            let text = format!("{err} {err:?}");
            assert!(!text.contains(KEY), "{text}");
            assert!(!text.contains("c2VjcmV0"), "{text}");
        }
    }

    #[test]
    fn debug_redacts_secrets() {
        let s = from_cs(&format!("AccountName=acct;AccountKey={KEY}")).unwrap();
        let shown = format!("{s:?}");
        assert!(
            !shown.contains(KEY) && shown.contains("redacted"),
            "{shown}"
        );
        let s = from_cs(
            "BlobEndpoint=https://a.blob.core.windows.net;SharedAccessSignature=sig=topsecret",
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("topsecret"));
    }

    #[test]
    fn container_names() {
        for ok in ["abc", "leases", "a-b-c", "0day", &"a".repeat(63)] {
            validate_container(ok).unwrap();
        }
        for bad in [
            "ab",
            "Leases",
            "a_b",
            "-abc",
            "abc-",
            "a--b",
            &"a".repeat(64),
            "ünï",
        ] {
            let err = validate_container(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidOption {
                        field: "container",
                        ..
                    }
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn blob_names() {
        for ok in [
            "leader",
            "jobs/nightly",
            "a.b",
            "with space",
            "x.candidatesy/z",
            "members/leader",
            "partitions",
            "jobs/team-members/x",
            "jobs/Members/x",
            &"b".repeat(1024),
        ] {
            validate_blob(ok).unwrap();
        }
        for bad in [
            "",
            "/lead",
            "lead/",
            "a//b",
            "a/./b",
            "../x",
            "dot.",
            "a\\b",
            "tab\t",
            "jobs.candidates/h",
            "x/.candidates",
            "jobs/members/nightly",
            "jobs/partitions/p0",
            "a/b/members/c",
            "jobs/members",
            &"b".repeat(1025),
            "a/".repeat(255).trim_end_matches('/'),
        ] {
            let err = validate_blob(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidOption { field: "blob", .. }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn names_a_set_owns_are_refused_for_a_lease_or_a_set_with_the_reason() {
        let err = BlobSettings::azurite("leases", "jobs/members/nightly").unwrap_err();
        let Error::InvalidOption {
            field: "blob",
            reason,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert!(
            reason.contains("'members'")
                && reason.contains("reserved")
                && reason.contains("jobs/members/"),
            "{reason}"
        );
        let text = err.to_string();
        assert!(text.starts_with("invalid blob: "), "{text}");
        let s = BlobSettings::azurite("leases", "jobs").unwrap();
        assert!(matches!(
            s.for_blob("leases", "jobs/partitions/p0"),
            Err(Error::InvalidOption { field: "blob", .. })
        ));
        // The set's own leases, made by its store, pass.
        let (member, kind) = s.in_set("members/host-1").unwrap();
        assert_eq!(
            (member.blob(), kind),
            ("jobs/members/host-1", SetLease::Member)
        );
        let (partition, kind) = s.in_set("partitions/p0").unwrap();
        assert_eq!(
            (partition.blob(), kind),
            ("jobs/partitions/p0", SetLease::Partition)
        );
        for bad in ["members/a/b", "x/members/y", "members/a."] {
            assert!(
                matches!(
                    s.in_set(bad),
                    Err(Error::InvalidOption { field: "blob", .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn names_checked_by_every_constructor() {
        assert!(BlobSettings::azurite("Bad", "x").is_err());
        assert!(BlobSettings::azurite("good", "").is_err());
        let s = BlobSettings::azurite("good", "x").unwrap();
        assert!(s.for_blob("good", "x/").is_err());
        assert!(BlobSettings::azurite("good", "a/members/b").is_err());
        assert!(BlobSettings::from_connection_string(
            "UseDevelopmentStorage=true",
            "good",
            "a/partitions/b"
        )
        .is_err());
        assert!(s.clone().with_endpoint("127.0.0.1:10000").is_err());
    }
}
