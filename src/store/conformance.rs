//! Behavioural tests of the [`LeaseStore`] contract, written once and run
//! against every store: the in-memory one, the Azure one on Azurite, and a
//! store of your own.
//!
//! A store without leader state (whose `write_state` and `read_state` both
//! answer [`Error::Unsupported`], the trait's default) passes the state
//! checks by saying so.
//!
//! Each check takes two handles `a` and `b` on one fresh lease (two clients
//! of the same blob, say) and panics with a message naming the rule it found
//! broken. [`run_all`] runs every quick check, each on a fresh lease;
//! [`lease_expires_after_its_duration`] waits a whole lease duration (15 s of
//! Tokio time), so run it on its own, with paused time where the store
//! allows.
//!
//! ```no_run
//! # async fn example() {
//! use blob_mutex::{store::conformance, testing::MemoryLeaseStore};
//!
//! conformance::run_all(|name| async move {
//!     let store = MemoryLeaseStore::new(name);
//!     (store.clone(), store)
//! })
//! .await;
//! # }
//! ```

// Every check panics when the store breaks the rule it checks: that is
// its purpose, said once in the module docs.
#![allow(clippy::missing_panics_doc)]

use std::future::Future;
use std::time::Duration;

use crate::error::Error;
use crate::store::{
    Acquire, Candidate, LeaseId, LeaseInfo, LeaseSetStore, LeaseState, LeaseStore, StampOptions,
    MAX_STATE_LEN,
};

/// The lease duration the checks use: the shortest Azure allows.
pub const DURATION: Duration = Duration::from_secs(15);

/// Runs every quick check, each on a fresh pair of handles from `fresh`,
/// which is given the check's name (to name a fresh blob, for example).
pub async fn run_all<S, F, Fut>(fresh: F)
where
    S: LeaseStore,
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = (S, S)>,
{
    let (a, b) = fresh("acquire").await;
    acquire_is_exclusive_and_idempotent(&a, &b).await;
    let (a, b) = fresh("renew").await;
    renew_keeps_the_lease_and_only_for_its_id(&a, &b).await;
    let (a, b) = fresh("release").await;
    release_frees_the_lease_at_once(&a, &b).await;
    let (a, b) = fresh("stamp").await;
    stamp_needs_the_lease_and_epochs_increase(&a, &b).await;
    let (a, b) = fresh("inspect").await;
    inspect_needs_no_lease_and_shows_the_last_term(&a, &b).await;
    let (a, b) = fresh("state-fenced").await;
    state_writes_land_only_under_the_lease(&a, &b).await;
    let (a, b) = fresh("state-kept").await;
    state_is_kept_across_terms_with_the_metadata(&a, &b).await;
    let (a, b) = fresh("change").await;
    change_passes_the_lease_to_the_proposed_id(&a, &b).await;
    let (a, b) = fresh("stamp-floor").await;
    stamp_at_a_floor_keeps_epochs_increasing(&a, &b).await;
    let (a, b) = fresh("candidates").await;
    candidates_are_listed_while_their_record_is_held(&a, &b).await;
    let (a, b) = fresh("advertised").await;
    advertised_values_belong_to_their_term(&a, &b).await;
}

/// How much longer than its request timeout a call may take to give up
/// on a silent endpoint: the time to notice, on a loaded machine.
pub const SILENT_SLACK: Duration = Duration::from_secs(2);

