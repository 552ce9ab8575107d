//! The schedule's record: what became of each slot, kept in the lease's
//! fenced state (written only under the term's lease), bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;

use crate::error::{Error, Result};

/// The first line of a schedule's record. A completion record of `run
/// --once` starts otherwise, so either refuses the other's blob
/// ([`Error::StateNotARecord`]) rather than overwrite it.
const HEADER: &str = "blob-mutex schedule v1";

/// The settled slots (done, failed, skipped, missed) kept besides those
/// within the catch-up window: what `status` shows of the past.
pub(crate) const KEEP_SETTLED: usize = 16;

/// What became of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Its job succeeded.
    Done,
    /// Its job failed; it is retried while retries are left and the slot is
    /// within the window.
    Failed,
    /// It came due while the previous slot's job still ran, and the
    /// overlap policy skips such a slot.
    Skipped,
    /// Nobody ran it while it was within the window.
    Missed,
}

impl Fate {
    fn as_str(self) -> &'static str {
        match self {
            Fate::Done => "done",
            Fate::Failed => "failed",
            Fate::Skipped => "skipped",
            Fate::Missed => "missed",
        }
    }

    fn parse(word: &str) -> Option<Fate> {
        Some(match word {
            "done" => Fate::Done,
            "failed" => Fate::Failed,
            "skipped" => Fate::Skipped,
            "missed" => Fate::Missed,
            _ => return None,
        })
    }
}

/// One slot's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) fate: Fate,
    /// How many times its job ran.
    pub(crate) attempts: u32,
    /// The epoch of the last term that ran it (0 when none did).
    pub(crate) epoch: u64,
    /// A failed slot's next attempt, not before (storage's clock).
    pub(crate) retry_at: Option<Timestamp>,
    /// The holder of that term (empty when none).
    pub(crate) holder: String,
}

impl Entry {
    /// The mark a term writes before it runs `slot`'s job, its `attempt`-th
    /// run: the slot is due again at once, with the attempts of the runs
    /// that ended, unless the term writes how this run ended. So a host that
    /// finds it under a later term knows that the run of the marked term
    /// was cut short (its host died, froze or lost the lease mid-job), and a
    /// death is not counted against the retries.
    ///
    /// It is a failed entry whose retry is due a second before its slot, an
    /// instant no failure records (a failure's retry comes after its end,
    /// and so after its slot): the record's format is unchanged, and hosts
    /// of 0.2.0, which know nothing of the mark, read it as a failed run
    /// whose retry is due, and run the slot again as well.
    pub(crate) fn started(slot: Timestamp, attempt: u32, epoch: u64, holder: &str) -> Entry {
        Entry {
            fate: Fate::Failed,
            attempts: attempt.saturating_sub(1),
            epoch,
            retry_at: Some(before(slot)),
            holder: holder.to_owned(),
        }
    }

    /// Whether this entry of `slot` is a [`started`](Self::started) mark.
    pub(crate) fn is_started(&self, slot: Timestamp) -> bool {
        self.fate == Fate::Failed && self.retry_at.is_some_and(|t| t < slot)
    }
}

/// A second before `at`.
pub(crate) fn before(at: Timestamp) -> Timestamp {
    at.checked_sub(jiff::SignedDuration::from_secs(1))
        .unwrap_or(Timestamp::MIN)
}

/// The record: every slot up to `through` is settled (those not listed
/// were recorded and have been let go, or were never due for this record);
/// the slots listed after it are what became of each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) through: Option<Timestamp>,
    pub(crate) slots: BTreeMap<Timestamp, Entry>,
}

