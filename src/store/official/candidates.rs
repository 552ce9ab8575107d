//! Candidates beside the lease blob, as the 0.21 backend keeps them: one
//! leased blob per candidate, `<lease blob>.candidates/<holder>`, with the
//! holder, its priority and its proposed lease id in its metadata; one List
//! Blobs call reads them all.

use std::collections::HashMap;
use std::time::Duration;

use azure_storage_blob::models::BlobClientSetMetadataOptions;

use super::client::map_error;
use super::delete::{delete_stale, delete_unleased};
use super::set::list;
use super::OfficialLeaseManager;
use crate::error::Result;
use crate::store::blob_protocol::{
    encode_holder, parse_candidate, HOLDER_KEY, PRIORITY_KEY, PROPOSED_KEY,
};
use crate::store::names::{is_record, CANDIDATES};
use crate::store::{Acquire, Candidate, LeaseId, LeaseState};

impl OfficialLeaseManager {
    /// The manager of `holder`'s candidate record, sharing this one's client.
    pub(super) fn record(&self, holder: &str) -> OfficialLeaseManager {
        let name = format!("{}{CANDIDATES}{}", self.blob_name, encode_holder(holder));
        OfficialLeaseManager {
            blob: std::sync::Arc::new(self.container.blob_client(&name)),
            container: self.container.clone(),
            blob_name: name,
            settings: self.settings.clone(),
            request_timeout: self.request_timeout,
            collector: self.collector.clone(),
            member: false,
        }
    }

    /// Acquires (or keeps) the record under `record`, then writes the
    /// candidate to its metadata under that lease.
    pub(super) async fn advertise_uncapped(
        &self,
        record: LeaseId,
        candidate: Candidate,
        duration: Duration,
    ) -> Result<Acquire> {
        let blob = self.record(&candidate.holder);
        if blob.acquire_uncapped(record, duration).await? == Acquire::Held {
            return Ok(Acquire::Held);
        }
        let metadata = HashMap::from([
            (HOLDER_KEY.to_owned(), candidate.holder.clone()),
            (PRIORITY_KEY.to_owned(), candidate.priority.to_string()),
            (PROPOSED_KEY.to_owned(), candidate.proposed.to_string()),
        ]);
        let options = BlobClientSetMetadataOptions {
            lease_id: Some(record.to_string()),
            ..Default::default()
        };
        blob.blob
            .set_metadata(&metadata, Some(options))
            .await
            .map_err(|e| map_error("advertise", &e))?;
        Ok(Acquire::Acquired)
    }

    /// Releases the record, then deletes it unless it is leased again.
    pub(super) async fn withdraw_uncapped(&self, record: LeaseId, holder: String) -> Result<()> {
        let blob = self.record(&holder);
        blob.release_uncapped(record).await?;
        delete_unleased(&blob.blob, self.request_timeout).await;
        Ok(())
    }

    pub(super) async fn candidates_uncapped(&self) -> Result<Vec<Candidate>> {
        let prefix = format!("{}{CANDIDATES}", self.blob_name);
        let mut records = list(&self.container, &prefix, "list candidates").await?;
        // A blob of another shape under the prefix is no record of ours.
        records.retain(|(name, _, _)| is_record(&prefix, name));
        let mut listed = Vec::new();
        for (name, info, metadata) in &records {
            if info.state != LeaseState::Leased {
                continue;
            }
            if let Some(candidate) = parse_candidate(metadata) {
                listed.push(candidate);
            } else {
                // Being written (leased, metadata not yet set): no candidate yet.
                tracing::debug!(record = %name, "a candidate record without a candidate");
            }
        }
        // Records left behind by candidates that died: a bounded number per
        // listing, in at most half the time of a call.
        let due = self.collector.due(
            records.iter().map(|(name, info, _)| (name.as_str(), info)),
            tokio::time::Instant::now(),
        );
        delete_stale(
            &self.container,
            &self.collector,
            due,
            self.request_timeout / 2,
        )
        .await;
        Ok(listed)
    }
}
