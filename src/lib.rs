#![doc = include_str!("../README.md")]
// docs.rs builds with `--cfg docsrs` (see `[package.metadata.docs.rs]`) and marks
// the items that need an optional feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod error;
mod fail_stop;
mod leadership;
mod lease;
mod mutex;
mod options;
mod settings;
mod term_tasks;

pub use error::{BoxError, Error, Result};
pub use fail_stop::FAIL_STOP_EXIT_CODE;
pub use leadership::{Heartbeat, LeaderContext, Leadership, StopReason, TaskStop, TermReport};
pub use lease::{
    Acquire, BlobLeaseManager, LeaseId, LeaseInfo, LeaseState, ACQUIRED_AT_KEY, EPOCH_KEY,
    HOLDER_KEY,
};
pub use mutex::BlobDistributedMutex;
pub use options::{MutexOptions, STOP_SLACK};
pub use settings::{BlobSettings, AZURITE_ACCOUNT, AZURITE_ENDPOINT};

/// Re-exported so that callers can name the token type without adding the crate.
pub use tokio_util::sync::CancellationToken;
