//! A term of the lease that ran another expression or zone than this
//! host's: hosts of one blob whose `--cron` differs (a rolling change, a
//! typo on one host) each run their own slots, and each says so once per
//! difference instead of running them in silence.

use std::collections::BTreeSet;

use super::ScheduleOptions;

/// The expression and zone of the term that advertised `advertised`, in
/// words (`cron=EXPR tz=ZONE`), when they are not `mine`: the same fields
/// in other spacing or case are the same expression. `None` for a value
/// that is no schedule's (a term that advertised a value of its own).
pub(super) fn differs(advertised: &str, mine: &ScheduleOptions) -> Option<String> {
    let theirs = ScheduleOptions::from_advertised(advertised)?;
    let same = theirs.time_zone == mine.time_zone && fields(&theirs.cron) == fields(&mine.cron);
    (!same).then(|| words(&theirs))
}

/// `cron=EXPR tz=ZONE`.
pub(super) fn words(options: &ScheduleOptions) -> String {
    format!("cron={} tz={}", options.cron.trim(), options.time_zone)
}

/// An expression's fields, as croner reads them (it ignores case).
fn fields(cron: &str) -> Vec<String> {
    cron.split_whitespace().map(str::to_uppercase).collect()
}

/// The other expressions this host has warned of, each once; at most the
/// last 16 are remembered.
#[derive(Debug, Default)]
pub(super) struct Differences {
    warned: BTreeSet<String>,
}

impl Differences {
    /// Whether `other` (see [`differs`]) is news.
    pub(super) fn news(&mut self, other: &str) -> bool {
        if self.warned.contains(other) {
            return false;
        }
        if self.warned.len() == 16 {
            self.warned.pop_first();
        }
        self.warned.insert(other.to_owned());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another expression or zone differs; the same fields spaced or cased
    /// otherwise do not, nor does a value that is no schedule's.
    #[test]
    fn another_expression_or_zone_differs_and_each_is_news_once() {
        let mine = ScheduleOptions::new("*/10 * * * * *");
        let advertised = |cron: &str, zone: &str| format!("schedule tz={zone} cron={cron}");
        assert_eq!(
            differs(&advertised("*/15 * * * * *", "UTC"), &mine).as_deref(),
            Some("cron=*/15 * * * * * tz=UTC")
        );
        assert_eq!(
            differs(&advertised("*/10 * * * * *", "Europe/Berlin"), &mine).as_deref(),
            Some("cron=*/10 * * * * * tz=Europe/Berlin")
        );
        assert_eq!(differs(&advertised("*/10  *  * * * *", "UTC"), &mine), None);
        let weekdays = ScheduleOptions::new("30 2 * * mon-fri");
        assert_eq!(
            differs(&advertised("30 2 * * MON-FRI", "UTC"), &weekdays),
            None
        );
        assert_eq!(differs("10.0.0.7:8080", &mine), None);
        let mut differences = Differences::default();
        assert!(differences.news("cron=*/15 * * * * * tz=UTC"));
        assert!(!differences.news("cron=*/15 * * * * * tz=UTC"));
        assert!(differences.news("cron=*/20 * * * * * tz=UTC"));
    }
}
