//! Bad input gives a clear error, never a silent retry loop or a leaked secret.

use std::time::Duration;

use blob_mutex::{
    azure::Backend, azure::BlobLeaseManager, term::Leadership, BlobDistributedMutex, BlobSettings,
    CancellationToken, Error, LeaderContext, MutexOptions,
};
use blob_mutex_testkit::azurite;

async fn never_called(_: LeaderContext) -> anyhow::Result<()> {
    panic!("the leader task must not run")
}

#[test]
fn every_invalid_option_is_refused_naming_the_field() {
    let settings = BlobSettings::azurite("leases", "leader").unwrap();
    let s = Duration::from_secs;
    let d = MutexOptions::default;
    let cases = [
        (d().with_lease_duration(s(10)), "lease_duration"),
        (d().with_lease_duration(s(90)), "lease_duration"),
        (d().with_renew_interval(s(0)), "renew_interval"),
        (d().with_renew_interval(s(15)), "renew_interval"),
        (d().with_acquire_retry(s(0)), "acquire_retry"),
        (d().with_acquire_jitter(-0.5), "acquire_jitter"),
        (d().with_safety_margin(s(0)), "safety_margin"),
        (d().with_clock_drift(2.0), "clock_drift"),
        (d().with_request_timeout(s(0)), "request_timeout"),
        (d().with_stop_grace(s(0)), "stop_grace"),
        (d().with_failure_backoff(s(0)), "failure_backoff"),
        (d().with_heartbeat_timeout(s(0)), "heartbeat_timeout"),
        (d().with_holder("two\nlines".into()), "holder"),
    ];
    for (options, field) in cases {
        let err = BlobDistributedMutex::with_options(settings.clone(), options, never_called)
            .expect_err(field);
        assert!(
            matches!(err, Error::InvalidOption { field: f, .. } if f == field),
            "{field}: {err}"
        );
        assert!(
            err.to_string().contains(field),
            "the message names {field}: {err}"
        );
    }
}

#[test]
fn invalid_names_are_refused() {
    for (container, blob, field) in [
        ("ab", "leader", "container"),
        ("Upper", "leader", "container"),
        ("a--b", "leader", "container"),
        ("leases", "", "blob"),
        ("leases", "trailing/", "blob"),
        ("leases", "x.", "blob"),
    ] {
        let err = BlobSettings::azurite(container, blob).unwrap_err();
        assert!(
            matches!(err, Error::InvalidOption { field: f, .. } if f == field),
            "{container}/{blob}: {err}"
        );
    }
}

#[test]
fn a_malformed_connection_string_never_shows_the_key() {
    let key = "c2VjcmV0IGtleSB0aGF0IG11c3Qgbm90IGxlYWs=";
    for cs in [
        format!("AccountName=acct;AccountKey={key};Nonsense"),
        format!("AccountName=acct;AccountKey={key};Color=blue"),
        format!("AccountKey={key}"),
        format!("AccountName=acct;AccountKey={key}%%"),
    ] {
        let err = BlobSettings::from_connection_string(&cs, "leases", "leader").unwrap_err();
        assert!(matches!(err, Error::InvalidConnectionString(_)), "{err}");
        let shown = format!("{err} | {err:?}");
        assert!(
            !shown.contains(key) && !shown.contains("c2VjcmV0"),
            "{shown}"
        );
    }
}

