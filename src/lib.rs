// The README links to the guide with reference links (`[text][guide-cli]`)
// whose definitions at its end point at the chapters' Markdown files, so that
// they work on GitHub. In a Markdown document the first definition of a label
// wins: the definitions below come first and send the same labels, on docs.rs,
// to the guide's modules as intra-doc links, which rustdoc checks (a link to a
// missing chapter fails `cargo doc` with `-D warnings`). Plain docs.rs URLs
// would read everywhere but point at the last release and go unchecked;
// intra-doc links alone would be broken on GitHub. `guide::tests` checks that
// both sets name the same targets.
#![doc = "[guide]: crate::guide"]
#![doc = "[guide-election]: crate::guide::election"]
#![doc = "[guide-cancel]: crate::guide::election#cancel-drop-and-sub-tasks"]
#![doc = "[guide-guarantees]: crate::guide::guarantees"]
#![doc = "[guide-partitions]: crate::guide::partitions"]
#![doc = "[guide-handover]: crate::guide::handover"]
#![doc = "[guide-quorum]: crate::guide::quorum"]
#![doc = "[guide-model]: crate::guide::model"]
#![doc = "[guide-state]: crate::guide::state"]
#![doc = "[guide-testing]: crate::guide::testing"]
#![doc = "[guide-operations]: crate::guide::operations"]
#![doc = "[guide-metrics]: crate::guide::operations#metrics"]
#![doc = "[guide-cli]: crate::guide::cli"]
#![doc = "[guide-options]: crate::guide::options"]
#![doc = "[guide-features]: crate::guide::options#features"]
#![doc = "[guide-examples]: crate::guide::election#examples"]
#![doc = "[guide-layout]: crate::guide::testing#contributing-the-source-layout"]
#![doc = "[guide-backends]: crate::guide::backends"]
#![doc = "[guide-leader]: crate::guide::election#who-leads-and-where"]
#![doc = "[guide-shapes]: crate::guide::shapes"]
#![doc = concat!("[benchmarks]: https://docs.rs/crate/blob-mutex/", env!("CARGO_PKG_VERSION"), "/source/BENCHMARKS.md")]
#![doc = concat!("[security]: https://docs.rs/crate/blob-mutex/", env!("CARGO_PKG_VERSION"), "/source/SECURITY.md")]
#![doc = include_str!("../README.md")]
//!
//! # Where things are
//!
//! The crate root holds what a user starts from: the shapes
//! ([`BlobDistributedMutex`] and its [`MutexGuard`], locks by name from
//! [`BlobLocks`], run once with [`OnceOptions`], the [`BlobLeaseSet`]),
//! their settings and options, and the [`Error`]. The rest lives in modules named for what they hold:
//! - [`term`]: who leads, a term's heartbeat, and how a term ended;
//! - [`health`]: liveness and readiness for an orchestrator's probes;
//! - [`partitions`]: what a lease set reports and how it balances;
//! - [`store`]: the seam under every shape, to run on another storage, with
//!   its conformance suite;
//! - [`azure`]: Azure's stores, backends, credentials and blob metadata;
//! - [`quorum`]: stores over several storage accounts;
//! - `testing` (feature `testing`): stores in memory for tests;
//! - [`error`]: the error's parts; [`guide`]: the guide, chapter by chapter.
// docs.rs builds with `--cfg docsrs` (see `[package.metadata.docs.rs]`) and marks
// the items that need an optional feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod azure;
mod backoff;
mod bounded;
#[cfg(test)]
mod captured_logs;
mod ending;
mod engine;
pub mod error;
#[cfg(feature = "schedule")]
mod fleet;
pub mod guide;
pub mod health;
mod lease_set;
mod limits;
mod locks;
mod mutex;
mod options;
pub mod partitions;
pub mod quorum;
#[cfg(feature = "schedule")]
#[cfg_attr(docsrs, doc(cfg(feature = "schedule")))]
pub mod schedule;
pub mod store;
pub mod term;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

// The root holds what a user starts from: the shapes (the mutex and its
// guard, locks by name, run once, the lease set), their settings and options, and the
// error. Everything else lives in the public modules above, named for what
// they hold; each item has one path.
pub use azure::settings::BlobSettings;
pub use engine::leadership::LeaderContext;
pub use error::{Error, Result};
pub use lease_set::{BlobLeaseSet, LeaseSetOptions, PartitionContext};
pub use locks::BlobLocks;
pub use mutex::{
    BlobDistributedMutex, MutexGuard, OnceOptions, OnceOutcome, SkipReason, TryAcquire,
};
pub use options::MutexOptions;

/// Re-exported so that callers can name the token type without adding the crate.
pub use tokio_util::sync::CancellationToken;
