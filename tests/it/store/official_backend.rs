//! The official backend's stores against a real Azurite, for what the
//! shared conformance and fault tests do not see: a blob never overwritten,
//! break, a SAS that may not create the container, and an account key
//! signing the tokens this SDK takes instead.

use std::time::Duration;

use blob_mutex::azure::Backend;
use blob_mutex::BlobSettings;
use blob_mutex::{
    azure::BlobLeaseManager, store::Acquire, store::LeaseId, store::LeaseState, store::LeaseStore,
    store::StampOptions, Error,
};
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::backend::container_url_settings;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::sas;

const D: Duration = Duration::from_secs(15);

fn manager(endpoint: &str, blob: &str) -> BlobLeaseManager {
    let container = azurite::unique_container(blob);
    BlobLeaseManager::new(&official(container_url_settings(
        endpoint, &container, blob,
    )))
    .unwrap()
}

/// `settings` on the official backend, whichever backend the run is on.
fn official(settings: BlobSettings) -> BlobSettings {
    settings.with_backend(Backend::Official)
}

#[tokio::test]
async fn the_blob_is_never_overwritten_and_a_break_ends_the_lease() {
    let m = manager(&azurite::shared().endpoint, "no-overwrite");
    m.create_if_missing().await.unwrap();
    let a = LeaseId::new();
    assert_eq!(m.acquire(a, D).await.unwrap(), Acquire::Acquired);
    LeaseStore::stamp(&m, a, "someone", &StampOptions::new())
        .await
        .unwrap();
    let before = m.inspect().await.unwrap().unwrap();
    m.create_if_missing().await.unwrap();
    assert_eq!(m.inspect().await.unwrap().unwrap().etag, before.etag);

    assert_eq!(m.break_lease(None).await.unwrap(), Duration::ZERO);
    assert_eq!(
        m.inspect().await.unwrap().unwrap().state,
        LeaseState::Broken
    );
    assert!(matches!(m.renew(a).await, Err(Error::LeaseLost(_))));
    // Released from broken, there is no lease left to break.
    m.release(a).await.unwrap();
    assert!(matches!(
        m.break_lease(None).await,
        Err(Error::Storage { status: 409, .. })
    ));
}

/// A container SAS cannot create its container: the missing container is
/// one fatal error that says what to do, not a retry loop.
#[tokio::test]
async fn a_sas_that_cannot_create_the_missing_container_names_what_to_grant() {
    let container = azurite::unique_container("no-container");
    let url = format!(
        "{}/{container}?{}",
        azurite::shared().endpoint,
        sas::container_sas(&container, "racwdl")
    );
    let settings = BlobSettings::from_container_url(&url, "lease").unwrap();
    let m = BlobLeaseManager::new(&official(settings)).unwrap();
    let e = m.acquire(LeaseId::new(), D).await.unwrap_err();
    assert!(e.is_fatal(), "{e:?}");
    assert!(
        e.to_string().contains("create the container beforehand"),
        "{e}"
    );
}

/// An account key on the official backend: every request carries a SAS
/// signed here (a container SAS, or for Create Container an account SAS
/// that may only create containers), and Azurite accepts them all: the missing container is created, the lease
/// taken, renewed and released.
#[tokio::test]
async fn an_account_key_signs_container_tokens_that_storage_accepts() {
    let proxy = Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("key-signed");
    let settings = official(
        BlobSettings::from_connection_string(&proxy.connection_string(), &container, "lease")
            .unwrap(),
    );
    let m = blob_mutex::azure::BlobLeaseManager::new(&settings).unwrap();
    let a = LeaseId::new();
    assert_eq!(m.acquire(a, D).await.unwrap(), Acquire::Acquired);
    m.renew(a).await.unwrap();
    m.release(a).await.unwrap();

    let log = proxy.log();
    let create = log
        .iter()
        .find(|r| {
            r.method == "PUT"
                && r.target.contains("restype=container")
                && !r.target.contains("comp=")
        })
        .expect("the container was created");
    assert!(create.target.contains("srt=c&sp=c&"), "{}", create.target);
    for r in log.iter().filter(|r| r.lease_action.is_some()) {
        assert!(r.target.contains("sr=c&sp=racwdl&"), "{}", r.target);
        assert!(r.target.contains("&sig="), "{}", r.target);
    }
    assert!(log.iter().filter(|r| r.is("renew")).count() == 1);
}

/// A set from a container URL: one listing reads every lease of the set, stale
/// member blobs are collected (conditionally, never a leased one), and a
/// leave deletes a member blob only once it is not leased.
#[tokio::test]
async fn a_set_lists_its_leases_collects_stale_members_and_keeps_leased_ones() {
    use blob_mutex::{azure::BlobLeaseSetStore, store::Collection, store::LeaseSetStore};

    let container = azurite::unique_container("official-set");
    let settings = container_url_settings(&azurite::shared().endpoint, &container, "set");
    let store = BlobLeaseSetStore::new(&official(settings))
        .unwrap()
        .with_collection(Collection::default().with_stale_after(Duration::from_millis(300)));
    for i in 0..10 {
        let gone = store.lease(&format!("members/gone-{i}")).unwrap();
        gone.create_if_missing().await.unwrap();
    }
    let live = store.lease("members/live").unwrap();
    let partition = store.lease("p0").unwrap();
    let (id, p) = (LeaseId::new(), LeaseId::new());
    assert_eq!(live.acquire(id, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(partition.acquire(p, D).await.unwrap(), Acquire::Acquired);
    let epoch = LeaseStore::stamp(&partition, p, "me", &StampOptions::new())
        .await
        .unwrap();

    let listing = store.list("").await.unwrap();
    assert_eq!(listing.len(), 12, "{listing:?}");
    let (_, p0) = listing.iter().find(|(name, _)| name == "p0").unwrap();
    assert_eq!(
        (p0.state, p0.holder.as_deref(), p0.epoch),
        (LeaseState::Leased, Some("me"), epoch)
    );

    // Each look lists and collects; a blob is deleted once it was seen
    // unchanged and without a lease for longer than `stale_after`.
    let left = blob_mutex_testkit::wait_for(
        "the stale members to be collected",
        Duration::from_secs(15),
        || {
            let store = store.clone();
            async move {
                let listing = store.list("").await.unwrap();
                store.collect(&listing).await;
                let names: Vec<String> = listing.into_iter().map(|(name, _)| name).collect();
                (names.len() <= 2).then_some(names)
            }
        },
    )
    .await;
    assert_eq!(left, ["members/live", "p0"]);

    assert!(
        !store.remove("members/live").await,
        "a leased member is kept"
    );
    live.release(id).await.unwrap();
    assert!(store.remove("members/live").await);
    partition.release(p).await.unwrap();
}
