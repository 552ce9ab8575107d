//! Where the lease blob lives for the official SDK, and how requests are
//! authenticated: a container URL with a SAS, or a Microsoft Entra ID token
//! credential of `azure_core` 1.x.

use std::fmt;
use std::sync::Arc;

use azure_core_1::credentials::TokenCredential;
use azure_core_1::http::Url;

use crate::error::{Error, Result};
use crate::settings::{validate_blob, validate_container, BlobSettings, Credential};

/// Where the lease blob lives, for the backend on the official Azure SDK
/// ([`OfficialLeaseManager`](crate::OfficialLeaseManager),
/// [`OfficialLeaseSetStore`](crate::OfficialLeaseSetStore)).
///
/// A sibling of [`BlobSettings`] rather than the same type: the official SDK
/// has no shared key, and its token credential is the `TokenCredential` of
/// `azure_core` 1.x, a different trait from the one `BlobSettings` takes.
/// What both backends can share, a connection string with a SAS, converts
/// with [`OfficialSettings::from_blob_settings`].
///
/// `Debug` shows the container URL without its query (the SAS) and the blob.
#[derive(Clone)]
pub struct OfficialSettings {
    /// The container's URL, with the SAS as its query when there is one.
    container_url: Url,
    credential: Option<Arc<dyn TokenCredential>>,
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
        let ok = (3..=24).contains(&account.len())
            && account
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !ok {
            return Err(Error::invalid(
                "account",
                "a storage account name has 3 to 24 lowercase letters and digits",
            ));
        }
        let container = container.into();
        validate_container(&container)?;
        let url = parse(&format!(
            "https://{account}.blob.core.windows.net/{container}"
        ))?;
        Self::build(url, Some(credential), container, blob.into())
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
        let mut url = parse(container_url)?;
        // `…/leases/` names the container `leases` too.
        let path = url.path().trim_end_matches('/').to_owned();
        url.set_path(&path);
        let container = url
            .path_segments()
            .and_then(|mut segments| segments.next_back())
            .unwrap_or_default()
            .to_owned();
        validate_container(&container)?;
        Self::build(url, None, container, blob.into())
    }

    /// The settings of a connection string that carries a SAS
    /// (`BlobEndpoint=…;SharedAccessSignature=…`), as the 0.21 backend
    /// reads it: the same container, blob and SAS.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `credential`) when the settings hold
    /// an account key or a token credential of the 0.21 SDK: the official
    /// SDK has no shared key, and takes its own `TokenCredential` (see
    /// [`OfficialSettings::with_token_credential`]).
    pub fn from_blob_settings(settings: &BlobSettings) -> Result<Self> {
        let Credential::Sas(sas) = settings.credential() else {
            return Err(Error::invalid(
                "credential",
                "the official SDK backend takes a SAS (a connection string with \
                 SharedAccessSignature, or a container URL) or an azure_core 1.x token \
                 credential; it has no shared key",
            ));
        };
        let url = format!("{}/{}?{sas}", settings.endpoint(), settings.container());
        Self::from_container_url(&url, settings.blob())
    }

    /// The same settings for another blob in the same container.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the blob name is invalid.
    pub fn for_blob(&self, blob: impl Into<String>) -> Result<Self> {
        Self::build(
            self.container_url.clone(),
            self.credential.clone(),
            self.container.clone(),
            blob.into(),
        )
    }

    fn build(
        container_url: Url,
        credential: Option<Arc<dyn TokenCredential>>,
        container: String,
        blob: String,
    ) -> Result<Self> {
        validate_blob(&blob)?;
        Ok(OfficialSettings {
            container_url,
            credential,
            container,
            blob,
        })
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
        let credential = match (&self.credential, sas) {
            (Some(_), _) => "token credential",
            (None, true) => "SAS (redacted)",
            (None, false) => "none",
        };
        f.debug_struct("OfficialSettings")
            .field("container_url", &shown.as_str())
            .field("credential", &credential)
            .field("container", &self.container)
            .field("blob", &self.blob)
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
    }

    #[test]
    fn only_a_sas_converts_from_blob_settings() {
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
        let key = BlobSettings::azurite("leases", "leader").unwrap();
        let err = OfficialSettings::from_blob_settings(&key).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    field: "credential",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
