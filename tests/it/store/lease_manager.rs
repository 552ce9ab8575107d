//! `BlobLeaseManager` against a real Azurite: every lease action and the
//! create-if-missing rule.

use blob_mutex::store::LeaseStore;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use blob_mutex::{
    azure::BlobLeaseManager, store::Acquire, store::LeaseId, store::LeaseState,
    store::StampOptions, store::MAX_STATE_LEN, Error,
};
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::Proxy;

fn manager(blob: &str) -> (BlobLeaseManager, String) {
    let container = azurite::unique_container(blob);
    let settings = azurite::shared().settings(&container, blob);
    (BlobLeaseManager::new(&settings).unwrap(), container)
}

const D: Duration = Duration::from_secs(15);

#[tokio::test]
async fn acquire_creates_container_and_blob_then_every_action_works() {
    blob_mutex_testkit::init_tracing();
    let (m, _) = manager("actions");
    assert_eq!(
        m.inspect().await.unwrap(),
        None,
        "nothing exists before the first acquire"
    );

    let a = LeaseId::new();
    assert_eq!(m.acquire(a, D).await.unwrap(), Acquire::Acquired);
    // Idempotent: the same proposed id acquires again.
    assert_eq!(m.acquire(a, D).await.unwrap(), Acquire::Acquired);
    // Another id sees the lease held.
    assert_eq!(m.acquire(LeaseId::new(), D).await.unwrap(), Acquire::Held);

    let info = m.inspect().await.unwrap().expect("blob exists");
    assert_eq!(info.state, LeaseState::Leased);
    assert_eq!(info.infinite, Some(false));
    assert_eq!(info.content_length, 0);
    assert_eq!(info.epoch, 0);
    // Storage's clock (the answer's Date): Azurite runs on this host.
    let storage_time = info.storage_time.expect("storage's Date");
    let host = std::time::SystemTime::now();
    let apart = host
        .duration_since(storage_time)
        .unwrap_or_else(|e| e.duration());
    assert!(
        apart < Duration::from_secs(60),
        "{storage_time:?} vs {host:?}"
    );

    let first = m.stamp(a, "me-1", &StampOptions::new()).await.unwrap();
    assert!(
        first >= 1 << 20,
        "a new record starts at storage's clock: {first}"
    );
    assert_eq!(
        m.stamp(a, "me-1", &StampOptions::new()).await.unwrap(),
        first + 1
    );
    let info = m.inspect().await.unwrap().unwrap();
    assert_eq!(
        (info.epoch, info.holder.as_deref()),
        (first + 1, Some("me-1"))
    );
    assert!(info.acquired_at.is_some());

    m.renew(a).await.unwrap();
    let wrong = LeaseId::new();
    assert!(matches!(m.renew(wrong).await, Err(Error::LeaseLost(_))));
    assert!(matches!(
        m.stamp(wrong, "x", &StampOptions::new()).await,
        Err(Error::LeaseLost(_))
    ));

    let b = LeaseId::new();
    m.change(a, b).await.unwrap();
    assert!(matches!(m.renew(a).await, Err(Error::LeaseLost(_))));
    m.renew(b).await.unwrap();

    m.release(b).await.unwrap();
    assert_eq!(
        m.inspect().await.unwrap().unwrap().state,
        LeaseState::Available
    );

    let c = LeaseId::new();
    assert_eq!(m.acquire(c, D).await.unwrap(), Acquire::Acquired);
    assert_eq!(m.break_lease(None).await.unwrap(), Duration::ZERO);
    assert_eq!(
        m.inspect().await.unwrap().unwrap().state,
        LeaseState::Broken
    );
    assert!(matches!(m.renew(c).await, Err(Error::LeaseLost(_))));
    assert_eq!(
        m.acquire(LeaseId::new(), D).await.unwrap(),
        Acquire::Acquired
    );
}

#[tokio::test]
async fn creating_the_blob_never_overwrites_one_that_exists() {
    blob_mutex_testkit::init_tracing();
    let (m, _) = manager("no-overwrite");
    m.create_if_missing().await.unwrap();
    let created = m.inspect().await.unwrap().expect("created");
    assert_eq!(created.content_length, 0);

    // The blob gets metadata (a new ETag); creating again, with the blob
    // leased and then free, must not write it.
    let a = LeaseId::new();
    m.acquire(a, D).await.unwrap();
    m.stamp(a, "someone", &StampOptions::new()).await.unwrap();
    let before = m.inspect().await.unwrap().unwrap();
    m.create_if_missing().await.unwrap();
    let after = m.inspect().await.unwrap().unwrap();
    assert_eq!(after.etag, before.etag, "the blob was rewritten");
    m.release(a).await.unwrap();
    m.create_if_missing().await.unwrap();
    assert_eq!(m.inspect().await.unwrap().unwrap().etag, before.etag);
}

/// The requests of one manager share kept-alive connections: renewing ten
/// times in a row does not open a connection (and, to Azure, a TLS session)
/// for each.
#[tokio::test]
async fn requests_reuse_kept_alive_connections() {
    blob_mutex_testkit::init_tracing();
    let proxy = Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("keep-alive");
    let m = BlobLeaseManager::new(&proxy.settings(&container, "keep-alive")).unwrap();
    let a = LeaseId::new();
    assert_eq!(m.acquire(a, D).await.unwrap(), Acquire::Acquired);
    let before = proxy.connections();
    for _ in 0..10 {
        m.renew(a).await.unwrap();
    }
    let opened = proxy.connections() - before;
    assert!(opened <= 1, "10 renewals opened {opened} connections");
    m.release(a).await.unwrap();
}

/// A lease blob that a foreign client made longer than `MAX_STATE_LEN` is
/// refused as state, naming `state`, after a read of one byte past the
/// limit (never buffered whole); one of exactly the limit reads back whole.
#[tokio::test]
async fn state_longer_than_the_limit_is_refused_and_state_at_the_limit_reads_whole() {
    blob_mutex_testkit::init_tracing();
    let (m, container) = manager("state-size");
    let raw = blob_mutex_testkit::raw::container(&container);
    blob_mutex_testkit::raw::create(&raw).await;
    // Bytes that differ from their neighbours, so that a shifted read shows.
    let at_limit: Vec<u8> = (0..=250u8).cycle().take(MAX_STATE_LEN).collect();
    let mut over = at_limit.clone();
    over.push(7);
    blob_mutex_testkit::raw::put(&raw, "state-size", over, HashMap::new()).await;
    let started = Instant::now();
    let err = match m.read_state().await {
        Ok(read) => panic!("read {} bytes, more than the limit", read.len()),
        Err(err) => err,
    };
    let took = started.elapsed();
    println!("refused 4 MiB + 1 bytes in {took:?}");
    assert!(
        matches!(&err, Error::InvalidOption { field: "state", reason } if reason.contains("longer than")),
        "{err}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");

    blob_mutex_testkit::raw::put(&raw, "state-size", at_limit.clone(), HashMap::new()).await;
    let read = m.read_state().await.expect("4 MiB reads back");
    assert!(read == at_limit, "read {} bytes, not the blob", read.len());
}
