//! The lease set as a state machine: one account's blobs (a member blob per
//! instance, a blob per partition) as lease tables with Azure's semantics,
//! instances that join, hold their membership, balance once a tick with the
//! crate's own plan (`balance`), claim, stamp, renew, give up and release
//! partitions, and leave or crash; time as ticks, faults from a budget.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use stateright::{Model, Property, Representative};

use crate::balance::{free, plan, FreeSince, Plan, Strategy, View, ORPHAN_CYCLES};
use crate::cadence::{unsettled, whole_set_due, Cycle, LastFull};
use crate::check::Traced;
use crate::clock;

/// Known-wrong variants of the decisions, each of which the checker must
/// find.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Defects {
    /// A partition whose holder is no longer a live member counts as free,
    /// and its claim breaks the lease: a partition claimed while its
    /// owner's lease could still be live.
    pub(crate) claim_from_departed: bool,
    /// A renewal whose request was lost (no answer within its limit)
    /// counted as a success: the lease had expired when the instance
    /// counted it renewed.
    pub(crate) lost_renewal_counted: bool,
}

/// The faults still to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Faults {
    /// Instances not started at first, that join.
    pub(crate) joins: u8,
    /// An instance leaves (cancels its run: drains and releases).
    pub(crate) leaves: u8,
    /// An instance crashes (its leases are left to expire).
    pub(crate) crashes: u8,
    /// An instance freezes, and wakes later.
    pub(crate) freezes: u8,
    /// A partition's renewal request is lost (storage never sees it).
    pub(crate) losses: u8,
    /// A partition's term ends by itself on a live instance (its lease
    /// broken, its task failed, its blob refused) and the instance skips
    /// the partition from then on (the crate's skip of a partition that
    /// cannot be led, whose back-off outlasts any horizon here).
    pub(crate) skips: u8,
}

/// A configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) instances: usize,
    pub(crate) partitions: usize,
    /// The lease duration, in ticks.
    pub(crate) lease: u8,
    /// How far an instance's clock may run behind real time, and the
    /// account's ahead, in ticks.
    pub(crate) drift: u8,
    /// The safety margin of the deadline rule.
    pub(crate) margin: u8,
    /// The renew interval.
    pub(crate) renew: u8,
    /// No step after this tick.
    pub(crate) horizon: u8,
    /// After the last fault, every partition has an owner within this many
    /// ticks.
    pub(crate) bound: u8,
    /// A partition freed on an instance that skips it is claimed again
    /// within this many ticks (cycles).
    pub(crate) reown: u8,
    pub(crate) faults: Faults,
    pub(crate) defects: Defects,
}

impl Config {
    /// 2 instances × 1 account × 3 partitions: the second instance joins,
    /// one leaves, one crashes.
    pub(crate) fn two_by_three() -> Self {
        Config {
            instances: 2,
            partitions: 3,
            lease: 4,
            drift: 1,
            margin: 2,
            renew: 2,
            horizon: 12,
            bound: 3,
            reown: 6,
            faults: Faults {
                joins: 1,
                leaves: 1,
                crashes: 1,
                freezes: 0,
                losses: 1,
                skips: 0,
            },
            defects: Defects::default(),
        }
    }
}

/// A blob's lease (its holder, and the tick from which it is expired) and
/// its epoch. A lease id is its instance's: an instance holds one term on a
/// blob at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Blob {
    pub(crate) lease: Option<(usize, u8)>,
    pub(crate) epoch: u8,
}

impl Blob {
    fn leased_at(&self, t: u8) -> Option<usize> {
        self.lease.filter(|(_, expires)| t < *expires).map(|l| l.0)
    }
}

/// A term: the membership, or a partition's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Term {
    pub(crate) epoch: u8,
    /// The real tick at which it stops acting at the latest.
    pub(crate) deadline: u8,
    pub(crate) renew_at: u8,
}

/// Where an instance is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Life {
    NotStarted,
    Running,
    Left,
    Crashed,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Instance {
    pub(crate) life: Life,
    pub(crate) frozen: bool,
    pub(crate) member: Option<Term>,
    /// The term of each partition it owns.
    pub(crate) owned: Vec<Option<Term>>,
    /// The balancer's record of the partitions seen free (the crate's).
    pub(crate) free_since: FreeSince<u8>,
    /// What its last listing of the whole set left (the crate's
    /// `LastFull`, its members as a bit per instance), `None` before the
    /// first of its membership term.
    pub(crate) last: Option<(u16, bool, u32)>,
    /// The partitions it owned when its last cycle ended (a bit each).
    pub(crate) claims: u16,
    /// The partitions it skips (a bit each).
    pub(crate) skipped: u16,
    /// The partitions it claimed as orphans and owns (a bit each): the
    /// crate's balancer gives them up last.
    pub(crate) adopted: u16,
}

