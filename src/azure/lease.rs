//! One lease blob, for every SDK: the protocol of acquire, renew, release,
//! change, break, stamp and inspect over the blob calls, each call bounded
//! by the request timeout on every path.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, trace};

use crate::azure::backend::AnyCalls;
use crate::azure::calls::{BlobCalls, CallError, Metadata, Put};
use crate::azure::protocol::{
    clock_passed, first_epoch, next_epoch, write_term, NextEpoch, CONTAINER_NOT_FOUND, MEMBER_KEY,
    MEMBER_VALUE,
};
use crate::azure::settings::BlobSettings;
use crate::bounded::DEFAULT_REQUEST_TIMEOUT;
use crate::bounded::{bounded_since, within};
use crate::error::{Error, Result};
use crate::store::collect::{Collection, Collector};
use crate::store::lease_seconds;
use crate::store::stamp::NEW_RECORD_WAIT;
use crate::store::{
    check_advertised, Acquire, Candidate, LeaseId, LeaseInfo, LeaseStore, StampOptions,
};

/// How long a record made anew waits before it reads storage's clock
/// again: the second after the one it first read is over more than a
/// second later.
const CLOCK_FIRST: Duration = Duration::from_secs(1);
/// How often it reads again after that, until that second is over (six
/// reads at most on time, paid only when a record is made).
const CLOCK_POLL: Duration = Duration::from_millis(200);

/// Acquires, renews, releases, breaks, changes and inspects the lease on one
/// blob, through the backend its [`BlobSettings`] name
/// ([`Backend`](crate::azure::Backend)). Every call is bounded by the request
/// timeout, whichever way it is reached (this type's own methods or
/// [`LeaseStore`]), and the SDKs' own retries are off: the caller (usually
/// [`BlobDistributedMutex`](crate::BlobDistributedMutex)) decides when to
/// retry, so that nothing runs past a leader's deadline.
///
/// The same calls, the same records and the same answers on every backend.
#[derive(Clone)]
pub struct BlobLeaseManager {
    pub(super) settings: BlobSettings,
    pub(super) calls: AnyCalls,
    /// The blob's name in its container.
    pub(super) blob: Arc<str>,
    pub(super) request_timeout: Duration,
    /// The stale candidate records this manager's listings collect.
    pub(super) collector: Arc<Collector>,
    /// Whether this is a lease set's member lease, which marks its blob
    /// ([`MEMBER_KEY`]) when it creates it and at every stamp.
    pub(super) member: bool,
}

