//! Stores over N independent storage accounts that lead while a majority
//! of their leases is held, so that the election survives the loss of a
//! minority of the accounts: [`QuorumLeaseStore`] under a mutex,
//! [`QuorumLeaseSetStore`] under a lease set. The guide's
//! [quorum chapter](crate::guide::quorum) says when one is worth its cost.

// A store of stores, above the seam it implements and beside the Azure
// stores it is usually made of (`from_settings`); its decisions are pure
// rules (`rules`, `hold_off`) that the model checker compiles as they are.

mod calls;
mod each;
mod epoch;
mod hold_off;
mod identity;
mod rules;
mod set;
mod votes;

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::azure::settings::BlobSettings;
use crate::azure::BlobLeaseManager;
use crate::bounded::bounded;
use crate::bounded::DEFAULT_REQUEST_TIMEOUT;
use crate::error::{Error, Result};
use crate::store::{Acquire, Candidate, LeaseId, LeaseInfo, LeaseState, LeaseStore, StampOptions};

use self::calls::vote_ok;
pub use self::each::{AccountLease, Holding};
use self::epoch::Stamp;
use self::identity::check_accounts;
use self::rules::Standing;
pub use self::set::QuorumLeaseSetStore;
use self::votes::{ask_all, majority, Answers, Votes};

/// The most accounts a quorum may have.
pub const MAX_QUORUM_ACCOUNTS: usize = 9;

/// How long a failed acquire waits for the release of the leases it was
/// granted before it answers. Best effort: a lease not released expires.
const CLEANUP_LIMIT: Duration = Duration::from_secs(1);

/// How many lease ids a store remembers the duration and accounts of (for
/// renewals that acquire an account again). The engine holds one at a time.
const TERMS_KEPT: usize = 16;

