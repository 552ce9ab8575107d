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
//!
//! A lease set's membership goes before all of them: the requests of a
//! member lease take slots of their own ([`MEMBERS_IN_FLIGHT`]), so that
//! thousands of partition renewals queued behind slow storage never keep
//! the membership renewal waiting until its term ends (which would drain
//! every partition of the instance at once). The partitions that cannot
//! be renewed in time are the ones that go.
//!
//! Azure's stores and the memory store's paced requests share this.

use tokio::sync::{Semaphore, SemaphorePermit};

/// The most requests of one client in flight at once. Enough for ten
/// thousand partitions renewed every 10 s (1 000 renewals a second) at
/// 100 ms a request; past that, storage is the bottleneck and more
/// requests at once would only queue there.
pub(crate) const REQUESTS_IN_FLIGHT: usize = 128;

/// The most of them that neither keep nor end a held lease.
pub(crate) const OTHERS_IN_FLIGHT: usize = 32;

/// The slots kept for the requests of lease sets' member leases, apart
/// from the others: a member renews once a renew interval, so four carry
/// twenty member requests a second at 200 ms a request (a hundred sets of
/// one client renewing every 5 s).
pub(crate) const MEMBERS_IN_FLIGHT: usize = 4;

/// What a request does to a held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Renews, releases or changes a held lease: may take every slot.
    Keeps,
    /// Anything else: takes at most [`OTHERS_IN_FLIGHT`] slots.
    Other,
    /// Any request of a lease set's member lease: takes one of the
    /// [`MEMBERS_IN_FLIGHT`] slots kept for them, never one of the others.
    Member,
}

/// The slots of one client.
#[derive(Debug)]
pub(crate) struct InFlight {
    all: Semaphore,
    others: Semaphore,
    members: Semaphore,
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
    /// `all` slots shared by the leases, at most `others` of them for
    /// requests that neither keep nor end a held lease, and
    /// [`MEMBERS_IN_FLIGHT`] more for member leases.
    pub(crate) fn with_limits(all: usize, others: usize) -> Self {
        InFlight {
            all: Semaphore::new(all),
            others: Semaphore::new(others.min(all)),
            members: Semaphore::new(MEMBERS_IN_FLIGHT),
        }
    }

    /// Waits for a slot for a request of `kind`, first come first served
    /// within a kind; a member lease's request waits only for other
    /// members'.
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop while waiting: no slot is taken.
    pub(crate) async fn enter(&self, kind: Kind) -> Slot<'_> {
        // Neither semaphore is ever closed, so a permit always comes.
        let (other, all) = match kind {
            Kind::Member => (self.members.acquire().await.ok(), None),
            Kind::Keeps => (None, self.all.acquire().await.ok()),
            Kind::Other => {
                let other = self.others.acquire().await.ok();
                (other, self.all.acquire().await.ok())
            }
        };
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

    #[tokio::test(start_paused = true)]
    async fn a_member_renewal_goes_at_once_while_every_shared_slot_is_taken_and_renewals_queue() {
        let slots = InFlight::with_limits(2, 1);
        let _taken = (
            slots.enter(Kind::Other).await,
            slots.enter(Kind::Keeps).await,
        );
        let mut queued = Box::pin(slots.enter(Kind::Keeps));
        assert!(timeout(A_WHILE, &mut queued).await.is_err());
        let member = timeout(Duration::ZERO, slots.enter(Kind::Member)).await;
        assert!(
            member.is_ok(),
            "the member renewal waited behind the partitions'"
        );
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
