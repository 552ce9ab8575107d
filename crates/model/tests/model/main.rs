//! The model checker: every interleaving of small configurations of the
//! quorum, on the crate's own decisions (`src/quorum/rules.rs`,
//! compiled here as it is), checked to completion; and the planted defects,
//! each found with a counterexample printed step by step. See the guide's
//! chapter on the model (docs/guide/model.md).

// The decisions the quorum store runs, the same file.
#[path = "../../../../src/quorum/rules.rs"]
#[allow(dead_code, unreachable_pub)]
mod rules;

// The hold-off of a new term, the same file.
#[path = "../../../../src/quorum/hold_off.rs"]
#[allow(dead_code, unreachable_pub)]
mod hold_off;

// The lease set's balancer, the same file.
#[path = "../../../../src/lease_set/balance.rs"]
#[allow(dead_code, unreachable_pub)]
mod balance;

// When the lease set's balancer lists the whole set, the same file.
#[path = "../../../../src/lease_set/cadence.rs"]
#[allow(dead_code, unreachable_pub)]
mod cadence;

// The handover's decisions, the same file.
#[path = "../../../../src/engine/handover.rs"]
#[allow(dead_code, unreachable_pub)]
mod handover_rules;

// The schedule's decisions: what is due, and what a term enters in the
// record, with the record and the slots they read, the same files (at the
// root, where they find each other as `super::…`).
#[path = "../../../../src/fleet/due.rs"]
#[allow(dead_code, unreachable_pub)]
mod due;
#[path = "../../../../src/fleet/entries.rs"]
#[allow(dead_code, unreachable_pub)]
mod entries;
#[path = "../../../../src/fleet/record.rs"]
#[allow(dead_code, unreachable_pub)]
mod record;
#[path = "../../../../src/fleet/slots.rs"]
#[allow(dead_code, unreachable_pub)]
mod slots;

mod check;
mod clock;
mod error;
mod handover;
mod lease_set;
mod quorum;
mod replay;
mod schedule;

use blob_mutex_testkit::trace::Trace;
use check::{check, Found};
use handover::{Config as HandoverConfig, Handover};
use lease_set::{Config as SetConfig, Faults as SetFaults, LeaseSet};
use quorum::{Config, Defects, Quorum};
use schedule::{Config as ScheduleConfig, Schedule};

#[test]
fn three_instances_on_three_accounts_keep_every_promise_in_every_interleaving() {
    // Nine ticks, for the planted defects' time (`scripts/model --deep`
    // checks twelve).
    let mut config = Config::three_by_three();
    config.horizon = 9;
    let report = check(Quorum(config), None);
    report.print("3 instances × 3 accounts");
    report.assert_complete_and_safe();
}

#[test]
fn an_account_restarted_empty_while_another_is_down_lets_a_second_leader_in_without_a_hold_off() {
    let defects = Defects {
        no_hold_off: true,
        ..Defects::default()
    };
    let found = planted(defects, |_| {}, "one leader at a time");
    found.print("no hold-off for an account found empty");
}

fn planted(defects: Defects, tweak: impl FnOnce(&mut Config), property: &'static str) -> Found {
    let mut config = Config::three_by_three();
    config.defects = defects;
    tweak(&mut config);
    check(Quorum(config), Some(property)).found(property)
}

#[test]
fn a_hold_off_record_kept_across_the_instances_own_term_lets_two_leaders_overlap() {
    // As the code was then: the record also kept whatever blob it saw (the
    // own term's stamps now show a new version, which starts it over too).
    let defects = Defects {
        stale_hold_off: true,
        any_blob: true,
        ..Defects::default()
    };
    let found = planted(defects, |_| {}, "one leader at a time");
    found.print("the hold-off's record kept across the own term");
}

#[test]
fn a_hold_off_record_kept_whatever_the_blob_lets_a_candidate_frozen_past_it_overlap() {
    let defects = Defects {
        any_blob: true,
        ..Defects::default()
    };
    let found = planted(defects, frozen(|_| {}), "one leader at a time");
    found.print("the hold-off's record kept on a blob made anew");
}

