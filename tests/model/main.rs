//! The model checker: every interleaving of small configurations of the
//! quorum, on the crate's own decisions (`src/store/quorum/rules.rs`,
//! compiled here as it is), checked to completion; and the planted defects,
//! each found with a counterexample printed step by step. See the guide's
//! chapter on the model (docs/guide/model.md).

// The decisions the quorum store runs, the same file.
#[path = "../../src/store/quorum/rules.rs"]
#[allow(dead_code, unreachable_pub)]
mod rules;

mod check;
mod quorum;

use check::{check, Found};
use quorum::{Config, Defects, Quorum};

#[test]
fn an_account_restarted_empty_while_another_is_down_lets_a_second_leader_in_without_a_hold_off() {
    let found = planted(Defects::default(), |_| {}, "one leader at a time");
    found.print("no hold-off for an account found empty");
}

fn planted(defects: Defects, tweak: impl FnOnce(&mut Config), property: &str) -> Found {
    let mut config = Config::three_by_three();
    config.defects = defects;
    tweak(&mut config);
    check(Quorum(config), true).found(property)
}

#[test]
fn a_margin_smaller_than_twice_the_drift_lets_two_leaders_overlap() {
    let found = planted(Defects::default(), |c| c.margin = 1, "one leader at a time");
    found.print("margin 1 < 2 × drift 1");
}

#[test]
fn a_majority_of_the_accounts_that_answered_lets_two_leaders_overlap() {
    let defects = Defects {
        majority_of_answers: true,
        ..Defects::default()
    };
    let found = planted(defects, |_| {}, "one leader at a time");
    found.print("a majority of the accounts that answered");
}

#[test]
fn an_expired_renewal_counted_as_a_success_lets_two_leaders_overlap() {
    let defects = Defects {
        expired_renewal_counts: true,
        ..Defects::default()
    };
    let found = planted(defects, |_| {}, "one leader at a time");
    found.print("an expired renewal counted as a success");
}

#[test]
fn the_renewal_rule_before_the_basis_lets_two_leaders_overlap() {
    let defects = Defects {
        no_basis_rule: true,
        ..Defects::default()
    };
    let found = planted(defects, |_| {}, "one leader at a time");
    found.print("the renewal rule before the basis");
}

/// A configuration from the environment (`BLOB_MUTEX_MODEL`, as
/// `instances=3,accounts=5,horizon=14`), for `scripts/model`; by default
/// 2 instances × 3 accounts.
#[test]
fn the_configuration_named_by_the_environment_keeps_every_promise() {
    let mut config = Config::three_by_three();
    config.instances = 2;
    let named = std::env::var("BLOB_MUTEX_MODEL").unwrap_or_default();
    for pair in named.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').expect("key=value");
        let value: u8 = value.parse().expect("a number");
        match key {
            "instances" => config.instances = value.into(),
            "accounts" => config.accounts = value.into(),
            "horizon" => config.horizon = value,
            "lease" => config.lease = value,
            "renew" => config.renew = value,
            "bound" => config.bound = value,
            "wipes" => config.faults.wipes = value,
            "outages" => config.faults.outages = value,
            "losses" => config.faults.losses = value,
            "crashes" => config.faults.crashes = value,
            "freezes" => config.faults.freezes = value,
            other => panic!("unknown setting {other}"),
        }
    }
    let report = check(Quorum(config.clone()), false);
    report.print(&format!("{config:?}"));
    report.assert_complete_and_safe();
}
