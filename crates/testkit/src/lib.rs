//! Shared test support: Azurite (`azurite`), the fault proxy (`proxy`) and
//! Azure's lease rule it can apply where Azurite is lenient (`azure_rule`),
//! worker processes and their history (`workers`), a client for `run
//! --metrics-addr`'s endpoint (`http`), lease-set workers'
//! history by partition (`partitions`), a client that is not this crate
//! (`foreign`), the process half of the fault matrix (`matrix_process`),
//! the chaos runner's history (`history`), its checker (`checker`), its
//! nemesis (`nemesis`) and fenced register (`register`), its quorum group
//! as a trace the model replays (`trace`), a lease set's owners
//! listed by every instance (`owners`), and polling helpers.
//!
//! A member of the workspace, never published: compiled once for every test
//! binary of the library and of the command (`blob-mutex-cli`), which name
//! it `support`.

// A kit for this workspace's tests, never published: the modules say what
// they hold, and items carry docs where a name does not say enough. Its
// helpers fail a test by panicking, and their results are always used; the
// lints for a published API's docs and signatures do not apply.
#![allow(
    missing_docs,
    clippy::missing_panics_doc,
    clippy::must_use_candidate,
    clippy::return_self_not_must_use,
    clippy::implicit_hasher,
    clippy::new_without_default,
    clippy::should_implement_trait
)]

pub mod azure_rule;
pub mod azurite;
pub mod backend;
pub mod chaos;
pub mod chaos_rig;
pub mod checker;
pub mod foreign;
pub mod history;
pub mod http;
pub mod matrix_process;
pub mod nemesis;
pub mod owners;
pub mod partitions;
pub mod ports;
pub mod proxy;
#[cfg(feature = "official")]
pub mod raw;
pub mod register;
pub mod sas;
pub mod tls;
pub mod trace;
pub mod workers;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Polls `condition` every 20 ms until it returns `Some`, or panics after `limit`
/// with `what` in the message.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut condition: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends the crate's logs to the test output (captured unless the test fails).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "blob_mutex=debug".into()),
        )
        .with_test_writer()
        .try_init();
}
