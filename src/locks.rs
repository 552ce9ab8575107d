//! Locks by name: one provider, made once from settings that name a
//! container, hands out a mutex, a guard or one attempt for any name, every
//! lease of it over the provider's one client and credential. See the
//! guide's [Choosing a shape](crate::guide::shapes#many-locks-by-name).

mod local;

use std::future::Future;
use std::sync::Arc;

use self::local::LocalNames;

use crate::azure::settings::{validate_blob_name, BlobSettings};
use crate::azure::BlobLeaseSetStore;
use crate::bounded::bounded;
use crate::engine::leader::Leader;
use crate::engine::leadership::LeaderContext;
use crate::error::{BoxError, Error, Result};
use crate::mutex::{BlobDistributedMutex, MutexGuard, TryAcquire};
use crate::options::{default_holder, MutexOptions};
use crate::store::names::{set_lease, SetLease};
use crate::store::{check_request_timeout, LeaseSetStore, LeaseStore};

/// Locks by name in one container: [`acquire("order-42")`](Self::acquire)
/// holds the lease of `order-42` as a [`MutexGuard`],
/// [`try_acquire`](Self::try_acquire) makes one attempt, and
/// [`mutex`](Self::mutex) and [`mutex_with_task`](Self::mutex_with_task)
/// give the [`BlobDistributedMutex`] of a name, for guards or for a task.
///
/// Made once, from [`BlobSettings`] (by reference, as a
/// [`BlobLeaseSet`](crate::BlobLeaseSet) is) and [`MutexOptions`]; every lock it
/// hands out shares its one HTTP client (one pool of connections) and its
/// one credential (on the official backend, one signer of the account
/// key's SAS; one token cache for a token credential), and takes its
/// options. A lock costs no request until it is acquired, and then what a
/// mutex costs: one renewal every `renew_interval` while it is held (720
/// an hour per name with the defaults), and a poll every `acquire_retry`
/// while [`acquire`](Self::acquire) waits; its memory is that of a mutex
/// and its background task (see `BENCHMARKS.md` for 1 000 names held at
/// once). The provider is cheap to clone: clones share the client.
///
/// # Names
///
/// The settings' blob name is the locks' prefix: the lock `order-42` of
/// settings naming the container `leases` and the blob `locks` is the
/// lease of the blob `locks/order-42` in `leases`, and a lock name may
/// have path segments of its own (`orders/42` is `locks/orders/42`). A
/// lease set named like the prefix keeps its own blobs under
/// `<prefix>/members/` and `<prefix>/partitions/`, so a lock name may not
/// start with `members/` or `partitions/`, nor have a path segment
/// `members` or `partitions` after its first, nor one ending in
/// `.candidates` (the names a set or a lease owns); and it obeys Azure's
/// rules of a blob name (1 to 1 024 characters with the prefix, no control
/// characters or backslashes, no empty, `.` or `..` segment, no trailing
/// dot). Any other name is refused with [`Error::InvalidOption`] naming
/// `name`, before any request.
///
/// # The same name twice
///
/// Within one provider (and its clones), a name is a local lock as well:
/// while a guard of `order-42` from [`acquire`](Self::acquire) or
/// [`try_acquire`](Self::try_acquire) lives,
/// [`try_acquire("order-42")`](Self::try_acquire) returns
/// [`TryAcquire::Held`] and [`acquire("order-42")`](Self::acquire) waits
/// until that guard is released or dropped, even once the first guard's
/// term has ended and storage has expired its lease (a holder that
/// wedged): this provider never hands out a second guard of a name while
/// the first lives.
///
/// Between providers (other processes, or another provider in this one)
/// the lease decides, as between any two instances: a second guard of a
/// name is handed out only once the first one's lease was released, or
/// could have expired, and the first one's
/// [`token`](MutexGuard::token) is cancelled before then; a holder that
/// does not watch it may still run, which only the
/// [`epoch`](MutexGuard::epoch) checked downstream protects against. The
/// mutexes of [`mutex`](Self::mutex) and
/// [`mutex_with_task`](Self::mutex_with_task) are such other instances:
/// each call makes its own mutex for the name (no request, no client: the
/// provider's), outside the provider's local locks. Keep the mutex of
/// [`mutex_with_task`](Self::mutex_with_task) for as long as its task form
/// runs: the promises a mutex keeps about its own earlier terms (no
/// campaign while a task it could not stop may still run) are per mutex.
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> Result<(), blob_mutex::Error> {
/// use blob_mutex::{BlobLocks, BlobSettings, TryAcquire};
///
/// let connection_string = std::env::var("AZURE_STORAGE_CONNECTION_STRING").unwrap_or_default();
/// // Every lock is a blob under locks/ in the container leases.
/// let settings = BlobSettings::from_connection_string(&connection_string, "leases", "locks")?;
/// let locks = BlobLocks::new(&settings)?;
///
/// let guard = locks.acquire("order-42").await?;
/// if guard.is_current() {
///     // one step on order 42, written with guard.epoch() as its fencing token
/// }
/// guard.release().await?;
///
/// match locks.try_acquire("order-43").await? {
///     TryAcquire::Acquired(guard) => drop(guard), // released in the background
///     TryAcquire::Held(leader) => println!("order 43 is busy: {leader:?}"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
pub struct BlobLocks<S: LeaseSetStore = BlobLeaseSetStore> {
    store: Arc<S>,
    /// The options of every lock, with the holder name resolved.
    options: MutexOptions,
    /// The names whose guard from `acquire` or `try_acquire` lives, shared
    /// by the provider's clones.
    local: LocalNames,
}

impl<S: LeaseSetStore> Clone for BlobLocks<S> {
    fn clone(&self) -> Self {
        BlobLocks {
            store: self.store.clone(),
            options: self.options.clone(),
            local: self.local.clone(),
        }
    }
}

impl<S: LeaseSetStore> std::fmt::Debug for BlobLocks<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobLocks")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl BlobLocks<BlobLeaseSetStore> {
    /// The locks under the settings' blob name, in the settings' container,
    /// with default [`MutexOptions`].
    ///
    /// # Errors
    ///
    /// As [`BlobLocks::with_options`].
    pub fn new(settings: &BlobSettings) -> Result<Self> {
        Self::with_options(settings, MutexOptions::default())
    }

    /// The locks under the settings' blob name, in the settings' container,
    /// each with `options`. The client and the credential are made here,
    /// once.
    ///
    /// # Errors
    ///
    /// As [`BlobDistributedMutex::with_options`]: [`Error::InvalidOption`]
    /// naming the first invalid option or setting,
    /// [`Error::InvalidConnectionString`] when the settings' SAS token is
    /// malformed.
    pub fn with_options(settings: &BlobSettings, options: MutexOptions) -> Result<Self> {
        options.validate()?;
        let store = BlobLeaseSetStore::new(settings)?.with_request_timeout(options.request_timeout);
        Self::with_store(store, options)
    }

    /// Where the locks live: their container, and their prefix as the blob
    /// name.
    #[must_use]
    pub fn settings(&self) -> &BlobSettings {
        self.store.settings()
    }
}

