//! A fleet's schedule ([`BlobSchedule`]): a cron expression whose every
//! slot runs once across the hosts, on storage's clock, with its options
//! ([`ScheduleOptions`], [`Overlap`]), what its job is given ([`Slot`]) and
//! what it reports of each slot ([`SlotReport`], [`SlotOutcome`]), and its
//! record as a reader sees it ([`ScheduleRecord`]).
//!
//! The code is in `src/fleet/`: the loop every host runs (`fleet.rs`), one
//! term (`term.rs`), what is due (`due.rs`), the slots (`slots.rs`) and the
//! record (`record.rs`, and `view.rs` for its readers).

pub use crate::fleet::{
    BlobSchedule, Overlap, RecordedOutcome, RecordedSlot, ScheduleOptions, ScheduleRecord, Slot,
    SlotOutcome, SlotReport,
};
