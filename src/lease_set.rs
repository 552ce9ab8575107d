//! Many partitions shared among instances, each worked on by exactly one
//! instance at a time, with the guarantees of the mutex for each.
//!
//! Beside it in this folder: the set's options (`options`), the balancer's
//! plan (`balance`), when a cycle lists the whole set (`cadence`), what ends
//! a run and which partitions are skipped (`fate`), what it tells of its
//! partition leases when its membership ends (`leaving`), and the tests of
//! the names a set owns on the in-memory store (`names_tests`).
//!
//! # How it works
//!
//! - **Membership.** Each instance holds a lease on its own member blob,
//!   `<set>/members/<holder>`, with the election engine (the same one the
//!   mutex runs). While it holds it, it is visible to the others; when it
//!   crashes, the server expires that lease and it is gone, with no clock
//!   compared between hosts. The membership term's task is the balancer, so
//!   losing membership stops everything this instance runs in the set.
//! - **Balancing.** Every `balance_interval` (jittered), one List Blobs call
//!   with metadata reads the live members, and the whole set (which
//!   partitions are leased, by whom) when a full listing is due: the first
//!   cycle of a membership term, a cycle whose members differ from the last
//!   full listing's (it lists the whole set at once, a second call), every
//!   cycle while the last full listing left the set unsettled or this
//!   instance's claims changed since, and every fourth cycle anyway (see
//!   `cadence`). [`Strategy`] decides, from
//!   each full listing, what to claim and what to give up.
//! - **Partitions.** Each claimed partition is one term of the election
//!   engine on `<set>/partitions/<name>`: one acquire attempt and, if it
//!   succeeds, epoch stamp, task, renewals, drain-then-release, exactly as
//!   the mutex does. A held lease is never broken or stolen: a newcomer gets
//!   its share because over-loaded owners give partitions up. The partition
//!   terms are sub-tasks of the membership term.
//! - **Cost.** All leases of a set share one HTTP client and its pool of
//!   kept-alive connections. Claims of one cycle are paced 5 ms apart (at
//!   most 200 acquires a second), at most 16 acquires in flight at once (so
//!   that slow storage makes claims wait instead of piling up requests in
//!   front of the renewals; the member lease's requests take slots of their
//!   own, so partitions that cannot be renewed in time are shed, never the
//!   membership), and each partition term renews the first time
//!   at a random point of the second half of the renew interval, so that
//!   renewals are spread, not sent in bursts. Requests per hour for one
//!   instance owning `k` of `M` partitions, with defaults (a 30 s lease
//!   renewed every 10 s, a 5 s cycle): `3600/10` renewals of each owned
//!   partition and of the member blob (`360 × (k + 1)`), plus one List
//!   Blobs call per cycle (`720`; one more in a cycle whose members
//!   changed), plus the acquire, stamp (two requests) and release of each
//!   move. What a listing reads is what grows with the set: in a settled
//!   set (nobody joining or leaving, every partition owned by a live member
//!   at its share) a cycle lists the `N` member blobs, and the whole set
//!   (`M + N` blobs, one request per 5 000) at most every fourth cycle, so
//!   an instance lists about `720 × (N + M / 4)` blobs an hour instead of
//!   `720 × (N + M)`; while the set moves, every cycle lists the whole set,
//!   as before.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{broadcast, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::azure::settings::BlobSettings;
use crate::azure::BlobLeaseSetStore;
use crate::backoff::Jitter;
use crate::bounded::bounded;
use crate::ending::{StopReason, TermReport};
use crate::engine::leader::Leader;
use crate::engine::leadership::{LeaderContext, Leadership};
use crate::engine::lingering::Lingering;
use crate::engine::metrics::Metrics;
use crate::engine::vitals::Vitals;
use crate::engine::{box_task, Engine, Observer};
use crate::error::{BoxError, Chain, Error, Result};
use crate::lease_set::balance::{free, plan, FreeSince, Plan, View, ORPHAN_CYCLES};
use crate::lease_set::cadence::{unsettled, whole_set_due, Cycle, LastFull, Unsettled};
use crate::mutex::BlobDistributedMutex;
use crate::options::{default_holder, MutexOptions, ABORT_WAIT, STOP_SLACK};
use crate::store::names::{self, member_segment, MEMBERS, PARTITIONS};
use crate::store::{check_request_timeout, LeaseInfo, LeaseSetStore, LeaseState, LeaseStore};

pub(crate) mod balance;
mod cadence;
mod fate;
mod leaving;
mod options;

pub use self::options::LeaseSetOptions;
#[cfg(test)]
mod balance_tests;
#[cfg(all(test, feature = "testing"))]
mod leaving_tests;
#[cfg(all(test, feature = "testing"))]
mod names_tests;
#[cfg(all(test, feature = "testing"))]
mod overload_tests;
#[cfg(all(test, feature = "testing"))]
mod reports_tests;

use fate::{is_partition_fault, Fate};
use leaving::Leaving;

