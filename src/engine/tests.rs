//! The election loop's timing, against an in-memory lease store with paused time.
//!
//! One scenario per test, each with its own in-memory
//! store and clock; the scenarios of a term's end are in `tests/term.rs`.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{box_task, Engine, TaskFn};
use crate::ending::{StopReason, TaskStop, TermReport};
use crate::engine::leadership::{LeaderContext, Leadership};
use crate::error::{Error, Result};
use crate::options::{MutexOptions, STOP_SLACK};
use crate::store::{Acquire, LeaseId, LeaseInfo, LeaseStore, StampOptions};

/// What happened, and when, in virtual time.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    Acquired(LeaseId),
    Renewed,
    Released,
    TaskStarted(u64),
    TaskCancelled(StopReason),
    TaskStopped(u64),
    /// A piece of work made progress.
    Tick(&'static str),
    /// A task's future was dropped (it returned, or was aborted).
    Dropped(&'static str),
}

/// A lease server in memory. Leases expire on virtual time exactly.
#[derive(Default)]
struct MemoryStore {
    inner: Mutex<Server>,
    /// Renew calls never answer.
    hang_renews: AtomicBool,
    /// Renew calls answer 503 while this is above zero (it counts down).
    failing_renews: AtomicU32,
    /// Renew calls answer 503 forever.
    renews_always_fail: AtomicBool,
    /// Acquire answers 403.
    forbid: AtomicBool,
    /// The next stamp answers this error.
    stamp_error: Mutex<Option<Error>>,
    /// Acquire and renew take effect when called but answer this much later,
    /// like a slow network on the way back.
    answer_delay: Mutex<Duration>,
    log: Mutex<Vec<(Instant, Event)>>,
}

#[derive(Default)]
struct Server {
    lease: Option<(LeaseId, Instant)>,
    epoch: u64,
    renew_attempts: u32,
    acquire_attempts: usize,
    queued_acquire_errors: VecDeque<Error>,
}

impl MemoryStore {
    fn record(&self, event: Event) {
        self.log.lock().unwrap().push((Instant::now(), event));
    }

    fn events(&self) -> Vec<(Instant, Event)> {
        self.log.lock().unwrap().clone()
    }

    fn acquired_at(&self) -> Option<Instant> {
        self.first(&|e| matches!(e, Event::Acquired(_)))
    }

    fn cancelled_at(&self) -> Option<Instant> {
        self.first(&|e| matches!(e, Event::TaskCancelled(_)))
    }

    fn stopped_at(&self) -> Option<Instant> {
        self.first(&|e| matches!(e, Event::TaskStopped(_)))
    }

    fn released_at(&self) -> Option<Instant> {
        self.first(&|e| *e == Event::Released)
    }

    fn first(&self, wanted: &dyn Fn(&Event) -> bool) -> Option<Instant> {
        self.events()
            .into_iter()
            .find(|(_, e)| wanted(e))
            .map(|(t, _)| t)
    }

    /// Breaks the lease from outside, as an operator would.
    fn break_lease(&self) {
        self.inner.lock().unwrap().lease = None;
    }

    fn busy() -> Error {
        Error::Storage {
            status: 503,
            code: Some("ServerBusy".into()),
            message: "renew failed".into(),
        }
    }
}

impl LeaseStore for MemoryStore {
    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        let result = (|| {
            if self.forbid.load(Ordering::SeqCst) {
                return Err(Error::Authentication {
                    status: 403,
                    code: "AuthenticationFailed".into(),
                    message: "refused".into(),
                });
            }
            let mut server = self.inner.lock().unwrap();
            server.acquire_attempts += 1;
            if let Some(e) = server.queued_acquire_errors.pop_front() {
                return Err(e);
            }
            let now = Instant::now();
            match server.lease {
                Some((id, until)) if until > now && id != proposed => Ok(Acquire::Held),
                _ => {
                    server.lease = Some((proposed, now + duration));
                    drop(server);
                    self.record(Event::Acquired(proposed));
                    Ok(Acquire::Acquired)
                }
            }
        })();
        let delay = *self.answer_delay.lock().unwrap();
        async move {
            tokio::time::sleep(delay).await;
            result
        }
    }

    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        let hang = self.hang_renews.load(Ordering::SeqCst);
        let delay = *self.answer_delay.lock().unwrap();
        let result = (|| {
            let mut server = self.inner.lock().unwrap();
            server.renew_attempts += 1;
            if self.renews_always_fail.load(Ordering::SeqCst)
                || self
                    .failing_renews
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                return Err(Self::busy());
            }
            let now = Instant::now();
            match server.lease {
                Some((id, until)) if id == lease && until > now => {
                    server.lease = Some((id, now + Duration::from_secs(15)));
                    drop(server);
                    self.record(Event::Renewed);
                    Ok(())
                }
                _ => Err(Error::LeaseLost("LeaseIdMismatchWithLeaseOperation".into())),
            }
        })();
        async move {
            if hang {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(delay).await;
            result
        }
    }

    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        let mut server = self.inner.lock().unwrap();
        let result = match server.lease {
            Some((id, _)) if id == lease => {
                server.lease = None;
                drop(server);
                self.record(Event::Released);
                Ok(())
            }
            _ => Err(Error::LeaseLost("LeaseIdMismatchWithLeaseOperation".into())),
        };
        async move { result }
    }

    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>>> + Send {
        std::future::ready(Ok(None))
    }

    fn name(&self) -> String {
        "memory/test".to_owned()
    }

    fn stamp(
        &self,
        _lease: LeaseId,
        _holder: &str,
        _options: &StampOptions,
    ) -> impl Future<Output = Result<u64>> + Send {
        let queued = self.stamp_error.lock().unwrap().take();
        let result = queued.map_or_else(
            || {
                let mut server = self.inner.lock().unwrap();
                server.epoch += 1;
                Ok(server.epoch)
            },
            Err,
        );
        async move { result }
    }
}

