//! What is due: a pure decision (no I/O, no clock) from the record and
//! storage's clock, made by every host before it campaigns and again by
//! the holder under the lease.

use std::time::Duration;

use jiff::Timestamp;

use super::record::{before, window_start, Fate, Record, KEEP_SETTLED};
use super::slots::Slots;

/// What a host does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Run `slot`'s job, its `attempt`-th run (1 for a first).
    Run { slot: Timestamp, attempt: u32 },
    /// Nothing is due before this instant (storage's clock): a slot comes
    /// due then, or a failed one may be retried then. `None` when the
    /// expression names no later slot.
    Wait(Option<Timestamp>),
}

/// The decision, with the slots that went past the window unrun.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) next: Next,
    /// How many slots before the window were neither run to their end nor
    /// recorded: never begun, or begun and cut short.
    pub(crate) missed_count: u64,
    /// The last of them: a record's `through` moves up to it.
    pub(crate) last_missed: Option<Timestamp>,
    /// The last [`KEEP_SETTLED`] of them, oldest first: the record lists
    /// these as missed.
    pub(crate) recent_missed: Vec<Timestamp>,
}

/// What is due at storage's `now`: the oldest slot within the window that
/// is neither done, skipped nor out of attempts (so slots run in order);
/// a failed one once its back-off has passed and while `retries` are left
/// (one whose entry has no retry gave up).
/// Slots after the record's `through` and before the window that it does
/// not list, or lists as begun and never ended (a run cut short), were
/// missed. A record with no `through` and no slot (a new schedule) begins
/// at `now`: no slot before the schedule existed is run.
pub(crate) fn due(
    slots: &Slots,
    record: &Record,
    now: Timestamp,
    window: Duration,
    retries: u32,
) -> Due {
    let start = window_start(now, window);
    let begin = record
        .through
        .or_else(|| record.slots.keys().next().map(|t| before(*t)))
        .unwrap_or(now);
    let mut due = Due {
        next: Next::Wait(None),
        missed_count: 0,
        last_missed: None,
        recent_missed: Vec::new(),
    };
    let mut wait: Option<Timestamp> = None;
    let mut cursor = begin;
    while let Some(slot) = slots.after(cursor) {
        if slot > now {
            wait = Some(wait.map_or(slot, |w| w.min(slot)));
            break;
        }
        cursor = slot;
        match record.slots.get(&slot) {
            // A failure that gave up has no retry.
            Some(e)
                if e.fate == Fate::Failed
                    && slot >= start
                    && e.attempts <= retries
                    && e.retry_at.is_some() =>
            {
                // A retry waiting for its back-off holds no later slot up.
                if let Some(later) = e.retry_at.filter(|t| *t > now) {
                    wait = Some(wait.map_or(later, |w| w.min(later)));
                } else {
                    due.next = Next::Run {
                        slot,
                        attempt: e.attempts + 1,
                    };
                    return due;
                }
            }
            // Begun, cut short, and past the window before another run.
            Some(e) if slot < start && e.is_started(slot) => missed(&mut due, slot),
            Some(_) => {}
            None if slot < start => missed(&mut due, slot),
            None => {
                due.next = Next::Run { slot, attempt: 1 };
                return due;
            }
        }
    }
    due.next = Next::Wait(wait);
    due
}

/// Counts `slot` missed in `due`.
fn missed(due: &mut Due, slot: Timestamp) {
    due.missed_count += 1;
    due.last_missed = Some(slot);
    if due.recent_missed.len() == KEEP_SETTLED {
        due.recent_missed.remove(0);
    }
    due.recent_missed.push(slot);
}

/// What a host that looks at the record without the lease does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Campaigns for a term: the record is not begun, a slot is due, or
    /// slots went past the window unrun (a term lets them go, and reports
    /// them).
    Campaign,
    /// Sleeps until this instant of storage's clock (`None`: no slot ever
    /// comes).
    Sleep(Option<Timestamp>),
}

