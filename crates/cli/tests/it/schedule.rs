//! `blob-mutex schedule`, as separate processes against Azurite: three
//! hosts on a cron of every 10 seconds for two minutes, one killed with
//! SIGKILL and one stopped with SIGSTOP mid-job, judged from the jobs' own output; its usage
//! errors; and `status` showing a schedule's record.
//!
//! The job is a small `sh` script that appends `start SLOT PID HOLDER
//! EPOCH NS` to the test's `log`, sleeps (and waits while the test's `hold`
//! file exists), and appends `end SLOT PID HOLDER NS` (`NS` the wall clock
//! in nanoseconds).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use blob_mutex::azure::BlobLeaseManager;
use blob_mutex::store::{LeaseId, LeaseStore, StampOptions};
use blob_mutex_testkit::http::get;
use blob_mutex_testkit::ports::free_addr;
use blob_mutex_testkit::{azurite, wait_for};
use tokio::process::Child;

use crate::support::{blob_mutex_on, BIN};

/// The job: `$1` the scratch directory, `$2` how long it sleeps at least.
const JOB: &str = r#"
echo "start $BLOB_MUTEX_SLOT $$ $BLOB_MUTEX_HOLDER $BLOB_MUTEX_EPOCH $(date +%s%N)" >> "$1/log"
sleep "$2"
while [ -e "$1/hold" ]; do sleep 0.1; done
echo "end $BLOB_MUTEX_SLOT $$ $BLOB_MUTEX_HOLDER $(date +%s%N)" >> "$1/log"
"#;

/// The lease of the three hosts: the shortest storage allows.
const LEASE: Duration = Duration::from_secs(15);

/// What the hosts' output must show within: generous for a loaded
/// machine of two cores.
const LIMIT: Duration = Duration::from_secs(60);

/// One test's container and scratch directory.
struct Case {
    container: String,
    dir: PathBuf,
}

impl Case {
    fn new(name: &str) -> Case {
        let container = azurite::unique_container(&format!("schedule-{name}"));
        let dir = std::env::temp_dir().join(format!("blob-mutex-{container}"));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Case { container, dir }
    }

    /// `blob-mutex schedule` for `holder`, every 10 seconds, running
    /// [`JOB`] for `sleep` seconds; its stderr goes to `stderr-<holder>`.
    fn schedule(&self, holder: &str, sleep: &str) -> Child {
        let stderr = std::fs::File::create(self.dir.join(format!("stderr-{holder}")))
            .expect("create the stderr file");
        let mut command = blob_mutex_on(azurite::shared().connection_string());
        command
            .args(["schedule", "--container", &self.container, "--blob", "cron"])
            .args(["--cron", "*/10 * * * * *", "--catch-up", "45s"])
            .args(["--overlap", "wait", "--lease-duration", "15s"])
            .args(["--holder", holder, "--acquire-retry", "500ms"])
            .args(["--", "sh", "-c", JOB, BIN])
            .arg(&self.dir)
            .arg(sleep)
            .env("RUST_LOG", "info")
            .stderr(stderr);
        command.spawn().expect("start blob-mutex schedule")
    }

    /// The jobs' lines so far.
    fn log(&self) -> Vec<Line> {
        std::fs::read_to_string(self.dir.join("log"))
            .unwrap_or_default()
            .lines()
            .filter_map(Line::parse)
            .collect()
    }

    fn stderr(&self, holder: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("stderr-{holder}"))).unwrap_or_default()
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A line of the jobs' log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    start: bool,
    slot: String,
    pid: u32,
    holder: String,
    ns: u128,
}

