//! The slots other hosts ran, as this host learns of them: each reported
//! once ([`SlotOutcome::DoneElsewhere`](super::SlotOutcome::DoneElsewhere)),
//! from this host's first look on.

use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Included};

use jiff::Timestamp;

use super::record::{Entry, Fate, Record};

/// What this host has reported of other hosts' slots.
#[derive(Debug, Default)]
pub(super) struct Elsewhere {
    /// Storage's clock at the first look: slots up to it were settled
    /// before this host ran, and are not its to report.
    since: Option<Timestamp>,
    /// The slots reported, each while the record still lists it.
    reported: BTreeSet<Timestamp>,
}

impl Elsewhere {
    /// The slots of `record` up to `now` that a holder other than `me` ran
    /// to their end and that were not reported yet, oldest first; each is
    /// then counted as reported. The first call only notes where to begin.
    pub(super) fn news(
        &mut self,
        record: &Record,
        now: Timestamp,
        me: &str,
    ) -> Vec<(Timestamp, Entry)> {
        let Some(since) = self.since else {
            self.since = Some(now);
            return Vec::new();
        };
        let news: Vec<(Timestamp, Entry)> = record
            .slots
            .range((Excluded(since), Included(now)))
            .filter(|(at, e)| e.fate == Fate::Done && e.holder != me && !self.reported.contains(at))
            .map(|(at, e)| (*at, e.clone()))
            .collect();
        self.reported.extend(news.iter().map(|(at, _)| *at));
        // A slot the record let go never comes back: bounded by the record.
        match record.slots.keys().next() {
            Some(first) => self.reported.retain(|at| at >= first),
            None => self.reported.clear(),
        }
        news
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn done_by(holder: &str) -> Entry {
        Entry {
            fate: Fate::Done,
            attempts: 1,
            epoch: 7,
            retry_at: None,
            holder: holder.to_owned(),
        }
    }

    #[test]
    fn each_slot_another_host_ran_is_news_once_from_the_first_look_on() {
        let mut record = Record::default();
        record
            .slots
            .insert(at("2026-11-28T10:00:00Z"), done_by("other"));
        let mut seen = Elsewhere::default();
        assert!(
            seen.news(&record, at("2026-11-28T10:00:05Z"), "me")
                .is_empty(),
            "before this host looked"
        );

        record
            .slots
            .insert(at("2026-11-28T10:00:10Z"), done_by("other"));
        record
            .slots
            .insert(at("2026-11-28T10:00:20Z"), done_by("me"));
        let mut failed = done_by("other");
        failed.fate = Fate::Failed;
        record.slots.insert(at("2026-11-28T10:00:30Z"), failed);
        record
            .slots
            .insert(at("2026-11-28T10:00:40Z"), done_by("other"));
        let news = seen.news(&record, at("2026-11-28T10:00:35Z"), "me");
        let slots: Vec<Timestamp> = news.iter().map(|(at, _)| *at).collect();
        assert_eq!(
            slots,
            [at("2026-11-28T10:00:10Z")],
            "not its own, not a failure, not one to come"
        );
        assert_eq!(news[0].1.holder, "other");

        // The failed slot done by another host on its retry is news then.
        record
            .slots
            .get_mut(&at("2026-11-28T10:00:30Z"))
            .unwrap()
            .fate = Fate::Done;
        let slots: Vec<Timestamp> = seen
            .news(&record, at("2026-11-28T10:00:45Z"), "me")
            .into_iter()
            .map(|(at, _)| at)
            .collect();
        assert_eq!(
            slots,
            [at("2026-11-28T10:00:30Z"), at("2026-11-28T10:00:40Z")]
        );
        assert!(
            seen.news(&record, at("2026-11-28T10:00:45Z"), "me")
                .is_empty(),
            "reported once"
        );

        // What the record let go (the oldest first) is forgotten.
        record.slots.remove(&at("2026-11-28T10:00:00Z"));
        record.slots.remove(&at("2026-11-28T10:00:10Z"));
        seen.news(&record, at("2026-11-28T10:00:45Z"), "me");
        assert!(!seen.reported.contains(&at("2026-11-28T10:00:10Z")));
    }
}
