//! `blob-mutex state get/put`: the command that `run` starts writes the
//! leader state under `run`'s lease; a write after that lease was broken is
//! refused with code 4 and does not land.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use blob_mutex_testkit::{azurite, wait_for};
use tokio::process::Command;

use crate::support::{blob_mutex_on, BIN};

struct Case {
    container: String,
    dir: PathBuf,
}

impl Case {
    fn new(name: &str) -> Case {
        let container = azurite::unique_container(&format!("state-{name}"));
        let dir = std::env::temp_dir().join(format!("blob-mutex-{container}"));
        std::fs::create_dir_all(&dir).unwrap();
        Case { container, dir }
    }

    /// `blob-mutex <args>`, connected through the environment variable.
    #[allow(clippy::unused_self)] // a method, like the others of the case
    fn command(&self, args: &[&str]) -> Command {
        let mut command = blob_mutex_on(azurite::shared().connection_string());
        command.args(args).env_remove("BLOB_MUTEX_LEASE_ID");
        command
    }

    /// `blob-mutex run` on this case's blob with `script` as the command
    /// (`$0` is this binary, `$1` the scratch directory).
    fn run(&self, flags: &[&str], script: &str) -> Command {
        let mut command = self.command(&["run", "--container", &self.container, "--blob", "lock"]);
        command
            .args(flags)
            .args(["--", "sh", "-c", script, BIN])
            .arg(&self.dir);
        command
    }

    /// `blob-mutex state get` from outside any `run`.
    async fn get(&self) -> Output {
        self.command(&[
            "state",
            "get",
            "--container",
            &self.container,
            "--blob",
            "lock",
        ])
        .output()
        .await
        .unwrap()
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(name)).ok()
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn state_put_inside_the_command_is_read_outside_and_the_lease_id_is_never_printed() {
    let case = Case::new("put-get");
    let script = r#"
        printf 'epoch=%s' "$BLOB_MUTEX_EPOCH" | "$0" state put || exit 9
        printf '%s' "$BLOB_MUTEX_LEASE_ID" > "$1/lease-id"
        "$0" state get > "$1/inside"
    "#;
    let output = case.run(&[], script).output().await.unwrap();
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let lease_id = case.read("lease-id").expect("the command saw a lease id");
    assert_eq!(lease_id.len(), 36, "a UUID: {lease_id:?}");
    assert!(
        !stdout.contains(&lease_id) && !stderr.contains(&lease_id),
        "run printed its lease id"
    );
    let inside = case.read("inside").expect("the command read its state");
    let epoch: u64 = inside
        .strip_prefix("epoch=")
        .and_then(|e| e.parse().ok())
        .unwrap_or_else(|| panic!("{inside:?}"));
    assert!(epoch > 0, "{inside}");

    let outside = case.get().await;
    assert_eq!(outside.status.code(), Some(0), "{}", text(&outside.stderr));
    assert_eq!(text(&outside.stdout), inside);
}

#[tokio::test]
async fn state_put_after_the_lease_was_broken_exits_4_and_does_not_land() {
    let case = Case::new("refused");
    // A long lease, so that `run` notices the break only long after the
    // command's second write: that write meets the broken lease itself.
    let script = r#"
        printf first | "$0" state put || exit 9
        touch "$1/written"
        while [ ! -e "$1/go" ]; do sleep 0.05; done
        printf late | "$0" state put 2> "$1/put-stderr"
        code=$?
        echo "$code" > "$1/code"
        exit "$code"
    "#;
    let mut run = case
        .run(&["--lease-duration", "60s"], script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the first write", Duration::from_secs(20), || async {
        case.read("written")
    })
    .await;
    let broke = case
        .command(&["break", "--container", &case.container, "--blob", "lock"])
        .output()
        .await
        .unwrap();
    assert_eq!(broke.status.code(), Some(0), "{}", text(&broke.stderr));
    std::fs::write(case.dir.join("go"), "").unwrap();
    let code = wait_for("the late write", Duration::from_secs(20), || async {
        case.read("code")
    })
    .await;
    assert_eq!(code.trim(), "4", "a refused write exits 4");
    let stderr = case.read("put-stderr").unwrap_or_default();
    assert!(
        stderr.starts_with("blob-mutex: ")
            && stderr.contains("refused")
            && stderr.lines().count() == 1,
        "{stderr:?}"
    );
    let status = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .expect("run exits after its command")
        .unwrap();
    assert_eq!(status.code(), Some(4), "run passes the command's code on");
    assert_eq!(
        text(&case.get().await.stdout),
        "first",
        "the late write did not land"
    );
}

#[tokio::test]
async fn state_put_outside_run_is_a_usage_error_and_get_of_a_new_blob_is_empty() {
    let case = Case::new("outside");
    let put = case
        .command(&[
            "state",
            "put",
            "--container",
            &case.container,
            "--blob",
            "lock",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(put.status.code(), Some(2), "{}", text(&put.stderr));
    assert!(text(&put.stderr).contains("BLOB_MUTEX_LEASE_ID"));
    let get = case.get().await;
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert!(get.stdout.is_empty());
}

/// A listener on 127.0.0.1 that accepts every connection and never
/// answers; the connections stay open for as long as the test runs.
async fn silent_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    format!("http://127.0.0.1:{port}/devstoreaccount1")
}

#[tokio::test]
async fn state_get_and_put_give_up_within_the_request_timeout_on_a_silent_endpoint() {
    let endpoint = silent_endpoint().await;
    for backend in ["official", "sdk-v021"] {
        for (verb, stdin) in [("get", Stdio::null()), ("put", Stdio::piped())] {
            let started = std::time::Instant::now();
            let mut command = Command::new(BIN);
            command
                .args(["state", verb, "--container", "silent", "--blob", "lock"])
                .args(["--request-timeout", "1s", "--backend", backend])
                .env(
                    "AZURE_STORAGE_CONNECTION_STRING",
                    azurite::connection_string(&endpoint),
                )
                .env(
                    "BLOB_MUTEX_LEASE_ID",
                    blob_mutex::store::LeaseId::new().to_string(),
                )
                .env_remove("RUST_LOG")
                .stdin(stdin)
                .kill_on_drop(true);
            let mut child = command
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            drop(child.stdin.take()); // `put` reads an empty state
            let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
                .await
                .unwrap_or_else(|_| panic!("state {verb} on {backend} still running after 20 s"))
                .unwrap();
            let took = started.elapsed();
            assert_ne!(
                output.status.code(),
                Some(0),
                "state {verb} on {backend}: {}",
                text(&output.stderr)
            );
            assert!(
                took < Duration::from_secs(5),
                "state {verb} on {backend} took {took:?}: {}",
                text(&output.stderr)
            );
        }
    }
}
