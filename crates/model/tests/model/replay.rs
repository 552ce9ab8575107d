//! A chaos run's quorum group replayed through the quorum model's
//! transition relation: is the run's record one of the model's paths?
//!
//! The record (`support::trace`) says when each worker started, paused and
//! ended, which network faults hit its paths, which accounts restarted
//! empty, and when each term began at which epoch. The calls themselves are
//! not recorded, so the replay searches: tick by tick (a tick is a second),
//! it keeps the model states consistent with the record so far, and
//! expands each by every order of the instances' steps, each step taken or,
//! for a campaign or on a path the record shows faulted, delayed; on a
//! faulted path, also with some of its requests not delivered or the
//! answer to one lost. The environment's events are applied where the
//! record puts them (a restart's loss anywhere in the seconds it took; a
//! SIGTERM as a stop that gives the leases back, a SIGKILL as a crash; a
//! worker started after another ended as a new process in its place). Of
//! the states at a tick's end it keeps those whose paths took the fewest
//! hidden faults (`BEAM`).
//!
//! A model state stays while every term it began is the worker's next
//! recorded term, with the same epoch, begun at most `SLACK` ticks before
//! the worker printed it and at most one after; and every recorded term is
//! begun by the tick after it was printed. When no state is left, the
//! record is not a path of the model: a finding about the model or the
//! code, reported with what the last states disagreed with.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use blob_mutex_testkit::trace::{End, Trace};

use crate::hold_off::HOLD_OFF;
use crate::quorum::{Action, Call, Config, Faults, Mishap, Plan, Quorum, State, EPOCH_BITS};

/// How many ticks before its `LEADING` line a term may have begun in the
/// model: the acquire, the read and the stamps take time, more under
/// latency, and the line comes after them.
const SLACK: u64 = 2;

/// How long after a network fault's end its effects may last, in ticks:
/// an answer delayed by up to 5 s is still on its way, and a request in
/// flight runs into its time-out.
const AFTERMATH: u64 = 6;

/// How long before the record says a restart returned the account may have
/// been down (and its data lost), in ticks.
const RESTART: u64 = 5;

/// The model's configuration for a chaos run's quorum group: the chaos
/// workers' timing (a 15 s lease, renewals every 2 s) in ticks of a
/// second, the crate's hold-off, storage's clock from the record, and
/// `instances` places for the workers (a worker started after another
/// ended runs in its place).
fn config(instances: usize, wall: u64) -> Config {
    let many = Faults {
        wipes: u8::MAX,
        outages: u8::MAX,
        losses: u8::MAX,
        crashes: u8::MAX,
        freezes: u8::MAX,
        // The chaos runner breaks leases of one account only, never a
        // quorum's; a request lost on its way is a path cut (`cut`).
        breaks: 0,
        drops: 0,
        lates: 0,
    };
    Config {
        instances,
        accounts: 3,
        lease: 15,
        drift: 0,
        margin: 2,
        renew: 2,
        hold_off: u8::try_from(HOLD_OFF.as_secs()).expect("a hold-off in ticks"),
        horizon: u8::MAX,
        bound: u8::MAX,
        faults: many,
        defects: crate::quorum::Defects::default(),
        clock: Some(wall / 1000),
    }
}

/// A model state, how far along the record it is, and how many hidden
/// faults its path took (not part of its identity: of two paths to one
/// state, the search keeps the one with fewer).
#[derive(Clone)]
struct Point {
    state: State,
    /// Per worker: how many of its terms the model began.
    begun: Vec<u8>,
    /// How many of the record's restarts the model applied.
    wiped: u8,
    cost: u32,
}

impl PartialEq for Point {
    fn eq(&self, other: &Self) -> bool {
        (&self.state, &self.begun, self.wiped) == (&other.state, &other.begun, other.wiped)
    }
}

impl Eq for Point {}

impl std::hash::Hash for Point {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (&self.state, &self.begun, self.wiped).hash(h);
    }
}