/// The time between two claims of one cycle: a cold start with many
/// partitions sends at most 200 acquires a second.
const CLAIM_PACE: Duration = Duration::from_millis(5);
/// The most claims of one instance in flight at once (from the acquire
/// until the lease is held, or the attempt ends without it): when storage
/// slows down, claims wait here instead of piling up requests (and
/// connections) in front of the renewals of the member lease and of the
/// partitions already owned. With storage answering in a few milliseconds
/// it never binds: the pace does. The stamp after the acquire holds no
/// slot: a blob made anew waits there a second or so for storage's clock,
/// sending one read, and a cold start on new blobs would otherwise be
/// paced by that wait (16 claims a second or so) instead of by the pace.
const CLAIMS_IN_FLIGHT: usize = 16;

/// What a partition's task is given: everything a [`LeaderContext`] gives
/// (through `Deref`: epoch, cancellation, heartbeat, sub-tasks, deadline)
/// plus the partition's name.
#[derive(Clone, Debug)]
pub struct PartitionContext {
    leader: LeaderContext,
    partition: Arc<str>,
}

impl PartitionContext {
    /// The partition this term owns.
    #[must_use]
    pub fn partition(&self) -> &str {
        &self.partition
    }
}

impl Deref for PartitionContext {
    type Target = LeaderContext;

    fn deref(&self) -> &LeaderContext {
        &self.leader
    }
}

/// How one partition's term ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionReport {
    /// The partition.
    pub partition: String,
    /// How its term ended.
    pub report: TermReport,
}

type TaskFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
type PartitionFn = dyn Fn(PartitionContext) -> TaskFuture + Send + Sync;

/// Partitions shared among the instances that run the same set: each
/// partition's task runs on at most one instance at a time, and the
/// partitions are spread over the live instances (see the guide's
/// [partitions](crate::guide::partitions) chapter).
///
/// # Names a set owns
///
/// A set named `<set>` (the blob name of its settings) keeps its leases in
/// its container as `<set>/members/<holder>`, one per live instance, and
/// `<set>/partitions/<name>`. Those names are its own, by construction:
///
/// - No lease blob and no set may be named inside them: settings refuse a
///   blob name with a path segment `members` or `partitions` after its
///   first ([`Error::InvalidOption`], field `blob`), as they refuse one
///   ending in `.candidates`; a set's holder may not contain `/`, so that
///   its member blob is one segment under `members/`.
/// - A set counts as a live member only a leased blob of the exact shape
///   `<set>/members/<one segment>` that carries the metadata
///   [`MEMBER_KEY`](crate::azure::metadata::MEMBER_KEY), which only a set's member lease
///   writes (when it creates its blob and at every stamp), or that carries
///   none but whose `holder` is its own segment, as the members of versions
///   before the marker do: while a rolling upgrade goes on, the instances
///   that still run an earlier version are counted. It collects only the
///   marked ones: a blob that someone else wrote there is never deleted,
///   so that its epoch never starts over. Member blobs left unmarked by an
///   earlier version are not collected either: told once at info, they can
///   be deleted by hand once unleased.
pub struct BlobLeaseSet<S: LeaseSetStore = BlobLeaseSetStore> {
    shared: Arc<Shared<S>>,
    options: LeaseSetOptions,
}

/// How many partition reports a slow receiver can fall behind: two for
/// every partition, so that a receiver misses none of the reports of a lost
/// membership (one per partition, all at once), and at least 64.
fn reports_kept(partitions: usize) -> usize {
    partitions.saturating_mul(2).max(64)
}

/// What the balancer and the partition terms share.
struct Shared<S: LeaseSetStore> {
    store: S,
    partitions: Vec<String>,
    options: LeaseSetOptions,
    holder: Arc<str>,
    task: Arc<PartitionFn>,
    owned: watch::Sender<BTreeMap<String, u64>>,
    /// The owner of each leased partition, from the last listing of the
    /// whole set.
    owners: watch::Sender<BTreeMap<String, Leader>>,
    reports: broadcast::Sender<PartitionReport>,
    /// Permits for claims in flight ([`CLAIMS_IN_FLIGHT`]).
    claiming: Arc<Semaphore>,
    /// Tasks of partition terms that had not ended when their term was
    /// over: nothing is claimed while one may still run.
    lingering: Lingering,
    /// Whether the unmarked member blobs that are never collected were told.
    told_unmarked: AtomicBool,
    /// What the set decided while it runs: set-wide errors and partitions
    /// skipped for a while.
    fate: Mutex<Fate>,
    /// What its membership and partition terms learn, for [`BlobLeaseSet::health`].
    vitals: Arc<Vitals>,
}

