//! Sections `crash`, `crash-azure` and `handover`: kill (SIGKILL) or stop
//! (SIGTERM) the leader of three worker processes again and again, and time
//! the signal to the next leader's `LEADING` line. `crash-azure` kills under
//! Azure's hold on a lease that expired unreleased ([`AZURE_HOLD`]), which
//! each worker's proxy applies where Azurite would let the next owner in.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use blob_mutex_testkit::azure_rule::AzureHold;
use blob_mutex_testkit::azurite::Azurite;
use blob_mutex_testkit::proxy::Proxy;

use crate::group::{Event, Group};
use crate::json::{self, Json};
use crate::report::{secs, Report};
use crate::stats::{fresh_rng, stats};
use crate::{Config, IDLE_WORK_MS, JITTER, LEASE_SECS, RETRY_SECS};

/// How the leader is made to go.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// SIGTERM: the leader stops its task and releases the lease.
    Graceful,
    /// SIGKILL: the lease runs out.
    Crash,
    /// SIGKILL under Azure's hold: the lease runs out, then Azure refuses
    /// other clients for up to [`AZURE_HOLD`].
    CrashOnAzure,
}

/// The longest Azure may refuse a new lease after one expired unreleased.
pub(crate) const AZURE_HOLD: Duration = Duration::from_secs(60);

impl Exit {
    /// The name of the section, and of its worker group.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Exit::Graceful => "handover",
            Exit::Crash => "crash",
            Exit::CrashOnAzure => "crash-azure",
        }
    }

    /// What it measures, as the summary and the progress lines name it.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Exit::Graceful => "graceful handover",
            Exit::Crash => "crash failover",
            Exit::CrashOnAzure => "crash failover under Azure's 60 s hold",
        }
    }
}

pub(crate) struct Handover {
    exit: Exit,
    /// Seconds from the signal to the next leader's `LEADING` line.
    samples: Vec<f64>,
    /// SIGTERM → the old leader's `STOPPED` line (graceful only).
    stop_latency: Vec<f64>,
    /// New leader started before the old one printed `STOPPED`.
    overlaps: usize,
    epochs_increasing: bool,
}

/// Makes the leader go `reps` times, each at a random moment of its term,
/// and starts a new worker in place of each one that went.
pub(crate) async fn handover(
    config: &Config,
    azurite: &Azurite,
    exit: Exit,
    reps: usize,
) -> Result<Handover> {
    let name = exit.name();
    let mut group = Group::new(config, name, &["--work-ms", IDLE_WORK_MS]);
    // Under Azure's hold each worker reaches storage through a proxy of its
    // own; one rule, shared by all, sees every holder's calls.
    let rule = (exit == Exit::CrashOnAzure).then(|| AzureHold::new(AZURE_HOLD));
    let mut proxies = Vec::new();
    let mut endpoint = || match &rule {
        Some(rule) => {
            let proxy = Proxy::start(azurite.port);
            proxy.apply(rule);
            let endpoint = proxy.endpoint();
            proxies.push(proxy);
            endpoint
        }
        None => azurite.endpoint.clone(),
    };
    for _ in 0..3 {
        group.spawn(&endpoint());
    }
    let (mut leader, _) = group.next_leader(None, Duration::from_secs(60)).await?;
    let mut rng = fresh_rng();
    let mut result = Handover {
        exit,
        samples: Vec::new(),
        stop_latency: Vec::new(),
        overlaps: 0,
        epochs_increasing: true,
    };
    for rep in 1..=reps {
        // A random point in the renew cycle (crash) or in the followers'
        // retry cycle (graceful).
        let pause = match exit {
            Exit::Crash | Exit::CrashOnAzure => {
                rng.between(Duration::from_secs(1), Duration::from_secs(6))
            }
            Exit::Graceful => rng.between(Duration::from_millis(700), Duration::from_millis(2200)),
        };
        tokio::time::sleep(pause).await;
        let changes: Vec<Event> = group
            .drain()
            .into_iter()
            .filter(Event::is_leading)
            .collect();
        ensure!(
            changes.is_empty(),
            "leadership changed without a kill: {:?}",
            changes.iter().map(|e| (&e.id, &e.what)).collect::<Vec<_>>()
        );
        let killed_at = Instant::now();
        match exit {
            Exit::Crash | Exit::CrashOnAzure => group.kill(&leader.id)?,
            Exit::Graceful => group.terminate(&leader.id)?,
        }
        let (next, seen) = group
            .next_leader(Some(&leader.id), Duration::from_secs(60) + AZURE_HOLD)
            .await?;
        let took = (next.at - killed_at).as_secs_f64();
        if exit == Exit::Graceful {
            let stopped = seen
                .iter()
                .find(|e| e.id == leader.id && e.is_stopped())
                .map(|e| e.at);
            match stopped {
                Some(at) => result.stop_latency.push((at - killed_at).as_secs_f64()),
                None => result.overlaps += 1,
            }
        }
        if next.epoch() <= leader.epoch() {
            result.epochs_increasing = false;
        }
        eprintln!(
            "  {name} {rep}/{reps}: {} -> {} in {}",
            leader.id,
            next.id,
            secs(took)
        );
        result.samples.push(took);
        group.reap(&leader.id).await?;
        group.spawn(&endpoint());
        leader = next;
    }
    group.stop_all();
    Ok(result)
}

