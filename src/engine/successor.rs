//! Planned handover to a preferred successor (with
//! [`MutexOptions::priority`](crate::MutexOptions::priority) set).
//!
//! - **Candidate side.** While another instance holds the lease, this
//!   instance advertises itself beside the lease: its holder name, its
//!   priority and the lease id that its acquire attempts of this round
//!   propose, on a record that the store times (a leased blob on Azure),
//!   kept alive every renew interval. It starts advertising after its first
//!   attempt found the lease held, so an instance that acquires a free lease
//!   sends nothing more, and withdraws when the round ends (once the
//!   advertising call then in flight has been answered: a record it was
//!   still creating is withdrawn too, not left to expire).
//! - **Leader side.** Once per renew interval the leader lists the live
//!   candidates. When one has a strictly higher priority than its own, the
//!   term stops with [`StopReason::Handover`](crate::term::StopReason::Handover)
//!   (the tasks drain exactly as for any stop) and the lease is changed to
//!   the candidate's proposed id instead of being released: no third
//!   instance can take it in between, and the candidate's next attempt finds
//!   the lease its own (an acquire with the id that holds the lease
//!   succeeds) and stamps the next epoch.
//! - **Safety** rests on the same rules as any stop: the lease changes hands
//!   only after every task of the term has stopped. A candidate that died
//!   after it was listed leaves the lease held under an id that nobody
//!   proposes: it expires, and then anyone may lead. A change that fails
//!   for a transient reason is tried once more, then the lease is released
//!   instead (a change that took effect unseen makes that release fail,
//!   harmlessly).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;
use tracing::{debug, trace, warn};

use super::handover::{after_change, successor, AfterChange, Changed};
use super::Engine;
use crate::backoff::backoff;
use crate::bounded::bounded;
use crate::error::{Chain, Error};
use crate::store::{Acquire, Candidate, LeaseId, LeaseStore};

/// The first and the longest wait between advertising attempts that failed.
const ADVERTISE_RETRY_FIRST: Duration = Duration::from_millis(200);
const ADVERTISE_RETRY_MAX: Duration = Duration::from_secs(5);

/// The candidate a leader of priority `mine`, named `me`, hands over to
/// (the rule: [`successor`]).
pub(crate) fn choose<'c>(
    candidates: &'c [Candidate],
    me: &str,
    mine: i64,
) -> Option<&'c Candidate> {
    let named = candidates.iter().map(|c| (c.holder.as_str(), c.priority));
    successor(named, me, mine).and_then(|i| candidates.get(i))
}

