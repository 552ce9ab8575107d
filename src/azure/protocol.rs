//! What a lease record on the Blob service holds and what the service's
//! answers mean, whatever SDK sends the requests: the metadata keys, the
//! epoch rule, the member's marker, the error codes and the wording of a
//! refusal (the names of member and candidate blobs are in `names`). Every
//! blob backend uses these, so that the records one writes are the records
//! another reads.

// Built with no backend, only the metadata keys are used (they are public).
#![cfg_attr(not(any(feature = "official", feature = "sdk-v021")), allow(dead_code))]

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::error::{redact, Error, Result};
use crate::store::Candidate;

/// Metadata key of the current holder's name.
pub const HOLDER_KEY: &str = "holder";
/// Metadata key of the fencing token.
pub const EPOCH_KEY: &str = "epoch";
/// Metadata key of the instant the current term began (RFC 3339, UTC).
pub const ACQUIRED_AT_KEY: &str = "acquired_at";
/// Metadata key of what the term's holder advertised with its stamp (an
/// address, say); absent when it advertised nothing.
pub const ADVERTISED_KEY: &str = "advertised";
/// Metadata key of a candidate's priority.
pub const PRIORITY_KEY: &str = "priority";
/// Metadata key of a candidate's proposed lease id.
pub const PROPOSED_KEY: &str = "proposed_lease_id";
/// Metadata key of the marker of a lease set's member blob
/// (`<set>/members/<holder>`), written by the set's member lease when it
/// creates the blob and at every stamp, and by nothing else: a set counts
/// and collects as its members only blobs of that exact shape with the
/// marker (an unmarked one counts while leased by a holder of its own name,
/// as members written before the marker are, and is never collected).
/// Its value is `true`; readers look only for the key.
pub const MEMBER_KEY: &str = "member";
/// The value written with [`MEMBER_KEY`].
pub(crate) const MEMBER_VALUE: &str = "true";

/// The holder as one blob-name segment: `[A-Za-z0-9_-]` as is, every other
/// byte as `.XX` (upper-case hex). Never empty, never `.` or `..`, never
/// ends with a dot.
pub(crate) fn encode_holder(holder: &str) -> String {
    let mut out = String::with_capacity(holder.len());
    for b in holder.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, ".{b:02X}");
        }
    }
    out
}

/// The error code of a request to a container that does not exist (told
/// apart from `BlobNotFound`, a missing blob in a container that does).
pub(crate) const CONTAINER_NOT_FOUND: &str = "ContainerNotFound";

/// Error codes that mean a lease we thought we held is not ours any more.
const LOST_CODES: &[&str] = &[
    "LeaseIdMismatchWithLeaseOperation",
    "LeaseIsBrokenAndCannotBeRenewed",
    "LeaseNotPresentWithLeaseOperation",
    "LeaseLost",
    "LeaseIdMismatchWithBlobOperation",
    "LeaseNotPresentWithBlobOperation",
    "LeaseIdMissing",
];

/// The epoch in the metadata, for display: 0 when missing or garbled.
pub(crate) fn parse_epoch(metadata: &HashMap<String, String>) -> u64 {
    metadata
        .get(EPOCH_KEY)
        .and_then(|e| e.trim().parse().ok())
        .unwrap_or(0)
}

/// How many epochs one second of storage's clock is worth in the first
/// epoch of a lease record: 2^20. A record's epochs start at storage's
/// clock in these units ([`first_epoch`]) and count up by one per term
/// from there, so a record made again after the last one was lost starts
/// above every epoch of the lost one as long as the lost record saw fewer
/// than 2^20 terms per second of its life (a term takes at least three
/// requests in a row: some hundreds a second at most). 2^20 × the seconds
/// since 1970 stays below 2^53 until the year 2242, so epochs stay exact
/// in a JSON number or a JavaScript double.
pub(crate) const EPOCHS_PER_SECOND: u64 = 1 << 20;

