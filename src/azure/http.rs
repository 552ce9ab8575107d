//! The HTTP client of the official SDK's pipeline and of `azure_identity`
//! 1.x's credentials, unless the caller hands in a transport of its own
//! ([`BlobSettings::with_transport`](crate::BlobSettings::with_transport)):
//! reqwest 0.13 with rustls on ring (the SDK's default would build rustls
//! on aws-lc, a C build with cmake), no decompression, a pool of
//! kept-alive connections, the proxies of the environment (`HTTPS_PROXY`,
//! `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, as reqwest reads them), and
//! server certificates trusted when either the bundled webpki roots or the
//! platform's store (on Linux the system bundle, or `SSL_CERT_FILE` /
//! `SSL_CERT_DIR`) vouch for them: a private CA or a TLS-inspecting proxy
//! is trusted once the host trusts it. A host without any store (a
//! `FROM scratch` container has no /etc/ssl) trusts the bundled roots alone.

use std::sync::Arc;
use std::time::Duration;

use azure_core::http::Transport;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tracing::{debug, warn};

use crate::error::{Cause, Error};

/// How long an idle connection stays in the pool: under the 5 s after which
/// Azurite (Node's default) closes an idle connection, so that a request is
/// not sent on a connection the server is closing. Azure keeps idle
/// connections longer; this only costs a new connection after a pause.
const POOL_IDLE: Duration = Duration::from_secs(4);
/// The most idle connections kept to the endpoint.
const POOL_MAX_IDLE: usize = 32;

/// A transport for an `azure_core` 1.x pipeline over a new pooled client.
///
/// Sets nothing process-wide: the client's rustls configuration names its
/// provider (ring) itself, so it works whatever provider the application
/// installs as the process default, before or after, or none. An
/// application that builds other SDK clients of its own (an
/// `azure_identity` credential without this crate's transport, say) owns
/// that choice: it installs a default provider at start, or hands those
/// clients a transport.
pub(crate) fn transport() -> Result<Transport, Error> {
    Ok(Transport::new(Arc::new(client()?)))
}

fn client() -> Result<reqwest::Client, Error> {
    let failed = |e: &dyn std::fmt::Display| Error::Transport {
        operation: "create the HTTP client",
        source: Cause::new(e.to_string()),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = EitherRoots::new(&provider).map_err(|e| failed(&e))?;
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| failed(&e))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(POOL_MAX_IDLE)
        .build()
        .map_err(|e| failed(&e))
}

/// Trusts a server certificate that chains to a bundled webpki root or to
/// a root of the platform's store. The bundled roots come first; the
/// platform's store is read once, when the client is made, and left out
/// when it holds no certificate. Signatures of the handshake are checked as
/// webpki checks them.
#[derive(Debug)]
struct EitherRoots {
    bundled: Arc<WebPkiServerVerifier>,
    /// `None` when the platform has no store, or an empty one.
    platform: Option<rustls_platform_verifier::Verifier>,
}

impl EitherRoots {
    fn new(provider: &Arc<CryptoProvider>) -> Result<Self, rustls::Error> {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let bundled =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
        let platform = platform_roots(provider);
        Ok(EitherRoots { bundled, platform })
    }
}

/// The verifier of the platform's store, or `None` when the store holds no
/// certificate (a `FROM scratch` image, or `SSL_CERT_FILE` naming an empty
/// file).
fn platform_roots(provider: &Arc<CryptoProvider>) -> Option<rustls_platform_verifier::Verifier> {
    match rustls_platform_verifier::Verifier::new(provider.clone()) {
        Ok(platform) => Some(platform),
        Err(e) => {
            // Named explicitly, an empty or unreadable store is worth a
            // word; a host without any store is simply one.
            let named = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
                .iter()
                .any(|name| std::env::var_os(name).is_some());
            if named {
                warn!(error = %e, "SSL_CERT_FILE or SSL_CERT_DIR gives no certificate: only the bundled roots are trusted");
            } else {
                debug!(error = %e, "no certificate store on this host: only the bundled roots are trusted");
            }
            None
        }
    }
}

impl ServerCertVerifier for EitherRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verify = |verifier: &dyn ServerCertVerifier| {
            verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        };
        // The platform's answer names what is wrong when neither trusts it.
        let bundled = verify(self.bundled.as_ref());
        match &self.platform {
            Some(platform) => bundled.or_else(|_| verify(platform)),
            None => bundled,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.bundled.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.bundled.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.bundled.supported_verify_schemes()
    }
}
