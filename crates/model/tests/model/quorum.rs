//! The quorum of accounts as a state machine: accounts as lease tables with
//! Azure's semantics, instances that campaign, stamp, renew and stop with the
//! crate's own decisions (`rules`), time as ticks, and faults from a budget.

use std::fmt::Write as _;

use stateright::{Model, Property, Representative};

use crate::check::Traced;
use crate::clock;
use crate::rules::{majority, Stamped, Standing, Vote, Votes};

mod calls;

/// A record made anew starts at storage's clock in units of 2^20 epochs a
/// second, as the crate's `first_epoch`.
pub(crate) const EPOCH_BITS: u32 = 20;

/// A lease id: the instance that proposed it and its campaign round.
pub(crate) type Id = (usize, u8);

/// Known-wrong variants of the decisions, each of which the checker must
/// find. The running code has none of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)] // one switch per planted defect
pub(crate) struct Defects {
    /// Majorities counted over the accounts that answered, not over the
    /// accounts configured.
    pub(crate) majority_of_answers: bool,
    /// The renewal rule before the basis: a lease found gone on an account
    /// the deadline rests on ends nothing unless a majority refused.
    pub(crate) no_basis_rule: bool,
    /// A new term counts every account that granted, an account found
    /// empty at once (no hold-off).
    pub(crate) no_hold_off: bool,
    /// The hold-off's record kept across the instance's own term: an
    /// account it saw empty before its term stamped it counts as empty
    /// since then.
    pub(crate) stale_hold_off: bool,
    /// The hold-off's record kept whatever blob the account shows (the
    /// crate before it compared `ETag`s): an account seen empty, stamped
    /// and lost again while the instance read nothing counts as empty since
    /// the first read.
    pub(crate) any_blob: bool,
    /// No catch-up: a renewal that acquires an account again (restarted
    /// empty) leaves it without the term's epoch.
    pub(crate) no_catch_up: bool,
    /// `basis_holds` off by one: the deadline kept while the accounts it
    /// rests on, less those found gone, are one short of a majority (a
    /// minority of the accounts).
    pub(crate) basis_on_a_minority: bool,
    /// The stamp's vote counts an account that did not answer as one that
    /// carries the term's epoch (a time-out taken for a success).
    pub(crate) stamp_unanswered_counted: bool,
}

/// How many faults of each kind may happen in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Faults {
    /// Accounts restarted empty (or whose lease blob is lost): no lease, no
    /// epoch.
    pub(crate) wipes: u8,
    /// Outages of one account: every request to it lost, from a tick until
    /// it comes back.
    pub(crate) outages: u8,
    /// Answers lost: the account applied the request, the instance never
    /// learns its outcome.
    pub(crate) losses: u8,
    /// Instances that crash for good.
    pub(crate) crashes: u8,
    /// Instances frozen from a tick to a later one (a paused process).
    pub(crate) freezes: u8,
    /// Leases broken by an operator (`blob-mutex break` on one account):
    /// the account forgets the lease and keeps its epoch, and the term
    /// that held it learns of it only from the account's next answer.
    pub(crate) breaks: u8,
    /// Requests lost on their way (an instance's path to one account cut
    /// for one call): the account never sees it. A renewal that does not
    /// reach an account lets the lease run out there under its holder, to
    /// be taken by another after it expired; a stamp that does not reach
    /// it leaves it behind the term.
    pub(crate) drops: u8,
    /// Answers that come after every other account's and after the
    /// straggler's grace: the instance decides the call without them when
    /// the others decide it, as the crate's calls stop once their count is
    /// decided. A fault for the bound on a new leader only: an account that
    /// answers that late is one the call goes on without.
    pub(crate) lates: u8,
}

