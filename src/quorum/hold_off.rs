//! Which granted accounts a new term may count: an account that forgot the
//! lease counts only once every lease it granted before it forgot has
//! certainly expired. A pure decision (no I/O, no clock): the acquire
//! reads, this decides.

use std::time::Duration;

/// How long an account must have been seen without an epoch before its
/// vote counts toward a new majority: Azure's longest finite lease (60 s),
/// plus that lease times the largest clock drift the options accept (10 %:
/// this host's clock may run that much faster than the account's), plus
/// the default safety margin (1 s: a request's own time and storage's
/// clock read to the second). The quorum does not know the durations
/// other instances use, so it takes the longest.
pub(crate) const HOLD_OFF: Duration = Duration::from_secs(67);

/// What a candidate read of one account's epoch once a majority granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// Not read: it did not answer the acquire, or its read did not answer.
    Unread,
    /// It carries an epoch: a term stamped it, and it has not forgotten
    /// since.
    Carries,
    /// No epoch: never stamped, or it lost its blob (deleted, recreated,
    /// its container recreated, an emulator restarted empty).
    Missing,
}

/// When this store first saw an account without an epoch, after a read
/// at `now`: from the first read that found none, for as long as no read
/// finds one. An account `held_by_another` id starts over: its holder may
/// stamp it, and it may forget again, so what was seen before says
/// nothing of the leases it holds now. `T` is any instant.
pub(crate) fn first_missing<T: Copy>(
    since: Option<T>,
    read: Read,
    held_by_another: bool,
    now: T,
) -> Option<T> {
    match read {
        _ if held_by_another => None,
        Read::Carries => None,
        Read::Missing => Some(since.unwrap_or(now)),
        Read::Unread => since,
    }
}

/// The record kept of an account seen without an epoch, `since` an instant
/// and on the blob at `version` (its `ETag`), after a read that found it
/// without one on the blob at `seen`: the record stands only while the blob
/// is the one first seen so. Another version means that the blob was
/// written (a term stamped it) or made anew (lost and created again) since,
/// unseen by this store between two of its reads: a lease granted there
/// meanwhile may still hold a live term's deadline, so the wait starts
/// over. A store that shows no `ETag` (an empty `version`) keeps the record.
pub(crate) fn on_the_same_blob<T: Copy, V: PartialEq + ?Sized>(
    record: Option<(T, &V)>,
    seen: &V,
) -> Option<T> {
    match record {
        Some((since, version)) if version == seen => Some(since),
        _ => None,
    }
}

/// One account as the acquire sees it once a majority granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Account {
    /// Whether it granted the lease in this attempt.
    pub(crate) granted: bool,
    /// What its read found: every account that answered the acquire
    /// (granted it, or held by another id) is read.
    pub(crate) read: Read,
    /// How long this store has seen it without an epoch, up to now
    /// (zero when it was first seen so in this attempt).
    pub(crate) missing_for: Duration,
}

