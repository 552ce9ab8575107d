//! What a set tells when its membership term ends: of the partition terms
//! that ended with it, how many had their release answered, and how many
//! did not. A release can fail or time out (slow storage, where thousands
//! of releases queue for the client's slots), a task may not stop, a term
//! may be dropped: each such partition waits for its lease's expiry before
//! another instance owns it, unless storage acted on a release whose answer
//! never came. One line says how many.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Span};

/// The partition terms that end once the membership term is stopping,
/// counted as they end and let go of their leases. Told when the last of
/// them and the balancer are gone (on drop), in the span it was made in:
/// the membership term's, which names the member lease.
pub(super) struct Leaving {
    holder: Arc<str>,
    span: Span,
    /// The membership term's token: cancelled once that term stops.
    membership: CancellationToken,
    ended: AtomicUsize,
    released: AtomicUsize,
}

impl Leaving {
    pub(super) fn new(holder: Arc<str>, membership: CancellationToken) -> Self {
        Leaving {
            holder,
            span: Span::current(),
            membership,
            ended: AtomicUsize::new(0),
            released: AtomicUsize::new(0),
        }
    }

    /// A partition term ended: counted when the membership term is
    /// stopping, as `counted` then records for [`released`](Self::released).
    pub(super) fn ended(&self, counted: &AtomicBool) {
        if self.membership.is_cancelled() {
            self.ended.fetch_add(1, Ordering::Relaxed);
            counted.store(true, Ordering::Relaxed);
        }
    }

    /// The release of a partition term's lease was answered (`true`), or
    /// not: counted for a term [`ended`](Self::ended) counted.
    pub(super) fn released(&self, counted: &AtomicBool, released: bool) {
        if released && counted.load(Ordering::Relaxed) {
            self.released.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Leaving {
    fn drop(&mut self) {
        let (ended, released) = (*self.ended.get_mut(), *self.released.get_mut());
        if ended == 0 {
            return;
        }
        // The last holder may be a task dropped outside its span.
        let _entered = self.span.enter();
        let unanswered = ended - released;
        if unanswered == 0 {
            info!(
                holder = %self.holder,
                released,
                "the membership term ended: every partition lease it held was released"
            );
        } else {
            warn!(
                holder = %self.holder,
                released,
                unanswered,
                "the membership term ended: partition leases whose release was not answered \
                 (it failed or timed out, or their term could not release) are left to \
                 expire, unless storage acted on the release anyway; other instances own \
                 them once they are free"
            );
        }
    }
}