/// The whole system at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    pub(crate) t: u8,
    pub(crate) members: Vec<Blob>,
    pub(crate) partitions: Vec<Blob>,
    pub(crate) instances: Vec<Instance>,
    /// The instances that took their step in this tick (a bit each).
    pub(crate) moved: u16,
    pub(crate) left: Faults,
    pub(crate) last_fault: u8,
    /// Per partition: the fenced register (the largest epoch written), and
    /// the largest epoch of a term that acted with its owner.
    pub(crate) register: Vec<u8>,
    pub(crate) newest: Vec<Option<(u8, usize)>>,
    pub(crate) epoch_went_back: bool,
    pub(crate) deposed_write: bool,
    /// A partition freed by a skip and the tick it was freed, until anyone
    /// claims it again.
    pub(crate) skipped_free: Option<(usize, u8)>,
    /// That partition once claimed again, and the tick of the claim.
    pub(crate) reowned: Option<(usize, u8)>,
    /// It was given up again with no fault since it was claimed: handed
    /// back towards the instance that skips it.
    pub(crate) gave_up_reowned: bool,
}

impl State {
    /// The instances whose task for partition `p` may be acting now (a
    /// frozen one until its deadline: it cannot stop itself).
    pub(crate) fn acting(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        self.instances
            .iter()
            .enumerate()
            .filter_map(move |(i, inst)| {
                let term = inst.owned[p]?;
                (inst.life != Life::Crashed && self.t < term.deadline).then_some(i)
            })
    }
}

/// What can happen next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// An instance takes its step of this tick (renewals, one balance
    /// cycle); `lose` names a partition whose renewal request is lost.
    Step {
        instance: usize,
        lose: Option<usize>,
    },
    Tick,
    Join(usize),
    Leave(usize),
    Crash(usize),
    Freeze(usize),
    Thaw(usize),
    /// Instance `.0`'s term on partition `.1` ends by itself; it skips the
    /// partition from then on.
    Skip(usize, usize),
}

/// The model: a configuration.
#[derive(Debug, Clone)]
pub(crate) struct LeaseSet(pub Config);

fn name(i: usize) -> String {
    format!("i{i}")
}

fn partition(p: usize) -> String {
    format!("p{p}")
}

impl LeaseSet {
    fn expires(&self, t: u8) -> u8 {
        clock::expires(t, self.0.lease, self.0.drift)
    }

    fn deadline(&self, sent: u8) -> u8 {
        clock::deadline(sent, self.0.lease, self.0.margin, self.0.drift)
    }

    fn term(&self, t: u8, epoch: u8) -> Term {
        Term {
            epoch,
            deadline: self.deadline(t),
            renew_at: t + self.0.renew,
        }
    }

    /// Acquire on `blob` by `i`: succeeds on a free or expired lease.
    fn acquire(&self, blob: &mut Blob, i: usize, t: u8) -> bool {
        if blob.leased_at(t).is_some_and(|h| h != i) {
            return false;
        }
        blob.lease = Some((i, self.expires(t)));
        true
    }

    /// Renew: succeeds while the lease id is still the blob's (even
    /// expired, as long as nobody acquired it since).
    fn renew(&self, blob: &mut Blob, i: usize, t: u8) -> bool {
        if blob.lease.is_some_and(|(h, _)| h == i) {
            blob.lease = Some((i, self.expires(t)));
            return true;
        }
        false
    }

    fn release(blob: &mut Blob, i: usize) {
        if blob.lease.is_some_and(|(h, _)| h == i) {
            blob.lease = None;
        }
    }

    /// Ends `i`'s term on partition `p`: its task has stopped; the lease is
    /// released.
    fn end_partition(s: &mut State, i: usize, p: usize, log: &mut String, why: &str) {
        s.instances[i].adopted &= !(1 << p);
        if s.instances[i].owned[p].take().is_some() {
            Self::release(&mut s.partitions[p], i);
            let _ = write!(log, "; {why} p{p}");
        }
    }