/// A task that records its start and stop, then obeys cancellation after
/// `linger` (or never, with `None`).
fn recording_task(store: Arc<MemoryStore>, linger: Option<Duration>) -> Arc<TaskFn> {
    box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            let reason = ctx.cancelled().await;
            store.record(Event::TaskCancelled(reason));
            match linger {
                Some(linger) => tokio::time::sleep(linger).await,
                None => std::future::pending().await,
            }
            store.record(Event::TaskStopped(ctx.epoch()));
            Ok::<(), Error>(())
        }
    })
}

struct Harness {
    store: Arc<MemoryStore>,
    options: MutexOptions,
    state: watch::Sender<Leadership>,
    reports: broadcast::Sender<TermReport>,
    metrics: crate::engine::metrics::Metrics,
    received: Mutex<broadcast::Receiver<TermReport>>,
    token: CancellationToken,
    lingering: crate::engine::lingering::Lingering,
}

impl Harness {
    fn new(options: MutexOptions) -> Self {
        options.validate().unwrap();
        let (reports, received) = broadcast::channel(256);
        Harness {
            store: Arc::new(MemoryStore::default()),
            options: options.with_jitter_seed(7),
            state: watch::channel(Leadership::Follower).0,
            reports,
            metrics: crate::engine::metrics::Metrics::new("memory/test", std::sync::Arc::default()),
            received: Mutex::new(received),
            token: CancellationToken::new(),
            lingering: crate::engine::lingering::Lingering::default(),
        }
    }

    /// Another instance on the same store.
    fn sharing(&self, options: MutexOptions) -> Self {
        let mut other = Harness::new(options);
        other.store = self.store.clone();
        other.options = other.options.with_jitter_seed(8);
        other
    }

    /// The term reports sent so far (and not taken by an earlier call).
    fn reports(&self) -> Vec<TermReport> {
        let mut received = self.received.lock().unwrap();
        std::iter::from_fn(|| received.try_recv().ok()).collect()
    }

