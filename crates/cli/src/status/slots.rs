//! What `status` shows of a schedule's record: its last slots, each with
//! its outcome and holder, and the next slot when the expression is known:
//! given with `--cron`, or advertised by the schedule's last term.

use std::fmt::Write as _;
use std::time::SystemTime;

use anyhow::Result;
use blob_mutex::schedule::{RecordedSlot, ScheduleOptions, ScheduleRecord};
use serde::Serialize;

/// The most slots `status` shows: the last ones.
const SHOWN: usize = 16;

/// A schedule's record as `status` shows it (`--json`: these fields).
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(super) struct ScheduleView {
    /// The last slots, oldest first.
    slots: Vec<SlotView>,
    /// The next slot after storage's clock, when the expression is known.
    next: Option<String>,
}

/// One slot.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct SlotView {
    slot: String,
    outcome: &'static str,
    attempts: u32,
    epoch: u64,
    holder: Option<String>,
    retry_at: Option<String>,
    /// A failed slot tried no more.
    gave_up: bool,
}

impl ScheduleView {
    /// The view of the schedule's record in `state`, if it holds one (any
    /// other state is none of `status`'s business); with the schedule's
    /// `expression`, the next slot after `now`.
    ///
    /// # Errors
    ///
    /// A bad expression or zone, as the library words it.
    pub(super) fn new(
        state: &[u8],
        expression: Option<&ScheduleOptions>,
        now: SystemTime,
    ) -> Result<Option<ScheduleView>> {
        let Ok(Some(record)) = ScheduleRecord::from_state(state) else {
            return Ok(None);
        };
        let next = match expression {
            Some(options) => options.next_slot_after(now)?.map(rfc3339),
            None => None,
        };
        let skip = record.slots.len().saturating_sub(SHOWN);
        Ok(Some(ScheduleView {
            slots: record.slots.iter().skip(skip).map(SlotView::new).collect(),
            next,
        }))
    }

    /// The holder and epoch of the last run the record shows (the highest
    /// epoch, whatever became of it): the host that ran the last slot.
    pub(super) fn last_run(&self) -> Option<(&str, u64)> {
        self.slots
            .iter()
            .filter_map(|s| Some((s.holder.as_deref()?, s.epoch)))
            .max_by_key(|(_, epoch)| *epoch)
    }

    /// The rows of the table, one per slot, then the next slot.
    pub(super) fn rows(&self) -> String {
        let mut out = String::new();
        for slot in &self.slots {
            let _ = writeln!(out, "{:<12} {}", "slot", slot.text());
        }
        let next = self.next.as_deref().unwrap_or(
            "unknown: the last term advertised no expression (a value of its own, or 0.2.0); pass --cron",
        );
        let _ = writeln!(out, "{:<12} {next}", "next slot");
        out
    }
}

/// The schedule's expression: `cron` (in `zone`) when given, or else the
/// one the last term advertised with its stamp.
pub(super) fn expression(
    cron: Option<&str>,
    zone: Option<&str>,
    advertised: Option<&str>,
) -> Option<ScheduleOptions> {
    let Some(cron) = cron else {
        return advertised.and_then(ScheduleOptions::from_advertised);
    };
    let options = ScheduleOptions::new(cron);
    Some(match zone {
        Some(zone) => options.with_time_zone(zone),
        None => options,
    })
}

impl SlotView {
    fn new(slot: &RecordedSlot) -> Self {
        SlotView {
            slot: slot.key.clone(),
            outcome: slot.outcome.as_str(),
            attempts: slot.attempts,
            epoch: slot.epoch,
            holder: slot.holder.clone(),
            retry_at: slot.retry_at.map(rfc3339),
            gave_up: slot.gave_up,
        }
    }

    /// `<slot> <outcome> (attempts N[, retry at T | , gave up]) holder H
    /// epoch E`; without the details for a slot that never ran.
    fn text(&self) -> String {
        let mut text = format!("{} {}", self.slot, self.outcome);
        if self.attempts > 0 {
            let _ = write!(text, " (attempts {}", self.attempts);
            if let Some(retry) = &self.retry_at {
                let _ = write!(text, ", retry at {retry}");
            } else if self.gave_up {
                text.push_str(", gave up");
            }
            text.push(')');
        }
        if let Some(holder) = &self.holder {
            let _ = write!(text, " holder {holder} epoch {}", self.epoch);
        }
        text
    }
}