/// How many states the search keeps from one tick to the next: those whose
/// paths took the fewest hidden faults (`BLOB_MUTEX_REPLAY_BEAM` sets
/// another). The search is then not exhaustive: a path it finds proves the
/// record is one of the model's; a record it finds none for is replayed
/// with a beam ten times as wide, and only then reported.
const BEAM: usize = 200;

/// How many states one tick's search expands at most.
const EXPANSIONS: usize = 200_000;

fn beam() -> usize {
    std::env::var("BLOB_MUTEX_REPLAY_BEAM")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(BEAM)
}

/// What a replay found.
#[derive(Debug)]
pub(crate) struct Replayed {
    /// The model's instances (workers run in the place of ended ones).
    pub(crate) instances: usize,
    pub(crate) ticks: u64,
    pub(crate) terms: usize,
    /// The most states kept at once, and every state expanded.
    pub(crate) widest: usize,
    pub(crate) expanded: usize,
    pub(crate) elapsed: Duration,
    /// `None`: the record is a path of the model.
    pub(crate) finding: Option<String>,
}

/// The environment's events at a tick's start, from the record.
#[derive(Clone, Copy, Debug)]
enum Env {
    Start(usize),
    Restart(usize),
    Freeze(usize),
    Thaw(usize),
    End(usize, End),
}

fn tick_of(ms: u64) -> u64 {
    ms / 1000
}

struct Replay<'a> {
    model: Quorum,
    trace: &'a Trace,
    /// Per model instance, the workers that ran in its place, each from
    /// the tick it started: a worker started after another ended takes its
    /// place, as a new process on the same host would.
    slots: Vec<Vec<(u64, usize)>>,
    /// Events by the tick whose start they come at.
    env: BTreeMap<u64, Vec<Env>>,
    /// Reasons the last states were dropped, counted.
    dropped: BTreeMap<String, usize>,
}

/// Replays `trace`; see the module's docs. A record the beam finds no path
/// for is replayed again with a beam ten times as wide before it counts as
/// a finding.
pub(crate) fn replay(trace: &Trace) -> Replayed {
    let beam = beam();
    let first = replay_with(trace, beam);
    if first.finding.is_none() {
        return first;
    }
    let wider = replay_with(trace, beam * 10);
    Replayed {
        elapsed: first.elapsed + wider.elapsed,
        ..wider
    }
}

fn replay_with(trace: &Trace, beam: usize) -> Replayed {
    let started = Instant::now();
    let slots = slots(trace);
    let n = slots.len();
    assert!(
        n <= 16,
        "{n} workers at once: the model tracks at most 16 instances"
    );
    let last = tick_of(trace.until);
    assert!(
        last + 20 < u64::from(u8::MAX),
        "a record of {last} s is too long to replay"
    );
    let mut r = Replay {
        model: Quorum(config(n, trace.wall)),
        trace,
        env: environment(trace, &slots),
        slots,
        dropped: BTreeMap::new(),
    };
    let mut state = stateright::Model::init_states(&r.model).remove(0);
    for inst in &mut state.instances {
        // Not started yet: a worker takes no step before its process runs.
        inst.frozen = true;
    }
    let mut frontier = vec![Point {
        state,
        begun: vec![0; trace.workers.len()],
        wiped: 0,
        cost: 0,
    }];
    let (mut widest, mut expanded) = (1, 0);
    for k in 0..=last {
        r.dropped.clear();
        let at_start = r.boundary(frontier, k);
        let (ended, count) = r.steps(at_start, k, beam);
        expanded += count;
        frontier = ended
            .iter()
            .filter_map(|p| r.apply(p, Action::Tick))
            .collect();
        widest = widest.max(frontier.len());
        if frontier.is_empty() {
            return Replayed {
                instances: n,
                ticks: k,
                terms: terms(trace),
                widest,
                expanded,
                elapsed: started.elapsed(),
                finding: Some(r.finding(k)),
            };
        }
    }
    Replayed {
        instances: n,
        ticks: last,
        terms: terms(trace),
        widest,
        expanded,
        elapsed: started.elapsed(),
        finding: None,
    }
}

