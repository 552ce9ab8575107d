//! The storage backend on the frozen `azure_storage_blobs` 0.21 crates
//! (feature `sdk-v021`), the only module (with its children) that uses
//! them. Its floor plan is the official backend's: the manager and its lease
//! calls (`lease`), the settings as this SDK takes them (`settings`), the
//! client and its errors (`client`), the leader's state (`state`), candidate
//! records (`candidates`), the set store (`set`) and deletes (`delete`).

mod candidates;
mod client;
mod delete;
mod lease;
mod set;
mod settings;
mod state;

pub use lease::SdkV021LeaseManager;
pub use set::SdkV021LeaseSetStore;
