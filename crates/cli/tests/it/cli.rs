//! The `blob-mutex` command, driven as a separate process against Azurite.
//!
//! The command it runs is a small `sh` script that writes marker files into
//! a per-test directory (`started-<holder>` with its epoch, `pid-<holder>`
//! with its process id and that of a child it leaves in the background,
//! `term-<holder>` or `hup-<holder>` when it got SIGTERM or SIGHUP, a shared
//! `log` of `start`/`end` lines, and a shared `times` of the same lines with
//! the wall-clock time in nanoseconds), and exits when the test creates
//! `stop-<holder>`.

use blob_mutex::store::LeaseStore;

use std::path::PathBuf;
use std::process::{ExitStatus, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::{azurite, wait_for};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::support::{blob_mutex_on, BIN};

/// The script `run` starts: marks its start, leaves a child in the
/// background, waits for its stop file, and answers SIGTERM and SIGHUP by
/// marking them and exiting 143 and 129. Its `times` lines are written
/// before `log` at the start and after it at the end, so that they bound
/// the command's life from inside.
const SCRIPT: &str = r#"
d=$1; h=$2; code=$3
end() { echo "end $h" >> "$d/log"; echo "end $h $(date +%s%N)" >> "$d/times"; }
trap 'end; touch "$d/term-$h"; exit 143' TERM
trap 'end; touch "$d/hup-$h"; exit 129' HUP
echo "start $h $(date +%s%N)" >> "$d/times"
echo "start $h" >> "$d/log"
sleep 1000 &
echo "$$ $!" > "$d/pid-$h.tmp" && mv "$d/pid-$h.tmp" "$d/pid-$h"
echo "$BLOB_MUTEX_EPOCH $BLOB_MUTEX_HOLDER" > "$d/started-$h.tmp" && mv "$d/started-$h.tmp" "$d/started-$h"
while [ ! -e "$d/stop-$h" ]; do sleep 0.05; done
end
exit "$code"
"#;

/// `--grace` for the tests that read what [`SCRIPT`]'s traps write: its
/// TERM trap forks twice (`date`, `touch`) before it exits, and SIGKILL
/// would cut it short a quarter of the grace (at most 1 s) before the grace
/// ends; the default 3 s leaves 2.25 s, which a loaded machine may not give
/// two forks. The trap takes milliseconds when the machine is not loaded.
const TRAP_GRACE: &str = "6s";

/// One test's container, blob and scratch directory.
struct Case {
    container: String,
    blob: &'static str,
    dir: PathBuf,
    /// The connection string every command gets.
    connection: String,
}

impl Case {
    fn new(name: &'static str) -> Case {
        Self::on(name, azurite::shared().connection_string())
    }

    fn on(name: &'static str, connection: String) -> Case {
        let container = azurite::unique_container(&format!("cli-{name}"));
        let dir = std::env::temp_dir().join(format!("blob-mutex-{container}"));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Case {
            container,
            blob: "lock",
            dir,
            connection,
        }
    }

    /// `blob-mutex <command>` for this case's blob, connected through the
    /// environment variable.
    fn command(&self, subcommand: &str) -> Command {
        let mut command = blob_mutex_on(&self.connection);
        command
            .arg(subcommand)
            .args(["--container", &self.container, "--blob", self.blob]);
        command
    }

    /// Starts `blob-mutex run` for `holder`, running [`SCRIPT`] that exits
    /// with `code` when told to; extra flags go before `--`.
    fn run(&self, holder: &str, code: i32, flags: &[&str]) -> Child {
        self.run_command(holder, code, flags)
            .spawn()
            .expect("start blob-mutex run")
    }

    /// As [`Case::run`], through `proxy`.
    fn run_through(&self, proxy: &Proxy, holder: &str, code: i32, flags: &[&str]) -> Child {
        self.run_command(holder, code, flags)
            .env("AZURE_STORAGE_CONNECTION_STRING", proxy.connection_string())
            .spawn()
            .expect("start blob-mutex run")
    }

    fn run_command(&self, holder: &str, code: i32, flags: &[&str]) -> Command {
        let mut command = self.command("run");
        command
            .args(["--holder", holder])
            .args(flags)
            .env("RUST_LOG", "blob_mutex=debug")
            .args(["--", "sh", "-c", SCRIPT, "script"])
            .arg(&self.dir)
            .args([holder, &code.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.path(&format!("stderr-{holder}"))).unwrap());
        command
    }

    /// Runs `blob-mutex <subcommand> [args]` to its end.
    async fn output(&self, subcommand: &str, args: &[&str]) -> Output {
        self.command(subcommand)
            .args(args)
            .output()
            .await
            .expect("run blob-mutex")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Waits until `holder`'s command has started; returns its epoch.
    async fn started(&self, holder: &str, limit: Duration) -> u64 {
        let path = self.path(&format!("started-{holder}"));
        let text = wait_for(&format!("{holder}'s command to start"), limit, || {
            let path = path.clone();
            async move { std::fs::read_to_string(path).ok() }
        })
        .await;
        let (epoch, seen_holder) = text.trim().split_once(' ').expect("epoch and holder");
        assert_eq!(seen_holder, holder, "BLOB_MUTEX_HOLDER");
        epoch.parse().expect("BLOB_MUTEX_EPOCH is a number")
    }

    /// The process ids of `holder`'s command and of its background child,
    /// once it has started.
    async fn pids(&self, holder: &str) -> [u32; 2] {
        let path = self.path(&format!("pid-{holder}"));
        let text = wait_for(
            &format!("{holder}'s process ids"),
            Duration::from_secs(30),
            || {
                let path = path.clone();
                async move { std::fs::read_to_string(path).ok() }
            },
        )
        .await;
        let mut pids = text.split_whitespace().map(|p| p.parse().expect("a pid"));
        [
            pids.next().expect("the command"),
            pids.next().expect("its child"),
        ]
    }

    /// The `times` lines: what (`start` or `end`), whose, and when (ns since
    /// the Unix epoch, the command's own clock reading).
    fn times(&self) -> Vec<(String, String, u128)> {
        std::fs::read_to_string(self.path("times"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let mut parts = line.split(' ');
                let what = parts.next().expect("start or end").to_owned();
                let who = parts.next().expect("holder").to_owned();
                let at = parts.next().expect("time").parse().expect("ns");
                (what, who, at)
            })
            .collect()
    }

    /// When `holder`'s command said it started (its first `start` line).
    fn start_time(&self, holder: &str) -> u128 {
        self.times()
            .into_iter()
            .find(|(what, who, _)| what == "start" && who == holder)
            .unwrap_or_else(|| panic!("no start of {holder} in {:?}", self.times()))
            .2
    }

    fn has_started(&self, holder: &str) -> bool {
        self.path(&format!("started-{holder}")).exists()
    }

    /// Tells `holder`'s command to exit.
    fn stop(&self, holder: &str) {
        std::fs::write(self.path(&format!("stop-{holder}")), "").unwrap();
    }

    fn stderr(&self, holder: &str) -> String {
        std::fs::read_to_string(self.path(&format!("stderr-{holder}"))).unwrap_or_default()
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("log"))
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

/// Waits for a `blob-mutex` process to exit, at most `limit`.
async fn exited(child: &mut Child, limit: Duration) -> ExitStatus {
    tokio::time::timeout(limit, child.wait())
        .await
        .unwrap_or_else(|_| panic!("blob-mutex did not exit within {limit:?}"))
        .expect("wait for blob-mutex")
}

/// Runs `blob-mutex args` to its end, with no connection string in its
/// environment: only the flags say where storage is.
async fn blob_mutex(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run blob-mutex")
}

fn kill(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Whether `pid` still runs: it exists and is not a zombie (a killed
/// process stays a zombie until its parent reaps it, and `kill -0` still
/// finds it then).
fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised name, which may contain spaces.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// The wall clock in nanoseconds since the Unix epoch, as `date +%s%N` gives it.
fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// Waits until none of `pids` runs; returns when that was seen, on the
/// monotonic clock and on the wall clock (both no earlier than the end).
async fn gone(what: &str, pids: &[u32], limit: Duration) -> (Instant, u128) {
    wait_for(what, limit, || {
        let running = pids.iter().any(|&pid| is_running(pid));
        async move { (!running).then(|| (Instant::now(), wall_ns())) }
    })
    .await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Checks that a failed command printed exactly one line on stderr, in the
/// command's own words, and exited with `code`.
fn assert_one_line_error(output: &Output, code: i32, needle: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("blob-mutex: "), "{stderr:?}");
    assert!(stderr.contains(needle), "{needle:?} in {stderr:?}");
    assert!(
        !stderr.contains("Error {") && !stderr.contains("kind:"),
        "no Debug dump: {stderr:?}"
    );
}

#[tokio::test]
async fn two_runs_take_turns_and_the_second_starts_within_acquire_retry_plus_1s() {
    take_turns(&Case::new("turns"), &["--acquire-retry", "1s"]).await;
}

/// The backend named by `--backend` (this run's, explicitly) is the one
/// `run` leads on, and says so.
#[tokio::test]
async fn two_runs_on_the_backend_given_by_flag_take_turns() {
    let backend = blob_mutex_testkit::backend::current();
    let case = Case::new("backend-flag");
    take_turns(
        &case,
        &["--acquire-retry", "1s", "--backend", backend.as_str()],
    )
    .await;
    for holder in ["a", "b"] {
        let stderr = case.stderr(holder);
        assert!(stderr.contains(&format!("backend={backend}")), "{stderr}");
    }
}

/// A backend that does not exist is a usage error naming the ones that do.
#[test]
fn an_unknown_backend_is_a_usage_error() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_blob-mutex"))
        .args([
            "status",
            "--dev",
            "-c",
            "leases",
            "-b",
            "lock",
            "--backend",
            "legacy",
        ])
        .output()
        .expect("run blob-mutex");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("official or sdk-v021"), "{stderr}");
}

/// `--hold` runs no command: with one, with `--once`, or (as a variable)
/// with either, and no command without it, is a usage error naming what
/// was given, before any request.
#[test]
fn hold_and_a_command_or_once_are_usage_errors_as_is_neither() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 4] = [
        (&["--hold", "--", "true"], &[], "--hold"),
        (&["--hold", "--once"], &[], "--once"),
        (&["--", "true"], &[("BLOB_MUTEX_HOLD", "1")], "--hold"),
        (&[], &[], "CMD"),
    ];
    for (args, env, needle) in cases {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_blob-mutex"))
            .args(["run", "--dev", "-c", "leases", "-b", "lock"])
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run blob-mutex");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {needle:?} in {stderr}");
    }
}

