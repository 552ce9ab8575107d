//! Benchmark of the election against a local Azurite: failover and handover
//! times, storage requests per hour, the crate's latency over a bare SDK
//! call, the worker's CPU and memory footprint, and 50-way contention.
//!
//! ```text
//! cargo build --release --examples
//! target/release/examples/bench [--quick] [--out DIR] [--sections LIST] ...
//! ```
//!
//! `scripts/bench` installs Azurite, builds and runs this. It prints a table
//! and writes `<out>/results.json` and `<out>/table.md` (default out:
//! `bench-results`). Figures are printed, never asserted; the exit status is
//! non-zero only when a measurement could not be taken at all.
//!
//! Options:
//! `--quick` (fewer repetitions and shorter windows), `--crash-reps N`,
//! `--handover-reps N`, `--cost-secs N` (request-cost and footprint window),
//! `--overhead-samples N`, `--candidates N`, `--contention-secs N`,
//! `--sections overhead,contention,cost,handover,crash` (the default runs all),
//! `--out DIR`, `--endpoint URL` (use a running Azurite's blob endpoint with
//! the development account instead of starting one), `--worker PATH` (default:
//! the `worker` example next to this program).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use azure_core::prelude::{LeaseDuration, ProposedLeaseId};
use azure_core::RetryOptions;
use azure_storage::{CloudLocation, StorageCredentials};
use azure_storage_blobs::prelude::{BlobClient, ClientBuilder};
use blob_mutex::{
    Acquire, BlobDistributedMutex, BlobLeaseManager, BlobSettings, CancellationToken, LeaseId,
    MutexOptions,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Azurite's development account and its well-known public key. Never printed.
const ACCOUNT: &str = "devstoreaccount1";
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The defaults of [`MutexOptions`], restated so that the targets can be
/// computed; checked against the crate at start-up.
const LEASE_SECS: f64 = 15.0;
const RENEW_SECS: f64 = 5.0;
const RETRY_SECS: f64 = 1.0;
const JITTER: f64 = 0.2;

/// The leader task of the worker processes ticks this rarely, so that the
/// footprint is the election's own and not the demo task's.
const IDLE_WORK_MS: &str = "600000";

const SECTIONS: [&str; 5] = ["overhead", "contention", "cost", "handover", "crash"];

// ---------------------------------------------------------------- options

struct Config {
    crash_reps: usize,
    handover_reps: usize,
    cost_window: Duration,
    overhead_samples: usize,
    candidates: usize,
    contention_window: Duration,
    sections: Vec<String>,
    out: PathBuf,
    endpoint: Option<String>,
    worker: PathBuf,
    quick: bool,
}

impl Config {
    fn parse() -> Result<Config> {
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        let quick = args.iter().any(|a| a == "--quick");
        args.retain(|a| a != "--quick");
        let worker = std::env::current_exe()
            .context("locate this program")?
            .with_file_name("worker");
        let mut config = Config {
            crash_reps: if quick { 5 } else { 12 },
            handover_reps: if quick { 10 } else { 30 },
            cost_window: Duration::from_secs(if quick { 60 } else { 180 }),
            overhead_samples: if quick { 500 } else { 2000 },
            candidates: 50,
            contention_window: Duration::from_secs(if quick { 15 } else { 30 }),
            sections: SECTIONS.iter().map(|s| (*s).to_owned()).collect(),
            out: PathBuf::from("bench-results"),
            endpoint: None,
            worker,
            quick,
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--crash-reps" => config.crash_reps = value()?.parse()?,
                "--handover-reps" => config.handover_reps = value()?.parse()?,
                "--cost-secs" => config.cost_window = Duration::from_secs(value()?.parse()?),
                "--overhead-samples" => config.overhead_samples = value()?.parse()?,
                "--candidates" => config.candidates = value()?.parse()?,
                "--contention-secs" => {
                    config.contention_window = Duration::from_secs(value()?.parse()?);
                }
                "--sections" => {
                    config.sections = value()?.split(',').map(str::to_owned).collect();
                    for s in &config.sections {
                        ensure!(SECTIONS.contains(&s.as_str()), "unknown section {s}");
                    }
                }
                "--out" => config.out = PathBuf::from(value()?),
                "--endpoint" => config.endpoint = Some(value()?),
                "--worker" => config.worker = PathBuf::from(value()?),
                other => bail!("unknown option {other} (see the top of examples/bench.rs)"),
            }
        }
        ensure!(
            config.crash_reps >= 1 && config.handover_reps >= 1,
            "need at least one repetition"
        );
        ensure!(
            config.candidates >= 2,
            "contention needs at least two candidates"
        );
        ensure!(
            config.overhead_samples >= 10,
            "overhead needs at least 10 samples"
        );
        Ok(config)
    }

    fn runs(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }
}

// ---------------------------------------------------------------- numbers

#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn float(n: usize) -> f64 {
    n as f64
}

#[derive(Debug, Clone)]
struct Stats {
    n: usize,
    min: f64,
    median: f64,
    mean: f64,
    p95: f64,
    p99: f64,
    max: f64,
}

/// Nearest-rank percentiles: with 10 samples p95 is the largest.
fn stats(samples: &[f64]) -> Stats {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0 ≤ rank ≤ len
        let index = ((p / 100.0 * float(v.len())).ceil() as usize).clamp(1, v.len()) - 1;
        v[index]
    };
    Stats {
        n: v.len(),
        min: v.first().copied().unwrap_or(f64::NAN),
        median: if v.is_empty() {
            f64::NAN
        } else if v.len() % 2 == 1 {
            v[v.len() / 2]
        } else {
            f64::midpoint(v[v.len() / 2 - 1], v[v.len() / 2])
        },
        mean: v.iter().sum::<f64>() / float(v.len()),
        p95: rank(95.0),
        p99: rank(99.0),
        max: v.last().copied().unwrap_or(f64::NAN),
    }
}

/// `SplitMix64` for the random pauses between repetitions.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        Rng(uuid::Uuid::new_v4().as_u64_pair().0)
    }

    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        #[allow(clippy::cast_precision_loss)] // 53 bits fit an f64 exactly
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        unit
    }

    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        low + high.saturating_sub(low).mul_f64(self.unit())
    }
}

// ---------------------------------------------------------------- JSON

