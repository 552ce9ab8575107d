//! The worker the fault tests and the benchmark start: the example worker
//! (`examples/worker.rs`) with knobs that make it misbehave on purpose.
//! It is built as the example `fault-worker` (see `Cargo.toml`), beside the
//! tests rather than among the examples to copy.
//!
//! ```text
//! cargo run --example fault-worker -- <container> <blob> <instance-id> [options]
//! ```
//!
//! The connection string comes from `AZURE_STORAGE_CONNECTION_STRING`
//! (Azurite's defaults when unset). With `BLOB_MUTEX_QUORUM_CONNECTION_STRINGS`
//! set (one connection string per line), the worker leads on a quorum of
//! those accounts instead (`QuorumLeaseStore`). `BLOB_MUTEX_BACKEND` picks
//! the storage backend of every account (`official`, the default, or
//! `sdk-v021`). Ctrl-C or SIGTERM stops the leader task and releases the
//! lease before the process exits.
//!
//! Every transition is one line on standard output, flushed at once, and
//! `crates/testkit/src/workers.rs` records them:
//!
//! ```text
//! LEADING epoch=<n> id=<id>
//! WORK epoch=<n> id=<id> sub=<k>
//! WORK partition=<p> epoch=<n> id=<id> sub=0
//! STOPPED epoch=<n> id=<id> reason=<word> tasks=<returned|aborted|stuck>
//! EXITED id=<id>
//! LEADER holder=<name|-> epoch=<n> advertised=<value|->
//! STATE-READ epoch=<n> last=<state, spaces as _, - when empty>
//! STATE-WRITTEN epoch=<n> tick=<k> took_ms=<ms>
//! STATE-REFUSED epoch=<n> tick=<k> took_ms=<ms>
//! FENCED lease=<key> epoch=<n> accepted=<yes|no> took_ms=<ms>
//! ```
//!
//! `took_ms` is how long the write's request took, from before it was sent
//! to its answer (a pause of the process included): the line's reader
//! learns when the write was sent, the earliest it can have landed.
//!
//! `LEADING` comes from the leader task when it starts; `WORK` for every
//! unit of work: the leader task's (and a partition task's) own at every
//! tick (`sub=0`), and each sub-task's (`--sub-tasks`, `sub=1`…). No unit of
//! work starts once the term's local deadline has passed: each tick checks
//! `LeaderContext::is_current`, and cancellation wins a tie (`biased;`).
//! `STOPPED` comes from the mutex's term report
//! (`BlobDistributedMutex::term_reports`), not from the task: the report is
//! sent whatever ended the term, so a task that was aborted, or a process
//! that woke up after its deadline, still gets its line, and it comes only
//! once every task of the term has stopped (`tasks=stuck` says one could not
//! be stopped). The reason is one of `shutdown`, `lost`, `deadline`,
//! `stalled`, `finished`, `failed`, `panicked`, `handover` or `dropped`.
//! `EXITED` is the last line, after every `STOPPED`.
//!
//! Options:
//! `--lease-secs N`, `--renew-ms N`, `--acquire-retry-ms N`, `--grace-ms N`,
//! `--request-timeout-ms N`, `--work-ms N` (time between work ticks),
//! `--heartbeat-ms N` (enable the watchdog), `--stall-after-ms N` (stop beating
//! and doing work after N ms of leading), `--sub-tasks N` (the work runs in N
//! sub-tasks spawned through the context, each printing `WORK` lines),
//! `--ignore-cancel` (the task never
//! returns after cancellation; the mutex aborts it after its grace),
//! `--write-state-ms N` (a sub-task writes the leader state
//! `epoch=<n> tick=<k>` every N ms through the context, and prints
//! `STATE-WRITTEN` when it landed, `STATE-REFUSED` when storage refused it;
//! it goes on writing until cancelled),
//! `--priority N` (take part in planned handovers with this priority; any
//! integer), `--advertise V` (advertise `V` with each term's stamp),
//! `--watch-leader` (print a `LEADER` line whenever the mutex's `leader()`
//! watch changes, holding a receiver for the whole run, so that the
//! follower polls; `holder=-` when it names nobody), `--block-on-cancel` (after cancellation the task blocks its thread with
//! `std::thread::sleep`, so it cannot even be aborted; with `--fail-stop` the
//! process exits), `--fail-stop`, `--partitions N` (take part in a lease set
//! of partitions `p00`… instead, printing
//! `OWNING partition=<p> epoch=<n> id=<id>` and
//! `RELEASED partition=<p> epoch=<n> id=<id> reason=<word> tasks=<word>`; the
//! blob argument names the set; the set's defaults apply, a 30 s lease,
//! unless the flags above change them; with
//! `BLOB_MUTEX_QUORUM_CONNECTION_STRINGS` the set runs on that quorum),
//! `--balance-ms N` (the set's balance interval), `--block-partition P`
//! (with `--block-on-cancel` in a set, only partition `P`'s task blocks; the
//! others stop as asked), `--guard` (hold the lease through the guard API
//! instead of the task form: `acquire`, the same work as the leader task's
//! on the guard's context until the guard's cancellation fires or a signal
//! comes, `release`, and again after an acquire retry; a guard cannot stop
//! the caller's code, so with `--block-on-cancel` the code that blocks is a
//! sub-task spawned through the guard's context, which the release stops
//! or, when it cannot, fail-stops).
//!
//! With `BLOB_MUTEX_FENCE_ADDR=<host:port>` set, every unit of work of the
//! leader task and of a partition task (`sub=0`) is also sent as a write to
//! a fenced register there (`crates/testkit/src/register.rs`), which refuses an
//! epoch lower than the highest it accepted for the same key; the key is
//! `<blob>/<partition>`, or `<blob>/mutex` for the mutex. The answer is
//! printed as a `FENCED` line.
//!
//! When the campaign ends with `Error::TaskNotStopped` (a task blocks its
//! thread and fail-stop is off), the worker prints the error and exits with
//! code 1 at once: a runtime with a blocked thread cannot shut down.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use blob_mutex::{
    azure::Backend, azure::BlobLeaseSetStore, quorum::QuorumLeaseSetStore,
    quorum::QuorumLeaseStore, store::LeaseSetStore, store::LeaseStore, term::TermReport,
    BlobDistributedMutex, BlobLeaseSet, BlobSettings, CancellationToken, LeaderContext,
    LeaseSetOptions, MutexOptions, PartitionContext,
};
use tokio::sync::broadcast;

