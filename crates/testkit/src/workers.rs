//! Runs worker processes against one blob, records what they print, and
//! analyses the record: overlap, gaps, epochs, handovers.
//!
//! A [`Cluster`] starts fault workers (`crates/testkit/examples/fault_worker.rs`,
//! built as `target/debug/examples/fault-worker`) or any command that prints
//! the same lines:
//!
//! ```text
//! LEADING epoch=<n> id=<id>
//! WORK epoch=<n> id=<id> sub=<k>
//! STOPPED epoch=<n> id=<id> reason=<word> tasks=<returned|aborted|stuck>
//! FENCED lease=<key> epoch=<n> accepted=<yes|no>
//! EXITED id=<id>
//! ```
//!
//! Each line is stamped with a monotonic time (since the cluster was made)
//! when a reader thread receives it. The cluster also records the signals it
//! sends and the moment each process is seen to exit. [`History`] turns the
//! record into leadership intervals: a process leads from `LEADING` until its
//! `STOPPED`, until the library logs that it aborted the task, until the
//! moment it was killed (SIGKILL), or until it exited, whichever comes first.
//! A [`Feed`] hands each event over as it is recorded, for a program (the
//! benchmark) that waits for the next one.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

mod terms;

pub use terms::{Ended, History, Interval};

/// What happened, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// `LEADING epoch=<n>`: the leader task started.
    Leading { epoch: u64 },
    /// `STOPPED epoch=<n> reason=<word>`: every task of the term stopped.
    Stopped { epoch: u64, reason: String },
    /// `STOPPED … tasks=stuck`: the term ended, but a task could not be
    /// stopped and may still run.
    Stuck { epoch: u64 },
    /// `WORK epoch=<n>`: the term's task or a sub-task did a unit of work
    /// (with `partition=<p>`: a partition's task).
    Work {
        epoch: u64,
        partition: Option<String>,
    },
    /// `OWNING partition=<p> epoch=<n>`: a partition's task started.
    Owning { partition: String, epoch: u64 },
    /// `RELEASED partition=<p> epoch=<n> reason=<word>`: a partition's
    /// task stopped (its lease is released next, unless it was lost).
    Released {
        partition: String,
        epoch: u64,
        reason: String,
    },
    /// `RELEASED … tasks=stuck`: a partition's term ended, but its task
    /// could not be stopped and may still run (its lease is left to expire).
    ReleasedStuck { partition: String, epoch: u64 },
    /// `EXITED`: the worker's campaign returned and it is about to exit.
    ExitedLine,
    /// `STATE-WRITTEN epoch=<n> tick=<k> took_ms=<ms>`: a state write of
    /// the term landed; its request took `took` (so it was sent that long
    /// before the line).
    StateWritten {
        epoch: u64,
        tick: u64,
        took: Duration,
    },
    /// `STATE-READ epoch=<n> last=<state>`: the state the term found when it
    /// began (spaces shown as `_`, `-` when empty).
    StateRead { epoch: u64, last: String },
    /// `STATE-REFUSED epoch=<n> tick=<k> took_ms=<ms>`: a state write of
    /// the term was refused (`Error::StateWriteRefused`).
    StateRefused {
        epoch: u64,
        tick: u64,
        took: Duration,
    },
    /// `FENCED lease=<key> epoch=<n> accepted=<yes|no> took_ms=<ms>`: a
    /// unit of work written to the fenced register, and whether it was
    /// accepted.
    Fenced {
        lease: String,
        epoch: u64,
        accepted: bool,
        took: Duration,
    },
    /// The cluster sent SIGKILL (the process can run no more code).
    Killed,
    /// The cluster sent SIGTERM.
    Terminated,
    /// The process was seen to have exited, with its exit code (`None`
    /// when a signal ended it).
    Exited { code: Option<i32> },
    /// The library logged that it aborted a leader task that ignored
    /// cancellation (the task ended there without printing `STOPPED`).
    Aborted,
    /// A line on standard error (the worker's log).
    Log(String),
}

