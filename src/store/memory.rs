//! A lease store in memory, for testing leader code without storage.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::store::collect::{Collection, Collector};
use crate::store::in_flight::{InFlight, Kind};
use crate::store::lease_seconds;
use crate::store::names::{self, collectable, SetLease};
use crate::store::{
    check_advertised, check_state_len, Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore,
    LeaseState, LeaseStore, StampOptions,
};

/// One lease kept in memory, with the same rules as an Azure blob lease.
/// Clones share the lease, so several mutexes made from clones of one store
/// compete for it like instances of a service.
///
/// Leases expire on Tokio's clock, so tests can run with paused time
/// (`#[tokio::test(start_paused = true)]`) and take no real time to fail
/// over:
///
/// ```
/// use std::time::Duration;
/// use blob_mutex::{BlobDistributedMutex, CancellationToken, LeaderContext, testing::MemoryLeaseStore, MutexOptions};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), blob_mutex::Error> {
/// let store = MemoryLeaseStore::new("jobs");
/// let task = |ctx: LeaderContext| async move {
///     ctx.cancelled().await;
///     Ok::<(), blob_mutex::Error>(())
/// };
/// let mutex = BlobDistributedMutex::with_store(store.clone(), MutexOptions::default(), task)?;
/// let token = CancellationToken::new();
/// let stop = token.clone();
/// tokio::spawn(async move {
///     tokio::time::sleep(Duration::from_secs(60)).await;
///     stop.cancel();
/// });
/// mutex.run_task_when_mutex_acquired(token).await?;
/// assert_eq!(store.epoch(), 1, "one term in a minute of virtual time");
/// # Ok(())
/// # }
/// ```
///
/// It differs from Azure where Azure is slower: an expired lease can be
/// acquired at the instant it expires, and nothing needs creating first.
#[derive(Clone, Debug)]
pub struct MemoryLeaseStore {
    name: Arc<str>,
    state: Arc<Mutex<State>>,
    /// Whether this handle is a lease set's member lease, which marks the
    /// lease when it creates it and at every stamp (as the blob stores
    /// write the metadata `member`). Clones share the lease, not this.
    member: bool,
    /// Its clock: the host's clock when the store was made, and the Tokio
    /// instant then (see [`storage_time`](Self::storage_time)).
    born: (SystemTime, Instant),
    /// The pace of a slow storage's client, when a set's leases share one
    /// (see [`MemoryLeaseSetStore::with_pace`]).
    paced: Option<Arc<Paced>>,
}

/// A slow storage behind one client: every request waits for a slot of
/// the client's requests in flight (the slots Azure's stores take, with
/// the member lease's lane), acts, and is answered `latency` later,
/// holding its slot until then.
#[derive(Debug)]
pub(crate) struct Paced {
    latency: Mutex<Duration>,
    in_flight: InFlight,
    /// Renewals that reached a lease already expired under their own id:
    /// sent after the renewer's deadline, which comes before the expiry.
    late_renewals: std::sync::atomic::AtomicUsize,
}

impl Paced {
    /// From now on, every answer takes `latency`: storage slows down (or
    /// recovers).
    #[cfg(test)]
    pub(crate) fn set_latency(&self, latency: Duration) {
        *self.latency.lock().unwrap_or_else(PoisonError::into_inner) = latency;
    }

