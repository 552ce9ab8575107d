#![doc = include_str!("../README.md")]
// docs.rs builds with `--cfg docsrs` (see `[package.metadata.docs.rs]`) and marks
// the items that need an optional feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod bounded;
mod engine;
mod error;
mod lease_set;
mod mutex;
mod options;
mod settings;
mod store;

pub use engine::fail_stop::FAIL_STOP_EXIT_CODE;
pub use engine::leadership::{
    Heartbeat, LeaderContext, Leadership, StopReason, TaskStop, TermReport,
};
pub use error::{BoxError, Cause, Error, Result};
pub use lease_set::balance::Strategy;
pub use lease_set::{BlobLeaseSet, LeaseSetOptions, PartitionContext, PartitionReport};
pub use mutex::BlobDistributedMutex;
pub use options::{MutexOptions, STOP_SLACK};
pub use settings::{BlobSettings, AZURITE_ACCOUNT, AZURITE_ENDPOINT};
pub use store::blob::{BlobLeaseManager, BlobLeaseSetStore};
pub use store::blob_protocol::{
    ACQUIRED_AT_KEY, EPOCH_KEY, HOLDER_KEY, PRIORITY_KEY, PROPOSED_KEY,
};
pub use store::collect::Collection;
#[cfg(feature = "testing")]
pub use store::conformance;
#[cfg(feature = "testing")]
pub use store::memory::{MemoryLeaseSetStore, MemoryLeaseStore};
pub use store::quorum::{
    AccountLease, Holding, QuorumLeaseSetStore, QuorumLeaseStore, MAX_QUORUM_ACCOUNTS,
};
pub use store::{
    Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore, LeaseState, LeaseStore, MAX_STATE_LEN,
};

/// Re-exported so that callers can name the token type without adding the crate.
pub use tokio_util::sync::CancellationToken;