    /// Ends `i`'s membership: every partition term stops and is released.
    fn end_membership(s: &mut State, i: usize, log: &mut String) {
        for p in 0..s.partitions.len() {
            Self::end_partition(s, i, p, log, "drains and releases");
        }
        s.instances[i].member = None;
        s.instances[i].free_since = FreeSince::default();
        s.instances[i].last = None;
        s.instances[i].claims = 0;
        Self::release(&mut s.members[i], i);
    }

    fn step(&self, state: &State, action: Action) -> (State, String) {
        let mut s = state.clone();
        let mut log = String::new();
        let t = s.t;
        match action {
            Action::Tick => {
                let _ = write!(log, "tick {t} ends");
                for p in 0..s.partitions.len() {
                    Self::write(&mut s, p, &mut log);
                }
                s.t += 1;
                s.moved = 0;
            }
            Action::Step { instance: i, lose } => {
                s.moved |= 1 << i;
                if lose.is_some() {
                    s.left.losses -= 1;
                    s.last_fault = t;
                }
                let _ = write!(log, "i{i}");
                self.instance_step(&mut s, i, lose, &mut log);
                log = log.replacen(&format!("i{i}; "), &format!("i{i} "), 1);
            }
            Action::Join(i) => {
                s.left.joins -= 1;
                s.instances[i].life = Life::Running;
                let _ = write!(log, "i{i} joins");
                s.last_fault = t;
            }
            Action::Leave(i) => {
                s.left.leaves -= 1;
                let _ = write!(log, "i{i} leaves");
                Self::end_membership(&mut s, i, &mut log);
                s.instances[i].life = Life::Left;
                s.last_fault = t;
            }
            Action::Crash(i) => {
                s.left.crashes -= 1;
                s.instances[i].life = Life::Crashed;
                let _ = write!(log, "i{i} crashes");
                s.last_fault = t;
            }
            Action::Freeze(i) => {
                s.left.freezes -= 1;
                s.instances[i].frozen = true;
                let _ = write!(log, "i{i} freezes");
                s.last_fault = t;
            }
            Action::Thaw(i) => {
                s.instances[i].frozen = false;
                let _ = write!(log, "i{i} wakes");
                s.last_fault = t;
            }
            Action::Skip(i, p) => {
                s.left.skips -= 1;
                s.instances[i].skipped |= 1 << p;
                let _ = write!(log, "i{i}'s term on p{p} ends by itself; i{i} skips p{p}");
                Self::end_partition(&mut s, i, p, &mut log, "releases");
                s.skipped_free = Some((p, t));
                s.last_fault = t;
            }
        }
        (s, log)
    }

    /// Every instance acting on partition `p` writes to its fenced register.
    fn write(s: &mut State, p: usize, log: &mut String) {
        let acting: Vec<usize> = s.acting(p).collect();
        for i in acting {
            let Some(term) = s.instances[i].owned[p] else {
                continue;
            };
            if term.epoch >= s.register[p] {
                s.register[p] = term.epoch;
                if s.newest[p].is_some_and(|(_, owner)| owner != i) {
                    s.deposed_write = true;
                    let _ = write!(
                        log,
                        "; i{i}'s write to p{p} at epoch {} is accepted though a newer term acted",
                        term.epoch
                    );
                }
            } else {
                let _ = write!(
                    log,
                    "; i{i}'s write to p{p} at epoch {} is refused",
                    term.epoch
                );
            }
        }
    }

    /// Membership, renewals, then one balance cycle.
    fn instance_step(&self, s: &mut State, i: usize, lose: Option<usize>, log: &mut String) {
        let t = s.t;
        match s.instances[i].member {
            None => {
                if !self.acquire(&mut s.members[i], i, t) {
                    let _ = write!(log, " cannot acquire its member lease");
                    return;
                }
                s.instances[i].member = Some(self.term(t, 0));
                let _ = write!(log, " becomes a member");
            }
            Some(m) if t >= m.deadline => {
                let _ = write!(log, " loses its membership at its deadline");
                Self::end_membership(s, i, log);
                return;
            }
            Some(m) if t >= m.renew_at => {
                if !self.renew(&mut s.members[i], i, t) {
                    let _ = write!(log, " loses its membership (renewal refused)");
                    Self::end_membership(s, i, log);
                    return;
                }
                let term = self.term(t, 0);
                let _ = write!(log, " renews its membership until tick {}", term.deadline);
                s.instances[i].member = Some(term);
            }
            Some(_) => {}
        }
        for p in 0..s.partitions.len() {
            match s.instances[i].owned[p] {
                Some(term) if t >= term.deadline => {
                    Self::end_partition(s, i, p, log, "reaches its deadline on");
                }
                Some(term) if t >= term.renew_at && lose == Some(p) => {
                    let _ = write!(log, "; its renewal of p{p} is lost");
                    if self.0.defects.lost_renewal_counted {
                        let _ = write!(log, " and counted as a success");
                        s.instances[i].owned[p] = Some(self.term(t, term.epoch));
                    } else {
                        // Tried again after a backoff: the next tick.
                        s.instances[i].owned[p] = Some(Term {
                            renew_at: t + 1,
                            ..term
                        });
                    }
                }
                Some(term) if t >= term.renew_at => {
                    if self.renew(&mut s.partitions[p], i, t) {
                        let term = self.term(t, term.epoch);
                        let _ = write!(log, "; renews p{p} until tick {}", term.deadline);
                        s.instances[i].owned[p] = Some(term);
                    } else {
                        s.instances[i].owned[p] = None;
                        let _ = write!(log, "; loses p{p} (renewal refused)");
                    }
                }
                _ => {}
            }
        }
        self.balance(s, i, log);
    }

