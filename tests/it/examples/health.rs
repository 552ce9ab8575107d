//! The health example (`examples/health.rs`): a leader and a follower on
//! Azurite answer their probes over hyper from the library's `Health`.

use std::process::Stdio;
use std::time::Duration;

use blob_mutex_testkit::http::get;
use blob_mutex_testkit::ports::free_addrs;
use blob_mutex_testkit::workers::example_bin;
use blob_mutex_testkit::{azurite, wait_for};
use tokio::process::{Child, Command};

/// The example on `container`, serving its probes on `addr`.
fn service(container: &str, addr: &str) -> Child {
    Command::new(example_bin("health"))
        .args([container, "lock", addr])
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            azurite::shared().connection_string(),
        )
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn the_health_example_answers_livez_and_readyz_for_a_leader_and_a_follower() {
    let container = azurite::unique_container("example-health");
    let addrs = free_addrs(2);
    let (first, second) = (addrs[0].as_str(), addrs[1].as_str());
    let mut leader = service(&container, first);
    let (_, line) = wait_for("the first to lead", Duration::from_secs(30), || async {
        get(first, "/readyz?leader")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    assert!(line.starts_with("ready: leader of term "), "{line}");
    let mut follower = service(&container, second);
    wait_for("the second to follow", Duration::from_secs(30), || async {
        get(second, "/readyz")
            .await
            .filter(|answer| *answer == (200, "ready: follower\n".to_owned()))
    })
    .await;
    assert_eq!(
        get(second, "/readyz?leader").await,
        Some((503, "not the leader\n".to_owned()))
    );
    for addr in [first, second] {
        assert_eq!(get(addr, "/livez").await, Some((200, "ok\n".to_owned())));
    }
    assert_eq!(get(first, "/other").await.map(|(s, _)| s), Some(404));
    leader.kill().await.unwrap();
    follower.kill().await.unwrap();
}