fn terms(trace: &Trace) -> usize {
    trace.workers.iter().map(|w| w.terms.len()).sum()
}

/// Which instance each worker runs as: the first whose worker ended before
/// it started, else a new one.
fn slots(trace: &Trace) -> Vec<Vec<(u64, usize)>> {
    let mut slots: Vec<Vec<(u64, usize)>> = Vec::new();
    let mut order: Vec<usize> = (0..trace.workers.len()).collect();
    order.sort_by_key(|&w| trace.workers[w].spawned);
    for w in order {
        let spawned = trace.workers[w].spawned;
        let free = slots.iter().position(|slot| {
            let &(_, last) = slot.last().expect("a slot has a worker");
            trace.workers[last].end.is_some_and(|(_, at)| at <= spawned)
        });
        let entry = (tick_of(spawned), w);
        match free {
            Some(i) => slots[i].push(entry),
            None => slots.push(vec![entry]),
        }
    }
    slots
}

/// The record's process events by tick, in the order they happened, on
/// the instances the workers run as.
fn environment(trace: &Trace, slots: &[Vec<(u64, usize)>]) -> BTreeMap<u64, Vec<Env>> {
    let mut timed: Vec<(u64, Env)> = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        for (n, &(_, w)) in slot.iter().enumerate() {
            let worker = &trace.workers[w];
            let start = if n == 0 {
                Env::Start(i)
            } else {
                Env::Restart(i)
            };
            timed.push((worker.spawned, start));
            for &(from, to) in &worker.pauses {
                timed.push((from, Env::Freeze(i)));
                timed.push((to, Env::Thaw(i)));
            }
            if let Some((end, at)) = worker.end {
                timed.push((at, Env::End(i, end)));
            }
        }
    }
    timed.sort_by_key(|(at, _)| *at);
    let mut env: BTreeMap<u64, Vec<Env>> = BTreeMap::new();
    for (at, e) in timed {
        env.entry(tick_of(at)).or_default().push(e);
    }
    env
}