/// One configuration of the model.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Instances campaigning.
    pub(crate) instances: usize,
    /// Accounts of the quorum.
    pub(crate) accounts: usize,
    /// The lease duration D, in ticks.
    pub(crate) lease: u8,
    /// The drift allowance: over a lease, an account's clock may run this
    /// many ticks ahead of real time and an instance's this many behind.
    pub(crate) drift: u8,
    /// The safety margin: the deadline is the send time + D − margin.
    pub(crate) margin: u8,
    /// The renew interval, in ticks.
    pub(crate) renew: u8,
    /// The hold-off of an account found without an epoch: the longest
    /// lease plus its drift allowance, as the crate's `HOLD_OFF`.
    pub(crate) hold_off: u8,
    /// The last tick explored.
    pub(crate) horizon: u8,
    /// After the last fault, a leader acts within this many ticks.
    pub(crate) bound: u8,
    /// The fault budget.
    pub(crate) faults: Faults,
    /// Planted defects (none for the running code's decisions).
    pub(crate) defects: Defects,
    /// Storage's clock at tick 0, in seconds since 1970, when a record made
    /// anew starts its epochs from it as the crate does (the second after,
    /// in 2^20 epochs a second); `None`: it starts at the floor (1 for a
    /// first term). Only a first term, or one after a majority lost its
    /// records, stamps a record with no floor: the configurations checked
    /// exhaustively start at 1, a replay at the clock its run recorded.
    pub(crate) clock: Option<u64>,
}

impl Config {
    /// 3 instances × 3 accounts: one account restarted empty, one down for
    /// a while, any one answer lost, one crash.
    pub(crate) fn three_by_three() -> Self {
        Config {
            instances: 3,
            accounts: 3,
            lease: 4,
            drift: 1,
            margin: 2,
            renew: 2,
            hold_off: 5,
            horizon: 10,
            bound: 3,
            faults: Faults {
                wipes: 1,
                outages: 1,
                losses: 1,
                crashes: 1,
                freezes: 0,
                breaks: 0,
                drops: 0,
                lates: 0,
            },
            defects: Defects::default(),
            clock: None,
        }
    }
}

/// One account's lease table and blob.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Account {
    /// The lease: its id and the tick at which the account expires it.
    pub(crate) lease: Option<(Id, u8)>,
    /// The epoch stamped on the blob; 0 when none (never stamped, or lost).
    pub(crate) epoch: u64,
    /// The blob's version (its `ETag`): one more with every stamp, and
    /// when the blob is lost and made again.
    pub(crate) version: u8,
}

/// One instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Instance {
    /// The current campaign round: a new lease id per term.
    pub(crate) round: u8,
    /// Leading a term, if it is.
    pub(crate) term: Option<Term>,
    /// The first tick at which it campaigns again.
    pub(crate) wait_until: u8,
    /// Per account: the tick since which it has seen it without an epoch,
    /// and the blob's version then (the hold-off's record).
    pub(crate) missing: Vec<Option<(u8, u8)>>,
    /// Crashed for good.
    pub(crate) crashed: bool,
    /// Frozen: takes no step.
    pub(crate) frozen: bool,
}

/// A term an instance leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Term {
    /// The term's standing on each account (the crate's bookkeeping).
    pub(crate) standing: Standing,
    /// The term's epoch.
    pub(crate) epoch: u64,
    /// The real tick at which its task has stopped at the latest: its local
    /// deadline, on a clock that runs `drift` behind.
    pub(crate) deadline: u8,
    /// The tick of its next renewal.
    pub(crate) renew_at: u8,
    /// The account on which an operator broke its lease, until an answer
    /// from there tells the term (a renewal's, which reaches it).
    pub(crate) broken: Option<usize>,
}

/// The whole system at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(clippy::struct_excessive_bools)] // one flag per promise checked
pub(crate) struct State {
    /// Real time, in ticks.
    pub(crate) t: u8,
    /// The accounts.
    pub(crate) accounts: Vec<Account>,
    /// The instances.
    pub(crate) instances: Vec<Instance>,
    /// The instances that took their step in this tick (a bit each).
    pub(crate) moved: u16,
    /// The accounts down (a bit each).
    pub(crate) down: u16,
    /// The faults still to come.
    pub(crate) left: Faults,
    /// The accounts restarted empty that no term has held since (by a
    /// renewal that won, or a new term's stamp): the quorum's assumption
    /// is that these stay fewer than a majority.
    pub(crate) unheld: u16,
    /// The tick of the last fault.
    pub(crate) last_fault: u8,
    /// Whether a leader acted since the last fault.
    pub(crate) led_since_fault: bool,
    /// The fenced register: the largest epoch written.
    pub(crate) register: u64,
    /// The largest epoch of a term that acted, and its lease id.
    pub(crate) newest: Option<(u64, Id)>,
    /// A term started with an epoch not above an earlier term's.
    pub(crate) epoch_went_back: bool,
    /// A write of a term that a newer one deposed was accepted.
    pub(crate) deposed_write: bool,
    /// A term ended before its deadline although no account had been found
    /// without its lease since its last renewal that won: nothing but
    /// failures and silence, which the term must ride out until its
    /// deadline.
    pub(crate) ended_early: bool,
    /// A term's own stamp (its first, the lift after it, or a catch-up)
    /// left an account at an epoch other than the term's.
    pub(crate) stamped_apart: bool,
}

