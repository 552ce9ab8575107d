//! The calls of one instance's step against the accounts: the campaign
//! (acquire, read, stamp), the renewal with its catch-up, and the end of a
//! term, on the crate's own decisions.

use std::fmt::Write as _;
use std::time::Duration;

use super::{show, Account, Call, Carries, Id, Lost, Mishap, Quorum, State, Term, EPOCH_BITS};
use crate::hold_off::{self, first_missing, on_the_same_blob, Read};
use crate::rules::{
    acquire_outcome, behind_the_stamp, carried_by_majority, lift, majority, next_epoch,
    read_decided, read_outcome, vote_carried, vote_stamped, AcquireOutcome, Acquired, ReadOutcome,
    RenewOutcome, Renewed, Stamped, Standing, Vote, Votes,
};

impl Quorum {
    fn answer_lost(lose: Lost, call: Call, a: usize) -> bool {
        lose == Some((call, a, Mishap::Answer))
    }

    /// Whether the request of `call` to account `a` never reached it.
    fn dropped(lose: Lost, call: Call, a: usize) -> bool {
        lose == Some((call, a, Mishap::Request))
    }

    /// The account whose answer to `call` comes last, if one is chosen.
    fn late(lose: Lost, call: Call) -> Option<usize> {
        match lose {
            Some((c, a, Mishap::Late)) if c == call => Some(a),
            _ => None,
        }
    }

    pub(super) fn campaign(&self, s: &mut State, i: usize, lose: Lost, log: &mut String) {
        let (t, id) = (s.t, (i, s.instances[i].round));
        let mut answers: Vec<Acquired> = (0..self.0.accounts)
            .map(|a| {
                if s.down & (1 << a) != 0 || Self::dropped(lose, Call::Lease, a) {
                    return Acquired::Failed;
                }
                let account = &mut s.accounts[a];
                let answer = match account.lease {
                    Some((holder, expires)) if holder != id && t < expires => Acquired::Held,
                    _ => {
                        account.lease = Some((id, self.expires(t)));
                        Acquired::Granted
                    }
                };
                if Self::answer_lost(lose, Call::Lease, a) {
                    Acquired::Failed
                } else {
                    answer
                }
            })
            .collect();
        let votes = self.settle(
            &mut answers,
            (Acquired::Failed, Acquired::vote),
            Self::late(lose, Call::Lease),
            // A won acquire collects the late answers for a grace.
            (Votes::decided, Votes::won),
        );
        let _ = write!(log, "i{i} acquires {}", show(&answers));
        for (a, answer) in answers.iter().enumerate() {
            let record = &mut s.instances[i].missing[a];
            let held = *answer == Acquired::Held;
            if first_missing(record.map(|r| r.0), Read::Unread, held, t).is_none() {
                *record = None;
            }
        }
        let counted = votes.won().then(|| self.counted(s, i, &answers, lose, log));
        match acquire_outcome(&answers, votes, counted.as_deref()) {
            AcquireOutcome::Refused { release, .. } => {
                let _ = write!(log, ": no majority counts, gives back what it may hold");
                self.release_on(s, id, &release);
                s.instances[i].wait_until = t + 1;
            }
            AcquireOutcome::Won(standing) => {
                let _ = write!(log, ": won; ");
                self.stamp_term(s, i, standing, lose, log);
            }
        }
    }

    /// The crate's record of accounts seen without an epoch starts over on
    /// those its own term stamped, renewed or brought up to date.
    fn seen_in_term(&self, s: &mut State, i: usize, which: &[bool]) {
        if self.0.defects.stale_hold_off {
            return;
        }
        for (record, seen) in s.instances[i].missing.iter_mut().zip(which) {
            if *seen {
                *record = None;
            }
        }
    }