impl<S: LeaseSetStore> std::fmt::Debug for BlobLeaseSet<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobLeaseSet")
            .field("holder", &self.shared.holder)
            .field("partitions", &self.shared.partitions.len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl BlobLeaseSet<BlobLeaseSetStore> {
    /// The set named by the settings' blob name, in their container: its
    /// leases are the blobs `<set>/members/<holder>` and
    /// `<set>/partitions/<name>`.
    ///
    /// # Errors
    ///
    /// As [`BlobLeaseSet::with_store`], and
    /// [`Error::InvalidConnectionString`] for a malformed SAS token.
    pub fn new<F, Fut, E>(
        settings: &BlobSettings,
        partitions: impl IntoIterator<Item = impl Into<String>>,
        options: LeaseSetOptions,
        task: F,
    ) -> Result<Self>
    where
        F: Fn(PartitionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let store =
            BlobLeaseSetStore::new(settings)?.with_request_timeout(options.mutex.request_timeout);
        Self::with_store(store, partitions, options, task)
    }

    /// The live member that a lease of a set's listing is, as every instance
    /// of the set counts its members (see [Names a set owns](#names-a-set-owns)):
    /// `name` is within the set, as [`LeaseSetStore::list`] gives it. `None`
    /// for a lease that is not leased, not of the shape `members/<holder>`,
    /// or neither marked as a member nor held by a holder of its own name.
    #[must_use]
    pub fn live_member<'a>(name: &'a str, info: &LeaseInfo) -> Option<&'a str> {
        names::live_member(name, info)
    }
}

