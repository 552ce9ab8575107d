//! Fencing: the leader passes its epoch to a downstream store, and the store
//! refuses a write whose epoch is older than one it has already seen.
//!
//! ```text
//! cargo run --example fenced_store
//! ```
//!
//! A lease alone cannot stop a leader that was paused (a GC pause, a frozen
//! VM, a slow network) from acting after its term is over. Here two
//! instances, `a` and `b`, campaign in one process for the blob
//! `examples/fenced-store` and write to one in-process toy store. `a` leads
//! first and writes with its epoch; one of its writes is held up past the end
//! of its term. `a` stops and releases the lease, `b` leads with a higher
//! epoch and writes, then `a`'s late write arrives and the store refuses it.
//! The connection string comes from `AZURE_STORAGE_CONNECTION_STRING`
//! (required; `UseDevelopmentStorage=true` for a local Azurite), the storage backend from
//! `BLOB_MUTEX_BACKEND` (`official`, the default, or `sdk-v021`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use blob_mutex::{
    azure::Backend, term::Leadership, BlobDistributedMutex, BlobSettings, CancellationToken,
    LeaderContext, MutexOptions,
};
use tokio::sync::watch;

/// A downstream store that remembers the highest epoch it has seen.
#[derive(Default)]
struct FencedStore {
    /// The highest epoch seen and the value written.
    state: Mutex<(u64, String)>,
}

impl FencedStore {
    /// Writes `value` unless `epoch` is lower than the highest seen. The
    /// check and the write happen under one lock: a real store does the same
    /// in one transaction, or with a conditional write.
    fn write(&self, epoch: u64, value: &str) -> anyhow::Result<()> {
        let mut state = self.state.lock().expect("store lock");
        let result = if epoch < state.0 {
            Err(anyhow::anyhow!(
                "refused epoch {epoch} (it has seen {})",
                state.0
            ))
        } else {
            *state = (epoch, value.to_owned());
            Ok(())
        };
        drop(state);
        match &result {
            Ok(()) => println!("  store: accepted epoch {epoch}: {value:?}"),
            Err(e) => println!("  store: {e}: {value:?}"),
        }
        result
    }

    fn highest(&self) -> u64 {
        self.state.lock().expect("store lock").0
    }
}

/// The leader task: writes every 300 ms, each write with the term's epoch.
async fn lead(ctx: LeaderContext, store: Arc<FencedStore>) -> anyhow::Result<()> {
    let (epoch, me) = (ctx.epoch(), ctx.holder().to_owned());
    println!("{me} leads with epoch {epoch}");
    if me == "a" {
        // A write held up past the end of the term, as a paused process or a
        // slow network can hold one for any time: here until a newer leader
        // has written, so that every run shows the outcome. (It is spawned
        // with tokio::spawn, not ctx.spawn, precisely so that it outlives the
        // term; only the epoch check stops it.)
        let store = store.clone();
        tokio::spawn(async move {
            while store.highest() <= epoch {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = store.write(epoch, "a: late write");
        });
    }
    for n in 1.. {
        // Never start a write once the term may be over (after a freeze, say).
        if !ctx.is_current() {
            break;
        }
        // A refused write means a newer leader exists: stop at once.
        store.write(epoch, &format!("{me}: write {n}"))?;
        tokio::select! {
            biased;
            _ = ctx.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
    Ok(())
}

/// Whether `role` comes to say "leader" (false: the campaign stopped first).
async fn comes_to_lead(role: &mut watch::Receiver<Leadership>) -> bool {
    role.wait_for(|l| l.epoch().is_some() || *l == Leadership::Stopped)
        .await
        .is_ok_and(|l| l.epoch().is_some())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .init();
    let (container, blob) = ("examples", "fenced-store");
    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING").context(
        "set AZURE_STORAGE_CONNECTION_STRING to the storage account's connection string \
         (UseDevelopmentStorage=true for a local Azurite)",
    )?;
    let settings = BlobSettings::from_connection_string(&connection, container, blob)
        .context("invalid storage settings")?
        .with_backend(Backend::from_env()?);
    let store = Arc::new(FencedStore::default());
    let instance = |id: &str| {
        let store = store.clone();
        let options = MutexOptions::default()
            .with_holder(id.to_owned())
            .with_acquire_retry(Duration::from_millis(250))
            // Give up with the storage error rather than retry forever.
            .with_acquire_timeout(Duration::from_secs(30));
        BlobDistributedMutex::with_options(settings.clone(), options, move |ctx| {
            lead(ctx, store.clone())
        })
    };
    let (a, b) = (instance("a")?, instance("b")?);
    let (mut a_role, mut b_role) = (a.watch(), b.watch());
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let stop = stop_a.clone();
    let a_campaign = tokio::spawn(async move { a.run_task_when_mutex_acquired(stop).await });

    // First term: `a` leads; `b` campaigns and waits.
    if !comes_to_lead(&mut a_role).await {
        a_campaign.await??; // the campaign's error, if it had one
        bail!("a stopped before it led");
    }
    let stop = stop_b.clone();
    let b_campaign = tokio::spawn(async move { b.run_task_when_mutex_acquired(stop).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_a.cancel();
    a_campaign.await??;
    println!("a stopped its task and released the lease");

    // Second term: `b` leads with a higher epoch; `a`'s late write arrives.
    if !comes_to_lead(&mut b_role).await {
        b_campaign.await??;
        bail!("b stopped before it led");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_b.cancel();
    b_campaign.await??;
    println!(
        "b stopped; the store holds {:?}",
        store.state.lock().expect("store lock").1
    );
    Ok(())
}
