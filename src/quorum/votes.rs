//! Counting the accounts' answers to one quorum call, and asking them all at
//! once until the count decides the call.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;
use tracing::debug;

use crate::error::{Chain, Error, Result};

pub(crate) use super::rules::{majority, Vote, Votes};

/// Each account's answer, `None` for the accounts not asked or not yet
/// answered when the call was decided.
pub(crate) type Answers<T> = Vec<Option<Result<T>>>;

/// Asks every account for which `call` gives a future, all at once, and
/// counts each answer as it comes (with `vote`, on top of `votes`), until
/// `decided` says the count is enough or every account has answered; then
/// goes on collecting answers for at most `grace` of the time it took.
///
/// The futures of the accounts that have not answered by then are dropped:
/// the store contract lets any call be dropped at an await point, and the
/// quorum's outcome no longer depends on them. Waiting would tie every call
/// to the slowest account, and a blackholed one never answers.
pub(crate) async fn ask<'a, S, T: 'a, Fut>(
    accounts: &'a [(String, S)],
    operation: &'static str,
    votes: Votes,
    call: impl Fn(usize, &'a S) -> Option<Fut>,
    vote: impl Fn(usize, &Result<T>) -> Vote,
    decided: impl Fn(Votes) -> bool,
    grace: impl FnOnce(Duration) -> Duration,
) -> (Answers<T>, Votes)
where
    Fut: Future<Output = Result<T>> + Send + 'a,
{
    let start = Instant::now();
    let mut asking = Asking::new(accounts, operation, votes, call, vote);
    asking.settle(decided).await;
    asking.collect_for(grace(start.elapsed())).await;
    asking.finish()
}

/// Asks every account for which `call` gives a future, all at once, and
/// waits for every answer: for reads whose calls are bounded each.
pub(crate) async fn ask_all<'a, S, T: 'a, Fut>(
    accounts: &'a [(String, S)],
    operation: &'static str,
    call: impl Fn(usize, &'a S) -> Option<Fut>,
    vote: impl Fn(usize, &Result<T>) -> Vote,
) -> (Answers<T>, Votes)
where
    Fut: Future<Output = Result<T>> + Send + 'a,
{
    let votes = Votes::new(accounts.len());
    let mut asking = Asking::new(accounts, operation, votes, call, vote);
    asking.until(|_| false).await;
    asking.finish()
}

/// How long a quorum call gives the accounts that have not answered yet,
/// from the moment it would otherwise stop waiting for them: twice as long
/// as the call took so far (an account that comes back needs a renew and
/// an acquire), from 50 ms to 1 s. [`Asking::settle`] gives it to a call
/// that a majority has answered without deciding it, and never waits once
/// the call is decided; a won acquire and a settled stamp then collect the
/// late answers for it ([`Asking::collect_for`]), so that the term starts,
/// and its epoch lands, on every account that answers like the others.
/// Long enough for such an account to take part; short enough that an
/// account that never answers costs little, and that an attempt waiting
/// for it does not keep for long the leases it was granted, which would
/// keep the leader from renewing on those accounts. The engine's deadline
/// counts from before the call, so the wait costs no lease time.
pub(crate) fn straggler_grace(so_far: Duration) -> Duration {
    (so_far * 2).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// The calls of one quorum call in flight, and the answers so far. Every
/// method can be cut short (dropped) and resumed: each answer is counted
/// as soon as it is taken.
pub(crate) struct Asking<'a, S, T, V> {
    accounts: &'a [(String, S)],
    operation: &'static str,
    pending: FuturesUnordered<Tagged<'a, T>>,
    answers: Answers<T>,
    votes: Votes,
    vote: V,
}

/// A call's future, answering with the account it went to.
type Tagged<'a, T> = Pin<Box<dyn Future<Output = (usize, Result<T>)> + Send + 'a>>;

impl<'a, S, T: 'a, V> Asking<'a, S, T, V>
where
    V: Fn(usize, &Result<T>) -> Vote,
{
    /// Starts the calls.
    pub(crate) fn new<Fut>(
        accounts: &'a [(String, S)],
        operation: &'static str,
        mut votes: Votes,
        call: impl Fn(usize, &'a S) -> Option<Fut>,
        vote: V,
    ) -> Self
    where
        Fut: Future<Output = Result<T>> + Send + 'a,
    {
        let pending: FuturesUnordered<Tagged<'a, T>> = accounts
            .iter()
            .enumerate()
            .filter_map(|(i, (_, store))| {
                let f = call(i, store)?;
                Some(Box::pin(async move { (i, f.await) }) as Tagged<'a, T>)
            })
            .collect();
        votes.pending = pending.len();
        Asking {
            accounts,
            operation,
            pending,
            answers: accounts.iter().map(|_| None).collect(),
            votes,
            vote,
        }
    }

    /// Takes answers until `decided` says the count is enough, or none is
    /// left to take.
    pub(crate) async fn until(&mut self, decided: impl Fn(Votes) -> bool) {
        while !decided(self.votes) {
            let Some(answer) = self.pending.next().await else {
                return;
            };
            self.count(answer);
        }
    }

    /// Takes answers until `decided`, or until a majority of the accounts
    /// has answered without failing and the others stayed silent for a
    /// [`straggler_grace`] after that: an account that answers much later
    /// than the others counts as failed.
    ///
    /// A failure does not start the grace: an account that is down fails
    /// at once (its connection is refused), and the call then rests on the
    /// others. Were it counted, an account answering a few milliseconds
    /// after another would count as failed whenever one was down, and no
    /// call could be decided; it is waited for, as a single store would be,
    /// within the call's own time limit.
    pub(crate) async fn settle(&mut self, decided: impl Fn(Votes) -> bool) {
        let start = Instant::now();
        let majority = self.votes.majority();
        self.until(|v| decided(v) || v.yes + v.no >= majority).await;
        if !decided(self.votes) {
            let grace = straggler_grace(start.elapsed());
            let _ = tokio::time::timeout(grace, self.until(&decided)).await;
        }
    }

    /// Takes the answers that come within `grace`.
    pub(crate) async fn collect_for(&mut self, grace: Duration) {
        if self.pending.is_empty() || grace.is_zero() {
            return;
        }
        let _ = tokio::time::timeout(grace, self.until(|_| false)).await;
    }

    /// The answers counted so far.
    pub(crate) fn votes(&self) -> Votes {
        self.votes
    }

    /// Per account: whether it has answered so far with an answer that
    /// `which` picks.
    pub(crate) fn answered(&self, which: impl Fn(&Result<T>) -> bool) -> Vec<bool> {
        self.answers
            .iter()
            .map(|a| a.as_ref().is_some_and(&which))
            .collect()
    }

    /// The answers and their count; the calls still pending are dropped.
    pub(crate) fn finish(self) -> (Answers<T>, Votes) {
        (self.answers, self.votes)
    }

    fn count(&mut self, (i, answer): (usize, Result<T>)) {
        if let Err(e) = &answer {
            let operation = self.operation;
            debug!(account = %self.accounts[i].0, error = %Chain(e), "{operation} failed on one account");
        }
        self.votes.add((self.vote)(i, &answer));
        self.votes.pending -= 1;
        self.answers[i] = Some(answer);
    }
}

/// The error of a call that no majority can answer as wanted, from the
/// accounts' own errors: a fatal error when a majority failed fatally
/// (nothing will change by retrying), else the first transient one, else a
/// transient error that counts the answers: [`Error::Timeout`] (after
/// `limit`, the call's own) when no account answered at all.
pub(crate) fn no_majority<T>(
    operation: &'static str,
    answers: Answers<T>,
    votes: Votes,
    limit: Duration,
) -> Error {
    let mut fatal = Vec::new();
    let mut transient = None;
    for e in answers.into_iter().flatten().filter_map(Result::err) {
        if e.is_fatal() {
            fatal.push(e);
        } else if e.is_transient() && transient.is_none() {
            transient = Some(e);
        }
    }
    if fatal.len() >= votes.majority() {
        return fatal.swap_remove(0);
    }
    if votes.yes + votes.no + votes.failed == 0 {
        return Error::Timeout {
            operation,
            after: limit,
        };
    }
    transient.unwrap_or_else(|| {
        Error::transport(
            operation,
            format!(
                "no majority of the {} accounts answered ({} as asked, {} refused, {} failed)",
                votes.n, votes.yes, votes.no, votes.failed
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::rules::tests::count;
    use super::*;

    /// Three accounts answering yes or no after the given times (never,
    /// for `None`); how long `settle` took and whether the call was won.
    async fn settle_with(answers: [(Option<u64>, bool); 3]) -> (Duration, bool) {
        let accounts: Vec<(String, (Option<u64>, bool))> = answers
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("account{i}"), *a))
            .collect();
        let mut asking = Asking::new(
            &accounts,
            "renew",
            Votes::new(3),
            |_, &(after, yes)| {
                Some(async move {
                    match after {
                        Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                        None => std::future::pending().await,
                    }
                    Ok(yes)
                })
            },
            |_, answer: &Result<bool>| match answer {
                Ok(true) => Vote::Yes,
                Ok(false) => Vote::No,
                Err(_) => Vote::Failed,
            },
        );
        let start = Instant::now();
        asking.settle(Votes::decided).await;
        (start.elapsed(), Votes::won(asking.votes()))
    }

    #[tokio::test(start_paused = true)]
    async fn settle_never_waits_once_decided_and_gives_an_undecided_majority_the_stragglers_grace()
    {
        let ms = Duration::from_millis;
        // Decided by two yes at 10 ms: the silent third is not waited for.
        let decided = settle_with([(Some(10), true), (Some(10), true), (None, true)]).await;
        assert_eq!(decided, (ms(10), true));
        // A yes and a no at 10 ms decide nothing: the third, at 40 ms, is
        // within the grace (twice 10 ms, at least 50 ms) and decides.
        let late = settle_with([(Some(10), true), (Some(10), false), (Some(40), true)]).await;
        assert_eq!(late, (ms(40), true));
        // At 100 ms it is past the grace: the call stops undecided at 60 ms.
        let past = settle_with([(Some(10), true), (Some(10), false), (Some(100), true)]).await;
        assert_eq!(past, (ms(10) + straggler_grace(ms(10)), false));
        assert_eq!(straggler_grace(ms(10)), ms(50));
        assert_eq!(straggler_grace(ms(400)), ms(800));
        assert_eq!(straggler_grace(ms(700)), ms(1_000));
    }

    #[test]
    fn no_answer_from_any_account_is_a_time_out() {
        let limit = Duration::from_secs(2);
        let answers: Answers<()> = vec![None, None, None];
        match no_majority("renew", answers, count(3, 0, 0, 0), limit) {
            Error::Timeout { operation, after } => assert_eq!((operation, after), ("renew", limit)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fatal_only_when_a_majority_failed_fatally() {
        let forbidden = || Error::invalid("x", "y");
        let answers: Answers<()> = vec![
            Some(Err(forbidden())),
            Some(Err(Error::transport("renew", "down"))),
            Some(Err(forbidden())),
        ];
        assert!(no_majority("renew", answers, count(3, 0, 0, 3), Duration::ZERO).is_fatal());
        let answers: Answers<()> = vec![
            Some(Err(forbidden())),
            Some(Err(Error::transport("renew", "down"))),
            Some(Ok(())),
        ];
        let e = no_majority("renew", answers, count(3, 1, 0, 2), Duration::ZERO);
        assert!(e.is_transient(), "one bad account is not the end: {e}");
        let answers: Answers<()> = vec![Some(Err(forbidden())), Some(Ok(())), None];
        let e = no_majority("renew", answers, count(3, 1, 1, 1), Duration::ZERO);
        assert!(matches!(e, Error::Transport { .. }), "{e:?}");
    }
}
