//! The examples users copy (`examples/worker.rs`, `examples/partitions.rs`),
//! not the fault fixture, frozen (SIGSTOP) past their lease and woken
//! (SIGCONT): no unit of work is logged after the wake, every term or
//! partition the frozen process had is reported with reason `deadline`, and
//! the others owned its leases only once they could have expired (the
//! checks of the process matrix, `blob_mutex_testkit::matrix_process`).

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::process::Command;
use std::time::Duration;

use blob_mutex_testkit::matrix_process::{Mode, Rig, SOON};
use blob_mutex_testkit::workers::{example_bin, What};

/// What the examples log for each unit of work.
const UNIT_OF_WORK: &str = "wrote a unit of work";

/// The example `name` as worker `id`, with `args` after the container,
/// reaching storage through `connection`, logging its units of work.
fn example(name: &str, container: &str, args: &[&str], connection: &str) -> Command {
    let mut command = Command::new(example_bin(name));
    command
        .arg(container)
        .args(args)
        .env("AZURE_STORAGE_CONNECTION_STRING", connection)
        .env("RUST_LOG", format!("warn,blob_mutex=debug,{name}=info"));
    command
}

#[tokio::test]
async fn a_frozen_example_worker_does_no_work_after_the_wake_and_reports_deadline() {
    // The example's defaults: a 15 s lease.
    let mut rig = Rig::new(Mode::Mutex, "example-frozen");
    let (container, blob) = (rig.container.clone(), rig.blob);
    let leader = rig.spawn_command("w0", |cs| example("worker", &container, &[blob, "w0"], cs));
    rig.wait_leading(leader).await;
    rig.spawn_command("w1", |cs| example("worker", &container, &[blob, "w1"], cs));
    rig.wait_renewed(leader).await;
    frozen_past_the_lease(rig, leader).await;
}

#[tokio::test]
async fn a_frozen_example_partitions_instance_does_no_work_after_the_wake_and_reports_every_partition(
) {
    // The example's defaults: the set's 30 s lease, a 5 s balance cycle.
    let mut rig = Rig::new(Mode::Set, "example-frozen-set").with_lease(Duration::from_secs(30));
    let (container, set) = (rig.container.clone(), rig.blob);
    for id in ["w0", "w1"] {
        rig.spawn_command(id, |cs| {
            example("partitions", &container, &[set, id, "4"], cs)
        });
    }
    rig.wait_owned(&[2, 2]).await;
    frozen_past_the_lease(rig, 0).await;
}

/// Freezes `victim` until the others own what it had, wakes it, checks
/// what it says then, and finishes with the matrix's checks.
async fn frozen_past_the_lease(mut rig: Rig, victim: usize) {
    // Its units of work are logged (so that none after the wake means
    // something): wait for the first.
    rig.cluster
        .wait_for("a unit of work logged by the victim", SOON, |events| {
            events
                .iter()
                .any(|e| {
                    e.worker == victim
                        && matches!(&e.what, What::Log(l) if l.contains(UNIT_OF_WORK))
                })
                .then_some(())
        })
        .await;
    let (had, frozen, taken, woken) = rig.freeze_past_the_lease(victim).await;
    let reported = rig.wait_reported(&had, SOON).await;
    for term in &reported {
        assert_eq!(
            term.reports[0].1.as_deref(),
            Some("deadline"),
            "the end of {term:?}\n{}",
            rig.record()
        );
    }
    // Units of work of the frozen terms would come within milliseconds of
    // the wake; after that, the victim works again only in a new term.
    let next_term = rig
        .terms()
        .iter()
        .filter(|t| t.worker == victim && t.start > woken)
        .map(|t| t.start)
        .min()
        .unwrap_or(Duration::MAX);
    let late: Vec<(Duration, String)> = rig
        .cluster
        .log_lines(victim, UNIT_OF_WORK)
        .into_iter()
        .filter(|(at, _)| *at > woken && *at < next_term)
        .collect();
    assert!(
        late.is_empty(),
        "units of work logged after SIGCONT (at {woken:?}), before any new term: {late:#?}\n{}",
        rig.record()
    );
    println!(
        "{:?} example: frozen {:.3}s; owned again {:.3}s after SIGSTOP; {} term(s) reported as deadline; \
         no unit of work after SIGCONT",
        rig.mode,
        (woken - frozen).as_secs_f64(),
        (taken - frozen).as_secs_f64(),
        reported.len()
    );
    rig.finish().await;
}