/// The p95 each must meet: the worst case the default options imply (a
/// follower's longest retry, after the whole lease for a crash, and after
/// Azure's hold too under it), plus a margin for scheduling and the `kill`
/// command: 1.5 s, 16.7 s and 76.7 s.
fn target_p95(exit: Exit) -> f64 {
    let retry_upper = RETRY_SECS * (1.0 + JITTER);
    match exit {
        Exit::Graceful => retry_upper + 0.3,
        Exit::Crash => LEASE_SECS + retry_upper + 0.5,
        Exit::CrashOnAzure => LEASE_SECS + AZURE_HOLD.as_secs_f64() + retry_upper + 0.5,
    }
}

pub(crate) fn report(report: &mut Report, h: &Handover) {
    let graceful = h.exit == Exit::Graceful;
    let s = stats(&h.samples);
    let target = target_p95(h.exit);
    let (key, title, moment) = match h.exit {
        Exit::Crash => (
            "crash_failover",
            "Crash failover (SIGKILL the leader)",
            "1–6 s after the leader started, so anywhere in its 5 s renew cycle",
        ),
        Exit::CrashOnAzure => (
            "crash_failover_azure_hold",
            "Crash failover under Azure's 60 s hold (SIGKILL the leader)",
            "1–6 s after the leader started; each worker's proxy refuses an acquire of the \
             expired lease with 409 LeaseAlreadyPresent for 60 s after its expiry, as Azure may",
        ),
        Exit::Graceful => (
            "graceful_handover",
            "Graceful handover (SIGTERM the leader)",
            "0.7–2.2 s after the leader started",
        ),
    };
    let mut fields = vec![
        ("seconds", json::stats(&s)),
        ("samples", json::nums(&h.samples)),
        ("target_p95_seconds", json::num(target)),
        (
            "epochs_strictly_increasing",
            Json::Bool(h.epochs_increasing),
        ),
    ];
    if graceful {
        fields.push((
            "sigterm_to_old_task_stopped",
            json::stats(&stats(&h.stop_latency)),
        ));
        fields.push(("new_leader_before_old_stopped", json::count(h.overlaps)));
    }
    report.section(key, json::obj(fields));
    report.target(
        &format!("{} p95 (n = {})", h.exit.title(), s.n),
        format!(
            "{} (median {}, max {})",
            secs(s.p95),
            secs(s.median),
            secs(s.max)
        ),
        format!("≤ {}", secs(target)),
        Some(s.p95 <= target),
    );
    let d = &mut report.details;
    let _ = writeln!(d, "### {title}\n");
    let _ = writeln!(
        d,
        "Three worker processes at default settings; the kill comes at a random moment \
         ({moment}), and the time runs from the signal to the next leader's `LEADING` line.\n",
    );
    let _ = writeln!(d, "| n | min | median | p95 | max |");
    let _ = writeln!(d, "|---|---|---|---|---|");
    let _ = writeln!(
        d,
        "| {} | {} | {} | {} | {} |\n",
        s.n,
        secs(s.min),
        secs(s.median),
        secs(s.p95),
        secs(s.max)
    );
    if graceful {
        let stop = stats(&h.stop_latency);
        let _ = writeln!(
            d,
            "SIGTERM to the old leader's task stopped: median {}, max {}. New leader \
             before the old one had stopped: {} of {}.\n",
            secs(stop.median),
            secs(stop.max),
            h.overlaps,
            s.n
        );
    }
    let _ = writeln!(
        d,
        "Epochs strictly increasing across the terms: {}.\n",
        if h.epochs_increasing { "yes" } else { "**no**" }
    );
}
