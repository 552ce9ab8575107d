//! The history of a chaos run, on the cluster's one monotonic clock: every
//! term of every resource (start, reported end), every unit of work, every
//! fenced write, and what the nemesis did (pauses, breaks, every fault).
//! [`super::checker`] judges it.
//!
//! A resource is a lease: a mutex-like group's one lease is named after the
//! group (`mutex`, `qmutex`, `handover`, `run`), a set's partitions
//! `<group>/<partition>` (`set/p03`). Each group's blob is named after the
//! group, so the fenced register's keys (`<blob>/<lease>`) name resources too.

use std::collections::BTreeMap;
use std::time::Duration;

use super::workers::{Event, What};

/// What a worker process is to the history.
#[derive(Clone, Debug)]
pub struct Role {
    /// Its group (and blob): `mutex`, `set`, `qmutex`, `qset`, `handover`, `run`.
    pub group: String,
    /// A `blob-mutex run`: its exit (with a code) reports the end of its
    /// one term, as its exit code is the command's report to its caller;
    /// its log tells when the term began and when its command stopped.
    pub exit_reports: bool,
}

/// One term of one resource on one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub resource: String,
    pub worker: usize,
    pub epoch: u64,
    pub start: Duration,
    /// Its first report (unless stuck), or the kill or exit of its process.
    pub end: Option<Duration>,
    /// How many times its end was reported.
    pub reports: usize,
    /// Its process was killed (SIGKILL) or fail-stopped while the term was open:
    /// it could not report the end.
    pub silenced: bool,
}

/// One unit of work (`WORK`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    pub resource: String,
    pub worker: usize,
    pub epoch: u64,
    pub at: Duration,
}

/// One write to a fenced register (the lease blob's state, or the runner's
/// register), as the worker learned its fate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub resource: String,
    pub worker: usize,
    pub epoch: u64,
    /// A state write's tick (`None` for the register's).
    pub tick: Option<u64>,
    /// When its request was sent: the earliest it can have landed.
    pub sent: Duration,
    /// When its answer was printed: the latest it can have landed.
    pub at: Duration,
    pub accepted: bool,
    /// Written to the runner's register (else to the lease blob's state),
    /// which accepts epochs in order by construction.
    pub register: bool,
}

/// What a term found in the lease blob's state when it began
/// (`STATE-READ`): the epoch and tick of the last write that had landed,
/// `None` when the state was empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub resource: String,
    pub worker: usize,
    pub epoch: u64,
    pub at: Duration,
    pub last: Option<(u64, u64)>,
}

/// A process paused (SIGSTOP) and resumed (SIGCONT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    pub worker: usize,
    pub from: Duration,
    pub to: Option<Duration>,
}

/// One fault the nemesis drew and applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub at: Duration,
    /// `kill`, `term`, `pause`, `latency`, `blackhole`, `503`, `reset`,
    /// `fail-kind`, `wipe`, `break`, `join`, `leave`, `priority`.
    pub kind: &'static str,
    pub detail: String,
}

/// A report that matches no term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    pub resource: String,
    pub worker: usize,
    pub epoch: u64,
    pub at: Duration,
}

/// Everything the checker judges.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub seed: u64,
    pub terms: Vec<Term>,
    pub units: Vec<Unit>,
    pub writes: Vec<Write>,
    pub reads: Vec<Read>,
    pub orphans: Vec<Orphan>,
    pub pauses: Vec<Pause>,
    /// Operator breaks of a resource's lease (`blob-mutex break`): the
    /// resource, when the command was started and when it returned. The
    /// break took effect somewhere in between, so it may have broken a term
    /// that began while the command ran.
    pub breaks: Vec<(String, Duration, Duration)>,
    pub faults: Vec<Fault>,
    /// Every resource of the run, and how soon after the nemesis stopped
    /// each must be owned again.
    pub bounds: BTreeMap<String, Duration>,
    /// Resources of [`bounds`](Self::bounds) that may rest unowned once
    /// their work is done (a run once whose key is recorded): every rule
    /// but liveness judges them, and the shape judges its own steady
    /// state.
    pub may_rest: std::collections::BTreeSet<String>,
    /// How long a broken term may run on after the break returned: until
    /// its owner learns of the loss at its next renewal, or, when it cannot
    /// renew (paused, cut off), until its deadline, which is less than a
    /// lease after its last renewal. So: a lease.
    pub break_grace: Duration,
    /// How soon after a wake a paused owner, past its deadline or taken
    /// over, reports the end of its term.
    pub wake_grace: Duration,
    /// When the nemesis stopped (and every fault was healed).
    pub calm: Duration,
    /// When the final SIGTERM was sent to every worker (ownership is
    /// counted up to here; zero: the end of the record).
    pub stopped: Duration,
    /// The end of the record.
    pub until: Duration,
    /// Processes that had not exited long after the final SIGTERM.
    pub hung: Vec<usize>,
    /// When each worker was started, by index.
    pub spawned: Vec<Duration>,
}

