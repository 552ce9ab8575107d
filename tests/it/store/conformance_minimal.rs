//! A store written from [`LeaseStore`]'s documentation alone, implementing
//! exactly the methods the trait requires and none of the optional ones,
//! passes the whole quick conformance suite: what a store of your own has
//! to do is what the trait says it must.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    store::conformance, store::Acquire, store::LeaseId, store::LeaseInfo, store::LeaseState,
    store::LeaseStore, store::StampOptions, Error, Result,
};
use tokio::time::Instant;

/// One lease in memory: who holds it, until when, for how long, and the
/// last term's holder and epoch.
#[derive(Default)]
struct Lease {
    exists: bool,
    held: Option<(LeaseId, Instant, Duration)>,
    holder: Option<String>,
    epoch: u64,
}

impl Lease {
    /// The id holding the lease now, if any (rule 1: held until its deadline).
    fn holder_id(&self) -> Option<LeaseId> {
        self.held
            .filter(|(_, until, _)| Instant::now() < *until)
            .map(|(id, _, _)| id)
    }

    /// Rule 2: a call under an id that does not hold the lease has lost it.
    fn check_held(&self, lease: LeaseId) -> Result<()> {
        if self.holder_id() == Some(lease) {
            Ok(())
        } else {
            Err(Error::LeaseLost(format!(
                "lease {lease} does not hold the lease"
            )))
        }
    }
}

/// A store with the required methods only: every optional one keeps the
/// trait's default.
#[derive(Clone)]
struct MinimalStore {
    name: String,
    lease: Arc<Mutex<Lease>>,
}

impl MinimalStore {
    fn pair(name: &str) -> (MinimalStore, MinimalStore) {
        let store = MinimalStore {
            name: name.to_owned(),
            lease: Arc::default(),
        };
        (store.clone(), store)
    }

    fn lease(&self) -> std::sync::MutexGuard<'_, Lease> {
        self.lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl LeaseStore for MinimalStore {
    async fn acquire(&self, proposed: LeaseId, duration: Duration) -> Result<Acquire> {
        let mut lease = self.lease();
        lease.exists = true;
        match lease.holder_id() {
            Some(id) if id != proposed => Ok(Acquire::Held),
            _ => {
                lease.held = Some((proposed, Instant::now() + duration, duration));
                Ok(Acquire::Acquired)
            }
        }
    }

    async fn renew(&self, id: LeaseId) -> Result<()> {
        let mut lease = self.lease();
        lease.check_held(id)?;
        if let Some((_, until, duration)) = lease.held.as_mut() {
            *until = Instant::now() + *duration;
        }
        Ok(())
    }

    async fn release(&self, id: LeaseId) -> Result<()> {
        let mut lease = self.lease();
        lease.check_held(id)?;
        lease.held = None;
        Ok(())
    }

    /// Rules 4 and 8; rule 10 is optional, and this store keeps no
    /// advertised value.
    async fn stamp(&self, id: LeaseId, holder: &str, options: &StampOptions) -> Result<u64> {
        if options.advertised().is_some() {
            return Err(Error::Unsupported {
                operation: "advertise a value with the stamp",
            });
        }
        let mut lease = self.lease();
        lease.check_held(id)?;
        let next = lease
            .epoch
            .checked_add(1)
            .ok_or_else(|| Error::InvalidEpoch {
                found: lease.epoch.to_string(),
            })?;
        let epoch = next.max(options.floor());
        lease.epoch = epoch;
        lease.holder = Some(holder.to_owned());
        Ok(epoch)
    }

    async fn inspect(&self) -> Result<Option<LeaseInfo>> {
        let lease = self.lease();
        if !lease.exists {
            return Ok(None);
        }
        let state = if lease.holder_id().is_some() {
            LeaseState::Leased
        } else if lease.held.is_some() {
            LeaseState::Expired
        } else {
            LeaseState::Available
        };
        let mut info = LeaseInfo::new(state);
        if state == LeaseState::Leased {
            info.infinite = Some(false);
        }
        info.holder.clone_from(&lease.holder);
        info.epoch = lease.epoch;
        Ok(Some(info))
    }

    fn name(&self) -> String {
        format!("minimal/{}", self.name)
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_with_only_the_required_methods_meets_the_contract() {
    conformance::run_all(|name| async move { MinimalStore::pair(name) }).await;
}

#[tokio::test(start_paused = true)]
async fn a_minimal_lease_expires_after_its_duration() {
    let (a, b) = MinimalStore::pair("expiry");
    conformance::lease_expires_after_its_duration(&a, &b).await;
}

#[tokio::test(start_paused = true)]
async fn a_minimal_lease_renewed_after_its_expiry_under_another_id_is_lost() {
    let (a, _) = MinimalStore::pair("expired-renew");
    conformance::renewing_an_expired_lease_under_another_id_is_lost(&a).await;
}
