//! Starts a real Azurite blob service for the integration tests.
//!
//! Each test process starts its own Azurite on a free port of 127.0.0.1
//! (`shared()`), unless `BLOB_MUTEX_TEST_AZURITE` names external blob
//! endpoints such as `http://127.0.0.1:10000/devstoreaccount1`: one, or
//! several separated by spaces, of which each test process takes one by its
//! process id (`scripts/test` starts four for its rows). Tests that stop and
//! restart storage start a private one with `Azurite::start_persistent`;
//! tests that load storage with thousands of blobs take one of their own
//! with `own()`, so that the tests sharing an endpoint are not slowed.
//!
//! Azurite runs under `sh`, which kills it when this process's end of its
//! standard input closes, so no Azurite outlives the test process by more
//! than its shutdown; neither holds the test's output meanwhile.
//!
//! The benchmark starts its Azurite with [`Azurite::start_logged`], which
//! keeps the log and returns an error instead of panicking.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use blob_mutex::{azure::Backend, BlobSettings};

/// Azurite's development account.
pub const ACCOUNT: &str = "devstoreaccount1";

/// Azurite's well-known development account key (public, documented by Microsoft).
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

const INSTALL_HINT: &str = "Azurite is not installed. Run `scripts/test` (it installs it), or \
`npm ci --prefix tools/azurite`, or point BLOB_MUTEX_TEST_AZURITE at a running blob endpoint \
such as http://127.0.0.1:10000/devstoreaccount1.";

/// One Azurite blob service.
pub struct Azurite {
    /// `http://127.0.0.1:<port>/devstoreaccount1`.
    pub endpoint: String,
    /// The port it listens on.
    pub port: u16,
    process: Option<(Child, ChildStdin)>,
    location: Option<PathBuf>,
}

impl Azurite {
    /// A new in-memory Azurite on a free port.
    pub fn start() -> Azurite {
        Self::start_with_args(&[])
    }

    /// A new in-memory Azurite on a free port, started with extra command
    /// line arguments, such as `--skipApiVersionCheck` for clients newer
    /// than this Azurite (the Python SDK).
    pub fn start_with_args(extra: &[&str]) -> Azurite {
        let (process, port) = spawn_with(0, None, extra);
        Azurite {
            endpoint: endpoint(port),
            port,
            process: Some(process),
            location: None,
        }
    }

    /// A new in-memory Azurite on a free port that writes its output to
    /// `log` and leaves it there.
    ///
    /// # Errors
    ///
    /// When Azurite is not installed, cannot be started, or does not listen
    /// within 60 s: a message saying which.
    pub fn start_logged(log: &Path) -> Result<Azurite, String> {
        let bin = try_azurite_bin()?;
        let (process, port) = try_spawn(&bin, 0, None, &[], log)?;
        Ok(Azurite {
            endpoint: endpoint(port),
            port,
            process: Some(process),
            location: None,
        })
    }

    /// A running Azurite's blob endpoint, such as
    /// `http://127.0.0.1:10000/devstoreaccount1`, that this process did not
    /// start (and does not stop).
    pub fn external(endpoint: &str) -> Azurite {
        Azurite {
            port: port_of(endpoint),
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            process: None,
            location: None,
        }
    }

    /// A new in-memory Azurite on a free port that speaks https only, with
    /// the certificate and key (PEM files) given: a client must trust
    /// their CA.
    pub fn start_https(cert: &std::path::Path, key: &std::path::Path) -> Azurite {
        Self::start_https_with_args(cert, key, &[])
    }

    /// [`Azurite::start_https`] with extra command line arguments, such as
    /// `--oauth basic` (bearer tokens accepted, their audience, issuer and
    /// lifetime checked, not their signature).
    pub fn start_https_with_args(
        cert: &std::path::Path,
        key: &std::path::Path,
        extra: &[&str],
    ) -> Azurite {
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        let mut args = vec!["--cert", cert.as_str(), "--key", key.as_str()];
        args.extend_from_slice(extra);
        let (process, port) = spawn_with(0, None, &args);
        Azurite {
            endpoint: format!("https://127.0.0.1:{port}/devstoreaccount1"),
            port,
            process: Some(process),
            location: None,
        }
    }

    /// A new Azurite that keeps its data in a directory, so that it can be
    /// stopped and started again on the same port with the same blobs.
    pub fn start_persistent() -> Azurite {
        let location = std::env::temp_dir().join(format!(
            "blob-mutex-azurite-{}-{}",
            std::process::id(),
            unique_suffix()
        ));
        std::fs::create_dir_all(&location).expect("create Azurite data directory");
        let (process, port) = spawn(0, Some(&location));
        Azurite {
            endpoint: endpoint(port),
            port,
            process: Some(process),
            location: Some(location),
        }
    }

