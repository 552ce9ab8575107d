//! The entries a term makes in the schedule's record, decided without I/O:
//! at its start (a new schedule's beginning, the slots let go as missed),
//! before a run (its mark, and whose run it finds cut short), and at a
//! run's end (its fate, and the slots skipped meanwhile): `open`, `start`
//! and `finish`. The term writes
//! the record; the model checker compiles this file as it is.

use std::time::Duration;

use jiff::Timestamp;

use super::due::{due, Due};
use super::record::{window_start, Entry, Fate, Record};
use super::slots::Slots;

/// At a term's start, on storage's clock `now`: begins a new schedule at
/// `began`, when its host began to run it, or at the window's start if
/// that is later (so a slot that came due after the host started runs
/// while it is within the window, however late the first term comes, and
/// no slot before the host started runs), lets the slots that went past
/// the window unrun (or cut short) go as missed (`through` moves past
/// them, and the last [`KEEP_SETTLED`](super::record::KEEP_SETTLED) of them
/// are listed as missed), and says what is due.
pub(crate) fn open(
    record: &mut Record,
    slots: &Slots,
    began: Timestamp,
    now: Timestamp,
    window: Duration,
    retries: u32,
) -> Due {
    if record.through.is_none() && record.slots.is_empty() {
        record.through = Some(began.max(window_start(now, window)).min(now));
    }
    let d = due(slots, record, now, window, retries);
    if let Some(last) = d.last_missed {
        record.through = Some(record.through.map_or(last, |t| t.max(last)));
    }
    for slot in &d.recent_missed {
        // A run cut short keeps who ran it last, and how often it ran.
        let (attempts, epoch, holder) = record.slots.get(slot).map_or((0, 0, String::new()), |e| {
            (e.attempts, e.epoch, e.holder.clone())
        });
        record.slots.insert(
            *slot,
            Entry {
                fate: Fate::Missed,
                attempts,
                epoch,
                retry_at: None,
                holder,
            },
        );
    }
    d
}

/// Before `slot`'s `attempt`-th run under the term of `epoch` and
/// `holder`: marks it started (see [`Entry::started`]), and returns the
/// holder and epoch of another term whose run of it began and never ended.
pub(crate) fn start(
    record: &mut Record,
    slot: Timestamp,
    attempt: u32,
    epoch: u64,
    holder: &str,
) -> Option<(String, u64)> {
    let cut_short = record
        .slots
        .get(&slot)
        .filter(|e| e.is_started(slot) && e.epoch != epoch)
        .map(|cut| (cut.holder.clone(), cut.epoch));
    record
        .slots
        .insert(slot, Entry::started(slot, attempt, epoch, holder));
    cut_short
}

/// How one run of a slot ended.
#[derive(Debug, Clone)]
pub(crate) struct Ended<'a> {
    pub(crate) slot: Timestamp,
    pub(crate) attempt: u32,
    pub(crate) epoch: u64,
    pub(crate) holder: &'a str,
    /// Storage's clock when the term read the record, and at the run's end.
    pub(crate) started: Timestamp,
    pub(crate) end: Timestamp,
    /// `None` when the job succeeded; when it failed, how long until it may
    /// be retried.
    pub(crate) retry_after: Option<Duration>,
    /// How many times a failed slot is run again.
    pub(crate) retries: u32,
}

/// Enters how a run ended in `record`, and with `skip_overlap` the slots
/// that came due while it ran (within the window at its end, and not
/// already entered) as skipped; returns those. A failed run whose retries
/// are spent, or whose next attempt would come past the window, gave up:
/// its entry has no retry.
pub(crate) fn finish(
    record: &mut Record,
    slots: &Slots,
    run: &Ended<'_>,
    skip_overlap: bool,
    window: Duration,
) -> Vec<Timestamp> {
    let (fate, retry_at) = match run.retry_after {
        None => (Fate::Done, None),
        Some(wait) => {
            let window =
                jiff::SignedDuration::try_from(window).unwrap_or(jiff::SignedDuration::MAX);
            let last = run.slot.checked_add(window).unwrap_or(Timestamp::MAX);
            let retry_at = jiff::SignedDuration::try_from(wait)
                .ok()
                .and_then(|wait| run.end.checked_add(wait).ok())
                .filter(|at| *at <= last && run.attempt <= run.retries);
            (Fate::Failed, retry_at)
        }
    };
    record.slots.insert(
        run.slot,
        Entry {
            fate,
            attempts: run.attempt,
            epoch: run.epoch,
            retry_at,
            holder: run.holder.to_owned(),
        },
    );
    let mut skipped = Vec::new();
    if !skip_overlap {
        return skipped;
    }
    let mut cursor = run.started.max(run.slot);
    while let Some(next) = slots.after(cursor).filter(|s| *s <= run.end) {
        cursor = next;
        if !record.slots.contains_key(&next) && next >= window_start(run.end, window) {
            record.slots.insert(next, skipped_entry());
            skipped.push(next);
        }
    }
    skipped
}

