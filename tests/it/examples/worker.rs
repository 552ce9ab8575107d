//! The worker users copy (`examples/worker.rs`), not the fault fixture: two
//! of them take turns, and every line of the documented contract comes, in
//! order, from each; on both backends. The lease-set example
//! (`examples/partitions.rs`) on the official SDK's backend.

use std::process::Command;
use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::backend::{Backend, BackendExt};
use blob_mutex_testkit::workers::{example_bin, Spec, What};

fn spec(backend: Backend, name: &str, container: &str) -> Spec {
    let mut command = Command::new(example_bin("worker"));
    command.args([container, "example-worker", name]).env(
        "AZURE_STORAGE_CONNECTION_STRING",
        backend.connection_string(&azurite::shared().endpoint),
    );
    Spec {
        name: name.to_owned(),
        command,
    }
}

#[tokio::test]
async fn the_example_worker_hands_over_and_prints_its_contract() {
    hands_over(blob_mutex_testkit::backend::current()).await;
}

async fn hands_over(backend: Backend) {
    let container = azurite::unique_container("example-worker");
    let mut cluster = backend.cluster();
    let spec = |name: &str, container: &str| spec(backend, name, container);
    cluster.spawn(spec("w0", &container));
    cluster.spawn(spec("w1", &container));
    let (leader, epoch, _) = cluster.wait_first_leader().await;
    let sent = cluster.terminate(leader);
    let (reason, stopped) = cluster
        .wait_stopped(leader, sent, Duration::from_secs(10))
        .await;
    assert_eq!(reason, "shutdown");
    let (next, next_epoch, led_at) = cluster
        .wait_leading_after(stopped, Duration::from_secs(10))
        .await;
    assert_ne!(next, leader);
    assert!(next_epoch > epoch);
    let status = cluster.wait_exit(leader, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", cluster.dump_all());
    let lines: Vec<What> = cluster
        .events()
        .into_iter()
        .filter(|e| e.worker == leader)
        .map(|e| e.what)
        .filter(|w| {
            matches!(
                w,
                What::Leading { .. } | What::Stopped { .. } | What::ExitedLine
            )
        })
        .collect();
    assert!(
        matches!(
            lines.as_slice(),
            [What::Leading { .. }, What::Stopped { .. }, What::ExitedLine]
        ),
        "LEADING, STOPPED, EXITED in order: {lines:?}"
    );
    assert!(led_at >= stopped);
    cluster.history().assert_safe(&cluster.dump());
    cluster.kill_all();
}

/// The lease-set example (`examples/partitions.rs`): two instances share
/// four partitions, two each, never one partition at two instances; both
/// leave gracefully.
#[tokio::test]
async fn the_partitions_example_shares_its_partitions() {
    use blob_mutex_testkit::partitions::{assert_safe, owned_now, terms};

    let backend = blob_mutex_testkit::backend::current();
    let container = azurite::unique_container("example-partitions");
    let mut cluster = backend.cluster();
    for name in ["p0", "p1"] {
        let mut command = Command::new(example_bin("partitions"));
        command.args([container.as_str(), "set", name, "4"]).env(
            "AZURE_STORAGE_CONNECTION_STRING",
            backend.connection_string(&azurite::shared().endpoint),
        );
        cluster.spawn(Spec {
            name: name.to_owned(),
            command,
        });
    }
    cluster
        .wait_for("two partitions each", Duration::from_secs(60), |events| {
            (owned_now(&terms(events), 2) == [2, 2]).then_some(())
        })
        .await;
    for worker in 0..2 {
        cluster.terminate(worker);
    }
    for worker in 0..2 {
        let status = cluster.wait_exit(worker, Duration::from_secs(20)).await;
        assert_eq!(status.code(), Some(0), "{}", cluster.dump_all());
    }
    assert_safe(&terms(&cluster.events()), cluster.now(), &cluster.dump());
}
