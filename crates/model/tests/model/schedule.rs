//! The schedule's model: hosts that take the schedule's lease, run the slot
//! due, fail, die and come back, on storage's clock in ticks. What is due
//! and what each term enters in the record are the crate's own decisions
//! (`src/fleet/due.rs`, `entries.rs`, `record.rs` and `slots.rs`, compiled
//! as they are); the record goes through its bytes at every write, as it
//! does through storage. The lease is modelled as the engine keeps it: a
//! live holder renews it, a dead one's expires a lease later, and only its
//! holder writes the record (storage fences the rest).
//!
//! Each slot's book keeps what happened to it, and the properties read the
//! books: the schedule's promises, as the guide's shapes chapter states them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use stateright::{Model, Property, Representative};

use crate::check::Traced;
use crate::due::{wake, Next, Wake};
use crate::entries::{finish, open, start, Ended};
use crate::record::Record;
use crate::slots::Slots;

/// Storage's clock at tick 0.
const T0: &str = "2026-11-29T00:00:00Z";

/// What may go wrong, and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Faults {
    /// Hosts that die (any time: idle, or mid-job with the lease).
    pub(crate) deaths: u8,
    /// Jobs that fail.
    pub(crate) failures: u8,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) hosts: u8,
    /// The last tick.
    pub(crate) horizon: u8,
    /// Seconds a tick.
    pub(crate) tick: i64,
    pub(crate) cron: &'static str,
    /// The catch-up window, the first back-off, in seconds.
    pub(crate) window: u64,
    pub(crate) backoff: u64,
    pub(crate) retries: u32,
    /// Ticks a dead holder's lease lasts.
    pub(crate) lease: u8,
    /// The overlap policy: skip (or wait).
    pub(crate) skip: bool,
    pub(crate) faults: Faults,
}

impl Config {
    /// Two hosts, ticks of 5 s, one retry 5 s after a failure. Under the
    /// skip policy, a slot every 15 s with a window of 5 s, shorter than
    /// the time to the next slot, so that a slot can go past it with no
    /// other due (as a nightly job's two hours of catch-up), and a dead
    /// holder's lease of 5 s, so that its slot can be run again within the
    /// window. Under the wait policy, a slot every 10 s with a window of
    /// 10 s, so that a slot can wait for the job before it and still run,
    /// and a lease of 10 s.
    pub(crate) fn two_hosts(skip: bool) -> Config {
        Config {
            hosts: 2,
            horizon: if skip { 7 } else { 6 },
            tick: 5,
            cron: if skip {
                "*/15 * * * * *"
            } else {
                "*/10 * * * * *"
            },
            window: if skip { 5 } else { 10 },
            backoff: 5,
            retries: 1,
            lease: if skip { 1 } else { 2 },
            skip,
            faults: Faults {
                deaths: 2,
                failures: 2,
            },
        }
    }
}

/// A run under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Running {
    /// Seconds from [`T0`].
    slot: i64,
    attempt: u32,
    epoch: u64,
    /// The tick its term read the record.
    started: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Host {
    Down,
    /// Up and not in a term; `true` once its last look found a term
    /// worth campaigning for (it campaigns until it takes the lease).
    Idle(bool),
    Running(Running),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Lease {
    host: u8,
    epoch: u64,
    /// The tick it expires at; `None` while its live holder renews it.
    expires: Option<u8>,
}

/// What happened to one slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Book {
    /// Runs begun, and those that ended (succeeded, failed).
    began: u8,
    succeeded: u8,
    failed: u8,
    /// The tick of the first run's start.
    first: Option<u8>,
    /// Recorded done.
    done: bool,
    /// The tick and attempt of the last failure.
    last_failure: Option<(u8, u32)>,
    /// The last run: its host, epoch, and whether it ended.
    last_run: Option<(u8, u64, bool)>,
    /// Runs cut short that the next run of the slot named.
    named: u8,
    skipped: u8,
    missed: u8,
}

