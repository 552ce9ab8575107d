//! The lease set: partitions over the in-memory store and Azurite, on a
//! quorum, and under overload.

mod overload;
#[cfg(feature = "testing")]
mod partitions;
#[cfg(feature = "testing")]
mod partitions_quorum;