    /// Renewals so far that arrived after their lease had expired.
    #[cfg(test)]
    pub(crate) fn late_renewals(&self) -> usize {
        self.late_renewals
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The lease's id, and when it expires; `None` once released or broken.
    lease: Option<Held>,
    /// Whether a lease was ever acquired (the "blob" exists).
    created: bool,
    epoch: u64,
    holder: Option<String>,
    /// What the last term advertised, and when it was stamped (RFC 3339).
    advertised: Option<String>,
    acquired_at: Option<String>,
    /// The leader state (the blob's content).
    content: Vec<u8>,
    /// Every call fails with a transport error while set.
    unavailable: bool,
    /// The candidates' records, by holder name.
    candidates: BTreeMap<String, Record>,
    /// Marked as a lease set's member (see [`LeaseInfo::member`]).
    member: bool,
    /// The blob's version, shown as its `ETag`: new with every write and
    /// every creation, as on Azure (lease calls leave it as it is).
    version: u64,
}

/// Versions come from one counter for every store, so that a blob made
/// again after it was lost never shows an `ETag` it showed before.
static VERSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl State {
    /// Marks a write to the blob (or its creation): a new `ETag`.
    fn written(&mut self) {
        self.version = VERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One candidate's record: held like a lease, and listed while held.
#[derive(Debug, Clone)]
struct Record {
    lease: LeaseId,
    duration: Duration,
    until: Instant,
    candidate: Candidate,
}

impl State {
    /// What an inspection or a listing sees now.
    fn info(&self, now: Instant) -> Option<LeaseInfo> {
        if !self.created {
            return None;
        }
        let lease_state = match self.lease {
            Some(held) if held.until > now => LeaseState::Leased,
            Some(_) => LeaseState::Expired,
            None => LeaseState::Available,
        };
        let mut info = LeaseInfo::new(lease_state);
        info.infinite = (lease_state == LeaseState::Leased).then_some(false);
        info.holder.clone_from(&self.holder);
        info.advertised.clone_from(&self.advertised);
        info.acquired_at.clone_from(&self.acquired_at);
        info.epoch = self.epoch;
        info.content_length = u64::try_from(self.content.len()).unwrap_or(u64::MAX);
        info.member = self.member;
        info.etag = format!("\"0x{:X}\"", self.version);
        Some(info)
    }
}

#[derive(Debug, Clone, Copy)]
struct Held {
    id: LeaseId,
    duration: Duration,
    until: Instant,
}

impl MemoryLeaseStore {
    /// A free lease named `name` (used in logs and metrics).
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        MemoryLeaseStore {
            name: name.into().into(),
            state: Arc::default(),
            member: false,
            born: (SystemTime::now(), Instant::now()),
            paced: None,
        }
    }

    /// The store's clock, which [`inspect`](LeaseStore::inspect) reports as
    /// [`LeaseInfo::storage_time`]: the host's clock when the store was
    /// made, plus the Tokio time elapsed since. With paused Tokio time it
    /// moves only as the test advances time, and a host clock stepped
    /// later does not move it; clones share it.
    #[must_use]
    pub fn storage_time(&self) -> SystemTime {
        let (wall, at) = self.born;
        wall + Instant::now().saturating_duration_since(at)
    }

    /// The store with its clock reading `at` now, and moving on with
    /// Tokio's time from there: for tests of a given date, of hosts whose
    /// own clocks are off, or that run the same way every time (a
    /// schedule's slots fall where `at` puts them, not where the host's
    /// clock happens to be).
    #[must_use = "the store is returned by value"]
    pub fn with_clock(mut self, at: SystemTime) -> Self {
        self.born = (at, Instant::now());
        self
    }

    /// Stamps a new term (rule 4), with what it advertises (rule 10).
    fn stamp_term(
        &self,
        lease: LeaseId,
        holder: &str,
        advertised: Option<String>,
        floor: u64,
    ) -> impl Future<Output = Result<u64>> + Send {
        let holder = holder.to_owned();
        let member = self.member;
        self.call("stamp", move |state, now| match state.lease {
            Some(held) if held.id == lease && held.until > now => {
                let epoch = state
                    .epoch
                    .checked_add(1)
                    .ok_or_else(|| Error::InvalidEpoch {
                        found: state.epoch.to_string(),
                    })?
                    .max(floor);
                state.epoch = epoch;
                state.holder = Some(holder);
                state.advertised = advertised;
                state.acquired_at = time::OffsetDateTime::now_utc()
                    .format(&time::format_description::well_known::Rfc3339)
                    .ok();
                state.member |= member;
                state.written();
                Ok(epoch)
            }
            _ => Err(lost("stamp")),
        })
    }

    /// Breaks the lease, as an operator would: the holder's next renewal
    /// finds it lost, and anyone may acquire it at once.
    pub fn break_lease(&self) {
        self.lock().lease = None;
    }

    /// While `true`, every call fails with a transient
    /// [`Error::Transport`], as when storage cannot be reached. The lease
    /// still expires on time.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.lock().unavailable = unavailable;
    }

    /// Loses the lease blob, as storage does when the blob is deleted, a
    /// lifecycle rule removes it, or an emulator restarts empty: the lease,
    /// the last term's holder and epoch, and the state are gone, and the
    /// next acquire creates the blob again.
    pub fn lose_blob(&self) {
        let mut state = self.lock();
        *state = State {
            unavailable: state.unavailable,
            ..State::default()
        };
    }

    /// The epoch of the last term (0 before the first).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// The holder of the last term.
    #[must_use]
    pub fn holder(&self) -> Option<String> {
        self.lock().holder.clone()
    }

    /// Whether a lease is held now (granted and not expired).
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.lock()
            .lease
            .is_some_and(|held| held.until > Instant::now())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `action` on the state, unless storage is "unavailable": when
    /// called (before the future is polled, so a call that is made takes
    /// effect), or, when paced, once the request has a slot, answered the
    /// latency later.
    fn call<T: Send>(
        &self,
        operation: &'static str,
        action: impl FnOnce(&mut State, Instant) -> Result<T> + Send,
    ) -> impl Future<Output = Result<T>> + Send {
        let state = Arc::clone(&self.state);
        let kind = match operation {
            _ if self.member => Kind::Member,
            "renew" | "release" | "change" => Kind::Keeps,
            _ => Kind::Other,
        };
        let (paced, mut action) = match self.paced.clone() {
            Some(paced) => (Some((paced, kind)), Some(action)),
            None => (None, Some(action)),
        };
        let now = match &paced {
            None => action.take().map(|action| apply(&state, operation, action)),
            Some(_) => None,
        };
        async move {
            let (Some((paced, kind)), Some(action)) = (paced, action) else {
                return now.unwrap_or_else(|| unreachable!("applied when called"));
            };
            let slot = paced.in_flight.enter(kind).await;
            let result = apply(&state, operation, action);
            let latency = *paced.latency.lock().unwrap_or_else(PoisonError::into_inner);
            tokio::time::sleep(latency).await;
            drop(slot);
            result
        }
    }
}

/// Runs `action` on `state` now, unless storage is "unavailable".
fn apply<T>(
    state: &Mutex<State>,
    operation: &'static str,
    action: impl FnOnce(&mut State, Instant) -> Result<T>,
) -> Result<T> {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    if state.unavailable {
        Err(Error::transport(operation, "the store is unavailable"))
    } else {
        action(&mut state, Instant::now())
    }
}

fn lost(operation: &str) -> Error {
    Error::LeaseLost(format!("{operation}: the lease is not held under this id"))
}

impl LeaseStore for MemoryLeaseStore {
    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        let seconds = lease_seconds(duration);
        let member = self.member;
        self.call("acquire", move |state, now| {
            seconds?;
            if !state.created {
                // Like Azure: the member lease creates its blob marked.
                state.member = member;
                state.written();
            }
            state.created = true;
            match state.lease {
                Some(held) if held.id != proposed && held.until > now => Ok(Acquire::Held),
                _ => {
                    state.lease = Some(Held {
                        id: proposed,
                        duration,
                        until: now + duration,
                    });
                    Ok(Acquire::Acquired)
                }
            }
        })
    }

    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        // Like Azure: an expired lease renews under its own id as long as
        // nobody else acquired it meanwhile.
        let paced = self.paced.clone();
        self.call("renew", move |state, now| match &mut state.lease {
            Some(held) if held.id == lease => {
                if let Some(paced) = paced.filter(|_| held.until <= now) {
                    paced
                        .late_renewals
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                held.until = now + held.duration;
                Ok(())
            }
            _ => Err(lost("renew")),
        })
    }

    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        self.call("release", move |state, _| match state.lease {
            Some(held) if held.id == lease => {
                state.lease = None;
                Ok(())
            }
            _ => Err(lost("release")),
        })
    }

    fn stamp(
        &self,
        lease: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> impl Future<Output = Result<u64>> + Send {
        // Checked before the call: the memory store's calls take effect
        // when made, not when awaited.
        let advertised = options.advertised();
        let stamp = advertised.map_or(Ok(()), check_advertised).map(|()| {
            self.stamp_term(
                lease,
                holder,
                advertised.map(str::to_owned),
                options.floor(),
            )
        });
        async move { stamp?.await }
    }

    fn supports_advertised(&self) -> bool {
        true
    }

    fn change(&self, from: LeaseId, to: LeaseId) -> impl Future<Output = Result<()>> + Send {
        // Like Azure: only a lease that has not expired can change hands.
        self.call("change", move |state, now| match &mut state.lease {
            Some(held) if held.until > now && (held.id == from || held.id == to) => {
                held.id = to;
                Ok(())
            }
            _ => Err(lost("change")),
        })
    }

    fn supports_candidates(&self) -> bool {
        true
    }

    fn advertise(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        let candidate = candidate.clone();
        let seconds = lease_seconds(duration);
        self.call("advertise", move |state, now| {
            seconds?;
            match state.candidates.get(&candidate.holder) {
                Some(r) if r.lease != record && r.until > now => Ok(Acquire::Held),
                _ => {
                    let holder = candidate.holder.clone();
                    let until = now + duration;
                    let record = Record {
                        lease: record,
                        duration,
                        until,
                        candidate,
                    };
                    state.candidates.insert(holder, record);
                    Ok(Acquire::Acquired)
                }
            }
        })
    }

    fn keep_advertising(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        let holder = holder.to_owned();
        self.call("keep advertising", move |state, now| {
            match state.candidates.get_mut(&holder) {
                // Like a lease: an expired record renews under its own id.
                Some(r) if r.lease == record => {
                    r.until = now + r.duration;
                    Ok(())
                }
                _ => Err(lost("keep advertising")),
            }
        })
    }

    fn withdraw(&self, record: LeaseId, holder: &str) -> impl Future<Output = Result<()>> + Send {
        let holder = holder.to_owned();
        self.call("withdraw", move |state, _| {
            match state.candidates.get(&holder) {
                Some(r) if r.lease == record => {
                    state.candidates.remove(&holder);
                    Ok(())
                }
                _ => Err(lost("withdraw")),
            }
        })
    }

    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>>> + Send {
        self.call("list candidates", |state, now| {
            Ok(state
                .candidates
                .values()
                .filter(|r| r.until > now)
                .map(|r| r.candidate.clone())
                .collect())
        })
    }

    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>>> + Send {
        let storage_time = self.storage_time();
        self.call("inspect", move |state, now| {
            Ok(state.info(now).map(|mut info| {
                info.storage_time = Some(storage_time);
                info
            }))
        })
    }

    fn name(&self) -> String {
        self.name.to_string()
    }

    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>>> + Send {
        self.call("read state", |state, _| Ok(state.content.clone()))
    }

    fn write_state(
        &self,
        lease: LeaseId,
        content: &[u8],
    ) -> impl Future<Output = Result<()>> + Send {
        let checked = check_state_len(content).map(|()| content.to_vec());
        // Like Azure: a write under an expired lease is refused even when
        // nobody has acquired it since (412 `LeaseLost`).
        self.call("write state", move |state, now| match state.lease {
            Some(held) if held.id == lease && held.until > now => {
                state.content = checked?;
                state.written();
                Ok(())
            }
            _ => Err(Error::StateWriteRefused(
                "write state: the lease is not held under this id".to_owned(),
            )),
        })
    }
}

