//! Stores in memory, for testing code that holds a lease with paused Tokio
//! time and no emulator (feature `testing`). They keep the contract of
//! [`LeaseStore`](crate::store::LeaseStore) and
//! [`LeaseSetStore`](crate::store::LeaseSetStore) as Azure's stores do, and
//! pass the same [conformance suite](crate::store::conformance). The guide's
//! [testing chapter](crate::guide::testing) shows them in use.

pub use crate::store::memory::{MemoryLeaseSetStore, MemoryLeaseStore};
