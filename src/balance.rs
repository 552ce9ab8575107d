//! What one instance of a lease set does in one balance cycle, decided from
//! one listing: which free partitions to claim, and which one to give up.
//! A pure function, so that every instance reading the same listing agrees.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::backoff::Jitter;

/// How an instance decides how many partitions to own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// Every live instance owns ⌊M/N⌋ or ⌈M/N⌉ of the M partitions: the
    /// first `M mod N` instances by name own one more. An instance over its
    /// share gives one partition up per cycle (drain, then release); one
    /// under it claims free partitions. The default.
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
    /// A partition to give up (drain, then release).
    pub(crate) release: Option<String>,
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
    /// The partitions whose lease is held by anyone (the listing's view).
    pub(crate) leased: &'a BTreeSet<String>,
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
    let mut free: Vec<&String> = view
        .partitions
        .iter()
        .filter(|p| !view.mine.contains(*p) && !view.leased.contains(*p))
        .collect();
    shuffle(&mut free, random);
    let owned = view.mine.len();
    match strategy {
        Strategy::Greedy => Plan {
            claim: free.into_iter().cloned().collect(),
            release: None,
        },
        Strategy::Balanced => {
            let target = share(view.me, view.members, view.partitions.len());
            match owned.cmp(&target) {
                Ordering::Less => Plan {
                    claim: free.into_iter().take(target - owned).cloned().collect(),
                    release: None,
                },
                // The same choice every cycle: the last by name.
                Ordering::Greater => Plan {
                    claim: Vec::new(),
                    release: view.mine.iter().next_back().cloned(),
                },
                Ordering::Equal => Plan::default(),
            }
        }
    }
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
        let leased = set(&["p00", "p01", "p02", "p03", "p04"]);
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &leased,
        };
        let plan = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2));
        assert_eq!(plan.claim.len(), 3);
        assert!(plan.claim.iter().all(|p| !leased.contains(p)), "{plan:?}");
        assert_eq!(plan.release, None);
    }

    #[test]
    fn over_its_share_an_instance_releases_one_partition_per_cycle() {
        let all = partitions(12);
        let members = set(&["a", "b", "c", "d"]);
        let mine = set(&["p00", "p01", "p02", "p03"]);
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &mine,
        };
        let plan = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2));
        assert_eq!(
            plan,
            Plan {
                claim: vec![],
                release: Some("p03".into())
            }
        );
    }

    #[test]
    fn greedy_claims_everything_free_and_never_releases() {
        let all = partitions(6);
        let members = set(&["a", "b"]);
        let mine = set(&["p00", "p01", "p02", "p03"]);
        let leased = set(&["p00", "p01", "p02", "p03", "p04"]);
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &mine,
            leased: &leased,
        };
        let plan = plan(&view, Strategy::Greedy, &mut Jitter::new(Some(1), 0.2));
        assert_eq!(
            plan,
            Plan {
                claim: vec!["p05".into()],
                release: None
            }
        );
    }

    #[test]
    fn claims_come_in_random_order() {
        let all = partitions(16);
        let members = set(&["a"]);
        let empty = BTreeSet::new();
        let view = View {
            me: "a",
            members: &members,
            partitions: &all,
            mine: &empty,
            leased: &empty,
        };
        let first = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(1), 0.2)).claim;
        let second = plan(&view, Strategy::Balanced, &mut Jitter::new(Some(2), 0.2)).claim;
        assert_eq!(first.len(), 16);
        assert_ne!(first, second);
        assert_ne!(first, all);
    }
}