/// Just enough JSON to write the results without another dependency.
enum Json {
    Num(f64),
    Int(u64),
    Bool(bool),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn obj<const N: usize>(fields: [(&str, Json); N]) -> Json {
        Json::Obj(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    fn nums(values: &[f64]) -> Json {
        Json::Arr(values.iter().map(|v| Json::Num(*v)).collect())
    }

    fn stats(s: &Stats) -> Json {
        Json::obj([
            ("n", Json::Int(s.n as u64)),
            ("min", Json::Num(s.min)),
            ("median", Json::Num(s.median)),
            ("mean", Json::Num(s.mean)),
            ("p95", Json::Num(s.p95)),
            ("p99", Json::Num(s.p99)),
            ("max", Json::Num(s.max)),
        ])
    }

    fn write(&self, out: &mut String, indent: usize) {
        let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
        match self {
            Json::Num(v) if v.is_finite() => {
                let _ = write!(out, "{}", (v * 1e6).round() / 1e6);
            }
            Json::Num(_) => out.push_str("null"),
            Json::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Json::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            Json::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        c if u32::from(c) < 0x20 => {
                            let _ = write!(out, "\\u{:04x}", u32::from(c));
                        }
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            Json::Arr(items)
                if items
                    .iter()
                    .all(|i| matches!(i, Json::Num(_) | Json::Int(_))) =>
            {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out, indent);
                }
                out.push(']');
            }
            Json::Arr(items) => {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    pad(out, indent + 2);
                    item.write(out, indent + 2);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push_str("{\n");
                for (i, (key, value)) in fields.iter().enumerate() {
                    pad(out, indent + 2);
                    Json::Str(key.clone()).write(out, indent + 2);
                    out.push_str(": ");
                    value.write(out, indent + 2);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push('}');
            }
        }
    }
}

// ---------------------------------------------------------------- Azurite

/// An Azurite blob service this program started, or one it was pointed at.
struct Azurite {
    endpoint: String,
    upstream: SocketAddr,
    /// `sh` waiting on its standard input; it stops Azurite when that closes,
    /// so that Azurite never outlives this program.
    _shell: Option<std::process::Child>,
}

impl Azurite {
    fn start(out: &Path) -> Result<Azurite> {
        let bin = std::env::var_os("BLOB_MUTEX_AZURITE_BIN").map_or_else(
            || {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tools/azurite/node_modules/.bin/azurite-blob")
            },
            PathBuf::from,
        );
        ensure!(
            bin.exists(),
            "Azurite is not installed at {}; run scripts/ensure-azurite (scripts/bench does)",
            bin.display()
        );
        let log = out.join("logs/azurite.log");
        let _ = std::fs::remove_file(&log);
        let script = r#"log=$1; shift; "$@" >"$log" 2>&1 & pid=$!; read _; kill $pid 2>/dev/null; wait $pid"#;
        let shell = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("azurite")
            .arg(&log)
            .arg(&bin)
            .args([
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                "0",
                "--disableTelemetry",
            ])
            .args(["--silent", "--inMemoryPersistence"])
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

    fn external(endpoint: &str) -> Result<Azurite> {
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

fn connection_string(endpoint: &str) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={DEV_KEY};BlobEndpoint={endpoint};"
    )
}

fn settings(endpoint: &str, container: &str, blob: &str) -> Result<BlobSettings> {
    Ok(BlobSettings::from_connection_string(
        &connection_string(endpoint),
        container,
        blob,
    )?)
}

fn unique_container(section: &str) -> String {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "bench-{section}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------- proxy

/// A storage request, classified by method, query and lease action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Acquire,
    Renew,
    Release,
    Break,
    Change,
    GetProperties,
    SetMetadata,
    CreateContainer,
    PutBlob,
    Other,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Acquire => "acquire",
            Kind::Renew => "renew",
            Kind::Release => "release",
            Kind::Break => "break",
            Kind::Change => "change",
            Kind::GetProperties => "get_properties",
            Kind::SetMetadata => "set_metadata",
            Kind::CreateContainer => "create_container",
            Kind::PutBlob => "put_blob",
            Kind::Other => "other",
        }
    }

    fn classify(head: &str) -> Kind {
        let mut lines = head.split("\r\n");
        let mut request = lines.next().unwrap_or("").split(' ');
        let method = request.next().unwrap_or("");
        let target = request.next().unwrap_or("");
        let query = target.split_once('?').map_or("", |(_, q)| q);
        let has = |param: &str| query.split('&').any(|p| p.eq_ignore_ascii_case(param));
        let header = |name: &str| {
            head.split("\r\n").skip(1).find_map(|line| {
                let (k, v) = line.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_ascii_lowercase())
            })
        };
        if has("comp=lease") {
            return match header("x-ms-lease-action").as_deref() {
                Some("acquire") => Kind::Acquire,
                Some("renew") => Kind::Renew,
                Some("release") => Kind::Release,
                Some("break") => Kind::Break,
                Some("change") => Kind::Change,
                _ => Kind::Other,
            };
        }
        match method {
            "PUT" if has("comp=metadata") => Kind::SetMetadata,
            "PUT" if has("restype=container") => Kind::CreateContainer,
            "PUT" if query.is_empty() => Kind::PutBlob,
            "HEAD" => Kind::GetProperties,
            "GET" if has("comp=metadata") => Kind::GetProperties,
            _ => Kind::Other,
        }
    }
}

type RequestLog = Arc<Mutex<Vec<(Instant, Kind)>>>;

