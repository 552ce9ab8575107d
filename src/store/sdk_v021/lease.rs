//! One lease blob on the 0.21 SDK: acquire, renew, release, change, break,
//! stamp and inspect.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use azure_core_v021::prelude::{IfMatchCondition, LeaseBreakPeriod, ProposedLeaseId};
use azure_core_v021::request_options::Metadata;
use azure_storage_blobs::prelude::BlobClient;
use tracing::{debug, trace};

use crate::bounded::bounded;
use crate::error::{Error, Result};
use crate::options::{lease_seconds, DEFAULT_REQUEST_TIMEOUT};
use crate::store::blob_protocol::{
    next_epoch, write_term, CONTAINER_NOT_FOUND, MEMBER_KEY, MEMBER_VALUE,
};
use crate::store::collect::{Collection, Collector};
use crate::store::settings::BlobSettings;

use super::client::{
    container_client, http_status, is_not_found, lease_call_error, lease_info, map_error,
};
use crate::store::{check_advertised, Acquire, Candidate, LeaseId, LeaseInfo, LeaseStore};

impl LeaseId {
    pub(super) fn sdk_id(self) -> azure_core_v021::request_options::LeaseId {
        azure_core_v021::request_options::LeaseId::from(self.as_uuid())
    }
}

/// Acquires, renews, releases, breaks, changes and inspects the lease on one
/// blob. Every call is capped by the request timeout, and the SDK's own
/// retries are off: the caller (usually [`BlobDistributedMutex`](crate::BlobDistributedMutex))
/// decides when to retry, so that nothing runs past a leader's deadline.
#[derive(Clone)]
pub struct SdkV021LeaseManager {
    pub(super) settings: BlobSettings,
    pub(super) blob: BlobClient,
    pub(super) container: String,
    pub(super) blob_name: String,
    pub(super) request_timeout: Duration,
    /// The stale candidate records this manager's listings collect.
    pub(super) collector: Arc<Collector>,
    /// Whether this is a lease set's member lease, which marks its blob
    /// ([`MEMBER_KEY`]) when it creates it and at every stamp.
    pub(super) member: bool,
}

