//! Names every public item by the path a user writes, so that a move that
//! drops a re-export fails to compile. Generated from the list of the public
//! API: `scripts/public-api --test tests/fixtures/public-api.txt`.
// The list is made with every feature; `testing` gates the memory stores and
// the conformance suite, `official` and `sdk-v021` the backends' own types,
// `azure_identity` the credential chosen from the environment. Deprecated
// items are public until they are removed: they are named too.
#![allow(deprecated)]
#![cfg(all(
    feature = "testing",
    feature = "official",
    feature = "sdk-v021",
    feature = "azure_identity"
))]

#[allow(unused_imports)]
use blob_mutex::conformance::{
    acquire_is_exclusive_and_idempotent, advertised_values_belong_to_their_term,
    candidates_are_listed_while_their_record_is_held, change_passes_the_lease_to_the_proposed_id,
    every_call_is_bounded_when_storage_never_answers,
    every_set_call_is_bounded_when_storage_never_answers,
    inspect_needs_no_lease_and_shows_the_last_term, lease_expires_after_its_duration,
    release_frees_the_lease_at_once, renew_keeps_the_lease_and_only_for_its_id,
    renewing_an_expired_lease_under_another_id_is_lost, run_all,
    stamp_at_a_floor_keeps_epochs_increasing, stamp_needs_the_lease_and_epochs_increase,
    state_is_kept_across_terms_with_the_metadata, state_writes_land_only_under_the_lease, DURATION,
    SILENT_SLACK,
};
#[allow(unused_imports)]
use blob_mutex::guide::{
    backends, cli, election, guarantees, handover, model, operations, options, partitions, quorum,
    shapes, state, testing,
};
#[allow(unused_imports)]
use blob_mutex::health::{Health, Verdict, UNREACHABLE_AFTER};
#[allow(unused_imports)]
use blob_mutex::{
    conformance, credential_options, default_credential, guide, health, AccountLease, Acquire,
    Backend, BlobDistributedMutex, BlobLeaseManager, BlobLeaseSet, BlobLeaseSetStore, BlobLocks,
    BlobSettings, BoxError, CancellationToken, Candidate, Cause, Collection, Error, Heartbeat,
    Holding, Leader, LeaderContext, Leadership, LeaseId, LeaseInfo, LeaseSetOptions, LeaseSetStore,
    LeaseState, LeaseStore, MemoryLeaseSetStore, MemoryLeaseStore, MutexGuard, MutexOptions,
    OfficialSettings, OnceOptions, OnceOutcome, PartitionContext, PartitionReport,
    QuorumLeaseSetStore, QuorumLeaseStore, Result, SkipReason, StampOptions, StopReason, Strategy,
    TaskStop, TermReport, TryAcquire, ACQUIRED_AT_KEY, ADVERTISED_KEY, AZURITE_ACCOUNT,
    AZURITE_ENDPOINT, DONE_KEY_MAX, EPOCH_KEY, FAIL_STOP_EXIT_CODE, HOLDER_KEY, MAX_ADVERTISED_LEN,
    MAX_QUORUM_ACCOUNTS, MAX_STATE_LEN, MEMBER_KEY, PRIORITY_KEY, PROPOSED_KEY, STOP_SLACK,
};

