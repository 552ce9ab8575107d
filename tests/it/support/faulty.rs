//! A lease store (and lease-set store) around another that can be taken
//! down, slowed, blackholed, made to answer a garbled epoch, or made to
//! fail requests one by one as a [`Plan`] says, and that records, per
//! account, what the leases it granted and gave up and which state writes
//! landed: the outside record that tells when the next owner may lead.
// Shared with the tests that need it; not every item is used by each.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blob_mutex::{
    store::Acquire, store::Candidate, store::LeaseId, store::LeaseInfo, store::LeaseSetStore,
    store::LeaseStore, store::StampOptions, testing::MemoryLeaseSetStore, Error,
};
use tokio::time::Instant;

use super::plan::{refused, LATE};
pub use super::plan::{Plan, Way};

/// Storage's clock when a cell's accounts are made: 2026-11-30T00:00:03Z,
/// three seconds past a whole ten (a slot of a schedule every 10 s comes
/// 7 s in).
pub fn storage_clock() -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(1_795_996_803)
}

/// What storage does to every call while switched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    Up,
    /// Every call fails at once with a transport error.
    Down,
    /// Every call reaches storage this much late, and its answer comes
    /// back this much late again.
    Slow(Duration),
    /// No call reaches storage, and none ever answers.
    Blackhole,
}

/// What storage did with one lease id, on one account.
#[derive(Clone, Copy, Debug)]
pub enum Effect {
    /// Granted or renewed, from `at` (when storage saw it) for the lease's
    /// duration.
    Granted,
    /// Released, or changed to another id.
    Freed,
    /// A renewal answered that the lease is not held under this id.
    Lost,
    /// A state write under this id landed.
    Wrote,
}

#[derive(Clone, Debug)]
pub struct Call {
    pub account: usize,
    pub key: String,
    pub lease: LeaseId,
    pub effect: Effect,
    pub at: Instant,
}

/// The storage of one cell: every account's leases, the switch all of
/// them obey, and the record of what they did.
pub struct Accounts {
    pub sets: Vec<MemoryLeaseSetStore>,
    pub storage: Mutex<Storage>,
    /// The lease whose stamp answers [`Error::InvalidEpoch`].
    pub garbled: Mutex<Option<String>>,
    pub calls: Mutex<Vec<Call>>,
    /// Foreign breaks, by lease key.
    pub breaks: Mutex<BTreeMap<String, Vec<Instant>>>,
    /// Which requests fail, one by one.
    pub plan: Mutex<Plan>,
}

