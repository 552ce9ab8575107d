//! Sub-tasks belong to the term: a leader whose sub-tasks ignore
//! cancellation keeps the lease until they were aborted, so the next
//! leader's work starts only after the last of them.

use std::time::Duration;

use blob_mutex_testkit::azurite;
use blob_mutex_testkit::workers::{Cluster, What};

const GRACE: Duration = Duration::from_millis(1500);
const WORK: Duration = Duration::from_millis(100);

#[tokio::test]
async fn the_next_leader_starts_only_after_the_last_sub_task_of_the_old_one() {
    let mut cluster = Cluster::new();
    let connection = azurite::shared().connection_string();
    cluster.spawn_workers(
        2,
        &azurite::unique_container("subtasks"),
        "subtasks",
        &[
            "--acquire-retry-ms",
            "300",
            "--sub-tasks",
            "3",
            "--ignore-cancel",
            "--grace-ms",
            "1500",
            "--work-ms",
            "100",
        ],
        |_| connection.clone(),
    );
    let (leader, _, _) = cluster.wait_first_leader().await;
    cluster
        .wait_for("the sub-tasks to work", Duration::from_secs(10), |events| {
            (events
                .iter()
                .filter(|e| e.worker == leader && matches!(e.what, What::Work { .. }))
                .count()
                >= 10)
                .then_some(())
        })
        .await;

    let terminated = cluster.terminate(leader);
    let (next, _, led_at) = cluster
        .wait_leading_after(terminated, GRACE + Duration::from_secs(10))
        .await;
    assert_ne!(next, leader);
    let (reason, stopped) = cluster
        .wait_stopped(leader, terminated, Duration::from_secs(5))
        .await;
    assert_eq!(reason, "shutdown");

    let old_work = cluster.lines_of(leader, |w| matches!(w, What::Work { .. }));
    let last_old = *old_work.last().expect("the old leader's sub-tasks worked");
    // The sub-tasks ignored their cancellation and worked on through the
    // grace: the test holds only if they really outlived the cancellation.
    assert!(
        last_old + WORK * 3 >= terminated + GRACE,
        "the sub-tasks stopped at {last_old:?}, long before the end of the grace\n{}",
        cluster.dump()
    );
    assert!(
        last_old < stopped && stopped <= led_at,
        "old sub-task work at {last_old:?}, STOPPED at {stopped:?}, new leader at {led_at:?}\n{}",
        cluster.dump()
    );
    let new_work = cluster.lines_of(next, |w| matches!(w, What::Work { .. }));
    assert!(new_work.iter().all(|&at| at > last_old));
    cluster.history().assert_safe(&cluster.dump());
    println!(
        "sub-tasks: SIGTERM at {:.3}s, last old sub-task work {:.3}s, STOPPED {:.3}s, next leader {:.3}s",
        terminated.as_secs_f64(),
        last_old.as_secs_f64(),
        stopped.as_secs_f64(),
        led_at.as_secs_f64()
    );
    cluster.kill_all();
}