impl Line {
    fn parse(text: &str) -> Option<Line> {
        let words: Vec<&str> = text.split(' ').collect();
        let (start, ns) = match words.as_slice() {
            ["start", _, _, _, _, ns] => (true, ns),
            ["end", _, _, _, ns] => (false, ns),
            _ => return None,
        };
        Some(Line {
            start,
            slot: words[1].to_owned(),
            pid: words[2].parse().ok()?,
            holder: words[3].to_owned(),
            ns: ns.parse().ok()?,
        })
    }
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// The time from `earlier` to `later`, wall clock in nanoseconds.
fn between(earlier: u128, later: u128) -> Duration {
    Duration::from_nanos(u64::try_from(later.saturating_sub(earlier)).unwrap_or(u64::MAX))
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Whether `pid` runs (exists and is no zombie).
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

/// Waits for a job of a slot not in `seen` to start on one of `holders`,
/// and returns its start line.
async fn a_new_job(case: &Case, seen: &[String], holders: &[&str]) -> Line {
    wait_for("a job of a new slot to start", LIMIT, || {
        let found = case
            .log()
            .into_iter()
            .find(|l| l.start && !seen.contains(&l.slot) && holders.contains(&l.holder.as_str()));
        async move { found }
    })
    .await
}

/// Waits until the job of `slot` has ended on a holder other than
/// `not`; returns its start and end lines.
async fn completed_elsewhere(case: &Case, slot: &str, not: &str) -> (Line, Line) {
    wait_for(
        &format!("slot {slot} completed by another host"),
        LIMIT,
        || {
            let log = case.log();
            let end = log
                .iter()
                .find(|l| !l.start && l.slot == slot && l.holder != not)
                .cloned();
            let start = end
                .as_ref()
                .and_then(|end| log.iter().find(|l| l.start && l.pid == end.pid).cloned());
            async move { start.zip(end) }
        },
    )
    .await
}

/// Waits until `pid` is gone; returns the wall clock then.
async fn gone(pid: u32) -> u128 {
    wait_for(&format!("process {pid} gone"), LIMIT, || async move {
        (!is_running(pid)).then(wall_ns)
    })
    .await
}

/// Three hosts on a cron of every 10 s for two minutes; the host running a
/// slot's job is killed with SIGKILL mid-job, later another is stopped
/// with SIGSTOP mid-job and continued with SIGCONT once its slot was completed elsewhere. From the jobs' own
/// lines: every slot from the first to the last of the two minutes
/// completed exactly once, no two jobs ran at once (a job that died counts
/// until its process was seen gone), and each slot whose host died was
/// completed by another host within the lease's expiry plus one retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// One scenario told in order (a kill, a stop, two minutes, the judgement):
// split, its steps would pass most of its state along.
#[allow(clippy::too_many_lines)]
async fn three_hosts_complete_every_slot_once_never_overlapping_through_a_kill_and_a_stop() {
    let case = Case::new("fleet");
    let holders = ["h1", "h2", "h3"];
    let mut hosts: BTreeMap<&str, Child> = holders
        .iter()
        .map(|h| (*h, case.schedule(h, "3")))
        .collect();
    let pid = |hosts: &BTreeMap<&str, Child>, h: &str| hosts[h].id().expect("running");
    let first = a_new_job(&case, &[], &holders).await;
    let began = wall_ns();
    let mut seen = vec![first.slot.clone()];
    let second = a_new_job(&case, &seen, &holders).await;
    seen.push(second.slot.clone());

    // SIGKILL the host of the next slot's job, mid-job.
    let killed = a_new_job(&case, &seen, &holders).await;
    seen.push(killed.slot.clone());
    let victim = killed.holder.clone();
    signal(pid(&hosts, &victim), "KILL");
    let killed_at = wall_ns();
    let _ = hosts.get_mut(victim.as_str()).unwrap().wait().await;
    let killed_job_gone = gone(killed.pid).await;
    let (retry, _) = completed_elsewhere(&case, &killed.slot, &victim).await;
    let mut cut_short = vec![(killed.slot.clone(), victim.clone(), retry.holder.clone())];
    let after_kill = between(killed_at, retry.ns);
    println!(
        "slot {} of the SIGKILLed {victim}: rerun by {} {after_kill:?} after the kill",
        killed.slot, retry.holder
    );
    assert!(
        retry.ns > killed_job_gone,
        "the retry started after the job was gone"
    );
    // The lease expires at most LEASE after the dead host's last renewal
    // (before the kill); the next campaign attempt comes within the
    // acquire retry; 10 s of slack for a loaded machine.
    assert!(
        after_kill < LEASE + Duration::from_secs(10),
        "{after_kill:?}"
    );

    // SIGSTOP the host of a later slot's job, mid-job (held until its
    // guard kills it: the job outlives the frozen host's lease), and wake
    // it once another host completed that slot.
    let alive: Vec<&str> = holders.iter().copied().filter(|h| *h != victim).collect();
    let hold = case.dir.join("hold");
    std::fs::write(&hold, "").unwrap();
    let stopped = a_new_job(&case, &seen, &alive).await;
    seen.push(stopped.slot.clone());
    let sleeper = stopped.holder.clone();
    signal(pid(&hosts, &sleeper), "STOP");
    let stopped_at = wall_ns();
    let stopped_job_gone = gone(stopped.pid).await;
    std::fs::remove_file(&hold).unwrap();
    let (retry, _) = completed_elsewhere(&case, &stopped.slot, &sleeper).await;
    cut_short.push((stopped.slot.clone(), sleeper.clone(), retry.holder.clone()));
    let after_stop = between(stopped_at, retry.ns);
    println!(
        "slot {} of the SIGSTOPped {sleeper}: its job killed {:?} after the stop, rerun by {} {after_stop:?} after it",
        stopped.slot,
        between(stopped_at, stopped_job_gone),
        retry.holder
    );
    assert!(
        retry.ns > stopped_job_gone,
        "the retry started after the job was gone"
    );
    assert!(
        after_stop < LEASE + Duration::from_secs(10),
        "{after_stop:?}"
    );
    signal(pid(&hosts, &sleeper), "CONT");

    // Two minutes in all, then stop the hosts as a service manager would.
    let last = wait_for("two minutes of slots", Duration::from_secs(240), || {
        let log = case.log();
        let done = (wall_ns() - began > 120_000_000_000)
            .then(|| {
                log.iter()
                    .filter(|l| !l.start)
                    .map(|l| l.slot.clone())
                    .max()
            })
            .flatten();
        async move { done }
    })
    .await;
    for h in alive {
        signal(pid(&hosts, h), "TERM");
    }
    for (h, host) in hosts.iter_mut().filter(|(h, _)| **h != victim) {
        let status = tokio::time::timeout(LIMIT, host.wait())
            .await
            .unwrap_or_else(|_| panic!("{h} did not stop after SIGTERM"))
            .unwrap();
        assert_eq!(status.code(), Some(143), "{h}: {}", case.stderr(h));
    }
    let stopped_all = wall_ns();

    judge(
        &case,
        &first.slot,
        &last,
        &[
            (killed.pid, killed_job_gone),
            (stopped.pid, stopped_job_gone),
        ],
        stopped_all,
    );
    for h in holders {
        let stderr = case.stderr(h);
        assert!(!stderr.contains("AccountKey"), "{h}: {stderr}");
    }
    one_line_on_each_host(&case, &holders, &second);
    cut_short_named(&case, &holders, &cut_short);
}

/// A host other than the one whose run of `slot` was cut short (`dead`)
/// names it: the first to take the slot after it, which is the one that
/// ran it again (`by`) unless that one's own term was cut short too.
fn cut_short_named(case: &Case, holders: &[&str], cut_short: &[(String, String, String)]) {
    for (slot, dead, by) in cut_short {
        let named = holders.iter().filter(|h| **h != dead.as_str()).any(|h| {
            case.stderr(h).lines().any(|l| {
                l.contains("was cut short")
                    && l.contains(&format!("slot={slot}"))
                    && l.contains(&format!("cut_short_on={dead}"))
            })
        });
        assert!(
            named,
            "nobody named {dead} on slot {slot}; {by}'s stderr: {}",
            case.stderr(by)
        );
    }
}

/// A slot that came due while every host ran: one line of it on each
/// host's stderr, the holder's that it ran there and every other's that it
/// was done on the holder.
fn one_line_on_each_host(case: &Case, holders: &[&str], slot: &Line) {
    for h in holders {
        let stderr = case.stderr(h);
        let said = if *h == slot.holder {
            format!("slot: ran on {h} with epoch")
        } else {
            format!("slot: done on {} with epoch", slot.holder)
        };
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("slot: ") && l.contains(slot.slot.as_str()))
            .collect();
        assert!(
            lines.len() == 1 && lines[0].contains(&said),
            "{h} on slot {}: {lines:?}",
            slot.slot
        );
    }
}

/// From the jobs' lines: each slot from `first` to `last` (every 10 s)
/// ended exactly once, and no two jobs' lives overlap; a job without an
/// end line lived until it was seen gone (`died`: its pid and then), or,
/// for a slot after `last`, until the hosts were stopped (`stopped`).
fn judge(case: &Case, first: &str, last: &str, died: &[(u32, u128)], stopped: u128) {
    let log = case.log();
    let last_key = last;
    let first: jiff::Timestamp = first.parse().unwrap();
    let last: jiff::Timestamp = last.parse().unwrap();
    let mut expected = Vec::new();
    let mut at = first;
    while at <= last {
        expected.push(at.to_string());
        at += jiff::SignedDuration::from_secs(10);
    }
    let mut ended: BTreeMap<&str, usize> = BTreeMap::new();
    for line in log.iter().filter(|l| !l.start) {
        *ended.entry(&line.slot).or_default() += 1;
    }
    for slot in &expected {
        assert_eq!(
            ended.get(slot.as_str()),
            Some(&1),
            "slot {slot} ended once: {log:#?}"
        );
    }
    println!(
        "{} slots completed once each, from {first} to {last}",
        expected.len()
    );
    let mut lives: Vec<(u128, u128, u32)> = log
        .iter()
        .filter(|l| l.start)
        .map(|start| {
            let end = log
                .iter()
                .find(|l| !l.start && l.pid == start.pid)
                .map(|l| l.ns)
                .or_else(|| died.iter().find(|(pid, _)| *pid == start.pid).map(|d| d.1))
                // A job after the last slot judged may have been stopped by
                // the SIGTERM that ended its host: it lived until then.
                .or_else(|| (start.slot.as_str() > last_key).then_some(stopped))
                .unwrap_or_else(|| panic!("job {start:?} has no end: {log:#?}"));
            (start.ns, end, start.pid)
        })
        .collect();
    lives.sort_unstable();
    for pair in lives.windows(2) {
        assert!(pair[0].1 < pair[1].0, "jobs overlap: {pair:?} in {log:#?}");
    }
}

/// Runs `blob-mutex args` to its end, with no storage in its environment.
fn blob_mutex(args: &[&str]) -> Output {
    std::process::Command::new(BIN)
        .args(args)
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .output()
        .expect("run blob-mutex")
}

/// A bad cron expression (seven fields among them), time zone (one not
/// spelled as the tz database spells it among them, with its spelling),
/// window or number of retries, and a schedule without a command, are
/// one-line usage errors (exit code 2) naming the flag and what was typed,
/// before any request.
#[test]
fn a_bad_cron_a_bad_zone_and_no_command_are_usage_errors_naming_the_flag() {
    let cases: [(&[&str], &str); 11] = [
        (&["--cron", "*/10 * * *", "--", "true"], "--cron"),
        (&["--cron", "0 30 2 * * * 2026", "--", "true"], "--cron"),
        (&["--cron", "61 * * * *", "--", "true"], "--cron"),
        (
            &["--cron", "0 2 * * *", "--tz", "Mars/Olympus", "--", "true"],
            "--tz",
        ),
        (
            &["--cron", "0 2 * * *", "--tz", "europe/berlin", "--", "true"],
            "--tz",
        ),
        (&["--cron", "0 2 * * *"], "CMD"),
        (
            &["--cron", "0 2 * * *", "--catch-up", "0", "--", "true"],
            "--catch-up",
        ),
        (
            &["--cron", "0 2 * * *", "--catch-up", "500ms", "--", "true"],
            "--catch-up",
        ),
        (
            &["--cron", "0 2 * * *", "--catch-up", "-5s", "--", "true"],
            "--catch-up",
        ),
        (
            &["--cron", "0 2 * * *", "--retries", "-1", "--", "true"],
            "--retries",
        ),
        (
            &["--cron", "*/1 * * * * *", "--catch-up", "12h", "--", "true"],
            "--catch-up",
        ),
    ];
    let mut spelled = false;
    for (args, flag) in cases {
        let mut all = vec!["schedule", "--dev", "-c", "leases", "-b", "nightly"];
        all.extend_from_slice(args);
        let output = blob_mutex(&all);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr:?}");
        assert!(stderr.starts_with("blob-mutex: "), "{stderr:?}");
        assert!(stderr.contains(flag), "{args:?}: {flag} in {stderr:?}");
        let typed = args[args.iter().position(|a| *a == flag).map_or(0, |i| i + 1)];
        assert!(
            flag == "CMD" || stderr.contains(typed.trim_start_matches('-')),
            "{args:?}: {typed:?} in {stderr:?}"
        );
        // A zone spelled otherwise than the tz database's: its spelling.
        if typed == "europe/berlin" {
            assert!(stderr.contains("\"Europe/Berlin\""), "{stderr:?}");
            spelled = true;
        }
    }
    assert!(spelled);
}

