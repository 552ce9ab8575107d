//! `blob-mutex run` when its lease is broken: the command gets SIGTERM and,
//! 100 ms later, SIGKILL, and no command of the same `run` starts again (nor
//! does `run` exit) while a process of the old command's group may still run.
//!
//! A group that outlives SIGKILL (a process in uninterruptible sleep) is
//! played by the debug-build test hook `BLOB_MUTEX_TEST_KILL_DELAY`, which
//! delivers SIGKILL to a command's group late, as the kernel does to such a
//! process.
//!
//! The command writes a `times` line when it starts: its process id, the
//! wall-clock time in nanoseconds, and how many processes of the previous
//! command's group were alive (not zombies) at that moment, read from
//! `/proc`. With `stop` set, it answers SIGTERM with a `stop` line and exits;
//! otherwise it ignores SIGTERM and only SIGKILL ends it.

use std::path::PathBuf;
use std::process::{ExitStatus, Output, Stdio};
use std::time::Duration;

use blob_mutex_testkit::{azurite, wait_for};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::support::blob_mutex_on;

/// The command: `d` is the test's directory, `mode` is `stop` (answer
/// SIGTERM) or `ignore` (SIGTERM is ignored, in `sleep` too).
const SCRIPT: &str = r#"
d=$1; mode=$2
alive=0
if [ -e "$d/group" ]; then
  prev=$(cat "$d/group")
  alive=$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v g="$prev" '$5 == g && $3 != "Z" { n++ } END { print n + 0 }')
fi
awk '{ print $5 }' /proc/$$/stat > "$d/group.tmp" && mv "$d/group.tmp" "$d/group"
echo "start $$ $(date +%s%N) $alive" >> "$d/times"
if [ "$mode" = stop ]; then
  trap 'echo "stop $$ $(date +%s%N) 0" >> "$d/times"; exit 143' TERM
  while :; do sleep 0.05; done
fi
trap '' TERM
exec sleep 1000
"#;

/// How late the hook delivers SIGKILL when the group must be waited for:
/// well under `run`'s reap wait (5 s), well over its pause before it
/// campaigns again (`--acquire-retry 100ms`).
const LATE_KILL_MS: &str = "1500";
/// How late the hook delivers SIGKILL when the group must count as
/// unkillable: well over the reap wait.
const NEVER_KILL_MS: &str = "60000";
/// `run`'s reap wait after SIGKILL (`REAP_WAIT`).
const REAP_WAIT: Duration = Duration::from_secs(5);
/// For a loaded machine.
const LOADED: Duration = Duration::from_secs(5);

struct Case {
    container: String,
    dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    what: String,
    pid: u32,
    at: u128,
    /// Processes of the previous group alive at a start.
    alive: u32,
}

impl Case {
    fn new(name: &str) -> Case {
        let container = azurite::unique_container(&format!("cli-lost-{name}"));
        let dir = std::env::temp_dir().join(format!("blob-mutex-{container}"));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Case { container, dir }
    }

    fn command(&self, subcommand: &str) -> Command {
        let mut command = blob_mutex_on(azurite::shared().connection_string());
        command
            .arg(subcommand)
            .args(["--container", &self.container, "--blob", "lock"])
            .env_remove("BLOB_MUTEX_TEST_KILL_DELAY");
        command
    }

