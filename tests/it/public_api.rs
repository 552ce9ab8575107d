//! Names every public item by the path a user writes, so that a move that
//! drops a re-export fails to compile. Generated from the list of the public
//! API: `scripts/public-api --test tests/fixtures/public-api.txt`.
// The list is made with every feature: `main.rs` compiles this module only
// when every feature that the list names is on. Deprecated items are
// public until they are removed: they are named too.
#![allow(deprecated, non_snake_case)]

mod blob_mutex {
    #[allow(unused_imports)]
    use blob_mutex::{
        azure, error, guide, health, partitions, quorum, schedule, store, term, testing,
        BlobDistributedMutex, BlobLeaseSet, BlobLocks, BlobSettings, CancellationToken, Error,
        LeaderContext, LeaseSetOptions, MutexGuard, MutexOptions, OnceOptions, OnceOutcome,
        PartitionContext, Result, SkipReason, TryAcquire,
    };
}
mod blob_mutex_azure {
    #[allow(unused_imports)]
    use blob_mutex::azure::{
        credential_options, default_credential, metadata, Backend, BlobLeaseManager,
        BlobLeaseSetStore, AZURITE_ACCOUNT, AZURITE_ENDPOINT,
    };
}
mod blob_mutex_azure_metadata {
    #[allow(unused_imports)]
    use blob_mutex::azure::metadata::{
        ACQUIRED_AT_KEY, ADVERTISED_KEY, EPOCH_KEY, HOLDER_KEY, MEMBER_KEY, PRIORITY_KEY,
        PROPOSED_KEY,
    };
}
mod blob_mutex_error {
    #[allow(unused_imports)]
    use blob_mutex::error::{BoxError, Cause, Error, Result};
}
mod blob_mutex_guide {
    #[allow(unused_imports)]
    use blob_mutex::guide::{
        backends, cli, election, guarantees, handover, model, operations, options, partitions,
        quorum, shapes, state, testing,
    };
}
mod blob_mutex_health {
    #[allow(unused_imports)]
    use blob_mutex::health::{Health, Verdict, UNREACHABLE_AFTER};
}
mod blob_mutex_partitions {
    #[allow(unused_imports)]
    use blob_mutex::partitions::{PartitionReport, Strategy};
}
mod blob_mutex_quorum {
    #[allow(unused_imports)]
    use blob_mutex::quorum::{
        AccountLease, Holding, QuorumLeaseSetStore, QuorumLeaseStore, MAX_QUORUM_ACCOUNTS,
    };
}
mod blob_mutex_schedule {
    #[allow(unused_imports)]
    use blob_mutex::schedule::{
        BlobSchedule, Overlap, RecordedOutcome, RecordedSlot, ScheduleOptions, ScheduleRecord,
        Slot, SlotOutcome, SlotReport,
    };
}
mod blob_mutex_store {
    #[allow(unused_imports)]
    use blob_mutex::store::{
        conformance, Acquire, Candidate, Collection, LeaseId, LeaseInfo, LeaseSetStore, LeaseState,
        LeaseStore, StampOptions, MAX_ADVERTISED_LEN, MAX_STATE_LEN,
    };
}
mod blob_mutex_store_conformance {
    #[allow(unused_imports)]
    use blob_mutex::store::conformance::{
        acquire_is_exclusive_and_idempotent, advertised_values_belong_to_their_term,
        candidates_are_listed_while_their_record_is_held,
        change_passes_the_lease_to_the_proposed_id,
        every_call_is_bounded_when_storage_never_answers,
        every_set_call_is_bounded_when_storage_never_answers,
        inspect_needs_no_lease_and_shows_the_last_term, lease_expires_after_its_duration,
        release_frees_the_lease_at_once, renew_keeps_the_lease_and_only_for_its_id,
        renewing_an_expired_lease_under_another_id_is_lost, run_all,
        stamp_at_a_floor_keeps_epochs_increasing, stamp_needs_the_lease_and_epochs_increase,
        state_is_kept_across_terms_with_the_metadata, state_writes_land_only_under_the_lease,
        DURATION, SILENT_SLACK,
    };
}
mod blob_mutex_term {
    #[allow(unused_imports)]
    use blob_mutex::term::{
        Heartbeat, Leader, Leadership, StopReason, TaskStop, TermReport, FAIL_STOP_EXIT_CODE,
        STOP_SLACK,
    };
}
mod blob_mutex_testing {
    #[allow(unused_imports)]
    use blob_mutex::testing::{MemoryLeaseSetStore, MemoryLeaseStore};
}

