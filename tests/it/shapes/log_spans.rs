//! Logs that name the lease: two mutexes in one process, with the same
//! default holder, each write every line of their campaign, their terms,
//! their leader tasks and the tasks those spawn inside a span that names
//! their lease (and, within a term, its epoch).

use std::time::Duration;

use blob_mutex::{
    testing::MemoryLeaseStore, BlobDistributedMutex, CancellationToken, LeaderContext, MutexOptions,
};

use crate::support::lines::Lines;

/// A mutex on `lease` whose task logs, spawns a sub-task that logs, and
/// ends.
fn mutex(lease: &str) -> BlobDistributedMutex<MemoryLeaseStore> {
    BlobDistributedMutex::with_store(
        MemoryLeaseStore::new(lease),
        MutexOptions::default(),
        |ctx: LeaderContext| async move {
            tracing::info!("the task works");
            ctx.spawn(async {
                tracing::info!("a sub-task works");
                Ok::<(), blob_mutex::Error>(())
            })
            .await
            .unwrap();
            Ok::<(), blob_mutex::Error>(())
        },
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_line_of_two_mutexes_names_its_lease() {
    let (lines, _default) = Lines::capture(tracing::Level::DEBUG);

    let (alpha, beta) = (mutex("alpha/lock"), mutex("beta/lock"));
    assert_eq!(alpha.holder(), beta.holder(), "one default holder");
    let token = CancellationToken::new();
    let stop = token.clone();
    let (a, b, ()) = tokio::join!(
        alpha.run_task_when_mutex_acquired(token.clone()),
        beta.run_task_when_mutex_acquired(token.clone()),
        async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop.cancel();
        }
    );
    a.unwrap();
    b.unwrap();

    let text = lines.text();
    let ours: Vec<&str> = text.lines().filter(|l| l.contains("blob_mutex")).collect();
    assert!(ours.len() > 10, "{text}");
    for line in &ours {
        assert!(
            line.contains("lease{lease=alpha/lock") || line.contains("lease{lease=beta/lock"),
            "a line that names no lease: {line}"
        );
    }
    for lease in ["alpha/lock", "beta/lock"] {
        for said in ["the task works", "a sub-task works"] {
            assert!(
                text.lines()
                    .any(|l| l.contains(&format!("lease{{lease={lease}"))
                        && l.contains(":term{epoch=")
                        && l.contains(said)),
                "no line {said:?} in a term of {lease}: {text}"
            );
        }
    }
}

/// A schedule's lines, its terms' and its jobs' among them, name its lease
/// once: the schedule's span, and no second one of the engine's inside it.
#[cfg(feature = "schedule")]
#[tokio::test(start_paused = true)]
async fn every_line_of_a_schedule_names_its_lease_once() {
    use blob_mutex::schedule::{BlobSchedule, ScheduleOptions};
    let (lines, _default) = Lines::capture(tracing::Level::DEBUG);
    let schedule = BlobSchedule::with_store(
        MemoryLeaseStore::new("nightly/cron"),
        ScheduleOptions::new("*/10 * * * * *"),
    )
    .unwrap();
    let token = CancellationToken::new();
    let stop = token.clone();
    let (ran, ()) = tokio::join!(
        schedule.run(token, |_slot, _ctx| async {
            tracing::info!("the job works");
            Ok::<(), blob_mutex::Error>(())
        }),
        async move {
            tokio::time::sleep(Duration::from_secs(25)).await;
            stop.cancel();
        }
    );
    ran.unwrap();
    let text = lines.text();
    assert!(
        text.lines()
            .any(|l| l.contains(":term{epoch=") && l.contains("the job works")),
        "{text}"
    );
    for line in text.lines() {
        assert_eq!(
            line.matches("lease{lease=nightly/cron").count(),
            1,
            "a line that names its lease other than once: {line}"
        );
    }
}