#[test]
fn a_margin_smaller_than_twice_the_drift_lets_two_leaders_overlap() {
    let found = planted(
        Defects::default(),
        frozen(|c| c.margin = 1),
        "one leader at a time",
    );
    found.print("margin 1 < 2 × drift 1");
}

#[test]
fn a_majority_of_the_accounts_that_answered_lets_two_leaders_overlap() {
    // A renewal answered by one account of three (one down, a request to
    // another lost on its way) keeps the deadline; the new quorum's
    // shortcut found it before it needed every account read.
    let defects = Defects {
        majority_of_answers: true,
        ..Defects::default()
    };
    let found = planted(defects, dropped, "one leader at a time");
    found.print("a majority of the accounts that answered");
}

/// Two instances, one of which may freeze (a leader frozen stays counted
/// as acting until its deadline, as the crate's rule says).
fn frozen(tweak: impl FnOnce(&mut Config)) -> impl FnOnce(&mut Config) {
    |c| {
        c.instances = 2;
        c.faults.freezes = 1;
        tweak(c);
    }
}

#[test]
fn the_renewal_rule_before_the_basis_lets_two_leaders_overlap() {
    // Before the basis, there was no hold-off either.
    let defects = Defects {
        no_basis_rule: true,
        no_hold_off: true,
        ..Defects::default()
    };
    let found = planted(defects, |_| {}, "one leader at a time");
    found.print("the renewal rule before the basis");
}

/// Two instances, a lease broken on one account and a request lost on
/// its way (a renewal's, after which the lease may be taken there once it
/// expired; or a stamp's) beside the other faults.
fn broken(c: &mut Config) {
    dropped(c);
    c.faults.breaks = 1;
}

/// Two instances, a request lost on its way beside the other faults.
fn dropped(c: &mut Config) {
    c.instances = 2;
    c.faults.drops = 1;
}

/// The planted tests' fault configurations on the running code's
/// decisions: two instances with a request lost on its way (`dropped`),
/// and with a lease broken by an operator beside it (`broken`), to a
/// shorter horizon than the planted tests' (each finds its defect by tick 6);
/// `scripts/model --deep` checks both to a horizon of 8.
fn unplanted(tweak: impl FnOnce(&mut Config), horizon: u8, title: &str) {
    let mut config = Config::three_by_three();
    tweak(&mut config);
    config.horizon = horizon;
    let report = check(Quorum(config), None);
    report.print(title);
    report.assert_complete_and_safe();
}

#[test]
fn two_instances_with_a_request_lost_on_its_way_keep_every_promise() {
    unplanted(
        dropped,
        DROPPED_HORIZON,
        "2 instances × 3 accounts, a request lost on its way",
    );
}

#[test]
fn two_instances_with_a_lease_broken_and_a_request_lost_keep_every_promise() {
    unplanted(
        broken,
        BROKEN_HORIZON,
        "2 instances × 3 accounts, a break and a request lost",
    );
}

#[test]
fn two_instances_whose_calls_decide_before_an_answer_comes_keep_every_promise() {
    unplanted(
        late,
        LATE_HORIZON,
        "2 instances × 3 accounts, an answer after the call was decided",
    );
}

/// Two instances, one answer that comes after the others decided its call
/// (the acquire, the read, the stamp or the renewal), beside the other
/// faults: the calls decide on the answers that came, as the crate's do.
fn late(c: &mut Config) {
    c.instances = 2;
    c.faults.lates = 1;
}

/// The horizon of the configuration with a late answer in `scripts/test`.
const LATE_HORIZON: u8 = 8;

/// The horizons of the planted tests' configurations in `scripts/test`.
const DROPPED_HORIZON: u8 = 7;
const BROKEN_HORIZON: u8 = 5;

#[test]
fn the_model_finds_a_deadline_kept_on_a_minority_of_the_accounts() {
    let defects = Defects {
        basis_on_a_minority: true,
        ..Defects::default()
    };
    let found = planted(defects, broken, "one leader at a time");
    found.print("basis_holds off by one: a deadline kept on a minority");
}

