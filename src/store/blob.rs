//! The lease blob's storage calls: the only module that talks to the Azure SDK.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use azure_core::error::ErrorKind;
use azure_core::prelude::{IfMatchCondition, LeaseBreakPeriod, ProposedLeaseId};
use azure_core::request_options::Metadata;
use azure_core::{HttpClient, RetryOptions, TransportOptions};
use azure_storage::{CloudLocation, StorageCredentials};
use azure_storage_blobs::blob::BlobProperties;
use azure_storage_blobs::prelude::{BlobClient, ClientBuilder, ContainerClient};
use futures_util::StreamExt;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tracing::{debug, trace, warn};

use crate::bounded::bounded;
use crate::error::{redact, Cause, Error, Result};
use crate::options::{lease_seconds, DEFAULT_REQUEST_TIMEOUT};
use crate::settings::{BlobSettings, Credential};
use crate::store::collect::{Collection, Collector};
use crate::store::{
    check_state_len, Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore, LeaseState, LeaseStore,
};

mod candidates;
use candidates::CANDIDATES;
pub use candidates::{PRIORITY_KEY, PROPOSED_KEY};

/// Metadata key of the current holder's name.
pub const HOLDER_KEY: &str = "holder";
/// Metadata key of the fencing token.
pub const EPOCH_KEY: &str = "epoch";
/// Metadata key of the instant the current term began (RFC 3339, UTC).
pub const ACQUIRED_AT_KEY: &str = "acquired_at";

/// The error code of a request to a container that does not exist (told
/// apart from `BlobNotFound`, a missing blob in a container that does).
const CONTAINER_NOT_FOUND: &str = "ContainerNotFound";

/// Error codes that mean a lease we thought we held is not ours any more.
const LOST_CODES: &[&str] = &[
    "LeaseIdMismatchWithLeaseOperation",
    "LeaseIsBrokenAndCannotBeRenewed",
    "LeaseNotPresentWithLeaseOperation",
    "LeaseLost",
    "LeaseIdMismatchWithBlobOperation",
    "LeaseNotPresentWithBlobOperation",
    "LeaseIdMissing",
];

impl LeaseId {
    fn sdk_id(self) -> azure_core::request_options::LeaseId {
        azure_core::request_options::LeaseId::from(self.as_uuid())
    }
}

/// Acquires, renews, releases, breaks, changes and inspects the lease on one
/// blob. Every call is capped by the request timeout, and the SDK's own
/// retries are off: the caller (usually [`BlobDistributedMutex`](crate::BlobDistributedMutex))
/// decides when to retry, so that nothing runs past a leader's deadline.
#[derive(Clone)]
pub struct BlobLeaseManager {
    settings: BlobSettings,
    blob: BlobClient,
    container: String,
    blob_name: String,
    request_timeout: Duration,
    /// The stale candidate records this manager's listings collect.
    collector: Arc<Collector>,
}

