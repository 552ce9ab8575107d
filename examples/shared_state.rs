//! A leader task that shares state with the rest of the service.
//!
//! ```text
//! cargo run --example shared_state -- <instance-id>
//! ```
//!
//! Every instance runs the service's main loop. Once a second it reads
//! whether this instance leads, and with which epoch, from the mutex's
//! `watch` channel (`BlobDistributedMutex::watch`); on the leader it sends a
//! job over a channel that only the leader task consumes. The leader task
//! does each job in a sub-task of its term (`LeaderContext::spawn`), so a job
//! still running when the term ends is stopped before the lease is released,
//! and counts the jobs done in an `Arc` that the main loop reads.
//!
//! Run it in two terminals with different ids (`a`, `b`): one says it leads
//! and queues jobs, the other that it follows. Stop the leader with Ctrl-C
//! and the other one takes over within about a second. It uses the blob
//! `examples/shared-state`; the connection string comes from
//! `AZURE_STORAGE_CONNECTION_STRING` (required; `UseDevelopmentStorage=true` for a local Azurite), the
//! storage backend from `BLOB_MUTEX_BACKEND` (`official`, the default, or
//! `sdk-v021`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use blob_mutex::{
    azure::Backend, BlobDistributedMutex, BlobSettings, CancellationToken, LeaderContext,
    MutexOptions,
};
use tokio::sync::{mpsc, Mutex};

/// The receiving end of the job channel: each term takes it for its length.
type Jobs = Arc<Mutex<mpsc::Receiver<u64>>>;

/// The leader task: takes jobs from the channel until its term ends. A job
/// still in the channel then waits for this instance's next term (a real
/// service would hand it back to a queue that every instance reads).
async fn lead(ctx: LeaderContext, jobs: Jobs, done: Arc<AtomicU64>) -> anyhow::Result<()> {
    // One term at a time runs on this instance, so the lock is free.
    let mut jobs = jobs.lock().await;
    loop {
        tokio::select! {
            biased;
            _ = ctx.cancelled() => return Ok(()),
            Some(job) = jobs.recv() => {
                // A sub-task of the term: stopped before the lease is released.
                ctx.spawn(run_job(ctx.clone(), job, done.clone()));
            }
        }
    }
}

/// One job: takes a while, then records that it was done, with the epoch.
async fn run_job(ctx: LeaderContext, job: u64, done: Arc<AtomicU64>) -> anyhow::Result<()> {
    tokio::select! {
        biased;
        _ = ctx.cancelled() => println!("job {job} stopped: the term ended"),
        () = tokio::time::sleep(Duration::from_millis(300)) => {
            // The work is recorded only while the term may still act.
            if ctx.is_current() {
                done.fetch_add(1, Ordering::Relaxed);
                println!("job {job} done under epoch {}", ctx.epoch());
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .init();
    let id = std::env::args()
        .nth(1)
        .context("usage: shared_state <instance-id>")?;
    let (container, blob) = ("examples", "shared-state");
    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING").context(
        "set AZURE_STORAGE_CONNECTION_STRING to the storage account's connection string \
         (UseDevelopmentStorage=true for a local Azurite)",
    )?;
    let settings = BlobSettings::from_connection_string(&connection, container, blob)
        .context("invalid storage settings")?
        .with_backend(Backend::from_env()?);

    // The state the leader task shares with the main loop.
    let (send_job, jobs) = mpsc::channel::<u64>(16);
    let jobs: Jobs = Arc::new(Mutex::new(jobs));
    let done = Arc::new(AtomicU64::new(0));
    let task_done = done.clone();
    let mutex = BlobDistributedMutex::with_options(
        settings,
        MutexOptions::default().with_holder(id),
        move |ctx| lead(ctx, jobs.clone(), task_done.clone()),
    )?;

    let token = CancellationToken::new();
    let on_signal = token.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });

    // The service's main loop, beside the campaign.
    let role = mutex.watch();
    let main_loop = async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut next_job = 0;
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = tick.tick() => {}
            }
            let epoch = role.borrow().epoch();
            let done = done.load(Ordering::Relaxed);
            if let Some(epoch) = epoch {
                next_job += 1;
                println!("leader (epoch {epoch}): queue job {next_job}; {done} done so far");
                if send_job.try_send(next_job).is_err() {
                    println!("job {next_job} dropped: the queue is full");
                }
            } else {
                println!("follower: another instance does the jobs; {done} done here");
            }
        }
    };
    let campaign = async {
        let result = mutex.run_task_when_mutex_acquired(token.clone()).await;
        token.cancel(); // ends the main loop too when the campaign fails
        result
    };
    let (result, ()) = tokio::join!(campaign, main_loop);
    result.context("the election stopped with an error")
}
