//! Accepting the endpoint's connections: every connection is accepted, at
//! most [`connection_cap`] are kept, and at the cap the one that has done
//! least for the longest (the oldest still sending its request) is dropped
//! to make room, once it has had its [`FAIR_CHANCE`] to send its request.
//! Clients that open connections and send nothing can then delay a probe
//! by no more than about [`FAIR_CHANCE`] for each cap's worth of idle
//! connects queued ahead of it, instead of filling every slot for seconds;
//! and a probe that comes inside a burst is never dropped before it was
//! read.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nix::sys::resource::{getrlimit, Resource};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tracing::{debug, warn};

/// The most connections kept at a time.
const MAX_CONNECTIONS: usize = 64;
/// How long a connection still sending its request is kept, from the
/// moment its answer first runs (not its accept: a loaded runtime may
/// accept a whole burst before it runs any answer), before it may be
/// dropped for a new one: its fair chance to send the request. A client sends it with its connect, or right after (a
/// probe's request is in by the time a burst ahead of it is accepted);
/// one that has not sent it when the cap is reached again is idle. At the
/// cap, 64 idle connects go every 50 ms: 300 queued ahead of a probe delay
/// it by a quarter of a second.
pub(super) const FAIR_CHANCE: Duration = Duration::from_millis(50);
/// The first and the longest wait after a failed accept.
const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The most connections kept at a time, given the soft limit on open
/// files: [`MAX_CONNECTIONS`], or a quarter of the limit when that is lower
/// (at least one).
pub(super) fn connection_cap(open_files: Option<u64>) -> usize {
    open_files.map_or(MAX_CONNECTIONS, |limit| {
        usize::try_from(limit / 4)
            .map_or(MAX_CONNECTIONS, |quarter| quarter.clamp(1, MAX_CONNECTIONS))
    })
}

/// The soft limit on open files (`RLIMIT_NOFILE`), unless unlimited.
pub(super) fn open_files_limit() -> Option<u64> {
    getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
        .filter(|soft| *soft != nix::sys::resource::RLIM_INFINITY)
}

/// The wait after the `failures`-th accept in a row failed: 10 ms,
/// doubling, at most 1 s.
fn accept_backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    ACCEPT_BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(ACCEPT_BACKOFF_MAX)
}

/// Where connections come from: the listener, or a test's stand-in.
pub(super) trait Incoming {
    type Stream;

    /// The next connection.
    fn next(&self) -> impl Future<Output = io::Result<Self::Stream>>;
}

impl Incoming for TcpListener {
    type Stream = TcpStream;

    async fn next(&self) -> io::Result<TcpStream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// How far a connection's exchange has come, as its answer tells the
/// accept loop; a connection at the cap is dropped from the lowest stage
/// first, the oldest first within a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(super) enum Stage {
    /// Its request is not all in yet.
    Reading = 0,
    /// Answered; waiting for the client to close its end.
    Draining = 1,
    /// Its request is in, and it is being answered.
    Answering = 2,
}

/// A connection's stage, shared between its answer and the accept loop.
#[derive(Clone)]
pub(super) struct Progress(Arc<AtomicU8>);

impl Progress {
    pub(super) fn new() -> Progress {
        Progress(Arc::new(AtomicU8::new(Stage::Reading as u8)))
    }

    /// The connection has come to `stage`.
    pub(super) fn set(&self, stage: Stage) {
        self.0.store(stage as u8, Ordering::Relaxed);
    }

    fn get(&self) -> Stage {
        match self.0.load(Ordering::Relaxed) {
            0 => Stage::Reading,
            1 => Stage::Draining,
            _ => Stage::Answering,
        }
    }
}

/// A connection kept, in the order they were accepted.
struct Kept {
    progress: Progress,
    task: AbortHandle,
    /// When its answer first ran: its fair chance counts from then, not
    /// from the accept, since a loaded runtime may accept a whole burst
    /// before it runs any answer.
    since: Arc<OnceLock<Instant>>,
}

impl Kept {
    /// Whether it may be dropped for a new connection at `now`: it has sent
    /// its request, or its answer has run and had its [`FAIR_CHANCE`] to
    /// read it.
    fn droppable(&self, now: Instant) -> bool {
        self.progress.get() != Stage::Reading
            || self
                .since
                .get()
                .is_some_and(|since| now >= *since + FAIR_CHANCE)
    }
}

/// The connection to drop for a new one at `now`: the oldest of the lowest
/// stage among those that may be dropped; `None` when every one is still
/// within its fair chance to send its request.
fn victim(kept: &[Kept], now: Instant) -> Option<usize> {
    kept.iter()
        .enumerate()
        .filter(|(_, k)| k.droppable(now))
        .min_by_key(|(i, k)| (k.progress.get(), *i))
        .map(|(i, _)| i)
}

