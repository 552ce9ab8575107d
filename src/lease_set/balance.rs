//! What one instance of a lease set does in one balance cycle, decided from
//! one listing: which free partitions to claim, and which ones to give up.
//! A pure function, so that every instance reading the same listing agrees.
//!
//! # How many to give up
//!
//! An instance over its share gives up, in one cycle, as many partitions as
//! the other live members lack and nothing else will give them: at most its
//! excess, and at most the others' shortfall counted from the listing (the
//! `holder` of each leased partition) less the partitions that are free,
//! held by an instance that is no longer a member, or held by an unknown
//! holder (being claimed). With every instance seeing the same listing the
//! excesses add up to exactly that shortfall, so a join is balanced in about
//! two cycles whatever M and N: one in which the over-loaded instances drain
//! and release their excess, one in which the newcomer claims it. A move is
//! still drain-then-release, and a partition is only given up when the
//! listing shows a member that lacks it: the number of moves is the least
//! the new shares need, not bounded by a rate. A holder recorded before the
//! newest term was stamped can make the count one off for a cycle; the
//! instance that ends up under its share claims it back in the next.
//!
//! # Partitions nobody's share would take
//!
//! Shares are counted over the members the listing shows, and a crashed
//! instance stays a member until its member blob's lease expires. When two
//! instances crash within one lease, the first one's partitions come free
//! while the second still counts: the live members' shares then add up to
//! fewer than the partitions, and one or more free partitions are nobody's
//! to claim until the second member expires, a whole lease later. So a
//! partition that every listing has shown free for [`ORPHAN_CYCLES`]
//! balance intervals is claimed by any instance, at its share or over it; a
//! live member under its share claims within one cycle, so the grace only
//! ever runs out on partitions nobody is claiming. Once the shares grow
//! again the balance gives the extra partitions up as usual.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Jitter;

/// How many balance intervals a partition stays free, by every listing,
/// before any instance claims it whatever its share: two, so that a live
/// member under its share (which claims within one cycle, jittered by up to
/// 20 %) always has the first go.
pub(crate) const ORPHAN_CYCLES: u32 = 2;

/// How an instance decides how many partitions to own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// Every live instance owns ⌊M/N⌋ or ⌈M/N⌉ of the M partitions: the
    /// first `M mod N` instances by name own one more. An instance over its
    /// share gives up the partitions others lack (drain, then release; see
    /// the module docs); one under it claims free partitions. The default.
    #[default]
    Balanced,
    /// Claim every free partition; never give one up. Orphaned partitions
    /// are owned again fastest, at the price of an uneven spread.
    Greedy,
}

/// The decision of one cycle.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    /// Free partitions to claim, in the order to claim them.
    pub(crate) claim: Vec<String>,
    /// Partitions to give up (drain, then release).
    pub(crate) release: Vec<String>,
}

/// What one listing says, from one instance's point of view.
pub(crate) struct View<'a> {
    /// This instance's name.
    pub(crate) me: &'a str,
    /// The names of the live members (leased member blobs), this one included
    /// or not (it is counted either way).
    pub(crate) members: &'a BTreeSet<String>,
    /// Every partition of the set.
    pub(crate) partitions: &'a [String],
    /// The partitions this instance owns (or is claiming) now.
    pub(crate) mine: &'a BTreeSet<String>,
    /// The partitions whose lease is held by anyone (the listing's view),
    /// with the holder their metadata names, if any.
    pub(crate) leased: &'a BTreeMap<String, Option<String>>,
    /// Free partitions that every listing has shown free for the grace of
    /// [`ORPHAN_CYCLES`] intervals: anyone's to claim.
    pub(crate) orphaned: &'a BTreeSet<String>,
}

/// The partitions that are neither leased by the listing nor this
/// instance's own (claimed or owned).
pub(crate) fn free<'a>(
    partitions: &'a [String],
    mine: &BTreeSet<String>,
    leased: &BTreeMap<String, Option<String>>,
) -> Vec<&'a String> {
    partitions
        .iter()
        .filter(|p| !mine.contains(*p) && !leased.contains_key(*p))
        .collect()
}