/// Every call of `store` gives up with [`Error::Timeout`] within `limit`
/// (plus [`SILENT_SLACK`]) when storage accepts connections and never
/// answers: a store built with the request timeout `limit` is bounded by
/// it on every path. `store` must reach such an endpoint (a listener that
/// accepts and never answers); calls the store does not support answer
/// [`Error::Unsupported`] at once and pass. Real time, not Tokio's: run it
/// on a runtime whose time is not paused.
pub async fn every_call_is_bounded_when_storage_never_answers<S: LeaseStore>(
    store: &S,
    limit: Duration,
) {
    let (id, other) = (LeaseId::new(), LeaseId::new());
    let candidate = Candidate::new("silent", 1, other);
    check_bounded("acquire", limit, store.acquire(id, DURATION)).await;
    check_bounded("renew", limit, store.renew(id)).await;
    check_bounded("release", limit, store.release(id)).await;
    check_bounded(
        "stamp",
        limit,
        store.stamp(id, "silent", &StampOptions::new()),
    )
    .await;
    let options = StampOptions::new()
        .with_floor(7)
        .with_advertised("10.0.0.1:80");
    check_bounded(
        "stamp with options",
        limit,
        store.stamp(id, "silent", &options),
    )
    .await;
    check_bounded("change", limit, store.change(id, other)).await;
    check_bounded("inspect", limit, store.inspect()).await;
    check_bounded("read state", limit, store.read_state()).await;
    check_bounded("write state", limit, store.write_state(id, b"x")).await;
    check_bounded(
        "advertise",
        limit,
        store.advertise(other, &candidate, DURATION),
    )
    .await;
    check_bounded(
        "keep advertising",
        limit,
        store.keep_advertising(other, "silent"),
    )
    .await;
    check_bounded("withdraw", limit, store.withdraw(other, "silent")).await;
    check_bounded("candidates", limit, store.candidates()).await;
}

/// As [`every_call_is_bounded_when_storage_never_answers`], for a lease
/// set's store: its listing, and every call of a lease it makes.
pub async fn every_set_call_is_bounded_when_storage_never_answers<S: LeaseSetStore>(
    store: &S,
    limit: Duration,
) {
    check_bounded("list", limit, store.list("")).await;
    let lease = store
        .lease("partitions/silent")
        .expect("a set makes the lease partitions/silent");
    every_call_is_bounded_when_storage_never_answers(&lease, limit).await;
}

/// Runs `call` against a silent store and checks that it gave up in time,
/// with [`Error::Timeout`] (or [`Error::Unsupported`] at once).
async fn check_bounded<T: std::fmt::Debug>(
    rule: &str,
    limit: Duration,
    call: impl Future<Output = Result<T, Error>>,
) {
    let started = std::time::Instant::now();
    let answer = tokio::time::timeout(limit + SILENT_SLACK * 5, call).await;
    let took = started.elapsed();
    let Ok(answer) = answer else {
        panic!(
            "{rule}: no answer after {took:?} from a silent store with a {limit:?} request timeout"
        );
    };
    match answer {
        Err(Error::Unsupported { .. }) => {}
        Err(Error::Timeout { .. }) => assert!(
            took <= limit + SILENT_SLACK,
            "{rule}: gave up after {took:?}, more than the request timeout {limit:?} plus {SILENT_SLACK:?}"
        ),
        other => panic!("{rule}: {other:?} from a silent store, not a time-out"),
    }
}

/// Acquire grants the lease to one id; the same id acquires again
/// (idempotent); another id is told it is held, not given an error.
pub async fn acquire_is_exclusive_and_idempotent<S: LeaseStore>(a: &S, b: &S) {
    let (first, second) = (LeaseId::new(), LeaseId::new());
    assert_eq!(
        ok(a.acquire(first, DURATION).await, "acquire"),
        Acquire::Acquired
    );
    assert_eq!(
        ok(a.acquire(first, DURATION).await, "acquire again"),
        Acquire::Acquired,
        "acquiring again with the holding id must succeed (idempotent acquire)"
    );
    assert_eq!(
        ok(b.acquire(second, DURATION).await, "acquire by another id"),
        Acquire::Held,
        "a held lease must not be granted to another id"
    );
    ok(a.release(first).await, "release");
}

/// Renew succeeds for the holder, and is a definitive loss for another id.
pub async fn renew_keeps_the_lease_and_only_for_its_id<S: LeaseStore>(a: &S, b: &S) {
    let (holder, other) = (LeaseId::new(), LeaseId::new());
    ok(a.acquire(holder, DURATION).await, "acquire");
    ok(a.renew(holder).await, "renew");
    assert_lost(
        &b.renew(other).await,
        "renew under an id that does not hold the lease",
    );
    assert_eq!(
        ok(b.acquire(other, DURATION).await, "acquire by another id"),
        Acquire::Held,
        "renewing must keep the lease"
    );
    ok(a.release(holder).await, "release");
}

