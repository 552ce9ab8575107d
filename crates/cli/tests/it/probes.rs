//! `blob-mutex run --metrics-addr`: the probes answer whatever other
//! clients do. Idle connections, opened faster than the endpoint would
//! time them out, cannot keep `/livez` from answering within a kubelet's
//! 1 s, a probe that comes inside a burst of more idle connects than the
//! endpoint keeps is answered, and a request whose lines end in a bare LF
//! is answered.

use std::process::Stdio;
use std::time::Duration;

use blob_mutex_testkit::http::get;
use blob_mutex_testkit::ports::free_addr;
use blob_mutex_testkit::{azurite, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::support::{blob_mutex_on, BIN};
/// A kubelet's default probe timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// `blob-mutex run --forever` on the shared Azurite, serving on `addr`, and
/// live there.
async fn serving(name: &str, addr: &str) -> Child {
    let child = run_on_azurite(&azurite::unique_container(name))
        .args(["--forever", "--metrics-addr", addr])
        .args(["--", "sleep", "1000"])
        .spawn()
        .expect("start blob-mutex run");
    // Ready: the endpoint answers, and storage has answered a probe.
    wait_for(
        "the endpoint to be ready",
        Duration::from_secs(30),
        || async {
            get(addr, "/readyz")
                .await
                .filter(|(status, _)| *status == 200)
        },
    )
    .await;
    child
}

/// What `request` gets in answer on a connection of its own, or `None`
/// when the answer is not complete within [`PROBE_TIMEOUT`].
async fn exchange(addr: &str, request: &[u8]) -> Option<String> {
    tokio::time::timeout(PROBE_TIMEOUT, async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream.write_all(request).await.ok()?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.ok()?;
        Some(String::from_utf8_lossy(&reply).into_owned())
    })
    .await
    .ok()?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_opened_at_100_a_second_never_delay_livez_past_1s() {
    let addr = free_addr();
    let _run = serving("cli-probes-idle", &addr).await;
    let opening = tokio::spawn({
        let addr = addr.clone();
        async move {
            let mut idle = Vec::new();
            let mut every = tokio::time::interval(Duration::from_millis(10));
            for _ in 0..300 {
                every.tick().await;
                if let Ok(stream) = TcpStream::connect(&addr).await {
                    idle.push(stream);
                }
            }
            idle
        }
    });
    let start = Instant::now();
    let mut probes = Vec::new();
    let mut every = tokio::time::interval(Duration::from_millis(250));
    // While they are opened (3 s), and for 2 s after, with every one open.
    while start.elapsed() < Duration::from_secs(5) {
        every.tick().await;
        let sent = Instant::now();
        let reply = exchange(&addr, b"GET /livez HTTP/1.1\r\nhost: probe\r\n\r\n").await;
        let took = sent.elapsed();
        probes.push((sent - start, took));
        assert!(
            reply
                .as_deref()
                .is_some_and(|r| r.starts_with("HTTP/1.1 200 OK\r\n")),
            "the probe {:?} into the flood: {reply:?} after {took:?} (earlier: {probes:?})",
            sent - start
        );
    }
    let idle = opening.await.unwrap();
    assert!(
        idle.len() >= 250,
        "only {} idle connections opened",
        idle.len()
    );
    let slowest = probes.iter().map(|(_, took)| *took).max();
    eprintln!(
        "{} probes, the slowest answered in {slowest:?}",
        probes.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_inside_a_burst_of_idle_connects_is_answered() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let addr = free_addr();
    let run = serving("cli-probes-burst", &addr).await;
    let pid = Pid::from_raw(i32::try_from(run.id().expect("running")).unwrap());
    // While `run` is stopped, the connects wait in the listen queue and
    // come to the endpoint all at once: a probe first, 70 idle connects,
    // a second probe, 40 more (the listen queue holds 128).
    kill(pid, Signal::SIGSTOP).unwrap();
    let request = b"GET /livez HTTP/1.1\r\nhost: probe\r\n\r\n";
    let mut probes = Vec::new();
    let mut idle = Vec::new();
    for idle_after in [70, 40] {
        let mut probe = TcpStream::connect(&addr).await.unwrap();
        probe.write_all(request).await.unwrap();
        probes.push(probe);
        for _ in 0..idle_after {
            idle.push(TcpStream::connect(&addr).await.unwrap());
        }
    }
    kill(pid, Signal::SIGCONT).unwrap();
    for (i, mut probe) in probes.into_iter().enumerate() {
        let mut reply = Vec::new();
        let read = tokio::time::timeout(PROBE_TIMEOUT, probe.read_to_end(&mut reply)).await;
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            matches!(read, Ok(Ok(_))) && reply.starts_with("HTTP/1.1 200 OK\r\n"),
            "probe {i} of the burst: {read:?}, {reply:?}"
        );
    }
    drop(idle);
}

#[tokio::test]
async fn a_request_whose_lines_end_in_a_bare_lf_is_answered() {
    let addr = free_addr();
    let _run = serving("cli-probes-lf", &addr).await;
    for request in [
        &b"GET /livez HTTP/1.1\nhost: probe\n\n"[..],
        b"GET /livez HTTP/1.1\r\nhost: probe\n\n",
        b"HEAD /readyz HTTP/1.0\n\n",
    ] {
        let reply = exchange(&addr, request).await;
        let shown = String::from_utf8_lossy(request);
        let reply = reply.unwrap_or_else(|| panic!("{shown:?}: no answer within 1 s"));
        assert!(
            reply.starts_with("HTTP/1.1 200 OK\r\n"),
            "{shown:?}: {reply}"
        );
    }
}

/// `blob-mutex run --hold --forever` as a sidecar, `holder` on `addr`.
fn holding(container: &str, holder: &str, addr: &str) -> Child {
    hold_command(container, holder, addr)
        .arg("--forever")
        .spawn()
        .expect("start blob-mutex run --hold")
}

/// `blob-mutex run --hold` for `holder`, serving on `addr`.
fn hold_command(container: &str, holder: &str, addr: &str) -> Command {
    let mut command = run_on_azurite(container);
    command
        .args(["--hold", "--holder", holder])
        // A lease far longer than the wait for the follower below: it
        // leads by the release, not by the lease's expiry.
        .args(["--lease-duration", "60", "--acquire-retry", "1s"])
        .args(["--metrics-addr", addr]);
    command
}

/// `blob-mutex run` on blob `lock` of `container` on the shared Azurite,
/// its output and input closed; flags and the command follow.
fn run_on_azurite(container: &str) -> Command {
    let mut command = blob_mutex_on(azurite::shared().connection_string());
    command
        .args(["run", "--container", container, "--blob", "lock"])
        .stderr(Stdio::null());
    command
}

/// Waits until `addr` says this instance leads (`/readyz?leader`).
async fn leads(addr: &str) {
    wait_for("it to lead", Duration::from_secs(30), || async {
        get(addr, "/readyz?leader")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
}

/// `/leader` on `addr`, parsed, when it names `holder`.
async fn leader_named(addr: &str, holder: &str) -> Option<serde_json::Value> {
    let (status, body) = get(addr, "/leader").await?;
    assert_eq!(status, 200, "{body}");
    let seen: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    (seen["holder"] == holder).then_some(seen)
}

/// The sidecar with no command: `run --hold` leads holding the lease, both
/// instances' `/leader` name the leader, and on SIGTERM it releases, exits
/// 0, and the other one leads and names itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_hold_leads_with_no_command_and_leader_tells_every_replica_who_leads() {
    let container = azurite::unique_container("hold");
    let addrs = blob_mutex_testkit::ports::free_addrs(2);
    let mut first = holding(&container, "first", &addrs[0]);
    let limit = Duration::from_secs(30);
    leads(&addrs[0]).await;
    let mut second = holding(&container, "second", &addrs[1]);
    let seen = wait_for("the follower to name the leader", limit, || {
        leader_named(&addrs[1], "first")
    })
    .await;
    assert_eq!(seen["this_instance_leads"], false, "{seen}");
    let epoch = seen["epoch"].as_u64().expect("a numeric epoch");
    let own = leader_named(&addrs[0], "first")
        .await
        .expect("names itself");
    assert_eq!(own["this_instance_leads"], true, "{own}");
    assert_eq!(own["epoch"].as_u64(), Some(epoch), "{own}");

    let pid = first.id().expect("running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(limit, first.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    // Released: the follower leads at its next attempt (1 s), within the
    // 30 s limit, where an expiry would take 40 s at least (the lease
    // less a renew interval of 20 s).
    let seen = wait_for("the follower to lead", limit, || {
        leader_named(&addrs[1], "second")
    })
    .await;
    assert_eq!(seen["this_instance_leads"], true, "{seen}");
    assert!(seen["epoch"].as_u64().unwrap() > epoch, "{seen}");
    second.kill().await.unwrap();
}

/// Without `--forever`, a held lease that is broken ends `run --hold` with
/// exit code 4 and a line that says so.
#[tokio::test]
async fn run_hold_whose_lease_is_broken_exits_4() {
    let container = azurite::unique_container("hold-broken");
    let addr = free_addr();
    // Renewing every second: the loss is seen within one.
    let holder = hold_command(&container, "only", &addr)
        .args(["--renew-interval", "1s"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start blob-mutex run --hold");
    let limit = Duration::from_secs(30);
    leads(&addr).await;
    let broken = Command::new(BIN)
        .args(["break", "--container", &container, "--blob", "lock"])
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            azurite::shared().connection_string(),
        )
        .output()
        .await
        .unwrap();
    assert!(broken.status.success(), "{broken:?}");
    let output = tokio::time::timeout(limit, holder.wait_with_output())
        .await
        .expect("exits once the lease is lost")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("was broken or taken by another holder; no longer holding it"),
        "{stderr}"
    );
}
