//! When a lease set's balancer lists the whole set, and when its members
//! only.
//!
//! A listing of the whole set reads every member blob and every partition
//! blob: at 10 000 partitions, 10 000 blobs listed and parsed by every
//! instance every cycle, which costs the instance CPU and loads the storage
//! account far more than the renewals do. In a settled set (nobody joins or
//! leaves, every partition owned by a live member at its share) it tells
//! nothing new almost every cycle. So a cycle lists the members only
//! (`members/`), and the whole set only when [`whole_set_due`] says so:
//!
//! 1. the first cycle of a membership term (no full listing yet), or after
//!    a listing failed;
//! 2. the live members differ from those of the last full listing (a join,
//!    a leave, a crash once its member lease expired): known only once the
//!    members are listed, so such a cycle lists twice, the members then the
//!    whole set, and balances a join or a leave as soon as before;
//! 3. the last full listing left the set unsettled as this instance saw it
//!    ([`Unsettled`]), or this instance's own claims changed since then
//!    (a claim ended, or one has not started its term yet);
//! 4. and at least every [`FULL_LISTING_EVERY`] cycles anyway.
//!
//! Nothing is planned from a listing of the members: a cycle that is not
//! due has nothing new to plan from (its members and its own claims are as
//! the last full listing left them, and that listing was settled), and
//! `owners()` keeps what the last full listing showed.
//!
//! A pure decision, std only (no clock, no I/O), tested here rule by rule.

use std::collections::{BTreeMap, BTreeSet};

use super::balance::{share, Strategy, View};

/// The most cycles from one listing of the whole set to the next, in a
/// settled set: four.
///
/// In a settled set the full listing is what shows a partition freed on
/// another instance by a term that ended by itself (its lease broken, its
/// task failed) when that instance does not claim it back (it skips the
/// partition for a while), and what keeps `owners()` fresh: one full
/// listing in four cuts the blobs listed by three quarters (with M
/// partitions and N members, M / 4 + N a cycle instead of M + N), while
/// such a partition is seen within four cycles (20 s with defaults, less
/// than the 30 s a crashed owner's partitions wait for their leases) and
/// `owners()` is at most four cycles old. Eight would save only an eighth
/// more for twice the wait.
pub(crate) const FULL_LISTING_EVERY: u32 = 4;

/// Why a listing of the whole set left the set unsettled, as this instance
/// saw it once the cycle had planned from it. A settled set is none of
/// these: no move planned, every partition leased by a live member, every
/// member at its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsettled {
    /// The plan claimed or gave up a partition.
    Moved,
    /// A partition was neither leased nor this instance's: free (and so
    /// tracked as free for the orphan grace, which tracks exactly these).
    Free,
    /// A leased partition's holder was not a live member, or unknown.
    Stray,
    /// A live member (this one counted, with its claims) did not hold its
    /// share; never under a strategy without shares.
    OffShare,
}

/// Why a listing of the whole set that `view` shows left the set unsettled,
/// once the cycle planned from it: [`Unsettled::Moved`] when the plan
/// claimed or gave up a partition (`moved`), else [`Unsettled::Free`] when
/// a partition was free (`any_free`), else [`Unsettled::Stray`] when a
/// leased partition's holder is not a live member (or unknown), else
/// [`Unsettled::OffShare`] when a live member, this one counted with its
/// claims, does not hold its share (never under [`Strategy::Greedy`]).
#[must_use]
pub(crate) fn unsettled(
    view: &View<'_>,
    strategy: Strategy,
    moved: bool,
    any_free: bool,
) -> Option<Unsettled> {
    if moved {
        return Some(Unsettled::Moved);
    }
    if any_free {
        return Some(Unsettled::Free);
    }
    let mut all = view.members.clone();
    all.insert(view.me.to_owned());
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for (partition, holder) in view.leased {
        match holder.as_deref() {
            Some(h) if all.contains(h) => *held.entry(h).or_default() += 1,
            _ if view.mine.contains(partition) => {}
            _ => return Some(Unsettled::Stray),
        }
    }
    held.insert(view.me, view.mine.len());
    let off_share = strategy == Strategy::Balanced
        && all.iter().any(|m| {
            held.get(m.as_str()).copied().unwrap_or(0) != share(m, &all, view.partitions.len())
        });
    off_share.then_some(Unsettled::OffShare)
}

/// What the last listing of the whole set left, in this membership term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastFull {
    /// The live members it showed.
    pub(crate) members: BTreeSet<String>,
    /// Whether it left the set settled (see [`Unsettled`]).
    pub(crate) settled: bool,
    /// How many cycles listed the members only since.
    pub(crate) members_only: u32,
}

