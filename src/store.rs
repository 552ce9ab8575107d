//! The lease-store seam: what the election needs from any store
//! ([`LeaseStore`] for one lease, [`LeaseSetStore`] for the listing of a
//! lease set), and the words it speaks: lease ids, acquire outcomes, lease
//! states, a term's stamp, candidates of a handover.
//!
//! Azure's stores implement it (module `azure`), and so do the
//! [quorum](crate::quorum) and the stores in memory of the `testing`
//! feature. To run the election on another storage, implement the traits
//! from their docs and run [`conformance`] (feature `testing`) on the store.

// For contributors: how this module is laid out.
// The lease-store seam: what the election needs from any store, and the
// words it speaks (lease ids, acquire outcomes, lease states).
//
// Beside it in this folder, what every mode needs whatever the storage:
// the names that a lease set and a lease own, and the rules that keep
// every other lease out of them (`names`); the collection of stale member
// and candidate blobs (`collect`); the slots of one client's requests in
// flight, with a lane of their own for a set's membership (`in_flight`); the in-memory store (`memory`) and the
// contract's tests (`conformance`). The Azure stores live apart, in
// `azure/`, and the quorum, a store of stores, in `quorum/`.
//
// Nothing here knows the engine, the mutex, the lease set, the quorum or
// Azure (`scripts/check-layers`).

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

pub(crate) mod collect;
#[cfg(feature = "testing")]
pub mod conformance;
#[cfg_attr(
    not(any(feature = "official", feature = "sdk-v021", feature = "testing")),
    allow(dead_code)
)]
pub(crate) mod in_flight;
#[cfg(feature = "testing")]
pub(crate) mod memory;
pub(crate) mod names;
pub(crate) mod stamp;

pub use collect::Collection;
pub use stamp::StampOptions;

/// A lease id: a UUID chosen by this crate (a *proposed* lease id), so that a
/// retried acquire of the same round is idempotent.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseId(uuid::Uuid);

impl LeaseId {
    /// A new random lease id.
    #[must_use]
    pub fn new() -> Self {
        LeaseId(uuid::Uuid::new_v4())
    }

    /// The id as a UUID.
    #[must_use]
    pub fn as_uuid(self) -> uuid::Uuid {
        self.0
    }
}

impl Default for LeaseId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseId({})", self.0)
    }
}

impl FromStr for LeaseId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        uuid::Uuid::from_str(s)
            .map(LeaseId)
            .map_err(|_| Error::invalid("lease_id", "must be a UUID"))
    }
}

/// The outcome of an acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is ours, under the proposed id.
    Acquired,
    /// Someone else holds the lease (on Azure, HTTP 409 `LeaseAlreadyPresent`).
    Held,
}

/// The lease state of a blob, as storage reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// No lease; anyone may acquire.
    Available,
    /// Leased and not expired.
    Leased,
    /// The lease ran out; anyone may acquire.
    Expired,
    /// Being broken; free when the break period ends.
    Breaking,
    /// Broken; anyone may acquire.
    Broken,
}

