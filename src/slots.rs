//! What a [`BlobSchedule`](crate::BlobSchedule) gives its job ([`Slot`]),
//! reports of its slots ([`SlotReport`], [`SlotOutcome`]) and does with a
//! slot that comes due while a job runs ([`Overlap`]). The schedule and its
//! options are at the crate root.

pub use crate::schedule::{Overlap, Slot, SlotOutcome, SlotReport};
