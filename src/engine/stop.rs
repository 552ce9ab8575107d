//! The end of a term: its tasks are asked to stop and given the grace
//! (renewing meanwhile while the lease is ours), aborted before the
//! deadline, the end is reported, and the lease released or handed over.

use std::future::Future;
use std::pin::Pin;

use tokio::time::{sleep_until, Instant};
use tracing::{debug, error, warn};

use super::handover::{ending, Ending};
use super::{fail_stop, joined_task, Deadline, Engine, RenewEnd, Running, Term, LOST_GRACE};
use crate::ending::{StopReason, TaskStop, TermReport};
use crate::error::{Chain, Error, Result};
use crate::options::{ABORT_WAIT, FAIL_STOP_SLACK, STOP_SLACK};
use crate::store::LeaseStore;

impl<S: LeaseStore> Engine<'_, S> {
    /// Stops the term's tasks (cancel, grace, abort), reports the end of the
    /// term, and releases the lease once nothing of the term runs.
    pub(super) async fn stop(
        &self,
        mut term: Running<'_>,
        stop: StopReason,
        mut failure: Option<String>,
        renewal: Pin<&mut impl Future<Output = RenewEnd>>,
    ) -> Result<Term> {
        let epoch = term.epoch;
        let _ = term.reason.set(stop);
        term.child.cancel();
        self.metrics.term_stopping(epoch);
        debug!(holder = %self.holder, epoch, reason = %stop, "stopping the leader task");
        let (stopped, lease_held) = self.drain(&mut term, stop, &mut failure, renewal).await;
        if failure.is_none() {
            failure = term.tasks.failure().map(|f| f.message);
        }
        let report = TermReport {
            epoch,
            reason: stop,
            tasks: stopped,
            failure,
        };
        term.guard.report(&report);
        let handing_over = stop == StopReason::Handover;
        let ending = ending(
            matches!(stopped, TaskStop::Returned | TaskStop::Aborted),
            lease_held,
            handing_over,
            term.successor,
        );
        if stopped == TaskStop::Stuck {
            if self.options.fail_stop {
                fail_stop::exit(epoch, "the leader task could not be aborted");
            }
            return Err(Error::TaskNotStopped);
        }
        if stopped == TaskStop::Unreleased && self.options.fail_stop {
            fail_stop::exit(
                epoch,
                "the guard was not released before the lease could expire",
            );
        }
        if let Some(guard) = term.fail_stop.take() {
            guard.disarm();
        }
        match ending {
            Ending::HandOver(to) => self.hand_over(term.lease, to).await,
            Ending::Release => {
                let released = self.release(term.lease, self.options.request_timeout).await;
                self.observer.released(released);
            }
            Ending::LeaveIt => {}
        }
        debug!(holder = %self.holder, epoch, "no longer leader");
        Ok(match stop {
            StopReason::Shutdown => Term::Shutdown,
            // A task that failed or stopped making progress (even while it
            // was stopping) backs off, so that a healthy instance takes over first.
            StopReason::Stalled | StopReason::Failed | StopReason::Panicked => Term::Failed,
            _ if report.failure.is_some() => Term::Failed,
            other => Term::Ended(other),
        })
    }

    /// Waits for the term's tasks after they were asked to stop: up to the
    /// grace (renewing meanwhile while the lease is still ours), then aborts
    /// what is left, at `deadline − STOP_SLACK` at the latest. Returns how the
    /// tasks ended and whether the lease is still ours to release; a failure
    /// of the leader task while it stopped is added to `failure`.
    ///
    /// A guard's term (`caller_holds`) whose lease is still ours waits for
    /// the guard's release instead of the grace: it renews for the grace,
    /// then stops renewing and waits until `deadline − STOP_SLACK`. A guard
    /// not released by then is [`TaskStop::Unreleased`]: the holder's code
    /// may still run, so the lease is left to expire.
    async fn drain(
        &self,
        term: &mut Running<'_>,
        stop: StopReason,
        failure: &mut Option<String>,
        mut renewal: Pin<&mut impl Future<Output = RenewEnd>>,
    ) -> (TaskStop, bool) {
        // While the lease is still ours and nothing is wrong with storage
        // or the task's progress, keep renewing while the tasks drain.
        let mut renewing = matches!(
            stop,
            StopReason::Shutdown
                | StopReason::Finished
                | StopReason::Failed
                | StopReason::Panicked
                | StopReason::Handover
        );
        let mut lease_held = stop != StopReason::LeaseLost;
        let mut leader_running = !term.leader.is_finished();
        // Waiting for a guard's holder, who alone can end its code.
        let mut holding = self.caller_holds.is_some() && lease_held && leader_running;
        let epoch = term.epoch;
        let grace = if stop == StopReason::LeaseLost {
            self.options.stop_grace.min(LOST_GRACE)
        } else {
            self.options.stop_grace
        };
        let mut grace_end = Instant::now() + grace;
        // The abort lands before the deadline, whatever the reason, and with
        // time left for the abort to take effect and for fail-stop.
        let abort_at = |grace_end: Instant, deadline: &Deadline, holding: bool| {
            let latest = deadline.get().checked_sub(STOP_SLACK).unwrap_or(grace_end);
            if holding {
                latest
            } else {
                grace_end.min(latest)
            }
        };
        // A guard's holder may take until the deadline: fail-stop then
        // watches the deadline alone.
        if let (Some(guard), false) = (&term.fail_stop, holding) {
            guard.stop_by((grace_end + ABORT_WAIT + FAIL_STOP_SLACK).into_std());
        }
        let stopped = loop {
            // Told to the term's tasks, whose own requests end before it.
            let at = abort_at(grace_end, &term.deadline, holding);
            term.abort_at
                .send_if_modified(|told| told.replace(at) != Some(at));
            tokio::select! {
                () = term.tasks.all_ended() => break TaskStop::Returned,
                joined = &mut term.leader, if leader_running => {
                    leader_running = false;
                    // A guard's waiter returns when the guard is released:
                    // what is left (sub-tasks) gets the usual grace.
                    holding = false;
                    if let Some(message) = joined_task(joined).failure() {
                        error!(holder = %self.holder, epoch, error = %message, "leader task failed while stopping");
                        failure.get_or_insert(message);
                    }
                }
                end = &mut renewal, if renewing => {
                    renewing = false;
                    if let RenewEnd::Lost(e) = end {
                        warn!(holder = %self.holder, epoch, error = %Chain(&e), "lease lost while the leader task stops");
                        lease_held = false;
                        holding = false;
                        grace_end = grace_end.min(Instant::now() + LOST_GRACE);
                    }
                }
                // A guard not released within the grace: renew no more, so
                // that the lease expires unless the holder releases first.
                () = sleep_until(grace_end), if holding && renewing => {
                    renewing = false;
                    debug!(holder = %self.holder, epoch, "the guard is not released yet; no more renewals");
                }
                () = sleep_until(abort_at(grace_end, &term.deadline, holding)) => {
                    if Instant::now() < abort_at(grace_end, &term.deadline, holding) {
                        continue; // a renewal moved the deadline
                    }
                    term.tasks.abort_all();
                    break match tokio::time::timeout(ABORT_WAIT, term.tasks.all_ended()).await {
                        Ok(()) if holding => TaskStop::Unreleased,
                        Ok(()) => TaskStop::Aborted,
                        Err(_) => TaskStop::Stuck,
                    };
                }
            }
        };
        if leader_running && term.leader.is_finished() {
            if let Some(message) = joined_task((&mut term.leader).await).failure() {
                failure.get_or_insert(message);
            }
        }
        (stopped, lease_held)
    }
}
