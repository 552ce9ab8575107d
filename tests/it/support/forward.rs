//! One store made of another, for tests that change a call or two: a test
//! writes what it changes in an `impl Wrap` (or `WrapSet`), and `Forward`
//! sends every other call of the store's trait to the inner store.

use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use blob_mutex::store::{
    Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore, LeaseStore, StampOptions,
};
use blob_mutex::Result;

/// A lease store around `inner`: each method is the `LeaseStore` method of
/// the same name, and does what the inner store does unless overridden.
pub trait Wrap: Send + Sync + 'static {
    type Inner: LeaseStore;

    fn inner(&self) -> &Self::Inner;

    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        LeaseStore::acquire(self.inner(), proposed, duration)
    }

    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        LeaseStore::renew(self.inner(), lease)
    }

    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        LeaseStore::release(self.inner(), lease)
    }

    fn stamp(
        &self,
        lease: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> impl Future<Output = Result<u64>> + Send {
        LeaseStore::stamp(self.inner(), lease, holder, options)
    }

    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>>> + Send {
        LeaseStore::inspect(self.inner())
    }

    fn name(&self) -> String {
        LeaseStore::name(self.inner())
    }

    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>>> + Send {
        LeaseStore::read_state(self.inner())
    }

    fn change(&self, from: LeaseId, to: LeaseId) -> impl Future<Output = Result<()>> + Send {
        LeaseStore::change(self.inner(), from, to)
    }

    fn supports_advertised(&self) -> bool {
        LeaseStore::supports_advertised(self.inner())
    }

    fn min_request_timeout(&self) -> Option<Duration> {
        LeaseStore::min_request_timeout(self.inner())
    }

    fn supports_candidates(&self) -> bool {
        LeaseStore::supports_candidates(self.inner())
    }

    fn advertise(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        LeaseStore::advertise(self.inner(), record, candidate, duration)
    }

    fn keep_advertising(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        LeaseStore::keep_advertising(self.inner(), record, holder)
    }

    fn withdraw(&self, record: LeaseId, holder: &str) -> impl Future<Output = Result<()>> + Send {
        LeaseStore::withdraw(self.inner(), record, holder)
    }

    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>>> + Send {
        LeaseStore::candidates(self.inner())
    }

    fn write_state(&self, lease: LeaseId, state: &[u8]) -> impl Future<Output = Result<()>> + Send {
        LeaseStore::write_state(self.inner(), lease, state)
    }
}

/// A lease-set store around `inner`: the leases it hands out are the
/// wrapper's own (`lease`, which every wrapper writes); the rest does what
/// the inner store does unless overridden.
pub trait WrapSet: Send + Sync + 'static {
    type Inner: LeaseSetStore;
    type Lease: LeaseStore;

    fn inner(&self) -> &Self::Inner;

    fn lease(&self, name: &str) -> Result<Self::Lease>;

    fn min_request_timeout(&self) -> Option<Duration> {
        LeaseSetStore::min_request_timeout(self.inner())
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>>> + Send {
        LeaseSetStore::list(self.inner(), prefix)
    }

    fn collect(&self, listing: &[(String, LeaseInfo)]) -> impl Future<Output = usize> + Send {
        LeaseSetStore::collect(self.inner(), listing)
    }

    fn remove(&self, name: &str) -> impl Future<Output = bool> + Send {
        LeaseSetStore::remove(self.inner(), name)
    }
}

/// The store a `Wrap` or `WrapSet` makes: every call of the store's trait
/// through the wrapper's method of the same name. It derefs to the wrapper,
/// whose fields (counters, switches) the test reads.
#[derive(Clone, Default)]
pub struct Forward<W>(pub W);

impl<W> Deref for Forward<W> {
    type Target = W;

    fn deref(&self) -> &W {
        &self.0
    }
}

#[deny(clippy::missing_trait_methods)]
impl<W: Wrap> LeaseStore for Forward<W> {
    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        Wrap::acquire(&self.0, proposed, duration)
    }

    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        Wrap::renew(&self.0, lease)
    }

    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        Wrap::release(&self.0, lease)
    }

    fn stamp(
        &self,
        lease: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> impl Future<Output = Result<u64>> + Send {
        Wrap::stamp(&self.0, lease, holder, options)
    }

    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>>> + Send {
        Wrap::inspect(&self.0)
    }

    fn name(&self) -> String {
        Wrap::name(&self.0)
    }

    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>>> + Send {
        Wrap::read_state(&self.0)
    }

    fn change(&self, from: LeaseId, to: LeaseId) -> impl Future<Output = Result<()>> + Send {
        Wrap::change(&self.0, from, to)
    }

    fn supports_advertised(&self) -> bool {
        Wrap::supports_advertised(&self.0)
    }

    fn min_request_timeout(&self) -> Option<Duration> {
        Wrap::min_request_timeout(&self.0)
    }

    fn supports_candidates(&self) -> bool {
        Wrap::supports_candidates(&self.0)
    }

    fn advertise(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        Wrap::advertise(&self.0, record, candidate, duration)
    }

    fn keep_advertising(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        Wrap::keep_advertising(&self.0, record, holder)
    }

    fn withdraw(&self, record: LeaseId, holder: &str) -> impl Future<Output = Result<()>> + Send {
        Wrap::withdraw(&self.0, record, holder)
    }

    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>>> + Send {
        Wrap::candidates(&self.0)
    }

    fn write_state(&self, lease: LeaseId, state: &[u8]) -> impl Future<Output = Result<()>> + Send {
        Wrap::write_state(&self.0, lease, state)
    }
}

#[deny(clippy::missing_trait_methods)]
impl<W: WrapSet> LeaseSetStore for Forward<W> {
    type Lease = W::Lease;

    fn lease(&self, name: &str) -> Result<W::Lease> {
        WrapSet::lease(&self.0, name)
    }

    fn min_request_timeout(&self) -> Option<Duration> {
        WrapSet::min_request_timeout(&self.0)
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>>> + Send {
        WrapSet::list(&self.0, prefix)
    }

    fn collect(&self, listing: &[(String, LeaseInfo)]) -> impl Future<Output = usize> + Send {
        WrapSet::collect(&self.0, listing)
    }

    fn remove(&self, name: &str) -> impl Future<Output = bool> + Send {
        WrapSet::remove(&self.0, name)
    }
}
