//! `blob-mutex run --metrics-addr ADDR`: the crate's metrics in the
//! Prometheus text format on `/metrics`, and `/healthz` for liveness probes.
//!
//! `/healthz` answers 200 `ok` while the process campaigns or leads
//! normally, and 503 with the reason when it cannot reach storage (no
//! answer to a probe of the lease blob for [`UNREACHABLE_AFTER`]) or when a
//! term's task could be neither stopped nor aborted (the command itself
//! cannot get there: one that survives SIGKILL ends `run` with exit code 5,
//! and a probe then finds nothing listening, which a liveness check counts
//! as a failure too). The probe reads the
//! blob's properties every [`PROBE_EVERY`]: one request, needing read (r).
//! Nothing is served unless the flag is given, and only on the address it
//! names.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result};
use blob_mutex::{Leadership, LeaseStore, TaskStop};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use crate::recorder::Figures;

/// How often storage is probed.
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// With no probe answered for this long, storage counts as unreachable.
const UNREACHABLE_AFTER: Duration = Duration::from_secs(10);
/// How long a client may take to send its request head.
const READ_LIMIT: Duration = Duration::from_secs(2);

/// The bound listener and the installed recorder, before the campaign.
pub(crate) struct Endpoint {
    listener: TcpListener,
    figures: Figures,
}

/// What `/healthz` answers from.
struct Health {
    /// When storage last answered a probe (or when serving started).
    answered: Instant,
    /// Why the last probe failed, while it fails.
    failure: Option<String>,
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

    /// Serves until dropped; probes `store` for `/healthz` and reads the
    /// campaign's state from `leadership`.
    pub(crate) async fn serve(
        self,
        store: &impl LeaseStore,
        leadership: watch::Receiver<Leadership>,
        request_timeout: Duration,
    ) {
        let health = Arc::new(Mutex::new(Health {
            answered: Instant::now(),
            failure: None,
        }));
        let accept = async {
            loop {
                let Ok((stream, _)) = self.listener.accept().await else {
                    continue;
                };
                let answer = Answer {
                    figures: self.figures.clone(),
                    health: health.clone(),
                    leadership: leadership.clone(),
                };
                tokio::spawn(answer.respond(stream));
            }
        };
        tokio::join!(accept, probe(store, &health, request_timeout));
    }
}

/// Reads the lease blob's properties every [`PROBE_EVERY`].
async fn probe(store: &impl LeaseStore, health: &Mutex<Health>, limit: Duration) {
    loop {
        let outcome = tokio::time::timeout(limit, store.inspect()).await;
        {
            let mut health = health.lock().unwrap_or_else(PoisonError::into_inner);
            match outcome {
                Ok(Ok(_)) => {
                    health.answered = Instant::now();
                    health.failure = None;
                }
                Ok(Err(e)) => health.failure = Some(e.to_string()),
                Err(_) => health.failure = Some(format!("no answer within {limit:?}")),
            }
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// One connection's answer.
struct Answer {
    figures: Figures,
    health: Arc<Mutex<Health>>,
    leadership: watch::Receiver<Leadership>,
}

impl Answer {
    async fn respond(self, mut stream: TcpStream) {
        let mut head = [0u8; 1024];
        let Ok(Ok(read)) = tokio::time::timeout(READ_LIMIT, stream.read(&mut head)).await else {
            return;
        };
        let request = String::from_utf8_lossy(&head[..read]);
        let path = request.split_whitespace().nth(1).unwrap_or("");
        let (status, content_type, body) = match path {
            "/metrics" => ("200 OK", "text/plain; version=0.0.4", self.figures.render()),
            "/healthz" => match self.unhealthy() {
                None => ("200 OK", "text/plain", "ok\n".to_owned()),
                Some(reason) => (
                    "503 Service Unavailable",
                    "text/plain",
                    format!("{reason}\n"),
                ),
            },
            _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        if let Err(e) = stream.write_all(reply.as_bytes()).await {
            debug!(error = %e, "could not answer a metrics request");
        }
    }

    /// Why the process is not healthy, if it is not.
    fn unhealthy(&self) -> Option<String> {
        let stuck = match &*self.leadership.borrow() {
            Leadership::Ended(report) if report.tasks == TaskStop::Stuck => Some(report.epoch),
            _ => None,
        };
        let health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        verdict(stuck, health.answered.elapsed(), health.failure.as_deref())
    }
}

/// The answer of `/healthz`: `None` when healthy, else the reason. `stuck`
/// is the epoch of a term whose task could be neither stopped nor aborted;
/// `silent`, how long storage has not answered a probe, and `failure`, why
/// the last probe failed.
fn verdict(stuck: Option<u64>, silent: Duration, failure: Option<&str>) -> Option<String> {
    if let Some(epoch) = stuck {
        return Some(format!(
            "the task of term {epoch} could be neither stopped nor aborted"
        ));
    }
    (silent > UNREACHABLE_AFTER).then(|| {
        format!(
            "storage has not answered for {}s: {}",
            silent.as_secs(),
            failure.unwrap_or("no answer yet")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_while_storage_answered_within_the_bound_and_no_task_is_stuck() {
        assert_eq!(verdict(None, Duration::ZERO, None), None);
        assert_eq!(verdict(None, UNREACHABLE_AFTER, Some("timed out")), None);
    }

    #[test]
    fn unhealthy_once_storage_is_silent_past_the_bound_with_the_last_failure() {
        let reason = verdict(None, Duration::from_secs(11), Some("connection refused"));
        assert_eq!(
            reason.as_deref(),
            Some("storage has not answered for 11s: connection refused")
        );
        let reason = verdict(None, Duration::from_secs(12), None);
        assert_eq!(
            reason.as_deref(),
            Some("storage has not answered for 12s: no answer yet")
        );
    }

    #[test]
    fn a_stuck_task_is_unhealthy_even_while_storage_answers() {
        let reason = verdict(Some(7), Duration::ZERO, None);
        assert_eq!(
            reason.as_deref(),
            Some("the task of term 7 could be neither stopped nor aborted")
        );
    }
}
