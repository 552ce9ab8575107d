//! The planned handover as a state machine: one lease blob with Azure's
//! semantics (acquire, renew, change, release, expiry by ticks), candidate
//! records beside it, a leader that lists the candidates every renewal and
//! hands over with the crate's own decisions (`handover`: the successor, the
//! end of a term, what follows a Change Lease), a preferred candidate and a
//! third instance without a priority that both try to acquire; time as
//! ticks, faults from a budget.

use std::fmt::Write as _;

use stateright::{Model, Property, Representative};

use crate::check::Traced;
use crate::clock;
use crate::handover_rules::{after_change, ending, successor, AfterChange, Changed, Ending};

/// Known-wrong variants of the decisions, each of which the checker must
/// find.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Defects {
    /// Change Lease as soon as the successor is chosen, while the term's
    /// tasks still drain.
    pub(crate) change_before_stop: bool,
}

/// The faults still to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Faults {
    /// An instance crashes (the leader, or the candidate mid-handover).
    pub(crate) crashes: u8,
    /// The answer to a Change Lease is lost (the change took effect).
    pub(crate) losses: u8,
    /// Every attempt at a Change Lease is refused by a transient failure
    /// (it took no effect): the term releases instead.
    pub(crate) refusals: u8,
    /// A stopping term's tasks do not stop within the grace (a task that
    /// could not be aborted, or a guard not released): they may act until
    /// the term's deadline, and the term ends with `tasks_stopped` false.
    pub(crate) stuck: u8,
}

/// A configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Each instance's priority (`None`: it does not advertise).
    pub(crate) priorities: Vec<Option<i64>>,
    pub(crate) lease: u8,
    pub(crate) drift: u8,
    pub(crate) margin: u8,
    pub(crate) renew: u8,
    /// Ticks the tasks take to stop once asked (the stop grace).
    pub(crate) grace: u8,
    pub(crate) horizon: u8,
    /// After the last fault, a leader acts within this many ticks.
    pub(crate) bound: u8,
    pub(crate) faults: Faults,
    pub(crate) defects: Defects,
}

impl Config {
    /// i0 leads with priority 0; i1 (priority 1) is the successor; i2 has
    /// no priority and tries to acquire throughout. One crash, one lost
    /// answer to a Change Lease.
    pub(crate) fn three_instances() -> Self {
        Config {
            priorities: vec![Some(0), Some(1), None],
            lease: 4,
            drift: 1,
            margin: 2,
            renew: 2,
            grace: 1,
            horizon: 16,
            bound: 4,
            faults: Faults {
                crashes: 1,
                losses: 1,
                refusals: 1,
                stuck: 1,
            },
            defects: Defects::default(),
        }
    }
}

/// A term an instance leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Term {
    pub(crate) epoch: u8,
    pub(crate) deadline: u8,
    pub(crate) renew_at: u8,
}

/// Where an instance is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    /// Trying to acquire (with a priority, advertising once it found the
    /// lease held).
    Campaign,
    /// Leading.
    Leading(Term),
    /// The term stops: its tasks run until `until`; then the lease is
    /// handed over to `to`, released, or left (not `held` any more).
    Stopping {
        term: Term,
        until: u8,
        to: Option<usize>,
        held: bool,
    },
    /// The term ended with a task that did not stop: it may act until the
    /// term's deadline; the instance campaigns again only after it.
    Stuck(Term),
    Crashed,
}

/// The whole system at one instant.
// Each flag is the witness of one property, read by that property alone.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    pub(crate) t: u8,
    /// The lease (its id, an instance's proposed one, and the tick from
    /// which it is expired), and the blob's epoch.
    pub(crate) lease: Option<(usize, u8)>,
    pub(crate) epoch: u8,
    /// Each instance's candidate record: the tick from which it is expired.
    pub(crate) records: Vec<Option<u8>>,
    pub(crate) phases: Vec<Phase>,
    pub(crate) moved: u16,
    pub(crate) left: Faults,
    /// The tick of the last fault, or of the last end of a term's tasks.
    pub(crate) last_fault: u8,
    /// Whether a handover took place (a Change Lease that succeeded).
    pub(crate) handed_over: bool,
    /// Whether a leader chose a successor whose priority is not above its
    /// own, or itself.
    pub(crate) wrong_successor: bool,
    pub(crate) register: u8,
    pub(crate) newest: Option<(u8, usize)>,
    pub(crate) epoch_went_back: bool,
    pub(crate) deposed_write: bool,
}