impl fmt::Debug for BlobLeaseManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobLeaseManager")
            .field("backend", &self.settings.backend())
            .field("container", &self.settings.container())
            .field("blob", &self.blob)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl BlobLeaseManager {
    /// A manager for the blob named in `settings`, on the settings'
    /// backend, with a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `backend` when the settings' backend
    /// is not built in (naming the feature to turn on);
    /// [`Error::InvalidConnectionString`] when the SAS token cannot be
    /// parsed.
    pub fn new(settings: &BlobSettings) -> Result<Self> {
        Self::from_settings(settings.clone())
    }

    /// As [`BlobLeaseManager::new`], keeping the settings given.
    pub(crate) fn from_settings(settings: BlobSettings) -> Result<Self> {
        let calls = AnyCalls::new(&settings)?;
        Ok(Self::on(calls, settings))
    }

    /// The manager of the settings' blob over `calls`, whose client (and
    /// connection pool) may be shared with other managers.
    pub(crate) fn on(calls: AnyCalls, settings: BlobSettings) -> Self {
        BlobLeaseManager {
            blob: settings.blob().into(),
            settings,
            calls,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            collector: Arc::new(Collector::new(Collection::default())),
            member: false,
        }
    }

    /// Whether this manager and `other` send through one client (one
    /// connection pool, one credential).
    #[cfg(test)]
    pub(crate) fn shares_client_with(&self, other: &BlobLeaseManager) -> bool {
        self.calls.same_client(&other.calls)
    }

    /// The same manager as a lease set's member lease: it marks its blob
    /// ([`MEMBER_KEY`]) when it creates it and at every stamp, and its
    /// requests take the client's slots kept for members, ahead of every
    /// partition's (see `store::in_flight`).
    pub(crate) fn marking_member(mut self) -> Self {
        self.member = true;
        self.calls = self.calls.for_member();
        self
    }

    /// The same manager with another collection of the stale candidate
    /// records that a leader with a priority finds when it lists the
    /// candidates (default [`Collection::default`]).
    #[must_use = "the manager is returned by value"]
    pub fn with_collection(mut self, collection: Collection) -> Self {
        self.collector = Arc::new(Collector::new(collection));
        self
    }

    /// The same manager with another cap on each call (default 3 s).
    #[must_use = "the manager is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Where the lease blob lives, and on which backend.
    #[must_use]
    pub fn settings(&self) -> &BlobSettings {
        &self.settings
    }

    /// The request timeout in force.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Breaks whatever lease the blob has: at once with `None` or a zero
    /// period, else after `period` (at most 60 s). Returns the time until
    /// the lease is broken. For operators: a running leader finds out at its
    /// next renewal and stops its task.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a period over 60 s; [`Error::Storage`]
    /// with status 409 when there is no lease to break; otherwise as
    /// [`LeaseStore::acquire`](crate::store::LeaseStore::acquire).
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: the break may or may not have happened.
    pub async fn break_lease(&self, period: Option<Duration>) -> Result<Duration> {
        let seconds = match period {
            Some(p) if p > Duration::from_secs(60) => {
                return Err(Error::invalid("period", "must be at most 60 s"))
            }
            Some(p) if p.subsec_nanos() != 0 => {
                return Err(Error::invalid(
                    "period",
                    format!("storage takes whole seconds (0 to 60): got {p:?}"),
                ))
            }
            Some(p) => u8::try_from(p.as_secs()).unwrap_or(60),
            None => 0,
        };
        Box::pin(self.bounded("break", async {
            match self.calls.break_lease(&self.blob, seconds).await {
                Ok(left) => Ok(Duration::from_secs(left)),
                // No lease to break is not a lost lease of ours.
                Err(CallError::Status {
                    status: 409, code, ..
                }) => Err(Error::Storage {
                    status: 409,
                    code,
                    message: "break: there is no lease to break".to_owned(),
                }),
                Err(e) => Err(e.into_error("break")),
            }
        }))
        .await
    }

    /// The lease as an operator asks after it (`blob-mutex status` and
    /// `break`): as [`inspect`](crate::store::LeaseStore::inspect), except
    /// that a container that does not exist is an error that says so
    /// ([`Error::Storage`] with the code `ContainerNotFound`), not a free
    /// lease: a typo in a container's name must not read as "nobody holds
    /// it". `None` when the container exists and the blob does not.
    ///
    /// # Errors
    ///
    /// As [`inspect`](crate::store::LeaseStore::inspect), and the missing
    /// container.
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: it only reads.
    pub async fn inspect_existing(&self) -> Result<Option<LeaseInfo>> {
        Box::pin(self.bounded("inspect", async {
            match self.calls.properties(&self.blob, None).await {
                Ok(properties) => Ok(Some(properties.info())),
                Err(e) if e.is(404, CONTAINER_NOT_FOUND) => Err(e.into_error("inspect")),
                Err(e) if e.status() == Some(404) => Ok(None),
                Err(e) => Err(e.into_error("inspect")),
            }
        }))
        .await
    }

    /// Creates the container and the empty lease blob when missing, never
    /// overwriting either.
    ///
    /// # Errors
    ///
    /// As [`LeaseStore::acquire`](crate::store::LeaseStore::acquire).
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: call again.
    pub async fn create_if_missing(&self) -> Result<()> {
        Box::pin(self.bounded("create", self.create_blob(&self.blob, self.member))).await
    }

    /// The one stamp: the term's record written under `lease`, with the
    /// epoch `max(stored + 1, floor)` and what the holder advertises;
    /// within the request timeout, and [`NEW_RECORD_WAIT`] more for a
    /// record made anew, which waits for storage's clock
    /// ([`Self::past_the_second`]).
    pub(crate) async fn stamp_term(
        &self,
        lease: LeaseId,
        holder: &str,
        advertised: Option<&str>,
        floor: u64,
    ) -> Result<u64> {
        if let Some(value) = advertised {
            check_advertised(value)?;
        }
        let start = Instant::now();
        let (metadata, etag, next) = bounded_since("stamp", start, self.request_timeout, async {
            let (metadata, etag, storage_now) = self.metadata_under(lease, "read metadata").await?;
            let next = next_epoch(&metadata, storage_now, floor)?;
            Ok((metadata, etag, next))
        })
        .await?;
        let limit = match next {
            NextEpoch::Is(_) => self.request_timeout,
            NextEpoch::Anew(_) => self.request_timeout.saturating_add(NEW_RECORD_WAIT),
        };
        bounded_since("stamp", start, limit, async move {
            let (mut metadata, etag, epoch) = match next {
                NextEpoch::Is(epoch) => (metadata, etag, epoch),
                NextEpoch::Anew(first) => self.past_the_second(lease, first, floor).await?,
            };
            write_term(&mut metadata, holder, epoch, advertised, self.member);
            self.calls
                .set_metadata(&self.blob, &metadata, lease, Some(&etag))
                .await
                .map_err(|e| e.into_error("write metadata"))?;
            Ok(epoch)
        })
        .await
    }

    /// A record made anew, first read at storage's clock `first` (the
    /// `Date` of the read that found it without an epoch): reads it again
    /// until storage's clock has passed the second its first epoch,
    /// [`first_epoch`] of `first`, stands for ([`clock_passed`]), and
    /// returns it as then read with that epoch. A record made after this
    /// one, even after this one was lost, reads a `Date` at or past that
    /// second, and so starts above every epoch of this one (see the
    /// guarantees chapter). Unbounded here: the stamp bounds it.
    async fn past_the_second(
        &self,
        lease: LeaseId,
        first: time::OffsetDateTime,
        floor: u64,
    ) -> Result<(Metadata, String, u64)> {
        let mut wait = CLOCK_FIRST;
        loop {
            tokio::time::sleep(wait).await;
            wait = CLOCK_POLL;
            let (metadata, etag, now) = self.metadata_under(lease, "read metadata").await?;
            match next_epoch(&metadata, now, floor)? {
                // Stamped meanwhile (under this lease): counts up from it.
                NextEpoch::Is(epoch) => return Ok((metadata, etag, epoch)),
                NextEpoch::Anew(now) if clock_passed(first, now) => {
                    debug!(blob = %self.blob, "a lease record made anew takes its first epoch");
                    return Ok((metadata, etag, first_epoch(first)));
                }
                NextEpoch::Anew(_) => {}
            }
        }
    }

    /// Runs `call` within the request timeout: the limit of every call,
    /// and its one timer unless the caller cuts the call sooner
    /// ([`within`]). Not an `async fn`: the future is [`within`]'s own.
    pub(super) fn bounded<T>(
        &self,
        operation: &'static str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> impl std::future::Future<Output = Result<T>> {
        within(operation, self.request_timeout, call)
    }

    /// The blob's metadata and `ETag`, read under `lease`, and storage's
    /// clock when it answered.
    pub(super) async fn metadata_under(
        &self,
        lease: LeaseId,
        operation: &'static str,
    ) -> Result<(Metadata, String, Option<time::OffsetDateTime>)> {
        let properties = self
            .calls
            .properties(&self.blob, Some(lease))
            .await
            .map_err(|e| e.into_error(operation))?;
        let etag = properties.etag.ok_or_else(|| Error::UnexpectedResponse {
            operation,
            message: "no ETag in the answer".into(),
        })?;
        Ok((properties.metadata, etag, properties.date))
    }

    /// Acquires `blob` (this lease's, or a candidate record), creating it
    /// (and the container) on a 404.
    pub(super) async fn acquire_on(
        &self,
        blob: &str,
        proposed: LeaseId,
        seconds: u8,
    ) -> Result<Acquire> {
        let member = self.member && blob == &*self.blob;
        let mut created = false;
        loop {
            match self.calls.acquire_lease(blob, proposed, seconds).await {
                Ok(answered) if answered == Some(proposed) => return Ok(Acquire::Acquired),
                Ok(_) => {
                    return Err(Error::UnexpectedResponse {
                        operation: "acquire",
                        message: "answered with another lease id than proposed".into(),
                    })
                }
                Err(e)
                    if e.is(409, "LeaseAlreadyPresent")
                        || e.is(409, "LeaseIsBreakingAndCannotBeAcquired") =>
                {
                    return Ok(Acquire::Held)
                }
                Err(e) if e.status() == Some(404) && !created => {
                    self.create_blob(blob, member).await?;
                    created = true;
                }
                Err(e) => return Err(e.into_error("acquire")),
            }
        }
    }

    /// Renews the lease of `blob` under `lease`.
    pub(super) async fn renew_on(&self, blob: &str, lease: LeaseId) -> Result<()> {
        let answered = self
            .calls
            .renew_lease(blob, lease)
            .await
            .map_err(|e| e.on_held_lease("renew"))?;
        // Azurite renews an expired lease even under a wrong id and answers
        // with the old id: only our own id counts as renewed.
        if answered == Some(lease) {
            Ok(())
        } else {
            Err(Error::LeaseLost(
                "renew answered with another lease id".into(),
            ))
        }
    }

    /// Releases the lease of `blob` held under `lease`.
    pub(super) async fn release_on(&self, blob: &str, lease: LeaseId) -> Result<()> {
        self.calls
            .release_lease(blob, lease)
            .await
            .map_err(|e| e.on_held_lease("release"))
    }

    /// Creates `blob` empty if it does not exist (`If-None-Match: *`), and
    /// the container first only when storage says it is missing
    /// (`ContainerNotFound`): a container that exists is never created, so
    /// that a SAS or a role scoped to the container is enough.
    async fn create_blob(&self, blob: &str, member: bool) -> Result<()> {
        let marker = Metadata::from([(MEMBER_KEY.to_owned(), MEMBER_VALUE.to_owned())]);
        let mut created_container = false;
        loop {
            let put = Put {
                metadata: member.then_some(&marker),
                if_none_match_any: true,
                ..Put::default()
            };
            let Err(e) = self.calls.put(blob, put).await else {
                debug!(blob, "created lease blob");
                return Ok(());
            };
            match e.status() {
                // Already there (409 BlobAlreadyExists, or 412 when it is
                // leased or the condition failed): leave it as it is.
                Some(409 | 412) => {
                    trace!(blob, "lease blob already exists");
                    return Ok(());
                }
                Some(404) if e.code() == Some(CONTAINER_NOT_FOUND) && !created_container => {
                    self.create_container().await?;
                    created_container = true;
                }
                _ => return Err(e.into_error("create blob")),
            }
        }
    }

    /// Creates the container, which storage said is missing; one created in
    /// between by another instance is fine.
    async fn create_container(&self) -> Result<()> {
        match self.calls.create_container().await {
            Ok(()) => debug!(container = %self.calls.container(), "created container"),
            Err(e) if e.status() == Some(409) => {}
            Err(e) => return Err(e.into_error("create container")),
        }
        Ok(())
    }
}

