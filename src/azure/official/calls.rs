//! The blob calls on the official SDK (`azure_storage_blob` 1.x): one
//! request each, answered in the words of `calls`.

use std::sync::Arc;

use azure_core::http::headers::HeaderName;
use azure_core::http::{Etag, RequestContent};
use azure_storage_blob::models::{
    BlobClientAcquireLeaseOptions, BlobClientAcquireLeaseResultHeaders,
    BlobClientBreakLeaseOptions, BlobClientBreakLeaseResultHeaders,
    BlobClientChangeLeaseResultHeaders, BlobClientDeleteOptions, BlobClientDownloadOptions,
    BlobClientGetPropertiesOptions, BlobClientGetPropertiesResultHeaders,
    BlobClientRenewLeaseResultHeaders, BlobClientSetMetadataOptions,
    BlobContainerClientListBlobsOptions, BlockBlobClientUploadOptions, LeaseDuration,
    LeaseState as SdkLeaseState, ListBlobsIncludeItem,
};
use azure_storage_blob::BlobContainerClient;
use futures_util::StreamExt;

use super::client::{call_error, container_client};
use super::OfficialSettings;
use crate::azure::calls::{BlobCalls, Call, CallError, Listed, Metadata, Properties, Put};
use crate::error::Result;
use crate::store::{LeaseId, LeaseState};

/// The calls on one container through the official SDK: one HTTP client
/// (a pool of kept-alive connections) shared by every blob of it.
#[derive(Clone)]
pub(crate) struct OfficialCalls {
    client: Arc<BlobContainerClient>,
    container: Arc<str>,
}

impl OfficialCalls {
    /// The calls on the settings' container.
    pub(crate) fn new(settings: &OfficialSettings) -> Result<Self> {
        Ok(OfficialCalls {
            client: Arc::new(container_client(settings)?),
            container: settings.container().into(),
        })
    }

    /// Whether both send through one client.
    #[cfg(test)]
    pub(crate) fn same_client(&self, other: &OfficialCalls) -> bool {
        Arc::ptr_eq(&self.client, &other.client)
    }
}

/// The lease id in an answer, when it is one.
fn lease_id(answered: azure_core::Result<Option<String>>) -> Call<Option<LeaseId>> {
    let answered = answered.map_err(|e| call_error(&e))?;
    Ok(answered.and_then(|id| id.parse().ok()))
}

fn lease_state(state: Option<SdkLeaseState>) -> Option<LeaseState> {
    Some(match state? {
        SdkLeaseState::Leased => LeaseState::Leased,
        SdkLeaseState::Expired => LeaseState::Expired,
        SdkLeaseState::Breaking => LeaseState::Breaking,
        SdkLeaseState::Broken => LeaseState::Broken,
        SdkLeaseState::Available => LeaseState::Available,
    })
}

impl BlobCalls for OfficialCalls {
    fn container(&self) -> &str {
        &self.container
    }

    async fn acquire_lease(
        &self,
        blob: &str,
        proposed: LeaseId,
        seconds: u8,
    ) -> Call<Option<LeaseId>> {
        let options = BlobClientAcquireLeaseOptions {
            proposed_lease_id: Some(proposed.to_string()),
            ..Default::default()
        };
        let response = self
            .client
            .blob_client(blob)
            .acquire_lease(i32::from(seconds), Some(options))
            .await
            .map_err(|e| call_error(&e))?;
        lease_id(response.lease_id())
    }

    async fn renew_lease(&self, blob: &str, lease: LeaseId) -> Call<Option<LeaseId>> {
        let response = self
            .client
            .blob_client(blob)
            .renew_lease(lease.to_string(), None)
            .await
            .map_err(|e| call_error(&e))?;
        lease_id(response.lease_id())
    }

    async fn change_lease(&self, blob: &str, from: LeaseId, to: LeaseId) -> Call<Option<LeaseId>> {
        let response = self
            .client
            .blob_client(blob)
            .change_lease(from.to_string(), to.to_string(), None)
            .await
            .map_err(|e| call_error(&e))?;
        lease_id(response.lease_id())
    }

    async fn release_lease(&self, blob: &str, lease: LeaseId) -> Call<()> {
        self.client
            .blob_client(blob)
            .release_lease(lease.to_string(), None)
            .await
            .map(drop)
            .map_err(|e| call_error(&e))
    }

    async fn break_lease(&self, blob: &str, seconds: u8) -> Call<u64> {
        let options = BlobClientBreakLeaseOptions {
            break_period: Some(i32::from(seconds)),
            ..Default::default()
        };
        let response = self
            .client
            .blob_client(blob)
            .break_lease(Some(options))
            .await
            .map_err(|e| call_error(&e))?;
        let left = response.lease_time().map_err(|e| call_error(&e))?;
        Ok(left.and_then(|s| u64::try_from(s).ok()).unwrap_or(0))
    }

