//! The probes' rules, alone and on mutexes and sets over the memory store,
//! with paused time.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{advance, Instant};

use super::*;
use crate::engine::vitals::Outlived;

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

/// Vitals of a campaign that stepped and heard storage just now.
fn fresh(now: Instant) -> Snapshot {
    Snapshot {
        campaigning: true,
        stepped: Some(now),
        answered: Some(now),
        failing_since: None,
        failure: None,
        deadlines: Vec::new(),
        stopping: Vec::new(),
        stuck: None,
        outlived: None,
    }
}

fn lease() -> Arc<str> {
    "c/lock".into()
}

#[test]
fn live_while_leading_in_time_or_following_whatever_storage_does() {
    let now = Instant::now();
    let mut vitals = fresh(now);
    assert_eq!(liveness(&vitals, now, MINUTE), None);
    vitals.deadlines.push((lease(), 7, now + SECOND));
    vitals.answered = None;
    vitals.failing_since = Some(now);
    assert_eq!(liveness(&vitals, now, MINUTE), None);
}

#[test]
fn a_leader_past_its_deadline_is_not_live() {
    let now = Instant::now();
    let mut vitals = fresh(now);
    vitals.deadlines.push((lease(), 7, now));
    let later = now + Duration::from_millis(1500);
    assert_eq!(
        liveness(&vitals, later, MINUTE).as_deref(),
        Some("the leader of term 7 of c/lock has not stopped 1.5s past its deadline")
    );
}

#[test]
fn a_stuck_task_is_not_live() {
    let now = Instant::now();
    let mut vitals = fresh(now);
    vitals.stuck = Some((lease(), 7));
    assert_eq!(
        liveness(&vitals, now, MINUTE).as_deref(),
        Some("the task of term 7 of c/lock could be neither stopped nor aborted")
    );
}

#[test]
fn an_election_quiet_past_its_bound_is_not_live_while_it_campaigns() {
    let now = Instant::now();
    let mut vitals = fresh(now);
    let later = now + MINUTE + SECOND;
    assert_eq!(liveness(&vitals, now + MINUTE, MINUTE), None);
    assert_eq!(
        liveness(&vitals, later, MINUTE).as_deref(),
        Some(
            "the election has made no progress for 61s (no acquire attempt, renewal or term \
             counted; the bound is 60s)"
        )
    );
    // A campaign that does not run is not wedged.
    vitals.campaigning = false;
    assert_eq!(liveness(&vitals, later, MINUTE), None);
}

#[test]
fn ready_while_storage_answers_with_the_part() {
    let now = Instant::now();
    let vitals = fresh(now);
    let ready = |part| readiness(None, &vitals, now, part);
    let leader = Leadership::Leader { epoch: 7 };
    assert_eq!(
        ready(mutex_part(&leader, &vitals, true)),
        Ok("ready: leader of term 7".to_owned())
    );
    let follower = Leadership::Follower;
    assert_eq!(
        ready(mutex_part(&follower, &vitals, false)),
        Ok("ready: follower".to_owned())
    );
    assert_eq!(
        ready(mutex_part(&follower, &vitals, true)),
        Err("not the leader".to_owned())
    );
    assert_eq!(
        ready(mutex_part(&Leadership::Stopped, &vitals, false)),
        Err("not campaigning".to_owned())
    );
    assert_eq!(
        ready(set_part(true, 3, true)),
        Ok("ready: owner of 3 partitions".to_owned())
    );
    assert_eq!(
        ready(set_part(true, 0, false)),
        Ok("ready: member, owning no partition".to_owned())
    );
    assert_eq!(
        ready(set_part(true, 0, true)),
        Err("owns no partition".to_owned())
    );
    assert_eq!(
        ready(set_part(false, 0, false)),
        Err("not taking part in the set".to_owned())
    );
}