/// The contract of [`LeaseStore`] on one blob, and beside it:
/// - every call is cut at the manager's
///   [`request_timeout`](BlobLeaseManager::request_timeout);
/// - `acquire` creates the container and an empty blob when missing,
///   never overwriting one;
/// - a `stamp` that makes the record anew (a new blob, or one whose record
///   was lost) waits until storage's clock has passed the second after the
///   one it first read, so that no two records start at the same epoch: one
///   to two seconds, 3 s more than the request timeout at most;
/// - `read_state` refuses a blob longer than
///   [`MAX_STATE_LEN`](crate::store::MAX_STATE_LEN) without reading it
///   whole; `write_state` is Put Blob under the lease with `If-Match`,
///   carrying the blob's metadata so that the term's record stays.
// Each call is boxed, the SDK's request in it (kilobytes for the official
// SDK): the engine awaits it inside its own futures, which stay small, and
// a request costs one allocation.
impl LeaseStore for BlobLeaseManager {
    async fn acquire(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire> {
        let seconds = lease_seconds(duration)?;
        Box::pin(self.bounded("acquire", self.acquire_on(&self.blob, proposed, seconds))).await
    }

    async fn renew(&self, lease: LeaseId) -> Result<()> {
        Box::pin(self.bounded("renew", self.renew_on(&self.blob, lease))).await
    }

    async fn release(&self, lease: LeaseId) -> Result<()> {
        Box::pin(self.bounded("release", self.release_on(&self.blob, lease))).await
    }

    async fn stamp(&self, lease: LeaseId, holder: &str, options: &StampOptions) -> Result<u64> {
        Box::pin(self.stamp_term(lease, holder, options.advertised(), options.floor())).await
    }

    fn supports_advertised(&self) -> bool {
        true
    }

    async fn change(&self, from: LeaseId, to: LeaseId) -> Result<()> {
        Box::pin(async move {
            self.bounded("change", async {
                let answered = self
                    .calls
                    .change_lease(&self.blob, from, to)
                    .await
                    .map_err(|e| e.into_error("change"))?;
                if answered == Some(to) {
                    Ok(())
                } else {
                    Err(Error::LeaseLost(
                        "change answered with another lease id".into(),
                    ))
                }
            })
            .await
        })
        .await
    }

    async fn inspect(&self) -> Result<Option<LeaseInfo>> {
        Box::pin(self.bounded("inspect", async {
            match self.calls.properties(&self.blob, None).await {
                Ok(properties) => Ok(Some(properties.info())),
                // No blob yet, or no container yet (`run` makes both): a
                // free lease. A 404 that is not storage's is an error (see
                // `CallError::NotStorage`).
                Err(e) if e.status() == Some(404) => Ok(None),
                Err(e) => Err(e.into_error("inspect")),
            }
        }))
        .await
    }

    fn name(&self) -> String {
        format!("{}/{}", self.settings.container(), self.blob)
    }

    async fn read_state(&self) -> Result<Vec<u8>> {
        Box::pin(BlobLeaseManager::read_state(self)).await
    }

    async fn write_state(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
        Box::pin(BlobLeaseManager::write_state(self, lease, state)).await
    }

    fn supports_candidates(&self) -> bool {
        true
    }

    async fn advertise(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> Result<Acquire> {
        Box::pin(self.advertise_record(record, candidate, duration)).await
    }

    async fn keep_advertising(&self, record: LeaseId, holder: &str) -> Result<()> {
        Box::pin(self.keep_record(record, holder)).await
    }

    async fn withdraw(&self, record: LeaseId, holder: &str) -> Result<()> {
        Box::pin(self.withdraw_record(record, holder)).await
    }

    async fn candidates(&self) -> Result<Vec<Candidate>> {
        Box::pin(self.list_candidates()).await
    }
}
