//! List Blobs with metadata (one request per 5 000 names), and the
//! conditional deletes of the collection: the calls a lease set and the
//! candidates make on a whole container.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use azure_core_1::http::Etag;
use azure_storage_blob::models::{
    BlobClientDeleteOptions, BlobContainerClientListBlobsOptions, ListBlobsIncludeItem,
};
use azure_storage_blob::{BlobClient, BlobContainerClient};
use futures_util::StreamExt;
use tracing::debug;

use super::client::{http_status, is_not_found, lease_info, map_error};
use crate::error::Result;
use crate::store::collect::{self, Collector};
use crate::store::LeaseInfo;

/// A listed blob: its full name, its lease, and its metadata.
pub(super) type Listed = (String, LeaseInfo, HashMap<String, String>);

/// Every blob of `container` whose name starts with `prefix`, with its
/// lease and metadata; empty when the container does not exist.
pub(super) async fn list(
    container: &BlobContainerClient,
    prefix: &str,
    operation: &'static str,
) -> Result<Vec<Listed>> {
    let options = BlobContainerClientListBlobsOptions {
        prefix: Some(prefix.to_owned()),
        include: Some(vec![ListBlobsIncludeItem::Metadata]),
        ..Default::default()
    };
    let mut pages = container
        .list_blobs(Some(options))
        .map_err(|e| map_error(operation, &e))?
        .into_pages();
    let mut listed = Vec::new();
    while let Some(page) = pages.next().await {
        let page = match page {
            Ok(page) => page,
            Err(e) if is_not_found(&e) => break,
            Err(e) => return Err(map_error(operation, &e)),
        };
        let page = page.into_model().map_err(|e| map_error(operation, &e))?;
        for blob in page.blob_items {
            let Some(name) = blob.name else { continue };
            let metadata = blob.metadata.and_then(|m| m.values).unwrap_or_default();
            let properties = blob.properties.unwrap_or_default();
            let info = lease_info(
                properties.lease_state,
                properties.lease_duration,
                &metadata,
                properties.content_length,
                properties.etag.map(|e| e.to_string()),
            );
            listed.push((name, info, metadata));
        }
    }
    Ok(listed)
}

/// Deletes the stale blobs `due` (full names, with the `ETag` each was seen
/// with), each only if unchanged and not leased, as
/// [`collect::delete_stale`] drives it.
pub(super) async fn delete_stale(
    container: &Arc<BlobContainerClient>,
    collector: &Arc<Collector>,
    due: Vec<(String, String)>,
    limit: Duration,
) -> usize {
    collect::delete_stale(collector.clone(), due, limit, |name, etag| {
        let blob = container.blob_client(&name);
        async move {
            let options = BlobClientDeleteOptions {
                if_match: Some(Etag::from(etag)),
                ..Default::default()
            };
            blob.delete(Some(options))
                .await
                .map(drop)
                .map_err(|e| map_error("delete", &e))
        }
    })
    .await
}

/// Deletes `blob` unless it is leased (no lease id is sent); `true` when
/// deleted.
pub(super) async fn delete_unleased(blob: &BlobClient, limit: Duration) -> bool {
    match tokio::time::timeout(limit, blob.delete(None)).await {
        Ok(Ok(_)) => {
            debug!(blob = %blob.url().path(), "deleted on leaving");
            true
        }
        Ok(Err(e)) => {
            debug!(status = ?http_status(&e), "not deleted on leaving; it will be collected when stale");
            false
        }
        Err(_) => false,
    }
}
