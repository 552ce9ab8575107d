//! The options of a [`BlobSchedule`](super::BlobSchedule): its
//! expression and zone, catch-up window, overlap policy and retries.

use std::time::{Duration, SystemTime};

use super::record::KEEP_SETTLED;
use super::slots::Slots;
use crate::error::{Error, Result};
use crate::limits::{check_advertised, MAX_STATE_LEN};
use crate::options::MutexOptions;

/// A duration as an operator writes it: `12h`, `1m 30s`, `500ms`.
fn human(d: Duration) -> String {
    jiff::SignedDuration::try_from(d).map_or_else(|_| format!("{d:?}"), |d| format!("{d:#}"))
}

/// The longest holder name (see [`MutexOptions::with_holder`]).
const MAX_HOLDER_LEN: usize = 256;

/// The longest line of the record without its holder name: `slot=`, an
/// instant, `failed`, `attempts=` and `epoch=` at their longest, `retry=`
/// with an instant, `holder=` and the newline.
const LINE_LEN: usize = 115;

/// How a schedule's advertised value starts: `schedule tz=ZONE cron=EXPR`
/// (a zone name has no space; the expression is the rest).
const ADVERTISED: &str = "schedule tz=";

/// What to do with a slot that comes due while the previous slot's job
/// still runs (never two jobs at once, whatever the policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Overlap {
    /// Record it as skipped: it never runs late. The default, as
    /// Temporal's, and what a job that must not pile up wants.
    #[default]
    Skip,
    /// Run it once the running job has ended, if it is still within the
    /// catch-up window.
    Wait,
}

/// The options of a [`BlobSchedule`](super::BlobSchedule).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScheduleOptions {
    pub(super) cron: String,
    pub(super) time_zone: String,
    pub(super) catch_up: Duration,
    pub(super) overlap: Overlap,
    pub(super) retries: u32,
    pub(super) retry_backoff: Duration,
    pub(super) fail_stop: bool,
    pub(super) mutex: MutexOptions,
}

impl ScheduleOptions {
    /// A schedule of `cron`: five fields (minute, hour, day of month,
    /// month, day of week) or six with seconds first, in UTC, with a
    /// catch-up window of a minute, [`Overlap::Skip`], two retries of a
    /// failed job 10 s apart (doubling), fail-stop (see
    /// [`with_fail_stop`](Self::with_fail_stop)), and the default mutex
    /// options.
    #[must_use]
    pub fn new(cron: impl Into<String>) -> Self {
        ScheduleOptions {
            cron: cron.into(),
            time_zone: "UTC".to_owned(),
            catch_up: Duration::from_secs(60),
            overlap: Overlap::default(),
            retries: 2,
            retry_backoff: Duration::from_secs(10),
            fail_stop: true,
            mutex: MutexOptions::default(),
        }
    }