impl LeaseState {
    /// The state's name in the REST API, such as `leased`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Available => "available",
            LeaseState::Leased => "leased",
            LeaseState::Expired => "expired",
            LeaseState::Breaking => "breaking",
            LeaseState::Broken => "broken",
        }
    }

    /// Whether a new lease can be acquired now.
    #[must_use]
    pub fn is_free(self) -> bool {
        matches!(
            self,
            LeaseState::Available | LeaseState::Expired | LeaseState::Broken
        )
    }
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`LeaseStore::inspect`] found: the lease's state and the metadata
/// of the last term.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// The lease state.
    pub state: LeaseState,
    /// Whether the lease is infinite rather than fixed; `None` unless leased.
    pub infinite: Option<bool>,
    /// The `holder` metadata: the name of the last instance that led.
    pub holder: Option<String>,
    /// The `epoch` metadata: the fencing token of the last term, 0 if none.
    pub epoch: u64,
    /// The `acquired_at` metadata, RFC 3339.
    pub acquired_at: Option<String>,
    /// The blob's content length in bytes.
    pub content_length: u64,
    /// The blob's `ETag` (empty for stores that have none): new with every
    /// write to the blob (a stamp, a state write) and when the blob is made
    /// again after it was lost; lease calls leave it as it is. A quorum's
    /// hold-off keeps its record of an account seen without an epoch only
    /// while the blob shows the `ETag` it first showed.
    pub etag: String,
    /// Whether the lease carries the marker of a lease set's member (on
    /// Azure, the metadata `MEMBER_KEY`), which only a
    /// set's member lease writes: a set collects no other lease, and counts
    /// no other lease as a member unless its `holder` is its name. A
    /// [`LeaseSetStore`] reports it for the leases that its
    /// [`lease`](LeaseSetStore::lease) made as `members/<holder>`.
    pub member: bool,
    /// The `advertised` metadata: what the last term's holder advertised
    /// with its stamp (an address, say; see
    /// [`MutexOptions::advertised`](crate::MutexOptions::advertised)).
    /// `None` when that term advertised nothing: an address never outlives
    /// the term that wrote it.
    pub advertised: Option<String>,
    /// Storage's clock when it answered this inspection (on Azure, the
    /// answer's `Date` header, to the second); `None` when the store does
    /// not say (a quorum's merged view, a listing, a store of your own that
    /// leaves it). Time measured on it does not depend on the host's clock.
    pub storage_time: Option<std::time::SystemTime>,
}

impl LeaseInfo {
    /// Information with this state and nothing else known: no holder,
    /// epoch 0, no content. For stores outside this crate, which cannot
    /// build the struct with a literal; set the public fields after.
    #[must_use]
    pub fn new(state: LeaseState) -> Self {
        LeaseInfo {
            state,
            infinite: None,
            holder: None,
            epoch: 0,
            acquired_at: None,
            content_length: 0,
            etag: String::new(),
            member: false,
            advertised: None,
            storage_time: None,
        }
    }
}

/// An instance that waits for the lease and would like to lead: what it
/// advertises beside the lease (see [`LeaseStore::advertise`]) so that a
/// leader with a lower priority can hand the lease over to it.
///
/// `Debug` leaves the proposed lease id out: it is another holder's lease
/// id, and is never logged.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// The candidate's holder name.
    pub holder: String,
    /// Its priority: a leader hands over only to a strictly higher one.
    pub priority: i64,
    /// The lease id its acquire attempts propose: a handover changes the
    /// lease to this id, and the candidate's next attempt finds the lease
    /// already its own.
    pub proposed: LeaseId,
}

impl Candidate {
    /// A candidate named `holder` with `priority`, proposing `proposed`.
    #[must_use]
    pub fn new(holder: impl Into<String>, priority: i64, proposed: LeaseId) -> Self {
        Candidate {
            holder: holder.into(),
            priority,
            proposed,
        }
    }
}

impl fmt::Debug for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Candidate")
            .field("holder", &self.holder)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

