//! The campaign: acquire or wait, lead a term, pause, campaign again, until
//! the caller cancels; and the acquire it starts each round with, which
//! advertises this instance as a candidate while another holds the lease
//! when it has a priority (see `successor`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{sleep, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, trace, warn, Instrument};

use super::first_contact;
use super::{Engine, Limits, Term, ACQUIRE_BACKOFF_MAX};
use crate::backoff::{backoff, Jitter};
use crate::bounded::bounded;
use crate::engine::leadership::Leadership;
use crate::engine::metrics::Attempt;
use crate::error::{Chain, Error, Result};
use crate::options::ABORT_WAIT;
use crate::store::{Acquire, Candidate, LeaseId, LeaseStore};

/// The least time an acquire attempt gets while storage has never
/// answered, however close the first-contact bound.
const CONTACT_ATTEMPT_MIN: Duration = Duration::from_millis(100);

impl<S: LeaseStore> Engine<'_, S> {
    pub(crate) async fn run(&self, token: CancellationToken) -> Result<()> {
        self.campaign_all(token).instrument(self.span()).await
    }

    async fn campaign_all(&self, token: CancellationToken) -> Result<()> {
        let mut jitter = Jitter::new(self.options.jitter_seed, self.options.acquire_jitter);
        debug!(holder = %self.holder, "campaign started");
        let campaigning = self.metrics.vitals().campaign();
        let result = self.campaign(&token, &mut jitter).await;
        self.state.send_replace(Leadership::Stopped);
        drop(campaigning);
        match &result {
            Ok(()) => debug!(holder = %self.holder, "campaign stopped"),
            Err(e) => {
                // The caller gets the error itself; logging it loudly too would show it twice.
                debug!(holder = %self.holder, error = %Chain(e), "campaign stopped by a fatal error");
            }
        }
        result
    }

    async fn campaign(&self, token: &CancellationToken, jitter: &mut Jitter) -> Result<()> {
        // Aborted tasks of a term whose campaign was dropped end at their
        // next await; one that blocks its thread keeps this mutex from
        // leading again in this process.
        self.lingering.settle(ABORT_WAIT).await?;
        let now = Instant::now();
        let mut limits = Limits {
            give_up_at: self.options.acquire_timeout.map(|t| now + t),
            contact_by: self
                .contact
                .and_then(|c| c.give_up_at(now, self.options.first_contact_timeout)),
        };
        loop {
            let Some((lease, deadline)) = self.acquire(token, jitter, limits).await? else {
                return Ok(());
            };
            limits = Limits::default();
            let first = self.options.effective_renew_interval();
            let pause = match self.lead(lease, deadline, first, token).await? {
                Term::Shutdown => return Ok(()),
                Term::Failed => jitter.apply(self.options.failure_backoff),
                Term::Ended(reason) => {
                    trace!(holder = %self.holder, %reason, "campaigning again after stepping down");
                    self.options.pause_after_term()
                }
                Term::Unstamped(_) => self.options.pause_after_term(),
            };
            if !self.pause(token, pause).await {
                return Ok(());
            }
        }
    }

    /// Tries until the lease is ours; `None` when cancelled first. Past
    /// its `limits`, the campaign ends (see `acquire_as`). With a priority,
    /// advertises this instance while another holds the lease, under the id
    /// the attempts propose, and withdraws when the round ends: after the
    /// advertising call in flight then has been answered, so that the
    /// withdraw finds the record that call made.
    pub(super) async fn acquire(
        &self,
        token: &CancellationToken,
        jitter: &mut Jitter,
        limits: Limits,
    ) -> Result<Option<(LeaseId, Instant)>> {
        let proposed = LeaseId::new();
        let Some(priority) = self.options.priority else {
            return self.acquire_as(proposed, token, jitter, limits, None).await;
        };
        let candidate = Candidate::new(&*self.holder, priority, proposed);
        let record = LeaseId::new();
        let (held, advertised) = (Notify::new(), AtomicBool::new(false));
        // A fatal error while advertising ends the attempts; the end of the
        // attempts ends the advertising, once its call in flight answered.
        let (round, ended) = (token.child_token(), CancellationToken::new());
        let attempts = async {
            let acquired = self
                .acquire_as(proposed, &round, jitter, limits, Some(&held))
                .await;
            ended.cancel();
            acquired
        };
        let advertising = async {
            let fatal = self
                .advertise(&candidate, record, &held, &advertised, &ended)
                .await;
            if fatal.is_some() {
                round.cancel();
            }
            fatal
        };
        let (acquired, fatal) = tokio::join!(attempts, advertising);
        let acquired = match (acquired, fatal) {
            (acquired, None) | (acquired @ Err(_), Some(_)) => acquired,
            (Ok(Some((lease, _))), Some(e)) => {
                self.release(lease, self.options.request_timeout).await;
                Err(e)
            }
            (Ok(None), Some(e)) => Err(e),
        };
        if advertised.load(Ordering::SeqCst) {
            let limit = self.options.request_timeout;
            match bounded("withdraw", limit, self.store.withdraw(record, &self.holder)).await {
                Ok(()) => trace!(holder = %self.holder, "withdrew as a candidate"),
                Err(e) => {
                    debug!(holder = %self.holder, error = %Chain(&e), "could not withdraw as a candidate; the record will expire");
                }
            }
        }
        acquired
    }

    /// Tries until the lease is ours under `proposed`; `None` when
    /// cancelled first. Past `limits.give_up_at`, the first attempt that
    /// does not acquire ends the campaign; past `limits.contact_by`, the
    /// first that fails while storage has never answered does. `held` is
    /// told each time another instance holds the lease.
    pub(super) async fn acquire_as(
        &self,
        proposed: LeaseId,
        token: &CancellationToken,
        jitter: &mut Jitter,
        limits: Limits,
        held: Option<&Notify>,
    ) -> Result<Option<(LeaseId, Instant)>> {
        let Limits {
            give_up_at,
            mut contact_by,
        } = limits;
        let mut failures: u32 = 0;
        loop {
            if token.is_cancelled() {
                return Ok(None);
            }
            let sent = Instant::now();
            // While storage has never answered, no attempt outlasts the
            // first-contact bound: the campaign ends at it, not a request
            // timeout later.
            let limit = contact_by.map_or(self.options.request_timeout, |by| {
                self.options
                    .request_timeout
                    .min(by.saturating_duration_since(sent))
                    .max(CONTACT_ATTEMPT_MIN)
            });
            let attempt = tokio::select! {
                () = token.cancelled() => {
                    // The dropped request may have acquired the lease on the
                    // server already: give it back rather than leave it to expire.
                    // Bounded short so that shutdown stays quick.
                    let limit = self.options.request_timeout.min(Duration::from_secs(1));
                    self.give_back(proposed, limit).await;
                    return Ok(None);
                }
                r = bounded(
                    "acquire",
                    limit,
                    self.store.acquire(proposed, self.options.lease_duration),
                ) => r,
            };
            self.metrics.vitals().heard(sent, attempt.as_ref().err());
            if attempt.is_ok() {
                if let Some(contact) = self.contact {
                    contact.answered();
                }
                contact_by = None;
            }
            let (wait, mut failed) = match attempt {
                Ok(Acquire::Acquired) => {
                    self.metrics.attempt(Attempt::Acquired);
                    let deadline =
                        sent + self.options.lease_duration - self.options.effective_safety_margin();
                    return Ok(Some((proposed, deadline)));
                }
                Ok(Acquire::Held) => {
                    self.metrics.attempt(Attempt::Held);
                    failures = 0;
                    trace!(holder = %self.holder, "lease held by another instance");
                    if let Some(held) = held {
                        held.notify_one();
                    }
                    if !self.poll_leader(token).await {
                        return Ok(None);
                    }
                    (self.options.acquire_retry, None)
                }
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => {
                    if let Some(leader) = self.leader {
                        leader.unanswered(Instant::now(), self.options.lease_duration);
                    }
                    self.metrics.attempt(Attempt::Error);
                    failures = failures.saturating_add(1);
                    let wait = backoff(
                        self.options.acquire_retry,
                        self.options.acquire_retry.max(ACQUIRE_BACKOFF_MAX),
                        failures,
                    );
                    warn!(holder = %self.holder, error = %Chain(&e), failures, retry_in = ?wait, "acquire failed");
                    (wait, Some(e))
                }
            };
            let mut wait = jitter.apply(wait);
            if let (Some(by), Some(_)) = (contact_by, &failed) {
                let now = Instant::now();
                if now < by {
                    wait = wait.min(by - now);
                } else if let Some(last) = failed.take() {
                    return Err(self.no_first_contact(proposed, last).await);
                }
            }
            if let Some(give_up_at) = give_up_at {
                let now = Instant::now();
                if now >= give_up_at {
                    // The acquire may have reached storage before it failed.
                    if failed.is_some() {
                        self.give_back(proposed, self.options.request_timeout).await;
                    }
                    return Err(failed.unwrap_or(Error::NotAcquired {
                        after: self.options.acquire_timeout.unwrap_or_default(),
                    }));
                }
                wait = wait.min(give_up_at - now);
            }
            if !self.pause(token, wait).await {
                return Ok(None);
            }
        }
    }

    /// Gives back a lease that an attempt whose outcome is unknown may
    /// have taken. Not while storage has never answered this mutex: such an
    /// attempt almost certainly took nothing, the release would cost one
    /// more request timeout on a silent endpoint, and a lease taken all the
    /// same expires within the lease duration.
    async fn give_back(&self, proposed: LeaseId, limit: Duration) {
        if self.contact.is_some_and(|c| !c.has_answered()) {
            debug!(holder = %self.holder, "storage never answered: no lease to give back");
            return;
        }
        match bounded("release", limit, self.store.release(proposed)).await {
            Ok(()) => debug!(holder = %self.holder, "gave back what the attempt may have taken"),
            Err(e) => debug!(
                holder = %self.holder,
                error = %Chain(&e),
                "could not give back what the attempt may have taken; if it took the lease, \
                 the lease expires"
            ),
        }
    }

    /// Storage has not answered since the campaign started, and the
    /// first-contact timeout has run out: gives the lease back (the last
    /// acquire may have reached storage) and returns the error that ends
    /// the campaign, with the last attempt's.
    async fn no_first_contact(&self, proposed: LeaseId, last: Error) -> Error {
        // The caller gets the error itself: not logged loudly here too.
        debug!(holder = %self.holder, error = %Chain(&last), "storage has not answered since the campaign started; giving up");
        self.give_back(proposed, self.options.request_timeout).await;
        let after = self.options.first_contact_timeout.unwrap_or_default();
        first_contact::failed(self.store.name(), after, last)
    }

    /// Inspects the lease for the leader watch when somebody watches and no
    /// poll was sent within a renew interval; `false` when cancelled first.
    async fn poll_leader(&self, token: &CancellationToken) -> bool {
        let Some(leader) = self.leader else {
            return true;
        };
        let sent = Instant::now();
        if !leader.due(sent, self.options.effective_renew_interval()) {
            return true;
        }
        let answer = tokio::select! {
            () = token.cancelled() => return false,
            r = bounded("inspect", self.options.request_timeout, self.store.inspect()) => r,
        };
        leader.polled(sent, &answer);
        if answer.is_err() {
            leader.unanswered(Instant::now(), self.options.lease_duration);
        }
        true
    }

    /// Waits; `false` when cancelled first.
    pub(super) async fn pause(&self, token: &CancellationToken, wait: Duration) -> bool {
        tokio::select! {
            () = token.cancelled() => false,
            () = sleep(wait) => true,
        }
    }
}