/// A pass-through TCP proxy on 127.0.0.1 that logs every HTTP request it
/// forwards (time and kind). It parses only request heads and skips bodies
/// by `Content-Length`; the storage SDK sends no chunked requests.
struct Proxy {
    endpoint: String,
    log: RequestLog,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let log: RequestLog = Arc::default();
        let log_for_accept = log.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let log = log_for_accept.clone();
                tokio::spawn(async move {
                    let _ = forward(client, upstream, log).await;
                });
            }
        });
        Ok(Proxy {
            endpoint: format!("http://127.0.0.1:{port}/{ACCOUNT}"),
            log,
            accept,
        })
    }

    /// The requests sent in `[from, to)`.
    fn between(&self, from: Instant, to: Instant) -> Vec<(Instant, Kind)> {
        let log = self.log.lock().expect("request log");
        log.iter()
            .copied()
            .filter(|(at, _)| *at >= from && *at < to)
            .collect()
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, log: RequestLog) -> Result<()> {
    client.set_nodelay(true)?;
    let server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let down = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    let mut buffer = vec![0u8; 16 * 1024];
    let mut head = Vec::<u8>::new();
    let mut body_left = 0usize;
    loop {
        let n = client_read.read(&mut buffer).await?;
        if n == 0 {
            break;
        }
        server_write.write_all(&buffer[..n]).await?;
        let mut chunk = &buffer[..n];
        while !chunk.is_empty() {
            if body_left > 0 {
                let skip = body_left.min(chunk.len());
                body_left -= skip;
                chunk = &chunk[skip..];
                continue;
            }
            // Accumulate the head up to the blank line.
            let before = head.len();
            head.extend_from_slice(chunk);
            let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                chunk = &[];
                continue;
            };
            let head_len = end + 4;
            let consumed = head_len - before;
            chunk = &chunk[consumed..];
            let text = String::from_utf8_lossy(&head[..head_len]).into_owned();
            head.clear();
            let kind = Kind::classify(&text);
            log.lock()
                .expect("request log")
                .push((Instant::now(), kind));
            body_left = text
                .split("\r\n")
                .find_map(|line| {
                    let (k, v) = line.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
        }
    }
    let _ = server_write.shutdown().await;
    let _ = down.await;
    Ok(())
}

// ---------------------------------------------------------------- workers

/// One line a worker printed, and when this program read it.
#[derive(Debug, Clone)]
struct Event {
    at: Instant,
    id: String,
    line: String,
}

impl Event {
    fn is(&self, word: &str) -> bool {
        self.line.split(' ').next() == Some(word)
    }

    fn epoch(&self) -> Option<u64> {
        self.line
            .split(' ')
            .find_map(|w| w.strip_prefix("epoch="))
            .and_then(|e| e.parse().ok())
    }
}

struct Worker {
    id: String,
    child: Child,
    pid: u32,
}

/// Worker processes on one blob, with their output merged into one stream.
struct Group {
    container: String,
    blob: String,
    args: Vec<String>,
    log_dir: PathBuf,
    worker: PathBuf,
    workers: Vec<Worker>,
    events: UnboundedReceiver<Event>,
    sender: UnboundedSender<Event>,
    next: usize,
    prefix: String,
}

impl Group {
    fn new(config: &Config, prefix: &str, args: &[&str]) -> Group {
        let (sender, events) = unbounded_channel();
        Group {
            container: unique_container(prefix),
            blob: "leader".to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            log_dir: config.out.join("logs"),
            worker: config.worker.clone(),
            workers: Vec::new(),
            events,
            sender,
            next: 0,
            prefix: prefix.to_owned(),
        }
    }

    /// Starts one more worker that reaches storage at `endpoint`.
    fn spawn(&mut self, endpoint: &str) -> Result<String> {
        let id = format!("{}-{}", self.prefix, self.next);
        self.next += 1;
        let stderr = std::fs::File::create(self.log_dir.join(format!("{id}.log")))?;
        let mut child = Command::new(&self.worker)
            .args([&self.container, &self.blob, &id])
            .args(&self.args)
            .env(
                "AZURE_STORAGE_CONNECTION_STRING",
                connection_string(endpoint),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", self.worker.display()))?;
        let pid = child.id().context("worker pid")?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let sender = self.sender.clone();
        let line_id = id.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let event = Event {
                    at: Instant::now(),
                    id: line_id.clone(),
                    line,
                };
                if sender.send(event).is_err() {
                    break;
                }
            }
        });
        self.workers.push(Worker {
            id: id.clone(),
            child,
            pid,
        });
        Ok(id)
    }

    fn worker(&self, id: &str) -> Result<&Worker> {
        self.workers
            .iter()
            .find(|w| w.id == id)
            .context("no such worker")
    }

    /// Waits for a `LEADING` line from a worker other than `not`, keeping
    /// every event seen on the way in `seen`.
    async fn next_leader(
        &mut self,
        not: Option<&str>,
        within: Duration,
        seen: &mut Vec<Event>,
    ) -> Result<Event> {
        let until = tokio::time::Instant::now() + within;
        loop {
            let event = tokio::time::timeout_at(until, self.events.recv())
                .await
                .with_context(|| format!("no new leader within {within:?}"))?
                .context("worker output closed")?;
            seen.push(event.clone());
            if event.is("LEADING") && Some(event.id.as_str()) != not {
                return Ok(event);
            }
        }
    }

    /// Events that arrived since the last look.
    fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            out.push(event);
        }
        out
    }

    /// Removes a worker and waits (bounded) for it to exit.
    async fn reap(&mut self, id: &str) -> Result<()> {
        let index = self
            .workers
            .iter()
            .position(|w| w.id == id)
            .context("no such worker")?;
        let mut worker = self.workers.remove(index);
        if tokio::time::timeout(Duration::from_secs(15), worker.child.wait())
            .await
            .is_err()
        {
            eprintln!("  worker {id} did not exit within 15 s; killing it");
            let _ = worker.child.kill().await;
        }
        Ok(())
    }

    async fn stop_all(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.child.start_kill();
        }
        for worker in &mut self.workers {
            let _ = worker.child.wait().await;
        }
        self.workers.clear();
    }
}

/// Sends SIGTERM with the system's `kill`; the time measured includes
/// starting that command (a few milliseconds), so it errs on the slow side.
fn sigterm(pid: u32) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .context("run kill")?;
    ensure!(status.success(), "kill -TERM {pid} failed");
    Ok(())
}

// ---------------------------------------------------------------- /proc

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system CPU time of a process, in clock ticks (including its
/// threads that have ended).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("parse stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat; the first field after the name is field 3.
    let utime: u64 = fields.get(11).context("utime")?.parse()?;
    let stime: u64 = fields.get(12).context("stime")?.parse()?;
    Ok(utime + stime)
}

/// Time on the CPU of a process's live threads, in nanoseconds, from
/// `/proc/<pid>/task/*/schedstat`: finer than clock ticks, but it misses
/// threads that have ended.
fn cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let text = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// A `Vm*` line of /proc/<pid>/status, in KiB.
fn vm_kib(pid: u32, key: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("{key} of {pid}"))
}

// ---------------------------------------------------------------- report

/// The results, as JSON fields and as Markdown.
struct Report {
    json: Vec<(String, Json)>,
    summary: Vec<[String; 4]>,
    details: String,
}

impl Report {
    fn target(&mut self, measure: &str, measured: String, target: String, met: Option<bool>) {
        let met = match met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "—",
        };
        self.summary
            .push([measure.to_owned(), measured, target, met.to_owned()]);
    }

    fn markdown(&self, header: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{header}\n");
        let _ = writeln!(out, "### Targets at default settings\n");
        let _ = writeln!(out, "| measure | measured | target | |");
        let _ = writeln!(out, "|---|---|---|---|");
        for [a, b, c, d] in &self.summary {
            let _ = writeln!(out, "| {a} | {b} | {c} | {d} |");
        }
        out.push('\n');
        out.push_str(&self.details);
        out
    }
}

fn secs(v: f64) -> String {
    format!("{v:.3} s")
}

fn ms(v: f64) -> String {
    format!("{:.3} ms", v * 1e3)
}

// ---------------------------------------------------------------- handover and failover

struct Handover {
    samples: Vec<f64>,
    /// SIGTERM → the old leader's `STOPPED` line (graceful only).
    stop_latency: Vec<f64>,
    /// New leader started before the old one printed `STOPPED`.
    overlaps: usize,
    epochs_increasing: bool,
}