    /// One balance cycle: a listing of the members, and of the whole set
    /// at this instant when the crate's `whole_set_due` says so.
    fn balance(&self, s: &mut State, i: usize, log: &mut String) {
        let t = s.t;
        let live: u16 = (0..s.members.len())
            .filter(|j| s.members[*j].leased_at(t) == Some(*j))
            .fold(0, |bits, j| bits | 1 << j);
        let members = Self::named(live);
        let owned: u16 = (0..s.partitions.len())
            .filter(|p| s.instances[i].owned[*p].is_some())
            .fold(0, |bits, p| bits | 1 << p);
        let last = s.instances[i]
            .last
            .map(|(bits, settled, members_only)| LastFull {
                members: Self::named(bits),
                settled,
                members_only,
            });
        let mut cycle = Cycle {
            claims_changed: s.instances[i].claims & !owned != 0,
            members: None,
        };
        s.instances[i].claims = owned;
        if !whole_set_due(last.as_ref(), cycle) {
            cycle.members = Some(&members);
            if let Some(mut last) = last.filter(|last| !whole_set_due(Some(last), cycle)) {
                last.listed_members();
                s.instances[i].last = Some((last_bits(&last), last.settled, last.members_only));
                return;
            }
        }
        let unsettled = self.plan_cycle(s, i, &members, log);
        s.instances[i].last = Some((live, unsettled.is_none(), 0));
        s.instances[i].claims = (0..s.partitions.len())
            .filter(|p| s.instances[i].owned[*p].is_some())
            .fold(0, |bits, p| bits | 1 << p);
    }

    /// The names of the instances whose bits are set.
    fn named(bits: u16) -> BTreeSet<String> {
        (0..16).filter(|j| bits & 1 << j != 0).map(name).collect()
    }

    /// Plans one cycle from a listing of the whole set at this instant, and
    /// says why the set is unsettled (the crate's `unsettled`).
    fn plan_cycle(
        &self,
        s: &mut State,
        i: usize,
        members: &BTreeSet<String>,
        log: &mut String,
    ) -> Option<crate::cadence::Unsettled> {
        let t = s.t;
        let names: Vec<String> = (0..s.partitions.len()).map(partition).collect();
        let mut leased = BTreeMap::new();
        for (p, blob) in s.partitions.iter().enumerate() {
            if let Some(h) = blob.leased_at(t) {
                if self.0.defects.claim_from_departed && !members.contains(&name(h)) {
                    continue;
                }
                leased.insert(partition(p), Some(name(h)));
            }
        }
        let mine: BTreeSet<String> = (0..names.len())
            .filter(|p| s.instances[i].owned[*p].is_some())
            .map(partition)
            .collect();
        let free = free(&names, &mine, &leased);
        // Each free partition with the epoch its blob carries, as listed.
        let with_epochs: Vec<(&String, u64)> = free
            .iter()
            .filter_map(|p| {
                let index = names.iter().position(|n| n == *p)?;
                Some((*p, u64::from(s.partitions[index].epoch)))
            })
            .collect();
        // One balance interval a tick.
        let grace = u8::try_from(ORPHAN_CYCLES).unwrap_or(u8::MAX);
        let orphaned = s.instances[i]
            .free_since
            .observe(&with_epochs, t, |since| t - since >= grace);
        let me = name(i);
        let adopted: BTreeSet<String> = (0..names.len())
            .filter(|p| s.instances[i].adopted & 1 << p != 0)
            .map(partition)
            .collect();
        let view = View {
            me: &me,
            members,
            partitions: &names,
            mine: &mine,
            leased: &leased,
            orphaned: &orphaned,
            adopted: &adopted,
        };
        let Plan { claim, release } = plan(&view, Strategy::Balanced, &mut |_| 0);
        let moved = !claim.is_empty() || !release.is_empty();
        let skipped = s.instances[i].skipped;
        let unsettled = unsettled(&view, Strategy::Balanced, moved, !free.is_empty());
        for p in release
            .iter()
            .filter_map(|p| names.iter().position(|n| n == p))
        {
            if s.reowned
                .is_some_and(|(q, at)| q == p && s.last_fault <= at)
            {
                s.gave_up_reowned = true;
            }
            Self::end_partition(s, i, p, log, "gives up");
        }
        for p in claim
            .iter()
            .filter_map(|p| names.iter().position(|n| n == p))
            .filter(|p| skipped & 1 << p == 0)
            .collect::<Vec<_>>()
        {
            self.claim(s, i, p, log);
            if s.instances[i].owned[p].is_some() && orphaned.contains(&names[p]) {
                s.instances[i].adopted |= 1 << p;
            }
        }
        unsettled
    }

