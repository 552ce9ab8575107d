//! Where the lease blob lives, how to authenticate to it, and which backend
//! speaks to it: the settings every backend is built from. Nothing here
//! names an SDK's client; the rules both backends share (connection
//! strings, account, container and blob names, Azurite's defaults) are
//! written once, here.

use std::fmt;
use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use azure_core::http::{ClientOptions, Transport};

mod backend;
mod connection_string;
mod endpoint;

pub use backend::Backend;

use connection_string::ConnectionString;

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

/// The port of the emulator's blob service, which a connection string's
/// `DevelopmentStorageProxyUri` implies.
const AZURITE_EMULATOR_PORT: u16 = 10000;

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
/// from a container URL with a SAS ([`BlobSettings::from_container_url`]),
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
    /// The caller's transport for the official backend, if any.
    transport: Option<Transport>,
    /// The caller's client options for the official backend, if any (their
    /// transport taken out into `transport`).
    client_options: Option<ClientOptions>,
}

impl BlobSettings {
    /// Settings from a storage connection string.
    ///
    /// Understood keys: `AccountName`, `AccountKey`, `SharedAccessSignature`,
    /// `BlobEndpoint`, `DefaultEndpointsProtocol`, `EndpointSuffix` and
    /// `UseDevelopmentStorage=true` (Azurite on 127.0.0.1:10000, or on the
    /// scheme and host of `DevelopmentStorageProxyUri` at port 10000, as
    /// Azure's SDKs read it). Endpoints of other services (`QueueEndpoint`,
    /// `TableEndpoint`, `FileEndpoint` and their secondaries) are accepted and
    /// ignored. Keys are matched without regard to case.
    ///
    /// The blob endpoint is parsed here, once, for every backend: it must be
    /// an `http://` or `https://` URL with a host and a valid port, and no
    /// user name, query, fragment or spaces.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConnectionString`] when the string is malformed, names an
    /// unknown key, has no credential, has both a key and a SAS, or makes no
    /// valid blob endpoint (naming the key: `BlobEndpoint`,
    /// `DevelopmentStorageProxyUri` with a port other than 10000 or a path,
    /// `EndpointSuffix`); its message never repeats a value from the string. [`Error::InvalidOption`] when the
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

    /// Settings from a container's URL with a SAS as its query, such as
    /// `https://acct.blob.core.windows.net/leases?sv=…&sig=…`: the blob
    /// endpoint is the URL less its last path segment, which names the
    /// container, and the account is the endpoint's (its first host label,
    /// or the first path segment of a path-style URL such as Azurite's).
    /// The SAS (on the container or on the account) needs read, add,
    /// create, write and delete on the container's blobs (`racwd`), and
    /// list (`l`) for a lease set or candidates; see the README's
    /// permissions.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `container_url`) unless the URL is an
    /// `http://` or `https://` URL with a host, a path whose last segment
    /// names the container, a SAS as its query and no fragment;
    /// [`Error::InvalidOption`] when the container or blob name breaks
    /// Azure's naming rules. The message never repeats the query.
    pub fn from_container_url(container_url: &str, blob: impl Into<String>) -> Result<Self> {
        let (endpoint, container, sas) = endpoint::container_url(container_url)
            .map_err(|reason| Error::invalid("container_url", reason))?;
        let account = endpoint::account(&endpoint);
        Self::build(
            account,
            endpoint,
            Credential::Sas(sas),
            container,
            blob.into(),
        )
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
        let endpoint = endpoint::parse(&format!("https://{account}.blob.core.windows.net"))
            .map_err(|reason| Error::invalid("account", reason))?;
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
    /// [`default_credential`](crate::azure::default_credential) for the order)
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
    /// `http://` or `https://` URL with a host and a valid port, and no user
    /// name, query, fragment or spaces.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Result<Self> {
        self.endpoint = endpoint::parse(&endpoint.into())
            .map_err(|reason| Error::invalid("endpoint", reason))?;
        Ok(self)
    }

    /// The same settings for another blob in the same account.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the container or blob name is invalid.
    pub fn for_blob(&self, container: impl Into<String>, blob: impl Into<String>) -> Result<Self> {
        let (container, blob) = (container.into(), blob.into());
        validate_container(&container)?;
        validate_blob(&blob)?;
        Ok(BlobSettings {
            container,
            blob,
            ..self.clone()
        })
    }

    /// The same settings with the caller's transport: every request of the
    /// stores made from them goes through `transport` (an `azure_core` 1.x
    /// [`Transport`], for example over a `reqwest::Client` the application
    /// built with its own proxy, roots or user agent, or over an HTTP
    /// client of its own). Without it, the crate builds one client per
    /// store: reqwest with rustls on ring, the webpki roots and the
    /// platform's certificate store, and the proxies of the environment
    /// (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`).
    ///
    /// The crate's own retries and timeouts still apply: the transport
    /// sends each request once. A token credential keeps the transport it
    /// was built with. Only the official backend takes a transport: a store
    /// made from settings on [`Backend::SdkV021`] that carry one is refused
    /// with [`Error::InvalidOption`] naming `transport` (that SDK has an
    /// HTTP client type of its own; it reads the same proxy variables).
    #[must_use = "the settings are returned by value"]
    pub fn with_transport(mut self, transport: Transport) -> Self {
        self.transport = Some(transport);
        self
    }