impl State {
    /// The instances whose task may be acting now.
    pub(crate) fn acting(&self) -> impl Iterator<Item = usize> + '_ {
        self.phases
            .iter()
            .enumerate()
            .filter_map(|(i, phase)| match phase {
                // A stuck term's tasks act on until its deadline.
                Phase::Leading(term) | Phase::Stuck(term) => (self.t < term.deadline).then_some(i),
                Phase::Stopping { term, until, .. } => {
                    (self.t < term.deadline.min(*until)).then_some(i)
                }
                Phase::Campaign | Phase::Crashed => None,
            })
    }

    fn term(&self, i: usize) -> Option<Term> {
        match self.phases[i] {
            Phase::Leading(term) | Phase::Stopping { term, .. } | Phase::Stuck(term) => Some(term),
            Phase::Campaign | Phase::Crashed => None,
        }
    }
}

/// A fault that comes with an instance's step at the end of a stopping
/// term's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EndFault {
    /// The answer to the first Change Lease is lost (it took effect).
    LoseAnswer,
    /// Every Change Lease is refused (no effect).
    Refused,
    /// The tasks did not stop.
    Stuck,
}

/// What can happen next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// An instance takes its step of this tick, with a fault at the end of
    /// a stopping term's tasks.
    Step {
        instance: usize,
        fault: Option<EndFault>,
    },
    Tick,
    Crash(usize),
}

/// The model: a configuration.
#[derive(Debug, Clone)]
pub(crate) struct Handover(pub Config);

impl Handover {
    fn expires(&self, t: u8) -> u8 {
        clock::expires(t, self.0.lease, self.0.drift)
    }

    fn term(&self, t: u8, epoch: u8) -> Term {
        Term {
            epoch,
            deadline: clock::deadline(t, self.0.lease, self.0.margin, self.0.drift),
            renew_at: t + self.0.renew,
        }
    }

    fn step(&self, state: &State, action: Action) -> (State, String) {
        let mut s = state.clone();
        let mut log = String::new();
        let t = s.t;
        match action {
            Action::Tick => {
                let _ = write!(log, "tick {t} ends");
                Self::write(&mut s, &mut log);
                s.t += 1;
                s.moved = 0;
            }
            Action::Step { instance: i, fault } => {
                s.moved |= 1 << i;
                match fault {
                    Some(EndFault::LoseAnswer) => s.left.losses -= 1,
                    Some(EndFault::Refused) => s.left.refusals -= 1,
                    Some(EndFault::Stuck) => s.left.stuck -= 1,
                    None => {}
                }
                if fault.is_some() {
                    s.last_fault = t;
                }
                let _ = write!(log, "i{i}");
                match s.phases[i] {
                    Phase::Campaign => self.campaign(&mut s, i, &mut log),
                    Phase::Leading(term) => self.lead(&mut s, i, term, &mut log),
                    Phase::Stopping {
                        term,
                        until,
                        to,
                        held,
                    } => self.stop(&mut s, i, (term, until, to, held), fault, &mut log),
                    Phase::Stuck(term) => {
                        if t >= term.deadline {
                            let _ = write!(log, " reaches the stuck term's deadline");
                            s.phases[i] = Phase::Campaign;
                            s.last_fault = t;
                        }
                    }
                    Phase::Crashed => {}
                }
            }
            Action::Crash(i) => {
                s.left.crashes -= 1;
                s.phases[i] = Phase::Crashed;
                let _ = write!(log, "i{i} crashes");
                s.last_fault = t;
            }
        }
        (s, log)
    }

    /// An acting leader writes to the fenced register at the end of a tick.
    fn write(s: &mut State, log: &mut String) {
        let acting: Vec<usize> = s.acting().collect();
        for i in acting {
            let Some(term) = s.term(i) else { continue };
            if term.epoch >= s.register {
                s.register = term.epoch;
                if s.newest.is_some_and(|(_, owner)| owner != i) {
                    s.deposed_write = true;
                    let _ = write!(
                        log,
                        "; i{i}'s write at epoch {} is accepted though a newer term acted",
                        term.epoch
                    );
                }
            } else {
                let _ = write!(log, "; i{i}'s write at epoch {} is refused", term.epoch);
            }
        }
    }

    /// An acquire with the instance's proposed id: granted on a free or
    /// expired lease, or one held under that id (handed over).
    fn campaign(&self, s: &mut State, i: usize, log: &mut String) {
        let t = s.t;
        let free = s.lease.is_none_or(|(id, expires)| id == i || t >= expires);
        if !free {
            if self.0.priorities[i].is_some() {
                s.records[i] = Some(self.expires(t));
                let _ = write!(log, " finds the lease held; advertises");
            }
            return;
        }
        if s.lease.is_some_and(|(id, expires)| id == i && t < expires) {
            let _ = write!(log, " finds the lease handed to it;");
        }
        s.lease = Some((i, self.expires(t)));
        s.records[i] = None;
        s.epoch += 1;
        let epoch = s.epoch;
        let term = self.term(t, epoch);
        let _ = write!(log, " leads at epoch {epoch} until tick {}", term.deadline);
        if s.newest.is_some_and(|(newest, _)| epoch <= newest) {
            s.epoch_went_back = true;
        }
        s.newest = Some((epoch, i));
        s.phases[i] = Phase::Leading(term);
    }

