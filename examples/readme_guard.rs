//! The README's guard program, as written there (`tests/it/examples/readme_guard.rs`
//! checks that the two stay the same, and runs this one on Azurite).
use blob_mutex::{BlobLocks, BlobSettings, TryAcquire};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let connection_string = std::env::var("AZURE_STORAGE_CONNECTION_STRING")?;
    // Every lock is a blob under locks/ in the container leases.
    let settings = BlobSettings::from_connection_string(&connection_string, "leases", "locks")?;
    let locks = BlobLocks::new(&settings)?;
    let guard = match locks.try_acquire("reindex").await? {
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