/// Kills (SIGKILL) or stops (SIGTERM) the leader of three workers again and
/// again, and times the kill to the next leader's `LEADING` line.
async fn handover(config: &Config, azurite: &Azurite, crash: bool) -> Result<Handover> {
    let name = if crash { "crash" } else { "handover" };
    let reps = if crash {
        config.crash_reps
    } else {
        config.handover_reps
    };
    let mut group = Group::new(config, name, &["--work-ms", IDLE_WORK_MS]);
    for _ in 0..3 {
        group.spawn(&azurite.endpoint)?;
    }
    let mut seen = Vec::new();
    let mut leader = group
        .next_leader(None, Duration::from_secs(60), &mut seen)
        .await?;
    let mut rng = Rng::new();
    let mut result = Handover {
        samples: Vec::new(),
        stop_latency: Vec::new(),
        overlaps: 0,
        epochs_increasing: true,
    };
    for rep in 1..=reps {
        // A random point in the renew cycle (crash) or in the followers'
        // retry cycle (graceful).
        let pause = if crash {
            rng.between(Duration::from_secs(1), Duration::from_secs(6))
        } else {
            rng.between(Duration::from_millis(700), Duration::from_millis(2200))
        };
        tokio::time::sleep(pause).await;
        let changes: Vec<Event> = group
            .drain()
            .into_iter()
            .filter(|e| e.is("LEADING"))
            .collect();
        ensure!(
            changes.is_empty(),
            "leadership changed without a kill: {:?}",
            changes.iter().map(|e| &e.line).collect::<Vec<_>>()
        );
        let pid = group.worker(&leader.id)?.pid;
        let killed_at = Instant::now();
        if crash {
            group
                .workers
                .iter_mut()
                .find(|w| w.id == leader.id)
                .context("leader")?
                .child
                .start_kill()?;
        } else {
            sigterm(pid)?;
        }
        let mut seen = Vec::new();
        let next = group
            .next_leader(Some(&leader.id), Duration::from_secs(60), &mut seen)
            .await?;
        let took = (next.at - killed_at).as_secs_f64();
        if !crash {
            let stopped = seen
                .iter()
                .find(|e| e.id == leader.id && e.is("STOPPED"))
                .map(|e| e.at);
            match stopped {
                Some(at) => result.stop_latency.push((at - killed_at).as_secs_f64()),
                None => result.overlaps += 1,
            }
        }
        if next.epoch() <= leader.epoch() {
            result.epochs_increasing = false;
        }
        eprintln!(
            "  {name} {rep}/{reps}: {} -> {} in {}",
            leader.id,
            next.id,
            secs(took)
        );
        result.samples.push(took);
        group.reap(&leader.id).await?;
        group.spawn(&azurite.endpoint)?;
        leader = next;
    }
    group.stop_all().await;
    Ok(result)
}