impl State {
    /// The instances whose task may be acting at this instant.
    pub(crate) fn acting(&self) -> impl Iterator<Item = usize> + '_ {
        self.instances.iter().enumerate().filter_map(|(i, inst)| {
            let term = inst.term.as_ref()?;
            (!inst.crashed && self.t < term.deadline).then_some(i)
        })
    }

    /// The accounts (a bit each) on which an operator broke the lease of a
    /// term that has not heard of it.
    pub(crate) fn broken(&self) -> u16 {
        self.instances
            .iter()
            .filter(|inst| !inst.crashed)
            .filter_map(|inst| inst.term.as_ref()?.broken)
            .fold(0, |bits, a| bits | 1 << a)
    }

    /// The acting instances the quorum answers for: all but a term whose
    /// lease an operator broke and that has not heard from that account
    /// since. As on one account, such a term acts on until an answer tells
    /// it (the guide's guarantees), and another may lead meanwhile; from
    /// that answer on, the quorum's rules must end it before another leads.
    pub(crate) fn answered_for(&self) -> impl Iterator<Item = usize> + '_ {
        self.acting().filter(|i| {
            let term = self.instances[*i].term.as_ref();
            term.is_some_and(|t| t.broken.is_none())
        })
    }
}

/// A call of one step, the account, and what was lost of it there.
pub(crate) type Lost = Option<(Call, usize, Mishap)>;

/// What goes wrong with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mishap {
    /// Its answer is lost: the account applied the request, the instance
    /// counts it as failed.
    Answer,
    /// The request is lost on its way: the account never sees it, the
    /// instance counts it as failed.
    Request,
    /// Its answer comes after every other account's: the account applied
    /// the request, and the instance counts the answer only if the others
    /// leave the call undecided (see [`Quorum::settle`]).
    Late,
}

/// What can happen next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// An instance takes its step of this tick; `lose` names a call of it,
    /// the account, and whether its answer or the request is lost there;
    /// the accounts in `cut` (a bit each) do not get its requests (a fault
    /// on its own path: only a replay of a chaos run takes this, from the
    /// faults it recorded).
    Step {
        instance: usize,
        lose: Lost,
        cut: u8,
    },
    /// An instance is slow: its step of this tick comes later (only a
    /// replay takes this: a real process may lag behind any schedule).
    Skip(usize),
    /// An instance is stopped (SIGTERM): it ends its term, gives back its
    /// leases, and takes no step again (only a replay takes this).
    Leave(usize),
    /// A new process takes the place of one that ended: no memory, a new
    /// lease id (only a replay takes this).
    Restart(usize),
    /// Time advances one tick.
    Tick,
    /// An account restarts empty.
    Wipe(usize),
    /// An account goes down.
    Down(usize),
    /// An account comes back.
    Up(usize),
    /// An operator breaks the lease on an account.
    Break(usize),
    /// An instance crashes.
    Crash(usize),
    /// An instance freezes.
    Freeze(usize),
    /// An instance wakes.
    Thaw(usize),
}

/// The calls of one step, whose answer from one account may be lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Call {
    /// The acquire or the renewal.
    Lease,
    /// The read of the epochs.
    Read,
    /// The stamp (of a new term, or a catch-up).
    Stamp,
}

trait Carries {
    fn carries(&self) -> Option<u64>;
}

impl Carries for Stamped {
    fn carries(&self) -> Option<u64> {
        match self {
            Stamped::Carries(e) => Some(*e),
            Stamped::Lost | Stamped::Failed => None,
        }
    }
}