    /// Reads the epochs of the accounts that answered the acquire, keeps
    /// the instance's record of those seen without one, and decides which
    /// granted accounts count (the crate's hold-off).
    fn counted(
        &self,
        s: &mut State,
        i: usize,
        answers: &[Acquired],
        lose: Lost,
        log: &mut String,
    ) -> Vec<bool> {
        let t = s.t;
        let accounts: Vec<hold_off::Account> = (0..self.0.accounts)
            .map(|a| {
                let answered = answers[a] != Acquired::Failed && s.down & (1 << a) == 0;
                let read = match s.accounts[a].epoch {
                    _ if !answered || Self::answer_lost(lose, Call::Read, a) => Read::Unread,
                    0 => Read::Missing,
                    _ => Read::Carries,
                };
                let held = answers[a] == Acquired::Held;
                let version = s.accounts[a].version;
                let record = &mut s.instances[i].missing[a];
                let kept = record.as_ref().map(|(since, seen)| (*since, seen));
                let since = match read {
                    Read::Missing if !self.0.defects.any_blob => on_the_same_blob(kept, &version),
                    _ => kept.map(|(since, _)| since),
                };
                let since = first_missing(since, read, held, t);
                let seen = match (read, *record) {
                    (Read::Missing, _) | (_, None) => version,
                    (_, Some((_, seen))) => seen,
                };
                *record = since.map(|since| (since, seen));
                // Measured on the candidate's clock, which may run `drift`
                // ahead over the wait.
                let ticks = since.map_or(0, |since| t - since + self.0.drift);
                hold_off::Account {
                    granted: answers[a] == Acquired::Granted,
                    read,
                    missing_for: Duration::from_secs(ticks.into()),
                }
            })
            .collect();
        let counted = if self.0.defects.no_hold_off {
            accounts.iter().map(|a| a.granted).collect()
        } else {
            hold_off::counted(&accounts, Duration::from_secs(self.0.hold_off.into()))
        };
        if counted != accounts.iter().map(|a| a.granted).collect::<Vec<_>>() {
            let _ = write!(log, ", counts only {}", show(&counted));
        }
        counted
    }

    /// Reads the last epoch and stamps the next; the term starts acting
    /// when a majority carries it, else the lease is given back.
    fn stamp_term(
        &self,
        s: &mut State,
        i: usize,
        mut standing: Standing,
        lose: Lost,
        log: &mut String,
    ) {
        let (t, id) = (s.t, (i, s.instances[i].round));
        let mut read: Vec<Option<u64>> = (0..self.0.accounts)
            .map(|a| {
                let answered = s.down & (1 << a) == 0 && !Self::answer_lost(lose, Call::Read, a);
                answered.then_some(s.accounts[a].epoch)
            })
            .collect();
        let votes = self.settle(
            &mut read,
            (None, vote_carried),
            Self::late(lose, Call::Read),
            // The read ends once decided.
            (read_decided, |_| false),
        );
        let last = read.iter().flatten().max().copied().unwrap_or(0);
        let _ = write!(log, "reads epochs {}", show(&read));
        let ReadOutcome::Last { from_every_account } = read_outcome(votes) else {
            let _ = write!(log, ", undecided: gives the lease back");
            self.give_up(s, i);
            return;
        };
        let epoch = next_epoch(last, 0).unwrap_or(u64::MAX);
        let answers: Vec<Stamped> = (0..self.0.accounts)
            .map(|a| {
                if s.down & (1 << a) != 0 || Self::dropped(lose, Call::Stamp, a) {
                    return Stamped::Failed;
                }
                let answer = self.stamp(&mut s.accounts[a], id, epoch, t);
                if Self::answer_lost(lose, Call::Stamp, a) {
                    Stamped::Failed
                } else {
                    answer
                }
            })
            .collect();
        let mut answers = answers;
        // Read from every account, the stamp waits for every account (up
        // to its time limit): a late answer counts.
        let decided: fn(Votes) -> bool = if from_every_account {
            |_| false
        } else {
            Votes::decided
        };
        let stamped = self.settle(
            &mut answers,
            (Stamped::Failed, |a| self.vote_stamped(a, epoch)),
            Self::late(lose, Call::Stamp),
            (decided, |_| true),
        );
        let _ = write!(log, ", stamps {epoch}: {}", show(&answers));
        self.lift(s, id, &mut answers, log);
        // The same accounts answered; only what some of them carry changed.
        let votes = Votes {
            pending: stamped.pending,
            ..self.votes(answers.iter().map(|a| self.vote_stamped(*a, epoch)))
        };
        let carried: Vec<Option<u64>> = answers.iter().map(Carries::carries).collect();
        if !votes.won() {
            let _ = write!(log, ", no majority: gives the lease back");
            self.give_up(s, i);
            return;
        }
        for (a, c) in carried.iter().enumerate() {
            if c.is_some() {
                s.unheld &= !(1 << a);
            }
        }
        self.seen_in_term(
            s,
            i,
            &carried.iter().map(Option::is_some).collect::<Vec<_>>(),
        );
        let epoch = carried_by_majority(&carried, votes.majority()).map_or(epoch, |e| e.max(epoch));
        if carried.iter().flatten().any(|c| *c != epoch) {
            let _ = write!(log, ", an account it stamped carries another epoch");
            s.stamped_apart = true;
        }
        standing.stamped(
            carried
                .iter()
                .map(|c| c.is_some_and(|e| e >= epoch))
                .collect(),
        );
        let _ = write!(
            log,
            "; leads at epoch {epoch} until tick {}",
            self.deadline(t)
        );
        if s.newest.is_some_and(|(newest, _)| epoch <= newest) {
            s.epoch_went_back = true;
        }
        s.newest = Some((epoch, id));
        s.instances[i].term = Some(Term {
            standing,
            epoch,
            deadline: self.deadline(t),
            renew_at: t + self.0.renew,
            broken: None,
        });
    }

