//! One lease blob through the official SDK: acquire, renew, release,
//! change, break, stamp, inspect, and the leader state.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use azure_core::http::{Etag, RequestContent};
use azure_storage_blob::models::{
    BlobClientAcquireLeaseOptions, BlobClientAcquireLeaseResultHeaders,
    BlobClientBreakLeaseOptions, BlobClientBreakLeaseResultHeaders,
    BlobClientChangeLeaseResultHeaders, BlobClientGetPropertiesOptions,
    BlobClientGetPropertiesResultHeaders, BlobClientRenewLeaseResultHeaders,
    BlobClientSetMetadataOptions, BlockBlobClientUploadOptions,
};
use azure_storage_blob::{BlobClient, BlobContainerClient};
use tracing::{debug, trace};

use super::client::{
    container_client, http_status, is_not_found, lease_call_error, lease_info, map_error,
    unparsable,
};
use super::OfficialSettings;
use crate::bounded::bounded;
use crate::error::{Error, Result};
use crate::options::{lease_seconds, DEFAULT_REQUEST_TIMEOUT};
use crate::store::blob_protocol::{
    next_epoch, write_term, CONTAINER_NOT_FOUND, MEMBER_KEY, MEMBER_VALUE,
};
use crate::store::collect::{Collection, Collector};
use crate::store::{check_advertised, Acquire, Candidate, LeaseId, LeaseInfo, LeaseStore};

/// The lease on one blob through the official Azure SDK: the same calls and
/// the same answers as `SdkV021LeaseManager`
/// on the 0.21 SDK. [`BlobLeaseManager`](crate::BlobLeaseManager) is this
/// manager when the settings name [`Backend::Official`](crate::Backend::Official).
/// Through [`LeaseStore`], each call is bounded by the caller (the mutex
/// bounds it by its request timeout); the SDK's own retries are off.
#[derive(Clone)]
pub struct OfficialLeaseManager {
    pub(super) container: Arc<BlobContainerClient>,
    pub(super) blob: Arc<BlobClient>,
    pub(super) settings: OfficialSettings,
    pub(super) blob_name: String,
    pub(super) request_timeout: Duration,
    /// The stale candidate records this manager's listings collect.
    pub(super) collector: Arc<Collector>,
    /// Whether this is a lease set's member lease, which marks its blob
    /// ([`MEMBER_KEY`]) when it creates it and at every stamp.
    pub(super) member: bool,
}