/// Release lets another id acquire at once; the released id has lost it.
pub async fn release_frees_the_lease_at_once<S: LeaseStore>(a: &S, b: &S) {
    let (first, second) = (LeaseId::new(), LeaseId::new());
    ok(a.acquire(first, DURATION).await, "acquire");
    ok(a.release(first).await, "release");
    assert_eq!(
        ok(b.acquire(second, DURATION).await, "acquire after a release"),
        Acquire::Acquired,
        "a released lease must be free at once"
    );
    assert_lost(
        &a.renew(first).await,
        "renew after the lease passed to another id",
    );
    assert_lost(
        &a.stamp(first, "a", &StampOptions::new()).await,
        "stamp after the lease passed to another id",
    );
    ok(b.release(second).await, "release");
}

/// Stamp works only for the holder, and every stamp returns a larger epoch,
/// across holders.
pub async fn stamp_needs_the_lease_and_epochs_increase<S: LeaseStore>(a: &S, b: &S) {
    let (first, second) = (LeaseId::new(), LeaseId::new());
    ok(a.acquire(first, DURATION).await, "acquire");
    let e1 = ok(a.stamp(first, "a", &StampOptions::new()).await, "stamp");
    let e2 = ok(
        a.stamp(first, "a", &StampOptions::new()).await,
        "stamp again",
    );
    assert!(e2 > e1, "epochs must strictly increase: {e1} then {e2}");
    assert_lost(
        &b.stamp(second, "b", &StampOptions::new()).await,
        "stamp under an id that does not hold the lease",
    );
    ok(a.release(first).await, "release");
    ok(
        b.acquire(second, DURATION).await,
        "acquire by the next holder",
    );
    let e3 = ok(
        b.stamp(second, "b", &StampOptions::new()).await,
        "stamp by the next holder",
    );
    assert!(
        e3 > e2,
        "the next holder's epoch must be larger: {e2} then {e3}"
    );
    ok(b.release(second).await, "release");
}

/// Inspect needs no lease and shows the state and the last term's holder
/// and epoch.
pub async fn inspect_needs_no_lease_and_shows_the_last_term<S: LeaseStore>(a: &S, b: &S) {
    let id = LeaseId::new();
    ok(a.acquire(id, DURATION).await, "acquire");
    let epoch = ok(a.stamp(id, "holder-a", &StampOptions::new()).await, "stamp");
    let info = ok(b.inspect().await, "inspect by a non-holder").expect("the lease exists");
    assert_eq!(info.state, LeaseState::Leased);
    assert_eq!(info.holder.as_deref(), Some("holder-a"));
    assert_eq!(info.epoch, epoch);
    ok(a.release(id).await, "release");
    let info = ok(b.inspect().await, "inspect").expect("the lease exists");
    assert!(info.state.is_free(), "released, yet {}", info.state);
}

/// A state write lands only under the id that holds the lease: it is
/// refused ([`Error::StateWriteRefused`]) for another id, after a release,
/// and after the lease passed to another id, and a refused write leaves the
/// state as the holders wrote it. Reads need no lease.
pub async fn state_writes_land_only_under_the_lease<S: LeaseStore>(a: &S, b: &S) {
    let (first, second) = (LeaseId::new(), LeaseId::new());
    ok(a.acquire(first, DURATION).await, "acquire");
    let written = a.write_state(first, b"one").await;
    if without_state(a, &written).await {
        ok(a.release(first).await, "release");
        return;
    }
    ok(written, "write state under the lease");
    assert_eq!(
        ok(b.read_state().await, "read state by a non-holder"),
        b"one",
        "a read needs no lease"
    );
    assert_refused(
        &b.write_state(second, b"intruder").await,
        "write state under an id that does not hold the lease",
    );
    ok(a.release(first).await, "release");
    assert_refused(
        &a.write_state(first, b"late").await,
        "write state after a release",
    );
    ok(
        b.acquire(second, DURATION).await,
        "acquire by the next holder",
    );
    assert_refused(
        &a.write_state(first, b"late").await,
        "write state after the lease passed to another id",
    );
    assert_eq!(
        ok(b.read_state().await, "read state"),
        b"one",
        "a refused write must not land"
    );
    ok(
        b.write_state(second, b"two").await,
        "write state by the next holder",
    );
    assert_eq!(ok(a.read_state().await, "read state"), b"two");
    ok(b.release(second).await, "release");
}

