//! A schedule over a simulated month (paused time, the in-memory store):
//! what each host asks of storage to settle a slot, and how large the
//! record grows.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::schedule::{BlobSchedule, ScheduleOptions, ScheduleRecord};
use blob_mutex::store::{Acquire, LeaseId, LeaseInfo, LeaseStore};
use blob_mutex::testing::MemoryLeaseStore;
use blob_mutex::{Error, MutexOptions};
use tokio_util::sync::CancellationToken;

use crate::support::forward::{Forward, Wrap};

/// One host's view of the shared lease, counting its requests.
#[derive(Clone)]
struct Counting {
    inner: MemoryLeaseStore,
    requests: Arc<AtomicUsize>,
}

impl Counting {
    fn count(&self) {
        self.requests.fetch_add(1, Ordering::SeqCst);
    }
}

impl Wrap for Counting {
    type Inner = MemoryLeaseStore;
    fn inner(&self) -> &MemoryLeaseStore {
        &self.inner
    }
    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire, Error>> + Send {
        self.count();
        self.inner.acquire(proposed, duration)
    }
    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<(), Error>> + Send {
        self.count();
        self.inner.renew(lease)
    }
    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<(), Error>> + Send {
        self.count();
        self.inner.release(lease)
    }
    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>, Error>> + Send {
        self.count();
        self.inner.inspect()
    }
    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>, Error>> + Send {
        self.count();
        self.inner.read_state()
    }
    fn write_state(
        &self,
        lease: LeaseId,
        state: &[u8],
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.count();
        self.inner.write_state(lease, state)
    }
}

const DAYS: u64 = 30;
/// Hourly: 24 slots a day. An hour between slots: a host that polled
/// storage meanwhile would make thousands of requests a slot.
const CRON: &str = "0 * * * *";
const SLOTS_A_DAY: u64 = 24;

#[tokio::test(start_paused = true)]
async fn a_month_of_slots_runs_each_once_at_a_few_requests_a_host_and_a_record_of_bounded_size() {
    let store = MemoryLeaseStore::new("c/month");
    let ran = Arc::new(Mutex::new(Vec::<String>::new()));
    let token = CancellationToken::new();
    let mut hosts = Vec::new();
    for (i, holder) in ["h0", "h1", "h2"].into_iter().enumerate() {
        let requests = Arc::new(AtomicUsize::new(0));
        let counting = Forward(Counting {
            inner: store.clone(),
            requests: requests.clone(),
        });
        let mutex = MutexOptions::default()
            .with_holder(holder.to_owned())
            .with_jitter_seed(i as u64 + 1);
        let options = ScheduleOptions::new(CRON)
            .with_catch_up(Duration::from_secs(3600))
            .with_mutex(mutex);
        let schedule = BlobSchedule::with_store(counting, options).unwrap();
        let (ran, stop) = (ran.clone(), token.clone());
        let run = tokio::spawn(async move {
            schedule
                .run(stop, move |slot, _ctx| {
                    let ran = ran.clone();
                    async move {
                        // A job of a few seconds, as a real one takes.
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        ran.lock().unwrap().push(slot.key);
                        Ok::<(), Error>(())
                    }
                })
                .await
        });
        hosts.push((requests, run));
    }
    tokio::time::sleep(Duration::from_secs(DAYS * 86_400)).await;
    token.cancel();
    for (_, run) in &mut hosts {
        run.await.unwrap().unwrap();
    }
    let ran = ran.lock().unwrap().clone();
    let mut once = ran.clone();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), ran.len(), "a slot ran twice");
    let slots = DAYS * SLOTS_A_DAY;
    assert!(
        ran.len() as u64 + 1 >= slots,
        "{} of {slots} slots ran",
        ran.len()
    );
    let requests: Vec<usize> = hosts
        .iter()
        .map(|(n, _)| n.load(Ordering::SeqCst))
        .collect();
    let per_slot: Vec<f64> = requests.iter().map(|n| ratio(*n, ran.len())).collect();
    let state = store.read_state().await.unwrap();
    let record = ScheduleRecord::from_state(&state).unwrap().unwrap();
    println!(
        "{DAYS} days of {CRON}: {} slots ran once each; requests a slot, by host: {per_slot:.2?}; \
         the record: {} bytes, {} slots listed",
        ran.len(),
        state.len(),
        record.slots.len()
    );
    // Each host wakes for each slot and looks (the record and storage's
    // clock, at once); every host sees it due and campaigns: the one that
    // leads runs it and writes the record, the others poll the lease while
    // the job runs (it could die), then find the slot done. Nothing between
    // slots.
    for (host, n) in per_slot.iter().enumerate() {
        assert!(*n <= 16.0, "h{host}: {n:.2} requests a slot");
    }
    assert!(state.len() <= 4096, "{} bytes", state.len());
}

/// `n / of`, for a figure.
fn ratio(n: usize, of: usize) -> f64 {
    let float = |x: usize| f64::from(u32::try_from(x).expect("a count below 2^32"));
    float(n) / float(of)
}
