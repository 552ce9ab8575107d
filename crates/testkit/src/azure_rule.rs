//! Azure's rules on a lease that expired unreleased, as rules the fault
//! proxy applies where Azurite is lenient.
//!
//! Azurite lets a new client acquire a lease the moment it expires, and
//! renews an expired lease under its own id whatever happened to the blob
//! since. Azure may answer `409 LeaseAlreadyPresent` for up to a minute
//! after a lease expired without a release or a break, and renews an
//! expired lease only while the blob has been neither leased again nor
//! modified since the expiry. [`AzureHold`] keeps, per blob, what storage
//! answered to the calls it saw ([`Book`]: the last successful acquire or
//! renew, with the acquire's duration and the instant its 2xx answer was
//! seen; releases and breaks, which free a lease at once; writes to the
//! blob), refuses an acquire under another lease id from the expiry until
//! the hold has passed, and refuses a renewal of a lease that expired
//! before a write to its blob (with `409 LeaseNotPresentWithLeaseOperation`:
//! the write left the blob with no lease; the crates read either code as
//! the lease lost). Share one rule among the proxies of every client of
//! one account, so that it sees every holder's calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A lease call as the rule reads it: the request's lease headers.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// `x-ms-lease-action`, lower case; `None` for a call without one.
    pub action: Option<&'a str>,
    /// `x-ms-lease-id`.
    pub lease_id: Option<&'a str>,
    /// `x-ms-proposed-lease-id`.
    pub proposed: Option<&'a str>,
    /// `x-ms-lease-duration` in seconds (`-1`: infinite).
    pub duration: Option<i64>,
    /// The HTTP method (a `DELETE` of the blob forgets its lease).
    pub method: &'a str,
}

/// One blob's lease, as the answers storage gave showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Lease {
    /// Acquired or renewed under `id`; `expires` is `None` for an infinite
    /// lease, else when storage may expire it: from the instant the last
    /// successful call was sent plus the acquire's duration (storage granted
    /// it after the send, so it cannot expire earlier) to the instant its
    /// answer was seen plus the duration.
    Held {
        id: String,
        duration: Option<Duration>,
        expires: Option<Expiry>,
        /// When the last write to the blob seen since was sent.
        written: Option<Instant>,
    },
    /// Released or broken: free at once, no hold.
    Free,
}

/// When storage may expire a lease: not before `earliest`, by `latest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expiry {
    earliest: Instant,
    latest: Instant,
}

/// The rule's state: each blob's lease (by request path, without query),
/// a pure state machine over the calls and answers it is told of.
#[derive(Debug, Default)]
pub struct Book {
    leases: HashMap<String, Lease>,
}

impl Book {
    /// Whether Azure would refuse `call` on `blob` at `now` with `409
    /// LeaseAlreadyPresent`, given a hold of `hold`: an acquire under
    /// another id than the lease's, once that lease may have expired
    /// unreleased (from its earliest expiry, which storage may already have
    /// passed) and until its latest expiry plus `hold`. An acquire under the
    /// expired lease's own id is let through, as a renew of it would be.
    pub fn refuses(&self, blob: &str, call: &Call<'_>, now: Instant, hold: Duration) -> bool {
        if call.action != Some("acquire") {
            return false;
        }
        match self.leases.get(blob) {
            Some(Lease::Held {
                id,
                expires: Some(expires),
                ..
            }) => {
                now >= expires.earliest
                    && now < expires.latest + hold
                    && call.proposed != Some(id.as_str())
            }
            _ => false,
        }
    }

    /// Whether Azure would refuse `call` on `blob` as a renewal of a lease
    /// that had expired when its blob was written: a renew under the
    /// lease's own id, after a write sent once the lease had expired for
    /// sure (its latest expiry). A write while it may still have been held
    /// changes nothing.
    pub fn refuses_renewal(&self, blob: &str, call: &Call<'_>) -> bool {
        if call.action != Some("renew") {
            return false;
        }
        match self.leases.get(blob) {
            Some(Lease::Held {
                id,
                expires: Some(expires),
                written: Some(written),
                ..
            }) => call.lease_id == Some(id.as_str()) && *written >= expires.latest,
            _ => false,
        }
    }

