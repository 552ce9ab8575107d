//! The names a lease set and a lease own, and the rules that keep every
//! other lease out of them.
//!
//! A lease set named `<set>` keeps its leases in two namespaces of its
//! container: `<set>/members/<holder>` (one member blob per live instance)
//! and `<set>/partitions/<name>`. A lease blob `<blob>` keeps its
//! candidates' records in `<blob>.candidates/<holder>`. Read by prefix
//! alone, a lease that merely sits there is taken for one of them: a
//! mutex's blob `jobs/members/nightly` beside the set `jobs` was counted as
//! a live member while leased (every share computed over one instance too
//! many, some partitions never claimed), and collected once it was stale,
//! so that the mutex's next term stamped epoch 1 again. Two rules close
//! these namespaces, each enough for the names this crate makes; both stay,
//! against blobs that someone else writes there.
//!
//! 1. **Reserved names, refused when made.** A lease blob and a set's name
//!    (both are the blob name of [`BlobSettings`](crate::BlobSettings)) may
//!    not have a path segment `members` or `partitions` after their first,
//!    nor a segment ending in `.candidates` ([`reserved`], checked by every
//!    constructor of settings, with [`Error::InvalidOption`] naming the
//!    field `blob`). Every set's name has at least one segment, so a name
//!    inside `<set>/members/…` or `<set>/partitions/…` has such a segment
//!    after its first, whatever `<set>` is: no lease and no set is ever
//!    named inside a set, nor a set inside another. The first segment stays
//!    free (`members/leader` is a fine lease: no set has an empty name), and
//!    the whole segment must match (`team-members/x`, `Members/x` are fine).
//!    A set store's own leases ([`set_lease`]) are `members/<one segment>`
//!    and `partitions/<name>`; any other name it is asked for obeys the same
//!    rule as a lease's.
//! 2. **Members by their exact shape and a marker that only the set
//!    writes.** A set reads as a member only `members/<one segment>`
//!    ([`live_member`]), and collects only such a blob that carries the metadata
//!    `MEMBER_KEY` ([`collectable`]): the set's member
//!    lease writes it when it creates the blob and at every stamp, and no
//!    other lease ever does. A blob of member shape without it (written by a
//!    version before the marker, or by another client) is never collected;
//!    it counts as a live member only while it is leased and its `holder`
//!    metadata is its own segment, as every member of any version stamps
//!    it, so that an instance that runs an earlier version stays counted
//!    while a rolling upgrade goes on. A candidate record is
//!    `<blob>.candidates/<one segment>` ([`is_record`]); nothing else there
//!    is listed as a candidate or collected.

// Built with no backend, what only the blob stores read (candidate records,
// collection) is unused.
#![cfg_attr(not(any(feature = "official", feature = "sdk-v021")), allow(dead_code))]

use crate::error::{Error, Result};
use crate::store::LeaseInfo;

/// The prefix of a set's member leases (`members/<holder>`), within the set.
pub(crate) const MEMBERS: &str = "members/";
/// The prefix of a set's partition leases (`partitions/<name>`), within the
/// set. Partition blobs are never collected: their epochs must only grow.
pub(crate) const PARTITIONS: &str = "partitions/";
/// What follows the lease blob's name in the name of every candidate record.
pub(crate) const CANDIDATES: &str = ".candidates/";

/// The path segments a set owns under its name, with what it keeps there.
const SET_SEGMENTS: [(&str, &str); 2] = [
    ("members", "member blobs"),
    ("partitions", "partition blobs"),
];

/// The blob of the lease `name` of the set `set`: `<set>/<name>`, on every
/// backend.
pub(crate) fn set_blob(set: &str, name: &str) -> String {
    format!("{set}/{name}")
}

/// Why `name` cannot be a lease blob's name or a set's name, when it
/// cannot: a path segment after the first that a set owns, or a segment
/// that ends in `.candidates`. Checks nothing else (see
/// `settings::validate_blob`).
pub(crate) fn reserved(name: &str) -> Option<String> {
    set_segment(name).or_else(|| candidates_segment(name))
}