#[test]
fn the_model_finds_a_stamp_counted_where_it_did_not_answer() {
    let defects = Defects {
        stamp_unanswered_counted: true,
        ..Defects::default()
    };
    let found = planted(defects, dropped, "epochs strictly increase");
    found.print("the stamp's vote counts an account that did not answer");
}

/// A configuration from the environment (`BLOB_MUTEX_MODEL`, as
/// `instances=3,accounts=5,horizon=8` or `breaks=1,drops=1`, or `model=lease-set,instances=3,partitions=4`
/// or `model=handover,horizon=16` or `model=schedule,horizon=8,wait=1`), for `scripts/model`; by default the
/// quorum's 2 instances × 3 accounts to a horizon of 8 ticks.
#[test]
fn the_configuration_named_by_the_environment_keeps_every_promise() {
    let named = std::env::var("BLOB_MUTEX_MODEL").unwrap_or_default();
    let mut model = "quorum";
    let mut settings = Vec::new();
    for pair in named.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').expect("key=value");
        if key == "model" {
            model = value;
        } else {
            settings.push((key, value.parse::<u8>().expect("a number")));
        }
    }
    match model {
        "quorum" => named_quorum(&settings),
        "lease-set" => named_lease_set(&settings),
        "handover" => named_handover(&settings),
        "schedule" => named_schedule(&settings),
        other => panic!("unknown model {other} (quorum, lease-set, handover, schedule)"),
    }
}

fn named_quorum(settings: &[(&str, u8)]) {
    let mut config = Config::three_by_three();
    config.instances = 2;
    config.horizon = 8;
    for &(key, value) in settings {
        match key {
            "instances" => config.instances = value.into(),
            "accounts" => config.accounts = value.into(),
            "horizon" => config.horizon = value,
            "lease" => config.lease = value,
            "renew" => config.renew = value,
            "hold_off" => config.hold_off = value,
            "bound" => config.bound = value,
            "wipes" => config.faults.wipes = value,
            "outages" => config.faults.outages = value,
            "losses" => config.faults.losses = value,
            "crashes" => config.faults.crashes = value,
            "freezes" => config.faults.freezes = value,
            "breaks" => config.faults.breaks = value,
            "drops" => config.faults.drops = value,
            "lates" => config.faults.lates = value,
            other => panic!("unknown setting {other}"),
        }
    }
    let report = check(Quorum(config.clone()), None);
    report.print(&format!("{config:?}"));
    report.assert_complete_and_safe();
}

fn named_lease_set(settings: &[(&str, u8)]) {
    let mut config = SetConfig::two_by_three();
    for &(key, value) in settings {
        match key {
            "instances" => config.instances = value.into(),
            "partitions" => config.partitions = value.into(),
            "horizon" => config.horizon = value,
            "lease" => config.lease = value,
            "renew" => config.renew = value,
            "bound" => config.bound = value,
            "joins" => config.faults.joins = value,
            "leaves" => config.faults.leaves = value,
            "crashes" => config.faults.crashes = value,
            "freezes" => config.faults.freezes = value,
            "losses" => config.faults.losses = value,
            "skips" => config.faults.skips = value,
            "reown" => config.reown = value,
            other => panic!("unknown setting {other}"),
        }
    }
    let report = check(LeaseSet(config.clone()), None);
    report.print(&format!("{config:?}"));
    report.assert_complete_and_safe();
}

fn named_handover(settings: &[(&str, u8)]) {
    let mut config = HandoverConfig::three_instances();
    for &(key, value) in settings {
        match key {
            // Instances beyond the three: candidates of priority 1 too.
            "instances" => config.priorities.resize(value.into(), Some(1)),
            "horizon" => config.horizon = value,
            "lease" => config.lease = value,
            "renew" => config.renew = value,
            "grace" => config.grace = value,
            "bound" => config.bound = value,
            "crashes" => config.faults.crashes = value,
            "losses" => config.faults.losses = value,
            "refusals" => config.faults.refusals = value,
            "stuck" => config.faults.stuck = value,
            other => panic!("unknown setting {other}"),
        }
    }
    let report = check(Handover(config.clone()), None);
    report.print(&format!("{config:?}"));
    report.assert_complete_and_safe();
}

