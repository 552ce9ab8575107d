//! The leader's state in the lease blob's content, for every SDK: read by
//! anyone (up to [`MAX_STATE_LEN`]), written only under the lease and with
//! `If-Match`.

use tracing::{debug, trace};

use super::calls::{BlobCalls, CallError, Put};
use super::protocol::refused;
use super::BlobLeaseManager;
use crate::error::{Error, Result};
use crate::store::{check_state_len, LeaseId, MAX_STATE_LEN};

/// How often a state write reads the metadata again when the blob changed
/// between its read and its write.
const WRITE_ATTEMPTS: u32 = 3;

impl BlobLeaseManager {
    /// The leader state in the lease blob's content (see
    /// [`LeaseStore::read_state`](crate::store::LeaseStore::read_state)): empty
    /// when the blob does not exist or is empty.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `state`) when the blob is longer
    /// than [`MAX_STATE_LEN`], which is refused without reading it whole;
    /// otherwise as [`LeaseStore::acquire`](crate::store::LeaseStore::acquire).
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: it only reads.
    pub(super) async fn read_state(&self) -> Result<Vec<u8>> {
        self.bounded("read state", async {
            match self.calls.get(&self.blob, MAX_STATE_LEN).await {
                Ok(content) => Ok(content),
                // No blob yet (404), or a range request on an empty blob
                // (416 InvalidRange): no state.
                Err(e) if matches!(e.status(), Some(404 | 416)) => Ok(Vec::new()),
                Err(CallError::TooLong(limit)) => Err(Error::invalid(
                    "state",
                    format!("the lease blob is longer than the limit of {limit} bytes (4 MiB)"),
                )),
                Err(e) => Err(e.into_error("read state")),
            }
        })
        .await
    }

    /// Replaces the leader state under the lease `lease` (see
    /// [`LeaseStore::write_state`](crate::store::LeaseStore::write_state)): Put
    /// Blob with the lease id and `If-Match`, sending the blob's metadata
    /// along so that the term's record stays.
    ///
    /// # Errors
    ///
    /// [`Error::StateWriteRefused`] when the lease is no longer ours;
    /// [`Error::InvalidOption`] for state over [`MAX_STATE_LEN`];
    /// otherwise as [`LeaseStore::acquire`](crate::store::LeaseStore::acquire).
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: the write may or may not have landed, and only under
    /// the lease.
    pub(super) async fn write_state(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
        check_state_len(state)?;
        self.bounded("write state", async {
            // Put Blob replaces all metadata: read it under the lease and
            // send it along. `If-Match` keeps a metadata write that came in
            // between (only this lease's holder can make one) from being
            // lost; then read again.
            let mut attempts = 0;
            loop {
                attempts += 1;
                let (metadata, etag, _) = self
                    .metadata_under(lease, "write state")
                    .await
                    .map_err(refused)?;
                let put = Put {
                    body: state.to_vec(),
                    metadata: Some(&metadata),
                    lease: Some(lease),
                    if_match: Some(&etag),
                    if_none_match_any: false,
                };
                match self.calls.put(&self.blob, put).await {
                    Ok(()) => {
                        trace!(blob = %self.blob, len = state.len(), "wrote leader state");
                        return Ok(());
                    }
                    Err(e) if attempts < WRITE_ATTEMPTS && e.is(412, "ConditionNotMet") => {
                        debug!(blob = %self.blob, "the blob changed between read and write; reading again");
                    }
                    Err(e) => return Err(refused(e.into_error("write state"))),
                }
            }
        })
        .await
    }
}
