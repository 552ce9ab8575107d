//! A worker that does its work only while it leads: the one to copy.
//!
//! ```text
//! cargo run --example worker -- <container> <blob> <instance-id>
//! ```
//!
//! Start it several times on one blob with different ids: one leads, the
//! others wait to take over. The connection string comes from
//! `AZURE_STORAGE_CONNECTION_STRING` (required; `UseDevelopmentStorage=true` for a local Azurite), the
//! storage backend from `BLOB_MUTEX_BACKEND` (`official`, the default, or
//! `sdk-v021`). Ctrl-C or SIGTERM stops the leader task, then releases the
//! lease, then exits.
//!
//! Standard output has one line per transition, for scripts:
//! `LEADING epoch=<n> id=<id>` from the task when it starts;
//! `STOPPED epoch=<n> id=<id> reason=<word> tasks=<word>` from the mutex's
//! term report, sent whatever ended the term (even a task that was aborted);
//! `EXITED id=<id>` last. The work itself is logged on standard error.

use std::time::Duration;

use anyhow::Context;
use blob_mutex::{
    azure::Backend, BlobDistributedMutex, BlobSettings, CancellationToken, LeaderContext,
    MutexOptions,
};
use tokio::sync::broadcast::error::RecvError;

/// The leader task: a unit of work every second, each written with the epoch.
async fn lead(ctx: LeaderContext) -> anyhow::Result<()> {
    println!("LEADING epoch={} id={}", ctx.epoch(), ctx.holder());
    let mut unit = 0u64;
    loop {
        tokio::select! {
            // A process that wakes up from a freeze finds both branches
            // ready: `biased` makes the stop win, and `is_current` says
            // whether the term may still act before each unit of work.
            biased;
            _ = ctx.cancelled() => return Ok(()),
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if !ctx.is_current() {
                    return Ok(());
                }
                unit += 1;
                // Send the epoch with every write, and have the store refuse an
                // epoch lower than the highest it has seen: examples/fenced_store.rs.
                tracing::info!(epoch = ctx.epoch(), unit, "wrote a unit of work");
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,blob_mutex=info,worker=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let (Some(container), Some(blob), Some(id), None) =
        (args.next(), args.next(), args.next(), args.next())
    else {
        anyhow::bail!("usage: worker <container> <blob> <instance-id>");
    };
    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING").context(
        "set AZURE_STORAGE_CONNECTION_STRING to the storage account's connection string \
         (UseDevelopmentStorage=true for a local Azurite)",
    )?;
    let settings = BlobSettings::from_connection_string(&connection, container, blob)
        .context("invalid storage settings")?
        .with_backend(Backend::from_env()?);
    let options = MutexOptions::default().with_holder(id.clone());
    run(
        BlobDistributedMutex::with_options(settings, options, lead)?,
        id,
    )
    .await
}

/// Campaigns until Ctrl-C or SIGTERM, printing every term's end.
async fn run(mutex: BlobDistributedMutex, id: String) -> anyhow::Result<()> {
    // The end of every term, reported by the mutex, not by the task.
    let mut reports = mutex.term_reports();
    let printer = tokio::spawn(async move {
        loop {
            match reports.recv().await {
                Ok(r) => println!(
                    "STOPPED epoch={} id={id} reason={} tasks={}",
                    r.epoch, r.reason, r.tasks
                ),
                Err(RecvError::Lagged(missed)) => tracing::error!(missed, "missed term reports"),
                Err(RecvError::Closed) => return id,
            }
        }
    });

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
    let result = mutex.run_task_when_mutex_acquired(token).await;
    // Dropping the mutex closes the reports: the printer prints what is left
    // and ends, so every STOPPED line comes before EXITED.
    drop(mutex);
    let id = printer.await?;
    result.context("the election stopped with an error")?;
    println!("EXITED id={id}");
    Ok(())
}