/// A rule broken by a step (the properties name them).
mod broken {
    pub(crate) const EARLY: u16 = 1;
    pub(crate) const LATE: u16 = 1 << 1;
    pub(crate) const AFTER_DONE: u16 = 1 << 2;
    pub(crate) const RETRY_EARLY: u16 = 1 << 3;
    pub(crate) const ORDER: u16 = 1 << 4;
    pub(crate) const CUT_SHORT: u16 = 1 << 5;
    pub(crate) const MISSED_COUNT: u16 = 1 << 6;
    pub(crate) const ATTEMPT: u16 = 1 << 7;
    pub(crate) const SPIN: u16 = 1 << 8;
    pub(crate) const SLEEPS_PAST: u16 = 1 << 9;
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    t: u8,
    /// The lease blob's state: the record's bytes.
    record: Vec<u8>,
    lease: Option<Lease>,
    epoch: u64,
    hosts: Vec<Host>,
    left: Faults,
    books: BTreeMap<i64, Book>,
    /// The tick of the schedule's first term, and of the last term's start.
    begun: Option<u8>,
    settled: Option<u8>,
    /// A term began after one that let slots go as missed.
    after_let_go: bool,
    broken: u16,
}

impl State {
    fn free(&self) -> bool {
        self.lease
            .is_none_or(|l| l.expires.is_some_and(|at| at <= self.t))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    Tick,
    /// Host `0` looks without the lease and finds a term due: it
    /// campaigns from then on, however stale its look becomes.
    Look(u8),
    /// Host `0` takes the lease and settles what is due.
    Take(u8),
    /// Host `0`'s job ends: succeeded or failed.
    End(u8, bool),
    Die(u8),
    Restart(u8),
}

#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    pub(crate) config: Config,
    slots: Slots,
    t0: Timestamp,
}

impl Schedule {
    pub(crate) fn new(config: Config) -> Schedule {
        let slots = Slots::new(config.cron, "UTC").expect("the model's expression");
        Schedule {
            config,
            slots,
            t0: T0.parse().expect("the model's start"),
        }
    }

    /// Storage's clock at tick `t`.
    fn at(&self, t: u8) -> Timestamp {
        self.t0 + SignedDuration::from_secs(i64::from(t) * self.config.tick)
    }

    fn secs(&self, at: Timestamp) -> i64 {
        at.duration_since(self.t0).as_secs()
    }

    fn window(&self) -> Duration {
        Duration::from_secs(self.config.window)
    }

    /// The back-off after the `attempt`-th run failed, as the crate's
    /// `backoff` (first × 2^(attempt − 1)).
    fn backoff(&self, attempt: u32) -> Duration {
        Duration::from_secs(self.config.backoff << attempt.saturating_sub(1).min(16))
    }

    fn step(&self, state: &State, action: Action) -> (State, String) {
        let mut s = state.clone();
        let log = match action {
            Action::Tick => {
                self.check_sleepers(&mut s);
                s.t += 1;
                String::new()
            }
            Action::Look(h) => {
                s.hosts[usize::from(h)] = Host::Idle(true);
                format!("h{h} looks and campaigns")
            }
            Action::Take(h) => self.take(&mut s, h),
            Action::End(h, ok) => self.end(&mut s, h, ok),
            Action::Die(h) => {
                s.left.deaths -= 1;
                if let Some(lease) = s.lease.as_mut().filter(|l| l.host == h) {
                    lease.expires = lease.expires.or(Some(s.t + self.config.lease));
                }
                let was = s.hosts[usize::from(h)];
                s.hosts[usize::from(h)] = Host::Down;
                match was {
                    Host::Running(r) => format!("h{h} dies mid-job (slot +{}s)", r.slot),
                    _ => format!("h{h} dies"),
                }
            }
            Action::Restart(h) => {
                s.hosts[usize::from(h)] = Host::Idle(false);
                format!("h{h} comes back")
            }
        };
        (s, log)
    }