/// Many [`MemoryLeaseStore`]s by name, listed together: the in-memory
/// [`LeaseSetStore`]. Clones share the leases.
///
/// Stale members are collected as on Azure (see [`Collection`]): a member
/// lease seen unleased for longer than the bound on the collector's clock
/// is deleted, unless it is leased when the delete comes (memory leases
/// have no `ETag`, so a member that was written but not leased in between
/// may go; members are never written unleased). As on Azure, only a lease
/// of member shape (`members/<holder>`) that its set's member lease marked
/// is collected: one used through [`get`](Self::get), as another client's
/// lease of the same name, is not marked.
#[derive(Clone, Debug)]
pub struct MemoryLeaseSetStore {
    leases: Arc<Mutex<BTreeMap<String, MemoryLeaseStore>>>,
    collector: Arc<Collector>,
    /// The pace of its leases' requests, shared by all of them.
    paced: Option<Arc<Paced>>,
    /// Its leases' clock (see [`with_clock`](Self::with_clock)).
    born: Option<(SystemTime, Instant)>,
}

impl Default for MemoryLeaseSetStore {
    fn default() -> Self {
        MemoryLeaseSetStore {
            leases: Arc::default(),
            collector: Arc::new(Collector::new(Collection::default())),
            paced: None,
            born: None,
        }
    }
}

