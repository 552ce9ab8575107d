//! A service whose requests only the leader serves: a follower redirects
//! each one to the leader's address, read from the mutex's `leader()`
//! watch.
//!
//! ```text
//! cargo run --example forward -- <container> <blob> <instance-id>
//! curl -L http://127.0.0.1:<port>/job
//! ```
//!
//! Each instance listens on a free port of 127.0.0.1 (or `FORWARD_ADDR`),
//! advertises `http://<that address>` with its stamp, and answers
//! `GET <path>`:
//! - while it leads: `200`, `served by <id> epoch <n>`;
//! - while another instance leads: `307`, `Location: <leader's address><path>`;
//! - while it knows of no leader (the lease is free, or a new leader has
//!   not stamped yet): `503` with `Retry-After: 1`.
//!
//! A client that follows redirects and retries a 503 or a refused
//! connection reaches the leader through a failover. The connection string
//! comes from `AZURE_STORAGE_CONNECTION_STRING` (required; `UseDevelopmentStorage=true`
//! for a local Azurite), the backend from `BLOB_MUTEX_BACKEND`. Standard output has
//! `LISTENING <url>` first, then `LEADING epoch=<n>` at each term.

use std::sync::Arc;

use anyhow::Context;
use blob_mutex::{
    azure::Backend, term::Leader, BlobDistributedMutex, BlobSettings, CancellationToken,
    LeaderContext, MutexOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,blob_mutex=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let (Some(container), Some(blob), Some(id), None) =
        (args.next(), args.next(), args.next(), args.next())
    else {
        anyhow::bail!("usage: forward <container> <blob> <instance-id>");
    };
    let addr = std::env::var("FORWARD_ADDR").unwrap_or_else(|_| "127.0.0.1:0".to_owned());
    let listener = TcpListener::bind(&addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("LISTENING {url}");

    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING").context(
        "set AZURE_STORAGE_CONNECTION_STRING to the storage account's connection string \
         (UseDevelopmentStorage=true for a local Azurite)",
    )?;
    let settings = BlobSettings::from_connection_string(&connection, container, blob)
        .context("invalid storage settings")?
        .with_backend(Backend::from_env()?);
    let options = MutexOptions::default()
        .with_holder(id.clone())
        .with_advertised(url);
    let mutex =
        BlobDistributedMutex::with_options(settings, options, |ctx: LeaderContext| async move {
            println!("LEADING epoch={}", ctx.epoch());
            ctx.cancelled().await;
            Ok::<(), anyhow::Error>(())
        })?;

    let leader = mutex.leader();
    let me = Arc::new(id);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of file descriptors, say: try again shortly.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            };
            tokio::spawn(answer(stream, leader.clone(), me.clone()));
        }
    });

    let token = CancellationToken::new();
    let on_signal = token.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });
    mutex.run_task_when_mutex_acquired(token).await?;
    Ok(())
}

/// Answers one request: serves it while this instance leads, redirects it
/// to the leader otherwise.
async fn answer(mut stream: TcpStream, leader: watch::Receiver<Option<Leader>>, me: Arc<String>) {
    let Some(path) = request_path(&mut stream).await else {
        return;
    };
    // The value now, not held across an await.
    let shown = leader.borrow().clone();
    let response = match shown {
        Some(l) if l.holder == *me => {
            let body = format!("served by {me} epoch {}\n", l.epoch);
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        Some(Leader {
            advertised: Some(to),
            ..
        }) => format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {to}{path}\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n"
        ),
        _ => "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\n\
              content-length: 0\r\nconnection: close\r\n\r\n"
            .to_owned(),
    };
    let _ = stream.write_all(response.as_bytes()).await;
}

/// The path of a `GET` request; `None` for anything else or a request
/// whose head does not arrive within a second or 8 KiB.
async fn request_path(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Some(())
    };
    tokio::time::timeout(std::time::Duration::from_secs(1), read)
        .await
        .ok()??;
    let line = std::str::from_utf8(&head).ok()?.lines().next()?.to_owned();
    let mut parts = line.split(' ');
    match (parts.next(), parts.next()) {
        (Some("GET"), Some(path)) if path.starts_with('/') => Some(path.to_owned()),
        _ => None,
    }
}