/// Why `name` cannot be a lease blob's name or a set's name, when it has a
/// path segment after its first that a set owns.
fn set_segment(name: &str) -> Option<String> {
    let segments: Vec<&str> = name.split('/').collect();
    let (i, segment, kept) = segments
        .iter()
        .enumerate()
        .skip(1)
        .find_map(|(i, segment)| {
            let (_, kept) = SET_SEGMENTS.iter().find(|(s, _)| s == segment)?;
            Some((i, segment, kept))
        })?;
    let set = segments[..i].join("/");
    Some(format!(
        "{name:?} has the path segment '{segment}' after its first, which is reserved: a lease \
         set named {set:?} keeps its {kept} under {set}/{segment}/, so no lease and no set may \
         be named there (the set would count it as a member or collect it); choose another name"
    ))
}

/// Why `name` cannot be any lease's name, when it has a path segment ending
/// in `.candidates`.
pub(crate) fn candidates_segment(name: &str) -> Option<String> {
    name.split('/')
        .any(|s| s.ends_with(".candidates"))
        .then(|| {
            format!(
                "{name:?} must not have a path segment ending in '.candidates', which is \
                 reserved: <lease blob>.candidates/ holds the records of the candidates beside a \
                 lease; choose another name"
            )
        })
}

/// What a name within a set names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetLease {
    /// `members/<one segment>`: an instance's member lease, which marks its
    /// blob as a member's.
    Member,
    /// `partitions/<name>`: a partition's lease.
    Partition,
    /// Any other name, which obeys the rules of a lease blob's name.
    Other,
}

/// What `name`, within a set, names; refused ([`Error::InvalidOption`],
/// field `blob`) when it is under `members/` without being one member's
/// name, or is another name with a reserved segment.
pub(crate) fn set_lease(name: &str) -> Result<SetLease> {
    if let Some(holder) = name.strip_prefix(MEMBERS) {
        if holder.is_empty() || holder.contains('/') {
            return Err(Error::invalid(
                "blob",
                format!(
                    "{name:?} is under a set's members/ but is no member's name: a member's \
                     lease is members/<holder>, one path segment"
                ),
            ));
        }
        return Ok(SetLease::Member);
    }
    if name.starts_with(PARTITIONS) {
        return Ok(SetLease::Partition);
    }
    // Within the set, every segment of `name` comes after the set's first.
    match reserved(&format!("set/{name}")) {
        Some(_) => Err(Error::invalid(
            "blob",
            format!(
                "{name:?} within a set has a path segment 'members' or 'partitions', or one \
                 ending in '.candidates': those name a set's members and partitions and a \
                 lease's candidates; choose another name"
            ),
        )),
        None => Ok(SetLease::Other),
    }
}

/// The member that `name` (within a set) names by its shape alone:
/// `members/<one segment>`.
pub(crate) fn member_segment(name: &str) -> Option<&str> {
    name.strip_prefix(MEMBERS)
        .filter(|holder| !holder.is_empty() && !holder.contains('/'))
}

/// The live member that the listed lease `name` (within a set) is, as a
/// set counts its members: a leased blob of member shape that carries the
/// member marker, or (written before the marker existed) whose `holder` is
/// its own segment.
pub(crate) fn live_member<'a>(name: &'a str, info: &LeaseInfo) -> Option<&'a str> {
    let holder = member_segment(name)?;
    let ours = info.member || info.holder.as_deref() == Some(holder);
    (ours && info.state == crate::store::LeaseState::Leased).then_some(holder)
}

/// Whether a set may collect the listed lease `name` (within the set) once
/// it is stale: a blob of member shape that carries the member marker, and
/// nothing else.
pub(crate) fn collectable(name: &str, info: &LeaseInfo) -> bool {
    info.member && member_segment(name).is_some()
}