/// What a host that looks at `record` at storage's `now`, without the
/// lease, does.
pub(crate) fn wake(
    slots: &Slots,
    record: &Record,
    now: Timestamp,
    window: Duration,
    retries: u32,
) -> Wake {
    if record.through.is_none() && record.slots.is_empty() {
        return Wake::Campaign;
    }
    let d = due(slots, record, now, window, retries);
    match d.next {
        Next::Run { .. } => Wake::Campaign,
        Next::Wait(_) if d.missed_count > 0 => Wake::Campaign,
        Next::Wait(at) => Wake::Sleep(at),
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::Entry;
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn every_ten() -> Slots {
        Slots::new("*/10 * * * * *", "UTC").unwrap()
    }

    fn entry(fate: Fate, attempts: u32) -> Entry {
        Entry {
            fate,
            attempts,
            epoch: 1,
            retry_at: None,
            holder: "h".to_owned(),
        }
    }

    const WINDOW: Duration = Duration::from_secs(60);

    #[test]
    fn a_new_schedule_waits_for_its_first_slot() {
        let d = due(
            &every_ten(),
            &Record::default(),
            at("2026-11-28T10:00:05Z"),
            WINDOW,
            2,
        );
        assert_eq!(d.next, Next::Wait(Some(at("2026-11-28T10:00:10Z"))));
        assert_eq!(d.missed_count, 0);
    }

    #[test]
    fn the_oldest_slot_within_the_window_runs_first_and_older_ones_were_missed() {
        let record = Record {
            through: Some(at("2026-11-28T10:00:00Z")),
            ..Record::default()
        };
        // Down for two minutes: 10:00:10 … 10:00:50 went past the window.
        let d = due(&every_ten(), &record, at("2026-11-28T10:02:00Z"), WINDOW, 2);
        assert_eq!(
            d.next,
            Next::Run {
                slot: at("2026-11-28T10:01:00Z"),
                attempt: 1
            }
        );
        assert_eq!(d.missed_count, 5);
        assert_eq!(d.last_missed, Some(at("2026-11-28T10:00:50Z")));
    }

    #[test]
    fn done_and_skipped_slots_are_passed_and_a_failed_one_is_retried_after_its_back_off() {
        let mut record = Record {
            through: Some(at("2026-11-28T10:00:00Z")),
            ..Record::default()
        };
        record
            .slots
            .insert(at("2026-11-28T10:00:10Z"), entry(Fate::Done, 1));
        record
            .slots
            .insert(at("2026-11-28T10:00:20Z"), entry(Fate::Skipped, 0));
        let mut failed = entry(Fate::Failed, 1);
        failed.retry_at = Some(at("2026-11-28T10:00:35Z"));
        record.slots.insert(at("2026-11-28T10:00:30Z"), failed);
        let now = at("2026-11-28T10:00:33Z");
        let d = due(&every_ten(), &record, now, WINDOW, 2);
        assert_eq!(d.next, Next::Wait(Some(at("2026-11-28T10:00:35Z"))));
        let d = due(&every_ten(), &record, at("2026-11-28T10:00:36Z"), WINDOW, 2);
        assert_eq!(
            d.next,
            Next::Run {
                slot: at("2026-11-28T10:00:30Z"),
                attempt: 2
            }
        );
        // Out of retries: the next slot instead.
        record
            .slots
            .get_mut(&at("2026-11-28T10:00:30Z"))
            .unwrap()
            .attempts = 3;
        let d = due(&every_ten(), &record, at("2026-11-28T10:00:41Z"), WINDOW, 2);
        assert_eq!(
            d.next,
            Next::Run {
                slot: at("2026-11-28T10:00:40Z"),
                attempt: 1
            }
        );
    }

    #[test]
    fn a_month_down_on_a_schedule_of_seconds_is_counted_at_once() {
        let record = Record {
            through: Some(at("2026-10-28T10:00:00Z")),
            ..Record::default()
        };
        let d = due(&every_ten(), &record, at("2026-11-28T10:00:00Z"), WINDOW, 2);
        assert_eq!(
            d.next,
            Next::Run {
                slot: at("2026-11-28T09:59:00Z"),
                attempt: 1
            }
        );
        // 31 days of six slots a minute, less the seven of the window.
        assert_eq!(d.missed_count, 31 * 24 * 60 * 6 - 7);
        assert_eq!(d.last_missed, Some(at("2026-11-28T09:58:50Z")));
    }
}