/// The state survives the end of a term and the next holder's stamp; a
/// write keeps the term's holder and epoch; state over [`MAX_STATE_LEN`] is
/// refused with [`Error::InvalidOption`] and changes nothing.
pub async fn state_is_kept_across_terms_with_the_metadata<S: LeaseStore>(a: &S, b: &S) {
    let (first, second) = (LeaseId::new(), LeaseId::new());
    ok(a.acquire(first, DURATION).await, "acquire");
    let epoch = ok(
        a.stamp(first, "holder-a", &StampOptions::new()).await,
        "stamp",
    );
    let written = a.write_state(first, b"checkpoint=1").await;
    if without_state(a, &written).await {
        ok(a.release(first).await, "release");
        return;
    }
    ok(written, "write state");
    let info = ok(b.inspect().await, "inspect").expect("the lease exists");
    assert_eq!(
        (info.holder.as_deref(), info.epoch),
        (Some("holder-a"), epoch),
        "a state write must keep the term's holder and epoch"
    );
    let too_long = vec![b'x'; MAX_STATE_LEN + 1];
    let result = a.write_state(first, &too_long).await;
    assert!(
        matches!(result, Err(Error::InvalidOption { field: "state", .. })),
        "state over MAX_STATE_LEN must be refused with Error::InvalidOption, got {result:?}"
    );
    ok(a.release(first).await, "release");
    ok(
        b.acquire(second, DURATION).await,
        "acquire by the next holder",
    );
    let next = ok(
        b.stamp(second, "holder-b", &StampOptions::new()).await,
        "stamp by the next holder",
    );
    assert!(next > epoch, "epochs must increase across a state write");
    assert_eq!(
        ok(b.read_state().await, "read state in the next term"),
        b"checkpoint=1",
        "lease calls must keep the state"
    );
    ok(b.release(second).await, "release");
}

/// A renewal of an expired lease under an id that never held it is a
/// definitive loss ([`Error::LeaseLost`]), whatever storage answers: Azurite
/// renews an expired lease under any id and answers with the old id, and a
/// store that counted that as renewed would lead on a lease it does not
/// hold. Takes [`DURATION`] and a little more of real (or paused) time;
/// leaves the lease in an unknown state (Azurite renews it).
///
/// # Panics
///
/// When the store breaks the rule.
pub async fn renewing_an_expired_lease_under_another_id_is_lost<S: LeaseStore>(a: &S) {
    ok(a.acquire(LeaseId::new(), DURATION).await, "acquire");
    // From the answer: the lease started before it, however long the call.
    let answered = tokio::time::Instant::now();
    tokio::time::sleep_until(answered + DURATION + Duration::from_millis(500)).await;
    assert_lost(
        &a.renew(LeaseId::new()).await,
        "renew of an expired lease under an id that never held it",
    );
}