#[test]
fn a_term_asked_to_stop_is_ready_as_ending_and_not_the_leader() {
    let now = Instant::now();
    let mut vitals = fresh(now);
    vitals.stopping.push(7);
    let leader = Leadership::Leader { epoch: 7 };
    assert_eq!(
        mutex_part(&leader, &vitals, false),
        Ok("ready: ending term 7".to_owned())
    );
    assert_eq!(
        mutex_part(&leader, &vitals, true),
        Err("term 7 is ending: not the leader".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn a_guard_that_outlives_its_term_fails_liveness_after_the_grace_or_at_once_when_unreleased()
{
    let vitals = Arc::new(Vitals::default());
    let (_state, watch) = watch::channel(Leadership::Follower);
    let options = MutexOptions::default();
    let health = Health::of_mutex(vitals.clone(), watch, &options);
    let outlived = |unreleased| Outlived {
        lease: lease(),
        epoch: 7,
        ended: Instant::now(),
        unreleased,
    };
    vitals.guard_outlives(outlived(false), || true);
    assert!(
        health.live().passes(),
        "within the grace: {}",
        health.live()
    );
    assert!(
        !health.ready().passes(),
        "cannot campaign: {}",
        health.ready()
    );
    advance(options.stop_grace() + Duration::from_millis(1)).await;
    assert!(!health.live().passes(), "past the grace");
    vitals.guard_gone(7);
    assert!(health.live().passes(), "the guard is gone");
    vitals.guard_outlives(outlived(true), || true);
    let live = health.live();
    assert!(!live.passes(), "unreleased: at once");
    assert!(live.reason().contains("term 7 of c/lock"), "{live}");
    vitals.guard_gone(7);
    vitals.guard_outlives(outlived(true), || false);
    assert!(health.live().passes(), "released before its term ended");
}

#[test]
fn not_ready_once_storage_fails_past_the_bound_or_when_not_live() {
    let now = Instant::now();
    let mut vitals = fresh(now);
    vitals.failing_since = Some(now + SECOND);
    vitals.failure = Some("connection refused".to_owned());
    let part = || Ok("ready: follower".to_owned());
    // Failing for exactly the bound is still ready.
    let bound = now + SECOND + UNREACHABLE_AFTER;
    assert_eq!(readiness(None, &vitals, bound, part()), part());
    assert_eq!(
        readiness(None, &vitals, bound + SECOND, part()),
        Err("storage has not answered for 12s: connection refused".to_owned())
    );
    assert_eq!(
        readiness(Some("wedged".to_owned()), &fresh(now), now, part()),
        Err("wedged".to_owned())
    );
}

#[test]
fn not_ready_before_storage_first_answers() {
    let now = Instant::now();
    let mut vitals = fresh(now);
    vitals.answered = None;
    let part = || Ok("ready: follower".to_owned());
    assert_eq!(
        readiness(None, &vitals, now, part()),
        Err("storage has not answered yet: no answer yet".to_owned())
    );
    vitals.failure = Some("connection refused".to_owned());
    assert_eq!(
        readiness(None, &vitals, now, part()),
        Err("storage has not answered yet: connection refused".to_owned())
    );
}

#[test]
fn the_quiet_limit_covers_a_terms_end_and_is_a_minute_at_least() {
    assert_eq!(quiet_limit(&MutexOptions::default()), MINUTE);
    let slow = MutexOptions::default()
        .with_lease_duration(MINUTE)
        .with_acquire_retry(Duration::from_secs(10));
    // 60 + 3 + 3 × 3 + 2 × 10
    assert_eq!(quiet_limit(&slow), Duration::from_secs(92));
}

#[test]
fn the_engine_never_imports_the_health_it_is_judged_by() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![root.join("engine.rs")];
    let mut folders = vec![root.join("engine")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            !text.contains("crate::health") && !text.contains("super::health"),
            "{} imports the health module",
            file.display()
        );
    }
}

#[cfg(feature = "testing")]
mod on_the_memory_store {
    use std::future::Future;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::lease_set::{BlobLeaseSet, LeaseSetOptions};
    use crate::mutex::BlobDistributedMutex;
    use crate::store::memory::{MemoryLeaseSetStore, MemoryLeaseStore};

    /// A mutex on `store` holding `holder`, whose task waits to be cancelled.
    fn mutex(store: &MemoryLeaseStore, holder: &str) -> BlobDistributedMutex<MemoryLeaseStore> {
        let options = MutexOptions::default()
            .with_holder(holder.to_owned())
            .with_jitter_seed(7);
        BlobDistributedMutex::with_store(store.clone(), options, |ctx| async move {
            ctx.token().cancelled().await;
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap()
    }

    /// Advances time in steps of 100 ms until `check` holds, at most `limit`.
    async fn until(limit: Duration, mut check: impl FnMut() -> bool) -> Duration {
        let start = Instant::now();
        while !check() {
            assert!(start.elapsed() < limit, "not within {limit:?}");
            advance(Duration::from_millis(100)).await;
            tokio::task::yield_now().await;
        }
        start.elapsed()
    }

    fn spawn_run(run: impl Future<Output = crate::Result<()>> + Send + 'static) {
        tokio::spawn(async move { run.await.unwrap() });
    }

    #[tokio::test(start_paused = true)]
    async fn a_mutex_is_ready_only_while_it_campaigns_and_storage_has_answered() {
        let store = MemoryLeaseStore::new("c/lock");
        let first = Arc::new(mutex(&store, "first"));
        let health = first.health();
        assert_eq!(health.live().reason(), "ok");
        assert_eq!(
            health.ready(),
            Verdict::fail("storage has not answered yet: no answer yet")
        );
        let token = CancellationToken::new();
        let (running, stop) = (first.clone(), token.clone());
        spawn_run(async move { running.run_task_when_mutex_acquired(stop).await });
        until(SECOND, || health.ready().passes()).await;
        assert_eq!(health.ready(), Verdict::pass("ready: leader of term 1"));
        assert_eq!(health.ready_to_lead(), health.ready());
        token.cancel();
        until(SECOND, || !health.ready().passes()).await;
        assert_eq!(health.ready(), Verdict::fail("not campaigning"));
        assert!(health.live().passes());
        // Long after, a mutex that no longer campaigns is not called wedged.
        advance(10 * MINUTE).await;
        assert!(health.live().passes());
    }

    #[tokio::test(start_paused = true)]
    async fn storage_down_for_twice_the_lease_leaves_leader_and_follower_live_and_unready() {
        let store = MemoryLeaseStore::new("c/lock");
        let (first, second) = (
            Arc::new(mutex(&store, "first")),
            Arc::new(mutex(&store, "second")),
        );
        let (leader, follower) = (first.health(), second.health());
        let token = CancellationToken::new();
        for mutex in [&first, &second] {
            let (mutex, token) = (mutex.clone(), token.clone());
            spawn_run(async move { mutex.run_task_when_mutex_acquired(token).await });
        }
        until(5 * SECOND, || {
            leader.ready_to_lead().passes() && follower.ready().passes()
        })
        .await;
        assert_eq!(follower.ready(), Verdict::pass("ready: follower"));
        assert_eq!(follower.ready_to_lead(), Verdict::fail("not the leader"));

        store.set_unavailable(true);
        let (mut leader_unready, mut follower_unready) = (None, None);
        let cut = Instant::now();
        while cut.elapsed() < 30 * SECOND {
            assert_eq!(leader.live(), Verdict::pass("ok"), "{:?}", cut.elapsed());
            assert_eq!(follower.live(), Verdict::pass("ok"), "{:?}", cut.elapsed());
            if !leader.ready().passes() {
                leader_unready.get_or_insert(cut.elapsed());
            }
            if !follower.ready().passes() {
                follower_unready.get_or_insert(cut.elapsed());
            }
            advance(Duration::from_millis(100)).await;
            tokio::task::yield_now().await;
        }
        // Unready once every request has failed for the bound: the first
        // failure was sent at most a renew interval (5 s) after the cut.
        for (who, unready) in [("leader", leader_unready), ("follower", follower_unready)] {
            let unready = unready.unwrap_or_else(|| panic!("the {who} stayed ready"));
            assert!(
                unready > UNREACHABLE_AFTER && unready <= UNREACHABLE_AFTER + 5 * SECOND + SECOND,
                "the {who} turned unready {unready:?} after the cut"
            );
        }
        let reason = follower.ready();
        assert!(
            reason
                .reason()
                .starts_with("storage has not answered for 3"),
            "{reason}"
        );
        assert!(reason.reason().contains("unavailable"), "{reason}");

        store.set_unavailable(false);
        until(10 * SECOND, || {
            leader.ready().passes() && follower.ready().passes()
        })
        .await;
        token.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_set_is_ready_with_its_partitions_and_unready_when_storage_is_down() {
        let store = MemoryLeaseSetStore::new();
        let options = LeaseSetOptions::default().with_mutex(
            MutexOptions::default()
                .with_holder("only".to_owned())
                .with_jitter_seed(7),
        );
        let set = BlobLeaseSet::with_store(store.clone(), ["a", "b"], options, |ctx| async move {
            ctx.token().cancelled().await;
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap();
        let set = Arc::new(set);
        let health = set.health();
        assert_eq!(
            health.ready(),
            Verdict::fail("storage has not answered yet: no answer yet")
        );
        let token = CancellationToken::new();
        let (running, stop) = (set.clone(), token.clone());
        spawn_run(async move { running.run(stop).await });
        let owning = || health.ready() == Verdict::pass("ready: owner of 2 partitions");
        until(MINUTE, owning).await;
        for name in ["members/only", "partitions/a", "partitions/b"] {
            store.get(name).set_unavailable(true);
        }
        until(MINUTE, || !health.ready().passes()).await;
        let reason = health.ready();
        assert!(
            reason.reason().starts_with("storage has not answered for "),
            "{reason}"
        );
        assert!(health.live().passes());
        for name in ["members/only", "partitions/a", "partitions/b"] {
            store.get(name).set_unavailable(false);
        }
        until(2 * MINUTE, owning).await;
        token.cancel();
        until(MINUTE, || {
            health.ready() == Verdict::fail("not taking part in the set")
        })
        .await;
    }

    /// A schedule's probes (feature `schedule`).
    #[cfg(feature = "schedule")]
    mod schedule {
        use super::*;
        use crate::fleet::{BlobSchedule, ScheduleOptions};

        /// What the jobs of a test's schedule wait for: the first slot's job
        /// waits until the gate opens, every later one passes at once.
        struct Gate {
            open: tokio::sync::Semaphore,
            started: std::sync::atomic::AtomicBool,
        }

        impl Gate {
            async fn pass(&self) {
                self.started
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                // The permit, given back at once, lets every later job pass.
                drop(self.open.acquire().await);
            }

            fn started(&self) -> bool {
                self.started.load(std::sync::atomic::Ordering::SeqCst)
            }

            fn open(&self) {
                self.open.add_permits(1);
            }
        }

        impl Default for Gate {
            fn default() -> Self {
                Gate {
                    open: tokio::sync::Semaphore::new(0),
                    started: std::sync::atomic::AtomicBool::new(false),
                }
            }
        }

        /// A schedule of `cron` on `store`, and the gate its jobs wait at.
        fn schedule(
            store: &MemoryLeaseStore,
            cron: &str,
        ) -> (Arc<BlobSchedule<MemoryLeaseStore>>, Arc<Gate>) {
            let options = ScheduleOptions::new(cron).with_mutex(
                MutexOptions::default()
                    .with_holder("h0".to_owned())
                    .with_jitter_seed(7),
            );
            let schedule = BlobSchedule::with_store(store.clone(), options).unwrap();
            (Arc::new(schedule), Arc::default())
        }

        fn spawn_schedule(
            schedule: &Arc<BlobSchedule<MemoryLeaseStore>>,
            gate: &Arc<Gate>,
        ) -> CancellationToken {
            let token = CancellationToken::new();
            let (running, stop, gate) = (schedule.clone(), token.clone(), gate.clone());
            spawn_run(async move {
                running
                    .run(stop, move |_, _| {
                        let gate = gate.clone();
                        async move {
                            gate.pass().await;
                            Ok::<(), std::convert::Infallible>(())
                        }
                    })
                    .await
            });
            token
        }

        #[tokio::test(start_paused = true)]
        async fn a_schedule_is_ready_waiting_for_a_slot_and_running_one_and_unready_when_its_looks_fail(
        ) {
            let store = MemoryLeaseStore::new("c/schedule");
            let (schedule, first) = schedule(&store, "*/10 * * * * *");
            let health = schedule.health();
            assert_eq!(
                health.ready(),
                Verdict::fail("storage has not answered yet: no answer yet")
            );
            let token = spawn_schedule(&schedule, &first);
            let waiting = || {
                health
                    .ready()
                    .reason()
                    .starts_with("ready: waiting for the slot at ")
            };
            until(MINUTE, waiting).await;
            let waiting_for = health
                .ready()
                .reason()
                .replace("ready: ", "not the leader: ");
            assert_eq!(health.ready_to_lead(), Verdict::fail(waiting_for));
            until(MINUTE, || health.ready_to_lead().passes()).await;
            until(MINUTE, || first.started()).await;
            let running = health.ready_to_lead();
            assert!(
                running.reason().starts_with("ready: leader of term "),
                "{running}"
            );
            assert_eq!(health.ready(), running);
            assert!(health.live().passes());
            first.open();
            until(MINUTE, waiting).await;

            // Looks that fail, at the next slot, for longer than the bound.
            store.set_unavailable(true);
            until(MINUTE, || !health.ready().passes()).await;
            let reason = health.ready();
            assert!(
                reason.reason().starts_with("storage has not answered for "),
                "{reason}"
            );
            assert!(reason.reason().contains("unavailable"), "{reason}");
            assert!(health.live().passes());
            store.set_unavailable(false);
            until(MINUTE, waiting).await;

            token.cancel();
            until(MINUTE, || {
                health.ready() == Verdict::fail("not running the schedule")
            })
            .await;
            assert!(health.live().passes());
        }

        /// A slot due while a holder that is not one of the schedule's
        /// hosts holds the lease: not ready, naming it; live.
        #[tokio::test(start_paused = true)]
        async fn a_schedule_whose_lease_a_stranger_holds_is_unready_naming_it() {
            use crate::store::{LeaseId, LeaseStore, StampOptions};
            let store = MemoryLeaseStore::new("c/schedule");
            let (schedule, gate) = schedule(&store, "*/10 * * * * *");
            let health = schedule.health();
            let stranger = LeaseId::new();
            store.acquire(stranger, MINUTE / 4).await.unwrap();
            store
                .stamp(stranger, "runner", &StampOptions::new())
                .await
                .unwrap();
            let token = spawn_schedule(&schedule, &gate);
            until(MINUTE, || health.ready().reason().contains("runner")).await;
            let ready = health.ready();
            assert!(!ready.passes(), "{ready}");
            assert!(
                ready.reason().contains("not one of the schedule's hosts"),
                "{ready}"
            );
            assert!(health.live().passes());
            token.cancel();
        }

        #[tokio::test(start_paused = true)]
        async fn a_schedule_sleeping_for_a_long_time_until_its_slot_stays_live_and_ready() {
            let store = MemoryLeaseStore::new("c/schedule");
            // Once a year: the next slot is weeks away.
            let (schedule, first) = schedule(&store, "0 0 0 1 1 *");
            let health = schedule.health();
            let token = spawn_schedule(&schedule, &first);
            until(MINUTE, || health.ready().passes()).await;
            let waiting = health.ready();
            assert!(
                waiting
                    .reason()
                    .starts_with("ready: waiting for the slot at ")
                    && waiting.reason().ends_with("-01-01T00:00:00Z"),
                "{waiting}"
            );
            for _ in 0..10 {
                advance(health.quiet_limit()).await;
                assert_eq!(health.ready(), waiting);
                assert_eq!(health.live(), Verdict::pass("ok"));
            }
            token.cancel();
        }
    }
}
