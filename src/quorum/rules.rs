//! The quorum's decisions as pure functions of what the accounts answered:
//! the count and its majority, the read of a new term's epoch, the epoch a
//! stamp gives the term, what a renewal makes of its answers, and which
//! accounts it brings up to the term's stamp.
//!
//! No I/O, no clock, no runtime, nothing but `std`: the store's calls
//! (`calls.rs`, `epoch.rs`) decide with these, and so does the model checker
//! in `crates/model/tests/model`, which compiles this file on its own and explores every
//! interleaving of them (see the guide's chapter on the model).

/// How one account's answer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    /// What the call wanted: granted, renewed, stamped, released.
    Yes,
    /// A definitive refusal: held by another id, or lost.
    No,
    /// No answer that says anything: a transient or fatal error.
    Failed,
}

/// The answers counted so far, out of `n` accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Votes {
    pub(crate) n: usize,
    pub(crate) yes: usize,
    pub(crate) no: usize,
    pub(crate) failed: usize,
    /// Accounts asked that have not answered yet.
    pub(crate) pending: usize,
}

impl Votes {
    pub(crate) fn new(n: usize) -> Self {
        Votes {
            n,
            yes: 0,
            no: 0,
            failed: 0,
            pending: 0,
        }
    }

    /// The count of `votes` out of `n` accounts, none pending (the
    /// accounts with no vote were not asked, or stayed silent).
    pub(crate) fn of(n: usize, votes: impl IntoIterator<Item = Vote>) -> Self {
        let mut count = Votes::new(n);
        for vote in votes {
            count.add(vote);
        }
        count
    }

    /// The smallest number of accounts that is more than half of them.
    pub(crate) fn majority(self) -> usize {
        majority(self.n)
    }

    pub(crate) fn add(&mut self, vote: Vote) {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
            Vote::Failed => self.failed += 1,
        }
    }

    /// A majority said yes.
    pub(crate) fn won(self) -> bool {
        self.yes >= self.majority()
    }

    /// Definitive refusals alone leave no majority that could say yes.
    pub(crate) fn lost(self) -> bool {
        self.no > self.n - self.majority()
    }

    /// Refusals and failures together leave no majority that could say yes.
    pub(crate) fn hopeless(self) -> bool {
        self.no + self.failed > self.n - self.majority()
    }

    /// The call's outcome cannot change any more: won, lost, or hopeless
    /// with too few accounts left to answer for it to become lost (so that
    /// a definitive loss is not reported as a failure because the failures
    /// happened to answer first).
    pub(crate) fn decided(self) -> bool {
        let could_be_lost = self.no + self.pending > self.n - self.majority();
        self.won() || self.lost() || (self.hopeless() && !could_be_lost)
    }
}

/// The smallest number of `n` accounts that is more than half of them.
pub(crate) fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// How one account's lease blob counts for the read of a new term's
/// epoch: it carries an epoch (`Some` above 0), has none (`Some(0)`: never
/// stamped, or it lost its blob), or did not answer (`None`).
pub(crate) fn vote_carried(epoch: Option<u64>) -> Vote {
    match epoch {
        Some(e) if e > 0 => Vote::Yes,
        Some(_) => Vote::No,
        None => Vote::Failed,
    }
}

/// The read of a new term's epoch is decided once a majority carries an
/// epoch, once every account answered, or once neither can happen any
/// more.
pub(crate) fn read_decided(votes: Votes) -> bool {
    votes.won()
        || votes.pending == 0
        || (votes.yes + votes.pending < votes.majority() && votes.failed > 0)
}

/// What a read of the epochs, counted with [`vote_carried`], tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadOutcome {
    /// The largest epoch read is the last one any term used. Read from
    /// every account, not from a majority that carries epochs, when
    /// `from_every_account`: no majority would carry this term's epoch if
    /// the accounts that miss its stamp stayed without one.
    Last { from_every_account: bool },
    /// Fewer than a majority answered.
    TooFewAnswered,
    /// A majority answered, but no majority carries an epoch and not every
    /// account answered: the last epoch may be on one that did not.
    NoMajorityCarries,
}

