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
//!   ([`TaskStop::Stuck`](blob_mutex::TaskStop::Stuck));
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
//!   [`TaskStop::Stuck`](blob_mutex::TaskStop::Stuck) likewise ends the campaign: its 503 is seen only in
//!   the moment before `run` exits.
//! - A campaign that blocks its thread: `run` works on one thread, so the
//!   endpoint answers nothing and the probe times out.
//!
//! # Readiness: `/readyz`
//!
//! `200 ready: leader of term N` or `200 ready: follower` while storage
//! answers; 503 with the reason when storage has not answered a probe for
//! [`UNREACHABLE_AFTER`](probes::UNREACHABLE_AFTER) (the endpoint reads the lease blob's properties
//! every [`PROBE_EVERY`](probes::PROBE_EVERY): one request, needing read (r)), or when `/livez`
//! fails. `/readyz?leader` answers 503 on a follower as well, for routing
//! to the leader only.
//!
//! # Under load and bad input
//!
//! - Every connection is accepted, and at most [`connection_cap`](accept::connection_cap)
//!   are kept: 64, or a quarter of the open-files limit when that is lower,
//!   because the storage client needs descriptors of its own to renew. At
//!   the cap the connection that has done least for the longest is closed
//!   for the new one: the oldest still sending its request, else the oldest
//!   answered and waiting for the client to close (see [`accept::accept`]). Idle
//!   connections cannot fill the slots and leave a probe waiting behind
//!   them in the listen queue. A connection still sending its request is
//!   never closed before it has had its [`FAIR_CHANCE`](accept::FAIR_CHANCE)
//!   (50 ms from its accept) to send it: a probe that comes inside a burst
//!   of idle connects is read and answered, and the connects behind it wait
//!   their turn in the listen queue (about 50 ms for each 64 of them).
//! - A connection has [`HEAD_READ_LIMIT`](http::HEAD_READ_LIMIT) (500 ms,
//!   well under a probe's usual 1 s) from its accept to send its request
//!   head, and the answer [`WRITE_LIMIT`](http::WRITE_LIMIT) to be written
//!   and the client to close; then it is closed. Request lines may end in
//!   CRLF or a bare LF.
//! - A failed accept (EMFILE, ENFILE) is retried after a back-off of 10 ms
//!   doubling to 1 s, not at once: the endpoint shares its thread with the
//!   campaign.
//! - GET and HEAD (headers only) are answered; any other method gets
//!   `405 Method Not Allowed` with `Allow: GET, HEAD`.

mod accept;
mod http;
mod probes;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result};
use blob_mutex::{Leadership, LeaseStore, MutexOptions};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use self::accept::{accept, connection_cap, open_files_limit};
use self::http::respond;
use self::probes::{probe, Probes};
use crate::recorder::Figures;

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
        let figures = self.figures.clone();
        let probes = Arc::new(Probes::new(self.figures, campaign));
        let cap = connection_cap(open_files_limit());
        debug!(cap, "serving metrics and probes");
        let answer = |stream, progress| {
            let probes = probes.clone();
            respond(stream, progress, move |head| probes.answer(head))
        };
        tokio::join!(
            accept(&self.listener, cap, answer),
            probe(store, &probes.storage, request_timeout),
            upkeep(&figures)
        );
    }
}

/// Folds the histograms' samples into their buckets every
/// [`UPKEEP_INTERVAL`], so that a process nobody scrapes keeps no growing
/// list of them.
async fn upkeep(figures: &Figures) {
    let mut every = tokio::time::interval(UPKEEP_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        figures.upkeep();
    }
}

/// How often [`upkeep`] runs.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn the_quiet_limit_covers_a_terms_end_and_is_a_minute_at_least() {
        assert_eq!(quiet_limit(&MutexOptions::default()), MINUTE);
        let slow = MutexOptions::default()
            .with_lease_duration(MINUTE)
            .with_acquire_retry(Duration::from_secs(10));
        // 60 + 3 + 3 × 3 + 2 × 10
        assert_eq!(quiet_limit(&slow), Duration::from_secs(92));
    }
}