/// The items named above.
const NAMED: &[&str] = &[
    "blob_mutex::BlobDistributedMutex",
    "blob_mutex::BlobLeaseSet",
    "blob_mutex::BlobLocks",
    "blob_mutex::BlobSettings",
    "blob_mutex::CancellationToken",
    "blob_mutex::Error",
    "blob_mutex::LeaderContext",
    "blob_mutex::LeaseSetOptions",
    "blob_mutex::MutexGuard",
    "blob_mutex::MutexOptions",
    "blob_mutex::OnceOptions",
    "blob_mutex::OnceOutcome",
    "blob_mutex::PartitionContext",
    "blob_mutex::Result",
    "blob_mutex::SkipReason",
    "blob_mutex::TryAcquire",
    "blob_mutex::azure",
    "blob_mutex::azure::AZURITE_ACCOUNT",
    "blob_mutex::azure::AZURITE_ENDPOINT",
    "blob_mutex::azure::Backend",
    "blob_mutex::azure::BlobLeaseManager",
    "blob_mutex::azure::BlobLeaseSetStore",
    "blob_mutex::azure::credential_options",
    "blob_mutex::azure::default_credential",
    "blob_mutex::azure::metadata",
    "blob_mutex::azure::metadata::ACQUIRED_AT_KEY",
    "blob_mutex::azure::metadata::ADVERTISED_KEY",
    "blob_mutex::azure::metadata::EPOCH_KEY",
    "blob_mutex::azure::metadata::HOLDER_KEY",
    "blob_mutex::azure::metadata::MEMBER_KEY",
    "blob_mutex::azure::metadata::PRIORITY_KEY",
    "blob_mutex::azure::metadata::PROPOSED_KEY",
    "blob_mutex::error",
    "blob_mutex::error::BoxError",
    "blob_mutex::error::Cause",
    "blob_mutex::error::Error",
    "blob_mutex::error::Result",
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
    "blob_mutex::partitions",
    "blob_mutex::partitions::PartitionReport",
    "blob_mutex::partitions::Strategy",
    "blob_mutex::quorum",
    "blob_mutex::quorum::AccountLease",
    "blob_mutex::quorum::Holding",
    "blob_mutex::quorum::MAX_QUORUM_ACCOUNTS",
    "blob_mutex::quorum::QuorumLeaseSetStore",
    "blob_mutex::quorum::QuorumLeaseStore",
    "blob_mutex::schedule",
    "blob_mutex::schedule::BlobSchedule",
    "blob_mutex::schedule::Overlap",
    "blob_mutex::schedule::RecordedOutcome",
    "blob_mutex::schedule::RecordedSlot",
    "blob_mutex::schedule::ScheduleOptions",
    "blob_mutex::schedule::ScheduleRecord",
    "blob_mutex::schedule::Slot",
    "blob_mutex::schedule::SlotOutcome",
    "blob_mutex::schedule::SlotReport",
    "blob_mutex::store",
    "blob_mutex::store::Acquire",
    "blob_mutex::store::Candidate",
    "blob_mutex::store::Collection",
    "blob_mutex::store::LeaseId",
    "blob_mutex::store::LeaseInfo",
    "blob_mutex::store::LeaseSetStore",
    "blob_mutex::store::LeaseState",
    "blob_mutex::store::LeaseStore",
    "blob_mutex::store::MAX_ADVERTISED_LEN",
    "blob_mutex::store::MAX_STATE_LEN",
    "blob_mutex::store::StampOptions",
    "blob_mutex::store::conformance",
    "blob_mutex::store::conformance::DURATION",
    "blob_mutex::store::conformance::SILENT_SLACK",
    "blob_mutex::store::conformance::acquire_is_exclusive_and_idempotent",
    "blob_mutex::store::conformance::advertised_values_belong_to_their_term",
    "blob_mutex::store::conformance::candidates_are_listed_while_their_record_is_held",
    "blob_mutex::store::conformance::change_passes_the_lease_to_the_proposed_id",
    "blob_mutex::store::conformance::every_call_is_bounded_when_storage_never_answers",
    "blob_mutex::store::conformance::every_set_call_is_bounded_when_storage_never_answers",
    "blob_mutex::store::conformance::inspect_needs_no_lease_and_shows_the_last_term",
    "blob_mutex::store::conformance::lease_expires_after_its_duration",
    "blob_mutex::store::conformance::release_frees_the_lease_at_once",
    "blob_mutex::store::conformance::renew_keeps_the_lease_and_only_for_its_id",
    "blob_mutex::store::conformance::renewing_an_expired_lease_under_another_id_is_lost",
    "blob_mutex::store::conformance::run_all",
    "blob_mutex::store::conformance::stamp_at_a_floor_keeps_epochs_increasing",
    "blob_mutex::store::conformance::stamp_needs_the_lease_and_epochs_increase",
    "blob_mutex::store::conformance::state_is_kept_across_terms_with_the_metadata",
    "blob_mutex::store::conformance::state_writes_land_only_under_the_lease",
    "blob_mutex::term",
    "blob_mutex::term::FAIL_STOP_EXIT_CODE",
    "blob_mutex::term::Heartbeat",
    "blob_mutex::term::Leader",
    "blob_mutex::term::Leadership",
    "blob_mutex::term::STOP_SLACK",
    "blob_mutex::term::StopReason",
    "blob_mutex::term::TaskStop",
    "blob_mutex::term::TermReport",
    "blob_mutex::testing",
    "blob_mutex::testing::MemoryLeaseSetStore",
    "blob_mutex::testing::MemoryLeaseStore",
];

#[test]
fn names_the_items_of_the_saved_list() {
    let list = include_str!("../fixtures/public-api.txt");
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
        "regenerate: scripts/public-api --test tests/fixtures/public-api.txt"
    );
}
