//! A schedule's record as a reader sees it ([`ScheduleRecord`]): the slots
//! it keeps and what became of each, read from the lease blob's state
//! without the lease (what `blob-mutex status` shows).

use std::time::SystemTime;

use jiff::Timestamp;

use super::record::{Entry, Fate, Record};
use crate::error::Result;

/// A schedule's record, read-only: the slots the record keeps (those
/// within the catch-up window and the last 16 done), oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleRecord {
    /// Every slot up to this instant is settled, and those not listed were
    /// let go (`None` while none was).
    pub through: Option<SystemTime>,
    /// The slots kept, oldest first.
    pub slots: Vec<RecordedSlot>,
}

/// One slot of a [`ScheduleRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedSlot {
    /// The slot's key: its instant in UTC, RFC 3339 (`2026-11-28T02:30:00Z`).
    pub key: String,
    /// The slot's instant.
    pub at: SystemTime,
    /// What became of it.
    pub outcome: RecordedOutcome,
    /// How many times its job ran: for a slot whose run began and has not
    /// ended, that run included (the attempt it is, as its job was told).
    pub attempts: u32,
    /// The epoch of the last term that ran it (0 when none did).
    pub epoch: u64,
    /// The holder of that term (`None` when none ran it).
    pub holder: Option<String>,
    /// A failed slot's next attempt, not before (storage's clock); `None`
    /// for a failed slot that gave up.
    pub retry_at: Option<SystemTime>,
    /// A failed slot that is tried no more: its retries are spent, or the
    /// next would have come past the catch-up window.
    pub gave_up: bool,
}

/// What the record says became of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordedOutcome {
    /// Its job succeeded.
    Done,
    /// Its job failed; it is retried while retries are left within the
    /// catch-up window.
    Failed,
    /// It came due while the previous slot's job ran
    /// ([`Overlap::Skip`](super::Overlap::Skip)).
    Skipped,
    /// Nobody ran it within the catch-up window.
    Missed,
    /// A run of it began (on `holder`, with `epoch`) and has not ended: it
    /// runs now, or it was cut short and the slot is due again.
    Started,
}

impl RecordedOutcome {
    /// Its word: `done`, `failed`, `skipped`, `missed` or `started`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RecordedOutcome::Done => "done",
            RecordedOutcome::Failed => "failed",
            RecordedOutcome::Skipped => "skipped",
            RecordedOutcome::Missed => "missed",
            RecordedOutcome::Started => "started",
        }
    }
}

impl ScheduleRecord {
    /// The schedule's record in `state` (the lease blob's state, as
    /// [`LeaseStore::read_state`](crate::store::LeaseStore::read_state)
    /// returns it): `None` when the state is empty.
    ///
    /// # Errors
    ///
    /// [`Error::StateNotARecord`](crate::Error::StateNotARecord) when the
    /// state holds anything else (another shape's state, a `run --once`
    /// completion record).
    pub fn from_state(state: &[u8]) -> Result<Option<ScheduleRecord>> {
        let Some(record) = Record::parse("the lease blob's state", state)? else {
            return Ok(None);
        };
        Ok(Some(ScheduleRecord {
            through: record.through.map(SystemTime::from),
            slots: record
                .slots
                .iter()
                .map(|(at, entry)| recorded(*at, entry))
                .collect(),
        }))
    }
}

/// One entry of the record as a reader sees it.
fn recorded(at: Timestamp, entry: &Entry) -> RecordedSlot {
    RecordedSlot {
        key: at.to_string(),
        at: SystemTime::from(at),
        outcome: match entry.fate {
            _ if entry.is_started(at) => RecordedOutcome::Started,
            Fate::Done => RecordedOutcome::Done,
            Fate::Failed => RecordedOutcome::Failed,
            Fate::Skipped => RecordedOutcome::Skipped,
            Fate::Missed => RecordedOutcome::Missed,
        },
        attempts: if entry.is_started(at) {
            entry.attempts + 1
        } else {
            entry.attempts
        },
        epoch: entry.epoch,
        holder: (!entry.holder.is_empty()).then(|| entry.holder.clone()),
        // A start mark's retry is its own encoding, not a retry.
        retry_at: entry
            .retry_at
            .filter(|_| !entry.is_started(at))
            .map(SystemTime::from),
        gave_up: entry.fate == Fate::Failed && entry.retry_at.is_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn a_record_reads_as_its_slots_oldest_first_and_anything_else_is_refused() {
        let state = b"blob-mutex schedule v1\n\
            through=2026-11-28T10:00:00Z\n\
            slot=2026-11-28T10:00:20Z skipped attempts=0 epoch=0 retry=- holder=\n\
            slot=2026-11-28T10:00:10Z failed attempts=1 epoch=7 retry=2026-11-28T10:00:30Z holder=web 1\n";
        let record = ScheduleRecord::from_state(state).unwrap().unwrap();
        let at = |t: &str| SystemTime::from(t.parse::<Timestamp>().unwrap());
        assert_eq!(record.through, Some(at("2026-11-28T10:00:00Z")));
        assert_eq!(
            record.slots,
            [
                RecordedSlot {
                    key: "2026-11-28T10:00:10Z".to_owned(),
                    at: at("2026-11-28T10:00:10Z"),
                    outcome: RecordedOutcome::Failed,
                    attempts: 1,
                    epoch: 7,
                    holder: Some("web 1".to_owned()),
                    retry_at: Some(at("2026-11-28T10:00:30Z")),
                    gave_up: false,
                },
                RecordedSlot {
                    key: "2026-11-28T10:00:20Z".to_owned(),
                    at: at("2026-11-28T10:00:20Z"),
                    outcome: RecordedOutcome::Skipped,
                    attempts: 0,
                    epoch: 0,
                    holder: None,
                    retry_at: None,
                    gave_up: false,
                },
            ]
        );
        assert_eq!(record.slots[0].outcome.as_str(), "failed");
        assert_eq!(ScheduleRecord::from_state(b"").unwrap(), None);
        assert!(matches!(
            ScheduleRecord::from_state(b"blob-mutex record v2\nkey=x\n"),
            Err(Error::StateNotARecord(_))
        ));
    }
}
