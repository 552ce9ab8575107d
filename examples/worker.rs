//! A worker that does periodic work only while it is the leader.
//!
//! ```text
//! cargo run --example worker -- <container> <blob> <instance-id> [options]
//! ```
//!
//! The connection string comes from `AZURE_STORAGE_CONNECTION_STRING`
//! (Azurite's defaults when unset). Ctrl-C or SIGTERM stops the leader task
//! and releases the lease before the process exits.
//!
//! Every transition is one line on standard output, flushed at once:
//!
//! ```text
//! LEADING epoch=<n> id=<id>
//! STOPPED epoch=<n> id=<id> reason=<shutdown|lost|deadline|stalled>
//! ```
//!
//! Options (for experiments and the project's fault tests):
//! `--lease-secs N`, `--renew-ms N`, `--acquire-retry-ms N`, `--grace-ms N`,
//! `--request-timeout-ms N`, `--work-ms N` (time between work ticks),
//! `--heartbeat-ms N` (enable the watchdog), `--stall-after-ms N` (stop beating
//! and doing work after N ms of leading), `--ignore-cancel` (the task never
//! returns after cancellation; the mutex aborts it after its grace),
//! `--block-on-cancel` (after cancellation the task blocks its thread with
//! `std::thread::sleep`, so it cannot even be aborted; with `--fail-stop` the
//! process exits), `--fail-stop`.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use blob_mutex::{
    BlobDistributedMutex, BlobSettings, CancellationToken, LeaderContext, MutexOptions,
};

#[derive(Clone, Copy, Default)]
struct Behaviour {
    work: Duration,
    stall_after: Option<Duration>,
    ignore_cancel: bool,
    block_on_cancel: bool,
}

/// Prints one line and flushes it, so that scripts see it at once.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn lead(ctx: LeaderContext, behaviour: Behaviour) -> anyhow::Result<()> {
    let (epoch, id) = (ctx.epoch(), ctx.holder().to_owned());
    say(&format!("LEADING epoch={epoch} id={id}"));
    let started = tokio::time::Instant::now();
    let mut tick = 0u64;
    let reason = loop {
        let stalled = behaviour
            .stall_after
            .is_some_and(|after| started.elapsed() >= after);
        tokio::select! {
            reason = ctx.cancelled() => break reason,
            () = tokio::time::sleep(behaviour.work) => {
                if !stalled {
                    tick += 1;
                    ctx.heartbeat().beat();
                    tracing::info!(epoch, tick, "working");
                }
            }
        }
    };
    if behaviour.block_on_cancel {
        // Blocks its runtime thread: an abort cannot take effect.
        std::thread::sleep(Duration::from_secs(3600));
    }
    if behaviour.ignore_cancel {
        // A badly behaved task: it never returns; the mutex aborts it.
        std::future::pending::<()>().await;
    }
    say(&format!("STOPPED epoch={epoch} id={id} reason={reason}"));
    Ok(())
}

fn parse_args() -> anyhow::Result<(String, String, MutexOptions, Behaviour)> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: worker <container> <blob> <instance-id> [options]";
    let container = args.next().context(usage)?;
    let blob = args.next().context(usage)?;
    let id = args.next().context(usage)?;
    let mut options = MutexOptions::default().with_holder(id);
    let mut behaviour = Behaviour {
        work: Duration::from_millis(500),
        ..Behaviour::default()
    };
    while let Some(flag) = args.next() {
        let mut number = || -> anyhow::Result<u64> {
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            value
                .parse()
                .with_context(|| format!("{flag} needs a whole number, got {value:?}"))
        };
        match flag.as_str() {
            "--lease-secs" => options = options.with_lease_duration(Duration::from_secs(number()?)),
            "--renew-ms" => options = options.with_renew_interval(Duration::from_millis(number()?)),
            "--acquire-retry-ms" => {
                options = options.with_acquire_retry(Duration::from_millis(number()?));
            }
            "--grace-ms" => options = options.with_stop_grace(Duration::from_millis(number()?)),
            "--request-timeout-ms" => {
                options = options.with_request_timeout(Duration::from_millis(number()?));
            }
            "--heartbeat-ms" => {
                options = options.with_heartbeat_timeout(Duration::from_millis(number()?));
            }
            "--work-ms" => behaviour.work = Duration::from_millis(number()?),
            "--stall-after-ms" => behaviour.stall_after = Some(Duration::from_millis(number()?)),
            "--ignore-cancel" => behaviour.ignore_cancel = true,
            "--block-on-cancel" => behaviour.block_on_cancel = true,
            "--fail-stop" => options = options.with_fail_stop(true),
            other => bail!("unknown option {other}\n{usage}"),
        }
    }
    Ok((container, blob, options, behaviour))
}

/// Completes on Ctrl-C or, on Unix, SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
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

    let (container, blob, options, behaviour) = parse_args()?;
    let settings = match std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        Ok(cs) if !cs.trim().is_empty() => {
            BlobSettings::from_connection_string(&cs, container, blob)?
        }
        _ => BlobSettings::azurite(container, blob)?,
    };
    let mutex =
        BlobDistributedMutex::with_options(settings, options, move |ctx| lead(ctx, behaviour))?;

    let token = CancellationToken::new();
    let on_signal = token.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        on_signal.cancel();
    });
    mutex.run_task_when_mutex_acquired(token).await?;
    say(&format!("EXITED id={}", mutex.holder()));
    Ok(())
}
