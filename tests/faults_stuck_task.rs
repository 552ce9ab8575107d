//! A leader task that ignores cancellation: it is aborted after its grace,
//! the lease is released only after that, and the abort is reported. A task
//! that cannot even be aborted (it blocks its thread) makes a fail-stop
//! process exit, leaving the lease to expire.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

mod support;

use std::process::Command;
use std::time::Duration;

use blob_mutex::{
    BlobDistributedMutex, BlobSettings, CancellationToken, MutexOptions, FAIL_STOP_EXIT_CODE,
};
use support::azurite;
use support::proxy::Proxy;
use support::workers::{Cluster, Spec, What};

const LEASE: Duration = Duration::from_secs(15);
const GRACE: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_task_that_ignores_cancellation_is_aborted_before_the_lease_is_released() {
    let container = azurite::unique_container("ignore-cancel");
    let proxies: Vec<Proxy> = (0..2)
        .map(|_| Proxy::start(azurite::shared().port))
        .collect();
    let mut cluster = Cluster::new();
    for (i, proxy) in proxies.iter().enumerate() {
        cluster.spawn(Spec::worker(
            &format!("w{i}"),
            &proxy.connection_string(),
            &container,
            "ignore-cancel",
            &[
                "--acquire-retry-ms",
                "500",
                "--grace-ms",
                "1000",
                "--ignore-cancel",
            ],
        ));
    }
    let (leader, _, _) = cluster
        .wait_leading_after(Duration::ZERO, Duration::from_secs(20))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let sent = cluster.terminate(leader);
    let aborted_at = cluster
        .wait_for(
            "the abort to be reported",
            Duration::from_secs(10),
            |events| {
                events
                    .iter()
                    .find(|e| e.worker == leader && e.what == What::Aborted && e.at >= sent)
                    .map(|e| e.at)
            },
        )
        .await;
    let (next, _, next_at) = cluster
        .wait_leading_after(sent, Duration::from_secs(10))
        .await;
    let status = cluster.wait_exit(leader, Duration::from_secs(10)).await;
    assert!(status.success(), "{status}");

    // The task got its whole grace: it was cancelled no earlier than the
    // signal was sent.
    assert!(
        aborted_at >= sent + GRACE,
        "aborted {:?} after the signal, before its grace of {GRACE:?}",
        aborted_at - sent
    );
    // The release reached storage only after the grace (so after the abort).
    let release = proxies[leader]
        .log()
        .into_iter()
        .filter(|r| r.is("release"))
        .find_map(|r| r.forwarded_at)
        .expect("the lease was released");
    let released_at = cluster.at(release);
    assert!(
        released_at >= sent + GRACE,
        "released {:?} after the signal, while the task could still run",
        released_at - sent
    );
    assert!(
        cluster.log_lines(leader, "STOPPED").is_empty(),
        "the task never returns, so it never prints STOPPED"
    );
    assert_ne!(next, leader);
    assert!(next_at > aborted_at);
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    println!(
        "ignored cancellation: aborted {:.3}s after SIGTERM (grace {:.3}s), lease released {:.3}s after it, \
         follower led {:.3}s after it; {}",
        (aborted_at - sent).as_secs_f64(),
        GRACE.as_secs_f64(),
        (released_at - sent).as_secs_f64(),
        (next_at - sent).as_secs_f64(),
        history.summary()
    );
}

/// Environment variable that makes this test binary act as an unabortable
/// worker (see `unabortable_worker_process`).
const CHILD: &str = "BLOB_MUTEX_UNABORTABLE_WORKER";

