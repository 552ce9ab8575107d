//! `blob-mutex run --metrics-addr`: the metrics in the Prometheus text
//! format and the probes, scraped while the command leads; the methods the
//! endpoint answers; and the endpoint under many idle connections with few
//! file descriptors. The probes while storage is frozen are in
//! `cli_health.rs`.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use blob_mutex_testkit::http::{get, request};
use blob_mutex_testkit::ports::free_addr;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::{azurite, wait_for};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::support::{blob_mutex_on, BIN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_probes_while_leading() {
    let container = azurite::unique_container("cli-metrics");
    let addr = free_addr();
    let mut child = blob_mutex_on(azurite::shared().connection_string())
        .args(["run", "--container", &container, "--blob", "lock"])
        .args(["--forever", "--metrics-addr", &addr, "--", "sleep", "1000"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let leading = wait_for(
        "the figures of a leader",
        Duration::from_secs(30),
        || async {
            let (status, body) = get(&addr, "/metrics").await?;
            (status == 200
                && body
                    .lines()
                    .any(|l| l.starts_with("blob_mutex_is_leader{") && l.ends_with(" 1")))
            .then_some(body)
        },
    )
    .await;
    assert!(leading.contains("blob_mutex_terms_total{"), "{leading}");
    assert_eq!(get(&addr, "/livez").await, Some((200, "ok\n".to_owned())));
    assert_eq!(get(&addr, "/healthz").await, Some((200, "ok\n".to_owned())));
    // Ready once storage has answered a probe too (every 2 s, from the start).
    let ready = wait_for("ready", Duration::from_secs(10), || async {
        get(&addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    let body = ready.1.clone();
    assert!(body.starts_with("ready: leader of term "), "{body}");
    let ready = Some(ready);
    assert_eq!(get(&addr, "/readyz?leader").await, ready);
    assert_eq!(get(&addr, "/other").await.map(|(s, _)| s), Some(404));

    // Only GET and HEAD.
    let posted = request(&addr, "POST", "/livez", "stop=1").await.unwrap();
    assert_eq!(posted.status, 405, "{posted:?}");
    assert!(
        posted.head.lines().any(|l| l == "allow: GET, HEAD"),
        "{posted:?}"
    );
    let head = request(&addr, "HEAD", "/readyz", "").await.unwrap();
    assert_eq!(head.status, 200, "{head:?}");
    assert!(
        head.head
            .contains(&format!("content-length: {}", body.len())),
        "{head:?}"
    );
    assert_eq!(head.body, "");

    // A renewal's duration, as a histogram with buckets.
    let renewed = wait_for("a renewal's duration", Duration::from_secs(30), || async {
        let (_, body) = get(&addr, "/metrics").await?;
        body.lines()
            .any(|l| l.starts_with("blob_mutex_renew_seconds_bucket{") && l.contains("le=\"+Inf\""))
            .then_some(body)
    })
    .await;
    assert!(
        renewed.contains("# TYPE blob_mutex_renew_seconds histogram")
            && renewed.contains("le=\"0.025\"")
            && renewed.contains("blob_mutex_renew_seconds_count{"),
        "{renewed}"
    );
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// Holds `count` connections to `addr` open without a request until `stop`,
/// opening a new one whenever the endpoint closes one. Returns how many
/// connections were opened.
async fn idle_connections(addr: String, count: usize, stop: Arc<AtomicBool>) -> usize {
    let holders = (0..count).map(|_| {
        let (addr, stop) = (addr.clone(), stop.clone());
        tokio::spawn(async move {
            let mut opened = 0;
            while !stop.load(Ordering::SeqCst) {
                let connect = TcpStream::connect(&addr);
                let Ok(Ok(mut stream)) =
                    tokio::time::timeout(Duration::from_secs(1), connect).await
                else {
                    continue;
                };
                opened += 1;
                // Until the endpoint closes it, or the storm ends.
                let mut byte = [0u8; 1];
                while !stop.load(Ordering::SeqCst) {
                    let read =
                        tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte))
                            .await;
                    if matches!(read, Ok(Ok(0) | Err(_))) {
                        break;
                    }
                }
            }
            opened
        })
    });
    let mut opened = 0;
    for holder in holders.collect::<Vec<_>>() {
        opened += holder.await.unwrap();
    }
    opened
}

/// Waits until the run serving on `addr` leads, and returns its `/readyz`
/// answer; else ends the run and panics with the last answer and its stderr.
async fn leading(addr: &str, child: &mut Child) -> (u16, String) {
    let start = Instant::now();
    loop {
        let answer = get(addr, "/readyz").await;
        match answer {
            Some((200, ref body)) if body.starts_with("ready: leader") => return answer.unwrap(),
            _ if start.elapsed() > Duration::from_secs(30) => {
                child.start_kill().unwrap();
                let mut stderr = String::new();
                let _ = child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut stderr)
                    .await;
                panic!("not leading after 30s; /readyz: {answer:?}; stderr: {stderr}");
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The number of open file descriptors of process `pid`.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_idle_connections_under_a_low_fd_limit_never_cost_the_lease() {
    const LIMIT: usize = 64;
    let proxy = Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("cli-fd-limit");
    let addr = free_addr();
    // `exec` keeps the pid: the shell becomes blob-mutex, with the limit.
    let mut child = Command::new("bash")
        .args([
            "-c",
            &format!("ulimit -n {LIMIT} && exec \"$0\" \"$@\""),
            BIN,
        ])
        .args(["run", "--container", &container, "--blob", "lock"])
        .args(["--lease-duration", "15", "--metrics-addr", &addr])
        .args(["--", "sleep", "1000"])
        .env("AZURE_STORAGE_CONNECTION_STRING", proxy.connection_string())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let ready = leading(&addr, &mut child).await;
    assert!(ready.1.starts_with("ready: leader of term "), "{}", ready.1);

    // For longer than a lease: a run that could not renew for that long
    // would have lost it. The proxy resets the connections to storage every
    // second, so that each renewal needs a new descriptor.
    let stop = Arc::new(AtomicBool::new(false));
    let storm = tokio::spawn(idle_connections(addr.clone(), 300, stop.clone()));
    let start = Instant::now();
    let mut reset = Instant::now();
    let mut most = 0;
    while start.elapsed() < Duration::from_secs(20) {
        most = most.max(open_files(pid));
        if let Some(status) = child.try_wait().unwrap() {
            let output = child.wait_with_output().await.unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            panic!("the run ended ({status}) during the storm: {stderr}");
        }
        if reset.elapsed() >= Duration::from_secs(1) {
            proxy.reset_all();
            reset = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let opened = storm.await.unwrap();
    assert!(opened > 2 * LIMIT, "only {opened} connections were opened");

    // Answers again once the connections are gone, still leading the same term.
    let answered = wait_for("an answer again", Duration::from_secs(10), || async {
        get(&addr, "/readyz").await
    })
    .await;
    assert_eq!(answered, ready);
    let status = blob_mutex_on(azurite::shared().connection_string())
        .args([
            "status",
            "--container",
            &container,
            "--blob",
            "lock",
            "--json",
        ])
        .output()
        .await
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains(&format!(
            "\"epoch\":{},",
            ready.1.trim_start_matches("ready: leader of term ").trim()
        )),
        "the term that was ready is the stored one: {status}"
    );
    assert!(status.contains("\"state\":\"leased\""), "{status}");
    child.start_kill().unwrap();
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("lost"), "{stderr}");
    assert!(most < LIMIT, "{most} descriptors open of {LIMIT}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_metrics_address_is_a_usage_error() {
    let container = azurite::unique_container("cli-metrics-off");
    let output = blob_mutex_on(azurite::shared().connection_string())
        .args(["run", "--container", &container, "--blob", "lock"])
        .args(["--metrics-addr", "127.0.0.1:not-a-port", "--", "true"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("--metrics-addr"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_release_is_logged_as_a_warning() {
    let proxy = Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("cli-release");
    let dir = std::env::temp_dir().join(format!("blob-mutex-{container}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (started, stop) = (dir.join("started"), dir.join("stop"));
    let script = r#"touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done"#;
    let child = blob_mutex_on(proxy.connection_string())
        .args(["run", "--container", &container, "--blob", "lock", "--"])
        .args(["sh", "-c", script, "sh"])
        .arg(&started)
        .arg(&stop)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the command to start", Duration::from_secs(30), || async {
        started.exists().then_some(())
    })
    .await;
    // Storage unreachable when the command ends: the release cannot land.
    proxy.partition();
    std::fs::write(&stop, b"").unwrap();
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("release failed"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every metric has `# HELP` and `# TYPE`; every counter is there at 0
/// before its first event (a follower that never led); the build and the
/// current epoch are figures too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_is_described_counters_start_at_zero_and_the_epoch_and_build_are_gauges() {
    let container = azurite::unique_container("cli-metrics-described");
    let (leader_addr, follower_addr) = (free_addr(), free_addr());
    let run = |holder: &str, addr: &str| {
        blob_mutex_on(azurite::shared().connection_string())
            .args([
                "run",
                "--container",
                &container,
                "--blob",
                "lock",
                "--holder",
                holder,
            ])
            .args(["--forever", "--metrics-addr", addr, "--", "sleep", "1000"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut leader = run("leader", &leader_addr);
    let leading = wait_for("a leader's figures", Duration::from_secs(30), || async {
        let (_, body) = get(&leader_addr, "/metrics").await?;
        body.lines()
            .any(|l| l.starts_with("blob_mutex_epoch{"))
            .then_some(body)
    })
    .await;
    let mut follower = run("follower", &follower_addr);
    let following = wait_for("a follower's figures", Duration::from_secs(30), || async {
        let (_, body) = get(&follower_addr, "/metrics").await?;
        body.lines()
            .any(|l| {
                l.starts_with("blob_mutex_acquire_attempts_total{")
                    && l.contains("outcome=\"held\"")
                    && !l.ends_with(" 0")
            })
            .then_some(body)
    })
    .await;
    for body in [&leading, &following] {
        let names: std::collections::BTreeSet<&str> = body
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| l.split(['{', ' ']).next())
            .map(|n| {
                n.trim_end_matches("_bucket")
                    .trim_end_matches("_sum")
                    .trim_end_matches("_count")
            })
            .collect();
        for name in names {
            assert!(
                body.contains(&format!("# HELP {name} ")),
                "no HELP for {name}: {body}"
            );
            assert!(
                body.contains(&format!("# TYPE {name} ")),
                "no TYPE for {name}: {body}"
            );
        }
        assert!(body.contains("blob_mutex_build_info{"), "{body}");
    }
    for zero in [
        "blob_mutex_terms_total{",
        "blob_mutex_task_aborts_total{",
        "blob_mutex_renew_failures_total{",
    ] {
        let line = following
            .lines()
            .find(|l| l.starts_with(zero))
            .unwrap_or_else(|| panic!("{zero} missing: {following}"));
        assert!(line.ends_with(" 0"), "{line}");
    }
    assert!(
        following
            .lines()
            .any(|l| l.starts_with("blob_mutex_term_ends_total{") && l.contains("reason=\"lost\"")),
        "{following}"
    );
    let epoch = leading
        .lines()
        .find_map(|l| {
            l.strip_prefix("blob_mutex_epoch{")
                .and_then(|l| l.rsplit_once(' '))
        })
        .map_or_else(
            || panic!("no epoch gauge: {leading}"),
            |(_, value)| value.parse::<f64>().unwrap(),
        );
    assert!(epoch >= 1.0, "{epoch}");
    for child in [&mut leader, &mut follower] {
        child.start_kill().unwrap();
        let _ = child.wait().await;
    }
}
