//! The settings as the official SDK takes them, made from
//! [`BlobSettings`]: a container URL (with a SAS as its query), a Microsoft
//! Entra ID token credential of `azure_core` 1.x, or an account key that
//! signs short-lived SAS tokens here (`sas`).

use std::fmt;
use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use azure_core::http::{ClientOptions, Transport, Url};

use super::sas::Signer;
use crate::error::{Error, Result};

use crate::azure::settings::{BlobSettings, Credential};

/// Where the lease blob lives, as the backend on the official Azure SDK
/// takes it: the container's URL and how requests are authenticated. The
/// backend [`Backend::Official`](crate::azure::Backend::Official) builds it
/// from [`BlobSettings`], whatever their credential: an account key signs
/// short-lived SAS tokens locally, since the official SDK takes no shared
/// key.
///
/// `Debug` shows the container URL without its query (the SAS) and the blob.
#[derive(Clone)]
pub(crate) struct OfficialSettings {
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
    pub(crate) fn from_blob_settings(settings: &BlobSettings) -> Result<Self> {
        let base = format!("{}/{}", settings.endpoint(), settings.container());
        let mut container_url = Url::parse(&base)
            .map_err(|e| Error::invalid("endpoint", format!("is not a valid URL: {e}")))?;
        let (credential, signer) = match settings.credential() {
            Credential::Sas(sas) => {
                container_url.set_query(Some(sas));
                (None, None)
            }
            Credential::Token(token) => (Some(token.clone()), None),
            Credential::SharedKey(key) => {
                let signer = Signer::new(settings.account(), settings.container(), key)?;
                (None, Some(Arc::new(signer)))
            }
        };
        Ok(OfficialSettings {
            container_url,
            credential,
            signer,
            transport: settings.transport().cloned(),
            client_options: settings.client_options().cloned(),
            container: settings.container().to_owned(),
            blob: settings.blob().to_owned(),
        })
    }

    /// The caller's client options, if any.
    pub(super) fn client_options(&self) -> Option<&ClientOptions> {
        self.client_options.as_ref()
    }

    /// The container that holds the lease blob.
    pub(super) fn container(&self) -> &str {
        &self.container
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