    /// The caller's transport, if the settings carry one.
    pub(crate) fn transport(&self) -> Option<&Transport> {
        self.transport.as_ref()
    }

    /// The same settings with the caller's `azure_core` 1.x client options
    /// for the official backend: its user agent (`user_agent`, an
    /// application id in every request's `User-Agent`), distributed
    /// tracing (`instrumentation`), the sovereign cloud of a token
    /// credential (`cloud`), the headers and query parameters its logs may
    /// show (`logging`), and policies of its own run on every request
    /// (`per_call_policies`, `per_try_policies`, after the crate's).
    ///
    /// Two fields are the crate's: `retry` is always
    /// [`RetryOptions::none`](azure_core::http::RetryOptions::none), since
    /// the crate retries and bounds every call itself against the lease's
    /// deadline (an SDK retry could carry a renewal past it); and the
    /// options' `transport`, when set, is the settings' transport, as
    /// [`with_transport`](Self::with_transport) sets it (the later of the
    /// two wins). Only the official backend takes client options: a store
    /// made from settings on [`Backend::SdkV021`] that carry them is refused
    /// with [`Error::InvalidOption`] naming `client_options`.
    #[must_use = "the settings are returned by value"]
    pub fn with_client_options(mut self, mut options: ClientOptions) -> Self {
        if let Some(transport) = options.transport.take() {
            self.transport = Some(transport);
        }
        self.client_options = Some(options);
        self
    }

    /// The caller's client options, if the settings carry them.
    pub(crate) fn client_options(&self) -> Option<&ClientOptions> {
        self.client_options.as_ref()
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
            transport: None,
            client_options: None,
        })
    }

    /// The storage account name.
    #[must_use]
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The blob service endpoint: a valid URL, as written, without a
    /// trailing slash.
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
            .field(
                "transport",
                &self.transport.as_ref().map(|_| "the caller's"),
            )
            .field(
                "client_options",
                &self.client_options.as_ref().map(|_| "the caller's"),
            )
            .finish()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "c2VjcmV0LWtleS1ub3QtZm9yLXByaW50aW5n";

    fn from_cs(cs: &str) -> Result<BlobSettings> {
        BlobSettings::from_connection_string(cs, "leases", "leader")
    }

    #[test]
    fn a_container_url_names_the_endpoint_account_and_container_and_hides_the_sas() {
        for (url, endpoint, account) in [
            (
                "https://acct.blob.core.windows.net/leases?sv=2022-11-02&sig=topsecret",
                "https://acct.blob.core.windows.net",
                "acct",
            ),
            (
                "http://127.0.0.1:10000/devstoreaccount1/leases/?sv=1&sig=topsecret",
                "http://127.0.0.1:10000/devstoreaccount1",
                "devstoreaccount1",
            ),
        ] {
            let s = BlobSettings::from_container_url(url, "jobs/nightly").unwrap();
            assert_eq!(
                (s.endpoint(), s.account(), s.container(), s.blob()),
                (endpoint, account, "leases", "jobs/nightly"),
                "{url}"
            );
            assert!(
                matches!(s.credential(), Credential::Sas(sas) if sas.ends_with("&sig=topsecret")),
                "{url}"
            );
            let shown = format!("{s:?}");
            assert!(!shown.contains("topsecret"), "{shown}");
        }
    }

    #[test]
    fn container_urls_without_a_container_or_a_sas_are_refused_without_echoing_the_query() {
        for url in [
            "leases?sig=topsecret",
            "ftp://host/leases?sig=topsecret",
            "https://host?sig=topsecret",
            "https://host/?sig=topsecret",
            "https://host/leases",
            "https://host/leases?",
            "https://user:pw@host/leases?sig=topsecret",
            "https://host/leases?sig=topsecret#x",
            "https://host/le ases?sig=topsecret",
        ] {
            let err = BlobSettings::from_container_url(url, "b").unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidOption {
                        field: "container_url",
                        ..
                    }
                ),
                "{url}: {err:?}"
            );
            assert!(!err.to_string().contains("topsecret"), "{err}");
        }
        for (url, field) in [
            ("https://host/Bad_Name?sig=x", "container"),
            ("https://host/leases?sig=x", "blob"),
        ] {
            let blob = if field == "blob" {
                "jobs/members/x"
            } else {
                "b"
            };
            assert!(
                matches!(
                    BlobSettings::from_container_url(url, blob),
                    Err(Error::InvalidOption { field: f, .. }) if f == field
                ),
                "{url}"
            );
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