#[test]
fn a_lease_set_of_two_instances_and_three_partitions_keeps_every_promise_through_a_join_a_leave_and_a_crash(
) {
    let report = check(LeaseSet(SetConfig::two_by_three()), None);
    report.print("lease set: 2 instances × 1 account × 3 partitions");
    report.assert_complete_and_safe();
}

#[test]
fn a_partition_claimed_from_a_departed_member_while_its_lease_could_still_be_live_has_two_owners() {
    let mut config = SetConfig::two_by_three();
    config.defects.claim_from_departed = true;
    // A frozen owner's member lease expires before its partitions' do.
    config.faults = SetFaults {
        joins: 0,
        leaves: 0,
        crashes: 0,
        freezes: 1,
        losses: 0,
        skips: 0,
    };
    let property = "one owner per partition at a time";
    let found = check(LeaseSet(config), Some(property)).found(property);
    found.print("a partition claimed while its owner's lease could still be live");
}

/// The faults of the planted test above, on the running code's decisions.
#[test]
fn a_lease_set_of_two_instances_one_of_them_frozen_keeps_every_promise() {
    let mut config = SetConfig::two_by_three();
    config.faults = SetFaults {
        joins: 0,
        leaves: 0,
        crashes: 0,
        freezes: 1,
        losses: 0,
        skips: 0,
    };
    // The frozen instance wakes to find its membership gone and joins again
    // a tick later: the set moves a partition to it one tick after that,
    // four ticks after the wake (a join's three, counted from the wake).
    config.bound = 4;
    let report = check(LeaseSet(config), None);
    report.print("lease set: 2 instances × 1 account × 3 partitions, one frozen");
    report.assert_complete_and_safe();
}

/// A partition whose term ended on a live instance that then skips it is
/// claimed again by the other within six cycles: up to four until the
/// other lists the whole set (`cadence::FULL_LISTING_EVERY`), and the
/// orphan grace of two (`balance::ORPHAN_CYCLES`). It stays (the property
/// "a partition claimed again after a skip is kept"): the claimer, over its
/// share, gives up one of its other partitions for the skipping instance,
/// never the one it adopted. That move leaves the other partition free for
/// a cycle or two past the six, so the bound of every partition owned is
/// left out here.
#[test]
fn a_partition_freed_on_an_instance_that_skips_it_is_claimed_again_within_six_cycles() {
    let mut config = SetConfig::two_by_three();
    config.faults = SetFaults {
        joins: 0,
        leaves: 0,
        crashes: 0,
        freezes: 0,
        losses: 0,
        skips: 1,
    };
    config.horizon = 14;
    config.bound = config.horizon;
    let report = check(LeaseSet(config.clone()), None);
    report.print("lease set: a partition freed on an instance that skips it");
    report.assert_complete_and_safe();
    // Five cycles are not enough.
    config.reown = 5;
    let property = "a partition freed on an instance that skips it claimed again within the bound";
    let found = check(LeaseSet(config), Some(property)).found(property);
    found.print("the same, claimed again within five cycles");
}

#[test]
fn a_lost_renewal_counted_as_a_success_lets_a_partition_have_two_owners() {
    let mut config = SetConfig::two_by_three();
    config.defects.lost_renewal_counted = true;
    let property = "one owner per partition at a time";
    let found = check(LeaseSet(config), Some(property)).found(property);
    found.print("a lost renewal counted as a success");
}

#[test]
fn a_handover_with_a_third_instance_trying_to_acquire_keeps_every_promise() {
    let report = check(Handover(HandoverConfig::three_instances()), None);
    report.print("handover: a leader, its successor and a third acquirer");
    report.assert_complete_and_safe();
}

