//! Candidates beside the lease blob, for a planned handover: one leased
//! blob per candidate, `<lease blob>.candidates/<holder>`, whose metadata
//! carries the holder, its priority and its proposed lease id. The server
//! times each record: a candidate that dies vanishes when its lease
//! expires. One List Blobs call (with metadata) reads them all.
//!
//! The namespace cannot collide with another lease: blob names with a path
//! segment ending in `.candidates` are refused for leases (see
//! `settings::validate_blob`), and the holder is encoded into one segment
//! (letters, digits, `-` and `_` as they are, every other byte as `.XX`),
//! so two holders never share a record and a record is never nested.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use azure_core::request_options::Metadata;
use futures_util::StreamExt;
use tracing::debug;

use super::{
    delete_stale, delete_unleased, is_not_found, lease_info, map_error, BlobLeaseManager,
    HOLDER_KEY,
};
use crate::error::Result;
use crate::store::{Acquire, Candidate, LeaseId, LeaseState};

/// What follows the lease blob's name in the name of every candidate record.
pub(crate) const CANDIDATES: &str = ".candidates/";
/// Metadata key of a candidate's priority.
pub const PRIORITY_KEY: &str = "priority";
/// Metadata key of a candidate's proposed lease id.
pub const PROPOSED_KEY: &str = "proposed_lease_id";

/// The holder as one blob-name segment: `[A-Za-z0-9_-]` as is, every other
/// byte as `.XX` (upper-case hex). Never empty, never `.` or `..`, never
/// ends with a dot.
pub(crate) fn encode_holder(holder: &str) -> String {
    let mut out = String::with_capacity(holder.len());
    for b in holder.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, ".{b:02X}");
        }
    }
    out
}

impl BlobLeaseManager {
    /// The manager of `holder`'s candidate record, sharing this one's client.
    fn record(&self, holder: &str) -> BlobLeaseManager {
        let name = format!("{}{CANDIDATES}{}", self.blob_name, encode_holder(holder));
        BlobLeaseManager {
            blob: self.blob.container_client().blob_client(&name),
            container: self.container.clone(),
            blob_name: name,
            settings: self.settings.clone(),
            request_timeout: self.request_timeout,
            collector: self.collector.clone(),
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
            .prefix(prefix)
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
            for blob in page.blobs.blobs() {
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

/// The candidate in a record's metadata; `None` when a field is missing or
/// garbled.
fn parse_candidate(metadata: &HashMap<String, String>) -> Option<Candidate> {
    let holder = metadata.get(HOLDER_KEY)?.clone();
    let priority = metadata.get(PRIORITY_KEY)?.trim().parse().ok()?;
    let proposed = metadata.get(PROPOSED_KEY)?.trim().parse().ok()?;
    Some(Candidate::new(holder, priority, proposed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_encode_to_one_safe_segment_each() {
        assert_eq!(encode_holder("host-12_a"), "host-12_a");
        assert_eq!(encode_holder("a.b/c"), "a.2Eb.2Fc");
        assert_eq!(encode_holder(".."), ".2E.2E");
        assert_eq!(encode_holder("x "), "x.20");
        // Injective: a literal ".2E" is itself encoded.
        assert_ne!(encode_holder(".2E"), encode_holder("."));
        for holder in ["a", ".", "..", "a/b", "x.", "~%?#"] {
            let segment = encode_holder(holder);
            assert!(
                !segment.contains('/') && !segment.ends_with('.'),
                "{segment}"
            );
            crate::settings::validate_blob(&segment).unwrap();
        }
    }

    #[test]
    fn a_garbled_record_is_no_candidate() {
        let id = LeaseId::new();
        let full = HashMap::from([
            (HOLDER_KEY.to_owned(), "a".to_owned()),
            (PRIORITY_KEY.to_owned(), "-3".to_owned()),
            (PROPOSED_KEY.to_owned(), id.to_string()),
        ]);
        let parsed = parse_candidate(&full).unwrap();
        assert_eq!((parsed.priority, parsed.proposed), (-3, id));
        for key in [HOLDER_KEY, PRIORITY_KEY, PROPOSED_KEY] {
            let mut missing = full.clone();
            missing.remove(key);
            assert!(parse_candidate(&missing).is_none(), "{key}");
        }
        let mut bad = full.clone();
        bad.insert(PRIORITY_KEY.to_owned(), "high".to_owned());
        assert!(parse_candidate(&bad).is_none());
        let mut bad = full;
        bad.insert(PROPOSED_KEY.to_owned(), "x".to_owned());
        assert!(parse_candidate(&bad).is_none());
    }
}