impl What {
    /// The epoch of the term the line is about, if it names one.
    pub fn epoch(&self) -> Option<u64> {
        match self {
            What::Leading { epoch }
            | What::Stopped { epoch, .. }
            | What::Stuck { epoch }
            | What::Work { epoch, .. }
            | What::Owning { epoch, .. }
            | What::Released { epoch, .. }
            | What::ReleasedStuck { epoch, .. }
            | What::StateWritten { epoch, .. }
            | What::StateRead { epoch, .. }
            | What::StateRefused { epoch, .. }
            | What::Fenced { epoch, .. } => Some(*epoch),
            What::ExitedLine
            | What::Killed
            | What::Terminated
            | What::Exited { .. }
            | What::Aborted
            | What::Log(_) => None,
        }
    }
}

/// How long a cluster just started may take to elect its first leader
/// (process start-up included).
pub const FIRST_LEADER: Duration = Duration::from_secs(20);

/// What the library logs when it aborts a leader task.
pub const ABORT_MESSAGE: &str =
    "leader task had not stopped when its grace or the deadline came, and was aborted";

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Time since the cluster was made.
    pub at: Duration,
    /// Index of the worker (in start order).
    pub worker: usize,
    pub what: What,
}

/// A worker to start: a name and a command.
pub struct Spec {
    pub name: String,
    pub command: Command,
}

impl Spec {
    /// The fault worker `name` on `container`/`blob`, connecting with
    /// `connection_string`, with extra worker options such as
    /// `["--acquire-retry-ms", "500"]`.
    pub fn worker(
        name: &str,
        connection_string: &str,
        container: &str,
        blob: &str,
        options: &[&str],
    ) -> Spec {
        let mut spec = Spec::worker_at(
            &worker_bin(),
            name,
            connection_string,
            container,
            blob,
            options,
        );
        if std::env::var_os("RUST_LOG").is_none() {
            spec.command.env("RUST_LOG", "warn,blob_mutex=debug");
        }
        spec
    }

    /// As [`Spec::worker`], with the fault worker at `bin`, and its own log
    /// filter unless `RUST_LOG` says otherwise: for a program that is not a
    /// test binary (the benchmark, which finds the worker beside itself).
    pub fn worker_at(
        bin: &Path,
        name: &str,
        connection_string: &str,
        container: &str,
        blob: &str,
        options: &[&str],
    ) -> Spec {
        let mut command = Command::new(bin);
        command
            .arg(container)
            .arg(blob)
            .arg(name)
            .args(options)
            .env("AZURE_STORAGE_CONNECTION_STRING", connection_string);
        Spec {
            name: name.to_owned(),
            command,
        }
    }

    /// The fault worker `name` on a quorum of the accounts reached with
    /// `connection_strings`, one per account.
    pub fn quorum_worker(
        name: &str,
        connection_strings: &[String],
        container: &str,
        blob: &str,
        options: &[&str],
    ) -> Spec {
        Spec::worker(name, "", container, blob, options).on_quorum(connection_strings)
    }

    /// This worker on a quorum of the accounts reached with
    /// `connection_strings`, one per account.
    pub fn on_quorum(mut self, connection_strings: &[String]) -> Spec {
        self.command.env(
            "BLOB_MUTEX_QUORUM_CONNECTION_STRINGS",
            connection_strings.join("\n"),
        );
        self
    }
}

/// The fault worker binary (`crates/testkit/examples/fault_worker.rs`, the
/// test kit's example `fault-worker`), next to the test binary:
/// `target/debug/deps/<test>` → `target/debug/examples/fault-worker`.
pub fn worker_bin() -> PathBuf {
    example_bin("fault-worker")
}

/// An example's binary, next to the test binary:
/// `target/<profile>/deps/<test>` → `target/<profile>/examples/<name>`.
pub fn example_bin(name: &str) -> PathBuf {
    built("examples", name)
}

