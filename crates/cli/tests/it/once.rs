//! `blob-mutex run --once`, with and without a completion record, as
//! separate processes against Azurite: three hosts deploying a migration
//! with `--done-key` run it once and all exit 0; a host still on an older
//! key after a newer one ran skips it (every key is kept), and a key that
//! a full record cannot keep exits 1 before the command runs; hosts whose cron fires
//! one after the other, or all the time, with `--at-most-every` run the
//! job once per period, never overlapping (three hosts' cron every 10 s
//! with a 30 s period for 90 s: 3 or 4 runs, on both backends at once); a command that failed, was
//! stopped by a signal, whose `run` was killed, or whose record could not
//! be written leaves no record and runs again; a leader frozen past its
//! lease with its record write in flight (held by the fault proxy) cannot
//! record: storage refuses the write once it lands, the next host runs the
//! command, and the woken leader exits 6; bad combinations and a quorum
//! are refused with code 2.
//!
//! The command is a small `sh` script that appends its holder's name to
//! the test's `ran` file, sleeps a little, and exits with the code given.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use blob_mutex_testkit::azurite::{self, Azurite};
use tokio::process::Command;

use crate::support::{blob_mutex_on, BIN};

/// The command: `$1` the scratch directory, `$2` the exit code, `$3` how
/// long to sleep after the line is written (`$0` is this binary).
const SCRIPT: &str = r#"echo "$BLOB_MUTEX_HOLDER" >> "$1/ran"; sleep "$3"; exit "$2""#;

/// A time within which a run on a loaded machine has certainly ended.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// One test's container, blob and scratch directory.
struct Case {
    container: String,
    dir: PathBuf,
}

impl Case {
    fn new(name: &str) -> Case {
        let container = azurite::unique_container(&format!("once-{name}"));
        let dir = std::env::temp_dir().join(format!("blob-mutex-{container}"));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Case { container, dir }
    }

    /// `blob-mutex run` for `holder` with `flags`, running [`SCRIPT`],
    /// which exits with `code` after `sleep` seconds.
    fn run(&self, holder: &str, flags: &[&str], code: i32, sleep: &str) -> Command {
        self.run_script(holder, flags, SCRIPT, &[&code.to_string(), sleep])
    }

    /// `blob-mutex run` for `holder` with `flags`, running `script` with
    /// this binary as `$0`, the scratch directory as `$1`, then `args`.
    fn run_script(&self, holder: &str, flags: &[&str], script: &str, args: &[&str]) -> Command {
        let mut command = blob_mutex_on(azurite::shared().connection_string());
        command
            .args(["run", "--container", &self.container, "--blob", "lock"])
            .args(["--holder", holder, "--acquire-retry", "200ms"])
            .args(flags)
            .args(["--", "sh", "-c", script, BIN])
            .arg(&self.dir)
            .args(args);
        command
    }

