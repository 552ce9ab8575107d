//! A set under more renewals a second than its client's slots carry at
//! the store's latency, on the in-memory set store with paced requests and
//! paused time: the set gives up partitions, never its membership.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{BlobLeaseSet, LeaseSetOptions, PartitionReport, MEMBERS};
use crate::ending::StopReason;
use crate::error::{Error, Result};
use crate::store::memory::MemoryLeaseSetStore;

/// Every answer of the store takes this long once storage slows down.
const LATENCY: Duration = Duration::from_millis(200);
/// Slots of each instance's client: 20 requests a second at the latency.
const SLOTS: usize = 4;
/// Partitions of the set: 500 an instance renewed every 10 s is 50
/// renewals a second, two and a half times what the slots carry at the
/// latency.
const PARTITIONS: usize = 1000;
/// How long storage stays slow.
const WINDOW: Duration = Duration::from_secs(300);

/// One instance: its set running, what it owns, and how its terms ended.
struct Instance {
    store: MemoryLeaseSetStore,
    owned: tokio::sync::watch::Receiver<BTreeMap<String, u64>>,
    reports: broadcast::Receiver<PartitionReport>,
    run: JoinHandle<Result<()>>,
}

fn start(store: &MemoryLeaseSetStore, holder: &str, token: &CancellationToken) -> Instance {
    let store = store.clone().with_pace(Duration::ZERO, SLOTS);
    let options = LeaseSetOptions::default().with_mutex(
        LeaseSetOptions::default()
            .mutex
            .with_holder(holder.to_owned())
            .with_jitter_seed(holder.len() as u64),
    );
    let partitions: Vec<String> = (0..PARTITIONS).map(|i| format!("p{i:03}")).collect();
    let set = BlobLeaseSet::with_store(store.clone(), partitions, options, |ctx| async move {
        ctx.cancelled().await;
        Ok::<(), Error>(())
    })
    .unwrap();
    let (owned, reports) = (set.watch(), set.partition_reports());
    let token = token.clone();
    let run = tokio::spawn(async move { set.run(token).await });
    Instance {
        store,
        owned,
        reports,
        run,
    }
}

#[tokio::test(start_paused = true)]
async fn a_set_renewing_more_than_its_slots_carry_sheds_partitions_and_keeps_its_membership() {
    let shared = MemoryLeaseSetStore::new();
    let token = CancellationToken::new();
    let mut instances = [start(&shared, "a", &token), start(&shared, "b", &token)];
    let balanced = |i: &Instance| i.owned.borrow().len() == PARTITIONS / 2;
    while !instances.iter().all(balanced) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let before: Vec<BTreeMap<String, u64>> =
        instances.iter().map(|i| i.owned.borrow().clone()).collect();
    for instance in &instances {
        instance.store.pace().unwrap().set_latency(LATENCY);
    }
    let (mut fewest_owned, mut shed, mut shed_names) = (PARTITIONS, 0, BTreeSet::new());
    let until = tokio::time::Instant::now() + WINDOW;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (a, b) = (instances[0].owned.borrow(), instances[1].owned.borrow());
        let both: Vec<_> = a.keys().filter(|p| b.contains_key(*p)).collect();
        assert!(both.is_empty(), "owned by both instances at once: {both:?}");
        fewest_owned = fewest_owned.min(a.len() + b.len());
    }
    for (instance, holder) in instances.iter_mut().zip(["a", "b"]) {
        while let Ok(r) = instance.reports.try_recv() {
            if r.report.reason == StopReason::Deadline {
                shed += 1;
                shed_names.insert(r.partition);
            }
        }
        let member = shared.get(&format!("{MEMBERS}{holder}"));
        assert_eq!(
            member.epoch(),
            1,
            "{holder}'s membership term ended under load (owned at least {fewest_owned} \
             of {PARTITIONS}; {shed} partition terms shed so far)"
        );
        let late = instance.store.pace().unwrap().late_renewals();
        assert_eq!(
            late, 0,
            "{holder} sent {late} renewals after their deadline"
        );
    }
    assert!(shed > 0, "the load never went past what the slots carry");
    let after: Vec<BTreeMap<String, u64>> =
        instances.iter().map(|i| i.owned.borrow().clone()).collect();
    let kept = (0..2)
        .map(|i| {
            let same = |(p, e): &(&String, &u64)| after[i].get(*p) == Some(*e);
            before[i].iter().filter(same).count()
        })
        .sum::<usize>();
    let owned_now = after.iter().map(BTreeMap::len).sum::<usize>();
    let re_owned = shed_names
        .iter()
        .filter(|p| after.iter().any(|a| a.contains_key(*p)))
        .count();
    println!(
        "after {WINDOW:?} at {LATENCY:?}: kept {kept} of {PARTITIONS} in their first term, \
         {shed} terms shed ({} partitions), {re_owned} of those owned again at the end, \
         {owned_now} owned at the end, at least {fewest_owned} owned throughout",
        shed_names.len()
    );
    token.cancel();
    for instance in instances {
        instance.run.await.unwrap().unwrap();
    }
}