impl LastFull {
    /// After a listing of the whole set that showed `members`, and left the
    /// set `unsettled` for that reason or settled (`None`).
    #[must_use]
    pub(crate) fn new(members: BTreeSet<String>, unsettled: Option<Unsettled>) -> Self {
        LastFull {
            members,
            settled: unsettled.is_none(),
            members_only: 0,
        }
    }

    /// After a cycle that listed the members only.
    pub(crate) fn listed_members(&mut self) {
        self.members_only = self.members_only.saturating_add(1);
    }
}

/// What this cycle knows when it decides.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cycle<'a> {
    /// This instance's claims changed since the last full listing: one
    /// ended, or one has not started its term yet.
    pub(crate) claims_changed: bool,
    /// The live members this cycle's listing of the members showed; `None`
    /// before it is read.
    pub(crate) members: Option<&'a BTreeSet<String>>,
}

/// Whether this cycle lists the whole set (see the module docs for the
/// rules): `last` is what the last full listing of this membership term
/// left, `None` before the first or after a failed listing.
///
/// Called once before anything is listed (`members: None`), and, when that
/// says no, again with the members listed.
#[must_use]
pub(crate) fn whole_set_due(last: Option<&LastFull>, cycle: Cycle<'_>) -> bool {
    let Some(last) = last else {
        return true;
    };
    !last.settled
        || cycle.claims_changed
        || last.members_only.saturating_add(1) >= FULL_LISTING_EVERY
        || cycle.members.is_some_and(|m| *m != last.members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn settled(names: &[&str]) -> LastFull {
        LastFull::new(members(names), None)
    }

    #[test]
    fn a_settled_set_with_the_same_members_lists_its_members_only() {
        let last = settled(&["a", "b"]);
        let same = members(&["a", "b"]);
        assert!(!whole_set_due(Some(&last), Cycle::default()));
        let cycle = Cycle {
            members: Some(&same),
            ..Cycle::default()
        };
        assert!(!whole_set_due(Some(&last), cycle));
    }

    #[test]
    fn the_first_cycle_of_a_term_lists_the_whole_set() {
        assert!(whole_set_due(None, Cycle::default()));
        let m = members(&["a"]);
        let cycle = Cycle {
            members: Some(&m),
            ..Cycle::default()
        };
        assert!(whole_set_due(None, cycle));
    }

    #[test]
    fn a_join_a_leave_or_an_expired_member_lists_the_whole_set() {
        let last = settled(&["a", "b"]);
        for now in [&["a", "b", "c"][..], &["a"], &["a", "c"], &[]] {
            let now = members(now);
            let cycle = Cycle {
                members: Some(&now),
                ..Cycle::default()
            };
            assert!(whole_set_due(Some(&last), cycle), "{now:?}");
        }
    }

    #[test]
    fn a_listing_that_left_the_set_unsettled_is_followed_by_another() {
        let same = members(&["a", "b"]);
        for why in [
            Unsettled::Moved,
            Unsettled::Free,
            Unsettled::Stray,
            Unsettled::OffShare,
        ] {
            let last = LastFull::new(same.clone(), Some(why));
            assert!(!last.settled, "{why:?}");
            assert!(whole_set_due(Some(&last), Cycle::default()), "{why:?}");
        }
    }

    #[test]
    fn a_change_of_this_instance_claims_lists_the_whole_set() {
        let last = settled(&["a", "b"]);
        let cycle = Cycle {
            claims_changed: true,
            ..Cycle::default()
        };
        assert!(whole_set_due(Some(&last), cycle));
    }

    #[test]
    fn a_settled_set_lists_the_whole_set_every_fourth_cycle() {
        let mut last = settled(&["a", "b"]);
        let mut full = Vec::new();
        for cycle in 1..=12 {
            if whole_set_due(Some(&last), Cycle::default()) {
                full.push(cycle);
                last = settled(&["a", "b"]);
            } else {
                last.listed_members();
            }
        }
        assert_eq!(FULL_LISTING_EVERY, 4);
        assert_eq!(full, [4, 8, 12]);
    }

    #[test]
    fn the_count_of_cycles_cannot_overflow() {
        let mut last = settled(&["a"]);
        last.members_only = u32::MAX;
        last.listed_members();
        assert_eq!(last.members_only, u32::MAX);
        assert!(whole_set_due(Some(&last), Cycle::default()));
    }
}
