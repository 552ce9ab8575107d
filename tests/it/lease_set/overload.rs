//! A lease set on Azurite behind a proxy that makes every answer slow, so
//! that its client's slots carry fewer renewals a second than it owns
//! partitions to renew: it sheds partitions, never its membership.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use blob_mutex::azure::BlobLeaseSetStore;
use blob_mutex::{BlobLeaseSet, LeaseSetOptions};
use blob_mutex_testkit::azurite;
use blob_mutex_testkit::proxy::{Direction, Mode, Proxy};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Partitions of the set: 200 an instance, renewed every 10 s, is 20
/// renewals a second; 128 slots at `LATENCY` carry 16. (Fewer partitions
/// at a longer latency overload the slots alike, at half the CPU of 800 at
/// 4 s.)
const PARTITIONS: usize = 400;
/// Every answer takes this long once storage slows down (through the
/// proxy: Azurite's own time comes on top).
const LATENCY: Duration = Duration::from_secs(8);
/// Longer than `LATENCY` by more than a loaded machine's Azurite takes, so
/// that a request that got a slot is answered in time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(14);
/// The set's lease.
const LEASE: Duration = Duration::from_secs(30);
/// How long storage stays slow.
const WINDOW: Duration = Duration::from_secs(90);
/// The longest a member renewal may spend on the client's side before the
/// proxy receives it (its slot, the SDK, the HTTP client's pool, the
/// runtime).
const CLIENT_HOLD: Duration = Duration::from_secs(5);

struct Instance {
    proxy: Proxy,
    owned: watch::Receiver<BTreeMap<String, u64>>,
    run: JoinHandle<blob_mutex::Result<()>>,
}

fn start(port: u16, container: &str, holder: &str, token: &CancellationToken) -> Instance {
    let proxy = Proxy::start(port);
    let store = BlobLeaseSetStore::new(&proxy.settings(container, "set"))
        .unwrap()
        .with_request_timeout(REQUEST_TIMEOUT);
    let mutex = LeaseSetOptions::default()
        .mutex()
        .clone()
        .with_holder(holder.to_owned())
        .with_request_timeout(REQUEST_TIMEOUT);
    let options = LeaseSetOptions::default().with_mutex(mutex);
    let partitions: Vec<String> = (0..PARTITIONS).map(|i| format!("p{i:03}")).collect();
    let set = BlobLeaseSet::with_store(store, partitions, options, |ctx| async move {
        ctx.cancelled().await;
        Ok::<(), blob_mutex::Error>(())
    })
    .unwrap();
    let owned = set.watch();
    let token = token.clone();
    let run = tokio::spawn(async move { set.run(token).await });
    Instance { proxy, owned, run }
}

/// A member request as the client recorded it (the crate's trace records,
/// target `blob_mutex::member_requests`): when it asked for its slot, took
/// it, and was answered.
#[derive(Clone, Debug)]
struct Recorded {
    blob: String,
    op: String,
    asked: Instant,
    taken: Instant,
    answered: Option<Instant>,
}

/// Every member request the client recorded, in the order asked.
static RECORDED: Mutex<Vec<Recorded>> = Mutex::new(Vec::new());

/// Keeps the crate's member request records with this process's clock,
/// beside the kit's log lines.
struct Recorder;

#[derive(Default)]
struct Fields {
    op: String,
    blob: String,
    waited_us: u64,
    took_us: u64,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "op" => value.clone_into(&mut self.op),
            "blob" => value.clone_into(&mut self.blob),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        match field.name() {
            "waited_us" => self.waited_us = value,
            "took_us" => self.took_us = value,
            _ => {}
        }
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "blob_mutex::member_requests" {
            return;
        }
        let now = Instant::now();
        let mut f = Fields::default();
        event.record(&mut f);
        let mut all = RECORDED.lock().unwrap();
        if event.metadata().fields().field("waited_us").is_some() {
            let waited = Duration::from_micros(f.waited_us);
            all.push(Recorded {
                blob: f.blob,
                op: f.op,
                asked: now.checked_sub(waited).unwrap_or(now),
                taken: now,
                answered: None,
            });
        } else if let Some(r) = all
            .iter_mut()
            .rev()
            .find(|r| r.blob == f.blob && r.op == f.op && r.answered.is_none())
        {
            r.answered = Some(now);
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "blob_mutex=debug".into());
    let members = tracing_subscriber::filter::Targets::new()
        .with_target("blob_mutex::member_requests", tracing::Level::TRACE);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(filter),
        )
        .with(Recorder.with_filter(members))
        .try_init();
}

/// Renewals that reached storage after the lease they renew had expired:
/// more than the lease after the last request for it that storage answered.
fn late_renewals(proxy: &Proxy) -> usize {
    let mut answered = HashMap::new();
    let mut late = 0;
    for r in proxy.log() {
        let (Some(lease), Some(at)) = (r.lease(), r.forwarded_at) else {
            continue;
        };
        if r.is("renew") && answered.get(lease).is_some_and(|t| at > *t + LEASE) {
            late += 1;
        }
        if (r.is("renew") || r.is("acquire")) && r.answered_at.is_some() {
            answered.insert(lease.to_owned(), at);
        }
    }
    late
}