/// An advertised value that storage could not keep as it is, or that is
/// too long, is a usage error naming the flag's option, before any request.
#[test]
fn a_bad_advertised_value_is_a_usage_error() {
    for bad in ["a\tb".to_owned(), "x".repeat(257), " padded".to_owned()] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_blob-mutex"))
            .args([
                "run",
                "--dev",
                "-c",
                "leases",
                "-b",
                "lock",
                "--advertise",
                &bad,
            ])
            .args(["--", "true"])
            .output()
            .expect("run blob-mutex");
        assert_eq!(output.status.code(), Some(2), "{bad:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--advertise"), "{stderr}");
    }
}

async fn take_turns(case: &Case, flags: &[&str]) {
    let mut a = case.run("a", 7, flags);
    let mut b = case.run("b", 0, flags);

    let limit = Duration::from_secs(30);
    let (first, second) = wait_for("one command to start", limit, || {
        let started = (case.has_started("a"), case.has_started("b"));
        async move {
            match started {
                (true, _) => Some(("a", "b")),
                (false, true) => Some(("b", "a")),
                _ => None,
            }
        }
    })
    .await;
    let (first_run, second_run) = if first == "a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let first_epoch = case.started(first, limit).await;
    assert!(first_epoch >= 1);
    // The follower keeps trying while the leader's command runs.
    let status = case.output("status", &["--json"]).await;
    assert!(text(&status.stdout).contains(&format!("\"holder\":\"{first}\"")));
    assert!(!case.has_started(second), "both commands run at once");

    case.stop(first);
    let second_epoch = case.started(second, Duration::from_secs(10)).await;
    assert!(
        second_epoch > first_epoch,
        "epoch {second_epoch} after {first_epoch}"
    );
    // From the first command's end (its last line, by its own clock) to the
    // second's start (its first line): the release, the follower's next try
    // (acquire retry 1 s, +20 % jitter), acquire, stamp, and the start of
    // the guard and the command within 1 s, plus some room for a loaded
    // machine. How soon the first command noticed its stop file is its own
    // affair.
    let times = case.times();
    let end_first = times
        .iter()
        .find(|(what, who, _)| what == "end" && who == first)
        .unwrap_or_else(|| panic!("{first}'s end in {times:?}"))
        .2;
    let took = Duration::from_nanos(
        u64::try_from(case.start_time(second).saturating_sub(end_first)).unwrap(),
    );
    assert!(
        took <= Duration::from_millis(2_600),
        "{second} started {took:?} after {first}'s command ended"
    );

    let code = if first == "a" { 7 } else { 0 };
    let status = exited(first_run, Duration::from_secs(10)).await;
    assert_eq!(
        status.code(),
        Some(code),
        "the command's exit code passes through"
    );
    case.stop(second);
    let status = exited(second_run, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(7 - code));
    assert_eq!(
        case.log(),
        [
            format!("start {first}"),
            format!("end {first}"),
            format!("start {second}"),
            format!("end {second}")
        ],
        "the commands never overlapped (second started {took:?} after the first ended)"
    );
}

/// The timing of the runs that are killed or frozen: a 15 s lease renewed
/// every second, and followers that try every half second.
const KILL_FLAGS: [&str; 6] = [
    "--lease-duration",
    "15s",
    "--renew-interval",
    "1s",
    "--acquire-retry",
    "500ms",
];

/// The lease duration of [`KILL_FLAGS`].
const LEASE: Duration = Duration::from_secs(15);