/// The outcome of a read of the epochs (see [`ReadOutcome`]).
pub(crate) fn read_outcome(votes: Votes) -> ReadOutcome {
    if votes.won() || votes.yes + votes.no == votes.n {
        ReadOutcome::Last {
            from_every_account: !votes.won(),
        }
    } else if votes.yes + votes.no < votes.majority() {
        ReadOutcome::TooFewAnswered
    } else {
        ReadOutcome::NoMajorityCarries
    }
}

/// A new term's epoch from the last one read: one more, at least `floor`.
/// `None` past `u64::MAX`.
pub(crate) fn next_epoch(last: u64, floor: u64) -> Option<u64> {
    Some(last.checked_add(1)?.max(floor))
}

/// How an account's answer to a stamp at `epoch` counts: it carries the
/// epoch or more (`Some`), lost the lease, or failed.
pub(crate) fn vote_stamped(answer: Stamped, epoch: u64) -> Vote {
    match answer {
        Stamped::Carries(e) if e >= epoch => Vote::Yes,
        Stamped::Lost => Vote::No,
        Stamped::Carries(_) | Stamped::Failed => Vote::Failed,
    }
}

/// One account's answer to a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamped {
    /// Stamped; the epoch it now carries.
    Carries(u64),
    /// The lease is not held under the term's id there.
    Lost,
    /// No answer that says anything.
    Failed,
}

/// The largest epoch that a majority of the accounts answered a stamp with
/// (each carries it or more); `None` without a majority of answers.
pub(crate) fn carried_by_majority(carried: &[Option<u64>], majority: usize) -> Option<u64> {
    let mut epochs: Vec<u64> = carried.iter().flatten().copied().collect();
    epochs.sort_unstable_by(|a, b| b.cmp(a));
    epochs.get(majority.checked_sub(1)?).copied()
}

/// The lift after a stamp: when the accounts that answered carry different
/// epochs (a record started again at storage's clock on some, or one
/// carried a larger epoch already), the largest, and the accounts behind it
/// to be stamped again at it, so that every account that answered carries
/// one epoch for the term. `None` when they all carry the same.
pub(crate) fn lift(carried: &[Option<u64>]) -> Option<(u64, Vec<bool>)> {
    let top = carried.iter().flatten().copied().max()?;
    if carried.iter().flatten().all(|e| *e == top) {
        return None;
    }
    let behind = carried.iter().map(|e| e.is_some_and(|e| e < top)).collect();
    Some((top, behind))
}

/// Whether an account that carries `carried` must be stamped to carry the
/// term's `epoch`: only when it is behind, so that an account whose answer
/// to the stamp was lost is not raised past it.
pub(crate) fn behind_the_stamp(carried: u64, epoch: u64) -> bool {
    carried < epoch
}

/// Whether the accounts of `basis` (those the deadline rests on), less
/// those found `gone` since, are still a majority of all the accounts.
pub(crate) fn basis_holds(basis: &[bool], gone: &[bool]) -> bool {
    let left = basis
        .iter()
        .zip(gone)
        .filter(|(basis, gone)| **basis && !**gone)
        .count();
    left >= majority(basis.len())
}

/// One account's answer to a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Held: renewed, or (`again`) acquired again under the term's id, the
    /// blob perhaps new, with another stamp.
    Held { again: bool },
    /// The lease is gone there: broken, taken, or the blob missing.
    Gone,
    /// Failed, or not heard from.
    Failed,
}

impl Renewed {
    /// How the answer counts.
    pub(crate) fn vote(self) -> Vote {
        match self {
            Renewed::Held { .. } => Vote::Yes,
            Renewed::Gone => Vote::No,
            Renewed::Failed => Vote::Failed,
        }
    }
}

/// What a renewal decides from its count and the term's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewOutcome {
    /// A majority held: the deadline moves to this renewal's send time.
    Renewed,
    /// A majority refused: the lease is lost.
    Lost,
    /// No majority held, and the leases the deadline rests on, less those
    /// found gone, are no longer a majority: lost although no majority
    /// refused (another candidate may hold a gone account and a free one).
    BasisGone,
    /// No majority either way: a transient failure, retried until the
    /// deadline.
    NoMajority,
}

/// Where a term stands on each account, as far as its calls tell.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Standing {
    /// Whether the lease was last known held there.
    pub(crate) held: Vec<bool>,
    /// Whether it is known to carry the term's stamp, under a lease held
    /// without a break since it was stamped or brought up to date.
    pub(crate) current: Vec<bool>,
    /// Whether it granted or renewed the lease in the last call that won a
    /// majority. The caller's deadline rests on these leases: each lasts
    /// until that call was made plus the duration.
    pub(crate) basis: Vec<bool>,
    /// Whether the lease was found gone there since that call (broken, or
    /// the account lost it: restarted empty).
    pub(crate) gone: Vec<bool>,
}