/// The first epoch of a lease record that has none (a new blob, or one
/// whose blob, metadata or container was lost), read at `storage_now`:
/// the second after it, in [`EPOCHS_PER_SECOND`]. The record takes it
/// only once storage's clock has passed that second ([`clock_passed`]), so
/// that a record made later, even after this one was lost within the same
/// second, reads a later second and starts above it (see the guarantees
/// chapter, "An epoch that survives the loss of its blob").
pub(crate) fn first_epoch(storage_now: time::OffsetDateTime) -> u64 {
    let seconds = u64::try_from(storage_now.unix_timestamp()).unwrap_or(0);
    seconds.saturating_add(1).saturating_mul(EPOCHS_PER_SECOND)
}

/// The epoch of a lease record's next term, as [`next_epoch`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextEpoch {
    /// This epoch.
    Is(u64),
    /// The record has no epoch, and the caller named none: it is made
    /// anew, read at storage's clock as given here. Its first epoch is
    /// [`first_epoch`] of that, taken once a later read shows storage's
    /// clock past the second that epoch stands for ([`clock_passed`]).
    Anew(time::OffsetDateTime),
}

/// The epoch of the next term, at least `floor`: one more than the one in
/// the metadata; on a record that has none, `floor` when the caller names
/// the epoch it wants (above 1: a quorum, whose majority keeps its epochs,
/// bringing an account that lost its record up to the term's), else a
/// record made anew at storage's clock `storage_now`.
///
/// A garbled or maximal epoch is an error: restarting from a guess would
/// hand out fencing tokens that were used before. So is a record made anew
/// when storage sent no readable `Date`: its first epoch comes from
/// storage's clock or not at all, never from this host's.
pub(crate) fn next_epoch(
    metadata: &HashMap<String, String>,
    storage_now: Option<time::OffsetDateTime>,
    floor: u64,
) -> Result<NextEpoch> {
    let Some(found) = metadata.get(EPOCH_KEY) else {
        if floor > 1 {
            return Ok(NextEpoch::Is(floor));
        }
        return storage_now
            .map(NextEpoch::Anew)
            .ok_or_else(|| Error::UnexpectedResponse {
                operation: "stamp",
                message: "storage sent no readable Date header, and the lease record has no \
                          epoch: a record made anew takes its first epoch from storage's clock, \
                          never from this host's"
                    .into(),
            });
    };
    found
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|epoch| epoch.checked_add(1))
        .map(|epoch| NextEpoch::Is(epoch.max(floor)))
        .ok_or_else(|| Error::InvalidEpoch {
            found: found.chars().take(64).collect(),
        })
}

/// Whether storage's clock at `now` has passed the second that
/// [`first_epoch`] of `first` stands for (the second after `first`'s): a
/// record made anew at `first` may then take that epoch. Any record made
/// after it, even after it was lost, reads storage's clock at that second
/// or later (unless storage's clock went back by a second or more: across
/// its front ends, or across the accounts of a quorum), and so starts
/// above it.
pub(crate) fn clock_passed(first: time::OffsetDateTime, now: time::OffsetDateTime) -> bool {
    now.unix_timestamp() > first.unix_timestamp().saturating_add(1)
}

/// Writes a new term into a blob's `metadata`, keeping every other key:
/// `holder`, `epoch`, `acquired_at` (now), `advertised` (removed when the
/// term advertises nothing, so that no value outlives its term) and, for a
/// set's member blob, the member marker.
pub(crate) fn write_term(
    metadata: &mut HashMap<String, String>,
    holder: &str,
    epoch: u64,
    advertised: Option<&str>,
    member: bool,
) {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    metadata.insert(HOLDER_KEY.to_owned(), holder.to_owned());
    metadata.insert(EPOCH_KEY.to_owned(), epoch.to_string());
    metadata.insert(ACQUIRED_AT_KEY.to_owned(), now);
    match advertised {
        Some(value) => metadata.insert(ADVERTISED_KEY.to_owned(), value.to_owned()),
        None => metadata.remove(ADVERTISED_KEY),
    };
    if member {
        metadata.insert(MEMBER_KEY.to_owned(), MEMBER_VALUE.to_owned());
    }
}

/// The candidate in a record's metadata; `None` when a field is missing or
/// garbled.
pub(crate) fn parse_candidate(metadata: &HashMap<String, String>) -> Option<Candidate> {
    let holder = metadata.get(HOLDER_KEY)?.clone();
    let priority = metadata.get(PRIORITY_KEY)?.trim().parse().ok()?;
    let proposed = metadata.get(PROPOSED_KEY)?.trim().parse().ok()?;
    Some(Candidate::new(holder, priority, proposed))
}

