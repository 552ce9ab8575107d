//! Every call of every store the crate builds gives up within its request
//! timeout when storage accepts connections and never answers: on each
//! backend, through `BlobLeaseManager`, a lease set's store and its leases,
//! the deprecated backend types, and a quorum of such accounts.

use std::time::Duration;

use blob_mutex::store::conformance::{
    every_call_is_bounded_when_storage_never_answers as bounded,
    every_set_call_is_bounded_when_storage_never_answers as set_bounded,
};
use blob_mutex::{
    azure::Backend, azure::BlobLeaseManager, azure::BlobLeaseSetStore, quorum::QuorumLeaseStore,
    BlobSettings,
};
use tokio::net::TcpListener;

const LIMIT: Duration = Duration::from_secs(1);

/// A listener on 127.0.0.1 that accepts every connection and never
/// answers; the connections stay open for as long as the test runs.
async fn silent_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    format!("http://127.0.0.1:{port}/devstoreaccount1")
}

async fn settings(backend: Backend, blob: &str) -> BlobSettings {
    BlobSettings::azurite("silent", blob)
        .unwrap()
        .with_endpoint(silent_endpoint().await)
        .unwrap()
        .with_backend(backend)
}

fn built_in() -> impl Iterator<Item = Backend> {
    Backend::ALL.into_iter().filter(|b| b.is_built_in())
}

#[tokio::test]
async fn every_call_of_a_lease_manager_gives_up_within_its_request_timeout() {
    for backend in built_in() {
        let manager = BlobLeaseManager::new(&settings(backend, "lease").await)
            .unwrap()
            .with_request_timeout(LIMIT);
        bounded(&manager, LIMIT).await;
    }
}

#[tokio::test]
async fn every_call_of_a_lease_set_store_and_its_leases_gives_up_within_its_request_timeout() {
    for backend in built_in() {
        let store = BlobLeaseSetStore::new(&settings(backend, "set").await)
            .unwrap()
            .with_request_timeout(LIMIT);
        set_bounded(&store, LIMIT).await;
    }
}

#[tokio::test]
async fn every_call_of_a_quorum_of_silent_accounts_gives_up_within_its_request_timeout() {
    for backend in built_in() {
        let mut accounts = Vec::new();
        for _ in 0..3 {
            accounts.push(settings(backend, "lease").await);
        }
        let quorum = QuorumLeaseStore::from_settings(&accounts)
            .unwrap()
            .with_request_timeout(LIMIT);
        bounded(&quorum, LIMIT).await;
    }
}

#[tokio::test]
async fn every_call_of_a_manager_from_a_container_url_gives_up_within_its_request_timeout() {
    let url = format!("{}/silent?sv=2024-01-01&sig=x", silent_endpoint().await);
    let settings = blob_mutex::BlobSettings::from_container_url(&url, "lease")
        .unwrap()
        .with_backend(blob_mutex_testkit::backend::current());
    let manager = blob_mutex::azure::BlobLeaseManager::new(&settings)
        .unwrap()
        .with_request_timeout(LIMIT);
    bounded(&manager, LIMIT).await;
}
