//! Deleting member and candidate blobs on the 0.21 SDK: on leaving, and once
//! stale, when a listing finds them.

use std::sync::Arc;
use std::time::Duration;

use azure_core_v021::prelude::IfMatchCondition;
use azure_storage_blobs::prelude::{BlobClient, ContainerClient};
use tracing::debug;

use super::client::{http_status, map_error};
use crate::store::collect::{self, Collector};

/// Deletes the stale blobs `due` (full names, with the `ETag` each was seen
/// with), each only if it is unchanged and not leased (no lease id is
/// sent), as [`collect::delete_stale`] drives it.
pub(super) async fn delete_stale(
    container: ContainerClient,
    collector: Arc<Collector>,
    due: Vec<(String, String)>,
    limit: Duration,
) -> usize {
    collect::delete_stale(collector, due, limit, |name, etag| {
        let blob = container.blob_client(name);
        async move {
            blob.delete()
                .if_match(IfMatchCondition::Match(etag))
                .await
                .map(drop)
                .map_err(|e| map_error("delete", &e))
        }
    })
    .await
}

/// Deletes `blob` unless it is leased (no lease id is sent, so storage
/// refuses while anyone holds a lease); `true` when deleted.
pub(super) async fn delete_unleased(blob: BlobClient, limit: Duration) -> bool {
    match tokio::time::timeout(limit, blob.delete().into_future()).await {
        Ok(Ok(_)) => {
            debug!(blob = %blob.blob_name(), "deleted on leaving");
            true
        }
        Ok(Err(e)) => {
            debug!(blob = %blob.blob_name(), status = ?http_status(&e), "not deleted on leaving; it will be collected when stale");
            false
        }
        Err(_) => false,
    }
}