    /// `run --forever` of [`SCRIPT`] in `mode`, with SIGKILL `kill_delay`
    /// milliseconds late if given.
    fn run_forever(&self, mode: &str, kill_delay: Option<&str>) -> Child {
        let mut command = self.command("run");
        command
            .args(["--holder", "a", "--forever", "--renew-interval", "1s"])
            .args(["--acquire-retry", "100ms"])
            .env("RUST_LOG", "blob_mutex=debug")
            .args(["--", "sh", "-c", SCRIPT, "script"])
            .arg(&self.dir)
            .arg(mode)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("stderr")).unwrap());
        if let Some(delay) = kill_delay {
            command.env("BLOB_MUTEX_TEST_KILL_DELAY", delay);
        }
        command.spawn().expect("start blob-mutex run")
    }

    async fn break_lease(&self) -> Instant {
        let output: Output = self
            .command("break")
            .output()
            .await
            .expect("run blob-mutex break");
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Instant::now()
    }

    fn lines(&self) -> Vec<Line> {
        std::fs::read_to_string(self.dir.join("times"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let parts: Vec<&str> = line.split(' ').collect();
                Line {
                    what: parts[0].to_owned(),
                    pid: parts[1].parse().expect("pid"),
                    at: parts[2].parse().expect("ns"),
                    alive: parts[3].parse().expect("count"),
                }
            })
            .collect()
    }

    fn starts(&self) -> Vec<Line> {
        self.lines()
            .into_iter()
            .filter(|l| l.what == "start")
            .collect()
    }

    /// Waits until `n` commands have started; returns the `n`th start.
    async fn started(&self, n: usize, limit: Duration) -> Line {
        wait_for(&format!("command {n} to start"), limit, || {
            let starts = self.starts();
            async move { starts.get(n - 1).cloned() }
        })
        .await
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        // Commands the hook keeps alive past the test.
        for line in self.starts() {
            kill_pid(line.pid);
        }
        if let Ok(group) = std::fs::read_to_string(self.dir.join("group")) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", group.trim())])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kill_pid(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

async fn exited(child: &mut Child, limit: Duration) -> ExitStatus {
    tokio::time::timeout(limit, child.wait())
        .await
        .unwrap_or_else(|_| panic!("blob-mutex did not exit within {limit:?}"))
        .expect("wait for blob-mutex")
}

#[tokio::test]
async fn after_a_break_forever_starts_the_command_again_only_once_the_old_group_is_gone() {
    let case = Case::new("late");
    let mut run = case.run_forever("ignore", Some(LATE_KILL_MS));
    let first = case.started(1, Duration::from_secs(30)).await;
    let broken = case.break_lease().await;

    // The next renewal (within 1 s) sees the break; SIGKILL lands 1.5 s
    // after it was sent; the command starts again only after that.
    let second = case
        .started(2, Duration::from_secs(1) + REAP_WAIT + LOADED)
        .await;
    eprintln!(
        "the command started again {:?} after the break answered",
        broken.elapsed()
    );
    assert_eq!(
        second.alive,
        0,
        "the second command started while {} process(es) of the first one's group ran; stderr: {}",
        second.alive,
        case.stderr()
    );
    assert!(!is_running(first.pid), "the first command still runs");
    assert!(second.at > first.at);
    assert!(run.try_wait().unwrap().is_none(), "run --forever goes on");
    run.kill().await.unwrap();
}

#[tokio::test]
async fn a_group_that_outlives_sigkill_past_the_reap_wait_makes_run_exit_5_without_starting_again()
{
    let case = Case::new("stuck");
    let mut run = case.run_forever("ignore", Some(NEVER_KILL_MS));
    let first = case.started(1, Duration::from_secs(30)).await;
    case.break_lease().await;

    let status = exited(&mut run, Duration::from_secs(1) + REAP_WAIT + LOADED).await;
    let stderr = case.stderr();
    assert_eq!(status.code(), Some(5), "stderr: {stderr}");
    assert!(stderr.contains("survived SIGKILL"), "{stderr}");
    assert!(is_running(first.pid), "the hook kept the command alive");
    assert_eq!(case.starts().len(), 1, "started again: {:?}", case.lines());
}

#[tokio::test]
async fn broken_leases_never_let_two_commands_of_one_forever_run_overlap() {
    let case = Case::new("overlap");
    let mut run = case.run_forever("stop", None);
    let mut previous = case.started(1, Duration::from_secs(30)).await;
    for n in 2..=4 {
        case.break_lease().await;
        let next = case
            .started(n, Duration::from_secs(1) + REAP_WAIT + LOADED)
            .await;
        assert_eq!(next.alive, 0, "command {n} overlapped: {:?}", case.lines());
        // When the old command had time to say it stopped, it did so before.
        if let Some(stop) = case
            .lines()
            .into_iter()
            .find(|l| l.what == "stop" && l.pid == previous.pid)
        {
            assert!(stop.at <= next.at, "{:?}", case.lines());
        }
        assert!(!is_running(previous.pid));
        previous = next;
    }
    assert!(run.try_wait().unwrap().is_none(), "run --forever goes on");
    run.kill().await.unwrap();
}