/// The items named above.
const NAMED: &[&str] = &[
    "blob_mutex::ACQUIRED_AT_KEY",
    "blob_mutex::ADVERTISED_KEY",
    "blob_mutex::AZURITE_ACCOUNT",
    "blob_mutex::AZURITE_ENDPOINT",
    "blob_mutex::AccountLease",
    "blob_mutex::Acquire",
    "blob_mutex::Backend",
    "blob_mutex::BlobDistributedMutex",
    "blob_mutex::BlobLeaseManager",
    "blob_mutex::BlobLeaseSet",
    "blob_mutex::BlobLeaseSetStore",
    "blob_mutex::BlobLocks",
    "blob_mutex::BlobSettings",
    "blob_mutex::BoxError",
    "blob_mutex::CancellationToken",
    "blob_mutex::Candidate",
    "blob_mutex::Cause",
    "blob_mutex::Collection",
    "blob_mutex::DONE_KEY_MAX",
    "blob_mutex::EPOCH_KEY",
    "blob_mutex::Error",
    "blob_mutex::FAIL_STOP_EXIT_CODE",
    "blob_mutex::HOLDER_KEY",
    "blob_mutex::Heartbeat",
    "blob_mutex::Holding",
    "blob_mutex::Leader",
    "blob_mutex::LeaderContext",
    "blob_mutex::Leadership",
    "blob_mutex::LeaseId",
    "blob_mutex::LeaseInfo",
    "blob_mutex::LeaseSetOptions",
    "blob_mutex::LeaseSetStore",
    "blob_mutex::LeaseState",
    "blob_mutex::LeaseStore",
    "blob_mutex::MAX_ADVERTISED_LEN",
    "blob_mutex::MAX_QUORUM_ACCOUNTS",
    "blob_mutex::MAX_STATE_LEN",
    "blob_mutex::MEMBER_KEY",
    "blob_mutex::MemoryLeaseSetStore",
    "blob_mutex::MemoryLeaseStore",
    "blob_mutex::MutexGuard",
    "blob_mutex::MutexOptions",
    "blob_mutex::OfficialSettings",
    "blob_mutex::OnceOptions",
    "blob_mutex::OnceOutcome",
    "blob_mutex::PRIORITY_KEY",
    "blob_mutex::PROPOSED_KEY",
    "blob_mutex::PartitionContext",
    "blob_mutex::PartitionReport",
    "blob_mutex::QuorumLeaseSetStore",
    "blob_mutex::QuorumLeaseStore",
    "blob_mutex::Result",
    "blob_mutex::STOP_SLACK",
    "blob_mutex::SkipReason",
    "blob_mutex::StampOptions",
    "blob_mutex::StopReason",
    "blob_mutex::Strategy",
    "blob_mutex::TaskStop",
    "blob_mutex::TermReport",
    "blob_mutex::TryAcquire",
    "blob_mutex::conformance",
    "blob_mutex::conformance::DURATION",
    "blob_mutex::conformance::SILENT_SLACK",
    "blob_mutex::conformance::acquire_is_exclusive_and_idempotent",
    "blob_mutex::conformance::advertised_values_belong_to_their_term",
    "blob_mutex::conformance::candidates_are_listed_while_their_record_is_held",
    "blob_mutex::conformance::change_passes_the_lease_to_the_proposed_id",
    "blob_mutex::conformance::every_call_is_bounded_when_storage_never_answers",
    "blob_mutex::conformance::every_set_call_is_bounded_when_storage_never_answers",
    "blob_mutex::conformance::inspect_needs_no_lease_and_shows_the_last_term",
    "blob_mutex::conformance::lease_expires_after_its_duration",
    "blob_mutex::conformance::release_frees_the_lease_at_once",
    "blob_mutex::conformance::renew_keeps_the_lease_and_only_for_its_id",
    "blob_mutex::conformance::renewing_an_expired_lease_under_another_id_is_lost",
    "blob_mutex::conformance::run_all",
    "blob_mutex::conformance::stamp_at_a_floor_keeps_epochs_increasing",
    "blob_mutex::conformance::stamp_needs_the_lease_and_epochs_increase",
    "blob_mutex::conformance::state_is_kept_across_terms_with_the_metadata",
    "blob_mutex::conformance::state_writes_land_only_under_the_lease",
    "blob_mutex::credential_options",
    "blob_mutex::default_credential",
    "blob_mutex::guide",
    "blob_mutex::guide::backends",
    "blob_mutex::guide::cli",
    "blob_mutex::guide::election",
    "blob_mutex::guide::guarantees",
    "blob_mutex::guide::handover",
    "blob_mutex::guide::model",
    "blob_mutex::guide::operations",
    "blob_mutex::guide::options",
    "blob_mutex::guide::partitions",
    "blob_mutex::guide::quorum",
    "blob_mutex::guide::shapes",
    "blob_mutex::guide::state",
    "blob_mutex::guide::testing",
    "blob_mutex::health",
    "blob_mutex::health::Health",
    "blob_mutex::health::UNREACHABLE_AFTER",
    "blob_mutex::health::Verdict",
];

#[test]
fn names_the_items_of_the_saved_list() {
    let list = include_str!("fixtures/public-api.txt");
    let modules: Vec<&str> = std::iter::once("blob_mutex")
        .chain(
            list.lines()
                .filter_map(|line| line.strip_suffix(" (module)")),
        )
        .collect();
    let mut listed: Vec<&str> = list
        .lines()
        .filter(|line| !line.contains(": impl ") && !line.ends_with(" (crate)"))
        .filter_map(|line| line.split(" (").next())
        .filter(|path| {
            path.rsplit_once("::")
                .is_some_and(|(parent, _)| modules.contains(&parent))
        })
        .collect();
    listed.sort_unstable();
    assert_eq!(
        listed, NAMED,
        "regenerate: scripts/public-api --test tests/fixtures/public-api.txt > tests/public_api.rs"
    );
}
