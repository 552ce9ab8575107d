//! The blob calls on the frozen 0.21 SDK (`azure_storage_blobs`): one
//! request each, answered in the words of `calls`.

use std::sync::Arc;

use azure_core_v021::prelude::{IfMatchCondition, LeaseBreakPeriod, ProposedLeaseId};
use azure_core_v021::request_options::Metadata as SdkMetadata;
use azure_storage_blobs::blob::BlobProperties;
use azure_storage_blobs::prelude::ContainerClient;
use futures_util::StreamExt;

use super::client::{call_error, container_client};
use crate::azure::calls::{BlobCalls, Call, CallError, Listed, Metadata, Properties, Put};
use crate::azure::settings::BlobSettings;
use crate::error::Result;
use crate::store::{LeaseId, LeaseState};

/// The calls on one container through the 0.21 SDK: one HTTP client (a
/// pool of kept-alive connections) shared by every blob of it.
#[derive(Clone)]
pub(crate) struct SdkV021Calls {
    client: Arc<ContainerClient>,
}

impl SdkV021Calls {
    /// The calls on the settings' container.
    pub(crate) fn from_settings(settings: &BlobSettings) -> Result<Self> {
        Ok(SdkV021Calls {
            client: Arc::new(container_client(settings)?),
        })
    }

    /// Whether both send through one client.
    #[cfg(test)]
    pub(crate) fn same_client(&self, other: &SdkV021Calls) -> bool {
        Arc::ptr_eq(&self.client, &other.client)
    }
}

fn sdk_id(id: LeaseId) -> azure_core_v021::request_options::LeaseId {
    azure_core_v021::request_options::LeaseId::from(id.as_uuid())
}

fn ours(id: azure_core_v021::request_options::LeaseId) -> Option<LeaseId> {
    id.to_string().parse().ok()
}

fn sdk_metadata(metadata: &Metadata) -> SdkMetadata {
    let mut sdk = SdkMetadata::new();
    for (key, value) in metadata {
        sdk.insert(key.clone(), value.clone());
    }
    sdk
}

fn properties(
    properties: &BlobProperties,
    metadata: Option<Metadata>,
    date: Option<time::OffsetDateTime>,
) -> Properties {
    use azure_core_v021::{LeaseDuration, LeaseState as Sdk};
    let state = properties.lease_state.as_ref().map(|state| match state {
        Sdk::Leased => LeaseState::Leased,
        Sdk::Expired => LeaseState::Expired,
        Sdk::Breaking => LeaseState::Breaking,
        Sdk::Broken => LeaseState::Broken,
        Sdk::Available => LeaseState::Available,
    });
    Properties {
        state,
        infinite: matches!(properties.lease_duration, Some(LeaseDuration::Infinite)),
        metadata: metadata.unwrap_or_default(),
        content_length: properties.content_length,
        etag: Some(properties.etag.to_string()),
        date,
    }
}

impl BlobCalls for SdkV021Calls {
    fn container(&self) -> &str {
        self.client.container_name()
    }

    async fn acquire_lease(
        &self,
        blob: &str,
        proposed: LeaseId,
        seconds: u8,
    ) -> Call<Option<LeaseId>> {
        let response = self
            .client
            .blob_client(blob)
            .acquire_lease(azure_core_v021::prelude::LeaseDuration::Seconds(seconds))
            .proposed_lease_id(ProposedLeaseId::from(sdk_id(proposed)))
            .await
            .map_err(|e| call_error(&e))?;
        Ok(ours(response.lease_id))
    }

    async fn renew_lease(&self, blob: &str, lease: LeaseId) -> Call<Option<LeaseId>> {
        let response = self
            .client
            .blob_client(blob)
            .blob_lease_client(sdk_id(lease))
            .renew()
            .await
            .map_err(|e| call_error(&e))?;
        Ok(ours(response.lease_id))
    }

    async fn change_lease(&self, blob: &str, from: LeaseId, to: LeaseId) -> Call<Option<LeaseId>> {
        let response = self
            .client
            .blob_client(blob)
            .blob_lease_client(sdk_id(from))
            .change(ProposedLeaseId::from(sdk_id(to)))
            .await
            .map_err(|e| call_error(&e))?;
        Ok(ours(response.lease_id))
    }

