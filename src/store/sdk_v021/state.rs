//! The leader's state in the lease blob's content on the 0.21 SDK: read by
//! anyone, written only under the lease and with `If-Match`.

use azure_core_v021::prelude::IfMatchCondition;
use azure_core_v021::request_options::Metadata;
use tracing::{debug, trace};

use super::client::{http_status, map_error};
use super::SdkV021LeaseManager;
use crate::error::Result;
use crate::store::blob_protocol::refused;
use crate::store::{check_state_len, LeaseId};

impl SdkV021LeaseManager {
    pub(super) async fn read_state_uncapped(&self) -> Result<Vec<u8>> {
        match self.blob.get_content().await {
            Ok(content) => Ok(content),
            Err(e) => match http_status(&e) {
                // No blob yet (404), or a range request on an empty blob
                // (416 InvalidRange): no state.
                Some((404 | 416, _)) => Ok(Vec::new()),
                _ => Err(map_error("read state", &e)),
            },
        }
    }

    pub(super) async fn write_state_uncapped(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
        check_state_len(state)?;
        // Put Blob replaces all metadata: read it under the lease and send it
        // along. `If-Match` keeps a metadata write that came in between (only
        // this lease's holder can make one) from being lost; then read again.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let current = self
                .blob
                .get_properties()
                .lease_id(lease.sdk_id())
                .await
                .map_err(|e| refused(map_error("write state", &e)))?;
            let mut metadata = Metadata::new();
            for (key, value) in current.blob.metadata.unwrap_or_default() {
                metadata.insert(key, value);
            }
            let put = self
                .blob
                .put_block_blob(state.to_vec())
                .lease_id(lease.sdk_id())
                .content_type("application/octet-stream")
                .metadata(metadata)
                .if_match(IfMatchCondition::Match(
                    current.blob.properties.etag.to_string(),
                ))
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
