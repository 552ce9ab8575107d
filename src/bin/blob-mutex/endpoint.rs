//! `blob-mutex run --metrics-addr ADDR`: the crate's metrics in the
//! Prometheus text format on `/metrics`, and two probes for an orchestrator:
//! `/livez` (liveness; `/healthz` is its alias) and `/readyz` (readiness).
//! Nothing is served unless the flag is given, and only on the address it
//! names.
//!
//! # Liveness: `/livez` and `/healthz`
//!
//! A failing liveness probe gets the process restarted, so `/livez` answers
//! 503 (with the reason) only where a restart helps: when this process can
//! no longer keep its promise. It answers `200 ok` otherwise, and 503 when
//!
//! - it leads past its term's local deadline and the term has not stopped.
//!   The deadline is the instant by which the command must be stopped, before
//!   storage could let the lease expire; the leader task publishes it
//!   ([`TermDeadline`]), and the term counts as stopped once the library has
//!   reported its end (the command is gone by then). A leader that cannot
//!   renew stops its command before the deadline and stays live;
//! - a term's task could be neither stopped nor aborted
//!   ([`TaskStop::Stuck`]);
//! - the election has made no progress for [`quiet_limit`]: no acquire
//!   attempt, renewal (successful or failed), term start or term end was
//!   counted by the library (the recorder notes when a counter last moved).
//!   Every step of the election is bounded, each storage request by the
//!   request timeout and each wait by an option, and a failed attempt is
//!   counted as much as a successful one, so the election keeps moving while
//!   storage is down; a loop that is quiet for longer than its longest
//!   stretch between two counted steps is wedged.
//!
//! It never fails because storage is down, and never on a follower for that
//! reason: every replica would fail at once, all would be restarted
//! together, and the kubelet's back-off would then delay the next election
//! after storage came back. client-go's `HealthzAdaptor` likewise fails only a
//! leader whose renewals are overdue.
//!
//! Two conditions show as no answer rather than 503, which a liveness probe
//! counts as a failure as well:
//!
//! - A command that survives SIGKILL ends `run` at once with exit code 5,
//!   without releasing the lease (it expires on its own) and without
//!   campaigning again (`child::stop_group`). The exit is the signal: it must
//!   come at once (anything `run` still did could release the lease or start
//!   a term beside the command), a supervisor sees it before any probe would,
//!   and a restart is all a probe could have asked for. The library's
//!   [`TaskStop::Stuck`] likewise ends the campaign: its 503 is seen only in
//!   the moment before `run` exits.
//! - A campaign that blocks its thread: `run` works on one thread, so the
//!   endpoint answers nothing and the probe times out.
//!
//! # Readiness: `/readyz`
//!
//! `200 ready: leader of term N` or `200 ready: follower` while storage
//! answers; 503 with the reason when storage has not answered a probe for
//! [`UNREACHABLE_AFTER`] (the endpoint reads the lease blob's properties
//! every [`PROBE_EVERY`]: one request, needing read (r)), or when `/livez`
//! fails. `/readyz?leader` answers 503 on a follower as well, for routing
//! to the leader only.
//!
//! # Under load and bad input
//!
//! - At most [`connection_cap`] connections are served at a time: 64, or a
//!   quarter of the open-files limit when that is lower, because the storage
//!   client needs descriptors of its own to renew. Connections beyond the
//!   cap wait in the listen queue, where they hold no descriptor of this
//!   process.
//! - A connection has [`READ_LIMIT`] to send its request head and the
//!   answer [`WRITE_LIMIT`] to be written; then it is closed.
//! - A failed accept (EMFILE, ENFILE) is retried after a back-off of 10 ms
//!   doubling to 1 s ([`accept_backoff`]), not at once: the endpoint shares
//!   its thread with the campaign.
//! - GET and HEAD (headers only) are answered; any other method gets
//!   `405 Method Not Allowed` with `Allow: GET, HEAD`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result};
use blob_mutex::{Leadership, LeaseStore, MutexOptions, TaskStop};
use nix::sys::resource::{getrlimit, Resource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::recorder::Figures;

/// How often storage is probed.
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// With no probe answered for this long, storage counts as unreachable.
const UNREACHABLE_AFTER: Duration = Duration::from_secs(10);
/// How long a client may take to send its request head.
const READ_LIMIT: Duration = Duration::from_secs(2);
/// How long writing an answer may take.
const WRITE_LIMIT: Duration = Duration::from_secs(2);
/// The longest request head read; the request line is all that is used.
const HEAD_MAX: usize = 4096;
/// The most connections served at a time.
const MAX_CONNECTIONS: usize = 64;
/// The first and the longest wait after a failed accept.
const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The least [`quiet_limit`].
const QUIET_LIMIT_MIN: Duration = Duration::from_secs(60);
/// The library's longest wait between failed acquire attempts, before jitter.
const ACQUIRE_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The bound listener and the installed recorder, before the campaign.
pub(crate) struct Endpoint {
    listener: TcpListener,
    figures: Figures,
}

/// The deadline of the term this process leads, as its leader task sees it
/// (`LeaderContext::watch_deadline`); `run`'s leader task publishes it at
/// the start of each term.
#[derive(Clone, Default)]
pub(crate) struct TermDeadline(Arc<Mutex<Option<Published>>>);

/// A term's epoch and its deadline.
type Published = (u64, watch::Receiver<Instant>);

impl TermDeadline {
    /// The deadline of term `epoch`, which moves with each renewal.
    pub(crate) fn publish(&self, epoch: u64, deadline: watch::Receiver<Instant>) {
        *lock(&self.0) = Some((epoch, deadline));
    }

    /// The current deadline of term `epoch`, if that term published one.
    fn of(&self, epoch: u64) -> Option<Instant> {
        lock(&self.0)
            .as_ref()
            .filter(|(published, _)| *published == epoch)
            .map(|(_, deadline)| *deadline.borrow())
    }
}

/// What the probes watch of the campaign.
pub(crate) struct Campaign {
    /// The mutex's state.
    pub(crate) leadership: watch::Receiver<Leadership>,
    /// The deadline of the term it leads.
    pub(crate) deadline: TermDeadline,
    /// How long the election may go without a counted step (see [`quiet_limit`]).
    pub(crate) quiet_limit: Duration,
}

/// The longest the election may go without a counted step before `/livez`
/// calls it wedged: the lease duration, the stop grace, three request
/// timeouts and twice the longest wait between campaigns (the acquire retry,
/// the failure back-off, or the library's 5 s back-off after a failed
/// acquire; twice, for the jitter), and at least a minute. That is more than
/// the longest healthy stretch between two counted steps, which is a term's
/// end: the last renewal attempt, the stop, a release, a pause and an
/// acquire attempt. 60 s with the defaults.
pub(crate) fn quiet_limit(options: &MutexOptions) -> Duration {
    let longest_wait = options
        .acquire_retry
        .max(options.failure_backoff)
        .max(ACQUIRE_BACKOFF_MAX);
    let stretch = options.lease_duration
        + options.stop_grace
        + options.request_timeout.saturating_mul(3)
        + longest_wait.saturating_mul(2);
    stretch.max(QUIET_LIMIT_MIN)
}

impl Endpoint {
    /// Binds `addr` and installs the Prometheus recorder. Call it before
    /// the mutex is made, so that its figures are recorded from the start.
    ///
    /// # Errors
    ///
    /// When the address cannot be bound or a recorder is already installed.
    pub(crate) async fn bind(addr: SocketAddr) -> Result<Endpoint> {
        let figures = Figures::install()?;
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on --metrics-addr {addr}"))?;
        Ok(Endpoint { listener, figures })
    }

    /// Serves until dropped; probes `store` for `/readyz` and watches the
    /// campaign for `/livez`. Dropping it stops every answer under way.
    pub(crate) async fn serve(
        self,
        store: &impl LeaseStore,
        campaign: Campaign,
        request_timeout: Duration,
    ) {
        let probes = Arc::new(Probes::new(self.figures, campaign));
        let cap = connection_cap(open_files_limit());
        debug!(cap, "serving metrics and probes");
        let answer = |stream| respond(probes.clone(), stream);
        tokio::join!(
            accept(&self.listener, cap, answer),
            probe(store, &probes.storage, request_timeout)
        );
    }
}

/// The most connections served at a time, given the soft limit on open
/// files: [`MAX_CONNECTIONS`], or a quarter of the limit when that is lower
/// (at least one).
fn connection_cap(open_files: Option<u64>) -> usize {
    open_files.map_or(MAX_CONNECTIONS, |limit| {
        usize::try_from(limit / 4)
            .map_or(MAX_CONNECTIONS, |quarter| quarter.clamp(1, MAX_CONNECTIONS))
    })
}

/// The soft limit on open files (`RLIMIT_NOFILE`), unless unlimited.
fn open_files_limit() -> Option<u64> {
    getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
        .filter(|soft| *soft != nix::sys::resource::RLIM_INFINITY)
}

/// The wait after the `failures`-th accept in a row failed: 10 ms,
/// doubling, at most 1 s.
fn accept_backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    ACCEPT_BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(ACCEPT_BACKOFF_MAX)
}