    /// Renews when due; if the renewal is refused the term stops with the
    /// lease lost. Lists the candidates with each renewal, and stops the
    /// term for a handover when one is chosen.
    fn lead(&self, s: &mut State, i: usize, term: Term, log: &mut String) {
        let t = s.t;
        if t >= term.deadline {
            let _ = write!(log, " reaches its deadline; its tasks have stopped");
            s.phases[i] = Phase::Campaign;
            return;
        }
        if t < term.renew_at {
            return;
        }
        let Some(term) = self.renew(s, i, term, log) else {
            return;
        };
        let Some(mine) = self.0.priorities[i] else {
            s.phases[i] = Phase::Leading(term);
            return;
        };
        let names: Vec<String> = (0..s.records.len()).map(|c| format!("i{c}")).collect();
        let listed: Vec<(usize, (&str, i64))> = s
            .records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some_and(|expires| t < expires))
            .filter_map(|(c, _)| Some((c, (names[c].as_str(), self.0.priorities[c]?))))
            .collect();
        let chosen = successor(listed.iter().map(|(_, named)| *named), &names[i], mine);
        let Some(to) = chosen.map(|k| listed[k].0) else {
            s.phases[i] = Phase::Leading(term);
            return;
        };
        if to == i || self.0.priorities[to].is_none_or(|theirs| theirs <= mine) {
            s.wrong_successor = true;
        }
        let until = t + self.0.grace;
        let _ = write!(
            log,
            "; lists i{to} as its successor; its tasks stop until tick {until}"
        );
        let mut held = true;
        if self.0.defects.change_before_stop {
            // The defect: the term ends as if its tasks had stopped.
            if let Ending::HandOver(to) = ending(true, true, true, Some(to)) {
                let _ = write!(log, "; changes the lease to i{to} at once");
                s.lease = s.lease.map(|(_, expires)| (to, expires));
                s.handed_over = true;
                held = false;
            }
        }
        s.phases[i] = Phase::Stopping {
            term,
            until,
            to: Some(to),
            held,
        };
    }

    /// A renewal: the term goes on with a new deadline, or stops with the
    /// lease lost (its tasks given the grace).
    fn renew(&self, s: &mut State, i: usize, term: Term, log: &mut String) -> Option<Term> {
        let t = s.t;
        if s.lease.is_some_and(|(id, _)| id == i) {
            s.lease = Some((i, self.expires(t)));
            let renewed = self.term(t, term.epoch);
            let _ = write!(log, " renews until tick {}", renewed.deadline);
            return Some(renewed);
        }
        let until = (t + self.0.grace).min(term.deadline);
        let _ = write!(
            log,
            " finds the lease lost; its tasks stop until tick {until}"
        );
        s.phases[i] = Phase::Stopping {
            term,
            until,
            to: None,
            held: false,
        };
        None
    }

    /// A stopping term: renews while the lease is held; once the tasks have
    /// stopped, the crate's `ending` decides (hand over, release, nothing).
    fn stop(
        &self,
        s: &mut State,
        i: usize,
        (term, until, to, held): (Term, u8, Option<usize>, bool),
        fault: Option<EndFault>,
        log: &mut String,
    ) {
        let t = s.t;
        if t < until {
            if held && t >= term.renew_at {
                if let Some(term) = self.renew(s, i, term, log) {
                    s.phases[i] = Phase::Stopping {
                        term,
                        until,
                        to,
                        held,
                    };
                }
            }
            return;
        }
        // A leader is due within the bound from here, as after a fault.
        s.last_fault = t;
        let stopped = fault != Some(EndFault::Stuck);
        if stopped {
            s.phases[i] = Phase::Campaign;
            let _ = write!(log, " its tasks have stopped");
        } else {
            s.phases[i] = Phase::Stuck(term);
            let _ = write!(
                log,
                " its tasks have not stopped; they may act until tick {}",
                term.deadline
            );
        }
        // What the engine knows: whether its renewals lost the lease (the
        // model's `held`), not whether storage still holds it for it.
        match ending(stopped, held, to.is_some(), to) {
            Ending::HandOver(to) => Self::change(s, i, to, fault, log),
            Ending::Release => {
                if s.lease.is_some_and(|(id, _)| id == i) {
                    s.lease = None;
                }
                let _ = write!(log, "; releases");
            }
            Ending::LeaveIt => {}
        }
    }

    /// Change Lease from `i`'s id to `to`'s, tried as `after_change` says.
    /// A change is granted while the lease is `i`'s and live, or already
    /// `to`'s (the same change again).
    fn change(s: &mut State, i: usize, to: usize, fault: Option<EndFault>, log: &mut String) {
        let mut attempt = 1;
        loop {
            let t = s.t;
            let changed = match s.lease {
                _ if fault == Some(EndFault::Refused) => Changed::Failed,
                Some((id, expires)) if id == i && t < expires => {
                    s.lease = Some((to, expires));
                    s.handed_over = true;
                    Changed::Done
                }
                Some((id, _)) if id == to => Changed::Done,
                _ => Changed::NotOurs,
            };
            let seen = if fault == Some(EndFault::LoseAnswer) && attempt == 1 {
                Changed::Failed
            } else {
                changed
            };
            let _ = write!(log, "; changes the lease to i{to}: {seen:?}");
            match after_change(attempt, seen) {
                AfterChange::Stop => return,
                AfterChange::Again => attempt += 1,
                AfterChange::Release => {
                    if s.lease.is_some_and(|(id, _)| id == i) {
                        s.lease = None;
                    }
                    let _ = write!(log, "; releases");
                    return;
                }
            }
        }
    }

    fn steps(state: &State, i: usize) -> bool {
        state.phases[i] != Phase::Crashed && state.moved & (1 << i) == 0
    }
}

