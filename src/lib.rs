#![doc = include_str!("../README.md")]
// docs.rs builds with `--cfg docsrs` (see `[package.metadata.docs.rs]`) and marks
// the items that need an optional feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod balance;
mod bounded;
mod engine;
mod error;
mod fail_stop;
mod leadership;
mod lease_set;
mod lingering;
mod metrics;
mod mutex;
mod options;
mod settings;
mod state;
mod store;
mod term_tasks;

pub use balance::Strategy;
pub use store::collect::Collection;
pub use error::{BoxError, Cause, Error, Result};
pub use fail_stop::FAIL_STOP_EXIT_CODE;
pub use leadership::{Heartbeat, LeaderContext, Leadership, StopReason, TaskStop, TermReport};
pub use store::blob::{
    BlobLeaseManager, BlobLeaseSetStore, ACQUIRED_AT_KEY, EPOCH_KEY, HOLDER_KEY, PRIORITY_KEY,
    PROPOSED_KEY,
};
pub use lease_set::{BlobLeaseSet, LeaseSetOptions, PartitionContext, PartitionReport};
#[cfg(feature = "testing")]
pub use store::memory::{MemoryLeaseSetStore, MemoryLeaseStore};
pub use mutex::BlobDistributedMutex;
pub use options::{MutexOptions, STOP_SLACK};
pub use store::quorum::{
    AccountLease, Holding, QuorumLeaseSetStore, QuorumLeaseStore, MAX_QUORUM_ACCOUNTS,
};
pub use settings::{BlobSettings, AZURITE_ACCOUNT, AZURITE_ENDPOINT};
#[cfg(feature = "testing")]
pub use store::conformance;
pub use store::{
    Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore, LeaseState, LeaseStore, MAX_STATE_LEN,
};

/// Re-exported so that callers can name the token type without adding the crate.
pub use tokio_util::sync::CancellationToken;