/// Waits until `holder`'s `run` is campaigning.
async fn campaigning(case: &Case, holder: &str) {
    wait_for(
        &format!("{holder} to campaign"),
        Duration::from_secs(10),
        || {
            let stderr = case.stderr(holder);
            async move { stderr.contains("campaign").then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn sigkill_of_run_kills_its_command_group_at_once_and_the_commands_never_overlap() {
    let case = Case::new("sigkill");
    let mut a = case.run("a", 0, &KILL_FLAGS);
    case.started("a", Duration::from_secs(30)).await;
    let pids = case.pids("a").await;
    let mut b = case.run("b", 0, &KILL_FLAGS);
    campaigning(&case, "b").await;
    assert!(pids.iter().all(|&pid| is_running(pid)), "a's command runs");

    let killed = Instant::now();
    kill(a.id().expect("a runs"), "KILL");
    // The command and the child it left in the background, in its process
    // group, are both killed: nothing of a's runs once its lease may expire.
    let (gone_at, gone_wall) = gone(
        "a's command and its child to be killed",
        &pids,
        Duration::from_secs(20),
    )
    .await;
    let took = gone_at - killed;
    eprintln!("a's command group was gone {took:?} after the SIGKILL of its run");
    assert!(
        took <= Duration::from_secs(1),
        "a's command was gone only {took:?} after the SIGKILL of its run"
    );
    exited(&mut a, Duration::from_secs(5)).await;

    // b leads once a's lease has expired on the server: 14 to 15 s after
    // the kill, plus b's retry of 0.5 s (+20 %).
    case.started("b", Duration::from_secs(25)).await;
    let b_start = case.start_time("b");
    assert!(
        b_start >= gone_wall,
        "b's command started {} ms before a's was seen gone",
        (gone_wall - b_start) / 1_000_000
    );
    case.stop("b");
    assert_eq!(
        exited(&mut b, Duration::from_secs(10)).await.code(),
        Some(0)
    );
    let times = case.times();
    assert!(
        !times
            .iter()
            .any(|(what, who, _)| what == "end" && who == "a"),
        "a's command was killed, it did not end by itself: {times:?}"
    );
    // Overlap of a's life [its start, seen gone] and b's [its start, its end].
    let b_end = times
        .iter()
        .find(|(what, who, _)| what == "end" && who == "b")
        .expect("b's end")
        .2;
    let overlap = gone_wall
        .min(b_end)
        .saturating_sub(case.start_time("a").max(b_start));
    assert_eq!(overlap, 0, "the commands overlapped: {times:?}");
}

#[tokio::test]
async fn sigstop_of_run_alone_kills_its_command_before_the_lease_could_expire() {
    let case = Case::new("sigstop");
    let proxy = Proxy::start(azurite::shared().port);
    let mut a = case.run_through(&proxy, "a", 0, &KILL_FLAGS);
    case.started("a", Duration::from_secs(30)).await;
    let pids = case.pids("a").await;
    // A few renewals first, so that the guard has been told later
    // deadlines than the first term's.
    wait_for("a to renew three times", Duration::from_secs(10), || {
        let renewed = proxy
            .log()
            .iter()
            .filter(|r| r.is("renew") && r.forwarded_at.is_some())
            .count();
        async move { (renewed >= 3).then_some(()) }
    })
    .await;
    let mut b = case.run("b", 0, &KILL_FLAGS);
    campaigning(&case, "b").await;

    // Freeze a's run alone: its command and the guard go on.
    let run_a = a.id().expect("a runs");
    kill(run_a, "STOP");
    let stopped = Instant::now();
    let (gone_at, gone_wall) = gone(
        "a's command group to be killed while its run is frozen",
        &pids,
        Duration::from_secs(20),
    )
    .await;
    // Every acquire and renew a made, in order; a frozen run sends no more.
    let mut forwarded: Vec<Instant> = proxy
        .log()
        .iter()
        .filter(|r| r.is("acquire") || r.is("renew"))
        .filter_map(|r| r.forwarded_at)
        .map(Instant::from_std)
        .collect();
    forwarded.sort();
    let last = *forwarded.last().expect("a lease request");
    eprintln!(
        "a's command group was killed {:?} after its run froze, {:?} before the lease could expire",
        gone_at - stopped,
        (last + LEASE).saturating_duration_since(gone_at)
    );
    // The server cannot expire the lease before the last request reached
    // it plus the lease duration.
    assert!(
        gone_at <= last + LEASE,
        "a's command was seen gone {:?} after its lease could have expired",
        gone_at - (last + LEASE)
    );
    // Not much earlier than it had to, either: each renewal is sent after
    // the answer to the one before, so the deadline of the request before
    // the last one (sent after the third-to-last was forwarded, a renew
    // interval before the last) had reached the guard. That deadline is
    // its send time + 15 s - 1.15 s (the safety margin: 1 s + 1 % of the
    // lease); the guard kills 250 ms before it, and reads its clock a
    // little early.
    let third_last = forwarded[forwarded.len() - 3];
    let earliest = third_last + Duration::from_millis(15_000 - 1_150 - 250 - 50);
    assert!(
        gone_at >= earliest,
        "a's command was killed {:?} before its guard's deadline",
        earliest - gone_at
    );

    case.started("b", Duration::from_secs(25)).await;
    let b_start = case.start_time("b");
    assert!(
        b_start >= gone_wall,
        "b's command started {} ms before a's was seen gone",
        (gone_wall - b_start) / 1_000_000
    );

    kill(run_a, "CONT");
    let status = exited(&mut a, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(4), "stderr: {}", case.stderr("a"));
    let stderr = case.stderr("a");
    assert!(stderr.contains("before its deadline"), "{stderr}");
    case.stop("b");
    assert_eq!(
        exited(&mut b, Duration::from_secs(10)).await.code(),
        Some(0)
    );
}

#[tokio::test]
async fn two_forever_runs_of_a_command_that_exits_at_once_take_turns_on_schedule() {
    let case = Case::new("forever-turns");
    let retry = Duration::from_millis(500);
    let spawn = |holder: &str| {
        case.command("run")
            .args(["--holder", holder, "--forever", "--acquire-retry", "500ms"])
            .args(["--", "sh", "-c"])
            .arg("echo \"$BLOB_MUTEX_HOLDER $(date +%s%N)\" >> \"$0/terms\"")
            .arg(&case.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start blob-mutex run --forever")
    };
    let mut runs = [spawn("a"), spawn("b")];
    let terms = || -> Vec<(String, u128)> {
        std::fs::read_to_string(case.path("terms"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let (who, at) = line.split_once(' ').expect("holder and time");
                (who.to_owned(), at.parse().expect("ns"))
            })
            .collect()
    };
    // Both lead within a few terms.
    let first = wait_for("both to lead", Duration::from_secs(20), || {
        let terms = terms();
        async move {
            let both = terms.iter().any(|(w, _)| w == "a") && terms.iter().any(|(w, _)| w == "b");
            both.then_some(terms)
        }
    })
    .await;
    assert!(
        first.len() <= 4,
        "both led only after {} terms",
        first.len()
    );

    // Then count the terms in a window of 6 s.
    let window = Duration::from_secs(6);
    let from = wall_ns();
    tokio::time::sleep(window).await; // the observation window itself
    let to = wall_ns();
    for run in &mut runs {
        kill(run.id().expect("runs"), "TERM");
        exited(run, Duration::from_secs(10)).await;
    }
    let in_window: Vec<_> = terms()
        .into_iter()
        .filter(|(_, at)| (from..to).contains(at))
        .collect();
    // Each instance waits 1.2 x acquire retry after each of its terms before
    // it campaigns again, so it leads at most once per 0.6 s; the other one
    // tries every 0.5 s (+-20 %), so no more than 0.6 s and a term's work
    // (acquire, stamp, start and stop the command, release: well under
    // 0.5 s) pass without a term.
    let pause = retry.mul_f64(1.2);
    let per_instance_max = usize::try_from(window.as_millis() / pause.as_millis()).unwrap() + 1;
    let total_min = usize::try_from(window.as_millis() / (pause + retry).as_millis()).unwrap() - 1;
    for holder in ["a", "b"] {
        let count = in_window.iter().filter(|(w, _)| w == holder).count();
        assert!(
            (1..=per_instance_max).contains(&count),
            "{holder} led {count} times in {window:?} (at most {per_instance_max}): {in_window:?}"
        );
    }
    assert!(
        in_window.len() >= total_min,
        "{} terms in {window:?} (at least {total_min}): {in_window:?}",
        in_window.len()
    );
    eprintln!("{} terms in {window:?}: {in_window:?}", in_window.len());
}

#[tokio::test]
async fn wait_with_storage_unreachable_exits_1_naming_the_error() {
    let case = Case::new("unreachable");
    // A port nothing listens on: bound, then closed again.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let connection =
        azurite::connection_string(&format!("http://127.0.0.1:{closed}/devstoreaccount1"));
    let started = Instant::now();
    let out = case
        .command("run")
        .env("AZURE_STORAGE_CONNECTION_STRING", &connection)
        .args(["--wait", "2s", "--", "true"])
        .output()
        .await
        .expect("run blob-mutex");
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("blob-mutex: "), "{stderr}");
    assert!(last.contains("transport error"), "names the error: {last}");
    assert!(!stderr.contains("held by another instance"), "{stderr}");
    assert!(!stderr.contains(azurite::DEV_KEY), "no key in {stderr}");
    assert!(took < Duration::from_secs(6), "gave up after {took:?}");
}

#[tokio::test]
async fn an_unresolvable_host_ends_run_within_the_first_contact_timeout_saying_what_to_check() {
    let case = Case::new("nohost");
    let connection =
        azurite::connection_string("http://no-such-host.invalid:10000/devstoreaccount1");
    for forever in [false, true] {
        let started = Instant::now();
        let mut command = case.command("run");
        command
            .env("AZURE_STORAGE_CONNECTION_STRING", &connection)
            .args(["--first-contact-timeout", "3s"]);
        if forever {
            command.arg("--forever");
        }
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            command.args(["--", "true"]).output(),
        )
        .await
        .expect("run gave up")
        .expect("run blob-mutex");
        let took = started.elapsed();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("blob-mutex: "), "{stderr}");
        for needle in [
            case.container.as_str(),
            "within 3s",
            "host name",
            "credential",
        ] {
            assert!(last.contains(needle), "{needle:?} in {last}");
        }
        assert!(
            last.contains("no-such-host.invalid"),
            "names the host: {last}"
        );
        assert!(!stderr.contains(azurite::DEV_KEY), "no key in {stderr}");
        // The bound, an attempt cut at the request timeout (3 s), and a
        // loaded machine.
        assert!(took < Duration::from_secs(12), "gave up after {took:?}");
        eprintln!("forever={forever}: gave up after {took:?}: {last}");
    }
}

#[tokio::test]
async fn without_a_connection_string_or_dev_every_command_refuses_and_says_how_to_set_one() {
    for args in [
        &["run", "--container", "leases", "--blob", "b", "--", "true"][..],
        &["status", "--container", "leases", "--blob", "b"],
        &["break", "--container", "leases", "--blob", "b"],
    ] {
        let out = blob_mutex(args).await;
        let stderr = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {stderr}");
        for needle in ["AZURE_STORAGE_CONNECTION_STRING", "--dev"] {
            assert!(stderr.contains(needle), "{args:?}: {needle:?} in {stderr}");
        }
        assert!(
            !stderr.contains("127.0.0.1"),
            "{args:?}: no Azurite: {stderr}"
        );
    }
}

#[tokio::test]
async fn wait_0_makes_exactly_one_attempt_against_a_held_lease() {
    let case = Case::new("wait0");
    let mut a = case.run("a", 0, &[]);
    case.started("a", Duration::from_secs(30)).await;

    let proxy = Proxy::start(azurite::shared().port);
    let started = Instant::now();
    let out = case
        .command("run")
        .env("AZURE_STORAGE_CONNECTION_STRING", proxy.connection_string())
        .args([
            "--holder",
            "w",
            "--wait",
            "0",
            "--acquire-retry",
            "5s",
            "--",
            "true",
        ])
        .output()
        .await
        .expect("run blob-mutex");
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    assert!(stderr.contains("gave up waiting"), "{stderr}");
    let acquires = proxy.log().iter().filter(|r| r.is("acquire")).count();
    assert_eq!(acquires, 1, "one attempt");
    // One attempt against a local Azurite takes milliseconds; the next
    // would come only after the 5 s retry.
    assert!(took < Duration::from_secs(2), "--wait 0 took {took:?}");

    case.stop("a");
    assert_eq!(
        exited(&mut a, Duration::from_secs(10)).await.code(),
        Some(0)
    );
}

/// The library's grace for a task once its lease is lost (`LOST_GRACE`):
/// the command gets SIGTERM, and SIGKILL this long after.
const LOST_GRACE: Duration = Duration::from_millis(100);
/// The CLI's default request timeout: the longest the renewal that finds
/// a broken lease may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Room for a loaded two-core machine on top of a bound the code promises.
const LOADED: Duration = Duration::from_secs(3);

#[tokio::test]
async fn break_stops_the_running_command_and_run_exits_with_lease_lost() {
    let case = Case::new("break");
    let renew = Duration::from_secs(1);
    let mut a = case.run("a", 0, &["--renew-interval", "1s"]);
    let epoch = case.started("a", Duration::from_secs(30)).await;
    let pids = case.pids("a").await;

    let broke = case.output("break", &[]).await;
    let broken = Instant::now();
    assert_eq!(broke.status.code(), Some(0), "{}", text(&broke.stderr));
    let said = text(&broke.stdout);
    assert!(
        said.contains(&format!("broke the lease of a (epoch {epoch})")),
        "{said}"
    );

    // The next renewal (within the renew interval, cut at the request
    // timeout) finds the lease broken; the command's group gets SIGTERM and,
    // LOST_GRACE later, SIGKILL: the command and its child are gone.
    let bound = renew + REQUEST_TIMEOUT + LOST_GRACE + LOADED;
    let (gone_at, _) = gone("a's command group to be stopped", &pids, bound).await;
    eprintln!(
        "a's command group was gone {:?} after the break answered",
        gone_at - broken
    );
    let status = exited(&mut a, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(4), "stderr: {}", case.stderr("a"));
    let stderr = case.stderr("a");
    assert!(stderr.contains("was broken or taken"), "{stderr}");
    // SIGTERM came first: the command's trap ran, or `run` sent it (after
    // a break every moment the command runs may overlap the next leader, so
    // a trap slower than LOST_GRACE is cut short by SIGKILL, and that is
    // right).
    let trapped = case.path("term-a").exists();
    let sent = stderr
        .lines()
        .any(|l| l.contains("stopping the command") && l.contains("signal=SIGTERM"));
    assert!(trapped || sent, "the command got no SIGTERM: {stderr}");
    if !trapped {
        eprintln!("the trap did not run within {LOST_GRACE:?}: the command was killed");
    }

    let again = case.output("break", &[]).await;
    assert_one_line_error(&again, 3, "no lease to break");
}

#[tokio::test]
async fn the_epoch_increases_from_one_holder_to_the_next() {
    let case = Case::new("epoch");
    let mut epochs = Vec::new();
    for holder in ["a", "b", "a2"] {
        let mut run = case.run(holder, 0, &[]);
        epochs.push(case.started(holder, Duration::from_secs(30)).await);
        case.stop(holder);
        assert_eq!(
            exited(&mut run, Duration::from_secs(10)).await.code(),
            Some(0)
        );
    }
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
}

#[tokio::test]
async fn status_and_json_agree_with_the_lease() {
    let case = Case::new("status");
    // A container that does not exist is an error, not a free lease.
    let no_container = case.output("status", &["--json"]).await;
    assert_one_line_error(&no_container, 1, "the container does not exist");
    blob_mutex_testkit::raw::create(&blob_mutex_testkit::raw::container(&case.container)).await;
    let missing = case.output("status", &["--json"]).await;
    assert_eq!(missing.status.code(), Some(3), "free before anyone leads");
    let json = text(&missing.stdout);
    assert!(
        json.contains("\"exists\":false") && json.contains("\"leased\":false"),
        "{json}"
    );
    assert!(json.contains("\"holder\":null"), "{json}");

    let mut a = case.run("status-holder", 0, &["--advertise", "10.1.2.3:8080"]);
    let epoch = case.started("status-holder", Duration::from_secs(30)).await;

    let table = case.output("status", &[]).await;
    assert_eq!(table.status.code(), Some(0), "held while the command runs");
    let table = text(&table.stdout);
    assert!(table.contains("leased (fixed)"), "{table}");
    assert!(table.contains("holder       status-holder"), "{table}");
    assert!(
        table.contains(&format!("epoch        {epoch}\n")),
        "{table}"
    );
    assert!(table.contains("advertised   10.1.2.3:8080\n"), "{table}");

    let json = case.output("status", &["--json"]).await;
    assert_eq!(json.status.code(), Some(0));
    let json = text(&json.stdout);
    assert_eq!(json.lines().count(), 1, "{json}");
    for part in [
        format!("\"container\":\"{}\"", case.container),
        "\"blob\":\"lock\"".to_owned(),
        "\"exists\":true".to_owned(),
        "\"state\":\"leased\"".to_owned(),
        "\"leased\":true".to_owned(),
        "\"duration\":\"fixed\"".to_owned(),
        "\"holder\":\"status-holder\"".to_owned(),
        format!("\"epoch\":{epoch},"),
        "\"acquired_at\":\"20".to_owned(),
        "\"advertised\":\"10.1.2.3:8080\"}".to_owned(),
    ] {
        assert!(json.contains(&part), "{part} in {json}");
    }

    case.stop("status-holder");
    assert_eq!(
        exited(&mut a, Duration::from_secs(10)).await.code(),
        Some(0)
    );
    let after = case.output("status", &["--json"]).await;
    assert_eq!(
        after.status.code(),
        Some(3),
        "released when the command exited"
    );
    let json = text(&after.stdout);
    assert!(
        json.contains("\"state\":\"available\"") && json.contains("\"leased\":false"),
        "{json}"
    );
    assert!(
        json.contains("\"holder\":\"status-holder\""),
        "the last holder: {json}"
    );
}

#[tokio::test]
async fn sigterm_is_forwarded_and_the_lease_released_after_the_command_exited() {
    signal_is_forwarded_and_the_lease_released("sigterm", "TERM", 143, "term-a").await;
}

#[tokio::test]
async fn sighup_is_forwarded_like_sigterm() {
    signal_is_forwarded_and_the_lease_released("sighup", "HUP", 129, "hup-a").await;
}

/// `run` forwards `signal` to the command, whose script traps it (leaving
/// the file `marker`) and exits with `code`; the lease is then released.
async fn signal_is_forwarded_and_the_lease_released(
    name: &'static str,
    signal: &str,
    code: i32,
    marker: &str,
) {
    let case = Case::new(name);
    let mut a = case.run("a", 0, &["--grace", TRAP_GRACE]);
    case.started("a", Duration::from_secs(30)).await;
    kill(a.id().expect("a runs"), signal);
    let status = exited(&mut a, Duration::from_secs(10)).await;
    assert_eq!(
        status.code(),
        Some(code),
        "the command's code: {}",
        case.stderr("a")
    );
    assert!(case.path(marker).exists(), "the command got SIG{signal}");
    if signal != "TERM" {
        assert!(
            !case.path("term-a").exists(),
            "the command got SIGTERM instead"
        );
    }
    assert_released(&case).await;
}

/// `status` says the lease is free (exit code 3).
async fn assert_released(case: &Case) {
    let after = case.output("status", &[]).await;
    assert_eq!(
        after.status.code(),
        Some(3),
        "released: {}",
        text(&after.stdout)
    );
}

/// A command that ignores SIGTERM is killed (its whole group) by a second
/// signal, long before its grace would have ended; the lease is released.
#[tokio::test]
async fn a_second_signal_kills_a_command_that_ignores_the_first() {
    const IGNORES_TERM: &str = r#"trap '' TERM; echo $$ > "$1.tmp" && mv "$1.tmp" "$1"
while :; do sleep 0.1; done"#;
    let case = Case::new("second-signal");
    let (pid_file, log) = (case.path("pid"), case.path("stderr"));
    let mut a = case
        .command("run")
        .args(["--lease-duration", "60s", "--grace", "30s"])
        .args(["--", "sh", "-c", IGNORES_TERM, "ignores"])
        .arg(&pid_file)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = wait_for("the command to start", Duration::from_secs(30), || {
        let pid_file = pid_file.clone();
        async move { std::fs::read_to_string(pid_file).ok() }
    })
    .await;
    kill(a.id().expect("run runs"), "TERM");
    // Two signals sent at once may reach `run` as one: the second goes once
    // the first was taken.
    wait_for("the first signal taken", Duration::from_secs(10), || {
        let log = log.clone();
        async move {
            let text = std::fs::read_to_string(log).ok()?;
            text.contains("stopping").then_some(())
        }
    })
    .await;
    kill(a.id().expect("run runs"), "TERM");
    // Well within the 30 s grace the first signal gave the command.
    exited(&mut a, Duration::from_secs(20)).await;
    let command = std::path::Path::new("/proc").join(pid.trim());
    assert!(!command.exists(), "the command outlived the second signal");
    assert_released(&case).await;
}

#[tokio::test]
async fn sigint_is_forwarded_as_sigint() {
    let case = Case::new("sigint");
    let mut a = case.run("a", 0, &[]);
    case.started("a", Duration::from_secs(30)).await;
    kill(a.id().expect("a runs"), "INT");
    let status = exited(&mut a, Duration::from_secs(10)).await;
    // The script does not trap SIGINT, so it dies from it: 128 + 2.
    assert_eq!(
        status.code(),
        Some(130),
        "the command's code: {}",
        case.stderr("a")
    );
    assert!(!case.path("term-a").exists(), "the command got SIGTERM");
}

#[tokio::test]
async fn wait_gives_up_with_code_3_and_forever_restarts_the_command() {
    let case = Case::new("wait");
    // The daemon's command records its epoch and exits after 0.2 s, so that
    // --forever has to campaign again and restart it; from its third run
    // on it stays, so that the daemon keeps the lease.
    let mut daemon = case
        .command("run")
        .args(["--holder", "d", "--forever", "--", "sh", "-c"])
        .arg(
            "echo $BLOB_MUTEX_EPOCH >> \"$0/epochs\"; \
             if [ $(wc -l < \"$0/epochs\") -ge 3 ]; then exec sleep 1000; fi; sleep 0.2",
        )
        .arg(&case.dir)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let epochs = wait_for(
        "the command to run three times",
        Duration::from_secs(30),
        || {
            let epochs = std::fs::read_to_string(case.path("epochs")).unwrap_or_default();
            async move {
                let epochs: Vec<u64> = epochs.lines().map(|l| l.parse().unwrap()).collect();
                (epochs.len() >= 3).then_some(epochs)
            }
        },
    )
    .await;
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");

    // While the daemon leads, another instance with --wait gives up
    // without running its command.
    wait_for("the daemon to lead", Duration::from_secs(10), || async {
        let status = case.output("status", &[]).await;
        (status.status.code() == Some(0)).then_some(())
    })
    .await;
    let started = Instant::now();
    let mut waiter = case.run("w", 0, &["--wait", "1s", "--acquire-retry", "10s"]);
    let status = exited(&mut waiter, Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(3), "stderr: {}", case.stderr("w"));
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "--wait bounds the wait"
    );
    assert!(!case.has_started("w"));
    let stderr = case.stderr("w");
    assert!(stderr.contains("gave up waiting"), "{stderr}");

    kill(daemon.id().unwrap(), "TERM");
    let status = exited(&mut daemon, Duration::from_secs(10)).await;
    assert!(
        status.code().is_some(),
        "exited by itself after SIGTERM: {status:?}"
    );
}

#[tokio::test]
async fn bad_flags_and_connection_strings_are_one_line_errors_with_documented_codes() {
    let case = Case::new("errors");
    let out = blob_mutex(&["run", "-c", "box", "-b", "b", "--bogus", "--", "true"]).await;
    assert_one_line_error(&out, 2, "--bogus");
    let out = blob_mutex(&["run", "-c", "box", "-b", "b", "--", "true"]).await;
    assert_one_line_error(&out, 2, "AZURE_STORAGE_CONNECTION_STRING");
    let out = blob_mutex(&["status", "-c", "box"]).await;
    assert_one_line_error(&out, 2, "--blob");
    let out = blob_mutex(&[
        "status",
        "-c",
        "box",
        "-b",
        "b",
        "--dev",
        "--request-timeout",
        "soon",
    ])
    .await;
    assert_one_line_error(&out, 2, "--request-timeout");

    // Invalid option values are the library's messages.
    let out = case
        .output("run", &["--lease-duration", "5s", "--", "true"])
        .await;
    assert_one_line_error(&out, 2, "--lease-duration");

    // A malformed connection string: one line, and the secret is not in it.
    let secret = "c2VjcmV0LWtleQ!!";
    let malformed = format!("AccountName=acct;AccountKey={secret}");
    let target = ["-c", &case.container, "-b", case.blob];
    let flags = ["--connection-string", &malformed];
    let out = blob_mutex(&[&["status"][..], &target, &flags].concat()).await;
    assert_one_line_error(&out, 2, "invalid connection string");
    assert!(
        !text(&out.stderr).contains("c2VjcmV0"),
        "{}",
        text(&out.stderr)
    );

    // A well-formed but wrong key: storage refuses it.
    let wrong_key = "d3Jvbmcta2V5LXdyb25nLWtleQ==";
    let wrong = azurite::shared()
        .connection_string()
        .replace(azurite::DEV_KEY, wrong_key);
    for subcommand in [&["status"][..], &["break"], &["run", "--", "true"]] {
        let (name, rest) = subcommand.split_at(1);
        let flags = ["--connection-string", &wrong];
        let out = blob_mutex(&[name, &target, &flags, rest].concat()).await;
        assert_one_line_error(&out, 1, "authentication failed");
        assert!(!text(&out.stderr).contains(wrong_key));
        // Azurite answers a signature that does not verify as Azure answers
        // a missing permission (AuthorizationFailure): both are named.
        assert_one_line_error(&out, 1, "check the account key");
    }

    // A command that does not exist.
    let out = case
        .output("run", &["--", "/nonexistent/blob-mutex-test-command"])
        .await;
    assert_one_line_error(&out, 127, "cannot run /nonexistent/blob-mutex-test-command");
}

/// Runs `blob-mutex args` as [`blob_mutex`] does, for a command that must
/// be refused before any request: one that got as far as storage would
/// wait for an Azurite that is not there, so it has 30 s.
async fn refused(args: &[&str]) -> Output {
    let output = Command::new(BIN)
        .args(args)
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(30), output)
        .await
        .unwrap_or_else(|_| panic!("{args:?} was not refused: it ran on"))
        .expect("run blob-mutex")
}

