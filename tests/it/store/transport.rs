//! The caller's transport: settings that carry an `azure_core` 1.x
//! transport send every request of their stores through it (here, a
//! reqwest client of the test's own that goes through an HTTP proxy), and
//! the backend that cannot take one refuses it.

use std::sync::Arc;
use std::time::Duration;

use azure_core::http::Transport;
use blob_mutex::{
    azure::Backend, azure::BlobLeaseManager, store::Acquire, store::LeaseId, store::LeaseStore,
    store::StampOptions, BlobSettings,
};
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::Proxy;

/// A reqwest client that sends every request through the HTTP proxy on
/// `port`, as an application behind a corporate proxy builds one.
fn through_proxy(port: u16) -> Transport {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let proxy = reqwest::Proxy::all(format!("http://127.0.0.1:{port}")).unwrap();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .proxy(proxy)
        .build()
        .unwrap();
    Transport::new(Arc::new(client))
}

fn settings(container: &str) -> BlobSettings {
    BlobSettings::from_connection_string(&azurite::shared().connection_string(), container, "lock")
        .unwrap()
        .with_backend(Backend::Official)
}

#[tokio::test]
async fn every_request_goes_through_the_callers_transport() {
    let proxy = Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("transport");
    let manager =
        BlobLeaseManager::new(&settings(&container).with_transport(through_proxy(proxy.port())))
            .unwrap();
    let id = LeaseId::new();
    let d = Duration::from_secs(15);
    assert_eq!(manager.acquire(id, d).await.unwrap(), Acquire::Acquired);
    let epoch = LeaseStore::stamp(&manager, id, "a", &StampOptions::new())
        .await
        .unwrap();
    manager.release(id).await.unwrap();
    let through = proxy.requests();
    // Create the container and the blob, acquire, read and write the
    // stamp, release: every one through the proxy.
    assert!(through >= 5, "{through} requests went through the proxy");

    // The same lease without the transport reaches storage directly, and
    // sees the term written through the proxy.
    let direct = BlobLeaseManager::new(&settings(&container)).unwrap();
    let info = direct.inspect().await.unwrap().expect("the blob exists");
    assert_eq!(info.epoch, epoch);
    assert_eq!(
        proxy.requests(),
        through,
        "nothing else went through the proxy"
    );
}

#[cfg(feature = "sdk-v021")]
#[tokio::test]
async fn the_sdk_v021_backend_refuses_a_transport() {
    let settings = settings("transport-refused")
        .with_transport(through_proxy(1))
        .with_backend(Backend::SdkV021);
    match BlobLeaseManager::new(&settings) {
        Err(blob_mutex::Error::InvalidOption { field, reason }) => {
            assert_eq!(field, "transport");
            assert!(reason.contains("sdk-v021"), "{reason}");
        }
        other => panic!("a transport on sdk-v021 must be refused: {other:?}"),
    }
}
