//! A leader task that ignores cancellation: it is aborted after its grace,
//! the lease is released only after that, and the abort is reported. A task
//! that cannot even be aborted (it blocks its thread) makes a fail-stop
//! process exit, leaving the lease to expire.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex::term::FAIL_STOP_EXIT_CODE;
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::workers::{Cluster, Spec, What};

const LEASE: Duration = Duration::from_secs(15);
const GRACE: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_task_that_ignores_cancellation_is_aborted_before_the_lease_is_released() {
    let container = azurite::unique_container("ignore-cancel");
    // One proxy per worker, to find the leader's release in its log.
    let proxies = Proxy::start_many(2, azurite::shared().port);
    let mut cluster = Cluster::new();
    cluster.spawn_workers(
        2,
        &container,
        "ignore-cancel",
        &[
            "--acquire-retry-ms",
            "500",
            "--grace-ms",
            "1000",
            "--ignore-cancel",
        ],
        |i| proxies[i].connection_string(),
    );
    let (leader, _, _) = cluster.wait_first_leader().await;
    // A moment of steady leadership before the signal.
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

#[tokio::test]
async fn a_task_that_cannot_be_aborted_makes_a_fail_stop_process_exit() {
    let container = azurite::unique_container("fail-stop");
    let proxies = Proxy::start_many(2, azurite::shared().port);
    let mut cluster = Cluster::new();
    // The unabortable worker first, so that it leads: once cancelled, its
    // task blocks its thread.
    let stuck = cluster.spawn(Spec::worker(
        "stuck",
        &proxies[0].connection_string(),
        &container,
        "fail-stop",
        &[
            "--acquire-retry-ms",
            "500",
            "--grace-ms",
            "1000",
            "--fail-stop",
            "--block-on-cancel",
        ],
    ));
    let (leader, _, _) = cluster.wait_first_leader().await;
    assert_eq!(leader, stuck);
    let follower = cluster.spawn(Spec::worker(
        "w1",
        &proxies[1].connection_string(),
        &container,
        "fail-stop",
        &["--acquire-retry-ms", "500"],
    ));
    blob_mutex_testkit::wait_for(
        "the follower to campaign",
        Duration::from_secs(10),
        || async {
            proxies[1]
                .log()
                .iter()
                .any(|r| r.is("acquire"))
                .then_some(())
        },
    )
    .await;

    let sent = cluster.terminate(stuck);
    let status = cluster.wait_exit(stuck, Duration::from_secs(10)).await;
    // The reader thread records the exit when it reaps the process, which
    // may be just after `wait_exit` saw it.
    let exited_at = cluster
        .wait_for(
            "the exit to be recorded",
            Duration::from_secs(10),
            |events| {
                events
                    .iter()
                    .find(|e| e.worker == stuck && matches!(e.what, What::Exited { .. }))
                    .map(|e| e.at)
            },
        )
        .await;
    assert_eq!(
        status.code(),
        Some(FAIL_STOP_EXIT_CODE),
        "{}",
        cluster.dump_all()
    );
    // Grace, then an abort that cannot take effect, then the fail-stop exit.
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

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a thread of `pid` is blocked writing to a full pipe.
fn blocked_on_a_pipe(pid: u32) -> bool {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    threads.flatten().any(|thread| {
        std::fs::read_to_string(thread.path().join("wchan")).is_ok_and(|w| w.contains("pipe_write"))
    })
}

/// Standard error is a pipe nobody reads, full: every thread that logs
/// blocks. The fail-stop exit must not wait for its own log line.
#[tokio::test]
async fn fail_stop_exits_even_when_standard_error_is_a_full_pipe() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let container = azurite::unique_container("full-pipe");
    let mut worker = Command::new(blob_mutex_testkit::workers::worker_bin())
        .args([&container, "full-pipe", "stuck"])
        .args([
            "--fail-stop",
            "--block-on-cancel",
            "--grace-ms",
            "1000",
            "--work-ms",
            "1",
        ])
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            azurite::shared().connection_string(),
        )
        // A log line per millisecond of work fills the pipe in about a second.
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the worker");
    let _unread_stderr = worker.stderr.take();
    let mut stdout = BufReader::new(worker.stdout.take().unwrap()).lines();
    // Killed whatever happens, even if this test fails.
    let mut worker = KillOnDrop(worker);
    let leading = tokio::task::spawn_blocking(move || {
        stdout.find(|l| l.as_ref().is_ok_and(|l| l.starts_with("LEADING")))
    });
    let line = tokio::time::timeout(Duration::from_secs(20), leading)
        .await
        .expect("the worker leads")
        .unwrap();
    assert!(line.is_some(), "a LEADING line");
    let pid = worker.0.id();
    blob_mutex_testkit::wait_for(
        "the log to fill the pipe",
        Duration::from_secs(20),
        || async { blocked_on_a_pipe(pid).then_some(()) },
    )
    .await;

    let sent = std::time::Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code =
        blob_mutex_testkit::wait_for("the worker to exit", LEASE + Duration::from_secs(5), || {
            let exited = worker.0.try_wait().unwrap();
            async move { exited }
        })
        .await
        .code();
    assert_eq!(code, Some(FAIL_STOP_EXIT_CODE));
    let took = sent.elapsed();
    assert!(took < LEASE, "exited {took:?} after SIGTERM");
    println!("fail-stop with a full stderr pipe: exited {took:?} after SIGTERM");
}