/// What the election needs from a lease store: one lease, acquired under an
/// id the caller proposes, renewed, released, and stamped with the epoch.
///
/// `BlobLeaseManager` (module `azure`) is the Azure store;
/// [`MemoryLeaseStore`](crate::store::memory::MemoryLeaseStore) (feature `testing`) keeps
/// the lease in memory for tests. [`BlobDistributedMutex`](crate::BlobDistributedMutex)
/// runs over any store (see [`BlobDistributedMutex::with_store`](crate::BlobDistributedMutex::with_store)),
/// and never learns which one it runs on, so everything its safety argument
/// needs is in this contract. The suite in [`conformance`]
/// (feature `testing`) checks a store against it.
///
/// # Contract
///
/// 1. **Deadline from the send time.** A lease that [`acquire`](Self::acquire)
///    or [`renew`](Self::renew) grants (or keeps) for `duration` is not
///    granted to any other proposed id before the instant the call was
///    *made* plus `duration`, measured on a clock that runs no faster than
///    the caller's by more than the caller's `clock_drift`. The mutex computes
///    its deadline from the instant it called, so a store may take as long
///    as it likes to answer.
/// 2. **Definitive loss is told apart.** When the lease is not held under the
///    given id any more (expired and taken, broken, released, changed),
///    `renew`, `release` and `stamp` return [`Error::LeaseLost`]. Every other
///    failure is transient ([`Error::is_transient`]) or fatal
///    ([`Error::is_fatal`]) and says nothing about who holds the lease.
/// 3. **Idempotent acquire.** Acquiring again with the id that holds the
///    lease succeeds ([`Acquire::Acquired`]), so a retry after a lost answer
///    learns the outcome. A lease held under another id answers
///    [`Acquire::Held`], not an error.
/// 4. **Epochs strictly increase.** [`stamp`](Self::stamp) succeeds only for
///    the id that holds the lease, and returns an epoch larger than any it
///    returned before for this lease, to any holder. It never goes back: a
///    stored epoch that cannot be increased is [`Error::InvalidEpoch`].
/// 5. **Renewing keeps the lease alive for `duration` again**, measured from
///    the renew call, with the duration of the acquire.
///
/// The mutex bounds every call with its own time limit and drops the future
/// when the limit runs out, so a call's future must be safe to drop at any
/// await point (the call may or may not have taken effect, as with any
/// network request). The limit is the request timeout, and 3 s more for a
/// stamp: time for a store that starts a record anew at its clock to wait
/// for that clock, as the blob stores do (see the guarantees chapter).
///
/// # Required and optional
///
/// A store implements [`acquire`](Self::acquire), [`renew`](Self::renew),
/// [`release`](Self::release), [`stamp`](Self::stamp),
/// [`inspect`](Self::inspect) and [`name`](Self::name); that is enough for a
/// mutex without a preferred successor, leader state or advertised value.
/// Every other method is optional: its default answers
/// [`Error::Unsupported`] (or `false`, or `None`), the mutex refuses a store
/// that lacks what its options ask for, and the conformance suite skips
/// what a store does not support.
pub trait LeaseStore: Send + Sync + 'static {
    /// Acquires the lease for `duration` under `proposed`, creating whatever
    /// the lease lives in when it is missing.
    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send;

    /// Renews the lease held under `lease` for the acquire's duration.
    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send;

    /// Gives the lease up, so that another id may acquire it at once.
    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send;

    /// Records `holder` as the holder of a new term under `lease`, as
    /// `options` say, and returns the term's epoch: `max(stored + 1,
    /// floor)`, where `stored` is the last epoch stamped on this lease (0
    /// when none) and `floor` is [`options.floor()`](StampOptions::floor).
    /// The one stamp call: the mutex, a lease set and a quorum make it with
    /// the options they need, and [`StampOptions::new()`] for a plain stamp.
    ///
    /// # Contract
    ///
    /// Rules 2 and 4 apply (only the id that holds the lease stamps; epochs
    /// strictly increase), and:
    ///
    /// 8. **A floor raises the epoch, never lowers it.** The epoch returned
    ///    is at least `floor`, and larger than every epoch returned before
    ///    for this lease; a `floor` of 0 or 1 changes nothing. A store over
    ///    several accounts (a quorum) uses it to write one epoch, the
    ///    largest a majority has seen plus one, on every account it holds.
    ///
    /// (Rule 9 is on [`advertise`](Self::advertise).)
    ///
    /// 10. **An advertised value belongs to its term.** A store whose
    ///     [`supports_advertised`](Self::supports_advertised) is `true`
    ///     keeps [`options.advertised()`](StampOptions::advertised) beside
    ///     the holder and epoch: [`inspect`](Self::inspect) reports it for
    ///     the term ([`LeaseInfo::advertised`]) until the next stamp, and
    ///     reports `None` after a stamp that advertises nothing, so that a
    ///     value never outlives the term that wrote it. The value is at
    ///     most [`MAX_ADVERTISED_LEN`] bytes of printable ASCII; a longer or
    ///     other one is refused with [`Error::InvalidOption`] (field
    ///     `advertised`) before anything is sent. Keeping a value is
    ///     optional: a store whose `supports_advertised` is `false` answers
    ///     a stamp that carries one with [`Error::Unsupported`] and stamps
    ///     nothing (the mutex and a lease set refuse such a store when their
    ///     options set [`advertised`](crate::MutexOptions::advertised), so
    ///     they never send it one); it needs no `advertised` in
    ///     [`LeaseInfo`].
    fn stamp(
        &self,
        lease: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// The lease's state and the last term's holder and epoch; `None` when
    /// the lease was never created. Needs no lease.
    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>>> + Send;

    /// A short name for the lease, for logs and metrics: `container/blob`
    /// for the Azure store. Never a secret.
    fn name(&self) -> String;

    /// The leader state: the bytes last written with
    /// [`write_state`](Self::write_state), or whatever the lease blob held
    /// before the first write (the crate never overwrites an existing blob's
    /// content). Empty when nothing was ever written or the lease was never
    /// created. Needs no lease, and is not fenced: a reader may see a state
    /// that a newer holder replaces a moment later.
    ///
    /// The default implementation returns [`Error::Unsupported`].
    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>>> + Send {
        std::future::ready(Err(Error::Unsupported {
            operation: "read state",
        }))
    }

    /// Passes the lease held under `from` to the id `to` (Change Lease), so
    /// that whoever proposed `to` finds the lease already its own, with no
    /// moment in which a third id could take it. Used for a planned
    /// handover to a preferred successor.
    ///
    /// # Contract
    ///
    /// 7. **Change keeps the lease, under another id.** After a change
    ///    succeeds, the lease is held under `to` with the time it had left
    ///    (and the acquire's duration for later renewals); `from` holds
    ///    nothing, so its `renew`, `release`, `stamp` and `write_state`
    ///    answer [`Error::LeaseLost`] (or [`Error::StateWriteRefused`]).
    ///    Changing to the id that already holds the lease succeeds, so a
    ///    retry learns the outcome. When neither `from` nor `to` holds the
    ///    lease, the answer is [`Error::LeaseLost`].
    ///
    /// The default implementation returns [`Error::Unsupported`].
    fn change(&self, from: LeaseId, to: LeaseId) -> impl Future<Output = Result<()>> + Send {
        let _ = (from, to);
        std::future::ready(Err(Error::Unsupported {
            operation: "change lease",
        }))
    }

    /// Whether this store keeps an advertised value
    /// ([`StampOptions::with_advertised`], rule 10 on
    /// [`stamp`](Self::stamp)). A store that answers `false` refuses a stamp
    /// that carries one with [`Error::Unsupported`].
    ///
    /// The default implementation returns `false`.
    fn supports_advertised(&self) -> bool {
        false
    }

    /// The shortest time limit a caller may put on one call: a store that
    /// gives back partial work before it answers (a quorum releases the
    /// leases an acquire was granted when no majority granted) must not be
    /// cut before. A mutex whose
    /// [`request_timeout`](crate::MutexOptions::request_timeout) is shorter
    /// refuses the store with [`Error::InvalidOption`].
    ///
    /// The default implementation returns `None`: any limit will do.
    fn min_request_timeout(&self) -> Option<Duration> {
        None
    }

    /// Whether this store can keep candidates beside the lease
    /// ([`advertise`](Self::advertise) and the calls after it). A mutex with
    /// a [`priority`](crate::MutexOptions::priority) refuses a store that
    /// cannot, with [`Error::Unsupported`].
    ///
    /// The default implementation returns `false`.
    fn supports_candidates(&self) -> bool {
        false
    }

    /// Advertises `candidate` beside the lease, for `duration`, under the
    /// lease id `record` of the candidate's own record (one record per
    /// holder name; on Azure the blob `<lease blob>.candidates/<holder>`,
    /// leased under `record`). Needs no lease on the lease itself.
    ///
    /// # Contract
    ///
    /// 9. **Candidates are timed by the store.** After `advertise` answers
    ///    [`Acquire::Acquired`], [`candidates`](Self::candidates) lists the
    ///    candidate as advertised last until the record is withdrawn or
    ///    `duration` has passed since the last `advertise` or
    ///    [`keep_advertising`](Self::keep_advertising) under `record`, so a
    ///    candidate that crashed vanishes by itself. A record held under
    ///    another id (another instance with the same holder name) answers
    ///    [`Acquire::Held`] and is left as it is. `keep_advertising` and
    ///    [`withdraw`](Self::withdraw) answer [`Error::LeaseLost`] when the
    ///    record is not held under `record`. Safety never rests on this
    ///    rule: a handover to a candidate that is gone leaves the lease to
    ///    expire under its id, and nobody leads until it has.
    ///
    /// The default implementation returns [`Error::Unsupported`].
    fn advertise(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        let _ = (record, candidate, duration);
        std::future::ready(Err(Error::Unsupported {
            operation: "advertise a candidate",
        }))
    }

    /// Keeps the record of `holder`, held under `record`, for its duration
    /// again (rule 9).
    ///
    /// The default implementation returns [`Error::Unsupported`].
    fn keep_advertising(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (record, holder);
        std::future::ready(Err(Error::Unsupported {
            operation: "advertise a candidate",
        }))
    }

    /// Ends the record of `holder`, held under `record`: the candidate is
    /// no longer listed (rule 9).
    ///
    /// The default implementation returns [`Error::Unsupported`].
    fn withdraw(&self, record: LeaseId, holder: &str) -> impl Future<Output = Result<()>> + Send {
        let _ = (record, holder);
        std::future::ready(Err(Error::Unsupported {
            operation: "withdraw a candidate",
        }))
    }

    /// Every candidate advertised now (rule 9), in one call (one List Blobs
    /// request on Azure). Needs no lease.
    ///
    /// The default implementation returns [`Error::Unsupported`].
    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>>> + Send {
        std::future::ready(Err(Error::Unsupported {
            operation: "list candidates",
        }))
    }

    /// Replaces the leader state with `state`, under the lease held by
    /// `lease`, keeping the term's metadata (holder, epoch, acquisition time
    /// and any other) as it is.
    ///
    /// # Contract
    ///
    /// 6. **State writes are fenced by the store.** A write carrying `lease`
    ///    lands only while `lease` holds the lease: once it has expired,
    ///    been released, broken, or passed to another id, the store refuses
    ///    the write with [`Error::StateWriteRefused`] and the state keeps
    ///    what the holders wrote. A write that fails otherwise (transient,
    ///    time-out) may or may not have landed, and landed only under the
    ///    lease. State longer than [`MAX_STATE_LEN`] is refused with
    ///    [`Error::InvalidOption`] before anything is sent. Lease calls
    ///    (acquire, renew, release, stamp) leave the state as it is.
    ///
    /// The default implementation returns [`Error::Unsupported`].
    fn write_state(&self, lease: LeaseId, state: &[u8]) -> impl Future<Output = Result<()>> + Send {
        let _ = (lease, state);
        std::future::ready(Err(Error::Unsupported {
            operation: "write state",
        }))
    }
}

