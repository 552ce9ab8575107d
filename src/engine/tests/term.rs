//! How a term ends: dropped campaigns, sub-tasks, reports, pauses and the
//! boundary values of the stop timeline.
//!
//! One scenario per test, each with its own in-memory
//! store and paused clock.

// Instants of one paused clock, subtracted in the order they happened; an
// underflow would be a test failure anyway.
#![allow(clippy::unchecked_time_subtraction)]

use std::sync::atomic::AtomicU64;

use super::*;
use crate::options::{ABORT_WAIT, FAIL_STOP_SLACK};

/// Records `Dropped(name)` when the future that owns it is dropped.
struct DropProbe(Arc<MemoryStore>, &'static str);

impl Drop for DropProbe {
    fn drop(&mut self) {
        self.0.record(Event::Dropped(self.1));
    }
}

/// Ticks every 100 ms; obeys cancellation only if `cooperative`.
async fn ticker(
    store: Arc<MemoryStore>,
    name: &'static str,
    token: CancellationToken,
    cooperative: bool,
) -> Result<(), Error> {
    let _probe = DropProbe(store.clone(), name);
    loop {
        tokio::select! {
            () = token.cancelled(), if cooperative => return Ok(()),
            () = tokio::time::sleep(Duration::from_millis(100)) => store.record(Event::Tick(name)),
        }
    }
}

fn ticks_after(store: &MemoryStore, name: &'static str, after: Instant) -> usize {
    store
        .events()
        .iter()
        .filter(|(t, e)| *t > after && *e == Event::Tick(name))
        .count()
}

fn first_of(store: &MemoryStore, wanted: &Event) -> Instant {
    store
        .first(&|e| e == wanted)
        .unwrap_or_else(|| panic!("no {wanted:?} in {:?}", store.events()))
}

/// Runs the campaign and drops its future `after` into the run, as
/// `tokio::select!` does with the branch that lost.
async fn drop_campaign_after(h: &Harness, task: Arc<TaskFn>, after: Duration) -> Instant {
    let engine = h.engine(task);
    tokio::select! {
        r = engine.run(h.token.clone()) => panic!("the campaign ended by itself: {r:?}"),
        () = tokio::time::sleep(after) => {}
    }
    Instant::now()
}

#[tokio::test(start_paused = true)]
async fn dropping_the_campaign_stops_a_cooperative_and_a_deaf_task() {
    for cooperative in [true, false] {
        let h = Harness::new(defaults());
        let store = h.store.clone();
        let task = box_task(move |ctx: LeaderContext| {
            ticker(store.clone(), "leader", ctx.token().clone(), cooperative)
        });
        let dropped = drop_campaign_after(&h, task, Duration::from_secs(2)).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(ticks_after(&h.store, "leader", h.store.acquired_at().unwrap()) > 10);
        assert_eq!(
            ticks_after(&h.store, "leader", dropped),
            0,
            "cooperative: {cooperative}: {:?}",
            h.store.events()
        );
        assert_eq!(first_of(&h.store, &Event::Dropped("leader")), dropped);
        // The lease is left to expire: nothing was released.
        assert_eq!(h.store.released_at(), None);
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_the_campaign_stops_sub_tasks_and_a_second_instance_leads_only_after_expiry() {
    let a = Harness::new(defaults());
    let b = a.sharing(defaults());
    let store = a.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            ctx.spawn(ticker(store.clone(), "a-sub", ctx.token().clone(), false));
            ticker(store, "a", ctx.token().clone(), false).await
        }
    });
    let dropped = drop_campaign_after(&a, task, Duration::from_secs(2)).await;
    let store = b.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move { ticker(store, "b", ctx.token().clone(), true).await }
    });
    b.run(task, Duration::from_secs(30)).await.unwrap();
    let b_first = first_of(&b.store, &Event::Tick("b"));
    assert!(b_first >= dropped + D - Duration::from_secs(2));
    for name in ["a", "a-sub"] {
        assert_eq!(ticks_after(&a.store, name, dropped), 0, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn one_mutex_runs_one_campaign_at_a_time() {
    let settings = crate::BlobSettings::azurite("campaigns", "once").unwrap();
    let mutex =
        crate::BlobDistributedMutex::new(settings, |_ctx| async { Ok::<(), Error>(()) }).unwrap();
    let token = CancellationToken::new();
    let mut first = std::pin::pin!(mutex.run_task_when_mutex_acquired(token.clone()));
    tokio::select! {
        biased;
        _ = &mut first => panic!("the first campaign ended"),
        () = std::future::ready(()) => {}
    }
    let second = mutex.run_task_when_mutex_acquired(token.clone()).await;
    assert!(
        matches!(second, Err(Error::AlreadyCampaigning)),
        "{second:?}"
    );
    token.cancel();
    first.await.unwrap();
    // Once the first has ended, the mutex campaigns again.
    mutex.run_task_when_mutex_acquired(token).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn tasks_that_return_at_once_take_turns_at_the_schedule_rate() {
    let a = Harness::new(defaults());
    let b = a.sharing(defaults());
    let terms = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let counting = |i: usize| {
        let terms = terms.clone();
        box_task(move |_ctx: LeaderContext| {
            terms[i].fetch_add(1, Ordering::SeqCst);
            async { Ok::<(), Error>(()) }
        })
    };
    let minute = Duration::from_secs(60);
    let (ra, rb) = tokio::join!(a.run(counting(0), minute), b.run(counting(1), minute));
    ra.unwrap();
    rb.unwrap();
    let (na, nb) = (
        terms[0].load(Ordering::SeqCst),
        terms[1].load(Ordering::SeqCst),
    );
    // Each term is followed by a whole retry period (1.2 s) before that
    // instance campaigns again, so neither leads more than 51 times in a
    // minute (before, the same instance led again at once, thousands of
    // times); the other, polling every 0.8–1.2 s, gets its turns.
    let most = u64::try_from(minute.as_millis() / h_pause(&a).as_millis()).unwrap() + 1;
    assert!(na >= 20 && nb >= 20, "a led {na} times, b {nb} times");
    assert!(na <= most && nb <= most, "a led {na} times, b {nb} times");
}

fn h_pause(h: &Harness) -> Duration {
    h.options.pause_after_term()
}

#[tokio::test(start_paused = true)]
async fn a_finished_term_waits_a_whole_retry_period_before_the_next_acquire() {
    let h = Harness::new(defaults());
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        store.record(Event::TaskStarted(ctx.epoch()));
        async { Ok::<(), Error>(()) }
    });
    h.run(task, Duration::from_secs(10)).await.unwrap();
    let acquires: Vec<Instant> = h
        .store
        .events()
        .into_iter()
        .filter(|(_, e)| matches!(e, Event::Acquired(_)))
        .map(|(t, _)| t)
        .collect();
    assert!(acquires.len() >= 5, "{acquires:?}");
    for pair in acquires.windows(2) {
        assert_eq!(pair[1] - pair[0], h.options.pause_after_term());
    }
}

#[tokio::test(start_paused = true)]
async fn a_garbled_epoch_is_an_error_and_the_instance_does_not_lead() {
    let h = Harness::new(defaults());
    *h.store.stamp_error.lock().unwrap() = Some(Error::InvalidEpoch { found: "x".into() });
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let err = h.run(task, Duration::from_secs(30)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidEpoch { .. }), "{err:?}");
    assert!(h
        .store
        .first(&|e| matches!(e, Event::TaskStarted(_)))
        .is_none());
    assert!(h.store.released_at().is_some(), "the lease was given back");
}

