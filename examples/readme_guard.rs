//! The README's guard program, as written there (`tests/readme_guard.rs`
//! checks that the two stay the same, and runs this one on Azurite).
use blob_mutex::{BlobDistributedMutex, BlobSettings, LeaderContext, TryAcquire};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let connection_string = std::env::var("AZURE_STORAGE_CONNECTION_STRING")?;
    let settings = BlobSettings::from_connection_string(&connection_string, "leases", "reindex")?;
    // No task: the guard is the holding.
    let mutex = BlobDistributedMutex::new(settings, |_: LeaderContext| async { anyhow::Ok(()) })?;
    let guard = match mutex.try_acquire().await? {
        TryAcquire::Acquired(guard) => guard,
        TryAcquire::Held(leader) => anyhow::bail!("busy: {leader:?}"),
        _ => anyhow::bail!("not acquired"),
    };
    for step in 0..10 {
        anyhow::ensure!(guard.is_current(), "lease lost before step {step}");
        // One step, written with guard.epoch() as its fencing token.
    }
    let report = guard.release().await?;
    println!("released: term {} {}", report.epoch, report.reason);
    Ok(())
}
