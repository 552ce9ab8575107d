//! A lease set's options: the election options of its leases, how often
//! it balances and how.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease_set::balance::Strategy;
use crate::options::MutexOptions;

/// The lease of a set's partitions and members by default: twice the
/// mutex's, so that one process can own many partitions at half the
/// renewals (and half the requests) a second. It makes the wait for a
/// crashed instance's partitions longer: `D + balance cycle + claim`.
const SET_LEASE: Duration = Duration::from_secs(30);

/// Timing and behaviour of a [`BlobLeaseSet`](crate::BlobLeaseSet).
#[derive(Debug, Clone)]
pub struct LeaseSetOptions {
    pub(crate) mutex: MutexOptions,
    pub(crate) balance_interval: Duration,
    pub(crate) strategy: Strategy,
    pub(crate) max_releases_per_cycle: Option<usize>,
}

impl Default for LeaseSetOptions {
    fn default() -> Self {
        LeaseSetOptions {
            mutex: MutexOptions::default().with_lease_duration(SET_LEASE),
            balance_interval: Duration::from_secs(5),
            strategy: Strategy::Balanced,
            max_releases_per_cycle: None,
        }
    }
}

impl LeaseSetOptions {
    /// The election options of every partition's lease and of the member
    /// lease. Default: [`MutexOptions::default`] with a 30 s lease, renewed
    /// every 10 s (a third of it). A set renews every lease it owns, so the
    /// renew interval sets its cost: 360 requests an hour per partition
    /// instead of the mutex's 720. The price is a slower re-own after a
    /// crash (up to the lease plus a balance cycle, about 36 s); a graceful
    /// leave or a join does not wait for the lease. Any duration from 15 to
    /// 60 s is accepted.
    #[must_use]
    pub fn mutex(&self) -> &MutexOptions {
        &self.mutex
    }

    /// How often an instance reads the set and balances. Default: 5 s.
    #[must_use]
    pub fn balance_interval(&self) -> Duration {
        self.balance_interval
    }

    /// How partitions are spread. Default: [`Strategy::Balanced`].
    #[must_use]
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The most partitions an over-loaded instance gives up in one balance
    /// cycle. Default: `None`, as many as the listing shows the other
    /// members lack (never more than its own excess), so that a join is
    /// balanced in about two cycles whatever the number of partitions.
    /// `Some(1)` moves one partition per instance per cycle instead: the
    /// drains of a large join are spread out, and the join takes about as
    /// many cycles as the largest excess. Must not be `Some(0)`.
    #[must_use]
    pub fn max_releases_per_cycle(&self) -> Option<usize> {
        self.max_releases_per_cycle
    }

    /// Sets [`mutex`](Self::mutex).
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_mutex(mut self, mutex: MutexOptions) -> Self {
        self.mutex = mutex;
        self
    }

    /// Sets [`max_releases_per_cycle`](Self::max_releases_per_cycle) to
    /// `Some(most)`.
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_max_releases_per_cycle(mut self, most: usize) -> Self {
        self.max_releases_per_cycle = Some(most);
        self
    }

    /// Sets [`balance_interval`](Self::balance_interval).
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_balance_interval(mut self, interval: Duration) -> Self {
        self.balance_interval = interval;
        self
    }

    /// Sets [`strategy`](Self::strategy).
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        self.mutex.validate()?;
        if self.mutex.priority.is_some() {
            return Err(Error::invalid(
                "priority",
                "a lease set's leases are never handed over to a preferred successor; leave it unset",
            ));
        }
        if self.max_releases_per_cycle == Some(0) {
            return Err(Error::invalid(
                "max_releases_per_cycle",
                "must be at least 1 (an instance that never gives up a partition starves a newcomer)",
            ));
        }
        if self.balance_interval.is_zero() || self.balance_interval > Duration::from_secs(300) {
            return Err(Error::invalid(
                "balance_interval",
                format!(
                    "must be from 1 ns to 300 s, got {:?}",
                    self.balance_interval
                ),
            ));
        }
        Ok(())
    }
}
