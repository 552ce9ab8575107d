//! The Azurite blob service the benchmark runs against, and settings for it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use blob_mutex::BlobSettings;

/// Azurite's development account and its well-known public key. Never printed.
pub(crate) const ACCOUNT: &str = "devstoreaccount1";
pub(crate) const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// An Azurite blob service this program started, or one it was pointed at.
pub(crate) struct Azurite {
    /// `http://127.0.0.1:<port>/devstoreaccount1`.
    pub(crate) endpoint: String,
    /// Where the counting proxies forward to.
    pub(crate) upstream: SocketAddr,
    /// `sh` waiting on its standard input; it stops Azurite when that closes,
    /// so that Azurite never outlives this program.
    _shell: Option<Child>,
}

impl Azurite {
    /// Starts an in-memory Azurite on a free port of 127.0.0.1, logging to
    /// `<out>/logs/azurite.log`. The command is `BLOB_MUTEX_AZURITE_BIN`, or
    /// the one `scripts/ensure-azurite` installs under `tools/azurite`.
    ///
    /// `crates/testkit/src/azurite.rs` starts Azurite the same way. It is not
    /// included here with `#[path]`: it reports failures by panicking with
    /// hints for the test suite, deletes the log this program keeps, and has
    /// persistent and shared instances the benchmark does not need. The
    /// start-up below is the part both need, about 40 lines.
    pub(crate) fn start(out: &Path) -> Result<Azurite> {
        Self::start_logged(out, "azurite")
    }

    /// As [`Azurite::start`], logging to `<out>/logs/<name>.log`: for the
    /// further accounts of a quorum.
    pub(crate) fn start_logged(out: &Path, name: &str) -> Result<Azurite> {
        let bin = std::env::var_os("BLOB_MUTEX_AZURITE_BIN").map_or_else(
            || {
                Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
                    .join("tools/azurite/node_modules/.bin/azurite-blob")
            },
            PathBuf::from,
        );
        ensure!(
            bin.exists(),
            "Azurite is not installed at {}; run scripts/ensure-azurite (scripts/bench does)",
            bin.display()
        );
        let log = out.join(format!("logs/{name}.log"));
        let _ = std::fs::remove_file(&log);
        // Azurite writes to a file, not to a pipe of this process; `read`
        // returns when this program exits and closes the shell's standard
        // input, and the shell then stops Azurite.
        let script = r#"log=$1; shift; "$@" >"$log" 2>&1 & pid=$!; read _; kill $pid 2>/dev/null; wait $pid"#;
        let shell = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("azurite")
            .arg(&log)
            .arg(&bin)
            .args(["--blobHost", "127.0.0.1", "--blobPort", "0"])
            .args(["--disableTelemetry", "--silent", "--inMemoryPersistence"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .context("start Azurite")?;
        let marker = "listens on http://127.0.0.1:";
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(at) = text.find(marker) {
                let port: u16 = text[at + marker.len()..]
                    .lines()
                    .next()
                    .and_then(|p| p.trim().parse().ok())
                    .context("read Azurite's port")?;
                return Ok(Azurite {
                    endpoint: format!("http://127.0.0.1:{port}/{ACCOUNT}"),
                    upstream: SocketAddr::from(([127, 0, 0, 1], port)),
                    _shell: Some(shell),
                });
            }
            ensure!(
                started.elapsed() < Duration::from_secs(60),
                "Azurite did not start within 60 s: {text}"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// A running Azurite's blob endpoint, `http://<ip>:<port>/<account>`,
    /// that has the development account.
    pub(crate) fn external(endpoint: &str) -> Result<Azurite> {
        let rest = endpoint
            .strip_prefix("http://")
            .context("--endpoint must be an http:// URL")?;
        let host = rest.split('/').next().unwrap_or(rest);
        let upstream: SocketAddr = host
            .parse()
            .with_context(|| format!("--endpoint must name an IP address and port, got {host}"))?;
        Ok(Azurite {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            upstream,
            _shell: None,
        })
    }
}

/// The connection string of the development account at `endpoint`.
pub(crate) fn connection_string(endpoint: &str) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={DEV_KEY};BlobEndpoint={endpoint};"
    )
}

pub(crate) fn settings(endpoint: &str, container: &str, blob: &str) -> Result<BlobSettings> {
    Ok(BlobSettings::from_connection_string(
        &connection_string(endpoint),
        container,
        blob,
    )?)
}

/// A container name no other measurement uses: `bench-<section>-<pid>-<n>`.
pub(crate) fn unique_container(section: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "bench-{section}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
