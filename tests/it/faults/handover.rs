//! Planned handover to a preferred successor, with worker processes on
//! Azurite through the fault proxy: a higher-priority worker leads after
//! exactly one handover, within one leader cycle and one retry; equal
//! priorities never hand over; a candidate killed mid-handover leaves the
//! lease to expire; a rolling upgrade moves leadership once. The proxy's
//! log shows every lease action: no break is ever sent.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::backend::{Backend, BackendExt};
use blob_mutex_testkit::proxy::{Proxy, Request};
use blob_mutex_testkit::workers::{Cluster, Spec, What};

const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(2);
/// The follower retry, 500 ms, with its 20 % jitter.
const RETRY: Duration = Duration::from_millis(600);
/// Room for a loaded 2-core machine: process scheduling and Azurite's
/// answers (three to four requests from the decision to the new leader).
const SLACK: Duration = Duration::from_secs(3);
const TIMING: [&str; 4] = ["--renew-ms", "2000", "--acquire-retry-ms", "500"];

struct Setup {
    backend: Backend,
    proxy: Proxy,
    cluster: Cluster,
    container: String,
    blob: &'static str,
}

impl Setup {
    fn new(blob: &'static str) -> Setup {
        Self::on(blob_mutex_testkit::backend::current(), blob)
    }

    fn on(backend: Backend, blob: &'static str) -> Setup {
        Setup {
            backend,
            proxy: Proxy::start(azurite::shared().port),
            cluster: backend.cluster(),
            container: azurite::unique_container(blob),
            blob,
        }
    }

    /// Starts worker `name` with `priority` and extra options.
    fn start(&mut self, name: &str, priority: i64, extra: &[&str]) -> usize {
        let priority = priority.to_string();
        let mut options: Vec<&str> = TIMING.to_vec();
        options.extend(["--priority", priority.as_str()]);
        options.extend(extra);
        self.cluster.spawn(Spec::worker(
            name,
            &self.backend.connection_string(&self.proxy.endpoint()),
            &self.container,
            self.blob,
            &options,
        ))
    }

    fn requests(&self, wanted: impl Fn(&Request) -> bool) -> Vec<Request> {
        self.proxy.log().into_iter().filter(|r| wanted(r)).collect()
    }

    /// Handover lines (`STOPPED … reason=handover`) recorded so far.
    fn handovers(&self) -> usize {
        self.cluster
            .events()
            .iter()
            .filter(|e| matches!(&e.what, What::Stopped { reason, .. } if reason == "handover"))
            .count()
    }

    /// No break was ever sent, and changes only to the main lease blob.
    fn assert_no_break(&self) {
        let breaks = self.requests(|r| r.is("break"));
        assert!(breaks.is_empty(), "break requests were sent: {breaks:?}");
    }

    fn changes(&self) -> Vec<Request> {
        self.requests(|r| r.is("change"))
    }

    /// When the first candidate record request of a worker's advertising
    /// reached the proxy: an acquire on a `.candidates/` blob.
    fn first_advert_after(&self, after: std::time::Instant) -> Option<std::time::Instant> {
        // The official SDK sends the `/` of a blob name as `%2F`.
        let record = |t: &str| t.contains(".candidates/") || t.contains(".candidates%2F");
        self.requests(|r| r.is("acquire") && record(&r.target) && r.at >= after)
            .first()
            .map(|r| r.at)
    }
}

#[tokio::test]
async fn a_higher_priority_worker_leads_after_exactly_one_handover() {
    one_handover(blob_mutex_testkit::backend::current(), "handover", &[]).await;
}

/// A request timeout well under the 1.5 s a listing of the candidates
/// could once take on the official backend: every call of every backend
/// is bounded by it, and a handover still takes one leader cycle.
#[tokio::test]
async fn a_handover_with_a_short_request_timeout_takes_one_leader_cycle() {
    one_handover(
        blob_mutex_testkit::backend::current(),
        "handover-short",
        &["--request-timeout-ms", "700"],
    )
    .await;
}

async fn one_handover(backend: Backend, blob: &'static str, extra: &[&str]) {
    let mut s = Setup::on(backend, blob);
    let old = s.start("v1", 1, extra);
    let (first, epoch, _) = s.cluster.wait_first_leader().await;
    assert_eq!(first, old);
    let started = std::time::Instant::now();
    let new = s.start("v2", 2, extra);
    let (next, next_epoch, led_at) = s
        .cluster
        .wait_leading_after(s.cluster.now(), Duration::from_secs(30))
        .await;
    assert_eq!(next, new, "{}", s.cluster.dump());
    assert_eq!(next_epoch, epoch + 1);
    let advertised = s
        .first_advert_after(started)
        .expect("the new worker advertised itself");
    let took = led_at - s.cluster.at(advertised);
    // The leader lists the candidates every renew interval; the candidate
    // retries every 500 ms ± 20 %.
    let limit = RENEW + RETRY + SLACK;
    assert!(
        took <= limit,
        "the candidate led {took:?} after it advertised, more than {limit:?}\n{}",
        s.cluster.dump()
    );
    // Some leader cycles more: nothing moves again.
    tokio::time::sleep(RENEW * 4).await;
    let history = s.cluster.history();
    history.assert_safe(&s.cluster.dump());
    assert_eq!(history.transitions(), 1, "{}", s.cluster.dump());
    assert_eq!(s.handovers(), 1, "{}", s.cluster.dump());
    assert_eq!(s.changes().len(), 1, "{:?}", s.changes());
    s.assert_no_break();
    println!(
        "handover ({backend:?}): new leader {:.3}s after it advertised; {}",
        took.as_secs_f64(),
        history.summary()
    );
    s.cluster.kill_all();
}