/// One lease over N independent lease stores (storage accounts), held while
/// a majority of their leases is: a [`LeaseStore`] that lets an election
/// survive the loss of a minority of the accounts.
///
/// # How each call works
///
/// Every call goes to every account at once, with the same lease id, and
/// returns as soon as its outcome is decided: a majority answered as asked,
/// or so many refused or failed that no majority can; or, when a majority
/// answered and the others stay silent, after a short grace (twice the time
/// the majority took, 50 ms to 1 s), counting the silent ones as failed.
/// The accounts that have not answered by then are not waited for (their
/// requests are dropped, as the store contract allows): a blackholed
/// account must not hold up a renewal that the engine bounds by its
/// deadline.
///
/// - **acquire**: granted once a majority granted. When no majority can
///   grant (silent accounts count as failed after the grace, and after half
///   the request timeout at the latest), the leases granted in this attempt
///   are released at once, and the answer is [`Acquire::Held`] when leases
///   held by others made a majority impossible, else the accounts' error.
///   (A candidate that kept an account while it waited for a silent one
///   would keep the leader from renewing there.) Once a majority granted,
///   the epoch of every account that answered is read (in the same bounded
///   call), and an account granted without an epoch while another carries
///   one is held off (below): when the granted accounts that count are no
///   majority, the leases granted are released and the answer is
///   [`Acquire::Held`].
/// - **renew**: renews every account; an account where the lease is found
///   gone (broken, or its blob missing after a restart) counts as lost for
///   this renewal (and when the accounts that the last successful renewal
///   held, less those found gone since, are no longer a majority, the
///   renewal answers [`Error::LeaseLost`] even though no majority refused:
///   the caller's deadline rested on those leases), and one that has lost it (or never granted it: it was
///   down at the acquire) is acquired again under the same id at the next,
///   so an account that comes back joins the term a renewal later. An account held that is not known to
///   carry the term's stamp (it missed the stamp, or was acquired again)
///   is brought up to it in the same call: its epoch is read, and stamped
///   with the term's holder and epoch when it is lower (under the lease
///   id). An account known to carry it costs nothing more. Succeeds once a
///   majority is held; [`Error::LeaseLost`] once a majority is
///   definitively lost.
/// - **stamp**: see below. **release**, **change**: every account; decided
///   by a majority.
/// - **inspect**: a merged view ([`LeaseState::Leased`] only when a majority
///   is leased; holder and epoch of the largest epoch seen);
///   [`inspect_each`](Self::inspect_each) shows every account.
///
/// # Why two leaders never overlap
///
/// Each account keeps the store contract on its own: a lease it grants to a
/// request lasts until at least the request's send time plus the duration.
/// Every request of a quorum call is sent after the call was made, so when a
/// majority granted or renewed, each lease of that majority lasts at least
/// until the call instant plus the duration: the instant the engine computes
/// its deadline from. Any two majorities of the same N accounts share an
/// account, and one account's lease is never held by two ids at once, so two
/// ids never both hold a majority at the same instant. That is rule 1 of the
/// [`LeaseStore`] contract for the quorum, with no timing assumption beyond
/// the single-account one (each account's clock runs no faster than the
/// leader's by more than the drift allowance).
///
/// Unless an account forgets: an account whose lease blob is lost
/// (deleted, recreated, its container recreated, an emulator restarted
/// empty) loses the leases it granted, and may grant the lease to another
/// id while a holder's deadline still rests on it. With one account down
/// past the leader's lease there (its majority is then the two others)
/// and one of those two restarted empty, a candidate is granted the one
/// that was down and the one that forgot: a majority, while the leader
/// leads on until its next renewal finds the lease gone. So a new term
/// does not count such an account at once (`quorum/hold_off.rs` holds the
/// rule, a pure function):
///
/// 1. Once a majority granted, the acquire reads the epoch of every
///    account that answered (granted, or held by another id). A granted
///    account that carries an epoch has not forgotten since a term stamped
///    it, so a lease of a live holder there would have refused the grant:
///    it counts.
/// 2. A granted account without an epoch, while an account read carries
///    one, counts once this store has seen it without one, in every read
///    since the first, for the hold-off: 67 s, Azure's longest lease
///    (60 s) plus that lease times the largest clock drift the options
///    accept (10 %; this host's clock may run that much faster than the
///    account's), plus the default safety margin (1 s). A lease it granted
///    before it forgot was granted before the first read, lasted 60 s of
///    the account's clock at most, and any holder's deadline that rested on
///    it came before its end; the store does not know the durations other
///    instances use, so it takes the longest. A read that finds an epoch,
///    or the account held by another id (whose holder may stamp it, and it
///    may forget again), starts the wait over; so does any attempt that
///    finds it held by another id, majority or not, and this store's own
///    term stamping it, renewing there, or bringing it up to its stamp.
/// 3. When no account read carries an epoch and every granted account
///    was read (a new quorum), or when every account granted, nothing is
///    held off: a live holder's majority would have to have forgotten
///    whole (or its other accounts be down, unread).
/// 4. A granted account whose read did not answer does not count.
///
/// Take a holder A whose deadline rests on a majority S (its last
/// successful call) and a candidate B whose counted accounts C are a
/// majority. S and C share an account x. If x carries an epoch, or B held
/// it off for the hold-off, x did not lose A's lease before A's deadline,
/// so x granted B only after A's lease there ended: after A's deadline.
/// What this assumes: fewer than a majority of the accounts forget within
/// a hold-off, an account of S that B could not read (down) did not
/// forget either, and an account forgets at most once within a hold-off
/// unless B sees it held or stamped in between (B's reads cannot tell one
/// empty blob from the next); with three accounts that is one down and
/// one forgotten at once. An account rolled back to an older copy of its
/// blob carries an epoch and is not held off: delete its lease blob, so
/// that it shows as lost (below). The holder's own renewals, which acquire
/// an account again and bring it up to the stamp, hold off nothing: the
/// holder kept its majority. The price: a failover that needs an account restarted empty
/// waits until a third account can be granted too (the old leader's lease
/// there expires, or it is back), or for the hold-off, whichever comes
/// first; with the other accounts healthy it waits for nothing.
///
/// # Why epochs strictly increase
///
/// The single-account argument: only the holder can stamp, the stamp is
/// stored epoch + 1 (or a floor), and the stored epoch never goes down
/// while the blob lives. Across accounts:
///
/// 1. Read every account's epoch. Wait for a majority of accounts that
///    carry an epoch, or for every account: an account with none (never
///    stamped, or its blob lost) does not count toward the majority. E is
///    the largest epoch read, plus one.
/// 2. Stamp every account with E as the floor, and succeed with E once a
///    majority carries at least E.
/// 3. Every renewal brings the accounts it holds up to the stamp (above),
///    so once they answer, every account carries the term's epoch.
///
/// Take two terms that both stamped, T1 before T2 (two terms never hold a
/// majority at once, above). T1 left at least E1 on a majority S1 before
/// its deadline; T2 read after it acquired a majority, so after T1's
/// deadline. Every epoch written after T1's stamp is at least E1: by T1
/// itself, or by later terms, whose epochs are larger. So an account of S1
/// carries at least E1 when T2 reads it, unless its blob was lost since (it
/// then has no epoch, or one written later, at least E1).
///
/// - T2 read a majority S2 of accounts that carry an epoch: S2 shares an
///   account x with S1, x carries an epoch, so at least E1, and E2 > E1.
/// - T2 read every account: one account of S1 kept its blob (fewer than a
///   majority lost theirs) and carries at least E1, so E2 > E1.
///
/// What this assumes, beyond the single-account argument:
///
/// - **A lost account shows it.** An account whose lease blob was deleted
///   or recreated (by hand, a lifecycle rule, a deleted container, an
///   emulator restarted empty) has no epoch, and does not count until a
///   term brings it up to date. Any number may be lost while a majority
///   carries epochs; when the read needs every account, fewer than a
///   majority may have lost their blobs since the last term stamped (one
///   of three, two of five). An account rolled back to an older copy of its
///   blob (a failover that lost recent writes, a restore) looks like one
///   that is behind, and is safe only once every account carried the last
///   stamp and fewer than a majority are rolled back: delete the lease
///   blob of such an account, so that it shows as lost.
/// - **Writes land in time.** Every stamp finishes before its term's
///   deadline, which the engine bounds already (it cuts the stamp at the
///   deadline, less the stop grace), and renewals run before it.
/// - **Every instance reads before it stamps**: this version or a later
///   one on every instance of the quorum.
///
/// The price: a new term waits for a majority of accounts that carry an
/// epoch, or for every account. The first term (no account has an epoch)
/// needs every account to answer, since an account that does not might be
/// the one that kept the last epoch.
///
/// # What it protects, and what it does not
///
/// The election goes on, with no gap and no new epoch, while a majority of
/// the accounts answers: one of three (two of five) may be down, throttled,
/// or cut off by a network partition. It does not relax any other
/// assumption: clocks must run at nearly the same rate, and a process that
/// pauses past its deadline can still act, so downstream fencing with the
/// epoch matters as much as with one account. Every call costs N requests
/// (a renewal adds an acquire for an account that came back, and a read
/// and a stamp for an account not known to carry the term's stamp; a new
/// term's acquire adds a read of every account that answered it, and its
/// stamp a read of every account).
///
/// Accounts must be independent: [`from_settings`](Self::from_settings)
/// refuses two settings that name the same account, whatever blob they name
/// and however the endpoint is spelled (letter case, a trailing slash or dot,
/// the scheme's default port written out, `localhost`, `127.0.0.1` and
/// `[::1]` as one host, an Azure account's name under its private-link or
/// zone host), since one outage would then take two votes. Stores given to
/// [`new`](Self::new) or [`with_labels`](Self::with_labels) are not checked.
/// An even N is allowed but tolerates no more lost accounts than N − 1 does
/// (four accounts survive one loss, like three), at a higher cost.
///
/// The leader state ([`LeaseStore::read_state`], [`LeaseStore::write_state`])
/// is not supported: a write that lands on a majority of accounts without a
/// version of its own cannot be told apart, when read back from another
/// majority, from an older write, so no read could be trusted to be the last.
///
/// # Example
///
/// ```no_run
/// use blob_mutex::{BlobDistributedMutex, BlobSettings, LeaderContext, MutexOptions, quorum::QuorumLeaseStore};
///
/// # fn example(strings: [&str; 3]) -> Result<(), blob_mutex::Error> {
/// let accounts = strings
///     .iter()
///     .map(|s| BlobSettings::from_connection_string(s, "leases", "nightly"))
///     .collect::<Result<Vec<_>, _>>()?;
/// let store = QuorumLeaseStore::from_settings(&accounts)?;
/// let mutex = BlobDistributedMutex::with_store(store, MutexOptions::default(), |ctx: LeaderContext| async move {
///     ctx.cancelled().await;
///     Ok::<(), blob_mutex::Error>(())
/// })?;
/// # Ok(())
/// # }
/// ```
///
/// Clones share the accounts and what the store remembers of its leases.
pub struct QuorumLeaseStore<S: LeaseStore = BlobLeaseManager> {
    /// Each account's label (never a secret) and store.
    accounts: Arc<[(String, S)]>,
    terms: Arc<Mutex<VecDeque<Term>>>,
    /// Per account: since when this store has seen it without an epoch
    /// (see [`hold_off`]).
    missing: Missing,
    request_timeout: Duration,
}