/// A schedule on a blob that holds a run once's completion record stops at
/// its first look, a usage error (exit code 2) naming the blob and what it
/// holds, and the record is left as it was.
#[tokio::test]
async fn a_schedule_on_a_blob_that_holds_a_completion_record_exits_2_naming_what_it_holds() {
    let container = azurite::unique_container("schedule-other-record");
    let connection = azurite::shared().connection_string();
    let mut once = blob_mutex_on(connection.clone());
    once.args([
        "run",
        "--once",
        "--done-key",
        "v1",
        "--container",
        &container,
    ])
    .args(["--blob", "nightly", "--", "true"]);
    let once = once.output().await.expect("run blob-mutex run --once");
    assert!(once.status.success(), "{once:?}");
    let store = BlobLeaseManager::new(&azurite::shared().settings(&container, "nightly")).unwrap();
    let before = store.read_state().await.unwrap();
    let mut schedule = blob_mutex_on(connection);
    schedule
        .args(["schedule", "--container", &container, "--blob", "nightly"])
        .args(["--cron", "* * * * * *", "--", "true"]);
    let output = tokio::time::timeout(LIMIT, schedule.output())
        .await
        .expect("schedule exits")
        .expect("run blob-mutex schedule");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("blob-mutex: ")
            && last.contains(&format!("{container}/nightly"))
            && last.contains("completion record of a run once"),
        "{stderr}"
    );
    assert_eq!(store.read_state().await.unwrap(), before);
}