/// Error codes of a request whose credential was accepted but does not
/// allow the call: a SAS without the permission (or resource type) or a
/// role without the action.
const PERMISSION_CODES: &[&str] = &[
    "AuthorizationPermissionMismatch",
    "AuthorizationResourceTypeMismatch",
];

/// The code of a refusal that may be either: Azure sends it for a request
/// its network rules or the account's settings refuse, and Azurite for a
/// signature that does not verify (where Azure sends
/// `AuthenticationFailed`).
const EITHER_CODE: &str = "AuthorizationFailure";

/// What to check when the credential itself was not accepted.
const CHECK_CREDENTIAL: &str = "check the account key, or the SAS's signature, start and expiry, \
     or the token's tenant and audience";

/// What to grant so that `operation` is allowed: the SAS permission (and
/// for an account SAS its resource type) and the role that has it. The
/// guide's table "Least privilege" (docs/guide/operations.md) lists the same per mode.
fn grant(operation: &str) -> &'static str {
    match operation {
        "create container" => {
            "the credential may not create the container: create the container beforehand, \
             or use an account SAS with resource type container (srt=c) and create (c) or \
             write (w), or a role that can create containers (Storage Blob Data Contributor on the account)"
        }
        "create blob" => {
            "grant create (c) or write (w) on the blob (container SAS, blob SAS, or account SAS \
             with srt=o), or Storage Blob Data Contributor on the container"
        }
        "list" | "list candidates" => {
            "grant list (l) on the container (container SAS, or account SAS with srt=c), or \
             Storage Blob Data Contributor on the container"
        }
        "inspect" | "read metadata" | "read state" => {
            "grant read (r) on the blob, or Storage Blob Data Reader on the container"
        }
        "break" => {
            "grant write (w) and delete (d) on the blob, or Storage Blob Data Contributor on the \
             container"
        }
        "delete" => {
            "grant delete (d) on the container's blobs, or Storage Blob Data Contributor on the \
             container"
        }
        _ => "grant write (w) on the blob, or Storage Blob Data Contributor on the container",
    }
}

/// The message of a refused call: what to grant when the credential lacks
/// a permission, what to check when it was not accepted at all.
fn refusal(operation: &str, code: Option<&str>) -> String {
    match code {
        Some(code) if PERMISSION_CODES.contains(&code) => {
            format!("{operation} was refused: {}", grant(operation))
        }
        Some(EITHER_CODE) => format!(
            "{operation} was refused: the credential was not accepted, or it may not do this; \
             {CHECK_CREDENTIAL}; or {}; or the account's network rules",
            grant(operation)
        ),
        _ => {
            format!("{operation} was refused: the credential was not accepted; {CHECK_CREDENTIAL}")
        }
    }
}

/// The crate's error for an error status of the Blob service, by status and
/// `x-ms-error-code`; `said` is what the service said (see [`said`]).
pub(crate) fn status_error(
    operation: &str,
    status: u16,
    code: Option<String>,
    said: &str,
) -> Error {
    match (status, code.as_deref()) {
        (401 | 403, code) => Error::Authentication {
            status,
            code: code.unwrap_or("Forbidden").to_owned(),
            message: refusal(operation, code) + said,
        },
        (409 | 412, Some(code)) if LOST_CODES.contains(&code) => {
            Error::LeaseLost(format!("{operation}: {code}"))
        }
        (404, Some(CONTAINER_NOT_FOUND)) => Error::Storage {
            status,
            code,
            message: format!(
                "{operation} failed: the container does not exist; check its name, or create it{said}"
            ),
        },
        (status, _) => Error::Storage {
            status,
            code,
            message: format!("{operation} failed{said}"),
        },
    }
}

/// A lost lease, as the answer to a state write: the write was refused.
pub(crate) fn refused(error: Error) -> Error {
    match error {
        Error::LeaseLost(message) => Error::StateWriteRefused(message),
        other => other,
    }
}

