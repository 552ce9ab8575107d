//! A worker that exposes its leadership figures to Prometheus.
//!
//! ```text
//! cargo run --example prometheus --features metrics -- <container> <blob> [port]
//! curl http://127.0.0.1:9898/metrics
//! ```
//!
//! The `metrics` feature makes the mutex record its figures through the
//! `metrics` facade (see the crate docs for the names); any exporter shows
//! them. Here the Prometheus exporter's recorder is installed and its text
//! is served on `127.0.0.1:<port>` (default 9898) by a few lines of Tokio,
//! for every request, whatever its path. The connection string comes from
//! `AZURE_STORAGE_CONNECTION_STRING` (required; `UseDevelopmentStorage=true` for a local Azurite), the
//! storage backend from `BLOB_MUTEX_BACKEND` (`official`, the default, or
//! `sdk-v021`).

use std::time::Duration;

use anyhow::Context;
use blob_mutex::{
    azure::Backend, BlobDistributedMutex, BlobSettings, CancellationToken, LeaderContext,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn lead(ctx: LeaderContext) -> anyhow::Result<()> {
    println!("leading with epoch {}", ctx.epoch());
    ctx.cancelled().await;
    Ok(())
}

/// Answers every connection with the current figures.
async fn serve(listener: TcpListener, figures: PrometheusHandle) -> anyhow::Result<()> {
    loop {
        let (mut stream, _) = listener.accept().await?;
        let body = figures.render();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut request)).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        });
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: prometheus <container> <blob> [port]";
    let container = args.next().context(usage)?;
    let blob = args.next().context(usage)?;
    let port: u16 = args
        .next()
        .map_or(Ok(9898), |p| p.parse())
        .context("the port is a number")?;

    let figures = PrometheusBuilder::new().install_recorder()?;
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    println!("figures on http://127.0.0.1:{port}/metrics");
    tokio::spawn(serve(listener, figures));

    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING").context(
        "set AZURE_STORAGE_CONNECTION_STRING to the storage account's connection string \
         (UseDevelopmentStorage=true for a local Azurite)",
    )?;
    let settings = BlobSettings::from_connection_string(&connection, container, blob)
        .context("invalid storage settings")?
        .with_backend(Backend::from_env()?);
    let mutex = BlobDistributedMutex::new(settings, lead)?;
    let token = CancellationToken::new();
    let stop = token.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    mutex.run_task_when_mutex_acquired(token).await?;
    Ok(())
}
