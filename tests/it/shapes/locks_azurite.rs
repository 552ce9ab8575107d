//! Locks by name on a real Azurite, on the backend of this run: two
//! providers made from the same settings contend for a name (one holds,
//! the other finds it held, and takes it once released) and hold different
//! names at once; each lock is the blob `<prefix>/<name>`; one provider
//! holds many names at once; bad names are refused before any request.

use blob_mutex::store::LeaseStore;

use std::time::Duration;

use blob_mutex::{
    azure::BlobLeaseManager, store::LeaseState, BlobLocks, Error, MutexOptions, TryAcquire,
};
use blob_mutex_testkit::azurite;

fn provider(settings: &blob_mutex::BlobSettings, holder: &str) -> BlobLocks {
    let options = MutexOptions::default().with_holder(holder.to_owned());
    BlobLocks::with_options(settings, options).unwrap()
}

/// The lease of the lock `name` as another client sees it: its state and
/// holder.
async fn seen(settings: &blob_mutex::BlobSettings, name: &str) -> (LeaseState, Option<String>) {
    let blob = format!("{}/{name}", settings.blob());
    let lease =
        BlobLeaseManager::new(&settings.for_blob(settings.container(), blob).unwrap()).unwrap();
    let info = lease
        .inspect()
        .await
        .unwrap()
        .expect("the lock's blob exists");
    (info.state, info.holder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_providers_contend_for_a_name_and_hold_different_names_at_once() {
    let container = azurite::unique_container("locks");
    let settings = azurite::shared().settings(&container, "locks");
    let (a, b) = (provider(&settings, "a"), provider(&settings, "b"));
    let TryAcquire::Acquired(order) = a.try_acquire("order-42").await.unwrap() else {
        panic!("the free lock order-42 was not acquired");
    };
    let TryAcquire::Held(Some(leader)) = b.try_acquire("order-42").await.unwrap() else {
        panic!("b got the lock a holds");
    };
    assert_eq!((leader.holder.as_str(), leader.epoch), ("a", order.epoch()));
    let TryAcquire::Held(_) = a.try_acquire("order-42").await.unwrap() else {
        panic!("a's own provider handed out a second guard of order-42");
    };

    let other = b.acquire("orders/43").await.unwrap();
    assert!(
        order.is_current() && other.is_current(),
        "both hold at once"
    );
    assert_eq!(
        seen(&settings, "order-42").await,
        (LeaseState::Leased, Some("a".to_owned()))
    );
    assert_eq!(
        seen(&settings, "orders/43").await,
        (LeaseState::Leased, Some("b".to_owned()))
    );

    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.acquire("order-42").await.unwrap() }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!waiting.is_finished(), "b waits while a holds order-42");
    order.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("b takes order-42 soon after a released it")
        .unwrap();
    assert_eq!(taken.epoch(), leader.epoch + 1);
    assert_eq!(
        seen(&settings, "order-42").await,
        (LeaseState::Leased, Some("b".to_owned()))
    );
    taken.release().await.unwrap();
    other.release().await.unwrap();
    assert_eq!(seen(&settings, "order-42").await.0, LeaseState::Available);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_provider_holds_many_names_at_once_over_its_one_client() {
    let container = azurite::unique_container("locks-many");
    let settings = azurite::shared().settings(&container, "many");
    let locks = provider(&settings, "one");
    let names: Vec<String> = (0..40).map(|i| format!("job-{i}")).collect();
    let guards = futures_util::future::try_join_all(names.iter().map(|n| locks.acquire(n)))
        .await
        .unwrap();
    assert!(guards.iter().all(blob_mutex::MutexGuard::is_current));
    for name in &names {
        assert_eq!(seen(&settings, name).await.0, LeaseState::Leased, "{name}");
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn names_that_cannot_name_a_lock_are_refused_before_any_request() {
    // Nothing listens here: a request would fail with another error.
    let settings = blob_mutex::BlobSettings::azurite("locks", "prefix")
        .unwrap()
        .with_endpoint("http://127.0.0.1:9/devstoreaccount1")
        .unwrap()
        .with_backend(blob_mutex_testkit::backend::current());
    let locks = BlobLocks::new(&settings).unwrap();
    // 1 020 characters pass alone, and not under the prefix `prefix/`.
    let long = "a".repeat(1020);
    for bad in [
        "",
        "members/a",
        "partitions/p",
        "a/members/b",
        "x.candidates",
        "a//b",
        "a.",
        &long,
    ] {
        match locks.try_acquire(bad).await {
            Err(Error::InvalidOption {
                field: "name",
                reason,
            }) => {
                assert!(reason.contains("not a lock name"), "{reason}");
            }
            other => panic!("{bad:?} was not refused: {other:?}"),
        }
    }
}