/// The model: a configuration.
#[derive(Debug, Clone)]
pub(crate) struct Quorum(pub Config);

impl Quorum {
    fn votes(&self, votes: impl IntoIterator<Item = Vote> + Clone) -> Votes {
        Votes::of(self.count_over(votes.clone()), votes)
    }

    /// The number of accounts a count is over: all of them, or under the
    /// planted defect those that answered.
    fn count_over(&self, votes: impl IntoIterator<Item = Vote>) -> usize {
        if self.0.defects.majority_of_answers {
            votes.into_iter().filter(|v| *v != Vote::Failed).count()
        } else {
            self.0.accounts
        }
    }

    /// The answers to one call as the crate's `Asking` takes them: in the
    /// order they come (by account, `late`'s last), each counted with
    /// `vote`, until `decided` says the count is enough; then, when
    /// `collects` says so of the count, the others that come within the
    /// straggler's grace (all but `late`, whose answer comes after it).
    /// The answers it did not take become `unknown` (the account applied
    /// the request; the instance never learns how). The count of those it
    /// took.
    pub(crate) fn settle<T: Copy>(
        &self,
        answers: &mut [T],
        (unknown, vote): (T, impl Fn(T) -> Vote),
        late: Option<usize>,
        (decided, collects): (impl Fn(Votes) -> bool, impl Fn(Votes) -> bool),
    ) -> Votes {
        let mut votes = Votes::new(self.count_over(answers.iter().map(|a| vote(*a))));
        votes.pending = answers.len();
        let mut collecting = None;
        for a in (0..answers.len()).filter(|a| Some(*a) != late).chain(late) {
            let taken = match collecting {
                None if decided(votes) => {
                    collecting = Some(collects(votes));
                    collecting == Some(true) && Some(a) != late
                }
                None => true,
                Some(collect) => collect && Some(a) != late,
            };
            if taken {
                votes.add(vote(answers[a]));
                votes.pending -= 1;
            } else {
                answers[a] = unknown;
            }
        }
        votes
    }

    fn expires(&self, t: u8) -> u8 {
        clock::expires(t, self.0.lease, self.0.drift)
    }

    fn deadline(&self, sent: u8) -> u8 {
        clock::deadline(sent, self.0.lease, self.0.margin, self.0.drift)
    }

    /// The step an instance takes now, or `None` when it has nothing to
    /// do that another could see (or cannot step).
    pub(crate) fn plan(state: &State, i: usize) -> Option<Plan> {
        let inst = &state.instances[i];
        if inst.crashed || inst.frozen || state.moved & (1 << i) != 0 {
            return None;
        }
        match &inst.term {
            Some(term) if state.t >= term.deadline => Some(Plan::Stop),
            Some(term) if state.t >= term.renew_at => Some(Plan::Renew),
            None if state.t >= inst.wait_until => Some(Plan::Campaign),
            // Working or waiting: nothing another instance could see
            // before the tick (an acting leader's work is written then).
            Some(_) | None => None,
        }
    }