impl Record {
    /// The record in `state`: `None` for an empty state.
    ///
    /// # Errors
    ///
    /// [`Error::StateNotARecord`] for any other content.
    pub(crate) fn parse(lease: &str, state: &[u8]) -> Result<Option<Record>> {
        if state.is_empty() {
            return Ok(None);
        }
        let refuse = |what: &str| Error::StateNotARecord(format!("{lease}: {what}"));
        let text = std::str::from_utf8(state)
            .map_err(|_| refuse("it holds bytes that are not text, not a schedule's record"))?;
        let mut lines = text.lines();
        match lines.next() {
            Some(HEADER) => {}
            Some(line) if line.starts_with("blob-mutex record v") => {
                return Err(refuse(
                    "it holds the completion record of a run once (`run --once` with \
                     --done-key or --at-most-every), not a schedule's record",
                ));
            }
            Some(line) if line.starts_with("blob-mutex schedule v") => {
                return Err(refuse("it holds a schedule's record of a later version"));
            }
            _ => {
                return Err(refuse(
                    "it holds state another writer put there (`state put`, another \
                     program), not a schedule's record",
                ));
            }
        }
        let mut record = Record::default();
        for line in lines.filter(|l| !l.is_empty()) {
            if let Some(at) = line.strip_prefix("through=") {
                record.through = Some(
                    at.parse()
                        .map_err(|_| refuse("a malformed through= line"))?,
                );
            } else if let Some(rest) = line.strip_prefix("slot=") {
                let (at, entry) =
                    parse_slot(rest).ok_or_else(|| refuse("a malformed slot= line"))?;
                record.slots.insert(at, entry);
            } else {
                return Err(refuse("an unknown line"));
            }
        }
        Ok(Some(record))
    }

    /// The record's bytes.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut text = format!("{HEADER}\n");
        if let Some(through) = self.through {
            let _ = writeln!(text, "through={through}");
        }
        for (at, e) in &self.slots {
            let retry = e.retry_at.map_or_else(|| "-".to_owned(), |t| t.to_string());
            let _ = writeln!(
                text,
                "slot={at} {} attempts={} epoch={} retry={retry} holder={}",
                e.fate.as_str(),
                e.attempts,
                e.epoch,
                e.holder
            );
        }
        text.into_bytes()
    }

    /// Lets go of what is no longer needed at storage's `now`: slots before
    /// the window's start, except the last [`KEEP_SETTLED`] settled ones
    /// (of any outcome; a run's start mark is not settled); `through`
    /// moves up to the last slot let go. The record then holds at most the
    /// slots of one window and [`KEEP_SETTLED`] more.
    pub(crate) fn prune(&mut self, now: Timestamp, window: Duration) {
        let start = window_start(now, window);
        let kept: Vec<Timestamp> = self
            .slots
            .iter()
            .filter(|(at, e)| **at < start && !e.is_started(**at))
            .map(|(at, _)| *at)
            .rev()
            .take(KEEP_SETTLED)
            .collect();
        let old: Vec<Timestamp> = self
            .slots
            .keys()
            .copied()
            .filter(|at| *at < start && !kept.contains(at))
            .collect();
        for at in old {
            self.slots.remove(&at);
            self.through = Some(self.through.map_or(at, |t| t.max(at)));
        }
    }
}

/// The start of the catch-up window at `now`.
pub(crate) fn window_start(now: Timestamp, window: Duration) -> Timestamp {
    let window = jiff::SignedDuration::try_from(window).unwrap_or(jiff::SignedDuration::MAX);
    now.checked_sub(window).unwrap_or(Timestamp::MIN)
}

