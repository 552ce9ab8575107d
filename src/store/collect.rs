//! Collection of stale member and candidate blobs, so that nothing grows
//! without bound.
//!
//! Every instance of a lease set holds a member blob, `<set>/members/<holder>`,
//! and every candidate of a planned handover a record,
//! `<blob>.candidates/<holder>`. The default holder is `<hostname>-<pid>-<random>`,
//! so every restart leaves one more behind, and every listing reads them all.
//! They go away two ways:
//!
//! - **Leaving.** A graceful leave deletes its own blob after it released
//!   the lease, with a Delete that carries no lease id, which storage
//!   refuses while anyone holds a lease on the blob.
//! - **Collection.** An instance that lists them (a set's balancer every
//!   cycle, whether it lists the members only or the whole set; a leader
//!   with a priority every renew interval) deletes those it
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
//! A blob that storage refuses to delete for a reason that does not pass by
//! itself (409: snapshots, an immutability policy, a legal hold) is told
//! once at warn with what to do, counted in the metric
//! `blob_mutex_collect_refused_total`, and tried again after one listing
//! interval, then after twice as long each time, up to an hour; it does not
//! take the place of the others meanwhile. Up to [`REFUSED_KEPT`] of them
//! are remembered, each until it is deleted or no longer listed.
//!
//! Partition blobs are never collected: their epochs must only grow.
//!
//! Here: the options ([`Collection`]), what one instance has seen and what
//! is due ([`Collector`]), and the driver of the deletes ([`delete_stale`]),
//! which every blob backend uses with its own conditional delete call.

// Built with no backend, only `Collection` (public) is used.
#![cfg_attr(not(any(feature = "official", feature = "sdk-v021")), allow(dead_code))]

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
/// `BlobLeaseSetStore::with_collection`
/// and `BlobLeaseManager::with_collection`).
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

/// The longest wait before a blob that refused deletion is tried again.
const REFUSED_BACKOFF_MAX: Duration = Duration::from_secs(3600);
/// The shortest first wait, whatever the time between two listings.
const REFUSED_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The most blobs that refused deletion one collector remembers; the
/// others are tried again at every listing (at most `per_listing` of them
/// in all), as if they had never refused.
pub(crate) const REFUSED_KEPT: usize = 10_000;

/// When a blob was first seen without a lease, and its `ETag` then.
#[derive(Debug)]
struct Seen {
    etag: String,
    since: Instant,
}

/// A blob whose deletion storage refused for a reason that does not pass by
/// itself (409: snapshots, an immutability policy, a legal hold): not due
/// again before `retry_at`.
#[derive(Debug)]
struct Refused {
    /// The wait after the last refusal: one listing interval at first,
    /// doubled at each refusal, at most [`REFUSED_BACKOFF_MAX`].
    backoff: Duration,
    retry_at: Instant,
}

/// What one collector remembers between listings.
#[derive(Debug, Default)]
struct Memory {
    seen: HashMap<String, Seen>,
    /// At most [`REFUSED_KEPT`]; a blob is forgotten once it is deleted or
    /// no longer listed.
    refused: HashMap<String, Refused>,
    /// When the last listing was read.
    listed_at: Option<Instant>,
    /// The time between the last two listings.
    interval: Duration,
}

/// How a refused deletion was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The blob's first refusal: it is tried again after one listing
    /// interval.
    First,
    /// Refused again: the wait doubled.
    Again,
    /// The memory of refused blobs is full: it is tried again when next
    /// due.
    NotKept,
}

/// What one collecting instance has seen of the blobs it may collect.
#[derive(Debug)]
pub(crate) struct Collector {
    collection: Collection,
    memory: Mutex<Memory>,
    /// This instance's own random order of the stale blobs.
    order: RandomState,
    /// Storage refused a delete for want of a permission: collect no more.
    refused: AtomicBool,
}

