//! The storage backend on the frozen `azure_storage_blobs` 0.21 crates
//! (feature `sdk-v021`), the only module (with its children) that uses
//! them. Its floor plan is the official backend's: the blob calls (`calls`),
//! the settings as this SDK takes them (`settings`), and the client with its
//! errors (`client`).

mod calls;
mod client;
mod settings;

pub(crate) use calls::SdkV021Calls;