/// Where connections come from: the listener, or a test's stand-in.
trait Incoming {
    type Stream;

    /// The next connection.
    fn next(&self) -> impl Future<Output = io::Result<Self::Stream>>;
}

impl Incoming for TcpListener {
    type Stream = TcpStream;

    async fn next(&self) -> io::Result<TcpStream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// Accepts connections, at most `cap` served at a time, and `answer`s each.
/// Dropping it aborts the answers under way.
async fn accept<I, F, Fut>(incoming: &I, cap: usize, answer: F)
where
    I: Incoming,
    F: Fn(I::Stream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(cap));
    let mut answering = JoinSet::new();
    let mut failures: u32 = 0;
    loop {
        // Without a free slot nothing is accepted: the connection waits in
        // the listen queue and holds no descriptor here.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match incoming.next().await {
            Ok(stream) => {
                failures = 0;
                let answered = answer(stream);
                answering.spawn(async move {
                    answered.await;
                    drop(slot);
                });
            }
            Err(e) => {
                drop(slot);
                failures = failures.saturating_add(1);
                let wait = accept_backoff(failures);
                if failures == 1 {
                    warn!(error = %e, retry_in = ?wait, "the metrics endpoint cannot accept connections; backing off");
                } else {
                    debug!(error = %e, failures, retry_in = ?wait, "accept failed again");
                }
                tokio::time::sleep(wait).await;
            }
        }
        while answering.try_join_next().is_some() {}
    }
}