/// Per account: since when a store has seen the lease without an epoch
/// there, and the version of the blob (its `ETag`) it saw so. Shared by the
/// stores of one lease that a lease set makes, one per attempt.
type Missing = Arc<Mutex<Vec<Option<(Instant, String)>>>>;

/// What the store remembers of a lease id it acquired.
#[derive(Debug, Clone)]
struct Term {
    id: LeaseId,
    duration: Duration,
    /// The term's stamp, once it stamped under this id.
    stamp: Option<Stamp>,
    /// Where the term stands on each account (held, known to carry the
    /// stamp, the deadline's basis, found gone since).
    standing: Standing,
}

impl Term {
    fn new(id: LeaseId, duration: Duration, standing: Standing) -> Self {
        Term {
            id,
            duration,
            stamp: None,
            standing,
        }
    }
}

impl<S: LeaseStore> Clone for QuorumLeaseStore<S> {
    fn clone(&self) -> Self {
        QuorumLeaseStore {
            accounts: self.accounts.clone(),
            terms: self.terms.clone(),
            missing: self.missing.clone(),
            request_timeout: self.request_timeout,
        }
    }
}

impl<S: LeaseStore> fmt::Debug for QuorumLeaseStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuorumLeaseStore")
            .field("accounts", &self.labels().collect::<Vec<_>>())
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

