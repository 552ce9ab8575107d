//! The epoch across the accounts: read, for a new term, from a majority
//! that can show it holds the last one; stamped on every account; and
//! brought up to date by the renewals on the accounts that missed it.

use std::time::Duration;

use tracing::debug;

use tokio::time::Instant;

use super::hold_off::Read as Seen;
use super::rules::{
    self, behind_the_stamp, read_decided, read_outcome, vote_carried, vote_stamped, ReadOutcome,
    Stamped,
};
use super::votes::{ask, no_majority, straggler_grace, Answers, Asking, Vote, Votes};
use crate::error::{Error, Result};
use crate::store::{LeaseId, LeaseInfo, LeaseStore, StampOptions};

/// The last epoch, and how it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Read {
    /// The largest epoch read.
    pub(super) last: u64,
    /// Read from every account, not from a majority that carries epochs:
    /// no majority would carry this term's epoch if the accounts that miss
    /// its stamp stayed without one (the first term, above all).
    pub(super) from_every_account: bool,
}

/// What a term writes on the accounts: its holder, epoch and what it
/// advertises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) holder: String,
    pub(super) epoch: u64,
    pub(super) advertised: Option<String>,
}

impl Stamp {
    /// Stamps one account, held under `lease`, with this term at its epoch
    /// as the floor.
    async fn write<S: LeaseStore>(&self, store: &S, lease: LeaseId) -> Result<u64> {
        let mut options = StampOptions::new().with_floor(self.epoch);
        if let Some(value) = &self.advertised {
            options = options.with_advertised(value.as_str());
        }
        store.stamp(lease, &self.holder, &options).await
    }
}

/// The epoch an inspection answered (0 for none), `None` when it failed.
fn epoch_of(answer: &Result<Option<LeaseInfo>>) -> Option<u64> {
    answer
        .as_ref()
        .ok()
        .map(|info| info.as_ref().map_or(0, |i| i.epoch))
}

/// The last epoch any term used: the largest epoch the accounts carry,
/// read from a majority of accounts that each carry one, or from every
/// account. An account with no epoch does not count toward that majority:
/// it may have lost the epoch that matters, and only a majority of
/// accounts that kept their epochs is sure to meet an account the last
/// term stamped. When every account answered, the read meets every account
/// the last term stamped, and one of them kept its blob unless all of them
/// lost it: that is how the first term starts (no account has an epoch),
/// and how accounts that lost their blobs are read once no majority is
/// left that carries an epoch.
///
/// The read ends as soon as it is decided: at once when a majority carries
/// an epoch. Otherwise every answer may still decide it, so it waits for
/// the silent accounts up to `limit`, not only for a straggler's grace.
pub(super) async fn read_last<S: LeaseStore>(
    accounts: &[(String, S)],
    limit: Duration,
) -> Result<Read> {
    let mut asking = Asking::new(
        accounts,
        "stamp",
        Votes::new(accounts.len()),
        |_, store| Some(store.inspect()),
        |_, answer| {
            let epoch = answer
                .as_ref()
                .ok()
                .map(|info| info.as_ref().map_or(0, |i| i.epoch));
            vote_carried(epoch)
        },
    );
    let _ = tokio::time::timeout(limit, asking.until(read_decided)).await;
    let (answers, votes) = asking.finish();
    let last = answers
        .iter()
        .flatten()
        .flatten()
        .flatten()
        .map(|info| info.epoch)
        .max()
        .unwrap_or(0);
    match read_outcome(votes) {
        ReadOutcome::Last { from_every_account } => {
            return Ok(Read {
                last,
                from_every_account,
            })
        }
        ReadOutcome::TooFewAnswered => return Err(no_majority("stamp", answers, votes, limit)),
        ReadOutcome::NoMajorityCarries => {}
    }
    Err(Error::transport(
        "stamp",
        format!(
            "no majority of the {} accounts carries an epoch ({} do, {} have none: lost, or never stamped; \
             {} did not answer): the last epoch is not known until a majority carries one or every account answers",
            votes.n, votes.yes, votes.no, votes.failed
        ),
    ))
}

/// Reads the epoch of each account marked in `which`, all at once, for at
/// most `limit`: whether it carries one, has none, or did not answer
/// ([`Seen::Unread`], as every account not marked).
pub(super) async fn read_each<S: LeaseStore>(
    accounts: &[(String, S)],
    which: &[bool],
    limit: Duration,
) -> Vec<(Seen, String)> {
    let mut asking = Asking::new(
        accounts,
        "acquire",
        Votes::new(accounts.len()),
        |i, store| which[i].then(|| store.inspect()),
        |_, answer| vote_carried(epoch_of(answer)),
    );
    let _ = tokio::time::timeout(limit, asking.until(|v| v.pending == 0)).await;
    let (answers, _) = asking.finish();
    answers
        .iter()
        .map(|answer| match answer {
            Some(Ok(Some(info))) if info.epoch > 0 => (Seen::Carries, info.etag.clone()),
            Some(Ok(Some(info))) => (Seen::Missing, info.etag.clone()),
            Some(Ok(None)) => (Seen::Missing, String::new()),
            Some(Err(_)) | None => (Seen::Unread, String::new()),
        })
        .collect()
}