    fn engine(&self, task: Arc<TaskFn>) -> Engine<'_, MemoryStore> {
        Engine {
            store: self.store.clone(),
            options: &self.options,
            holder: "test-holder".into(),
            task,
            state: &self.state,
            observer: &self.reports,
            metrics: &self.metrics,
            lingering: &self.lingering,
            leader: None,
            contact: None,
            caller_holds: None,
        }
    }

    /// Runs the campaign with `task` until the token is cancelled or `limit` passes.
    async fn run(&self, task: Arc<TaskFn>, limit: Duration) -> Result<()> {
        let engine = self.engine(task);
        let token = self.token.clone();
        let stopper = async {
            tokio::time::sleep(limit).await;
            token.cancel();
            std::future::pending::<Result<()>>().await
        };
        tokio::select! {
            r = engine.run(self.token.clone()) => r,
            r = stopper => r,
        }
    }

    /// As [`Harness::run`], and does `action` to the store `at` into the run.
    async fn run_and(
        &self,
        task: Arc<TaskFn>,
        limit: Duration,
        at: Duration,
        action: impl FnOnce(&MemoryStore),
    ) -> Result<()> {
        let interfere = async {
            tokio::time::sleep(at).await;
            action(&self.store);
            std::future::pending::<Result<()>>().await
        };
        tokio::select! {
            r = self.run(task, limit) => r,
            r = interfere => r,
        }
    }
}

fn defaults() -> MutexOptions {
    MutexOptions::default()
}

const D: Duration = Duration::from_secs(15);

#[cfg(feature = "metrics")]
mod metrics;
mod term;