impl History {
    /// Reads the terms, units and writes out of the cluster's `events`;
    /// `roles[w]` says what worker `w` is.
    pub fn read(&mut self, events: &[Event], roles: &[Role]) {
        let mut events = events.to_vec();
        events.sort_by_key(|e| e.at);
        for e in &events {
            self.read_one(e, &roles[e.worker]);
        }
        self.terms.sort_by_key(|t| t.start);
    }

    fn read_one(&mut self, e: &Event, role: &Role) {
        let (worker, at) = (e.worker, e.at);
        let group = role.group.as_str();
        match &e.what {
            // A `run`'s term began when its supervisor logged it; the
            // command's `LEADING` comes after a guard and a shell have
            // started, and counts only when no log line told the start.
            What::Leading { epoch } if role.exit_reports && self.began(group, worker, *epoch) => {}
            What::Leading { epoch } => self.begin(group.to_owned(), worker, *epoch, at),
            What::Owning { partition, epoch } => {
                self.begin(format!("{group}/{partition}"), worker, *epoch, at);
            }
            What::Stopped { epoch, .. } => self.report(group, worker, *epoch, at, true),
            What::Stuck { epoch } => self.report(group, worker, *epoch, at, false),
            What::Released {
                partition, epoch, ..
            } => self.report(&format!("{group}/{partition}"), worker, *epoch, at, true),
            What::ReleasedStuck { partition, epoch } => {
                self.report(&format!("{group}/{partition}"), worker, *epoch, at, false);
            }
            What::Work { epoch, partition } => self.units.push(Unit {
                resource: partition
                    .as_ref()
                    .map_or_else(|| group.to_owned(), |p| format!("{group}/{p}")),
                worker,
                epoch: *epoch,
                at,
            }),
            What::StateWritten { epoch, tick, took } => {
                self.write(group, worker, (*epoch, Some(*tick)), (*took, at), true);
            }
            What::StateRefused { epoch, tick, took } => {
                self.write(group, worker, (*epoch, Some(*tick)), (*took, at), false);
            }
            What::StateRead { epoch, last } => {
                // A state not of the form the fault worker writes is not judged.
                if let Ok(last) = state_of(last) {
                    self.reads.push(Read {
                        resource: group.to_owned(),
                        worker,
                        epoch: *epoch,
                        at,
                        last,
                    });
                }
            }
            What::Fenced {
                lease,
                epoch,
                accepted,
                took,
            } => {
                let resource = lease.strip_suffix("/mutex").unwrap_or(lease);
                self.write(resource, worker, (*epoch, None), (*took, at), *accepted);
            }
            // `blob-mutex run` logs its term's start (`became leader`) and
            // its end (`term ended`, once the command has stopped). Its exit
            // may come seconds after the end, behind a release that storage
            // is slow to answer (seed 1638074026: 3 s under added latency,
            // while the next owner had taken the expired lease).
            What::Log(line) if role.exit_reports => {
                if let Some(epoch) = logged(line, " became leader ") {
                    if !self.began(group, worker, epoch) {
                        self.begin(group.to_owned(), worker, epoch, at);
                    }
                } else if let Some(epoch) = logged(line, " term ended ") {
                    self.end_term(group, worker, epoch, at);
                }
            }
            What::Killed => self.end_process(worker, at, true, false),
            What::Exited { code } => {
                let silenced = *code == Some(blob_mutex::term::FAIL_STOP_EXIT_CODE);
                self.end_process(worker, at, silenced, role.exit_reports && code.is_some());
            }
            _ => {}
        }
    }

    fn begin(&mut self, resource: String, worker: usize, epoch: u64, at: Duration) {
        self.terms.push(Term {
            resource,
            worker,
            epoch,
            start: at,
            end: None,
            reports: 0,
            silenced: false,
        });
    }

    /// Whether the term of `epoch` of `resource` on `worker` was recorded.
    fn began(&self, resource: &str, worker: usize, epoch: u64) -> bool {
        self.terms
            .iter()
            .any(|t| t.worker == worker && t.resource == resource && t.epoch == epoch)
    }

    /// The end of a term, as its worker's log tells it (not a report).
    fn end_term(&mut self, resource: &str, worker: usize, epoch: u64, at: Duration) {
        let term = self
            .terms
            .iter_mut()
            .rev()
            .find(|t| t.worker == worker && t.resource == resource && t.epoch == epoch);
        if let Some(term) = term {
            term.end.get_or_insert(at);
        }
    }