/// `<at> <fate> attempts=N epoch=E retry=T|- holder=H`.
fn parse_slot(rest: &str) -> Option<(Timestamp, Entry)> {
    let (at, rest) = rest.split_once(' ')?;
    let (fate, rest) = rest.split_once(' ')?;
    let (attempts, rest) = rest.strip_prefix("attempts=")?.split_once(' ')?;
    let (epoch, rest) = rest.strip_prefix("epoch=")?.split_once(' ')?;
    let (retry, rest) = rest.strip_prefix("retry=")?.split_once(' ')?;
    let holder = rest.strip_prefix("holder=")?;
    let retry_at = match retry {
        "-" => None,
        t => Some(t.parse().ok()?),
    };
    Some((
        at.parse().ok()?,
        Entry {
            fate: Fate::parse(fate)?,
            attempts: attempts.parse().ok()?,
            epoch: epoch.parse().ok()?,
            retry_at,
            holder: holder.to_owned(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn entry(fate: Fate) -> Entry {
        Entry {
            fate,
            attempts: 1,
            epoch: 7,
            retry_at: None,
            holder: "web 1".to_owned(),
        }
    }

    #[test]
    fn a_record_round_trips_and_refuses_what_is_not_one() {
        let mut record = Record {
            through: Some(at("2026-11-28T10:00:00Z")),
            ..Record::default()
        };
        record
            .slots
            .insert(at("2026-11-28T10:00:10Z"), entry(Fate::Done));
        let mut failed = entry(Fate::Failed);
        failed.retry_at = Some(at("2026-11-28T10:00:30Z"));
        record.slots.insert(at("2026-11-28T10:00:20Z"), failed);
        let bytes = record.to_bytes();
        assert_eq!(Record::parse("c/b", &bytes).unwrap(), Some(record));
        assert_eq!(Record::parse("c/b", b"").unwrap(), None);
        for bad in [
            &b"blob-mutex record v2\nkey=x\n"[..],
            b"blob-mutex schedule v1\nslot=x\n",
        ] {
            assert!(matches!(
                Record::parse("c/b", bad),
                Err(Error::StateNotARecord(_))
            ));
        }
    }

    /// A run's start mark, read by this version and by 0.2.0's parser and
    /// decision (the same code: the format did not change): the slot is due
    /// again at once, as the same attempt, however many retries are left.
    #[test]
    fn a_start_mark_round_trips_and_leaves_its_slot_due_again_as_the_same_attempt() {
        let slot = at("2026-11-28T10:00:10Z");
        let now = at("2026-11-28T10:00:15Z");
        for (attempt, retries) in [(1, 0), (2, 2), (3, 2)] {
            let mut record = Record {
                through: Some(at("2026-11-28T10:00:00Z")),
                ..Record::default()
            };
            let mark = Entry::started(slot, attempt, 7, "web 1");
            assert!(mark.is_started(slot));
            record.slots.insert(slot, mark);
            let read = Record::parse("c/b", &record.to_bytes()).unwrap().unwrap();
            assert_eq!(read, record);
            let slots = super::super::slots::Slots::new("*/10 * * * * *", "UTC").unwrap();
            let due = super::super::due::due(&slots, &read, now, Duration::from_secs(60), retries);
            assert_eq!(
                due.next,
                super::super::due::Next::Run { slot, attempt },
                "attempt {attempt}, {retries} retries"
            );
        }
        // A failure's retry comes after its slot: never read as a mark.
        let mut failed = entry(Fate::Failed);
        failed.retry_at = Some(slot);
        assert!(!failed.is_started(slot));
        assert!(!entry(Fate::Done).is_started(slot));
    }

    #[test]
    fn pruning_keeps_the_window_and_the_last_settled_slots_and_moves_through_up() {
        let mut record = Record::default();
        let start = at("2026-11-28T00:00:00Z");
        for i in 0..100 {
            let fate = if i % 10 == 3 {
                Fate::Missed
            } else {
                Fate::Done
            };
            record
                .slots
                .insert(start + jiff::SignedDuration::from_secs(i * 10), entry(fate));
        }
        // A run's start mark before the window is no settled slot.
        let marked = start + jiff::SignedDuration::from_secs(935);
        record
            .slots
            .insert(marked, Entry::started(marked, 1, 7, "web 1"));
        let now = start + jiff::SignedDuration::from_secs(1000);
        record.prune(now, Duration::from_secs(60));
        // The window's slots (940 … 990 s) and the 16 settled before them,
        // the missed among them.
        let window = now - jiff::SignedDuration::from_secs(60);
        let within = record.slots.keys().filter(|t| **t >= window).count();
        assert_eq!(within, 6);
        assert_eq!(
            record.slots.len(),
            KEEP_SETTLED + within,
            "{:?}",
            record.slots.keys()
        );
        assert!(!record.slots.contains_key(&marked));
        assert!(record.slots.values().any(|e| e.fate == Fate::Missed));
        assert!(record.through.unwrap() < window);
        let bytes = record.to_bytes().len();
        assert!(bytes < 3_000, "{bytes} bytes");
    }
}