#[tokio::test(start_paused = true)]
async fn task_is_cancelled_and_stopped_before_the_deadline_when_renews_hang() {
    let h = Harness::new(defaults());
    h.store.hang_renews.store(true, Ordering::SeqCst);
    let task = recording_task(h.store.clone(), Some(Duration::from_millis(100)));
    let started = Instant::now();
    h.run(task, Duration::from_secs(40)).await.unwrap();

    let acquired = h.store.acquired_at().unwrap();
    assert_eq!(acquired, started, "the first acquire is sent at once");
    let margin = h.options.effective_safety_margin();
    let deadline = acquired + D - margin;
    let cancelled = h
        .store
        .first(&|e| *e == Event::TaskCancelled(StopReason::Deadline))
        .expect("the task was cancelled for the deadline");
    let stopped = h
        .store
        .first(&|e| matches!(e, Event::TaskStopped(1)))
        .unwrap();
    assert_eq!(
        cancelled,
        deadline - h.options.stop_grace - STOP_SLACK,
        "cancelled a grace and the stop slack before the deadline"
    );
    assert!(stopped < deadline, "the task stopped before the deadline");
    assert!(
        stopped + margin <= acquired + D,
        "and a margin before the server could expire the lease"
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_counts_from_when_a_request_was_sent_not_answered() {
    let h = Harness::new(defaults());
    // Every answer takes 2 s to come back; after the first renewal, renewals hang.
    *h.store.answer_delay.lock().unwrap() = Duration::from_secs(2);
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let start = Instant::now();
    h.run_and(
        task,
        Duration::from_secs(30),
        Duration::from_secs(6),
        |store| {
            store.hang_renews.store(true, Ordering::SeqCst);
        },
    )
    .await
    .unwrap();
    let renewed = h.store.first(&|e| *e == Event::Renewed).unwrap();
    // The acquire was sent at 0 s and the renewal at 5 s (answered at 7 s):
    // the deadline is 5 s + lease - margin, and the task is cancelled a
    // grace before it. Counting from the answer would cancel 2 s later.
    assert_eq!(renewed - start, Duration::from_secs(5));
    let cancelled = h
        .store
        .first(&|e| *e == Event::TaskCancelled(StopReason::Deadline))
        .expect("cancelled for the deadline");
    let deadline = renewed + D - h.options.effective_safety_margin();
    assert_eq!(cancelled, deadline - h.options.stop_grace - STOP_SLACK);
}

#[tokio::test(start_paused = true)]
async fn transient_renew_failures_are_retried_until_the_deadline() {
    let h = Harness::new(defaults());
    h.store.renews_always_fail.store(true, Ordering::SeqCst);
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    h.run(task, Duration::from_secs(14)).await.unwrap();

    let acquired = h.store.acquired_at().unwrap();
    let cancelled = h
        .store
        .first(&|e| *e == Event::TaskCancelled(StopReason::Deadline))
        .expect("the task was cancelled at the deadline");
    let deadline = acquired + D - h.options.effective_safety_margin();
    assert_eq!(cancelled, deadline - h.options.stop_grace - STOP_SLACK);
    // Renewal starts at 5 s; the cancel point is at 10.4 s: retries every
    // 0.2, 0.4, 0.8, 1.6, 2 s fit six attempts, not one.
    let attempts = h.store.inner.lock().unwrap().renew_attempts;
    assert!((5..=8).contains(&attempts), "renew attempts: {attempts}");
}

#[tokio::test(start_paused = true)]
async fn a_few_failed_renewals_do_not_cost_leadership() {
    let h = Harness::new(defaults());
    h.store.failing_renews.store(3, Ordering::SeqCst);
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    h.run(task, Duration::from_secs(60)).await.unwrap();

    let events = h.store.events();
    let cancels: Vec<_> = events
        .iter()
        .filter(|(_, e)| matches!(e, Event::TaskCancelled(_)))
        .collect();
    assert_eq!(cancels.len(), 1, "{events:?}");
    assert_eq!(cancels[0].1, Event::TaskCancelled(StopReason::Shutdown));
    let renewals = events.iter().filter(|(_, e)| *e == Event::Renewed).count();
    assert!(renewals >= 10, "renewed {renewals} times in 60 s");
}

#[tokio::test(start_paused = true)]
async fn a_definitive_loss_stops_the_task_at_once() {
    let h = Harness::new(defaults());
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    h.run_and(
        task,
        Duration::from_secs(30),
        Duration::from_secs(7),
        MemoryStore::break_lease,
    )
    .await
    .unwrap();
    let acquired = h.store.acquired_at().unwrap();
    let lost = h
        .store
        .first(&|e| *e == Event::TaskCancelled(StopReason::LeaseLost))
        .expect("the task saw the loss");
    // Renewals at 5 s (fine) and 10 s (lost): cancelled at the 10 s renewal.
    assert_eq!(lost - acquired, Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn release_happens_only_after_the_task_stopped() {
    let h = Harness::new(defaults());
    let task = recording_task(h.store.clone(), Some(Duration::from_millis(1500)));
    h.run(task, Duration::from_secs(3)).await.unwrap();

    let events = h.store.events();
    let cancelled = h.store.cancelled_at().unwrap();
    let stopped = h.store.stopped_at().unwrap();
    let released = h.store.released_at().unwrap();
    assert_eq!(
        stopped - cancelled,
        Duration::from_millis(1500),
        "{events:?}"
    );
    assert!(
        released >= stopped,
        "released before the task stopped: {events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_ignores_cancellation_is_aborted_before_release() {
    let h = Harness::new(defaults());
    let task = recording_task(h.store.clone(), None);
    h.run(task, Duration::from_secs(3)).await.unwrap();

    let cancelled = h.store.cancelled_at().unwrap();
    let released = h.store.released_at().unwrap();
    assert!(h.store.stopped_at().is_none());
    assert_eq!(
        released - cancelled,
        h.options.stop_grace,
        "released right after the abort"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lingering_task_keeps_the_lease_renewed_while_it_drains() {
    let h = Harness::new(defaults().with_stop_grace(Duration::from_secs(8)));
    let task = recording_task(h.store.clone(), Some(Duration::from_secs(7)));
    h.run(task, Duration::from_secs(2)).await.unwrap();

    let events = h.store.events();
    let cancelled = h.store.cancelled_at().unwrap();
    let renewed_while_draining = events
        .iter()
        .any(|(t, e)| *e == Event::Renewed && *t > cancelled);
    assert!(renewed_while_draining, "{events:?}");
    let released = h.store.released_at().unwrap();
    assert_eq!(released - cancelled, Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn a_finished_task_releases_and_campaigns_again_with_the_next_epoch() {
    let h = Harness::new(defaults());
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            tokio::time::sleep(Duration::from_secs(1)).await;
            store.record(Event::TaskStopped(ctx.epoch()));
            Ok::<(), Error>(())
        }
    });
    h.run(task, Duration::from_millis(5500)).await.unwrap();

    let starts: Vec<u64> = h
        .store
        .events()
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::TaskStarted(epoch) => Some(epoch),
            _ => None,
        })
        .collect();
    // Terms of 1 s, each followed by a whole retry period (1.2 s): at 0,
    // 2.2 and 4.4 s.
    assert_eq!(starts, vec![1, 2, 3]);
    let releases = h
        .store
        .events()
        .iter()
        .filter(|(_, e)| *e == Event::Released)
        .count();
    assert_eq!(releases, 3);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_task_is_reported_and_the_campaign_recovers_after_backoff() {
    let (logs, _guard) = crate::captured_logs::capture(tracing::Level::WARN);
    let h = Harness::new(defaults());
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            assert!(ctx.epoch() != 1, "first term fails on purpose");
            ctx.cancelled().await;
            Ok::<(), Error>(())
        }
    });
    h.run(task, Duration::from_secs(20)).await.unwrap();

    let starts: Vec<(Instant, Event)> = h
        .store
        .events()
        .into_iter()
        .filter(|(_, e)| matches!(e, Event::TaskStarted(_)))
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[1].1, Event::TaskStarted(2));
    let report = logs.text();
    assert!(
        report.contains("ERROR")
            && report.contains("leader task panicked")
            && report.contains("first term fails on purpose"),
        "the panic is reported with its message: {report}"
    );
    let backoff = starts[1].0 - starts[0].0;
    let base = h.options.failure_backoff;
    assert!(
        backoff >= base.mul_f64(0.8) && backoff <= base.mul_f64(1.2),
        "{backoff:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_error_backs_off_like_a_panic() {
    let h = Harness::new(defaults());
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            Err::<(), Error>(Error::Cancelled)
        }
    });
    h.run(task, Duration::from_secs(13)).await.unwrap();
    let starts = h
        .store
        .events()
        .iter()
        .filter(|(_, e)| matches!(e, Event::TaskStarted(_)))
        .count();
    assert_eq!(starts, 3, "failures are 4 to 6 s apart");
}