impl Collector {
    pub(crate) fn new(collection: Collection) -> Self {
        Collector {
            collection,
            memory: Mutex::default(),
            order: RandomState::new(),
            refused: AtomicBool::new(false),
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    /// `ETag` the delete must match: at most `per_listing`, none that
    /// refused deletion and whose wait has not passed. Forgets what is not
    /// in the listing, and what is leased.
    ///
    /// The names are the ones [`delete_stale`] is then given (a blob's full
    /// name in its container), so that what it learns of each delete is
    /// kept under the same name.
    pub(crate) fn due<'a, S: AsRef<str>>(
        &self,
        listing: impl IntoIterator<Item = (S, &'a LeaseInfo)>,
        now: Instant,
    ) -> Vec<(String, String)> {
        let mut memory = self.memory();
        let memory = &mut *memory;
        if let Some(before) = memory.listed_at {
            memory.interval = now.saturating_duration_since(before);
        }
        memory.listed_at = Some(now);
        let mut seen_before = std::mem::take(&mut memory.seen);
        let mut refused_before = std::mem::take(&mut memory.refused);
        for (name, info) in listing {
            let name = name.as_ref();
            if let Some(refused) = refused_before.remove(name) {
                memory.refused.insert(name.to_owned(), refused);
            }
            // Leased, or being broken (still held until the break ends).
            if matches!(info.state, LeaseState::Leased | LeaseState::Breaking) {
                continue;
            }
            let since = match seen_before.remove(name) {
                Some(old) if old.etag == info.etag => old.since,
                _ => now,
            };
            memory.seen.insert(
                name.to_owned(),
                Seen {
                    etag: info.etag.clone(),
                    since,
                },
            );
        }
        let refused = &memory.refused;
        let mut due: Vec<(u64, &String, &Seen)> = memory
            .seen
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.since) > self.collection.stale_after)
            .filter(|(name, _)| refused.get(*name).is_none_or(|r| now >= r.retry_at))
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
        let mut memory = self.memory();
        memory.seen.remove(name);
        memory.refused.remove(name);
    }

    /// Storage refused to delete `name` at `now` for a reason that does not
    /// pass by itself: it is not due again for one listing interval (at
    /// least [`REFUSED_BACKOFF_MIN`]) after its first refusal, twice that
    /// after the next, and so on up to [`REFUSED_BACKOFF_MAX`].
    pub(crate) fn refused(&self, name: &str, now: Instant) -> Refusal {
        let mut memory = self.memory();
        let first = memory
            .interval
            .clamp(REFUSED_BACKOFF_MIN, REFUSED_BACKOFF_MAX);
        let kept = memory.refused.len();
        match memory.refused.get_mut(name) {
            Some(refused) => {
                refused.backoff = (refused.backoff * 2).min(REFUSED_BACKOFF_MAX);
                refused.retry_at = now + refused.backoff;
                Refusal::Again
            }
            None if kept >= REFUSED_KEPT => Refusal::NotKept,
            None => {
                memory.refused.insert(
                    name.to_owned(),
                    Refused {
                        backoff: first,
                        retry_at: now + first,
                    },
                );
                Refusal::First
            }
        }
    }
}

/// What an operator can do about a blob whose deletion storage refused
/// with `code`, and the code as a metric label (one of a known few).
fn refusal_advice(code: Option<&str>) -> (&'static str, &'static str) {
    match code {
        Some("SnapshotsPresent") => (
            "SnapshotsPresent",
            "it has snapshots: delete the blob with its snapshots (for example \
             `az storage blob delete --delete-snapshots include`) or only its snapshots",
        ),
        Some("BlobImmutableDueToPolicy") => (
            "BlobImmutableDueToPolicy",
            "an immutability policy protects it: it can be deleted once the policy's \
             retention has passed, or the policy is removed (an unlocked one can be)",
        ),
        Some("BlobImmutableDueToLegalHold") => (
            "BlobImmutableDueToLegalHold",
            "a legal hold protects it: it can be deleted once the hold is cleared",
        ),
        _ => (
            "other",
            "see the code in Azure's Blob Storage error codes; it is deleted once storage allows it",
        ),
    }
}