#[tokio::test(start_paused = true)]
async fn a_transient_stamp_failure_gives_the_lease_back_and_campaigns_again() {
    let h = Harness::new(defaults());
    *h.store.stamp_error.lock().unwrap() = Some(MemoryStore::busy());
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    h.run(task, Duration::from_secs(5)).await.unwrap();
    let released = h.store.released_at().unwrap();
    let started = first_of(&h.store, &Event::TaskStarted(1));
    assert!(started >= released + h.options.acquire_retry.mul_f64(0.8));
}

#[tokio::test(start_paused = true)]
async fn a_credential_that_fails_three_times_then_works_is_retried() {
    let h = Harness::new(defaults());
    for _ in 0..3 {
        h.store
            .inner
            .lock()
            .unwrap()
            .queued_acquire_errors
            .push_back(Error::CredentialUnavailable {
                operation: "acquire",
                source: crate::error::Cause::new("IMDS timed out"),
            });
    }
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let start = Instant::now();
    h.run(task, Duration::from_secs(20)).await.unwrap();
    // Back-offs of 1, 2 and 4 s (each ±20 %).
    let led = first_of(&h.store, &Event::TaskStarted(1)) - start;
    assert!(
        led >= Duration::from_millis(5_600) && led <= Duration::from_millis(8_400),
        "{led:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_drops_its_heartbeat_is_stalled_not_exempt() {
    let h = Harness::new(defaults().with_heartbeat_timeout(Duration::from_secs(2)));
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            let token = ctx.token().clone();
            drop(ctx);
            token.cancelled().await;
            Ok::<(), Error>(())
        }
    });
    h.run(task, Duration::from_secs(4)).await.unwrap();
    let started = first_of(&h.store, &Event::TaskStarted(1));
    let reports = h.reports();
    assert_eq!(reports[0].reason, StopReason::Stalled, "{reports:?}");
    assert_eq!(
        h.store.released_at().unwrap() - started,
        Duration::from_secs(2)
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_panics_while_stopping_backs_off_like_a_failed_one() {
    let h = Harness::new(defaults());
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            ctx.cancelled().await;
            assert!(ctx.epoch() > 1, "panics while stopping");
            ctx.cancelled().await;
            Ok::<(), Error>(())
        }
    });
    // The lease is broken at 7 s; the renewal at 10 s finds out.
    h.run_and(
        task,
        Duration::from_secs(20),
        Duration::from_secs(7),
        MemoryStore::break_lease,
    )
    .await
    .unwrap();
    let reports = h.reports();
    assert_eq!(reports[0].reason, StopReason::LeaseLost, "{reports:?}");
    assert!(reports[0]
        .failure
        .as_deref()
        .unwrap()
        .contains("panics while stopping"));
    let first = first_of(&h.store, &Event::TaskStarted(1));
    let second = first_of(&h.store, &Event::TaskStarted(2));
    let backoff = h.options.failure_backoff;
    let between = second - first - Duration::from_secs(10);
    assert!(
        between >= backoff.mul_f64(0.8) && between <= backoff.mul_f64(1.2),
        "led again {between:?} after the term"
    );
}