    /// Applies `action`, and says what happened.
    fn step(&self, state: &State, action: Action) -> Option<(State, String)> {
        let mut s = state.clone();
        let mut log = String::new();
        match action {
            Action::Tick => {
                // Every acting leader works (writes) in the tick that ends.
                let _ = write!(log, "tick {} ends", s.t);
                for i in 0..s.instances.len() {
                    self.write(&mut s, i, &mut log);
                }
                s.t += 1;
                s.moved = 0;
            }
            Action::Step {
                instance,
                lose,
                cut,
            } => {
                s.moved |= 1 << instance;
                // A cut path is an account down for this step alone.
                let down = s.down;
                s.down |= u16::from(cut);
                match lose {
                    Some((_, _, Mishap::Answer)) => s.left.losses -= 1,
                    Some((_, _, Mishap::Request)) => s.left.drops -= 1,
                    Some((_, _, Mishap::Late)) => s.left.lates -= 1,
                    None => {}
                }
                if lose.is_some() {
                    fault(&mut s);
                }
                match Self::plan(state, instance)? {
                    Plan::Stop => {
                        let _ = write!(log, "i{instance} reaches its deadline and stops; ");
                        self.end_term(&mut s, instance, lose, &mut log);
                    }
                    Plan::Renew => self.renew(&mut s, instance, lose, &mut log),
                    Plan::Campaign => self.campaign(&mut s, instance, lose, &mut log),
                }
                note_mishap(&mut log, lose);
                if cut != 0 {
                    let _ = write!(log, " (cut off from {})", accounts(cut));
                }
                s.down = down;
            }
            Action::Skip(_) | Action::Leave(_) | Action::Restart(_) => {
                self.process(&mut s, action, &mut log);
            }
            Action::Wipe(a) => {
                s.left.wipes -= 1;
                s.unheld |= 1 << a;
                s.accounts[a] = Account {
                    lease: None,
                    epoch: 0,
                    version: s.accounts[a].version.wrapping_add(1),
                };
                let _ = write!(log, "account a{a} restarts empty");
                fault(&mut s);
            }
            Action::Down(a) => {
                s.left.outages -= 1;
                s.down |= 1 << a;
                let _ = write!(log, "account a{a} goes down");
                fault(&mut s);
            }
            Action::Up(a) => {
                s.down &= !(1 << a);
                let _ = write!(log, "account a{a} comes back");
                fault(&mut s);
            }
            Action::Break(a) => break_lease(&mut s, a, &mut log),
            Action::Crash(i) => {
                s.left.crashes -= 1;
                s.instances[i].crashed = true;
                let _ = write!(log, "i{i} crashes");
                fault(&mut s);
            }
            Action::Freeze(i) => {
                s.left.freezes -= 1;
                s.instances[i].frozen = true;
                let _ = write!(log, "i{i} freezes");
                fault(&mut s);
            }
            Action::Thaw(i) => {
                s.instances[i].frozen = false;
                let _ = write!(log, "i{i} wakes");
                fault(&mut s);
            }
        }
        if s.acting().next().is_some() {
            s.led_since_fault = true;
        }
        Some((s, log))
    }

    /// What a replay does to a process (see `Action`): lags, is stopped,
    /// or starts again.
    fn process(&self, s: &mut State, action: Action, log: &mut String) {
        match action {
            Action::Skip(i) => {
                s.moved |= 1 << i;
                let _ = write!(log, "i{i} lags");
            }
            Action::Leave(i) => {
                if s.instances[i].term.is_some() {
                    let _ = write!(log, "i{i} is stopped and ");
                    self.end_term(s, i, None, log);
                } else {
                    let _ = write!(log, "i{i} is stopped");
                    self.give_up(s, i);
                }
                s.instances[i].crashed = true;
            }
            Action::Restart(i) => {
                let inst = &mut s.instances[i];
                inst.round += 1;
                inst.term = None;
                inst.wait_until = 0;
                inst.missing.iter_mut().for_each(|m| *m = None);
                inst.crashed = false;
                inst.frozen = false;
                let _ = write!(log, "i{i} starts again, a new process");
            }
            _ => unreachable!("a process's event"),
        }
    }

    /// An acting leader writes a unit of work to the fenced register.
    fn write(&self, s: &mut State, i: usize, log: &mut String) {
        if !s.acting().any(|a| a == i) {
            return;
        }
        let Some(term) = &s.instances[i].term else {
            return;
        };
        let (epoch, broken) = (term.epoch, term.broken.is_some());
        if epoch >= s.register {
            s.register = epoch;
            let id = (i, s.instances[i].round);
            // A broken term that has not heard of it may write until the
            // newer term's first write: only the register's check stops it.
            if !broken && s.newest.is_some_and(|(_, newest)| newest != id) {
                s.deposed_write = true;
                let _ = write!(
                    log,
                    "; i{i}'s write at epoch {epoch} is accepted though a newer term acted"
                );
            }
        } else {
            let _ = write!(log, "; i{i}'s write at epoch {epoch} is refused");
        }
        let _ = self;
    }
}

/// An operator breaks the lease on account `a`; the term that held it
/// does not know yet.
fn break_lease(s: &mut State, a: usize, log: &mut String) {
    s.left.breaks -= 1;
    let _ = write!(log, "an operator breaks the lease on a{a}");
    if let Some(((i, round), _)) = s.accounts[a].lease.take() {
        let inst = &mut s.instances[i];
        if let Some(term) = inst.term.as_mut().filter(|_| inst.round == round) {
            term.broken = Some(a);
            let _ = write!(log, ", i{i}'s");
        }
    }
    fault(s);
}