/// An instant in UTC, RFC 3339, to the second as the record keeps it.
fn rfc3339(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time).map_or_else(|_| "-".to_owned(), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &[u8] = b"blob-mutex schedule v1\n\
        slot=2026-11-28T02:30:00Z done attempts=1 epoch=7 retry=- holder=web-1\n\
        slot=2026-11-28T02:30:10Z skipped attempts=0 epoch=0 retry=- holder=\n";

    #[test]
    fn the_rows_show_each_slot_with_its_outcome_and_holder_then_the_next_slot() {
        let now = SystemTime::from("2026-11-28T02:30:15Z".parse::<jiff::Timestamp>().unwrap());
        let every_ten = expression(Some("*/10 * * * * *"), None, None);
        let view = ScheduleView::new(RECORD, every_ten.as_ref(), now)
            .unwrap()
            .unwrap();
        assert_eq!(
            view.rows(),
            "slot         2026-11-28T02:30:00Z done (attempts 1) holder web-1 epoch 7\n\
             slot         2026-11-28T02:30:10Z skipped\n\
             next slot    2026-11-28T02:30:20Z\n"
        );
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"slots":[{"slot":"2026-11-28T02:30:00Z","outcome":"done","attempts":1,"epoch":7,"holder":"web-1","retry_at":null,"gave_up":false},{"slot":"2026-11-28T02:30:10Z","outcome":"skipped","attempts":0,"epoch":0,"holder":null,"retry_at":null,"gave_up":false}],"next":"2026-11-28T02:30:20Z"}"#
        );
        assert_eq!(ScheduleView::new(b"other state", None, now).unwrap(), None);
        assert_eq!(ScheduleView::new(b"", None, now).unwrap(), None);
    }

    /// A slot whose job began and has not ended (the mark its holder writes
    /// first: a failed entry due a second before its slot) shows as started
    /// on its holder, counting the run going on (the attempt its job was
    /// told), with no retry; a failed slot tried no more says it gave up.
    #[test]
    fn a_slot_whose_run_began_shows_as_started_on_its_holder_and_one_that_gave_up_says_so() {
        let record = b"blob-mutex schedule v1\n\
            slot=2026-11-28T02:29:50Z failed attempts=3 epoch=6 retry=- holder=web-1\n\
            slot=2026-11-28T02:30:00Z failed attempts=1 epoch=7 retry=2026-11-28T02:29:59Z holder=web-1\n\
            slot=2026-11-28T02:30:10Z failed attempts=0 epoch=8 retry=2026-11-28T02:30:09Z holder=web-2\n";
        let now = SystemTime::from("2026-11-28T02:30:15Z".parse::<jiff::Timestamp>().unwrap());
        let view = ScheduleView::new(record, None, now).unwrap().unwrap();
        assert_eq!(
            view.rows(),
            "slot         2026-11-28T02:29:50Z failed (attempts 3, gave up) holder web-1 epoch 6\n\
             slot         2026-11-28T02:30:00Z started (attempts 2) holder web-1 epoch 7\n\
             slot         2026-11-28T02:30:10Z started (attempts 1) holder web-2 epoch 8\n\
             next slot    unknown: the last term advertised no expression (a value of its own, or 0.2.0); pass --cron\n"
        );
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["slots"][0]["gave_up"], true);
        assert_eq!(json["slots"][0]["retry_at"], serde_json::Value::Null);
    }

    /// Without `--cron`, the expression is the one the last term
    /// advertised; `--cron` wins over it; any other value tells nothing.
    #[test]
    fn the_next_slot_comes_from_the_flags_or_else_from_what_the_last_term_advertised() {
        let now = SystemTime::from("2026-11-28T02:30:15Z".parse::<jiff::Timestamp>().unwrap());
        let next = |cron: Option<&str>, advertised: Option<&str>| {
            let options = expression(cron, None, advertised);
            ScheduleView::new(RECORD, options.as_ref(), now)
                .unwrap()
                .unwrap()
                .next
        };
        let berlin = Some("schedule tz=Europe/Berlin cron=30 2 * * *");
        assert_eq!(next(None, berlin).as_deref(), Some("2026-11-29T01:30:00Z"));
        assert_eq!(
            next(Some("*/10 * * * * *"), berlin).as_deref(),
            Some("2026-11-28T02:30:20Z")
        );
        assert_eq!(next(None, Some("10.0.0.7:8080")), None);
        assert_eq!(next(None, None), None);
    }
}