/// The report of each way a term can end, with its reason and how the tasks ended.
#[tokio::test(start_paused = true)]
async fn each_way_a_term_ends_is_reported() {
    type Case = (MutexOptions, fn(&MemoryStore), Arc<TaskFn>);
    let ok = || box_task(|_ctx: LeaderContext| async { Ok::<(), Error>(()) });
    let fail = || {
        box_task(|_ctx: LeaderContext| async { Err::<(), Error>(Error::LeaseLost("boom".into())) })
    };
    let panics = || {
        box_task(|_ctx: LeaderContext| async {
            panic!("kaboom");
            #[allow(unreachable_code)]
            Ok::<(), Error>(())
        })
    };
    let obeys = |store: &Arc<MemoryStore>| recording_task(store.clone(), Some(Duration::ZERO));
    let deaf = |store: &Arc<MemoryStore>| recording_task(store.clone(), None);
    let nothing: fn(&MemoryStore) = |_| {};
    let hang: fn(&MemoryStore) = |s| s.hang_renews.store(true, Ordering::SeqCst);
    let expected = [
        (StopReason::Finished, TaskStop::Returned, None),
        (
            StopReason::Failed,
            TaskStop::Returned,
            Some("lease lost: boom"),
        ),
        (StopReason::Panicked, TaskStop::Returned, Some("kaboom")),
        (StopReason::Shutdown, TaskStop::Returned, None),
        (StopReason::Shutdown, TaskStop::Aborted, None),
        (StopReason::LeaseLost, TaskStop::Returned, None),
        (StopReason::Deadline, TaskStop::Returned, None),
        (StopReason::Stalled, TaskStop::Returned, None),
    ];
    for (i, (reason, tasks, failure)) in expected.into_iter().enumerate() {
        let store = Arc::new(MemoryStore::default());
        let (options, action, task): Case = match i {
            0 => (defaults(), nothing, ok()),
            1 => (defaults(), nothing, fail()),
            2 => (defaults(), nothing, panics()),
            3 => (defaults(), nothing, obeys(&store)),
            4 => (defaults(), nothing, deaf(&store)),
            5 => (defaults(), MemoryStore::break_lease, obeys(&store)),
            6 => (defaults(), hang, obeys(&store)),
            _ => (
                defaults().with_heartbeat_timeout(Duration::from_secs(1)),
                nothing,
                obeys(&store),
            ),
        };
        let mut h = Harness::new(options);
        h.store = store;
        // A lost lease is seen at the first renewal (5 s); hung renewals at
        // the deadline's cancel point (10.4 s).
        let limit = Duration::from_secs(if i == 5 || i == 6 { 15 } else { 2 });
        h.run_and(task, limit, Duration::from_secs(1), action)
            .await
            .unwrap();
        let first = h.reports().into_iter().next().expect("a report");
        assert_eq!(
            (
                first.epoch,
                first.reason,
                first.tasks,
                first.failure.as_deref()
            ),
            (1, reason, tasks, failure),
            "case {i}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_frozen_past_its_deadline_stops_at_once_on_waking_and_says_deadline() {
    let h = Harness::new(defaults());
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        ticker(store.clone(), "leader", ctx.token().clone(), true)
    });
    let mut state = h.state.subscribe();
    let freeze = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        // The clock jumps 40 s while nothing of the campaign runs: a frozen process.
        tokio::time::advance(Duration::from_secs(40)).await;
        let woke = Instant::now();
        state
            .wait_for(|s| matches!(s, Leadership::Ended(_)))
            .await
            .unwrap();
        (woke, Instant::now())
    };
    let (result, (woke, reported)) = tokio::join!(h.run(task, Duration::from_secs(50)), freeze);
    result.unwrap();
    assert_eq!(reported, woke, "reported at the instant it woke");
    let report = h.reports().remove(0);
    assert_eq!(report.reason, StopReason::Deadline);
    assert_eq!(report.tasks, TaskStop::Aborted, "no grace is left");
    assert_eq!(first_of(&h.store, &Event::Dropped("leader")), woke);
}