/// Stamps the term on every account, its epoch as the floor; the
/// answers, and whether a majority now carries at least that epoch. Once
/// decided, it waits for the others for a straggler's grace; or, when
/// `every` account must carry an epoch for the next term to read one from
/// a majority (they all answered the read), up to `limit`.
pub(super) async fn stamp_all<S: LeaseStore>(
    accounts: &[(String, S)],
    lease: LeaseId,
    stamp: &Stamp,
    (every, limit): (bool, Duration),
) -> (Answers<u64>, Votes) {
    let (start, epoch) = (Instant::now(), stamp.epoch);
    let mut asking = Asking::new(
        accounts,
        "stamp",
        Votes::new(accounts.len()),
        |_, store| Some(stamp.write(store, lease)),
        |_, answer| stamp_vote(answer, epoch),
    );
    asking.settle(Votes::decided).await;
    let grace = if every {
        limit.saturating_sub(start.elapsed())
    } else {
        straggler_grace(start.elapsed())
    };
    asking.collect_for(grace).await;
    asking.finish()
}

/// Lifts the accounts that answered a stamp with a smaller epoch than
/// another account did to that larger epoch, so that every account that
/// answered carries one epoch for the term. Accounts answer different
/// epochs when a record started again at storage's clock on some of them
/// (the first term of a quorum whose stamp straddles a second of storage's
/// clock, or accounts that lost their blobs) or when one carries a larger
/// epoch already (left by an attempt that did not win). Without the lift,
/// the term would take the epoch a majority carries while an account
/// showed a larger one, and the merged view would name an epoch the term
/// does not fence with. Only the accounts behind are stamped again, within
/// `limit`; the answers and votes are counted again as `stamp_all` counts
/// them, so the caller's rule (the largest epoch a majority carries) then
/// picks the lifted epoch once a majority carries it.
pub(super) async fn lift<S: LeaseStore>(
    accounts: &[(String, S)],
    lease: LeaseId,
    stamp: &Stamp,
    (mut answers, votes): (Answers<u64>, Votes),
    limit: Duration,
) -> (Answers<u64>, Votes) {
    let carried: Vec<Option<u64>> = answers
        .iter()
        .map(|a| a.as_ref().and_then(|a| a.as_ref().ok()).copied())
        .collect();
    let Some((top, behind)) = rules::lift(&carried) else {
        return (answers, votes);
    };
    let lifted = Stamp {
        epoch: top,
        ..stamp.clone()
    };
    let again = ask(
        accounts,
        "stamp",
        Votes::new(accounts.len()),
        |i, store| behind[i].then(|| lifted.write(store, lease)),
        |_, _| Vote::Yes,
        |_| false,
        |_| Duration::ZERO,
    );
    let again = tokio::time::timeout(limit, again).await;
    if let Ok((again, _)) = again {
        for (answer, redone) in answers.iter_mut().zip(again) {
            if let Some(redone) = redone {
                *answer = Some(redone);
            }
        }
    }
    // The same accounts answered; only what some of them carry changed.
    let recount = Votes::of(
        accounts.len(),
        answers.iter().flatten().map(|a| stamp_vote(a, stamp.epoch)),
    );
    let recount = Votes {
        pending: votes.pending,
        ..recount
    };
    (answers, recount)
}

/// How one account's answer to a stamp at `epoch` counts.
fn stamp_vote(answer: &Result<u64>, epoch: u64) -> Vote {
    let answer = match answer {
        Ok(e) => Stamped::Carries(*e),
        Err(Error::LeaseLost(_)) => Stamped::Lost,
        Err(_) => Stamped::Failed,
    };
    vote_stamped(answer, epoch)
}

/// Brings one account, held under `lease`, up to the term's stamp: reads
/// its epoch first, so that an account that carries the stamp already (its
/// answer to the stamp was lost) is not raised past it.
pub(super) async fn catch_up<S: LeaseStore>(
    store: &S,
    lease: LeaseId,
    stamp: &Stamp,
) -> Result<()> {
    let carried = store.inspect().await?.map_or(0, |info| info.epoch);
    if !behind_the_stamp(carried, stamp.epoch) {
        return Ok(());
    }
    let epoch = stamp.write(store, lease).await?;
    debug!(lease = %store.name(), carried, epoch, "account brought up to the term's epoch");
    Ok(())
}