/// Makes room for one more connection under `cap`: drops the connection
/// [`victim`] names, as often as needed, and while none may be dropped
/// waits until one may be or an answer ends. Whether it dropped any.
async fn make_room(kept: &mut Vec<Kept>, answering: &mut JoinSet<()>, cap: usize) -> bool {
    let mut dropped_one = false;
    loop {
        kept.retain(|k| !k.task.is_finished());
        if kept.len() < cap.max(1) {
            return dropped_one;
        }
        if let Some(i) = victim(kept, Instant::now()) {
            let dropped = kept.remove(i);
            debug!(stage = ?dropped.progress.get(), cap, "the metrics endpoint is at its connection cap; dropped the connection that did least");
            dropped.task.abort();
            dropped_one = true;
            continue;
        }
        // An answer that has not run yet gets its turn first.
        if kept.iter().any(|k| k.since.get().is_none()) {
            tokio::task::yield_now().await;
            continue;
        }
        // Every kept connection is still within its fair chance: the
        // oldest has had it first, unless an answer ends before.
        let first = kept
            .iter()
            .filter_map(|k| k.since.get())
            .min()
            .map(|s| *s + FAIR_CHANCE);
        let Some(first) = first else { continue };
        tokio::select! {
            () = tokio::time::sleep_until(first) => {}
            _ = answering.join_next() => {}
        }
    }
}