/// `--timeout`: a slot's command that runs past it is stopped, and the run
/// is a failed attempt whose line says why.
#[tokio::test]
async fn a_slots_command_that_runs_past_its_timeout_is_stopped_as_a_failed_attempt() {
    let case = Case::new("timeout");
    let stderr = std::fs::File::create(case.dir.join("stderr")).unwrap();
    let mut command = blob_mutex_on(azurite::shared().connection_string());
    command
        .args(["schedule", "--container", &case.container, "--blob", "cron"])
        .args([
            "--cron",
            "*/5 * * * * *",
            "--timeout",
            "1s",
            "--retries",
            "0",
        ])
        .args(["--", "sh", "-c", "echo $$ > \"$0/pid\"; exec sleep 60"])
        .arg(&case.dir)
        .env("RUST_LOG", "info")
        .stderr(stderr);
    let mut schedule = command.spawn().expect("start blob-mutex schedule");
    let line = wait_for("the timeout's line", LIMIT, || async {
        let text = std::fs::read_to_string(case.dir.join("stderr")).unwrap_or_default();
        text.lines()
            .find(|l| l.contains("ran past --timeout 1s and was stopped"))
            .map(str::to_owned)
    })
    .await;
    assert!(line.contains("job failed"), "{line}");
    let pid: u32 = std::fs::read_to_string(case.dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!is_running(pid), "the command still runs: {line}");
    schedule.kill().await.unwrap();
}