/// A fourth instance of the successor's priority: a leader hands over
/// only to a strictly higher priority, so the two of priority 1 never hand
/// over to each other.
#[test]
fn a_handover_with_two_candidates_of_equal_priority_keeps_every_promise() {
    let mut config = HandoverConfig::three_instances();
    config.priorities.push(Some(1));
    config.horizon = 12;
    let report = check(Handover(config), None);
    report.print("handover: a leader and two successors of equal priority");
    report.assert_complete_and_safe();
}

#[test]
fn a_change_lease_before_the_tasks_stopped_lets_two_leaders_overlap() {
    let mut config = HandoverConfig::three_instances();
    config.defects.change_before_stop = true;
    config.faults.crashes = 0;
    let property = "one leader at a time";
    let found = check(Handover(config), Some(property)).found(property);
    found.print("a Change Lease before the tasks stopped");
}

/// Three instances, the third joining: a partition given up to balance the
/// set goes to the newcomer, not back and forth between the others.
#[test]
fn a_lease_set_of_three_instances_owns_every_partition_within_the_bound_after_a_join() {
    let mut config = SetConfig::two_by_three();
    config.instances = 3;
    config.horizon = 11;
    config.faults = SetFaults {
        joins: 1,
        leaves: 0,
        crashes: 0,
        freezes: 0,
        losses: 0,
        skips: 0,
    };
    let report = check(LeaseSet(config), None);
    report.print("lease set: 3 instances × 1 account × 3 partitions, one joining");
    report.assert_complete_and_safe();
}

/// The traces the chaos runs left: the seeds that found a violation, kept
/// in `tests/fixtures/traces`, and, when `BLOB_MUTEX_TRACE_DIR` names a
/// folder (`scripts/test` sets it for its chaos runs), every trace in it.
fn chaos_traces() -> Vec<(String, Trace)> {
    let mut dirs =
        vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/traces")];
    if let Some(dir) = std::env::var_os("BLOB_MUTEX_TRACE_DIR") {
        dirs.push(dir.into());
    }
    let mut traces = Vec::new();
    for dir in dirs {
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("a folder entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "trace"))
            .collect();
        assert!(!paths.is_empty(), "no trace in {}", dir.display());
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).expect("read a trace");
            let trace = Trace::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            traces.push((path.display().to_string(), trace));
        }
    }
    traces
}

