//! The counting proxy: forwards a client's connections to Azurite and logs
//! each storage request's time and kind, and how long until the first byte
//! of its response.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::azurite::ACCOUNT;
use crate::json::Json;

/// A storage request, classified by method, query and lease action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Acquire,
    Renew,
    Release,
    Break,
    Change,
    GetProperties,
    SetMetadata,
    CreateContainer,
    PutBlob,
    List,
    Other,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
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
            Kind::List => "list",
            Kind::Other => "other",
        }
    }

    /// The kind of the request whose head (request line and headers) is `head`.
    fn classify(head: &str) -> Kind {
        let mut request = head.split("\r\n").next().unwrap_or("").split(' ');
        let method = request.next().unwrap_or("");
        let target = request.next().unwrap_or("");
        let query = target.split_once('?').map_or("", |(_, q)| q);
        let has = |param: &str| query.split('&').any(|p| p.eq_ignore_ascii_case(param));
        if has("comp=lease") {
            let action = header(head, "x-ms-lease-action").map(str::to_ascii_lowercase);
            return match action.as_deref() {
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
            "GET" if has("comp=list") => Kind::List,
            _ => Kind::Other,
        }
    }
}

/// The value of header `name` in a request head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// How many requests of each kind.
pub(crate) fn count_by_kind(requests: &[(Instant, Kind)]) -> BTreeMap<Kind, usize> {
    let mut counts = BTreeMap::new();
    for (_, kind) in requests {
        *counts.entry(*kind).or_insert(0) += 1;
    }
    counts
}

/// The counts as a JSON object keyed by kind name.
pub(crate) fn counts_json(counts: &BTreeMap<Kind, usize>) -> Json {
    Json::obj(counts.iter().map(|(k, n)| (k.name(), Json::count(*n))))
}

type RequestLog = Arc<Mutex<Vec<(Instant, Kind)>>>;
/// Each request's send time and kind, with the time to its response's first byte.
type LatencyLog = Arc<Mutex<Vec<(Instant, Kind, Duration)>>>;

/// A pass-through TCP proxy on 127.0.0.1 that logs every HTTP request it
/// forwards (time and kind). It parses only request heads and skips bodies
/// by `Content-Length`; the storage SDK sends no chunked requests.
pub(crate) struct Proxy {
    /// The blob endpoint to give a client instead of Azurite's.
    pub(crate) endpoint: String,
    log: RequestLog,
    latencies: LatencyLog,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    pub(crate) async fn start(upstream: SocketAddr) -> Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let log: RequestLog = Arc::default();
        let latencies: LatencyLog = Arc::default();
        let (log_for_accept, latencies_for_accept) = (log.clone(), latencies.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let log = log_for_accept.clone();
                let latencies = latencies_for_accept.clone();
                tokio::spawn(async move {
                    let _ = forward(client, upstream, log, latencies).await;
                });
            }
        });
        Ok(Proxy {
            endpoint: format!("http://127.0.0.1:{port}/{ACCOUNT}"),
            log,
            latencies,
            accept,
        })
    }

    /// The requests sent in `[from, to)`.
    pub(crate) fn between(&self, from: Instant, to: Instant) -> Vec<(Instant, Kind)> {
        let log = self.log.lock().expect("request log");
        log.iter()
            .copied()
            .filter(|(at, _)| *at >= from && *at < to)
            .collect()
    }

    /// The time from sending to the first byte of the response, in
    /// seconds, of each request of `kind` sent in `[from, to)` that got one.
    pub(crate) fn latencies(&self, kind: Kind, from: Instant, to: Instant) -> Vec<f64> {
        let log = self.latencies.lock().expect("latency log");
        log.iter()
            .filter(|(at, k, _)| *k == kind && *at >= from && *at < to)
            .map(|(_, _, took)| took.as_secs_f64())
            .collect()
    }
}

/// Forwards one connection both ways. The client (the storage SDK) does
/// not pipeline: the first bytes from the server after a request are its
/// response, so the time to them is the request's latency.
async fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    log: RequestLog,
    latencies: LatencyLog,
) -> Result<()> {
    client.set_nodelay(true)?;
    let server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let pending: Arc<Mutex<Option<(Instant, Kind)>>> = Arc::default();
    let awaiting = pending.clone();
    let down = tokio::spawn(async move {
        let mut buffer = vec![0u8; 16 * 1024];
        while let Ok(n) = server_read.read(&mut buffer).await {
            if n == 0 {
                break;
            }
            if let Some((at, kind)) = awaiting.lock().expect("pending request").take() {
                latencies
                    .lock()
                    .expect("latency log")
                    .push((at, kind, at.elapsed()));
            }
            if client_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
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
        // Log the requests this chunk completes before forwarding it, so
        // that a response cannot arrive before its request is pending.
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
            let now = Instant::now();
            log.lock().expect("request log").push((now, kind));
            *pending.lock().expect("pending request") = Some((now, kind));
            body_left = header(&text, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
        server_write.write_all(&buffer[..n]).await?;
    }
    let _ = server_write.shutdown().await;
    let _ = down.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_the_requests_the_election_makes() {
        let lease = |action: &str| {
            format!("PUT /devstoreaccount1/c/b?comp=lease HTTP/1.1\r\nx-ms-lease-action: {action}\r\n\r\n")
        };
        assert_eq!(Kind::classify(&lease("acquire")), Kind::Acquire);
        assert_eq!(Kind::classify(&lease("Renew")), Kind::Renew);
        assert_eq!(Kind::classify(&lease("release")), Kind::Release);
        let head = |line: &str| format!("{line} HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        for (line, kind) in [
            ("PUT /a/c/b?comp=metadata", Kind::SetMetadata),
            ("PUT /a/c?restype=container", Kind::CreateContainer),
            ("PUT /a/c/b", Kind::PutBlob),
            ("HEAD /a/c/b", Kind::GetProperties),
            ("GET /a/c/b?comp=metadata", Kind::GetProperties),
            ("GET /a/c?restype=container&comp=list", Kind::List),
            ("GET /a/c/b", Kind::Other),
        ] {
            assert_eq!(Kind::classify(&head(line)), kind, "{line}");
        }
    }
}