    /// Claims partition `p`: acquire, then stamp the next epoch.
    fn claim(&self, s: &mut State, i: usize, p: usize, log: &mut String) {
        let t = s.t;
        if s.skipped_free.is_some_and(|(q, _)| q == p) {
            s.skipped_free = None;
            s.reowned = Some((p, t));
        }
        let blob = &mut s.partitions[p];
        if self.0.defects.claim_from_departed && blob.leased_at(t).is_some() {
            let _ = write!(log, "; breaks p{p}'s lease of a departed member");
            blob.lease = None;
        }
        if !self.acquire(blob, i, t) {
            let _ = write!(log, "; cannot acquire p{p}");
            return;
        }
        blob.epoch += 1;
        let epoch = blob.epoch;
        let term = self.term(t, epoch);
        let _ = write!(
            log,
            "; owns p{p} at epoch {epoch} until tick {}",
            term.deadline
        );
        if s.newest[p].is_some_and(|(newest, _)| epoch <= newest) {
            s.epoch_went_back = true;
        }
        s.newest[p] = Some((epoch, i));
        s.instances[i].owned[p] = Some(term);
    }

    /// Whether instance `i` has a step to take in this tick.
    fn steps(state: &State, i: usize) -> bool {
        let inst = &state.instances[i];
        inst.life == Life::Running && !inst.frozen && state.moved & (1 << i) == 0
    }
}

impl Traced for LeaseSet {
    fn apply(&self, state: &State, action: Action) -> Option<(State, String)> {
        Some(self.step(state, action))
    }

    fn tick(state: &State) -> u8 {
        state.t
    }

    fn shown(action: &Action, log: &str) -> bool {
        match action {
            Action::Tick => log.contains("write"),
            Action::Step { instance, lose } => lose.is_some() || log != format!("i{instance}"),
            _ => true,
        }
    }
}

