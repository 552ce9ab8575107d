//! The fault matrix where the point is a real process: worker processes on
//! Azurite, killed, stopped and frozen by signals, judged from outside by
//! what they print and what the fault proxies saw. Each scenario is written
//! once over [`Mode`]; one test per cell, named `<scenario>::<mode>`.
//! Every cell ends with [`Rig::finish`], which checks the three promises
//! (one owner, every end reported once, the next owner only once the lease
//! was free) over the whole record; the scenario adds what is its own.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex::term::FAIL_STOP_EXIT_CODE;
use blob_mutex_testkit::matrix_process::{terms, Mode, Rig, Term, LEASE, PARTITIONS, SOON};
use blob_mutex_testkit::workers::What;

/// One `#[tokio::test]` per mode for a scenario: `cells!(scenario: mode, …)`
/// makes the module `scenario` with a test named after each mode.
macro_rules! cells {
    ($scenario:ident: $($(#[$meta:meta])* $cell:ident => $mode:ident),+ $(,)?) => {
        mod $scenario {
            $(
                $(#[$meta])*
                #[tokio::test]
                async fn $cell() {
                    super::$scenario(super::Mode::$mode).await;
                }
            )+
        }
    };
}

/// Every row of the matrix.
macro_rules! every_mode {
    ($scenario:ident) => {
        cells!($scenario:
            mutex => Mutex,
            lease_set => Set,
            quorum_mutex => QuorumMutex,
            quorum_lease_set => QuorumSet,
            handover => Handover,
            guard => Guard,
        );
    };
}

every_mode!(process_kill);
every_mode!(graceful_stop);
every_mode!(freeze_past_the_deadline);
every_mode!(stuck_task_fail_stop);
// A stuck task without fail-stop only ends a campaign of a lease set with
// an error while the process goes on; the mutex's and the guard's are
// in-process (tests/it/faults/stuck_task.rs and the paused-time half of the
// matrix, where a guard's release returns `TaskNotStopped` and the next
// `acquire` does too while the task may still run).
cells!(stuck_task_without_fail_stop:
    lease_set => Set,
    quorum_lease_set => QuorumSet,
);
// The kill again under Azure's hold on a lease that expired unreleased
// (`Rig::with_azure_hold`), where Azurite lets the next owner in at once:
// the mutex's row and the lease set's, at a 30 s hold.
cells!(process_kill_on_azure:
    mutex => Mutex,
    lease_set => Set,
);

/// Azure's hold in [`process_kill_on_azure`].
const AZURE_HOLD: Duration = Duration::from_secs(30);
/// One poll (a follower's retry, 0.5 s with jitter) or one balance cycle
/// (1 s), its claim and stamp, and room for a loaded two-core machine.
const ONE_POLL: Duration = Duration::from_secs(5);

/// SIGKILL the leader, or an owner of half the partitions: the others own
/// its leases once they could have expired.
async fn process_kill(mode: Mode) {
    let mut rig = Rig::new(mode, "kill");
    let (_, killed, taken) = kill_the_victim(&mut rig).await;
    println!(
        "{mode:?}: process kill; owned again {:.3}s after SIGKILL",
        (taken - killed).as_secs_f64()
    );
    rig.finish().await;
}

/// SIGKILL under Azure's hold: each lease the victim had is owned again
/// only after its expiry plus the hold, and within one poll or cycle of
/// that; the others kept polling through the hold (refused to the end of
/// it), and no error ended them (`finish`: they exit 0 when stopped).
async fn process_kill_on_azure(mode: Mode) {
    let mut rig = Rig::new(mode, "kill-azure").with_azure_hold(AZURE_HOLD);
    let (had, killed, taken) = kill_the_victim(&mut rig).await;
    let victim = had[0].worker;
    let terms = rig.terms();
    let mut latest = Duration::ZERO;
    for term in &had {
        let free = rig.free_at(term, taken);
        let held_until = free + AZURE_HOLD;
        let next = terms
            .iter()
            .find(|t| t.lease == term.lease && t.worker != victim && t.start > killed)
            .expect("owned again");
        assert!(
            held_until <= next.start && next.start <= held_until + ONE_POLL,
            "{mode:?}: {} owned again at {:?}; expiry {free:?}, hold until {held_until:?}\n{}",
            term.lease,
            next.start,
            rig.record()
        );
        let refused = rig.refused_acquires(victim, &term.lease);
        assert!(
            refused.first().is_some_and(|&at| at < free + ONE_POLL)
                && refused.last().is_some_and(|&at| at + ONE_POLL >= held_until),
            "{mode:?}: {} not polled through the hold ({free:?} to {held_until:?}): refused at {refused:?}\n{}",
            term.lease,
            rig.record()
        );
        latest = latest.max(next.start - free);
    }
    println!(
        "{mode:?}: process kill under Azure's {}s hold; owned again {:.3}s after SIGKILL, at most {:.3}s \
         after an expiry ({} acquires refused)",
        AZURE_HOLD.as_secs(),
        (taken - killed).as_secs_f64(),
        latest.as_secs_f64(),
        had.iter()
            .map(|t| rig.refused_acquires(victim, &t.lease).len())
            .sum::<usize>()
    );
    rig.finish().await;
}

/// The start of a kill: the usual start, SIGKILL to the victim, and the
/// others own what it had. Returns its terms then, when it was killed and
/// when its leases were all owned again.
async fn kill_the_victim(rig: &mut Rig) -> (Vec<Term>, Duration, Duration) {
    let victim = rig.start(&[]).await;
    let killed = rig.kill(victim);
    let had = rig.terms_open_at(victim, killed);
    let taken = rig.wait_taken_over(victim, killed).await;
    (had, killed, taken)
}

/// SIGTERM: the victim drains and releases every lease, reports each term
/// as `shutdown` (a guard's as `finished`: its caller released it), exits 0, and the others own its leases soon after.
async fn graceful_stop(mode: Mode) {
    let mut rig = Rig::new(mode, "graceful");
    let victim = rig.start(&[]).await;
    let sent = rig.cluster.terminate(victim);
    let had = rig.terms_open_at(victim, sent);
    let taken = rig.wait_taken_over(victim, sent).await;
    assert!(
        taken - sent <= SOON,
        "{mode:?}: owned again {:?} after SIGTERM\n{}",
        taken - sent,
        rig.record()
    );
    for term in rig.wait_reported(&had, SOON).await {
        assert_reason(&rig, &term, mode.caller_stop());
    }
    println!(
        "{mode:?}: graceful stop; {} term(s) reported as {}, owned again {:.3}s after SIGTERM",
        had.len(),
        mode.caller_stop(),
        (taken - sent).as_secs_f64()
    );
    rig.finish().await;
}

/// SIGSTOP past the lease, then SIGCONT: the others own the victim's leases
/// only once they could have expired; once woken, the victim reports every
/// term it had with reason `deadline` and does no unit of work.
async fn freeze_past_the_deadline(mode: Mode) {
    let mut rig = Rig::new(mode, "frozen");
    let victim = rig.start(&[]).await;
    let (had, frozen, taken, woken) = rig.freeze_past_the_lease(victim).await;
    let reported = rig.wait_reported(&had, SOON).await;
    for term in &reported {
        assert_reason(&rig, term, "deadline");
    }
    let last_report = reported.iter().map(|t| t.reports[0].0).max().unwrap();
    println!(
        "{mode:?}: frozen {:.3}s; owned again {:.3}s after SIGSTOP; {} term(s) reported as deadline \
         within {:.1} ms of SIGCONT",
        (woken - frozen).as_secs_f64(),
        (taken - frozen).as_secs_f64(),
        reported.len(),
        (last_report.saturating_sub(woken)).as_secs_f64() * 1000.0
    );
    // No unit of work after the wake: checked for every term by `finish`.
    rig.finish().await;
}

/// A task that blocks its thread once cancelled, with fail-stop: the
/// process exits with `FAIL_STOP_EXIT_CODE` before its leases could expire,
/// and the others own them only after that.
async fn stuck_task_fail_stop(mode: Mode) {
    let mut rig = Rig::new(mode, "fail-stop");
    let (victim, asked) = stuck_start(&mut rig, &["--fail-stop"]).await;
    rig.expect_exit(victim, Some(FAIL_STOP_EXIT_CODE));
    let exited = exit_of(&rig, victim).await;
    // The leases it still held when it exited: those of terms that did not
    // end with a report of a task that stopped (drained, then released).
    let held: Vec<Term> = rig
        .terms_open_at(victim, asked)
        .into_iter()
        .filter(|t| t.reports.iter().all(|(_, reason)| reason.is_none()))
        .collect();
    assert!(!held.is_empty(), "{mode:?}\n{}", rig.record());
    for term in &held {
        let free = rig.free_at(term, rig.cluster.now());
        assert!(
            exited < free,
            "{mode:?}: exited at {exited:?}, after the lease of {term:?} could expire ({free:?})\n{}",
            rig.record()
        );
    }
    let taken = rig.wait_taken_over(victim, asked).await;
    println!(
        "{mode:?}: stuck task, fail-stop: exited {:.3}s after the stop was asked; owned again {:.3}s after",
        (exited - asked).as_secs_f64(),
        (taken - asked).as_secs_f64()
    );
    rig.finish().await;
}

/// A partition task that blocks its thread once its partition is given
/// up, without fail-stop: the set's `run` ends with `TaskNotStopped` (the
/// worker exits 1), the partition is never owned twice at once, and that
/// process never claims it again.
async fn stuck_task_without_fail_stop(mode: Mode) {
    let mut rig = Rig::new(mode, "stuck");
    let (victim, asked) = stuck_start(&mut rig, &[]).await;
    rig.expect_exit(victim, Some(1));
    let stuck = rig
        .cluster
        .wait_for("a term reported stuck", SOON, |events| {
            terms(events).into_iter().find(|t| {
                t.worker == victim && t.reports.iter().any(|(_, reason)| reason.is_none())
            })
        })
        .await;
    assert_eq!(stuck.lease, STUCK_PARTITION, "{}", rig.record());
    // Until the process exits: no claim of the stuck partition again.
    let claimed_again = rig
        .cluster
        .wait_for(
            &format!("worker {victim} to exit, or to claim {STUCK_PARTITION} again"),
            LEASE + SOON,
            |events| {
                let again: Vec<Term> = terms(events)
                    .into_iter()
                    .filter(|t| t.worker == victim && t.lease == stuck.lease)
                    .filter(|t| t.start > stuck.start)
                    .collect();
                let exited = events
                    .iter()
                    .any(|e| e.worker == victim && matches!(e.what, What::Exited { .. }));
                (exited || !again.is_empty()).then_some(again)
            },
        )
        .await;
    assert!(
        claimed_again.is_empty(),
        "{mode:?}: {STUCK_PARTITION} claimed again while its stuck task may run: {claimed_again:?}\n{}",
        rig.record()
    );
    let exited = exit_of(&rig, victim).await;
    let taken = rig.wait_taken_over(victim, asked).await;
    // What the worker prints when the set's run returned TaskNotStopped.
    let ended = format!("Error: {}", blob_mutex::Error::TaskNotStopped);
    assert!(
        !rig.cluster.log_lines(victim, &ended).is_empty(),
        "{mode:?}: the set's run did not end with TaskNotStopped\n{}",
        rig.cluster.dump_all()
    );
    println!(
        "{mode:?}: stuck task without fail-stop: run ended with TaskNotStopped, exited {:.3}s after the \
         partition was given up; owned again {:.3}s after",
        (exited - asked).as_secs_f64(),
        (taken - asked).as_secs_f64()
    );
    rig.finish().await;
}

/// The partition whose task blocks: a set gives up the last of its
/// partitions by name when a newcomer joins.
const STUCK_PARTITION: &str = "p03";

/// Starts a victim whose task blocks its thread once cancelled (`extra`
/// added), lets it lead (or own every partition), and has its task
/// cancelled: SIGTERM for the mutex; a worker of higher priority, so a
/// planned handover, for [`Mode::Handover`]; a newcomer, so that the set
/// gives the stuck partition up, for a set. Returns the victim and when
/// the stop was asked.
async fn stuck_start(rig: &mut Rig, extra: &[&str]) -> (usize, std::time::Duration) {
    let mut flags = vec!["--block-on-cancel"];
    flags.extend(extra);
    if rig.mode.is_set() {
        flags.extend(["--block-partition", STUCK_PARTITION]);
    }
    let victim = rig.spawn(&flags);
    if rig.mode.is_set() {
        rig.wait_owned(&[PARTITIONS]).await;
        let asked = rig.cluster.now();
        rig.spawn(&[]);
        return (victim, asked);
    }
    rig.wait_leading(victim).await;
    rig.wait_renewed(victim).await;
    if rig.mode == Mode::Handover {
        let asked = rig.cluster.now();
        rig.spawn(&[]);
        return (victim, asked);
    }
    rig.spawn(&[]);
    (victim, rig.cluster.terminate(victim))
}

/// Waits for `worker` to exit; returns when (cluster clock).
async fn exit_of(rig: &Rig, worker: usize) -> Duration {
    rig.cluster
        .wait_for(
            &format!("worker {worker} to exit"),
            LEASE + SOON,
            |events| {
                events
                    .iter()
                    .find(|e| e.worker == worker && matches!(e.what, What::Exited { .. }))
                    .map(|e| e.at)
            },
        )
        .await
}

fn assert_reason(rig: &Rig, term: &Term, want: &str) {
    assert_eq!(
        term.reports[0].1.as_deref(),
        Some(want),
        "{:?}: the end of {term:?}\n{}",
        rig.mode,
        rig.record()
    );
}
