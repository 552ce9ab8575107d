//! A fencing token that survives the loss of its blob: after the lease
//! blob, or its whole container, is deleted between terms, the next term's
//! epoch is still larger than every earlier one, on one account and on a
//! quorum, on this run's backend; also when the blob is deleted and made
//! again within one second of storage's clock, and again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use blob_mutex::{
    azure::BlobLeaseManager, quorum::QuorumLeaseStore, store::LeaseId, store::LeaseStore,
    store::StampOptions,
};
use blob_mutex_testkit::{azurite, raw, wait_for};

const D: Duration = Duration::from_secs(15);
/// Epochs per second of storage's clock in a record's first epoch.
const PER_SECOND: u64 = 1 << 20;

/// One term on `store`: acquire, stamp, release; its epoch.
async fn term<S: LeaseStore>(store: &S) -> u64 {
    let id = LeaseId::new();
    assert_eq!(
        store.acquire(id, D).await.unwrap(),
        blob_mutex::store::Acquire::Acquired
    );
    let epoch = store
        .stamp(id, "holder", &StampOptions::new())
        .await
        .unwrap();
    store.release(id).await.unwrap();
    epoch
}

/// Waits until storage's clock (Azurite runs on this host's) is past the
/// second in which the record that `epoch` belongs to was first stamped
/// (`epoch` is a record's first epoch, or close above it): the bound the
/// rule rests on is that a record lost and made again does not share its
/// first second with the lost one.
async fn past_the_first_second_of(epoch: u64) {
    let second = epoch / PER_SECOND;
    wait_for("the next second", Duration::from_secs(5), || async {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        (now.as_secs() >= second).then_some(())
    })
    .await;
}

/// Waits until this host's clock (Azurite's) has just begun a second, so
/// that what follows at once happens within one second of storage's clock.
async fn at_the_start_of_a_second() {
    let into = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let to_next = Duration::from_secs(1).saturating_sub(Duration::from_nanos(u64::from(into)));
    tokio::time::sleep(to_next + Duration::from_millis(5)).await;
}

#[tokio::test]
async fn the_epoch_keeps_increasing_when_the_blob_is_deleted_and_made_again_within_a_second() {
    let container = azurite::unique_container("epoch-same-second");
    let store = BlobLeaseManager::new(&azurite::shared().settings(&container, "lease")).unwrap();
    let client = raw::container(&container);
    at_the_start_of_a_second().await;
    let mut epochs = vec![term(&store).await];
    for _ in 0..3 {
        raw::delete_blob(&client, "lease").await;
        epochs.push(term(&store).await);
    }
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs went back after a delete within the second: {epochs:?}"
    );
}

#[tokio::test]
async fn a_quorum_whose_every_blob_was_deleted_within_a_second_keeps_its_epoch_increasing() {
    let (containers, quorum) = quorum("epoch-quorum-second");
    at_the_start_of_a_second().await;
    let mut epochs = vec![term(&quorum).await];
    for _ in 0..3 {
        for c in &containers {
            raw::delete_blob(&raw::container(c), "lease").await;
        }
        epochs.push(term(&quorum).await);
    }
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "a quorum's epochs went back after every blob was deleted within the second: {epochs:?}"
    );
}

/// A quorum over three containers of one Azurite, which stand for three
/// accounts, with a request timeout long enough for an Azurite beside
/// many others; the containers.
fn quorum(name: &str) -> (Vec<String>, QuorumLeaseStore<BlobLeaseManager>) {
    let containers: Vec<String> = (0..3)
        .map(|i| azurite::unique_container(&format!("{name}-{i}")))
        .collect();
    let accounts = containers
        .iter()
        .map(|c| {
            let settings = azurite::shared().settings(c, "lease");
            (c.clone(), BlobLeaseManager::new(&settings).unwrap())
        })
        .collect();
    let quorum = QuorumLeaseStore::with_labels(accounts)
        .unwrap()
        .with_request_timeout(Duration::from_secs(10));
    (containers, quorum)
}

#[tokio::test]
async fn the_epoch_keeps_increasing_when_the_blob_is_deleted_between_terms() {
    let container = azurite::unique_container("epoch-blob");
    let store = BlobLeaseManager::new(&azurite::shared().settings(&container, "lease")).unwrap();
    let client = raw::container(&container);
    let mut epochs = vec![term(&store).await];
    for _ in 0..2 {
        past_the_first_second_of(*epochs.last().unwrap()).await;
        raw::delete_blob(&client, "lease").await;
        epochs.push(term(&store).await);
    }
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs went back after a delete: {epochs:?}"
    );
}

#[tokio::test]
async fn the_epoch_keeps_increasing_when_the_container_is_deleted_and_made_again() {
    let container = azurite::unique_container("epoch-container");
    let store = BlobLeaseManager::new(&azurite::shared().settings(&container, "lease")).unwrap();
    let client = raw::container(&container);
    let mut epochs = vec![term(&store).await, term(&store).await];
    past_the_first_second_of(epochs[0]).await;
    raw::delete_container(&client).await;
    epochs.push(term(&store).await);
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs went back after the container was deleted: {epochs:?}"
    );
}

#[tokio::test]
async fn a_quorum_whose_every_blob_was_deleted_keeps_its_epoch_increasing() {
    let (containers, quorum) = quorum("epoch-quorum");
    let mut epochs = vec![term(&quorum).await];
    for _ in 0..2 {
        past_the_first_second_of(*epochs.last().unwrap()).await;
        for c in &containers {
            raw::delete_blob(&raw::container(c), "lease").await;
        }
        epochs.push(term(&quorum).await);
    }
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "a quorum's epochs went back after every blob was deleted: {epochs:?}"
    );
}