fn report_handover(report: &mut Report, crash: bool, h: &Handover) {
    let s = stats(&h.samples);
    let retry_upper = RETRY_SECS * (1.0 + JITTER);
    let (key, title, target) = if crash {
        (
            "crash_failover",
            "Crash failover (SIGKILL the leader)",
            LEASE_SECS + retry_upper + 0.5,
        )
    } else {
        (
            "graceful_handover",
            "Graceful handover (SIGTERM the leader)",
            retry_upper + 0.3,
        )
    };
    let mut fields = vec![
        ("seconds", Json::stats(&s)),
        ("samples", Json::nums(&h.samples)),
        ("target_p95_seconds", Json::Num(target)),
        (
            "epochs_strictly_increasing",
            Json::Bool(h.epochs_increasing),
        ),
    ];
    if !crash {
        fields.push((
            "sigterm_to_old_task_stopped",
            Json::stats(&stats(&h.stop_latency)),
        ));
        fields.push((
            "new_leader_before_old_stopped",
            Json::Int(h.overlaps as u64),
        ));
    }
    report.json.push((
        key.to_owned(),
        Json::Obj(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
    ));
    report.target(
        &format!(
            "{} p95 (n = {})",
            if crash {
                "crash failover"
            } else {
                "graceful handover"
            },
            s.n
        ),
        format!(
            "{} (median {}, max {})",
            secs(s.p95),
            secs(s.median),
            secs(s.max)
        ),
        format!("≤ {}", secs(target)),
        Some(s.p95 <= target),
    );
    let d = &mut report.details;
    let _ = writeln!(d, "### {title}\n");
    let _ = writeln!(
        d,
        "Three worker processes at default settings; the kill comes at a random moment \
         ({}), and the time runs from the signal to the next leader's `LEADING` line.\n",
        if crash {
            "1–6 s after the leader started, so anywhere in its 5 s renew cycle"
        } else {
            "0.7–2.2 s after the leader started"
        }
    );
    let _ = writeln!(d, "| n | min | median | p95 | max |");
    let _ = writeln!(d, "|---|---|---|---|---|");
    let _ = writeln!(
        d,
        "| {} | {} | {} | {} | {} |\n",
        s.n,
        secs(s.min),
        secs(s.median),
        secs(s.p95),
        secs(s.max)
    );
    if !crash {
        let stop = stats(&h.stop_latency);
        let _ = writeln!(
            d,
            "SIGTERM to the old leader's task stopped: median {}, max {}. New leader \
             before the old one had stopped: {} of {}.\n",
            secs(stop.median),
            secs(stop.max),
            h.overlaps,
            s.n
        );
    }
    let _ = writeln!(
        d,
        "Epochs strictly increasing across the terms: {}.\n",
        if h.epochs_increasing { "yes" } else { "**no**" }
    );
}

// ---------------------------------------------------------------- request cost and footprint

struct Variant {
    name: &'static str,
    lease_secs: u64,
    retry_ms: u64,
    followers: usize,
}

const VARIANTS: [Variant; 6] = [
    Variant {
        name: "defaults",
        lease_secs: 15,
        retry_ms: 1000,
        followers: 2,
    },
    Variant {
        name: "acquire retry 250 ms",
        lease_secs: 15,
        retry_ms: 250,
        followers: 1,
    },
    Variant {
        name: "acquire retry 2 s",
        lease_secs: 15,
        retry_ms: 2000,
        followers: 1,
    },
    Variant {
        name: "acquire retry 5 s",
        lease_secs: 15,
        retry_ms: 5000,
        followers: 1,
    },
    Variant {
        name: "lease 30 s",
        lease_secs: 30,
        retry_ms: 1000,
        followers: 1,
    },
    Variant {
        name: "lease 60 s",
        lease_secs: 60,
        retry_ms: 1000,
        followers: 1,
    },
];

struct Measured {
    id: String,
    leader: bool,
    counts: BTreeMap<Kind, usize>,
    /// Of the request kind the role's schedule is made of (renew or acquire).
    main: Kind,
    per_hour_by_count: f64,
    per_hour_by_interval: f64,
    expected_per_hour: f64,
    cpu_share: f64,
    /// The same from the live threads' run time (`NaN` when unavailable).
    cpu_share_ns: f64,
    hwm_kib: u64,
    rss_kib: u64,
}

impl Measured {
    fn extra(&self) -> usize {
        self.counts
            .iter()
            .filter(|(k, _)| **k != self.main)
            .map(|(_, n)| n)
            .sum()
    }

    fn deviation(&self) -> f64 {
        self.per_hour_by_interval / self.expected_per_hour - 1.0
    }
}

/// Runs every variant at once (each its own blob, each worker behind its
/// own counting proxy), waits until each has a leader, then counts
/// requests and CPU over the window.
#[allow(clippy::too_many_lines)] // one measurement, read top to bottom
async fn cost(config: &Config, azurite: &Azurite, report: &mut Report) -> Result<()> {
    struct Run {
        variant: &'static Variant,
        group: Group,
        proxies: BTreeMap<String, Proxy>,
        leader: String,
    }
    let mut runs = Vec::new();
    for (index, variant) in VARIANTS.iter().enumerate() {
        let lease = variant.lease_secs.to_string();
        let retry = variant.retry_ms.to_string();
        let mut group = Group::new(
            config,
            &format!("cost{index}"),
            &[
                "--lease-secs",
                &lease,
                "--acquire-retry-ms",
                &retry,
                "--work-ms",
                IDLE_WORK_MS,
            ],
        );
        let mut proxies = BTreeMap::new();
        for _ in 0..=variant.followers {
            let proxy = Proxy::start(azurite.upstream).await?;
            let id = group.spawn(&proxy.endpoint)?;
            proxies.insert(id, proxy);
        }
        runs.push(Run {
            variant,
            group,
            proxies,
            leader: String::new(),
        });
    }
    for run in &mut runs {
        let mut seen = Vec::new();
        run.leader = run
            .group
            .next_leader(None, Duration::from_secs(60), &mut seen)
            .await?
            .id;
    }
    // Past the first term's acquire and metadata stamp, into the steady state.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ticks = clock_ticks();
    let start = Instant::now();
    let mut cpu_start = BTreeMap::new();
    for run in &runs {
        for w in &run.group.workers {
            cpu_start.insert(w.id.clone(), (cpu_ticks(w.pid)?, cpu_ns(w.pid)));
        }
    }
    eprintln!(
        "  counting requests for {} s ({} worker processes) ...",
        config.cost_window.as_secs(),
        cpu_start.len()
    );
    tokio::time::sleep(config.cost_window).await;
    let end = Instant::now();
    let window = (end - start).as_secs_f64();

    let mut variants_json = Vec::new();
    let mut rows = String::new();
    let mut defaults: Vec<Measured> = Vec::new();
    for run in &mut runs {
        let changed = run.group.drain().iter().any(|e| e.is("LEADING"));
        let renew_secs = float(usize::try_from(run.variant.lease_secs).unwrap_or(15)) / 3.0;
        let retry_secs = float(usize::try_from(run.variant.retry_ms).unwrap_or(1000)) / 1000.0;
        let mut measured = Vec::new();
        for w in &run.group.workers {
            let requests = run.proxies[&w.id].between(start, end);
            let leader = w.id == run.leader;
            let main = if leader { Kind::Renew } else { Kind::Acquire };
            let mut counts = BTreeMap::new();
            for (_, kind) in &requests {
                *counts.entry(*kind).or_insert(0) += 1;
            }
            let times: Vec<Instant> = requests
                .iter()
                .filter(|(_, k)| *k == main)
                .map(|(at, _)| *at)
                .collect();
            let per_hour_by_interval = match (times.first(), times.last()) {
                (Some(first), Some(last)) if times.len() >= 2 => {
                    3600.0 * float(times.len() - 1) / (*last - *first).as_secs_f64()
                }
                _ => f64::NAN,
            };
            let (ticks_before, ns_before) = cpu_start[&w.id];
            let cpu = cpu_ticks(w.pid)?.saturating_sub(ticks_before);
            #[allow(clippy::cast_precision_loss)] // tick counts are small
            let cpu_share = cpu as f64 / ticks / window;
            #[allow(clippy::cast_precision_loss)] // nanoseconds of CPU stay far below 2^52
            let cpu_share_ns = match (ns_before, cpu_ns(w.pid)) {
                (Some(before), Some(after)) => after.saturating_sub(before) as f64 / 1e9 / window,
                _ => f64::NAN,
            };
            measured.push(Measured {
                id: w.id.clone(),
                leader,
                counts,
                main,
                per_hour_by_count: 3600.0 * float(requests.len()) / window,
                per_hour_by_interval,
                expected_per_hour: 3600.0 / if leader { renew_secs } else { retry_secs },
                cpu_share,
                cpu_share_ns,
                hwm_kib: vm_kib(w.pid, "VmHWM")?,
                rss_kib: vm_kib(w.pid, "VmRSS")?,
            });
        }
        let leader = measured
            .iter()
            .find(|m| m.leader)
            .context("leader measured")?;
        let followers: Vec<&Measured> = measured.iter().filter(|m| !m.leader).collect();
        let follower_rate = followers
            .iter()
            .map(|m| m.per_hour_by_interval)
            .sum::<f64>()
            / float(followers.len());
        let retry_upper = retry_secs * (1.0 + JITTER);
        let _ = writeln!(
            rows,
            "| {} | {} s / {} s / {} | {:.0} ({:+.1} %) | {:.0} ({:+.1} %) | {:.0} | {} | {} |",
            run.variant.name,
            run.variant.lease_secs,
            format_args!("{renew_secs:.0}"),
            if run.variant.retry_ms >= 1000 {
                format!("{retry_secs:.0} s")
            } else {
                format!("{} ms", run.variant.retry_ms)
            },
            leader.per_hour_by_interval,
            leader.deviation() * 100.0,
            follower_rate,
            (follower_rate / (3600.0 / retry_secs) - 1.0) * 100.0,
            leader.per_hour_by_interval + 2.0 * follower_rate,
            secs(retry_upper),
            secs(float(usize::try_from(run.variant.lease_secs).unwrap_or(0)) + retry_upper),
        );
        variants_json.push(Json::obj([
            ("name", Json::str(run.variant.name)),
            ("lease_seconds", Json::Int(run.variant.lease_secs)),
            ("renew_seconds", Json::Num(renew_secs)),
            ("acquire_retry_seconds", Json::Num(retry_secs)),
            ("leadership_changed_during_window", Json::Bool(changed)),
            ("worst_graceful_wait_seconds", Json::Num(retry_upper)),
            (
                "worst_crash_wait_seconds",
                Json::Num(
                    float(usize::try_from(run.variant.lease_secs).unwrap_or(0)) + retry_upper,
                ),
            ),
            (
                "workers",
                Json::Arr(
                    measured
                        .iter()
                        .map(|m| {
                            Json::obj([
                                ("id", Json::str(&m.id)),
                                (
                                    "role",
                                    Json::str(if m.leader { "leader" } else { "follower" }),
                                ),
                                (
                                    "requests_in_window",
                                    Json::Obj(
                                        m.counts
                                            .iter()
                                            .map(|(k, n)| {
                                                (k.name().to_owned(), Json::Int(*n as u64))
                                            })
                                            .collect(),
                                    ),
                                ),
                                ("requests_outside_schedule", Json::Int(m.extra() as u64)),
                                ("per_hour_by_count", Json::Num(m.per_hour_by_count)),
                                ("per_hour_by_interval", Json::Num(m.per_hour_by_interval)),
                                ("expected_per_hour", Json::Num(m.expected_per_hour)),
                                ("cpu_share_of_one_core", Json::Num(m.cpu_share)),
                                ("cpu_share_live_threads", Json::Num(m.cpu_share_ns)),
                                ("peak_rss_kib", Json::Int(m.hwm_kib)),
                                ("rss_kib", Json::Int(m.rss_kib)),
                            ])
                        })
                        .collect(),
                ),
            ),
        ]));
        if run.variant.name == "defaults" {
            if changed {
                eprintln!("  warning: leadership changed during the default run's window");
            }
            defaults = measured;
        }
        run.group.stop_all().await;
    }

    report.json.push((
        "request_cost".to_owned(),
        Json::obj([
            ("window_seconds", Json::Num(window)),
            (
                "method",
                Json::str(
                    "requests counted at a proxy per worker over the window; per hour = 3600 × \
                     (n − 1) / (last − first) over the schedule's requests (renew for the leader, \
                     acquire for followers), and also count × 3600 / window",
                ),
            ),
            ("variants", Json::Arr(variants_json)),
        ]),
    ));

    let leader = defaults
        .iter()
        .find(|m| m.leader)
        .context("default leader")?;
    let followers: Vec<&Measured> = defaults.iter().filter(|m| !m.leader).collect();
    report.target(
        "leader requests/h",
        format!(
            "{:.0} ({:+.1} %), outside the schedule: {}",
            leader.per_hour_by_interval,
            leader.deviation() * 100.0,
            leader.extra()
        ),
        format!("{:.0} ± 5 %, none extra", leader.expected_per_hour),
        Some(leader.deviation().abs() <= 0.05 && leader.extra() == 0),
    );
    for f in &followers {
        report.target(
            &format!("follower requests/h ({})", f.id),
            format!(
                "{:.0} ({:+.1} %), outside the schedule: {}",
                f.per_hour_by_interval,
                f.deviation() * 100.0,
                f.extra()
            ),
            format!("{:.0} ± 5 %, none extra", f.expected_per_hour),
            Some(f.deviation().abs() <= 0.05 && f.extra() == 0),
        );
    }
    let worst_follower_cpu = followers.iter().map(|f| f.cpu_share).fold(0.0, f64::max);
    report.target(
        "idle follower CPU (worst of 2)",
        format!("{:.3} % of a core", worst_follower_cpu * 100.0),
        "≤ 0.1 %".to_owned(),
        Some(worst_follower_cpu <= 0.001),
    );
    report.target(
        "idle leader CPU",
        format!("{:.3} % of a core", leader.cpu_share * 100.0),
        "(no target)".to_owned(),
        None,
    );
    #[allow(clippy::cast_precision_loss)] // KiB counts are small
    let mib = |kib: u64| kib as f64 / 1024.0;
    let worst_hwm = defaults.iter().map(|m| m.hwm_kib).max().unwrap_or(0);
    report.target(
        "peak RSS per worker (leader / worst follower)",
        format!(
            "{:.1} MiB / {:.1} MiB",
            mib(leader.hwm_kib),
            mib(followers.iter().map(|f| f.hwm_kib).max().unwrap_or(0))
        ),
        "≤ 20 MiB".to_owned(),
        Some(mib(worst_hwm) <= 20.0),
    );
    report.json.push((
        "footprint".to_owned(),
        Json::obj([
            ("window_seconds", Json::Num(window)),
            ("clock_ticks_per_second", Json::Num(ticks)),
            (
                "workers",
                Json::Arr(
                    defaults
                        .iter()
                        .map(|m| {
                            Json::obj([
                                ("id", Json::str(&m.id)),
                                (
                                    "role",
                                    Json::str(if m.leader { "leader" } else { "follower" }),
                                ),
                                ("cpu_share_of_one_core", Json::Num(m.cpu_share)),
                                ("cpu_share_live_threads", Json::Num(m.cpu_share_ns)),
                                ("peak_rss_kib", Json::Int(m.hwm_kib)),
                                ("rss_kib", Json::Int(m.rss_kib)),
                            ])
                        })
                        .collect(),
                ),
            ),
        ]),
    ));

    let d = &mut report.details;
    let _ = writeln!(d, "### Request cost and how it scales\n");
    let _ = writeln!(
        d,
        "Each worker process reaches Azurite through its own counting proxy. All variants run \
         at the same time, each on its own blob, with one leader and one or two followers. \
         Requests are counted over a {window:.0} s window in the steady state (after the first \
         term's acquire and metadata stamp) and extrapolated to an hour from the mean interval \
         between the schedule's requests (renew for the leader, acquire for a follower). \
         Lease / renew / retry: lease duration, renew interval (a third of the lease), acquire \
         retry (±20 % jitter). The last two columns are the worst-case waits the options imply \
         for a graceful handover (one follower retry) and for a crash failover (the lease plus \
         one retry).\n"
    );
    let _ = writeln!(
        d,
        "| variant | lease / renew / retry | leader req/h (vs schedule) | follower req/h (vs schedule) | 1 leader + 2 followers req/h | worst handover wait | worst failover wait |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|---|---|");
    d.push_str(&rows);
    d.push('\n');
    let _ = writeln!(
        d,
        "Per term a leader also makes 1 acquire, 1 metadata read and 1 metadata write (the \
         epoch stamp) and 1 release when it stops.\n"
    );
    let _ = writeln!(d, "### Footprint (default settings, same window)\n");
    let _ = writeln!(
        d,
        "| worker | role | CPU, share of one core (clock ticks / live threads' run time) | peak RSS (VmHWM) | RSS at end |"
    );
    let _ = writeln!(d, "|---|---|---|---|---|");
    for m in &defaults {
        let _ = writeln!(
            d,
            "| {} | {} | {:.3} % / {:.4} % | {:.1} MiB | {:.1} MiB |",
            m.id,
            if m.leader { "leader" } else { "follower" },
            m.cpu_share * 100.0,
            m.cpu_share_ns * 100.0,
            mib(m.hwm_kib),
            mib(m.rss_kib)
        );
    }
    d.push('\n');
    Ok(())
}

// ---------------------------------------------------------------- overhead

/// The crate's acquire and renew against the same request made with the
/// bare SDK client, interleaved on the same Azurite.
#[allow(clippy::too_many_lines)] // three measurements of the same shape
async fn overhead(config: &Config, azurite: &Azurite, report: &mut Report) -> Result<()> {
    let container = unique_container("overhead");
    let lease_secs = Duration::from_secs(15);
    let manager = |blob: &str| -> Result<BlobLeaseManager> {
        Ok(BlobLeaseManager::new(&settings(
            &azurite.endpoint,
            &container,
            blob,
        )?)?)
    };
    let bare = |blob: &str| -> BlobClient {
        let location = CloudLocation::Custom {
            account: ACCOUNT.to_owned(),
            uri: azurite.endpoint.clone(),
        };
        ClientBuilder::with_location(
            location,
            StorageCredentials::access_key(ACCOUNT, DEV_KEY.to_owned()),
        )
        .retry(RetryOptions::none())
        .blob_client(&container, blob)
    };
    // "own": leased by us under `ours`; acquire again (idempotent, 201) and renew (200).
    // "held": leased under another id; acquiring with `ours` answers 409.
    let own_crate = manager("own")?;
    let own_bare = bare("own");
    let held_crate = manager("held")?;
    let held_bare = bare("held");
    let ours = LeaseId::new();
    let theirs = LeaseId::new();
    ensure!(
        own_crate.acquire(ours, lease_secs).await? == Acquire::Acquired,
        "set-up acquire"
    );
    ensure!(
        held_crate.acquire(theirs, lease_secs).await? == Acquire::Acquired,
        "set-up acquire"
    );
    let id = azure_core::request_options::LeaseId::from(
        uuid::Uuid::parse_str(&ours.to_string()).expect("uuid"),
    );

    let samples = config.overhead_samples;
    let mut json = Vec::new();
    let mut rows = String::new();
    let mut summary = Vec::new();
    for op in [
        "acquire (201, lease ours)",
        "acquire (409, held by another)",
        "renew (200)",
    ] {
        let mut crate_times = Vec::with_capacity(samples);
        let mut bare_times = Vec::with_capacity(samples);
        let warmup = 50;
        for i in 0..samples + warmup {
            let mut timed_crate = 0.0;
            let mut timed_bare = 0.0;
            // Alternate which goes first, so neither always follows the other.
            for crate_turn in if i % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            } {
                let started = Instant::now();
                if crate_turn {
                    match op.split(' ').next() {
                        Some("acquire") if op.contains("201") => {
                            ensure!(
                                own_crate.acquire(ours, lease_secs).await? == Acquire::Acquired,
                                "crate acquire"
                            );
                        }
                        Some("acquire") => {
                            ensure!(
                                held_crate.acquire(ours, lease_secs).await? == Acquire::Held,
                                "crate held"
                            );
                        }
                        _ => own_crate.renew(ours).await?,
                    }
                    timed_crate = started.elapsed().as_secs_f64();
                } else {
                    match op.split(' ').next() {
                        Some("acquire") if op.contains("201") => {
                            let r = own_bare
                                .acquire_lease(LeaseDuration::Seconds(15))
                                .proposed_lease_id(ProposedLeaseId::from(id))
                                .await?;
                            ensure!(r.lease_id == id, "bare acquire");
                        }
                        Some("acquire") => {
                            let r = held_bare
                                .acquire_lease(LeaseDuration::Seconds(15))
                                .proposed_lease_id(ProposedLeaseId::from(id))
                                .await;
                            ensure!(r.is_err(), "bare held");
                        }
                        _ => {
                            let r = own_bare.blob_lease_client(id).renew().await?;
                            ensure!(r.lease_id == id, "bare renew");
                        }
                    }
                    timed_bare = started.elapsed().as_secs_f64();
                }
            }
            if i >= warmup {
                crate_times.push(timed_crate);
                bare_times.push(timed_bare);
            }
        }
        let c = stats(&crate_times);
        let b = stats(&bare_times);
        let diffs: Vec<f64> = crate_times
            .iter()
            .zip(&bare_times)
            .map(|(c, b)| c - b)
            .collect();
        let paired = stats(&diffs);
        let ratio = c.median / b.median;
        let _ = writeln!(
            rows,
            "| {op} | {} / {} | {} / {} | {:.3} ({:+.1} %) | {:.3} | {:+.1} µs |",
            ms(b.median),
            ms(b.p99),
            ms(c.median),
            ms(c.p99),
            ratio,
            (ratio - 1.0) * 100.0,
            c.p99 / b.p99,
            paired.median * 1e6
        );
        summary.push((op, ratio, c.p99 / b.p99));
        json.push(Json::obj([
            ("operation", Json::str(op)),
            ("samples", Json::Int(samples as u64)),
            ("bare_sdk_seconds", Json::stats(&b)),
            ("crate_seconds", Json::stats(&c)),
            ("median_ratio", Json::Num(ratio)),
            ("p99_ratio", Json::Num(c.p99 / b.p99)),
            ("paired_difference_seconds", Json::stats(&paired)),
        ]));
        eprintln!(
            "  {op}: bare {} crate {} ratio {ratio:.3}",
            ms(b.median),
            ms(c.median)
        );
    }
    let _ = own_crate.release(ours).await;
    let _ = held_crate.release(theirs).await;

    report.json.push(("overhead".to_owned(), Json::Arr(json)));
    for (op, ratio, p99) in summary {
        report.target(
            &format!("crate overhead, {op}"),
            format!(
                "{:+.1} % at the median, {:+.1} % at p99",
                (ratio - 1.0) * 100.0,
                (p99 - 1.0) * 100.0
            ),
            "≤ 5 % of the bare median".to_owned(),
            Some(ratio - 1.0 <= 0.05),
        );
    }
    let d = &mut report.details;
    let _ = writeln!(d, "### Overhead over the bare SDK\n");
    let _ = writeln!(
        d,
        "`BlobLeaseManager::acquire`/`renew` against the same request made with \
         `azure_storage_blobs` directly (`ClientBuilder::with_location(..).retry(RetryOptions::none())`), \
         on the same Azurite without a proxy, {samples} pairs per operation after 50 warm-up pairs, \
         alternating which of the two goes first. The paired difference is the median of \
         (crate − bare) over the pairs.\n"
    );
    let _ = writeln!(d, "| operation | bare SDK median / p99 | crate median / p99 | median ratio | p99 ratio | paired difference |");
    let _ = writeln!(d, "|---|---|---|---|---|---|");
    d.push_str(&rows);
    d.push('\n');
    Ok(())
}