impl<S: LeaseSetStore> BlobLocks<S> {
    /// The locks of any [`LeaseSetStore`], whose
    /// [`lease(name)`](LeaseSetStore::lease) is the lock's lease: for
    /// example the in-memory set store of the `testing` feature, to test
    /// code that takes locks with paused Tokio time and no emulator.
    ///
    /// When `options` name no [`holder`](MutexOptions::holder), this
    /// process's default holder name is taken once, here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the first invalid option (see
    /// [`MutexOptions::validate`]), or `request_timeout` when it is shorter
    /// than the store's
    /// [`min_request_timeout`](LeaseSetStore::min_request_timeout).
    pub fn with_store(store: S, mut options: MutexOptions) -> Result<Self> {
        options.validate()?;
        check_request_timeout(store.min_request_timeout(), options.request_timeout)?;
        if options.holder.is_none() {
            options.holder = Some(default_holder());
        }
        Ok(BlobLocks {
            store: Arc::new(store),
            options,
            local: LocalNames::default(),
        })
    }

    /// The store the locks' leases come from.
    #[must_use]
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The options of every lock, with the holder name in force.
    #[must_use]
    pub fn options(&self) -> &MutexOptions {
        &self.options
    }

    /// The mutex of the lock `name`, for guards: hold it with
    /// [`acquire`](BlobDistributedMutex::acquire) and
    /// [`try_acquire`](BlobDistributedMutex::try_acquire), watch it with
    /// [`watch`](BlobDistributedMutex::watch),
    /// [`leader`](BlobDistributedMutex::leader) and
    /// [`term_reports`](BlobDistributedMutex::term_reports). It has no
    /// task (see [`for_guards`](BlobDistributedMutex::for_guards)). No
    /// request is made.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `name` when it cannot name a lock
    /// (see [Names](#names)); [`Error::Unsupported`] for a
    /// [`priority`](MutexOptions::priority) or an
    /// [`advertised`](MutexOptions::advertised) value that the store's
    /// leases cannot keep.
    pub fn mutex(&self, name: &str) -> Result<BlobDistributedMutex<S::Lease>> {
        BlobDistributedMutex::with_store_for_guards(self.lease(name)?, self.options.clone())
    }

