//! The record as this host last knew it, so that a record found gone (the
//! lease blob deleted or made anew, or storage restarted without its data)
//! is said, naming the runs it held under way, and not begun again in
//! silence.

use std::fmt::Write as _;

use jiff::Timestamp;

use super::record::Record;

/// A run under way in a record: its slot, holder and epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UnderWay {
    pub(super) slot: Timestamp,
    pub(super) holder: String,
    pub(super) epoch: u64,
}

/// What this host last knew of the record: whether it had begun, and the
/// runs it held under way (their start marks).
#[derive(Debug, Default)]
pub(super) struct Known {
    begun: bool,
    under_way: Vec<UnderWay>,
}

impl Known {
    /// This host read `record`, or wrote it and the write landed. A record
    /// not begun tells nothing: it may be the one this host knew, gone.
    pub(super) fn knew(&mut self, record: &Record) {
        if !begun(record) {
            return;
        }
        self.begun = true;
        self.under_way = record
            .slots
            .iter()
            .filter(|(at, e)| e.is_started(**at))
            .map(|(at, e)| UnderWay {
                slot: *at,
                holder: e.holder.clone(),
                epoch: e.epoch,
            })
            .collect();
    }

    /// When `record`, just read, is not begun and this host knew one that
    /// was: the runs that one held under way. Told once: until this host
    /// knows a begun record again.
    pub(super) fn vanished(&mut self, record: &Record) -> Option<Vec<UnderWay>> {
        if begun(record) || !self.begun {
            return None;
        }
        self.begun = false;
        Some(std::mem::take(&mut self.under_way))
    }
}

/// `runs` in words: `the run of SLOT on HOLDER (epoch E) was under way`,
/// or that none was.
pub(super) fn under_way(runs: &[UnderWay]) -> String {
    if runs.is_empty() {
        return "no run was under way".to_owned();
    }
    let mut text = String::from("the run of ");
    for (i, run) in runs.iter().enumerate() {
        if i > 0 {
            text.push_str(" and of ");
        }
        let _ = write!(text, "{} on {} (epoch {})", run.slot, run.holder, run.epoch);
    }
    text.push_str(if runs.len() == 1 {
        " was under way"
    } else {
        " were under way"
    });
    text
}

/// Whether `record` has begun: it settled a slot, or lists one.
fn begun(record: &Record) -> bool {
    record.through.is_some() || !record.slots.is_empty()
}

#[cfg(test)]
mod tests {
    use super::super::record::{Entry, Fate};
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// A record known begun, then read empty, vanished once, with the run
    /// it held under way (a start mark), not its ended runs; an empty
    /// record read first, or again, tells nothing.
    #[test]
    fn a_begun_record_read_empty_vanished_once_with_the_runs_it_held_under_way() {
        let mut known = Known::default();
        let empty = Record::default();
        assert_eq!(known.vanished(&empty), None, "never knew one");
        let (done, marked) = (at("2026-11-28T10:00:10Z"), at("2026-11-28T10:00:20Z"));
        let mut record = Record {
            through: Some(at("2026-11-28T10:00:00Z")),
            ..Record::default()
        };
        record.slots.insert(
            done,
            Entry {
                fate: Fate::Done,
                attempts: 1,
                epoch: 6,
                retry_at: None,
                holder: "h1".to_owned(),
            },
        );
        record
            .slots
            .insert(marked, Entry::started(marked, 1, 7, "h2"));
        known.knew(&record);
        known.knew(&empty);
        assert_eq!(known.vanished(&record), None, "still there");
        let gone = known.vanished(&empty).unwrap();
        assert_eq!(
            gone,
            [UnderWay {
                slot: marked,
                holder: "h2".to_owned(),
                epoch: 7
            }]
        );
        assert_eq!(
            under_way(&gone),
            "the run of 2026-11-28T10:00:20Z on h2 (epoch 7) was under way"
        );
        assert_eq!(known.vanished(&empty), None, "told twice");
        assert_eq!(under_way(&[]), "no run was under way");
    }
}
