//! What the endpoint answers: `/livez` and `/readyz` from the library's
//! [`Health`] of the mutex, `/leader` from its watch of who leads,
//! `/metrics` from the recorder.

use blob_mutex::health::{Health, Verdict};
use blob_mutex::term::Leader;
use serde::Serialize;
use tokio::sync::watch;

use super::http::Reply;
use crate::recorder::Figures;

/// What every answer reads from.
pub(super) struct Probes {
    figures: Figures,
    health: Health,
    /// Who leads, as the mutex last saw it. Holding it is what makes a
    /// follower inspect the lease (once per renew interval).
    leader: watch::Receiver<Option<Leader>>,
}

/// The body of `/leader`: every field `null` while no leader is known.
#[derive(Serialize)]
struct LeaderJson {
    holder: Option<String>,
    epoch: Option<u64>,
    /// RFC 3339, by the leader's clock when its term began.
    since: Option<String>,
    advertised: Option<String>,
    /// Whether this instance leads now and is fit to: `/readyz?leader`.
    this_instance_leads: bool,
}

impl Probes {
    pub(super) fn new(
        figures: Figures,
        health: Health,
        leader: watch::Receiver<Option<Leader>>,
    ) -> Probes {
        Probes {
            figures,
            health,
            leader,
        }
    }

    /// The `/leader` answer: 200 with the JSON object, whoever leads.
    fn leader(&self) -> Reply {
        let seen = self.leader.borrow().clone();
        let body = LeaderJson {
            holder: seen.as_ref().map(|l| l.holder.clone()),
            epoch: seen.as_ref().map(|l| l.epoch),
            since: seen
                .as_ref()
                .and_then(|l| l.since)
                .and_then(|t| jiff::Timestamp::try_from(t).ok())
                .map(|t| t.to_string()),
            advertised: seen.and_then(|l| l.advertised),
            this_instance_leads: self.health.ready_to_lead().passes(),
        };
        let mut body = serde_json::to_string(&body).expect("plain fields serialize");
        body.push('\n');
        Reply {
            status: "200 OK",
            content_type: "application/json",
            allow: false,
            body,
        }
    }

    /// The answer to a request whose head is `head`.
    pub(super) fn answer(&self, head: &str) -> Vec<u8> {
        let mut line = head.lines().next().unwrap_or("").split_whitespace();
        let (Some(method), Some(target)) = (line.next(), line.next()) else {
            return Reply::text("400 Bad Request", "bad request").render(false);
        };
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if !matches!(
            path,
            "/metrics" | "/livez" | "/healthz" | "/readyz" | "/leader"
        ) {
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
            "/leader" => self.leader(),
            "/readyz" => {
                let leader_only = query
                    .split('&')
                    .any(|pair| pair.split('=').next() == Some("leader"));
                verdict(&if leader_only {
                    self.health.ready_to_lead()
                } else {
                    self.health.ready()
                })
            }
            // `/livez`, and `/healthz`, its alias.
            _ => verdict(&self.health.live()),
        };
        reply.render(method == "HEAD")
    }
}