    /// A term: reads the record at storage's `now`, lets the missed go, and
    /// runs the slot due (its mark written) or writes the record and ends.
    fn take(&self, s: &mut State, h: u8) -> String {
        let now = self.at(s.t);
        s.epoch += 1;
        let epoch = s.epoch;
        s.lease = Some(Lease {
            host: h,
            epoch,
            expires: None,
        });
        let mut record = read(&s.record);
        let old = record.clone();
        // Every host is up from tick 0: a new record begins there, or at
        // the window's start.
        let d = open(
            &mut record,
            &self.slots,
            self.t0,
            now,
            self.window(),
            self.config.retries,
        );
        s.begun = s.begun.or(Some(s.t));
        s.settled = Some(s.t);
        s.after_let_go |= s.books.values().any(|b| b.missed > 0);
        let missed = self.let_go(s, &old, &record);
        if missed != d.missed_count {
            s.broken |= broken::MISSED_COUNT;
        }
        let mut log = format!("h{h} takes the lease (epoch {epoch})");
        if d.missed_count > 0 || missed > 0 {
            let _ = write!(log, ", {} missed", d.missed_count);
        }
        if missed != d.missed_count {
            let _ = write!(log, " (the record lets {missed} go)");
        }
        let Next::Run { slot, attempt } = d.next else {
            record.prune(now, self.window());
            s.record = record.to_bytes();
            s.lease = None;
            s.hosts[usize::from(h)] = Host::Idle(false);
            return log + ", nothing due";
        };
        self.check_run(s, slot, attempt, now);
        let key = self.secs(slot);
        let named = start(&mut record, slot, attempt, epoch, &format!("h{h}"));
        let book = s.books.entry(key).or_default();
        let expected = book
            .last_run
            .filter(|(_, e, ended)| !ended && *e != epoch)
            .map(|(host, e, _)| (format!("h{host}"), e));
        if named != expected {
            s.broken |= broken::CUT_SHORT;
        }
        book.named += u8::from(named.is_some());
        book.began += 1;
        book.first = book.first.or(Some(s.t));
        book.last_run = Some((h, epoch, false));
        s.record = record.to_bytes();
        s.hosts[usize::from(h)] = Host::Running(Running {
            slot: key,
            attempt,
            epoch,
            started: s.t,
        });
        log + &format!(", runs slot +{key}s attempt {attempt}")
            + &named.map_or_else(String::new, |(h, e)| format!(" (cut short: {h}@{e})"))
    }

    /// Books the slots the term let go as missed: those after what the old
    /// record settled, up to the new `through`, that it does not list, or
    /// lists as begun and never ended (a run cut short). Returns how many.
    fn let_go(&self, s: &mut State, old: &Record, new: &Record) -> u64 {
        let Some(through) = new.through else { return 0 };
        let Some(begin) = old.through.or_else(|| old.slots.keys().next().copied()) else {
            return 0;
        };
        let mut count = 0;
        let mut cursor = begin;
        while let Some(slot) = self.slots.after(cursor).filter(|t| *t <= through) {
            cursor = slot;
            if old.slots.get(&slot).is_none_or(|e| e.is_started(slot)) {
                s.books.entry(self.secs(slot)).or_default().missed += 1;
                count += 1;
            }
        }
        count
    }

    /// The rules of a host that sleeps through this tick (up, in no term,
    /// its look finding nothing worth a term): it sleeps until a later
    /// instant than now (a look that answers "now" would poll storage
    /// without end), and no slot past the window is left unaccounted
    /// (those are let go, and reported missed, by the first term after
    /// they went past it).
    fn check_sleepers(&self, s: &mut State) {
        let now = self.at(s.t);
        let record = read(&s.record);
        for host in &s.hosts {
            if *host != Host::Idle(false) {
                continue;
            }
            let Wake::Sleep(at) = wake(
                &self.slots,
                &record,
                now,
                self.window(),
                self.config.retries,
            ) else {
                continue;
            };
            if at.is_some_and(|at| at <= now) {
                s.broken |= broken::SPIN;
            }
            if !self.accounted_at(s, s.t) {
                s.broken |= broken::SLEEPS_PAST;
            }
        }
    }

    /// The rules of a run's start, each broken marked.
    fn check_run(&self, s: &mut State, slot: Timestamp, attempt: u32, now: Timestamp) {
        let key = self.secs(slot);
        let window = SignedDuration::from_secs(i64::try_from(self.config.window).unwrap());
        if slot > now {
            s.broken |= broken::EARLY;
        }
        if slot < now - window {
            s.broken |= broken::LATE;
        }
        let later_began = s.books.range(key + 1..).any(|(_, b)| b.began > 0);
        let book = s.books.entry(key).or_default();
        if book.done {
            s.broken |= broken::AFTER_DONE;
        }
        if u32::from(book.succeeded + book.failed) + 1 != attempt {
            s.broken |= broken::ATTEMPT;
        }
        if let Some((tick, failed)) = book.last_failure {
            let wait = self.backoff(failed);
            if self.at(tick) + SignedDuration::try_from(wait).unwrap() > now {
                s.broken |= broken::RETRY_EARLY;
            }
        }
        if book.began == 0 && later_began {
            s.broken |= broken::ORDER;
        }
    }