    /// Stops this Azurite (if this test started it) and waits until it exited.
    pub fn stop(&mut self) {
        if let Some((mut child, mut stdin)) = self.process.take() {
            let _ = stdin.write_all(b"stop\n");
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// Starts this Azurite again on the same port, with the same data.
    pub fn restart(&mut self) {
        self.stop();
        let (process, _) = spawn(self.port, self.location.as_deref());
        self.process = Some(process);
    }

    /// Settings for `container`/`blob` on this Azurite, via a connection
    /// string, on the backend `BLOB_MUTEX_BACKEND` names (as
    /// [`backend::current`](super::backend::current), which builds on this
    /// module: read here from the environment directly).
    pub fn settings(&self, container: &str, blob: &str) -> BlobSettings {
        BlobSettings::from_connection_string(&self.connection_string(), container, blob)
            .expect("valid test settings")
            .with_backend(Backend::from_env().expect("BLOB_MUTEX_BACKEND names a backend"))
    }

    /// The connection string of this Azurite's development account.
    pub fn connection_string(&self) -> String {
        connection_string(&self.endpoint)
    }

    /// The process id of the Azurite server itself (the `node` process
    /// under the shell that this process started), for reading its CPU and
    /// memory from `/proc`; `None` for an [external](Azurite::external)
    /// one, once it stopped, or where there is no `/proc`.
    pub fn pid(&self) -> Option<u32> {
        let (shell, _) = self.process.as_ref()?;
        server_under(shell.id())
    }
}

/// The child of `shell` that runs another program than the shell itself:
/// the server its script started in the background (the script's other
/// child is a subshell, the same program as its parent).
fn server_under(shell: u32) -> Option<u32> {
    let program = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let shell_program = program(shell)?;
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| parent_of(pid) == Some(shell))
        .find(|&pid| program(pid).is_some_and(|p| p != shell_program))
}

/// The parent process id of `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may hold spaces and ')'.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(1)?.parse().ok()
}

impl Drop for Azurite {
    fn drop(&mut self) {
        self.stop();
        if let Some(location) = &self.location {
            let _ = std::fs::remove_dir_all(location);
        }
    }
}

/// The connection string of the development account at `endpoint`.
pub fn connection_string(endpoint: &str) -> String {
    let scheme = endpoint
        .split_once("://")
        .map_or("http", |(scheme, _)| scheme);
    format!(
        "DefaultEndpointsProtocol={scheme};AccountName={ACCOUNT};AccountKey={DEV_KEY};BlobEndpoint={endpoint};"
    )
}

/// This process's Azurite, that every helper of the kit uses.
static SHARED: OnceLock<Azurite> = OnceLock::new();

/// The Azurite shared by all tests of this process: one of the endpoints
/// `BLOB_MUTEX_TEST_AZURITE` names (chosen by the process id), or one
/// started for this process.
pub fn shared() -> &'static Azurite {
    SHARED.get_or_init(|| {
        let given = std::env::var("BLOB_MUTEX_TEST_AZURITE").unwrap_or_default();
        let endpoints: Vec<&str> = given.split_whitespace().collect();
        if endpoints.is_empty() {
            return Azurite::start();
        }
        let pick = std::process::id() as usize % endpoints.len();
        Azurite::external(endpoints[pick])
    })
}

/// An Azurite of this process's own, even where `BLOB_MUTEX_TEST_AZURITE`
/// names endpoints, from now on also what [`shared`] returns: for a test
/// that creates thousands of blobs, whose requests would slow every other
/// test on a shared endpoint past its request timeout on a loaded machine.
///
/// # Panics
///
/// When [`shared`] was called first in this process: the test would then
/// use two Azurites.
pub fn own() -> &'static Azurite {
    let mut started = false;
    let azurite = SHARED.get_or_init(|| {
        started = true;
        Azurite::start()
    });
    assert!(
        started || azurite.process.is_some(),
        "azurite::own() must come before any use of azurite::shared() in a test"
    );
    azurite
}

/// A container name no other test uses: `<prefix>-<pid>-<n>`.
pub fn unique_container(prefix: &str) -> String {
    let prefix: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let prefix = prefix.trim_matches('-');
    let prefix = &prefix[..prefix.len().min(40)];
    format!(
        "{}-{}-{}",
        prefix.trim_end_matches('-'),
        std::process::id(),
        unique_suffix()
    )
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn endpoint(port: u16) -> String {
    format!("http://127.0.0.1:{port}/{ACCOUNT}")
}

fn port_of(endpoint: &str) -> u16 {
    endpoint
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(10000)
}

/// The Azurite blob command: `BLOB_MUTEX_AZURITE_BIN`, or the one that
/// `tools/azurite` installs.
pub fn azurite_bin() -> PathBuf {
    try_azurite_bin().unwrap_or_else(|e| panic!("{e}"))
}

/// [`azurite_bin`], or why there is none.
fn try_azurite_bin() -> Result<PathBuf, String> {
    if let Ok(bin) = std::env::var("BLOB_MUTEX_AZURITE_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let bin = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tools/azurite/node_modules/.bin/azurite-blob");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!("{INSTALL_HINT} (looked for {})", bin.display()))
    }
}

fn spawn(port: u16, location: Option<&std::path::Path>) -> ((Child, ChildStdin), u16) {
    spawn_with(port, location, &[])
}

