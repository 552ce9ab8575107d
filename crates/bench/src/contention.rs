//! Section `contention`: many candidates in one process start together on a
//! blob that does not exist yet; how long until one leads, what it costs, and
//! that only one ever leads.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use blob_mutex::{BlobDistributedMutex, CancellationToken, MutexOptions};
use blob_mutex_testkit::azurite::{unique_container, Azurite};
use blob_mutex_testkit::proxy::Proxy;

use crate::json::{self, counts_json, Json};
use crate::report::{secs, Report};
use crate::stats::{count_by_kind, float};
use crate::{Config, RENEW_SECS, RETRY_SECS};

/// Starts `--candidates` mutexes (default options) through one counting
/// proxy, and counts the requests until the first leader's task starts and
/// in the steady state, from 3 s after that to the end of the window
/// (`--contention-secs` from the start, at least 8 s).
#[allow(clippy::too_many_lines)] // one measurement, read top to bottom
pub(crate) async fn contention(
    config: &Config,
    azurite: &Azurite,
    report: &mut Report,
) -> Result<()> {
    let proxy = Proxy::start(azurite.port);
    let container = unique_container("bench-contention");
    let n = config.candidates;
    let leaders_now = Arc::new(AtomicUsize::new(0));
    let most_at_once = Arc::new(AtomicUsize::new(0));
    let terms: Arc<Mutex<Vec<(Instant, String, u64)>>> = Arc::default();
    let token = CancellationToken::new();
    let mut mutexes = Vec::new();
    for i in 0..n {
        let (now, most, terms) = (leaders_now.clone(), most_at_once.clone(), terms.clone());
        let options = MutexOptions::default().with_holder(format!("candidate-{i}"));
        let mutex = BlobDistributedMutex::with_options(
            proxy.settings(&container, "leader"),
            options,
            move |ctx| {
                let (now, most, terms) = (now.clone(), most.clone(), terms.clone());
                async move {
                    let at = Instant::now();
                    let leaders = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(leaders, Ordering::SeqCst);
                    terms
                        .lock()
                        .expect("terms")
                        .push((at, ctx.holder().to_owned(), ctx.epoch()));
                    ctx.cancelled().await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), std::convert::Infallible>(())
                }
            },
        )?;
        mutexes.push(Arc::new(mutex));
    }
    let start = Instant::now();
    let handles: Vec<_> = mutexes
        .iter()
        .map(|m| {
            let (m, token) = (m.clone(), token.clone());
            tokio::spawn(async move { m.run_task_when_mutex_acquired(token).await })
        })
        .collect();
    let elected = loop {
        if let Some((at, _, _)) = terms.lock().expect("terms").first() {
            break *at;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(60),
            "no leader within 60 s among {n} candidates"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let time_to_leader = (elected - start).as_secs_f64();
    let election_requests = proxy.kinds_between(start, elected);
    let steady_from = elected + Duration::from_secs(3);
    let end = start + config.contention_window.max(Duration::from_secs(8));
    tokio::time::sleep_until(tokio::time::Instant::from_std(end)).await;
    let steady = proxy.kinds_between(steady_from, end);
    let steady_secs = (end - steady_from).as_secs_f64();
    let terms_seen = terms.lock().expect("terms").clone();
    let most = most_at_once.load(Ordering::SeqCst);
    token.cancel();
    for handle in handles {
        match tokio::time::timeout(Duration::from_secs(20), handle).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("  a candidate stopped with an error: {e}"),
            Ok(Err(e)) => eprintln!("  a candidate panicked: {e}"),
            Err(_) => eprintln!("  a candidate did not stop within 20 s"),
        }
    }
    let rate = float(steady.len()) / steady_secs;
    let expected = float(n - 1) / RETRY_SECS + 1.0 / RENEW_SECS;
    let kinds = count_by_kind(&election_requests);
    let one_leader = terms_seen.len() == 1 && most == 1;
    eprintln!(
        "  {n} candidates: leader after {}, {rate:.1} requests/s",
        secs(time_to_leader)
    );
    report.section(
        "contention",
        json::obj([
            ("candidates", json::count(n)),
            ("seconds_to_first_leader", json::num(time_to_leader)),
            (
                "requests_until_elected",
                json::count(election_requests.len()),
            ),
            ("requests_until_elected_by_kind", counts_json(&kinds)),
            ("steady_window_seconds", json::num(steady_secs)),
            ("steady_requests_per_second", json::num(rate)),
            ("expected_requests_per_second", json::num(expected)),
            ("terms_started", json::count(terms_seen.len())),
            ("most_leaders_at_once", json::count(most)),
            ("exactly_one_leader", Json::Bool(one_leader)),
        ]),
    );
    report.target(
        &format!("contention, {n} candidates: leaders"),
        format!(
            "{} term(s), at most {most} at once; elected after {}",
            terms_seen.len(),
            secs(time_to_leader)
        ),
        "exactly 1".to_owned(),
        Some(one_leader),
    );
    let d = &mut report.details;
    let _ = writeln!(d, "### Contention: {n} candidates on one blob\n");
    let _ = writeln!(
        d,
        "{n} `BlobDistributedMutex` objects (default options) in one process, started together \
         on a blob that does not exist yet, through one counting proxy.\n"
    );
    let _ = writeln!(d, "| time to the first leader | requests until then | steady request rate | schedule | leader terms | most leaders at once |");
    let _ = writeln!(d, "|---|---|---|---|---|---|");
    let _ = writeln!(
        d,
        "| {} | {} ({}) | {rate:.1} /s over {steady_secs:.0} s | {expected:.1} /s | {} | {most} |\n",
        secs(time_to_leader),
        election_requests.len(),
        kinds.iter().map(|(k, v)| format!("{} {v}", k.name())).collect::<Vec<_>>().join(", "),
        terms_seen.len(),
    );
    Ok(())
}