impl Replay<'_> {
    /// Applies one action and puts the fault budget back: the record, not
    /// a budget, says which faults happen.
    fn apply(&self, p: &Point, action: Action) -> Option<Point> {
        let mut state = stateright::Model::next_state(&self.model, &p.state, action)?;
        state.left = self.model.0.faults;
        state.last_fault = 0;
        state.led_since_fault = false;
        canonical(&mut state);
        Some(Point {
            state,
            begun: p.begun.clone(),
            wiped: p.wiped,
            cost: p.cost,
        })
    }

    /// The environment's events at the start of tick `k`: processes
    /// started, paused, woken and ended; restarts applied somewhere in
    /// their window.
    fn boundary(&self, frontier: Vec<Point>, k: u64) -> Vec<Point> {
        let events = self.env.get(&k).cloned().unwrap_or_default();
        let mut points: Vec<Point> = frontier
            .into_iter()
            .filter_map(|p| {
                events.iter().try_fold(p, |p, e| {
                    let action = match *e {
                        Env::Start(i) | Env::Thaw(i) => Action::Thaw(i),
                        Env::Restart(i) => Action::Restart(i),
                        Env::Freeze(i) => Action::Freeze(i),
                        Env::End(i, End::Stop) => Action::Leave(i),
                        Env::End(i, End::Kill | End::Exit) => Action::Crash(i),
                    };
                    self.env_event(&p, action)
                })
            })
            .collect();
        // A restart lost the account's data somewhere in its window, and
        // by its end at the latest.
        // In a fixed order (a set's would change from run to run, and with
        // it which states the beam keeps among equals).
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut keep = |p: Point| {
            if seen.insert(p.clone()) {
                out.push(p);
            }
        };
        for p in points.drain(..) {
            let Some(&(a, at)) = self.trace.wipes.get(usize::from(p.wiped)) else {
                keep(p);
                continue;
            };
            let end = tick_of(at);
            if k + RESTART >= end {
                if let Some(mut wiped) = self.apply(&p, Action::Wipe(a)) {
                    wiped.wiped += 1;
                    keep(wiped);
                }
            }
            if k < end {
                keep(p);
            }
        }
        out
    }

    /// An environment event; a process ended or paused while it could take
    /// no step (one frozen, or already gone) is as it was.
    fn env_event(&self, p: &Point, action: Action) -> Option<Point> {
        let (Action::Thaw(i)
        | Action::Freeze(i)
        | Action::Leave(i)
        | Action::Crash(i)
        | Action::Restart(i)) = action
        else {
            unreachable!("an environment event")
        };
        let inst = &p.state.instances[i];
        let moot = match action {
            Action::Restart(_) => false,
            Action::Thaw(_) => !inst.frozen || inst.crashed,
            Action::Freeze(_) => inst.frozen || inst.crashed,
            _ => inst.crashed,
        };
        if moot {
            return Some(p.clone());
        }
        // A process ended while frozen (never started): nothing to give back.
        if inst.frozen && matches!(action, Action::Leave(_)) {
            let mut p = p.clone();
            p.state.instances[i].crashed = true;
            return Some(p);
        }
        self.apply(p, action)
    }

    /// The instances' steps in tick `k`, in every order, paths with fewer
    /// hidden faults first; returns up to `beam` states in which every
    /// instance moved and every term printed by now was begun, and how many
    /// states it expanded.
    fn steps(&mut self, start: Vec<Point>, k: u64, beam: usize) -> (Vec<Point>, usize) {
        let mut best: HashMap<Point, u32> = HashMap::new();
        let mut arena: Vec<Point> = Vec::new();
        let mut queue = BinaryHeap::new();
        for p in start {
            queue.push(Reverse((p.cost, arena.len())));
            best.insert(p.clone(), p.cost);
            arena.push(p);
        }
        let (mut ended, mut expanded) = (Vec::new(), 0);
        while let Some(Reverse((cost, at))) = queue.pop() {
            if ended.len() >= beam || expanded >= EXPANSIONS {
                break;
            }
            let p = arena[at].clone();
            if best.get(&p).is_some_and(|&c| c < cost) {
                continue;
            }
            expanded += 1;
            let pending: Vec<usize> = (0..p.state.instances.len())
                .filter(|&i| Quorum::plan(&p.state, i).is_some())
                .collect();
            if pending.is_empty() {
                if self.all_begun_by(&p, k) {
                    ended.push(p);
                }
                continue;
            }
            for i in pending {
                for (action, extra) in self.fates(&p.state, i, k) {
                    let Some(mut next) = self.apply(&p, action) else {
                        continue;
                    };
                    next.cost += extra;
                    let Some(next) = self.observe(&p, next, i, k) else {
                        continue;
                    };
                    if best.get(&next).is_some_and(|&c| c <= next.cost) {
                        continue;
                    }
                    best.insert(next.clone(), next.cost);
                    queue.push(Reverse((next.cost, arena.len())));
                    arena.push(next);
                }
            }
        }
        (ended, expanded)
    }

    /// The accounts on instance `i`'s paths that the record shows faulted
    /// around tick `k` (a bit each): its own path's faults, and a restart's
    /// downtime.
    fn faulted(&self, i: usize, k: u64) -> u8 {
        let mut bits = 0;
        let worker = self.occupant(i, k);
        for &(w, a, from, to) in &self.trace.nets {
            if w == worker && tick_of(from) <= k + 1 && k <= tick_of(to) + AFTERMATH {
                bits |= 1 << a;
            }
        }
        for &(a, at) in &self.trace.wipes {
            if tick_of(at) <= k + RESTART && k <= tick_of(at) {
                bits |= 1 << a;
            }
        }
        bits
    }

    /// What instance `i`'s step of tick `k` may be, and how many hidden
    /// faults each takes: a campaign, or any step on a faulted path, late;
    /// on a faulted path, requests not delivered or the answer to its lease
    /// call or its stamp lost. Away from faults a leader's steps come on
    /// time: they are timers, and a late renewal would show no differently.
    fn fates(&self, state: &State, i: usize, k: u64) -> Vec<(Action, u32)> {
        let faulted = self.faulted(i, k);
        let step = |lose, cut| Action::Step {
            instance: i,
            lose,
            cut,
        };
        let mut fates = vec![(step(None, 0), 0)];
        if faulted != 0 || Quorum::plan(state, i) == Some(Plan::Campaign) {
            fates.push((Action::Skip(i), 0));
        }
        for cut in (0..=faulted).filter(|c| c & !faulted == 0) {
            let cost = cut.count_ones();
            if cut != 0 {
                fates.push((step(None, cut), cost));
            }
            for a in (0..3).filter(|a| faulted & !cut & (1 << a) != 0) {
                for call in [Call::Lease, Call::Stamp] {
                    fates.push((step(Some((call, a, Mishap::Answer)), cut), cost + 1));
                }
            }
        }
        fates
    }

    /// Keeps `next` (the state after instance `i`'s step in tick `k`) when
    /// a term it began is the worker's next recorded term.
    fn observe(&mut self, before: &Point, mut next: Point, i: usize, k: u64) -> Option<Point> {
        let was = before.state.instances[i].term.is_some();
        let Some(term) = next.state.instances[i].term.as_ref().filter(|_| !was) else {
            return Some(next);
        };
        let w = self.occupant(i, k);
        let worker = &self.trace.workers[w];
        let j = usize::from(next.begun[w]);
        next.begun[w] += 1;
        let Some(&(epoch, at)) = worker.terms.get(j) else {
            // A term it never printed: only when its process ended then.
            let ends = worker
                .end
                .is_some_and(|(_, at)| tick_of(at) <= k + SLACK + 1);
            if ends {
                return Some(next);
            }
            self.drop(format!(
                "{} began a term at epoch {} at {k} s that it never printed",
                worker.name, term.epoch
            ));
            return None;
        };
        let printed = tick_of(at);
        if !same_epoch(term.epoch, epoch) {
            self.drop(format!(
                "{} began its term {j} at epoch {} at {k} s; it printed epoch {epoch} at {:.3} s",
                worker.name,
                term.epoch,
                ms_secs(at)
            ));
            return None;
        }
        if printed + 1 < k || k + SLACK < printed {
            self.drop(format!(
                "{} began its term at epoch {epoch} at {k} s; it printed it at {:.3} s",
                worker.name,
                ms_secs(at)
            ));
            return None;
        }
        Some(next)
    }

    /// The worker that runs as instance `i` in tick `k`.
    fn occupant(&self, i: usize, k: u64) -> usize {
        let slot = &self.slots[i];
        slot.iter()
            .rev()
            .find(|(from, _)| *from <= k)
            .unwrap_or(&slot[0])
            .1
    }

    /// Whether every term the record printed before tick `k` was begun.
    fn all_begun_by(&mut self, p: &Point, k: u64) -> bool {
        for (i, worker) in self.trace.workers.iter().enumerate() {
            if let Some(&(epoch, at)) = worker.terms.get(usize::from(p.begun[i])) {
                if tick_of(at) < k {
                    self.drop(format!(
                        "{} printed its term at epoch {epoch} at {:.3} s, not begun by {k} s",
                        worker.name,
                        ms_secs(at)
                    ));
                    return false;
                }
            }
        }
        true
    }

    fn drop(&mut self, reason: String) {
        *self.dropped.entry(reason).or_default() += 1;
    }

    /// The finding at tick `k`: why the last states were dropped, and the
    /// record around it.
    fn finding(&self, k: u64) -> String {
        let mut out = format!("no state of the model agrees with the record at {k} s; dropped:\n");
        let mut reasons: Vec<(&String, &usize)> = self.dropped.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1));
        for (reason, n) in reasons.iter().take(8) {
            let _ = writeln!(out, "  {n} × {reason}");
        }
        let _ = writeln!(out, "the record from {} s:", k.saturating_sub(20));
        let near = |at: u64| tick_of(at) + 20 >= k && tick_of(at) <= k + 5;
        let mut lines: Vec<(u64, String)> = Vec::new();
        for w in &self.trace.workers {
            let name = &w.name;
            if near(w.spawned) {
                lines.push((w.spawned, format!("{name} starts")));
            }
            for &(epoch, at) in w.terms.iter().filter(|t| near(t.1)) {
                lines.push((at, format!("{name} leads at epoch {epoch}")));
            }
            for &(from, to) in w.pauses.iter().filter(|p| near(p.0) || near(p.1)) {
                lines.push((from, format!("{name} paused until {:.3} s", ms_secs(to))));
            }
            if let Some((end, at)) = w.end.filter(|e| near(e.1)) {
                lines.push((at, format!("{name} ends: {end:?}")));
            }
        }
        for &(a, at) in self.trace.wipes.iter().filter(|w| near(w.1)) {
            lines.push((at, format!("a{a} restarted empty")));
        }
        for &(w, a, from, to) in self.trace.nets.iter().filter(|n| near(n.2)) {
            let name = &self.trace.workers[w].name;
            let until = ms_secs(to);
            lines.push((
                from,
                format!("{name}'s path to a{a} faulted until {until:.3} s"),
            ));
        }
        lines.sort();
        for (at, line) in lines {
            let _ = writeln!(out, "  {:>8.3} s {line}", ms_secs(at));
        }
        out
    }
}