impl MemoryLeaseSetStore {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        MemoryLeaseSetStore::default()
    }

    /// The same set with its leases' clock reading `at` now, and moving on
    /// with Tokio's time from there (see [`MemoryLeaseStore::with_clock`]);
    /// for the leases it makes from now on. Without it, each lease's clock
    /// starts at the host's clock when the lease is made.
    #[must_use = "the store is returned by value"]
    pub fn with_clock(mut self, at: SystemTime) -> Self {
        self.born = Some((at, Instant::now()));
        self
    }

    /// The same set with another collection of stale members (default
    /// [`Collection::default`]).
    #[must_use = "the store is returned by value"]
    pub fn with_collection(mut self, collection: Collection) -> Self {
        self.collector = Arc::new(Collector::new(collection));
        self
    }

    /// The same set behind a slow storage's client: every request of its
    /// leases (through [`lease`](LeaseSetStore::lease)) takes one of
    /// `slots` shared slots (a quarter of them, at least one, for requests
    /// that neither keep nor end a held lease; the member leases' slots
    /// apart, as on Azure's client), and is answered `latency` after it
    /// took its slot. Listings are not paced.
    #[cfg(test)]
    #[must_use = "the store is returned by value"]
    pub(crate) fn with_pace(mut self, latency: Duration, slots: usize) -> Self {
        self.paced = Some(Arc::new(Paced {
            latency: Mutex::new(latency),
            in_flight: InFlight::with_limits(slots, (slots / 4).max(1)),
            late_renewals: std::sync::atomic::AtomicUsize::new(0),
        }));
        self
    }

    /// The pace set by [`with_pace`](Self::with_pace).
    #[cfg(test)]
    pub(crate) fn pace(&self) -> Option<&Paced> {
        self.paced.as_deref()
    }

    /// Deletes the lease `name` unless it is leased now: its blob is lost
    /// (a clone still held somewhere finds it gone, as on Azure), and the
    /// entry itself goes once nobody else holds it.
    fn delete_unleased(&self, name: &str) -> bool {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(lease) = leases.get(name) else {
            return false;
        };
        {
            let mut state = lease.lock();
            let info = state.info(Instant::now());
            if info.is_none_or(|i| matches!(i.state, LeaseState::Leased | LeaseState::Breaking)) {
                return false;
            }
            *state = State {
                unavailable: state.unavailable,
                ..State::default()
            };
        }
        if Arc::strong_count(&lease.state) == 1 {
            leases.remove(name);
        }
        true
    }

    /// The lease named `name`, to break it or make it unavailable in a test,
    /// or to use it as another client would (any name, and never marked as
    /// a member, unlike [`lease`](LeaseSetStore::lease)).
    #[must_use]
    pub fn get(&self, name: &str) -> MemoryLeaseStore {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_insert_with(|| {
                let mut lease = MemoryLeaseStore::new(name);
                if let Some(born) = self.born {
                    lease.born = born;
                }
                lease
            })
            .clone()
    }
}