/// A blob or a set named inside a set's own names (`<set>/members/…`,
/// `<set>/partitions/…`) or a lease's candidates is refused before any
/// request, by every command: exit 2, one line naming the flag's field, the
/// reserved segment and why.
#[tokio::test]
async fn names_a_set_owns_are_usage_errors_that_say_which_segment_is_reserved() {
    let target = ["--dev", "-c", "leases"];
    for (command, rest) in [
        ("run", &["--", "true"][..]),
        ("status", &[]),
        ("break", &[]),
    ] {
        for (blob, needle) in [
            ("jobs/members/x", "'members'"),
            ("a/b/partitions/p0", "'partitions'"),
            ("lock.candidates/x", "'.candidates'"),
        ] {
            let out = refused(&[&[command][..], &target, &["--blob", blob], rest].concat()).await;
            assert_one_line_error(&out, 2, "invalid --blob: ");
            let stderr = text(&out.stderr);
            assert!(
                stderr.contains(needle) && stderr.contains("reserved"),
                "{command} {blob}: {stderr}"
            );
        }
    }
    let out = refused(&[
        "partitions",
        "--dev",
        "-c",
        "leases",
        "--set",
        "jobs/members",
    ])
    .await;
    assert_one_line_error(&out, 2, "invalid --set: ");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("'members'") && stderr.contains("jobs/members/"),
        "{stderr}"
    );
}