/// Forgets what no step can tell apart any more, so that states that
/// differ only there are one: a wait already over, and which campaign round
/// a lease id came from (only whether it is the instance's current id, and
/// which older ids are which, matter to the accounts and the register).
fn canonical(state: &mut State) {
    let t = state.t;
    for i in 0..state.instances.len() {
        let inst = &mut state.instances[i];
        if inst.wait_until <= t {
            inst.wait_until = 0;
        }
        if inst.crashed {
            // Gone for good: only the leases it left behind still count.
            inst.term = None;
            inst.missing.iter_mut().for_each(|m| *m = None);
        }
        let current = inst.round;
        let mut old: Vec<u8> = state
            .accounts
            .iter()
            .filter_map(|a| a.lease.map(|(id, _)| id))
            .chain(state.newest.map(|(_, id)| id))
            .filter(|&(holder, round)| holder == i && round != current)
            .map(|(_, round)| round)
            .collect();
        old.sort_unstable();
        old.dedup();
        let renamed = |round: u8| {
            let index = old.iter().position(|&r| r == round).unwrap_or(old.len());
            u8::try_from(index).expect("fewer than 256 rounds in use")
        };
        state.instances[i].round = renamed(current);
        for account in &mut state.accounts {
            if let Some(((holder, round), expires)) = account.lease {
                if holder == i {
                    account.lease = Some(((holder, renamed(round)), expires));
                }
            }
        }
        if let Some((epoch, (holder, round))) = state.newest {
            if holder == i {
                state.newest = Some((epoch, (holder, renamed(round))));
            }
        }
    }
}

/// Whether the model's epoch is the printed one. An epoch from storage's
/// clock may be some seconds off: the model reads the clock at the tick of
/// its step, which may come up to `SLACK` ticks before the printed line,
/// storage at the request; the terms after count on from it alike.
fn same_epoch(model: u64, printed: u64) -> bool {
    let low = (1 << EPOCH_BITS) - 1;
    if model >> EPOCH_BITS == 0 || printed >> EPOCH_BITS == 0 {
        return model == printed;
    }
    (model >> EPOCH_BITS).abs_diff(printed >> EPOCH_BITS) <= SLACK + 1
        && model & low == printed & low
}

#[allow(clippy::cast_precision_loss)] // a run's milliseconds
fn ms_secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}