/// A new schedule whose first term comes after a slot runs that slot: a
/// new record begins when its host started, not at its first term. On a
/// new blob the first term comes a second or two late (its first epoch
/// waits for storage's clock), and a schedule started 2 s before a slot
/// skipped it; here another host's term holds the lease from 6 s before
/// the slot to 2 s after it, so that a loaded machine's slow start still
/// comes before the slot.
#[tokio::test]
async fn a_new_schedule_whose_first_term_comes_after_a_slot_runs_that_slot() {
    let case = Case::new("first-term-late");
    let store =
        BlobLeaseManager::new(&azurite::shared().settings(&case.container, "cron")).unwrap();
    // Six seconds before a slot of every ten, on the host's clock, which
    // is Azurite's.
    let ten = Duration::from_secs(10).as_nanos();
    let now = wall_ns();
    let mut start = now - now % ten + Duration::from_secs(4).as_nanos();
    if start < now + Duration::from_millis(500).as_nanos() {
        start += ten;
    }
    let slot_ns = start - start % ten + ten;
    let slot = jiff::Timestamp::from_nanosecond(i128::try_from(slot_ns).expect("a timestamp"))
        .expect("a timestamp");
    tokio::time::sleep(between(now, start)).await;
    // Held for 8 s of its 15.
    let lease = LeaseId::new();
    store.acquire(lease, LEASE).await.unwrap();
    let advertised = StampOptions::new().with_advertised("schedule tz=UTC cron=*/10 * * * * *");
    store.stamp(lease, "web-0", &advertised).await.unwrap();
    let mut command = blob_mutex_on(azurite::shared().connection_string());
    command
        .args(["schedule", "--container", &case.container, "--blob", "cron"])
        .args(["--cron", "*/10 * * * * *", "--", "sh", "-c"])
        .arg(r#"echo "$BLOB_MUTEX_SLOT" >> "$0/slots""#)
        .arg(&case.dir)
        .stderr(std::fs::File::create(case.dir.join("stderr")).unwrap());
    let mut schedule = command.spawn().expect("start blob-mutex schedule");
    // Released 2 s after the slot.
    let release = slot_ns + Duration::from_secs(2).as_nanos();
    tokio::time::sleep(between(wall_ns(), release)).await;
    store.release(lease).await.unwrap();
    let first = wait_for("the first slot's job", LIMIT, || async {
        let slots = std::fs::read_to_string(case.dir.join("slots")).unwrap_or_default();
        slots.lines().next().map(str::to_owned)
    })
    .await;
    schedule.kill().await.unwrap();
    let stderr = std::fs::read_to_string(case.dir.join("stderr")).unwrap_or_default();
    assert_eq!(first, slot.to_string(), "{stderr}");
}

/// Storage restarted without its data mid-job (an Azurite in memory): the
/// schedule says that the record is gone, naming the slot whose run was
/// under way, and runs that slot again.
#[tokio::test]
async fn storage_restarted_empty_mid_job_is_said_naming_the_slot_under_way_which_runs_again() {
    let case = Case::new("restarted-empty");
    let mut storage = azurite::Azurite::start();
    let mut command = blob_mutex_on(storage.connection_string());
    command
        .args(["schedule", "--container", &case.container, "--blob", "cron"])
        .args(["--cron", "*/10 * * * * *", "--holder", "h1", "--"])
        .args([
            "sh",
            "-c",
            r#"echo "$BLOB_MUTEX_SLOT" >> "$0/slots"; sleep 6"#,
        ])
        .arg(&case.dir)
        .stderr(std::fs::File::create(case.dir.join("stderr")).unwrap());
    let mut schedule = command.spawn().expect("start blob-mutex schedule");
    let slots = || std::fs::read_to_string(case.dir.join("slots")).unwrap_or_default();
    let slot = wait_for("the first slot's job", LIMIT, || async {
        slots().lines().next().map(str::to_owned)
    })
    .await;
    storage.restart();
    wait_for("the slot run again", LIMIT, || async {
        (slots().lines().filter(|l| *l == slot).count() == 2).then_some(())
    })
    .await;
    schedule.kill().await.unwrap();
    let stderr = std::fs::read_to_string(case.dir.join("stderr")).unwrap_or_default();
    let gone = stderr.lines().find(|l| l.contains("the record is gone"));
    assert!(
        gone.is_some_and(|l| l.contains(&format!("the run of {slot} on h1 "))),
        "{stderr}"
    );
}

/// A schedule that storage never answers (a port nothing listens on)
/// exits 1 once `--first-contact-timeout` has passed, as `run` does, with a
/// line that says what to check.
#[tokio::test]
async fn a_schedule_storage_never_answered_exits_1_after_the_first_contact_timeout() {
    let closed = free_addr();
    let connection = azurite::connection_string(&format!("http://{closed}/devstoreaccount1"));
    let started = std::time::Instant::now();
    let mut schedule = blob_mutex_on(connection);
    schedule
        .args(["schedule", "--container", "leases", "--blob", "nightly"])
        .args(["--cron", "* * * * * *", "--first-contact-timeout", "3s"])
        .args(["--", "true"]);
    let output = tokio::time::timeout(LIMIT, schedule.output())
        .await
        .expect("schedule exits")
        .expect("run blob-mutex schedule");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("blob-mutex: ")
            && last.contains("within 3s")
            && last.contains("leases/nightly"),
        "{stderr}"
    );
    // The bound, a look cut at the request timeout (3 s), and a loaded
    // machine.
    assert!(took < Duration::from_secs(15), "gave up after {took:?}");
}

