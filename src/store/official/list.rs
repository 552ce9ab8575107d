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
use tracing::{debug, trace, warn};

use super::client::{http_status, is_not_found, lease_info, map_error};
use crate::error::Result;
use crate::store::blob_protocol::DELETES_IN_FLIGHT;
use crate::store::collect::Collector;
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
/// with), each only if unchanged and not leased, at most
/// [`DELETES_IN_FLIGHT`] at once, all within `limit`; returns how many were
/// deleted. A missing permission stops the collector, told once at warn.
pub(super) async fn delete_stale(
    container: &Arc<BlobContainerClient>,
    collector: &Arc<Collector>,
    due: Vec<(String, String)>,
    limit: Duration,
) -> usize {
    if due.is_empty() || collector.is_refused() {
        return 0;
    }
    let batch = futures_util::stream::iter(due)
        .map(|(name, etag)| {
            let blob = container.blob_client(&name);
            async move {
                let options = BlobClientDeleteOptions {
                    if_match: Some(Etag::from(etag)),
                    ..Default::default()
                };
                let result = blob.delete(Some(options)).await.map(drop);
                (name, result)
            }
        })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .fold(0, |deleted, (name, result)| async move {
            match result.as_ref().map_err(http_status) {
                Ok(()) => {
                    collector.forget(&name);
                    trace!(blob = %name, "deleted a stale blob");
                    return deleted + 1;
                }
                Err(Some((404, _))) => collector.forget(&name),
                Err(Some((409 | 412, code))) => {
                    trace!(blob = %name, ?code, "a stale blob came back to life; kept");
                }
                Err(Some((401 | 403, _))) => {
                    if collector.refuse() {
                        if let Err(e) = &result {
                            let e = map_error("delete", e);
                            warn!(error = %e, "cannot delete stale blobs; they are left to grow");
                        }
                    }
                }
                Err(_) => debug!(blob = %name, "could not delete a stale blob; trying again later"),
            }
            deleted
        });
    let deleted = tokio::time::timeout(limit, batch).await.unwrap_or(0);
    if deleted > 0 {
        debug!(deleted, "collected stale blobs");
    }
    deleted
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
