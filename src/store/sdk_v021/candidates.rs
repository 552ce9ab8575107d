//! Candidates beside the lease blob, for a planned handover: one leased
//! blob per candidate, `<lease blob>.candidates/<holder>`, whose metadata
//! carries the holder, its priority and its proposed lease id. The server
//! times each record: a candidate that dies vanishes when its lease
//! expires. One List Blobs call (with metadata) reads them all.
//!
//! The namespace cannot collide with another lease: blob names with a path
//! segment ending in `.candidates` are refused for leases (see
//! `store::names`), and the holder is encoded into one segment
//! (letters, digits, `-` and `_` as they are, every other byte as `.XX`),
//! so two holders never share a record and a record is never nested.

use std::time::Duration;

use azure_core_v021::request_options::Metadata;
use futures_util::StreamExt;
use tracing::debug;

use super::client::lease_info;
use super::client::{is_not_found, map_error};
use super::delete::{delete_stale, delete_unleased};
use super::SdkV021LeaseManager;
use crate::error::Result;
use crate::store::blob_protocol::{
    encode_holder, parse_candidate, HOLDER_KEY, PRIORITY_KEY, PROPOSED_KEY,
};
use crate::store::names::{is_record, CANDIDATES};
use crate::store::{Acquire, Candidate, LeaseId, LeaseState};

impl SdkV021LeaseManager {
    /// The manager of `holder`'s candidate record, sharing this one's client.
    fn record(&self, holder: &str) -> SdkV021LeaseManager {
        let name = format!("{}{CANDIDATES}{}", self.blob_name, encode_holder(holder));
        SdkV021LeaseManager {
            blob: self.blob.container_client().blob_client(&name),
            container: self.container.clone(),
            blob_name: name,
            settings: self.settings.clone(),
            request_timeout: self.request_timeout,
            collector: self.collector.clone(),
            member: false,
        }
    }

    /// Acquires (or keeps) the record under `record`, then writes the
    /// candidate to its metadata under that lease: only the record's holder
    /// can write it.
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
        let mut metadata = Metadata::new();
        metadata.insert(HOLDER_KEY, candidate.holder.clone());
        metadata.insert(PRIORITY_KEY, candidate.priority.to_string());
        metadata.insert(PROPOSED_KEY, candidate.proposed.to_string());
        blob.blob
            .set_metadata()
            .lease_id(record.sdk_id())
            .metadata(metadata)
            .await
            .map_err(|e| map_error("advertise", &e))?;
        Ok(Acquire::Acquired)
    }

    pub(super) async fn keep_advertising_uncapped(
        &self,
        record: LeaseId,
        holder: String,
    ) -> Result<()> {
        self.record(&holder).renew_uncapped(record).await
    }

    /// Releases the record, then deletes it unless it is leased again
    /// (a record left behind is collected when stale).
    pub(super) async fn withdraw_uncapped(&self, record: LeaseId, holder: String) -> Result<()> {
        let blob = self.record(&holder);
        blob.release_uncapped(record).await?;
        delete_unleased(blob.blob, self.request_timeout).await;
        Ok(())
    }

    pub(super) async fn candidates_uncapped(&self) -> Result<Vec<Candidate>> {
        let prefix = format!("{}{CANDIDATES}", self.blob_name);
        let mut pages = self
            .blob
            .container_client()
            .list_blobs()
            .prefix(prefix.clone())
            .include_metadata(true)
            .into_stream();
        let mut listed = Vec::new();
        let mut records = Vec::new();
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(page) => page,
                Err(e) if is_not_found(&e) => break,
                Err(e) => return Err(map_error("list candidates", &e)),
            };
            // A blob of another shape under the prefix is no record of ours.
            for blob in page.blobs.blobs().filter(|b| is_record(&prefix, &b.name)) {
                let info = lease_info(&blob.properties, None);
                let leased = info.state == LeaseState::Leased;
                records.push((blob.name.clone(), info));
                if !leased {
                    continue;
                }
                if let Some(candidate) = blob.metadata.as_ref().and_then(parse_candidate) {
                    listed.push(candidate);
                } else {
                    // Being written (leased, metadata not yet set): no
                    // candidate yet.
                    debug!(record = %blob.name, "a candidate record without a candidate");
                }
            }
        }
        // Records left behind by candidates that died: a bounded number per
        // listing, in at most half the time of a call, so that the listing
        // itself is not lost to a slow collection.
        let due = self.collector.due(
            records.iter().map(|(name, info)| (name.as_str(), info)),
            tokio::time::Instant::now(),
        );
        let container = self.blob.container_client().clone();
        delete_stale(
            container,
            self.collector.clone(),
            due,
            self.request_timeout / 2,
        )
        .await;
        Ok(listed)
    }
}
