//! A client that is not this crate: the Python `azure-storage-blob` SDK,
//! installed (pinned) into a virtual environment under `target/` the first
//! time a test needs it.
//!
//! Azurite must be started with `--skipApiVersionCheck`
//! (`Azurite::start_with_args`), because the Python SDK speaks a newer API
//! version than Azurite 3.35 knows.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The pinned SDK.
pub const PACKAGE: &str = "azure-storage-blob==12.31.1";

const SCRIPT: &str = r#"
import json, sys, time
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobServiceClient, BlobLeaseClient

cs, container, blob_name, command, *args = sys.argv[1:]
blob = BlobServiceClient.from_connection_string(cs).get_blob_client(container, blob_name)

if command == "break":
    BlobLeaseClient(blob).break_lease(lease_break_period=int(args[0]))
elif command == "acquire":
    # Take the lease from whoever holds it: break, then acquire, until ours.
    duration, lease_id = int(args[0]), args[1]
    for _ in range(50):
        try:
            BlobLeaseClient(blob, lease_id=lease_id).acquire(lease_duration=duration)
            print(lease_id)
            break
        except HttpResponseError as e:
            if e.status_code != 409:
                raise
            try:
                BlobLeaseClient(blob).break_lease(lease_break_period=0)
            except HttpResponseError:
                pass
            time.sleep(0.05)
    else:
        sys.exit("could not acquire the lease")
elif command == "release":
    BlobLeaseClient(blob, lease_id=args[0]).release()
elif command == "put":
    content, lease = args[0], (args[1] if len(args) > 1 else None)
    blob.upload_blob(content.encode(), overwrite=True, lease=lease, metadata={"owner": "foreign"})
elif command == "get":
    props = blob.get_blob_properties()
    print(json.dumps({
        "content": blob.download_blob().readall().decode(),
        "metadata": props.metadata,
        "lease_state": props.lease.state,
    }))
else:
    sys.exit("unknown command " + command)
"#;

/// The Python interpreter of the virtual environment, installing it first
/// if needed. Several test processes may ask at once: each builds its own
/// environment and the first to finish renames it into place.
pub fn python() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> → target/
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test binary is in target/<profile>/deps");
    let venv = target.join(format!("py-{}", PACKAGE.replace("==", "-")));
    let python = venv.join("bin").join("python");
    if venv.join("installed").exists() {
        return python;
    }
    let building = target.join(format!("py-building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    run(
        Command::new("python3").arg("-m").arg("venv").arg(&building),
        "create a Python virtual environment with `python3 -m venv` (Python 3.8 or later with venv is needed)",
    );
    run(
        Command::new(building.join("bin").join("python")).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PACKAGE,
        ]),
        &format!(
            "install {PACKAGE} with pip (PyPI must be reachable, or install it into {} yourself)",
            venv.display()
        ),
    );
    std::fs::write(building.join("installed"), PACKAGE).expect("mark the environment installed");
    if std::fs::rename(&building, &venv).is_err() {
        // Another test process was first.
        let _ = std::fs::remove_dir_all(&building);
    }
    assert!(
        venv.join("installed").exists(),
        "the Python environment {} is incomplete",
        venv.display()
    );
    python
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot {what}: {e}"));
    assert!(
        output.status.success(),
        "cannot {what}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The Python SDK acting on one blob.
pub struct Foreign {
    python: PathBuf,
    script: PathBuf,
    args: [String; 3],
}

impl Foreign {
    /// A foreign client of `container`/`blob` with `connection_string`.
    pub fn new(connection_string: &str, container: &str, blob: &str) -> Foreign {
        let python = python();
        let script = python
            .parent()
            .and_then(Path::parent)
            .expect("venv/bin/python")
            .join("foreign.py");
        if std::fs::read_to_string(&script).ok().as_deref() != Some(SCRIPT) {
            let temp = script.with_extension(format!("{}.tmp", std::process::id()));
            std::fs::write(&temp, SCRIPT).expect("write the foreign client script");
            std::fs::rename(&temp, &script).expect("put the foreign client script in place");
        }
        Foreign {
            python,
            script,
            args: [
                connection_string.to_owned(),
                container.to_owned(),
                blob.to_owned(),
            ],
        }
    }

    /// Runs one command of the script; returns its standard output.
    pub fn call(&self, command: &[&str]) -> String {
        let output = Command::new(&self.python)
            .arg(&self.script)
            .args(&self.args)
            .args(command)
            .output()
            .expect("run the Python foreign client");
        assert!(
            output.status.success(),
            "the foreign client failed on {command:?}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Breaks the lease at once.
    pub fn break_lease(&self) {
        self.call(&["break", "0"]);
    }

    /// Takes the lease (breaking ours) for `duration` seconds (-1: infinite)
    /// under `lease_id`.
    pub fn acquire(&self, duration: i32, lease_id: &str) {
        self.call(&["acquire", &duration.to_string(), lease_id]);
    }

    /// Releases the lease held under `lease_id`.
    pub fn release(&self, lease_id: &str) {
        self.call(&["release", lease_id]);
    }

    /// Writes `content` with metadata `owner=foreign`, under `lease_id` if given.
    pub fn put(&self, content: &str, lease_id: Option<&str>) {
        let mut args = vec!["put", content];
        args.extend(lease_id);
        self.call(&args);
    }

    /// The blob's content and `owner` and `epoch` metadata.
    pub fn get(&self) -> Snapshot {
        let json = self.call(&["get"]);
        let field = |name: &str| -> Option<String> {
            // The tiny JSON the script prints: find `"name": "value"`.
            let key = format!("\"{name}\": \"");
            let start = json.find(&key)? + key.len();
            let end = start + json[start..].find('"')?;
            Some(json[start..end].to_owned())
        };
        Snapshot {
            content: field("content").unwrap_or_default(),
            owner: field("owner"),
            epoch: field("epoch").and_then(|e| e.parse().ok()),
        }
    }
}

/// What the foreign client reads from the blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub content: String,
    pub owner: Option<String>,
    pub epoch: Option<u64>,
}

/// How long one foreign call may take, for time limits in tests.
pub const CALL: Duration = Duration::from_secs(5);
