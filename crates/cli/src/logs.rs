//! The command's logs: to stderr, as text or JSON lines, chosen by
//! `RUST_LOG` (default: the leader's start and end, warnings and errors),
//! and below info only from this crate's own targets, whatever `RUST_LOG`
//! says.
//!
//! At debug the storage SDKs and the HTTP stack under them log what carries
//! credentials: `azure_core` 0.21 logs every request with its URL (a SAS
//! token in the query) and its headers, whose `Debug` shows `Authorization`
//! (a Shared Key signature or a bearer token) in clear; the official SDK
//! logs lease ids. `RUST_LOG` is matched against targets by string prefix,
//! and a directive on a span (`[lease]=trace`) enables every event inside
//! that span whatever its target, so no rewriting of the directives can
//! keep them all out: the cap is a filter on each event's own target.

use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::{filter_fn, FilterExt};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The target of the lines that say when this host's command starts and
/// ends as leader: logged at info, and shown by default.
pub(crate) const LEADER: &str = "blob_mutex::leader";

/// What is logged when `RUST_LOG` is not set: the leader's start and end
/// lines, warnings and errors.
const DEFAULT_DIRECTIVES: &str = "warn,blob_mutex::leader=info";

/// How the logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// A line of text per event (with colours on a terminal).
    Text,
    /// A JSON object per line: `timestamp`, `level`, `target`, the
    /// event's fields (`message` among them) and its spans.
    Json,
}

/// The format chosen at [`init`].
static FORMAT: OnceLock<LogFormat> = OnceLock::new();
/// The lease and the holder of this run, once known (see [`identify`]).
static RUN: OnceLock<(String, String)> = OnceLock::new();

/// The lease (`container/blob`) and the holder this process campaigns
/// with: named by [`say`]'s JSON lines.
pub(crate) fn identify(lease: &str, holder: &str) {
    let _ = RUN.set((lease.to_owned(), holder.to_owned()));
}

/// Writes one of the command's own lines to stderr, whatever `RUST_LOG`
/// says (a final error, why the command was stopped): `blob-mutex: …` as
/// text, or with `--log-format json` one JSON object as the other lines
/// are, at level `ERROR`, with the lease and the holder once known.
pub(crate) fn say(message: &str) {
    write_line("ERROR", message);
}

/// As [`say`], for a line that is no error (a command skipped as not due,
/// a lease found free): level `INFO`.
pub(crate) fn note(message: &str) {
    write_line("INFO", message);
}

fn write_line(level: &str, message: &str) {
    if !is_json() {
        eprintln!("blob-mutex: {message}");
        return;
    }
    let line = json_line(
        level,
        "blob_mutex",
        serde_json::json!({ "message": message }),
    );
    eprintln!("{line}");
}

/// One of the command's own JSON lines, as the subscriber writes its
/// events: `fields` with the lease and the holder added once known.
fn json_line(level: &str, target: &str, mut fields: serde_json::Value) -> serde_json::Value {
    if let Some((lease, holder)) = RUN.get() {
        fields["lease"] = lease.as_str().into();
        fields["holder"] = holder.as_str().into();
    }
    serde_json::json!({
        "timestamp": jiff::Timestamp::now().to_string(),
        "level": level,
        "fields": fields,
        "target": target,
    })
}

/// Whether the logs are JSON lines (see [`init`]).
pub(crate) fn is_json() -> bool {
    FORMAT.get() == Some(&LogFormat::Json)
}

/// One of a command's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// Writes one line of a command's output (`line`, its end of line
/// dropped, bytes that are not UTF-8 replaced) as a JSON line on the same
/// stream: level `INFO`, target `blob_mutex::command`, with `stream`,
/// `pid`, and the lease and holder once known among its `fields`. Written
/// whatever `RUST_LOG` says: the command's output is not a log to filter.
pub(crate) fn command_line(stream: Stream, pid: u32, line: &[u8]) {
    use std::io::Write;
    let text = String::from_utf8_lossy(line);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    let name = match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    let fields = serde_json::json!({ "message": text, "stream": name, "pid": pid });
    let json = json_line("INFO", "blob_mutex::command", fields);
    let mut bytes = json.to_string().into_bytes();
    bytes.push(b'\n');
    // One write a line, so that lines of the two sources never mix; a
    // stream that is gone loses the line, as the command's own write would.
    let _ = match stream {
        Stream::Stdout => std::io::stdout().lock().write_all(&bytes),
        Stream::Stderr => std::io::stderr().lock().write_all(&bytes),
    };
}

/// Starts logging to stderr as `RUST_LOG` says, in `format`.
pub(crate) fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_DIRECTIVES.to_owned());
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::registry()
        .with(layer(&directives, std::io::stderr, ansi, format))
        .init();
}

