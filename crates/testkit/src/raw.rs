//! A client of the official Azure SDK's own, for what a test must do to
//! storage that the crate never does (write foreign content and metadata,
//! blobs of names the crate refuses, and lease them) and to read back what
//! it wrote.
//! Authenticated with an account SAS on the shared Azurite.

use std::collections::HashMap;

use azure_core::http::RequestContent;
use azure_storage_blob::models::{
    BlobClientAcquireLeaseOptions, BlobClientGetPropertiesResultHeaders,
    BlobContainerClientListBlobsOptions, BlockBlobClientUploadOptions,
};
use azure_storage_blob::{BlobContainerClient, BlobContainerClientOptions};
use futures_util::StreamExt;

use super::{azurite, backend};

/// A client of `container` on the shared Azurite.
pub fn container(container: &str) -> BlobContainerClient {
    // The SDK's own HTTP client needs a rustls provider; the crate's
    // features build reqwest without one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!(
        "{}/{container}?{}",
        azurite::shared().endpoint,
        backend::account_sas()
    );
    // The newest service version Azurite 3.35 knows (the SDK's default is newer).
    let options = BlobContainerClientOptions {
        version: "2025-11-05".to_owned(),
        ..Default::default()
    };
    BlobContainerClient::new(url.parse().expect("a container URL"), None, Some(options))
        .expect("a container client")
}

/// Creates the container.
pub async fn create(client: &BlobContainerClient) {
    client.create(None).await.expect("create the container");
}

/// Writes `blob` with `content` and `metadata`, replacing what is there.
pub async fn put(
    client: &BlobContainerClient,
    blob: &str,
    content: Vec<u8>,
    metadata: HashMap<String, String>,
) {
    let options = BlockBlobClientUploadOptions {
        metadata: Some(metadata),
        ..Default::default()
    };
    client
        .blob_client(blob)
        .upload(RequestContent::from(content), Some(options))
        .await
        .expect("write the blob");
}

/// Acquires a lease of `seconds` (-1: infinite) on `blob` under `lease_id`.
pub async fn acquire_lease(client: &BlobContainerClient, blob: &str, seconds: i32, lease_id: &str) {
    let options = BlobClientAcquireLeaseOptions {
        proposed_lease_id: Some(lease_id.to_owned()),
        ..Default::default()
    };
    client
        .blob_client(blob)
        .acquire_lease(seconds, Some(options))
        .await
        .expect("acquire the lease");
}

/// Releases the lease `lease_id` on `blob`.
pub async fn release_lease(client: &BlobContainerClient, blob: &str, lease_id: &str) {
    client
        .blob_client(blob)
        .release_lease(lease_id.to_owned(), None)
        .await
        .expect("release the lease");
}

/// The content of `blob`.
pub async fn content(client: &BlobContainerClient, blob: &str) -> Vec<u8> {
    let download = client
        .blob_client(blob)
        .download(None)
        .await
        .expect("read the blob");
    download.body.collect().await.expect("the body").to_vec()
}

/// The metadata of `blob`.
pub async fn metadata(client: &BlobContainerClient, blob: &str) -> HashMap<String, String> {
    client
        .blob_client(blob)
        .get_properties(None)
        .await
        .expect("the blob's properties")
        .metadata()
        .expect("its metadata")
}

/// How many blobs of the container have names that start with `prefix`.
pub async fn count(client: &BlobContainerClient, prefix: &str) -> usize {
    let options = BlobContainerClientListBlobsOptions {
        prefix: Some(prefix.to_owned()),
        ..Default::default()
    };
    let mut pages = client.list_blobs(Some(options)).expect("list").into_pages();
    let mut n = 0;
    while let Some(page) = pages.next().await {
        n += page
            .expect("a page")
            .into_model()
            .expect("a listing")
            .blob_items
            .len();
    }
    n
}

/// Takes a snapshot of `blob`.
pub async fn snapshot(client: &BlobContainerClient, blob: &str) {
    client
        .blob_client(blob)
        .create_snapshot(None)
        .await
        .expect("a snapshot");
}

/// Deletes the snapshots of `blob`, and only those.
pub async fn delete_snapshots(client: &BlobContainerClient, blob: &str) {
    let options = azure_storage_blob::models::BlobClientDeleteOptions {
        delete_snapshots: Some(azure_storage_blob::models::DeleteSnapshotsOptionType::Only),
        ..Default::default()
    };
    client
        .blob_client(blob)
        .delete(Some(options))
        .await
        .expect("delete the snapshots");
}

/// Deletes `blob` (with its snapshots), as a lifecycle rule or an
/// operator's cleanup would.
pub async fn delete_blob(client: &BlobContainerClient, blob: &str) {
    let options = azure_storage_blob::models::BlobClientDeleteOptions {
        delete_snapshots: Some(azure_storage_blob::models::DeleteSnapshotsOptionType::Include),
        ..Default::default()
    };
    client
        .blob_client(blob)
        .delete(Some(options))
        .await
        .expect("delete the blob");
}

/// Deletes the container and everything in it.
pub async fn delete_container(client: &BlobContainerClient) {
    client.delete(None).await.expect("delete the container");
}
