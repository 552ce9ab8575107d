//! The HTTP client of the official SDK's pipeline and of `azure_identity`
//! 1.x's credentials: reqwest 0.13 with rustls on ring and the webpki roots
//! (the SDK's default would build rustls on aws-lc, a C build with cmake),
//! no decompression, and a pool of kept-alive connections.

use std::sync::Arc;
use std::time::Duration;

use azure_core::http::Transport;

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
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let failed = |e: &dyn std::fmt::Display| Error::Transport {
        operation: "create the HTTP client",
        source: Cause::new(e.to_string()),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| failed(&e))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(POOL_MAX_IDLE)
        .build()
        .map_err(|e| failed(&e))
}
