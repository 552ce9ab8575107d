//! A set under more renewals a second than its client's slots carry at
//! the store's latency, on the in-memory set store with paced requests and
//! paused time: the set gives up partitions, never its membership.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{BlobLeaseSet, LeaseSetOptions, PartitionReport, MEMBERS};
use crate::engine::ending::StopReason;
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
