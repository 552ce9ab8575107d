//! The leader's state in the lease blob's content on the official SDK: read
//! by anyone, written only under the lease and with `If-Match`.

use azure_core::http::RequestContent;
use azure_storage_blob::models::{BlobClientDownloadOptions, BlockBlobClientUploadOptions};
use tracing::{debug, trace};

use super::client::{http_status, map_error};
use super::OfficialLeaseManager;
use crate::error::Result;
use crate::store::blob_protocol::refused;
use crate::store::{check_state_len, LeaseId};

impl OfficialLeaseManager {
    pub(super) async fn read_state_uncapped(&self) -> Result<Vec<u8>> {
        let options = BlobClientDownloadOptions {
            parallel: std::num::NonZero::new(1),
            ..Default::default()
        };
        let download = match self.blob.download(Some(options)).await {
            Ok(download) => download,
            // No blob yet (404), or a range request on an empty blob (416
            // InvalidRange): no state.
            Err(e) if matches!(http_status(&e), Some((404 | 416, _))) => return Ok(Vec::new()),
            Err(e) => return Err(map_error("read state", &e)),
        };
        let body = download
            .body
            .collect()
            .await
            .map_err(|e| map_error("read state", &e))?;
        Ok(body.to_vec())
    }

    pub(super) async fn write_state_uncapped(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
        check_state_len(state)?;
        // Put Blob replaces all metadata: read it under the lease and send it
        // along, with `If-Match` (as the 0.21 backend does).
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (metadata, etag) = self
                .metadata_under(lease, "write state")
                .await
                .map_err(refused)?;
            let options = BlockBlobClientUploadOptions {
                lease_id: Some(lease.to_string()),
                blob_content_type: Some("application/octet-stream".to_owned()),
                metadata: Some(metadata),
                if_match: Some(etag),
                ..Default::default()
            };
            let put = self
                .blob
                .upload(RequestContent::from(state.to_vec()), Some(options))
                .await;
            match put {
                Ok(_) => {
                    trace!(blob = %self.blob_name, len = state.len(), "wrote leader state");
                    return Ok(());
                }
                Err(e)
                    if attempts < 3
                        && matches!(
                            http_status(&e),
                            Some((412, Some(code))) if code == "ConditionNotMet"
                        ) =>
                {
                    debug!(blob = %self.blob_name, "the blob changed between read and write; reading again");
                }
                Err(e) => return Err(refused(map_error("write state", &e))),
            }
        }
    }
}