/// The cap on each call of an account that a quorum built from settings
/// makes: longer than any request timeout the quorum is given in practice
/// (the longest lease), so that the quorum's own limit decides.
const ACCOUNT_CAP: Duration = Duration::from_secs(60);

impl QuorumLeaseStore<BlobLeaseManager> {
    /// A quorum over the blob named in each of `settings`, one per storage
    /// account, each labelled by its blob endpoint.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `accounts`) for no settings, more
    /// than [`MAX_QUORUM_ACCOUNTS`], or two settings naming the same account
    /// (see the type's docs), with both endpoints as written;
    /// [`Error::InvalidConnectionString`] as
    /// [`BlobLeaseManager::new`].
    pub fn from_settings(settings: &[BlobSettings]) -> Result<Self> {
        check_accounts(settings)?;
        let accounts = settings
            .iter()
            .map(|s| {
                // The quorum bounds every call by its own request timeout;
                // an account's own cap only keeps a direct call through
                // `stores()` bounded, and must not cut the quorum's shorter.
                let account = BlobLeaseManager::new(s)?.with_request_timeout(ACCOUNT_CAP);
                Ok((s.endpoint().to_owned(), account))
            })
            .collect::<Result<Vec<_>>>()?;
        Self::with_labels(accounts)
    }
}

impl<S: LeaseStore> QuorumLeaseStore<S> {
    /// A quorum over `stores`, one per account, each labelled by its
    /// position and [`LeaseStore::name`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `accounts`) for no stores or more
    /// than [`MAX_QUORUM_ACCOUNTS`].
    pub fn new(stores: Vec<S>) -> Result<Self> {
        let labelled = stores
            .into_iter()
            .enumerate()
            .map(|(i, s)| (format!("{i}:{}", s.name()), s))
            .collect();
        Self::with_labels(labelled)
    }

