//! The chaos runner's rig: storage (one Azurite, and three more for the
//! quorum modes), a fault proxy per worker and account, the fenced
//! register, a group of worker processes per mode, all at once, and the
//! faults the nemesis draws, applied to them and written into the history.
//!
//! Accounts are numbered: 0 is the single account of the one-account modes,
//! 1 to 3 the quorum's. Every worker reaches each of its accounts through a
//! proxy of its own, so that a fault can hit one worker's path or, applied
//! to every proxy of an account, the whole account.

use std::process::Command;
use std::time::Duration;

use blob_mutex::azure::Backend;

use super::azurite::{self, Azurite};
use super::chaos::{env_u64, seed};
use super::history::{Fault, History, Pause, Role};
use super::nemesis::{Draw, Nemesis, Net};
use super::proxy::{Direction, Injected, Mode, Proxy};
use super::register::Register;
use super::workers::{cli_bin, Cluster, Spec, What};

/// The lease of every mode.
pub const LEASE: Duration = Duration::from_secs(15);

/// Flags every fault worker gets: the shortest lease, renewals every 2 s,
/// retries every 0.5 s, a 1 s grace, a unit of work every 300 ms.
const TIMING: &[&str] = &[
    "--lease-secs",
    "15",
    "--renew-ms",
    "2000",
    "--acquire-retry-ms",
    "500",
    "--grace-ms",
    "1000",
    "--work-ms",
    "300",
];

/// The modes, one group of workers each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The mutex; units of work write the lease blob's fenced state.
    Mutex,
    /// A lease set of 12 partitions over 4 instances.
    Set,
    /// The mutex on a quorum of 3 accounts.
    QuorumMutex,
    /// A lease set of 6 partitions on a quorum of 3 accounts.
    QuorumSet,
    /// The mutex with priorities: each worker started later has a higher one.
    Handover,
    /// `blob-mutex run` of a script that writes the state with `state put`.
    Run,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Mutex,
        Kind::Set,
        Kind::QuorumMutex,
        Kind::QuorumSet,
        Kind::Handover,
        Kind::Run,
    ];

    /// The group's name, which is also its blob's, as `--modes` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Set => "set",
            Kind::QuorumMutex => "qmutex",
            Kind::QuorumSet => "qset",
            Kind::Handover => "handover",
            Kind::Run => "run",
        }
    }

    fn size(self) -> usize {
        match self {
            Kind::Set => 4,
            Kind::Run => 2,
            _ => 3,
        }
    }

    fn partitions(self) -> usize {
        match self {
            Kind::Set => 12,
            Kind::QuorumSet => 6,
            _ => 0,
        }
    }

    fn quorum(self) -> bool {
        matches!(self, Kind::QuorumMutex | Kind::QuorumSet)
    }

    /// Its resources: the lease, or each partition.
    pub fn resources(self) -> Vec<String> {
        match self.partitions() {
            0 => vec![self.name().to_owned()],
            n => (0..n).map(|i| format!("{}/p{i:02}", self.name())).collect(),
        }
    }

    /// How soon after the nemesis stopped each resource must be owned again:
    /// an expiry (a paused or cut-off owner's lease), then a retry (a set:
    /// three balance cycles; a quorum: its back-off and a request time-out),
    /// a process start for a replacement, and room for a loaded two-core
    /// machine.
    fn bound(self) -> Duration {
        let extra = match self {
            Kind::Mutex | Kind::Handover => 10,
            Kind::Set | Kind::Run | Kind::QuorumMutex => 15,
            Kind::QuorumSet => 20,
        };
        LEASE + Duration::from_secs(extra)
    }

    /// Whether an operator's `break` applies (one blob, one account).
    fn breakable(self) -> bool {
        matches!(self, Kind::Mutex | Kind::Handover | Kind::Run)
    }

    /// Whether members join and leave (for handover: a higher-priority
    /// candidate joins).
    fn elastic(self) -> bool {
        matches!(self, Kind::Set | Kind::QuorumSet | Kind::Handover)
    }

    fn parse(name: &str) -> Kind {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == name.trim())
            .unwrap_or_else(|| {
                panic!("unknown mode {name:?}; modes: mutex,set,qmutex,qset,handover,run")
            })
    }
}