    /// The mutex of the lock `name` that runs `task` while it leads, for
    /// the task form ([`run_task_when_mutex_acquired`](BlobDistributedMutex::run_task_when_mutex_acquired))
    /// and [`run_once`](BlobDistributedMutex::run_once), as
    /// [`BlobDistributedMutex::with_options`] makes one. No request is
    /// made.
    ///
    /// # Errors
    ///
    /// As [`mutex`](Self::mutex).
    pub fn mutex_with_task<F, Fut, E>(
        &self,
        name: &str,
        task: F,
    ) -> Result<BlobDistributedMutex<S::Lease>>
    where
        F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        BlobDistributedMutex::with_store(self.lease(name)?, self.options.clone(), task)
    }

    /// Campaigns until this instance holds the lock `name`, and returns a
    /// guard that holds it (see [`MutexGuard`]): as
    /// [`BlobDistributedMutex::acquire`] on [`mutex(name)`](Self::mutex).
    /// While another guard of the name lives, it waits: one of this
    /// provider's until that guard is gone, another instance's until its
    /// lease is free (see [The same name twice](#the-same-name-twice)).
    ///
    /// # Errors
    ///
    /// As [`mutex`](Self::mutex) and [`BlobDistributedMutex::acquire`].
    ///
    /// # Cancellation safety
    ///
    /// As [`BlobDistributedMutex::acquire`]: dropping the future stops the
    /// campaign, and a lease acquired meanwhile is released in the
    /// background.
    pub async fn acquire(&self, name: &str) -> Result<MutexGuard> {
        let mutex = self.mutex(name)?;
        let local = self.local.hold(name).await;
        Ok(mutex.acquire().await?.keeping(local))
    }

    /// One attempt to acquire the lock `name`: a guard when it was free,
    /// [`TryAcquire::Held`] with its holder at once when another guard or
    /// instance holds it (this provider's own guards of the name too). As
    /// [`BlobDistributedMutex::try_acquire`] on [`mutex(name)`](Self::mutex).
    ///
    /// # Errors
    ///
    /// As [`mutex`](Self::mutex) and [`BlobDistributedMutex::try_acquire`].
    ///
    /// # Cancellation safety
    ///
    /// As [`BlobDistributedMutex::try_acquire`].
    pub async fn try_acquire(&self, name: &str) -> Result<TryAcquire> {
        let mutex = self.mutex(name)?;
        let Some(local) = self.local.try_hold(name) else {
            // Held here: storage names its holder, or nobody while the
            // lease of a guard whose term ended has not expired yet.
            let timeout = self.options.request_timeout;
            let info = bounded("inspect", timeout, mutex.store().inspect()).await?;
            return Ok(TryAcquire::Held(info.as_ref().and_then(Leader::from_info)));
        };
        Ok(match mutex.try_acquire().await? {
            TryAcquire::Acquired(guard) => TryAcquire::Acquired(guard.keeping(local)),
            held => held,
        })
    }

    /// The lease of the lock `name`, its name checked first (and by the
    /// store, which knows the prefix: a name too long with it).
    fn lease(&self, name: &str) -> Result<S::Lease> {
        check_name(name)?;
        self.store.lease(name).map_err(|e| match e {
            Error::InvalidOption { reason, .. } => {
                Error::invalid("name", format!("not a lock name: {reason}"))
            }
            e => e,
        })
    }
}

