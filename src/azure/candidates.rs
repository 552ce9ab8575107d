//! Candidates beside the lease blob, for a planned handover, for every
//! SDK: one leased blob per candidate, `<lease blob>.candidates/<holder>`,
//! whose metadata carries the holder, its priority and its proposed lease
//! id. The server times each record: a candidate that dies vanishes when
//! its lease expires. One List Blobs call (with metadata) reads them all.
//!
//! The namespace cannot collide with another lease: blob names with a path
//! segment ending in `.candidates` are refused for leases (see
//! `store::names`), and the holder is encoded into one segment, so two
//! holders never share a record and a record is never nested.

use std::time::Duration;

use tracing::debug;

use super::calls::{BlobCalls, Metadata};
use super::protocol::{encode_holder, parse_candidate, HOLDER_KEY, PRIORITY_KEY, PROPOSED_KEY};
use super::set::{delete_stale, delete_unleased, list};
use super::BlobLeaseManager;
use crate::error::{Error, Result};
use crate::store::lease_seconds;
use crate::store::names::{is_record, CANDIDATES};
use crate::store::{Acquire, Candidate, LeaseId, LeaseState};

impl BlobLeaseManager {
    /// The name of `holder`'s candidate record.
    fn record_blob(&self, holder: &str) -> String {
        format!("{}{CANDIDATES}{}", self.blob, encode_holder(holder))
    }

    /// Acquires (or keeps) the record under `record`, then writes the
    /// candidate to its metadata under that lease: only the record's holder
    /// can write it.
    pub(super) async fn advertise_record(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> Result<Acquire> {
        let seconds = lease_seconds(duration)?;
        let blob = self.record_blob(&candidate.holder);
        self.bounded("advertise", async {
            if self.acquire_on(&blob, record, seconds).await? == Acquire::Held {
                return Ok(Acquire::Held);
            }
            let metadata = Metadata::from([
                (HOLDER_KEY.to_owned(), candidate.holder.clone()),
                (PRIORITY_KEY.to_owned(), candidate.priority.to_string()),
                (PROPOSED_KEY.to_owned(), candidate.proposed.to_string()),
            ]);
            self.calls
                .set_metadata(&blob, &metadata, record, None)
                .await
                .map_err(|e| e.into_error("advertise"))?;
            Ok(Acquire::Acquired)
        })
        .await
    }

    /// Renews the record of `holder` under `record`.
    pub(super) async fn keep_record(&self, record: LeaseId, holder: &str) -> Result<()> {
        let blob = self.record_blob(holder);
        self.bounded("keep advertising", self.renew_on(&blob, record))
            .await
    }

    /// Releases the record, then deletes it unless it is leased again (a
    /// record left behind is collected when stale). Deletes it also when
    /// the release finds no lease of ours: an advertise that created the
    /// record and failed before its acquire left it unleased (storage then
    /// refuses the release, Azurite with `LeaseIdMismatchWithLeaseOperation`),
    /// and a record leased by anyone is never deleted.
    pub(super) async fn withdraw_record(&self, record: LeaseId, holder: &str) -> Result<()> {
        let blob = self.record_blob(holder);
        let released = self
            .bounded("withdraw", self.release_on(&blob, record))
            .await;
        if matches!(released, Ok(()) | Err(Error::LeaseLost(_))) {
            delete_unleased(&self.calls, &blob, self.request_timeout).await;
        }
        released
    }

    /// Every candidate advertised now; collects records left behind by
    /// candidates that died, a bounded number per listing, in at most half
    /// the time of a call.
    pub(super) async fn list_candidates(&self) -> Result<Vec<Candidate>> {
        let prefix = format!("{}{CANDIDATES}", self.blob);
        let mut records = self
            .bounded(
                "list candidates",
                list(&self.calls, &prefix, "list candidates"),
            )
            .await?;
        // A blob of another shape under the prefix is no record of ours.
        records.retain(|listed| is_record(&prefix, &listed.name));
        let mut candidates = Vec::new();
        for record in &records {
            if record.properties.state != Some(LeaseState::Leased) {
                continue;
            }
            if let Some(candidate) = parse_candidate(&record.properties.metadata) {
                candidates.push(candidate);
            } else {
                // Being written (leased, metadata not yet set): no candidate yet.
                debug!(record = %record.name, "a candidate record without a candidate");
            }
        }
        let infos: Vec<_> = records
            .iter()
            .map(|r| (r.name.as_str(), r.properties.info()))
            .collect();
        let due = self.collector.due(
            infos.iter().map(|(name, info)| (*name, info)),
            tokio::time::Instant::now(),
        );
        delete_stale(&self.calls, &self.collector, due, self.request_timeout / 2).await;
        Ok(candidates)
    }
}
