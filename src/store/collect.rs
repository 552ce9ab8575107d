//! Collection of stale member and candidate blobs, so that nothing grows
//! without bound.
//!
//! Every instance of a lease set holds a member blob, `<set>/members/<holder>`,
//! and every candidate of a planned handover a record,
//! `<blob>.candidates/<holder>`. The default holder is `<hostname>-<pid>`,
//! so every restart leaves one more behind, and every listing reads them all.
//! They go away two ways:
//!
//! - **Leaving.** A graceful leave deletes its own blob after it released
//!   the lease, with a Delete that carries no lease id, which storage
//!   refuses while anyone holds a lease on the blob.
//! - **Collection.** An instance that lists them (a set's balancer every
//!   cycle, a leader with a priority every renew interval) deletes those it
//!   has seen without a lease, and unchanged (the same `ETag`), for longer
//!   than [`Collection::stale_after`], measured by its own monotonic clock:
//!   no clock is compared between hosts. At most
//!   [`Collection::per_listing`] are deleted per listing, each with a
//!   Delete conditional on that `ETag` and carrying no lease id, so that a
//!   blob leased or written since it was listed is never deleted: a live
//!   member's blob survives any race with its renewal. Each instance takes
//!   the stale blobs in its own random order, so that several collectors
//!   mostly delete different ones.
//!
//! A listing then reads the live instances, plus those that stopped within
//! the last `stale_after` (and a backlog that shrinks by `per_listing`
//! each listing): with the defaults (five minutes, 100 per listing, a set's
//! 5 s cycle) a set collects up to 72 000 stale members an hour.
//!
//! Partition blobs are never collected: their epochs must only grow.
//!
//! Here: the options ([`Collection`]), what one instance has seen and what
//! is due ([`Collector`]), and the driver of the deletes ([`delete_stale`]),
//! which every blob backend uses with its own conditional delete call.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tracing::{debug, trace, warn};

use crate::error::{Error, Result};
use crate::store::{LeaseInfo, LeaseState};

/// The most conditional deletes of stale blobs in flight at once: few, so
/// that a backlog of deletions never crowds out the renewals.
pub(crate) const DELETES_IN_FLIGHT: usize = 4;

/// How stale member and candidate blobs are collected (see
/// [`BlobLeaseSetStore::with_collection`](crate::BlobLeaseSetStore::with_collection)
/// and [`BlobLeaseManager::with_collection`](crate::BlobLeaseManager::with_collection)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Collection {
    /// A blob seen without a lease, and unchanged, for longer than this is
    /// deleted. Long enough for an instance that restarts under the same
    /// holder name to take its blob again. Default: 5 minutes.
    pub stale_after: Duration,
    /// The most blobs deleted after one listing. Default: 100.
    pub per_listing: usize,
}

impl Default for Collection {
    fn default() -> Self {
        Collection {
            stale_after: Duration::from_secs(300),
            per_listing: 100,
        }
    }
}

impl Collection {
    /// The same collection with another staleness bound.
    #[must_use = "the collection is returned by value"]
    pub fn with_stale_after(mut self, stale_after: Duration) -> Self {
        self.stale_after = stale_after;
        self
    }

    /// The same collection with another number of deletions per listing
    /// (0 collects nothing).
    #[must_use = "the collection is returned by value"]
    pub fn with_per_listing(mut self, per_listing: usize) -> Self {
        self.per_listing = per_listing;
        self
    }
}

/// When a blob was first seen without a lease, and its `ETag` then.
#[derive(Debug)]
struct Seen {
    etag: String,
    since: Instant,
}

/// What one collecting instance has seen of the blobs it may collect.
#[derive(Debug)]
pub(crate) struct Collector {
    collection: Collection,
    seen: Mutex<HashMap<String, Seen>>,
    /// This instance's own random order of the stale blobs.
    order: RandomState,
    /// Storage refused a delete for want of a permission: collect no more.
    refused: AtomicBool,
}

impl Collector {
    pub(crate) fn new(collection: Collection) -> Self {
        Collector {
            collection,
            seen: Mutex::default(),
            order: RandomState::new(),
            refused: AtomicBool::new(false),
        }
    }

    /// Whether storage refused a delete for want of a permission.
    pub(crate) fn is_refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// Stops collecting; `true` the first time, so that the refusal is
    /// told once.
    pub(crate) fn refuse(&self) -> bool {
        !self.refused.swap(true, Ordering::Relaxed)
    }

    pub(crate) fn collection(&self) -> Collection {
        self.collection
    }

    /// From one listing of the blobs this instance may collect (by name,
    /// with what storage said of each), the ones to delete now, with the
    /// `ETag` the delete must match: at most `per_listing`. Forgets what is
    /// not in the listing or is leased.
    ///
    /// The names are the ones [`delete_stale`] is then given (a blob's full
    /// name in its container), so that what it learns of each delete is
    /// kept under the same name.
    pub(crate) fn due<'a, S: AsRef<str>>(
        &self,
        listing: impl IntoIterator<Item = (S, &'a LeaseInfo)>,
        now: Instant,
    ) -> Vec<(String, String)> {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut before = std::mem::take(&mut *seen);
        for (name, info) in listing {
            let name = name.as_ref();
            // Leased, or being broken (still held until the break ends).
            if matches!(info.state, LeaseState::Leased | LeaseState::Breaking) {
                continue;
            }
            let since = match before.remove(name) {
                Some(old) if old.etag == info.etag => old.since,
                _ => now,
            };
            seen.insert(
                name.to_owned(),
                Seen {
                    etag: info.etag.clone(),
                    since,
                },
            );
        }
        let mut due: Vec<(u64, &String, &Seen)> = seen
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.since) > self.collection.stale_after)
            .map(|(name, s)| (self.order.hash_one(name), name, s))
            .collect();
        due.sort_unstable_by_key(|(rank, _, _)| *rank);
        due.into_iter()
            .take(self.collection.per_listing)
            .map(|(_, name, s)| (name.clone(), s.etag.clone()))
            .collect()
    }

    /// Forgets a blob that was deleted (or found gone).
    pub(crate) fn forget(&self, name: &str) {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(name);
    }
}

