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
//! STOPPED epoch=<n> id=<id> reason=<word> tasks=<returned|aborted|stuck>
//! EXITED id=<id>
//! ```
//!
//! `LEADING` comes from the leader task when it starts. `STOPPED` comes from
//! the mutex's term report (`BlobDistributedMutex::term_reports`), not from
//! the task: the report is sent whatever ended the term, so a task that was
//! aborted, or a process that woke up after its deadline, still gets its
//! line, and it comes only once every task of the term has stopped
//! (`tasks=stuck` says one could not be stopped). The reason is one of
//! `shutdown`, `lost`, `deadline`, `stalled`, `finished`, `failed` or
//! `panicked`. Write your own workers the same way: announce the end of a
//! term from the report, never from inside the task.
//!
//! Options (for experiments and the project's fault tests):
//! `--lease-secs N`, `--renew-ms N`, `--acquire-retry-ms N`, `--grace-ms N`,
//! `--request-timeout-ms N`, `--work-ms N` (time between work ticks),
//! `--heartbeat-ms N` (enable the watchdog), `--stall-after-ms N` (stop beating
//! and doing work after N ms of leading), `--sub-tasks N` (the work runs in N
//! sub-tasks spawned through the context, each printing `WORK` lines),
//! `--ignore-cancel` (the task never
//! returns after cancellation; the mutex aborts it after its grace),
//! `--block-on-cancel` (after cancellation the task blocks its thread with
//! `std::thread::sleep`, so it cannot even be aborted; with `--fail-stop` the
//! process exits), `--fail-stop`.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use blob_mutex::{
    BlobDistributedMutex, BlobSettings, CancellationToken, LeaderContext, MutexOptions, TermReport,
};
use tokio::sync::broadcast;

#[derive(Clone, Copy, Default)]
struct Behaviour {
    work: Duration,
    stall_after: Option<Duration>,
    ignore_cancel: bool,
    block_on_cancel: bool,
    sub_tasks: u32,
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
    for sub in 1..=behaviour.sub_tasks {
        // Sub-tasks spawned through the context belong to the term: the
        // lease is released only once they have stopped.
        ctx.spawn(work(ctx.clone(), behaviour, sub));
    }
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
    tracing::debug!(epoch, %reason, "leader task returns");
    Ok(())
}

/// A sub-task: prints a `WORK` line at every tick until cancelled (or,
/// with `--ignore-cancel`, until aborted).
async fn work(ctx: LeaderContext, behaviour: Behaviour, sub: u32) -> anyhow::Result<()> {
    let (epoch, id) = (ctx.epoch(), ctx.holder().to_owned());
    loop {
        tokio::select! {
            _ = ctx.cancelled(), if !behaviour.ignore_cancel => return Ok(()),
            () = tokio::time::sleep(behaviour.work) => {
                say(&format!("WORK epoch={epoch} id={id} sub={sub}"));
            }
        }
    }
}

/// Prints a `STOPPED` line for every term report until the mutex is dropped.
async fn print_reports(mut reports: broadcast::Receiver<TermReport>, id: String) {
    loop {
        match reports.recv().await {
            Ok(r) => say(&format!(
                "STOPPED epoch={} id={id} reason={} tasks={}",
                r.epoch, r.reason, r.tasks
            )),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::error!(missed, "term reports were missed");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
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
            "--sub-tasks" => {
                behaviour.sub_tasks =
                    u32::try_from(number()?).context("--sub-tasks is too large")?;
            }
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

    let reporter = tokio::spawn(print_reports(
        mutex.term_reports(),
        mutex.holder().to_owned(),
    ));

    let token = CancellationToken::new();
    let on_signal = token.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        on_signal.cancel();
    });
    let result = mutex.run_task_when_mutex_acquired(token).await;
    let id = mutex.holder().to_owned();
    // Dropping the mutex closes the reports: the reporter prints what is
    // left, then ends, so every STOPPED line comes before EXITED.
    drop(mutex);
    reporter.await?;
    result?;
    say(&format!("EXITED id={id}"));
    Ok(())
}