#[tokio::test]
async fn equal_priorities_never_hand_over() {
    let mut s = Setup::new("equal");
    for name in ["e0", "e1", "e2"] {
        s.start(name, 5, &[]);
    }
    s.cluster.wait_first_leader().await;
    // About 40 listings by the leader, each seeing two live candidates.
    tokio::time::sleep(Duration::from_secs(80)).await;
    let listings = s.requests(|r| r.target.contains("comp=list")).len();
    let history = s.cluster.history();
    history.assert_safe(&s.cluster.dump());
    assert_eq!(history.transitions(), 0, "{}", s.cluster.dump());
    assert_eq!(s.handovers(), 0);
    assert!(s.changes().is_empty(), "{:?}", s.changes());
    assert!(listings >= 25, "the leader listed only {listings} times");
    s.assert_no_break();
    println!("equal priorities: {listings} listings, no handover");
    s.cluster.kill_all();
}

#[tokio::test]
async fn a_candidate_killed_mid_handover_leaves_the_lease_to_expire() {
    let mut s = Setup::new("vanish");
    // The old leader's task ignores cancellation: its term takes its whole
    // grace (3 s) to stop, and the candidate dies meanwhile.
    let old = s.start("old", 1, &["--ignore-cancel", "--grace-ms", "3000"]);
    let (first, _, _) = s.cluster.wait_first_leader().await;
    assert_eq!(first, old);
    let bystander = s.start("bystander", 1, &[]);
    let doomed = s.start("doomed", 9, &[]);
    let decided = s
        .cluster
        .wait_for(
            "the leader decides to hand over",
            Duration::from_secs(30),
            |_| {
                s.cluster
                    .log_lines(old, "handing over")
                    .first()
                    .map(|(at, _)| *at)
            },
        )
        .await;
    s.cluster.kill(doomed);
    let (next, _, led_at) = s
        .cluster
        .wait_leading_after(decided, LEASE + Duration::from_secs(30))
        .await;
    assert_ne!(next, doomed);
    assert!(next == old || next == bystander);
    // The lease went to the dead candidate's id, under which it expires no
    // earlier than the old leader's last renewal of the main blob + D.
    let changes = s.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let last_renewal = s
        .requests(|r| r.is("renew") && !r.target.contains(".candidates/"))
        .iter()
        .filter_map(|r| r.forwarded_at)
        .filter(|at| *at <= changes[0].at)
        .max()
        .expect("the old leader renewed");
    let expiry = s.cluster.at(last_renewal) + LEASE;
    assert!(
        led_at >= expiry,
        "led at {led_at:?}, before the lease could expire at {expiry:?}\n{}",
        s.cluster.dump()
    );
    assert!(
        led_at <= expiry + RETRY + SLACK,
        "led at {led_at:?}, long after the lease expired at {expiry:?}\n{}",
        s.cluster.dump()
    );
    let history = s.cluster.history();
    history.assert_safe(&s.cluster.dump());
    s.assert_no_break();
    println!(
        "candidate killed mid-handover: next leader {:.3}s after the earliest expiry; {}",
        (led_at - expiry).as_secs_f64(),
        history.summary()
    );
    s.cluster.kill_all();
}

#[tokio::test]
async fn a_rolling_upgrade_moves_leadership_once_to_the_new_version() {
    let mut s = Setup::new("rolling");
    let old: Vec<usize> = ["old0", "old1", "old2"]
        .iter()
        .map(|name| s.start(name, 1, &[]))
        .collect();
    s.cluster.wait_first_leader().await;
    let mut new = Vec::new();
    for (i, &retiring) in old.iter().enumerate() {
        // Surge one instance of the new version, wait until it takes part
        // (the first one leads; the others advertise), retire one old one.
        let worker = s.start(&format!("new{i}"), 2, &[]);
        new.push(worker);
        if i == 0 {
            s.cluster
                .wait_for(
                    "the new version to lead",
                    Duration::from_secs(30),
                    |events| {
                        events
                            .iter()
                            .any(|e| e.worker == worker && matches!(e.what, What::Leading { .. }))
                            .then_some(())
                    },
                )
                .await;
        } else {
            s.cluster
                .wait_for(
                    "the new instance to advertise",
                    Duration::from_secs(30),
                    |_| {
                        (!s.cluster
                            .log_lines(worker, "advertising as a candidate")
                            .is_empty())
                        .then_some(())
                    },
                )
                .await;
        }
        let sent = s.cluster.terminate(retiring);
        let status = s.cluster.wait_exit(retiring, Duration::from_secs(15)).await;
        assert!(
            status.success(),
            "{} exited with {status}",
            s.cluster.name(retiring)
        );
        assert!(s.cluster.now() >= sent);
    }
    tokio::time::sleep(RENEW * 3).await;
    let history = s.cluster.history();
    history.assert_safe(&s.cluster.dump());
    assert_eq!(history.transitions(), 1, "{}", s.cluster.dump());
    assert_eq!(s.handovers(), 1, "{}", s.cluster.dump());
    let leaders = s.cluster.leaders();
    assert!(
        leaders.iter().all(|w| old.contains(w) || new.contains(w)),
        "{leaders:?}"
    );
    let last = s
        .cluster
        .events()
        .iter()
        .rev()
        .find(|e| matches!(e.what, What::Leading { .. }))
        .map(|e| e.worker)
        .unwrap();
    assert!(
        new.contains(&last),
        "the last leader is {}",
        s.cluster.name(last)
    );
    s.assert_no_break();
    println!("rolling upgrade: {}", history.summary());
    s.cluster.kill_all();
}
