//! Lease-set workers in separate processes on Azurite: 12 partitions spread
//! over 3 instances, then 4 when one joins; a graceful leave and a crash;
//! no partition ever owned by two processes at once.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::time::Duration;

use blob_mutex_testkit::azure_rule::AzureHold;
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::backend::{Backend, BackendExt};
use blob_mutex_testkit::partitions::{assert_safe, owned_now, terms};
use blob_mutex_testkit::proxy::{Fate, Injected, Proxy};
use blob_mutex_testkit::workers::{Cluster, Spec, What};

const PARTITIONS: &str = "12";
/// Balance cycle 1 s; lease 15 s; retry 0.5 s.
const FLAGS: &[&str] = &[
    "--partitions",
    PARTITIONS,
    "--lease-secs",
    "15",
    "--balance-ms",
    "1000",
    "--acquire-retry-ms",
    "500",
];
const LEASE: Duration = Duration::from_secs(15);

fn spawn(cluster: &mut Cluster, name: &str, container: &str) -> usize {
    spawn_via(
        cluster,
        name,
        container,
        &azurite::shared().connection_string(),
    )
}

fn spawn_via(cluster: &mut Cluster, name: &str, container: &str, connection: &str) -> usize {
    cluster.spawn(Spec::worker(name, connection, container, "set", FLAGS))
}

/// Waits until the workers own `want` partitions each; returns when.
async fn settle(cluster: &Cluster, want: &[usize], limit: Duration) -> Duration {
    let workers = want.len().max(cluster.len());
    cluster
        .wait_for(&format!("partition counts {want:?}"), limit, |events| {
            let now = owned_now(&terms(events), workers);
            (now[..want.len()] == *want).then_some(())
        })
        .await;
    cluster.now()
}

#[tokio::test]
async fn partitions_spread_rebalance_on_join_and_leave_and_never_overlap() {
    spread_and_rebalance(blob_mutex_testkit::backend::current()).await;
}

async fn spread_and_rebalance(backend: Backend) {
    let container = azurite::unique_container("partitions");
    let mut cluster = backend.cluster();
    let connection = backend.connection_string(&azurite::shared().endpoint);
    let spawn = |cluster: &mut Cluster, name: &str, container: &str| {
        spawn_via(cluster, name, container, &connection)
    };
    for name in ["a", "b", "c"] {
        spawn(&mut cluster, name, &container);
    }
    // A cold start: cycles of 1 s, claims spread over the 5 s renew interval.
    let balanced = settle(&cluster, &[4, 4, 4], Duration::from_secs(60)).await;

    let d = spawn(&mut cluster, "d", &container);
    let joined = cluster.now();
    let rebalanced = settle(&cluster, &[3, 3, 3, 3], Duration::from_secs(60)).await;
    assert_eq!(d, 3);

    let left = cluster.terminate(1);
    let reowned = settle(&cluster, &[4, 0, 4, 4], Duration::from_secs(60)).await;
    let exited = cluster.wait_exit(1, Duration::from_secs(20)).await;
    assert_eq!(exited.code(), Some(0), "{}", cluster.dump_all());

    assert_safe(&terms(&cluster.events()), cluster.now(), &cluster.dump());
    println!(
        "partitions ({backend:?}): 3 workers balanced 12 partitions {:.1}s after start; a 4th got its share {:.1}s after \
         joining; a graceful leave's partitions owned again in {:.1}s",
        balanced.as_secs_f64(),
        (rebalanced - joined).as_secs_f64(),
        (reowned - left).as_secs_f64()
    );
    cluster.kill_all();
}

#[tokio::test]
async fn a_crashed_worker_partitions_are_owned_again_only_after_their_leases_expired() {
    crashed_worker(None).await;
}

/// The crash under Azure's hold on a lease that expired unreleased (30 s),
/// where Azurite lets the next owner in at once: the others keep polling
/// through the hold with no error that ends them, and own every partition
/// of the crashed worker within the lease, the hold and one cycle.
#[tokio::test]
async fn under_azure_s_hold_a_crashed_worker_partitions_are_owned_again_within_lease_hold_and_a_cycle(
) {
    crashed_worker(Some(Duration::from_secs(30))).await;
}