/// A lease not renewed is granted to another id once its duration has
/// passed, not before; a candidate record not kept alive vanishes likewise (rule 9,
/// where supported). Waits [`DURATION`] and a little on Tokio's clock.
pub async fn lease_expires_after_its_duration<S: LeaseStore>(a: &S, b: &S) {
    let (first, second) = (LeaseId::new(), LeaseId::new());
    let candidate = Candidate::new("expiring-candidate", 1, LeaseId::new());
    // The lease starts when the store takes the request: after `sent`,
    // and before the answer (a first acquire may create the container and
    // the blob first, several requests on a loaded machine).
    let sent = tokio::time::Instant::now();
    ok(a.acquire(first, DURATION).await, "acquire");
    let answered = tokio::time::Instant::now();
    if a.supports_candidates() {
        ok(a.advertise(first, &candidate, DURATION).await, "advertise");
    }
    tokio::time::sleep_until(sent + DURATION - Duration::from_secs(1)).await;
    if a.supports_candidates() {
        let found = ok(b.candidates().await, "list candidates before the expiry");
        assert!(
            found.contains(&candidate),
            "a candidate must be listed until its record expires"
        );
    }
    assert_eq!(
        ok(
            b.acquire(second, DURATION).await,
            "acquire before the expiry"
        ),
        Acquire::Held,
        "the lease must not be granted to another id before its duration passed"
    );
    tokio::time::sleep_until(answered + DURATION + Duration::from_millis(500)).await;
    assert_eq!(
        ok(
            b.acquire(second, DURATION).await,
            "acquire after the expiry"
        ),
        Acquire::Acquired,
        "an expired lease must be free"
    );
    assert_lost(
        &a.renew(first).await,
        "renew after the lease expired and was taken",
    );
    if a.supports_candidates() {
        let found = ok(b.candidates().await, "list candidates after the expiry");
        assert!(
            !found.contains(&candidate),
            "a candidate whose record expired must vanish by itself (rule 9)"
        );
    }
    let late = a.write_state(first, b"late").await;
    if !without_state(a, &late).await {
        assert_refused(&late, "write state after the lease expired and was taken");
    }
    ok(b.release(second).await, "release");
}

/// Change passes the lease from the holder's id to the proposed one with
/// no gap: the proposed id holds it (its acquire is idempotent, it may
/// stamp and renew), a third id is told it is held, and the old id has lost
/// it. Changing again with the same ids succeeds; changing a lease neither
/// id holds is a loss. A store that answers the first change with
/// [`Error::Unsupported`] (the trait's default) is skipped.
pub async fn change_passes_the_lease_to_the_proposed_id<S: LeaseStore>(a: &S, b: &S) {
    let (from, to, third) = (LeaseId::new(), LeaseId::new(), LeaseId::new());
    ok(a.acquire(from, DURATION).await, "acquire");
    let e1 = ok(a.stamp(from, "a", &StampOptions::new()).await, "stamp");
    match a.change(from, to).await {
        Err(Error::Unsupported { .. }) => {
            ok(a.release(from).await, "release after an unsupported change");
            return;
        }
        changed => ok(changed, "change to the proposed id"),
    }
    ok(a.change(from, to).await, "change retried with the same ids");
    assert_eq!(
        ok(b.acquire(third, DURATION).await, "acquire by a third id"),
        Acquire::Held,
        "a changed lease stays held"
    );
    assert_eq!(
        ok(b.acquire(to, DURATION).await, "acquire by the proposed id"),
        Acquire::Acquired,
        "the proposed id finds the lease its own"
    );
    assert_lost(&a.renew(from).await, "renew under the id changed away");
    assert_lost(
        &a.stamp(from, "a", &StampOptions::new()).await,
        "stamp under the id changed away",
    );
    let e2 = ok(
        b.stamp(to, "b", &StampOptions::new()).await,
        "stamp by the new holder",
    );
    assert!(e2 > e1, "epochs must strictly increase: {e1} then {e2}");
    ok(b.renew(to).await, "renew by the new holder");
    ok(b.release(to).await, "release by the new holder");
    assert_lost(&a.change(from, third).await, "change of a free lease");
}

/// Stamping at a floor returns at least the floor and never less than the
/// next epoch; epochs keep increasing after it.
pub async fn stamp_at_a_floor_keeps_epochs_increasing<S: LeaseStore>(a: &S, b: &S) {
    let (first, second) = (LeaseId::new(), LeaseId::new());
    ok(a.acquire(first, DURATION).await, "acquire");
    let e1 = ok(a.stamp(first, "a", &StampOptions::new()).await, "stamp");
    let floor = |floor| StampOptions::new().with_floor(floor);
    let e2 = ok(
        a.stamp(first, "a", &floor(e1 + 10)).await,
        "stamp at a floor above the next epoch",
    );
    assert_eq!(e2, e1 + 10, "the floor is the epoch when it is larger");
    let e3 = ok(
        a.stamp(first, "a", &floor(1)).await,
        "stamp at a floor below the next epoch",
    );
    assert_eq!(e3, e2 + 1, "a low floor changes nothing");
    assert_lost(
        &b.stamp(second, "b", &floor(e3 + 5)).await,
        "stamp at a floor under an id that does not hold the lease",
    );
    ok(a.release(first).await, "release");
    ok(
        b.acquire(second, DURATION).await,
        "acquire by the next holder",
    );
    let e4 = ok(
        b.stamp(second, "b", &StampOptions::new()).await,
        "stamp by the next holder",
    );
    assert!(e4 > e3, "epochs must strictly increase: {e3} then {e4}");
    ok(b.release(second).await, "release");
}