impl fmt::Debug for OfficialLeaseManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OfficialLeaseManager")
            .field("container", &self.settings.container())
            .field("blob", &self.blob_name)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl OfficialLeaseManager {
    /// A manager for the blob named in `settings`, with its own HTTP client
    /// (a pool of kept-alive connections) and a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] when the SDK refuses the container URL (a
    /// token credential over `http://`); [`Error::Transport`] when the HTTP
    /// client cannot be built.
    pub fn new(settings: &OfficialSettings) -> Result<Self> {
        let container = Arc::new(container_client(settings)?);
        Ok(Self::on(&container, settings.clone()))
    }

    /// A manager of the settings' blob on `container`, whose client (and
    /// connection pool) is shared.
    pub(super) fn on(container: &Arc<BlobContainerClient>, settings: OfficialSettings) -> Self {
        OfficialLeaseManager {
            blob: Arc::new(container.blob_client(settings.blob())),
            container: container.clone(),
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

    /// The same manager with another cap on the calls it bounds itself
    /// ([`break_lease`](Self::break_lease), the collection of stale
    /// candidate records; default 3 s).
    #[must_use = "the manager is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The same manager with another collection of stale candidate records
    /// (default [`Collection::default`]).
    #[must_use = "the manager is returned by value"]
    pub fn with_collection(mut self, collection: Collection) -> Self {
        self.collector = Arc::new(Collector::new(collection));
        self
    }

    /// Where the lease blob lives.
    #[must_use]
    pub fn settings(&self) -> &OfficialSettings {
        &self.settings
    }

    /// The request timeout in force.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Acquires a lease of `duration` (15 to 60 whole seconds) under
    /// `proposed`, as [`BlobLeaseManager::acquire`](crate::BlobLeaseManager::acquire)
    /// does, within the request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a duration out of range; the kinds of
    /// [`Error`] for a failed storage call, [`Error::Timeout`] past the
    /// request timeout.
    ///
    /// # Cancellation safety
    ///
    /// Dropping the future may leave the lease acquired on the server;
    /// acquire again with the same id to learn the outcome.
    pub async fn acquire(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire> {
        bounded(
            "acquire",
            self.request_timeout,
            self.acquire_uncapped(proposed, duration),
        )
        .await
    }

    /// Renews the lease held under `lease`, within the request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease is not held under this id (or the
    /// answer names another id); other kinds when storage cannot be asked.
    ///
    /// # Cancellation safety
    ///
    /// Safe: renewing is idempotent.
    pub async fn renew(&self, lease: LeaseId) -> Result<()> {
        bounded("renew", self.request_timeout, self.renew_uncapped(lease)).await
    }

    /// Releases the lease held under `lease`, within the request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease is not held under this id; other
    /// kinds when storage cannot be asked.
    ///
    /// # Cancellation safety
    ///
    /// Safe: a dropped call leaves the lease to expire.
    pub async fn release(&self, lease: LeaseId) -> Result<()> {
        bounded(
            "release",
            self.request_timeout,
            self.release_uncapped(lease),
        )
        .await
    }

    /// The lease state and the last term's metadata, or `None` when the blob
    /// (or its container) does not exist, within the request timeout.
    ///
    /// # Errors
    ///
    /// The kinds of [`Error`] for a failed storage call.
    ///
    /// # Cancellation safety
    ///
    /// Safe: it only reads.
    pub async fn inspect(&self) -> Result<Option<LeaseInfo>> {
        bounded("inspect", self.request_timeout, self.inspect_uncapped()).await
    }

    /// Creates the container (only when storage says it is missing) and an
    /// empty lease blob if they do not exist, never overwriting a blob.
    ///
    /// # Errors
    ///
    /// The kinds of [`Error`] for a failed storage call.
    ///
    /// # Cancellation safety
    ///
    /// Safe: it is idempotent.
    pub async fn create_if_missing(&self) -> Result<()> {
        bounded("create", self.request_timeout, self.create_blob()).await
    }

    /// Breaks the current lease, whoever holds it (see
    /// [`BlobLeaseManager::break_lease`](crate::BlobLeaseManager::break_lease)).
    /// Returns how long until the lease can be acquired.
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
        let seconds = match period {
            Some(p) if p > Duration::from_secs(60) => {
                return Err(Error::invalid("period", "must be at most 60 s"))
            }
            Some(p) => i32::try_from(p.as_secs()).unwrap_or(60),
            None => 0,
        };
        bounded("break", self.request_timeout, async {
            let options = BlobClientBreakLeaseOptions {
                break_period: Some(seconds),
                ..Default::default()
            };
            let response =
                self.blob
                    .break_lease(Some(options))
                    .await
                    .map_err(|e| match http_status(&e) {
                        Some((status @ 409, code)) => Error::Storage {
                            status,
                            code,
                            message: "break: there is no lease to break".to_owned(),
                        },
                        _ => map_error("break", &e),
                    })?;
            let left = response.lease_time().map_err(|e| unparsable("break", &e))?;
            Ok(Duration::from_secs(
                left.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
            ))
        })
        .await
    }

    pub(super) async fn acquire_uncapped(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> Result<Acquire> {
        let seconds = i32::from(lease_seconds(duration)?);
        let mut created = false;
        loop {
            let options = BlobClientAcquireLeaseOptions {
                proposed_lease_id: Some(proposed.to_string()),
                ..Default::default()
            };
            match self.blob.acquire_lease(seconds, Some(options)).await {
                Ok(response) => {
                    let id = response.lease_id().map_err(|e| unparsable("acquire", &e))?;
                    return if is_ours(id.as_deref(), proposed) {
                        Ok(Acquire::Acquired)
                    } else {
                        Err(Error::UnexpectedResponse {
                            operation: "acquire",
                            message: "answered with another lease id than proposed".into(),
                        })
                    };
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

    /// Creates an empty blob if it does not exist (`If-None-Match: *`), and
    /// the container first only on `ContainerNotFound`.
    async fn create_blob(&self) -> Result<()> {
        let mut created_container = false;
        loop {
            let options = BlockBlobClientUploadOptions {
                if_none_match: Some(Etag::from("*")),
                metadata: self.member.then(member_marker),
                ..Default::default()
            };
            let put = self
                .blob
                .upload(RequestContent::from(Vec::new()), Some(options))
                .await;
            let Err(e) = put else {
                debug!(blob = %self.blob_name, "created lease blob");
                return Ok(());
            };
            match http_status(&e) {
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

    async fn create_container(&self) -> Result<()> {
        match self.container.create(None).await {
            Ok(_) => debug!(container = %self.settings.container(), "created container"),
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
            .renew_lease(lease.to_string(), None)
            .await
            .map_err(|e| lease_call_error("renew", &e))?;
        let id = response.lease_id().map_err(|e| unparsable("renew", &e))?;
        // Azurite renews an expired lease even under a wrong id and answers
        // with the old id: only our own id counts as renewed.
        if is_ours(id.as_deref(), lease) {
            Ok(())
        } else {
            Err(Error::LeaseLost(
                "renew answered with another lease id".into(),
            ))
        }
    }

    async fn change_uncapped(&self, from: LeaseId, to: LeaseId) -> Result<()> {
        let response = self
            .blob
            .change_lease(from.to_string(), to.to_string(), None)
            .await
            .map_err(|e| map_error("change", &e))?;
        let id = response.lease_id().map_err(|e| unparsable("change", &e))?;
        if is_ours(id.as_deref(), to) {
            Ok(())
        } else {
            Err(Error::LeaseLost(
                "change answered with another lease id".into(),
            ))
        }
    }

    pub(super) async fn release_uncapped(&self, lease: LeaseId) -> Result<()> {
        self.blob
            .release_lease(lease.to_string(), None)
            .await
            .map(drop)
            .map_err(|e| lease_call_error("release", &e))
    }

    /// The blob's metadata and `ETag`, read under `lease`.
    pub(super) async fn metadata_under(
        &self,
        lease: LeaseId,
        operation: &'static str,
    ) -> Result<(HashMap<String, String>, Etag)> {
        let options = BlobClientGetPropertiesOptions {
            lease_id: Some(lease.to_string()),
            ..Default::default()
        };
        let current = self
            .blob
            .get_properties(Some(options))
            .await
            .map_err(|e| map_error(operation, &e))?;
        let metadata = current.metadata().map_err(|e| unparsable(operation, &e))?;
        let etag = current
            .etag()
            .map_err(|e| unparsable(operation, &e))?
            .ok_or_else(|| Error::UnexpectedResponse {
                operation,
                message: "no ETag in the answer".into(),
            })?;
        Ok((metadata, etag))
    }

    async fn stamp_uncapped(
        &self,
        lease: LeaseId,
        holder: &str,
        advertised: Option<&str>,
        floor: u64,
    ) -> Result<u64> {
        if let Some(value) = advertised {
            check_advertised(value)?;
        }
        let (mut metadata, etag) = self.metadata_under(lease, "read metadata").await?;
        let epoch = next_epoch(&metadata)?.max(floor);
        write_term(&mut metadata, holder, epoch, advertised, self.member);
        let options = BlobClientSetMetadataOptions {
            lease_id: Some(lease.to_string()),
            if_match: Some(etag),
            ..Default::default()
        };
        self.blob
            .set_metadata(&metadata, Some(options))
            .await
            .map_err(|e| map_error("write metadata", &e))?;
        Ok(epoch)
    }

    pub(super) async fn inspect_uncapped(&self) -> Result<Option<LeaseInfo>> {
        let response = match self.blob.get_properties(None).await {
            Ok(response) => response,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(map_error("inspect", &e)),
        };
        let bad = |e: azure_core::Error| unparsable("inspect", &e);
        Ok(Some(lease_info(
            response.lease_state().map_err(bad)?,
            response.duration().map_err(bad)?,
            &response.metadata().map_err(bad)?,
            response.content_length().map_err(bad)?,
            response.etag().map_err(bad)?.map(|e| e.to_string()),
        )))
    }
}

/// The metadata that marks a lease set's member blob.
fn member_marker() -> HashMap<String, String> {
    HashMap::from([(MEMBER_KEY.to_owned(), MEMBER_VALUE.to_owned())])
}

/// Whether the lease id in an answer is `ours`.
fn is_ours(answered: Option<&str>, ours: LeaseId) -> bool {
    answered.and_then(|id| id.parse::<LeaseId>().ok()) == Some(ours)
}

impl LeaseStore for OfficialLeaseManager {
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

    fn name(&self) -> String {
        format!("{}/{}", self.settings.container(), self.blob_name)
    }

    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>>> + Send {
        self.read_state_uncapped()
    }

    fn write_state(&self, lease: LeaseId, state: &[u8]) -> impl Future<Output = Result<()>> + Send {
        self.write_state_uncapped(lease, state)
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
        let holder = holder.to_owned();
        async move { self.record(&holder).renew_uncapped(record).await }
    }

    fn withdraw(&self, record: LeaseId, holder: &str) -> impl Future<Output = Result<()>> + Send {
        self.withdraw_uncapped(record, holder.to_owned())
    }

    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>>> + Send {
        self.candidates_uncapped()
    }
}