/// Three workers own four partitions each; one is killed (SIGKILL). With a
/// `hold`, every worker reaches storage through a proxy of its own that
/// applies Azure's hold, one rule shared by all.
async fn crashed_worker(hold: Option<Duration>) {
    let container = azurite::unique_container("partitions-kill");
    let mut cluster = Cluster::new();
    let rule = hold.map(AzureHold::new);
    let mut proxies = Vec::new();
    for name in ["a", "b", "c"] {
        match &rule {
            Some(rule) => {
                let proxy = Proxy::start(azurite::shared().port);
                proxy.apply(rule);
                spawn_via(&mut cluster, name, &container, &proxy.connection_string());
                proxies.push(proxy);
            }
            None => {
                spawn(&mut cluster, name, &container);
            }
        }
    }
    let hold = hold.unwrap_or_default();
    settle(&cluster, &[4, 4, 4], Duration::from_secs(60)).await;
    let killed = cluster.kill(2);
    let reowned = settle(&cluster, &[6, 6, 0], LEASE + hold + Duration::from_secs(30)).await;
    let all = terms(&cluster.events());
    // Every partition the killed worker owned was owned again only once the
    // lease could have expired (its last renewal came at most a renew
    // interval, 5 s, before the kill), and the hold had passed; and, under
    // the hold, within a balance cycle (1 s) and its claim of that, with
    // room for a loaded two-core machine.
    let mut latest = Duration::ZERO;
    for (partition, ts) in &all {
        let mut after_kill = ts.iter().filter(|t| t.worker != 2 && t.start > killed);
        let victim = ts.iter().any(|t| t.worker == 2 && t.end == Some(killed));
        if let (true, Some(next)) = (victim, after_kill.next()) {
            let after = next.start - killed;
            assert!(
                after >= LEASE - Duration::from_secs(5) + hold,
                "partition {partition} owned again {after:?} after the kill\n{}",
                cluster.dump()
            );
            if rule.is_some() {
                assert!(
                    after <= LEASE + hold + Duration::from_secs(5),
                    "partition {partition} owned again {after:?} after the kill, past the lease, the hold and a cycle\n{}",
                    cluster.dump()
                );
            }
            latest = latest.max(after);
        }
    }
    assert_safe(&all, cluster.now(), &cluster.dump());
    if let Some(rule) = &rule {
        assert_polled_through_the_hold(&cluster, &proxies, killed);
        println!(
            "partitions under Azure's {}s hold: a killed worker's partitions were all owned again {:.1}s after \
             the kill, the last {:.1}s after it ({} acquires refused)",
            hold.as_secs(),
            (reowned - killed).as_secs_f64(),
            latest.as_secs_f64(),
            rule.refused()
        );
    } else {
        println!(
            "partitions: a killed worker's partitions were all owned again {:.1}s after the kill",
            (reowned - killed).as_secs_f64()
        );
    }
    cluster.kill_all();
}

/// Every survivor (workers 0 and 1) is still running, and had acquires
/// refused by the hold until a few cycles before the last partition it
/// took after the kill: it kept polling through the hold, and no error
/// ended it.
fn assert_polled_through_the_hold(cluster: &Cluster, proxies: &[Proxy], killed: Duration) {
    let all = terms(&cluster.events());
    for (worker, proxy) in proxies.iter().enumerate().take(2) {
        let last_reowned = all
            .values()
            .flatten()
            .filter(|t| t.worker == worker && t.start > killed)
            .map(|t| t.start)
            .max()
            .expect("each survivor took partitions of the killed worker");
        assert!(
            cluster.exited(worker).is_none(),
            "worker {worker} exited\n{}",
            cluster.dump_all()
        );
        let last_refused = proxy
            .log()
            .iter()
            .filter(|r| r.fate == Fate::Injected(Injected::LeaseAlreadyPresent))
            .map(|r| cluster.at(r.at))
            .max();
        assert!(
            last_refused.is_some_and(|at| at + Duration::from_secs(5) >= last_reowned),
            "worker {worker}: last refused acquire at {last_refused:?}, the last partition owned again at \
             {last_reowned:?}\n{}",
            cluster.dump()
        );
    }
}

/// One worker cut off from storage (both directions blackholed): each of
/// its partitions' tasks stops before that partition's lease could expire,
/// and the other worker owns them only after it could have.
#[tokio::test]
async fn a_partitioned_worker_stops_each_partition_before_its_lease_can_expire() {
    let container = azurite::unique_container("partitions-cut");
    let proxy = Proxy::start(azurite::shared().port);
    let mut cluster = Cluster::new();
    let cut = spawn_via(&mut cluster, "cut", &container, &proxy.connection_string());
    spawn(&mut cluster, "other", &container);
    settle(&cluster, &[6, 6], Duration::from_secs(60)).await;
    proxy.partition();
    let cut_at = cluster.now();
    settle(&cluster, &[0, 12], LEASE + Duration::from_secs(30)).await;

    // The earliest server-side expiry of each partition the cut worker held:
    // its last acquire or renew of that partition that reached storage.
    let log = proxy.log();
    let expiry = |partition: &str| {
        let path = format!("/set/partitions/{partition}?");
        log.iter()
            .filter(|r| (r.is("acquire") || r.is("renew")) && r.target.contains(&path))
            .filter_map(|r| r.forwarded_at)
            .max()
            .map(|last| cluster.at(last) + LEASE)
    };
    let all = terms(&cluster.events());
    let mut checked = 0;
    for (partition, ts) in &all {
        // Its term that ran when the cut came: one that ended before (the
        // cut worker, started first, may have held every partition until
        // the other joined) was handed over in the open.
        let Some(held) = ts
            .iter()
            .find(|t| t.worker == cut && t.start < cut_at && t.end.is_none_or(|end| end > cut_at))
        else {
            continue;
        };
        let expiry = expiry(partition).expect("the cut worker's lease requests were logged");
        let stopped = held.end.expect("the cut worker's task stopped");
        assert!(
            stopped < expiry,
            "partition {partition}: task stopped at {stopped:?}, after the earliest expiry {expiry:?}\n{}",
            cluster.dump()
        );
        let next = ts
            .iter()
            .find(|t| t.worker != cut && t.start > cut_at)
            .expect("owned again");
        assert!(
            next.start >= expiry,
            "partition {partition} owned again before its lease could expire"
        );
        checked += 1;
    }
    assert_eq!(checked, 6);
    let reasons: Vec<String> = cluster
        .events()
        .into_iter()
        .filter(|e| e.worker == cut && e.at > cut_at)
        .filter_map(|e| match e.what {
            What::Released { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    // Each partition stops at its own deadline, or earlier, when the
    // membership term reaches its deadline first and ends its partitions.
    assert!(
        !reasons.is_empty() && reasons.iter().all(|r| r == "deadline" || r == "shutdown"),
        "{reasons:?}"
    );
    assert_safe(&all, cluster.now(), &cluster.dump());
    cluster.kill_all();
}