/// Rule 10: for a store that [supports advertised values](LeaseStore::supports_advertised),
/// what a stamp advertises is read back by another handle with the term's
/// holder and epoch, at a floor too; a bad value is refused before anything
/// changes; a plain stamp of the next term removes it; only the holder may
/// stamp. A store that does not support them refuses a stamp that carries
/// one with [`Error::Unsupported`], and stamps nothing.
pub async fn advertised_values_belong_to_their_term<S: LeaseStore>(a: &S, b: &S) {
    if !a.supports_advertised() {
        advertised_values_are_refused_when_unsupported(a).await;
        return;
    }
    let (first, second) = (LeaseId::new(), LeaseId::new());
    let shown = |info: Option<LeaseInfo>| {
        let info = info.expect("the lease exists after a stamp");
        (info.holder, info.epoch, info.advertised)
    };
    let advertising =
        |value: &str, floor| StampOptions::new().with_advertised(value).with_floor(floor);
    ok(a.acquire(first, DURATION).await, "acquire");
    let e1 = ok(
        a.stamp(first, "a", &advertising("10.0.0.7:8080", 0)).await,
        "stamp advertising",
    );
    let seen = shown(ok(b.inspect().await, "inspect by a non-holder"));
    assert_eq!(
        seen,
        (Some("a".to_owned()), e1, Some("10.0.0.7:8080".to_owned())),
        "the advertised value is read back with the term"
    );
    match a.stamp(first, "a", &advertising("two\nlines", 0)).await {
        Err(Error::InvalidOption { field, .. }) => assert_eq!(field, "advertised"),
        other => panic!("a value that is no header value must be refused: {other:?}"),
    }
    let seen = shown(ok(b.inspect().await, "inspect after a refused stamp"));
    assert_eq!(seen.1, e1, "a refused stamp changes nothing");
    ok(a.release(first).await, "release");
    ok(
        b.acquire(second, DURATION).await,
        "acquire by the next holder",
    );
    assert_lost(
        &a.stamp(first, "a", &advertising("10.0.0.7:8080", 0)).await,
        "stamp advertising under an id that does not hold the lease",
    );
    let e2 = ok(
        b.stamp(second, "b", &StampOptions::new()).await,
        "plain stamp of the next term",
    );
    let seen = shown(ok(a.inspect().await, "inspect after a plain stamp"));
    assert_eq!(
        seen,
        (Some("b".to_owned()), e2, None),
        "a term that advertises nothing shows nothing, not the last term's value"
    );
    let e3 = ok(
        b.stamp(second, "b", &advertising("b.internal:9", e2 + 5))
            .await,
        "stamp advertising at a floor",
    );
    assert_eq!(e3, e2 + 5, "the floor is the epoch when it is larger");
    let seen = shown(ok(a.inspect().await, "inspect after a stamp at a floor"));
    assert_eq!(seen.2.as_deref(), Some("b.internal:9"));
    ok(b.release(second).await, "release");
}

/// A store that keeps no advertised value answers a stamp that carries one
/// with [`Error::Unsupported`], and the epoch stays as it was.
async fn advertised_values_are_refused_when_unsupported<S: LeaseStore>(a: &S) {
    let lease = LeaseId::new();
    ok(a.acquire(lease, DURATION).await, "acquire");
    let e1 = ok(a.stamp(lease, "a", &StampOptions::new()).await, "stamp");
    let advertising = StampOptions::new().with_advertised("10.0.0.7:8080");
    let refused = a.stamp(lease, "a", &advertising).await;
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "a store that keeps no advertised value must refuse a stamp that carries one \
         with Error::Unsupported, got {refused:?}"
    );
    let e2 = ok(
        a.stamp(lease, "a", &StampOptions::new()).await,
        "stamp after the refusal",
    );
    assert_eq!(e2, e1 + 1, "a refused stamp changes no epoch");
    ok(a.release(lease).await, "release");
}