    /// A quorum over `(label, store)` pairs: the label names the account in
    /// logs and in [`inspect_each`](Self::inspect_each), so it must not be
    /// a secret.
    ///
    /// # Errors
    ///
    /// As [`QuorumLeaseStore::new`].
    pub fn with_labels(accounts: Vec<(String, S)>) -> Result<Self> {
        if accounts.is_empty() || accounts.len() > MAX_QUORUM_ACCOUNTS {
            return Err(Error::invalid(
                "accounts",
                format!(
                    "a quorum needs 1 to {MAX_QUORUM_ACCOUNTS} accounts (3 or 5 recommended), not {}",
                    accounts.len()
                ),
            ));
        }
        let n = accounts.len();
        Ok(QuorumLeaseStore {
            accounts: accounts.into(),
            terms: Arc::default(),
            missing: Arc::new(Mutex::new(vec![None; n])),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// The same store with another request timeout (default 3 s): the cap
    /// on each account's inspection, the one call the engine does not bound
    /// itself; and the longest an acquire takes: half of it waiting for
    /// accounts that do not answer, the rest (1 s at most) giving back what
    /// it was granted when no majority granted. A new term's read of the
    /// epochs waits up to half of it for accounts that have not answered,
    /// when no majority that carries an epoch has. A mutex or lease set whose
    /// [`request_timeout`](crate::MutexOptions::request_timeout), which cuts
    /// every call, is shorter refuses the store
    /// ([`LeaseStore::min_request_timeout`]), since it would drop such an
    /// acquire before the leases are given back. Any duration is taken,
    /// up to [`Duration::MAX`] (no limit in practice).
    #[must_use = "the store is returned by value"]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The same store with the record of accounts seen without an epoch
    /// that earlier stores of the same lease kept (one of as many entries).
    fn sharing_missing(mut self, missing: Missing) -> Self {
        let n = self.len();
        let fits = missing.lock().unwrap_or_else(PoisonError::into_inner).len() == n;
        if fits {
            self.missing = missing;
        }
        self
    }

    /// The number of accounts.
    #[must_use]
    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    /// Always `false`: a quorum has at least one account.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }

    /// How many accounts make a majority: more than half of them.
    #[must_use]
    pub fn majority(&self) -> usize {
        majority(self.len())
    }

    /// The accounts' labels, in order.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.accounts.iter().map(|(label, _)| label.as_str())
    }

    /// The accounts' stores, in order.
    pub fn stores(&self) -> impl Iterator<Item = &S> {
        self.accounts.iter().map(|(_, store)| store)
    }

    /// Inspects the lease on every account, each call cut at the request
    /// timeout, in the accounts' order, and tells whose lease each holds
    /// ([`Holding`]).
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop: it only reads.
    pub async fn inspect_each(&self) -> Vec<AccountLease> {
        let (answers, _) = self.inspect_all().await;
        let answers = self
            .accounts
            .iter()
            .zip(answers)
            .map(|((label, _), answer)| {
                let lease = answer.unwrap_or_else(|| Err(Error::transport("inspect", "not asked")));
                (label.clone(), lease)
            })
            .collect();
        AccountLease::attribute(answers)
    }

    /// The leader, from the answers of [`inspect_each`](Self::inspect_each):
    /// the holder and epoch of the term whose stamp a majority of all the
    /// accounts carries beside a lease ([`Holding::Term`]). `None` when no
    /// majority agrees on one holder and epoch.
    #[must_use]
    pub fn leader<'a>(&self, each: &'a [AccountLease]) -> Option<(&'a str, u64)> {
        each::leader(self.len(), each)
    }

    /// The one view [`inspect`](LeaseStore::inspect) gives, from the
    /// answers of [`inspect_each`](Self::inspect_each): leased when a
    /// majority of all the accounts is, with the holder and epoch of the
    /// largest epoch, and no [`storage_time`](LeaseInfo::storage_time)
    /// (each account has its own clock). Meaningful when a majority
    /// answered.
    #[must_use]
    pub fn merged(&self, each: &[AccountLease]) -> Option<LeaseInfo> {
        let found: Vec<Option<LeaseInfo>> = each
            .iter()
            .filter_map(|account| account.lease.as_ref().ok().cloned())
            .collect();
        merge(self.len(), &found)
    }

    async fn inspect_all(&self) -> (Answers<Option<LeaseInfo>>, Votes) {
        let limit = self.request_timeout;
        ask_all(
            &self.accounts,
            "inspect",
            |_, store| Some(bounded("inspect", limit, store.inspect())),
            |_, answer| vote_ok(answer),
        )
        .await
    }

    fn remember(&self, term: Term) {
        let mut terms = self.terms.lock().unwrap_or_else(PoisonError::into_inner);
        terms.retain(|t| t.id != term.id);
        if terms.len() >= TERMS_KEPT {
            terms.pop_front();
        }
        terms.push_back(term);
    }

    fn recall(&self, id: LeaseId) -> Option<Term> {
        let terms = self.terms.lock().unwrap_or_else(PoisonError::into_inner);
        terms.iter().find(|t| t.id == id).cloned()
    }

    fn forget(&self, id: LeaseId) -> Option<Term> {
        let mut terms = self.terms.lock().unwrap_or_else(PoisonError::into_inner);
        let at = terms.iter().position(|t| t.id == id)?;
        terms.remove(at)
    }
}

/// One view of the lease from the accounts that answered (`n` in all):
/// leased when a majority of all `n` is; free when a majority is free (and
/// available when every account that answered is); otherwise breaking, as
/// no majority can be acquired now. Holder, epoch and the rest come from
/// the account with the largest epoch. `None` when no account has the lease.
fn merge(n: usize, found: &[Option<LeaseInfo>]) -> Option<LeaseInfo> {
    let infos: Vec<&LeaseInfo> = found.iter().flatten().collect();
    let last = infos.iter().max_by_key(|info| info.epoch)?;
    let leased = infos
        .iter()
        .filter(|i| i.state == LeaseState::Leased)
        .count();
    // An account without the lease blob is as free as one never leased.
    let free = found.len() - infos.len() + infos.iter().filter(|i| i.state.is_free()).count();
    let state = if leased >= majority(n) {
        LeaseState::Leased
    } else if free >= majority(n) {
        if infos.iter().all(|i| i.state == LeaseState::Available) {
            LeaseState::Available
        } else {
            LeaseState::Expired
        }
    } else {
        LeaseState::Breaking
    };
    let mut info = (*last).clone();
    info.state = state;
    info.infinite = (state == LeaseState::Leased).then_some(false);
    // The accounts' clocks are several; none of them is the quorum's.
    info.storage_time = None;
    Some(info)
}

#[deny(clippy::missing_trait_methods)]
impl<S: LeaseStore> LeaseStore for QuorumLeaseStore<S> {
    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        // Bounded inside: half the request timeout asking, the rest at most
        // giving back what was granted when no majority granted.
        self.acquire_quorum(proposed, duration)
    }

    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        bounded("renew", self.request_timeout, self.renew_quorum(lease))
    }

    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send {
        bounded("release", self.request_timeout, self.release_quorum(lease))
    }

    fn stamp(
        &self,
        lease: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> impl Future<Output = Result<u64>> + Send {
        // Bounded inside: the request timeout, and more for records made
        // anew. Boxed: the engine awaits it inside its own future.
        Box::pin(self.stamp_quorum(lease, holder, options.advertised(), options.floor()))
    }

    /// Whether every account keeps what a stamp advertises.
    fn supports_advertised(&self) -> bool {
        self.stores().all(LeaseStore::supports_advertised)
    }

    fn change(&self, from: LeaseId, to: LeaseId) -> impl Future<Output = Result<()>> + Send {
        bounded("change", self.request_timeout, self.change_quorum(from, to))
    }

    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>>> + Send {
        bounded("inspect", self.request_timeout, self.inspect_quorum())
    }

    /// The store's request timeout: an acquire takes that long at most,
    /// and must not be cut before it gives back what it was granted.
    fn min_request_timeout(&self) -> Option<Duration> {
        Some(self.request_timeout)
    }

    /// `quorum-of-N:` and the accounts' lease names (one when they agree).
    fn name(&self) -> String {
        let mut names: Vec<String> = self.stores().map(LeaseStore::name).collect();
        names.dedup();
        format!("quorum-of-{}:{}", self.len(), names.join(","))
    }

    // Leader state and candidates are kept in one place, which a quorum
    // does not have: it keeps neither, and says so on every call.

    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>>> + Send {
        unsupported("read state")
    }

    fn write_state(&self, _: LeaseId, _: &[u8]) -> impl Future<Output = Result<()>> + Send {
        unsupported("write state")
    }

    fn supports_candidates(&self) -> bool {
        false
    }

    fn advertise(
        &self,
        _: LeaseId,
        _: &Candidate,
        _: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send {
        unsupported("advertise a candidate")
    }

    fn keep_advertising(&self, _: LeaseId, _: &str) -> impl Future<Output = Result<()>> + Send {
        unsupported("advertise a candidate")
    }

    fn withdraw(&self, _: LeaseId, _: &str) -> impl Future<Output = Result<()>> + Send {
        unsupported("withdraw a candidate")
    }

    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>>> + Send {
        unsupported("list candidates")
    }
}

/// The answer to a call that a quorum does not support.
fn unsupported<T>(operation: &'static str) -> std::future::Ready<Result<T>> {
    std::future::ready(Err(Error::Unsupported { operation }))
}

#[cfg(all(test, feature = "testing"))]
mod hold_off_tests;
#[cfg(all(test, feature = "testing"))]
mod lift_tests;
#[cfg(all(test, feature = "testing"))]
mod own_term_tests;
#[cfg(all(test, feature = "testing"))]
mod tests;
#[cfg(all(test, feature = "testing"))]
mod timeout_tests;