#[tokio::test(start_paused = true)]
async fn a_tiny_grace_is_given_whole_and_the_abort_lands_before_the_deadline() {
    let grace = Duration::from_millis(1);
    let h = Harness::new(defaults().with_stop_grace(grace));
    h.store.hang_renews.store(true, Ordering::SeqCst);
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        ticker(store.clone(), "leader", ctx.token().clone(), false)
    });
    h.run(task, Duration::from_secs(20)).await.unwrap();
    let acquired = h.store.acquired_at().unwrap();
    let deadline = acquired + D - h.options.effective_safety_margin();
    let aborted = first_of(&h.store, &Event::Dropped("leader"));
    assert_eq!(
        aborted,
        deadline - STOP_SLACK,
        "abort after the whole grace"
    );
    assert!(aborted + ABORT_WAIT <= deadline - FAIL_STOP_SLACK);
    assert_eq!(h.reports()[0].tasks, TaskStop::Aborted);
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_near_the_deadline_aborts_before_it_not_after_the_grace() {
    let h = Harness::new(defaults());
    h.store.hang_renews.store(true, Ordering::SeqCst);
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        ticker(store.clone(), "leader", ctx.token().clone(), false)
    });
    // Renewals hang from the start; the shutdown comes 1 s before the
    // deadline's cancel point would have, with a 3 s grace.
    let cancel_at = D - h.options.effective_safety_margin() - Duration::from_secs(1);
    let token = h.token.clone();
    let engine = h.engine(task);
    let stop = async {
        tokio::time::sleep(cancel_at).await;
        token.cancel();
    };
    let (result, ()) = tokio::join!(engine.run(h.token.clone()), stop);
    result.unwrap();
    let deadline = h.store.acquired_at().unwrap() + D - h.options.effective_safety_margin();
    let aborted = first_of(&h.store, &Event::Dropped("leader"));
    assert_eq!(aborted, deadline - STOP_SLACK);
}