/// Refuses a name that cannot name a lock ([`Error::InvalidOption`] naming
/// `name`): Azure's rules of a blob name, and none of the names a lease set
/// or a lease owns (see [`BlobLocks`]'s Names).
fn check_name(name: &str) -> Result<()> {
    let reason = match validate_blob_name(name).and_then(|()| set_lease(name)) {
        Ok(SetLease::Other) => return Ok(()),
        Ok(SetLease::Member | SetLease::Partition) => format!(
            "{name:?} starts with members/ or partitions/, where a lease set named like the \
             locks' prefix keeps its members and partitions; choose another name"
        ),
        Err(Error::InvalidOption { reason, .. }) => reason,
        Err(e) => return Err(e),
    };
    Err(Error::invalid("name", format!("not a lock name: {reason}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::azure::settings::Backend;

    #[test]
    fn names_a_set_or_a_lease_owns_and_names_azure_refuses_are_no_lock_names() {
        let long = "a".repeat(1025);
        let deep = vec!["a"; 255].join("/");
        for bad in [
            "",
            "members/x",
            "partitions/p",
            "a/members/b",
            "a/partitions",
            "x.candidates",
            "a/x.candidates/b",
            "a//b",
            "/a",
            "a/",
            ".",
            "a/../b",
            "a.",
            "a\\b",
            "a\nb",
            "\u{0}",
            long.as_str(),
            deep.as_str(),
        ] {
            match check_name(bad) {
                Err(Error::InvalidOption {
                    field: "name",
                    reason,
                }) => {
                    assert!(reason.starts_with("not a lock name: "), "{bad:?}: {reason}");
                }
                other => panic!("{bad:?} was not refused as a name: {other:?}"),
            }
        }
        for good in [
            "order-42",
            "orders/42",
            "team-members/x",
            "Members/x",
            "x/membership",
            "ünïcödé",
        ] {
            check_name(good).unwrap_or_else(|e| panic!("{good:?}: {e}"));
        }
    }

    #[test]
    fn no_string_makes_the_name_check_panic() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..2_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = usize::try_from(seed % 40).unwrap_or(0);
            let name: String = (0..len)
                .map(|i| {
                    let pick = (seed >> (i % 56)) % 8;
                    ['a', '/', '.', '\\', '\u{7}', 'é', '-', '\u{10ffff}']
                        [usize::try_from(pick).unwrap_or(0)]
                })
                .collect();
            let _ = check_name(&name);
        }
    }

    /// The backends built in.
    fn backends() -> Vec<Backend> {
        Backend::ALL
            .into_iter()
            .filter(|b| b.check_built_in().is_ok())
            .collect()
    }

    #[test]
    fn every_lock_of_a_provider_shares_its_one_client_and_credential_on_every_backend() {
        for backend in backends() {
            let settings = BlobSettings::azurite("locks", "prefix")
                .unwrap()
                .with_backend(backend);
            let locks = BlobLocks::new(&settings).unwrap();
            let names = ["a", "b", "orders/42"];
            let mutexes: Vec<_> = names.iter().map(|n| locks.mutex(n).unwrap()).collect();
            let first = mutexes[0].store();
            for (name, mutex) in names.iter().zip(&mutexes) {
                assert_eq!(mutex.settings().blob(), format!("prefix/{name}"));
                assert!(
                    first.shares_client_with(mutex.store()),
                    "{backend}: the lock {name:?} has a client of its own"
                );
            }
            let clone = locks.clone().mutex("c").unwrap();
            assert!(first.shares_client_with(clone.store()));
            // A manager made from the same settings builds its own client.
            let own = crate::azure::BlobLeaseManager::new(first.settings()).unwrap();
            assert!(!first.shares_client_with(&own), "{backend}");
        }
    }
}