impl Model for LeaseSet {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.0;
        let blob = Blob {
            lease: None,
            epoch: 0,
        };
        let joins = usize::from(c.faults.joins);
        let instances = (0..c.instances)
            .map(|i| Instance {
                // The last `joins` instances start later.
                life: if i + joins >= c.instances {
                    Life::NotStarted
                } else {
                    Life::Running
                },
                frozen: false,
                member: None,
                owned: vec![None; c.partitions],
                free_since: FreeSince::default(),
                last: None,
                claims: 0,
                skipped: 0,
                adopted: 0,
            })
            .collect();
        vec![State {
            t: 0,
            members: vec![blob; c.instances],
            partitions: vec![blob; c.partitions],
            instances,
            moved: 0,
            left: c.faults,
            last_fault: 0,
            register: vec![0; c.partitions],
            newest: vec![None; c.partitions],
            epoch_went_back: false,
            deposed_write: false,
            skipped_free: None,
            reowned: None,
            gave_up_reowned: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let c = &self.0;
        if state.t >= c.horizon {
            return;
        }
        let stepping: Vec<usize> = (0..c.instances)
            .filter(|i| Self::steps(state, *i))
            .collect();
        for &i in &stepping {
            actions.push(Action::Step {
                instance: i,
                lose: None,
            });
            if state.left.losses == 0 {
                continue;
            }
            // A renewal due now may be lost.
            for (p, term) in state.instances[i].owned.iter().enumerate() {
                if term.is_some_and(|term| state.t >= term.renew_at && state.t < term.deadline) {
                    actions.push(Action::Step {
                        instance: i,
                        lose: Some(p),
                    });
                }
            }
        }
        if stepping.is_empty() {
            actions.push(Action::Tick);
        }
        // Faults come between ticks, before any instance's step.
        if state.moved != 0 {
            return;
        }
        for (i, inst) in state.instances.iter().enumerate() {
            match inst.life {
                Life::NotStarted if state.left.joins > 0 => actions.push(Action::Join(i)),
                Life::Running => {
                    if state.left.leaves > 0 && !inst.frozen {
                        actions.push(Action::Leave(i));
                    }
                    if state.left.crashes > 0 {
                        actions.push(Action::Crash(i));
                    }
                    if inst.frozen {
                        actions.push(Action::Thaw(i));
                    } else if state.left.freezes > 0 {
                        actions.push(Action::Freeze(i));
                    }
                    if state.left.skips > 0 && !inst.frozen {
                        for (p, term) in inst.owned.iter().enumerate() {
                            if term.is_some() {
                                actions.push(Action::Skip(i, p));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        Some(self.step(state, action).0)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one owner per partition at a time", |_, s: &State| {
                (0..s.partitions.len()).all(|p| s.acting(p).count() <= 1)
            }),
            Property::always("epochs strictly increase", |_, s: &State| {
                !s.epoch_went_back
            }),
            Property::always("no write of a deposed term accepted", |_, s: &State| {
                !s.deposed_write
            }),
            Property::always(
                "every partition owned within the bound after the last fault",
                |m: &LeaseSet, s: &State| {
                    let running = s
                        .instances
                        .iter()
                        .any(|i| i.life == Life::Running && !i.frozen);
                    let settled = running && s.instances.iter().all(|i| !i.frozen);
                    !settled
                        || s.t < s.last_fault + m.0.bound
                        || (0..s.partitions.len()).all(|p| s.acting(p).next().is_some())
                },
            ),
            Property::always(
                "each running instance owns exactly its share within twice the bound after the last fault",
                |m: &LeaseSet, s: &State| {
                    let running: Vec<usize> = (0..s.instances.len())
                        .filter(|&i| s.instances[i].life == Life::Running)
                        .collect();
                    let settled = !running.is_empty()
                        && s.instances.iter().all(|i| !i.frozen)
                        && s.skipped_free.is_none()
                        && s.left.skips == m.0.faults.skips;
                    if !settled || s.t < s.last_fault + 2 * m.0.bound {
                        return true;
                    }
                    // The share of the k-th running instance by name (the
                    // crate's rule: the first `m % n` get one more).
                    let (m_parts, n) = (s.partitions.len(), running.len());
                    running.iter().enumerate().all(|(k, &i)| {
                        let owned = (0..m_parts)
                            .filter(|&p| s.acting(p).any(|a| a == i))
                            .count();
                        owned == m_parts / n + usize::from(k < m_parts % n)
                    })
                },
            ),
            Property::always(
                "a partition freed on an instance that skips it claimed again within the bound",
                |m: &LeaseSet, s: &State| {
                    s.skipped_free.is_none_or(|(_, at)| s.t < at + m.0.reown)
                        || s.instances
                            .iter()
                            .any(|i| i.frozen || i.life != Life::Running)
                },
            ),
            Property::always(
                "a partition claimed again after a skip is kept while nothing else changes",
                |_, s: &State| !s.gave_up_reowned,
            ),
            Property::sometimes("every partition owned", |_, s: &State| {
                (0..s.partitions.len()).all(|p| s.acting(p).next().is_some())
            }),
            Property::sometimes("partitions spread over two instances", |_, s: &State| {
                s.instances
                    .iter()
                    .filter(|i| i.owned.iter().any(Option::is_some))
                    .count()
                    >= 2
            }),
        ]
    }
}

/// Instances are not interchangeable here (the shares go by name): each
/// state stands for itself.
impl Representative for State {
    fn representative(&self) -> Self {
        self.clone()
    }
}

/// The members of `last` as a bit per instance.
fn last_bits(last: &LastFull) -> u16 {
    last.members
        .iter()
        .filter_map(|m| m.strip_prefix('i')?.parse::<u16>().ok())
        .fold(0, |bits, j| bits | 1 << j)
}
