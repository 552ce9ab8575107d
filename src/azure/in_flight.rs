//! How many requests one client (one HTTP client and its connection pool,
//! shared by every lease of a store, a set or a provider of locks) has in
//! flight at once, and which ones go first when storage slows down.
//!
//! Without a bound, a process that holds many leases sends one more
//! request, on one more connection, for every renewal that falls due
//! while storage is slow: ten thousand partitions whose storage stalls
//! for a request timeout would open thousands of connections to an
//! account that is already behind. Bounded, a request waits here for a
//! slot, and the wait counts against the caller's own bound (the request
//! timeout, cut by the engine at the renewal's deadline), so a renewal
//! that cannot be sent in time fails as a timed-out request does and the
//! engine stops its term before the lease can expire, as for any failed
//! renewal: nothing waits here unnoticed.
//!
//! Requests that keep or end a held lease (renew, release, change) may
//! take every slot; the others (acquires, stamps, listings, the leader's
//! state, deletes) take at most [`OTHERS_IN_FLIGHT`] of them, so that a
//! cold start's claims or a burst of new locks never keep the renewals of
//! the leases already held waiting for a slot.

use tokio::sync::{Semaphore, SemaphorePermit};

/// The most requests of one client in flight at once. Enough for ten
/// thousand partitions renewed every 10 s (1 000 renewals a second) at
/// 100 ms a request; past that, storage is the bottleneck and more
/// requests at once would only queue there.
pub(crate) const REQUESTS_IN_FLIGHT: usize = 128;

/// The most of them that neither keep nor end a held lease.
pub(crate) const OTHERS_IN_FLIGHT: usize = 32;

/// What a request does to a held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Renews, releases or changes a held lease: may take every slot.
    Keeps,
    /// Anything else: takes at most [`OTHERS_IN_FLIGHT`] slots.
    Other,
}

/// The slots of one client.
#[derive(Debug)]
pub(crate) struct InFlight {
    all: Semaphore,
    others: Semaphore,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight::with_limits(REQUESTS_IN_FLIGHT, OTHERS_IN_FLIGHT)
    }
}

/// A request's slot, given back when dropped (when the request is
/// answered, or given up).
#[derive(Debug)]
pub(crate) struct Slot<'a> {
    _other: Option<SemaphorePermit<'a>>,
    _all: Option<SemaphorePermit<'a>>,
}

impl InFlight {
    fn with_limits(all: usize, others: usize) -> Self {
        InFlight {
            all: Semaphore::new(all),
            others: Semaphore::new(others.min(all)),
        }
    }

    /// Waits for a slot for a request of `kind`, first come first served
    /// within a kind.
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop while waiting: no slot is taken.
    pub(crate) async fn enter(&self, kind: Kind) -> Slot<'_> {
        // Neither semaphore is ever closed, so a permit always comes.
        let other = match kind {
            Kind::Keeps => None,
            Kind::Other => self.others.acquire().await.ok(),
        };
        let all = self.all.acquire().await.ok();
        Slot {
            _other: other,
            _all: all,
        }
    }

    /// The slots free now.
    #[cfg(test)]
    fn free(&self) -> (usize, usize) {
        (
            self.all.available_permits(),
            self.others.available_permits(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::timeout;

    use super::*;

    const A_WHILE: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_renewal_goes_at_once_while_the_other_requests_fill_their_share() {
        let slots = InFlight::with_limits(4, 2);
        let _a = slots.enter(Kind::Other).await;
        let _b = slots.enter(Kind::Other).await;
        assert!(
            timeout(A_WHILE, slots.enter(Kind::Other)).await.is_err(),
            "a third other request took a slot past the others' share"
        );
        let renewal = timeout(Duration::ZERO, slots.enter(Kind::Keeps)).await;
        assert!(renewal.is_ok(), "a renewal waited behind the others");
    }

    #[tokio::test(start_paused = true)]
    async fn with_every_slot_taken_a_renewal_waits_for_the_first_one_given_back() {
        let slots = InFlight::with_limits(2, 1);
        let other = slots.enter(Kind::Other).await;
        let _renewal = slots.enter(Kind::Keeps).await;
        let mut waiting = Box::pin(slots.enter(Kind::Keeps));
        assert!(timeout(A_WHILE, &mut waiting).await.is_err());
        drop(other);
        assert!(timeout(Duration::ZERO, &mut waiting).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_given_up_while_waiting_takes_no_slot() {
        let slots = InFlight::with_limits(2, 1);
        let taken = (
            slots.enter(Kind::Other).await,
            slots.enter(Kind::Keeps).await,
        );
        assert!(timeout(A_WHILE, slots.enter(Kind::Other)).await.is_err());
        assert!(timeout(A_WHILE, slots.enter(Kind::Keeps)).await.is_err());
        drop(taken);
        assert_eq!(slots.free(), (2, 1));
    }

    #[test]
    fn the_others_share_is_never_more_than_every_slot() {
        assert_eq!(InFlight::with_limits(2, 5).free(), (2, 2));
        assert_eq!(
            InFlight::default().free(),
            (REQUESTS_IN_FLIGHT, OTHERS_IN_FLIGHT)
        );
    }
}
