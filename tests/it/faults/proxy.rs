//! The fault proxy itself: each mode does what the fault tests rely on.

// Times here are instants of one monotonic record, subtracted in the order
// they happened; an underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use blob_mutex::store::LeaseStore;

use std::time::{Duration, Instant};

use blob_mutex::{azure::BlobLeaseManager, store::Acquire, store::LeaseId, Error};
use blob_mutex_testkit::azure_rule::AzureHold;
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::{Direction, Fate, Injected, Mode, Proxy};

const D: Duration = Duration::from_secs(15);

fn manager(proxy: &Proxy, blob: &str) -> BlobLeaseManager {
    let container = azurite::unique_container(blob);
    BlobLeaseManager::new(&proxy.settings(&container, blob))
        .unwrap()
        .with_request_timeout(Duration::from_millis(1500))
}

#[tokio::test]
async fn every_mode_and_fault_reaches_the_client_as_expected() {
    blob_mutex_testkit::init_tracing();
    let proxy = Proxy::start(azurite::shared().port);
    every_mode(&proxy, &manager(&proxy, "proxy-modes")).await;
}

async fn every_mode(proxy: &Proxy, m: &BlobLeaseManager) {
    let lease = LeaseId::new();

    // Pass: works, and every request is logged with its lease headers.
    assert_eq!(m.acquire(lease, D).await.unwrap(), Acquire::Acquired);
    m.renew(lease).await.unwrap();
    let log = proxy.log();
    let renew = log
        .iter()
        .rev()
        .find(|r| r.is("renew"))
        .expect("renew logged");
    assert_eq!(renew.lease(), Some(lease.to_string().as_str()));
    assert_eq!(renew.fate, Fate::Forwarded);
    assert!(renew.forwarded_at.is_some());
    assert!(proxy.last_forwarded_for(&lease.to_string()).is_some());

    // 503 and 500 answered by the proxy are transient storage errors.
    proxy.fail_next(1, Injected::ServerBusy);
    match m.renew(lease).await {
        Err(e @ Error::Storage { status: 503, .. }) => assert!(e.is_transient()),
        other => panic!("expected a 503, got {other:?}"),
    }
    proxy.fail_next(1, Injected::InternalError);
    match m.inspect().await {
        Err(e @ Error::Storage { status: 500, .. }) => assert!(e.is_transient()),
        other => panic!("expected a 500, got {other:?}"),
    }
    m.renew(lease).await.unwrap();

    // A reset connection is a transient transport error.
    proxy.fail_next(1, Injected::Reset);
    let reset = m.renew(lease).await.unwrap_err();
    assert!(reset.is_transient(), "{reset:?}");
    m.renew(lease).await.unwrap();

    // Latency in one direction delays the answer.
    proxy.set(Direction::ToClient, Mode::Delay(Duration::from_millis(400)));
    let start = Instant::now();
    m.renew(lease).await.unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(400), "{took:?}");
    proxy.set(Direction::ToClient, Mode::Pass);

    // A blackhole: requests are read and dropped, the client times out.
    proxy.partition();
    let before = proxy.requests();
    assert!(matches!(m.renew(lease).await, Err(Error::Timeout { .. })));
    let dropped = proxy.log()[before..]
        .iter()
        .filter(|r| r.fate == Fate::Dropped)
        .count();
    assert_eq!(dropped, 1, "{:#?}", &proxy.log()[before..]);
    proxy.heal();
    m.renew(lease).await.unwrap();

    // Reset mode resets every connection as soon as a request arrives.
    proxy.set(Direction::ToServer, Mode::Reset);
    assert!(m.renew(lease).await.unwrap_err().is_transient());
    proxy.heal();

    // A share of failures, from a seeded generator.
    proxy.seed(7);
    proxy.fail_share(0.5, Injected::ServerBusy);
    let mut failed = 0;
    for _ in 0..40 {
        if m.renew(lease).await.is_err() {
            failed += 1;
        }
    }
    proxy.heal();
    assert!(
        (8..=32).contains(&failed),
        "{failed} of 40 failed at a share of 0.5"
    );
    m.release(lease).await.unwrap();
    println!(
        "proxy saw {} requests on {} connections",
        proxy.requests(),
        proxy.connections()
    );
}