impl Accounts {
    /// `n` accounts, their clocks all reading [`storage_clock`] now, so
    /// that a run on paused time goes the same way whenever it is run.
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(Accounts {
            sets: (0..n)
                .map(|_| MemoryLeaseSetStore::new().with_clock(storage_clock()))
                .collect(),
            storage: Mutex::new(Storage::Up),
            garbled: Mutex::default(),
            calls: Mutex::default(),
            breaks: Mutex::default(),
            plan: Mutex::default(),
        })
    }

    /// From now on, requests fail as `plan` says.
    pub fn set_plan(&self, mut plan: Plan) {
        plan.begin();
        *self.plan.lock().unwrap() = plan;
    }

    /// Every request sent so far, as the plan saw it.
    pub fn sent(&self) -> Vec<super::plan::Sent> {
        self.plan.lock().unwrap().sent().to_vec()
    }

    fn decide(
        &self,
        caller: usize,
        account: usize,
        key: &str,
        operation: &'static str,
    ) -> Option<(Way, usize)> {
        let mut plan = self.plan.lock().unwrap();
        let way = plan.decide(caller, account, key, operation)?;
        Some((way, plan.sent().last().map_or(0, |s| s.request.nth)))
    }

    pub fn set_storage(&self, storage: Storage) {
        *self.storage.lock().unwrap() = storage;
    }

    /// Breaks the lease `key` on every account, as an operator would.
    pub fn break_lease(&self, key: &str) {
        for set in &self.sets {
            set.get(key).break_lease();
        }
        let mut breaks = self.breaks.lock().unwrap();
        breaks
            .entry(key.to_owned())
            .or_default()
            .push(Instant::now());
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The lease `key` of account `account`, faulty, for caller 0 (see
    /// [`Faulty::by`]).
    pub fn lease(self: &Arc<Self>, account: usize, cell: &str, key: &str) -> Faulty {
        Faulty {
            accounts: self.clone(),
            account,
            caller: 0,
            key: key.into(),
            name: format!("{cell}/{key}").into(),
        }
    }

    /// Account `account`'s lease set, faulty, for caller 0 (see
    /// [`FaultySet::by`]).
    pub fn set(self: &Arc<Self>, account: usize, cell: &str) -> FaultySet {
        FaultySet {
            accounts: self.clone(),
            account,
            caller: 0,
            cell: cell.into(),
        }
    }

    fn record(&self, account: usize, key: &str, lease: LeaseId, effect: Effect, at: Instant) {
        self.calls.lock().unwrap().push(Call {
            account,
            key: key.to_owned(),
            lease,
            effect,
            at,
        });
    }

    /// Waits as storage would before a call reaches it; `Err` when it never
    /// will.
    async fn reach(&self, operation: &'static str) -> Result<(), Error> {
        let storage = *self.storage.lock().unwrap();
        match storage {
            Storage::Up => Ok(()),
            Storage::Down => Err(Error::transport(operation, "storage is down")),
            Storage::Slow(by) => {
                tokio::time::sleep(by).await;
                Ok(())
            }
            Storage::Blackhole => std::future::pending().await,
        }
    }

    /// Waits as storage would before an answer comes back.
    async fn answer(&self) {
        let storage = *self.storage.lock().unwrap();
        if let Storage::Slow(by) = storage {
            tokio::time::sleep(by).await;
        }
    }
}

/// One lease of one account, through the faults of its cell.
#[derive(Clone)]
pub struct Faulty {
    accounts: Arc<Accounts>,
    account: usize,
    /// Who sends its requests, as the plan names them.
    caller: usize,
    key: Arc<str>,
    name: Arc<str>,
}

impl Faulty {
    /// The same lease, its requests sent by `caller` (an instance's index).
    #[must_use]
    pub fn by(mut self, caller: usize) -> Self {
        self.caller = caller;
        self
    }

    fn inner(&self) -> blob_mutex::testing::MemoryLeaseStore {
        self.accounts.sets[self.account].get(&self.key)
    }

    /// Runs `call` on the account's lease once storage is reached, as the
    /// plan says, and records its effect on `lease` (the instant is when
    /// storage saw it).
    fn call<T, Fut>(
        &self,
        operation: &'static str,
        lease: LeaseId,
        call: impl FnOnce(blob_mutex::testing::MemoryLeaseStore) -> Fut + Send + 'static,
        effect: impl FnOnce(&Result<T, Error>) -> Option<Effect> + Send + 'static,
    ) -> impl Future<Output = Result<T, Error>> + Send + 'static
    where
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        let this = self.clone();
        async move {
            let planned = this
                .accounts
                .decide(this.caller, this.account, &this.key, operation);
            this.accounts.reach(operation).await?;
            match planned {
                None => {}
                Some((Way::Refused, nth)) => {
                    this.accounts.answer().await;
                    return Err(refused(nth));
                }
                Some((Way::LostBefore, _)) => return std::future::pending().await,
                Some((Way::LostAfter, _)) => {
                    let _ = this.act(lease, call, effect).await;
                    return std::future::pending().await;
                }
                Some((Way::Late, _)) => {
                    let late = this.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(LATE).await;
                        let _ = late.act(lease, call, effect).await;
                    });
                    return std::future::pending().await;
                }
            }
            let result = this.act(lease, call, effect).await;
            this.accounts.answer().await;
            result
        }
    }

    /// Storage acts on a call now: runs it on the account's lease, and
    /// records its effect.
    async fn act<T, Fut>(
        &self,
        lease: LeaseId,
        call: impl FnOnce(blob_mutex::testing::MemoryLeaseStore) -> Fut,
        effect: impl FnOnce(&Result<T, Error>) -> Option<Effect>,
    ) -> Result<T, Error>
    where
        Fut: Future<Output = Result<T, Error>>,
    {
        let at = Instant::now();
        let result = call(self.inner()).await;
        if let Some(effect) = effect(&result) {
            let at = if matches!(effect, Effect::Lost) {
                Instant::now()
            } else {
                at
            };
            self.accounts
                .record(self.account, &self.key, lease, effect, at);
        }
        result
    }

    fn stamp_call(
        &self,
        lease: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> impl Future<Output = Result<u64, Error>> + Send + 'static {
        let garbled = self.accounts.garbled.lock().unwrap().as_deref() == Some(&*self.key);
        let (holder, options) = (holder.to_owned(), options.clone());
        self.call(
            "stamp",
            lease,
            move |inner| async move {
                if garbled {
                    return Err(Error::InvalidEpoch {
                        found: "garbled".to_owned(),
                    });
                }
                inner.stamp(lease, &holder, &options).await
            },
            |_| None,
        )
    }
}

fn granted(r: &Result<Acquire, Error>) -> Option<Effect> {
    matches!(r, Ok(Acquire::Acquired)).then_some(Effect::Granted)
}

