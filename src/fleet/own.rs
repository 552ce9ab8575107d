//! What this host knows of its own runs that the record may not tell: the
//! marks it left whose job never began or whose end it reported, and the
//! runs whose record's answer was lost, reported once a read of the record
//! tells whether it landed.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use super::record::Record;

/// A run of this host whose job succeeded and whose record's answer was
/// lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unconfirmed {
    pub(super) epoch: u64,
    pub(super) attempt: u32,
    /// Why the write's answer was lost.
    pub(super) error: String,
}

/// What a read of the record told of an unconfirmed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Told {
    /// Its record landed: the slot is done under its epoch.
    Landed(Timestamp, Unconfirmed),
    /// It did not: the record holds something else for the slot.
    Lost(Timestamp, Unconfirmed),
}

/// This host's knowledge of its own runs, bounded by the record: a slot
/// the record no longer lists is forgotten.
#[derive(Debug, Default)]
pub(super) struct Own {
    /// By slot, the epochs of this host's marks that name no run cut
    /// short: the job never began, or its end was reported.
    explained: BTreeMap<Timestamp, BTreeSet<u64>>,
    unconfirmed: BTreeMap<Timestamp, Unconfirmed>,
}

impl Own {
    /// The mark of `epoch` on `slot` names no run that was cut short.
    pub(super) fn explain(&mut self, slot: Timestamp, epoch: u64) {
        self.explained.entry(slot).or_default().insert(epoch);
    }

    /// The mark of `epoch` on `slot` landed and its job runs: a later term
    /// that finds it finds a run cut short.
    pub(super) fn unexplain(&mut self, slot: Timestamp, epoch: u64) {
        if let Some(epochs) = self.explained.get_mut(&slot) {
            epochs.remove(&epoch);
        }
    }

    /// Whether this host knows that its mark of `epoch` on `slot` names
    /// no run cut short.
    pub(super) fn explains(&self, slot: Timestamp, epoch: u64) -> bool {
        self.explained
            .get(&slot)
            .is_some_and(|epochs| epochs.contains(&epoch))
    }

    /// The job of `slot` succeeded and its record's answer was lost.
    pub(super) fn unconfirmed(&mut self, slot: Timestamp, run: Unconfirmed) {
        self.explain(slot, run.epoch);
        self.unconfirmed.insert(slot, run);
    }

    /// The unconfirmed run of `slot`, taken: its record's write settled.
    pub(super) fn confirmed(&mut self, slot: Timestamp) -> Option<Unconfirmed> {
        self.unconfirmed.remove(&slot)
    }

    /// The answer to the write of `slot`'s record was lost, with `error`:
    /// its run stays unconfirmed, for a read to tell.
    pub(super) fn lost_answer(&mut self, slot: Timestamp, error: String) {
        if let Some(run) = self.unconfirmed.get_mut(&slot) {
            run.error = error;
        }
    }

    /// What `record` tells of the unconfirmed runs: each is told once. A
    /// run whose slot the record let go is told lost: its record cannot
    /// be found, and a done slot is let go only after 16 more.
    pub(super) fn tell(&mut self, record: &Record) -> Vec<Told> {
        let told = std::mem::take(&mut self.unconfirmed)
            .into_iter()
            .map(|(slot, run)| match record.slots.get(&slot) {
                Some(e) if e.epoch == run.epoch && !e.is_started(slot) => Told::Landed(slot, run),
                _ => Told::Lost(slot, run),
            })
            .collect();
        // A slot the record no longer lists never comes back.
        self.explained
            .retain(|slot, _| record.slots.contains_key(slot));
        told
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::{Entry, Fate};
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn run(epoch: u64) -> Unconfirmed {
        Unconfirmed {
            epoch,
            attempt: 1,
            error: "inspect timed out".to_owned(),
        }
    }

    /// A record whose slot is done under the run's epoch tells it landed;
    /// one that still holds the run's mark, or another term's entry, tells
    /// it lost; each once.
    #[test]
    fn a_read_of_the_record_tells_whether_an_unconfirmed_run_landed() {
        let (a, b, c) = (
            at("2026-11-28T10:00:10Z"),
            at("2026-11-28T10:00:20Z"),
            at("2026-11-28T10:00:30Z"),
        );
        let mut own = Own::default();
        own.unconfirmed(a, run(7));
        own.unconfirmed(b, run(8));
        own.unconfirmed(c, run(9));
        let mut record = Record::default();
        record.slots.insert(
            a,
            Entry {
                fate: Fate::Done,
                attempts: 1,
                epoch: 7,
                retry_at: None,
                holder: "h".to_owned(),
            },
        );
        record.slots.insert(b, Entry::started(b, 1, 8, "h"));
        record.slots.insert(c, Entry::started(c, 1, 10, "other"));
        assert_eq!(
            own.tell(&record),
            [
                Told::Landed(a, run(7)),
                Told::Lost(b, run(8)),
                Told::Lost(c, run(9))
            ]
        );
        assert!(own.tell(&record).is_empty(), "told twice");
        assert!(own.explains(b, 8) && own.explains(c, 9));
        assert!(!own.explains(c, 10));
        // Forgotten once the record lets the slot go.
        record.slots.remove(&b);
        own.tell(&record);
        assert!(!own.explains(b, 8));
    }
}