    /// Notes that `call` on `blob` was sent to storage at `at`, whether or
    /// not its answer is ever seen (a client killed with its request in
    /// flight): a renew of the held lease may have extended it, so storage
    /// expires it no earlier than `at` plus its duration, and the hold
    /// lasts until that much later at least.
    pub fn forwarded(&mut self, blob: &str, call: &Call<'_>, at: Instant) {
        if !matches!(call.action, Some("renew" | "acquire")) {
            return;
        }
        if let Some(Lease::Held {
            id,
            duration: Some(duration),
            expires: Some(expires),
            ..
        }) = self.leases.get_mut(blob)
        {
            let own = call.lease_id.or(call.proposed) == Some(id.as_str());
            if own {
                expires.latest = expires.latest.max(at + *duration);
            }
        }
    }

    /// Notes storage's answer `status` to `call` on `blob`, sent and seen
    /// at `now`.
    pub fn answered(&mut self, blob: &str, call: &Call<'_>, status: u16, now: Instant) {
        self.answered_sent(blob, call, status, now, now);
    }

    /// Notes storage's answer `status` to `call` on `blob`, sent to storage
    /// at `sent` and seen at `now`.
    pub fn answered_sent(
        &mut self,
        blob: &str,
        call: &Call<'_>,
        status: u16,
        sent: Instant,
        now: Instant,
    ) {
        if !(200..300).contains(&status) {
            return;
        }
        if call.method == "DELETE" && call.action.is_none() {
            self.leases.remove(blob);
            return;
        }
        if call.method == "PUT" && call.action.is_none() {
            if let Some(Lease::Held { written, .. }) = self.leases.get_mut(blob) {
                *written = Some(sent);
            }
            return;
        }
        let held = |id: &str, duration: Option<Duration>| Lease::Held {
            id: id.to_owned(),
            duration,
            expires: duration.map(|d| Expiry {
                earliest: sent + d,
                latest: now + d,
            }),
            written: None,
        };
        match call.action {
            Some("acquire") => {
                let Some(id) = call.proposed else { return };
                let duration = call
                    .duration
                    .and_then(|s| u64::try_from(s).ok())
                    .map(Duration::from_secs);
                self.leases.insert(blob.to_owned(), held(id, duration));
            }
            Some("renew") => {
                if let (Some(Lease::Held { id, duration, .. }), Some(renewed)) =
                    (self.leases.get(blob), call.lease_id)
                {
                    if id == renewed {
                        let lease = held(renewed, *duration);
                        self.leases.insert(blob.to_owned(), lease);
                    }
                }
            }
            Some("change") => {
                if let (Some(Lease::Held { id, .. }), Some(to)) =
                    (self.leases.get_mut(blob), call.proposed)
                {
                    to.clone_into(id);
                }
            }
            Some("release" | "break") => {
                self.leases.insert(blob.to_owned(), Lease::Free);
            }
            _ => {}
        }
    }
}

/// The rules, shared by the proxies they are applied to: a [`Book`], the
/// hold, and how many calls they refused.
#[derive(Clone, Debug)]
pub struct AzureHold {
    hold: Duration,
    state: Arc<Mutex<(Book, Refused)>>,
}

/// How many calls the rules refused.
#[derive(Clone, Copy, Debug, Default)]
struct Refused {
    acquires: usize,
    renewals: usize,
}

/// Which rule refuses a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// An acquire within the hold after an unreleased expiry.
    Held,
    /// A renewal of a lease that expired before its blob was written.
    ExpiredAndWritten,
}

impl AzureHold {
    /// A rule that refuses an acquire of a lease that expired unreleased
    /// until `hold` after the expiry.
    pub fn new(hold: Duration) -> AzureHold {
        AzureHold {
            hold,
            state: Arc::new(Mutex::new((Book::default(), Refused::default()))),
        }
    }

    /// The hold after an unreleased expiry.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// How many acquires it refused so far.
    pub fn refused(&self) -> usize {
        self.lock().1.acquires
    }

    /// How many renewals of a lease that expired before its blob was
    /// written it refused so far.
    pub fn refused_renewals(&self) -> usize {
        self.lock().1.renewals
    }

    /// Which rule refuses `call` on `blob` now, if any; counts a refusal.
    pub(crate) fn refusal(&self, blob: &str, call: &Call<'_>, now: Instant) -> Option<Refusal> {
        let mut state = self.lock();
        if state.0.refuses(blob, call, now, self.hold) {
            state.1.acquires += 1;
            Some(Refusal::Held)
        } else if state.0.refuses_renewal(blob, call) {
            state.1.renewals += 1;
            Some(Refusal::ExpiredAndWritten)
        } else {
            None
        }
    }

    /// Notes that `call` on `blob` was sent to storage at `at`.
    pub(crate) fn forwarded(&self, blob: &str, call: &Call<'_>, at: Instant) {
        self.lock().0.forwarded(blob, call, at);
    }

