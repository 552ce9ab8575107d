//! What the probes answer: `/livez` from the campaign's state, `/readyz`
//! from it and from storage's last answer, `/metrics` from the recorder.

use std::sync::Mutex;
use std::time::Duration;

use blob_mutex::{Leadership, LeaseStore, TaskStop};
use tokio::time::Instant;

use super::http::Reply;
use super::{lock, Campaign};
use crate::recorder::Figures;

/// How often storage is probed.
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(2);
/// With no probe answered for this long, storage counts as unreachable.
pub(super) const UNREACHABLE_AFTER: Duration = Duration::from_secs(10);

/// Whether storage answers, for `/readyz`.
pub(super) struct Storage {
    /// When storage last answered a probe; `None` until it first has.
    answered: Option<Instant>,
    /// Why the last probe failed, while it fails.
    failure: Option<String>,
}

/// Reads the lease blob's properties every [`PROBE_EVERY`].
pub(super) async fn probe(store: &impl LeaseStore, storage: &Mutex<Storage>, limit: Duration) {
    loop {
        let outcome = tokio::time::timeout(limit, store.inspect()).await;
        {
            let mut storage = lock(storage);
            match outcome {
                Ok(Ok(_)) => {
                    storage.answered = Some(Instant::now());
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
pub(super) struct Probes {
    figures: Figures,
    campaign: Campaign,
    /// When serving started: the election's progress counts from then.
    started: Instant,
    pub(super) storage: Mutex<Storage>,
}

/// The campaign at one instant, as the probes judge it.
struct Sample {
    /// The epoch of the term it leads.
    leading: Option<u64>,
    /// Why `/livez` fails, when it does.
    unlive: Option<String>,
}

impl Probes {
    pub(super) fn new(figures: Figures, campaign: Campaign) -> Probes {
        let started = Instant::now();
        Probes {
            figures,
            campaign,
            started,
            storage: Mutex::new(Storage {
                answered: None,
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
    pub(super) fn answer(&self, head: &str) -> Vec<u8> {
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
                    storage.answered.map(|at| at.elapsed()),
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
/// answered a probe (`None` before it first has: a process that never
/// reached storage is not ready), and `failure`, why the last probe
/// failed; `leading`,
/// the epoch of the term this process leads; `leader_only`, whether a
/// follower is not ready (`?leader`).
fn readiness(
    unlive: Option<String>,
    silent: Option<Duration>,
    failure: Option<&str>,
    leading: Option<u64>,
    leader_only: bool,
) -> Result<String, String> {
    if let Some(reason) = unlive {
        return Err(reason);
    }
    let Some(silent) = silent else {
        return Err(format!(
            "storage has not answered yet: {}",
            failure.unwrap_or("no answer yet")
        ));
    };
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

#[cfg(test)]
mod tests {
    use tokio::sync::watch;
    use tokio::time::advance;

    use super::*;
    use crate::endpoint::TermDeadline;

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
        let ready =
            |leading, leader_only| readiness(None, Some(SECOND), None, leading, leader_only);
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
        let bound = readiness(
            None,
            Some(UNREACHABLE_AFTER),
            Some("timed out"),
            None,
            false,
        );
        assert_eq!(bound, Ok("ready: follower".to_owned()));
    }

    #[test]
    fn not_ready_when_storage_is_silent_past_the_bound_or_when_not_live() {
        let silent = Duration::from_secs(11);
        assert_eq!(
            readiness(
                None,
                Some(silent),
                Some("connection refused"),
                Some(7),
                false
            ),
            Err("storage has not answered for 11s: connection refused".to_owned())
        );
        assert_eq!(
            readiness(None, Some(Duration::from_secs(12)), None, None, false),
            Err("storage has not answered for 12s: no answer yet".to_owned())
        );
        assert_eq!(
            readiness(Some("wedged".to_owned()), Some(SECOND), None, None, false),
            Err("wedged".to_owned())
        );
    }

    #[test]
    fn not_ready_before_storage_first_answers() {
        assert_eq!(
            readiness(None, None, None, None, false),
            Err("storage has not answered yet: no answer yet".to_owned())
        );
        assert_eq!(
            readiness(None, None, Some("connection refused"), None, false),
            Err("storage has not answered yet: connection refused".to_owned())
        );
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
        lock(&probes.storage).answered = Some(Instant::now());
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
        lock(&probes.storage).answered = Some(Instant::now());
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
        let reply = probes.answer("GET /livez HTTP/1.1\nhost: probe\n\n");
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
}
