//! The settings as the official SDK takes them: a container URL, with a SAS
//! as its query, a Microsoft Entra ID token credential of `azure_core` 1.x,
//! or an account key that signs short-lived SAS tokens here (`sas`).

use std::fmt;
use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use azure_core::http::{ClientOptions, Transport, Url};

use super::sas::Signer;
use crate::error::{Error, Result};

use crate::azure::settings::{
    validate_account, validate_blob, validate_container, BlobSettings, Credential,
};

/// Where the lease blob lives, as the backend on the official Azure SDK
/// takes it: the container's URL and how requests are authenticated.
/// [`BlobLeaseManager::from_official`](crate::azure::BlobLeaseManager::from_official)
/// and [`BlobLeaseSetStore::from_official`](crate::azure::BlobLeaseSetStore::from_official)
/// build the stores from it.
///
/// Most code never names it: [`BlobSettings`] on the backend
/// [`Backend::Official`](crate::azure::Backend::Official) (the default) builds
/// it ([`OfficialSettings::from_blob_settings`]), whatever its credential;
/// an account key signs short-lived SAS tokens locally, since the official
/// SDK takes no shared key. Build it directly from a container URL with a
/// SAS ([`OfficialSettings::from_container_url`]).
///
/// `Debug` shows the container URL without its query (the SAS) and the blob.
#[derive(Clone)]
pub struct OfficialSettings {
    /// The container's URL, with the SAS as its query when there is one.
    container_url: Url,
    credential: Option<Arc<dyn TokenCredential>>,
    /// The signer of SAS tokens, when the settings hold an account key.
    signer: Option<Arc<Signer>>,
    /// The caller's transport, if any.
    transport: Option<Transport>,
    /// The caller's client options, if any (their transport is `transport`).
    client_options: Option<ClientOptions>,
    container: String,
    blob: String,
}

impl OfficialSettings {
    /// Settings that authenticate with a Microsoft Entra ID token credential
    /// of `azure_core` 1.x (for example one from `azure_identity` 1.x)
    /// against `https://{account}.blob.core.windows.net`. The identity needs
    /// the *Storage Blob Data Contributor* role on the container.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the account, container or blob name is
    /// invalid.
    pub fn with_token_credential(
        account: &str,
        credential: Arc<dyn TokenCredential>,
        container: impl Into<String>,
        blob: impl Into<String>,
    ) -> Result<Self> {
        validate_account(account)?;
        let container = container.into();
        validate_container(&container)?;
        let url = parse(&format!(
            "https://{account}.blob.core.windows.net/{container}"
        ))?;
        Self::build(url, Some(credential), None, container, blob.into())
    }

    /// Settings from a container URL, such as
    /// `https://acct.blob.core.windows.net/leases?sv=…&sig=…`, whose query
    /// is a SAS on the container (or on the account). The SAS needs read,
    /// add, create, write and delete on the container's blobs (`racwd`),
    /// and list (`l`) for a lease set or candidates; see the README's
    /// permissions.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `container_url`) unless the URL is an
    /// `http://` or `https://` URL whose path ends with a valid container
    /// name; [`Error::InvalidOption`] for an invalid blob name. The message
    /// never repeats the query.
    pub fn from_container_url(container_url: &str, blob: impl Into<String>) -> Result<Self> {
        Self::from_url(parse(container_url)?, blob.into())
    }

    /// Settings from a parsed container URL.
    fn from_url(mut url: Url, blob: String) -> Result<Self> {
        // `…/leases/` names the container `leases` too.
        let path = url.path().trim_end_matches('/').to_owned();
        url.set_path(&path);
        let container = url
            .path_segments()
            .and_then(|mut segments| segments.next_back())
            .unwrap_or_default()
            .to_owned();
        validate_container(&container)?;
        Self::build(url, None, None, container, blob)
    }

    /// The official SDK's settings for `settings`, whatever their
    /// credential: a SAS goes on the container URL, a token credential is
    /// passed on, and an account key signs short-lived SAS tokens locally
    /// (a service SAS on the container, renewed long before it expires).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConnectionString`] when the account key is not
    /// base64. The settings' endpoint was parsed when they were made
    /// ([`BlobSettings::endpoint`]), so it is never refused here.
    pub fn from_blob_settings(settings: &BlobSettings) -> Result<Self> {
        let base = format!("{}/{}", settings.endpoint(), settings.container());
        let mut url = Url::parse(&base)
            .map_err(|e| Error::invalid("endpoint", format!("is not a valid URL: {e}")))?;
        let (credential, signer) = match settings.credential() {
            Credential::Sas(sas) => {
                url.set_query(Some(sas));
                (None, None)
            }
            Credential::Token(token) => (Some(token.clone()), None),
            Credential::SharedKey(key) => {
                let signer = Signer::new(settings.account(), settings.container(), key)?;
                (None, Some(Arc::new(signer)))
            }
        };
        let mut official = Self::from_url(url, settings.blob().to_owned())?;
        official.credential = credential;
        official.signer = signer;
        official.transport = settings.transport().cloned();
        official.client_options = settings.client_options().cloned();
        Ok(official)
    }

    /// The same settings for another blob in the same container.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the blob name is invalid.
    pub fn for_blob(&self, blob: impl Into<String>) -> Result<Self> {
        let blob = blob.into();
        validate_blob(&blob)?;
        Ok(OfficialSettings {
            blob,
            ..self.clone()
        })
    }

    /// The same settings with the caller's transport (see
    /// [`BlobSettings::with_transport`]).
    #[must_use = "the settings are returned by value"]
    pub fn with_transport(mut self, transport: Transport) -> Self {
        self.transport = Some(transport);
        self
    }

