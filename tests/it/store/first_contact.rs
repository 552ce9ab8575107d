//! A campaign that storage has never answered gives up after
//! `first_contact_timeout` with an error that names the lease and says what
//! to check; once storage has answered the mutex, an outage is retried for
//! as long as it lasts. Paused time, against the memory store.

use std::time::Duration;

use blob_mutex::{
    store::Acquire, store::LeaseId, store::LeaseStore, term::Leadership,
    testing::MemoryLeaseSetStore, testing::MemoryLeaseStore, BlobDistributedMutex, BlobLeaseSet,
    CancellationToken, Error, LeaderContext, LeaseSetOptions, MutexOptions,
};
use tokio::time::Instant;

const S: fn(u64) -> Duration = Duration::from_secs;

async fn lead(ctx: LeaderContext) -> Result<(), Error> {
    ctx.cancelled().await;
    Ok(())
}

fn options() -> MutexOptions {
    MutexOptions::default()
        .with_holder("a".to_owned())
        .with_jitter_seed(1)
}

/// Runs `mutex`'s campaign for at most `limit`; `None` when it still ran.
async fn campaign_for(
    mutex: &BlobDistributedMutex<MemoryLeaseStore>,
    token: &CancellationToken,
    limit: Duration,
) -> Option<(Result<(), Error>, Duration)> {
    let start = Instant::now();
    let run = mutex.run_task_when_mutex_acquired(token.clone());
    let result = tokio::time::timeout(limit, run).await.ok()?;
    Some((result, start.elapsed()))
}

#[tokio::test(start_paused = true)]
async fn a_mutex_storage_never_answers_gives_up_after_the_first_contact_timeout_naming_the_lease() {
    let store = MemoryLeaseStore::new("leases/nightly");
    store.set_unavailable(true);
    let mutex = BlobDistributedMutex::with_store(store.clone(), options(), lead).unwrap();
    let token = CancellationToken::new();

    let (result, took) = campaign_for(&mutex, &token, S(600))
        .await
        .expect("the campaign gave up");
    let e = result.expect_err("no contact is an error");
    let Error::FirstContactFailed { lease, after, last } = &e else {
        panic!("not FirstContactFailed: {e:?}");
    };
    assert_eq!((lease.as_str(), *after), ("leases/nightly", S(30)));
    assert!(last.is_transient(), "the last attempt's error: {last:?}");
    assert!(e.is_fatal() && !e.is_transient());
    // At the bound, not an acquire retry (at most 5 s with jitter) later.
    assert!(took >= S(30) && took <= S(31), "gave up after {took:?}");
    let message = e.to_string();
    for needle in ["leases/nightly", "30s", "host name", "credential"] {
        assert!(message.contains(needle), "{needle:?} in {message}");
    }
    assert_eq!(*mutex.watch().borrow(), Leadership::Stopped);
}

#[tokio::test(start_paused = true)]
async fn the_first_contact_timeout_is_configurable_and_none_retries_for_ever() {
    let store = MemoryLeaseStore::new("leases/nightly");
    store.set_unavailable(true);
    let short = options().with_first_contact_timeout(Some(S(3)));
    let mutex = BlobDistributedMutex::with_store(store.clone(), short, lead).unwrap();
    let token = CancellationToken::new();
    let (result, took) = campaign_for(&mutex, &token, S(600)).await.unwrap();
    assert!(matches!(result, Err(Error::FirstContactFailed { .. })));
    assert!(took >= S(3) && took <= S(4), "gave up after {took:?}");

    // Zero: exactly one attempt.
    let once = options().with_first_contact_timeout(Some(Duration::ZERO));
    let mutex = BlobDistributedMutex::with_store(store.clone(), once, lead).unwrap();
    let (result, took) = campaign_for(&mutex, &token, S(600)).await.unwrap();
    assert!(matches!(result, Err(Error::FirstContactFailed { .. })));
    assert!(took < S(1), "one attempt took {took:?}");

    let forever = options().with_first_contact_timeout(None);
    let mutex = BlobDistributedMutex::with_store(store.clone(), forever, lead).unwrap();
    assert!(
        campaign_for(&mutex, &token, S(3600)).await.is_none(),
        "retried for an hour"
    );
    // Storage coming back makes it lead.
    store.set_unavailable(false);
    assert!(campaign_for(&mutex, &token, S(10)).await.is_none());
    assert!(store.is_held() && store.holder().as_deref() == Some("a"));
}

#[tokio::test(start_paused = true)]
async fn once_storage_has_answered_a_follower_retries_an_outage_past_the_first_contact_timeout() {
    let store = MemoryLeaseStore::new("leases/nightly");
    // Another instance holds the lease: storage answers "held".
    let other = LeaseId::new();
    let acquired = store.acquire(other, S(60)).await.unwrap();
    assert!(matches!(acquired, Acquire::Acquired));
    let mutex = BlobDistributedMutex::with_store(store.clone(), options(), lead).unwrap();
    let token = CancellationToken::new();
    assert!(campaign_for(&mutex, &token, S(5)).await.is_none());

    store.set_unavailable(true);
    assert!(
        campaign_for(&mutex, &token, S(300)).await.is_none(),
        "an outage after contact is retried"
    );
    // A new campaign of the same mutex: storage answered it before.
    assert!(campaign_for(&mutex, &token, S(300)).await.is_none());
    token.cancel();
    let (result, _) = campaign_for(&mutex, &token, S(60)).await.unwrap();
    result.unwrap();
}

#[tokio::test(start_paused = true)]
async fn once_it_has_led_an_outage_is_retried_past_the_first_contact_timeout() {
    let store = MemoryLeaseStore::new("leases/nightly");
    let mutex = BlobDistributedMutex::with_store(store.clone(), options(), lead).unwrap();
    let token = CancellationToken::new();
    let mut state = mutex.watch();
    let run = mutex.run_task_when_mutex_acquired(token.clone());
    tokio::pin!(run);
    tokio::select! {
        r = &mut run => panic!("{r:?}"),
        r = state.wait_for(|s| matches!(s, Leadership::Leader { .. })) => { r.unwrap(); }
    }
    store.set_unavailable(true);
    // The term ends at its deadline; the campaign then retries the outage.
    tokio::select! {
        r = &mut run => panic!("gave up after contact: {r:?}"),
        () = tokio::time::sleep(S(300)) => {}
    }
    assert!(!matches!(
        *mutex.watch().borrow(),
        Leadership::Leader { .. }
    ));
    store.set_unavailable(false);
    tokio::select! {
        r = &mut run => panic!("{r:?}"),
        r = state.wait_for(|s| matches!(s, Leadership::Leader { .. })) => { r.unwrap(); }
    }
    token.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_set_storage_never_answers_gives_up_after_the_first_contact_timeout() {
    let store = MemoryLeaseSetStore::new();
    store.get("members/a").set_unavailable(true);
    let options = LeaseSetOptions::default().with_mutex(options());
    let set = BlobLeaseSet::with_store(store, ["p0", "p1"], options, |ctx| async move {
        ctx.cancelled().await;
        Ok::<_, Error>(())
    })
    .unwrap();
    let start = Instant::now();
    let result = tokio::time::timeout(S(600), set.run(CancellationToken::new()))
        .await
        .expect("the set gave up");
    let took = start.elapsed();
    assert!(
        matches!(&result, Err(Error::FirstContactFailed { lease, .. }) if lease.contains("members/a")),
        "{result:?}"
    );
    assert!(took >= S(30) && took <= S(31), "gave up after {took:?}");
}