    /// Lifts every account that answered a stamp to the largest epoch
    /// they answered, as the crate's `lift`.
    fn lift(&self, s: &mut State, id: Id, answers: &mut [Stamped], log: &mut String) {
        let carried: Vec<Option<u64>> = answers.iter().map(Carries::carries).collect();
        if let Some((top, behind)) = lift(&carried) {
            let _ = write!(log, ", lifts to {top}");
            for a in (0..self.0.accounts).filter(|a| behind[*a]) {
                answers[a] = self.stamp(&mut s.accounts[a], id, top, s.t);
            }
        }
    }

    pub(super) fn renew(&self, s: &mut State, i: usize, lose: Lost, log: &mut String) {
        let (t, id) = (s.t, (i, s.instances[i].round));
        let Some(mut term) = s.instances[i].term.take() else {
            return;
        };
        let mut answers: Vec<Renewed> = (0..self.0.accounts)
            .map(|a| {
                if s.down & (1 << a) != 0 || Self::dropped(lose, Call::Lease, a) {
                    return Renewed::Failed;
                }
                let answer = self.renew_one(&mut s.accounts[a], id, term.standing.held[a], t);
                if Self::answer_lost(lose, Call::Lease, a) {
                    Renewed::Failed
                } else {
                    answer
                }
            })
            .collect();
        let votes = self.settle(
            &mut answers,
            (Renewed::Failed, Renewed::vote),
            Self::late(lose, Call::Lease),
            (Votes::decided, |_| true),
        );
        if term.broken.is_some_and(|a| answers[a] != Renewed::Failed) {
            term.broken = None;
        }
        let kept: Vec<bool> = answers
            .iter()
            .map(|r| *r == Renewed::Held { again: false })
            .collect();
        self.seen_in_term(s, i, &kept);
        let mut outcome = term.standing.renewed(&answers, votes);
        if outcome == RenewOutcome::BasisGone && self.basis_kept_by_a_defect(&term.standing) {
            outcome = RenewOutcome::NoMajority;
        }
        let _ = write!(log, "i{i} renews {}: {outcome:?}", show(&answers));
        let early = matches!(outcome, RenewOutcome::Lost | RenewOutcome::BasisGone);
        if early && !term.standing.gone.contains(&true) {
            let _ = write!(log, " although no lease of it was found gone");
            s.ended_early = true;
        }
        match outcome {
            RenewOutcome::Renewed => {
                for (a, answer) in answers.iter().enumerate() {
                    if *answer == (Renewed::Held { again: true }) {
                        s.unheld &= !(1 << a);
                    }
                }
                term.deadline = self.deadline(t);
                term.renew_at = t + self.0.renew;
                let _ = write!(log, ", leads until tick {}", term.deadline);
                self.catch_up(s, id, &mut term, &answers, lose, log);
                self.seen_in_term(s, i, &term.standing.current);
                s.instances[i].term = Some(term);
            }
            RenewOutcome::NoMajority => {
                term.renew_at = t + 1;
                s.instances[i].term = Some(term);
            }
            RenewOutcome::Lost | RenewOutcome::BasisGone => {
                let _ = write!(log, ", stops; ");
                s.instances[i].term = Some(term);
                self.end_term(s, i, None, log);
            }
        }
    }

    /// The crate's vote of a stamp's answer, or the planted defect's.
    fn vote_stamped(&self, answer: Stamped, epoch: u64) -> Vote {
        match answer {
            Stamped::Failed if self.0.defects.stamp_unanswered_counted => Vote::Yes,
            _ => vote_stamped(answer, epoch),
        }
    }

