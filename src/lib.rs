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
// docs.rs builds with `--cfg docsrs` (see `[package.metadata.docs.rs]`) and marks
// the items that need an optional feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod azure;
mod backoff;
mod bounded;
mod engine;
mod error;
pub mod guide;
pub mod health;
mod lease_set;
mod limits;
mod locks;
mod mutex;
mod options;
mod quorum;
mod store;

#[cfg(feature = "azure_identity")]
#[cfg_attr(docsrs, doc(cfg(feature = "azure_identity")))]
pub use azure::credential_options::credential_options;
#[cfg(feature = "azure_identity")]
#[cfg_attr(docsrs, doc(cfg(feature = "azure_identity")))]
pub use azure::default_credential::default_credential;
#[cfg(feature = "official")]
#[cfg_attr(docsrs, doc(cfg(feature = "official")))]
pub use azure::official::OfficialSettings;
pub use azure::protocol::{
    ACQUIRED_AT_KEY, ADVERTISED_KEY, EPOCH_KEY, HOLDER_KEY, MEMBER_KEY, PRIORITY_KEY, PROPOSED_KEY,
};
pub use azure::settings::{BlobSettings, AZURITE_ACCOUNT, AZURITE_ENDPOINT};
pub use azure::{Backend, BlobLeaseManager, BlobLeaseSetStore};
pub use engine::ending::{StopReason, TaskStop, TermReport};
pub use engine::fail_stop::FAIL_STOP_EXIT_CODE;
pub use engine::leader::Leader;
pub use engine::leadership::{Heartbeat, LeaderContext, Leadership};
pub use error::{BoxError, Cause, Error, Result};
pub use lease_set::balance::Strategy;
pub use lease_set::{BlobLeaseSet, LeaseSetOptions, PartitionContext, PartitionReport};
pub use locks::BlobLocks;
pub use mutex::{
    BlobDistributedMutex, MutexGuard, OnceOptions, OnceOutcome, SkipReason, TryAcquire,
    DONE_KEY_MAX,
};
pub use options::{MutexOptions, STOP_SLACK};
pub use quorum::{
    AccountLease, Holding, QuorumLeaseSetStore, QuorumLeaseStore, MAX_QUORUM_ACCOUNTS,
};
pub use store::collect::Collection;
#[cfg(feature = "testing")]
pub use store::conformance;
#[cfg(feature = "testing")]
pub use store::memory::{MemoryLeaseSetStore, MemoryLeaseStore};
pub use store::{
    Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore, LeaseState, LeaseStore, StampOptions,
    MAX_ADVERTISED_LEN, MAX_STATE_LEN,
};

/// Re-exported so that callers can name the token type without adding the crate.
pub use tokio_util::sync::CancellationToken;