/// What the proxy saw of a member lease's requests once storage slowed
/// down: those sent since, and those still in flight then (a renewal
/// storage had not answered when the slowdown began counts as one of the
/// window's: its time out ends a term in the window).
struct MemberLog {
    requests: Vec<blob_mutex_testkit::proxy::Request>,
    slowed: Instant,
}

impl MemberLog {
    fn of(proxy: &Proxy, slowed: Instant) -> MemberLog {
        let requests = proxy
            .log()
            .into_iter()
            .filter(|r| r.lease_action.is_some() && r.target.contains("/members/"))
            .filter(|r| {
                let ended = r.answered_at.or(r.given_up_at);
                r.at >= slowed || ended.is_none_or(|end| end >= slowed)
            })
            .collect();
        MemberLog { requests, slowed }
    }

    /// Acquires of the membership after storage slowed down: a membership
    /// term ended.
    fn acquires(&self) -> usize {
        self.requests.iter().filter(|r| r.is("acquire")).count()
    }

    /// When the last renewal storage answered in time was sent.
    fn last_renewed(&self) -> Option<Instant> {
        self.requests
            .iter()
            .filter(|r| r.is("renew") && r.status == Some(200))
            .map(|r| r.at)
            .max()
    }

    /// The longest storage itself took over a renewal: from the proxy's
    /// forwarding to storage's answer, or at least to the client's hang-up
    /// when storage never answered.
    fn slowest_storage(&self) -> Duration {
        self.requests
            .iter()
            .filter(|r| r.is("renew"))
            .filter_map(|r| {
                let end = r.answered_at.or(r.given_up_at)?;
                Some(end.saturating_duration_since(r.forwarded_at?))
            })
            .max()
            .unwrap_or_default()
    }

    /// Whether storage itself took a member renewal past the request
    /// timeout, with the proxy's `LATENCY` on top (Azurite starved on a
    /// loaded machine). The promise is the client's: that the membership
    /// neither waits behind partitions nor gives up on an answer that could
    /// still come in time.
    fn storage_too_slow(&self) -> bool {
        self.slowest_storage() + LATENCY > REQUEST_TIMEOUT
    }
}

/// Where the member renewals of an instance spent their time on the
/// client's side of the wire, from the client's records and the proxy's
/// log together (one clock: this process's).
struct ClientSide {
    holder: &'static str,
    asked: usize,
    seen: usize,
    /// The longest silence between two renewals the engine asked for, and
    /// between two the proxy received.
    gap_asked: Duration,
    gap_seen: Duration,
    /// The longest wait for a slot (the crate's own limit).
    slot: Duration,
    /// The longest from the slot to the proxy's receipt of the request
    /// head: the SDK, the HTTP client's pool, a connect, the runtime.
    to_wire: Duration,
    /// The longest from the proxy's delivery of an answer to the client's
    /// record of it.
    from_wire: Duration,
}

impl ClientSide {
    fn of(proxy: &Proxy, holder: &'static str) -> ClientSide {
        let member = format!("/members/{holder}");
        let client: Vec<Recorded> = RECORDED
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.op == "renew" && r.blob.ends_with(&member))
            .cloned()
            .collect();
        let seen: Vec<_> = proxy
            .log()
            .into_iter()
            .filter(|r| {
                r.is("renew")
                    && r.target
                        .split('?')
                        .next()
                        .is_some_and(|t| t.ends_with(&member))
            })
            .collect();
        let gap = |at: Vec<Instant>| {
            at.windows(2)
                .map(|w| w[1].saturating_duration_since(w[0]))
                .max()
                .unwrap_or_default()
        };
        let (mut to_wire, mut from_wire) = (Duration::ZERO, Duration::ZERO);
        for r in &seen {
            // The proxy's receipt against the latest slot taken before it.
            if let Some(c) = client.iter().rev().find(|c| c.taken <= r.at) {
                to_wire = to_wire.max(r.at.saturating_duration_since(c.taken));
                if let (Some(answered), Some(storage)) = (c.answered, r.answered_at) {
                    from_wire =
                        from_wire.max(answered.saturating_duration_since(storage + LATENCY));
                }
            }
        }
        ClientSide {
            holder,
            asked: client.len(),
            seen: seen.len(),
            gap_asked: gap(client.iter().map(|r| r.asked).collect()),
            gap_seen: gap(seen.iter().map(|r| r.at).collect()),
            slot: client
                .iter()
                .map(|r| r.taken.saturating_duration_since(r.asked))
                .max()
                .unwrap_or_default(),
            to_wire,
            from_wire,
        }
    }
}

