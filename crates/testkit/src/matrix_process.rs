//! The multi-process half of the fault matrix: worker processes on Azurite,
//! one row of set-up per [`Mode`], and the promises every cell checks from
//! outside, written once ([`Rig::finish`]):
//!
//! 1. never two owners of one lease (the mutex's blob, or each partition);
//!    a unit of work (`WORK`) only inside its term;
//! 2. every end of a term reported once (`STOPPED` for a `LEADING`,
//!    `RELEASED` for an `OWNING`), unless the process was killed or
//!    fail-stopped (it cannot say anything after that);
//! 3. the next owner of a lease only once the previous owner's lease was
//!    released or handed over, or could have expired, as the fault proxies
//!    saw that owner's requests.
//!
//! Every worker reaches each account through a proxy of its own, so the
//! proxy's log is that process's requests alone.
//! [`Rig::with_azure_hold`] gives those proxies Azure's hold on a lease
//! that expired unreleased, one rule per account shared by all of them.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

use super::azure_rule::AzureHold;
use super::azurite::{self, Azurite};
use super::backend::BackendExt;
use super::proxy::{Fate, Injected, Proxy};
use super::workers::{Cluster, Event, Spec, What, FIRST_LEADER};

/// The shortest lease Azure allows.
pub const LEASE: Duration = Duration::from_secs(15);
/// Partitions of a lease set.
pub const PARTITIONS: usize = 4;
/// How long a lease may take to be owned again after it was released, or
/// after it could have expired: a retry or balance cycle, a claim, room for
/// a loaded two-core machine.
pub const SOON: Duration = Duration::from_secs(10);
/// The lease key of a mutex's single lease in [`Term::lease`].
pub const MUTEX_LEASE: &str = "mutex";

/// Flags every fault worker of the matrix gets: the shortest lease, short
/// renewals and retries, a short grace (a unit of work every 500 ms, the
/// worker's default).
const TIMING: &[&str] = &[
    "--lease-secs",
    "15",
    "--renew-ms",
    "2000",
    "--acquire-retry-ms",
    "500",
    "--grace-ms",
    "1000",
];
const SET: &[&str] = &["--partitions", "4", "--balance-ms", "1000"];

/// One row of the matrix: how the workers are set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The fault worker as is: one lease.
    Mutex,
    /// A lease set of [`PARTITIONS`] partitions (`--partitions`).
    Set,
    /// The mutex on a quorum of three accounts (three Azurites).
    QuorumMutex,
    /// The lease set on a quorum of three accounts.
    QuorumSet,
    /// The mutex with priorities: each worker started later has a higher
    /// one, so that it takes over by a planned handover.
    Handover,
    /// The mutex held through its guard (`--guard`): acquire, work until
    /// the guard's cancellation fires, release.
    Guard,
}

impl Mode {
    /// Whether the workers run a lease set.
    pub fn is_set(self) -> bool {
        matches!(self, Mode::Set | Mode::QuorumSet)
    }

    /// Whether the workers lead on a quorum of three accounts.
    pub fn is_quorum(self) -> bool {
        matches!(self, Mode::QuorumMutex | Mode::QuorumSet)
    }

    /// How a term ends that the worker's caller stopped (SIGTERM): the
    /// task form reports `shutdown`; a guard's caller stops its term by
    /// releasing the guard, reported as `finished`.
    pub fn caller_stop(self) -> &'static str {
        if self == Mode::Guard {
            "finished"
        } else {
            "shutdown"
        }
    }

    /// The leases of one worker's record: the partitions, or the mutex's.
    pub fn leases(self) -> Vec<String> {
        if self.is_set() {
            (0..PARTITIONS).map(|i| format!("p{i:02}")).collect()
        } else {
            vec![MUTEX_LEASE.to_owned()]
        }
    }
}

/// A worker frozen (SIGSTOP) and woken (SIGCONT), on the cluster's clock.
#[derive(Clone, Copy, Debug)]
pub struct Freeze {
    pub worker: usize,
    pub stopped: Duration,
    pub woken: Option<Duration>,
}