/// Since when each listing in a row has shown a partition free.
#[derive(Debug, Default)]
pub(crate) struct FreeSince(BTreeMap<String, Instant>);

impl FreeSince {
    /// Records one listing's free partitions at `now`, and returns those free
    /// in every listing since at least `grace` ago.
    pub(crate) fn observe(
        &mut self,
        free: &[&String],
        now: Instant,
        grace: Duration,
    ) -> BTreeSet<String> {
        let seen: BTreeSet<&String> = free.iter().copied().collect();
        self.0.retain(|p, _| seen.contains(p));
        for p in seen {
            self.0.entry(p.clone()).or_insert(now);
        }
        self.0
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= grace)
            .map(|(p, _)| p.clone())
            .collect()
    }
}

/// This instance's share of the partitions under the balanced strategy.
pub(crate) fn share(me: &str, members: &BTreeSet<String>, partitions: usize) -> usize {
    let mut all: Vec<&str> = members.iter().map(String::as_str).collect();
    if !members.contains(me) {
        all.push(me);
        all.sort_unstable();
    }
    let n = all.len();
    let index = all.iter().position(|m| *m == me).unwrap_or(0);
    partitions / n + usize::from(index < partitions % n)
}

/// Decides one cycle. Free partitions are claimed in random order, so that
/// instances that see the same free partitions tend not to collide.
pub(crate) fn plan(view: &View<'_>, strategy: Strategy, random: &mut Jitter) -> Plan {
    let mut free = free(view.partitions, view.mine, view.leased);
    shuffle(&mut free, random);
    let owned = view.mine.len();
    match strategy {
        Strategy::Greedy => Plan {
            claim: free.into_iter().cloned().collect(),
            release: Vec::new(),
        },
        Strategy::Balanced => {
            let target = share(view.me, view.members, view.partitions.len());
            match owned.cmp(&target) {
                Ordering::Less => Plan {
                    claim: with_orphans(
                        free.into_iter().take(target - owned).cloned().collect(),
                        view,
                    ),
                    release: Vec::new(),
                },
                // At or over its share, with orphans in view: claim them and
                // give nothing up this cycle. A partition free for two
                // cycles means no live member lacks one.
                _ if !view.orphaned.is_empty() => Plan {
                    claim: with_orphans(Vec::new(), view),
                    release: Vec::new(),
                },
                // The same choice every cycle: the last by name.
                Ordering::Greater => Plan {
                    claim: Vec::new(),
                    release: view
                        .mine
                        .iter()
                        .rev()
                        .take((owned - target).min(others_lack(view, free.len())))
                        .cloned()
                        .collect(),
                },
                Ordering::Equal => Plan::default(),
            }
        }
    }
}

/// `claim`, then the orphaned partitions it does not hold yet.
fn with_orphans(mut claim: Vec<String>, view: &View<'_>) -> Vec<String> {
    let extra: Vec<String> = view
        .orphaned
        .iter()
        .filter(|p| !claim.contains(p) && !view.mine.contains(*p))
        .cloned()
        .collect();
    claim.extend(extra);
    claim
}

/// How many partitions the other live members lack, by the listing, beyond
/// the `free` ones and those whose holder is unknown or no longer a member
/// (they are being claimed, or will be free once their lease expires).
fn others_lack(view: &View<'_>, free: usize) -> usize {
    let mut all: BTreeSet<String> = view.members.clone();
    all.insert(view.me.to_owned());
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    let mut coming = free;
    for (partition, holder) in view.leased {
        match holder.as_deref() {
            // Another member's, by the listing, even if this instance is
            // claiming it too: counting it as theirs gives up less, not more.
            Some(h) if h != view.me && all.contains(h) => *held.entry(h).or_default() += 1,
            _ if view.mine.contains(partition) => {}
            _ => coming += 1,
        }
    }
    let lack: usize = all
        .iter()
        .filter(|m| *m != view.me)
        .map(|m| {
            let has = held.get(m.as_str()).copied().unwrap_or(0);
            share(m, &all, view.partitions.len()).saturating_sub(has)
        })
        .sum();
    lack.saturating_sub(coming)
}