/// Says in the log what went wrong with a request of the step, if
/// anything did.
fn note_mishap(log: &mut String, lose: Lost) {
    let _ = match lose {
        Some((call, a, Mishap::Answer)) => {
            write!(log, " (a{a}'s answer to the {call:?} call lost)")
        }
        Some((call, a, Mishap::Request)) => {
            write!(log, " (the {call:?} request to a{a} lost on its way)")
        }
        Some((call, a, Mishap::Late)) => {
            write!(
                log,
                " (a{a}'s answer to the {call:?} call came after its grace)"
            )
        }
        None => Ok(()),
    };
}

fn fault(s: &mut State) {
    s.last_fault = s.t;
    s.led_since_fault = false;
}

/// An instance's step, from its state and the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    Stop,
    Renew,
    Campaign,
}

/// The accounts of a bit set, as `a0, a2`.
fn accounts(bits: u8) -> String {
    let each: Vec<String> = (0..8)
        .filter(|a| bits & (1 << a) != 0)
        .map(|a| format!("a{a}"))
        .collect();
    each.join(", ")
}

fn show<T: std::fmt::Debug>(answers: &[T]) -> String {
    let each: Vec<String> = answers
        .iter()
        .enumerate()
        .map(|(a, answer)| format!("a{a} {answer:?}"))
        .collect();
    format!("[{}]", each.join(", "))
}

impl Traced for Quorum {
    fn apply(&self, state: &State, action: Action) -> Option<(State, String)> {
        self.step(state, action)
    }

    fn tick(state: &State) -> u8 {
        state.t
    }

    fn shown(action: &Action, log: &str) -> bool {
        *action != Action::Tick || log.contains("write")
    }
}