#[tokio::test]
async fn help_has_an_example_and_the_exit_codes_for_every_command() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["status", "--help"],
        &["break", "--help"],
    ] {
        let out = Command::new(BIN).args(args).output().await.unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let help = text(&out.stdout);
        assert!(help.contains("Exit codes:"), "{args:?}: {help}");
        if args.len() == 2 {
            assert!(help.contains("Examples:\n  "), "{args:?}: {help}");
        }
    }
}

/// `blob-mutex partitions` for `set` in `container`, connected through the
/// environment variable.
async fn partitions(container: &str, set: &str, flags: &[&str]) -> Output {
    blob_mutex_on(azurite::shared().connection_string())
        .args(["partitions", "--container", container, "--set", set])
        .args(flags)
        .output()
        .await
        .expect("run blob-mutex partitions")
}

/// Makes the lease set `jobs` in `container` with the library, lease by
/// lease, each acquired and stamped under its holder's name: alpha owns p1
/// and p4; p2 was alpha's, then beta's; p3 was gamma's and is free; alpha
/// and beta are members, gamma has left. Returns the epoch of each
/// partition's last term.
async fn make_set(container: &str) -> std::collections::BTreeMap<String, u64> {
    use blob_mutex::{
        azure::BlobLeaseSetStore, store::Acquire, store::LeaseId, store::LeaseSetStore,
        store::StampOptions,
    };

    let store = BlobLeaseSetStore::new(&azurite::shared().settings(container, "jobs")).unwrap();
    let mut epochs = std::collections::BTreeMap::new();
    for (name, holder, release) in [
        ("partitions/p3", "gamma", true),
        ("partitions/p1", "alpha", false),
        ("partitions/p2", "alpha", true),
        ("partitions/p2", "beta", false),
        ("partitions/p4", "alpha", false),
        ("members/alpha", "alpha", false),
        ("members/beta", "beta", false),
        ("members/gamma", "gamma", true),
    ] {
        let lease = store.lease(name).unwrap();
        let id = LeaseId::new();
        let acquired = lease.acquire(id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(acquired, Acquire::Acquired, "{name} for {holder}");
        let epoch = lease.stamp(id, holder, &StampOptions::new()).await.unwrap();
        if let Some(partition) = name.strip_prefix("partitions/") {
            // Each blob's first epoch comes from storage's clock; a later
            // term of the same blob follows its last one.
            if let Some(last) = epochs.insert(partition.to_owned(), epoch) {
                assert_eq!(
                    epoch,
                    last + 1,
                    "{holder}'s term of {name} follows the last"
                );
            }
        }
        if release {
            lease.release(id).await.unwrap();
        }
    }
    epochs
}

#[tokio::test]
async fn partitions_names_the_owner_and_epoch_of_each_partition_and_the_live_members() {
    let container = azurite::unique_container("cli-partitions");
    let epochs = make_set(&container).await;

    let table = partitions(&container, "jobs", &[]).await;
    let stderr = text(&table.stderr);
    assert_eq!(table.status.code(), Some(0), "stderr: {stderr}");
    let table = text(&table.stdout);
    let row = |first: &str| -> Vec<String> {
        table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(first))
            .unwrap_or_else(|| panic!("a row for {first} in {table}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    for (partition, state, owner) in [
        ("p1", "leased", "alpha"),
        ("p2", "leased", "beta"),
        ("p3", "available", "-"),
        ("p4", "leased", "alpha"),
    ] {
        let row = row(partition);
        assert_eq!(
            row[..4],
            [partition, state, owner, &epochs[partition].to_string()],
            "{table}"
        );
        assert!(row[4].starts_with("20"), "acquired at: {table}");
    }
    assert_eq!(row("alpha"), ["alpha", "2"], "{table}");
    assert_eq!(row("beta"), ["beta", "1"], "{table}");
    assert!(!table.contains("gamma"), "gamma has left: {table}");
    assert!(table.contains("partitions   4 (3 leased)"), "{table}");

    let json = partitions(&container, "jobs", &["--json"]).await;
    assert_eq!(json.status.code(), Some(0));
    let json = text(&json.stdout);
    assert_eq!(json.lines().count(), 1, "{json}");
    assert!(
        json.starts_with(&format!(
            "{{\"container\":\"{container}\",\"set\":\"jobs\",\"exists\":true,\"partitions\":["
        )),
        "{json}"
    );
    let mut at = 0;
    for (partition, state, owner) in [
        ("p1", "leased", "\"alpha\""),
        ("p2", "leased", "\"beta\""),
        ("p3", "available", "null"),
        ("p4", "leased", "\"alpha\""),
    ] {
        let object = format!(
            "{{\"name\":\"{partition}\",\"state\":\"{state}\",\"owner\":{owner},\"epoch\":{},\"acquired_at\":\"20",
            epochs[partition]
        );
        let found = json[at..]
            .find(&object)
            .unwrap_or_else(|| panic!("{object} after {at} in {json}"));
        at += found + object.len();
    }
    assert!(
        json.ends_with(
            "\"members\":[{\"holder\":\"alpha\",\"owns\":2},{\"holder\":\"beta\",\"owns\":1}]}\n"
        ),
        "{json}"
    );
}

#[tokio::test]
async fn partitions_of_an_empty_set_exits_3_and_without_set_2() {
    use blob_mutex::{azure::BlobLeaseSetStore, store::LeaseId, store::LeaseSetStore};

    // Another set whose name starts with this one's, in the same container.
    let container = azurite::unique_container("cli-partitions-empty");
    let other = BlobLeaseSetStore::new(&azurite::shared().settings(&container, "jobs-2")).unwrap();
    let lease = other.lease("partitions/p1").unwrap();
    lease
        .acquire(LeaseId::new(), Duration::from_secs(15))
        .await
        .unwrap();
    let missing = azurite::unique_container("cli-partitions-missing");
    for (container, flags) in [
        (&container, &[][..]),
        (&container, &["--json"]),
        (&missing, &[]),
    ] {
        let empty = partitions(container, "jobs", flags).await;
        let stdout = text(&empty.stdout);
        assert_eq!(
            empty.status.code(),
            Some(3),
            "{stdout} {}",
            text(&empty.stderr)
        );
        assert!(empty.stderr.is_empty(), "{}", text(&empty.stderr));
        let expected = if flags.is_empty() {
            format!("set          {container}/jobs\npartitions   none (no blobs in the set)\n")
        } else {
            format!(
                "{{\"container\":\"{container}\",\"set\":\"jobs\",\"exists\":false,\"partitions\":[],\"members\":[]}}\n"
            )
        };
        assert_eq!(stdout, expected);
    }
    let missing_set = blob_mutex(&["partitions", "--dev", "--container", &container]).await;
    assert_one_line_error(&missing_set, 2, "--set");
    let help = blob_mutex(&["partitions", "--help"]).await;
    let help = text(&help.stdout);
    assert!(
        help.contains("Examples:\n  ") && help.contains("Exit codes:"),
        "{help}"
    );
}

#[tokio::test]
async fn a_run_with_a_higher_priority_takes_over_and_the_old_one_exits_lease_lost() {
    let case = Case::new("priority");
    let flags = |priority: &'static str| {
        [
            "--priority",
            priority,
            "--renew-interval",
            "2s",
            "--acquire-retry",
            "500ms",
            "--grace",
            TRAP_GRACE,
        ]
    };
    let mut a = case.run("a", 0, &flags("-1"));
    let epoch = case.started("a", Duration::from_secs(30)).await;
    let mut b = case.run("b", 0, &flags("0"));
    // The leader lists the candidates every 2 s; the candidate retries
    // every 500 ms; the command's stop and process start-up on top.
    let next = case.started("b", Duration::from_secs(15)).await;
    assert_eq!(next, epoch + 1);
    let status = exited(&mut a, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(4), "stderr: {}", case.stderr("a"));
    let stderr = case.stderr("a");
    assert!(stderr.contains("handed over"), "{stderr}");
    // The commands never overlapped: a's ended (its trap's last line)
    // before b's started.
    let times = case.times();
    let end_a = times
        .iter()
        .find(|(what, who, _)| what == "end" && who == "a")
        .map(|t| t.2);
    assert!(
        end_a.is_some_and(|end| end <= case.start_time("b")),
        "{times:?}"
    );
    case.stop("b");
    assert_eq!(
        exited(&mut b, Duration::from_secs(10)).await.code(),
        Some(0)
    );
}

/// A `blob-mutex run` started inside another `run`'s command, which
/// exports the parent's account (`BLOB_MUTEX_ACCOUNT_URL`,
/// `BLOB_MUTEX_AUTH`): given its own account by flag, the nested `run`
/// uses it whole and nothing of the parent's (not a quorum of both, not
/// the parent's credential). Given none, it takes the parent's account
/// from those variables, as every command does (see `cli_env`).
#[tokio::test]
async fn a_run_inside_a_runs_command_given_its_own_account_uses_nothing_of_the_parents() {
    let case = Case::new("nested");
    let sas = case.dir.join("parent.sas");
    std::fs::write(&sas, "sv=2022-11-02&sig=parent").expect("write the SAS file");
    let parent = [
        (
            "BLOB_MUTEX_ACCOUNT_URL",
            "http://127.0.0.1:9/parent".to_owned(),
        ),
        ("BLOB_MUTEX_AUTH", format!("sas-file:{}", sas.display())),
    ];
    let mut nested = case.command("run");
    nested
        .args(["--holder", "nested"])
        // Its own account by flag, a completion record (one account only).
        .args([
            "--connection-string",
            &case.connection,
            "--once",
            "--done-key",
            "k",
        ])
        .args(["--", "true"])
        .envs(parent.iter().map(|(name, value)| (name, value)));
    let output = tokio::time::timeout(Duration::from_secs(60), nested.output())
        .await
        .expect("the nested run ended in time")
        .expect("run blob-mutex");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}

/// The processes whose parent is `pid`, each with whether it is a zombie.
fn children_of(pid: u32) -> Vec<(u32, bool)> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (state, parent) = (fields.next(), fields.next());
        if parent.and_then(|p| p.parse().ok()) == Some(pid) {
            children.push((child, state == Some("Z")));
        }
    }
    children
}

