//! The model checker of blob-mutex lives in this package's tests
//! (`crates/model/tests/model`): every interleaving of small configurations of the
//! quorum, the lease set, the handover and the schedule, on the crate's own decision
//! files, compiled there as they are. See the guide's model chapter
//! (docs/guide/model.md). The package holds no library code.
