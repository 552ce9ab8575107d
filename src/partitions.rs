//! What a [`BlobLeaseSet`](crate::BlobLeaseSet) reports of its partitions
//! ([`PartitionReport`]) and how it shares them among its members
//! ([`Strategy`]). The set, its options and the context its task gets are
//! at the crate root; the guide's [partitions chapter](crate::guide::partitions)
//! tells the whole story.

pub use crate::lease_set::balance::Strategy;
pub use crate::lease_set::PartitionReport;