/// Deletes the stale blobs `due` (full names, with the `ETag` each was seen
/// with) through a backend's `delete`, which must delete a blob only if it
/// is unchanged (`If-Match`) and not leased (no lease id sent), and answer
/// in the crate's errors. At most [`DELETES_IN_FLIGHT`] at once, all within
/// `limit`; returns how many were deleted.
///
/// A missing permission stops the collector, told once at warn. A blob
/// that storage refuses to delete with a 409 that is not about its lease
/// (snapshots, an immutability policy, a legal hold) is tried again only
/// after a wait that doubles at each refusal (see [`Collector::refused`]);
/// its first refusal is told at warn with what to do about it, and each one
/// counts in the metric `blob_mutex_collect_refused_total`.
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
                    Err(Error::LeaseLost(_) | Error::Storage { status: 412, .. }) => {
                        trace!(blob = %name, "a stale blob came back to life; kept");
                    }
                    // Snapshots, an immutability policy, a legal hold: it
                    // stays so until someone acts.
                    Err(Error::Storage {
                        status: 409, code, ..
                    }) => {
                        let (label, advice) = refusal_advice(code.as_deref());
                        let code = code.as_deref().unwrap_or("(no code)");
                        collect_refused(label);
                        match collector.refused(&name, Instant::now()) {
                            Refusal::First => warn!(
                                blob = %name,
                                code,
                                "storage refuses to delete a stale blob; {advice}. \
                                 It is tried again after a wait that doubles up to an hour"
                            ),
                            Refusal::Again | Refusal::NotKept => {
                                debug!(blob = %name, code, "storage refused again to delete a stale blob");
                            }
                        }
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

/// Counts a deletion of a stale blob refused with `code`; a collector
/// belongs to no one lease, so the code is the only label.
#[cfg(feature = "metrics")]
fn collect_refused(code: &'static str) {
    ::metrics::counter!("blob_mutex_collect_refused_total", "code" => code).increment(1);
}

#[cfg(not(feature = "metrics"))]
fn collect_refused(_code: &'static str) {}

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

    fn refused(code: &str) -> Error {
        Error::Storage {
            status: 409,
            code: Some(code.to_owned()),
            message: "delete failed".to_owned(),
        }
    }

    /// Lists `listing` every `interval` for `listings` times, deleting what
    /// is due; the blobs named in `refusing` refuse with a 409 and that
    /// code, the others are deleted (and leave the listing). Returns when
    /// each blob's delete was sent, from the first listing.
    async fn collect_refusing(
        collector: &Arc<Collector>,
        mut listing: Vec<(String, LeaseInfo)>,
        refusing: &[(&str, &str)],
        interval: Duration,
        listings: usize,
    ) -> Vec<(String, Duration)> {
        let start = Instant::now();
        let refusing: HashMap<String, String> = refusing
            .iter()
            .map(|(n, c)| ((*n).to_owned(), (*c).to_owned()))
            .collect();
        let attempts = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..listings {
            let due = collector.due(listing.iter().map(|(n, i)| (n.as_str(), i)), Instant::now());
            let attempted = attempts.clone();
            let refusing = &refusing;
            delete_stale(collector.clone(), due, interval, |name, _etag| {
                attempted
                    .lock()
                    .unwrap()
                    .push((name.clone(), start.elapsed()));
                let answer = refusing
                    .get(&name)
                    .map_or(Ok(()), |code| Err(refused(code)));
                async move { answer }
            })
            .await;
            let deleted: Vec<String> = attempts
                .lock()
                .unwrap()
                .iter()
                .map(|(n, _)| n.clone())
                .filter(|n| !refusing.contains_key(n))
                .collect();
            listing.retain(|(n, _)| !deleted.contains(n));
            tokio::time::advance(interval).await;
        }
        let attempts = attempts.lock().unwrap().clone();
        attempts
    }

    /// As [`collect_refusing`], with `snapped` refusing for its snapshots.
    async fn collect_every(
        collector: &Arc<Collector>,
        listing: Vec<(String, LeaseInfo)>,
        interval: Duration,
        listings: usize,
    ) -> Vec<(String, Duration)> {
        let refusing = [("snapped", "SnapshotsPresent")];
        collect_refusing(collector, listing, &refusing, interval, listings).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_blob_that_refuses_deletion_is_retried_after_a_backoff_that_doubles_up_to_an_hour() {
        let interval = Duration::from_secs(5);
        let collector = Arc::new(Collector::new(
            Collection::default().with_stale_after(Duration::ZERO),
        ));
        let listing = vec![
            ("snapped".to_owned(), info(LeaseState::Expired, "e1")),
            ("plain".to_owned(), info(LeaseState::Available, "e2")),
        ];
        // Four hours of listings every 5 s.
        let attempts = collect_every(&collector, listing, interval, 4 * 720).await;
        let plain: Vec<Duration> = attempts
            .iter()
            .filter(|(n, _)| n == "plain")
            .map(|(_, at)| *at)
            .collect();
        assert_eq!(plain, [interval], "the other blob is deleted when due");
        let snapped: Vec<u64> = attempts
            .iter()
            .filter(|(n, _)| n == "snapped")
            .map(|(_, at)| at.as_secs())
            .collect();
        let gaps: Vec<u64> = snapped.windows(2).map(|w| w[1] - w[0]).collect();
        // One listing interval, doubling, at most an hour.
        assert_eq!(
            gaps,
            [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600],
            "retried {} times, first at {:?}",
            snapped.len(),
            &snapped[..snapped.len().min(20)]
        );
        assert_eq!(snapped[0], 5, "first tried when due");
    }

    #[tokio::test(start_paused = true)]
    async fn blobs_that_refuse_deletion_do_not_take_the_places_of_others() {
        let interval = Duration::from_secs(5);
        let collection = Collection::default()
            .with_stale_after(Duration::ZERO)
            .with_per_listing(1);
        let collector = Arc::new(Collector::new(collection));
        // `snapped` refuses; five others, which come after it in this
        // collector's order, are deleted: one place per listing.
        let after_snapped =
            |n: &String| collector.order.hash_one(n) > collector.order.hash_one("snapped");
        let mut listing: Vec<(String, LeaseInfo)> = (0..)
            .map(|i| format!("plain-{i}"))
            .filter(after_snapped)
            .take(5)
            .map(|n| (n, info(LeaseState::Expired, "e")))
            .collect();
        listing.push(("snapped".to_owned(), info(LeaseState::Expired, "e1")));
        let attempts = collect_every(&collector, listing, interval, 10).await;
        let order: Vec<(&str, u64)> = attempts
            .iter()
            .map(|(n, at)| {
                (
                    if n == "snapped" { "snapped" } else { "plain" },
                    at.as_secs(),
                )
            })
            .collect();
        assert_eq!(
            order,
            [
                ("snapped", 5),
                ("snapped", 10),
                ("plain", 15),
                ("snapped", 20),
                ("plain", 25),
                ("plain", 30),
                ("plain", 35),
                ("snapped", 40),
                ("plain", 45),
            ]
        );
    }

    #[test]
    fn each_refusal_counts_and_the_first_of_each_blob_is_told_with_what_to_do() {
        let (logs, _logging) = crate::captured_logs::capture(tracing::Level::WARN);
        #[cfg(feature = "metrics")]
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        #[cfg(feature = "metrics")]
        let _recording = ::metrics::set_default_local_recorder(&recorder);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let attempts = runtime.block_on(async {
            let collector = Arc::new(Collector::new(
                Collection::default().with_stale_after(Duration::ZERO),
            ));
            let listing = ["set/members/snapped", "set/members/held", "set/members/odd"]
                .map(|n| (n.to_owned(), info(LeaseState::Expired, "e")))
                .to_vec();
            let refusing = [
                ("set/members/snapped", "SnapshotsPresent"),
                ("set/members/held", "BlobImmutableDueToLegalHold"),
                ("set/members/odd", "SomethingNew"),
            ];
            // Five minutes of listings every 5 s.
            collect_refusing(&collector, listing, &refusing, Duration::from_secs(5), 60).await
        });
        let tries = |name: &str| attempts.iter().filter(|(n, _)| n == name).count();
        assert_eq!(tries("set/members/snapped"), 6, "{attempts:?}");
        let logs = logs.text();
        let told: Vec<&str> = logs.lines().collect();
        assert_eq!(told.len(), 3, "once per blob: {logs}");
        for (blob, code, advice) in [
            ("snapped", "SnapshotsPresent", "--delete-snapshots include"),
            ("held", "BlobImmutableDueToLegalHold", "hold is cleared"),
            ("odd", "SomethingNew", "Azure's Blob Storage error codes"),
        ] {
            let line = told
                .iter()
                .find(|l| l.contains(&format!("blob=set/members/{blob}")))
                .unwrap_or_else(|| panic!("{blob} is told: {logs}"));
            assert!(
                line.contains("WARN")
                    && line.contains(&format!("code=\"{code}\""))
                    && line.contains(advice),
                "{line}"
            );
        }
        #[cfg(feature = "metrics")]
        {
            use metrics_util::debugging::DebugValue;
            let mut counted: Vec<(String, u64)> = recorder
                .snapshotter()
                .snapshot()
                .into_vec()
                .into_iter()
                .filter(|(key, ..)| key.key().name() == "blob_mutex_collect_refused_total")
                .map(|(key, _, _, value)| {
                    let labels: Vec<String> = key
                        .key()
                        .labels()
                        .map(|l| format!("{}={}", l.key(), l.value()))
                        .collect();
                    let DebugValue::Counter(count) = value else {
                        panic!("a counter")
                    };
                    (labels.join(","), count)
                })
                .collect();
            counted.sort();
            assert_eq!(
                counted,
                [
                    ("code=BlobImmutableDueToLegalHold".to_owned(), 6),
                    ("code=SnapshotsPresent".to_owned(), 6),
                    ("code=other".to_owned(), 6),
                ]
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_are_remembered_for_blobs_still_listed_and_at_most_a_bound_of_them() {
        let collector = Collector::new(Collection::default().with_stale_after(Duration::ZERO));
        let listing: Vec<(String, LeaseInfo)> = (0..=REFUSED_KEPT)
            .map(|i| (format!("m{i}"), info(LeaseState::Expired, "e")))
            .collect();
        let list = |l: &[(String, LeaseInfo)]| {
            collector.due(l.iter().map(|(n, i)| (n.as_str(), i)), Instant::now())
        };
        list(&listing);
        tokio::time::advance(Duration::from_secs(5)).await;
        let now = Instant::now();
        for (name, _) in &listing[..REFUSED_KEPT] {
            assert_eq!(collector.refused(name, now), Refusal::First);
        }
        let extra = &listing[REFUSED_KEPT].0;
        assert_eq!(collector.refused(extra, now), Refusal::NotKept);
        assert_eq!(collector.refused(&listing[0].0, now), Refusal::Again);
        assert_eq!(collector.memory().refused.len(), REFUSED_KEPT);
        // Only the one that could not be remembered is due at once.
        let due = list(&listing);
        assert_eq!(names(&due), [extra.as_str()]);
        // Leased: still remembered. Gone from the listing, or deleted:
        // forgotten.
        let mut later = listing[..3].to_vec();
        later[0].1.state = LeaseState::Leased;
        collector.forget(&later[2].0);
        list(&later);
        let mut kept: Vec<String> = collector.memory().refused.keys().cloned().collect();
        kept.sort();
        assert_eq!(kept, [later[0].0.clone(), later[1].0.clone()]);
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