/// One term of one lease on one worker, as recorded.
#[derive(Clone, Debug)]
pub struct Term {
    pub worker: usize,
    /// The partition, or [`MUTEX_LEASE`].
    pub lease: String,
    pub epoch: u64,
    pub start: Duration,
    /// Its first report, or the moment its process was killed or exited;
    /// a term whose task could not be stopped ends only with its process.
    pub end: Option<Duration>,
    /// Each report of its end: when, and the reason (`None`: stuck).
    pub reports: Vec<(Duration, Option<String>)>,
}

/// Storage (one Azurite, or three for a quorum), the workers, a proxy per
/// worker and account, and the record.
pub struct Rig {
    pub mode: Mode,
    pub cluster: Cluster,
    pub container: String,
    /// The mutex's blob, or the set's name.
    pub blob: &'static str,
    lease: Duration,
    _accounts: Vec<Azurite>,
    ports: Vec<u16>,
    /// `proxies[worker][account]`.
    proxies: Vec<Vec<Proxy>>,
    freezes: Vec<Freeze>,
    /// Exit codes other than 0 that a scenario expects, by worker.
    expected_exits: BTreeMap<usize, Option<i32>>,
    /// Azure's hold on a lease that expired unreleased, one rule per
    /// account shared by every worker's proxy to it; empty: Azurite's rules.
    rules: Vec<AzureHold>,
}

impl Rig {
    /// A rig for `mode`, with a container of its own named after `scenario`.
    pub fn new(mode: Mode, scenario: &str) -> Rig {
        let accounts: Vec<Azurite> = if mode.is_quorum() {
            (0..3).map(|_| Azurite::start()).collect()
        } else {
            Vec::new()
        };
        let ports = if mode.is_quorum() {
            accounts.iter().map(|a| a.port).collect()
        } else {
            vec![azurite::shared().port]
        };
        Rig {
            mode,
            cluster: super::backend::cluster(),
            container: azurite::unique_container(&format!("{scenario}-{mode:?}")),
            blob: if mode.is_set() { "set" } else { "lease" },
            lease: LEASE,
            _accounts: accounts,
            ports,
            proxies: Vec::new(),
            freezes: Vec::new(),
            expected_exits: BTreeMap::new(),
            rules: Vec::new(),
        }
    }

    /// The same rig with Azure's rules on every account: an acquire of a
    /// lease that expired unreleased is refused (`409 LeaseAlreadyPresent`)
    /// until `hold` after the expiry, and a renewal of a lease that expired
    /// before its blob was written is refused (see [`AzureHold`]).
    pub fn with_azure_hold(mut self, hold: Duration) -> Rig {
        self.rules = self.ports.iter().map(|_| AzureHold::new(hold)).collect();
        self
    }

    /// The hold of Azure's rule, zero when it is off.
    pub fn hold(&self) -> Duration {
        self.rules.first().map_or(Duration::ZERO, AzureHold::hold)
    }

    /// When the workers other than `victim` had an acquire of `lease`
    /// refused by Azure's rule, in order (cluster clock).
    pub fn refused_acquires(&self, victim: usize, lease: &str) -> Vec<Duration> {
        let path = self.lease_path(lease);
        let mut refused: Vec<Duration> = self
            .proxies
            .iter()
            .enumerate()
            .filter(|(worker, _)| *worker != victim)
            .flat_map(|(_, proxies)| proxies.iter().flat_map(Proxy::log))
            .filter(|r| r.fate == Fate::Injected(Injected::LeaseAlreadyPresent))
            .filter(|r| decoded(&r.target).contains(&path))
            .map(|r| self.cluster.at(r.at))
            .collect();
        refused.sort();
        refused
    }

    /// The same rig with another lease duration (the examples' defaults).
    pub fn with_lease(mut self, lease: Duration) -> Rig {
        self.lease = lease;
        self
    }

