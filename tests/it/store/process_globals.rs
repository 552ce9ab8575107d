//! The library sets nothing process-wide: stores built on every backend
//! leave the process's rustls provider to the application, which may
//! install its own afterwards, and the stores keep working.

use std::time::Duration;

use blob_mutex::{
    azure::Backend, azure::BlobLeaseManager, azure::BlobLeaseSetStore, quorum::QuorumLeaseStore,
    store::Acquire, store::LeaseId, store::LeaseStore, store::StampOptions,
};
use blob_mutex_testkit::azurite;

#[tokio::test]
async fn stores_leave_the_process_tls_provider_to_the_application() {
    let container = azurite::unique_container("globals");
    let mut managers = Vec::new();
    for backend in Backend::ALL.into_iter().filter(|b| b.is_built_in()) {
        let settings = azurite::shared()
            .settings(&container, &format!("lock-{backend}"))
            .with_backend(backend);
        managers.push(BlobLeaseManager::new(&settings).unwrap());
        BlobLeaseSetStore::new(&settings.for_blob(&container, "set").unwrap()).unwrap();
        QuorumLeaseStore::from_settings(&[settings]).unwrap();
    }
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_none(),
        "building a store installed a process-wide TLS provider"
    );
    rustls::crypto::ring::default_provider()
        .install_default()
        .expect("the application installs its own provider after the stores were built");
    for manager in &managers {
        let id = LeaseId::new();
        let d = Duration::from_secs(15);
        assert_eq!(manager.acquire(id, d).await.unwrap(), Acquire::Acquired);
        LeaseStore::stamp(manager, id, "app", &StampOptions::new())
            .await
            .unwrap();
        manager.release(id).await.unwrap();
    }
}
