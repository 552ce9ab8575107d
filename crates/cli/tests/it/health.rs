//! `blob-mutex run --metrics-addr`: the probes while storage is frozen. A
//! leader and a follower reach storage through the fault proxy, which then
//! blackholes everything for 30 s (twice the lease): neither is ever
//! unlive, so an orchestrator restarts no one; both turn unready; the
//! leader stops its command before its deadline; and both are ready again,
//! one of them leading, once storage answers.

use std::process::Stdio;
use std::time::Duration;

use blob_mutex_testkit::http::get;
use blob_mutex_testkit::ports::free_addrs;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::{azurite, wait_for};
use tokio::process::Child;
use tokio::time::Instant;

use crate::support::blob_mutex_on;
const LEASE: Duration = Duration::from_secs(15);
const FROZEN: Duration = Duration::from_secs(30);

/// `blob-mutex run --forever` through `proxy`, serving on `addr`.
fn run(proxy: &Proxy, container: &str, holder: &str, addr: &str) -> Child {
    blob_mutex_on(proxy.connection_string())
        .args([
            "run",
            "--container",
            container,
            "--blob",
            "lock",
            "--forever",
        ])
        .args(["--lease-duration", "15", "--holder", holder])
        .args(["--metrics-addr", addr, "--", "sleep", "1000"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// `Some` once the campaign serving on `addr` has found the lease held.
async fn held(addr: &str) -> Option<()> {
    let (_, body) = get(addr, "/metrics").await?;
    body.lines()
        .any(|l| {
            l.starts_with("blob_mutex_acquire_attempts_total{")
                && l.contains("outcome=\"held\"")
                && !l.ends_with(" 0")
        })
        .then_some(())
}

/// The value of the metric line that starts with `prefix`, if any.
async fn figure(addr: &str, prefix: &str) -> Option<f64> {
    let (_, body) = get(addr, "/metrics").await?;
    body.lines()
        .find(|l| l.starts_with(prefix))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_frozen_for_twice_the_lease_leaves_leader_and_follower_live() {
    let proxy = Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("cli-health");
    let addrs = free_addrs(2);
    let (leader_addr, follower_addr) = (addrs[0].as_str(), addrs[1].as_str());
    let mut leader = run(&proxy, &container, "first", leader_addr);
    wait_for("the first to lead", Duration::from_secs(30), || async {
        get(leader_addr, "/readyz?leader")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    let mut follower = run(&proxy, &container, "second", follower_addr);
    wait_for("the second to follow", Duration::from_secs(30), || async {
        get(follower_addr, "/readyz")
            .await
            .filter(|answer| *answer == (200, "ready: follower\n".to_owned()))
    })
    .await;
    assert_eq!(
        get(follower_addr, "/readyz?leader").await,
        Some((503, "not the leader\n".to_owned()))
    );
    // Storage has answered the follower's campaign: an outage from here on
    // is one it rides out, not a first contact that never came (which ends
    // a campaign after `--first-contact-timeout`, 30 s: as long as the cut).
    wait_for(
        "the follower to find the lease held",
        Duration::from_secs(30),
        || held(follower_addr),
    )
    .await;

    let cut = Instant::now();
    proxy.partition();
    let (mut follower_unready, mut leader_unready, mut stepped_down) = (None, None, None);
    while cut.elapsed() < FROZEN {
        for (who, addr) in [("follower", follower_addr), ("leader", leader_addr)] {
            let answer = get(addr, "/livez").await;
            assert_eq!(
                answer,
                Some((200, "ok\n".to_owned())),
                "the {who} is not live {:?} after storage froze",
                cut.elapsed()
            );
        }
        let at = Some(cut.elapsed());
        if follower_unready.is_none() && get(follower_addr, "/readyz").await.unwrap().0 == 503 {
            follower_unready = at;
        }
        if leader_unready.is_none() && get(leader_addr, "/readyz").await.unwrap().0 == 503 {
            leader_unready = at;
        }
        if stepped_down.is_none() && figure(leader_addr, "blob_mutex_is_leader{").await == Some(0.0)
        {
            stepped_down = at;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Unready once every request of the campaign has failed for 10 s,
    // counted from the sending of the first that failed: at most a request
    // timeout (3 s) before the cut, and a follower's acquire retry (1 s) or
    // a leader's renew interval (5 s) after it.
    for (who, unready) in [("leader", leader_unready), ("follower", follower_unready)] {
        let unready = unready.unwrap_or_else(|| panic!("the {who} stayed ready"));
        assert!(
            unready >= Duration::from_secs(7) && unready < Duration::from_secs(20),
            "the {who} turned unready {unready:?} after storage froze"
        );
    }
    // The last renewal was sent before the cut: the deadline came before
    // the cut + the lease, and the command had stopped by then.
    let stepped_down = stepped_down.expect("the leader never stepped down");
    assert!(
        stepped_down < LEASE,
        "stepped down {stepped_down:?} after the cut"
    );
    let metrics = get(leader_addr, "/metrics").await.unwrap().1;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("blob_mutex_term_ends_total{")
                && l.contains("reason=\"deadline\"")),
        "{metrics}"
    );

    proxy.heal();
    for addr in [leader_addr, follower_addr] {
        wait_for("ready again", Duration::from_secs(30), || async {
            get(addr, "/readyz")
                .await
                .filter(|(status, _)| *status == 200)
        })
        .await;
    }
    wait_for("a leader again", Duration::from_secs(60), || async {
        for addr in [leader_addr, follower_addr] {
            if get(addr, "/readyz?leader").await?.0 == 200 {
                return Some(());
            }
        }
        None
    })
    .await;
    for child in [&mut leader, &mut follower] {
        child.start_kill().unwrap();
        let _ = child.wait().await;
    }
}