/// The most of the service's own message kept in an error.
const SERVICE_MESSAGE_LEN: usize = 300;

/// The message storage sent with an error status, as `" (storage said:
/// …)"` on one line, secrets removed.
pub(crate) fn said(message: &str) -> String {
    let line = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let line: String = redact(&line).chars().take(SERVICE_MESSAGE_LEN).collect();
    format!(" (storage said: {line})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LeaseId;

    #[test]
    fn a_refusal_names_the_credential_the_permission_or_both_by_its_code() {
        let message = |code| match status_error("inspect", 403, Some(String::from(code)), "") {
            Error::Authentication { message, .. } => message,
            other => panic!("{other:?}"),
        };
        let bad_key = message("AuthenticationFailed");
        assert!(
            bad_key.contains("check the account key") && !bad_key.contains("grant"),
            "{bad_key}"
        );
        let no_permission = message("AuthorizationPermissionMismatch");
        assert!(
            no_permission.contains("grant read (r)") && !no_permission.contains("account key"),
            "{no_permission}"
        );
        let either = message("AuthorizationFailure");
        assert!(
            either.contains("check the account key") && either.contains("grant read (r)"),
            "{either}"
        );
    }

    #[test]
    fn the_next_epoch_never_goes_back() {
        let with = |value: &str| HashMap::from([(EPOCH_KEY.to_owned(), value.to_owned())]);
        let at = time::OffsetDateTime::from_unix_timestamp(1_795_000_000).unwrap();
        let now = Some(at);
        let is = |epoch| Some(NextEpoch::Is(epoch));
        for floor in [0, 1] {
            assert_eq!(
                next_epoch(&HashMap::new(), now, floor).ok(),
                Some(NextEpoch::Anew(at))
            );
        }
        assert_eq!(next_epoch(&HashMap::new(), now, 9).ok(), is(9));
        assert_eq!(next_epoch(&with("41"), now, 0).ok(), is(42));
        assert_eq!(next_epoch(&with("41"), now, 50).ok(), is(50));
        assert_eq!(next_epoch(&with("41"), now, 5).ok(), is(42));
        assert_eq!(next_epoch(&with(" 7 "), now, 0).ok(), is(8));
        assert_eq!(
            next_epoch(&with(&(u64::MAX - 1).to_string()), now, 0).ok(),
            is(u64::MAX)
        );
        for bad in [
            "",
            "x",
            "-1",
            "1.5",
            "18446744073709551615",
            "99999999999999999999",
        ] {
            assert!(
                matches!(
                    next_epoch(&with(bad), now, 0),
                    Err(Error::InvalidEpoch { .. })
                ),
                "{bad:?}"
            );
        }
        let long = "9".repeat(500);
        match next_epoch(&with(&long), now, 0) {
            Err(Error::InvalidEpoch { found }) => assert_eq!(found.len(), 64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_record_made_anew_is_refused_when_storage_sent_no_date() {
        for floor in [0, 1] {
            assert!(
                matches!(
                    next_epoch(&HashMap::new(), None, floor),
                    Err(Error::UnexpectedResponse { .. })
                ),
                "a first epoch from the host's clock, floor {floor}"
            );
        }
        // A record that has an epoch, or a floor to take, needs no clock.
        let with = HashMap::from([(EPOCH_KEY.to_owned(), "41".to_owned())]);
        assert!(next_epoch(&with, None, 0).is_ok());
        assert!(next_epoch(&HashMap::new(), None, 9).is_ok());
    }

    /// The bound the epoch of a lost record rests on: a record first stamped
    /// at second `s0` of storage's clock, with `n` terms after it, is below
    /// the first epoch of a record made at any later second `s1`, for every
    /// `n` under 2^20 per second of the lost record's life.
    #[test]
    fn a_record_made_again_starts_above_every_epoch_of_the_lost_one() {
        let at = |s: i64| time::OffsetDateTime::from_unix_timestamp(s).unwrap();
        let s0 = 1_795_000_000;
        for (life, terms) in [
            (1, EPOCHS_PER_SECOND - 1),
            (60, 60 * EPOCHS_PER_SECOND - 1),
            (86_400, 10_000_000),
        ] {
            let last_lost = first_epoch(at(s0)) + terms;
            let again = first_epoch(at(s0 + life));
            assert!(
                again > last_lost,
                "life {life} s, {terms} terms: {again} <= {last_lost}"
            );
        }
        // Two records that read the same second would start at one epoch:
        // a record made anew waits until storage's clock has passed the
        // second its first epoch stands for, so that the next one, even
        // on a clock up to a second behind, reads a later second.
        assert_eq!(first_epoch(at(s0)), first_epoch(at(s0)));
        let read = time::OffsetDateTime::from_unix_timestamp_nanos(
            i128::from(s0) * 1_000_000_000 + 999_000_000,
        )
        .unwrap();
        assert!(!clock_passed(read, read));
        assert!(!clock_passed(read, at(s0 + 1)));
        assert!(clock_passed(read, at(s0 + 2)));
        let behind = at(s0 + 2) - time::Duration::milliseconds(999);
        assert!(first_epoch(behind) > first_epoch(read));
        // Below 2^53 (exact in a double) for centuries.
        assert!(first_epoch(at(8_000_000_000)) < 1 << 53);
        // A clock before 1970 (a broken host clock) still gives a valid epoch.
        assert_eq!(first_epoch(at(-5)), EPOCHS_PER_SECOND);
    }

    #[test]
    fn a_new_term_replaces_the_advertised_value_and_keeps_other_keys() {
        let mut metadata = HashMap::from([
            (ADVERTISED_KEY.to_owned(), "old:1".to_owned()),
            ("mine".to_owned(), "kept".to_owned()),
        ]);
        write_term(&mut metadata, "b", 8, None, false);
        assert_eq!(metadata.get(ADVERTISED_KEY), None, "{metadata:?}");
        assert_eq!(metadata.get("mine").map(String::as_str), Some("kept"));
        assert_eq!(parse_epoch(&metadata), 8);
        write_term(&mut metadata, "c", 9, Some("new:2"), true);
        assert_eq!(
            metadata.get(ADVERTISED_KEY).map(String::as_str),
            Some("new:2")
        );
        assert_eq!(metadata.get(HOLDER_KEY).map(String::as_str), Some("c"));
        assert!(metadata.contains_key(MEMBER_KEY));
        assert!(metadata.contains_key(ACQUIRED_AT_KEY));
    }

    #[test]
    fn holders_encode_to_one_safe_segment_each() {
        assert_eq!(encode_holder("host-12_a"), "host-12_a");
        assert_eq!(encode_holder("a.b/c"), "a.2Eb.2Fc");
        assert_eq!(encode_holder(".."), ".2E.2E");
        assert_eq!(encode_holder("x "), "x.20");
        // Injective: a literal ".2E" is itself encoded.
        assert_ne!(encode_holder(".2E"), encode_holder("."));
        for holder in ["a", ".", "..", "a/b", "x.", "~%?#"] {
            let segment = encode_holder(holder);
            assert!(
                !segment.contains('/') && !segment.ends_with('.'),
                "{segment}"
            );
            crate::azure::settings::validate_blob(&segment).unwrap();
        }
    }

    #[test]
    fn a_garbled_record_is_no_candidate() {
        let id = LeaseId::new();
        let full = HashMap::from([
            (HOLDER_KEY.to_owned(), "a".to_owned()),
            (PRIORITY_KEY.to_owned(), "-3".to_owned()),
            (PROPOSED_KEY.to_owned(), id.to_string()),
        ]);
        let parsed = parse_candidate(&full).unwrap();
        assert_eq!((parsed.priority, parsed.proposed), (-3, id));
        for key in [HOLDER_KEY, PRIORITY_KEY, PROPOSED_KEY] {
            let mut missing = full.clone();
            missing.remove(key);
            assert!(parse_candidate(&missing).is_none(), "{key}");
        }
        let mut bad = full.clone();
        bad.insert(PRIORITY_KEY.to_owned(), "high".to_owned());
        assert!(parse_candidate(&bad).is_none());
        let mut bad = full;
        bad.insert(PROPOSED_KEY.to_owned(), "x".to_owned());
        assert!(parse_candidate(&bad).is_none());
    }
}
