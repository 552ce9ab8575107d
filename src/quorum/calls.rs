//! Each call of the quorum store: asked of every account concurrently,
//! decided by a majority of them, and what the accounts' answers count as.

use std::sync::PoisonError;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use super::epoch::{catch_up, lift, read_each, read_last, stamp_all, Stamp};
use super::hold_off::{self, first_missing, on_the_same_blob, Account, Read, HOLD_OFF};
use super::rules::{
    acquire_outcome, carried_by_majority, next_epoch, AcquireOutcome, Acquired, RenewOutcome,
    Renewed, Standing,
};
use super::votes::{ask, no_majority, straggler_grace, Answers, Asking, Vote, Votes};
use super::{merge, QuorumLeaseStore, Term, CLEANUP_LIMIT};
use crate::bounded::bounded_since;
use crate::error::{Error, Result};
use crate::store::stamp::NEW_RECORD_WAIT;
use crate::store::{check_advertised, Acquire, LeaseId, LeaseInfo, LeaseStore};

impl<S: LeaseStore> QuorumLeaseStore<S> {
    /// Releases `lease` on the accounts marked, concurrently; waits at
    /// most [`CLEANUP_LIMIT`] (and half the request timeout) for those in
    /// `wait_for`. Failures are left to expire.
    async fn release_on(&self, lease: LeaseId, which: &[bool], wait_for: &[bool]) {
        let waiting = wait_for.iter().filter(|w| **w).count();
        let released = ask(
            &self.accounts,
            "release",
            Votes::new(self.len()),
            |i, store| which[i].then(|| store.release(lease)),
            |i, _| if wait_for[i] { Vote::Yes } else { Vote::Failed },
            |votes| votes.yes >= waiting,
            no_grace,
        );
        let limit = CLEANUP_LIMIT.min(self.request_timeout / 2);
        let _ = tokio::time::timeout(limit, released).await;
    }