/// The request timeout of the next test: the Azurite test's (a long one
/// leaves the least room before the membership's stop point).
const TIMEOUT: Duration = Duration::from_secs(6);
/// How long storage takes to answer there, as behind the Azurite test's
/// proxy.
const USUAL: Duration = Duration::from_secs(4);

/// Storage that answers a little under the request timeout, and once in a
/// while a second past it (a request sent in such a moment times out): the
/// membership renews often enough that a renewal timed out is retried, and
/// answered, before its term's stop point, so the membership keeps its
/// first term (as it must under any load its partitions shed).
#[tokio::test(start_paused = true)]
async fn a_membership_renewal_that_times_out_is_retried_before_the_stop_point() {
    let shared = MemoryLeaseSetStore::new();
    let store = shared.clone().with_pace(Duration::ZERO, 64);
    let options = LeaseSetOptions::default().with_mutex(
        LeaseSetOptions::default()
            .mutex
            .with_holder("a".to_owned())
            .with_jitter_seed(3)
            .with_request_timeout(TIMEOUT),
    );
    let partitions: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
    let set = BlobLeaseSet::with_store(store.clone(), partitions, options, |ctx| async move {
        ctx.cancelled().await;
        Ok::<(), Error>(())
    })
    .unwrap();
    let owned = set.watch();
    let token = CancellationToken::new();
    let stop = token.clone();
    let run = tokio::spawn(async move { set.run(stop).await });
    while owned.borrow().len() < 8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pace = store.pace().unwrap();
    pace.set_latency(USUAL);
    // Five minutes: every 7 s, a second in which requests take longer than
    // the timeout, so that renewals of every phase are caught by one.
    for _ in 0..43 {
        pace.set_latency(TIMEOUT + Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(1)).await;
        pace.set_latency(USUAL);
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    let member = shared.get(&format!("{MEMBERS}a"));
    assert_eq!(
        member.epoch(),
        1,
        "the membership term ended over one renewal that timed out"
    );
    assert_eq!(
        pace.late_renewals(),
        0,
        "a renewal was sent after its deadline"
    );
    token.cancel();
    run.await.unwrap().unwrap();
}

#[test]
fn the_membership_renews_as_the_partitions_do_where_a_retry_fits_and_sooner_where_not() {
    let defaults = LeaseSetOptions::default().mutex;
    let every = |options: &crate::options::MutexOptions| {
        super::membership_options(options, "a").effective_renew_interval()
    };
    assert_eq!(every(&defaults), defaults.effective_renew_interval());
    let slow = defaults.clone().with_request_timeout(TIMEOUT);
    let sooner = every(&slow);
    assert!(sooner < slow.effective_renew_interval(), "{sooner:?}");
    super::membership_options(&slow, "a").validate().unwrap();
}