fn spawn_with(
    port: u16,
    location: Option<&std::path::Path>,
    extra: &[&str],
) -> ((Child, ChildStdin), u16) {
    let bin = azurite_bin();
    let log = std::env::temp_dir().join(format!(
        "blob-mutex-azurite-{}-{}.log",
        std::process::id(),
        unique_suffix()
    ));
    let started = try_spawn(&bin, port, location, extra, &log);
    let _ = std::fs::remove_file(&log);
    started.unwrap_or_else(|e| panic!("{e}. {INSTALL_HINT}"))
}

/// Starts `bin` (Azurite's blob service) writing to `log`, and waits until it
/// listens; returns it and its port.
fn try_spawn(
    bin: &Path,
    port: u16,
    location: Option<&std::path::Path>,
    extra: &[&str],
    log: &Path,
) -> Result<((Child, ChildStdin), u16), String> {
    let mut args = vec![
        bin.display().to_string(),
        "--blobHost".into(),
        "127.0.0.1".into(),
        "--blobPort".into(),
        port.to_string(),
        "--disableTelemetry".into(),
        "--silent".into(),
    ];
    match location {
        Some(dir) => {
            args.push("--location".into());
            args.push(dir.display().to_string());
        }
        None => args.push("--inMemoryPersistence".into()),
    }
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    // Azurite writes to a log file, not to a pipe of this process, so that it
    // never fails on a closed pipe while it shuts down. The shell waits for
    // Azurite (so it exits, visibly to `try_wait`, if Azurite dies), while a
    // background reader stops Azurite as soon as this process closes (or
    // writes to) the shell's standard input, kept on fd 3 because a
    // background list's own standard input is /dev/null. The shell holds
    // none of this process's output: it outlives this process while Azurite
    // shuts down, and a test runner waits for every holder of a test's
    // output to close it (nextest reports the test as a leak).
    let _ = std::fs::remove_file(log);
    let script = r#"log=$1; shift; exec 3<&0; "$@" >"$log" 2>&1 </dev/null & pid=$!; (read _ <&3; kill $pid 2>/dev/null) & wait $pid"#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("azurite")
        .arg(log)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start Azurite ({e})"))?;
    let stdin = child
        .stdin
        .take()
        .ok_or("Azurite's shell has no standard input")?;
    let started = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = [
            "listens on http://127.0.0.1:",
            "listens on https://127.0.0.1:",
        ]
        .into_iter()
        .find_map(|marker| Some(text.find(marker)? + marker.len()));
        if let Some(at) = found {
            return text[at..]
                .lines()
                .next()
                .and_then(|p| p.trim().parse().ok())
                .map(|port| ((child, stdin), port))
                .ok_or_else(|| format!("Azurite printed no port: {text}"));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "Azurite exited ({status}) before it listened: {text}"
            ));
        }
        if started.elapsed() >= Duration::from_secs(60) {
            return Err(format!("Azurite did not start within 60 s: {text}"));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_of_a_process_is_read_from_proc() {
        assert_eq!(
            parent_of(std::process::id()),
            Some(std::os::unix::process::parent_id())
        );
        assert_eq!(parent_of(u32::MAX), None, "no such process");
    }

    /// What the open descriptors of `pid` point at.
    fn open_files(pid: u32) -> Vec<PathBuf> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|fds| {
                fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The test runner reads this process's standard output and error until
    /// every holder has closed them: a process that outlives the test while
    /// holding one (the shell around Azurite, waiting for Azurite to shut
    /// down after the test process has exited) is reported as a leak.
    #[test]
    fn no_process_around_azurite_holds_the_test_output() {
        let mut azurite = Azurite::start();
        let shell = azurite.process.as_ref().expect("started here").0.id();
        let ours: Vec<PathBuf> = [1, 2]
            .into_iter()
            .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
            .filter(|target| target != Path::new("/dev/null"))
            .collect();
        let children = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| parent_of(pid) == Some(shell));
        for pid in std::iter::once(shell).chain(children) {
            let held: Vec<_> = open_files(pid)
                .into_iter()
                .filter(|f| ours.contains(f))
                .collect();
            assert!(held.is_empty(), "process {pid} holds {held:?}");
        }
        azurite.stop();
    }

    #[test]
    fn the_server_under_a_shell_is_its_child_that_runs_another_program() {
        // The shape of the script that starts Azurite: the server in the
        // background, and a subshell that stops it when stdin closes.
        let script = "exec 3<&0; sleep 30 </dev/null & pid=$!; (read _ <&3; kill $pid) & wait $pid";
        let mut shell = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .spawn()
            .expect("start sh");
        let started = std::time::Instant::now();
        let server = loop {
            if let Some(pid) = server_under(shell.id()) {
                break pid;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no server under the shell"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let comm = std::fs::read_to_string(format!("/proc/{server}/comm")).unwrap_or_default();
        drop(shell.stdin.take());
        let _ = shell.wait();
        assert_eq!(comm.trim(), "sleep");
    }
}
