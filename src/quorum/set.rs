//! Many named leases over N independent accounts: the lease-set store a
//! [`BlobLeaseSet`](crate::BlobLeaseSet) needs, on a quorum.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;

use super::votes::{ask_all, majority, no_majority};
use super::{merge, vote_ok, Missing, QuorumLeaseStore, MAX_QUORUM_ACCOUNTS};
use crate::azure::settings::BlobSettings;
use crate::azure::BlobLeaseSetStore;
use crate::bounded::bounded;
use crate::bounded::DEFAULT_REQUEST_TIMEOUT;
use crate::error::{Error, Result};
use crate::store::{LeaseInfo, LeaseSetStore};

/// A lease set over N independent lease-set stores (storage accounts): each
/// lease is a [`QuorumLeaseStore`] over that lease in every account, and a
/// listing merges the accounts' listings lease by lease (leased only when a
/// majority of the accounts has it leased), so that partitions run on a
/// quorum unchanged.
///
/// A listing needs a majority of the accounts to answer, each within the
/// request timeout (default 3 s).
pub struct QuorumLeaseSetStore<S: LeaseSetStore = BlobLeaseSetStore> {
    sets: Arc<[(String, S)]>,
    request_timeout: Duration,
    /// Each account's own listing from the last [`LeaseSetStore::list`]
    /// (`None` where it did not answer), kept for the collection that
    /// follows it: an account collects from what it listed itself, since
    /// staleness is judged by each blob's own `ETag`.
    last_listings: Arc<Mutex<Vec<Option<Listing>>>>,
    /// By lease name: the accounts each lease's stores have seen without
    /// an epoch, kept across the stores [`LeaseSetStore::lease`] makes (one
    /// per attempt), so that a hold-off can end. Only leases with an
    /// account seen so, or a store in use, are kept.
    missing: Arc<Mutex<BTreeMap<String, Missing>>>,
}

/// One account's listing: lease names with what it says of each.
type Listing = Vec<(String, LeaseInfo)>;

impl<S: LeaseSetStore> Clone for QuorumLeaseSetStore<S> {
    fn clone(&self) -> Self {
        QuorumLeaseSetStore {
            sets: self.sets.clone(),
            request_timeout: self.request_timeout,
            last_listings: self.last_listings.clone(),
            missing: self.missing.clone(),
        }
    }
}

impl<S: LeaseSetStore> fmt::Debug for QuorumLeaseSetStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let labels: Vec<&str> = self.sets.iter().map(|(l, _)| l.as_str()).collect();
        f.debug_struct("QuorumLeaseSetStore")
            .field("accounts", &labels)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl QuorumLeaseSetStore<BlobLeaseSetStore> {
    /// A quorum over the lease set named in each of `settings` (container,
    /// and the set's name as the blob), one per storage account, each
    /// labelled by its blob endpoint.
    ///
    /// # Errors
    ///
    /// As [`QuorumLeaseStore::from_settings`].
    pub fn from_settings(settings: &[BlobSettings]) -> Result<Self> {
        super::identity::check_accounts(settings)?;
        let sets = settings
            .iter()
            .map(|s| Ok((s.endpoint().to_owned(), BlobLeaseSetStore::new(s)?)))
            .collect::<Result<Vec<_>>>()?;
        Self::with_labels(sets)
    }
}