impl Traced for Handover {
    fn apply(&self, state: &State, action: Action) -> Option<(State, String)> {
        Some(self.step(state, action))
    }

    fn tick(state: &State) -> u8 {
        state.t
    }

    fn shown(action: &Action, log: &str) -> bool {
        match action {
            Action::Tick => log.contains("write"),
            Action::Step { instance, .. } => log != format!("i{instance}"),
            Action::Crash(_) => true,
        }
    }
}

impl Model for Handover {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.0;
        let n = c.priorities.len();
        // i0 leads at epoch 1 from tick 0; the others campaign.
        let mut phases = vec![Phase::Campaign; n];
        phases[0] = Phase::Leading(self.term(0, 1));
        vec![State {
            t: 0,
            lease: Some((0, self.expires(0))),
            epoch: 1,
            records: vec![None; n],
            phases,
            moved: 0,
            left: c.faults,
            last_fault: 0,
            handed_over: false,
            wrong_successor: false,
            register: 0,
            newest: Some((1, 0)),
            epoch_went_back: false,
            deposed_write: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let c = &self.0;
        if state.t >= c.horizon {
            return;
        }
        let n = c.priorities.len();
        let mut all_moved = true;
        for i in (0..n).filter(|i| Self::steps(state, *i)) {
            all_moved = false;
            actions.push(Action::Step {
                instance: i,
                fault: None,
            });
            let ends = matches!(state.phases[i], Phase::Stopping { until, .. } if state.t >= until);
            let may_change = matches!(
                state.phases[i],
                Phase::Stopping {
                    to: Some(_),
                    held: true,
                    ..
                }
            );
            let faults = [
                (EndFault::LoseAnswer, state.left.losses > 0 && may_change),
                (EndFault::Refused, state.left.refusals > 0 && may_change),
                (EndFault::Stuck, state.left.stuck > 0),
            ];
            for (fault, left) in faults {
                if ends && left {
                    actions.push(Action::Step {
                        instance: i,
                        fault: Some(fault),
                    });
                }
            }
        }
        if all_moved {
            actions.push(Action::Tick);
        }
        if state.moved != 0 || state.left.crashes == 0 {
            return;
        }
        for (i, phase) in state.phases.iter().enumerate() {
            if *phase != Phase::Crashed {
                actions.push(Action::Crash(i));
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        Some(self.step(state, action).0)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one leader at a time", |_, s: &State| {
                s.acting().count() <= 1
            }),
            Property::always("epochs strictly increase", |_, s: &State| {
                !s.epoch_went_back
            }),
            Property::always(
                "a successor only of a strictly higher priority",
                |_, s: &State| !s.wrong_successor,
            ),
            Property::always("no write of a deposed term accepted", |_, s: &State| {
                !s.deposed_write
            }),
            Property::always(
                "a leader within the bound after the last fault",
                |m: &Handover, s: &State| {
                    let running = s.phases.iter().any(|p| *p != Phase::Crashed);
                    !running
                        || s.t < s.last_fault + m.0.bound
                        || s.acting().next().is_some()
                        // A planned handover under way: measured from its end.
                        || s.phases.iter().any(|p| matches!(p, Phase::Stopping { .. }))
                },
            ),
            Property::sometimes("a handover", |_, s: &State| {
                s.handed_over && s.acting().any(|i| i == 1)
            }),
        ]
    }
}

/// Instances differ by priority: each state stands for itself.
impl Representative for State {
    fn representative(&self) -> Self {
        self.clone()
    }
}