#[tokio::test]
async fn a_task_that_cannot_be_aborted_makes_a_fail_stop_process_exit() {
    let container = azurite::unique_container("fail-stop");
    let proxies: Vec<Proxy> = (0..2)
        .map(|_| Proxy::start(azurite::shared().port))
        .collect();
    let mut cluster = Cluster::new();
    // The unabortable worker first, so that it leads.
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--exact",
            "unabortable_worker_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(
            CHILD,
            format!("{}|{container}|fail-stop", proxies[0].connection_string()),
        );
    let stuck = cluster.spawn(Spec {
        name: "stuck".into(),
        command: child,
    });
    let (leader, _, _) = cluster
        .wait_leading_after(Duration::ZERO, Duration::from_secs(20))
        .await;
    assert_eq!(leader, stuck);
    let follower = cluster.spawn(Spec::worker(
        "w1",
        &proxies[1].connection_string(),
        &container,
        "fail-stop",
        &["--acquire-retry-ms", "500"],
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let sent = cluster.terminate(stuck);
    let status = cluster.wait_exit(stuck, Duration::from_secs(10)).await;
    let exited_at = cluster
        .events()
        .iter()
        .find(|e| e.worker == stuck && matches!(e.what, What::Exited { .. }))
        .map(|e| e.at)
        .expect("exit recorded");
    assert_eq!(
        status.code(),
        Some(FAIL_STOP_EXIT_CODE),
        "{}",
        cluster.dump_all()
    );
    // Grace, then an abort that cannot complete (250 ms), then exit.
    assert!(exited_at - sent >= GRACE, "{:?}", exited_at - sent);
    assert!(
        exited_at - sent <= GRACE + Duration::from_secs(2),
        "the fail-stop exit came {:?} after the signal",
        exited_at - sent
    );
    assert!(
        !cluster.log_lines(stuck, "could not be stopped").is_empty(),
        "the stuck task is reported\n{}",
        cluster.dump_all()
    );
    // The lease was left to expire, not released while the thread was stuck.
    let log = proxies[0].log();
    assert!(
        !log.iter().any(|r| r.is("release")),
        "a lease was released by the process whose task was stuck"
    );
    let expiry = cluster.at(proxies[0]
        .last_lease_request_forwarded()
        .expect("lease requests reached storage"))
        + LEASE;
    let (next, _, next_at) = cluster
        .wait_leading_after(sent, LEASE + Duration::from_secs(5))
        .await;
    assert_eq!(next, follower);
    assert!(
        next_at >= expiry,
        "{next_at:?} < {expiry:?}\n{}",
        cluster.dump()
    );
    assert!(exited_at < expiry);
    let history = cluster.history();
    history.assert_safe(&cluster.dump());
    println!(
        "fail-stop: exited with {FAIL_STOP_EXIT_CODE} {:.3}s after SIGTERM, {:.3}s before the earliest \
         server-side expiry; follower led {:.3}s after that expiry; {}",
        (exited_at - sent).as_secs_f64(),
        (expiry - exited_at).as_secs_f64(),
        (next_at - expiry).as_secs_f64(),
        history.summary()
    );
}

/// Not a test by itself: when `BLOB_MUTEX_UNABORTABLE_WORKER` is set (by
/// the test above, which runs this binary again), it is a worker process whose
/// leader task blocks its thread once cancelled, so that it can be neither
/// stopped nor aborted. Without the variable it returns at once.
#[test]
fn unabortable_worker_process() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    // The test harness has printed `test <name> ... ` without a line end.
    println!();
    let mut parts = spec.split('|');
    let (cs, container, blob) = (
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
    );
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,blob_mutex=debug".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let settings = BlobSettings::from_connection_string(&cs, container, blob).unwrap();
        let options = MutexOptions::default()
            .with_holder("stuck".into())
            .with_acquire_retry(Duration::from_millis(500))
            .with_stop_grace(GRACE)
            .with_fail_stop(true);
        let mutex = BlobDistributedMutex::with_options(settings, options, |ctx| async move {
            println!("LEADING epoch={} id={}", ctx.epoch(), ctx.holder());
            ctx.cancelled().await;
            // Blocks the runtime thread: an abort cannot take effect.
            std::thread::sleep(Duration::from_secs(3600));
            Ok::<(), std::io::Error>(())
        })
        .unwrap();
        let token = CancellationToken::new();
        let on_signal = token.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
            term.recv().await;
            on_signal.cancel();
        });
        let result = mutex.run_task_when_mutex_acquired(token).await;
        println!("EXITED id=stuck result={result:?}");
    });
}