    /// Starts fault worker `w<i>` with the mode's flags and `extra`; in
    /// [`Mode::Handover`] worker `i` has priority `i + 1`.
    pub fn spawn(&mut self, extra: &[&str]) -> usize {
        let index = self.cluster.len();
        let name = format!("w{index}");
        let priority = (index + 1).to_string();
        let mut flags: Vec<&str> = TIMING.to_vec();
        if self.mode.is_set() {
            flags.extend(SET);
        }
        if self.mode == Mode::Handover {
            flags.extend(["--priority", priority.as_str()]);
        }
        if self.mode == Mode::Guard {
            flags.push("--guard");
        }
        flags.extend(extra);
        let strings = self.proxies_for_next();
        let spec = if self.mode.is_quorum() {
            Spec::quorum_worker(&name, &strings, &self.container, self.blob, &flags)
        } else {
            Spec::worker(&name, &strings[0], &self.container, self.blob, &flags)
        };
        self.cluster.spawn(spec)
    }

    /// Starts any command that prints the workers' lines (an example), as
    /// worker `name`: `command` gets the connection string of its proxy.
    pub fn spawn_command(&mut self, name: &str, command: impl FnOnce(&str) -> Command) -> usize {
        assert!(!self.mode.is_quorum(), "examples run on one account");
        let strings = self.proxies_for_next();
        self.cluster.spawn(Spec {
            name: name.to_owned(),
            command: command(&strings[0]),
        })
    }

    /// Starts the next worker's proxies; returns their connection strings.
    fn proxies_for_next(&mut self) -> Vec<String> {
        let proxies: Vec<Proxy> = self.ports.iter().map(|&p| Proxy::start(p)).collect();
        for (proxy, rule) in proxies.iter().zip(&self.rules) {
            proxy.apply(rule);
        }
        let backend = super::backend::current();
        let strings = proxies
            .iter()
            .map(|p| backend.connection_string(&p.endpoint()))
            .collect();
        self.proxies.push(proxies);
        strings
    }

    /// The usual start of a scenario: two workers, and the one the fault
    /// will hit (returned) leads, or owns half the partitions, and has
    /// renewed. `victim` are its extra flags. With [`Mode::Handover`] the
    /// victim is the second worker, which took over by a handover, and the
    /// first waits with a lower priority.
    pub async fn start(&mut self, victim: &[&str]) -> usize {
        match self.mode {
            Mode::Mutex | Mode::QuorumMutex | Mode::Guard => {
                let leader = self.spawn(victim);
                self.wait_leading(leader).await;
                self.spawn(&[]);
                self.wait_renewed(leader).await;
                leader
            }
            Mode::Handover => {
                let first = self.spawn(&[]);
                self.wait_leading(first).await;
                let leader = self.spawn(victim);
                self.wait_leading(leader).await;
                self.wait_renewed(leader).await;
                leader
            }
            Mode::Set | Mode::QuorumSet => {
                let owner = self.spawn(victim);
                self.spawn(&[]);
                self.wait_owned(&[2, 2]).await;
                owner
            }
        }
    }

    /// Waits until `worker` prints `LEADING`.
    pub async fn wait_leading(&self, worker: usize) -> Duration {
        self.cluster
            .wait_for(
                &format!("worker {worker} to lead"),
                FIRST_LEADER + LEASE,
                |events| {
                    events.iter().find_map(|e| {
                        (e.worker == worker && matches!(e.what, What::Leading { .. }))
                            .then_some(e.at)
                    })
                },
            )
            .await
    }

    /// Waits until a renewal of `worker` reached storage on every account.
    pub async fn wait_renewed(&self, worker: usize) {
        for proxy in &self.proxies[worker] {
            proxy.renewed_lease(LEASE).await;
        }
    }

    /// Waits until the workers own `want` partitions each (by the record).
    pub async fn wait_owned(&self, want: &[usize]) -> Duration {
        self.cluster
            .wait_for(
                &format!("partition counts {want:?}"),
                FIRST_LEADER + LEASE * 2,
                |events| {
                    let mut counts = vec![0; want.len().max(self.cluster.len())];
                    for term in terms(events).iter().filter(|t| t.end.is_none()) {
                        counts[term.worker] += 1;
                    }
                    (counts[..want.len()] == *want).then_some(())
                },
            )
            .await;
        self.cluster.now()
    }

