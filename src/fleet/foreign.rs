//! A lease held by a process that is not one of the schedule's hosts (a
//! `blob-mutex run`, a guard, a job of another shape on the same blob):
//! its slots cannot run while it holds it, and each host says so once a
//! slot, instead of campaigning in silence.

use std::collections::BTreeSet;

use jiff::Timestamp;

use super::ScheduleOptions;
use crate::store::{LeaseInfo, LeaseState};

/// The holder of the term that holds the lease now, when that term is not
/// a schedule's: it advertised no schedule's expression with its stamp. A
/// host of the schedule advertises one (unless its options advertise a
/// value of their own, which this cannot tell from a stranger's); a store
/// that keeps no advertised value tells nothing (`keeps_advertised`).
pub(super) fn foreign_holder(info: &LeaseInfo, me: &str, keeps_advertised: bool) -> Option<String> {
    if !keeps_advertised || info.state != LeaseState::Leased || info.epoch == 0 {
        return None;
    }
    let holder = info.holder.as_deref().filter(|h| *h != me)?;
    let a_schedule = info
        .advertised
        .as_deref()
        .and_then(ScheduleOptions::from_advertised)
        .is_some();
    (!a_schedule).then(|| holder.to_owned())
}

/// The slots this host could not run for a foreign holder, each said once.
#[derive(Debug, Default)]
pub(super) struct Strangers {
    blocked: BTreeSet<Timestamp>,
}

impl Strangers {
    /// Whether `slot` is news among the slots the lease's stranger kept
    /// from running; at most the last 64 are remembered.
    pub(super) fn blocked(&mut self, slot: Timestamp) -> bool {
        let news = self.blocked.insert(slot);
        while self.blocked.len() > 64 {
            self.blocked.pop_first();
        }
        news
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leased(holder: &str, advertised: Option<&str>) -> LeaseInfo {
        let mut info = LeaseInfo::new(LeaseState::Leased);
        info.holder = Some(holder.to_owned());
        info.epoch = 7;
        info.advertised = advertised.map(str::to_owned);
        info
    }

    /// A term that advertised no schedule holds the lease as a stranger;
    /// a schedule's term, this host's own, a free lease, or a store that
    /// keeps no advertised value tell of none.
    #[test]
    fn a_term_that_advertised_no_schedule_is_a_stranger() {
        let schedule = Some("schedule tz=UTC cron=*/10 * * * * *");
        assert_eq!(
            foreign_holder(&leased("web-9", None), "web-1", true).as_deref(),
            Some("web-9")
        );
        assert_eq!(
            foreign_holder(&leased("web-9", Some("10.0.0.7:80")), "web-1", true).as_deref(),
            Some("web-9")
        );
        assert_eq!(
            foreign_holder(&leased("web-2", schedule), "web-1", true),
            None
        );
        assert_eq!(foreign_holder(&leased("web-1", None), "web-1", true), None);
        assert_eq!(foreign_holder(&leased("web-9", None), "web-1", false), None);
        let mut free = leased("web-9", None);
        free.state = LeaseState::Expired;
        assert_eq!(foreign_holder(&free, "web-1", true), None);
        let mut strangers = Strangers::default();
        let slot: Timestamp = "2026-11-28T10:00:10Z".parse().unwrap();
        assert!(strangers.blocked(slot));
        assert!(!strangers.blocked(slot));
    }
}