/// The `blob-mutex` command (the package `blob-mutex-cli`), next to the test
/// binary: `target/<profile>/deps/<test>` → `target/<profile>/blob-mutex`.
pub fn cli_bin() -> PathBuf {
    built(".", "blob-mutex")
}

/// A binary built in the workspace's target directory, under `folder` of the
/// test binary's profile.
fn built(folder: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the test binary is in target/<profile>/deps");
    let bin = profile
        .join(folder)
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{name} is missing at {}: run `cargo build --workspace --all-targets` (scripts/test does)",
        bin.display()
    );
    bin
}

struct Proc {
    name: String,
    pid: u32,
    child: Arc<Mutex<Child>>,
}

/// The events recorded so far, in time order, and the feeds that are
/// handed each new one.
#[derive(Default)]
struct Record {
    events: Mutex<Vec<Event>>,
    feeds: Mutex<Vec<UnboundedSender<Event>>>,
}

impl Record {
    /// Adds `event` in time order and hands it to every feed still open.
    fn add(&self, event: Event) {
        let mut events = lock(&self.events);
        let mut feeds = lock(&self.feeds);
        feeds.retain(|feed| feed.send(event.clone()).is_ok());
        insert(&mut events, event);
    }
}

/// The events a [`Cluster`] records from the moment [`Cluster::follow`]
/// was called, one at a time, in the order they were recorded.
pub struct Feed {
    events: UnboundedReceiver<Event>,
}

impl Feed {
    /// The next event, or `None` when none is recorded before `deadline`.
    pub async fn next_before(&mut self, deadline: Instant) -> Option<Event> {
        tokio::time::timeout_at(deadline.into(), self.events.recv())
            .await
            .ok()
            .flatten()
    }

    /// The events recorded since the last look, without waiting.
    pub fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            out.push(event);
        }
        out
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Worker processes and the record of what they did.
pub struct Cluster {
    start: Instant,
    procs: Vec<Proc>,
    record: Arc<Record>,
    /// `BLOB_MUTEX_BACKEND` for every worker, when set (else the workers
    /// inherit the test's environment).
    backend: Option<blob_mutex::azure::Backend>,
    /// Where the workers' standard error goes, one `<name>.log` each, when
    /// set (else it is recorded as [`What::Log`] lines).
    logs: Option<PathBuf>,
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}

impl Cluster {
    /// An empty cluster; its clock starts now.
    pub fn new() -> Cluster {
        Cluster {
            start: Instant::now(),
            procs: Vec::new(),
            record: Arc::default(),
            backend: None,
            logs: None,
        }
    }

    /// This cluster with its workers' logs (standard error) written to
    /// `<dir>/<name>.log` instead of recorded: for long runs. The record
    /// then has no [`What::Log`] lines, and no [`What::Aborted`] either.
    pub fn logs_in(mut self, dir: &Path) -> Cluster {
        self.logs = Some(dir.to_owned());
        self
    }

    /// A [`Feed`] of every event recorded from now on.
    pub fn follow(&self) -> Feed {
        let (feed, events) = unbounded_channel();
        lock(&self.record.feeds).push(feed);
        Feed { events }
    }

    /// An empty cluster whose workers reach storage through `backend`.
    pub fn on_backend(backend: blob_mutex::azure::Backend) -> Cluster {
        let mut cluster = Cluster::new();
        cluster.backend = Some(backend);
        cluster
    }

    /// The instant the cluster's clock counts from.
    pub fn epoch(&self) -> Instant {
        self.start
    }