/// 200 with the verdict's line, or 503 with its reason.
fn verdict(verdict: &Verdict) -> Reply {
    let line = verdict.reason().to_owned();
    Reply::verdict(if verdict.passes() {
        Ok(line)
    } else {
        Err(line)
    })
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use blob_mutex::{
        testing::MemoryLeaseStore, BlobDistributedMutex, CancellationToken, MutexOptions,
    };
    use tokio::time::advance;

    use super::*;

    /// Probes of a mutex on `store` whose campaign runs.
    fn probes(store: &MemoryLeaseStore) -> (Probes, CancellationToken) {
        probes_of(store, "a", None)
    }

    /// Probes of a mutex named `holder`, advertising `advertised`, on
    /// `store`, whose campaign runs.
    fn probes_of(
        store: &MemoryLeaseStore,
        holder: &str,
        advertised: Option<&str>,
    ) -> (Probes, CancellationToken) {
        let mut options = MutexOptions::default()
            .with_jitter_seed(7)
            .with_holder(holder.to_owned());
        if let Some(value) = advertised {
            options = options.with_advertised(value.to_owned());
        }
        let mutex = BlobDistributedMutex::with_store(store.clone(), options, |ctx| async move {
            ctx.token().cancelled().await;
            Ok::<(), Infallible>(())
        })
        .unwrap();
        let probes = Probes::new(Figures::default(), mutex.health(), mutex.leader());
        let token = CancellationToken::new();
        let stop = token.clone();
        tokio::spawn(async move { mutex.run_task_when_mutex_acquired(stop).await });
        (probes, token)
    }

    fn status(reply: &[u8]) -> String {
        let reply = String::from_utf8_lossy(reply);
        reply.lines().next().unwrap_or("").to_owned()
    }

    fn body(reply: &[u8]) -> String {
        let reply = String::from_utf8_lossy(reply);
        reply.split("\r\n\r\n").nth(1).unwrap_or("").to_owned()
    }

    /// Advances time in steps of 100 ms until `path` answers `wanted`.
    async fn until(probes: &Probes, path: &str, wanted: &str) {
        let request = format!("GET {path} HTTP/1.1\r\n\r\n");
        for _ in 0..600 {
            let reply = probes.answer(&request);
            if status(&reply) == wanted {
                return;
            }
            advance(Duration::from_millis(100)).await;
            tokio::task::yield_now().await;
        }
        panic!("{path} did not answer {wanted} within 60 s");
    }

    #[tokio::test(start_paused = true)]
    async fn the_probes_answer_the_mutexs_health_with_its_reasons() {
        let store = MemoryLeaseStore::new("c/lock");
        let (probes, token) = probes(&store);
        until(&probes, "/readyz?leader", "HTTP/1.1 200 OK").await;
        let reply = probes.answer("GET /readyz HTTP/1.1\r\n\r\n");
        assert_eq!(body(&reply), "ready: leader of term 1\n");
        store.set_unavailable(true);
        until(&probes, "/readyz", "HTTP/1.1 503 Service Unavailable").await;
        let reply = probes.answer("GET /readyz HTTP/1.1\r\n\r\n");
        assert!(
            body(&reply).starts_with("storage has not answered for "),
            "{}",
            body(&reply)
        );
        // Storage down is never a reason to restart.
        let reply = probes.answer("GET /healthz HTTP/1.1\r\n\r\n");
        assert_eq!(body(&reply), "ok\n");
        token.cancel();
    }

    fn json(reply: &[u8]) -> serde_json::Value {
        serde_json::from_str(&body(reply)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn leader_names_who_leads_on_the_leader_and_on_a_follower_as_json() {
        let store = MemoryLeaseStore::new("c/lock");
        let (leader, stop_leader) = probes_of(&store, "leader-1", Some("10.0.0.5:8080"));
        until(&leader, "/readyz?leader", "HTTP/1.1 200 OK").await;
        let (follower, stop_follower) = probes_of(&store, "follower-1", None);
        let request = "GET /leader HTTP/1.1\r\n\r\n";
        let reply = leader.answer(request);
        assert!(
            String::from_utf8_lossy(&reply).contains("content-type: application/json\r\n"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
        let seen = json(&reply);
        assert_eq!(seen["holder"], "leader-1", "{seen}");
        assert_eq!(seen["epoch"], 1, "{seen}");
        assert_eq!(seen["advertised"], "10.0.0.5:8080", "{seen}");
        assert_eq!(seen["this_instance_leads"], true, "{seen}");
        let since = seen["since"].as_str().unwrap().to_owned();
        // The follower learns it from its polls: within a renew interval
        // and an acquire retry.
        for _ in 0..100 {
            if json(&follower.answer(request))["holder"] == "leader-1" {
                break;
            }
            advance(Duration::from_millis(100)).await;
            tokio::task::yield_now().await;
        }
        let seen = json(&follower.answer(request));
        assert_eq!(seen["holder"], "leader-1", "{seen}");
        assert_eq!(seen["epoch"], 1, "{seen}");
        // The stamp's time (the leader's own is taken just before it).
        let stamped: jiff::Timestamp = seen["since"].as_str().unwrap().parse().unwrap();
        let own: jiff::Timestamp = since.parse().unwrap();
        assert!(
            stamped.duration_since(own).unsigned_abs() < Duration::from_secs(1),
            "{seen}"
        );
        assert_eq!(seen["this_instance_leads"], false, "{seen}");
        // The leader gone, the follower leads and names itself.
        stop_leader.cancel();
        until(&follower, "/readyz?leader", "HTTP/1.1 200 OK").await;
        let seen = json(&follower.answer(request));
        assert_eq!(seen["holder"], "follower-1", "{seen}");
        assert_eq!(seen["epoch"], 2, "{seen}");
        assert_eq!(seen["advertised"], serde_json::Value::Null, "{seen}");
        assert_eq!(seen["this_instance_leads"], true, "{seen}");
        stop_follower.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn leader_answers_nulls_while_nobody_is_known_to_lead() {
        let store = MemoryLeaseStore::new("c/lock");
        store.set_unavailable(true);
        let (probes, token) = probes(&store);
        let seen = json(&probes.answer("GET /leader HTTP/1.1\r\n\r\n"));
        assert_eq!(
            seen,
            serde_json::json!({
                "holder": null, "epoch": null, "since": null, "advertised": null,
                "this_instance_leads": false
            })
        );
        token.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn only_get_and_head_are_answered_and_head_without_a_body() {
        let (probes, token) = probes(&MemoryLeaseStore::new("c/lock"));
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
        token.cancel();
    }
}