    /// Host `h`'s job ends: the term enters how, and the slots skipped
    /// meanwhile, and gives the lease back.
    fn end(&self, s: &mut State, h: u8, ok: bool) -> String {
        let Host::Running(run) = s.hosts[usize::from(h)] else {
            unreachable!("only a running host's job ends")
        };
        let now = self.at(s.t);
        let slot = self.t0 + SignedDuration::from_secs(run.slot);
        if !ok {
            s.left.failures -= 1;
        }
        let mut record = read(&s.record);
        let holder = format!("h{h}");
        let ended = Ended {
            slot,
            attempt: run.attempt,
            epoch: run.epoch,
            holder: &holder,
            started: self.at(run.started),
            end: now,
            retry_after: (!ok).then(|| self.backoff(run.attempt)),
            retries: self.config.retries,
        };
        let skipped = finish(
            &mut record,
            &self.slots,
            &ended,
            self.config.skip,
            self.window(),
        );
        record.prune(now, self.window());
        s.record = record.to_bytes();
        s.lease = None;
        s.hosts[usize::from(h)] = Host::Idle(false);
        let book = s.books.entry(run.slot).or_default();
        book.last_run = Some((h, run.epoch, true));
        if ok {
            book.succeeded += 1;
            book.done = true;
        } else {
            book.failed += 1;
            book.last_failure = Some((s.t, run.attempt));
        }
        for skip in &skipped {
            s.books.entry(self.secs(*skip)).or_default().skipped += 1;
        }
        let how = if ok { "succeeds" } else { "fails" };
        let mut log = format!("h{h}'s job of slot +{}s {how}", run.slot);
        if !skipped.is_empty() {
            let _ = write!(log, ", {} skipped", skipped.len());
        }
        log
    }

    /// Whether a host's look without the lease, at this tick, campaigns
    /// (the crate's `wake`).
    fn looks_due(&self, s: &State) -> bool {
        let record = read(&s.record);
        let now = self.at(s.t);
        wake(
            &self.slots,
            &record,
            now,
            self.window(),
            self.config.retries,
        ) == Wake::Campaign
    }

    /// Every slot that went past the window after the schedule began (as
    /// of the last term's start) ran, was skipped or was missed, and only
    /// one of these, and was missed or skipped at most once.
    fn accounted(&self, s: &State) -> bool {
        s.settled.is_none_or(|t| self.accounted_at(s, t))
    }

    /// Every slot before the window at tick `t` that came after the
    /// schedule began ran to an end, was skipped or was missed, only one
    /// of these, once. A run cut short and never run again to an end is
    /// missed (a failure before it too: the record's last word is missed).
    fn accounted_at(&self, s: &State, t: u8) -> bool {
        let Some(begun) = s.begun else { return true };
        let (begun, settled) = (self.secs(self.at(begun)), self.at(t));
        let window = SignedDuration::from_secs(i64::try_from(self.config.window).unwrap());
        let before = self.secs(settled - window);
        let mut cursor = self.t0 + SignedDuration::from_secs(begun);
        while let Some(slot) = self.slots.after(cursor) {
            cursor = slot;
            let key = self.secs(slot);
            if key >= before {
                break;
            }
            let b = s.books.get(&key).copied().unwrap_or_default();
            let ran = b.succeeded > 0 || (b.failed > 0 && b.missed == 0);
            let ways = u8::from(ran) + u8::from(b.skipped > 0) + u8::from(b.missed > 0);
            if ways != 1 || b.missed > 1 || b.skipped > 1 {
                return false;
            }
        }
        true
    }
}

/// The record in a state's bytes (the model writes only records).
fn read(bytes: &[u8]) -> Record {
    Record::parse("model", bytes)
        .expect("the model's record parses")
        .unwrap_or_default()
}

impl Traced for Schedule {
    fn apply(&self, state: &State, action: Action) -> Option<(State, String)> {
        Some(self.step(state, action))
    }

    fn tick(state: &State) -> u8 {
        state.t
    }

    fn shown(action: &Action, _: &str) -> bool {
        *action != Action::Tick
    }
}