impl<S: LeaseSetStore> BlobLeaseSet<S> {
    /// A set over any [`LeaseSetStore`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for invalid options (a `request_timeout`
    /// shorter than the store's [`min_request_timeout`](LeaseSetStore::min_request_timeout)
    /// too), no partitions, a partition named twice, a name that cannot
    /// name a lease, or a holder that cannot name a member's lease (one
    /// path segment, `members/<holder>`: no `/`).
    pub fn with_store<F, Fut, E>(
        store: S,
        partitions: impl IntoIterator<Item = impl Into<String>>,
        options: LeaseSetOptions,
        task: F,
    ) -> Result<Self>
    where
        F: Fn(PartitionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        options.validate()?;
        check_request_timeout(store.min_request_timeout(), options.mutex.request_timeout)?;
        let partitions: Vec<String> = partitions.into_iter().map(Into::into).collect();
        let unique: BTreeSet<&String> = partitions.iter().collect();
        if partitions.is_empty() || unique.len() != partitions.len() {
            return Err(Error::invalid(
                "partitions",
                "must name at least one partition, each once",
            ));
        }
        for p in &partitions {
            store.lease(&format!("{PARTITIONS}{p}"))?;
        }
        let partition_count = partitions.len();
        let holder: Arc<str> = options
            .mutex
            .holder
            .clone()
            .unwrap_or_else(default_holder)
            .into();
        if member_segment(&format!("{MEMBERS}{holder}")).is_none() {
            return Err(Error::invalid(
                "holder",
                format!(
                    "{holder:?} contains '/': a lease set's member lease is \
                     <set>/members/<holder>, and a set counts only one path segment there"
                ),
            ));
        }
        let member = store.lease(&format!("{MEMBERS}{holder}"))?;
        if options.mutex.advertised.is_some() && !member.supports_advertised() {
            return Err(Error::Unsupported {
                operation: "a value advertised with the stamp (the advertised option)",
            });
        }
        let task: Arc<PartitionFn> = Arc::new(move |ctx| {
            let fut = task(ctx);
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        Ok(BlobLeaseSet {
            shared: Arc::new(Shared {
                store,
                partitions,
                options: options.clone(),
                holder,
                task,
                owned: watch::channel(BTreeMap::new()).0,
                owners: watch::channel(BTreeMap::new()).0,
                reports: broadcast::channel(reports_kept(partition_count)).0,
                claiming: Arc::new(Semaphore::new(CLAIMS_IN_FLIGHT)),
                lingering: Lingering::default(),
                told_unmarked: AtomicBool::new(false),
                fate: Mutex::default(),
                vitals: Arc::default(),
            }),
            options,
        })
    }

    /// This instance's name (its member blob and its partitions' `holder`).
    #[must_use]
    pub fn holder(&self) -> &str {
        &self.shared.holder
    }

    /// The partitions this instance owns now, with the epoch of each term.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<BTreeMap<String, u64>> {
        self.shared.owned.subscribe()
    }

    /// The owner of every partition that is owned, as the set's last
    /// listing of the whole set showed it: its [`Leader`] (holder, epoch, start and
    /// [`advertised`](MutexOptions::advertised) value), by partition name;
    /// a partition nobody owns is missing. Every instance of the set has it,
    /// for routing a partition's work to its owner.
    ///
    /// It costs nothing more: the listings of the whole set that balance
    /// the set carry it, so it is as fresh as the last of them, and is
    /// updated while this instance is a member of the set. While the set
    /// moves (a join, a leave, a crash, a partition free or changing hands,
    /// this instance's own claims starting or ending) every balance cycle
    /// lists the whole set, so it is as fresh as the last cycle
    /// ([`balance_interval`](LeaseSetOptions::balance_interval), plus the
    /// listing's request). In a settled set, where the cycles in between
    /// list the members only, it is at most four cycles old (20 s with
    /// defaults): an owner that changed in that time without any member
    /// joining or leaving (a term that ended by itself and was claimed
    /// again) is shown at the next full listing. A partition whose lease
    /// was seen free is dropped at that listing; this instance's own
    /// partitions are shown from its listings too (see [`watch`](Self::watch)
    /// for those at once). It is empty while this instance is not a member
    /// (before the first listing, and once [`run`](Self::run) has returned).
    #[must_use]
    pub fn owners(&self) -> watch::Receiver<BTreeMap<String, Leader>> {
        self.shared.owners.subscribe()
    }

    /// What the engine learns of this set's membership and partition
    /// terms, and the membership's options (which have the longer grace:
    /// the longer bound), for [`health`](Self::health).
    pub(crate) fn vitals(&self) -> (Arc<Vitals>, MutexOptions) {
        let membership = membership_options(&self.options.mutex, &self.shared.holder);
        (self.shared.vitals.clone(), membership)
    }

    /// A report for every partition term of this instance that ends from now
    /// on, sent once its tasks have stopped (before the lease is released).
    ///
    /// It keeps the last 64 reports, or twice as many as the set has
    /// partitions when that is more: a receiver that reads after a lost
    /// membership ended every partition term at once sees each report. A
    /// receiver that falls further behind (two such losses unread) is told
    /// how many it missed ([`RecvError::Lagged`](broadcast::error::RecvError::Lagged))
    /// and reads on from the oldest report kept.
    #[must_use]
    pub fn partition_reports(&self) -> broadcast::Receiver<PartitionReport> {
        self.shared.reports.subscribe()
    }

    /// Takes part in the set until `token` is cancelled: holds this
    /// instance's membership, balances, and runs one task per partition it
    /// owns.
    ///
    /// A partition that cannot be led (its blob's epoch cannot be
    /// increased, or storage refuses its requests as malformed) is skipped
    /// for a while (`failure_backoff`, doubled each time, up to 5 minutes)
    /// and logged at error level; the other partitions are not disturbed.
    ///
    /// # Errors
    ///
    /// Ends, once every other partition has been drained and released, with
    /// a set-wide fatal error: [`Error::Authentication`] (the listing or any
    /// lease refused for lack of permission), the other fatal errors of
    /// [`BlobDistributedMutex::run_task_when_mutex_acquired`] on the member
    /// lease, and [`Error::TaskNotStopped`] when a partition's task could be
    /// neither stopped nor aborted (its lease is left to expire; with
    /// [`MutexOptions::fail_stop`] the process exits instead). While such a
    /// task may still run, this set claims nothing in this process: a later
    /// `run` returns [`Error::TaskNotStopped`] at once.
    ///
    /// # Cancellation safety
    ///
    /// As the mutex's: cancel through `token` to drain and release every
    /// partition; dropping the future aborts the tasks and leaves the
    /// leases to expire. Each partition term that ends so is still reported
    /// (reason [`dropped`](crate::term::StopReason::Dropped), or `deadline` when
    /// its deadline had passed) and leaves [`watch`](Self::watch).
    pub async fn run(&self, token: CancellationToken) -> Result<()> {
        let shared = self.shared.clone();
        shared.lingering.settle(ABORT_WAIT).await?;
        let name = format!("{MEMBERS}{}", shared.holder);
        let member = shared.store.lease(&name)?;
        let stop = token.child_token();
        {
            let mut fate = shared.fate();
            fate.fatal = None;
            fate.stop = Some(stop.clone());
        }
        let vitals = shared.vitals.clone();
        let membership = BlobDistributedMutex::sharing(
            member,
            membership_options(&self.options.mutex, &shared.holder),
            move |ctx| balance(ctx, shared.clone()),
            vitals,
        )?;
        let result = membership.run_task_when_mutex_acquired(stop).await;
        // Leaving: the member blob goes too, unless it is leased again.
        self.shared.store.remove(&name).await;
        match self.shared.fate().fatal.take() {
            Some(fatal) => Err(fatal),
            None => result,
        }
    }
}

/// The member lease's options: the partitions' options, with a grace long
/// enough for the partition terms to drain and release when membership
/// ends, as far as the lease's timing allows (beyond it they are aborted
/// and their leases left to expire, which is safe too), and renewals often
/// enough that one which times out is retried in time (see
/// [`membership_renew_interval`]).
fn membership_options(partition: &MutexOptions, holder: &str) -> MutexOptions {
    let usable = partition
        .lease_duration
        .saturating_sub(partition.effective_safety_margin());
    // The first renewal is sent one renew interval into the term and needs
    // time to be answered before the cancel point: a request timeout, up to
    // another renew interval. Without that room a long request timeout
    // would put the cancel point a millisecond after the renewal is sent.
    // The partitions' own grace always fits (their options were validated).
    let renew = partition.effective_renew_interval();
    let room = partition.request_timeout.min(renew);
    let tight = usable.saturating_sub(renew + STOP_SLACK + Duration::from_millis(1));
    let most = usable.saturating_sub(renew + room + STOP_SLACK + Duration::from_millis(1));
    let wanted = partition.stop_grace + partition.request_timeout;
    let grace = wanted.min(most).max(partition.stop_grace.min(tight));
    let every = membership_renew_interval(usable, grace, partition.request_timeout, renew);
    let mut options = partition
        .clone()
        .with_holder(holder.to_owned())
        .with_stop_grace(grace)
        .with_renew_interval(every);
    // The heartbeat is the partition tasks' own: the balancer does not beat.
    options.heartbeat_timeout = None;
    options
}

/// How often the member lease renews: the partitions' interval, or less,
/// so that a renewal which times out leaves room for a retry with a whole
/// request timeout before the term's stop point (`usable − grace − slack`
/// after the last renewal sent). Its long grace leaves less room than a
/// partition's: at 30 s leases and a 6 s request timeout, renewing every
/// 10 s left one attempt, and one slow answer ended the membership, and
/// with it every partition at once. At least a third of the time to the
/// stop point. One request more now and then, for the one lease whose loss
/// costs the most.
fn membership_renew_interval(
    usable: Duration,
    grace: Duration,
    request_timeout: Duration,
    renew: Duration,
) -> Duration {
    let stop = usable.saturating_sub(grace + STOP_SLACK);
    let two_attempts = request_timeout * 2 + crate::engine::RENEW_RETRY_FIRST;
    renew.min(stop.saturating_sub(two_attempts).max(stop / 3))
}

/// One claimed partition: its term runs until `token` is cancelled or the
/// term ends by itself.
struct Claim {
    token: CancellationToken,
    handle: JoinHandle<()>,
}

/// What the balancer keeps from one cycle to the next of a membership term.
struct Books {
    claims: BTreeMap<String, Claim>,
    /// The partitions claimed as orphans: given up last (see `balance`).
    adopted: BTreeSet<String>,
    free_since: FreeSince<Instant>,
    random: Jitter,
    /// Tells, once this term and its partition terms are over, how many
    /// partition leases were released.
    leaving: Arc<Leaving>,
}

/// The membership term's task: balance every cycle until the term ends.
async fn balance<S: LeaseSetStore>(ctx: LeaderContext, shared: Arc<Shared<S>>) -> Result<()> {
    // No listing comes once the membership term is over.
    let _forget = ForgetOwners(&shared.owners);
    let options = &shared.options;
    let mut books = Books {
        claims: BTreeMap::new(),
        adopted: BTreeSet::new(),
        free_since: FreeSince::default(),
        random: Jitter::new(options.mutex.jitter_seed, options.mutex.acquire_jitter),
        leaving: Arc::new(Leaving::new(shared.holder.clone(), ctx.token().clone())),
    };
    // What the last listing of the whole set left (see `cadence`).
    let mut last: Option<LastFull> = None;
    loop {
        let claims = &mut books.claims;
        let before = claims.len();
        claims.retain(|_, claim| !claim.handle.is_finished());
        books.adopted.retain(|p| claims.contains_key(p));
        // A claim ended, or one is not in a term (not started yet, or its
        // term is over and it is still ending).
        let claims_changed = claims.len() < before || {
            let owned = shared.owned.borrow();
            claims.keys().any(|p| !owned.contains_key(p))
        };
        match read_set(&shared, &ctx, last.as_ref(), claims_changed).await {
            Ok(None) => {
                if let Some(last) = &mut last {
                    last.listed_members();
                }
            }
            Ok(Some(listing)) => {
                let unsettled = plan_cycle(&ctx, &shared, &listing, &mut books);
                last = Some(LastFull::new(listing.members, unsettled));
            }
            Err(e) if e.is_fatal() => {
                shared.end_run(e);
                return Ok(());
            }
            Err(e) => {
                // Nothing is known of this cycle: the next lists the whole set.
                last = None;
                warn!(holder = %shared.holder, error = %Chain(&e), "cannot read the set; balancing later");
            }
        }
        let wait = books.random.apply(options.balance_interval);
        tokio::select! {
            _ = ctx.cancelled() => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Plans one cycle from a listing of the whole set: gives up and claims
/// partitions, and returns why the set is not settled, if it is not (for
/// `cadence`).
fn plan_cycle<S: LeaseSetStore>(
    ctx: &LeaderContext,
    shared: &Arc<Shared<S>>,
    listing: &Listing,
    books: &mut Books,
) -> Option<Unsettled> {
    let options = &shared.options;
    let grace = options.balance_interval * ORPHAN_CYCLES;
    let mine: BTreeSet<String> = books.claims.keys().cloned().collect();
    let free = free(&shared.partitions, &mine, &listing.leased);
    let with_epochs: Vec<(&String, u64)> = free
        .iter()
        .map(|p| (*p, listing.epochs.get(*p).copied().unwrap_or(0)))
        .collect();
    let now = Instant::now();
    let orphaned = books.free_since.observe(&with_epochs, now, |since| {
        now.duration_since(since) >= grace
    });
    let view = View {
        me: &shared.holder,
        members: &listing.members,
        partitions: &shared.partitions,
        mine: &mine,
        leased: &listing.leased,
        orphaned: &orphaned,
        adopted: &books.adopted,
    };
    let random = &mut books.random;
    let Plan { claim, release } = plan(&view, options.strategy, &mut |n| random.below(n));
    let moved = !claim.is_empty() || !release.is_empty();
    let unsettled = unsettled(&view, options.strategy, moved, !free.is_empty());
    let most = options.max_releases_per_cycle.unwrap_or(usize::MAX);
    for partition in release.into_iter().take(most) {
        debug!(holder = %shared.holder, %partition, "giving a partition up to balance the set");
        if let Some(claim) = books.claims.get(&partition) {
            claim.token.cancel();
        }
    }
    let claim: Vec<String> = claim.into_iter().filter(|p| shared.claimable(p)).collect();
    let adopting = claim.iter().filter(|p| orphaned.contains(*p)).cloned();
    books.adopted.extend(adopting);
    for (i, partition) in claim.into_iter().enumerate() {
        let delay = CLAIM_PACE * u32::try_from(i).unwrap_or(u32::MAX);
        let leaving = books.leaving.clone();
        let claim = start_claim(ctx, shared, leaving, partition.clone(), delay);
        books.claims.insert(partition, claim);
    }
    unsettled
}

/// Empties the map of owners when it goes: nothing keeps it up to date.
struct ForgetOwners<'a>(&'a watch::Sender<BTreeMap<String, Leader>>);

impl Drop for ForgetOwners<'_> {
    fn drop(&mut self) {
        self.0.send_if_modified(|owners| {
            let had = !owners.is_empty();
            owners.clear();
            had
        });
    }
}

/// What one listing of the whole set says.
struct Listing {
    /// The live members.
    members: BTreeSet<String>,
    /// The leased partitions, with the holder their metadata names.
    leased: BTreeMap<String, Option<String>>,
    /// The epoch of each partition that is not leased.
    epochs: BTreeMap<String, u64>,
}

/// This cycle's listing: of the members only, or of the whole set when
/// [`whole_set_due`] says so (before listing, or once the members listed
/// differ from the last full listing's, when the cycle lists twice).
/// `None` when the members only were listed: there is nothing to plan.
async fn read_set<S: LeaseSetStore>(
    shared: &Shared<S>,
    ctx: &LeaderContext,
    last: Option<&LastFull>,
    claims_changed: bool,
) -> Result<Option<Listing>> {
    let mut cycle = Cycle {
        claims_changed,
        members: None,
    };
    let listed = if whole_set_due(last, cycle) {
        list(shared, ctx, "").await?
    } else {
        let listed = list(shared, ctx, MEMBERS).await?;
        let members = parse(shared, &listed).members;
        cycle.members = Some(&members);
        if !whole_set_due(last, cycle) {
            collect(shared, ctx, &listed).await?;
            return Ok(None);
        }
        list(shared, ctx, "").await?
    };
    collect(shared, ctx, &listed).await?;
    let (listing, owners) = parse(shared, &listed).into_parts();
    shared.owners.send_if_modified(|shown| {
        let changed = *shown != owners;
        *shown = owners;
        changed
    });
    Ok(Some(listing))
}

/// One List Blobs call of the set's leases under `prefix`.
async fn list<S: LeaseSetStore>(
    shared: &Shared<S>,
    ctx: &LeaderContext,
    prefix: &str,
) -> Result<Vec<(String, LeaseInfo)>> {
    let limit = shared.options.mutex.request_timeout;
    tokio::select! {
        _ = ctx.cancelled() => Err(Error::Cancelled),
        r = bounded("list", limit, shared.store.list(prefix)) => r,
    }
}

/// Collects stale members and candidates, a bounded number a cycle (see
/// `collect`). Every cycle's listing, of the members only or of the whole
/// set, has every blob that can be collected (member blobs: partition
/// blobs never are), so collection runs on either, once a cycle: on the
/// last listing of a cycle that lists twice.
async fn collect<S: LeaseSetStore>(
    shared: &Shared<S>,
    ctx: &LeaderContext,
    listed: &[(String, LeaseInfo)],
) -> Result<()> {
    tokio::select! {
        _ = ctx.cancelled() => Err(Error::Cancelled),
        _ = shared.store.collect(listed) => Ok(()),
    }
}

/// What a listing says, with the owners of the leased partitions.
struct Parsed {
    members: BTreeSet<String>,
    leased: BTreeMap<String, Option<String>>,
    epochs: BTreeMap<String, u64>,
    owners: BTreeMap<String, Leader>,
}

impl Parsed {
    fn into_parts(self) -> (Listing, BTreeMap<String, Leader>) {
        let listing = Listing {
            members: self.members,
            leased: self.leased,
            epochs: self.epochs,
        };
        (listing, self.owners)
    }
}

/// Reads a listing (of the members only, or of the whole set), and tells
/// once of member blobs that are never collected.
fn parse<S: LeaseSetStore>(shared: &Shared<S>, listed: &[(String, LeaseInfo)]) -> Parsed {
    let mut parsed = Parsed {
        members: BTreeSet::new(),
        leased: BTreeMap::new(),
        epochs: BTreeMap::new(),
        owners: BTreeMap::new(),
    };
    let mut unmarked = 0;
    for (name, info) in listed {
        if let Some(member) = names::live_member(name, info) {
            parsed.members.insert(member.to_owned());
        } else if info.state != LeaseState::Leased {
            unmarked += usize::from(member_segment(name).is_some() && !info.member);
            if let Some(partition) = name.strip_prefix(PARTITIONS) {
                parsed.epochs.insert(partition.to_owned(), info.epoch);
            }
        } else if let Some(partition) = name.strip_prefix(PARTITIONS) {
            if let Some(owner) = Leader::from_info(info) {
                parsed.owners.insert(partition.to_owned(), owner);
            }
            parsed
                .leased
                .insert(partition.to_owned(), info.holder.clone());
        }
    }
    if unmarked > 0 && !shared.told_unmarked.swap(true, Ordering::Relaxed) {
        info!(
            holder = %shared.holder,
            unmarked,
            "blobs of member shape without the member marker (left by an earlier version, or \
             written by another client) are never collected; delete those under <set>/members/ \
             by hand once they are not leased and are no other lease"
        );
    }
    parsed
}

/// Starts one partition's term as a sub-task of the membership term, after
/// `delay` (claims of one cycle are paced).
fn start_claim<S: LeaseSetStore>(
    ctx: &LeaderContext,
    shared: &Arc<Shared<S>>,
    leaving: Arc<Leaving>,
    partition: String,
    delay: Duration,
) -> Claim {
    let token = ctx.token().child_token();
    let (shared, claim_token) = (shared.clone(), token.clone());
    let handle = ctx.spawn(async move {
        tokio::select! {
            () = claim_token.cancelled() => return Ok(()),
            () = tokio::time::sleep(delay) => {}
        }
        let permit = tokio::select! {
            () = claim_token.cancelled() => return Ok(()),
            // The semaphore is never closed.
            permit = shared.claiming.clone().acquire_owned() => permit.ok(),
        };
        match run_partition(&shared, &leaving, &partition, &claim_token, permit).await {
            Ok(()) => {}
            // This partition's blob cannot be led: skip it for a while.
            Err(e) if is_partition_fault(&e) => shared.skip(&partition, &e),
            // A task that cannot be stopped, or settings storage will never
            // accept, end the run (every partition is drained first).
            Err(e) if e.is_fatal() || matches!(e, Error::TaskNotStopped) => shared.end_run(e),
            // Anything else ends this claim only: the partition stays free
            // for a later cycle, and the others are not disturbed.
            Err(e) => {
                warn!(holder = %shared.holder, %partition, error = %Chain(&e), "could not own the partition; trying again in a later cycle");
            }
        }
        Ok::<(), Error>(())
    });
    Claim { token, handle }
}

/// What hears of a partition term's start and end: the set's map of owned
/// partitions and its partition reports.
struct PartitionObserver<'s> {
    partition: &'s str,
    owned: &'s watch::Sender<BTreeMap<String, u64>>,
    reports: &'s broadcast::Sender<PartitionReport>,
    /// The claim's slot ([`CLAIMS_IN_FLIGHT`]), given back once the lease
    /// is held.
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    /// The partition lease's figures, for a term shed at its deadline.
    metrics: &'s Metrics,
    /// What the set tells of its partition leases when its membership ends.
    leaving: &'s Leaving,
    /// Whether `leaving` counted this term's end.
    counted: AtomicBool,
}

impl Observer for PartitionObserver<'_> {
    fn acquired(&self) {
        drop(
            self.permit
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
    }

    fn started(&self, epoch: u64) {
        self.owned.send_modify(|o| {
            o.insert(self.partition.to_owned(), epoch);
        });
    }

    fn ended(&self, report: &TermReport) {
        self.owned.send_modify(|o| {
            o.remove(self.partition);
        });
        if report.reason == StopReason::Deadline {
            // The membership renews on slots of its own: a partition that
            // could not be renewed in time is shed, and the set goes on.
            self.metrics.partition_shed();
            warn!(
                partition = %self.partition,
                epoch = report.epoch,
                "shed the partition: its lease could not be renewed before its deadline \
                 (storage slow or unreachable, or more renewals than the client carries); \
                 the set keeps its membership and claims it again as it rebalances"
            );
        }
        self.leaving.ended(&self.counted);
        // Nobody listening is fine.
        let _ = self.reports.send(PartitionReport {
            partition: self.partition.to_owned(),
            report: report.clone(),
        });
    }

    fn released(&self, released: bool) {
        self.leaving.released(&self.counted, released);
    }
}

/// One term on one partition: acquire once, lead, drain, release. The
/// claim's `permit` is given back once the lease is held, or when the
/// attempt ends without one: the stamp that follows, which for a blob made
/// anew waits for storage's clock to pass a second, holds no slot.
async fn run_partition<S: LeaseSetStore>(
    shared: &Arc<Shared<S>>,
    leaving: &Leaving,
    partition: &str,
    token: &CancellationToken,
    permit: Option<OwnedSemaphorePermit>,
) -> Result<()> {
    let store = Arc::new(shared.store.lease(&format!("{PARTITIONS}{partition}"))?);
    let name: Arc<str> = partition.into();
    let user = shared.task.clone();
    let task = box_task(move |leader: LeaderContext| {
        user(PartitionContext {
            leader,
            partition: name.clone(),
        })
    });
    let state = watch::channel(Leadership::Follower).0;
    let metrics = Metrics::new(&store.name(), shared.vitals.clone());
    let observer = PartitionObserver {
        partition,
        owned: &shared.owned,
        reports: &shared.reports,
        permit: Mutex::new(permit),
        metrics: &metrics,
        leaving,
        counted: AtomicBool::new(false),
    };
    let engine = Engine {
        store,
        options: &shared.options.mutex,
        holder: shared.holder.clone(),
        task,
        state: &state,
        observer: &observer,
        metrics: &metrics,
        lingering: &shared.lingering,
        leader: None,
        contact: None,
        caller_holds: None,
    };
    engine.lead_once(token).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_membership_grace_is_valid_and_leaves_its_first_renewal_time_to_answer() {
        let s = Duration::from_secs;
        let set = LeaseSetOptions::default().mutex;
        for partition in [
            set.clone(),
            set.clone().with_request_timeout(set.lease_duration),
            MutexOptions::default(),
            MutexOptions::default().with_request_timeout(s(15)),
            // The tightest valid timeline: no room beyond the partitions' grace.
            MutexOptions::default()
                .with_renew_interval(s(13))
                .with_stop_grace(Duration::from_millis(100)),
        ] {
            partition.validate().unwrap();
            let membership = membership_options(&partition, "a");
            membership.validate().unwrap();
            assert!(
                membership.stop_grace >= partition.stop_grace,
                "{partition:?}"
            );
            let usable = partition
                .lease_duration
                .saturating_sub(partition.effective_safety_margin());
            let cancel_point = usable.saturating_sub(membership.stop_grace + STOP_SLACK);
            let renew = partition.effective_renew_interval();
            if membership.stop_grace > partition.stop_grace {
                assert!(
                    cancel_point > renew + partition.request_timeout.min(renew),
                    "{partition:?}: cancel point {cancel_point:?}"
                );
            }
        }
    }

    #[test]
    fn defaults_are_a_30_s_lease_renewed_every_10_s_and_valid() {
        let options = LeaseSetOptions::default();
        assert_eq!(options.mutex.lease_duration, Duration::from_secs(30));
        assert_eq!(
            options.mutex.effective_renew_interval(),
            Duration::from_secs(10)
        );
        assert_eq!(options.balance_interval, Duration::from_secs(5));
        options.validate().unwrap();
        // The mutex's own defaults are not changed by the set's.
        assert_eq!(
            MutexOptions::default().lease_duration,
            Duration::from_secs(15)
        );
    }

    #[test]
    fn every_rule_of_the_mutex_options_still_applies() {
        let options = LeaseSetOptions::default()
            .with_mutex(MutexOptions::default().with_lease_duration(Duration::from_secs(61)));
        assert!(matches!(
            options.validate(),
            Err(Error::InvalidOption { .. })
        ));
        let options = LeaseSetOptions::default().with_balance_interval(Duration::ZERO);
        assert!(matches!(
            options.validate(),
            Err(Error::InvalidOption { .. })
        ));
    }

    #[test]
    fn a_priority_and_zero_releases_a_cycle_are_refused() {
        let options =
            LeaseSetOptions::default().with_mutex(MutexOptions::default().with_priority(1));
        assert!(matches!(
            options.validate(),
            Err(Error::InvalidOption {
                field: "priority",
                ..
            })
        ));
        let options = LeaseSetOptions::default().with_max_releases_per_cycle(0);
        assert!(matches!(
            options.validate(),
            Err(Error::InvalidOption {
                field: "max_releases_per_cycle",
                ..
            })
        ));
        LeaseSetOptions::default()
            .with_max_releases_per_cycle(1)
            .validate()
            .unwrap();
    }
}