#[derive(Clone, Copy, Default)]
struct Behaviour {
    work: Duration,
    stall_after: Option<Duration>,
    ignore_cancel: bool,
    block_on_cancel: bool,
    sub_tasks: u32,
    /// Take part in a lease set of this many partitions instead of leading.
    partitions: Option<usize>,
    balance: Option<Duration>,
    /// With `block_on_cancel` in a set: only this partition's task blocks.
    block_partition: Option<&'static str>,
    write_state: Option<Duration>,
    /// Print every change of the mutex's leader watch.
    watch_leader: bool,
    /// How the lease is held: the task form, or the guard API.
    hold: Hold,
}

/// How a worker holds its lease (`--guard`).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Hold {
    /// The task form: `run_task_when_mutex_acquired`.
    #[default]
    Task,
    /// `acquire`, work until the guard's cancellation fires, `release`.
    Guard,
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
    if let Some(every) = behaviour.write_state {
        ctx.spawn(write_state(ctx.clone(), every));
    }
    let started = tokio::time::Instant::now();
    let mut tick = 0u64;
    let reason = loop {
        let stalled = behaviour
            .stall_after
            .is_some_and(|after| started.elapsed() >= after);
        tokio::select! {
            // Cancellation first when both are ready: after a wake past the
            // deadline, the timer is ready too.
            biased;
            reason = ctx.cancelled() => break reason,
            () = tokio::time::sleep(behaviour.work) => {
                if !stalled && ctx.is_current() {
                    tick += 1;
                    ctx.heartbeat().beat();
                    say(&format!("WORK epoch={epoch} id={id} sub=0"));
                    tracing::info!(epoch, tick, "working");
                    fence("mutex", epoch).await;
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
            biased;
            _ = ctx.cancelled(), if !behaviour.ignore_cancel => return Ok(()),
            () = tokio::time::sleep(behaviour.work) => {
                // A task that ignores cancellation ignores the deadline too.
                if behaviour.ignore_cancel || ctx.is_current() {
                    say(&format!("WORK epoch={epoch} id={id} sub={sub}"));
                }
            }
        }
    }
}

/// Writes `epoch=<n> tick=<k>` as the leader state every `every`, printing
/// what storage said, until cancelled.
async fn write_state(ctx: LeaderContext, every: Duration) -> anyhow::Result<()> {
    let epoch = ctx.epoch();
    match ctx.read_state().await {
        Ok(last) if last.is_empty() => say(&format!("STATE-READ epoch={epoch} last=-")),
        Ok(last) => say(&format!(
            "STATE-READ epoch={epoch} last={}",
            String::from_utf8_lossy(&last).replace(' ', "_")
        )),
        Err(e) => tracing::warn!(epoch, error = %e, "state read failed"),
    }
    let mut tick = 0u64;
    loop {
        tokio::select! {
            _ = ctx.cancelled() => return Ok(()),
            () = tokio::time::sleep(every) => {}
        }
        tick += 1;
        let sent = std::time::Instant::now();
        let written = ctx.write_state(format!("epoch={epoch} tick={tick}")).await;
        let took = sent.elapsed().as_millis();
        match written {
            Ok(()) => say(&format!(
                "STATE-WRITTEN epoch={epoch} tick={tick} took_ms={took}"
            )),
            Err(blob_mutex::Error::StateWriteRefused(_)) => {
                say(&format!(
                    "STATE-REFUSED epoch={epoch} tick={tick} took_ms={took}"
                ));
            }
            Err(e) => tracing::warn!(epoch, tick, error = %e, "state write failed"),
        }
    }
}

/// Where the fenced register is, and the blob that names the keys.
static FENCE: std::sync::OnceLock<Option<(String, String)>> = std::sync::OnceLock::new();

/// Sends a unit of work of `lease` in the term of `epoch` to the fenced
/// register, when there is one, and prints its answer. A register that
/// cannot be reached is logged, not printed: the write did not happen.
async fn fence(lease: &str, epoch: u64) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let Some(Some((addr, blob))) = FENCE.get() else {
        return;
    };
    let key = format!("{blob}/{lease}");
    let sent = std::time::Instant::now();
    let answer = async {
        let mut stream = tokio::net::TcpStream::connect(addr.as_str()).await?;
        stream
            .write_all(format!("{key} {epoch}\n").as_bytes())
            .await?;
        let mut line = String::new();
        tokio::io::BufReader::new(stream)
            .read_line(&mut line)
            .await?;
        Ok::<_, std::io::Error>(line)
    };
    let answer = answer.await;
    let took = sent.elapsed().as_millis();
    match answer.as_deref().map(str::trim) {
        Ok("OK") => say(&format!(
            "FENCED lease={key} epoch={epoch} accepted=yes took_ms={took}"
        )),
        Ok("REFUSED") => say(&format!(
            "FENCED lease={key} epoch={epoch} accepted=no took_ms={took}"
        )),
        Ok(other) => tracing::warn!(answer = other, "the fenced register answered oddly"),
        Err(e) => tracing::warn!(error = %e, "the fenced register could not be reached"),
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

/// Prints a `LEADER` line for the watch's value now and at every change.
async fn print_leader(mut leader: tokio::sync::watch::Receiver<Option<blob_mutex::term::Leader>>) {
    loop {
        let line = match &*leader.borrow_and_update() {
            Some(l) => format!(
                "LEADER holder={} epoch={} advertised={}",
                l.holder,
                l.epoch,
                l.advertised.as_deref().unwrap_or("-")
            ),
            None => "LEADER holder=- epoch=0 advertised=-".to_owned(),
        };
        say(&line);
        if leader.changed().await.is_err() {
            return;
        }
    }
}

fn parse_args() -> anyhow::Result<(String, String, MutexOptions, Behaviour)> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: fault-worker <container> <blob> <instance-id> [options]";
    let container = args.next().context(usage)?;
    let blob = args.next().context(usage)?;
    let id = args.next().context(usage)?;
    // A lease set starts from the set's defaults (a longer lease).
    let base = if std::env::args().any(|a| a == "--partitions") {
        LeaseSetOptions::default().mutex().clone()
    } else {
        MutexOptions::default()
    };
    let mut options = base.with_holder(id);
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
            "--partitions" => {
                behaviour.partitions =
                    Some(usize::try_from(number()?).context("--partitions is too large")?);
            }
            "--balance-ms" => behaviour.balance = Some(Duration::from_millis(number()?)),
            "--block-partition" => {
                let partition = args.next().context("--block-partition needs a value")?;
                // Parsed once per process: leaking it gives the copyable
                // behaviour a name for every task.
                behaviour.block_partition = Some(Box::leak(partition.into_boxed_str()));
            }
            "--write-state-ms" => {
                behaviour.write_state = Some(Duration::from_millis(number()?));
            }
            "--fail-stop" => options = options.with_fail_stop(true),
            "--priority" => {
                let value = args.next().context("--priority needs a value")?;
                let priority = value
                    .parse()
                    .with_context(|| format!("--priority needs a whole number, got {value:?}"))?;
                options = options.with_priority(priority);
            }
            "--advertise" => {
                let value = args.next().context("--advertise needs a value")?;
                options = options.with_advertised(value);
            }
            "--watch-leader" => behaviour.watch_leader = true,
            "--guard" => behaviour.hold = Hold::Guard,
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
    let fence_addr = std::env::var("BLOB_MUTEX_FENCE_ADDR").ok();
    let _ = FENCE.set(fence_addr.map(|addr| (addr, blob.clone())));
    let backend = Backend::from_env()?;
    if let Ok(strings) = std::env::var(QUORUM_ENV) {
        let accounts = strings
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|cs| {
                BlobSettings::from_connection_string(cs, &container, &blob)
                    .map(|settings| settings.with_backend(backend))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(count) = behaviour.partitions {
            let store = QuorumLeaseSetStore::from_settings(&accounts)?
                .with_request_timeout(options.request_timeout());
            return run_set(store, options, behaviour, count).await;
        }
        let store = QuorumLeaseStore::from_settings(&accounts)?;
        let mutex =
            BlobDistributedMutex::with_store(store, options, move |ctx| lead(ctx, behaviour))?;
        if behaviour.hold == Hold::Guard {
            return run_guard(mutex, behaviour).await;
        }
        return run_mutex(mutex, behaviour).await;
    }
    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING")
        .unwrap_or_else(|_| "UseDevelopmentStorage=true".to_owned());
    let settings =
        BlobSettings::from_connection_string(&connection, container, blob)?.with_backend(backend);
    if let Some(count) = behaviour.partitions {
        let store =
            BlobLeaseSetStore::new(&settings)?.with_request_timeout(options.request_timeout());
        return run_set(store, options, behaviour, count).await;
    }
    let mutex =
        BlobDistributedMutex::with_options(settings, options, move |ctx| lead(ctx, behaviour))?;
    if behaviour.hold == Hold::Guard {
        return run_guard(mutex, behaviour).await;
    }
    run_mutex(mutex, behaviour).await
}

/// `--guard`: holds the lease through guards until a signal, printing the
/// term reports as [`run_mutex`] does.
async fn run_guard<S: LeaseStore>(
    mutex: BlobDistributedMutex<S>,
    behaviour: Behaviour,
) -> anyhow::Result<()> {
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
    let result = hold_guards(&mutex, behaviour, &token).await;
    let id = mutex.holder().to_owned();
    drop(mutex);
    reporter.await?;
    exit_if_stuck(&result);
    result?;
    say(&format!("EXITED id={id}"));
    Ok(())
}

/// Acquire, work on the guard's context until its cancellation fires or
/// `token` is cancelled, release; again after an acquire retry, until
/// `token` is cancelled.
async fn hold_guards<S: LeaseStore>(
    mutex: &BlobDistributedMutex<S>,
    behaviour: Behaviour,
    token: &CancellationToken,
) -> Result<(), blob_mutex::Error> {
    loop {
        let guard = tokio::select! {
            guard = mutex.acquire() => guard?,
            () = token.cancelled() => return Ok(()),
        };
        let ctx = guard.context().clone();
        if behaviour.block_on_cancel {
            // The guard cannot stop the caller's code: what blocks is a
            // sub-task of the term, which the release stops (or cannot).
            let sub = ctx.clone();
            ctx.spawn(async move {
                sub.cancelled().await;
                std::thread::sleep(Duration::from_secs(3600));
                Ok::<(), blob_mutex::Error>(())
            });
        }
        let work = Behaviour {
            block_on_cancel: false,
            ..behaviour
        };
        tokio::select! {
            // The work is dropped before the release begins.
            _ = lead(ctx, work) => {}
            () = token.cancelled() => {}
        }
        guard.release().await?;
        tokio::select! {
            () = tokio::time::sleep(mutex.options().acquire_retry()) => {}
            () = token.cancelled() => return Ok(()),
        }
    }
}

/// The accounts of a quorum, one connection string per line.
const QUORUM_ENV: &str = "BLOB_MUTEX_QUORUM_CONNECTION_STRINGS";

/// Campaigns until a signal, printing the term reports.
async fn run_mutex<S: LeaseStore>(
    mutex: BlobDistributedMutex<S>,
    behaviour: Behaviour,
) -> anyhow::Result<()> {
    let reporter = tokio::spawn(print_reports(
        mutex.term_reports(),
        mutex.holder().to_owned(),
    ));
    if behaviour.watch_leader {
        tokio::spawn(print_leader(mutex.leader()));
    }

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
    exit_if_stuck(&result);
    result?;
    say(&format!("EXITED id={id}"));
    Ok(())
}

/// A partition's task: prints `OWNING`, then a `WORK` line per unit of work
/// until cancelled (or, with `--ignore-cancel`, until aborted; with
/// `--block-on-cancel`, it blocks its thread once cancelled).
async fn own(ctx: PartitionContext, behaviour: Behaviour) -> anyhow::Result<()> {
    let (partition, epoch, id) = (
        ctx.partition().to_owned(),
        ctx.epoch(),
        ctx.holder().to_owned(),
    );
    say(&format!(
        "OWNING partition={partition} epoch={epoch} id={id}"
    ));
    loop {
        tokio::select! {
            biased;
            _ = ctx.cancelled(), if !behaviour.ignore_cancel => break,
            () = tokio::time::sleep(behaviour.work) => {
                if behaviour.ignore_cancel || ctx.is_current() {
                    say(&format!("WORK partition={partition} epoch={epoch} id={id} sub=0"));
                    fence(&partition, epoch).await;
                }
            }
        }
    }
    let blocks = behaviour.block_on_cancel
        && behaviour
            .block_partition
            .is_none_or(|only| only == partition);
    if blocks {
        // Blocks its runtime thread: an abort cannot take effect.
        std::thread::sleep(Duration::from_secs(3600));
    }
    Ok(())
}

/// `--partitions N`: takes part in a lease set of partitions `p00`…, printing
/// `OWNING` from each partition's task and `RELEASED` from the set's reports.
async fn run_set<S: LeaseSetStore>(
    store: S,
    options: MutexOptions,
    behaviour: Behaviour,
    count: usize,
) -> anyhow::Result<()> {
    let mut set_options = LeaseSetOptions::default().with_mutex(options);
    if let Some(balance) = behaviour.balance {
        set_options = set_options.with_balance_interval(balance);
    }
    let partitions = (0..count).map(|i| format!("p{i:02}"));
    let set = BlobLeaseSet::with_store(store, partitions, set_options, move |ctx| {
        own(ctx, behaviour)
    })?;
    let id = set.holder().to_owned();
    let mut reports = set.partition_reports();
    let printer = tokio::spawn(async move {
        loop {
            match reports.recv().await {
                Ok(r) => say(&format!(
                    "RELEASED partition={} epoch={} id={id} reason={} tasks={}",
                    r.partition, r.report.epoch, r.report.reason, r.report.tasks
                )),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::error!(missed, "partition reports were missed");
                }
                Err(broadcast::error::RecvError::Closed) => return id,
            }
        }
    });
    let token = CancellationToken::new();
    let on_signal = token.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        on_signal.cancel();
    });
    let result = set.run(token).await;
    drop(set);
    let id = printer.await?;
    exit_if_stuck(&result);
    result?;
    say(&format!("EXITED id={id}"));
    Ok(())
}

/// Exits with code 1 at once when a task could not be stopped: it blocks a
/// runtime thread, and the runtime's shutdown would wait for it.
fn exit_if_stuck(result: &Result<(), blob_mutex::Error>) {
    if let Err(e @ blob_mutex::Error::TaskNotStopped) = result {
        eprintln!("Error: {e}");
        std::process::exit(1);
    }
}