impl fmt::Debug for BlobLeaseManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobLeaseManager")
            .field("container", &self.container)
            .field("blob", &self.blob_name)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl BlobLeaseManager {
    /// A manager for the blob named in `settings`, with a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConnectionString`] when the SAS token cannot be parsed.
    pub fn new(settings: &BlobSettings) -> Result<Self> {
        Self::from_settings(settings.clone())
    }

    /// As [`BlobLeaseManager::new`], keeping the settings given.
    pub(crate) fn from_settings(settings: BlobSettings) -> Result<Self> {
        let blob = container_client(&settings)?.blob_client(settings.blob());
        Ok(Self::on(blob, settings))
    }

    /// A manager of `blob`, whose client (and its connection pool) may be
    /// shared with other managers of the same container.
    fn on(blob: BlobClient, settings: BlobSettings) -> Self {
        BlobLeaseManager {
            blob,
            container: settings.container().to_owned(),
            blob_name: settings.blob().to_owned(),
            settings,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            collector: Arc::new(Collector::new(Collection::default())),
        }
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
        self.capped("stamp", self.stamp_uncapped(lease, holder, 0))
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

    async fn acquire_uncapped(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire> {
        let seconds = lease_seconds(duration)?;
        let mut created = false;
        loop {
            let attempt = self
                .blob
                .acquire_lease(azure_core::prelude::LeaseDuration::Seconds(seconds))
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

    async fn inspect_uncapped(&self) -> Result<Option<LeaseInfo>> {
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
            self.blob
                .put_block_blob(Vec::<u8>::new())
                .if_match(IfMatchCondition::NotMatch("*".to_owned()))
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

    async fn renew_uncapped(&self, lease: LeaseId) -> Result<()> {
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

    async fn change_uncapped(&self, from: LeaseId, to: LeaseId) -> Result<()> {
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

    async fn release_uncapped(&self, lease: LeaseId) -> Result<()> {
        self.blob
            .blob_lease_client(lease.sdk_id())
            .release()
            .await
            .map(drop)
            .map_err(|e| lease_call_error("release", &e))
    }

    async fn stamp_uncapped(&self, lease: LeaseId, holder: &str, floor: u64) -> Result<u64> {
        let current = self
            .blob
            .get_properties()
            .lease_id(lease.sdk_id())
            .await
            .map_err(|e| map_error("read metadata", &e))?;
        let mut existing = current.blob.metadata.unwrap_or_default();
        let epoch = next_epoch(&existing)?.max(floor);
        let now = OffsetDateTime::now_utc()
            .format(&Rfc3339)
            .unwrap_or_default();
        existing.insert(HOLDER_KEY.to_owned(), holder.to_owned());
        existing.insert(EPOCH_KEY.to_owned(), epoch.to_string());
        existing.insert(ACQUIRED_AT_KEY.to_owned(), now);
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

impl BlobLeaseManager {
    async fn read_state_uncapped(&self) -> Result<Vec<u8>> {
        match self.blob.get_content().await {
            Ok(content) => Ok(content),
            Err(e) => match http_status(&e) {
                // No blob yet (404), or a range request on an empty blob
                // (416 InvalidRange): no state.
                Some((404 | 416, _)) => Ok(Vec::new()),
                _ => Err(map_error("read state", &e)),
            },
        }
    }

    async fn write_state_uncapped(&self, lease: LeaseId, state: &[u8]) -> Result<()> {
        check_state_len(state)?;
        // Put Blob replaces all metadata: read it under the lease and send it
        // along. `If-Match` keeps a metadata write that came in between (only
        // this lease's holder can make one) from being lost; then read again.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let current = self
                .blob
                .get_properties()
                .lease_id(lease.sdk_id())
                .await
                .map_err(|e| refused(map_error("write state", &e)))?;
            let mut metadata = Metadata::new();
            for (key, value) in current.blob.metadata.unwrap_or_default() {
                metadata.insert(key, value);
            }
            let put = self
                .blob
                .put_block_blob(state.to_vec())
                .lease_id(lease.sdk_id())
                .content_type("application/octet-stream")
                .metadata(metadata)
                .if_match(IfMatchCondition::Match(
                    current.blob.properties.etag.to_string(),
                ))
                .await;
            match put {
                Ok(_) => {
                    trace!(blob = %self.blob_name, len = state.len(), "wrote leader state");
                    return Ok(());
                }
                Err(e)
                    if attempts < 3
                        && matches!(
                            http_status(&e),
                            Some((412, Some(code))) if code == "ConditionNotMet"
                        ) =>
                {
                    debug!(blob = %self.blob_name, "the blob changed between read and write; reading again");
                }
                Err(e) => return Err(refused(map_error("write state", &e))),
            }
        }
    }
}

/// A lost lease, as the answer to a state write: the write was refused.
fn refused(error: Error) -> Error {
    match error {
        Error::LeaseLost(message) => Error::StateWriteRefused(message),
        other => other,
    }
}

impl LeaseStore for BlobLeaseManager {
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
        self.stamp_uncapped(lease, holder, 0)
    }

    fn stamp_at_least(
        &self,
        lease: LeaseId,
        holder: &str,
        floor: u64,
    ) -> impl Future<Output = Result<u64>> + Send {
        self.stamp_uncapped(lease, holder, floor)
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

/// What a blob's properties and metadata say of its lease.
fn lease_info(
    properties: &BlobProperties,
    metadata: Option<&HashMap<String, String>>,
) -> LeaseInfo {
    let empty = HashMap::new();
    let metadata = metadata.unwrap_or(&empty);
    let state = match properties.lease_state {
        Some(azure_core::LeaseState::Leased) => LeaseState::Leased,
        Some(azure_core::LeaseState::Expired) => LeaseState::Expired,
        Some(azure_core::LeaseState::Breaking) => LeaseState::Breaking,
        Some(azure_core::LeaseState::Broken) => LeaseState::Broken,
        _ => LeaseState::Available,
    };
    let mut info = LeaseInfo::new(state);
    info.infinite = match (state, properties.lease_duration) {
        (LeaseState::Leased, Some(azure_core::LeaseDuration::Infinite)) => Some(true),
        (LeaseState::Leased, _) => Some(false),
        _ => None,
    };
    info.holder = metadata.get(HOLDER_KEY).cloned();
    info.epoch = parse_epoch(metadata);
    info.acquired_at = metadata.get(ACQUIRED_AT_KEY).cloned();
    info.content_length = properties.content_length;
    info.etag = properties.etag.to_string();
    info
}

/// A client of the settings' container, with the SDK's retries off.
fn container_client(settings: &BlobSettings) -> Result<ContainerClient> {
    let credentials = match settings.credential() {
        Credential::SharedKey(key) => {
            StorageCredentials::access_key(settings.account(), key.clone())
        }
        Credential::Sas(sas) => StorageCredentials::sas_token(sas)
            .map_err(|_| Error::InvalidConnectionString("the SAS token is malformed".to_owned()))?,
        Credential::Token(token) => StorageCredentials::token_credential(token.clone()),
    };
    let location = CloudLocation::Custom {
        account: settings.account().to_owned(),
        uri: settings.endpoint().to_owned(),
    };
    Ok(ClientBuilder::with_location(location, credentials)
        .retry(RetryOptions::none())
        .transport(TransportOptions::new(http_client()?))
        .container_client(settings.container()))
}

/// How long an idle connection stays in the pool: under the 5 s after which
/// Azurite (Node's default) closes an idle connection, so that a request is
/// not sent on a connection the server is closing. Azure keeps idle
/// connections longer; this only costs a new connection after a pause.
const POOL_IDLE: Duration = Duration::from_secs(4);
/// The most idle connections kept to the endpoint.
const POOL_MAX_IDLE: usize = 32;

/// The HTTP client of one manager or one lease set: a pool of kept-alive
/// connections. The SDK's default client keeps none, which opens a new
/// connection (and, to Azure, a new TLS session) for every request.
fn http_client() -> Result<Arc<dyn HttpClient>> {
    let client = reqwest::Client::builder()
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(POOL_MAX_IDLE)
        .build()
        .map_err(|e| Error::Transport {
            operation: "create the HTTP client",
            source: Cause::new(e.to_string()),
        })?;
    Ok(Arc::new(client))
}

/// A set of leases in one container: each lease is the blob `<set>/<name>`,
/// where `<set>` is the settings' blob name. All its leases share one HTTP
/// client and connection pool, and one List Blobs call (with metadata)
/// reads the state of all of them.
#[derive(Clone)]
pub struct BlobLeaseSetStore {
    container: ContainerClient,
    settings: BlobSettings,
    request_timeout: Duration,
    /// The stale member and candidate blobs the balancer's listings collect.
    collector: Arc<Collector>,
}

impl fmt::Debug for BlobLeaseSetStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobLeaseSetStore")
            .field("container", &self.settings.container())
            .field("set", &self.settings.blob())
            .finish_non_exhaustive()
    }
}

impl BlobLeaseSetStore {
    /// The set named by the settings' blob name, in the settings' container,
    /// with a 3 s request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConnectionString`] when the SAS token cannot be parsed.
    pub fn new(settings: &BlobSettings) -> Result<Self> {
        Ok(BlobLeaseSetStore {
            container: container_client(settings)?,
            settings: settings.clone(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            collector: Arc::new(Collector::new(Collection::default())),
        })
    }

    /// The same store with another collection of stale member and
    /// candidate blobs (default [`Collection::default`]).
    #[must_use = "the store is returned by value"]
    pub fn with_collection(mut self, collection: Collection) -> Self {
        self.collector = Arc::new(Collector::new(collection));
        self
    }

    /// The same store with another cap on each call (default 3 s).
    #[must_use = "the store is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    fn blob_name(&self, name: &str) -> String {
        format!("{}/{name}", self.settings.blob())
    }

    async fn list_uncapped(&self, prefix: String) -> Result<Vec<(String, LeaseInfo)>> {
        let set = format!("{}/", self.settings.blob());
        let mut pages = self
            .container
            .list_blobs()
            .prefix(format!("{set}{prefix}"))
            .include_metadata(true)
            .into_stream();
        let mut listed = Vec::new();
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(page) => page,
                Err(e) if is_not_found(&e) => return Ok(listed),
                Err(e) => return Err(map_error("list", &e)),
            };
            for blob in page.blobs.blobs() {
                if let Some(name) = blob.name.strip_prefix(&set) {
                    listed.push((
                        name.to_owned(),
                        lease_info(&blob.properties, blob.metadata.as_ref()),
                    ));
                }
            }
        }
        Ok(listed)
    }
}

impl LeaseSetStore for BlobLeaseSetStore {
    type Lease = BlobLeaseManager;

    fn lease(&self, name: &str) -> Result<BlobLeaseManager> {
        let blob = self.blob_name(name);
        let settings = self
            .settings
            .for_blob(self.settings.container(), blob.clone())?;
        Ok(
            BlobLeaseManager::on(self.container.blob_client(blob), settings)
                .with_request_timeout(self.request_timeout)
                .with_collection(self.collector.collection()),
        )
    }

    fn collect(&self, listing: &[(String, LeaseInfo)]) -> impl Future<Output = usize> + Send {
        let set = self.settings.blob();
        let due = self.collector.due(
            listing
                .iter()
                .filter(|(name, _)| name.starts_with(MEMBERS) || name.contains(CANDIDATES))
                .map(|(name, info)| (name.as_str(), info)),
            tokio::time::Instant::now(),
        );
        let due = due
            .into_iter()
            .map(|(name, etag)| (format!("{set}/{name}"), etag))
            .collect();
        delete_stale(
            self.container.clone(),
            self.collector.clone(),
            due,
            self.request_timeout,
        )
    }

    fn remove(&self, name: &str) -> impl Future<Output = bool> + Send {
        let blob = self.container.blob_client(self.blob_name(name));
        delete_unleased(blob, self.request_timeout)
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>>> + Send {
        bounded(
            "list",
            self.request_timeout,
            self.list_uncapped(prefix.to_owned()),
        )
    }
}

/// The prefix of the member blobs within a set: only these (and candidate
/// records) are ever collected, never a partition.
const MEMBERS: &str = "members/";
/// The most conditional deletes of stale blobs in flight at once: few, so
/// that a backlog of deletions never crowds out the renewals.
const DELETES_IN_FLIGHT: usize = 4;

/// Deletes the stale blobs `due` (full names, with the `ETag` each was seen
/// with), each only if it is unchanged and not leased (no lease id is
/// sent), at most [`DELETES_IN_FLIGHT`] at once, all within `limit`;
/// returns how many were deleted. A permission that is missing stops the
/// collector, told once at warn.
async fn delete_stale(
    container: ContainerClient,
    collector: Arc<Collector>,
    due: Vec<(String, String)>,
    limit: Duration,
) -> usize {
    if due.is_empty() || collector.is_refused() {
        return 0;
    }
    let batch = futures_util::stream::iter(due)
        .map(|(name, etag)| {
            let blob = container.blob_client(&name);
            async move {
                let result = blob
                    .delete()
                    .if_match(IfMatchCondition::Match(etag))
                    .await;
                (name, result)
            }
        })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .fold(0, |deleted, (name, result)| {
            let collector = &collector;
            async move {
                match result.as_ref().map_err(http_status) {
                    Ok(_) => {
                        collector.forget(&name);
                        trace!(blob = %name, "deleted a stale blob");
                        return deleted + 1;
                    }
                    Err(Some((404, _))) => collector.forget(&name),
                    // Leased (412 LeaseIdMissing) or written since it was
                    // listed (412 ConditionNotMet): alive after all.
                    Err(Some((409 | 412, code))) => {
                        trace!(blob = %name, ?code, "a stale blob came back to life; kept");
                    }
                    Err(Some((401 | 403, _))) => {
                        if collector.refuse() {
                            let error = result.map(drop).map_err(|e| map_error("delete", &e));
                            if let Err(e) = error {
                                warn!(error = %e, "cannot delete stale blobs; they are left to grow");
                            }
                        }
                    }
                    Err(_) => debug!(blob = %name, "could not delete a stale blob; trying again later"),
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

/// Deletes `blob` unless it is leased (no lease id is sent, so storage
/// refuses while anyone holds a lease); `true` when deleted.
async fn delete_unleased(blob: BlobClient, limit: Duration) -> bool {
    match tokio::time::timeout(limit, blob.delete().into_future()).await {
        Ok(Ok(_)) => {
            debug!(blob = %blob.blob_name(), "deleted on leaving");
            true
        }
        Ok(Err(e)) => {
            debug!(blob = %blob.blob_name(), status = ?http_status(&e), "not deleted on leaving; it will be collected when stale");
            false
        }
        Err(_) => false,
    }
}

/// The epoch in the metadata, for display: 0 when missing or garbled.
fn parse_epoch(metadata: &HashMap<String, String>) -> u64 {
    metadata
        .get(EPOCH_KEY)
        .and_then(|e| e.trim().parse().ok())
        .unwrap_or(0)
}

/// The epoch of the next term: one more than the one in the metadata, or 1
/// on a blob that never had one. A garbled or maximal epoch is an error:
/// restarting from 0 would hand out fencing tokens that were used before.
fn next_epoch(metadata: &HashMap<String, String>) -> Result<u64> {
    let Some(found) = metadata.get(EPOCH_KEY) else {
        return Ok(1);
    };
    found
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|epoch| epoch.checked_add(1))
        .ok_or_else(|| Error::InvalidEpoch {
            found: found.chars().take(64).collect(),
        })
}

fn http_status(error: &azure_core::Error) -> Option<(u16, Option<String>)> {
    match error.kind() {
        ErrorKind::HttpResponse { status, error_code } => {
            Some((u16::from(*status), error_code.clone()))
        }
        _ => None,
    }
}

fn is_not_found(error: &azure_core::Error) -> bool {
    matches!(http_status(error), Some((404, _)))
}

/// Error codes of a request whose credential was accepted but does not
/// allow the call: a SAS without the permission (or resource type) or a
/// role without the action.
const PERMISSION_CODES: &[&str] = &[
    "AuthorizationPermissionMismatch",
    "AuthorizationResourceTypeMismatch",
    "AuthorizationFailure",
];

/// What to grant so that `operation` is allowed: the SAS permission (and
/// for an account SAS its resource type) and the role that has it. The
/// README's table "Permissions" lists the same per mode.
fn grant(operation: &str) -> &'static str {
    match operation {
        "create container" => {
            "the credential may not create the container: create the container beforehand, \
             or use an account SAS with resource type container (srt=c) and create (c) or \
             write (w), or a role that can create containers (Storage Blob Data Contributor on the account)"
        }
        "create blob" => {
            "grant create (c) or write (w) on the blob (container SAS, blob SAS, or account SAS \
             with srt=o), or Storage Blob Data Contributor on the container"
        }
        "list" | "list candidates" => {
            "grant list (l) on the container (container SAS, or account SAS with srt=c), or \
             Storage Blob Data Contributor on the container"
        }
        "inspect" | "read metadata" | "read state" => {
            "grant read (r) on the blob, or Storage Blob Data Reader on the container"
        }
        "break" => {
            "grant write (w) and delete (d) on the blob, or Storage Blob Data Contributor on the \
             container"
        }
        "delete" => {
            "grant delete (d) on the container's blobs, or Storage Blob Data Contributor on the \
             container"
        }
        _ => "grant write (w) on the blob, or Storage Blob Data Contributor on the container",
    }
}

/// The message of a refused call: what to grant when the credential lacks
/// a permission, what to check when it was not accepted at all.
fn refusal(operation: &str, code: Option<&str>) -> String {
    match code {
        Some(code) if PERMISSION_CODES.contains(&code) => {
            format!("{operation} was refused: {}", grant(operation))
        }
        _ => format!(
            "{operation} was refused: the credential was not accepted; check the account key, \
             or the SAS's signature, start and expiry, or the token's tenant and audience"
        ),
    }
}

/// The error of a call on a lease we hold (renew, release): as
/// [`map_error`], and a blob that is gone (deleted, as a withdrawn or
/// collected record is, or its container) is a lost lease.
fn lease_call_error(operation: &'static str, error: &azure_core::Error) -> Error {
    match http_status(error) {
        Some((404, code)) => Error::LeaseLost(format!(
            "{operation}: {} (the blob no longer exists)",
            code.as_deref().unwrap_or("404")
        )),
        _ => map_error(operation, error),
    }
}

/// The most of the service's own message kept in an error.
const SERVICE_MESSAGE_LEN: usize = 300;

/// The message storage sent with an error status, as `" (storage said:
/// …)"` on one line, secrets removed; empty when it sent none.
fn service_message(error: &azure_core::Error) -> String {
    let Some(message) = error.as_http_error().and_then(|e| e.error_message()) else {
        return String::new();
    };
    let line = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let line: String = redact(&line).chars().take(SERVICE_MESSAGE_LEN).collect();
    format!(" (storage said: {line})")
}

/// Maps an SDK error to the crate's kinds by status and `x-ms-error-code`,
/// with a message that carries no secret.
fn map_error(operation: &'static str, error: &azure_core::Error) -> Error {
    if let Some((status, code)) = http_status(error) {
        let said = service_message(error);
        return match (status, code.as_deref()) {
            (401 | 403, code) => Error::Authentication {
                status,
                code: code.unwrap_or("Forbidden").to_owned(),
                message: refusal(operation, code) + &said,
            },
            (409 | 412, Some(code)) if LOST_CODES.contains(&code) => {
                Error::LeaseLost(format!("{operation}: {code}"))
            }
            (status, _) => Error::Storage {
                status,
                code,
                message: format!("{operation} failed{said}"),
            },
        };
    }
    match error.kind() {
        ErrorKind::Credential => Error::CredentialUnavailable {
            operation,
            source: Cause::of(error),
        },
        ErrorKind::DataConversion => Error::UnexpectedResponse {
            operation,
            message: redact(&error.to_string()),
        },
        _ => Error::Transport {
            operation,
            source: Cause::of(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_id_round_trips() {
        let id = LeaseId::new();
        assert_eq!(id.to_string().parse::<LeaseId>().unwrap(), id);
        assert!("not-a-uuid".parse::<LeaseId>().is_err());
        assert_ne!(LeaseId::new(), LeaseId::new());
    }

    #[test]
    fn the_next_epoch_never_goes_back() {
        let with = |value: &str| HashMap::from([(EPOCH_KEY.to_owned(), value.to_owned())]);
        assert_eq!(next_epoch(&HashMap::new()).unwrap(), 1);
        assert_eq!(next_epoch(&with("41")).unwrap(), 42);
        assert_eq!(next_epoch(&with(" 7 ")).unwrap(), 8);
        assert_eq!(
            next_epoch(&with(&(u64::MAX - 1).to_string())).unwrap(),
            u64::MAX
        );
        for bad in [
            "",
            "x",
            "-1",
            "1.5",
            "18446744073709551615",
            "99999999999999999999",
        ] {
            assert!(
                matches!(next_epoch(&with(bad)), Err(Error::InvalidEpoch { .. })),
                "{bad:?}"
            );
        }
        let long = "9".repeat(500);
        match next_epoch(&with(&long)) {
            Err(Error::InvalidEpoch { found }) => assert_eq!(found.len(), 64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_credential_that_gives_no_token_is_transient() {
        let error = azure_core::Error::message(ErrorKind::Credential, "IMDS timed out");
        let mapped = map_error("acquire", &error);
        assert!(
            matches!(mapped, Error::CredentialUnavailable { .. })
                && mapped.is_transient()
                && !mapped.is_fatal(),
            "{mapped:?}"
        );
    }

    #[test]
    fn errors_map_by_code() {
        let http = |status: u16, code: &str| {
            azure_core::Error::new(
                ErrorKind::HttpResponse {
                    status: azure_core::StatusCode::try_from(status).unwrap(),
                    error_code: Some(code.to_owned()),
                },
                "x",
            )
        };
        assert!(matches!(
            map_error("renew", &http(409, "LeaseIdMismatchWithLeaseOperation")),
            Error::LeaseLost(_)
        ));
        assert!(matches!(
            map_error("renew", &http(412, "LeaseLost")),
            Error::LeaseLost(_)
        ));
        assert!(matches!(
            map_error("acquire", &http(403, "AuthenticationFailed")),
            Error::Authentication { status: 403, .. }
        ));
        assert!(map_error("acquire", &http(401, "InvalidAuthenticationInfo")).is_fatal());
        // A missing permission names what to grant; a credential that was
        // not accepted says what to check.
        let list = map_error("list", &http(403, "AuthorizationPermissionMismatch")).to_string();
        assert!(list.contains("grant list (l) on the container"), "{list}");
        let write = map_error("write state", &http(403, "AuthorizationPermissionMismatch"));
        assert!(write.to_string().contains("grant write (w)"), "{write}");
        let signature = map_error("renew", &http(403, "AuthenticationFailed")).to_string();
        assert!(
            signature.contains("SAS's signature, start and expiry"),
            "{signature}"
        );
        let busy = map_error("renew", &http(503, "ServerBusy"));
        assert!(busy.is_transient(), "{busy:?}");
        assert!(map_error("acquire", &http(400, "InvalidHeaderValue")).is_fatal());
    }
}