/// Rule 9, for a store that [supports candidates](LeaseStore::supports_candidates)
/// (a store that does not is skipped): an advertised candidate is listed
/// with its holder, priority and proposed id, by a handle that holds
/// nothing; a second record for the same holder name under another id is
/// told it is held and changes nothing; a withdrawn candidate is no longer
/// listed, and its record is then lost to `keep_advertising` and `withdraw`.
pub async fn candidates_are_listed_while_their_record_is_held<S: LeaseStore>(a: &S, b: &S) {
    if !a.supports_candidates() {
        return;
    }
    let (record, other) = (LeaseId::new(), LeaseId::new());
    let first = Candidate::new("candidate-a", 7, LeaseId::new());
    let listed = |found: &[Candidate], c: &Candidate| found.iter().any(|f| f == c);
    assert_eq!(
        ok(a.advertise(record, &first, DURATION).await, "advertise"),
        Acquire::Acquired
    );
    let found = ok(b.candidates().await, "list candidates by a non-holder");
    assert!(
        listed(&found, &first),
        "an advertised candidate must be listed as advertised"
    );
    let impostor = Candidate::new("candidate-a", 9, LeaseId::new());
    assert_eq!(
        ok(
            b.advertise(other, &impostor, DURATION).await,
            "advertise the same holder under another record"
        ),
        Acquire::Held,
        "a record held under another id is not taken over"
    );
    let found = ok(a.candidates().await, "list candidates");
    assert!(
        listed(&found, &first) && !listed(&found, &impostor),
        "a refused advertisement must change nothing"
    );
    ok(
        a.keep_advertising(record, "candidate-a").await,
        "keep advertising",
    );
    let second = Candidate::new("candidate-b", -3, LeaseId::new());
    ok(
        b.advertise(other, &second, DURATION).await,
        "advertise a second candidate",
    );
    let found = ok(a.candidates().await, "list candidates");
    assert!(
        listed(&found, &first) && listed(&found, &second),
        "both candidates are listed"
    );
    ok(a.withdraw(record, "candidate-a").await, "withdraw");
    let found = ok(b.candidates().await, "list candidates");
    assert!(
        !found.iter().any(|c| c.holder == "candidate-a"),
        "a withdrawn candidate must not be listed"
    );
    assert_lost(
        &a.keep_advertising(record, "candidate-a").await,
        "keep advertising after a withdrawal",
    );
    assert_lost(&a.withdraw(record, "candidate-a").await, "withdraw twice");
    ok(
        b.withdraw(other, "candidate-b").await,
        "withdraw the second candidate",
    );
}

/// Whether the store keeps no leader state: a write answered
/// [`Error::Unsupported`] (the trait's default), which passes the state
/// checks as long as reads answer the same.
async fn without_state<S: LeaseStore>(a: &S, written: &Result<(), Error>) -> bool {
    if !matches!(written, Err(Error::Unsupported { .. })) {
        return false;
    }
    let read = a.read_state().await;
    assert!(
        matches!(read, Err(Error::Unsupported { .. })),
        "a store that cannot write state must not read any either, got {read:?}"
    );
    true
}

fn ok<T>(result: Result<T, Error>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what} failed: {e}"))
}

fn assert_refused(result: &Result<(), Error>, what: &str) {
    assert!(
        matches!(result, Err(Error::StateWriteRefused(_))),
        "{what} must fail with Error::StateWriteRefused, got {result:?}"
    );
}

fn assert_lost<T: std::fmt::Debug>(result: &Result<T, Error>, what: &str) {
    assert!(
        matches!(result, Err(Error::LeaseLost(_))),
        "{what} must fail with Error::LeaseLost (a definitive loss), got {result:?}"
    );
}