/// Deletes the stale blobs `due` (full names, with the `ETag` each was seen
/// with) through a backend's `delete`, which must delete a blob only if it
/// is unchanged (`If-Match`) and not leased (no lease id sent), and answer
/// in the crate's errors. At most [`DELETES_IN_FLIGHT`] at once, all within
/// `limit`; returns how many were deleted. A missing permission stops the
/// collector, told once at warn.
pub(crate) async fn delete_stale<F, Fut>(
    collector: Arc<Collector>,
    due: Vec<(String, String)>,
    limit: Duration,
    delete: F,
) -> usize
where
    F: Fn(String, String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    if due.is_empty() || collector.is_refused() {
        return 0;
    }
    let batch = futures_util::stream::iter(due)
        .map(|(name, etag)| {
            let deleting = delete(name.clone(), etag);
            async move { (name, deleting.await) }
        })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .fold(0, |deleted, (name, result)| {
            let collector = &collector;
            async move {
                match result {
                    Ok(()) => {
                        collector.forget(&name);
                        trace!(blob = %name, "deleted a stale blob");
                        return deleted + 1;
                    }
                    Err(Error::Storage { status: 404, .. }) => collector.forget(&name),
                    // Leased (412 LeaseIdMissing) or written since it was
                    // listed (412 ConditionNotMet): alive after all.
                    Err(
                        Error::LeaseLost(_)
                        | Error::Storage {
                            status: 409 | 412, ..
                        },
                    ) => {
                        trace!(blob = %name, "a stale blob came back to life; kept");
                    }
                    Err(e @ Error::Authentication { .. }) => {
                        if collector.refuse() {
                            warn!(error = %e, "cannot delete stale blobs; they are left to grow");
                        }
                    }
                    Err(_) => {
                        debug!(blob = %name, "could not delete a stale blob; trying again later");
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: LeaseState, etag: &str) -> LeaseInfo {
        let mut info = LeaseInfo::new(state);
        info.etag = etag.to_owned();
        info
    }

    fn names(due: &[(String, String)]) -> Vec<&str> {
        let mut names: Vec<&str> = due.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        names
    }

    #[tokio::test(start_paused = true)]
    async fn only_blobs_free_and_unchanged_for_longer_than_the_bound_are_due() {
        let bound = Duration::from_secs(60);
        let collector = Collector::new(Collection::default().with_stale_after(bound));
        let listing = vec![
            ("gone".to_owned(), info(LeaseState::Expired, "e1")),
            ("live".to_owned(), info(LeaseState::Leased, "e2")),
            ("breaking".to_owned(), info(LeaseState::Breaking, "e3")),
            ("changed".to_owned(), info(LeaseState::Available, "e4")),
            ("broken".to_owned(), info(LeaseState::Broken, "e5")),
        ];
        let list = |l: &[(String, LeaseInfo)]| {
            collector.due(l.iter().map(|(n, i)| (n.as_str(), i)), Instant::now())
        };
        assert!(list(&listing).is_empty());
        tokio::time::advance(bound).await;
        assert!(list(&listing).is_empty(), "not longer than the bound yet");
        // Written in between: its clock starts again.
        let mut later = listing.clone();
        later[3].1.etag = "e4b".to_owned();
        tokio::time::advance(Duration::from_secs(1)).await;
        let due = list(&later);
        assert_eq!(names(&due), ["broken", "gone"]);
        assert!(due.contains(&("gone".to_owned(), "e1".to_owned())));
        // Leased again, then free again: its clock starts again too.
        later[0].1.state = LeaseState::Leased;
        assert_eq!(names(&list(&later)), ["broken"]);
        later[0].1.state = LeaseState::Expired;
        assert_eq!(names(&list(&later)), ["broken"]);
        tokio::time::advance(bound).await;
        assert_eq!(names(&list(&later)), ["broken"]);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(names(&list(&later)), ["broken", "changed", "gone"]);
        // Gone from the listing: forgotten.
        later.retain(|(n, _)| n != "broken");
        assert_eq!(names(&list(&later)), ["changed", "gone"]);
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_per_listing_are_due_and_collectors_order_them_differently() {
        let collection = Collection::default()
            .with_stale_after(Duration::ZERO)
            .with_per_listing(10);
        let listing: Vec<(String, LeaseInfo)> = (0..1000)
            .map(|i| (format!("m{i}"), info(LeaseState::Expired, "e")))
            .collect();
        let due =
            |c: &Collector| c.due(listing.iter().map(|(n, i)| (n.as_str(), i)), Instant::now());
        let (a, b) = (Collector::new(collection), Collector::new(collection));
        due(&a);
        due(&b);
        tokio::time::advance(Duration::from_millis(1)).await;
        let (from_a, from_b) = (due(&a), due(&b));
        assert_eq!((from_a.len(), from_b.len()), (10, 10));
        assert_ne!(names(&from_a), names(&from_b));
        let none = Collector::new(collection.with_per_listing(0));
        due(&none);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(due(&none).is_empty());
    }
}