    /// The holders whose command ran, in order.
    fn ran(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("ran"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `command` to its end, within [`RUN_LIMIT`].
async fn finish(mut command: Command) -> Output {
    tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .expect("blob-mutex run ended in time")
        .expect("run blob-mutex")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn said_skipped(output: &Output) -> bool {
    stderr(output).contains("skipped, the command did not run")
}

#[tokio::test]
async fn three_hosts_deploying_together_run_the_migration_once_and_all_exit_0() {
    let case = Case::new("deploy");
    let flags = ["--once", "--done-key", "migrate-v1"];
    let hosts = ["h1", "h2", "h3"];
    let (a, b, c) = tokio::join!(
        finish(case.run(hosts[0], &flags, 0, "1")),
        finish(case.run(hosts[1], &flags, 0, "1")),
        finish(case.run(hosts[2], &flags, 0, "1")),
    );
    let outputs = [a, b, c];
    for (host, output) in hosts.iter().zip(&outputs) {
        assert_eq!(output.status.code(), Some(0), "{host}: {}", stderr(output));
    }
    assert_eq!(case.ran().len(), 1, "ran: {:?}", case.ran());
    let skipped: Vec<_> = outputs.iter().filter(|o| said_skipped(o)).collect();
    assert_eq!(
        skipped.len(),
        2,
        "{:?}",
        outputs.iter().map(stderr).collect::<Vec<_>>()
    );
    assert!(
        stderr(skipped[0]).contains("\"migrate-v1\" is done"),
        "{}",
        stderr(skipped[0])
    );

    // The next deploy, on every host: nobody runs it.
    let (a, b, c) = tokio::join!(
        finish(case.run(hosts[0], &flags, 0, "0")),
        finish(case.run(hosts[1], &flags, 0, "0")),
        finish(case.run(hosts[2], &flags, 0, "0")),
    );
    let again = [a, b, c];
    for (host, output) in hosts.iter().zip(&again) {
        assert_eq!(output.status.code(), Some(0), "{host}: {}", stderr(output));
        assert!(said_skipped(output), "{host}: {}", stderr(output));
    }
    assert_eq!(case.ran().len(), 1, "ran: {:?}", case.ran());

    // A new key runs again.
    let next = finish(case.run("h2", &["--once", "--done-key", "migrate-v2"], 0, "0")).await;
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    assert_eq!(case.ran().len(), 2, "ran: {:?}", case.ran());
}

#[tokio::test]
async fn cron_firing_on_several_hosts_one_after_the_other_runs_the_job_once_per_period() {
    let case = Case::new("cron");
    let flags = ["--once", "--at-most-every", "1h"];
    for host in ["h1", "h2", "h3", "h1"] {
        let output = finish(case.run(host, &flags, 0, "0")).await;
        assert_eq!(output.status.code(), Some(0), "{host}: {}", stderr(&output));
    }
    assert_eq!(case.ran(), ["h1"]);
    // A host that makes one attempt only finds the record before it
    // campaigns: skipped, not "held by another instance".
    let late = finish(case.run("h3", &[&flags[..], &["--wait", "0"]].concat(), 0, "0")).await;
    assert_eq!(late.status.code(), Some(0), "{}", stderr(&late));
    assert!(said_skipped(&late), "{}", stderr(&late));
    assert!(
        stderr(&late).contains("on storage's clock, less than the period of 3600 s"),
        "{}",
        stderr(&late)
    );
}

#[tokio::test]
async fn a_host_still_on_the_old_key_after_the_new_one_ran_skips_it() {
    let case = Case::new("keys");
    for (host, key) in [("h1", "migrate-v1"), ("h2", "migrate-v2")] {
        let output = finish(case.run(host, &["--once", "--done-key", key], 0, "0")).await;
        assert_eq!(output.status.code(), Some(0), "{host}: {}", stderr(&output));
    }
    // A host not yet upgraded, or a rollback.
    let old = finish(case.run("h3", &["--once", "--done-key", "migrate-v1"], 0, "0")).await;
    assert_eq!(old.status.code(), Some(0), "{}", stderr(&old));
    assert!(
        stderr(&old).contains("\"migrate-v1\" is done"),
        "{}",
        stderr(&old)
    );
    assert_eq!(case.ran(), ["h1", "h2"]);
}

#[tokio::test]
async fn a_key_the_full_record_cannot_keep_exits_1_before_the_command_runs() {
    let case = Case::new("full");
    // A record of 16 069 keys of 256 bytes, as many as fit, put in place
    // by a plain `run`'s command.
    let keys: Vec<String> = (0..16_069).map(|n| format!("key={n:0256}")).collect();
    let record = format!("blob-mutex record v2\nat=1\n{}\n", keys.join("\n"));
    std::fs::write(case.dir.join("record"), record).expect("write the record");
    let script = r#""$0" state put --input "$1/record""#;
    let put = finish(case.run_script("h0", &[], script, &[])).await;
    assert_eq!(put.status.code(), Some(0), "{}", stderr(&put));

    let another = format!("{:0256}", 16_069);
    let full = finish(case.run("h1", &["--once", "--done-key", &another], 0, "0")).await;
    assert_eq!(full.status.code(), Some(1), "{}", stderr(&full));
    assert!(
        stderr(&full).contains("holds 16069 keys") && stderr(&full).contains("another lease blob"),
        "{}",
        stderr(&full)
    );
    assert!(case.ran().is_empty(), "ran: {:?}", case.ran());
    let kept = format!("{:0256}", 0);
    let done = finish(case.run("h2", &["--once", "--done-key", &kept], 0, "0")).await;
    assert!(said_skipped(&done), "{}", stderr(&done));
}

#[tokio::test]
async fn a_failed_command_leaves_no_record_and_the_next_run_runs_it_again() {
    let case = Case::new("failed");
    let flags = ["--once", "--done-key", "migrate-v1"];
    let failed = finish(case.run("h1", &flags, 3, "0")).await;
    assert_eq!(failed.status.code(), Some(3), "{}", stderr(&failed));
    assert!(!said_skipped(&failed), "{}", stderr(&failed));

    let retried = finish(case.run("h2", &flags, 0, "0")).await;
    assert_eq!(retried.status.code(), Some(0), "{}", stderr(&retried));
    assert!(!said_skipped(&retried), "{}", stderr(&retried));
    assert_eq!(case.ran(), ["h1", "h2"]);

    let done = finish(case.run("h3", &flags, 0, "0")).await;
    assert!(said_skipped(&done), "{}", stderr(&done));
    assert_eq!(case.ran(), ["h1", "h2"]);
}

#[tokio::test]
async fn once_without_a_record_exits_with_the_commands_code_and_runs_each_time() {
    let case = Case::new("plain");
    let first = finish(case.run("h1", &["--once"], 7, "0")).await;
    assert_eq!(first.status.code(), Some(7), "{}", stderr(&first));
    let second = finish(case.run("h2", &["--once"], 0, "0")).await;
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert_eq!(case.ran(), ["h1", "h2"]);
}

#[tokio::test]
async fn a_success_whose_record_storage_refused_exits_6_and_runs_again() {
    let case = Case::new("unrecorded");
    // The command breaks its own lease, then exits 0 at once: the record
    // is written under a lease that storage no longer honours.
    let script = format!(
        r#"echo "$BLOB_MUTEX_HOLDER" >> "$1/ran"; "$0" break --container {} --blob lock >/dev/null"#,
        case.container
    );
    let flags = ["--once", "--done-key", "migrate-v1"];
    let unrecorded = finish(case.run_script("h1", &flags, &script, &[])).await;
    assert_eq!(unrecorded.status.code(), Some(6), "{}", stderr(&unrecorded));
    assert!(
        stderr(&unrecorded).contains("completion record")
            && stderr(&unrecorded).contains("run it again"),
        "{}",
        stderr(&unrecorded)
    );

    let next = finish(case.run("h2", &flags, 0, "0")).await;
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    assert!(!said_skipped(&next), "{}", stderr(&next));
    assert_eq!(case.ran(), ["h1", "h2"]);
}

#[tokio::test]
async fn bad_combinations_are_refused_with_code_2_before_anything_runs() {
    let case = Case::new("usage");
    for (flags, says) in [
        (&["--done-key", "k"][..], "--done-key needs --once"),
        (&["--at-most-every", "1h"], "--at-most-every needs --once"),
        (
            &["--once", "--forever"],
            "--once and --forever exclude each other",
        ),
        (
            &["--once", "--done-key", "k", "--forever"],
            "exclude each other",
        ),
        (
            &["--once", "--at-most-every", "0"],
            "--at-most-every: must be at least 1 s",
        ),
        (
            &["--once", "--at-most-every", "500ms"],
            "--at-most-every: must be at least 1 s",
        ),
        (
            &["--once", "--done-key", ""],
            "--done-key: must be 1 to 256 bytes",
        ),
    ] {
        let output = finish(case.run("h1", flags, 0, "0")).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{flags:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(says),
            "{flags:?}: {}",
            stderr(&output)
        );
    }
    assert!(case.ran().is_empty(), "ran: {:?}", case.ran());
}

#[tokio::test]
async fn a_quorum_refuses_completion_records_with_code_2_and_says_why() {
    let case = Case::new("quorum");
    let others = [Azurite::start(), Azurite::start()];
    let file = case.dir.join("accounts");
    let lines: Vec<_> = others.iter().map(Azurite::connection_string).collect();
    std::fs::write(&file, lines.join("\n")).expect("write the accounts file");
    let accounts_file = file.display().to_string();
    for record in [
        &["--done-key", "migrate-v1"][..],
        &["--at-most-every", "1h"],
    ] {
        let mut flags = vec!["--accounts-file", &accounts_file, "--once"];
        flags.extend_from_slice(record);
        let output = finish(case.run("h1", &flags, 0, "0")).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{record:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("a quorum of storage accounts keeps no state"),
            "{record:?}: {}",
            stderr(&output)
        );
    }
    assert!(case.ran().is_empty(), "ran: {:?}", case.ran());
}

#[tokio::test]
async fn a_command_stopped_by_a_signal_leaves_no_record_even_when_it_exits_0() {
    let case = Case::new("signal");
    let flags = ["--once", "--done-key", "migrate-v1"];
    let script = r#"trap 'exit 0' TERM; echo "$BLOB_MUTEX_HOLDER" >> "$1/ran"; sleep 60 & wait"#;
    let mut run = case
        .run_script("h1", &flags, script, &[])
        .spawn()
        .expect("start run");
    blob_mutex_testkit::wait_for("the command to start", RUN_LIMIT, || async {
        (!case.ran().is_empty()).then_some(())
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(run.id().expect("running")).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal run");
    let status = tokio::time::timeout(RUN_LIMIT, run.wait())
        .await
        .expect("run ended in time")
        .expect("wait for run");
    assert_eq!(status.code(), Some(0), "the command's own status");

    let next = finish(case.run("h2", &flags, 0, "0")).await;
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    assert!(!said_skipped(&next), "{}", stderr(&next));
    assert_eq!(case.ran(), ["h1", "h2"]);
}

/// How many times the job of the cron test has started.
fn job_starts(case: &Case) -> usize {
    std::fs::read_to_string(case.dir.join("times"))
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("start"))
        .count()
}

/// One host's cron: `run --once --at-most-every PERIOD` again and again,
/// 300 ms after the last one ended, each exiting 0, until the job has
/// started `runs` times (or [`RUN_LIMIT`] has passed).
async fn cron(case: &Case, host: &str, period: &str, runs: usize) {
    let flags = ["--once", "--at-most-every", period];
    let script = r#"echo "start $(date +%s%N)" >> "$1/times"; sleep 0.2; echo "end $(date +%s%N)" >> "$1/times""#;
    let until = tokio::time::Instant::now() + RUN_LIMIT;
    while job_starts(case) < runs && tokio::time::Instant::now() < until {
        let output = finish(case.run_script(host, &flags, script, &[])).await;
        assert_eq!(output.status.code(), Some(0), "{host}: {}", stderr(&output));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn three_hosts_cron_firing_all_the_time_run_the_job_once_per_period_never_overlapping() {
    let case = Case::new("cron-often");
    tokio::join!(
        cron(&case, "h1", "4s", 3),
        cron(&case, "h2", "4s", 3),
        cron(&case, "h3", "4s", 3),
    );
    let text = std::fs::read_to_string(case.dir.join("times")).expect("the job ran");
    let (starts, _) = runs(&text, "");
    // Due again once the period is over: a third run within the limit.
    assert!(starts.len() >= 3, "ran {} times: {text}", starts.len());
    // Storage's clock counts whole seconds: a run that started late in its
    // second makes the next one due up to a second early; and the job's
    // times lag the reading of storage's clock by the start of `sh`.
    for pair in starts.windows(2) {
        let gap = pair[1].saturating_sub(pair[0]);
        assert!(
            gap >= Duration::from_millis(2_500),
            "runs {gap:?} apart: {text}"
        );
    }
}

/// The job's runs from its `times` lines (`start NS`, `end NS`): when each
/// started, and whether the last one ended. Asserts that starts and ends
/// alternate, so that no two runs overlapped.
fn runs(text: &str, label: &str) -> (Vec<Duration>, bool) {
    let lines: Vec<(&str, u64)> = text
        .lines()
        .map(|line| {
            let (what, at) = line.split_once(' ').expect("what and when");
            (what, at.parse().expect("nanoseconds"))
        })
        .collect();
    for (i, (what, _)) in lines.iter().enumerate() {
        let expected = if i % 2 == 0 { "start" } else { "end" };
        assert_eq!(*what, expected, "{label}: {text}");
    }
    let starts = lines
        .iter()
        .step_by(2)
        .map(|(_, at)| Duration::from_nanos(*at))
        .collect();
    (starts, lines.len().is_multiple_of(2))
}

#[tokio::test]
async fn a_run_killed_mid_command_leaves_no_record_and_the_next_runs_it_once_the_lease_expired() {
    let case = Case::new("killed");
    let flags = ["--once", "--done-key", "migrate-v1"];
    let mut run = case.run("h1", &flags, 0, "60").spawn().expect("start run");
    blob_mutex_testkit::wait_for("the command to start", RUN_LIMIT, || async {
        (!case.ran().is_empty()).then_some(())
    })
    .await;
    run.start_kill().expect("SIGKILL run");
    run.wait().await.expect("wait for run");

    // The lease was not released: the next host waits for it to expire
    // (15 s), finds no record, and runs the command.
    let next = finish(case.run("h2", &flags, 0, "0")).await;
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    assert!(!said_skipped(&next), "{}", stderr(&next));
    assert_eq!(case.ran(), ["h1", "h2"]);
    let done = finish(case.run("h3", &flags, 0, "0")).await;
    assert!(said_skipped(&done), "{}", stderr(&done));
}

/// How often each host's cron fires in [`cron_on_three_hosts`].
const CRON_EVERY: Duration = Duration::from_secs(10);
/// How long the cron test fires.
const CRON_FOR: Duration = Duration::from_secs(90);
/// The shortest gap between two runs of the cron test's job: its period,
/// 30 s, counted from the time storage gave just before the last run, less
/// a second, since storage's clock counts whole seconds (a run that
/// started late in its second makes the next one due up to a second
/// early), and less half a second for the runs' own lag from that reading
/// to the job's first line (starting `sh` on a loaded machine), which the
/// job's times include and the period does not.
const CRON_GAP: Duration = Duration::from_millis(28_500);

/// How long ago the job of the cron test first started (`None`: not yet).
fn since_first_start(case: &Case) -> Option<Duration> {
    let text = std::fs::read_to_string(case.dir.join("times")).ok()?;
    let first: u128 = text.lines().next()?.strip_prefix("start ")?.parse().ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    Some(Duration::from_nanos(
        u64::try_from(now.saturating_sub(first)).unwrap(),
    ))
}

/// Three hosts' cron on `backend`: each fires `run --once --at-most-every
/// 30s` every [`CRON_EVERY`] (the hosts' clocks a few hundred milliseconds
/// apart), whether or not its last run has ended, as cron does, for
/// [`CRON_FOR`] counted from the job's first start: on a loaded machine the
/// first firings may take seconds to get the job going, and the window
/// starts with the job. Every run must exit 0. Returns the job's
/// `start`/`end` lines.
async fn cron_on_three_hosts(case: &Case, backend: blob_mutex_testkit::backend::Backend) -> String {
    let flags = ["--once", "--at-most-every", "30s"];
    let script = r#"echo "start $(date +%s%N)" >> "$1/times"; sleep 1; echo "end $(date +%s%N)" >> "$1/times""#;
    let begin = tokio::time::Instant::now();
    let mut firings = Vec::new();
    for (skew, host) in [(0, "h1"), (300, "h2"), (600, "h3")] {
        let mut at = Duration::from_millis(skew);
        // Firings are planned for a period more; each fires only while the
        // window has not closed.
        while at < CRON_FOR + CRON_GAP {
            let mut command = case.run_script(host, &flags, script, &[]);
            command.env(blob_mutex_testkit::backend::Backend::ENV, backend.as_str());
            firings.push(async move {
                // Until its time, or until the window closes.
                loop {
                    if since_first_start(case).is_some_and(|since| since >= CRON_FOR) {
                        return;
                    }
                    let left = (begin + at).saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    tokio::time::sleep(left.min(Duration::from_secs(1))).await;
                }
                let output = finish(command).await;
                assert_eq!(
                    output.status.code(),
                    Some(0),
                    "{backend} {host} at {at:?}: {}",
                    stderr(&output)
                );
            });
            at += CRON_EVERY;
        }
    }
    futures_util::future::join_all(firings).await;
    std::fs::read_to_string(case.dir.join("times")).expect("the job ran")
}

/// Both backends' fleets at once, each on its own container: one wait of
/// 90 s for both.
#[tokio::test]
async fn three_hosts_cron_every_10s_for_90s_with_a_30s_period_run_the_job_3_or_4_times() {
    use blob_mutex_testkit::backend::Backend;
    let cases = [Case::new("cron-official"), Case::new("cron-v021")];
    let (official, v021) = tokio::join!(
        cron_on_three_hosts(&cases[0], Backend::Official),
        cron_on_three_hosts(&cases[1], Backend::SdkV021),
    );
    for (backend, text) in [("official", official), ("sdk-v021", v021)] {
        // Never overlapping: starts and ends alternate.
        let (starts, ended) = runs(&text, backend);
        assert!(ended, "{backend}: a run did not end: {text}");
        assert!(
            (3..=4).contains(&starts.len()),
            "{backend}: ran {} times: {text}",
            starts.len()
        );
        for pair in starts.windows(2) {
            let gap = pair[1].saturating_sub(pair[0]);
            assert!(gap >= CRON_GAP, "{backend}: runs {gap:?} apart: {text}");
        }
        println!("{backend}: ran {} times: {text}", starts.len());
    }
}

/// The command of the frozen-leader test: writes its holder, waits until
/// the test creates `$1/go`, and exits 0.
const WAITS_FOR_GO: &str =
    r#"echo "$BLOB_MUTEX_HOLDER" >> "$1/ran"; while [ ! -e "$1/go" ]; do sleep 0.1; done"#;

/// The record's time (`at=`, storage's clock in Unix seconds) in the
/// lease's state, as `state get` prints it.
async fn record_at(case: &Case, backend: blob_mutex_testkit::backend::Backend) -> (String, u64) {
    let mut command = Command::new(BIN);
    command
        .args([
            "state",
            "get",
            "--container",
            &case.container,
            "--blob",
            "lock",
        ])
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            azurite::shared().connection_string(),
        )
        .env(blob_mutex_testkit::backend::Backend::ENV, backend.as_str())
        .env_remove("RUST_LOG");
    let output = finish(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let state = String::from_utf8_lossy(&output.stdout).into_owned();
    let at = state
        .lines()
        .find_map(|line| line.strip_prefix("at="))
        .and_then(|at| at.trim().parse().ok())
        .unwrap_or_else(|| panic!("{backend}: no time in the record: {state:?}"));
    (state, at)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// A `run --once --done-key` leader on `backend` whose command succeeded
/// sends its record write, which the fault proxy holds; the process is then
/// frozen (SIGSTOP) past its lease. The next host leads, runs the command
/// and records it. The held write then reaches storage, which refuses it
/// (the lease is no longer the sender's), and the first host, woken, exits
/// 6: the command ran, the record is not its.
async fn frozen_leader(backend: blob_mutex_testkit::backend::Backend) {
    use blob_mutex_testkit::proxy::{Fate, Proxy};
    let case = Case::new(&format!("frozen-{backend}"));
    let flags = ["--once", "--done-key", "migrate-v1"];
    let proxy = Proxy::start(azurite::shared().port);
    let mut first = case.run_script("h1", &flags, WAITS_FOR_GO, &[]);
    first
        .env(
            "AZURE_STORAGE_CONNECTION_STRING",
            blob_mutex_testkit::backend::connection_string(&proxy.endpoint()),
        )
        .env(blob_mutex_testkit::backend::Backend::ENV, backend.as_str());
    let first = first.stdout(Stdio::null()).stderr(Stdio::piped());
    let first = first.spawn().expect("start the first host");
    blob_mutex_testkit::wait_for("the first host's command to start", RUN_LIMIT, || async {
        (!case.ran().is_empty()).then_some(())
    })
    .await;
    proxy.hold_next_write();
    std::fs::write(case.dir.join("go"), "").expect("let the command exit");
    blob_mutex_testkit::wait_for("the record write to be held", RUN_LIMIT, || async {
        proxy.log().into_iter().find(|r| {
            r.method == "PUT"
                && r.lease_action.is_none()
                && r.lease_id.is_some()
                && r.fate == Fate::Forwarded
                && r.forwarded_at.is_none()
        })
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(first.id().expect("running")).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("freeze the first host");
    let frozen = unix_now();

    // The lease expires 15 s after the first host's last renewal: the next
    // host waits for it, finds no record, runs the command and records it.
    let mut second = case.run_script("h2", &flags, WAITS_FOR_GO, &[]);
    second.env(blob_mutex_testkit::backend::Backend::ENV, backend.as_str());
    let second = finish(second).await;
    assert_eq!(
        second.status.code(),
        Some(0),
        "{backend}: {}",
        stderr(&second)
    );
    assert!(!said_skipped(&second), "{backend}: {}", stderr(&second));
    assert_eq!(case.ran(), ["h1", "h2"], "{backend}");
    let (recorded, at) = record_at(&case, backend).await;
    assert!(
        at >= frozen,
        "{backend}: the record ({recorded:?}) is not the second host's run (frozen at {frozen})"
    );

    // The first host's write reaches storage now, under a lease it lost.
    proxy.release_held();
    blob_mutex_testkit::wait_for("the held write to reach storage", RUN_LIMIT, || async {
        proxy.log().into_iter().find_map(|r| {
            (r.method == "PUT" && r.lease_action.is_none() && r.lease_id.is_some())
                .then_some(r.forwarded_at)
                .flatten()
        })
    })
    .await;
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("wake the first host");
    let woken = tokio::time::timeout(RUN_LIMIT, first.wait_with_output())
        .await
        .expect("the first host exited in time")
        .expect("wait for the first host");
    assert_eq!(
        woken.status.code(),
        Some(6),
        "{backend}: the first host, woken: {}",
        stderr(&woken)
    );
    assert!(
        stderr(&woken).contains("completion record"),
        "{backend}: {}",
        stderr(&woken)
    );
    println!("{backend}: the first host, woken: {}", stderr(&woken));
    let (after, _) = record_at(&case, backend).await;
    assert_eq!(
        after, recorded,
        "{backend}: the refused write changed the record"
    );
    let done = finish(case.run("h3", &flags, 0, "0")).await;
    assert!(said_skipped(&done), "{backend}: {}", stderr(&done));
    assert_eq!(case.ran(), ["h1", "h2"], "{backend}");
}

/// Both backends at once, each on its own container: one lease's wait for
/// both.
#[tokio::test]
async fn a_leader_frozen_past_its_lease_cannot_record_and_the_next_leader_runs_the_job() {
    use blob_mutex_testkit::backend::Backend;
    tokio::join!(
        frozen_leader(Backend::Official),
        frozen_leader(Backend::SdkV021),
    );
}