    /// Notes storage's answer to `call` on `blob`, sent at `sent` and seen
    /// at `now`.
    pub(crate) fn answered(
        &self,
        blob: &str,
        call: &Call<'_>,
        status: u16,
        sent: Instant,
        now: Instant,
    ) {
        self.lock().0.answered_sent(blob, call, status, sent, now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Book, Refused)> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The blob a request target names: its path, without the query.
pub fn blob_of(target: &str) -> &str {
    target.split_once('?').map_or(target, |(path, _)| path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOB: &str = "/devstoreaccount1/c/lease";
    const HOLD: Duration = Duration::from_secs(30);
    const D: Duration = Duration::from_secs(15);
    const TICK: Duration = Duration::from_millis(1);

    fn call<'a>(action: &'a str, lease_id: Option<&'a str>, proposed: Option<&'a str>) -> Call<'a> {
        Call {
            action: Some(action),
            lease_id,
            proposed,
            duration: (action == "acquire").then_some(15),
            method: "PUT",
        }
    }

    fn acquire(id: &str) -> Call<'_> {
        call("acquire", None, Some(id))
    }

    /// A book where `a` acquired the lease at `t0`.
    fn acquired_by_a(t0: Instant) -> Book {
        let mut book = Book::default();
        book.answered(BLOB, &acquire("a"), 201, t0);
        book
    }

    #[test]
    fn an_acquire_after_an_unreleased_expiry_is_refused_until_the_hold_has_passed() {
        let t0 = Instant::now();
        let book = acquired_by_a(t0);
        let refused = |at: Duration| book.refuses(BLOB, &acquire("b"), t0 + at, HOLD);
        assert!(
            !refused(D.saturating_sub(TICK)),
            "still leased: storage answers"
        );
        assert!(refused(D));
        assert!(refused((D + HOLD).saturating_sub(TICK)));
        assert!(!refused(D + HOLD));
    }

    /// Storage grants a lease between the call's send and its answer, and
    /// may expire it from the send plus the duration: an acquire then is
    /// refused, though the answer came later.
    #[test]
    fn the_hold_starts_at_the_earliest_expiry_the_send_allows() {
        let t0 = Instant::now();
        let mut book = Book::default();
        book.answered_sent(BLOB, &acquire("a"), 201, t0, t0 + D / 10);
        let between = t0 + D + D / 20;
        assert!(book.refuses(BLOB, &acquire("b"), between, HOLD));
        assert!(book.refuses(BLOB, &acquire("b"), t0 + D / 10 + D + HOLD / 2, HOLD));
        assert!(!book.refuses(BLOB, &acquire("b"), t0 + D / 10 + D + HOLD, HOLD));
    }

    /// A renew whose answer never comes back (its client killed with it in
    /// flight) may still have extended the lease: the hold counts from it.
    #[test]
    fn a_renew_sent_and_never_answered_extends_the_hold() {
        let t0 = Instant::now();
        let mut book = Book::default();
        book.answered(BLOB, &acquire("a"), 201, t0);
        book.forwarded(BLOB, &call("renew", Some("a"), None), t0 + D / 3);
        let past_first_hold = t0 + D + HOLD + D / 6;
        assert!(book.refuses(BLOB, &acquire("b"), past_first_hold, HOLD));
        assert!(!book.refuses(BLOB, &acquire("b"), t0 + D / 3 + D + HOLD, HOLD));
        // Another lease id's renew extends nothing.
        let mut other = Book::default();
        other.answered(BLOB, &acquire("a"), 201, t0);
        other.forwarded(BLOB, &call("renew", Some("x"), None), t0 + D / 3);
        assert!(!other.refuses(BLOB, &acquire("b"), past_first_hold, HOLD));
    }

    #[test]
    fn a_renew_moves_the_expiry_and_so_the_hold() {
        let t0 = Instant::now();
        let mut book = acquired_by_a(t0);
        book.answered(BLOB, &call("renew", Some("a"), None), 200, t0 + D / 3);
        let refused = |at: Duration| book.refuses(BLOB, &acquire("b"), t0 + at, HOLD);
        assert!(!refused(D));
        assert!(refused(D / 3 + D));
        assert!(refused((D / 3 + D + HOLD).saturating_sub(TICK)));
        assert!(!refused(D / 3 + D + HOLD));
    }