    /// Waits until every lease `victim` had at `after` is owned by another
    /// worker, in a term that began after that; returns when.
    pub async fn wait_taken_over(&self, victim: usize, after: Duration) -> Duration {
        let had: Vec<String> = self
            .terms_open_at(victim, after)
            .into_iter()
            .map(|t| t.lease)
            .collect();
        assert!(!had.is_empty(), "worker {victim} had nothing at {after:?}");
        self.cluster
            .wait_for(
                &format!("the others to own what worker {victim} had: {had:?}"),
                self.lease + self.hold() + SOON * 2,
                |events| {
                    let all = terms(events);
                    had.iter()
                        .all(|lease| {
                            all.iter()
                                .rev()
                                .find(|t| &t.lease == lease)
                                .is_some_and(|t| {
                                    t.worker != victim && t.start >= after && t.end.is_none()
                                })
                        })
                        .then(|| self.cluster.now())
                },
            )
            .await
    }

    /// SIGKILLs a worker; returns when.
    pub fn kill(&mut self, worker: usize) -> Duration {
        self.expected_exits.insert(worker, None);
        self.cluster.kill(worker)
    }

    /// SIGSTOPs a worker; returns when.
    pub fn freeze(&mut self, worker: usize) -> Duration {
        let stopped = self.cluster.signal(worker, "STOP");
        self.freezes.push(Freeze {
            worker,
            stopped,
            woken: None,
        });
        stopped
    }

    /// SIGCONTs a frozen worker; returns when.
    pub fn wake(&mut self, worker: usize) -> Duration {
        let woken = self.cluster.signal(worker, "CONT");
        let freeze = self
            .freezes
            .iter_mut()
            .rev()
            .find(|f| f.worker == worker)
            .expect("the worker was frozen");
        freeze.woken = Some(woken);
        woken
    }

    /// Freezes `victim` (SIGSTOP) until the others own every lease it had
    /// and for longer than the lease, then wakes it (SIGCONT). Returns the
    /// terms it had, and when it was frozen, taken over and woken.
    pub async fn freeze_past_the_lease(
        &mut self,
        victim: usize,
    ) -> (Vec<Term>, Duration, Duration, Duration) {
        let frozen = self.freeze(victim);
        let had = self.terms_open_at(victim, frozen);
        assert!(!had.is_empty(), "worker {victim} had nothing to lose");
        let taken = self.wait_taken_over(victim, frozen).await;
        // A freeze as long as the lease at least, whatever the takeover.
        let frozen_for = self.cluster.now() - frozen;
        tokio::time::sleep(self.lease.saturating_sub(frozen_for)).await;
        let woken = self.wake(victim);
        (had, frozen, taken, woken)
    }

    /// Says that `worker` is expected to exit with `code` (`None`: by a
    /// signal), not 0.
    pub fn expect_exit(&mut self, worker: usize, code: Option<i32>) {
        self.expected_exits.insert(worker, code);
    }

    /// The terms recorded so far.
    pub fn terms(&self) -> Vec<Term> {
        terms(&self.cluster.events())
    }

    /// The terms of `worker` that were open at `at` (a term that a kill
    /// ended at `at` included).
    pub fn terms_open_at(&self, worker: usize, at: Duration) -> Vec<Term> {
        self.terms()
            .into_iter()
            .filter(|t| t.worker == worker && t.start <= at && t.end.is_none_or(|end| end >= at))
            .collect()
    }