impl Standing {
    /// A term just acquired on the accounts `granted`, whose deadline rests
    /// on the accounts `basis` (those of them that count).
    pub(crate) fn new(granted: Vec<bool>, basis: Vec<bool>) -> Self {
        let n = granted.len();
        Standing {
            basis,
            held: granted,
            current: vec![false; n],
            gone: vec![false; n],
        }
    }

    /// Whether the leases the deadline rests on, less those found gone,
    /// are still a majority. When they are not, the deadline no longer
    /// holds: another candidate may already have won a majority with the
    /// accounts that lost the lease.
    pub(crate) fn basis_holds(&self) -> bool {
        basis_holds(&self.basis, &self.gone)
    }

    /// Takes a renewal's answers (one per account) and their count, and
    /// decides it. An account not known to carry the stamp any more is one
    /// not renewed under a lease held since (an account not heard from may
    /// have lost its blob and been leased again).
    pub(crate) fn renewed(&mut self, answers: &[Renewed], votes: Votes) -> RenewOutcome {
        for (i, answer) in answers.iter().enumerate() {
            match answer {
                Renewed::Held { .. } => self.held[i] = true,
                Renewed::Gone => {
                    self.held[i] = false;
                    self.gone[i] = true;
                }
                Renewed::Failed => {}
            }
            self.current[i] &= *answer == Renewed::Held { again: false };
        }
        if votes.won() {
            self.basis = answers
                .iter()
                .map(|a| matches!(a, Renewed::Held { .. }))
                .collect();
            self.gone.fill(false);
            RenewOutcome::Renewed
        } else if votes.lost() {
            RenewOutcome::Lost
        } else if !self.basis_holds() {
            RenewOutcome::BasisGone
        } else {
            RenewOutcome::NoMajority
        }
    }

    /// The accounts a renewal with `answers` just held that are not known
    /// to carry the term's stamp: to be read, and stamped when behind.
    pub(crate) fn behind(&self, answers: &[Renewed]) -> Vec<bool> {
        answers
            .iter()
            .zip(&self.current)
            .map(|(answer, current)| matches!(answer, Renewed::Held { .. }) && !current)
            .collect()
    }

    /// The term stamped, and each account answered whether it carries at
    /// least the term's epoch.
    pub(crate) fn stamped(&mut self, carries: Vec<bool>) {
        self.current = carries;
    }
}

/// One account's answer to an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Granted under the proposed id.
    Granted,
    /// Held under another id.
    Held,
    /// Failed, or not heard from: it may have granted all the same.
    Failed,
}

impl Acquired {
    /// How the answer counts.
    pub(crate) fn vote(self) -> Vote {
        match self {
            Acquired::Granted => Vote::Yes,
            Acquired::Held => Vote::No,
            Acquired::Failed => Vote::Failed,
        }
    }
}

/// What an acquire decides from its answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    /// The accounts that count (see `hold_off::counted`) are a majority:
    /// the term's standing starts on the accounts that granted, its
    /// deadline resting on those that count.
    Won(Standing),
    /// No majority granted, or too few of the granted accounts count: the
    /// lease is given back on `release` (every account that granted,
    /// failed or stayed silent, since it may have granted), and the answer
    /// is "held" when leases held under other ids made a majority
    /// impossible or accounts were held off (`held`), else the accounts'
    /// error.
    Refused { release: Vec<bool>, held: bool },
}