    #[test]
    fn a_released_or_broken_lease_is_free_at_once() {
        let t0 = Instant::now();
        for action in ["release", "break"] {
            let mut book = acquired_by_a(t0);
            book.answered(BLOB, &call(action, Some("a"), None), 200, t0 + D / 2);
            assert!(
                !book.refuses(BLOB, &acquire("b"), t0 + D / 2, HOLD),
                "{action}"
            );
            assert!(!book.refuses(BLOB, &acquire("b"), t0 + D, HOLD), "{action}");
        }
    }

    #[test]
    fn a_failed_call_changes_nothing() {
        let t0 = Instant::now();
        let mut book = acquired_by_a(t0);
        book.answered(BLOB, &call("release", Some("a"), None), 409, t0 + D / 2);
        book.answered(BLOB, &call("renew", Some("a"), None), 412, t0 + D / 2);
        book.answered(BLOB, &acquire("b"), 409, t0 + D / 2);
        assert!(book.refuses(BLOB, &acquire("b"), t0 + D, HOLD));
    }

    #[test]
    fn the_expired_lease_own_id_and_other_blobs_are_let_through() {
        let t0 = Instant::now();
        let book = acquired_by_a(t0);
        assert!(!book.refuses(BLOB, &acquire("a"), t0 + D, HOLD));
        assert!(!book.refuses("/devstoreaccount1/c/other", &acquire("b"), t0 + D, HOLD));
        assert!(!book.refuses(BLOB, &call("renew", Some("b"), None), t0 + D, HOLD));
    }

    #[test]
    fn a_changed_lease_is_held_under_its_new_id() {
        let t0 = Instant::now();
        let mut book = acquired_by_a(t0);
        book.answered(BLOB, &call("change", Some("a"), Some("c")), 200, t0 + D / 2);
        book.answered(BLOB, &call("renew", Some("c"), None), 200, t0 + D / 2);
        assert!(!book.refuses(BLOB, &acquire("c"), t0 + D / 2 + D, HOLD));
        assert!(book.refuses(BLOB, &acquire("a"), t0 + D / 2 + D, HOLD));
    }

    #[test]
    fn an_infinite_lease_never_expires_and_a_deleted_blob_has_no_lease() {
        let t0 = Instant::now();
        let mut book = Book::default();
        let infinite = Call {
            duration: Some(-1),
            ..acquire("a")
        };
        book.answered(BLOB, &infinite, 201, t0);
        assert!(!book.refuses(BLOB, &acquire("b"), t0 + HOLD * 10, HOLD));

        let mut book = acquired_by_a(t0);
        let delete = Call {
            action: None,
            lease_id: Some("a"),
            proposed: None,
            duration: None,
            method: "DELETE",
        };
        book.answered(BLOB, &delete, 202, t0 + D / 2);
        assert!(!book.refuses(BLOB, &acquire("b"), t0 + D, HOLD));
    }

    fn write() -> Call<'static> {
        Call {
            action: None,
            lease_id: None,
            proposed: None,
            duration: None,
            method: "PUT",
        }
    }

    #[test]
    fn a_renewal_of_a_lease_that_expired_before_its_blob_was_written_is_refused() {
        let t0 = Instant::now();
        let renew = call("renew", Some("a"), None);
        // Expired, nothing written: Azure renews it, as Azurite does.
        let mut book = acquired_by_a(t0);
        assert!(!book.refuses_renewal(BLOB, &renew));
        // Written while it may still have been held: still renewed.
        book.answered(BLOB, &write(), 201, t0 + D.saturating_sub(TICK));
        assert!(!book.refuses_renewal(BLOB, &renew));
        // Written once it had expired: refused, under its own id only.
        book.answered(BLOB, &write(), 201, t0 + D);
        assert!(book.refuses_renewal(BLOB, &renew));
        assert!(!book.refuses_renewal(BLOB, &call("renew", Some("b"), None)));
        assert!(!book.refuses_renewal(BLOB, &acquire("a")));
        // A write that failed changes nothing.
        let mut book = acquired_by_a(t0);
        book.answered(BLOB, &write(), 412, t0 + D * 2);
        assert!(!book.refuses_renewal(BLOB, &renew));
        // A renewal answered before the write moved the expiry past it.
        let mut book = acquired_by_a(t0);
        book.answered(BLOB, &renew, 200, t0 + D / 2);
        book.answered(BLOB, &write(), 201, t0 + D);
        assert!(!book.refuses_renewal(BLOB, &renew));
    }

    #[test]
    fn a_blob_is_its_path_without_the_query() {
        assert_eq!(blob_of("/a/c/b?comp=lease&sig=x"), "/a/c/b");
        assert_eq!(blob_of("/a/c/b"), "/a/c/b");
    }
}
