//! What one instance of a lease set does in one balance cycle, decided from
//! one listing: which free partitions to claim, and which ones to give up.
//! A pure function, so that every instance reading the same listing agrees;
//! std only (no clock, no I/O), so that the model checker (crates/model/tests/model)
//! compiles this file as it is and runs the same decisions.
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
//!
//! An instance over its share gives up the partitions it adopted so (the
//! view's `adopted`) after all others. A partition also comes free for
//! good on a live member that skips it (one it cannot lead, for a while):
//! that member stays under its share, and the instance that adopted the
//! partition is over its own. Were the adopted partition given up, it
//! would be given up towards the member that skips it, which never claims
//! it, and be adopted again two cycles later, over and over. Giving up one
//! of its other partitions instead hands the skipping member one it does
//! claim, and the set settles with the skipped partition owned.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

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
    /// The partitions of `mine` this instance claimed as orphans: given up
    /// last (see [Partitions nobody's share would take](self#partitions-nobodys-share-would-take)).
    pub(crate) adopted: &'a BTreeSet<String>,
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

/// Since when (an instant of the caller's clock, `T`) each listing in a row
/// has shown a partition free, and with which epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FreeSince<T>(BTreeMap<String, (T, u64)>);

impl<T> Default for FreeSince<T> {
    fn default() -> Self {
        FreeSince(BTreeMap::new())
    }
}

impl<T: Copy> FreeSince<T> {
    /// Records one listing's free partitions, each with the epoch its blob
    /// carries, at `now`, and returns those free in every listing since an
    /// instant for which `grace_over` holds (the grace of [`ORPHAN_CYCLES`]
    /// intervals has passed since then).
    ///
    /// A partition whose epoch rose between two listings that both showed
    /// it free was owned in between (each term stamps a larger epoch): its
    /// wait starts again. Without that, an instance at its share could
    /// count as orphaned a partition that changed hands between its
    /// listings, claim it ahead of the member under its share that was
    /// about to, and give it up again the next cycle, over and over. Only a
    /// rise counts: a quorum's listing shows the largest epoch of the
    /// accounts that answered, which may be lower in one listing than in
    /// the last without anyone owning the partition in between.
    pub(crate) fn observe(
        &mut self,
        free: &[(&String, u64)],
        now: T,
        grace_over: impl Fn(T) -> bool,
    ) -> BTreeSet<String> {
        let seen: BTreeMap<&String, u64> = free.iter().copied().collect();
        self.0
            .retain(|p, (_, highest)| seen.get(p).is_some_and(|e| e <= highest));
        for (p, epoch) in seen {
            self.0.entry(p.clone()).or_insert((now, epoch));
        }
        self.0
            .iter()
            .filter(|(_, (since, _))| grace_over(*since))
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
/// instances that see the same free partitions tend not to collide:
/// `below(n)` is a random number under `n` (the crate's jitter source).
pub(crate) fn plan(
    view: &View<'_>,
    strategy: Strategy,
    below: &mut impl FnMut(usize) -> usize,
) -> Plan {
    let mut free = free(view.partitions, view.mine, view.leased);
    shuffle(&mut free, below);
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
                // The same choice every cycle: the last by name, those
                // adopted as orphans after the others.
                Ordering::Greater => {
                    let (adopted, own): (Vec<&String>, Vec<&String>) = view
                        .mine
                        .iter()
                        .rev()
                        .partition(|p| view.adopted.contains(*p));
                    Plan {
                        claim: Vec::new(),
                        release: own
                            .into_iter()
                            .chain(adopted)
                            .take((owned - target).min(others_lack(view, free.len())))
                            .cloned()
                            .collect(),
                    }
                }
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

/// Fisher–Yates with a random source.
fn shuffle<T>(items: &mut [T], below: &mut impl FnMut(usize) -> usize) {
    for i in (1..items.len()).rev() {
        let j = below(i + 1).min(i);
        items.swap(i, j);
    }
}