/// Whether storage answers, for `/readyz`.
struct Storage {
    /// When storage last answered a probe (or when serving started).
    answered: Instant,
    /// Why the last probe failed, while it fails.
    failure: Option<String>,
}

/// Reads the lease blob's properties every [`PROBE_EVERY`].
async fn probe(store: &impl LeaseStore, storage: &Mutex<Storage>, limit: Duration) {
    loop {
        let outcome = tokio::time::timeout(limit, store.inspect()).await;
        {
            let mut storage = lock(storage);
            match outcome {
                Ok(Ok(_)) => {
                    storage.answered = Instant::now();
                    storage.failure = None;
                }
                Ok(Err(e)) => storage.failure = Some(e.to_string()),
                Err(_) => storage.failure = Some(format!("no answer within {limit:?}")),
            }
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// What every answer reads from.
struct Probes {
    figures: Figures,
    campaign: Campaign,
    /// When serving started: the election's progress counts from then.
    started: Instant,
    storage: Mutex<Storage>,
}

/// The campaign at one instant, as the probes judge it.
struct Sample {
    /// The epoch of the term it leads.
    leading: Option<u64>,
    /// Why `/livez` fails, when it does.
    unlive: Option<String>,
}

impl Probes {
    fn new(figures: Figures, campaign: Campaign) -> Probes {
        let started = Instant::now();
        Probes {
            figures,
            campaign,
            started,
            storage: Mutex::new(Storage {
                answered: started,
                failure: None,
            }),
        }
    }

    fn sample(&self) -> Sample {
        let now = Instant::now();
        // Read after `now`: a term that still leads now led at `now` too, so
        // a deadline before `now` was passed while it led.
        let leadership = self.campaign.leadership.borrow().clone();
        let leading = leadership.epoch();
        let late = leading.and_then(|epoch| {
            let deadline = self.campaign.deadline.of(epoch)?;
            (now > deadline).then(|| (epoch, now - deadline))
        });
        let stuck = match &leadership {
            Leadership::Ended(report) if report.tasks == TaskStop::Stuck => Some(report.epoch),
            _ => None,
        };
        let moved = self
            .figures
            .last_moved()
            .map_or(self.started, |moved| moved.max(self.started));
        let quiet = now.saturating_duration_since(moved);
        Sample {
            leading,
            unlive: liveness(late, stuck, quiet, self.campaign.quiet_limit),
        }
    }

    /// The answer to a request whose head is `head`.
    fn answer(&self, head: &str) -> Vec<u8> {
        let mut line = head.lines().next().unwrap_or("").split_whitespace();
        let (Some(method), Some(target)) = (line.next(), line.next()) else {
            return Reply::text("400 Bad Request", "bad request").render(false);
        };
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if !matches!(path, "/metrics" | "/livez" | "/healthz" | "/readyz") {
            return Reply::text("404 Not Found", "not found").render(method == "HEAD");
        }
        if !matches!(method, "GET" | "HEAD") {
            let mut reply = Reply::text("405 Method Not Allowed", "only GET and HEAD");
            reply.allow = true;
            return reply.render(false);
        }
        let reply = match path {
            "/metrics" => Reply {
                status: "200 OK",
                content_type: "text/plain; version=0.0.4",
                allow: false,
                body: self.figures.render(),
            },
            "/readyz" => {
                let leader_only = query
                    .split('&')
                    .any(|pair| pair.split('=').next() == Some("leader"));
                let sample = self.sample();
                let storage = lock(&self.storage);
                Reply::verdict(readiness(
                    sample.unlive,
                    storage.answered.elapsed(),
                    storage.failure.as_deref(),
                    sample.leading,
                    leader_only,
                ))
            }
            // `/livez`, and `/healthz`, its alias.
            _ => Reply::verdict(self.sample().unlive.map_or(Ok("ok".to_owned()), Err)),
        };
        reply.render(method == "HEAD")
    }
}

/// An answer before it is written.
struct Reply {
    status: &'static str,
    content_type: &'static str,
    /// Whether to name the allowed methods.
    allow: bool,
    body: String,
}

impl Reply {
    fn text(status: &'static str, line: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain",
            allow: false,
            body: format!("{line}\n"),
        }
    }

    /// 200 with the line, or 503 with the reason.
    fn verdict(verdict: Result<String, String>) -> Reply {
        match verdict {
            Ok(line) => Reply::text("200 OK", &line),
            Err(reason) => Reply::text("503 Service Unavailable", &reason),
        }
    }

    /// The bytes to send; without the body for HEAD.
    fn render(self, head_only: bool) -> Vec<u8> {
        let allow = if self.allow {
            "allow: GET, HEAD\r\n"
        } else {
            ""
        };
        let mut reply = format!(
            "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n{allow}connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if !head_only {
            reply.push_str(&self.body);
        }
        reply.into_bytes()
    }
}

/// Answers one connection: [`READ_LIMIT`] for the request head,
/// [`WRITE_LIMIT`] for the answer.
async fn respond(probes: Arc<Probes>, mut stream: TcpStream) {
    let Ok(Some(head)) = tokio::time::timeout(READ_LIMIT, read_head(&mut stream)).await else {
        return;
    };
    let reply = probes.answer(&head);
    let written = tokio::time::timeout(WRITE_LIMIT, async {
        stream.write_all(&reply).await?;
        stream.shutdown().await?;
        // Closing with unread bytes (a request body) would reset the
        // connection, and the client could lose the answer: read on until
        // it closes.
        let mut rest = [0u8; 1024];
        while stream.read(&mut rest).await? > 0 {}
        Ok::<_, io::Error>(())
    })
    .await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(error = %e, "could not answer a request to the metrics endpoint"),
        Err(_) => {
            debug!(limit = ?WRITE_LIMIT, "an answer of the metrics endpoint took too long; closed");
        }
    }
}

/// Reads up to the end of the request head (or [`HEAD_MAX`] bytes, or the
/// client's end of the stream); `None` when nothing came.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while head.len() < HEAD_MAX && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..read]);
    }
    (!head.is_empty()).then(|| String::from_utf8_lossy(&head).into_owned())
}

