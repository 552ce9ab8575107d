//! Nothing grows without bound, on a real Azurite: stale member blobs of a
//! lease set and stale candidate records beside a lease blob are collected
//! by the live instances, a bounded number per listing, while the set keeps
//! balancing; a graceful leave deletes its own blob; a blob that is leased
//! is never deleted, whatever the race between a deletion and a renewal;
//! a blob of member shape that the set did not write is neither counted
//! nor collected.

use blob_mutex::store::LeaseStore;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use blob_mutex::{
    azure::metadata::MEMBER_KEY, azure::BlobLeaseManager, azure::BlobLeaseSetStore,
    store::Collection, store::LeaseId, store::LeaseSetStore, store::LeaseState,
    BlobDistributedMutex, BlobLeaseSet, BlobSettings, CancellationToken, Error, LeaseSetOptions,
    MutexOptions,
};
// Every test here takes an Azurite of its own (`azurite::own()`): they
// create hundreds of blobs, which would slow the tests sharing one.
use blob_mutex_testkit::{azurite, init_tracing, wait_for};
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

/// Azurite's cost per request grows with the blobs of the container: with
/// 20 000 stale members, creating them took 234 s to 492 s here, the set
/// balanced 5 s to 13 s after it started, and Azurite deleted about 6 blobs
/// a second (an hour for all of them). 1 000 show the same behaviour (the
/// set balances while a backlog of several listings' deletions, at
/// [`MEMBERS_PER_LISTING`], is collected) in under a minute; the figures
/// are BENCHMARKS.md's: `BLOB_MUTEX_STALE_MEMBERS=20000` runs them.
const STALE_MEMBERS: usize = 1_000;
/// Deletions per listing in the stale members' test: fewer than the
/// members, so that collection spans listings.
const MEMBERS_PER_LISTING: usize = 400;

/// How many stale members to create: [`STALE_MEMBERS`], or the number in
/// `BLOB_MUTEX_STALE_MEMBERS`.
fn stale_members() -> usize {
    std::env::var("BLOB_MUTEX_STALE_MEMBERS").map_or(STALE_MEMBERS, |n| {
        n.parse()
            .expect("BLOB_MUTEX_STALE_MEMBERS must be a number")
    })
}
/// More than one listing's worth at [`CANDIDATES_PER_LISTING`]: the leader
/// collects them over several listings, a bounded number each.
const STALE_CANDIDATES: usize = 200;
/// A listing's bound in the candidates' test.
const CANDIDATES_PER_LISTING: usize = 100;
/// Creates in flight at once while setting up.
const CREATES_IN_FLIGHT: usize = 32;
/// Azurite lists 20 000 blobs with metadata in about 5 s on a loaded
/// two-core machine (more than the default 3 s request timeout), and
/// answers every call more slowly the more blobs it holds: generous.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Long enough for renewals cut at [`REQUEST_TIMEOUT`].
const LEASE: Duration = Duration::from_secs(60);
/// Collection as the tests run it: a short staleness bound, so that the
/// test does not wait out the default five minutes.
fn collection() -> Collection {
    Collection::default()
        .with_stale_after(Duration::from_secs(2))
        .with_per_listing(1_000)
}

/// Creates `names` as empty blobs, with no lease: what instances that
/// stopped long ago leave behind.
async fn create_stale(store: &BlobLeaseSetStore, names: impl Iterator<Item = String>) {
    let started = Instant::now();
    let count = futures_util::stream::iter(names)
        .map(|name| {
            let lease = store.lease(&name).unwrap();
            async move {
                let mut tries = 0;
                while let Err(e) = lease.create_if_missing().await {
                    tries += 1;
                    assert!(tries < 5 && e.is_transient(), "{e:?}");
                }
            }
        })
        .buffer_unordered(CREATES_IN_FLIGHT)
        .count()
        .await;
    eprintln!("created {count} stale blobs in {:?}", started.elapsed());
}

