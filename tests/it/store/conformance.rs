//! The lease-store contract, checked by the same suite on every store this
//! crate ships: the in-memory store (paused time) and the Azure store on
//! Azurite. A store of your own runs the same functions.

use blob_mutex::{azure::BlobLeaseManager, store::conformance, testing::MemoryLeaseStore};
use blob_mutex_testkit::azurite;

fn memory_pair(name: &str) -> (MemoryLeaseStore, MemoryLeaseStore) {
    let store = MemoryLeaseStore::new(name);
    (store.clone(), store)
}

fn azurite_pair(container: &str, blob: &str) -> (BlobLeaseManager, BlobLeaseManager) {
    let settings = azurite::shared().settings(container, blob);
    (
        BlobLeaseManager::new(&settings).unwrap(),
        BlobLeaseManager::new(&settings).unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_meets_the_contract() {
    conformance::run_all(|name| async move { memory_pair(name) }).await;
}

#[tokio::test(start_paused = true)]
async fn a_memory_lease_expires_after_its_duration() {
    let (a, b) = memory_pair("expiry");
    conformance::lease_expires_after_its_duration(&a, &b).await;
}

#[tokio::test(start_paused = true)]
async fn a_memory_lease_renewed_after_its_expiry_under_another_id_is_lost() {
    let (a, _) = memory_pair("expired-renew");
    conformance::renewing_an_expired_lease_under_another_id_is_lost(&a).await;
}

#[tokio::test]
async fn the_azure_store_meets_the_contract() {
    let container = azurite::unique_container("conformance");
    conformance::run_all(|name| {
        let pair = azurite_pair(&container, name);
        async move { pair }
    })
    .await;
}

/// Real time: Azurite expires leases on its own clock.
#[tokio::test]
async fn an_azure_lease_expires_after_its_duration() {
    let (a, b) = azurite_pair(&azurite::unique_container("expiry"), "expiry");
    conformance::lease_expires_after_its_duration(&a, &b).await;
}

/// Real time: Azurite's trap (it renews an expired lease under any id).
#[tokio::test]
async fn an_azure_lease_renewed_after_its_expiry_under_another_id_is_lost() {
    let (a, _) = azurite_pair(&azurite::unique_container("expired-renew"), "lease");
    conformance::renewing_an_expired_lease_under_another_id_is_lost(&a).await;
}

/// Settings from a container URL with a SAS, as a user with nothing but
/// the URL makes them.
fn container_url_pair(container: &str, blob: &str) -> (BlobLeaseManager, BlobLeaseManager) {
    let settings = blob_mutex_testkit::backend::container_url_settings(
        &azurite::shared().endpoint,
        container,
        blob,
    );
    (
        BlobLeaseManager::new(&settings).unwrap(),
        BlobLeaseManager::new(&settings).unwrap(),
    )
}

/// The store of this run's backend, authenticated with a container URL's
/// SAS.
#[tokio::test]
async fn the_store_on_a_container_url_meets_the_contract() {
    let container = azurite::unique_container("container-url");
    conformance::run_all(|name| {
        let pair = container_url_pair(&container, name);
        async move { pair }
    })
    .await;
}

/// Old and new instances during a migration between backends: a lease held
/// through one is held for the other, and the epoch goes on increasing
/// across them.
#[cfg(all(feature = "official", feature = "sdk-v021"))]
#[tokio::test]
async fn the_two_backends_share_one_lease_and_its_epochs() {
    use blob_mutex::azure::Backend;
    use blob_mutex::store::{Acquire, LeaseId, LeaseStore, StampOptions};
    use std::time::Duration;

    let container = azurite::unique_container("mixed");
    let on = |backend| {
        let settings = azurite::shared().settings(&container, "mixed");
        BlobLeaseManager::new(&settings.with_backend(backend)).unwrap()
    };
    let (v021, official) = (on(Backend::SdkV021), on(Backend::Official));
    let d = Duration::from_secs(15);
    let (old, new) = (LeaseId::new(), LeaseId::new());

    assert_eq!(v021.acquire(old, d).await.unwrap(), Acquire::Acquired);
    let first = LeaseStore::stamp(&v021, old, "old", &StampOptions::new())
        .await
        .unwrap();
    assert_eq!(official.acquire(new, d).await.unwrap(), Acquire::Held);
    let seen = official.inspect().await.unwrap().unwrap();
    assert_eq!((seen.holder.as_deref(), seen.epoch), (Some("old"), first));

    v021.release(old).await.unwrap();
    assert_eq!(official.acquire(new, d).await.unwrap(), Acquire::Acquired);
    let second = LeaseStore::stamp(&official, new, "new", &StampOptions::new())
        .await
        .unwrap();
    assert!(second > first, "{second} after {first}");
    assert_eq!(v021.acquire(old, d).await.unwrap(), Acquire::Held);
    official.release(new).await.unwrap();
}

/// The settings' backend is the one that speaks: each SDK sends its own
/// service version (`x-ms-version`), 2025-11-05 from the official SDK's
/// backend (pinned), 2022-11-02 from the 0.21 SDK's.
#[cfg(all(feature = "official", feature = "sdk-v021"))]
#[tokio::test]
async fn the_settings_backend_is_the_one_that_speaks() {
    use blob_mutex::{azure::Backend, store::LeaseStore};

    let proxy = blob_mutex_testkit::proxy::Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("which-backend");
    for (backend, version) in [
        (Backend::Official, "2025-11-05"),
        (Backend::SdkV021, "2022-11-02"),
    ] {
        let settings = proxy
            .settings(&container, backend.as_str())
            .with_backend(backend);
        let manager = BlobLeaseManager::new(&settings).unwrap();
        let before = proxy.log().len();
        LeaseStore::inspect(&manager).await.unwrap();
        let sent: Vec<_> = proxy.log()[before..]
            .iter()
            .map(|r| r.version.clone())
            .collect();
        assert!(!sent.is_empty(), "{backend}: nothing sent");
        assert!(
            sent.iter().all(|v| v.as_deref() == Some(version)),
            "{backend}: {sent:?}"
        );
    }
}