    /// Waits until every one of `terms` has been reported; returns them as
    /// recorded then.
    pub async fn wait_reported(&self, terms: &[Term], limit: Duration) -> Vec<Term> {
        self.cluster
            .wait_for("the end of every term to be reported", limit, |events| {
                let now = self::terms(events);
                let reported: Vec<Term> = terms
                    .iter()
                    .filter_map(|t| {
                        now.iter()
                            .find(|n| same_term(n, t) && !n.reports.is_empty())
                            .cloned()
                    })
                    .collect();
                (reported.len() == terms.len()).then_some(reported)
            })
            .await
    }

    /// The first instant at which the lease of `term` was free for another
    /// owner as far as storage goes, by what its worker's proxies forwarded
    /// before `before`: the release or handover (Change Lease) of its lease
    /// id, else its last acquire or renew plus the lease duration. On a
    /// quorum, the earliest over the accounts: a new owner needs a majority,
    /// so at least one account the term held.
    pub fn free_at(&self, term: &Term, before: Duration) -> Duration {
        let path = self.lease_path(&term.lease);
        let before = self.cluster.epoch() + before;
        let started = self.cluster.epoch() + term.start;
        let mut earliest: Option<Duration> = None;
        for proxy in &self.proxies[term.worker] {
            let log: Vec<_> = proxy
                .log()
                .into_iter()
                .filter(|r| decoded(&r.target).contains(&path))
                .filter(|r| r.forwarded_at.is_some_and(|at| at < before))
                .collect();
            // The term's lease id: that of the acquire that won it.
            let Some(id) = log
                .iter()
                .rfind(|r| r.is("acquire") && r.forwarded_at.is_some_and(|at| at < started))
                .and_then(|r| r.lease().map(str::to_owned))
            else {
                continue;
            };
            let mine = || log.iter().filter(|r| r.lease() == Some(id.as_str()));
            let freed = mine()
                .find(|r| r.is("release") || r.is("change"))
                .and_then(|r| r.forwarded_at);
            let free = freed.or_else(|| {
                mine()
                    .filter(|r| r.is("acquire") || r.is("renew"))
                    .filter_map(|r| r.forwarded_at)
                    .max()
                    .map(|last| last + self.lease)
            });
            if let Some(free) = free {
                let free = self.cluster.at(free);
                earliest = Some(earliest.map_or(free, |e| e.min(free)));
            }
        }
        earliest.unwrap_or_else(|| {
            panic!(
                "no acquire of {term:?} reached storage through its worker's proxies\n{}",
                self.record()
            )
        })
    }

    /// What a lease's requests carry in their target, once [`decoded`].
    fn lease_path(&self, lease: &str) -> String {
        if self.mode.is_set() {
            format!("/{}/{}/partitions/{lease}?", self.container, self.blob)
        } else {
            format!("/{}/{}?", self.container, self.blob)
        }
    }

    /// Stops every worker still running (SIGTERM: drain and release), waits
    /// for every exit, and checks the promises over the whole record.
    pub async fn finish(self) {
        for worker in 0..self.cluster.len() {
            if self.cluster.exited(worker).is_none() {
                self.cluster.terminate(worker);
            }
        }
        for worker in 0..self.cluster.len() {
            self.cluster.wait_exit(worker, SOON * 2).await;
        }
        // The reader threads record each exit once they reaped it.
        self.cluster
            .wait_for("every exit to be recorded", SOON, |events| {
                let exits = events
                    .iter()
                    .filter(|e| matches!(e.what, What::Exited { .. }))
                    .count();
                (exits == self.cluster.len()).then_some(())
            })
            .await;
        self.check();
    }

    /// The checks of [`Rig::finish`], on the record as it is.
    pub fn check(&self) {
        let events = self.cluster.events();
        let record = self.record();
        self.assert_exits(&events, &record);
        let terms = terms(&events);
        assert_orphan_reports(&events, &terms, &record);
        self.assert_one_owner(&terms, &record);
        assert_reported_once(&events, &terms, &record);
        self.assert_next_after_free(&terms, &record);
        self.assert_work_in_terms(&events, &terms, &record);
    }