    /// A report of the end of a term; `ended`: its tasks stopped (not stuck).
    fn report(&mut self, resource: &str, worker: usize, epoch: u64, at: Duration, ended: bool) {
        let term = self
            .terms
            .iter_mut()
            .rev()
            .find(|t| t.worker == worker && t.resource == resource && t.epoch == epoch);
        match term {
            Some(term) => {
                term.reports += 1;
                if ended && term.end.is_none() {
                    term.end = Some(at);
                }
            }
            None => self.orphans.push(Orphan {
                resource: resource.to_owned(),
                worker,
                epoch,
                at,
            }),
        }
    }

    /// A write of `(epoch, tick)` (a state write has a tick, the
    /// register's has none) whose request took `took` up to `at`.
    fn write(
        &mut self,
        resource: &str,
        worker: usize,
        (epoch, tick): (u64, Option<u64>),
        (took, at): (Duration, Duration),
        accepted: bool,
    ) {
        self.writes.push(Write {
            resource: resource.to_owned(),
            worker,
            epoch,
            tick,
            sent: at.saturating_sub(took),
            at,
            accepted,
            register: tick.is_none(),
        });
    }

    /// The process ended (`silenced`: it could not report), or exited with
    /// a code that reports its term (`reports`).
    fn end_process(&mut self, worker: usize, at: Duration, silenced: bool, reports: bool) {
        for term in self.terms.iter_mut().filter(|t| t.worker == worker) {
            if term.end.is_none() {
                term.silenced |= silenced;
            }
            // A `run` leads one term per process: its exit reports it, even
            // when its log told the end first.
            if reports && term.reports == 0 {
                term.reports = 1;
            }
            term.end.get_or_insert(at);
        }
    }

    /// The terms of one resource, in order of their start.
    /// Whether `resource` is owned at the end of the record as the
    /// checker counts it: its last term has not ended, and nothing (a break
    /// of its lease, a pause another term took over in) cut what it may
    /// act before then. A term broken at the last instant no longer owns.
    pub fn owned_at_end(&self, resource: &str) -> bool {
        self.terms_of(resource)
            .last()
            .is_some_and(|t| t.end.is_none() && self.acted_until(t) >= self.until)
    }

    pub fn terms_of<'a>(&'a self, resource: &'a str) -> impl Iterator<Item = &'a Term> + 'a {
        self.terms.iter().filter(move |t| t.resource == resource)
    }

    /// When `term` stopped acting as the owner, as far as others may
    /// assume: its end; or the start of a pause of its process in which
    /// another term of the resource began, or after which one began and this
    /// one ended within the wake grace (a paused process runs
    /// no code, and once woken past its deadline it only reports the end;
    /// the checker's units rule watches that it does no work); or a break
    /// of its lease (a broken owner may run on for
    /// [`History::break_grace`], which the units rule allows). A pause that
    /// nobody took over in is no end: the owner goes on after it.
    pub fn acted_until(&self, term: &Term) -> Duration {
        let end = term.end.unwrap_or(self.until);
        // Taken over while paused, or after a wake past the deadline: then
        // the term ends soon after the wake.
        let taken_over = |p: &Pause| {
            let woken = p.to.unwrap_or(end);
            self.terms_of(&term.resource).any(|t| {
                t != term
                    && t.start >= p.from
                    && t.start < end
                    && (t.start < woken || end <= woken + self.wake_grace)
            })
        };
        let paused = self
            .pauses
            .iter()
            .filter(|p| p.worker == term.worker && p.from >= term.start && p.from < end)
            .filter(|p| taken_over(p))
            .map(|p| p.from);
        let broken = self
            .breaks
            .iter()
            .filter(|(r, from, to)| *r == term.resource && *to >= term.start && *from < end)
            .map(|(_, from, _)| (*from).max(term.start));
        paused.chain(broken).fold(end, Duration::min)
    }
}

/// The epoch and tick of a `STATE-READ` line's state: `Ok(None)` for an
/// empty one (`-`), `Ok(Some(..))` for the fault worker's
/// `epoch=<n>_tick=<k>`, an error for anything else.
fn state_of(last: &str) -> Result<Option<(u64, u64)>, String> {
    if last == "-" {
        return Ok(None);
    }
    let parsed = || {
        let (epoch, tick) = last.strip_prefix("epoch=")?.split_once("_tick=")?;
        Some((epoch.parse().ok()?, tick.parse().ok()?))
    };
    parsed()
        .map(Some)
        .ok_or_else(|| format!("not a fault worker's state: {last}"))
}

/// The epoch of the library's log line that holds `words` (` became
/// leader `, logged once a term has begun; ` term ended `, once its tasks
/// have stopped), if `line` is one.
fn logged(line: &str, words: &str) -> Option<u64> {
    if !line.contains(words) {
        return None;
    }
    let (_, rest) = line.split_once(" epoch=")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}