impl LeaseSetStore for MemoryLeaseSetStore {
    type Lease = MemoryLeaseStore;

    fn lease(&self, name: &str) -> Result<MemoryLeaseStore> {
        let kind = names::set_lease(name)?;
        let mut lease = self.get(name);
        lease.member = kind == SetLease::Member;
        lease.paced.clone_from(&self.paced);
        Ok(lease)
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>>> + Send {
        // One call for the whole set, as on Azure: a lease made unavailable
        // fails its own calls, not the listing.
        let now = Instant::now();
        let listed = self
            .leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .filter_map(|(name, lease)| Some((name.clone(), lease.lock().info(now)?)))
            .collect();
        std::future::ready(Ok(listed))
    }

    fn collect(&self, listing: &[(String, LeaseInfo)]) -> impl Future<Output = usize> + Send {
        let due = self.collector.due(
            listing
                .iter()
                .filter(|(name, info)| collectable(name, info))
                .map(|(name, info)| (name.as_str(), info)),
            Instant::now(),
        );
        let mut deleted = 0;
        for (name, _) in due {
            self.collector.forget(&name);
            deleted += usize::from(self.delete_unleased(&name));
        }
        std::future::ready(deleted)
    }

    fn remove(&self, name: &str) -> impl Future<Output = bool> + Send {
        std::future::ready(self.delete_unleased(name))
    }
}
