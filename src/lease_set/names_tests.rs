//! Names a set owns, on the in-memory set store with paused time: a lease
//! that another client keeps at a member's name is neither counted nor
//! collected, so that the balance is the real members' and that lease's
//! epoch never goes back; members of an earlier version (no marker) are
//! counted while they live and never collected; holders that cannot name a
//! member are refused when the set is made.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{BlobLeaseSet, LeaseSetOptions};
use crate::error::{Error, Result};
use crate::mutex::BlobDistributedMutex;
use crate::options::MutexOptions;
use crate::store::collect::Collection;
use crate::store::memory::{MemoryLeaseSetStore, MemoryLeaseStore};
use crate::store::{LeaseId, LeaseSetStore, LeaseState, LeaseStore, StampOptions};

const PARTITIONS: [&str; 4] = ["p0", "p1", "p2", "p3"];
const STALE_AFTER: Duration = Duration::from_secs(60);

fn store() -> MemoryLeaseSetStore {
    MemoryLeaseSetStore::new().with_collection(Collection::default().with_stale_after(STALE_AFTER))
}

/// An instance of the set named `holder`, running until its token is
/// cancelled.
struct Instance {
    owned: watch::Receiver<BTreeMap<String, u64>>,
    token: CancellationToken,
    run: JoinHandle<Result<()>>,
}

fn start(store: &MemoryLeaseSetStore, holder: &str) -> Instance {
    let options = LeaseSetOptions::default().with_mutex(
        LeaseSetOptions::default()
            .mutex
            .with_holder(holder.to_owned())
            .with_jitter_seed(holder.len() as u64),
    );
    let set = BlobLeaseSet::with_store(store.clone(), PARTITIONS, options, |ctx| async move {
        ctx.cancelled().await;
        Ok::<(), Error>(())
    })
    .unwrap();
    let owned = set.watch();
    let token = CancellationToken::new();
    let run = tokio::spawn({
        let token = token.clone();
        async move { set.run(token).await }
    });
    Instance { owned, token, run }
}

fn counts(instances: &[&Instance]) -> Vec<usize> {
    instances.iter().map(|i| i.owned.borrow().len()).collect()
}

/// Lets `time` of virtual time pass, in steps, so that every cycle runs.
async fn pass(time: Duration) {
    let step = Duration::from_millis(500);
    let mut passed = Duration::ZERO;
    while passed < time {
        tokio::time::sleep(step).await;
        passed += step;
    }
}

/// A mutex on `lease` whose task waits for its cancellation.
fn mutex(lease: MemoryLeaseStore, holder: &str) -> BlobDistributedMutex<MemoryLeaseStore> {
    let options = MutexOptions::default().with_holder(holder.to_owned());
    BlobDistributedMutex::with_store(lease, options, |ctx| async move {
        ctx.cancelled().await;
        Ok::<(), Error>(())
    })
    .unwrap()
}

/// Runs `mutex` for `time` and returns once it has stopped and released.
async fn lead_for(mutex: &BlobDistributedMutex<MemoryLeaseStore>, time: Duration) {
    let token = CancellationToken::new();
    let stop = token.clone();
    let stopping = tokio::spawn(async move {
        pass(time).await;
        stop.cancel();
    });
    mutex.run_task_when_mutex_acquired(token).await.unwrap();
    stopping.await.unwrap();
}

/// The scenario: beside the set, a mutex keeps its lease at
/// `members/nightly` (in memory, [`MemoryLeaseSetStore::get`] is another
/// client's handle on a name; settings refuse that name for a blob). While
/// it is leased the set does not count it: two instances share four
/// partitions two and two, none left unclaimed. Once it has stopped, it is
/// never collected, however long it stays unleased: its next term stamps
/// the next epoch, never 1 again.
#[tokio::test(start_paused = true)]
async fn a_foreign_lease_of_member_shape_is_no_member_and_its_epoch_never_goes_back() {
    let store = store();
    let foreign = store.get("members/nightly");
    let nightly = mutex(foreign.clone(), "cron");
    let token = CancellationToken::new();
    let leading = tokio::spawn({
        let (nightly, token) = (nightly, token.clone());
        async move {
            nightly.run_task_when_mutex_acquired(token).await.unwrap();
            nightly
        }
    });
    pass(Duration::from_secs(1)).await;
    assert!(foreign.is_held());
    assert_eq!(foreign.epoch(), 1);

    let (a, b) = (start(&store, "a"), start(&store, "b"));
    pass(Duration::from_secs(60)).await;
    assert_eq!(
        counts(&[&a, &b]),
        [2, 2],
        "the shares are over the set's own two members"
    );
    let listing = store.list("").await.unwrap();
    let (_, info) = listing
        .iter()
        .find(|(name, _)| name == "members/nightly")
        .unwrap();
    assert_eq!(BlobLeaseSet::live_member("members/nightly", info), None);
    assert_eq!(
        BlobLeaseSet::live_member(
            "members/a",
            &listing.iter().find(|(n, _)| n == "members/a").unwrap().1
        ),
        Some("a")
    );

    // The mutex stops and releases; its lease stays unleased for many
    // times `stale_after` while the set lists and collects every cycle.
    token.cancel();
    let nightly = leading.await.unwrap();
    assert!(!foreign.is_held());
    pass(STALE_AFTER * 5).await;
    assert_eq!(counts(&[&a, &b]), [2, 2]);

    // Its next term goes on from its last epoch.
    lead_for(&nightly, Duration::from_secs(1)).await;
    assert_eq!(
        foreign.epoch(),
        2,
        "the foreign lease was collected, and its epoch went back"
    );
    let info = foreign.inspect().await.unwrap().unwrap();
    assert_eq!((info.state, info.member), (LeaseState::Available, false));

    for i in [a, b] {
        i.token.cancel();
        i.run.await.unwrap().unwrap();
    }
}