    /// The record without log lines and units of work, for messages.
    pub fn record(&self) -> String {
        let mut out = String::from("--- worker record (WORK lines left out) ---\n");
        for e in self.cluster.events() {
            if !matches!(e.what, What::Log(_) | What::Work { .. }) {
                let name = self.cluster.name(e.worker);
                let _ = writeln!(out, "{:>9.3}s {name:<4} {:?}", e.at.as_secs_f64(), e.what);
            }
        }
        out
    }

    fn assert_exits(&self, events: &[Event], record: &str) {
        for worker in 0..self.cluster.len() {
            let code = events.iter().find_map(|e| match e.what {
                What::Exited { code } if e.worker == worker => Some(code),
                _ => None,
            });
            let expected = self.expected_exits.get(&worker).copied().unwrap_or(Some(0));
            assert_eq!(
                code,
                Some(expected),
                "worker {worker}'s exit code\n{}",
                self.cluster.dump_all()
            );
        }
        let panics: usize = (0..self.cluster.len())
            .map(|w| self.cluster.log_lines(w, "panicked").len())
            .sum();
        assert_eq!(panics, 0, "a worker panicked\n{record}");
    }

    /// When a term stopped acting: its end, or the moment its process was
    /// frozen, when it was frozen while the term ran (it runs no code while
    /// frozen, and [`Rig::assert_work_in_terms`] checks that it did no work
    /// once woken).
    fn acted_until(&self, term: &Term) -> Duration {
        let end = term.end.unwrap_or(Duration::MAX);
        self.freeze_of(term).map_or(end, |f| end.min(f.stopped))
    }

    /// The freeze that caught `term` running, if any.
    fn freeze_of(&self, term: &Term) -> Option<Freeze> {
        self.freezes.iter().copied().find(|f| {
            f.worker == term.worker
                && term.start <= f.stopped
                && term.end.is_none_or(|end| end > f.stopped)
        })
    }

    /// Promise 1: never two owners of one lease; epochs increase.
    fn assert_one_owner(&self, terms: &[Term], record: &str) {
        for (lease, ts) in by_lease(terms) {
            for (i, a) in ts.iter().enumerate() {
                for b in &ts[i + 1..] {
                    assert!(
                        self.acted_until(a) <= b.start,
                        "{lease} owned twice at once: {a:?} and {b:?}\n{record}"
                    );
                    assert!(
                        b.epoch > a.epoch,
                        "{lease}: epoch {} after {}\n{record}",
                        b.epoch,
                        a.epoch
                    );
                }
            }
        }
    }

    /// Promise 3: the next owner of a lease only once the previous owner's
    /// lease was released or handed over, or could have expired.
    fn assert_next_after_free(&self, terms: &[Term], record: &str) {
        for (lease, ts) in by_lease(terms) {
            for pair in ts.windows(2) {
                let (prev, next) = (&pair[0], &pair[1]);
                if prev.worker == next.worker {
                    continue;
                }
                let free = self.free_at(prev, next.start);
                assert!(
                    next.start >= free,
                    "{lease}: {next:?} began at {:?}, before the lease of {prev:?} was free ({free:?})\n{record}",
                    next.start
                );
            }
        }
    }

    /// Every unit of work (`WORK`) inside a term of its worker, lease and
    /// epoch; none after the wake of a term that was frozen.
    fn assert_work_in_terms(&self, events: &[Event], terms: &[Term], record: &str) {
        for e in events {
            let What::Work { epoch, partition } = &e.what else {
                continue;
            };
            let lease = partition.as_deref().unwrap_or(MUTEX_LEASE);
            let term = terms
                .iter()
                .find(|t| t.worker == e.worker && t.lease == lease && t.epoch == *epoch)
                .unwrap_or_else(|| panic!("a unit of work outside any term: {e:?}\n{record}"));
            // Lines read while the process was frozen were written before.
            let until = match self.freeze_of(term) {
                Some(f) => f.woken.unwrap_or(Duration::MAX),
                None => term.end.unwrap_or(Duration::MAX),
            };
            assert!(
                term.start <= e.at && e.at <= until,
                "a unit of work of {term:?} at {:?}, outside the term (or after the wake of its frozen process at {until:?})\n{record}",
                e.at
            );
        }
    }
}