    async fn properties(&self, blob: &str, lease: Option<LeaseId>) -> Call<Properties> {
        let options = BlobClientGetPropertiesOptions {
            lease_id: lease.map(|id| id.to_string()),
            ..Default::default()
        };
        let response = self
            .client
            .blob_client(blob)
            .get_properties(Some(options))
            .await
            .map_err(|e| call_error(&e))?;
        let bad = |e: azure_core::Error| call_error(&e);
        Ok(Properties {
            state: lease_state(response.lease_state().map_err(bad)?),
            infinite: response.duration().map_err(bad)? == Some(LeaseDuration::Infinite),
            metadata: response.metadata().map_err(bad)?,
            content_length: response.content_length().map_err(bad)?.unwrap_or(0),
            etag: response.etag().map_err(bad)?.map(|e| e.to_string()),
            date: response
                .headers()
                .get_optional_str(&HeaderName::from_static("date"))
                .and_then(|date| azure_core::time::parse_rfc7231(date).ok()),
        })
    }

    async fn set_metadata(
        &self,
        blob: &str,
        metadata: &Metadata,
        lease: LeaseId,
        if_match: Option<&str>,
    ) -> Call<()> {
        let options = BlobClientSetMetadataOptions {
            lease_id: Some(lease.to_string()),
            if_match: if_match.map(|etag| Etag::from(etag.to_owned())),
            ..Default::default()
        };
        self.client
            .blob_client(blob)
            .set_metadata(metadata, Some(options))
            .await
            .map(drop)
            .map_err(|e| call_error(&e))
    }

    async fn put(&self, blob: &str, put: Put<'_>) -> Call<()> {
        let options = BlockBlobClientUploadOptions {
            lease_id: put.lease.map(|id| id.to_string()),
            blob_content_type: Some("application/octet-stream".to_owned()),
            metadata: put.metadata.cloned(),
            if_match: put.if_match.map(|etag| Etag::from(etag.to_owned())),
            if_none_match: put.if_none_match_any.then(|| Etag::from("*")),
            ..Default::default()
        };
        self.client
            .blob_client(blob)
            .upload(RequestContent::from(put.body), Some(options))
            .await
            .map(drop)
            .map_err(|e| call_error(&e))
    }

    async fn get(&self, blob: &str, max_len: usize) -> Call<Vec<u8>> {
        // One byte more than the cap, in one range request: a longer blob
        // shows itself without being read whole.
        let options = BlobClientDownloadOptions {
            parallel: std::num::NonZero::new(1),
            range: Some((0..max_len.saturating_add(1)).into()),
            ..Default::default()
        };
        let download = self
            .client
            .blob_client(blob)
            .download(Some(options))
            .await
            .map_err(|e| call_error(&e))?;
        let body = download.body.collect().await.map_err(|e| call_error(&e))?;
        if body.len() > max_len {
            return Err(CallError::TooLong(max_len));
        }
        Ok(body.to_vec())
    }

    async fn delete(&self, blob: &str, if_match: Option<&str>) -> Call<()> {
        let options = BlobClientDeleteOptions {
            if_match: if_match.map(|etag| Etag::from(etag.to_owned())),
            ..Default::default()
        };
        self.client
            .blob_client(blob)
            .delete(Some(options))
            .await
            .map(drop)
            .map_err(|e| call_error(&e))
    }

    async fn create_container(&self) -> Call<()> {
        self.client
            .create(None)
            .await
            .map(drop)
            .map_err(|e| call_error(&e))
    }

    async fn list(&self, prefix: &str) -> Call<Vec<Listed>> {
        let options = BlobContainerClientListBlobsOptions {
            prefix: Some(prefix.to_owned()),
            include: Some(vec![ListBlobsIncludeItem::Metadata]),
            ..Default::default()
        };
        let mut pages = self
            .client
            .list_blobs(Some(options))
            .map_err(|e| call_error(&e))?
            .into_pages();
        let mut listed = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| call_error(&e))?;
            let page = page.into_model().map_err(|e| call_error(&e))?;
            for blob in page.blob_items {
                let Some(name) = blob.name else { continue };
                let p = blob.properties.unwrap_or_default();
                let properties = Properties {
                    state: lease_state(p.lease_state),
                    infinite: p.lease_duration == Some(LeaseDuration::Infinite),
                    metadata: blob.metadata.and_then(|m| m.values).unwrap_or_default(),
                    content_length: p.content_length.unwrap_or(0),
                    etag: p.etag.map(|e| e.to_string()),
                    date: None,
                };
                listed.push(Listed { name, properties });
            }
        }
        Ok(listed)
    }
}
