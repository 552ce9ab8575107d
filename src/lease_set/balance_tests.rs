//! The tests of the balancer's plan (`balance`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::balance::*;
use crate::backoff::Jitter;

/// Whether the grace has passed at `now` since an instant.
fn over(now: Instant, grace: Duration) -> impl Fn(Instant) -> bool {
    move |since| now.duration_since(since) >= grace
}

/// The crate's jitter source with a seed, as the balancer draws from it.
fn seeded(seed: u64) -> impl FnMut(usize) -> usize {
    let mut random = Jitter::new(Some(seed), 0.2);
    move |n| random.below(n)
}

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
        adopted: &BTreeSet::new(),
    };
    let plan = plan(&view, Strategy::Balanced, &mut seeded(1));
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
        adopted: &BTreeSet::new(),
    };
    let plan = plan(&view, Strategy::Balanced, &mut seeded(1));
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
            adopted: &BTreeSet::new(),
        };
        let plan = plan(&view, Strategy::Balanced, &mut seeded(1));
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
        adopted: &BTreeSet::new(),
    };
    let plan = plan(&view, Strategy::Balanced, &mut seeded(1));
    assert_eq!(plan, Plan::default());
}

/// b skips p02 (it freed it and does not claim it) and a adopted it: a,
/// over its share, gives up one of its own for b, never the adopted one,
/// which b would not claim.
#[test]
fn over_its_share_an_instance_gives_up_what_it_adopted_last() {
    let all = partitions(4);
    let members = set(&["a", "b"]);
    let mine = set(&["p00", "p01", "p02"]);
    let leased = held_by(&all, &[("a", 3), ("b", 1)]);
    let adopted = set(&["p02"]);
    let mut view = View {
        me: "a",
        members: &members,
        partitions: &all,
        mine: &mine,
        leased: &leased,
        orphaned: &BTreeSet::new(),
        adopted: &adopted,
    };
    let random = &mut seeded(1);
    assert_eq!(plan(&view, Strategy::Balanced, random).release, ["p01"]);
    // Without it, the last by name.
    let none = BTreeSet::new();
    view.adopted = &none;
    assert_eq!(plan(&view, Strategy::Balanced, random).release, ["p02"]);
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
        adopted: &BTreeSet::new(),
    };
    let plan = plan(&view, Strategy::Balanced, &mut seeded(1));
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
        adopted: &BTreeSet::new(),
    };
    let plan = plan(&view, Strategy::Greedy, &mut seeded(1));
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
        adopted: &BTreeSet::new(),
    };
    let first = plan(&view, Strategy::Balanced, &mut seeded(1)).claim;
    let second = plan(&view, Strategy::Balanced, &mut seeded(2)).claim;
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
        adopted: &BTreeSet::new(),
    };
    let random = &mut seeded(1);
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
    assert!(since
        .observe(&[(&p, 1), (&q, 1)], t0, over(t0, grace))
        .is_empty());
    let later = t0 + Duration::from_secs(1);
    assert!(since
        .observe(&[(&p, 1)], later, over(later, grace))
        .is_empty());
    // q was leased in between: its wait starts again.
    let at = t0 + grace;
    assert_eq!(
        since.observe(&[(&p, 1), (&q, 1)], at, over(at, grace)),
        BTreeSet::from([p.clone()])
    );
    assert_eq!(
        since.observe(&[(&p, 1), (&q, 1)], at + grace, over(at + grace, grace)),
        BTreeSet::from([p, q])
    );
}

/// Owned and given up between two listings, a partition shows free in both,
/// with a newer epoch: it was owned in between, and its wait starts again.
#[test]
fn a_partition_owned_between_two_listings_is_not_orphaned() {
    let p = "p".to_owned();
    let grace = Duration::from_secs(2);
    let t0 = Instant::now();
    let mut since = FreeSince::default();
    assert!(since.observe(&[(&p, 4)], t0, over(t0, grace)).is_empty());
    let at = t0 + grace;
    assert!(since.observe(&[(&p, 5)], at, over(at, grace)).is_empty());
    // A listing that shows a lower epoch (a quorum's account that carries
    // the last one did not answer) does not start the wait again.
    let later = at + grace;
    assert_eq!(
        since.observe(&[(&p, 4)], later, over(later, grace)),
        BTreeSet::from([p])
    );
}
