//! The lease-store contract, checked by the same suite on every store this
//! crate ships: the in-memory store (paused time) and the Azure store on
//! Azurite. A store of your own runs the same functions.

mod support;

use blob_mutex::{conformance, BlobLeaseManager, MemoryLeaseStore};
use support::azurite;

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

#[cfg(feature = "official-sdk")]
fn official_pair(
    container: &str,
    blob: &str,
) -> (
    blob_mutex::OfficialLeaseManager,
    blob_mutex::OfficialLeaseManager,
) {
    let settings =
        support::backend::official_settings(&azurite::shared().endpoint, container, blob);
    (
        blob_mutex::OfficialLeaseManager::new(&settings).unwrap(),
        blob_mutex::OfficialLeaseManager::new(&settings).unwrap(),
    )
}

/// The backend on the official SDK, authenticated with a SAS.
#[cfg(feature = "official-sdk")]
#[tokio::test]
async fn the_official_sdk_store_meets_the_contract() {
    let container = azurite::unique_container("official");
    conformance::run_all(|name| {
        let pair = official_pair(&container, name);
        async move { pair }
    })
    .await;
}

#[cfg(feature = "official-sdk")]
#[tokio::test]
async fn an_official_sdk_lease_expires_after_its_duration() {
    let (a, b) = official_pair(&azurite::unique_container("official-expiry"), "expiry");
    conformance::lease_expires_after_its_duration(&a, &b).await;
}