/// Runs one instance of the set `holder` until `token` is cancelled; its
/// owned partitions are published on the returned channel.
fn start_member(
    store: BlobLeaseSetStore,
    holder: &str,
    token: &CancellationToken,
) -> (
    watch::Receiver<BTreeSet<String>>,
    tokio::task::JoinHandle<blob_mutex::Result<()>>,
) {
    let options = LeaseSetOptions::default()
        .with_mutex(
            MutexOptions::default()
                .with_holder(holder.to_owned())
                .with_lease_duration(LEASE)
                .with_request_timeout(REQUEST_TIMEOUT),
        )
        .with_balance_interval(Duration::from_millis(200));
    let set =
        BlobLeaseSet::with_store(store, ["p0", "p1", "p2", "p3"], options, |ctx| async move {
            ctx.cancelled().await;
            Ok::<_, Error>(())
        })
        .unwrap();
    let mut owned = set.watch();
    let (tx, rx) = watch::channel(BTreeSet::new());
    tokio::spawn(async move {
        while owned.changed().await.is_ok() {
            let now = owned.borrow_and_update().keys().cloned().collect();
            let _ = tx.send(now);
        }
    });
    let token = token.clone();
    (rx, tokio::spawn(async move { set.run(token).await }))
}

async fn members(store: &BlobLeaseSetStore) -> blob_mutex::Result<Vec<(String, LeaseState)>> {
    Ok(store
        .list("members/")
        .await?
        .into_iter()
        .map(|(name, info)| (name, info.state))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_members_are_collected_while_the_set_balances_and_a_leave_deletes_its_own() {
    let container = azurite::unique_container("collect-members");
    let settings = azurite::own().settings(&container, "set");
    let store = BlobLeaseSetStore::new(&settings)
        .unwrap()
        .with_request_timeout(REQUEST_TIMEOUT)
        .with_collection(collection().with_per_listing(MEMBERS_PER_LISTING));
    create_stale(
        &store,
        (0..stale_members()).map(|i| format!("members/gone-{i}")),
    )
    .await;

    let token = CancellationToken::new();
    let (mut a_owns, a) = start_member(store.clone(), "a", &token);
    let (mut b_owns, b) = start_member(store.clone(), "b", &token);
    // The set balances with the stale members still there: two each.
    let started = Instant::now();
    for owns in [&mut a_owns, &mut b_owns] {
        tokio::time::timeout(REQUEST_TIMEOUT * 4, owns.wait_for(|p| p.len() == 2))
            .await
            .expect("the set balances")
            .unwrap();
    }
    eprintln!("balanced after {:?}", started.elapsed());
    // The listing shrinks back to the live members. Each look is a listing
    // of thousands of blobs: one every few seconds, with a time limit of
    // its own, is enough.
    let looking = BlobLeaseSetStore::new(&settings)
        .unwrap()
        .with_request_timeout(Duration::from_secs(120));
    let listed = loop {
        match members(&looking).await {
            Ok(members) if members.len() <= 2 => break members,
            Ok(members) => eprintln!("{} members after {:?}", members.len(), started.elapsed()),
            Err(e) => eprintln!("could not list: {e}"),
        }
        assert!(
            // Azurite deletes about 6 a second with 20 000 in the container.
            started.elapsed() < Duration::from_secs(400.max(stale_members() as u64 / 5)),
            "the stale members were not collected"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    eprintln!("collected after {:?}", started.elapsed());
    assert_eq!(
        listed,
        [
            ("members/a".to_owned(), LeaseState::Leased),
            ("members/b".to_owned(), LeaseState::Leased)
        ],
        "the live members' blobs are never collected"
    );
    assert!(!a.is_finished() && !b.is_finished());
    assert_eq!(a_owns.borrow().len() + b_owns.borrow().len(), 4);

    // A graceful leave deletes the member's own blob.
    token.cancel();
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    assert_eq!(members(&looking).await.unwrap(), []);
}

/// Beside the set `jobs`, another client keeps a blob of member shape,
/// `jobs/members/nightly` (a name the crate refuses for a lease or a set),
/// with its own holder and epoch: while it is leased the set does not count
/// it (two instances share four partitions two and two, none left
/// unclaimed), and once it has been unleased for long past `stale_after`
/// it is still there with its epoch, its content and no marker, while the
/// set's own stale member beside it is collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_blob_of_member_shape_is_neither_counted_nor_collected() {
    init_tracing();
    let container = azurite::unique_container("collect-foreign");
    let settings = azurite::own().settings(&container, "jobs");
    let refused = BlobSettings::from_connection_string(
        &azurite::own().connection_string(),
        &container,
        "jobs/members/nightly",
    );
    assert!(
        matches!(refused, Err(Error::InvalidOption { field: "blob", .. })),
        "{refused:?}"
    );
    let raw = blob_mutex_testkit::raw::container(&container);
    blob_mutex_testkit::raw::create(&raw).await;
    let foreign = "jobs/members/nightly";
    let metadata = HashMap::from([
        ("holder".to_owned(), "cron".to_owned()),
        ("epoch".to_owned(), "41".to_owned()),
    ]);
    blob_mutex_testkit::raw::put(&raw, foreign, b"nightly state".to_vec(), metadata).await;
    // An infinite lease: it is held for as long as the test needs.
    let lease = LeaseId::new().to_string();
    blob_mutex_testkit::raw::acquire_lease(&raw, foreign, -1, &lease).await;
    // The set's own member, left by an instance that died.
    let store = BlobLeaseSetStore::new(&settings)
        .unwrap()
        .with_request_timeout(REQUEST_TIMEOUT)
        .with_collection(collection());
    store
        .lease("members/gone")
        .unwrap()
        .create_if_missing()
        .await
        .unwrap();

    let token = CancellationToken::new();
    let (mut a_owns, a) = start_member(store.clone(), "a", &token);
    let (mut b_owns, b) = start_member(store.clone(), "b", &token);
    for owns in [&mut a_owns, &mut b_owns] {
        tokio::time::timeout(REQUEST_TIMEOUT * 4, owns.wait_for(|p| p.len() == 2))
            .await
            .expect("the shares are over the set's own two members")
            .unwrap();
    }
    let listing = store.list("members/").await.unwrap();
    let live: Vec<&str> = listing
        .iter()
        .filter_map(|(name, info)| BlobLeaseSet::live_member(name, info))
        .collect();
    assert_eq!(live, ["a", "b"], "{listing:?}");

    // Unleased, the foreign blob is as stale as the set's own dead member,
    // for many listings (one every 200 ms) past `stale_after` (2 s).
    blob_mutex_testkit::raw::release_lease(&raw, foreign, &lease).await;
    wait_for(
        "the set's own stale member to be collected",
        Duration::from_secs(60),
        || async {
            (blob_mutex_testkit::raw::count(&raw, "jobs/members/gone").await == 0).then_some(())
        },
    )
    .await;
    tokio::time::sleep(collection().stale_after * 3).await;
    assert_eq!(
        blob_mutex_testkit::raw::count(&raw, foreign).await,
        1,
        "the foreign blob was collected"
    );
    let kept = blob_mutex_testkit::raw::metadata(&raw, foreign).await;
    assert_eq!(
        (
            kept.get("holder").map(String::as_str),
            kept.get("epoch").map(String::as_str),
            kept.contains_key(MEMBER_KEY)
        ),
        (Some("cron"), Some("41"), false),
        "the foreign blob was collected or changed: {kept:?}"
    );
    assert_eq!(
        blob_mutex_testkit::raw::content(&raw, foreign).await,
        b"nightly state"
    );
    assert_eq!((a_owns.borrow().len(), b_owns.borrow().len()), (2, 2));
    token.cancel();
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    assert_eq!(
        blob_mutex_testkit::raw::count(&raw, "jobs/members/").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_candidates_are_collected_by_the_leader_and_a_withdraw_deletes_its_own() {
    init_tracing();
    let container = azurite::unique_container("collect-candidates");
    let settings = azurite::own().settings(&container, "lock");
    // `lock.candidates/<holder>`: names the crate refuses for a lease, so
    // made with the SDK itself.
    let client = blob_mutex_testkit::raw::container(&container);
    blob_mutex_testkit::raw::create(&client).await;
    let started = Instant::now();
    futures_util::stream::iter(0..STALE_CANDIDATES)
        .map(|i| {
            let (client, name) = (&client, format!("lock.candidates/gone-{i}"));
            async move { blob_mutex_testkit::raw::put(client, &name, Vec::new(), HashMap::new()).await }
        })
        .buffer_unordered(CREATES_IN_FLIGHT)
        .count()
        .await;
    eprintln!(
        "created {STALE_CANDIDATES} stale records in {:?}",
        started.elapsed()
    );
    let count = || blob_mutex_testkit::raw::count(&client, "lock.candidates/");
    assert_eq!(count().await, STALE_CANDIDATES);

    let manager = |holder: &str, priority: i64| {
        let store = BlobLeaseManager::new(&settings)
            .unwrap()
            .with_request_timeout(REQUEST_TIMEOUT)
            .with_collection(collection().with_per_listing(CANDIDATES_PER_LISTING));
        let options = MutexOptions::default()
            .with_holder(holder.to_owned())
            .with_priority(priority)
            .with_request_timeout(REQUEST_TIMEOUT);
        Arc::new(
            BlobDistributedMutex::with_store(store, options, |ctx| async move {
                ctx.cancelled().await;
                Ok::<_, Error>(())
            })
            .unwrap(),
        )
    };
    let token = CancellationToken::new();
    let leader = manager("leader", 1);
    let run = tokio::spawn({
        let (leader, token) = (leader.clone(), token.clone());
        async move { leader.run_task_when_mutex_acquired(token).await }
    });
    let started = Instant::now();
    wait_for(
        "the stale candidates to be collected",
        Duration::from_secs(300),
        || async { (count().await == 0).then_some(()) },
    )
    .await;
    eprintln!("collected after {:?}", started.elapsed());

    // A candidate of a lower priority advertises, and withdraws when its
    // round ends: its record goes with it.
    let candidate = manager("candidate", 0);
    let round = CancellationToken::new();
    let waiting = tokio::spawn({
        let (candidate, round) = (candidate.clone(), round.clone());
        async move { candidate.run_task_when_mutex_acquired(round).await }
    });
    wait_for(
        "the candidate's record",
        Duration::from_secs(60),
        || async { (count().await == 1).then_some(()) },
    )
    .await;
    round.cancel();
    waiting.await.unwrap().unwrap();
    assert_eq!(count().await, 0, "a withdraw deletes its own record");
    token.cancel();
    run.await.unwrap().unwrap();
}

/// An advertise that created the candidate's record and failed before its
/// acquire leaves the record unleased, and storage refuses to release a
/// lease that is not there (Azurite: `LeaseIdMismatchWithLeaseOperation`).
/// The withdraw says so and still deletes the record; a record leased under
/// another id (another instance with the same holder name) stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdraw_deletes_its_record_that_was_created_and_never_leased() {
    init_tracing();
    let container = azurite::unique_container("withdraw-unleased");
    let settings = azurite::own().settings(&container, "lock");
    let client = blob_mutex_testkit::raw::container(&container);
    blob_mutex_testkit::raw::create(&client).await;
    let record = "lock.candidates/candidate";
    blob_mutex_testkit::raw::put(&client, record, Vec::new(), HashMap::new()).await;
    let store = BlobLeaseManager::new(&settings).unwrap();
    let withdrawn = store.withdraw(LeaseId::new(), "candidate").await;
    assert!(
        matches!(withdrawn, Err(Error::LeaseLost(_))),
        "{withdrawn:?}"
    );
    assert_eq!(
        blob_mutex_testkit::raw::count(&client, record).await,
        0,
        "a withdraw deletes its own unleased record"
    );

    blob_mutex_testkit::raw::put(&client, record, Vec::new(), HashMap::new()).await;
    let other = LeaseId::new().to_string();
    blob_mutex_testkit::raw::acquire_lease(&client, record, 60, &other).await;
    let withdrawn = store.withdraw(LeaseId::new(), "candidate").await;
    assert!(
        matches!(withdrawn, Err(Error::LeaseLost(_))),
        "{withdrawn:?}"
    );
    assert_eq!(
        blob_mutex_testkit::raw::count(&client, record).await,
        1,
        "a record leased under another id is left alone"
    );
    blob_mutex_testkit::raw::release_lease(&client, record, &other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_member_is_never_deleted_whatever_the_race_with_its_renewal() {
    let container = azurite::unique_container("collect-race");
    let settings = azurite::own().settings(&container, "set");
    let store = BlobLeaseSetStore::new(&settings)
        .unwrap()
        .with_collection(Collection::default().with_stale_after(Duration::ZERO));
    let member = store.lease("members/m").unwrap();
    let (mut deleted, mut kept) = (0, 0);
    for round in 0..40 {
        let id = LeaseId::new();
        member.create_if_missing().await.unwrap();
        // Seen free (twice, so that it is due), then taken while the
        // deletion is on its way.
        let listing = store.list("").await.unwrap();
        store.collect(&listing).await;
        let listing = store.list("").await.unwrap();
        let live = async {
            if round % 4 != 0 {
                tokio::task::yield_now().await;
            }
            match member.acquire(id, Duration::from_secs(15)).await {
                Ok(_) => {
                    for _ in 0..3 {
                        member.renew(id).await?;
                    }
                    Ok(true)
                }
                Err(e) => Err(e),
            }
        };
        let (live, collected) = tokio::join!(live, store.collect(&listing));
        assert!(
            live.is_ok(),
            "round {round}: a member that acquired lost its blob: {live:?}"
        );
        let info = member
            .inspect()
            .await
            .unwrap()
            .expect("the blob of a live member");
        assert_eq!(info.state, LeaseState::Leased, "round {round}");
        if collected == 1 {
            deleted += 1;
        } else {
            kept += 1;
        }
        member.release(id).await.unwrap();
    }
    eprintln!("deletion first in {deleted} rounds, acquire first in {kept}");
    assert!(kept > 0, "the race never had the lease first");
}

/// A stale member that has a snapshot: storage refuses to delete it (409
/// `SnapshotsPresent`) for as long as the snapshot is there. It is not tried
/// again at every listing, the stale member beside it is collected, and it
/// goes once its snapshot does. On the official SDK's backend, whose delete
/// leaves snapshots alone (the 0.21 SDK's deletes them with the blob).
#[cfg(feature = "official")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_member_with_a_snapshot_is_not_retried_at_every_listing_and_goes_with_its_snapshot()
{
    use blob_mutex::azure::Backend;
    use blob_mutex_testkit::backend::container_url_settings;
    use blob_mutex_testkit::proxy::Proxy;

    init_tracing();
    let container = azurite::unique_container("collect-snapshot");
    // Through a proxy, to count the deletes that reach storage.
    let proxy = Proxy::start(azurite::own().port);
    let settings = container_url_settings(&proxy.endpoint(), &container, "set");
    let store = BlobLeaseSetStore::new(&settings.with_backend(Backend::Official))
        .unwrap()
        .with_collection(Collection::default().with_stale_after(Duration::ZERO));
    for name in ["members/snapped", "members/plain"] {
        store
            .lease(name)
            .unwrap()
            .create_if_missing()
            .await
            .unwrap();
    }
    let raw = blob_mutex_testkit::raw::container(&container);
    blob_mutex_testkit::raw::snapshot(&raw, "set/members/snapped").await;
    let deletes = |blob: &str| {
        proxy
            .log()
            .iter()
            .filter(|r| r.method == "DELETE" && r.target.contains(blob))
            .count()
    };

    // Listings one after the other, as fast as Azurite answers.
    let listings = 20;
    let started = Instant::now();
    for _ in 0..listings {
        let listing = store.list("").await.unwrap();
        store.collect(&listing).await;
    }
    let took = started.elapsed();
    let names: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        names,
        ["members/snapped"],
        "the other stale member is collected"
    );
    assert_eq!(deletes("plain"), 1);
    // The first retry comes one listing interval (at least 1 s) after the
    // first refusal, each later one twice as long after the one before: n
    // tries take at least 2^(n-1) - 1 seconds.
    let tries = deletes("snapped");
    let most = 1 + usize::try_from((took.as_secs() + 1).ilog2()).unwrap();
    assert!(
        (1..=most).contains(&tries),
        "{tries} deletes of the member with a snapshot in {listings} listings over {took:?} (at most {most})"
    );
    eprintln!("{tries} deletes of the member with a snapshot in {listings} listings over {took:?}");

    // Its snapshot deleted, the member goes at a later listing.
    blob_mutex_testkit::raw::delete_snapshots(&raw, "set/members/snapped").await;
    wait_for(
        "the member to be collected once its snapshot is gone",
        Duration::from_secs(30),
        || {
            let store = store.clone();
            async move {
                let listing = store.list("").await.unwrap();
                store.collect(&listing).await;
                store.list("").await.unwrap().is_empty().then_some(())
            }
        },
    )
    .await;
}