// ---------------------------------------------------------------- contention

#[allow(clippy::too_many_lines)] // one measurement, read top to bottom
async fn contention(config: &Config, azurite: &Azurite, report: &mut Report) -> Result<()> {
    let proxy = Proxy::start(azurite.upstream).await?;
    let container = unique_container("contention");
    let n = config.candidates;
    let leaders_now = Arc::new(AtomicUsize::new(0));
    let most_at_once = Arc::new(AtomicUsize::new(0));
    let terms: Arc<Mutex<Vec<(Instant, String, u64)>>> = Arc::default();
    let token = CancellationToken::new();
    let mut mutexes = Vec::new();
    for i in 0..n {
        let (now, most, terms) = (leaders_now.clone(), most_at_once.clone(), terms.clone());
        let options = MutexOptions::default().with_holder(format!("candidate-{i}"));
        let mutex = BlobDistributedMutex::with_options(
            settings(&proxy.endpoint, &container, "leader")?,
            options,
            move |ctx| {
                let (now, most, terms) = (now.clone(), most.clone(), terms.clone());
                async move {
                    let at = Instant::now();
                    let leaders = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(leaders, Ordering::SeqCst);
                    terms
                        .lock()
                        .expect("terms")
                        .push((at, ctx.holder().to_owned(), ctx.epoch()));
                    ctx.cancelled().await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), std::convert::Infallible>(())
                }
            },
        )?;
        mutexes.push(Arc::new(mutex));
    }
    let start = Instant::now();
    let handles: Vec<_> = mutexes
        .iter()
        .map(|m| {
            let (m, token) = (m.clone(), token.clone());
            tokio::spawn(async move { m.run_task_when_mutex_acquired(token).await })
        })
        .collect();
    let elected = loop {
        if let Some((at, _, _)) = terms.lock().expect("terms").first() {
            break *at;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(60),
            "no leader within 60 s among {n} candidates"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let time_to_leader = (elected - start).as_secs_f64();
    let election_requests = proxy.between(start, elected);
    let steady_from = elected + Duration::from_secs(3);
    let end = start + config.contention_window.max(Duration::from_secs(8));
    tokio::time::sleep_until(tokio::time::Instant::from_std(end)).await;
    let steady = proxy.between(steady_from, end);
    let steady_secs = (end - steady_from).as_secs_f64();
    let terms_seen = terms.lock().expect("terms").clone();
    let most = most_at_once.load(Ordering::SeqCst);
    token.cancel();
    for handle in handles {
        match tokio::time::timeout(Duration::from_secs(20), handle).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("  a candidate stopped with an error: {e}"),
            Ok(Err(e)) => eprintln!("  a candidate panicked: {e}"),
            Err(_) => eprintln!("  a candidate did not stop within 20 s"),
        }
    }
    let rate = float(steady.len()) / steady_secs;
    let expected = float(n - 1) / RETRY_SECS + 1.0 / RENEW_SECS;
    let mut kinds: BTreeMap<Kind, usize> = BTreeMap::new();
    for (_, k) in &election_requests {
        *kinds.entry(*k).or_insert(0) += 1;
    }
    let one_leader = terms_seen.len() == 1 && most == 1;
    eprintln!(
        "  {n} candidates: leader after {}, {rate:.1} requests/s",
        secs(time_to_leader)
    );
    report.json.push((
        "contention".to_owned(),
        Json::obj([
            ("candidates", Json::Int(n as u64)),
            ("seconds_to_first_leader", Json::Num(time_to_leader)),
            (
                "requests_until_elected",
                Json::Int(election_requests.len() as u64),
            ),
            (
                "requests_until_elected_by_kind",
                Json::Obj(
                    kinds
                        .iter()
                        .map(|(k, v)| (k.name().to_owned(), Json::Int(*v as u64)))
                        .collect(),
                ),
            ),
            ("steady_window_seconds", Json::Num(steady_secs)),
            ("steady_requests_per_second", Json::Num(rate)),
            ("expected_requests_per_second", Json::Num(expected)),
            ("terms_started", Json::Int(terms_seen.len() as u64)),
            ("most_leaders_at_once", Json::Int(most as u64)),
            ("exactly_one_leader", Json::Bool(one_leader)),
        ]),
    ));
    report.target(
        &format!("contention, {n} candidates: leaders"),
        format!(
            "{} term(s), at most {most} at once; elected after {}",
            terms_seen.len(),
            secs(time_to_leader)
        ),
        "exactly 1".to_owned(),
        Some(one_leader),
    );
    let d = &mut report.details;
    let _ = writeln!(d, "### Contention: {n} candidates on one blob\n");
    let _ = writeln!(
        d,
        "{n} `BlobDistributedMutex` objects (default options) in one process, started together \
         on a blob that does not exist yet, through one counting proxy.\n"
    );
    let _ = writeln!(d, "| time to the first leader | requests until then | steady request rate | schedule | leader terms | most leaders at once |");
    let _ = writeln!(d, "|---|---|---|---|---|---|");
    let _ = writeln!(
        d,
        "| {} | {} ({}) | {rate:.1} /s over {steady_secs:.0} s | {expected:.1} /s | {} | {most} |\n",
        secs(time_to_leader),
        election_requests.len(),
        kinds.iter().map(|(k, v)| format!("{} {v}", k.name())).collect::<Vec<_>>().join(", "),
        terms_seen.len(),
    );
    Ok(())
}

