//! What a lease set's run has decided as it goes: the set-wide error that
//! ends [`BlobLeaseSet::run`](crate::BlobLeaseSet::run) (after every
//! partition is drained and released), and the partitions that cannot be
//! led, skipped for a while so that they do not disturb the others.

use std::collections::BTreeMap;
use std::sync::MutexGuard;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::error;

use super::Shared;
use crate::backoff::backoff;
use crate::error::{Chain, Error};
use crate::store::LeaseSetStore;

/// The longest wait before a partition whose term failed fatally (its
/// epoch garbled, storage refusing the request as malformed) is tried again;
/// the first wait is the mutex options' `failure_backoff`, doubled each time.
const SKIP_MAX: Duration = Duration::from_secs(300);

/// What ends a run, and which partitions are not claimed for now.
#[derive(Default)]
pub(super) struct Fate {
    /// The error that ends [`BlobLeaseSet::run`](crate::BlobLeaseSet::run), once one came.
    pub(super) fatal: Option<Error>,
    /// The run's own token, cancelled on a fatal error.
    pub(super) stop: Option<CancellationToken>,
    /// Partitions whose term failed fatally: not claimed before the
    /// instant, with the number of failures in a row.
    skipped: BTreeMap<String, (Instant, u32)>,
}

impl<S: LeaseSetStore> Shared<S> {
    pub(super) fn fate(&self) -> MutexGuard<'_, Fate> {
        self.fate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends the run with `error` (the first one wins): every partition is
    /// drained and released, then [`BlobLeaseSet::run`] returns it.
    pub(super) fn end_run(&self, error: Error) {
        let mut fate = self.fate();
        fate.fatal.get_or_insert(error);
        if let Some(stop) = &fate.stop {
            stop.cancel();
        }
    }

    /// Skips `partition` for a while after its term failed with `error`.
    pub(super) fn skip(&self, partition: &str, error: &Error) {
        let base = self.options.mutex.failure_backoff;
        let mut fate = self.fate();
        let failures = fate.skipped.get(partition).map_or(0, |s| s.1) + 1;
        let wait = backoff(base, SKIP_MAX.max(base), failures);
        fate.skipped
            .insert(partition.to_owned(), (Instant::now() + wait, failures));
        error!(holder = %self.holder, %partition, error = %Chain(error), failures, retry_in = ?wait, "the partition cannot be led; skipping it");
    }

    /// Whether `partition` may be claimed now.
    pub(super) fn claimable(&self, partition: &str) -> bool {
        self.fate()
            .skipped
            .get(partition)
            .is_none_or(|(until, _)| Instant::now() >= *until)
    }
}

/// A fatal error that concerns one partition's blob only: its epoch
/// cannot be increased, or storage refused a request on it as malformed.
pub(super) fn is_partition_fault(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidEpoch { .. } | Error::Storage { status: 400, .. }
    )
}