/// A leader with three sub-tasks: one cooperative that drains for 1 s, one
/// that ignores cancellation, one that panics when cancelled.
fn leader_with_three_sub_tasks(store: &Arc<MemoryStore>) -> Arc<TaskFn> {
    let store = store.clone();
    box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            store.record(Event::TaskStarted(ctx.epoch()));
            let (s, t) = (store.clone(), ctx.token().clone());
            ctx.spawn(async move {
                let _probe = DropProbe(s.clone(), "drains");
                ticker(s.clone(), "drains", t, true).await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
                s.record(Event::Tick("drains"));
                Ok::<(), Error>(())
            });
            ctx.spawn(ticker(store.clone(), "deaf", ctx.token().clone(), false));
            let (s, t) = (store.clone(), ctx.token().clone());
            ctx.spawn(async move {
                let _probe = DropProbe(s, "panics");
                t.cancelled().await;
                panic!("sub-task panics while stopping");
                #[allow(unreachable_code)]
                Ok::<(), Error>(())
            });
            ctx.cancelled().await;
            Ok::<(), Error>(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn sub_tasks_stop_before_the_release_and_none_works_after_it() {
    let h = Harness::new(defaults());
    let task = leader_with_three_sub_tasks(&h.store);
    h.run(task, Duration::from_secs(2)).await.unwrap();
    let released = h.store.released_at().expect("released");
    let cancelled = Instant::now() - (Instant::now() - released) - h.options.stop_grace;
    for name in ["drains", "deaf", "panics"] {
        let dropped = first_of(&h.store, &Event::Dropped(name));
        assert!(dropped <= released, "{name} dropped after the release");
        assert_eq!(ticks_after(&h.store, name, released), 0, "{name}");
    }
    // The deaf one was aborted at the end of the grace; the release came then.
    assert_eq!(
        first_of(&h.store, &Event::Dropped("deaf")),
        cancelled + h.options.stop_grace
    );
    assert_eq!(released, first_of(&h.store, &Event::Dropped("deaf")));
    let report = h.reports().remove(0);
    assert_eq!(
        (report.reason, report.tasks),
        (StopReason::Shutdown, TaskStop::Aborted)
    );
    assert_eq!(
        report.failure.as_deref(),
        Some("sub-task panics while stopping")
    );
}

#[tokio::test(start_paused = true)]
async fn sub_tasks_are_stopped_when_the_lease_is_lost_and_the_term_backs_off() {
    let h = Harness::new(defaults());
    let task = leader_with_three_sub_tasks(&h.store);
    h.run_and(
        task,
        Duration::from_secs(12),
        Duration::from_secs(7),
        MemoryStore::break_lease,
    )
    .await
    .unwrap();
    let lost = first_of(&h.store, &Event::TaskStarted(1)) + Duration::from_secs(10);
    for name in ["drains", "deaf", "panics"] {
        let dropped = first_of(&h.store, &Event::Dropped(name));
        assert!(dropped <= lost + h.options.stop_grace, "{name}");
    }
    assert_eq!(h.store.released_at(), None, "a lost lease is not released");
    let report = h.reports().remove(0);
    assert_eq!(report.reason, StopReason::LeaseLost);
    assert!(report.failure.is_some());
    assert!(
        h.store.first(&|e| *e == Event::TaskStarted(2)).is_none(),
        "the panic makes it back off 5 s, past the end of the run"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_sub_task_ends_the_term_with_its_error() {
    let h = Harness::new(defaults());
    let task = box_task(move |ctx: LeaderContext| async move {
        ctx.spawn(async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err::<(), Error>(Error::transport("consume", "the queue went away"))
        });
        ctx.cancelled().await;
        Ok::<(), Error>(())
    });
    h.run(task, Duration::from_secs(3)).await.unwrap();
    let report = h.reports().remove(0);
    assert_eq!((report.epoch, report.reason), (1, StopReason::Failed));
    assert_eq!(
        report.failure.as_deref(),
        Some("transport error during consume: the queue went away")
    );
    assert_eq!(
        h.store.released_at().unwrap() - h.store.acquired_at().unwrap(),
        Duration::from_secs(1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_returns_ends_the_term_and_its_sub_tasks_drain_before_the_release() {
    let h = Harness::new(defaults());
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let (s, t) = (store.clone(), ctx.token().clone());
        ctx.spawn(async move {
            let _probe = DropProbe(s.clone(), "sub");
            t.cancelled().await;
            tokio::time::sleep(Duration::from_millis(700)).await;
            Ok::<(), Error>(())
        });
        async { Ok::<(), Error>(()) }
    });
    h.run(task, Duration::from_millis(500)).await.unwrap();
    let acquired = h.store.acquired_at().unwrap();
    assert_eq!(
        first_of(&h.store, &Event::Dropped("sub")) - acquired,
        Duration::from_millis(700)
    );
    assert_eq!(
        h.store.released_at().unwrap() - acquired,
        Duration::from_millis(700)
    );
    assert_eq!(h.reports()[0].reason, StopReason::Finished);
}

#[tokio::test(start_paused = true)]
async fn a_sub_task_spawned_after_its_term_is_not_started() {
    let h = Harness::new(defaults());
    let kept = Arc::new(Mutex::new(None));
    let keep = kept.clone();
    let task = box_task(move |ctx: LeaderContext| {
        *keep.lock().unwrap() = Some(ctx);
        async { Ok::<(), Error>(()) }
    });
    h.run(task, Duration::from_millis(500)).await.unwrap();
    let ctx = kept.lock().unwrap().take().unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let handle = ctx.spawn(async move {
        flag.store(true, Ordering::SeqCst);
        Ok::<(), Error>(())
    });
    assert!(handle.await.unwrap_err().is_cancelled());
    assert!(!ran.load(Ordering::SeqCst));
}

/// Blocking a runtime thread cannot be simulated with paused time: this one
/// runs on two real threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unstoppable_sub_task_prevents_the_release() {
    let h = Harness::new(defaults().with_stop_grace(Duration::from_millis(100)));
    let task = box_task(move |ctx: LeaderContext| async move {
        let token = ctx.token().clone();
        ctx.spawn(async move {
            token.cancelled().await;
            // Blocks its thread: neither cancellation nor abort can stop it.
            std::thread::sleep(Duration::from_millis(1500));
            Ok::<(), Error>(())
        });
        ctx.cancelled().await;
        Ok::<(), Error>(())
    });
    let err = h.run(task, Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(err, Error::TaskNotStopped), "{err:?}");
    assert_eq!(h.store.released_at(), None);
    assert_eq!(h.reports()[0].tasks, TaskStop::Stuck);
}

fn acquire_attempts(store: &MemoryStore) -> usize {
    store.inner.lock().unwrap().acquire_attempts
}

#[tokio::test(start_paused = true)]
async fn acquire_timeout_zero_makes_exactly_one_attempt() {
    let h = Harness::new(defaults().with_acquire_timeout(Duration::ZERO));
    h.store.inner.lock().unwrap().lease = Some((LeaseId::new(), Instant::now() + D));
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let start = Instant::now();
    let err = h.run(task, Duration::from_secs(60)).await.unwrap_err();
    assert!(
        matches!(err, Error::NotAcquired { after } if after.is_zero()),
        "{err:?}"
    );
    assert_eq!(acquire_attempts(&h.store), 1);
    assert_eq!(Instant::now(), start, "gave up at once");
}

#[tokio::test(start_paused = true)]
async fn acquire_timeout_gives_the_last_error_when_storage_fails() {
    let h = Harness::new(defaults().with_acquire_timeout(Duration::from_secs(4)));
    for _ in 0..10 {
        h.store
            .inner
            .lock()
            .unwrap()
            .queued_acquire_errors
            .push_back(Error::transport("acquire", "connection refused"));
    }
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let start = Instant::now();
    let err = h.run(task, Duration::from_secs(60)).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    // Attempts at 0, ~1, ~3 and at the limit itself.
    assert_eq!(Instant::now() - start, Duration::from_secs(4));
    assert_eq!(acquire_attempts(&h.store), 4);
}

#[tokio::test(start_paused = true)]
async fn acquire_timeout_bounds_only_the_first_term() {
    let h = Harness::new(defaults().with_acquire_timeout(Duration::from_secs(2)));
    let task = box_task(|_ctx: LeaderContext| async { Ok::<(), Error>(()) });
    h.run(task, Duration::from_secs(10)).await.unwrap();
    assert!(
        h.reports().len() >= 5,
        "it went on leading after the first term"
    );
}

/// A partition term (`lead_once`) renews the first time at a random point of
/// the second half of the renew interval, so that many terms started
/// together do not renew together; later renewals follow the interval.
#[tokio::test(start_paused = true)]
async fn one_term_spreads_its_first_renewal_over_the_second_half_of_the_interval() {
    let mut firsts = Vec::new();
    for seed in 1..=8 {
        let mut h = Harness::new(defaults());
        h.options = h.options.clone().with_jitter_seed(seed);
        let task = recording_task(h.store.clone(), Some(Duration::ZERO));
        let engine = h.engine(task);
        let token = h.token.clone();
        let stop = async {
            tokio::time::sleep(Duration::from_secs(12)).await;
            token.cancel();
        };
        let (led, ()) = tokio::join!(engine.lead_once(&h.token), stop);
        assert!(led.unwrap());
        let acquired = h.store.acquired_at().unwrap();
        let renewals: Vec<Instant> = h
            .store
            .events()
            .into_iter()
            .filter(|(_, e)| *e == Event::Renewed)
            .map(|(t, _)| t)
            .collect();
        let first = renewals[0] - acquired;
        let interval = h.options.effective_renew_interval();
        assert!(first >= interval / 2 && first <= interval, "{first:?}");
        assert_eq!(renewals[1] - renewals[0], interval);
        firsts.push(first);
    }
    firsts.sort();
    firsts.dedup();
    assert!(firsts.len() >= 6, "first renewals are spread: {firsts:?}");
}

/// A context for a term that no engine runs: its deadline is `deadline`,
/// its token is never cancelled unless the test does it (or drops the
/// term's tasks, returned beside it).
fn lone_context(
    store: Arc<MemoryStore>,
    deadline: &watch::Sender<Instant>,
) -> (LeaderContext, crate::engine::term_tasks::TermTasks) {
    let token = CancellationToken::new();
    let tasks = crate::engine::term_tasks::TermTasks::new(1, token.clone());
    let ctx = LeaderContext {
        epoch: 1,
        holder: "lone".into(),
        token,
        reason: Arc::default(),
        heartbeat: crate::engine::leadership::Heartbeat::new().0,
        deadline: deadline.subscribe(),
        abort_at: watch::channel(None).1,
        tasks: tasks.spawner(),
        state: Arc::new(crate::engine::state::Fenced::new(
            store,
            LeaseId::new(),
            deadline.subscribe(),
            Duration::from_secs(1),
        )),
    };
    (ctx, tasks)
}

/// After a freeze the mutex may not have run yet when the task wakes: the
/// context itself says the term is over once the deadline has passed, so
/// that no unit of work starts then.
#[tokio::test(start_paused = true)]
async fn the_context_says_the_term_is_over_once_its_deadline_has_passed() {
    let deadline = watch::channel(Instant::now() + Duration::from_secs(10)).0;
    let (ctx, _tasks) = lone_context(Arc::new(MemoryStore::default()), &deadline);
    assert!(ctx.is_current());
    // A renewal moves the deadline; the wait follows it.
    tokio::time::sleep(Duration::from_secs(8)).await;
    deadline.send_replace(Instant::now() + Duration::from_secs(10));
    let start = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(60), ctx.cancelled())
        .await
        .expect("cancelled() completes at the deadline");
    assert_eq!(reason, StopReason::Deadline);
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert!(!ctx.is_current());
    assert!(!ctx.is_cancelled(), "only the mutex cancels the token");
    // Ready at once when asked again, as after a wake.
    let again = tokio::time::timeout(Duration::ZERO, ctx.cancelled()).await;
    assert_eq!(again.ok(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_context_is_not_current_and_gives_the_stop_reason() {
    let deadline = watch::channel(Instant::now() + Duration::from_secs(10)).0;
    let (ctx, _tasks) = lone_context(Arc::new(MemoryStore::default()), &deadline);
    let _ = ctx.reason.set(StopReason::LeaseLost);
    ctx.token.cancel();
    assert!(!ctx.is_current());
    let reason = tokio::time::timeout(Duration::ZERO, ctx.cancelled()).await;
    assert_eq!(reason.ok(), Some(StopReason::LeaseLost));
}

/// When storage says the lease is someone else's, another holder may lead
/// already: a task that ignores cancellation is aborted within
/// `LOST_GRACE`, not after the whole `stop_grace`.
#[tokio::test(start_paused = true)]
async fn a_definitive_loss_aborts_a_task_that_ignores_cancellation_within_100_ms() {
    let h = Harness::new(defaults().with_stop_grace(Duration::from_secs(3)));
    let store = h.store.clone();
    let task = box_task(move |ctx: LeaderContext| {
        let store = store.clone();
        async move {
            let _probe = DropProbe(store.clone(), "task");
            store.record(Event::TaskStarted(ctx.epoch()));
            let reason = ctx.cancelled().await;
            store.record(Event::TaskCancelled(reason));
            std::future::pending::<Result<(), Error>>().await
        }
    });
    h.run_and(
        task,
        Duration::from_secs(12),
        Duration::from_secs(7),
        MemoryStore::break_lease,
    )
    .await
    .unwrap();
    let lost = h
        .store
        .first(&|e| *e == Event::TaskCancelled(StopReason::LeaseLost))
        .expect("the task saw the loss");
    let dropped = h
        .store
        .first(&|e| *e == Event::Dropped("task"))
        .expect("the task was aborted");
    assert!(
        dropped - lost <= crate::engine::LOST_GRACE,
        "aborted {:?} after the loss",
        dropped - lost
    );
    let report = &h.reports()[0];
    assert_eq!(
        (report.reason, report.tasks),
        (StopReason::LeaseLost, TaskStop::Aborted)
    );
}

/// The campaign future dropped mid-term: the term is still reported once,
/// with reason `dropped`, and the state says so.
#[tokio::test(start_paused = true)]
async fn a_term_whose_future_is_dropped_is_reported_once() {
    let h = Harness::new(defaults());
    let task = recording_task(h.store.clone(), Some(Duration::ZERO));
    let engine = h.engine(task);
    let token = CancellationToken::new();
    tokio::select! {
        r = engine.run(token.clone()) => panic!("the campaign ended: {r:?}"),
        () = tokio::time::sleep(Duration::from_secs(7)) => {}
    }
    let reports = h.reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(
        (reports[0].epoch, reports[0].reason),
        (1, StopReason::Dropped)
    );
    assert_eq!(*h.state.borrow(), Leadership::Ended(reports[0].clone()));
    // The lease was left to expire, not released.
    assert_eq!(h.store.released_at(), None);
}
