//! The caller's `azure_core` 1.x client options on the official backend:
//! their user agent and policies reach every request, the SDK's retries
//! stay off whatever they say (the crate bounds and retries every call
//! itself), an application id the SDK would panic on is refused, and the
//! backend that cannot take them refuses them.

use blob_mutex::store::LeaseStore;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{
    ClientOptions, Context, FixedRetryOptions, Request, RetryOptions, UserAgentOptions,
};
use blob_mutex::{
    azure::Backend, azure::BlobLeaseManager, store::Acquire, store::LeaseId, BlobSettings, Error,
};
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::{Injected, Proxy};

/// Records the `User-Agent` of every try that reaches it.
#[derive(Debug, Default)]
struct Seen(Mutex<Vec<String>>);

#[async_trait]
impl Policy for Seen {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        let agent = request
            .headers()
            .get_optional_str(&azure_core::http::headers::USER_AGENT)
            .unwrap_or_default()
            .to_owned();
        self.0.lock().unwrap().push(agent);
        next[0].send(ctx, request, &next[1..]).await
    }
}

fn options(application_id: &str, seen: &Arc<Seen>) -> ClientOptions {
    ClientOptions {
        user_agent: UserAgentOptions {
            application_id: Some(application_id.to_owned()),
        },
        per_try_policies: vec![seen.clone()],
        // Asked for, and overruled: an SDK retry could carry a renewal
        // past the lease's deadline.
        retry: RetryOptions::fixed(FixedRetryOptions {
            max_retries: 5,
            ..FixedRetryOptions::default()
        }),
        ..ClientOptions::default()
    }
}

fn settings(endpoint_proxy: &Proxy, container: &str) -> BlobSettings {
    endpoint_proxy
        .settings(container, "lock")
        .with_backend(Backend::Official)
}

#[tokio::test]
async fn the_callers_user_agent_and_policies_reach_every_request_and_sdk_retries_stay_off() {
    let proxy = Proxy::start(azurite::shared().port);
    let container = azurite::unique_container("client-options");
    let seen = Arc::new(Seen::default());
    let manager = BlobLeaseManager::new(
        &settings(&proxy, &container).with_client_options(options("orders-svc", &seen)),
    )
    .unwrap();
    let d = Duration::from_secs(15);
    // The container and the blob are made, then the acquire answers 503
    // once: one try, no retry by the SDK, and the crate's error.
    let id = LeaseId::new();
    proxy.fail_next_of("acquire", Injected::ServerBusy);
    let tries_before = seen.0.lock().unwrap().len();
    let refused = manager.acquire(id, d).await;
    let failed_tries = seen.0.lock().unwrap().len() - tries_before;
    assert!(
        matches!(&refused, Err(e) if !e.is_fatal()),
        "a 503 is the crate's transient error: {refused:?}"
    );
    // Creating the container and the blob may come first; the acquire
    // itself is tried once.
    let acquires = proxy.log().iter().filter(|r| r.is("acquire")).count();
    assert_eq!(
        acquires, 1,
        "the SDK retried the acquire ({failed_tries} tries seen)"
    );
    assert_eq!(manager.acquire(id, d).await.unwrap(), Acquire::Acquired);
    manager.release(id).await.unwrap();
    let agents = seen.0.lock().unwrap().clone();
    assert!(
        agents.len() >= 3,
        "the policy saw {} requests",
        agents.len()
    );
    assert!(
        agents.iter().all(|a| a.starts_with("orders-svc ")),
        "every request carries the application id: {agents:?}"
    );
}

#[test]
fn an_application_id_the_sdk_would_panic_on_is_refused() {
    let seen = Arc::new(Seen::default());
    let settings = BlobSettings::azurite("jobs", "lock")
        .unwrap()
        .with_backend(Backend::Official)
        .with_client_options(options("an-application-id-far-too-long", &seen));
    let refused = BlobLeaseManager::new(&settings);
    assert!(
        matches!(
            &refused,
            Err(Error::InvalidOption {
                field: "client_options",
                ..
            })
        ),
        "{refused:?}"
    );
    let spaced = BlobSettings::azurite("jobs", "lock")
        .unwrap()
        .with_client_options(options("has space", &seen));
    assert!(BlobLeaseManager::new(&spaced).is_err());
}

#[cfg(feature = "sdk-v021")]
#[test]
fn the_sdk_v021_backend_refuses_client_options() {
    let seen = Arc::new(Seen::default());
    let settings = BlobSettings::azurite("jobs", "lock")
        .unwrap()
        .with_backend(Backend::SdkV021)
        .with_client_options(options("orders-svc", &seen));
    let refused = BlobLeaseManager::new(&settings);
    assert!(
        matches!(
            &refused,
            Err(Error::InvalidOption {
                field: "client_options",
                ..
            })
        ),
        "{refused:?}"
    );
}