/// A run's configuration, from the environment (`scripts/chaos` sets it).
#[derive(Clone, Debug)]
pub struct Config {
    /// How long the nemesis runs: `BLOB_MUTEX_CHAOS_SECS`.
    pub secs: u64,
    /// `BLOB_MUTEX_CHAOS_SEED`, else `fixed`, else from the clock.
    pub seed: u64,
    /// `BLOB_MUTEX_CHAOS_BACKEND`: `official`, `sdk-v021`, or `all`
    /// (`None`: workers alternate, so that both backends share each lease).
    pub backend: Option<Backend>,
    /// `BLOB_MUTEX_CHAOS_MODES`, comma-separated; every mode when unset.
    pub kinds: Vec<Kind>,
}

impl Config {
    /// The configuration; `fixed` is the seed when none is set.
    pub fn from_env(default_secs: u64, fixed: Option<u64>) -> Config {
        let seed = env_u64("BLOB_MUTEX_CHAOS_SEED")
            .or(fixed)
            .unwrap_or_else(seed);
        let backend = match std::env::var("BLOB_MUTEX_CHAOS_BACKEND").as_deref() {
            Err(_) | Ok("all" | "") => None,
            Ok(name) => Some(
                name.parse()
                    .expect("BLOB_MUTEX_CHAOS_BACKEND names a backend"),
            ),
        };
        let kinds = match std::env::var("BLOB_MUTEX_CHAOS_MODES") {
            Ok(modes) if !modes.trim().is_empty() && modes != "all" => {
                modes.split(',').map(Kind::parse).collect()
            }
            _ => Kind::ALL.to_vec(),
        };
        Config {
            secs: env_u64("BLOB_MUTEX_CHAOS_SECS").unwrap_or(default_secs),
            seed,
            backend,
            kinds,
        }
    }
}

struct Group {
    kind: Kind,
    container: String,
    /// How many workers it should have now.
    size: usize,
    live: Vec<usize>,
    spawned: usize,
}

/// Storage, proxies, the register, the workers, and the history so far.
pub struct ChaosRig {
    pub cluster: Cluster,
    pub history: History,
    pub nemesis: Nemesis,
    config: Config,
    single: Azurite,
    quorum: Vec<Azurite>,
    register: Register,
    roles: Vec<Role>,
    /// `proxies[worker]`: (account, proxy) per account it uses; emptied
    /// once the worker has been replaced.
    proxies: Vec<Vec<(usize, Proxy)>>,
    groups: Vec<Group>,
    /// Paused workers, and when they are resumed.
    paused: Vec<(usize, Duration)>,
    /// Faulted paths (worker, account), and when they heal.
    faulted: Vec<(Vec<(usize, usize)>, Duration)>,
    last_wipe: Option<Duration>,
}