#[test]
fn a_malformed_endpoint_is_refused_when_the_settings_are_made_naming_what_was_written() {
    let key = "c2VjcmV0IGtleSB0aGF0IG11c3Qgbm90IGxlYWs=";
    let dev = "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=";
    let cases = [
        (
            format!("AccountName=acct;AccountKey={key};BlobEndpoint=http://127.0.0.1:99999/acct"),
            "BlobEndpoint",
        ),
        (
            format!("AccountName=acct;AccountKey={key};BlobEndpoint=http://my host/acct"),
            "BlobEndpoint",
        ),
        (
            format!("AccountName=acct;AccountKey={key};BlobEndpoint=http://[::1/acct"),
            "BlobEndpoint",
        ),
        (
            format!("AccountName=acct;AccountKey={key};BlobEndpoint=https://user:{key}@h/acct"),
            "BlobEndpoint",
        ),
        (
            format!("BlobEndpoint=https://h:0x1/acct;SharedAccessSignature=sig={key}"),
            "BlobEndpoint",
        ),
        (
            format!("{dev}http://127.0.0.1:99999"),
            "DevelopmentStorageProxyUri",
        ),
        (
            format!("{dev}http://bad host"),
            "DevelopmentStorageProxyUri",
        ),
        (
            format!("{dev}http://127.0.0.1:10001"),
            "DevelopmentStorageProxyUri",
        ),
    ];
    for backend in [Backend::Official, Backend::SdkV021] {
        for (cs, named) in &cases {
            let err = BlobSettings::from_connection_string(cs, "leases", "leader")
                .and_then(|s| BlobLeaseManager::new(&s.with_backend(backend)).map(drop))
                .expect_err(cs);
            let shown = format!("{err} | {err:?}");
            assert!(
                matches!(err, Error::InvalidConnectionString(_)),
                "{cs}: {shown}"
            );
            assert!(shown.contains(named), "{cs}: names {named}: {shown}");
            assert!(!shown.contains("container_url"), "{cs}: {shown}");
            assert!(
                !shown.contains(key) && !shown.contains("c2VjcmV0"),
                "{shown}"
            );
        }
        for endpoint in [
            "http://127.0.0.1:99999/devstoreaccount1",
            "http://a b/x",
            "https://h:-1",
        ] {
            let err = BlobSettings::azurite("leases", "leader")
                .and_then(|s| s.with_endpoint(endpoint))
                .and_then(|s| BlobLeaseManager::new(&s.with_backend(backend)).map(drop))
                .expect_err(endpoint);
            assert!(
                matches!(
                    err,
                    Error::InvalidOption {
                        field: "endpoint",
                        ..
                    }
                ),
                "{endpoint}: {err}"
            );
        }
    }
}

#[test]
fn a_development_storage_proxy_with_or_without_the_emulator_port_names_port_10000() {
    for proxy in [
        "http://127.0.0.1:10000",
        "http://127.0.0.1",
        "http://127.0.0.1:10000/",
    ] {
        let cs = format!("UseDevelopmentStorage=true;DevelopmentStorageProxyUri={proxy}");
        let settings = BlobSettings::from_connection_string(&cs, "leases", "leader").unwrap();
        assert_eq!(
            settings.endpoint(),
            "http://127.0.0.1:10000/devstoreaccount1",
            "{proxy}"
        );
    }
}

#[tokio::test]
async fn a_wrong_account_key_returns_an_authentication_error() {
    blob_mutex_testkit::init_tracing();
    let az = azurite::shared();
    let wrong = "d3Jvbmcga2V5IGZvciB0aGUgZGV2IGFjY291bnQgLSBub3QgdGhlIHJpZ2h0IG9uZQ==";
    let cs = format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={wrong};BlobEndpoint={};",
        az.endpoint
    );
    let container = azurite::unique_container("wrongkey");
    let settings = BlobSettings::from_connection_string(&cs, container, "leader")
        .unwrap()
        .with_backend(blob_mutex_testkit::backend::current());
    let mutex = BlobDistributedMutex::new(settings, never_called).unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        mutex.run_task_when_mutex_acquired(CancellationToken::new()),
    )
    .await
    .expect("returns instead of retrying forever");
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::Authentication { status: 403, .. }),
        "{err}"
    );
    assert!(!format!("{err} {err:?}").contains(wrong));
    assert_eq!(*mutex.watch().borrow(), Leadership::Stopped);
}

#[tokio::test]
async fn an_unreachable_endpoint_keeps_trying_and_stops_at_once_when_cancelled() {
    blob_mutex_testkit::init_tracing();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let settings = BlobSettings::azurite("leases", "leader")
        .unwrap()
        .with_endpoint(format!("http://127.0.0.1:{port}/devstoreaccount1"))
        .unwrap()
        .with_backend(blob_mutex_testkit::backend::current());
    let mutex = BlobDistributedMutex::new(settings, never_called).unwrap();
    let token = CancellationToken::new();
    let run = mutex.run_task_when_mutex_acquired(token.clone());
    tokio::pin!(run);

    // Still campaigning (not failed) after several backoff rounds.
    let early = tokio::time::timeout(Duration::from_secs(4), &mut run).await;
    assert!(early.is_err(), "gave up on a transient error: {early:?}");
    assert_eq!(*mutex.watch().borrow(), Leadership::Follower);

    token.cancel();
    let cancelled_at = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(1), &mut run)
        .await
        .expect("stops within a second of cancellation")
        .unwrap();
    println!("stopped {:?} after cancellation", cancelled_at.elapsed());
}