/// Accepts every connection and `answer`s each, keeping at most `cap`:
/// at the cap, the oldest connection of the lowest [`Stage`] is dropped
/// for the new one, once it has had its [`FAIR_CHANCE`] to send its
/// request (until then, the new one waits). Dropping it aborts the answers
/// under way.
pub(super) async fn accept<I, F, Fut>(incoming: &I, cap: usize, answer: F)
where
    I: Incoming,
    F: Fn(I::Stream, Progress) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut answering = JoinSet::new();
    let mut kept: Vec<Kept> = Vec::new();
    let mut failures: u32 = 0;
    loop {
        match incoming.next().await {
            Ok(stream) => {
                failures = 0;
                let dropped_one = make_room(&mut kept, &mut answering, cap).await;
                let progress = Progress::new();
                let since = Arc::new(OnceLock::new());
                let answered = answer(stream, progress.clone());
                let task = answering.spawn({
                    let since = since.clone();
                    async move {
                        let _ = since.set(Instant::now());
                        answered.await;
                    }
                });
                kept.push(Kept {
                    progress,
                    task,
                    since,
                });
                if dropped_one {
                    // The aborted answer closes its connection once it runs
                    // again: let it, before the next accept takes another
                    // descriptor (the runtime has one thread).
                    tokio::task::yield_now().await;
                }
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = accept_backoff(failures);
                if failures == 1 {
                    warn!(error = %e, retry_in = ?wait, "the metrics endpoint cannot accept connections; backing off");
                } else {
                    debug!(error = %e, failures, retry_in = ?wait, "accept failed again");
                }
                tokio::time::sleep(wait).await;
            }
        }
        while answering.try_join_next().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn the_connection_cap_leaves_most_descriptors_to_storage() {
        assert_eq!(connection_cap(None), 64);
        assert_eq!(connection_cap(Some(1_048_576)), 64);
        assert_eq!(connection_cap(Some(1024)), 64);
        assert_eq!(connection_cap(Some(64)), 16);
        assert_eq!(connection_cap(Some(3)), 1);
    }

    #[test]
    fn failed_accepts_back_off_from_10ms_doubling_to_1s() {
        let waits: Vec<u128> = (1..=9).map(|n| accept_backoff(n).as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(accept_backoff(u32::MAX), ACCEPT_BACKOFF_MAX);
    }

    /// Connections that never come: every accept fails as when the process
    /// is out of descriptors.
    struct OutOfFiles(AtomicUsize);

    impl Incoming for OutOfFiles {
        type Stream = TcpStream;

        async fn next(&self) -> io::Result<TcpStream> {
            let calls = self.0.fetch_add(1, Ordering::SeqCst);
            assert!(calls < 1000, "accept retried in a hot loop");
            Err(io::Error::from_raw_os_error(nix::libc::EMFILE))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn failed_accepts_are_retried_after_a_back_off_not_at_once() {
        let incoming = OutOfFiles(AtomicUsize::new(0));
        let answer = |_: TcpStream, _: Progress| async {};
        let serving = tokio::time::timeout(Duration::from_secs(10), accept(&incoming, 4, answer));
        assert!(serving.await.is_err());
        // 10 ms doubling to 1 s: 8 attempts in the first 1.27 s, then one a second.
        let calls = incoming.0.load(Ordering::SeqCst);
        assert!((15..=18).contains(&calls), "{calls} attempts in 10 s");
    }

    #[tokio::test]
    async fn the_connection_dropped_at_the_cap_is_the_oldest_of_the_lowest_stage() {
        use Stage::{Answering, Draining, Reading};
        let now = Instant::now();
        let kept = |stages: &[Stage]| -> Vec<Kept> {
            stages
                .iter()
                .map(|stage| {
                    let progress = Progress::new();
                    progress.set(*stage);
                    let task = tokio::spawn(std::future::pending::<()>()).abort_handle();
                    Kept {
                        progress,
                        task,
                        since: Arc::new(OnceLock::from(now)),
                    }
                })
                .collect()
        };
        let later = now + FAIR_CHANCE;
        assert_eq!(
            victim(&kept(&[Answering, Reading, Reading]), later),
            Some(1)
        );
        assert_eq!(
            victim(&kept(&[Answering, Draining, Draining]), later),
            Some(1)
        );
        assert_eq!(
            victim(&kept(&[Draining, Answering, Reading]), later),
            Some(2)
        );
        assert_eq!(victim(&kept(&[Answering, Answering]), later), Some(0));
        assert_eq!(victim(&[], later), None);
        // Within its fair chance, a connection still sending its request
        // is not dropped, unless one that sent its own may be.
        assert_eq!(victim(&kept(&[Reading, Reading]), now), None);
        assert_eq!(victim(&kept(&[Reading, Answering]), now), Some(1));
        // One whose answer has not run yet has had no chance at all.
        let mut unread = kept(&[Reading]);
        unread[0].since = Arc::new(OnceLock::new());
        assert_eq!(victim(&unread, later + FAIR_CHANCE), None);
    }

    /// An answer that reads once and answers a request at once; an idle
    /// connection stays until the client closes it. Counts the answers.
    fn answering(
        count: &Arc<AtomicUsize>,
    ) -> impl Fn(TcpStream, Progress) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        let count = count.clone();
        move |mut stream: TcpStream, progress: Progress| {
            let count = count.clone();
            Box::pin(async move {
                let mut request = [0u8; 16];
                if matches!(stream.read(&mut request).await, Ok(n) if n > 0) {
                    progress.set(Stage::Answering);
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.write_all(b"answer").await;
                    let _ = stream.shutdown().await;
                }
            })
        }
    }

    /// A burst of `before` idle connects, a probe, and `after` more idle
    /// connects, all queued before the endpoint accepts any (as when they
    /// come at once): the probe is answered, whatever its place in the
    /// burst, and however many are queued behind it. The listen queue holds
    /// 128 connects: a burst stays under that, or the connects past it
    /// would wait for the accepts.
    async fn a_probe_inside_a_burst(before: usize, after: usize) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut idle = Vec::new();
        for _ in 0..before {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let mut probe = TcpStream::connect(addr).await.unwrap();
        probe.write_all(b"GET").await.unwrap();
        for _ in 0..after {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let answered = Arc::new(AtomicUsize::new(0));
        let answer = answering(&answered);
        let serving = tokio::spawn(async move { accept(&listener, MAX_CONNECTIONS, answer).await });
        let mut reply = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(1), probe.read_to_end(&mut reply)).await;
        serving.abort();
        assert!(
            matches!(read, Ok(Ok(_))) && reply == b"answer",
            "the probe after {before} idle connects and before {after}: {read:?}, {:?}",
            String::from_utf8_lossy(&reply)
        );
    }

    #[tokio::test]
    async fn a_probe_first_in_a_burst_of_more_than_the_cap_is_answered() {
        a_probe_inside_a_burst(0, 100).await;
    }

    #[tokio::test]
    async fn a_probe_in_the_middle_of_a_burst_of_more_than_the_cap_is_answered() {
        a_probe_inside_a_burst(MAX_CONNECTIONS / 2, 80).await;
    }

    #[tokio::test]
    async fn a_probe_behind_more_idle_connects_than_the_cap_is_answered() {
        a_probe_inside_a_burst(MAX_CONNECTIONS + 10, 40).await;
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_idle_connection_is_closed_for_a_new_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answered = Arc::new(AtomicUsize::new(0));
        let answer = answering(&answered);
        let serving = tokio::spawn(async move { accept(&listener, 2, answer).await });
        let mut oldest = TcpStream::connect(addr).await.unwrap();
        let mut younger = TcpStream::connect(addr).await.unwrap();
        let mut third = TcpStream::connect(addr).await.unwrap();
        third.write_all(b"GET").await.unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut reply))
            .await
            .expect("answered at the cap")
            .unwrap();
        assert_eq!(reply, b"answer");
        // The oldest idle connection was closed for it; the younger one is
        // still served.
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), oldest.read_to_end(&mut rest))
            .await
            .expect("the oldest idle connection closed")
            .unwrap();
        assert!(rest.is_empty());
        younger.write_all(b"GET").await.unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), younger.read_to_end(&mut reply))
            .await
            .expect("the younger connection answered")
            .unwrap();
        assert_eq!(reply, b"answer");
        assert_eq!(answered.load(Ordering::SeqCst), 2);
        serving.abort();
    }
}