/// A skipped slot's entry.
fn skipped_entry() -> Entry {
    Entry {
        fate: Fate::Skipped,
        attempts: 0,
        epoch: 0,
        retry_at: None,
        holder: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::due::Next;
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn every_ten() -> Slots {
        Slots::new("*/10 * * * * *", "UTC").unwrap()
    }

    const WINDOW: Duration = Duration::from_secs(60);

    /// After a month down, the slots past the window are let go at once:
    /// the next term, at the same instant, finds none of them missed again.
    #[test]
    fn a_term_lets_every_slot_past_the_window_go_once() {
        let mut record = Record {
            through: Some(at("2026-10-28T10:00:00Z")),
            ..Record::default()
        };
        let now = at("2026-11-28T10:00:00Z");
        let first = open(&mut record, &every_ten(), now, now, WINDOW, 2);
        assert_eq!(first.missed_count, 31 * 24 * 60 * 6 - 7);
        let again = open(&mut record, &every_ten(), now, now, WINDOW, 2);
        assert_eq!(again.missed_count, 0, "missed twice");
        assert_eq!(again.next, first.next);
    }

    /// A new record begins when its host began to run the schedule: a
    /// slot that came due since runs, however late the first term; no
    /// slot before it. A host that began before the window's start begins
    /// the record there, with no slot missed; one that began at the term
    /// begins it then.
    #[test]
    fn a_new_schedule_begins_when_its_host_began_or_at_the_windows_start() {
        let now = at("2026-11-28T10:00:15Z");
        for (began, through, next) in [
            (
                at("2026-11-28T10:00:08Z"),
                at("2026-11-28T10:00:08Z"),
                Next::Run {
                    slot: at("2026-11-28T10:00:10Z"),
                    attempt: 1,
                },
            ),
            (
                at("2026-11-27T10:00:00Z"),
                at("2026-11-28T09:59:15Z"),
                Next::Run {
                    slot: at("2026-11-28T09:59:20Z"),
                    attempt: 1,
                },
            ),
            (now, now, Next::Wait(Some(at("2026-11-28T10:00:20Z")))),
        ] {
            let mut record = Record::default();
            let d = open(&mut record, &every_ten(), began, now, WINDOW, 2);
            assert_eq!(record.through, Some(through), "began {began}");
            assert_eq!((d.next, d.missed_count), (next, 0), "began {began}");
        }
    }

    /// A mark of another term names it; the term's own mark, or a slot's
    /// ended run, names none.
    #[test]
    fn a_run_finds_whose_run_of_its_slot_was_cut_short() {
        let slot = at("2026-11-28T10:00:10Z");
        let mut record = Record::default();
        assert_eq!(start(&mut record, slot, 1, 7, "h1"), None);
        assert_eq!(start(&mut record, slot, 1, 7, "h1"), None);
        assert_eq!(
            start(&mut record, slot, 1, 8, "h2"),
            Some(("h1".to_owned(), 7))
        );
        let ended = Ended {
            slot,
            attempt: 1,
            epoch: 8,
            holder: "h2",
            started: slot,
            end: slot,
            retry_after: Some(Duration::from_secs(5)),
            retries: 2,
        };
        finish(&mut record, &every_ten(), &ended, true, WINDOW);
        assert_eq!(start(&mut record, slot, 2, 9, "h3"), None);
    }

    /// A run from 10:00:10 to 10:00:35 under the skip policy: 10:00:20 and
    /// 10:00:30 came due meanwhile and are skipped; a failure's retry is
    /// due its back-off after the end.
    #[test]
    fn a_runs_end_enters_its_fate_and_skips_what_came_due_meanwhile() {
        let (slot, end_at) = (at("2026-11-28T10:00:10Z"), at("2026-11-28T10:00:35Z"));
        let mut record = Record::default();
        let ended = Ended {
            slot,
            attempt: 2,
            epoch: 8,
            holder: "h2",
            started: at("2026-11-28T10:00:11Z"),
            end: end_at,
            retry_after: Some(Duration::from_secs(20)),
            retries: 2,
        };
        let skipped = finish(&mut record, &every_ten(), &ended, true, WINDOW);
        assert_eq!(
            skipped,
            [at("2026-11-28T10:00:20Z"), at("2026-11-28T10:00:30Z")]
        );
        let entry = &record.slots[&slot];
        assert_eq!((entry.fate, entry.attempts), (Fate::Failed, 2));
        assert_eq!(entry.retry_at, Some(at("2026-11-28T10:00:55Z")));
        let mut waiting = Record::default();
        let done = Ended {
            retry_after: None,
            ..ended
        };
        assert!(finish(&mut waiting, &every_ten(), &done, false, WINDOW).is_empty());
        assert_eq!(waiting.slots.len(), 1);
        assert_eq!(waiting.slots[&slot].fate, Fate::Done);
    }

    /// A failure gives up, with no retry in its entry, once its retries are
    /// spent or when its next attempt would come past the window; the slot
    /// is then due no more.
    #[test]
    fn a_failed_run_gives_up_when_its_retries_are_spent_or_the_next_would_come_past_the_window() {
        let slot = at("2026-11-28T10:00:10Z");
        let failed = |attempt, wait| Ended {
            slot,
            attempt,
            epoch: 8,
            holder: "h2",
            started: slot,
            end: at("2026-11-28T10:00:20Z"),
            retry_after: Some(Duration::from_secs(wait)),
            retries: 2,
        };
        for (run, retry) in [
            (failed(2, 20), Some(at("2026-11-28T10:00:40Z"))),
            (failed(3, 20), None),
            (failed(1, 61), None),
        ] {
            let mut record = Record {
                through: Some(at("2026-11-28T10:00:00Z")),
                ..Record::default()
            };
            finish(&mut record, &every_ten(), &run, false, WINDOW);
            assert_eq!(record.slots[&slot].retry_at, retry, "{run:?}");
            let later = super::super::due::due(
                &every_ten(),
                &record,
                at("2026-11-28T10:00:45Z"),
                WINDOW,
                2,
            );
            let retried = later.next
                == super::super::due::Next::Run {
                    slot,
                    attempt: run.attempt + 1,
                };
            assert_eq!(retried, retry.is_some(), "{run:?}: {later:?}");
        }
    }
}
