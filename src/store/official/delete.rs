//! Deleting member and candidate blobs on the official SDK: on leaving, and
//! once stale, when a listing finds them.

use std::sync::Arc;
use std::time::Duration;

use azure_core::http::Etag;
use azure_storage_blob::models::BlobClientDeleteOptions;
use azure_storage_blob::{BlobClient, BlobContainerClient};
use tracing::debug;

use super::client::{http_status, map_error};
use crate::store::collect::{self, Collector};

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