/// Whether `name` (a full blob name) is a candidate record of the lease
/// whose records start with `prefix` (`<blob>.candidates/`): the prefix and
/// one segment.
pub(crate) fn is_record(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|holder| !holder.is_empty() && !holder.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LeaseState;

    fn info(state: LeaseState, member: bool, holder: Option<&str>) -> LeaseInfo {
        let mut info = LeaseInfo::new(state);
        info.member = member;
        info.holder = holder.map(str::to_owned);
        info
    }

    #[test]
    fn names_inside_a_set_are_reserved_after_the_first_segment() {
        for free in [
            "leader",
            "jobs/nightly",
            "members",
            "members/leader",
            "partitions/x",
            "jobs/team-members/x",
            "jobs/Members/x",
            "jobs/membersx",
            "a.candidatesy/z",
        ] {
            assert_eq!(reserved(free), None, "{free}");
        }
        for (name, segment, set) in [
            ("jobs/members/nightly", "members", "jobs"),
            ("jobs/partitions/p0", "partitions", "jobs"),
            ("a/b/members/c", "members", "a/b"),
            ("jobs/members", "members", "jobs"),
            ("members/members/x", "members", "members"),
            ("x/partitions", "partitions", "x"),
        ] {
            let reason = reserved(name).expect(name);
            assert!(
                reason.contains(&format!("'{segment}'"))
                    && reason.contains(&format!("{set}/{segment}/"))
                    && reason.contains("reserved"),
                "{reason}"
            );
        }
        let reason = reserved("x.candidates/h").unwrap();
        assert!(reason.contains(".candidates"), "{reason}");
    }

    #[test]
    fn a_set_store_makes_only_its_own_shapes_and_names_beside_them() {
        assert_eq!(set_lease("members/a").unwrap(), SetLease::Member);
        assert_eq!(set_lease("members/a.b-1").unwrap(), SetLease::Member);
        assert_eq!(set_lease("partitions/p0").unwrap(), SetLease::Partition);
        assert_eq!(set_lease("partitions/a/b").unwrap(), SetLease::Partition);
        assert_eq!(set_lease("p0").unwrap(), SetLease::Other);
        for bad in [
            "members/",
            "members/a/b",
            "x/members/y",
            "members",
            "partitions",
            "x/partitions/y",
            "x.candidates/y",
        ] {
            assert!(
                matches!(
                    set_lease(bad),
                    Err(Error::InvalidOption { field: "blob", .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_member_is_its_exact_shape_marked_or_stamped_by_its_own_holder() {
        let leased = LeaseState::Leased;
        // Marked by the set: a member, whoever its holder.
        assert_eq!(
            live_member("members/a", &info(leased, true, None)),
            Some("a")
        );
        // Written before the marker: a member while its holder is its name.
        assert_eq!(
            live_member("members/a", &info(leased, false, Some("a"))),
            Some("a")
        );
        // A foreign lease of the same shape: no member.
        assert_eq!(
            live_member("members/a", &info(leased, false, Some("b"))),
            None
        );
        assert_eq!(live_member("members/a", &info(leased, false, None)), None);
        // Another shape, even marked: no member.
        for name in ["members/a/b", "members/", "x/members/a", "partitions/a"] {
            assert_eq!(
                live_member(name, &info(leased, true, Some("a"))),
                None,
                "{name}"
            );
        }
        // Not leased: not live.
        assert_eq!(
            live_member("members/a", &info(LeaseState::Expired, true, Some("a"))),
            None
        );
    }

    #[test]
    fn only_marked_blobs_of_member_shape_are_collectable() {
        let free = LeaseState::Available;
        assert!(collectable("members/a", &info(free, true, None)));
        // Unmarked, even with its own holder: an earlier version's member or
        // a foreign lease, never deleted.
        assert!(!collectable("members/a", &info(free, false, Some("a"))));
        assert!(!collectable("members/a/b", &info(free, true, None)));
        assert!(!collectable("partitions/a", &info(free, true, None)));
        assert!(!collectable("x.candidates/a", &info(free, true, None)));
    }

    #[test]
    fn a_record_is_the_prefix_and_one_segment() {
        let prefix = "lock.candidates/";
        assert!(is_record(prefix, "lock.candidates/host-1"));
        assert!(!is_record(prefix, "lock.candidates/"));
        assert!(!is_record(prefix, "lock.candidates/a/b"));
        assert!(!is_record(prefix, "other.candidates/a"));
    }
}