    async fn release_lease(&self, blob: &str, lease: LeaseId) -> Call<()> {
        self.client
            .blob_client(blob)
            .blob_lease_client(sdk_id(lease))
            .release()
            .await
            .map(drop)
            .map_err(|e| call_error(&e))
    }

    async fn break_lease(&self, blob: &str, seconds: u8) -> Call<u64> {
        let period = std::time::Duration::from_secs(u64::from(seconds));
        let response = self
            .client
            .blob_client(blob)
            .break_lease()
            .lease_break_period(LeaseBreakPeriod::from(period))
            .await
            .map_err(|e| call_error(&e))?;
        Ok(response.lease_time.into())
    }

    async fn properties(&self, blob: &str, lease: Option<LeaseId>) -> Call<Properties> {
        let mut call = self.client.blob_client(blob).get_properties();
        if let Some(lease) = lease {
            call = call.lease_id(sdk_id(lease));
        }
        let response = call.await.map_err(|e| call_error(&e))?;
        Ok(properties(
            &response.blob.properties,
            response.blob.metadata,
            Some(response.date),
        ))
    }

    async fn set_metadata(
        &self,
        blob: &str,
        metadata: &Metadata,
        lease: LeaseId,
        if_match: Option<&str>,
    ) -> Call<()> {
        let mut call = self
            .client
            .blob_client(blob)
            .set_metadata()
            .lease_id(sdk_id(lease))
            .metadata(sdk_metadata(metadata));
        if let Some(etag) = if_match {
            call = call.if_match(IfMatchCondition::Match(etag.to_owned()));
        }
        call.await.map(drop).map_err(|e| call_error(&e))
    }

    async fn put(&self, blob: &str, put: Put<'_>) -> Call<()> {
        let mut call = self
            .client
            .blob_client(blob)
            .put_block_blob(put.body)
            .content_type("application/octet-stream");
        if let Some(metadata) = put.metadata {
            call = call.metadata(sdk_metadata(metadata));
        }
        if let Some(lease) = put.lease {
            call = call.lease_id(sdk_id(lease));
        }
        if let Some(etag) = put.if_match {
            call = call.if_match(IfMatchCondition::Match(etag.to_owned()));
        } else if put.if_none_match_any {
            call = call.if_match(IfMatchCondition::NotMatch("*".to_owned()));
        }
        call.await.map(drop).map_err(|e| call_error(&e))
    }

    async fn get(&self, blob: &str, max_len: usize) -> Call<Vec<u8>> {
        // One byte more than the cap: a longer blob shows itself without
        // being read whole.
        let end = u64::try_from(max_len).unwrap_or(u64::MAX).saturating_add(1);
        let mut pages = self
            .client
            .blob_client(blob)
            .get()
            .range(0..end)
            .into_stream();
        let mut content = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| call_error(&e))?;
            let data = page.data.collect().await.map_err(|e| call_error(&e))?;
            content.extend_from_slice(&data);
            if content.len() > max_len {
                return Err(CallError::TooLong(max_len));
            }
        }
        Ok(content)
    }

    async fn delete(&self, blob: &str, if_match: Option<&str>) -> Call<()> {
        let mut call = self.client.blob_client(blob).delete();
        if let Some(etag) = if_match {
            call = call.if_match(IfMatchCondition::Match(etag.to_owned()));
        }
        call.await.map(drop).map_err(|e| call_error(&e))
    }

    async fn create_container(&self) -> Call<()> {
        self.client.create().await.map_err(|e| call_error(&e))
    }

    async fn list(&self, prefix: &str) -> Call<Vec<Listed>> {
        let mut pages = self
            .client
            .list_blobs()
            .prefix(prefix.to_owned())
            .include_metadata(true)
            .into_stream();
        let mut listed = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| call_error(&e))?;
            for blob in page.blobs.blobs() {
                listed.push(Listed {
                    name: blob.name.clone(),
                    properties: properties(&blob.properties, blob.metadata.clone(), None),
                });
            }
        }
        Ok(listed)
    }
}