    /// Time since the cluster was made.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// `instant` on the cluster's clock.
    pub fn at(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.start)
    }

    /// Starts a worker; returns its index.
    pub fn spawn(&mut self, mut spec: Spec) -> usize {
        let index = self.procs.len();
        if let Some(backend) = self.backend {
            spec.command
                .env(blob_mutex::azure::Backend::ENV, backend.as_str());
        }
        let stderr = match &self.logs {
            Some(dir) => {
                let path = dir.join(format!("{}.log", spec.name));
                let file = std::fs::File::create(&path)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
                Stdio::from(file)
            }
            None => Stdio::piped(),
        };
        let mut child = spec
            .command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start worker {}: {e}", spec.name));
        let stdout = child.stdout.take().expect("piped stdout");
        let start = self.start;
        if let Some(stderr) = child.stderr.take() {
            let events = self.record.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if line.contains(ABORT_MESSAGE) {
                        record(&events, start, index, What::Aborted);
                    }
                    record(&events, start, index, What::Log(line));
                }
            });
        }
        let pid = child.id();
        let child = Arc::new(Mutex::new(child));
        let (events, reaped) = (self.record.clone(), child.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(what) = parse_line(&line) {
                    record(&events, start, index, what);
                }
            }
            // Standard output closed: the process is exiting; reap it.
            loop {
                let status = lock(&reaped).try_wait();
                match status {
                    Ok(Some(status)) => {
                        record(
                            &events,
                            start,
                            index,
                            What::Exited {
                                code: status.code(),
                            },
                        );
                        return;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => return,
                }
            }
        });
        self.procs.push(Proc {
            name: spec.name,
            pid,
            child,
        });
        index
    }

    /// Starts `count` fault workers `w0`, `w1`, … on `container`/`blob`,
    /// all with `options`; worker `i` connects with `connection_string(i)`
    /// (through a proxy of its own, one shared proxy, or straight to Azurite).
    pub fn spawn_workers(
        &mut self,
        count: usize,
        container: &str,
        blob: &str,
        options: &[&str],
        connection_string: impl Fn(usize) -> String,
    ) {
        for i in 0..count {
            self.spawn(Spec::worker(
                &format!("w{i}"),
                &connection_string(i),
                container,
                blob,
                options,
            ));
        }
    }

    /// How many workers have been started.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Whether no worker has been started.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// The name a worker was started with.
    pub fn name(&self, worker: usize) -> &str {
        &self.procs[worker].name
    }

    /// A worker's process id.
    pub fn pid(&self, worker: usize) -> u32 {
        self.procs[worker].pid
    }

    /// SIGKILLs a worker; returns the instant (cluster clock) the signal was
    /// sent, which ends its leadership in the record.
    pub fn kill(&self, worker: usize) -> Duration {
        let mut child = lock(&self.procs[worker].child);
        if matches!(child.try_wait(), Ok(Some(_))) {
            return self.now();
        }
        child.kill().expect("SIGKILL the worker");
        let at = self.now();
        drop(child);
        self.push(worker, What::Killed, at);
        at
    }

    /// Sends SIGTERM to a worker; returns the instant it was sent.
    pub fn terminate(&self, worker: usize) -> Duration {
        let at = self.now();
        self.push(worker, What::Terminated, at);
        self.signal(worker, "TERM");
        at
    }

    /// Sends a signal (`STOP`, `CONT`, …) to a worker; returns the instant it
    /// was sent (after `kill` returned, so the signal has been delivered).
    pub fn signal(&self, worker: usize, signal: &str) -> Duration {
        let pid = self.procs[worker].pid.to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap_or_else(|e| panic!("run kill -{signal}: {e}"));
        assert!(status.success(), "kill -{signal} {pid} failed");
        self.now()
    }

    /// The lines of one kind (`What::Work`, say) a worker printed, with their times.
    pub fn lines_of(&self, worker: usize, wanted: fn(&What) -> bool) -> Vec<Duration> {
        self.events()
            .into_iter()
            .filter(|e| e.worker == worker && wanted(&e.what))
            .map(|e| e.at)
            .collect()
    }

    /// Whether a worker's process has exited (and been reaped).
    pub fn exited(&self, worker: usize) -> Option<ExitStatus> {
        lock(&self.procs[worker].child).try_wait().ok().flatten()
    }

    fn push(&self, worker: usize, what: What, at: Duration) {
        self.record.add(Event { at, worker, what });
    }

    /// Every event so far, in time order.
    pub fn events(&self) -> Vec<Event> {
        lock(&self.record.events).clone()
    }

    /// `look` at every event so far, in time order, without copying them
    /// (the readers wait meanwhile: keep it short).
    pub fn scan<T>(&self, look: impl FnOnce(&[Event]) -> T) -> T {
        look(&lock(&self.record.events))
    }

    /// The record so far, analysed up to now.
    pub fn history(&self) -> History {
        History::new(self.events(), self.now())
    }

    /// The workers leading now (per the record).
    pub fn leaders(&self) -> Vec<usize> {
        self.history()
            .intervals
            .iter()
            .filter(|i| i.end.is_none())
            .map(|i| i.worker)
            .collect()
    }

    /// Waits until `find` returns `Some` for the events, polling every 20 ms;
    /// panics after `limit` with `what` and the record.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        limit: Duration,
        mut find: impl FnMut(&[Event]) -> Option<T>,
    ) -> T {
        self.poll(what, limit, || find(&self.events())).await
    }

    /// Polls `condition` every 20 ms until it returns `Some`; panics after
    /// `limit` with `what` and the record.
    pub async fn poll<T>(
        &self,
        what: &str,
        limit: Duration,
        mut condition: impl FnMut() -> Option<T>,
    ) -> T {
        let start = Instant::now();
        loop {
            if let Some(found) = condition() {
                return found;
            }
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}\n{}",
                self.dump()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the first `LEADING` line of a cluster just started, for up
    /// to [`FIRST_LEADER`]; returns (worker, epoch, at).
    pub async fn wait_first_leader(&self) -> (usize, u64, Duration) {
        self.wait_leading_after(Duration::ZERO, FIRST_LEADER).await
    }

    /// Waits for a `LEADING` line after `after` (cluster clock); returns
    /// (worker, epoch, at).
    pub async fn wait_leading_after(
        &self,
        after: Duration,
        limit: Duration,
    ) -> (usize, u64, Duration) {
        self.wait_for("a LEADING line", limit, |events| {
            events.iter().find_map(|e| match e.what {
                What::Leading { epoch } if e.at >= after => Some((e.worker, epoch, e.at)),
                _ => None,
            })
        })
        .await
    }

    /// Waits for the given worker's next `STOPPED` line after `after`;
    /// returns (reason, at).
    pub async fn wait_stopped(
        &self,
        worker: usize,
        after: Duration,
        limit: Duration,
    ) -> (String, Duration) {
        self.wait_for(&format!("STOPPED from worker {worker}"), limit, |events| {
            events.iter().find_map(|e| match &e.what {
                What::Stopped { reason, .. } if e.worker == worker && e.at >= after => {
                    Some((reason.clone(), e.at))
                }
                _ => None,
            })
        })
        .await
    }

    /// Waits until the worker's process has exited; returns its exit status.
    pub async fn wait_exit(&self, worker: usize, limit: Duration) -> ExitStatus {
        self.poll(&format!("worker {worker} to exit"), limit, || {
            self.exited(worker)
        })
        .await
    }

    /// The `LEADING` lines recorded in `[from, to)`.
    pub fn leading_between(&self, from: Duration, to: Duration) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| matches!(e.what, What::Leading { .. }) && e.at >= from && e.at < to)
            .collect()
    }

    /// Log lines (standard error) of one worker that contain `needle`, with
    /// their times.
    pub fn log_lines(&self, worker: usize, needle: &str) -> Vec<(Duration, String)> {
        self.events()
            .into_iter()
            .filter(|e| e.worker == worker)
            .filter_map(|e| match e.what {
                What::Log(line) if line.contains(needle) => Some((e.at, line)),
                _ => None,
            })
            .collect()
    }

    /// The whole record, one event per line, for failure messages. Log
    /// lines are included when `BLOB_MUTEX_TEST_LOGS` is set or `all` is asked for.
    pub fn dump(&self) -> String {
        let logs = std::env::var_os("BLOB_MUTEX_TEST_LOGS").is_some();
        self.format(logs)
    }

    /// Panics when a worker panicked, or exited with a code other than 0
    /// (a kill by signal has no code); `record` goes into the message.
    pub fn assert_no_panics_or_failed_exits(&self, record: &str) {
        let panics: usize = (0..self.len())
            .map(|w| self.log_lines(w, "panicked").len())
            .sum();
        assert_eq!(panics, 0, "a worker panicked\n{}", self.dump_all());
        let failed: Vec<_> = self
            .events()
            .into_iter()
            .filter(|e| matches!(e.what, What::Exited { code: Some(code) } if code != 0))
            .collect();
        assert!(failed.is_empty(), "{failed:?}\n{record}");
    }

    /// The record with every log line.
    pub fn dump_all(&self) -> String {
        self.format(true)
    }

    fn format(&self, logs: bool) -> String {
        let mut out = String::from("--- worker record ---\n");
        for e in self.events() {
            if matches!(e.what, What::Log(_)) && !logs {
                continue;
            }
            let name = self.procs.get(e.worker).map_or("?", |p| p.name.as_str());
            let _ = writeln!(out, "{:>9.3}s {name:<10} {:?}", e.at.as_secs_f64(), e.what);
        }
        out
    }

    /// SIGKILLs every worker still running.
    pub fn kill_all(&self) {
        for i in 0..self.procs.len() {
            let mut child = lock(&self.procs[i].child);
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.dump_all());
        }
        self.kill_all();
    }
}