impl fmt::Debug for SdkV021LeaseManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SdkV021LeaseManager")
            .field("container", &self.container)
            .field("blob", &self.blob_name)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl SdkV021LeaseManager {
    /// A manager for the blob named in `settings`, with a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConnectionString`] when the SAS token cannot be parsed.
    pub fn new(settings: &BlobSettings) -> Result<Self> {
        Self::from_settings(settings.clone())
    }

    /// As [`SdkV021LeaseManager::new`], keeping the settings given.
    pub(crate) fn from_settings(settings: BlobSettings) -> Result<Self> {
        let blob = container_client(&settings)?.blob_client(settings.blob());
        Ok(Self::on(blob, settings))
    }

    /// A manager of `blob`, whose client (and its connection pool) may be
    /// shared with other managers of the same container.
    pub(super) fn on(blob: BlobClient, settings: BlobSettings) -> Self {
        SdkV021LeaseManager {
            blob,
            container: settings.container().to_owned(),
            blob_name: settings.blob().to_owned(),
            settings,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            collector: Arc::new(Collector::new(Collection::default())),
            member: false,
        }
    }

    /// The same manager as a lease set's member lease: it marks its blob
    /// ([`MEMBER_KEY`]) when it creates it and at every stamp.
    pub(super) fn marking_member(mut self) -> Self {
        self.member = true;
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

    /// Where the lease blob lives.
    #[must_use]
    pub fn settings(&self) -> &BlobSettings {
        &self.settings
    }

    /// The request timeout in force.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Acquires a lease of `duration` (15 to 60 whole seconds) with the proposed
    /// id. Creates the container and an empty blob when missing, never
    /// overwriting an existing blob. Acquiring again with the id that already
    /// holds the lease succeeds, so a retried attempt is idempotent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a duration out of range;
    /// [`Error::Authentication`], [`Error::Storage`], [`Error::Transport`] or
    /// [`Error::Timeout`] when storage cannot be asked or refuses.
    ///
    /// # Cancellation safety
    ///
    /// Dropping the future may leave the lease acquired on the server; acquire
    /// again with the same id to learn the outcome, or let it expire.
    pub async fn acquire(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire> {
        self.capped("acquire", self.acquire_uncapped(proposed, duration))
            .await
    }

    /// Renews the lease.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when storage says the lease is not held under
    /// this id (broken, released, taken by someone else), or when the id in
    /// the answer is not ours; other kinds when storage cannot be asked.
    ///
    /// # Cancellation safety
    ///
    /// Safe: renewing is idempotent.
    pub async fn renew(&self, lease: LeaseId) -> Result<()> {
        self.capped("renew", self.renew_uncapped(lease)).await
    }

    /// Releases the lease so that another instance can acquire at once.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease is not held under this id;
    /// other kinds when storage cannot be asked.
    ///
    /// # Cancellation safety
    ///
    /// Safe: releasing is idempotent; a dropped call leaves the lease to expire.
    pub async fn release(&self, lease: LeaseId) -> Result<()> {
        self.capped("release", self.release_uncapped(lease)).await
    }

    /// Breaks the current lease, whoever holds it. With `period` `None` the
    /// lease ends at once (a break period of 0); `Some(p)` lets it run for at
    /// most `p` more (0 to 60 s). Returns how long until the lease can be
    /// acquired.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a period over 60 s; [`Error::Storage`]
    /// with status 409 when there is no lease to break; other kinds when
    /// storage cannot be asked.
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: the break may or may not have happened.
    pub async fn break_lease(&self, period: Option<Duration>) -> Result<Duration> {
        if let Some(p) = period {
            if p > Duration::from_secs(60) {
                return Err(Error::invalid("period", "must be at most 60 s"));
            }
        }
        self.capped("break", async {
            let mut call = self.blob.break_lease();
            call = call.lease_break_period(LeaseBreakPeriod::from(period.unwrap_or_default()));
            let response = call.await.map_err(|e| match http_status(&e) {
                // No lease to break is not a lost lease of ours.
                Some((status @ 409, code)) => Error::Storage {
                    status,
                    code,
                    message: "break: there is no lease to break".to_owned(),
                },
                _ => map_error("break", &e),
            })?;
            Ok(Duration::from_secs(response.lease_time.into()))
        })
        .await
    }

    /// Changes the id of the lease held under `from` to `to`.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease is not held under `from`; other
    /// kinds when storage cannot be asked.
    ///
    /// # Cancellation safety
    ///
    /// Retry with the same ids to learn the outcome: changing to the id that
    /// already holds the lease succeeds.
    pub async fn change(&self, from: LeaseId, to: LeaseId) -> Result<()> {
        self.capped("change", self.change_uncapped(from, to)).await
    }

    /// Creates the container and an empty lease blob if they do not exist
    /// (acquire does this by itself on a 404). An existing blob is never
    /// overwritten: it is written with `If-None-Match: *`.
    ///
    /// # Errors
    ///
    /// The kinds of [`Error`] for a failed storage call.
    ///
    /// # Cancellation safety
    ///
    /// Safe: it is idempotent.
    pub async fn create_if_missing(&self) -> Result<()> {
        self.capped("create", self.create_blob()).await
    }

    /// The lease state and the holder metadata, or `None` when the blob (or
    /// its container) does not exist.
    ///
    /// # Errors
    ///
    /// The kinds of [`Error`] for a failed storage call.
    ///
    /// # Cancellation safety
    ///
    /// Safe: it only reads.
    pub async fn inspect(&self) -> Result<Option<LeaseInfo>> {
        self.capped("inspect", self.inspect_uncapped()).await
    }

    /// Writes `holder`, `epoch` (the previous epoch + 1) and `acquired_at` to
    /// the blob's metadata under the lease, keeping any other metadata, and
    /// returns the new epoch.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease is not held under this id;
    /// [`Error::Storage`] with status 412 when the blob changed between read
    /// and write; other kinds when storage cannot be asked.
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: the epoch may or may not have been written.
    pub async fn stamp(&self, lease: LeaseId, holder: &str) -> Result<u64> {
        self.capped("stamp", self.stamp_uncapped(lease, holder, None, 0))
            .await
    }

    /// The leader state: the blob's content (see [`LeaseStore::read_state`]).
    /// Empty when the blob does not exist or is empty. Needs no lease.
    ///
    /// # Errors
    ///
    /// The kinds of [`Error`] for a failed storage call.
    ///
    /// # Cancellation safety
    ///
    /// Safe: it only reads.
    pub async fn read_state(&self) -> Result<Vec<u8>> {
        self.capped("read state", self.read_state_uncapped()).await
    }

    /// Replaces the blob's content with `state` under the lease held by
    /// `lease` (Put Blob with the lease id), sending the blob's metadata
    /// along so that the term's `holder`, `epoch` and `acquired_at` stay
    /// (see [`LeaseStore::write_state`]).
    ///
    /// # Errors
    ///
    /// [`Error::StateWriteRefused`] when storage refuses the lease id (the
    /// lease expired, was released, broken or passed on): nothing was
    /// written. [`Error::InvalidOption`] for state longer than
    /// [`MAX_STATE_LEN`](crate::MAX_STATE_LEN). Other kinds when storage
    /// cannot be asked.
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: a dropped write may or may not have landed
    /// (and lands only under the lease).
    pub async fn write_state(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
        self.capped("write state", self.write_state_uncapped(lease, state))
            .await
    }

    async fn capped<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        bounded(operation, self.request_timeout, call).await
    }

    pub(super) async fn acquire_uncapped(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> Result<Acquire> {
        let seconds = lease_seconds(duration)?;
        let mut created = false;
        loop {
            let attempt = self
                .blob
                .acquire_lease(azure_core_v021::prelude::LeaseDuration::Seconds(seconds))
                .proposed_lease_id(ProposedLeaseId::from(proposed.sdk_id()))
                .await;
            match attempt {
                Ok(response) if response.lease_id == proposed.sdk_id() => {
                    return Ok(Acquire::Acquired)
                }
                Ok(_) => {
                    return Err(Error::UnexpectedResponse {
                        operation: "acquire",
                        message: "answered with another lease id than proposed".into(),
                    })
                }
                Err(e) => match http_status(&e) {
                    Some((409, code))
                        if matches!(
                            code.as_deref(),
                            Some("LeaseAlreadyPresent" | "LeaseIsBreakingAndCannotBeAcquired")
                        ) =>
                    {
                        return Ok(Acquire::Held)
                    }
                    Some((404, _)) if !created => {
                        self.create_blob().await?;
                        created = true;
                    }
                    _ => return Err(map_error("acquire", &e)),
                },
            }
        }
    }

    pub(super) async fn inspect_uncapped(&self) -> Result<Option<LeaseInfo>> {
        {
            let response = match self.blob.get_properties().await {
                Ok(response) => response,
                Err(e) if is_not_found(&e) => return Ok(None),
                Err(e) => return Err(map_error("inspect", &e)),
            };
            Ok(Some(lease_info(
                &response.blob.properties,
                response.blob.metadata.as_ref(),
            )))
        }
    }

    /// Creates an empty blob if it does not exist, and the container first
    /// only when storage says the container is missing (`ContainerNotFound`):
    /// a container that exists is never created, so that a SAS or a role
    /// scoped to the container is enough. Never overwrites: the blob is
    /// written with `If-None-Match: *`.
    async fn create_blob(&self) -> Result<()> {
        let put = || {
            let put = self
                .blob
                .put_block_blob(Vec::<u8>::new())
                .if_match(IfMatchCondition::NotMatch("*".to_owned()));
            if self.member {
                let mut metadata = Metadata::new();
                metadata.insert(MEMBER_KEY, MEMBER_VALUE);
                put.metadata(metadata)
            } else {
                put
            }
        };
        let mut created_container = false;
        loop {
            let Err(e) = put().await else {
                debug!(blob = %self.blob_name, "created lease blob");
                return Ok(());
            };
            match http_status(&e) {
                // Already there (409 BlobAlreadyExists, or 412 when it is
                // leased or the condition failed): leave it exactly as it is.
                Some((409 | 412, _)) => {
                    trace!(blob = %self.blob_name, "lease blob already exists");
                    return Ok(());
                }
                Some((404, Some(code))) if code == CONTAINER_NOT_FOUND && !created_container => {
                    self.create_container().await?;
                    created_container = true;
                }
                _ => return Err(map_error("create blob", &e)),
            }
        }
    }

    /// Creates the container, which storage said is missing; one created in
    /// between by another instance is fine.
    async fn create_container(&self) -> Result<()> {
        match self.blob.container_client().create().await {
            Ok(()) => debug!(container = %self.container, "created container"),
            Err(e) => match http_status(&e) {
                Some((409, _)) => {}
                _ => return Err(map_error("create container", &e)),
            },
        }
        Ok(())
    }

    pub(super) async fn renew_uncapped(&self, lease: LeaseId) -> Result<()> {
        let response = self
            .blob
            .blob_lease_client(lease.sdk_id())
            .renew()
            .await
            .map_err(|e| lease_call_error("renew", &e))?;
        // Azurite renews an expired lease even under a wrong id and answers
        // with the old id: only our own id counts as renewed.
        if response.lease_id == lease.sdk_id() {
            Ok(())
        } else {
            Err(Error::LeaseLost(
                "renew answered with another lease id".into(),
            ))
        }
    }

    pub(super) async fn change_uncapped(&self, from: LeaseId, to: LeaseId) -> Result<()> {
        let response = self
            .blob
            .blob_lease_client(from.sdk_id())
            .change(ProposedLeaseId::from(to.sdk_id()))
            .await
            .map_err(|e| map_error("change", &e))?;
        if response.lease_id != to.sdk_id() {
            return Err(Error::LeaseLost(
                "change answered with another lease id".into(),
            ));
        }
        Ok(())
    }

    pub(super) async fn release_uncapped(&self, lease: LeaseId) -> Result<()> {
        self.blob
            .blob_lease_client(lease.sdk_id())
            .release()
            .await
            .map(drop)
            .map_err(|e| lease_call_error("release", &e))
    }

    pub(super) async fn stamp_uncapped(
        &self,
        lease: LeaseId,
        holder: &str,
        advertised: Option<&str>,
        floor: u64,
    ) -> Result<u64> {
        if let Some(value) = advertised {
            check_advertised(value)?;
        }
        let current = self
            .blob
            .get_properties()
            .lease_id(lease.sdk_id())
            .await
            .map_err(|e| map_error("read metadata", &e))?;
        let mut existing = current.blob.metadata.unwrap_or_default();
        let epoch = next_epoch(&existing)?.max(floor);
        write_term(&mut existing, holder, epoch, advertised, self.member);
        let mut metadata = Metadata::new();
        for (key, value) in existing {
            metadata.insert(key, value);
        }
        self.blob
            .set_metadata()
            .lease_id(lease.sdk_id())
            .if_match(IfMatchCondition::Match(
                current.blob.properties.etag.to_string(),
            ))
            .metadata(metadata)
            .await
            .map_err(|e| map_error("write metadata", &e))?;
        Ok(epoch)
    }
}

impl LeaseStore for SdkV021LeaseManager {
    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        self.acquire_uncapped(proposed, duration)
    }

    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        self.renew_uncapped(lease)
    }

    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        self.release_uncapped(lease)
    }

    fn stamp(&self, lease: LeaseId, holder: &str) -> impl Future<Output = Result<u64>> + Send {
        self.stamp_uncapped(lease, holder, None, 0)
    }

    fn stamp_at_least(
        &self,
        lease: LeaseId,
        holder: &str,
        floor: u64,
    ) -> impl Future<Output = Result<u64>> + Send {
        self.stamp_uncapped(lease, holder, None, floor)
    }

    fn stamp_advertised(
        &self,
        lease: LeaseId,
        holder: &str,
        advertised: &str,
        floor: u64,
    ) -> impl Future<Output = Result<u64>> + Send {
        self.stamp_uncapped(lease, holder, Some(advertised), floor)
    }

    fn supports_advertised(&self) -> bool {
        true
    }

    fn change(&self, from: LeaseId, to: LeaseId) -> impl Future<Output = Result<()>> + Send {
        self.change_uncapped(from, to)
    }

    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>>> + Send {
        self.inspect_uncapped()
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
        self.advertise_uncapped(record, candidate.clone(), duration)
    }

    fn keep_advertising(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        self.keep_advertising_uncapped(record, holder.to_owned())
    }

    fn withdraw(&self, record: LeaseId, holder: &str) -> impl Future<Output = Result<()>> + Send {
        self.withdraw_uncapped(record, holder.to_owned())
    }

    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>>> + Send {
        self.candidates_uncapped()
    }

    fn name(&self) -> String {
        format!("{}/{}", self.container, self.blob_name)
    }

    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>>> + Send {
        self.read_state_uncapped()
    }

    fn write_state(&self, lease: LeaseId, state: &[u8]) -> impl Future<Output = Result<()>> + Send {
        self.write_state_uncapped(lease, state)
    }
}
