//! The transport `blob-mutex` builds, as an operator's host sets it up: the
//! proxy of the environment (`HTTP_PROXY`, `NO_PROXY`) on every backend,
//! and a private CA that the host trusts (`SSL_CERT_FILE`) on the official
//! backend, whose HTTP client trusts the platform's store beside the
//! bundled roots.

use std::process::Output;

use blob_mutex_testkit::azurite::{self, Azurite};
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::tls::TestCa;
use tokio::process::Command;

use crate::support::BIN;

/// `blob-mutex run -- true` on `connection_string`, with `env` set and
/// every proxy and certificate variable of the test's own environment
/// removed. Storage that never answers ends the run after 5 s.
async fn run_once(
    connection_string: &str,
    backend: &str,
    container: &str,
    env: &[(&str, &str)],
) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(["run", "--container", container, "--blob", "lock"])
        .args(["--backend", backend, "--first-contact-timeout", "5s"])
        .args(["--", "true"])
        .env("AZURE_STORAGE_CONNECTION_STRING", connection_string)
        .env_remove("RUST_LOG");
    for name in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().await.expect("run blob-mutex")
}

fn backends() -> Vec<&'static str> {
    let mut built = vec!["official"];
    if cfg!(feature = "sdk-v021") {
        built.push("sdk-v021");
    }
    built
}

#[tokio::test]
async fn the_environments_proxy_carries_every_request_unless_no_proxy_names_the_host() {
    let proxy = Proxy::start(azurite::shared().port);
    let via = format!("http://127.0.0.1:{}", proxy.port());
    let direct = azurite::shared().connection_string();
    for backend in backends() {
        let container = azurite::unique_container("cli-proxy");
        let before = proxy.requests();
        let out = run_once(&direct, backend, &container, &[("HTTP_PROXY", &via)]).await;
        assert!(out.status.success(), "{backend}: {out:?}");
        assert!(
            proxy.requests() >= before + 3,
            "{backend}: only {} requests went through HTTP_PROXY",
            proxy.requests() - before
        );

        let before = proxy.requests();
        let env = [("HTTP_PROXY", via.as_str()), ("NO_PROXY", "127.0.0.1")];
        let out = run_once(&direct, backend, &container, &env).await;
        assert!(out.status.success(), "{backend}: {out:?}");
        assert_eq!(
            proxy.requests(),
            before,
            "{backend}: NO_PROXY names the host"
        );
    }
}

#[tokio::test]
async fn a_private_ca_the_host_trusts_is_trusted() {
    let ca = TestCa::new();
    let storage = Azurite::start_https(&ca.cert, &ca.key);
    let container = azurite::unique_container("cli-ca");
    let connection_string = storage.connection_string();
    assert!(connection_string.contains("BlobEndpoint=https://"));

    let untrusted = run_once(&connection_string, "official", &container, &[]).await;
    assert!(!untrusted.status.success(), "{untrusted:?}");
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );

    let ca_file = ca.ca.display().to_string();
    let trusted = run_once(
        &connection_string,
        "official",
        &container,
        &[("SSL_CERT_FILE", &ca_file)],
    )
    .await;
    assert!(trusted.status.success(), "{trusted:?}");
}

#[tokio::test]
async fn a_host_without_any_certificate_store_trusts_the_bundled_roots() {
    // A `FROM scratch` image has no /etc/ssl: the platform's store is empty,
    // as it is here with SSL_CERT_FILE naming an empty file.
    let empty = std::env::temp_dir().join(format!("blob-mutex-no-ca-{}.pem", std::process::id()));
    std::fs::write(&empty, "").expect("write the empty bundle");
    let container = azurite::unique_container("cli-no-ca");
    let empty_file = empty.display().to_string();
    let out = run_once(
        &azurite::shared().connection_string(),
        "official",
        &container,
        &[
            ("SSL_CERT_FILE", &empty_file),
            ("SSL_CERT_DIR", &empty_file),
        ],
    )
    .await;
    let _ = std::fs::remove_file(&empty);
    assert!(out.status.success(), "{out:?}");
}
