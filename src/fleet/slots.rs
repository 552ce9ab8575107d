//! The slots of a schedule: a cron expression read in a time zone, and the
//! instants it names.

use jiff::tz::TimeZone;
use jiff::Timestamp;

use crate::error::{Error, Result};

/// A cron expression in a time zone: the instants at which a schedule's
/// slots come due.
///
/// The expression has five fields (minute, hour, day of month, month, day
/// of week) or six with seconds first, as `croner` reads them (its
/// nicknames, `@daily` and the like, included); croner's seventh field, a
/// year, is not read: an expression of seven fields is refused. Daylight-saving changes
/// are `croner`'s rule (the Open Cron Pattern Specification's): in a gap, a
/// job at a fixed time runs at the first valid time after it, and the slots
/// of a job with wildcards or steps that fall in the gap do not exist; in a
/// repeated hour, a job at a fixed time runs once, at the first pass, and
/// one with wildcards or steps runs at every matching instant of both
/// passes. A slot is an instant (a [`Timestamp`]): the two passes of a
/// repeated hour are two slots.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    cron: croner::Cron,
    zone: TimeZone,
}

impl Slots {
    /// The slots of `expression` in the IANA time zone `zone` (`UTC` for
    /// none), spelled as the tz database spells it (`Europe/Berlin`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `cron` or `time_zone`.
    pub(crate) fn new(expression: &str, zone: &str) -> Result<Slots> {
        // croner would read a seventh field, a year, and words its refusal
        // of other counts as "between 5 and 7": the docs promise five or
        // six, so the count is checked here, in their words.
        let fields = expression.split_whitespace().count();
        if !expression.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
            let plural = if fields == 1 { "" } else { "s" };
            let year = if fields == 7 {
                "; a year field is not read"
            } else {
                ""
            };
            return Err(Error::invalid(
                "cron",
                format!(
                    "{expression:?} has {fields} field{plural}: an expression has five fields \
                     (minute, hour, day of month, month, day of week), or six with seconds \
                     first{year}"
                ),
            ));
        }
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(expression)
            .map_err(|e| {
                Error::invalid(
                    "cron",
                    format!("{expression:?} is not a cron expression: {e}"),
                )
            })?;
        let name = zone;
        let zone = TimeZone::get(name).map_err(|e| {
            Error::invalid(
                "time_zone",
                format!("{name:?} is not an IANA time zone: {e}"),
            )
        })?;
        // The database is searched without regard to case; the name is
        // not: hosts compare the zone their terms advertise, and a job that
        // passes it on as `TZ` meets a case-sensitive file system.
        if let Some(spelled) = zone.iana_name().filter(|spelled| *spelled != name) {
            return Err(Error::invalid(
                "time_zone",
                format!("{name:?} is spelled {spelled:?} in the tz database: use that"),
            ));
        }
        Ok(Slots { cron, zone })
    }

    /// The first slot strictly after `after`; `None` when the expression
    /// names none (a date that never comes, or past the year 5000).
    pub(crate) fn after(&self, after: Timestamp) -> Option<Timestamp> {
        let start = after.to_zoned(self.zone.clone());
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|next| next.timestamp())
    }

    /// The most slots that fall within one `window`, over the first
    /// [`SCANNED_SLOTS`] slots (or 400 days) after `from`, and no more than
    /// `enough` (the scan stops there). A window longer than the slots
    /// scanned is counted at their rate: as many as the scanned stretch
    /// holds, times how many such stretches the window spans.
    pub(crate) fn most_within(
        &self,
        from: Timestamp,
        window: std::time::Duration,
        enough: usize,
    ) -> usize {
        let window = jiff::SignedDuration::try_from(window).unwrap_or(jiff::SignedDuration::MAX);
        let last = from
            .checked_add(jiff::SignedDuration::from_hours(24 * 400))
            .unwrap_or(Timestamp::MAX);
        let mut within = std::collections::VecDeque::new();
        let (mut most, mut scanned) = (0, 0);
        let mut cursor = from;
        let mut first = None;
        while scanned < SCANNED_SLOTS {
            let Some(slot) = self.after(cursor).filter(|s| *s <= last) else {
                return most;
            };
            cursor = slot;
            scanned += 1;
            first.get_or_insert(slot);
            within.push_back(slot);
            while within
                .front()
                .is_some_and(|first| slot.duration_since(*first) > window)
            {
                within.pop_front();
            }
            most = most.max(within.len());
            if most >= enough {
                return enough;
            }
        }
        let span = first.map_or(jiff::SignedDuration::ZERO, |f| cursor.duration_since(f));
        if span.is_positive() && window > span {
            let rate = window.as_secs_f64() / span.as_secs_f64();
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            // a count of slots, capped at `enough` below
            let estimate = (scanned as f64 * rate).ceil() as usize;
            most = most.max(estimate);
        }
        most.min(enough)
    }
}

