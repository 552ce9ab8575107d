//! A service that answers its orchestrator's probes from the mutex's
//! [`Health`](blob_mutex::health::Health), over hyper.
//!
//! ```text
//! cargo run --example health -- <container> <blob> <listen-address>
//! ```
//!
//! `GET /livez` answers `200 ok`, or 503 with the reason where a restart
//! helps; `GET /readyz` answers `200 ready: leader of term N` or
//! `200 ready: follower` while storage answers, 503 with the reason
//! otherwise; `/readyz?leader` fails on a follower too. The connection
//! string comes from `AZURE_STORAGE_CONNECTION_STRING`
//! (`UseDevelopmentStorage=true` for a local Azurite). Ctrl-C or SIGTERM
//! stops the leader task, releases the lease and exits.
//!
//! In a Kubernetes pod:
//!
//! ```yaml
//! livenessProbe:
//!   httpGet: { path: /livez, port: 8080 }
//!   periodSeconds: 10
//!   failureThreshold: 3
//! readinessProbe:
//!   httpGet: { path: /readyz, port: 8080 }
//!   periodSeconds: 5
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;

use anyhow::Context;
use blob_mutex::health::{Health, Verdict};
use blob_mutex::{BlobDistributedMutex, BlobSettings, CancellationToken, LeaderContext};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The answer to one request.
fn answer(health: &Health, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD");
    }
    let leader_only = request.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|pair| pair.split('=').next() == Some("leader"))
    });
    let verdict = match request.uri().path() {
        "/livez" => health.live(),
        "/readyz" if leader_only => health.ready_to_lead(),
        "/readyz" => health.ready(),
        _ => return text(StatusCode::NOT_FOUND, "not found"),
    };
    probe(&verdict)
}

/// 200 with the verdict's line, or 503 with its reason.
fn probe(verdict: &Verdict) -> Response<Full<Bytes>> {
    let status = if verdict.passes() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, verdict.reason())
}

fn text(status: StatusCode, line: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{line}\n"))));
    *response.status_mut() = status;
    response
}

/// Answers the probes on `listener` until the process ends.
async fn serve(listener: TcpListener, health: Health) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let health = health.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let response = answer(&health, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            // A client that goes away is no concern of the service.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The service's work while it leads.
async fn lead(ctx: LeaderContext) -> anyhow::Result<()> {
    println!("LEADING epoch={} id={}", ctx.epoch(), ctx.holder());
    ctx.cancelled().await;
    Ok(())
}

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
    let (Some(container), Some(blob), Some(addr), None) =
        (args.next(), args.next(), args.next(), args.next())
    else {
        anyhow::bail!("usage: health <container> <blob> <listen-address>");
    };
    let addr: SocketAddr = addr
        .parse()
        .context("the listen address, as 127.0.0.1:8080")?;
    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING").context(
        "set AZURE_STORAGE_CONNECTION_STRING to the storage account's connection string \
         (UseDevelopmentStorage=true for a local Azurite)",
    )?;
    let settings = BlobSettings::from_connection_string(&connection, container, blob)
        .context("invalid storage settings")?;
    let mutex = BlobDistributedMutex::new(settings, lead)?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tokio::spawn(serve(listener, mutex.health()));

    // Ctrl-C or SIGTERM cancels the token: a graceful stop.
    let token = CancellationToken::new();
    let on_signal = token.clone();
    #[cfg(unix)]
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listen for SIGTERM")?;
    tokio::spawn(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = sigterm.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });
    mutex.run_task_when_mutex_acquired(token).await?;
    println!("EXITED");
    Ok(())
}