/// Decides an acquire from each account's answer, their count, and, once
/// a majority granted, which granted accounts count toward the new term's
/// majority (`counted`, from the hold-off's reads).
pub(crate) fn acquire_outcome(
    answers: &[Acquired],
    votes: Votes,
    counted: Option<&[bool]>,
) -> AcquireOutcome {
    if let Some(counted) = counted {
        if counted.iter().filter(|c| **c).count() >= votes.majority() {
            let granted = answers.iter().map(|a| *a == Acquired::Granted).collect();
            return AcquireOutcome::Won(Standing::new(granted, counted.to_vec()));
        }
    }
    AcquireOutcome::Refused {
        release: answers.iter().map(|a| *a != Acquired::Held).collect(),
        held: votes.won() || votes.lost(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The count of `n` accounts with these answers, the rest pending.
    pub(crate) fn count(n: usize, yes: usize, no: usize, failed: usize) -> Votes {
        Votes {
            n,
            yes,
            no,
            failed,
            pending: n - yes - no - failed,
        }
    }

    #[test]
    fn majorities() {
        assert_eq!(
            [1, 2, 3, 4, 5, 9].map(majority),
            [1, 2, 2, 3, 3, 5],
            "more than half"
        );
    }

    #[test]
    fn decided_as_soon_as_the_outcome_is_fixed() {
        assert!(count(3, 2, 0, 0).won());
        assert!(!count(3, 1, 0, 1).decided(), "the third account decides");
        assert!(count(3, 1, 0, 2).hopeless());
        assert!(!count(3, 1, 0, 2).lost(), "failures are not refusals");
        assert!(count(3, 0, 2, 0).lost());
        assert!(count(3, 1, 1, 1).hopeless());
        assert!(
            count(3, 0, 0, 2).decided(),
            "one refusal more could not make it a loss"
        );
        assert!(count(3, 0, 1, 2).decided());
        assert!(
            !count(5, 0, 1, 2).decided(),
            "two refusals more would make it a loss"
        );
        assert!(!count(5, 2, 1, 1).decided());
        assert!(count(5, 2, 2, 1).hopeless());
        assert!(
            count(4, 1, 2, 0).lost(),
            "two of four refusing leaves no three"
        );
    }

    #[test]
    fn the_read_waits_for_a_majority_carrying_an_epoch_or_for_everyone() {
        assert!(read_decided(count(3, 2, 0, 0)));
        assert!(!read_decided(count(3, 1, 1, 0)), "the third may carry one");
        assert!(!read_decided(count(3, 0, 2, 0)), "the first term needs all");
        assert!(read_decided(count(3, 0, 3, 0)));
        assert!(
            read_decided(count(3, 0, 2, 1)),
            "no first term with one failed"
        );
        assert!(read_decided(count(3, 1, 2, 0)));
        assert!(read_decided(count(3, 1, 1, 1)));
        assert_eq!(
            read_outcome(count(3, 0, 3, 0)),
            ReadOutcome::Last {
                from_every_account: true
            }
        );
        assert_eq!(
            read_outcome(count(3, 1, 1, 1)),
            ReadOutcome::NoMajorityCarries
        );
        assert_eq!(read_outcome(count(3, 1, 0, 2)), ReadOutcome::TooFewAnswered);
    }

    #[test]
    fn a_renewal_that_finds_a_lease_of_its_basis_gone_without_a_majority_is_lost() {
        let mut standing = Standing::new(vec![false, true, true], vec![false, true, true]);
        let answers = [
            Renewed::Failed,
            Renewed::Gone,
            Renewed::Held { again: false },
        ];
        let votes = Votes::of(3, answers.iter().map(|a| a.vote()));
        assert_eq!(standing.renewed(&answers, votes), RenewOutcome::BasisGone);
        let mut standing = Standing::new(vec![true; 3], vec![true; 3]);
        assert_eq!(standing.renewed(&answers, votes), RenewOutcome::NoMajority);
    }

    #[test]
    fn an_acquire_without_a_majority_gives_back_all_but_the_refusals() {
        let answers = [Acquired::Granted, Acquired::Held, Acquired::Failed];
        let votes = Votes::of(3, answers.iter().map(|a| a.vote()));
        assert_eq!(
            acquire_outcome(&answers, votes, None),
            AcquireOutcome::Refused {
                release: vec![true, false, true],
                held: false
            }
        );
        let answers = [Acquired::Granted, Acquired::Held, Acquired::Granted];
        let votes = Votes::of(3, answers.iter().map(|a| a.vote()));
        assert_eq!(
            acquire_outcome(&answers, votes, Some(&[true, false, false])),
            AcquireOutcome::Refused {
                release: vec![true, false, true],
                held: true
            },
            "held off"
        );
        let AcquireOutcome::Won(standing) =
            acquire_outcome(&answers, votes, Some(&[true, false, true]))
        else {
            panic!("a majority counts");
        };
        assert_eq!(standing.basis, [true, false, true]);
    }
}