impl ChaosRig {
    /// Starts storage and every group's workers.
    pub fn start(config: Config) -> ChaosRig {
        let quorum = if config.kinds.iter().any(|k| k.quorum()) {
            (0..3).map(|_| Azurite::start()).collect()
        } else {
            Vec::new()
        };
        let mut history = History {
            seed: config.seed,
            break_grace: LEASE,
            wake_grace: Duration::from_secs(8),
            ..History::default()
        };
        let groups = config
            .kinds
            .iter()
            .map(|&kind| {
                for r in kind.resources() {
                    history.bounds.insert(r, kind.bound());
                }
                Group {
                    kind,
                    container: azurite::unique_container(&format!("chaos-{}", kind.name())),
                    size: kind.size(),
                    live: Vec::new(),
                    spawned: 0,
                }
            })
            .collect();
        let mut rig = ChaosRig {
            cluster: Cluster::new(),
            history,
            nemesis: Nemesis::new(config.seed, LEASE),
            config,
            single: Azurite::start(),
            quorum,
            register: Register::start(),
            roles: Vec::new(),
            proxies: Vec::new(),
            groups,
            paused: Vec::new(),
            faulted: Vec::new(),
            last_wipe: None,
        };
        rig.replace_exited();
        rig
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    fn port(&self, account: usize) -> u16 {
        match account {
            0 => self.single.port,
            q => self.quorum[q - 1].port,
        }
    }

    /// Starts the next worker of group `g`; returns its index.
    fn spawn(&mut self, g: usize) -> usize {
        let (kind, n) = (self.groups[g].kind, self.groups[g].spawned);
        self.groups[g].spawned += 1;
        let name = format!("{}.{n}", kind.name());
        let backend = self.config.backend.unwrap_or(if n % 2 == 0 {
            Backend::Official
        } else {
            Backend::SdkV021
        });
        let accounts: Vec<usize> = if kind.quorum() {
            vec![1, 2, 3]
        } else {
            vec![0]
        };
        let proxies: Vec<(usize, Proxy)> = accounts
            .iter()
            .map(|&a| (a, Proxy::start(self.port(a))))
            .collect();
        let strings: Vec<String> = proxies
            .iter()
            .map(|(_, p)| azurite::connection_string(&p.endpoint()))
            .collect();
        let container = self.groups[g].container.clone();
        let mut spec = Self::spec(kind, &name, n, &container, &strings);
        // The history takes a `run`'s term from its supervisor's log:
        // `became leader` (debug) when it began, `term ended` when its
        // command stopped.
        let log = match kind {
            Kind::Run => "warn,blob_mutex=info,blob_mutex::engine::report=debug",
            _ => "warn,blob_mutex=info",
        };
        spec.command
            .env(Backend::ENV, backend.as_str())
            .env("RUST_LOG", log);
        if matches!(kind, Kind::Set | Kind::QuorumSet | Kind::QuorumMutex) {
            spec.command
                .env("BLOB_MUTEX_FENCE_ADDR", self.register.addr());
        }
        let worker = self.cluster.spawn(spec);
        self.history.spawned.push(self.cluster.now());
        self.roles.push(Role {
            group: kind.name().to_owned(),
            exit_reports: kind == Kind::Run,
        });
        self.proxies.push(proxies);
        self.groups[g].live.push(worker);
        worker
    }

    /// The command of worker `name`, the `n`th of its group.
    fn spec(kind: Kind, name: &str, n: usize, container: &str, strings: &[String]) -> Spec {
        let partitions = kind.partitions().to_string();
        let priority = (n + 1).to_string();
        let mut flags: Vec<&str> = TIMING.to_vec();
        match kind {
            Kind::Set | Kind::QuorumSet => {
                flags.extend(["--partitions", &partitions, "--balance-ms", "1000"]);
            }
            Kind::Mutex => flags.extend(["--write-state-ms", "700"]),
            Kind::Handover => flags.extend(["--write-state-ms", "700", "--priority", &priority]),
            Kind::QuorumMutex => {}
            Kind::Run => {
                return Spec {
                    name: name.to_owned(),
                    command: run_command(name, container, &strings[0]),
                }
            }
        }
        if kind.quorum() {
            Spec::quorum_worker(name, strings, container, kind.name(), &flags)
        } else {
            Spec::worker(name, &strings[0], container, kind.name(), &flags)
        }
    }

    /// Replaces every worker that exited, and fills each group to its size.
    pub fn replace_exited(&mut self) {
        for g in 0..self.groups.len() {
            let exited: Vec<usize> = self.groups[g]
                .live
                .iter()
                .copied()
                .filter(|&w| self.cluster.exited(w).is_some())
                .collect();
            for w in exited {
                self.groups[g].live.retain(|&l| l != w);
                self.proxies[w].clear();
            }
            while self.groups[g].live.len() < self.groups[g].size {
                self.spawn(g);
            }
        }
    }

    /// Resumes paused workers and heals faulted paths whose time has come,
    /// and replaces workers that exited.
    pub fn tick(&mut self) {
        let now = self.cluster.now();
        let (due, waiting): (Vec<_>, Vec<_>) = self.paused.iter().partition(|(_, at)| *at <= now);
        self.paused = waiting;
        for (worker, _) in due {
            self.resume(worker);
        }
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.faulted)
            .into_iter()
            .partition(|(_, at)| *at <= now);
        self.faulted = waiting;
        for (paths, _) in due {
            self.heal(&paths);
        }
        self.replace_exited();
    }