impl Model for Schedule {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            t: 0,
            record: Vec::new(),
            lease: None,
            epoch: 0,
            hosts: vec![Host::Idle(false); usize::from(self.config.hosts)],
            left: self.config.faults,
            books: BTreeMap::new(),
            begun: None,
            settled: None,
            after_let_go: false,
            broken: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.t >= self.config.horizon {
            return;
        }
        actions.push(Action::Tick);
        for (i, host) in state.hosts.iter().enumerate() {
            let h = u8::try_from(i).unwrap();
            match host {
                Host::Idle(false) if self.looks_due(state) => actions.push(Action::Look(h)),
                Host::Idle(true) if state.free() => actions.push(Action::Take(h)),
                Host::Running(_) => {
                    actions.push(Action::End(h, true));
                    if state.left.failures > 0 {
                        actions.push(Action::End(h, false));
                    }
                }
                Host::Down => actions.push(Action::Restart(h)),
                Host::Idle(_) => {}
            }
            if *host != Host::Down && state.left.deaths > 0 {
                actions.push(Action::Die(h));
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        Some(self.step(state, action).0)
    }

    // One entry per promise, in the order the model chapter lists them:
    // longer than most functions, and read as a list.
    fn properties(&self) -> Vec<Property<Self>> {
        // A rule a step marks when it breaks it (a constant, so that the
        // condition stays a plain function).
        macro_rules! rule {
            ($name:expr, $bit:expr $(,)?) => {
                Property::always($name, |_, s: &State| s.broken & $bit == 0)
            };
        }
        let mut properties = vec![
            Property::always("never two jobs at once", |_, s: &State| {
                s.hosts
                    .iter()
                    .filter(|h| matches!(h, Host::Running(_)))
                    .count()
                    <= 1
            }),
            rule!(
                "a slot runs once its instant has come on storage's clock",
                broken::EARLY,
            ),
            rule!("a slot runs within its catch-up window", broken::LATE),
            rule!("a slot recorded done never runs again", broken::AFTER_DONE),
            rule!(
                "a failed slot is retried after its back-off",
                broken::RETRY_EARLY,
            ),
            rule!("slots are first run in their order", broken::ORDER),
            rule!(
                "a run's attempt counts the runs of its slot that ended",
                broken::ATTEMPT,
            ),
            rule!(
                "the next run of a slot names the run cut short before it, and no other",
                broken::CUT_SHORT,
            ),
            rule!("the missed count is the slots let go", broken::MISSED_COUNT),
            rule!(
                "a host that sleeps sleeps until a later instant",
                broken::SPIN
            ),
            rule!(
                "a host sleeps only once every slot past the window is accounted for",
                broken::SLEEPS_PAST
            ),
            Property::always(
                "a slot's ended runs stay within its retries",
                |m: &Schedule, s: &State| {
                    s.books
                        .values()
                        .all(|b| u32::from(b.succeeded + b.failed) <= m.config.retries + 1)
                },
            ),
            Property::always(
                "every slot past the window ran, was skipped or was missed, once",
                |m: &Schedule, s: &State| m.accounted(s),
            ),
            Property::sometimes(
                "a run cut short, named and done by the next run",
                |_, s: &State| s.books.values().any(|b| b.named > 0 && b.done),
            ),
            Property::sometimes("a failed slot retried and done", |_, s: &State| {
                s.books.values().any(|b| b.failed > 0 && b.done)
            }),
            Property::sometimes("a slot missed", |_, s: &State| {
                s.books.values().any(|b| b.missed > 0)
            }),
            Property::sometimes("a term after one that let slots go", |_, s: &State| {
                s.after_let_go
            }),
        ];
        if self.config.skip {
            properties.push(Property::sometimes("a slot skipped", |_, s: &State| {
                s.books.values().any(|b| b.skipped > 0)
            }));
        } else {
            properties.push(Property::sometimes(
                "a slot run late, within its window",
                |m: &Schedule, s: &State| {
                    s.books.iter().any(|(key, b)| {
                        b.first
                            .is_some_and(|t| m.secs(m.at(t)) > *key + m.config.tick)
                    })
                },
            ));
        }
        properties
    }
}

/// Hosts differ by name in the record: each state stands for itself.
impl Representative for State {
    fn representative(&self) -> Self {
        self.clone()
    }
}