/// `run` as process 1 of its PID namespace, as a container's first process
/// is (Kubernetes has no `--init`): the twenty background processes its
/// command leaves orphaned are reparented to it, and it reaps them when
/// they exit. Run as root (`unshare`).
#[tokio::test]
async fn run_as_process_1_reaps_the_orphans_its_command_leaves() {
    let case = Case::new("orphans");
    let script = r#"for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
      (sleep 0.3 &)
    done
    touch "$1/started"
    exec sleep 1000"#;
    let mut unshare = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "--",
            BIN,
            "run",
        ])
        .args([
            "--container",
            &case.container,
            "--blob",
            case.blob,
            "--holder",
            "pid-1",
        ])
        .args(["--", "sh", "-c", script, "script"])
        .arg(&case.dir)
        .env("AZURE_STORAGE_CONNECTION_STRING", &case.connection)
        .env("RUST_LOG", "blob_mutex=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(case.path("stderr")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("unshare (util-linux) runs, as root");
    let started = case.path("started");
    wait_for("the command to start", Duration::from_secs(30), || {
        let there = started.exists();
        async move { there.then_some(()) }
    })
    .await;
    let unshare_pid = unshare.id().unwrap();
    let run = children_of(unshare_pid)[0].0;
    // The orphans sleep 0.3 s; once none runs, none may be left a zombie.
    let left = wait_for("every orphan to be reaped", Duration::from_secs(10), || {
        let children = children_of(run);
        async move {
            let zombies = children.iter().filter(|(_, zombie)| *zombie).count();
            // The command (sleep 1000) and its guard are the only children left.
            (zombies == 0 && children.len() == 2).then_some(children)
        }
    })
    .await;
    assert_eq!(left.len(), 2);
    unshare.start_kill().unwrap();
    exited(&mut unshare, Duration::from_secs(10)).await;
}