/// The layer that writes the logs `directives` choose to `writer` in
/// `format`, capped. Directives that do not parse are replaced by the
/// default ones.
fn layer<S, W>(directives: &str, writer: W, ansi: bool, format: LogFormat) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new(DEFAULT_DIRECTIVES));
    // A JSON line names the lease and the holder through its spans (the
    // command's `run`, the library's `lease` and `term`): they are recorded
    // whatever `RUST_LOG` lets through of the events.
    let json = format == LogFormat::Json;
    let filter = filter.or(filter_fn(move |metadata| {
        json && metadata.is_span() && ours(metadata)
    }));
    let written: Box<dyn Layer<S> + Send + Sync> = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(ansi)
            .with_target(false)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(writer)
            .with_current_span(false)
            .with_span_list(true)
            .boxed(),
    };
    written.with_filter(filter).with_filter(filter_fn(allowed))
}

/// Whether an event or span may be logged at all: at info or above from any
/// target, below info only from this crate's own (the library's and the
/// command's, `blob_mutex` and its modules). Every other target, the SDKs'
/// and the HTTP stack's, stays at info at most.
fn allowed(metadata: &Metadata<'_>) -> bool {
    *metadata.level() <= Level::INFO || ours(metadata)
}

/// Whether an event or span is this crate's own (the library's or the
/// command's: `blob_mutex` and its modules).
fn ours(metadata: &Metadata<'_>) -> bool {
    let target = metadata.target();
    target == "blob_mutex" || target.starts_with("blob_mutex::")
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing::{event, info_span, Level};
    use tracing_subscriber::layer::SubscriberExt;

    use super::layer;

    /// What the layer wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Emits, inside a span of this crate named `lease` with a field `x`,
    /// one event at debug and one at trace from each target given, each
    /// saying `secret from <target>`, and one at info from the first.
    macro_rules! emit_from {
        ($first:literal $(, $target:literal)* $(,)?) => {{
            let span = info_span!(target: "blob_mutex::engine", "lease", x = 1);
            let _entered = span.enter();
            event!(target: $first, Level::INFO, "info from {}", $first);
            event!(target: $first, Level::DEBUG, "secret from {}", $first);
            event!(target: $first, Level::TRACE, "secret from {}", $first);
            $(
                event!(target: $target, Level::DEBUG, "secret from {}", $target);
                event!(target: $target, Level::TRACE, "secret from {}", $target);
            )*
            event!(target: "blob_mutex::engine", Level::DEBUG, "own debug");
        }};
    }

    /// What is logged under `RUST_LOG=directives`.
    fn logged(directives: &str) -> String {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(layer(
            directives,
            move || writer.clone(),
            false,
            super::LogFormat::Text,
        ));
        tracing::subscriber::with_default(subscriber, || {
            emit_from!(
                "azure_core::policies::transport",
                "azure_core",
                "azure_core::http::policies::logging",
                "azure_storage::shared_access_signature",
                "azure_storage_blobs::blob::operations",
                "azure_storage_blob::clients",
                "azure_identity::credentials",
                "typespec_client_core::http::policies::logging",
                "typespec::error",
                "reqwest::connect",
                "reqwest::async_impl::client",
                "hyper::proto::h1::io",
                "hyper_util::client::legacy::pool",
                "h2::codec::framed_write",
                "rustls::client::hs",
                "tower::buffer",
                "http",
            );
        });
        let text = buffer.0.lock().unwrap().clone();
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn nothing_but_the_crates_own_targets_logs_below_info_whatever_rust_log_says() {
        for directives in [
            "trace",
            "debug",
            "azure_core=trace",
            "azure_core:=debug",
            "azure_core::=trace",
            "azure_core::policies::transport=debug,blob_mutex=debug",
            "azure_cor=debug",
            "azure=trace",
            "azure_storage=trace,azure_storage_blobs=trace,azure_identity=trace",
            "typespec_client_core=debug",
            "typespec=trace",
            "reqwest=debug",
            "hyper=trace,hyper_util=trace",
            "h2=trace,rustls=trace,tower=trace,http=trace",
            "AZURE_CORE=trace,Azure_Core=debug",
            "[{x}]=debug",
            "[lease]=trace",
            "[]=trace",
            "blob_mutex[lease]=trace",
            "warn,azure_core[lease]=trace",
            "azure_core=info,azure_core:=trace,azure_core::policies::transport[{x}]=trace",
            "info,azure_core::policies::transport=trace,typespec_client_core::http=trace",
        ] {
            let out = logged(directives);
            assert!(
                !out.contains("secret"),
                "RUST_LOG={directives} let an SDK log below info: {out}"
            );
        }
        let out = logged("trace");
        assert!(
            out.contains("own debug") && out.contains("info from azure_core"),
            "the crate's debug logs and the SDKs' info logs stay: {out}"
        );
        assert!(logged("[lease]=debug").contains("own debug"));
        assert!(!logged("warn").contains("own debug"));
    }
}