    /// The same settings with the caller's client options (see
    /// [`BlobSettings::with_client_options`]: the crate keeps the SDK's
    /// retries off, and the options' transport is the settings' transport).
    #[must_use = "the settings are returned by value"]
    pub fn with_client_options(mut self, mut options: ClientOptions) -> Self {
        if let Some(transport) = options.transport.take() {
            self.transport = Some(transport);
        }
        self.client_options = Some(options);
        self
    }

    /// The caller's client options, if any.
    pub(super) fn client_options(&self) -> Option<&ClientOptions> {
        self.client_options.as_ref()
    }

    fn build(
        container_url: Url,
        credential: Option<Arc<dyn TokenCredential>>,
        signer: Option<Arc<Signer>>,
        container: String,
        blob: String,
    ) -> Result<Self> {
        validate_blob(&blob)?;
        Ok(OfficialSettings {
            container_url,
            credential,
            signer,
            transport: None,
            client_options: None,
            container,
            blob,
        })
    }

    /// Settings that name the same container and blob on this backend, for
    /// their names only: they carry no credential, and no client is ever
    /// built from them.
    pub(crate) fn names(&self) -> Result<BlobSettings> {
        let mut endpoint = self.container_url.clone();
        endpoint.set_query(None);
        let path = endpoint.path().to_owned();
        let parent = path
            .strip_suffix(&self.container)
            .unwrap_or(&path)
            .trim_end_matches('/')
            .to_owned();
        endpoint.set_path(&parent);
        BlobSettings::naming(
            endpoint.as_str().trim_end_matches('/'),
            &self.container,
            &self.blob,
        )
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

    pub(super) fn container_url(&self) -> &Url {
        &self.container_url
    }

    pub(super) fn credential(&self) -> Option<Arc<dyn TokenCredential>> {
        self.credential.clone()
    }

    pub(super) fn transport(&self) -> Option<&Transport> {
        self.transport.as_ref()
    }

    pub(super) fn signer(&self) -> Option<Arc<Signer>> {
        self.signer.clone()
    }
}

/// A container URL: http or https, with a host, no fragment.
fn parse(url: &str) -> Result<Url> {
    let bad = |reason: &str| Error::invalid("container_url", reason.to_owned());
    let parsed = Url::parse(url).map_err(|_| bad("is not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad("must be an http:// or https:// URL with a host"));
    }
    if parsed.fragment().is_some() || parsed.cannot_be_a_base() {
        return Err(bad("must be a plain URL without a fragment"));
    }
    Ok(parsed)
}

impl fmt::Debug for OfficialSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.container_url.clone();
        let sas = shown.query().is_some();
        shown.set_query(None);
        let credential = match (&self.credential, &self.signer, sas) {
            (Some(_), _, _) => "token credential",
            (None, Some(_), _) => "shared key (redacted)",
            (None, None, true) => "SAS (redacted)",
            (None, None, false) => "none",
        };
        f.debug_struct("OfficialSettings")
            .field("container_url", &shown.as_str())
            .field("credential", &credential)
            .field("container", &self.container)
            .field("blob", &self.blob)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_url_names_the_container_and_hides_the_sas() {
        let s = OfficialSettings::from_container_url(
            "http://127.0.0.1:10000/devstoreaccount1/leases?sv=2022-11-02&sig=topsecret",
            "jobs/nightly",
        )
        .unwrap();
        assert_eq!((s.container(), s.blob()), ("leases", "jobs/nightly"));
        let slash = OfficialSettings::from_container_url("https://h/leases/?sig=x", "b").unwrap();
        assert_eq!(slash.container_url().as_str(), "https://h/leases?sig=x");
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("topsecret") && shown.contains("SAS (redacted)"),
            "{shown}"
        );
    }

    #[test]
    fn bad_urls_and_names_are_refused_without_echoing_the_query() {
        for url in [
            "leases?sig=topsecret",
            "ftp://host/leases?sig=topsecret",
            "https://host/Bad_Name?sig=topsecret",
            "https://host/leases#x?sig=topsecret",
        ] {
            let err = OfficialSettings::from_container_url(url, "b").unwrap_err();
            assert!(matches!(err, Error::InvalidOption { .. }), "{url}: {err:?}");
            assert!(!err.to_string().contains("topsecret"), "{err}");
        }
        assert!(OfficialSettings::from_container_url("https://h/leases", "b/").is_err());
        assert!(matches!(
            OfficialSettings::from_container_url("https://h/leases", "jobs/members/x"),
            Err(Error::InvalidOption { field: "blob", .. })
        ));
    }

    #[test]
    fn every_credential_converts_from_blob_settings() {
        let sas = BlobSettings::from_connection_string(
            "BlobEndpoint=http://127.0.0.1:4000/devstoreaccount1;SharedAccessSignature=sv=1&sig=x",
            "leases",
            "leader",
        )
        .unwrap();
        let s = OfficialSettings::from_blob_settings(&sas).unwrap();
        assert_eq!(
            s.container_url().as_str(),
            "http://127.0.0.1:4000/devstoreaccount1/leases?sv=1&sig=x"
        );
        assert!(s.signer().is_none());
        let key = BlobSettings::azurite("leases", "leader").unwrap();
        let s = OfficialSettings::from_blob_settings(&key).unwrap();
        assert_eq!(
            s.container_url().as_str(),
            "http://127.0.0.1:10000/devstoreaccount1/leases"
        );
        assert!(s.signer().is_some() && s.credential().is_none());
        let shown = format!("{s:?}");
        assert!(shown.contains("shared key (redacted)"), "{shown}");
        assert!(!shown.contains("Eby8vdM02"), "{shown}");
    }
}
