//! Deleting member and candidate blobs on the 0.21 SDK: on leaving, and once
//! stale, when a listing finds them.

use std::sync::Arc;
use std::time::Duration;

use azure_core::prelude::IfMatchCondition;
use azure_storage_blobs::prelude::{BlobClient, ContainerClient};
use futures_util::StreamExt;
use tracing::{debug, trace, warn};

use super::errors::{http_status, map_error};
use crate::store::blob_protocol::DELETES_IN_FLIGHT;
use crate::store::collect::Collector;

/// Deletes the stale blobs `due` (full names, with the `ETag` each was seen
/// with), each only if it is unchanged and not leased (no lease id is
/// sent), at most [`DELETES_IN_FLIGHT`] at once, all within `limit`;
/// returns how many were deleted. A permission that is missing stops the
/// collector, told once at warn.
pub(super) async fn delete_stale(
    container: ContainerClient,
    collector: Arc<Collector>,
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
                let result = blob
                    .delete()
                    .if_match(IfMatchCondition::Match(etag))
                    .await;
                (name, result)
            }
        })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .fold(0, |deleted, (name, result)| {
            let collector = &collector;
            async move {
                match result.as_ref().map_err(http_status) {
                    Ok(_) => {
                        collector.forget(&name);
                        trace!(blob = %name, "deleted a stale blob");
                        return deleted + 1;
                    }
                    Err(Some((404, _))) => collector.forget(&name),
                    // Leased (412 LeaseIdMissing) or written since it was
                    // listed (412 ConditionNotMet): alive after all.
                    Err(Some((409 | 412, code))) => {
                        trace!(blob = %name, ?code, "a stale blob came back to life; kept");
                    }
                    Err(Some((401 | 403, _))) => {
                        if collector.refuse() {
                            let error = result.map(drop).map_err(|e| map_error("delete", &e));
                            if let Err(e) = error {
                                warn!(error = %e, "cannot delete stale blobs; they are left to grow");
                            }
                        }
                    }
                    Err(_) => debug!(blob = %name, "could not delete a stale blob; trying again later"),
                }
                deleted
            }
        });
    let deleted = tokio::time::timeout(limit, batch).await.unwrap_or(0);
    if deleted > 0 {
        debug!(deleted, "collected stale blobs");
    }
    deleted
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