impl LeaseStore for Faulty {
    fn acquire(
        &self,
        proposed: LeaseId,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire, Error>> + Send {
        self.call(
            "acquire",
            proposed,
            move |inner| async move { inner.acquire(proposed, duration).await },
            granted,
        )
    }

    fn renew(&self, lease: LeaseId) -> impl Future<Output = Result<(), Error>> + Send {
        self.call(
            "renew",
            lease,
            move |inner| async move { inner.renew(lease).await },
            |r| match r {
                Ok(()) => Some(Effect::Granted),
                Err(Error::LeaseLost(_)) => Some(Effect::Lost),
                Err(_) => None,
            },
        )
    }

    fn release(&self, lease: LeaseId) -> impl Future<Output = Result<(), Error>> + Send {
        self.call(
            "release",
            lease,
            move |inner| async move { inner.release(lease).await },
            |r| r.is_ok().then_some(Effect::Freed),
        )
    }

    fn stamp(
        &self,
        lease: LeaseId,
        holder: &str,
        options: &StampOptions,
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        self.stamp_call(lease, holder, options)
    }

    fn inspect(&self) -> impl Future<Output = Result<Option<LeaseInfo>, Error>> + Send {
        self.call(
            "inspect",
            LeaseId::new(),
            |inner| async move { inner.inspect().await },
            |_| None,
        )
    }

    fn name(&self) -> String {
        self.name.to_string()
    }

    fn change(&self, from: LeaseId, to: LeaseId) -> impl Future<Output = Result<(), Error>> + Send {
        self.call(
            "change",
            from,
            move |inner| async move { inner.change(from, to).await },
            |r| r.is_ok().then_some(Effect::Freed),
        )
    }

    fn supports_candidates(&self) -> bool {
        true
    }

    fn supports_advertised(&self) -> bool {
        true
    }

    fn advertise(
        &self,
        record: LeaseId,
        candidate: &Candidate,
        duration: Duration,
    ) -> impl Future<Output = Result<Acquire, Error>> + Send {
        let candidate = candidate.clone();
        self.call(
            "advertise",
            record,
            move |inner| async move { inner.advertise(record, &candidate, duration).await },
            |_| None,
        )
    }

    fn keep_advertising(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let holder = holder.to_owned();
        self.call(
            "keep advertising",
            record,
            move |inner| async move { inner.keep_advertising(record, &holder).await },
            |_| None,
        )
    }

    fn withdraw(
        &self,
        record: LeaseId,
        holder: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let holder = holder.to_owned();
        self.call(
            "withdraw",
            record,
            move |inner| async move { inner.withdraw(record, &holder).await },
            |_| None,
        )
    }

    fn candidates(&self) -> impl Future<Output = Result<Vec<Candidate>, Error>> + Send {
        self.call(
            "list candidates",
            LeaseId::new(),
            |inner| async move { inner.candidates().await },
            |_| None,
        )
    }

    fn read_state(&self) -> impl Future<Output = Result<Vec<u8>, Error>> + Send {
        self.call(
            "read state",
            LeaseId::new(),
            |inner| async move { inner.read_state().await },
            |_| None,
        )
    }

    fn write_state(
        &self,
        lease: LeaseId,
        state: &[u8],
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let state = state.to_vec();
        self.call(
            "write state",
            lease,
            move |inner| async move { inner.write_state(lease, &state).await },
            |r| r.is_ok().then_some(Effect::Wrote),
        )
    }
}

/// One account's lease set, through the faults of its cell.
#[derive(Clone)]
pub struct FaultySet {
    accounts: Arc<Accounts>,
    account: usize,
    caller: usize,
    cell: Arc<str>,
}

impl FaultySet {
    /// The same set, its requests (and its leases') sent by `caller`.
    #[must_use]
    pub fn by(mut self, caller: usize) -> Self {
        self.caller = caller;
        self
    }
}

impl LeaseSetStore for FaultySet {
    type Lease = Faulty;

    fn lease(&self, name: &str) -> Result<Faulty, Error> {
        Ok(self
            .accounts
            .lease(self.account, &self.cell, name)
            .by(self.caller))
    }

    fn list(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<(String, LeaseInfo)>, Error>> + Send {
        let (accounts, account, prefix) = (self.accounts.clone(), self.account, prefix.to_owned());
        let caller = self.caller;
        async move {
            // A listing only reads: lost before or after is one failure.
            let planned = accounts.decide(caller, account, &prefix, "list");
            accounts.reach("list").await?;
            match planned {
                None => {}
                Some((Way::Refused, nth)) => return Err(refused(nth)),
                Some(_) => return std::future::pending().await,
            }
            let listed = accounts.sets[account].list(&prefix).await;
            accounts.answer().await;
            listed
        }
    }
}
