//! The README's guard program, copied as written into an example
//! (`examples/readme_guard.rs`) and run on Azurite: it leads, takes its ten
//! steps and releases; with the lease held elsewhere it says the lease is
//! busy and fails.

use blob_mutex::store::LeaseStore;

use std::process::Output;
use std::time::Duration;

use blob_mutex::{azure::BlobLeaseManager, store::Acquire, store::LeaseId, BlobSettings};
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::workers::example_bin;

const HEADER: &str =
    "//! The README's guard program, as written there (`tests/it/examples/readme_guard.rs`
//! checks that the two stay the same, and runs this one on Azurite).
";

#[test]
fn the_example_is_the_readmes_program_as_written() {
    let readme = include_str!("../../../README.md");
    let example = include_str!("../../../examples/readme_guard.rs");
    let program = example
        .strip_prefix(HEADER)
        .expect("the example starts with its header");
    let at = readme
        .find("held as a guard, for a critical section")
        .expect("the README's guard section");
    let start = readme[at..].find("```rust,no_run\n").unwrap() + at + "```rust,no_run\n".len();
    let end = readme[start..].find("```\n").unwrap() + start;
    assert_eq!(
        program,
        &readme[start..end],
        "the README's guard program changed: copy it again"
    );
}

async fn run(connection_string: &str) -> Output {
    tokio::process::Command::new(example_bin("readme_guard"))
        .env("AZURE_STORAGE_CONNECTION_STRING", connection_string)
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("run the README's program")
}

#[tokio::test]
async fn the_readmes_guard_program_leads_and_releases_or_says_the_lease_is_busy() {
    // The program's own container and blob, on an Azurite of this test's.
    let storage = azurite::Azurite::start();
    let out = run(&storage.connection_string()).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.starts_with("released: term "), "{stdout}");

    // The lock reindex of the program's locks under locks/.
    let settings = BlobSettings::from_connection_string(
        &storage.connection_string(),
        "leases",
        "locks/reindex",
    )
    .unwrap();
    let holder = BlobLeaseManager::new(&settings).unwrap();
    let id = LeaseId::new();
    let held = holder.acquire(id, Duration::from_secs(15)).await.unwrap();
    assert_eq!(held, Acquire::Acquired);
    let out = run(&storage.connection_string()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains("busy"), "{stderr}");
    holder.release(id).await.unwrap();
}