/// A plain web server on 127.0.0.1 that answers every request `404 Not
/// Found`, as a typo in an endpoint's host or path meets one; its address.
async fn plain_web_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = "HTTP/1.1 404 Not Found\r\ncontent-type: text/html\r\n\
                              content-length: 9\r\nconnection: close\r\n\r\nNot Found";
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// A typo in the endpoint (a web server answers 404 without Azure
/// Storage's headers) and a container that does not exist are errors that
/// say so, never a free lease: `status` and `break` exit 1, not 3, and
/// `run` stops at once instead of waiting as if the lease were held.
#[tokio::test]
async fn a_non_storage_endpoint_and_a_missing_container_are_errors_never_a_free_lease() {
    let web = plain_web_server().await;
    let typo = format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};\
         BlobEndpoint=http://{web}/devstoreaccount1;",
        azurite::DEV_KEY
    );
    let target = ["-c", "leases", "-b", "scheduler"];
    let flags = ["--connection-string", &typo];
    for subcommand in [
        &["status"][..],
        &["break"],
        &["run", "--wait", "0", "--", "true"],
    ] {
        let (name, rest) = subcommand.split_at(1);
        let started = Instant::now();
        let out = blob_mutex(&[name, &target, &flags, rest].concat()).await;
        assert_one_line_error(&out, 1, "not a Blob Storage account");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name:?} took {:?}",
            started.elapsed()
        );
    }
    let azurite = azurite::shared().connection_string();
    let missing = azurite::unique_container("cli-nosuch");
    let target = ["-c", &missing, "-b", "scheduler"];
    for name in ["status", "break"] {
        let out =
            blob_mutex(&[&[name][..], &target, &["--connection-string", &azurite]].concat()).await;
        assert_one_line_error(&out, 1, "the container does not exist");
    }
}