impl<S: LeaseSetStore> QuorumLeaseSetStore<S> {
    /// A quorum over `(label, set)` pairs, one per account; labels name the
    /// accounts in logs and must not be secrets.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `accounts`) for no sets or more than
    /// [`MAX_QUORUM_ACCOUNTS`].
    pub fn with_labels(sets: Vec<(String, S)>) -> Result<Self> {
        if sets.is_empty() || sets.len() > MAX_QUORUM_ACCOUNTS {
            return Err(Error::invalid(
                "accounts",
                format!(
                    "a quorum needs 1 to {MAX_QUORUM_ACCOUNTS} accounts (3 or 5 recommended), not {}",
                    sets.len()
                ),
            ));
        }
        Ok(QuorumLeaseSetStore {
            sets: sets.into(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            last_listings: Arc::default(),
            missing: Arc::default(),
        })
    }

    /// The same store with another request timeout (default 3 s), for the
    /// listings and for the quorum stores of its leases: no longer than the
    /// lease set's `request_timeout` (see
    /// [`QuorumLeaseStore::with_request_timeout`]).
    #[must_use = "the store is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    async fn list_quorum(&self, prefix: &str) -> Result<Vec<(String, LeaseInfo)>> {
        let limit = self.request_timeout;
        let (answers, votes) = ask_all(
            &self.sets,
            "list",
            |_, set| Some(bounded("list", limit, set.list(prefix))),
            |_, answer| vote_ok(answer),
        )
        .await;
        if votes.yes < votes.majority() {
            return Err(no_majority("list", answers, votes, self.request_timeout));
        }
        let own: Vec<Option<Listing>> = answers
            .into_iter()
            .map(|answer| answer.and_then(Result::ok))
            .collect();
        // Per lease, what each account that answered says of it (`None`
        // where its listing does not have it).
        let listings: Vec<&Listing> = own.iter().flatten().collect();
        let mut by_name: BTreeMap<String, Vec<Option<LeaseInfo>>> = BTreeMap::new();
        for (i, listing) in listings.iter().enumerate() {
            for (name, info) in *listing {
                let seen = by_name
                    .entry(name.clone())
                    .or_insert_with(|| vec![None; listings.len()]);
                seen[i] = Some(info.clone());
            }
        }
        let merged = by_name
            .into_iter()
            .filter_map(|(name, found)| Some((name, merge(self.sets.len(), &found)?)))
            .collect();
        *self
            .last_listings
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = own;
        Ok(merged)
    }
}

impl<S: LeaseSetStore> LeaseSetStore for QuorumLeaseSetStore<S> {
    type Lease = QuorumLeaseStore<S::Lease>;

    fn lease(&self, name: &str) -> Result<Self::Lease> {
        let leases = self
            .sets
            .iter()
            .map(|(label, set)| Ok((label.clone(), set.lease(name)?)))
            .collect::<Result<Vec<_>>>()?;
        let store =
            QuorumLeaseStore::with_labels(leases)?.with_request_timeout(self.request_timeout);
        let mut missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        missing.retain(|_, seen| {
            Arc::strong_count(seen) > 1
                || seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .any(Option::is_some)
        });
        let seen = missing
            .entry(name.to_owned())
            .or_insert_with(|| store.missing.clone());
        Ok(store.sharing_missing(seen.clone()))
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>>> + Send {
        self.list_quorum(prefix)
    }

    /// The request timeout of its leases' quorum stores.
    fn min_request_timeout(&self) -> Option<Duration> {
        Some(self.request_timeout)
    }

    /// Every account collects from its own part of the last listing (the
    /// merged `listing` cannot say which `ETag` each account saw), all at
    /// once; returns how many blobs were deleted over all accounts.
    fn collect(&self, listing: &[(String, LeaseInfo)]) -> impl Future<Output = usize> + Send {
        let _ = listing;
        let listings = std::mem::take(
            &mut *self
                .last_listings
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let sets = self.sets.clone();
        async move {
            let collecting = sets
                .iter()
                .zip(listings)
                .filter_map(|((_, set), own)| Some(set.collect_owned(own?)));
            join_all(collecting).await.into_iter().sum()
        }
    }

    /// Deletes the lease in every account where nobody holds it; `true`
    /// when a majority deleted it.
    fn remove(&self, name: &str) -> impl Future<Output = bool> + Send {
        let sets = self.sets.clone();
        let name = name.to_owned();
        async move {
            let removed = join_all(sets.iter().map(|(_, set)| set.remove(&name))).await;
            removed.iter().filter(|r| **r).count() >= majority(sets.len())
        }
    }
}

/// [`LeaseSetStore::collect`] over a listing it owns, so that the future
/// borrows nothing from the caller.
trait CollectOwned: LeaseSetStore {
    fn collect_owned(&self, listing: Listing) -> impl Future<Output = usize> + Send {
        async move { self.collect(&listing).await }
    }
}

impl<S: LeaseSetStore> CollectOwned for S {}