impl Model for Quorum {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.0;
        vec![State {
            t: 0,
            accounts: vec![
                Account {
                    lease: None,
                    epoch: 0,
                    version: 0,
                };
                c.accounts
            ],
            instances: vec![
                Instance {
                    round: 0,
                    term: None,
                    wait_until: 0,
                    missing: vec![None; c.accounts],
                    crashed: false,
                    frozen: false,
                };
                c.instances
            ],
            moved: 0,
            down: 0,
            left: c.faults,
            unheld: 0,
            last_fault: 0,
            led_since_fault: false,
            register: 0,
            newest: None,
            epoch_went_back: false,
            deposed_write: false,
            ended_early: false,
            stamped_apart: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let c = &self.0;
        if state.t >= c.horizon {
            return;
        }
        let mut all_moved = true;
        for i in 0..c.instances {
            let Some(plan) = Self::plan(state, i) else {
                continue;
            };
            all_moved = false;
            actions.push(Action::Step {
                instance: i,
                lose: None,
                cut: 0,
            });
            if plan == Plan::Stop {
                continue;
            }
            // Any answer may be lost. A request lost on its way: a
            // renewal's (the lease runs out there, and another may take
            // it), or a new term's stamp (the account stays behind it).
            let answers: &[Call] = match state.left.losses {
                0 => &[],
                _ => &[Call::Lease, Call::Read, Call::Stamp],
            };
            let requests: &[Call] = match (state.left.drops, plan) {
                (0, _) | (_, Plan::Stop) => &[],
                (_, Plan::Renew) => &[Call::Lease],
                (_, Plan::Campaign) => &[Call::Stamp],
            };
            // Any answer may come last: the read, the stamp, and the
            // acquire or the renewal count as the crate's calls do.
            let lates: &[Call] = match state.left.lates {
                0 => &[],
                _ => &[Call::Lease, Call::Read, Call::Stamp],
            };
            let lost = answers
                .iter()
                .map(|c| (*c, Mishap::Answer))
                .chain(requests.iter().map(|c| (*c, Mishap::Request)))
                .chain(lates.iter().map(|c| (*c, Mishap::Late)));
            for (call, mishap) in lost {
                for a in (0..c.accounts).filter(|a| state.down & (1 << a) == 0) {
                    actions.push(Action::Step {
                        instance: i,
                        lose: Some((call, a, mishap)),
                        cut: 0,
                    });
                }
            }
        }
        if all_moved {
            actions.push(Action::Tick);
        }
        // Faults come between ticks, before any instance's step.
        if state.moved != 0 {
            return;
        }
        // A break is an account that forgot a lease: until the term it
        // broke has heard of it, it counts beside the accounts restarted
        // empty toward the failures the quorum survives (a minority).
        let forgot = state.unheld | state.broken();
        for a in 0..c.accounts {
            let within = ((forgot | 1 << a).count_ones() as usize) < majority(c.accounts);
            if state.left.wipes > 0 && within {
                actions.push(Action::Wipe(a));
            }
            if state.down & (1 << a) != 0 {
                actions.push(Action::Up(a));
            } else if state.left.outages > 0 && state.down == 0 {
                actions.push(Action::Down(a));
            }
            // An operator breaks a live lease (breaking none changes nothing).
            let live = state.accounts[a]
                .lease
                .is_some_and(|(_, expires)| state.t < expires);
            if state.left.breaks > 0 && live && within {
                actions.push(Action::Break(a));
            }
        }
        for (i, inst) in state.instances.iter().enumerate() {
            if inst.crashed {
                continue;
            }
            // A follower's crash only takes a competitor away: the leaders'
            // crashes are the ones that leave leases behind.
            if state.left.crashes > 0 && inst.term.is_some() {
                actions.push(Action::Crash(i));
            }
            if inst.frozen {
                actions.push(Action::Thaw(i));
            } else if state.left.freezes > 0 {
                actions.push(Action::Freeze(i));
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        self.step(state, action).map(|(s, _)| s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one leader at a time", |_, s: &State| {
                s.answered_for().count() <= 1
            }),
            Property::always("epochs strictly increase", |_, s: &State| {
                !s.epoch_went_back
            }),
            Property::always("no write of a deposed term accepted", |_, s: &State| {
                !s.deposed_write
            }),
            Property::always(
                "a term ends early only once a lease of it is found gone",
                |_, s: &State| !s.ended_early,
            ),
            Property::always(
                "a term's own stamps leave its accounts at its epoch",
                |_, s: &State| !s.stamped_apart,
            ),
            Property::always(
                "a leader within the bound after the last fault",
                |m: &Quorum, s: &State| {
                    let settled = s.down == 0 && s.instances.iter().all(|i| !i.frozen);
                    !settled || s.led_since_fault || s.t < s.last_fault + m.0.bound
                },
            ),
            Property::sometimes("a leader", |_, s: &State| s.acting().next().is_some()),
        ]
    }
}

/// Instances are interchangeable: a state with two of them swapped (their
/// lease ids and marks renamed) is the same state for every property.
impl Representative for State {
    fn representative(&self) -> Self {
        let n = self.instances.len();
        let key = |i: usize| {
            let leases: Vec<(usize, u8, u8)> = self
                .accounts
                .iter()
                .enumerate()
                .filter_map(|(a, account)| match account.lease {
                    Some(((holder, round), expires)) if holder == i => Some((a, round, expires)),
                    _ => None,
                })
                .collect();
            let newest = self
                .newest
                .map(|(e, (holder, r))| (holder == i).then_some((e, r)));
            (
                &self.instances[i],
                self.moved & (1 << i) != 0,
                leases,
                newest,
            )
        };
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|a, b| key(*a).cmp(&key(*b)));
        let mut renamed = vec![0; n];
        for (new, old) in order.iter().enumerate() {
            renamed[*old] = new;
        }
        let rename = |(i, round): Id| (renamed[i], round);
        let mut s = self.clone();
        s.instances = order
            .iter()
            .map(|old| self.instances[*old].clone())
            .collect();
        s.moved = order
            .iter()
            .enumerate()
            .filter(|(_, old)| self.moved & (1 << **old) != 0)
            .fold(0, |bits, (new, _)| bits | 1 << new);
        for account in &mut s.accounts {
            account.lease = account.lease.map(|(id, expires)| (rename(id), expires));
        }
        s.newest = s.newest.map(|(e, id)| (e, rename(id)));
        s
    }
}
