//! A worker that takes part in a lease set: many partitions shared among
//! instances, each worked on by exactly one at a time.
//!
//! ```text
//! cargo run --example partitions -- <container> <set> <instance-id> <partitions>
//! ```
//!
//! Start it several times on one set with different ids: the partitions
//! (`p00` … up to the count given) spread evenly over the instances, and move
//! when one joins, leaves or crashes. The connection string comes from
//! `AZURE_STORAGE_CONNECTION_STRING` (required; `UseDevelopmentStorage=true` for a local Azurite), the
//! storage backend from `BLOB_MUTEX_BACKEND` (`official`, the default, or
//! `sdk-v021`). Ctrl-C or SIGTERM stops every partition's task, releases its
//! lease, then exits.
//!
//! Standard output has one line per change, for scripts:
//! `OWNING partition=<p> epoch=<n> id=<id>` from the partition's task when
//! it starts; `RELEASED partition=<p> epoch=<n> id=<id> reason=<word>` from
//! the set's partition report, sent once the task has stopped, whatever
//! ended the term; `EXITED id=<id>` last.

use std::time::Duration;

use anyhow::Context;
use blob_mutex::{
    azure::Backend, BlobLeaseSet, BlobSettings, CancellationToken, LeaseSetOptions,
    PartitionContext,
};
use tokio::sync::broadcast::error::RecvError;

/// One partition's task: a unit of work every second, written with the epoch.
async fn work(ctx: PartitionContext) -> anyhow::Result<()> {
    let (partition, epoch) = (ctx.partition().to_owned(), ctx.epoch());
    println!(
        "OWNING partition={partition} epoch={epoch} id={}",
        ctx.holder()
    );
    loop {
        tokio::select! {
            // The stop wins over the timer after a freeze, and no unit of
            // work starts once the term may be over.
            biased;
            _ = ctx.cancelled() => return Ok(()),
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if !ctx.is_current() {
                    return Ok(());
                }
                tracing::info!(%partition, epoch, "wrote a unit of work");
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,blob_mutex=info,partitions=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let usage = "usage: partitions <container> <set> <instance-id> <partitions>";
    let (Some(container), Some(set), Some(id), Some(count), None) = (
        args.next(),
        args.next(),
        args.next(),
        args.next(),
        args.next(),
    ) else {
        anyhow::bail!(usage);
    };
    let count: usize = count.parse().context(usage)?;
    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING").context(
        "set AZURE_STORAGE_CONNECTION_STRING to the storage account's connection string \
         (UseDevelopmentStorage=true for a local Azurite)",
    )?;
    let settings = BlobSettings::from_connection_string(&connection, container, set)
        .context("invalid storage settings")?
        .with_backend(Backend::from_env()?);
    let partitions = (0..count).map(|i| format!("p{i:02}"));
    // The set's defaults (a 30 s lease), with this instance's name.
    let options = LeaseSetOptions::default();
    let mutex = options.mutex().clone().with_holder(id.clone());
    let options = options.with_mutex(mutex);
    run(BlobLeaseSet::new(&settings, partitions, options, work)?, id).await
}

/// Runs the set until Ctrl-C or SIGTERM, printing every partition term's end.
async fn run(lease_set: BlobLeaseSet, id: String) -> anyhow::Result<()> {
    // The end of every partition's term, reported by the set, not by the task.
    let mut reports = lease_set.partition_reports();
    let printer = tokio::spawn(async move {
        loop {
            match reports.recv().await {
                Ok(r) => println!(
                    "RELEASED partition={} epoch={} id={id} reason={}",
                    r.partition, r.report.epoch, r.report.reason
                ),
                Err(RecvError::Lagged(missed)) => {
                    tracing::error!(missed, "missed partition reports");
                }
                Err(RecvError::Closed) => return id,
            }
        }
    });

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
    let result = lease_set.run(token).await;
    drop(lease_set);
    let id = printer.await?;
    result.context("the lease set stopped with an error")?;
    println!("EXITED id={id}");
    Ok(())
}