/// Azure's hold, applied by two proxies that share the rule, one per
/// client: a lease that expired unreleased is refused to the other client
/// with Azure's `409 LeaseAlreadyPresent` until the hold has passed, though
/// Azurite would grant it; a released lease is free at once.
#[tokio::test]
async fn a_lease_that_expired_unreleased_is_refused_to_another_until_the_hold_has_passed() {
    const HOLD: Duration = Duration::from_secs(5);
    let rule = AzureHold::new(HOLD);
    let (pa, pb) = (
        Proxy::start(azurite::shared().port),
        Proxy::start(azurite::shared().port),
    );
    pa.apply(&rule);
    pb.apply(&rule);
    let container = azurite::unique_container("azure-hold");
    let client = |proxy: &Proxy| {
        BlobLeaseManager::new(&proxy.settings(&container, "lease"))
            .unwrap()
            .with_request_timeout(Duration::from_millis(1500))
    };
    let (a, b) = (client(&pa), client(&pb));
    let (la, lb) = (LeaseId::new(), LeaseId::new());
    assert_eq!(a.acquire(la, D).await.unwrap(), Acquire::Acquired);
    let acquire = pa.log().into_iter().rfind(|r| r.is("acquire")).unwrap();
    assert_eq!(
        (acquire.status, acquire.lease_duration),
        (Some(201), Some(15))
    );
    let expiry = acquire.answered_at.unwrap() + D;

    // Still leased: storage itself refuses.
    assert_eq!(b.acquire(lb, D).await.unwrap(), Acquire::Held);
    assert_eq!(pb.log().last().unwrap().fate, Fate::Forwarded);

    // Expired unreleased: refused by the rule until the hold has passed.
    tokio::time::sleep_until(expiry.into()).await;
    let first = loop {
        if b.acquire(lb, D).await.unwrap() == Acquire::Acquired {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let refused: Vec<_> = pb
        .log()
        .into_iter()
        .filter(|r| r.fate == Fate::Injected(Injected::LeaseAlreadyPresent))
        .collect();
    assert!(refused.len() >= 10, "{refused:?}");
    assert_eq!(rule.refused(), refused.len());
    let last_refused = refused.last().unwrap().at;
    assert!(
        first >= expiry + HOLD && last_refused >= expiry + HOLD - Duration::from_secs(1),
        "acquired {:?} after the expiry, last refused {:?} after",
        first - expiry,
        last_refused - expiry
    );
    assert!(
        first - expiry <= HOLD + Duration::from_secs(2),
        "{:?}",
        first - expiry
    );

    // Released: free at once for the other client.
    b.release(lb).await.unwrap();
    assert_eq!(
        a.acquire(LeaseId::new(), D).await.unwrap(),
        Acquire::Acquired
    );
    println!(
        "azure hold {HOLD:?}: {} acquires refused with 409 LeaseAlreadyPresent; acquired {:.3}s after the \
         expiry; after a release, acquired at once",
        refused.len(),
        (first - expiry).as_secs_f64()
    );
}

#[tokio::test]
async fn a_stopped_upstream_is_counted_and_refused() {
    // A port with nothing listening: bind, read the port, close.
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let proxy = Proxy::start(port);
    let m = manager(&proxy, "proxy-refused");
    for _ in 0..3 {
        let e = m.inspect().await.unwrap_err();
        assert!(e.is_transient(), "{e:?}");
    }
    let log = proxy.log();
    assert!(log.len() >= 3, "{log:#?}");
    assert!(log.iter().all(|r| r.fate == Fate::Refused));
}

#[tokio::test]
async fn a_request_storage_never_answers_is_marked_given_up_when_the_client_hangs_up() {
    // Storage that takes connections and never answers on them.
    let silent = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            open.push(connection);
        }
    });
    let proxy = Proxy::start(port);
    let e = manager(&proxy, "proxy-given-up")
        .inspect()
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    blob_mutex_testkit::wait_for("the hang-up marked", Duration::from_secs(5), || async {
        proxy.log().first()?.given_up_at.map(|_| ())
    })
    .await;
    let r = proxy.log().remove(0);
    let waited = r.given_up_at.unwrap() - r.forwarded_at.unwrap();
    assert_eq!(r.answered_at, None);
    // The client's request timeout (1.5 s), less its send.
    assert!(
        waited >= Duration::from_secs(1) && waited <= Duration::from_secs(3),
        "{waited:?}"
    );
    held.abort();
}

#[tokio::test]
async fn reset_all_breaks_open_connections() {
    let proxy = Proxy::start(azurite::shared().port);
    let m = manager(&proxy, "proxy-reset-all");
    // With the blob in place, the acquire below is a single request.
    m.create_if_missing().await.unwrap();
    proxy.set(Direction::ToClient, Mode::Delay(Duration::from_secs(1)));
    let setup_requests = proxy.requests();
    let lease = LeaseId::new();
    let call = m.acquire(lease, D);
    let reset = async {
        // Reset once the acquire has reached storage: its answer is 1 s away.
        blob_mutex_testkit::wait_for(
            "a request to reach storage",
            Duration::from_secs(5),
            || async {
                proxy
                    .log()
                    .iter()
                    .skip(setup_requests)
                    .any(|r| r.forwarded_at.is_some())
                    .then_some(())
            },
        )
        .await;
        proxy.reset_all();
    };
    let (result, ()) = tokio::join!(call, reset);
    let e = result.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    // A reset, not the request timeout running out.
    assert!(matches!(e, Error::Transport { .. }), "{e:?}");
}