/// The accounts whose grant counts toward the new term's majority.
///
/// - A granted account read with an epoch counts: it has not forgotten
///   since a term stamped it, so a lease that a live holder's deadline
///   rests on there would have kept it from granting.
/// - A granted account read without one, while some account read carries
///   one, counts once this store has seen it so for `hold_off`: it may
///   have been part of a live holder's majority until it forgot, and every
///   lease it granted before that has expired by then.
/// - When no account read carries an epoch, and every account was read
///   (each answered the acquire and its read), an account without one
///   counts at once: a new quorum (no term yet), or every account forgot,
///   which no live majority survives. With an account not read, the others
///   wait: a live term may have won without stamping one of them (its
///   acquire or stamp did not reach it, or the lease there was broken or
///   taken before its next renewal brought it up to date), and one of
///   its majority forgot while the other is the one not read (one down
///   and one forgotten, which the quorum survives).
/// - When every account granted, every account counts: a live holder's
///   majority is among them, and it would take every account of it to
///   forget for none of them to have refused while its deadline holds.
/// - A granted account whose read did not answer does not count (unless
///   every account granted): it may have forgotten.
pub(crate) fn counted(accounts: &[Account], hold_off: Duration) -> Vec<bool> {
    let any_carries = accounts.iter().any(|a| a.read == Read::Carries);
    let all_read = accounts.iter().all(|a| a.read != Read::Unread);
    let every_granted = accounts.iter().all(|a| a.granted);
    let new_quorum = every_granted || (!any_carries && all_read);
    accounts
        .iter()
        .map(|a| {
            a.granted
                && match a.read {
                    Read::Carries => true,
                    Read::Missing => new_quorum || a.missing_for >= hold_off,
                    Read::Unread => every_granted,
                }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = HOLD_OFF;
    const NOW: Duration = Duration::ZERO;

    fn granted(read: Read, missing_for: Duration) -> Account {
        Account {
            granted: true,
            read,
            missing_for,
        }
    }

    #[test]
    fn every_account_granted_counts_every_account() {
        let accounts = [
            granted(Read::Carries, NOW),
            granted(Read::Missing, NOW),
            granted(Read::Unread, NOW),
        ];
        assert_eq!(
            counted(&accounts, H),
            [true; 3],
            "a majority would have to forget"
        );
    }

    /// Answered the acquire as held by another id, and read.
    fn held(read: Read) -> Account {
        Account {
            granted: false,
            read,
            missing_for: NOW,
        }
    }

    fn silent() -> Account {
        Account {
            granted: false,
            read: Read::Unread,
            missing_for: NOW,
        }
    }

    #[test]
    fn the_hold_off_covers_the_longest_lease_and_the_largest_drift() {
        let longest = Duration::from_secs(60);
        assert!(HOLD_OFF >= longest + longest.mul_f64(0.1));
    }

    #[test]
    fn an_account_restarted_empty_beside_one_that_was_down_waits_out_the_hold_off() {
        // The chaos run: 0 held by the old leader, 1 back from a blackhole,
        // 2 restarted empty just now.
        let at = |missing_for| {
            [
                held(Read::Carries),
                granted(Read::Carries, NOW),
                granted(Read::Missing, missing_for),
            ]
        };
        assert_eq!(counted(&at(NOW), H), [false, true, false]);
        let almost = Duration::from_millis(66_999);
        assert_eq!(counted(&at(almost), H), [false, true, false]);
        assert_eq!(counted(&at(H), H), [false, true, true]);
    }

    #[test]
    fn two_empty_accounts_wait_when_the_third_carries_an_epoch() {
        // The third's holder may rest its deadline on it and on one of
        // the two, which forgot; the other never carried one (it was down
        // at every stamp) or forgot too.
        let accounts = [
            granted(Read::Missing, NOW),
            granted(Read::Missing, NOW),
            held(Read::Carries),
        ];
        assert_eq!(counted(&accounts, H), [false; 3]);
    }

    #[test]
    fn one_account_restarted_empty_beside_two_healthy_ones_costs_nothing() {
        let accounts = [
            granted(Read::Carries, NOW),
            granted(Read::Carries, NOW),
            granted(Read::Missing, NOW),
        ];
        assert_eq!(counted(&accounts, H), [true; 3], "every account granted");
        let one_held = [
            held(Read::Carries),
            granted(Read::Carries, NOW),
            granted(Read::Carries, NOW),
            granted(Read::Carries, NOW),
            granted(Read::Missing, NOW),
        ];
        let counted = counted(&one_held, H);
        assert_eq!(counted, [false, true, true, true, false]);
        assert_eq!(
            counted.iter().filter(|c| **c).count(),
            3,
            "a majority of five"
        );
    }

    #[test]
    fn a_brand_new_quorum_counts_every_account_at_once() {
        assert_eq!(counted(&[granted(Read::Missing, NOW); 3], H), [true; 3]);
        assert_eq!(counted(&[granted(Read::Missing, NOW)], H), [true]);
        let one_held = [
            held(Read::Missing),
            granted(Read::Missing, NOW),
            granted(Read::Missing, NOW),
        ];
        assert_eq!(counted(&one_held, H), [false, true, true]);
    }

    #[test]
    fn empty_accounts_wait_while_an_account_that_may_carry_an_epoch_is_not_read() {
        // A first term won on 0 and 1 and stamped them, 2 never granted
        // nor stamped (its acquire did not reach it); 1 restarted empty,
        // and 0, the leader's, does not answer the read: the leader's
        // deadline rests on 0 and 1, and 2 carries nothing to tell.
        let accounts = [
            held(Read::Unread),
            granted(Read::Missing, NOW),
            granted(Read::Missing, NOW),
        ];
        assert_eq!(counted(&accounts, H), [false; 3]);
        let accounts = [
            silent(),
            granted(Read::Missing, NOW),
            granted(Read::Missing, NOW),
        ];
        assert_eq!(counted(&accounts, H), [false; 3], "0 down");
        assert_eq!(
            counted(
                &[
                    silent(),
                    granted(Read::Missing, H),
                    granted(Read::Missing, H)
                ],
                H
            ),
            [false, true, true],
            "after the hold-off"
        );
    }

    #[test]
    fn a_granted_account_not_read_does_not_count_and_holds_off_the_empty_ones() {
        let accounts = [
            silent(),
            granted(Read::Unread, H),
            granted(Read::Missing, NOW),
            granted(Read::Missing, NOW),
            silent(),
        ];
        assert_eq!(
            counted(&accounts, H),
            [false; 5],
            "the unread one may carry one"
        );
        let accounts = [
            silent(),
            granted(Read::Unread, H),
            granted(Read::Carries, NOW),
            granted(Read::Carries, NOW),
        ];
        assert_eq!(counted(&accounts, H), [false, false, true, true]);
    }

    #[test]
    fn the_wait_starts_at_the_first_read_without_an_epoch_and_starts_over_after_one_with() {
        let mut since = None;
        since = first_missing(since, Read::Missing, false, 10);
        assert_eq!(since, Some(10));
        since = first_missing(since, Read::Unread, false, 20);
        assert_eq!(since, Some(10), "nothing learnt");
        since = first_missing(since, Read::Missing, false, 30);
        assert_eq!(since, Some(10), "still the first");
        assert_eq!(first_missing(since, Read::Carries, false, 40), None);
        assert_eq!(
            first_missing(since, Read::Missing, true, 40),
            None,
            "held by another"
        );
        assert_eq!(first_missing(since, Read::Unread, true, 40), None);
        assert_eq!(first_missing(None, Read::Unread, false, 40), None::<u32>);
    }
}