/// How many slots [`Slots::most_within`] looks at, at most.
const SCANNED_SLOTS: usize = 4_096;

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// Slots a second for a minute each hour: 720 within 12 h, counted,
    /// though they come a second apart; a slot a second is counted at its
    /// rate past the slots scanned.
    #[test]
    fn the_most_slots_within_a_window_are_counted_or_estimated_at_their_rate() {
        let from = at("2026-01-01T00:00:00Z");
        let hours = std::time::Duration::from_secs(12 * 3600);
        let bursts = Slots::new("* 0 * * * *", "UTC").unwrap();
        assert_eq!(bursts.most_within(from, hours, 100_000), 12 * 60 + 1);
        let every_second = Slots::new("* * * * * *", "UTC").unwrap();
        let most = every_second.most_within(from, hours, 100_000);
        assert!((43_200..=43_300).contains(&most), "{most}");
        assert_eq!(every_second.most_within(from, hours, 500), 500);
        let nightly = Slots::new("30 2 * * *", "UTC").unwrap();
        assert_eq!(nightly.most_within(from, hours, 100_000), 1);
    }

    #[test]
    fn seconds_are_optional_and_the_next_slot_is_strictly_after() {
        let every_ten = Slots::new("*/10 * * * * *", "UTC").unwrap();
        assert_eq!(
            every_ten.after(at("2026-11-28T10:00:00Z")),
            Some(at("2026-11-28T10:00:10Z"))
        );
        assert_eq!(
            every_ten.after(at("2026-11-28T10:00:03.5Z")),
            Some(at("2026-11-28T10:00:10Z"))
        );
        let nightly = Slots::new("30 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            nightly.after(at("2026-11-28T10:00:00Z")),
            Some(at("2026-11-29T01:30:00Z"))
        );
    }

    #[test]
    fn bad_expressions_and_zones_name_their_option() {
        let e = Slots::new("61 * * * *", "UTC").unwrap_err();
        assert!(e.to_string().contains("cron"), "{e}");
        let e = Slots::new("* * * * *", "Mars/Olympus").unwrap_err();
        assert!(e.to_string().contains("time_zone"), "{e}");
    }

    /// Five fields or six, as the docs say: a seventh (a year, which croner
    /// would read) is refused with the count and the two forms that are
    /// read; a nickname is one field of its own.
    #[test]
    fn an_expression_of_seven_fields_is_refused_saying_five_or_six() {
        for seven in ["0 30 2 * * * 2026", "0 30 2 * * * *"] {
            let Err(Error::InvalidOption { field, reason }) = Slots::new(seven, "UTC") else {
                panic!("{seven:?} accepted");
            };
            assert_eq!(field, "cron");
            assert!(
                reason.contains(&format!("{seven:?}"))
                    && reason.contains("7 fields")
                    && reason.contains("five fields")
                    && reason.contains("six"),
                "{reason}"
            );
        }
        for read in ["30 2 * * *", "0 30 2 * * *", "@daily", "  30 2 * * *  "] {
            Slots::new(read, "UTC").unwrap();
        }
    }

    /// A zone is spelled as the tz database spells it: one spelled
    /// otherwise is refused with the spelling to use, since hosts compare
    /// the zone their terms advertise, and a job's `TZ` is looked up by
    /// file name on a case-sensitive file system.
    #[test]
    fn a_zone_not_spelled_as_the_tz_database_spells_it_is_refused_naming_its_spelling() {
        for (typed, spelled) in [
            ("europe/berlin", "Europe/Berlin"),
            ("AMERICA/NEW_YORK", "America/New_York"),
            ("utc", "UTC"),
        ] {
            let Err(Error::InvalidOption { field, reason }) = Slots::new("30 2 * * *", typed)
            else {
                panic!("{typed:?} accepted");
            };
            assert_eq!(field, "time_zone");
            assert!(
                reason.contains(&format!("{typed:?}")) && reason.contains(&format!("{spelled:?}")),
                "{reason}"
            );
            Slots::new("30 2 * * *", spelled).unwrap();
        }
    }

    /// Europe/Berlin springs forward on 2026-03-29 at 02:00 (to 03:00) and
    /// falls back on 2026-10-25 at 03:00 (to 02:00).
    #[test]
    fn daylight_saving_changes_follow_croner_s_rule() {
        let fixed = Slots::new("30 2 * * *", "Europe/Berlin").unwrap();
        // The gap: 02:30 does not exist; the job runs at 03:00 (01:00 UTC).
        assert_eq!(
            fixed.after(at("2026-03-28T23:00:00Z")),
            Some(at("2026-03-29T01:00:00Z"))
        );
        // The repeated hour: 02:30 runs once, at its first pass (00:30 UTC).
        let first = fixed.after(at("2026-10-24T23:00:00Z")).unwrap();
        assert_eq!(first, at("2026-10-25T00:30:00Z"));
        assert_eq!(fixed.after(first), Some(at("2026-10-26T01:30:00Z")));
        // Every 30 minutes: both passes of the repeated hour run.
        let half_hourly = Slots::new("*/30 * * * *", "Europe/Berlin").unwrap();
        let mut slots = vec![];
        let mut t = at("2026-10-24T23:45:00Z");
        while t < at("2026-10-25T02:00:00Z") {
            t = half_hourly.after(t).unwrap();
            slots.push(t.to_string());
        }
        assert_eq!(
            slots,
            [
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T01:30:00Z",
                "2026-10-25T02:00:00Z"
            ]
        );
    }
}
