//! `blob-mutex run --metrics-addr`: the metrics in the Prometheus text
//! format and `/healthz`, scraped while the command leads and while storage
//! cannot be reached (through the fault proxy, blackholed).

mod support;

use std::process::Stdio;
use std::time::Duration;

use support::proxy::Proxy;
use support::{azurite, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_blob-mutex");

/// `GET path` on `addr`: the status code and the body, or `None` when
/// nothing answers.
async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut reply))
        .await
        .ok()?
        .ok()?;
    let status = reply.split_whitespace().nth(1)?.parse().ok()?;
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Some((status, body))
}

/// A free port on 127.0.0.1 (bound, then let go).
fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_while_leading_and_while_storage_is_unreachable() {
    let proxy = Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("cli-metrics");
    let addr = free_addr();
    let mut child = Command::new(BIN)
        .args(["run", "--container", &container, "--blob", "lock"])
        .args(["--forever", "--metrics-addr", &addr, "--", "sleep", "1000"])
        .env("AZURE_STORAGE_CONNECTION_STRING", proxy.connection_string())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
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
    assert_eq!(get(&addr, "/healthz").await, Some((200, "ok\n".to_owned())));
    assert_eq!(get(&addr, "/other").await.map(|(s, _)| s), Some(404));

    // Storage unreachable: unhealthy within the bound (10 s without an
    // answer, probes every 2 s, each cut at the 3 s request timeout).
    let cut = Instant::now();
    proxy.partition();
    let (_, reason) = wait_for("503 from /healthz", Duration::from_secs(30), || async {
        get(&addr, "/healthz").await.filter(|(s, _)| *s == 503)
    })
    .await;
    let after = cut.elapsed();
    assert!(reason.contains("storage has not answered"), "{reason}");
    // The last answer came at most one probe (2 s) before the cut.
    assert!(
        after >= Duration::from_secs(7),
        "unhealthy too soon: {after:?}"
    );
    // Healthy again once storage answers.
    proxy.heal();
    wait_for(
        "200 from /healthz again",
        Duration::from_secs(30),
        || async { get(&addr, "/healthz").await.filter(|(s, _)| *s == 200) },
    )
    .await;
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_metrics_address_is_a_usage_error() {
    let container = azurite::unique_container("cli-metrics-off");
    let output = Command::new(BIN)
        .args(["run", "--container", &container, "--blob", "lock"])
        .args(["--metrics-addr", "127.0.0.1:not-a-port", "--", "true"])
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            azurite::shared().connection_string(),
        )
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
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
    let child = Command::new(BIN)
        .args(["run", "--container", &container, "--blob", "lock", "--"])
        .args(["sh", "-c", script, "sh"])
        .arg(&started)
        .arg(&stop)
        .env("AZURE_STORAGE_CONNECTION_STRING", proxy.connection_string())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
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