impl std::fmt::Display for ClientSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} member renewals asked, {} received by the proxy; longest between two asked \
             {:.2?}, between two received {:.2?}; longest wait for a slot {:.2?}, from the slot \
             to the proxy {:.2?}, from the proxy's delivery of the answer to the client {:.2?}",
            self.holder,
            self.asked,
            self.seen,
            self.gap_asked,
            self.gap_seen,
            self.slot,
            self.to_wire,
            self.from_wire
        )
    }
}

impl std::fmt::Display for MemberLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "member requests in flight at the slowdown or after:")?;
        for r in &self.requests {
            let storage = match (r.forwarded_at, r.answered_at, r.given_up_at) {
                (Some(f), Some(a), _) => format!(
                    "storage {:?}, {:?}",
                    a.saturating_duration_since(f),
                    r.status
                ),
                (Some(f), None, Some(g)) => {
                    format!("given up after {:?}", g.saturating_duration_since(f))
                }
                _ => format!("{:?}", r.fate),
            };
            let action = r.lease_action.as_deref().unwrap_or_default();
            let sent = match r.at.checked_duration_since(self.slowed) {
                Some(after) => format!("+{after:.1?}"),
                None => format!("-{:.1?}", self.slowed.saturating_duration_since(r.at)),
            };
            write!(f, " [{action} {sent}: {storage}]")?;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn on_azurite_a_set_whose_renewals_outrun_its_slots_keeps_its_membership() {
    init_tracing();
    // An Azurite of its own: the 800 partitions' set-up and renewals would
    // otherwise queue on the one event loop every other test's storage
    // shares (seen: the set not balanced within 180 s beside a full row),
    // and slow those tests in turn.
    let own = azurite::Azurite::start();
    let container = azurite::unique_container("overload");
    let token = CancellationToken::new();
    let instances = [
        start(own.port, &container, "a", &token),
        start(own.port, &container, "b", &token),
    ];
    let owned = |i: &Instance| i.owned.borrow().len();
    blob_mutex_testkit::wait_for("the set balanced", Duration::from_secs(180), || async {
        instances
            .iter()
            .all(|i| owned(i) == PARTITIONS / 2)
            .then_some(())
    })
    .await;
    for instance in &instances {
        instance
            .proxy
            .set(Direction::ToClient, Mode::Delay(LATENCY));
    }
    let slowed = Instant::now();
    let (mut fewest, until) = (PARTITIONS, tokio::time::Instant::now() + WINDOW);
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (a, b) = (instances[0].owned.borrow(), instances[1].owned.borrow());
        let both: Vec<_> = a.keys().filter(|p| b.contains_key(*p)).collect();
        assert!(both.is_empty(), "owned by both instances at once: {both:?}");
        assert!(
            !instances[0].run.is_finished() && !instances[1].run.is_finished(),
            "a set ended its run"
        );
        fewest = fewest.min(a.len() + b.len());
    }
    for (instance, holder) in instances.iter().zip(["a", "b"]) {
        let client = ClientSide::of(&instance.proxy, holder);
        println!("{client}");
        assert!(
            client.asked > 0,
            "no record of {holder}'s member renewals came (target blob_mutex::member_requests)"
        );
        // A stall between the engine and the wire as long as this would
        // take a quarter of the membership's 20 s from its last renewal
        // sent to its stop point (seen: at most 0.12 s).
        assert!(
            client.slot + client.to_wire < CLIENT_HOLD,
            "a member renewal was held on the client's side ({client})"
        );
    }
    for (instance, holder) in instances.iter().zip(["a", "b"]) {
        let seen = MemberLog::of(&instance.proxy, slowed);
        if seen.storage_too_slow() {
            // Storage itself, not the client, took a membership renewal
            // past the timeout: nothing to judge the client by.
            println!(
                "{holder}: storage answered too slowly to judge (slowest {:?}; {seen})",
                seen.slowest_storage()
            );
        } else {
            assert_eq!(
                seen.acquires(),
                0,
                "{holder} acquired its membership again while storage was slow: a membership \
                 term ended (fewest owned {fewest} of {PARTITIONS}; {seen})"
            );
            // Still renewing at the end: well inside the membership's stop
            // point (a third of its lease) before the window closed.
            let renewed = seen
                .last_renewed()
                .map(|t| t.saturating_duration_since(slowed));
            assert!(
                renewed.is_some_and(|t| t + LEASE / 3 >= WINDOW),
                "{holder}'s last member renewal was at {renewed:?} of {WINDOW:?} ({seen})"
            );
        }
        assert_eq!(
            late_renewals(&instance.proxy),
            0,
            "{holder} renewed after expiry"
        );
    }
    assert!(
        fewest < PARTITIONS,
        "no partition was shed: the slowdown did not overload the set"
    );
    let now: usize = instances.iter().map(owned).sum();
    println!("on Azurite at {LATENCY:?} for {WINDOW:?}: fewest owned {fewest} of {PARTITIONS}, {now} at the end");
    for instance in &instances {
        instance.proxy.set(Direction::ToClient, Mode::Pass);
    }
    token.cancel();
    for instance in instances {
        instance.run.await.unwrap().unwrap();
    }
}