/// Fisher–Yates with the crate's jitter source.
fn shuffle<T>(items: &mut [T], random: &mut Jitter) {
    for i in (1..items.len()).rev() {
        let j = random.below(i + 1);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn partitions(m: usize) -> Vec<String> {
        (0..m).map(|i| format!("p{i:02}")).collect()
    }

    /// Leased partitions with no holder in their metadata.
    fn unnamed(names: &[&str]) -> BTreeMap<String, Option<String>> {
        names.iter().map(|s| ((*s).to_owned(), None)).collect()
    }

    /// Leased partitions, `count` each, in order, with their holders.
    fn held_by(all: &[String], holders: &[(&str, usize)]) -> BTreeMap<String, Option<String>> {
        let mut names = all.iter();
        let mut leased = BTreeMap::new();
        for (holder, count) in holders {
            for p in names.by_ref().take(*count) {
                leased.insert(p.clone(), Some((*holder).to_owned()));
            }
        }
        leased
    }

    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        for n in 1..=9 {
            let members: BTreeSet<String> = (0..n).map(|i| format!("m{i}")).collect();
            for m in [0, 1, 5, 12, 16, 17, 64] {
                let shares: Vec<usize> = members.iter().map(|me| share(me, &members, m)).collect();
                assert_eq!(shares.iter().sum::<usize>(), m, "n={n} m={m}");
                let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(hi - lo <= 1 && *lo == m / n, "n={n} m={m}: {shares:?}");
            }
        }
        // An instance not in the listing yet counts itself.
        assert_eq!(share("b", &set(&["a", "c"]), 12), 4);
    }

    #[test]
    fn under_its_share_an_instance_claims_free_partitions_only() {
        let all = partitions(12);
        let members = set(&["a", "b", "c"]);
        let mine = set(&["p00"]);
        let leased = unnamed(&["p00", "p01", "p02", "p03", "p04"]);
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &leased,
            orphaned: &BTreeSet::new(),
        };
        let plan = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2));
        assert_eq!(plan.claim.len(), 3);
        assert!(
            plan.claim.iter().all(|p| !leased.contains_key(p)),
            "{plan:?}"
        );
        assert_eq!(plan.release, Vec::<String>::new());
    }

    #[test]
    fn over_its_share_an_instance_releases_what_the_free_partitions_do_not_cover() {
        let all = partitions(12);
        let members = set(&["a", "b", "c", "d"]);
        let mine = set(&["p00", "p01", "p02", "p03"]);
        // b, c and d lack 3 each; 8 partitions are free: they lack one more.
        let leased = held_by(&all, &[("a", 4)]);
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &leased,
            orphaned: &BTreeSet::new(),
        };
        let plan = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2));
        assert_eq!(
            plan,
            Plan {
                claim: vec![],
                release: vec!["p03".into()]
            }
        );
    }

    /// 3 → 4 instances with 256 partitions: each of the three gives up its
    /// whole excess (86 or 85 → 64) in one cycle, not one partition a cycle.
    #[test]
    fn after_a_join_an_over_loaded_instance_gives_up_its_whole_excess_in_one_cycle() {
        let all: Vec<String> = (0..256).map(|i| format!("p{i:03}")).collect();
        let members = set(&["a", "b", "c", "d"]);
        let leased = held_by(&all, &[("a", 86), ("b", 85), ("c", 85)]);
        let mut released = 0;
        for me in ["a", "b", "c"] {
            let mine: BTreeSet<String> = leased
                .iter()
                .filter(|(_, h)| h.as_deref() == Some(me))
                .map(|(p, _)| p.clone())
                .collect();
            let view = View {
                me,
                members: &members,
                partitions: &all,
                mine: &mine,
                leased: &leased,
                orphaned: &BTreeSet::new(),
            };
            let plan = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2));
            assert!(plan.claim.is_empty());
            assert_eq!(plan.release.len(), mine.len() - 64, "{me}");
            assert!(plan.release.iter().all(|p| mine.contains(p)), "{me}");
            released += plan.release.len();
        }
        // Exactly the newcomer's share: 22 + 21 + 21.
        assert_eq!(released, 64);
    }

    /// Nobody lacks anything by the listing (the extra partition of this
    /// instance's claims is recorded as another member's): nothing is given up.
    #[test]
    fn an_instance_gives_up_nothing_that_no_member_lacks() {
        let all = partitions(12);
        let members = set(&["a", "b"]);
        let mine = set(&["p00", "p01", "p02", "p03", "p04", "p05", "p06"]);
        let leased = held_by(&all, &[("a", 6), ("b", 6)]);
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &leased,
            orphaned: &BTreeSet::new(),
        };
        let plan = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2));
        assert_eq!(plan, Plan::default());
    }

    /// Partitions still leased by an instance that is no longer a member
    /// will be free once their leases expire: they count as coming, not as
    /// lacking.
    #[test]
    fn partitions_of_a_departed_instance_count_as_coming() {
        let all = partitions(12);
        let members = set(&["a", "b"]);
        let mine = set(&["p00", "p01", "p02", "p03", "p04", "p05", "p06", "p07"]);
        let leased = held_by(&all, &[("a", 8), ("gone", 4)]);
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &leased,
            orphaned: &BTreeSet::new(),
        };
        let plan = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2));
        // b lacks 6; 4 will be free: a gives up 2 (its excess).
        assert_eq!(plan.release, vec!["p07".to_owned(), "p06".to_owned()]);
    }

    #[test]
    fn greedy_claims_everything_free_and_never_releases() {
        let all = partitions(6);
        let members = set(&["a", "b"]);
        let mine = set(&["p00", "p01", "p02", "p03"]);
        let leased = unnamed(&["p00", "p01", "p02", "p03", "p04"]);
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &leased,
            orphaned: &BTreeSet::new(),
        };
        let plan = plan(&view, Strategy::Greedy, &mut Jitter::new(Some(1), 0.2));
        assert_eq!(
            plan,
            Plan {
                claim: vec!["p05".into()],
                release: vec![]
            }
        );
    }

    #[test]
    fn claims_come_in_random_order() {
        let all = partitions(16);
        let members = set(&["a"]);
        let empty = BTreeSet::new();
        let none = BTreeMap::new();
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &empty,
            leased: &none,
            orphaned: &BTreeSet::new(),
        };
        let first = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2)).claim;
        let second = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(2), 0.2)).claim;
        assert_eq!(first.len(), 16);
        assert_ne!(first, second);
        assert_ne!(first, all);
    }

    /// a and b live at their shares; d crashed, still a member, holding 2 of
    /// its 3. Nobody claims the free p08 (d "lacks" it) until it is orphaned.
    #[test]
    fn at_its_share_an_instance_claims_orphaned_partitions_only() {
        let all = partitions(9);
        let members = set(&["a", "b", "d"]);
        let mine = set(&["p00", "p01", "p02"]);
        let leased = held_by(&all, &[("a", 3), ("b", 3), ("d", 2)]);
        let none = BTreeSet::new();
        let orphaned = set(&["p08"]);
        let mut view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &leased,
            orphaned: &none,
        };
        let random = &mut Jitter::new(Some(1), 0.2);
        assert_eq!(plan(&view, Strategy::Balanced, random), Plan::default());
        view.orphaned = &orphaned;
        assert_eq!(
            plan(&view, Strategy::Balanced, random),
            Plan {
                claim: vec!["p08".to_owned()],
                release: Vec::new(),
            }
        );
    }

    #[test]
    fn a_partition_is_orphaned_once_every_listing_of_the_grace_showed_it_free() {
        let (p, q) = ("p".to_owned(), "q".to_owned());
        let grace = Duration::from_secs(2);
        let t0 = Instant::now();
        let mut since = FreeSince::default();
        assert!(since.observe(&[&p, &q], t0, grace).is_empty());
        let later = t0 + Duration::from_secs(1);
        assert!(since.observe(&[&p], later, grace).is_empty());
        // q was leased in between: its wait starts again.
        let at = t0 + grace;
        assert_eq!(
            since.observe(&[&p, &q], at, grace),
            BTreeSet::from([p.clone()])
        );
        assert_eq!(
            since.observe(&[&p, &q], at + grace, grace),
            BTreeSet::from([p, q])
        );
    }
}