/// `status` on a blob that holds a schedule's record shows its last slots,
/// each with its outcome and holder, and the next slot after storage's
/// clock, of `--cron` or else of the expression the last term advertised;
/// `--json` the same as `schedule` fields. It exits 0 with the lease free
/// between slots.
#[tokio::test]
async fn status_shows_a_schedules_last_slots_and_the_next_one() {
    let container = azurite::unique_container("schedule-status");
    let store = BlobLeaseManager::new(&azurite::shared().settings(&container, "nightly")).unwrap();
    let lease = LeaseId::new();
    store.acquire(lease, LEASE).await.unwrap();
    let record = "blob-mutex schedule v1\n\
        through=2026-11-26T02:30:00Z\n\
        slot=2026-11-27T02:30:00Z done attempts=2 epoch=7 retry=- holder=web-1\n\
        slot=2026-11-28T02:30:00Z failed attempts=1 epoch=8 retry=2026-11-28T02:30:20Z holder=web-2\n";
    store.write_state(lease, record.as_bytes()).await.unwrap();
    store.release(lease).await.unwrap();
    let status = |flags: &'static [&'static str]| {
        let container = container.clone();
        async move {
            let mut command = blob_mutex_on(azurite::shared().connection_string());
            command
                .args(["status", "--container", &container, "--blob", "nightly"])
                .args(flags);
            command.output().await.expect("run blob-mutex status")
        }
    };
    let text = status(&["--cron", "30 2 * * *"]).await;
    let stdout = String::from_utf8_lossy(&text.stdout);
    // A schedule's lease is free between slots: that is no free lease to
    // report (exit 3), but a schedule that waits for its next slot.
    assert_eq!(
        text.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&text.stderr)
    );
    let tail = stdout.split_once("slot ").map(|(_, t)| format!("slot {t}"));
    let tail = tail.unwrap_or_else(|| panic!("no slots in {stdout}"));
    let next = tail.lines().last().unwrap_or_default().to_owned();
    assert_eq!(
        tail.lines().take(2).collect::<Vec<_>>(),
        [
            "slot         2026-11-27T02:30:00Z done (attempts 2) holder web-1 epoch 7",
            "slot         2026-11-28T02:30:00Z failed (attempts 1, retry at 2026-11-28T02:30:20Z) holder web-2 epoch 8",
        ],
        "{stdout}"
    );
    assert!(next.starts_with("next slot    "), "{stdout}");
    assert!(next.ends_with("T02:30:00Z"), "{stdout}");

    let json = status(&["--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        json["schedule"]["slots"][1],
        serde_json::json!({
            "slot": "2026-11-28T02:30:00Z",
            "outcome": "failed",
            "attempts": 1,
            "epoch": 8,
            "holder": "web-2",
            "retry_at": "2026-11-28T02:30:20Z",
            "gave_up": false,
        }),
        "{json}"
    );
    assert_eq!(json["schedule"]["next"], serde_json::Value::Null, "{json}");

    // A term that advertised its schedule's expression, as a schedule's
    // terms do: the next slot without --cron.
    let lease = LeaseId::new();
    store.acquire(lease, LEASE).await.unwrap();
    let advertised =
        StampOptions::new().with_advertised("schedule tz=Europe/Berlin cron=30 2 * * *");
    store.stamp(lease, "web-3", &advertised).await.unwrap();
    // The stamp keeps nanoseconds; status shows milliseconds, as its docs
    // do.
    for flags in [&["--json"][..], &[]] {
        let shown = status(flags).await;
        let shown = String::from_utf8_lossy(&shown.stdout);
        let (_, fraction) = shown.split_once("acquired").unwrap_or_default();
        let (_, fraction) = fraction.split_once('.').unwrap_or_default();
        let digits = fraction.chars().take_while(char::is_ascii_digit).count();
        assert_eq!(digits, 3, "{shown}");
    }
    store.release(lease).await.unwrap();
    let text = status(&[]).await;
    let stdout = String::from_utf8_lossy(&text.stdout);
    let next = stdout.lines().last().unwrap_or_default();
    assert!(next.starts_with("next slot    "), "{stdout}");
    assert!(next.ends_with("T01:30:00Z"), "{stdout}");
    // web-3's term found nothing to run: the last holder is the host that
    // ran the last slot, with its term's epoch.
    assert!(
        stdout.contains("last holder  web-2\nepoch        8\n"),
        "{stdout}"
    );
    let json = status(&["--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let next = json["schedule"]["next"].as_str().unwrap_or_default();
    assert!(next.ends_with("T01:30:00Z"), "{json}");
}

/// `schedule --metrics-addr`: `/readyz` is ready while the host waits for
/// its next slot (where a mutex's probe would say "not campaigning") and
/// while it runs one, `/readyz?leader` and `/leader` only while it holds the
/// lease, `/livez` throughout, and `/metrics` counts the slots; `status`
/// tells the next slot from what the running term advertised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_of_a_schedule_are_ready_between_slots_and_lead_while_a_slot_runs() {
    let case = Case::new("schedule-probes");
    let (hold, started) = (case.dir.join("hold"), case.dir.join("started"));
    std::fs::write(&hold, "").unwrap();
    let addr = free_addr();
    // Says it started, then runs while the hold file exists.
    let job = r#"touch "$1"; while [ -e "$0" ]; do sleep 0.1; done"#;
    let mut child = blob_mutex_on(azurite::shared().connection_string())
        .args(["schedule", "--container", &case.container, "--blob", "job"])
        .args(["--cron", "*/2 * * * * *", "--metrics-addr", &addr])
        .args(["--holder", "h0", "--", "sh", "-c", job])
        .args([&hold, &started])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let answer = |path: &'static str, status: u16, starts: &'static str| {
        let addr = addr.clone();
        async move {
            get(&addr, path)
                .await
                .filter(|(s, body)| *s == status && body.starts_with(starts))
                .map(|(_, body)| body)
        }
    };
    let limit = Duration::from_secs(30);
    wait_for("the first job", limit, || async {
        started.exists().then_some(())
    })
    .await;
    let (status, leading) = get(&addr, "/readyz?leader").await.unwrap();
    assert!(
        status == 200 && leading.starts_with("ready: leader of term "),
        "{status} {leading}"
    );
    assert_eq!(get(&addr, "/readyz").await, Some((200, leading)));
    assert_eq!(get(&addr, "/livez").await, Some((200, "ok\n".to_owned())));
    let (_, leader) = get(&addr, "/leader").await.unwrap();
    assert!(
        leader.contains(r#""holder":"h0""#) && leader.contains(r#""this_instance_leads":true"#),
        "{leader}"
    );
    // The term advertises its expression: `status` tells the next slot
    // without --cron.
    let shown = blob_mutex_on(azurite::shared().connection_string())
        .args(["status", "--container", &case.container, "--blob", "job"])
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("advertised   schedule tz=UTC cron=*/2 * * * * *\n"),
        "{shown}"
    );
    let next = shown.lines().last().unwrap_or_default();
    assert!(
        next.starts_with("next slot    ") && next.ends_with('Z'),
        "{shown}"
    );

    // The job ends; between slots the host is ready, and leads nothing.
    std::fs::remove_file(&hold).unwrap();
    wait_for("waiting for a slot", limit, || {
        answer("/readyz", 200, "ready: waiting for the slot at ")
    })
    .await;
    wait_for("not the leader between slots", limit, || {
        answer(
            "/readyz?leader",
            503,
            "not the leader: waiting for the slot at ",
        )
    })
    .await;
    assert_eq!(get(&addr, "/livez").await, Some((200, "ok\n".to_owned())));
    wait_for("a slot counted as ran", limit, || async {
        let (_, metrics) = get(&addr, "/metrics").await?;
        metrics
            .lines()
            .any(|l| {
                l.starts_with("blob_mutex_schedule_slots_total{")
                    && l.contains(r#"outcome="ran""#)
                    && !l.ends_with(" 0")
            })
            .then_some(())
    })
    .await;
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// At the default level, in JSON: a schedule says at start what runs (the
/// expression, its zone and window, the next slot), and at SIGTERM between
/// slots that no job runs, each line naming the lease and the holder.
#[tokio::test]
async fn a_schedule_says_what_runs_at_start_and_what_stops_at_a_signal_naming_its_lease() {
    let case = Case::new("lines");
    let stderr = std::fs::File::create(case.dir.join("stderr")).unwrap();
    let mut command = blob_mutex_on(azurite::shared().connection_string());
    command
        .args(["schedule", "--container", &case.container, "--blob", "cron"])
        .args(["--cron", "0 3 1 1 *", "--tz", "Europe/Berlin"])
        .args(["--log-format", "json", "--", "true"])
        .stderr(stderr);
    let mut schedule = command.spawn().expect("start blob-mutex schedule");
    let lines = || {
        std::fs::read_to_string(case.dir.join("stderr"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))
            })
            .collect::<Vec<_>>()
    };
    let said = |events: &[serde_json::Value], what: &str| {
        events
            .iter()
            .find(|e| {
                e["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(what))
            })
            .cloned()
    };
    let start = wait_for("the start line", LIMIT, || {
        let events = lines();
        async move { said(&events, "schedule: running `0 3 1 1 *` in Europe/Berlin") }
    })
    .await;
    let message = start["fields"]["message"].as_str().unwrap();
    assert!(message.contains("catch-up window 60s"), "{start}");
    assert!(message.contains("the next slot is at 20"), "{start}");
    assert!(message.ends_with(":00:00Z by this host's clock"), "{start}");
    // The first look has been made once the probe-free process waits: a
    // signal now finds no job.
    wait_for("a look at the record", LIMIT, || async {
        let store =
            BlobLeaseManager::new(&azurite::shared().settings(&case.container, "cron")).unwrap();
        store.inspect().await.ok().flatten().map(|_| ())
    })
    .await;
    signal(schedule.id().unwrap(), "TERM");
    let status = tokio::time::timeout(LIMIT, schedule.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(143));
    let events = lines();
    let stop = said(&events, "stopping: no job runs").unwrap_or_else(|| panic!("{events:#?}"));
    for event in [&start, &stop] {
        let spans = event["spans"].as_array().unwrap();
        let named = spans.iter().filter(|s| s.get("lease").is_some()).count();
        assert_eq!(named, 1, "the lease once: {event}");
        assert!(
            spans.iter().any(
                |s| s["lease"].as_str().is_some_and(|l| l.ends_with("/cron"))
                    && s["holder"].is_string()
            ),
            "{event}"
        );
    }
}