/// Promise 2: every end of a term reported once; a process killed or
/// fail-stopped may not have reported the terms it had then.
fn assert_reported_once(events: &[Event], terms: &[Term], record: &str) {
    let silenced = |worker: usize| {
        events.iter().any(|e| {
            e.worker == worker
                && matches!(
                    e.what,
                    What::Killed
                        | What::Exited {
                            code: Some(blob_mutex::term::FAIL_STOP_EXIT_CODE)
                        }
                )
        })
    };
    for term in terms {
        let most = 1;
        let least = usize::from(!silenced(term.worker));
        assert!(
            (least..=most).contains(&term.reports.len()),
            "the end of {term:?} was reported {} times, not once\n{record}",
            term.reports.len()
        );
    }
}

fn same_term(a: &Term, b: &Term) -> bool {
    a.worker == b.worker && a.lease == b.lease && a.epoch == b.epoch
}

/// The terms of each lease, in order of their start.
fn by_lease(terms: &[Term]) -> BTreeMap<&str, Vec<&Term>> {
    let mut leases: BTreeMap<&str, Vec<&Term>> = BTreeMap::new();
    for term in terms {
        leases.entry(&term.lease).or_default().push(term);
    }
    leases
}

/// A report that matches no term.
fn assert_orphan_reports(events: &[Event], terms: &[Term], record: &str) {
    for e in events {
        if let Some((lease, epoch, _)) = report_of(&e.what) {
            assert!(
                terms
                    .iter()
                    .any(|t| t.worker == e.worker && t.lease == lease && t.epoch == epoch),
                "a report of a term that never began: {e:?}\n{record}"
            );
        }
    }
}

/// A report line: (lease, epoch, reason; `None` when stuck).
fn report_of(what: &What) -> Option<(&str, u64, Option<String>)> {
    match what {
        What::Stopped { epoch, reason } => Some((MUTEX_LEASE, *epoch, Some(reason.clone()))),
        What::Stuck { epoch } => Some((MUTEX_LEASE, *epoch, None)),
        What::Released {
            partition,
            epoch,
            reason,
        } => Some((partition, *epoch, Some(reason.clone()))),
        What::ReleasedStuck { partition, epoch } => Some((partition, *epoch, None)),
        _ => None,
    }
}

/// Every term in the record, in order of their start. A term ends at its
/// first report, unless that says its task was stuck; the kill or exit of
/// its process ends it in any case.
pub fn terms(events: &[Event]) -> Vec<Term> {
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.at);
    let mut terms: Vec<Term> = Vec::new();
    for e in &events {
        let begun = match &e.what {
            What::Leading { epoch } => Some((MUTEX_LEASE, *epoch)),
            What::Owning { partition, epoch } => Some((partition.as_str(), *epoch)),
            _ => None,
        };
        if let Some((lease, epoch)) = begun {
            terms.push(Term {
                worker: e.worker,
                lease: lease.to_owned(),
                epoch,
                start: e.at,
                end: None,
                reports: Vec::new(),
            });
        } else if let Some((lease, epoch, reason)) = report_of(&e.what) {
            if let Some(term) = terms
                .iter_mut()
                .rev()
                .find(|t| t.worker == e.worker && t.lease == lease && t.epoch == epoch)
            {
                if reason.is_some() && term.reports.is_empty() {
                    term.end.get_or_insert(e.at);
                }
                term.reports.push((e.at, reason));
            }
        } else if matches!(e.what, What::Killed | What::Exited { .. }) {
            for term in terms.iter_mut().filter(|t| t.worker == e.worker) {
                term.end.get_or_insert(e.at);
            }
        }
    }
    terms
}

/// A request target with `%2F` as `/`: the official SDK sends a blob name
/// as one encoded path segment, the 0.21 SDK as it is.
fn decoded(target: &str) -> String {
    target.replace("%2F", "/").replace("%2f", "/")
}