fn record(events: &Record, start: Instant, worker: usize, what: What) {
    let at = start.elapsed();
    events.add(Event { at, worker, what });
}

/// Adds `event` in time order. Stamps are taken just before the lock, so an
/// event belongs at or near the end: finding its place costs a binary
/// search, not a sort of the whole record (which, once the record of a long
/// run holds hundreds of thousands of lines, made the readers fall seconds
/// behind their pipes, and stamp lines that late).
fn insert(events: &mut Vec<Event>, event: Event) {
    let at = events.partition_point(|e| e.at <= event.at);
    events.insert(at, event);
}

/// Parses one line of a worker's standard output.
pub fn parse_line(line: &str) -> Option<What> {
    let mut words = line.split_whitespace();
    let kind = words.next()?;
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let epoch = || field("epoch").and_then(|e| e.parse().ok());
    let took = || Some(Duration::from_millis(field("took_ms")?.parse().ok()?));
    let tick = || field("tick")?.parse().ok();
    match kind {
        "LEADING" => Some(What::Leading { epoch: epoch()? }),
        "STOPPED" if field("tasks").as_deref() == Some("stuck") => {
            Some(What::Stuck { epoch: epoch()? })
        }
        "STOPPED" => Some(What::Stopped {
            epoch: epoch()?,
            reason: field("reason").unwrap_or_default(),
        }),
        "WORK" => Some(What::Work {
            epoch: epoch()?,
            partition: field("partition"),
        }),
        "OWNING" => Some(What::Owning {
            partition: field("partition")?,
            epoch: epoch()?,
        }),
        "RELEASED" if field("tasks").as_deref() == Some("stuck") => Some(What::ReleasedStuck {
            partition: field("partition")?,
            epoch: epoch()?,
        }),
        "RELEASED" => Some(What::Released {
            partition: field("partition")?,
            epoch: epoch()?,
            reason: field("reason").unwrap_or_default(),
        }),
        "EXITED" => Some(What::ExitedLine),
        "STATE-WRITTEN" => Some(What::StateWritten {
            epoch: epoch()?,
            tick: tick()?,
            took: took()?,
        }),
        "STATE-READ" => Some(What::StateRead {
            epoch: epoch()?,
            last: field("last")?,
        }),
        "FENCED" => Some(What::Fenced {
            lease: field("lease")?,
            epoch: epoch()?,
            accepted: field("accepted")? == "yes",
            took: took()?,
        }),
        "STATE-REFUSED" => Some(What::StateRefused {
            epoch: epoch()?,
            tick: tick()?,
            took: took()?,
        }),
        _ => None,
    }
}
