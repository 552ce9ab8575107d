//! A fleet's schedule ([`BlobSchedule`]): a cron expression whose every
//! slot runs once across the hosts, on storage's clock, with its options
//! ([`ScheduleOptions`], [`Overlap`]), what its job is given ([`Slot`]) and
//! what it reports of each slot ([`SlotReport`], [`SlotOutcome`]).

pub use crate::fleet::{BlobSchedule, Overlap, ScheduleOptions, Slot, SlotOutcome, SlotReport};