/// The answer of `/livez`: `None` when live, else the reason. `late` is the
/// epoch of the term this process leads and how far past its deadline it
/// is; `stuck`, the epoch of a term whose task could be neither stopped nor
/// aborted; `quiet`, how long since the election's last counted step.
fn liveness(
    late: Option<(u64, Duration)>,
    stuck: Option<u64>,
    quiet: Duration,
    quiet_limit: Duration,
) -> Option<String> {
    if let Some(epoch) = stuck {
        return Some(format!(
            "the task of term {epoch} could be neither stopped nor aborted"
        ));
    }
    if let Some((epoch, by)) = late {
        return Some(format!(
            "the leader of term {epoch} has not stopped {:.1}s past its deadline",
            by.as_secs_f64()
        ));
    }
    (quiet > quiet_limit).then(|| {
        format!(
            "the election has made no progress for {}s (no acquire attempt, renewal or term \
             counted; the bound is {}s)",
            quiet.as_secs(),
            quiet_limit.as_secs()
        )
    })
}

/// The answer of `/readyz`: the line for 200, or the reason for 503.
/// `unlive` is why `/livez` fails; `silent`, how long storage has not
/// answered a probe, and `failure`, why the last probe failed; `leading`,
/// the epoch of the term this process leads; `leader_only`, whether a
/// follower is not ready (`?leader`).
fn readiness(
    unlive: Option<String>,
    silent: Duration,
    failure: Option<&str>,
    leading: Option<u64>,
    leader_only: bool,
) -> Result<String, String> {
    if let Some(reason) = unlive {
        return Err(reason);
    }
    if silent > UNREACHABLE_AFTER {
        return Err(format!(
            "storage has not answered for {}s: {}",
            silent.as_secs(),
            failure.unwrap_or("no answer yet")
        ));
    }
    match (leading, leader_only) {
        (Some(epoch), _) => Ok(format!("ready: leader of term {epoch}")),
        (None, false) => Ok("ready: follower".to_owned()),
        (None, true) => Err("not the leader".to_owned()),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::task::JoinHandle;
    use tokio::time::advance;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn live_while_leading_in_time_or_following_whatever_storage_does() {
        assert_eq!(liveness(None, None, Duration::ZERO, MINUTE), None);
        assert_eq!(liveness(None, None, MINUTE, MINUTE), None);
    }

    #[test]
    fn a_leader_past_its_deadline_is_not_live() {
        let reason = liveness(Some((7, Duration::from_millis(1500))), None, SECOND, MINUTE);
        assert_eq!(
            reason.as_deref(),
            Some("the leader of term 7 has not stopped 1.5s past its deadline")
        );
    }

    #[test]
    fn a_stuck_task_is_not_live() {
        let reason = liveness(None, Some(7), Duration::ZERO, MINUTE);
        assert_eq!(
            reason.as_deref(),
            Some("the task of term 7 could be neither stopped nor aborted")
        );
    }

    #[test]
    fn an_election_quiet_past_its_bound_is_not_live() {
        let reason = liveness(None, None, MINUTE + SECOND, MINUTE);
        assert_eq!(
            reason.as_deref(),
            Some(
                "the election has made no progress for 61s (no acquire attempt, renewal or term \
                 counted; the bound is 60s)"
            )
        );
    }

    #[test]
    fn ready_while_storage_answers_with_the_role() {
        let ready = |leading, leader_only| readiness(None, SECOND, None, leading, leader_only);
        assert_eq!(
            ready(Some(7), false),
            Ok("ready: leader of term 7".to_owned())
        );
        assert_eq!(
            ready(Some(7), true),
            Ok("ready: leader of term 7".to_owned())
        );
        assert_eq!(ready(None, false), Ok("ready: follower".to_owned()));
        assert_eq!(ready(None, true), Err("not the leader".to_owned()));
        let bound = readiness(None, UNREACHABLE_AFTER, Some("timed out"), None, false);
        assert_eq!(bound, Ok("ready: follower".to_owned()));
    }

    #[test]
    fn not_ready_when_storage_is_silent_past_the_bound_or_when_not_live() {
        let silent = Duration::from_secs(11);
        assert_eq!(
            readiness(None, silent, Some("connection refused"), Some(7), false),
            Err("storage has not answered for 11s: connection refused".to_owned())
        );
        assert_eq!(
            readiness(None, Duration::from_secs(12), None, None, false),
            Err("storage has not answered for 12s: no answer yet".to_owned())
        );
        assert_eq!(
            readiness(Some("wedged".to_owned()), SECOND, None, None, false),
            Err("wedged".to_owned())
        );
    }

    #[test]
    fn the_quiet_limit_covers_a_terms_end_and_is_a_minute_at_least() {
        assert_eq!(quiet_limit(&MutexOptions::default()), MINUTE);
        let slow = MutexOptions::default()
            .with_lease_duration(MINUTE)
            .with_acquire_retry(Duration::from_secs(10));
        // 60 + 3 + 3 × 3 + 2 × 10
        assert_eq!(quiet_limit(&slow), Duration::from_secs(92));
    }

    #[test]
    fn the_connection_cap_leaves_most_descriptors_to_storage() {
        assert_eq!(connection_cap(None), 64);
        assert_eq!(connection_cap(Some(1_048_576)), 64);
        assert_eq!(connection_cap(Some(1024)), 64);
        assert_eq!(connection_cap(Some(64)), 16);
        assert_eq!(connection_cap(Some(3)), 1);
    }

    #[test]
    fn failed_accepts_back_off_from_10ms_doubling_to_1s() {
        let waits: Vec<u128> = (1..=9).map(|n| accept_backoff(n).as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(accept_backoff(u32::MAX), ACCEPT_BACKOFF_MAX);
    }

    /// Probes of a campaign whose state the test sets.
    fn probes() -> (Probes, watch::Sender<Leadership>, TermDeadline) {
        let (leadership, watched) = watch::channel(Leadership::Follower);
        let deadline = TermDeadline::default();
        let campaign = Campaign {
            leadership: watched,
            deadline: deadline.clone(),
            quiet_limit: MINUTE,
        };
        (
            Probes::new(Figures::default(), campaign),
            leadership,
            deadline,
        )
    }

    /// A step of the election, as the library counts it.
    fn step(probes: &Probes) {
        metrics::with_local_recorder(&probes.figures, || {
            metrics::counter!("blob_mutex_acquire_attempts_total").increment(1);
        });
    }

    fn status(reply: &[u8]) -> String {
        let reply = String::from_utf8_lossy(reply);
        reply.lines().next().unwrap_or("").to_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_turns_unlive_only_past_its_deadline_while_its_term_has_not_stopped() {
        let (probes, leadership, deadline) = probes();
        leadership.send_replace(Leadership::Leader { epoch: 7 });
        let (renewed, watched) = watch::channel(Instant::now() + Duration::from_secs(14));
        deadline.publish(7, watched);
        advance(Duration::from_secs(13)).await;
        assert_eq!(probes.sample().unlive, None);
        // A renewal moves the deadline on.
        renewed.send_replace(Instant::now() + Duration::from_secs(14));
        advance(Duration::from_secs(13)).await;
        assert_eq!(probes.sample().unlive, None);
        advance(Duration::from_secs(2)).await;
        assert_eq!(
            probes.sample().unlive.as_deref(),
            Some("the leader of term 7 has not stopped 1.0s past its deadline")
        );
        // The deadline of another term says nothing of this one.
        let (_other, watched) = watch::channel(Instant::now() + Duration::from_secs(14));
        deadline.publish(8, watched);
        assert_eq!(probes.sample().unlive, None);
        deadline.publish(7, renewed.subscribe());
        assert!(probes.sample().unlive.is_some());
        // Once the term has ended, its command has stopped.
        leadership.send_replace(Leadership::Follower);
        assert_eq!(probes.sample().unlive, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_stays_live_while_storage_is_silent_and_is_not_ready() {
        let (probes, _leadership, _) = probes();
        // Storage silent for 30 s; the election's attempts fail, counted.
        for _ in 0..10 {
            advance(Duration::from_secs(3)).await;
            step(&probes);
            let reply = probes.answer("GET /livez HTTP/1.1\r\n\r\n");
            assert_eq!(status(&reply), "HTTP/1.1 200 OK");
        }
        let reply = probes.answer("GET /readyz HTTP/1.1\r\n\r\n");
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("HTTP/1.1 503 Service Unavailable"),
            "{reply}"
        );
        assert!(
            reply.ends_with("storage has not answered for 30s: no answer yet\n"),
            "{reply}"
        );
        // Storage answers again.
        lock(&probes.storage).answered = Instant::now();
        let reply = probes.answer("GET /readyz HTTP/1.1\r\n\r\n");
        assert!(String::from_utf8_lossy(&reply).ends_with("\r\n\r\nready: follower\n"));
        let reply = probes.answer("GET /readyz?leader HTTP/1.1\r\n\r\n");
        assert_eq!(status(&reply), "HTTP/1.1 503 Service Unavailable");
    }

    #[tokio::test(start_paused = true)]
    async fn an_election_without_a_counted_step_for_the_bound_is_wedged() {
        let (probes, _leadership, _) = probes();
        advance(MINUTE).await;
        assert_eq!(probes.sample().unlive, None);
        advance(SECOND).await;
        assert!(probes.sample().unlive.is_some());
        step(&probes);
        assert_eq!(probes.sample().unlive, None);
        advance(MINUTE + SECOND).await;
        let reply = probes.answer("GET /healthz HTTP/1.1\r\n\r\n");
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("HTTP/1.1 503 Service Unavailable"),
            "{reply}"
        );
        assert!(reply.contains("no progress for 61s"), "{reply}");
    }

    #[tokio::test(start_paused = true)]
    async fn only_get_and_head_are_answered_and_head_without_a_body() {
        let (probes, _leadership, _) = probes();
        let reply = probes.answer("POST /livez HTTP/1.1\r\ncontent-length: 2\r\n\r\nhi");
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{reply}"
        );
        assert!(reply.contains("\r\nallow: GET, HEAD\r\n"), "{reply}");
        let reply = probes.answer("HEAD /livez HTTP/1.1\r\n\r\n");
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(reply.contains("content-length: 3\r\n"), "{reply}");
        assert!(reply.ends_with("\r\n\r\n"), "{reply}");
        let reply = probes.answer("GET /livez HTTP/1.1\r\n\r\n");
        assert!(String::from_utf8_lossy(&reply).ends_with("\r\n\r\nok\n"));
        assert_eq!(
            status(&probes.answer("GET /other HTTP/1.1\r\n\r\n")),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status(&probes.answer("DELETE /other HTTP/1.1\r\n\r\n")),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status(&probes.answer("garbage")),
            "HTTP/1.1 400 Bad Request"
        );
    }

    /// A connection answered by [`respond`]: the client's end, the answer's
    /// task and when it started.
    async fn responding() -> (TcpStream, JoinHandle<()>, Instant) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let (probes, _leadership, _) = probes();
        let answer = tokio::spawn(respond(Arc::new(probes), accepted.unwrap().0));
        (client.unwrap(), answer, Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_sends_nothing_is_cut_at_the_read_limit() {
        let (mut client, answer, start) = responding().await;
        tokio::time::timeout(MINUTE, answer)
            .await
            .expect("the connection was never closed")
            .unwrap();
        let took = start.elapsed();
        assert!(took >= READ_LIMIT && took < READ_LIMIT + SECOND, "{took:?}");
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_keeps_the_connection_open_is_cut_at_the_write_limit() {
        let (mut client, answer, start) = responding().await;
        client
            .write_all(b"GET /livez HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        // Reads the answer and never closes its end.
        let mut answered = Vec::new();
        client.read_to_end(&mut answered).await.unwrap();
        assert!(answered.ends_with(b"\r\n\r\nok\n"), "{answered:?}");
        tokio::time::timeout(MINUTE, answer)
            .await
            .expect("the connection was never closed")
            .unwrap();
        let took = start.elapsed();
        assert!(
            took >= WRITE_LIMIT && took < WRITE_LIMIT + SECOND,
            "{took:?}"
        );
        drop(client);
    }

    /// Connections that never come: every accept fails as when the process
    /// is out of descriptors.
    struct OutOfFiles(AtomicUsize);

    impl Incoming for OutOfFiles {
        type Stream = TcpStream;

        async fn next(&self) -> io::Result<TcpStream> {
            let calls = self.0.fetch_add(1, Ordering::SeqCst);
            assert!(calls < 1000, "accept retried in a hot loop");
            Err(io::Error::from_raw_os_error(nix::libc::EMFILE))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn failed_accepts_are_retried_after_a_back_off_not_at_once() {
        let incoming = OutOfFiles(AtomicUsize::new(0));
        let answer = |_: TcpStream| async {};
        let serving = tokio::time::timeout(Duration::from_secs(10), accept(&incoming, 4, answer));
        assert!(serving.await.is_err());
        // 10 ms doubling to 1 s: 8 attempts in the first 1.27 s, then one a second.
        let calls = incoming.0.load(Ordering::SeqCst);
        assert!((15..=18).contains(&calls), "{calls} attempts in 10 s");
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_until_one_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answered = Arc::new(AtomicUsize::new(0));
        let count = answered.clone();
        // Answers after one read: at once for a request, at the client's
        // end for an idle connection.
        let answer = move |mut stream: TcpStream| {
            let count = count.clone();
            async move {
                let mut request = [0u8; 16];
                if matches!(stream.read(&mut request).await, Ok(n) if n > 0) {
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.write_all(b"answer").await;
                }
            }
        };
        let serving = tokio::spawn(async move { accept(&listener, 2, answer).await });
        let idle = [
            TcpStream::connect(addr).await.unwrap(),
            TcpStream::connect(addr).await.unwrap(),
        ];
        let mut third = TcpStream::connect(addr).await.unwrap();
        third.write_all(b"GET").await.unwrap();
        let mut reply = [0u8; 6];
        let waited =
            tokio::time::timeout(Duration::from_millis(300), third.read_exact(&mut reply)).await;
        assert!(waited.is_err(), "answered beyond the cap");
        assert_eq!(answered.load(Ordering::SeqCst), 0);
        drop(idle);
        tokio::time::timeout(Duration::from_secs(5), third.read_exact(&mut reply))
            .await
            .expect("answered once a slot was free")
            .unwrap();
        assert_eq!(&reply, b"answer");
        serving.abort();
    }
}