    /// Whether a planted defect keeps the deadline where the crate's
    /// `basis_holds` ends the term: no basis rule at all, or the rule off
    /// by one (the accounts left one short of a majority still hold it).
    fn basis_kept_by_a_defect(&self, standing: &Standing) -> bool {
        let d = self.0.defects;
        let left = standing
            .basis
            .iter()
            .zip(&standing.gone)
            .filter(|(basis, gone)| **basis && !**gone)
            .count();
        d.no_basis_rule || (d.basis_on_a_minority && left + 1 >= majority(self.0.accounts))
    }

    /// Brings the accounts just held that are not known to carry the
    /// term's stamp up to it: read, and stamped when behind.
    fn catch_up(
        &self,
        s: &mut State,
        id: Id,
        term: &mut Term,
        answers: &[Renewed],
        lose: Lost,
        log: &mut String,
    ) {
        if self.0.defects.no_catch_up {
            return;
        }
        let behind = term.standing.behind(answers);
        for a in (0..self.0.accounts).filter(|a| behind[*a]) {
            if s.down & (1 << a) != 0 || Self::answer_lost(lose, Call::Read, a) {
                continue;
            }
            let carried = s.accounts[a].epoch;
            if behind_the_stamp(carried, term.epoch) {
                if Self::dropped(lose, Call::Stamp, a) {
                    continue;
                }
                let answer = self.stamp(&mut s.accounts[a], id, term.epoch, s.t);
                if s.accounts[a].epoch != term.epoch {
                    let _ = write!(log, ", raises a{a} past the term's epoch");
                    s.stamped_apart = true;
                }
                if Self::answer_lost(lose, Call::Stamp, a) {
                    continue;
                }
                if let Stamped::Carries(_) = answer {
                    let _ = write!(log, ", brings a{a} up to {}", term.epoch);
                    term.standing.current[a] = true;
                }
            } else {
                term.standing.current[a] = true;
            }
        }
    }

    fn renew_one(&self, account: &mut Account, id: Id, held: bool, t: u8) -> Renewed {
        if !held {
            // Acquired again under the same id.
            return match account.lease {
                Some((holder, expires)) if holder != id && t < expires => Renewed::Gone,
                _ => {
                    account.lease = Some((id, self.expires(t)));
                    Renewed::Held { again: true }
                }
            };
        }
        match account.lease {
            // Azure renews an expired lease when nobody else took it.
            Some((holder, _)) if holder == id => {
                account.lease = Some((id, self.expires(t)));
                Renewed::Held { again: false }
            }
            _ => Renewed::Gone,
        }
    }

    /// A stamp under `id` at `floor`: the stored epoch + 1, at least
    /// `floor`, when the lease is held under `id` and not expired.
    fn stamp(&self, account: &mut Account, id: Id, floor: u64, t: u8) -> Stamped {
        match account.lease {
            Some((holder, expires)) if holder == id && t < expires => {
                account.epoch = match self.0.clock {
                    Some(clock) if account.epoch == 0 && floor <= 1 => {
                        (clock + u64::from(t) + 1) << EPOCH_BITS
                    }
                    _ => next_epoch(account.epoch, floor).unwrap_or(u64::MAX),
                };
                account.version = account.version.wrapping_add(1);
                Stamped::Carries(account.epoch)
            }
            _ => Stamped::Lost,
        }
    }

    fn release_on(&self, s: &mut State, id: Id, which: &[bool]) {
        for a in (0..self.0.accounts).filter(|a| which[*a] && s.down & (1 << a) == 0) {
            if s.accounts[a].lease.is_some_and(|(holder, _)| holder == id) {
                s.accounts[a].lease = None;
            }
        }
        let _ = self;
    }

    /// The term is over: the task stopped, the lease is released, and the
    /// instance campaigns again after a pause, under a new id.
    pub(super) fn end_term(&self, s: &mut State, i: usize, _lose: Lost, log: &mut String) {
        s.instances[i].term = None;
        let _ = write!(log, "releases");
        self.give_up(s, i);
    }

    pub(super) fn give_up(&self, s: &mut State, i: usize) {
        let id = (i, s.instances[i].round);
        self.release_on(s, id, &vec![true; self.0.accounts]);
        let inst = &mut s.instances[i];
        inst.term = None;
        inst.round += 1;
        inst.wait_until = s.t + 1;
    }
}