/// A member's own lease is marked: its blob is a member's from its
/// creation, and is collected once stale, when its instance died.
#[tokio::test(start_paused = true)]
async fn a_stale_member_of_the_set_is_still_collected() {
    let store = store();
    let gone = store.lease("members/gone").unwrap();
    let id = LeaseId::new();
    gone.acquire(id, Duration::from_secs(30)).await.unwrap();
    LeaseStore::stamp(&gone, id, "gone", &StampOptions::new())
        .await
        .unwrap();
    let info = gone.inspect().await.unwrap().unwrap();
    assert!(info.member, "the member lease marks its blob");
    // A crash: the lease is left to expire.
    drop(gone);

    let a = start(&store, "a");
    pass(Duration::from_secs(30) + STALE_AFTER * 2).await;
    let names: Vec<String> = store
        .list("members/")
        .await
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["members/a"], "the stale member was not collected");
    assert_eq!(counts(&[&a]), [4]);
    a.token.cancel();
    a.run.await.unwrap().unwrap();
}

/// A member written by an earlier version carries no marker: while its
/// instance holds it, it is counted (its holder is its own name), so that
/// a rolling upgrade keeps the balance; once it is stale, it is not
/// collected, as nothing tells it from a lease that another client keeps.
#[tokio::test(start_paused = true)]
async fn a_member_of_an_earlier_version_is_counted_while_it_lives_and_never_collected() {
    let store = store();
    let old = store.get("members/old");
    // The earlier version's instance: its member blob and its share of the
    // partitions, all renewed (a share left free would be claimed by the
    // others once no member took it for two cycles).
    let leases: Vec<MemoryLeaseStore> = ["members/old", "partitions/p0", "partitions/p1"]
        .iter()
        .map(|name| store.get(name))
        .collect();
    let id = LeaseId::new();
    for lease in &leases {
        lease.acquire(id, Duration::from_secs(30)).await.unwrap();
        LeaseStore::stamp(lease, id, "old", &StampOptions::new())
            .await
            .unwrap();
    }
    let keep = tokio::spawn({
        let leases = leases.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                for lease in &leases {
                    if lease.renew(id).await.is_err() {
                        return;
                    }
                }
            }
        }
    });

    let a = start(&store, "a");
    pass(Duration::from_secs(60)).await;
    assert_eq!(counts(&[&a]), [2], "the earlier version's member counts");

    keep.abort();
    for lease in &leases {
        lease.release(id).await.unwrap();
    }
    pass(STALE_AFTER * 5).await;
    assert_eq!(counts(&[&a]), [4]);
    let info = old.inspect().await.unwrap().expect("the unmarked member");
    assert_eq!((info.epoch, info.member), (1, false));
    a.token.cancel();
    a.run.await.unwrap().unwrap();
}

#[test]
fn names_that_cannot_be_a_member_or_a_partition_are_refused_when_the_set_is_made() {
    let make = |holder: &str, partition: &str| {
        let options = LeaseSetOptions::default()
            .with_mutex(MutexOptions::default().with_holder(holder.to_owned()));
        BlobLeaseSet::with_store(store(), [partition], options, |_| async {
            Ok::<(), Error>(())
        })
        .map(drop)
    };
    make("a", "p0").unwrap();
    make("a", "x/members/y").unwrap();
    assert!(matches!(
        make("a/b", "p0"),
        Err(Error::InvalidOption {
            field: "holder",
            ..
        })
    ));
    let memory = store();
    for name in ["members/a/b", "members/", "x/members/y", "partitions"] {
        assert!(
            matches!(
                memory.lease(name),
                Err(Error::InvalidOption { field: "blob", .. })
            ),
            "{name}"
        );
    }
}