impl<S: LeaseStore> Engine<'_, S> {
    /// Advertises `candidate` once the lease was found held, and keeps the
    /// record alive every renew interval, until `ended`: a call in flight
    /// then is not dropped but answered (within the request timeout), so
    /// that the withdraw after it sees what it did. Returns a fatal error,
    /// or `None` once ended.
    pub(super) async fn advertise(
        &self,
        candidate: &Candidate,
        record: LeaseId,
        held: &Notify,
        advertised: &AtomicBool,
        ended: &CancellationToken,
    ) -> Option<Error> {
        tokio::select! {
            () = held.notified() => {}
            () = ended.cancelled() => return None,
        }
        let (duration, limit) = (self.options.lease_duration, self.options.request_timeout);
        let mut live = false;
        let mut failures: u32 = 0;
        while !ended.is_cancelled() {
            advertised.store(true, Ordering::SeqCst);
            let result = if live {
                let kept = self.store.keep_advertising(record, &candidate.holder);
                bounded("keep advertising", limit, kept)
                    .await
                    .map(|()| Acquire::Acquired)
            } else {
                let call = self.store.advertise(record, candidate, duration);
                bounded("advertise", limit, call).await
            };
            let wait = match result {
                Ok(Acquire::Acquired) => {
                    if !live {
                        debug!(holder = %self.holder, priority = candidate.priority, "advertising as a candidate");
                    }
                    (live, failures) = (true, 0);
                    self.options.effective_renew_interval()
                }
                Ok(Acquire::Held) => {
                    warn!(holder = %self.holder, "another instance advertises under this holder name; trying again later");
                    self.options.effective_renew_interval()
                }
                Err(Error::LeaseLost(_)) => {
                    // The record expired and was taken, or is gone: anew.
                    live = false;
                    ADVERTISE_RETRY_FIRST
                }
                Err(e) if e.is_fatal() => return Some(e),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = backoff(ADVERTISE_RETRY_FIRST, ADVERTISE_RETRY_MAX, failures);
                    warn!(holder = %self.holder, error = %Chain(&e), failures, retry_in = ?wait, "advertising as a candidate failed");
                    wait
                }
            };
            tokio::select! {
                () = sleep(wait) => {}
                () = ended.cancelled() => {}
            }
        }
        None
    }

    /// While leading with a priority: lists the candidates once per renew
    /// interval and completes with the proposed id of the one to hand over
    /// to. Never completes without a priority.
    pub(super) async fn successor(&self) -> LeaseId {
        let Some(mine) = self.options.priority else {
            return std::future::pending().await;
        };
        let interval = self.options.effective_renew_interval();
        loop {
            sleep(interval).await;
            let listed = bounded(
                "list candidates",
                self.options.request_timeout,
                self.store.candidates(),
            )
            .await;
            match listed {
                Ok(candidates) => {
                    if let Some(next) = choose(&candidates, &self.holder, mine) {
                        debug!(
                            holder = %self.holder,
                            priority = mine,
                            successor = %next.holder,
                            successor_priority = next.priority,
                            "a candidate with a higher priority waits; handing over"
                        );
                        return next.proposed;
                    }
                    trace!(holder = %self.holder, candidates = candidates.len(), "no candidate to hand over to");
                }
                Err(e) => {
                    warn!(holder = %self.holder, error = %Chain(&e), "could not list the candidates");
                }
            }
        }
    }

    /// Hands the lease over to `to` once the term's tasks have stopped:
    /// Change Lease, tried again once on a transient failure; when it does
    /// not succeed, release instead, so that the lease does not wait out
    /// its expiry.
    pub(super) async fn hand_over(&self, lease: LeaseId, to: LeaseId) {
        let limit = self.options.request_timeout;
        let mut attempt = 1;
        loop {
            let changed = match bounded("change", limit, self.store.change(lease, to)).await {
                Ok(()) => {
                    debug!(holder = %self.holder, "handed the lease over to the candidate");
                    Changed::Done
                }
                Err(e @ Error::LeaseLost(_)) => {
                    debug!(holder = %self.holder, error = %Chain(&e), "the lease was not ours any more; nothing to hand over");
                    Changed::NotOurs
                }
                Err(e) => {
                    warn!(holder = %self.holder, error = %Chain(&e), attempt, "could not hand the lease over");
                    Changed::Failed
                }
            };
            match after_change(attempt, changed) {
                AfterChange::Stop => return,
                AfterChange::Again => attempt += 1,
                AfterChange::Release => break,
            }
        }
        self.release(lease, limit).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(holder: &str, priority: i64) -> Candidate {
        Candidate::new(holder, priority, LeaseId::new())
    }

    #[test]
    fn only_a_strictly_higher_priority_is_chosen() {
        let list = [c("a", 1), c("b", 0)];
        assert!(choose(&list, "me", 1).is_none());
        assert!(choose(&list, "me", 5).is_none());
        assert_eq!(choose(&list, "me", 0).unwrap().holder, "a");
        assert!(choose(&[], "me", i64::MIN).is_none());
    }

    #[test]
    fn the_highest_priority_then_the_smallest_name_wins() {
        let list = [c("d", 2), c("c", 3), c("b", 3), c("a", -1)];
        assert_eq!(choose(&list, "me", 0).unwrap().holder, "b");
        assert_eq!(choose(&list, "me", -5).unwrap().holder, "b");
        let reversed: Vec<Candidate> = list.iter().rev().cloned().collect();
        assert_eq!(choose(&reversed, "me", 0).unwrap().holder, "b");
    }

    #[test]
    fn its_own_record_never_counts() {
        let list = [c("me", 9), c("other", 1)];
        assert_eq!(choose(&list, "me", 0).unwrap().holder, "other");
        assert!(choose(&list, "me", 1).is_none());
    }

    #[test]
    fn a_candidate_debug_shows_no_lease_id() {
        let candidate = c("x", 1);
        let shown = format!("{candidate:?}");
        assert!(!shown.contains(&candidate.proposed.to_string()), "{shown}");
        assert!(shown.contains("priority: 1"), "{shown}");
    }
}