/// An endpoint that accepts connections and never answers; its address.
async fn silent_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

/// On an endpoint that never answers, `run --wait 0` makes one attempt and
/// ends a request timeout (3 s) later, and `run` ends at its first-contact
/// bound; neither gives back a lease it never had (no release is tried
/// while storage has never answered, and none is said to have failed).
#[tokio::test]
async fn on_a_silent_endpoint_run_ends_within_its_documented_bounds_and_releases_nothing() {
    let case = Case::new("silent");
    let silent = silent_endpoint().await;
    let connection = azurite::connection_string(&format!("http://{silent}/devstoreaccount1"));
    // The bound, and slack for a loaded two-core machine.
    let slack = Duration::from_millis(1_500);
    for (flags, bound) in [
        (&["--wait", "0"][..], Duration::from_secs(3)),
        (
            &["--first-contact-timeout", "5s"][..],
            Duration::from_secs(5),
        ),
    ] {
        let started = Instant::now();
        let out = case
            .command("run")
            .env("AZURE_STORAGE_CONNECTION_STRING", &connection)
            .env("RUST_LOG", "blob_mutex=info")
            .args(flags)
            .args(["--", "true"])
            .output()
            .await
            .expect("run blob-mutex");
        let took = started.elapsed();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {stderr}");
        assert!(!stderr.contains("release"), "{flags:?}: {stderr}");
        assert!(
            took < bound + slack,
            "{flags:?}: ended after {took:?}, past {bound:?}: {stderr}"
        );
    }
}

/// `blob-mutex version --json`: one JSON object with the version, the
/// commit (a checkout's here), and the backends and features compiled in.
#[tokio::test]
async fn version_json_names_the_version_commit_backends_and_features() {
    let out = blob_mutex(&["version", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let version: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"));
    let commit = version["commit"].as_str().unwrap();
    assert!(
        commit.len() >= 12 && commit[..12].bytes().all(|b| b.is_ascii_hexdigit()),
        "{commit}"
    );
    let backends = version["backends"].as_array().unwrap();
    assert!(backends.contains(&"official".into()), "{version}");
    assert!(version["features"]
        .as_array()
        .unwrap()
        .contains(&"metrics".into()));
    let text_out = blob_mutex(&["version"]).await;
    assert!(
        text(&text_out.stdout).starts_with(&format!("blob-mutex {}", env!("CARGO_PKG_VERSION")))
    );
}