    fn resume(&mut self, worker: usize) {
        let at = self.cluster.signal(worker, "CONT");
        if let Some(p) = self
            .history
            .pauses
            .iter_mut()
            .rev()
            .find(|p| p.worker == worker)
        {
            p.to = Some(at);
        }
    }

    fn heal(&self, paths: &[(usize, usize)]) {
        for &(worker, account) in paths {
            for (_, proxy) in self.proxies[worker].iter().filter(|(a, _)| *a == account) {
                proxy.heal();
            }
        }
    }

    /// Stops the nemesis: heals every path, resumes every paused worker.
    pub fn calm(&mut self) {
        for (worker, _) in std::mem::take(&mut self.paused) {
            self.resume(worker);
        }
        for (paths, _) in std::mem::take(&mut self.faulted) {
            self.heal(&paths);
        }
        self.history.calm = self.cluster.now();
    }

    /// Draws the next fault and applies it; returns it, unless it did not
    /// apply to any group of this run.
    pub fn strike(&mut self) -> Option<Fault> {
        let draw = self.nemesis.draw();
        let detail = match draw {
            Draw::Kill | Draw::Term | Draw::Pause(_) => self.signal(draw)?,
            Draw::Network {
                net,
                account,
                length,
            } => self.network(net, account, length)?,
            Draw::Wipe => self.wipe()?,
            Draw::Break => self.operator_break()?,
            Draw::Join | Draw::Leave => self.membership(draw)?,
        };
        // A worker joining the handover group has the highest priority yet.
        let kind = match draw {
            Draw::Join if detail.starts_with(Kind::Handover.name()) => "priority",
            _ => draw.kind(),
        };
        let fault = Fault {
            at: self.cluster.now(),
            kind,
            detail,
        };
        self.history.faults.push(fault.clone());
        Some(fault)
    }

    /// A live worker of a random group: its owner half of the time, if a
    /// mutex-like group has one, else any; `None` if none is live.
    fn victim(&mut self, filter: impl Fn(usize) -> bool) -> Option<usize> {
        let g = self.nemesis.pick(self.groups.len());
        let live: Vec<usize> = self.groups[g]
            .live
            .iter()
            .copied()
            .filter(|&w| filter(w))
            .collect();
        if live.is_empty() {
            return None;
        }
        if self.nemesis.at_owner() {
            if let Some(owner) = self.owner(&live) {
                return Some(owner);
            }
        }
        Some(live[self.nemesis.pick(live.len())])
    }

    /// The worker among `live` whose last `LEADING` has not ended.
    fn owner(&self, live: &[usize]) -> Option<usize> {
        self.cluster.scan(|events| {
            live.iter().copied().find(|&w| {
                let last = events.iter().rev().find(|e| {
                    e.worker == w
                        && matches!(
                            e.what,
                            What::Leading { .. } | What::Stopped { .. } | What::Stuck { .. }
                        )
                });
                last.is_some_and(|e| matches!(e.what, What::Leading { .. }))
            })
        })
    }

    fn signal(&mut self, draw: Draw) -> Option<String> {
        let paused: Vec<usize> = self.paused.iter().map(|(w, _)| *w).collect();
        let worker = self.victim(|w| !paused.contains(&w))?;
        let name = self.cluster.name(worker).to_owned();
        match draw {
            Draw::Kill => {
                self.cluster.kill(worker);
            }
            Draw::Term => {
                self.cluster.terminate(worker);
            }
            Draw::Pause(length) => {
                let from = self.cluster.signal(worker, "STOP");
                self.history.pauses.push(Pause {
                    worker,
                    from,
                    to: None,
                });
                self.paused.push((worker, from + length));
                return Some(format!("{name} for {:.1}s", length.as_secs_f64()));
            }
            _ => unreachable!("a signal"),
        }
        Some(name)
    }

