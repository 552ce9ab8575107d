//! `blob-mutex run --metrics-addr ADDR`: the crate's metrics in the
//! Prometheus text format on `/metrics`, and two probes for an orchestrator:
//! `/livez` (liveness; `/healthz` is its alias) and `/readyz` (readiness).
//! Nothing is served unless the flag is given, and only on the address it
//! names.
//!
//! # Liveness and readiness: the library's rules
//!
//! `/livez` (and `/healthz`) answers the mutex's
//! [`Health::live`](blob_mutex::health::Health::live), and `/readyz` its
//! [`Health::ready`](blob_mutex::health::Health::ready) (`/readyz?leader`:
//! [`ready_to_lead`](blob_mutex::health::Health::ready_to_lead), 503 on a
//! follower as well, for routing to the leader only): 200 with the line,
//! or 503 with the reason. The rules, and why, are on those methods: a
//! failing liveness probe gets the process restarted, so `/livez` fails
//! only where a restart helps (a leader past its term's deadline whose term
//! has not stopped, a term's task that could be neither stopped nor
//! aborted, a campaign with no counted step for a long bound), never
//! because storage is down; readiness fails while storage has failed every
//! request of the campaign for 10 s, and before it first answered. The
//! answers cost no request: the library reads what its campaign learns.
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
//!   [`TaskStop::Stuck`](blob_mutex::term::TaskStop::Stuck) likewise ends the campaign: its 503 is seen only in
//!   the moment before `run` exits.
//! - A campaign that blocks its thread: `run` works on one thread, so the
//!   endpoint answers nothing and the probe times out.
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
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use blob_mutex::health::Health;
use blob_mutex::term::Leader;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::debug;

use self::accept::{accept, connection_cap, open_files_limit};
use self::http::respond;
use self::probes::Probes;
use crate::recorder::Figures;

/// The bound listener and the installed recorder, before the campaign.
pub(crate) struct Endpoint {
    listener: TcpListener,
    figures: Figures,
}

impl Endpoint {
    /// Binds `addr` and installs the Prometheus recorder. Call it before
    /// the mutex is made, so that its figures are recorded from the start.
    ///
    /// # Errors
    ///
    /// When the address cannot be bound or a recorder is already installed.
    pub(crate) async fn bind(
        addr: SocketAddr,
        backend: blob_mutex::azure::Backend,
    ) -> Result<Endpoint> {
        let figures = Figures::install()?;
        metrics::describe_gauge!(
            "blob_mutex_build_info",
            "1, with the command's version and the storage backend it runs on as labels"
        );
        metrics::gauge!(
            "blob_mutex_build_info",
            "version" => env!("CARGO_PKG_VERSION"),
            "backend" => backend.to_string()
        )
        .set(1.0);
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on --metrics-addr {addr}"))?;
        Ok(Endpoint { listener, figures })
    }

    /// Serves until dropped, the probes from `health` and `/leader` from
    /// `leader`. Dropping it stops every answer under way.
    pub(crate) async fn serve(self, health: Health, leader: watch::Receiver<Option<Leader>>) {
        let figures = self.figures.clone();
        let probes = Arc::new(Probes::new(self.figures, health, leader));
        let cap = connection_cap(open_files_limit());
        debug!(cap, "serving metrics and probes");
        let answer = |stream, progress| {
            let probes = probes.clone();
            respond(stream, progress, move |head| probes.answer(head))
        };
        tokio::join!(accept(&self.listener, cap, answer), upkeep(&figures));
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
