//! The chaos runner's nemesis: which fault comes next, how long it lasts
//! and whom it hits, all drawn from one seed, so that the schedule of a run
//! can be drawn again. (What the faults then do depends on timing too: a
//! replay draws the same schedule, not the same interleaving.)

use std::time::Duration;

use super::chaos::Rng;

/// A network fault on a path to storage (one worker's, or a whole account's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Net {
    /// Answers delayed by this much.
    Latency(Duration),
    /// Nothing passes either way.
    Blackhole,
    /// This share of requests answered `503 ServerBusy` by the proxy.
    ServerBusy(f64),
    /// This share of connections reset.
    Reset(f64),
    /// The next `count` requests of one lease action fail (503, or reset).
    FailKind {
        action: &'static str,
        count: usize,
        reset: bool,
    },
}

/// One fault drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Draw {
    /// SIGKILL a worker (replaced by a fresh process).
    Kill,
    /// SIGTERM a worker (replaced by a fresh process).
    Term,
    /// SIGSTOP a worker, SIGCONT after this long (past the lease at times).
    Pause(Duration),
    /// A network fault for this long; on a whole account, or one worker's
    /// path (`account: false`).
    Network {
        net: Net,
        account: bool,
        length: Duration,
    },
    /// One quorum account restarted empty (its data lost).
    Wipe,
    /// An operator's `blob-mutex break` on a mutex-like group's lease.
    Break,
    /// A member joins a lease set, or a higher-priority candidate starts.
    Join,
    /// A member leaves (SIGTERM, not replaced).
    Leave,
}

impl Draw {
    /// Its kind, as the figures count it.
    pub fn kind(&self) -> &'static str {
        match self {
            Draw::Kill => "kill",
            Draw::Term => "term",
            Draw::Pause(_) => "pause",
            Draw::Network { net, .. } => match net {
                Net::Latency(_) => "latency",
                Net::Blackhole => "blackhole",
                Net::ServerBusy(_) => "503",
                Net::Reset(_) => "reset",
                Net::FailKind { .. } => "fail-kind",
            },
            Draw::Wipe => "wipe",
            Draw::Break => "break",
            Draw::Join => "join",
            Draw::Leave => "leave",
        }
    }
}

/// The lease actions a request-kind fault may hit.
const ACTIONS: [&str; 4] = ["acquire", "renew", "release", "change"];

/// Draws faults from a seed.
pub struct Nemesis {
    rng: Rng,
    /// The lease: some pauses last longer.
    lease: Duration,
}

impl Nemesis {
    pub fn new(seed: u64, lease: Duration) -> Nemesis {
        Nemesis {
            rng: Rng(seed),
            lease,
        }
    }

    /// The time until the next fault: 0.5 to 4 s, so that faults overlap.
    pub fn gap(&mut self) -> Duration {
        self.rng.millis(500, 4_000)
    }

    /// A number below `n` (`n` > 0), for picking whom a fault hits.
    pub fn pick(&mut self, n: usize) -> usize {
        usize::try_from(self.rng.below(n as u64)).expect("below a usize")
    }

    /// Whether to aim at the current owner (half of the time).
    pub fn at_owner(&mut self) -> bool {
        self.rng.below(2) == 0
    }

    /// The next fault.
    pub fn draw(&mut self) -> Draw {
        match self.rng.below(100) {
            0..=11 => Draw::Kill,
            12..=21 => Draw::Term,
            22..=33 => Draw::Pause(self.pause()),
            34..=73 => self.network(),
            74..=77 => Draw::Wipe,
            78..=83 => Draw::Break,
            84..=91 => Draw::Join,
            _ => Draw::Leave,
        }
    }

    /// A pause: a third of them longer than the lease.
    fn pause(&mut self) -> Duration {
        let lease = u64::try_from(self.lease.as_millis()).expect("a short lease");
        if self.rng.below(3) == 0 {
            self.rng.millis(lease + 1_000, lease + 10_000)
        } else {
            self.rng.millis(300, lease / 2)
        }
    }

    fn network(&mut self) -> Draw {
        let net = match self.rng.below(5) {
            0 => Net::Latency(self.rng.millis(300, 5_000)),
            1 => Net::Blackhole,
            2 => Net::ServerBusy(self.share()),
            3 => Net::Reset(self.share()),
            _ => Net::FailKind {
                action: ACTIONS[self.pick(ACTIONS.len())],
                count: 1 + self.pick(4),
                reset: self.rng.below(2) == 0,
            },
        };
        Draw::Network {
            net,
            account: self.rng.below(2) == 0,
            length: self.rng.millis(1_000, 20_000),
        }
    }

    /// A share of requests: 0.3 to 1.
    fn share(&mut self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // below 1000
        let share = (300 + self.rng.below(701)) as f64 / 1000.0;
        share
    }
}