    pub(super) async fn acquire_quorum(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> Result<Acquire> {
        let mut asking = Asking::new(
            &self.accounts,
            "acquire",
            Votes::new(self.len()),
            |_, store| Some(store.acquire(proposed, duration)),
            |_, answer: &Result<Acquire>| acquired(Some(answer)).vote(),
        );
        // An attempt left undecided by silent accounts gives up on them
        // soon after the others answered (and at the cap at the latest, in
        // time to release what it was granted before the caller's own time
        // limit drops it): a lease granted and kept by an attempt waiting
        // for a silent account keeps the leader from renewing there.
        let start = Instant::now();
        let cap = self.request_timeout / 2;
        let _ = tokio::time::timeout(cap, asking.settle(Votes::decided)).await;
        let mut reads = None;
        if Votes::won(asking.votes()) {
            // So that the whole term starts on every account that answers
            // like the others, not only at the first renewal.
            // Time left to the cap, not `start + cap`: a cap as long as
            // `Duration::MAX` must not overflow the clock.
            let grace = straggler_grace(start.elapsed());
            let left = cap.saturating_sub(start.elapsed());
            // Meanwhile, the epochs of the accounts that answered are read
            // for the hold-off, with what is left of the request timeout
            // less what a release after a hold-off may take.
            let answered = asking.answered(Result::is_ok);
            let limit = self
                .request_timeout
                .saturating_sub(start.elapsed())
                .saturating_sub(CLEANUP_LIMIT.min(self.request_timeout / 2));
            let (_, read) = tokio::join!(
                tokio::time::timeout(left, asking.collect_for(grace)),
                read_each(&self.accounts, &answered, limit),
            );
            reads = Some(read);
        }
        let (answers, votes) = asking.finish();
        let each: Vec<Acquired> = answers.iter().map(|a| acquired(a.as_ref())).collect();
        let granted: Vec<bool> = each.iter().map(|a| *a == Acquired::Granted).collect();
        self.seen_held(&answers);
        let counted = reads.map(|reads| self.counted(&answers, &granted, &reads));
        // The deadline rests on the counted accounts only.
        let (release, held) = match acquire_outcome(&each, votes, counted.as_deref()) {
            AcquireOutcome::Won(standing) => {
                self.remember(Term::new(proposed, duration, standing));
                return Ok(Acquire::Acquired);
            }
            AcquireOutcome::Refused { release, held } => (release, held),
        };
        if votes.won() {
            debug!(lease = %self.name(), granted = votes.yes, "a majority granted, but accounts that forgot the lease are held off; releasing the leases granted");
        } else {
            debug!(lease = %self.name(), granted = votes.yes, held = votes.no, failed = votes.failed, "no majority granted; releasing the leases granted");
        }
        // An account that failed or did not answer may have granted the
        // lease all the same: release there too, without waiting for it.
        self.release_on(proposed, &release, &granted).await;
        if held {
            Ok(Acquire::Held)
        } else {
            Err(no_majority("acquire", answers, votes, self.request_timeout))
        }
    }

    /// Starts the wait over on the accounts an attempt found held by
    /// another id, majority or not: their holder may stamp them, and they
    /// may forget again.
    fn seen_held(&self, answers: &Answers<Acquire>) {
        let now = Instant::now();
        let mut missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        for (record, answer) in missing.iter_mut().zip(answers) {
            let held = matches!(answer, Some(Ok(Acquire::Held)));
            let since = first_missing(record.as_ref().map(|r| r.0), Read::Unread, held, now);
            if since.is_none() {
                *record = None;
            }
        }
    }

    /// Starts the wait over on the accounts this store's own term stamped,
    /// renewed or brought up to its stamp: they carried an epoch, or its
    /// lease, since any earlier read found them without one, so what was
    /// seen before says nothing of a lease they grant after the term.
    fn seen_in_term(&self, which: &[bool]) {
        let mut missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        for (record, seen) in missing.iter_mut().zip(which) {
            if *seen {
                *record = None;
            }
        }
    }

    /// The granted accounts whose grant counts toward a new majority
    /// ([`hold_off::counted`]), from the epochs read; this store's record of
    /// the accounts seen without one is brought up to date.
    fn counted(
        &self,
        answers: &Answers<Acquire>,
        granted: &[bool],
        reads: &[(Read, String)],
    ) -> Vec<bool> {
        let now = Instant::now();
        let mut missing = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        let accounts: Vec<Account> = reads
            .iter()
            .zip(missing.iter_mut())
            .enumerate()
            .map(|(i, ((read, version), record))| {
                let held_by_another = matches!(answers[i], Some(Ok(Acquire::Held)));
                let kept = record.as_ref().map(|(since, seen)| (*since, seen.as_str()));
                let since = match read {
                    Read::Missing => on_the_same_blob(kept, version),
                    _ => kept.map(|(since, _)| since),
                };
                let since = first_missing(since, *read, held_by_another, now);
                let version = match (read, record.take()) {
                    (Read::Missing, _) => version.clone(),
                    (_, kept) => kept.map(|(_, seen)| seen).unwrap_or_default(),
                };
                *record = since.map(|since| (since, version));
                Account {
                    granted: granted[i],
                    read: *read,
                    missing_for: since.map_or(Duration::ZERO, |s| now.saturating_duration_since(s)),
                }
            })
            .collect();
        drop(missing);
        hold_off::counted(&accounts, HOLD_OFF)
    }

    pub(super) async fn renew_quorum(&self, lease: LeaseId) -> Result<()> {
        let start = Instant::now();
        let term = self.recall(lease);
        let (answers, votes) = ask(
            &self.accounts,
            "renew",
            Votes::new(self.len()),
            |i, store| {
                let again = term.as_ref().map(|t| (t.duration, t.standing.held[i]));
                Some(renew_or_acquire(store, lease, again))
            },
            |_, answer| renewed(Some(answer)).vote(),
            Votes::decided,
            straggler_grace,
        )
        .await;
        let mut basis_gone = false;
        if let Some(mut term) = term {
            let renewed: Vec<Renewed> = answers.iter().map(|a| renewed(a.as_ref())).collect();
            // An account not heard from may have lost the blob and been
            // leased again: it is read again at the next renewal.
            let kept: Vec<bool> = renewed
                .iter()
                .map(|r| *r == Renewed::Held { again: false })
                .collect();
            self.seen_in_term(&kept);
            match term.standing.renewed(&renewed, votes) {
                RenewOutcome::Renewed => {
                    self.catch_up_all(lease, &mut term, &renewed, start).await;
                }
                RenewOutcome::BasisGone => basis_gone = true,
                RenewOutcome::Lost | RenewOutcome::NoMajority => {}
            }
            self.remember(term);
        }
        if votes.won() {
            Ok(())
        } else if votes.lost() {
            Err(lost("renew", votes))
        } else if basis_gone {
            // A lease the deadline rests on is gone (an account broken, or
            // restarted empty), and no majority was renewed: another
            // candidate may hold that account and a free one already.
            Err(Error::LeaseLost(format!(
                "renew: the lease is gone on an account that the last successful renewal held, \
                 and no majority of the {} accounts renewed it",
                votes.n
            )))
        } else {
            Err(no_majority("renew", answers, votes, self.request_timeout))
        }
    }

    /// Brings the accounts a renewal (begun at `start`) just held, and not
    /// known to carry the term's stamp, up to it, all at once. Only
    /// accounts that answered are asked, so a silent one costs no wait;
    /// the wait is capped at 1 s and ends within the request timeout. An
    /// account cut short is read again at the next renewal.
    async fn catch_up_all(
        &self,
        lease: LeaseId,
        term: &mut Term,
        renewed: &[Renewed],
        start: Instant,
    ) {
        let Some(stamp) = term.stamp.clone() else {
            return;
        };
        let behind = term.standing.behind(renewed);
        if !behind.contains(&true) {
            return;
        }
        let mut asking = Asking::new(
            &self.accounts,
            "stamp",
            Votes::new(self.len()),
            |i, store| behind[i].then(|| catch_up(store, lease, &stamp)),
            |_, answer| vote_ok(answer),
        );
        let left = self.request_timeout.saturating_sub(start.elapsed()) / 2;
        let limit = CLEANUP_LIMIT.min(left);
        let _ = tokio::time::timeout(limit, asking.until(|v| v.pending == 0)).await;
        let (answers, _) = asking.finish();
        for (current, answer) in term.standing.current.iter_mut().zip(&answers) {
            if matches!(answer, Some(Ok(()))) {
                *current = true;
            }
        }
        self.seen_in_term(&term.standing.current);
    }

    /// Reads the last epoch from a majority that carries one, then stamps
    /// the next on every account (see the type's docs); within the request
    /// timeout, and [`NEW_RECORD_WAIT`] more when no account carries an
    /// epoch and no floor is named: each account then makes its record
    /// anew, which waits for storage's clock.
    pub(super) async fn stamp_quorum(
        &self,
        lease: LeaseId,
        holder: &str,
        advertised: Option<&str>,
        floor: u64,
    ) -> Result<u64> {
        if let Some(value) = advertised {
            check_advertised(value)?;
        }
        let start = Instant::now();
        let limit = self.request_timeout;
        let read = bounded_since("stamp", start, limit, async {
            match read_last(&self.accounts, limit / 2).await {
                Ok(read) => Ok(read),
                Err(e) => Err(self.lost_or(lease, e).await),
            }
        })
        .await?;
        let epoch = next_epoch(read.last, floor).ok_or_else(|| Error::InvalidEpoch {
            found: read.last.to_string(),
        })?;
        let stamp = Stamp {
            holder: holder.to_owned(),
            epoch,
            advertised: advertised.map(str::to_owned),
        };
        let extra = if epoch > 1 {
            Duration::ZERO
        } else {
            NEW_RECORD_WAIT
        };
        let limit = limit.saturating_add(extra);
        bounded_since(
            "stamp",
            start,
            limit,
            self.stamp_read(lease, stamp, read, extra),
        )
        .await
    }

    /// Stamps the term `stamp` on every account, after `read`; `extra` is
    /// the time the accounts may take beyond a request.
    async fn stamp_read(
        &self,
        lease: LeaseId,
        stamp: Stamp,
        read: super::epoch::Read,
        extra: Duration,
    ) -> Result<u64> {
        let (limit, epoch) = (
            (self.request_timeout / 2).saturating_add(extra),
            stamp.epoch,
        );
        let wait = (read.from_every_account, limit);
        let stamped = stamp_all(&self.accounts, lease, &stamp, wait).await;
        let (answers, votes) = lift(&self.accounts, lease, &stamp, stamped, limit).await;
        // Each account writes at least `epoch`, and more where its own
        // record starts higher (a record made again starts at storage's
        // clock), lifted to the largest such: the term's epoch is the
        // largest one a majority carries.
        let carried: Vec<Option<u64>> = answers
            .iter()
            .map(|a| a.as_ref().and_then(|a| a.as_ref().ok()).copied())
            .collect();
        self.seen_in_term(&carried.iter().map(Option::is_some).collect::<Vec<_>>());
        let epoch = carried_by_majority(&carried, self.majority()).map_or(epoch, |e| e.max(epoch));
        let stamp = Stamp { epoch, ..stamp };
        if let Some(mut term) = self.recall(lease) {
            // An account that answered more than the epoch carried a larger
            // one already (left by an attempt that did not win): it carries
            // at least the term's epoch, which is all the next read needs.
            term.standing.stamped(
                carried
                    .iter()
                    .map(|e| e.is_some_and(|e| e >= epoch))
                    .collect(),
            );
            term.stamp = votes.won().then_some(stamp);
            self.remember(term);
        }
        if votes.won() {
            Ok(epoch)
        } else if votes.lost() {
            Err(lost("stamp", votes))
        } else {
            Err(no_majority("stamp", answers, votes, self.request_timeout))
        }
    }

    /// `error`, unless the lease is not held under `lease` on a majority:
    /// then the loss, which a stamp must tell apart.
    async fn lost_or(&self, lease: LeaseId, error: Error) -> Error {
        let (_, votes) = ask(
            &self.accounts,
            "stamp",
            Votes::new(self.len()),
            |_, store| Some(store.renew(lease)),
            |_, answer| vote_held(answer),
            Votes::decided,
            no_grace,
        )
        .await;
        if votes.lost() {
            lost("stamp", votes)
        } else {
            error
        }
    }

    pub(super) async fn release_quorum(&self, lease: LeaseId) -> Result<()> {
        self.forget(lease);
        // A lease already not ours on an account counts as released there.
        let (answers, votes) = ask(
            &self.accounts,
            "release",
            Votes::new(self.len()),
            |_, store| Some(store.release(lease)),
            |_, answer| match answer {
                Ok(()) | Err(Error::LeaseLost(_)) => Vote::Yes,
                Err(_) => Vote::Failed,
            },
            Votes::decided,
            no_grace,
        )
        .await;
        if !votes.won() {
            return Err(no_majority("release", answers, votes, self.request_timeout));
        }
        if answers.iter().any(|a| matches!(a, Some(Ok(())))) {
            Ok(())
        } else {
            Err(Error::LeaseLost(
                "release: the lease is not held under this id on any account".to_owned(),
            ))
        }
    }

    pub(super) async fn change_quorum(&self, from: LeaseId, to: LeaseId) -> Result<()> {
        let (answers, votes) = ask(
            &self.accounts,
            "change",
            Votes::new(self.len()),
            |_, store| Some(store.change(from, to)),
            |_, answer| vote_held(answer),
            Votes::decided,
            no_grace,
        )
        .await;
        if votes.won() {
            if let Some(term) = self.forget(from).or_else(|| self.recall(to)) {
                // The new id's term has not stamped yet.
                let held: Vec<bool> = answers.iter().map(|a| matches!(a, Some(Ok(())))).collect();
                let standing = Standing::new(held.clone(), held);
                self.remember(Term::new(to, term.duration, standing));
            }
            Ok(())
        } else if votes.lost() {
            Err(lost("change", votes))
        } else {
            Err(no_majority("change", answers, votes, self.request_timeout))
        }
    }

    pub(super) async fn inspect_quorum(&self) -> Result<Option<LeaseInfo>> {
        let (answers, votes) = self.inspect_all().await;
        if votes.yes < votes.majority() {
            return Err(no_majority("inspect", answers, votes, self.request_timeout));
        }
        let found: Vec<Option<LeaseInfo>> = answers.into_iter().flatten().flatten().collect();
        Ok(merge(votes.n, &found))
    }
}

/// Renews on one account; when the lease was not granted there (never, or
/// lost at an earlier renewal), acquires it again under the same id when the
/// store knows the duration. `again` is the duration and whether the account
/// was last known held. Answers whether it acquired the lease again (the
/// blob may be new, with another stamp).
///
/// A renewal that finds the lease gone (broken, released, taken, or the blob
/// itself missing: both backends and the memory store answer a renewal's
/// 404 as `LeaseLost`) counts as lost for this renewal, and the account is
/// leased again at the next one, as one not held. It is not leased again at
/// once, in the same renewal: storage that forgot the lease on a majority
/// (a break, accounts restarted empty) is what one account's lost lease is,
/// and may already be another candidate's majority; the term ends, as it
/// ends on one account. On a minority the term goes on, and the account
/// rejoins one renew interval later.
async fn renew_or_acquire<S: LeaseStore>(
    store: &S,
    lease: LeaseId,
    again: Option<(Duration, bool)>,
) -> Result<bool> {
    match again {
        Some((duration, false)) => match store.acquire(lease, duration).await? {
            Acquire::Acquired => Ok(true),
            Acquire::Held => Err(Error::LeaseLost(
                "held by another id on this account".to_owned(),
            )),
        },
        _ => store.renew(lease).await.map(|()| false),
    }
}

/// Release and change do not wait once decided.
fn no_grace(_: Duration) -> Duration {
    Duration::ZERO
}

pub(super) fn vote_ok<T>(answer: &Result<T>) -> Vote {
    if answer.is_ok() {
        Vote::Yes
    } else {
        Vote::Failed
    }
}

/// One account's answer to an acquire, `None` when it did not answer.
fn acquired(answer: Option<&Result<Acquire>>) -> Acquired {
    match answer {
        Some(Ok(Acquire::Acquired)) => Acquired::Granted,
        Some(Ok(Acquire::Held)) => Acquired::Held,
        Some(Err(_)) | None => Acquired::Failed,
    }
}

/// One account's answer to a renewal (whether it acquired the lease
/// again), `None` when it did not answer.
fn renewed(answer: Option<&Result<bool>>) -> Renewed {
    match answer {
        Some(Ok(again)) => Renewed::Held { again: *again },
        Some(Err(Error::LeaseLost(_))) => Renewed::Gone,
        Some(Err(_)) | None => Renewed::Failed,
    }
}

/// A call that needs the lease: done, lost there, or failed.
fn vote_held<T>(answer: &Result<T>) -> Vote {
    match answer {
        Ok(_) => Vote::Yes,
        Err(Error::LeaseLost(_)) => Vote::No,
        Err(_) => Vote::Failed,
    }
}

fn lost(operation: &str, votes: Votes) -> Error {
    Error::LeaseLost(format!(
        "{operation}: the lease is not held under this id on {} of the {} accounts",
        votes.no, votes.n
    ))
}