#[test]
fn the_chaos_runs_quorum_groups_are_paths_of_the_model() {
    let mut findings = Vec::new();
    for (name, trace) in chaos_traces() {
        let r = replay::replay(&trace);
        println!(
            "{name}: seed {}, {} workers as {} instances, {} terms over {} s: {} states expanded, at most {} kept, {:.1} s",
            trace.seed,
            trace.workers.len(),
            r.instances,
            r.terms,
            r.ticks,
            r.expanded,
            r.widest,
            r.elapsed.as_secs_f64()
        );
        if let Some(finding) = r.finding {
            findings.push(format!("{name}: {finding}"));
        }
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

/// A record of three workers on a quorum without faults: worker 0 leads
/// from 1.2 s at the epoch storage's clock gives a record made anew.
fn calm_record() -> Trace {
    let wall = 1_795_735_000_000;
    let first = (wall / 1000 + 2) << quorum::EPOCH_BITS;
    let worker = |i: usize| blob_mutex_testkit::trace::Worker {
        name: format!("qmutex.{i}"),
        spawned: 100,
        ..Default::default()
    };
    let mut trace = Trace {
        seed: 1,
        wall,
        until: 40_000,
        workers: vec![worker(0), worker(1), worker(2)],
        ..Trace::default()
    };
    trace.workers[0].terms.push((first, 1_200));
    trace
}

#[test]
fn a_calm_record_and_a_failover_after_a_kill_are_paths_of_the_model() {
    let calm = calm_record();
    assert_eq!(replay::replay(&calm).finding, None);
    // Killed at 10 s: its lease runs out 15 s after its last renewal, and
    // worker 1 leads at the next epoch.
    let mut failover = calm_record();
    let first = failover.workers[0].terms[0].0;
    failover.workers[0].end = Some((blob_mutex_testkit::trace::End::Kill, 10_000));
    failover.workers[1].terms.push((first + 1, 24_300));
    let r = replay::replay(&failover);
    assert_eq!(r.finding, None);
}

#[test]
fn records_the_model_cannot_produce_are_findings() {
    let first = calm_record().workers[0].terms[0].0;
    let finding = |edit: &dyn Fn(&mut Trace)| {
        let mut trace = calm_record();
        edit(&mut trace);
        replay::replay(&trace).finding.expect("a finding")
    };
    // A second leader while the first renews, with no fault at all.
    let two = finding(&|t| t.workers[1].terms.push((first + 1, 5_000)));
    assert!(two.contains("qmutex.1 printed its term"), "{two}");
    // An epoch that skips: nothing in the model stamps it.
    let skipped = finding(&|t| t.workers[0].terms[0].0 = first + 5);
    assert!(skipped.contains("it printed epoch"), "{skipped}");
    // A failover whose epoch goes back to the first term's.
    let back = finding(&|t| {
        t.workers[0].end = Some((blob_mutex_testkit::trace::End::Kill, 10_000));
        t.workers[1].terms.push((first, 24_300));
    });
    assert!(back.contains("qmutex.1 began its term 0"), "{back}");
    // A failover before the killed leader's lease can have run out.
    let early = finding(&|t| {
        t.workers[0].end = Some((blob_mutex_testkit::trace::End::Kill, 10_000));
        t.workers[1].terms.push((first + 1, 12_000));
    });
    assert!(early.contains("qmutex.1 printed its term"), "{early}");
}

/// Two instances, each account restarted empty in turn (each after the
/// last was held again, as the quorum's assumption allows), and a crash.
fn wiped_in_turn(c: &mut Config) {
    c.instances = 2;
    c.horizon = 16;
    c.faults = quorum::Faults {
        wipes: 3,
        outages: 0,
        losses: 0,
        crashes: 1,
        freezes: 0,
        breaks: 0,
        drops: 0,
        lates: 0,
    };
}

#[test]
fn every_account_restarted_empty_in_turn_keeps_every_promise() {
    let mut config = Config::three_by_three();
    wiped_in_turn(&mut config);
    let report = check(Quorum(config), None);
    report.print("2 instances × 3 accounts, each restarted empty in turn");
    report.assert_complete_and_safe();
}

#[test]
fn no_catch_up_on_an_account_restarted_empty_lets_the_epoch_go_back() {
    let defects = Defects {
        no_catch_up: true,
        ..Defects::default()
    };
    let found = planted(defects, wiped_in_turn, "epochs strictly increase");
    found.print("no catch-up on an account restarted empty");
}

#[test]
fn a_schedule_on_two_hosts_keeps_every_promise_in_every_interleaving() {
    for skip in [true, false] {
        let report = check(Schedule::new(ScheduleConfig::two_hosts(skip)), None);
        let policy = if skip { "skip" } else { "wait" };
        report.print(&format!("schedule, 2 hosts, overlap {policy}"));
        report.assert_complete_and_safe();
    }
}

fn named_schedule(settings: &[(&str, u8)]) {
    // The policy first: each has its own expression, window and lease.
    let wait = settings
        .iter()
        .any(|&(key, value)| key == "wait" && value != 0);
    let mut config = ScheduleConfig::two_hosts(!wait);
    for &(key, value) in settings {
        match key {
            "hosts" => config.hosts = value,
            "horizon" => config.horizon = value,
            "lease" => config.lease = value,
            "window" => config.window = value.into(),
            "backoff" => config.backoff = value.into(),
            "retries" => config.retries = value.into(),
            "wait" => {}
            "deaths" => config.faults.deaths = value,
            "failures" => config.faults.failures = value,
            other => panic!("unknown setting {other}"),
        }
    }
    let report = check(Schedule::new(config.clone()), None);
    report.print(&format!("{config:?}"));
    report.assert_complete_and_safe();
}
