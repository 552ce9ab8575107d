//! Whether storage has ever answered a mutex. Before it has, a failure is a
//! setting to fix until proven otherwise, and a campaign gives up after
//! [`MutexOptions::first_contact_timeout`](crate::MutexOptions::first_contact_timeout)
//! with [`Error::FirstContactFailed`]; after, an outage is retried for as
//! long as it lasts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;

/// Set once storage has answered an acquire attempt of the mutex.
#[derive(Debug, Default)]
pub(crate) struct FirstContact(AtomicBool);

impl FirstContact {
    /// Storage answered.
    pub(crate) fn answered(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether storage has ever answered.
    pub(crate) fn has_answered(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// When a campaign that starts `now` gives up if storage has not
    /// answered by then: `None` when it has answered already, or when
    /// `limit` is `None` (retry for ever).
    pub(crate) fn give_up_at(&self, now: Instant, limit: Option<Duration>) -> Option<Instant> {
        if self.has_answered() {
            return None;
        }
        limit.map(|limit| now + limit)
    }
}

/// The error that ends a campaign storage never answered within `after`,
/// with the last attempt's error.
pub(crate) fn failed(lease: String, after: Duration, last: Error) -> Error {
    Error::FirstContactFailed {
        lease,
        after,
        last: Box::new(last),
    }
}
