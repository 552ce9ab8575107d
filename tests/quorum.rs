//! The quorum store over three Azurites (three independent accounts): the
//! lease-store contract, with every account up and with one down, and what
//! each account shows.

mod support;

use blob_mutex::{
    conformance, Acquire, BlobSettings, Error, LeaseId, LeaseState, LeaseStore, QuorumLeaseStore,
};
use support::azurite::{self, Azurite};

fn three() -> [Azurite; 3] {
    [Azurite::start(), Azurite::start(), Azurite::start()]
}

fn quorum(settings: &[BlobSettings]) -> QuorumLeaseStore {
    QuorumLeaseStore::from_settings(settings).unwrap()
}

/// An endpoint where nothing listens: an account that is down.
fn closed_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/devstoreaccount1")
}

/// An earlier term on the accounts that are up, so that a majority
/// carries an epoch: a new quorum's first term needs every account to
/// answer (an account that does not may be the one that kept the last
/// epoch).
async fn earlier_term(settings: &[BlobSettings]) {
    let store = quorum(settings);
    let id = LeaseId::new();
    assert_eq!(
        store.acquire(id, conformance::DURATION).await.unwrap(),
        Acquire::Acquired
    );
    store.stamp(id, "earlier").await.unwrap();
    store.release(id).await.unwrap();
}

fn settings_on(endpoints: &[String], container: &str, blob: &str) -> Vec<BlobSettings> {
    endpoints
        .iter()
        .map(|e| {
            BlobSettings::from_connection_string(&azurite::connection_string(e), container, blob)
                .map(|s| s.with_backend(support::backend::current()))
                .unwrap()
        })
        .collect()
}

#[tokio::test]
async fn a_quorum_of_three_accounts_meets_the_contract() {
    let accounts = three();
    let endpoints: Vec<String> = accounts.iter().map(|a| a.endpoint.clone()).collect();
    let container = azurite::unique_container("quorum");
    conformance::run_all(|name| {
        let settings = settings_on(&endpoints, &container, name);
        async move { (quorum(&settings), quorum(&settings)) }
    })
    .await;
    let settings = settings_on(&endpoints, &container, "expiry");
    conformance::lease_expires_after_its_duration(&quorum(&settings), &quorum(&settings)).await;
}

#[tokio::test]
async fn a_quorum_with_one_account_down_meets_the_contract() {
    let accounts = three();
    let endpoints = vec![
        accounts[0].endpoint.clone(),
        closed_endpoint(),
        accounts[2].endpoint.clone(),
    ];
    let container = azurite::unique_container("quorum-down");
    conformance::run_all(|name| {
        let settings = settings_on(&endpoints, &container, name);
        async move {
            earlier_term(&[settings[0].clone(), settings[2].clone()]).await;
            (quorum(&settings), quorum(&settings))
        }
    })
    .await;
}

#[tokio::test]
async fn each_account_shows_its_own_lease() {
    let accounts = three();
    let mut endpoints: Vec<String> = accounts.iter().map(|a| a.endpoint.clone()).collect();
    endpoints.push(closed_endpoint());
    endpoints.push(closed_endpoint());
    let container = azurite::unique_container("quorum-each");
    let settings = settings_on(&endpoints, &container, "each");
    earlier_term(&settings[..3]).await;
    let store = quorum(&settings);
    let id = LeaseId::new();
    assert!(store.acquire(id, conformance::DURATION).await.is_ok());
    let epoch = store.stamp(id, "holder-a").await.unwrap();
    let each = store.inspect_each().await;
    let labels: Vec<&str> = each.iter().map(|a| a.account.as_str()).collect();
    assert_eq!(labels, endpoints, "each account labelled by its endpoint");
    for account in &each[..3] {
        let info = account.lease.as_ref().unwrap().as_ref().unwrap();
        assert_eq!(
            (info.state, info.epoch, info.holder.as_deref()),
            (LeaseState::Leased, epoch, Some("holder-a"))
        );
    }
    for account in &each[3..] {
        assert!(
            account.lease.as_ref().is_err_and(Error::is_transient),
            "{account:?}"
        );
    }
    let merged = store.inspect().await.unwrap().unwrap();
    assert_eq!(merged.state, LeaseState::Leased, "three of five are leased");
    assert!(
        !format!("{each:?}{store:?}").contains(support::azurite::DEV_KEY),
        "no key in the output"
    );
    store.release(id).await.unwrap();
}

#[test]
fn an_account_named_twice_is_refused() {
    let endpoint = "http://127.0.0.1:10000/devstoreaccount1".to_owned();
    let settings = settings_on(
        &[endpoint.clone(), closed_endpoint(), endpoint],
        "leases",
        "twice",
    );
    let result = QuorumLeaseStore::from_settings(&settings);
    assert!(
        matches!(
            result,
            Err(Error::InvalidOption {
                field: "accounts",
                ..
            })
        ),
        "{result:?}"
    );
}