    fn network(&mut self, net: Net, account: bool, length: Duration) -> Option<String> {
        let accounts: Vec<usize> = if self.quorum.is_empty() {
            vec![0]
        } else {
            vec![0, 1, 2, 3]
        };
        let (paths, whom) = if account {
            let a = accounts[self.nemesis.pick(accounts.len())];
            let paths: Vec<(usize, usize)> = self
                .groups
                .iter()
                .flat_map(|g| g.live.iter().copied())
                .filter(|&w| self.proxies[w].iter().any(|(pa, _)| *pa == a))
                .map(|w| (w, a))
                .collect();
            (paths, format!("account {a}"))
        } else {
            let w = self.victim(|_| true)?;
            let paths = self.proxies[w].iter().map(|(a, _)| (w, *a)).collect();
            (paths, format!("{}'s path", self.cluster.name(w)))
        };
        for &(w, a) in &paths {
            for (_, proxy) in self.proxies[w].iter().filter(|(pa, _)| *pa == a) {
                inject(proxy, net);
            }
        }
        self.faulted.push((paths, self.cluster.now() + length));
        Some(format!(
            "{net:?} on {whom} for {:.1}s",
            length.as_secs_f64()
        ))
    }

    /// Restarts one quorum account empty, at most once per two leases.
    /// Not recorded as a break: storage forgets only a minority's leases,
    /// which the quorum repairs; a leader whose majority needed the account
    /// ends its term at the renewal that finds it gone (see the quorum's
    /// guide), and an overlap before that would show as a violation.
    fn wipe(&mut self) -> Option<String> {
        let now = self.cluster.now();
        if self.quorum.is_empty() || self.last_wipe.is_some_and(|at| now < at + LEASE * 2) {
            return None;
        }
        let q = self.nemesis.pick(self.quorum.len());
        self.last_wipe = Some(now);
        self.quorum[q].restart();
        Some(format!("account {}", q + 1))
    }

    /// `blob-mutex break` on a mutex-like group's lease, straight to storage.
    fn operator_break(&mut self) -> Option<String> {
        let breakable: Vec<usize> = (0..self.groups.len())
            .filter(|&g| self.groups[g].kind.breakable())
            .collect();
        if breakable.is_empty() {
            return None;
        }
        let g = breakable[self.nemesis.pick(breakable.len())];
        let (kind, container) = (self.groups[g].kind, self.groups[g].container.clone());
        let at = self.cluster.now();
        let out = Command::new(cli_bin())
            .args(["break", "--container", &container, "--blob", kind.name()])
            .env(
                "AZURE_STORAGE_CONNECTION_STRING",
                self.single.connection_string(),
            )
            .env(Backend::ENV, "official")
            .output()
            .expect("run blob-mutex break");
        let returned = self.cluster.now();
        self.history
            .breaks
            .push((kind.name().to_owned(), at, returned));
        Some(format!("{} (exit {:?})", kind.name(), out.status.code()))
    }

    /// A member joins (up to two more than the group's size), or one leaves
    /// (SIGTERM, not replaced; down to two).
    fn membership(&mut self, draw: Draw) -> Option<String> {
        let elastic: Vec<usize> = (0..self.groups.len())
            .filter(|&g| self.groups[g].kind.elastic())
            .collect();
        if elastic.is_empty() {
            return None;
        }
        let g = elastic[self.nemesis.pick(elastic.len())];
        let group = &mut self.groups[g];
        if draw == Draw::Join && group.size < group.kind.size() + 2 {
            group.size += 1;
            let worker = self.spawn(g);
            return Some(self.cluster.name(worker).to_owned());
        }
        if draw == Draw::Leave && group.size > 2 {
            group.size -= 1;
            let worker = group.live.remove(self.nemesis.pick(group.live.len()));
            self.cluster.terminate(worker);
            return Some(self.cluster.name(worker).to_owned());
        }
        None
    }

