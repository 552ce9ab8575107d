//! One term and no more: what a run-once call and a guard lead. The
//! campaign is the engine's own (the same acquire, stamp, term, stop and
//! report); it ends after the first term whose task ran instead of
//! campaigning again.

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Engine, Limits, Term};
use crate::backoff::Jitter;
use crate::error::{Error, Result};
use crate::options::ABORT_WAIT;
use crate::store::LeaseStore;

/// How hard a one-term campaign tries to lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempts {
    /// Until it leads, the caller cancels, or the campaign's limits
    /// (`acquire_timeout`, `first_contact_timeout`) end it.
    UntilLed,
    /// One acquire attempt: a lease held by another instance ends it.
    One,
}

impl<S: LeaseStore> Engine<'_, S> {
    /// Campaigns until this instance leads, and leads one term whose task
    /// ran; `Ok(true)` once that term is over (reported, its lease released
    /// or left to expire), `Ok(false)` when the caller cancelled first or,
    /// with [`Attempts::One`], the lease was held. The campaign's limits
    /// (`acquire_timeout`, `first_contact_timeout`) count from `started`:
    /// a caller that talked to storage before campaigning (a run-once
    /// call's read of its record) shares them.
    ///
    /// # Errors
    ///
    /// As a campaign: a fatal error, [`Error::TaskNotStopped`], and with
    /// [`Attempts::One`] a failed attempt's error, the stamp's among them
    /// when the lease was acquired but the term could not be stamped (the
    /// lease is given back).
    pub(crate) async fn one_term(
        &self,
        token: &CancellationToken,
        attempts: Attempts,
        started: Instant,
    ) -> Result<bool> {
        self.one_term_here(token, attempts, started)
            .instrument(self.span())
            .await
    }

    async fn one_term_here(
        &self,
        token: &CancellationToken,
        attempts: Attempts,
        started: Instant,
    ) -> Result<bool> {
        // Counted as a campaign for its health, as long as it runs.
        let _campaigning = self.metrics.vitals().campaign();
        self.lingering.settle(ABORT_WAIT).await?;
        let mut jitter = Jitter::new(self.options.jitter_seed, self.options.acquire_jitter);
        let now = started;
        let limits = Limits {
            give_up_at: match attempts {
                Attempts::One => Some(now),
                Attempts::UntilLed => self.options.acquire_timeout.map(|t| now + t),
            },
            contact_by: self
                .contact
                .and_then(|c| c.give_up_at(now, self.options.first_contact_timeout)),
        };
        loop {
            let acquired = match self.acquire(token, &mut jitter, limits).await {
                Ok(Some(acquired)) => acquired,
                Ok(None) => return Ok(false),
                Err(Error::NotAcquired { .. }) if attempts == Attempts::One => return Ok(false),
                Err(e) => return Err(e),
            };
            let (lease, deadline) = acquired;
            let first = self.options.effective_renew_interval();
            match self.lead(lease, deadline, first, token).await? {
                Term::Unstamped(_) if token.is_cancelled() => return Ok(false),
                // The lease was this instance's: the stamp's failure is the
                // attempt's, not a lease held by another.
                Term::Unstamped(Some(e)) if attempts == Attempts::One => return Err(e),
                Term::Unstamped(None) if attempts == Attempts::One => return Ok(false),
                Term::Unstamped(_) => {
                    if !self.pause(token, self.options.pause_after_term()).await {
                        return Ok(false);
                    }
                }
                Term::Shutdown | Term::Failed | Term::Ended(_) => return Ok(true),
            }
        }
    }
}