/// Refuses a caller's `request_timeout` shorter than a store's
/// [`min_request_timeout`](LeaseStore::min_request_timeout).
pub(crate) fn check_request_timeout(
    needed: Option<Duration>,
    request_timeout: Duration,
) -> Result<()> {
    match needed {
        Some(needed) if request_timeout < needed => Err(Error::invalid(
            "request_timeout",
            format!(
                "{request_timeout:?} is shorter than the store's own request timeout of {needed:?}: \
                 a call cut before the store answers could leave leases granted to a failed \
                 acquire until they expire; give the store a timeout no longer than this one"
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses state longer than [`MAX_STATE_LEN`].
pub(crate) fn check_state_len(state: &[u8]) -> Result<()> {
    if state.len() > MAX_STATE_LEN {
        return Err(Error::invalid(
            "state",
            format!(
                "{} bytes is more than the limit of {MAX_STATE_LEN} bytes (4 MiB)",
                state.len()
            ),
        ));
    }
    Ok(())
}

pub(crate) use crate::limits::{check_advertised, lease_seconds};
pub use crate::limits::{MAX_ADVERTISED_LEN, MAX_STATE_LEN};

/// Many named leases in one namespace, listed together: what a
/// [`BlobLeaseSet`](crate::BlobLeaseSet) needs for its partitions and its
/// members. On Azure, a container and a blob-name prefix
/// (`BlobLeaseSetStore`); in memory,
/// [`MemoryLeaseSetStore`](crate::store::memory::MemoryLeaseSetStore) (feature `testing`).
///
/// # Contract
///
/// Each lease from [`lease`](Self::lease) meets the [`LeaseStore`]
/// contract on its own. [`list`](Self::list) reads the state of every lease
/// whose name starts with a prefix in one call (one request per 5 000 names
/// on Azure), as storage sees it at that moment, with the holder and epoch
/// of each lease's last term; a lease that was never acquired may be
/// missing from it.
///
/// A lease made as `members/<holder>` (one path segment) is a member's: it
/// marks itself when it creates what it lives in and at every stamp, and
/// `list` reports the mark ([`LeaseInfo::member`]) for it and for no lease
/// that another client made. A set counts a leased member that is not
/// marked only when its `holder` is its own name, and collects only marked
/// ones (see [`BlobLeaseSet`](crate::BlobLeaseSet#names-a-set-owns)).
pub trait LeaseSetStore: Send + Sync + 'static {
    /// The store of one lease.
    type Lease: LeaseStore;

    /// The lease named `name` within the set: `members/<holder>` (a
    /// member's, marked), `partitions/<name>`, or another name that a lease
    /// blob could have.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the name cannot name a lease: under
    /// `members/` but not one segment, or with a path segment `members` or
    /// `partitions` elsewhere (see [`BlobSettings`](crate::BlobSettings)).
    fn lease(&self, name: &str) -> Result<Self::Lease>;

    /// As [`LeaseStore::min_request_timeout`], for the set's leases and
    /// listings: a lease set whose mutex options' `request_timeout` is
    /// shorter refuses the store.
    ///
    /// The default implementation returns `None`.
    fn min_request_timeout(&self) -> Option<Duration> {
        None
    }

    /// Every lease of the set whose name starts with `prefix`, by name
    /// (without the set's own prefix), with what [`LeaseStore::inspect`]
    /// would say of it.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>>> + Send;

    /// Deletes leases of the set that are stale and never needed again
    /// (on Azure: member and candidate blobs seen without a lease for long,
    /// a bounded number per call, never one that is leased; see
    /// [`Collection`]). `listing` is this cycle's
    /// [`list`](Self::list): of the set's members (`members/`), or of the
    /// whole set, both of which have every member blob. Returns how many were
    /// deleted. Failures are logged, not returned: collection is tried
    /// again next cycle. The default deletes nothing.
    fn collect(&self, listing: &[(String, LeaseInfo)]) -> impl Future<Output = usize> + Send {
        let _ = listing;
        std::future::ready(0)
    }

    /// Deletes the lease `name` when nobody holds it (a graceful leave of
    /// a member, after its release); returns whether it was deleted. The
    /// default deletes nothing.
    fn remove(&self, name: &str) -> impl Future<Output = bool> + Send {
        let _ = name;
        std::future::ready(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_seconds_refuses_what_the_sdk_would_wrap() {
        assert_eq!(lease_seconds(Duration::from_secs(15)).unwrap(), 15);
        assert_eq!(lease_seconds(Duration::from_secs(60)).unwrap(), 60);
        for bad in [0, 14, 61, 255, 300] {
            assert!(lease_seconds(Duration::from_secs(bad)).is_err(), "{bad}");
        }
        assert!(lease_seconds(Duration::from_millis(20_500)).is_err());
    }

    #[test]
    fn advertised_values_are_short_printable_and_untrimmed() {
        for good in [
            "10.0.0.7:8080",
            "https://a.example/x?y=1",
            "a",
            &"x".repeat(256),
        ] {
            check_advertised(good).unwrap();
        }
        for bad in [
            String::new(),
            "x".repeat(257),
            "naïve".to_owned(),
            "a\nb".to_owned(),
            "tab\there".to_owned(),
            " lead".to_owned(),
            "trail ".to_owned(),
        ] {
            match check_advertised(&bad) {
                Err(Error::InvalidOption { field, .. }) => assert_eq!(field, "advertised"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn lease_id_round_trips() {
        let id = LeaseId::new();
        assert_eq!(id.to_string().parse::<LeaseId>().unwrap(), id);
        assert!("not-a-uuid".parse::<LeaseId>().is_err());
        assert_ne!(LeaseId::new(), LeaseId::new());
    }
}