/// The child's part of
/// [`a_fail_stop_guard_whose_holder_blocks_the_runtime_at_the_abort_exits_before_its_lease_could_expire`],
/// run in a process of its own (the test binary again, with
/// `BLOB_MUTEX_BLOCKING_HOLDER` set). On a current-thread runtime with the
/// real clock and the memory store: a guard's holder that never beats stops
/// the term (watchdog) and never releases. At `deadline − STOP_SLACK` the
/// engine gives up on the release and aborts the term's tasks; the holder
/// wakes then too, lets the aborted tasks end (it learns of it from a
/// sub-task of the term that the abort drops), and blocks the runtime's
/// only thread for 3 s before the engine can run again. Prints when the
/// lease could expire, in Unix milliseconds, first.
async fn blocking_holder() {
    use blob_mutex::{term::STOP_SLACK, testing::MemoryLeaseStore};
    use blob_mutex::{BlobDistributedMutex, MutexOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::SystemTime;
    use tokio::time::{sleep_until, Instant};

    /// Says it was dropped.
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    let options = MutexOptions::default()
        .with_holder("blocking".to_owned())
        .with_heartbeat_timeout(Duration::from_secs(2))
        .with_fail_stop(true);
    let margin = options.effective_safety_margin();
    let store = MemoryLeaseStore::new("fail-stop-guard");
    let mutex = BlobDistributedMutex::with_store_for_guards(store, options).unwrap();
    let guard = mutex.acquire().await.unwrap();
    let aborted = Arc::new(AtomicBool::new(false));
    let dropped = Dropped(aborted.clone());
    let _sub_task = guard.context().spawn(async move {
        let _dropped = dropped;
        std::future::pending::<Result<(), std::io::Error>>().await
    });
    guard.cancelled().await;
    // Renewals go on for the stop grace: wait until the deadline stops moving.
    let deadline = loop {
        let deadline = guard.deadline();
        sleep_until(deadline - STOP_SLACK).await;
        if guard.deadline() == deadline {
            break deadline;
        }
    };
    let left = (deadline + margin).saturating_duration_since(Instant::now());
    let unix = (SystemTime::now() + left)
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    println!("lease-expires-unix-ms {}", unix.as_millis());
    // To the back of the runtime's queue, behind the aborted tasks, until
    // they have ended: the engine, woken by their end, is queued behind.
    while !aborted.load(Ordering::SeqCst) {
        to_the_back().await;
    }
    println!("blocking");
    std::thread::sleep(Duration::from_secs(3));
    drop(guard);
    println!("the runtime ran again");
}

/// Pending once, with a wake at once: the task goes to the back of the
/// runtime's queue (`tokio::task::yield_now` waits for the next poll of
/// the timers and I/O instead).
async fn to_the_back() {
    let mut queued = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut queued, true) {
            return std::task::Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// A guard's holder that blocks the runtime right after the engine gave up
/// waiting for its release: fail-stop, which for a guard waits for the
/// release and not only for the waiter task the engine aborts, exits the
/// process before the lease could expire, in every one of 20 runs at once
/// (a run whose engine was too late for the holder to block in that
/// moment exits too, by fail-stop's thread; at least one must have
/// blocked there).
#[tokio::test]
async fn a_fail_stop_guard_whose_holder_blocks_the_runtime_at_the_abort_exits_before_its_lease_could_expire(
) {
    use std::process::{Command, Stdio};
    use std::time::SystemTime;

    const NAME: &str =
        "a_fail_stop_guard_whose_holder_blocks_the_runtime_at_the_abort_exits_before_its_lease_could_expire";
    if std::env::var_os("BLOB_MUTEX_BLOCKING_HOLDER").is_some() {
        // A task of the runtime, as the engine's are: the test's own future
        // is polled only between the runtime's batches of tasks.
        return tokio::spawn(blocking_holder()).await.unwrap();
    }
    let runs: Vec<_> = (0..20)
        .map(|_| {
            std::thread::spawn(|| {
                let child = Command::new(std::env::current_exe().unwrap())
                    .arg(crate::support::test_path(module_path!(), NAME))
                    .args(["--exact", "--nocapture", "--test-threads=1"])
                    .env("BLOB_MUTEX_BLOCKING_HOLDER", "1")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                let output = child.wait_with_output().unwrap();
                (output, SystemTime::now())
            })
        })
        .collect();
    let mut blocked = 0;
    for run in runs {
        let (output, exited) = run.join().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let expires: u64 = stdout
            .lines()
            // libtest's own "test … ... " may begin the line.
            .find_map(|l| l.split("lease-expires-unix-ms ").nth(1))
            .unwrap_or_else(|| panic!("the term never came to its end: {stdout}"))
            .parse()
            .unwrap();
        let exited_ms = exited
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert_eq!(
            output.status.code(),
            Some(FAIL_STOP_EXIT_CODE),
            "{:?}: {stdout}",
            output.status
        );
        assert!(
            exited_ms < u128::from(expires),
            "exited {} ms after the lease could expire: {stdout}",
            exited_ms - u128::from(expires)
        );
        blocked += usize::from(stdout.lines().any(|l| l == "blocking"));
    }
    assert!(blocked > 0, "no holder blocked the runtime after the abort");
}

/// The child's part of
/// [`a_schedule_whose_job_blocks_its_thread_exits_before_its_lease_could_expire`]:
/// a schedule of every second on the memory store with the real clock,
/// its options the defaults but for a grace of 1 s. The first slot's job
/// prints when the lease could expire at the latest (its term's deadline
/// and the safety margin, in Unix milliseconds), the schedule is stopped,
/// and the job, told to stop, blocks its thread.
#[cfg(all(feature = "testing", feature = "schedule"))]
async fn blocking_job() {
    use blob_mutex::schedule::{BlobSchedule, ScheduleOptions};
    use blob_mutex::testing::MemoryLeaseStore;
    use blob_mutex::{CancellationToken, Error, MutexOptions};
    use std::time::SystemTime;
    use tokio::time::Instant;

    let mutex = MutexOptions::default()
        .with_holder("blocking".to_owned())
        .with_stop_grace(Duration::from_secs(1));
    let margin = mutex.effective_safety_margin();
    let options = ScheduleOptions::new("* * * * * *").with_mutex(mutex);
    let schedule = BlobSchedule::with_store(MemoryLeaseStore::new("c/blocking"), options).unwrap();
    let token = CancellationToken::new();
    let stop = token.clone();
    let ran = schedule
        .run(token, move |_, ctx| {
            let stop = stop.clone();
            async move {
                let left = (ctx.deadline() + margin).saturating_duration_since(Instant::now());
                let unix = (SystemTime::now() + left)
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap();
                println!("lease-expires-unix-ms {}", unix.as_millis());
                stop.cancel();
                ctx.cancelled().await;
                println!("blocking");
                std::thread::sleep(LEASE * 4);
                Ok::<(), Error>(())
            }
        })
        .await;
    println!("the schedule returned: {ran:?}");
}

/// A schedule keeps "never two jobs at once" for a job that blocks its
/// thread once told to stop: with the schedule's default options the
/// process exits (fail-stop) before the job's lease could expire, so no
/// other host can run a slot while the job still runs.
#[cfg(all(feature = "testing", feature = "schedule"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_whose_job_blocks_its_thread_exits_before_its_lease_could_expire() {
    use std::process::Stdio;
    use std::time::SystemTime;

    const NAME: &str = "a_schedule_whose_job_blocks_its_thread_exits_before_its_lease_could_expire";
    if std::env::var_os("BLOB_MUTEX_BLOCKING_JOB").is_some() {
        return blocking_job().await;
    }
    let output = tokio::process::Command::new(std::env::current_exe().unwrap())
        .arg(crate::support::test_path(module_path!(), NAME))
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env("BLOB_MUTEX_BLOCKING_JOB", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output();
    let output = tokio::time::timeout(LEASE * 3, output)
        .await
        .expect("the child exits")
        .unwrap();
    let exited = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let expires: u128 = stdout
        .lines()
        .find_map(|l| l.split("lease-expires-unix-ms ").nth(1))
        .unwrap_or_else(|| panic!("no job ran: {stdout}"))
        .parse()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(FAIL_STOP_EXIT_CODE),
        "{:?}: {stdout}",
        output.status
    );
    assert!(stdout.lines().any(|l| l.ends_with("blocking")), "{stdout}");
    assert!(
        exited < expires,
        "exited {} ms after the lease could expire: {stdout}",
        exited - expires
    );
}