    /// Whether every resource is owned now (by the record, as the checker
    /// counts it: an owner whose lease was just broken owns no more, so a
    /// settle after the nemesis waits for the next).
    pub fn all_owned(&self) -> bool {
        let mut history = self.snapshot();
        history.until = self.cluster.now();
        history.bounds.keys().all(|r| {
            history.owned_at_end(r)
                && history
                    .terms_of(r)
                    .last()
                    .is_some_and(|t| !self.paused.iter().any(|(w, _)| *w == t.worker))
        })
    }

    /// The history so far, with the record read into it.
    pub fn snapshot(&self) -> History {
        let mut history = self.history.clone();
        history.read(&self.cluster.events(), &self.roles);
        history
    }

    /// SIGTERMs every worker still running, waits for their exits (those
    /// that do not exit within `limit` are recorded as hung and killed),
    /// and returns the whole history.
    pub async fn finish(mut self, limit: Duration) -> (History, Cluster) {
        self.history.stopped = self.cluster.now();
        for w in 0..self.cluster.len() {
            if self.cluster.exited(w).is_none() {
                self.cluster.terminate(w);
            }
        }
        let start = self.cluster.now();
        while self.cluster.now() < start + limit {
            if (0..self.cluster.len()).all(|w| self.cluster.exited(w).is_some()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.history.hung = (0..self.cluster.len())
            .filter(|&w| self.cluster.exited(w).is_none())
            .collect();
        self.cluster.kill_all();
        // The reader threads record each exit once they reaped it.
        let exits = || {
            self.cluster
                .events()
                .iter()
                .filter(|e| matches!(e.what, What::Exited { .. }))
                .count()
        };
        let start = self.cluster.now();
        while exits() < self.cluster.len() && self.cluster.now() < start + Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.history.until = self.cluster.now();
        let history = self.snapshot();
        (history, self.cluster)
    }
}

/// Applies a network fault to one proxy.
fn inject(proxy: &Proxy, net: Net) {
    match net {
        Net::Latency(d) => proxy.set(Direction::ToClient, Mode::Delay(d)),
        Net::Blackhole => proxy.partition(),
        Net::ServerBusy(share) => proxy.fail_share(share, Injected::ServerBusy),
        Net::Reset(share) => proxy.reset_share(share),
        Net::FailKind {
            action,
            count,
            reset,
        } => {
            let kind = if reset {
                Injected::Reset
            } else {
                Injected::ServerBusy
            };
            for _ in 0..count {
                proxy.fail_next_of(action, kind);
            }
        }
    }
}

/// What `blob-mutex run` runs: a unit of work every 500 ms, each written as
/// the leader state with `blob-mutex state put` under the run's lease
/// (refused, exit code 4, once the lease was lost, broken or passed on).
const SCRIPT: &str = r#"bin=$1; k=0
echo "LEADING epoch=$BLOB_MUTEX_EPOCH id=$BLOB_MUTEX_HOLDER"
while :; do
  sleep 0.5; k=$((k+1))
  echo "WORK epoch=$BLOB_MUTEX_EPOCH id=$BLOB_MUTEX_HOLDER sub=0"
  sent=$(date +%s%3N)
  echo "epoch=$BLOB_MUTEX_EPOCH tick=$k" | "$bin" state put 2>/dev/null; rc=$?
  took=$(( $(date +%s%3N) - sent ))
  if [ $rc -eq 0 ]; then echo "STATE-WRITTEN epoch=$BLOB_MUTEX_EPOCH tick=$k took_ms=$took";
  elif [ $rc -eq 4 ]; then echo "STATE-REFUSED epoch=$BLOB_MUTEX_EPOCH tick=$k took_ms=$took"; fi
done"#;

/// `blob-mutex run` of [`SCRIPT`] as `name`, through `connection_string`.
fn run_command(name: &str, container: &str, connection_string: &str) -> Command {
    let mut command = Command::new(cli_bin());
    command
        .args(["run", "--container", container, "--blob", Kind::Run.name()])
        .args([
            "--holder",
            name,
            "--lease-duration",
            "15s",
            "--renew-interval",
            "2s",
        ])
        .args(["--acquire-retry", "500ms", "--", "sh", "-c", SCRIPT, "sh"])
        .arg(cli_bin())
        .env("AZURE_STORAGE_CONNECTION_STRING", connection_string);
    command
}