    /// The IANA time zone the expression is read in, spelled as the tz
    /// database spells it (`Europe/Berlin`; [`validate`](Self::validate)
    /// refuses `europe/berlin`, naming that spelling).
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = zone.into();
        self
    }

    /// How long after its instant, on storage's clock, a slot not done is
    /// still run (or retried); past it, it is recorded as missed and never
    /// runs. At least a second.
    ///
    /// A slot whose host died mid-job is run again only within the window:
    /// choose it longer than the job's run plus the lease plus a minute,
    /// since Azure may hold a lease that expired unreleased for up to a
    /// minute before another host can take it.
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_catch_up(mut self, window: Duration) -> Self {
        self.catch_up = window;
        self
    }

    /// The catch-up window (see [`with_catch_up`](Self::with_catch_up)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use blob_mutex::schedule::ScheduleOptions;
    ///
    /// let options = ScheduleOptions::new("0 2 * * *");
    /// assert_eq!(options.catch_up(), Duration::from_secs(60));
    /// ```
    #[must_use]
    pub fn catch_up(&self) -> Duration {
        self.catch_up
    }

    /// See [`Overlap`].
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// How many times a slot whose job failed is run again, within the
    /// window, the first `backoff` after the failure and each next one
    /// twice as long after the last.
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.retries = retries;
        self.retry_backoff = backoff;
        self
    }

    /// Whether the process exits when a slot's job neither stops within
    /// its grace once told to nor can be aborted (it blocks its thread),
    /// before the lease could expire (see
    /// [`MutexOptions::with_fail_stop`]). Default: `true`, whatever the
    /// mutex options say, so that no other host runs the next slot while
    /// such a job still runs here: "never two jobs at once" holds for every
    /// job. With `false` (and the mutex options' `fail_stop` off), it holds
    /// only for jobs that stop when told; the schedule then ends with
    /// [`Error::TaskNotStopped`] and the job runs on.
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_fail_stop(mut self, fail_stop: bool) -> Self {
        self.fail_stop = fail_stop;
        self
    }

    /// The options of the lease's campaign and terms (their `fail_stop`
    /// is on while [`with_fail_stop`](Self::with_fail_stop) is).
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_mutex(mut self, options: MutexOptions) -> Self {
        self.mutex = options;
        self
    }

    /// The first slot of the expression, in its time zone, strictly after
    /// `after`: `None` when none comes (a date that never does, or past
    /// the year 5000).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `cron` or `time_zone`.
    pub fn next_slot_after(&self, after: SystemTime) -> Result<Option<SystemTime>> {
        let after = jiff::Timestamp::try_from(after)
            .map_err(|e| Error::invalid("after", format!("out of range: {e}")))?;
        let slots = Slots::new(&self.cron, &self.time_zone)?;
        Ok(slots.after(after).map(SystemTime::from))
    }

    /// What a term of this schedule advertises when its mutex options
    /// advertise nothing of their own: `schedule tz=ZONE cron=EXPR`, read
    /// back by [`from_advertised`](Self::from_advertised). `None` when that
    /// would not be a valid advertised value (over 256 bytes, or not
    /// printable ASCII).
    pub(crate) fn advertisement(&self) -> Option<String> {
        let value = format!("{ADVERTISED}{} cron={}", self.time_zone, self.cron.trim());
        check_advertised(&value).ok().map(|()| value)
    }

    /// The expression and zone of a schedule, from what its term
    /// advertised (a [`Leader`](crate::term::Leader)'s or a
    /// [`LeaseInfo`](crate::store::LeaseInfo)'s `advertised`), with the
    /// other options at their defaults; `None` for any other value, or an
    /// expression or zone this version cannot read.
    ///
    /// A [`BlobSchedule`](super::BlobSchedule) advertises its expression
    /// and zone at each term's stamp, unless its mutex options advertise a
    /// value of their own (or the store keeps none), so that whoever reads
    /// the lease, `blob-mutex status` among them, can tell the next slot
    /// without being told the expression.
    #[must_use]
    pub fn from_advertised(value: &str) -> Option<ScheduleOptions> {
        let (zone, cron) = value.strip_prefix(ADVERTISED)?.split_once(" cron=")?;
        Slots::new(cron, zone).ok()?;
        Some(ScheduleOptions::new(cron).with_time_zone(zone))
    }

    /// The mutex options of the schedule's terms: its own, advertising the
    /// expression and zone when they advertise nothing and `store_keeps`
    /// an advertised value.
    pub(crate) fn term_options(&self, store_keeps: bool) -> MutexOptions {
        let mut mutex = self.mutex.clone();
        if self.fail_stop {
            mutex = mutex.with_fail_stop(true);
        }
        if mutex.advertised.is_none() && store_keeps {
            mutex.advertised = self.advertisement();
        }
        mutex
    }

    /// Checks the options, the expression and the time zone, and that the
    /// record cannot outgrow the state's limit of 4 MiB: it keeps every
    /// slot of one catch-up window and 16 more, each line at most 370 bytes
    /// with a holder name of 256 (with a shorter holder given in the mutex
    /// options, that length).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `cron`, `time_zone`, `catch_up`, or
    /// one of the mutex's options.
    pub fn validate(&self) -> Result<()> {
        let holder = self
            .mutex
            .holder
            .as_ref()
            .map_or(MAX_HOLDER_LEN, String::len);
        self.validate_for(holder)
    }

    /// [`validate`](Self::validate) for a holder name of `holder` bytes.
    pub(crate) fn validate_for(&self, holder: usize) -> Result<()> {
        let slots = Slots::new(&self.cron, &self.time_zone)?;
        if self.catch_up < Duration::from_secs(1) {
            return Err(Error::invalid(
                "catch_up",
                format!("{} is shorter than the least of 1s", human(self.catch_up)),
            ));
        }
        self.mutex.validate()?;
        let line = LINE_LEN + holder;
        let fit = (MAX_STATE_LEN / line).saturating_sub(KEEP_SETTLED + 1);
        // From a fixed instant, so that a check passes or fails alike on
        // every host; cron expressions repeat within the 400 days scanned.
        let from =
            jiff::Timestamp::from_second(1_767_225_600).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let most = slots.most_within(from, self.catch_up, fit + 1);
        if most > fit {
            return Err(Error::invalid(
                "catch_up",
                format!(
                    "a window of {} holds more than {fit} slots of {:?}, and the record, which \
                     keeps every slot of one window and 16 more at up to {line} bytes a line, \
                     could pass the state's limit of {MAX_STATE_LEN} bytes (4 MiB): shorten the \
                     window or space the slots further",
                    human(self.catch_up),
                    self.cron
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_slot_is_the_expressions_in_its_zone_strictly_after() {
        let at = |t: &str| SystemTime::from(t.parse::<jiff::Timestamp>().unwrap());
        let nightly = ScheduleOptions::new("30 2 * * *").with_time_zone("Europe/Berlin");
        assert_eq!(
            nightly.next_slot_after(at("2026-11-28T01:30:00Z")).unwrap(),
            Some(at("2026-11-29T01:30:00Z"))
        );
        assert_eq!(
            nightly.next_slot_after(at("2026-11-28T01:29:59Z")).unwrap(),
            Some(at("2026-11-28T01:30:00Z"))
        );
        let bad = ScheduleOptions::new("30 2 * * *").with_time_zone("Mars/Olympus");
        assert!(matches!(
            bad.next_slot_after(at("2026-11-28T01:30:00Z")),
            Err(Error::InvalidOption {
                field: "time_zone",
                ..
            })
        ));
    }

    /// A window whose slots could take the record past the state's limit
    /// is refused, naming the window and the expression: a slot a second
    /// for 12 h would pass it after about 10 h. One that fits, with the
    /// holder name of the options or the longest, is not.
    #[test]
    fn a_window_whose_record_could_outgrow_the_state_is_refused_naming_both() {
        let every_second = |window: u64| {
            ScheduleOptions::new("*/1 * * * * *").with_catch_up(Duration::from_secs(window))
        };
        let Err(Error::InvalidOption { field, reason }) = every_second(12 * 3600).validate() else {
            panic!("accepted");
        };
        assert_eq!(field, "catch_up");
        assert!(
            reason.contains("a window of 12h ")
                && reason.contains("*/1 * * * * *")
                && reason.contains("4 MiB"),
            "{reason}"
        );
        every_second(3 * 3600).validate().unwrap();
        // With a holder of 10 bytes, 8 h of slots fit (115 + 10 bytes a
        // line); with the longest holder, they could not.
        let short = every_second(8 * 3600)
            .with_mutex(MutexOptions::default().with_holder("web-1-4242".to_owned()));
        short.validate().unwrap();
        assert!(every_second(8 * 3600).validate().is_err());
        ScheduleOptions::new("30 2 * * *")
            .with_catch_up(Duration::from_secs(30 * 86_400))
            .validate()
            .unwrap();
        let Err(Error::InvalidOption { reason, .. }) = every_second(0).validate() else {
            panic!("a zero window accepted");
        };
        assert!(reason.starts_with("0s is shorter"), "{reason}");
    }

    #[test]
    fn a_schedule_advertises_its_expression_and_zone_and_reads_them_back() {
        for (cron, zone) in [
            ("30 2 * * *", "Europe/Berlin"),
            ("*/10 * * * * *", "UTC"),
            ("@daily", "America/New_York"),
        ] {
            let options = ScheduleOptions::new(cron).with_time_zone(zone);
            let advertised = options.term_options(true).advertised;
            assert_eq!(
                advertised.as_deref(),
                Some(format!("schedule tz={zone} cron={cron}").as_str())
            );
            let read = ScheduleOptions::from_advertised(&advertised.unwrap()).unwrap();
            assert_eq!((read.cron.as_str(), read.time_zone.as_str()), (cron, zone));
        }
        // A value of the options' own is kept; a store that keeps none
        // gets none; an expression too long for the stamp is not sent.
        let own = ScheduleOptions::new("* * * * *")
            .with_mutex(MutexOptions::default().with_advertised("10.0.0.7:8080".into()));
        assert_eq!(
            own.term_options(true).advertised.as_deref(),
            Some("10.0.0.7:8080")
        );
        assert_eq!(
            ScheduleOptions::new("* * * * *")
                .term_options(false)
                .advertised,
            None
        );
        let minutes = (0..60).map(|m| m.to_string()).collect::<Vec<_>>().join(",");
        let long = ScheduleOptions::new(format!("{minutes},{minutes} * * * *"));
        assert!(long.validate().is_ok());
        assert_eq!(long.term_options(true).advertised, None);
        for other in [
            "10.0.0.7:8080",
            "schedule tz=Mars/Olympus cron=* * * * *",
            "schedule tz=UTC cron=not cron",
            "schedule tz=UTC",
        ] {
            assert!(ScheduleOptions::from_advertised(other).is_none(), "{other}");
        }
    }
}