#[tokio::test(start_paused = true)]
async fn an_authentication_failure_ends_the_campaign_with_an_error() {
    let h = Harness::new(defaults());
    h.store.forbid.store(true, Ordering::SeqCst);
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let err = h.run(task, Duration::from_secs(60)).await.unwrap_err();
    assert!(
        matches!(err, Error::Authentication { status: 403, .. }),
        "{err:?}"
    );
    assert_eq!(*h.state.borrow(), Leadership::Stopped);
}

#[tokio::test(start_paused = true)]
async fn transient_acquire_failures_back_off_and_recover() {
    let h = Harness::new(defaults());
    {
        let mut server = h.store.inner.lock().unwrap();
        for _ in 0..6 {
            server
                .queued_acquire_errors
                .push_back(Error::transport("acquire", "connection refused"));
        }
    }
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let start = Instant::now();
    h.run(task, Duration::from_secs(40)).await.unwrap();
    let started = h
        .store
        .first(&|e| matches!(e, Event::TaskStarted(_)))
        .expect("leads in the end");
    // Six failures wait 1, 2, 4, 5, 5 and 5 s (each ±20 %): 17.6 s to 26.4 s.
    let elapsed = started.duration_since(start);
    assert!(
        elapsed >= Duration::from_millis(17_600) && elapsed <= Duration::from_millis(26_400),
        "led after {elapsed:?}"
    );
    assert!(h
        .store
        .inner
        .lock()
        .unwrap()
        .queued_acquire_errors
        .is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_follower_waits_with_jitter_and_takes_over_when_the_lease_expires() {
    let h = Harness::new(defaults());
    let foreign = LeaseId::new();
    let start = Instant::now();
    h.store.inner.lock().unwrap().lease = Some((foreign, start + Duration::from_secs(10)));
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let state = h.state.subscribe();
    h.run(task, Duration::from_secs(15)).await.unwrap();
    let started = h
        .store
        .first(&|e| matches!(e, Event::TaskStarted(1)))
        .unwrap();
    let waited = started - start;
    assert!(
        waited >= Duration::from_secs(10) && waited <= Duration::from_millis(11_200),
        "took over after {waited:?}"
    );
    assert_eq!(*state.borrow(), Leadership::Stopped);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_task_is_stepped_down_by_the_watchdog() {
    let h = Harness::new(defaults().with_heartbeat_timeout(Duration::from_secs(2)));
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                ctx.heartbeat().beat();
            }
            // Stalls: no more beats.
            let reason = ctx.cancelled().await;
            store.record(Event::TaskCancelled(reason));
            Ok::<(), Error>(())
        }
    });
    h.run(task, Duration::from_secs(6)).await.unwrap();
    let started = h
        .store
        .first(&|e| matches!(e, Event::TaskStarted(1)))
        .unwrap();
    let stalled = h
        .store
        .first(&|e| *e == Event::TaskCancelled(StopReason::Stalled))
        .expect("stepped down");
    assert_eq!(
        stalled - started,
        Duration::from_secs(5),
        "3 s of beats, then 2 s of silence"
    );
    assert!(h.store.released_at().unwrap() >= stalled);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_instance_waits_the_failure_backoff_before_leading_again() {
    let h = Harness::new(defaults().with_heartbeat_timeout(Duration::from_secs(2)));
    let store = h.store.clone();
    // Never beats: every term stalls.
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            ctx.cancelled().await;
            Ok::<(), Error>(())
        }
    });
    h.run(task, Duration::from_secs(12)).await.unwrap();
    let starts: Vec<Instant> = h
        .store
        .events()
        .into_iter()
        .filter(|(_, e)| matches!(e, Event::TaskStarted(_)))
        .map(|(t, _)| t)
        .collect();
    assert!(starts.len() >= 2, "{starts:?}");
    // 2 s without a beat, then failure_backoff (5 s ± 20 %), not acquire_retry.
    let between = starts[1] - starts[0];
    assert!(
        between >= Duration::from_secs(6) && between <= Duration::from_secs(8),
        "led again after {between:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_state_channel_follows_each_transition() {
    let h = Harness::new(defaults());
    let mut rx = h.state.subscribe();
    assert_eq!(*rx.borrow_and_update(), Leadership::Follower);
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    // A watch channel keeps only the latest value, so a watcher sees a
    // subsequence of the transitions; the leader term lasts long enough to be seen.
    let watcher = async {
        let mut seen = Vec::new();
        while rx.changed().await.is_ok() {
            seen.push(rx.borrow_and_update().clone());
            if *seen.last().unwrap() == Leadership::Stopped {
                break;
            }
        }
        seen
    };
    let (result, seen) = tokio::join!(h.run(task, Duration::from_secs(2)), watcher);
    result.unwrap();
    let order = [
        Leadership::Leader { epoch: 1 },
        Leadership::Follower,
        Leadership::Stopped,
    ];
    let positions: Vec<usize> = seen
        .iter()
        .map(|s| order.iter().position(|o| o == s).expect("a known state"))
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(
        seen.first(),
        Some(&Leadership::Leader { epoch: 1 }),
        "{seen:?}"
    );
    assert_eq!(seen.last(), Some(&Leadership::Stopped), "{seen:?}");
}