// ---------------------------------------------------------------- main

fn machine() -> Json {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    Json::obj([
        (
            "cpus",
            Json::Int(std::thread::available_parallelism().map_or(0, |n| n.get() as u64)),
        ),
        ("cpu_model", Json::str(model)),
        ("memory_kib", Json::Int(mem_kib)),
        ("load_average_at_start", Json::str(load.trim())),
    ])
}

async fn run(config: Config) -> Result<()> {
    let defaults = MutexOptions::default();
    ensure!(
        (defaults.lease_duration.as_secs_f64() - LEASE_SECS).abs() < 1e-9
            && (defaults.effective_renew_interval().as_secs_f64() - RENEW_SECS).abs() < 1e-9
            && (defaults.acquire_retry.as_secs_f64() - RETRY_SECS).abs() < 1e-9
            && (defaults.acquire_jitter - JITTER).abs() < 1e-9,
        "the crate's defaults changed; update the constants at the top of examples/bench.rs"
    );
    std::fs::create_dir_all(config.out.join("logs"))?;
    ensure!(
        config.worker.exists(),
        "worker not found at {}; run `cargo build --release --examples`",
        config.worker.display()
    );
    let azurite = match &config.endpoint {
        Some(endpoint) => Azurite::external(endpoint)?,
        None => Azurite::start(&config.out)?,
    };
    let began = Instant::now();
    let mut report = Report {
        json: vec![("machine".to_owned(), machine())],
        summary: Vec::new(),
        details: String::new(),
    };
    if config.runs("overhead") {
        eprintln!("overhead: crate vs bare SDK ...");
        overhead(&config, &azurite, &mut report).await?;
    }
    if config.runs("contention") {
        eprintln!("contention: {} candidates ...", config.candidates);
        contention(&config, &azurite, &mut report).await?;
    }
    if config.runs("cost") {
        eprintln!("request cost and footprint ...");
        cost(&config, &azurite, &mut report).await?;
    }
    if config.runs("handover") {
        eprintln!("graceful handover x {} ...", config.handover_reps);
        let h = handover(&config, &azurite, false).await?;
        report_handover(&mut report, false, &h);
    }
    if config.runs("crash") {
        eprintln!("crash failover x {} ...", config.crash_reps);
        let h = handover(&config, &azurite, true).await?;
        report_handover(&mut report, true, &h);
    }
    let elapsed = began.elapsed().as_secs_f64();
    report.json.push((
        "run".to_owned(),
        Json::obj([
            ("quick", Json::Bool(config.quick)),
            ("seconds", Json::Num(elapsed)),
            (
                "sections",
                Json::Arr(config.sections.iter().map(Json::str).collect()),
            ),
            (
                "load_average_at_end",
                Json::str(
                    std::fs::read_to_string("/proc/loadavg")
                        .unwrap_or_default()
                        .trim(),
                ),
            ),
        ]),
    ));
    let header = format!(
        "Measured against Azurite on 127.0.0.1 in {elapsed:.0} s{}. Default options: lease 15 s, \
         renew every 5 s, acquire retry 1 s ± 20 %.",
        if config.quick { " (--quick)" } else { "" }
    );
    let table = report.markdown(&header);
    let mut json = String::new();
    Json::Obj(report.json).write(&mut json, 0);
    json.push('\n');
    std::fs::write(config.out.join("results.json"), json)?;
    std::fs::write(config.out.join("table.md"), &table)?;
    println!("{table}");
    eprintln!(
        "wrote {} and {}",
        config.out.join("results.json").display(),
        config.out.join("table.md").display()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let config = Config::parse()?;
    tokio::select! {
        result = run(config) => result,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    }
}
