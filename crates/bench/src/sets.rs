//! What the sections on lease sets (`partitions`, `scale`) share: the set's
//! default timings and the request formula of `src/lease_set.rs`, who owns
//! which partition as the workers' lines tell it, the wait until a set is
//! balanced, and starting a worker of a set behind a counting proxy of its
//! own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Result;
use blob_mutex_testkit::azurite::Azurite;
use blob_mutex_testkit::proxy::Proxy;
use blob_mutex_testkit::workers::What;

use crate::group::{Event, Group};
use crate::json::{self, Json};
use crate::stats::float;
use crate::Config;

/// The set's default balance interval, lease and renew interval, restated
/// like the mutex's defaults (checked against the crate's by
/// [`check_defaults`]).
pub(crate) const BALANCE_SECS: f64 = 5.0;
pub(crate) const SET_LEASE_SECS: f64 = 30.0;
pub(crate) const SET_RENEW_SECS: f64 = 10.0;

/// Fails when the lease set's defaults are no longer the constants above.
pub(crate) fn check_defaults() -> Result<()> {
    let defaults = blob_mutex::LeaseSetOptions::default();
    anyhow::ensure!(
        (defaults.mutex().lease_duration().as_secs_f64() - SET_LEASE_SECS).abs() < 1e-9
            && (defaults.mutex().effective_renew_interval().as_secs_f64() - SET_RENEW_SECS).abs()
                < 1e-9
            && (defaults.balance_interval().as_secs_f64() - BALANCE_SECS).abs() < 1e-9,
        "the lease set's defaults changed; update the constants at the top of crates/bench/src/sets.rs"
    );
    Ok(())
}

/// The formula of the module docs of `src/lease_set.rs`, without moves:
/// renewals and listings per hour of one instance owning `owned`
/// partitions, `360 × (k + 1) + 720` at the defaults.
pub(crate) fn formula(owned: usize) -> f64 {
    let per_lease = 3600.0 / SET_RENEW_SECS;
    per_lease * float(owned + 1) + 3600.0 / BALANCE_SECS
}

/// Who owns which partition, from the workers' lines, and which workers
/// are live instances of the set.
pub(crate) struct Owners {
    partitions: usize,
    owner: BTreeMap<String, String>,
    pub(crate) live: BTreeSet<String>,
    /// `RELEASED … reason=deadline` lines.
    pub(crate) deadlines: usize,
    /// `RELEASED` lines by reason (`stuck` for `tasks=stuck`).
    pub(crate) released: BTreeMap<String, usize>,
}

impl Owners {
    pub(crate) fn new(partitions: usize) -> Owners {
        Owners {
            partitions,
            owner: BTreeMap::new(),
            live: BTreeSet::new(),
            deadlines: 0,
            released: BTreeMap::new(),
        }
    }

    /// Applies one line; true when it was `OWNING` or `RELEASED`.
    pub(crate) fn apply(&mut self, e: &Event) -> bool {
        let (partition, reason) = match &e.what {
            What::Owning { partition, .. } => {
                self.owner.insert(partition.clone(), e.id.clone());
                return true;
            }
            What::Released {
                partition, reason, ..
            } => (partition, reason.as_str()),
            What::ReleasedStuck { partition, .. } => (partition, "stuck"),
            _ => return false,
        };
        if self.owner.get(partition) == Some(&e.id) {
            self.owner.remove(partition);
        }
        if reason == "deadline" {
            self.deadlines += 1;
        }
        *self.released.entry(reason.to_owned()).or_default() += 1;
        true
    }

    /// Applies every line that arrived since the last look.
    pub(crate) fn catch_up(&mut self, group: &mut Group) {
        for e in group.drain() {
            self.apply(&e);
        }
    }

    /// Partitions owned by each live instance.
    pub(crate) fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts: BTreeMap<String, usize> =
            self.live.iter().map(|id| (id.clone(), 0)).collect();
        for id in self.owner.values() {
            if let Some(c) = counts.get_mut(id) {
                *c += 1;
            }
        }
        counts
    }

    /// Every live instance owns ⌊M/N⌋ or ⌈M/N⌉ partitions.
    pub(crate) fn balanced(&self) -> bool {
        let n = self.live.len();
        if n == 0 {
            return false;
        }
        let (low, high) = (self.partitions / n, self.partitions.div_ceil(n));
        let counts = self.counts();
        counts.values().sum::<usize>() == self.partitions
            && counts.values().all(|c| (low..=high).contains(c))
    }
}

/// Reads lines until the set is balanced; the seconds from `since` to the
/// line that balanced it, `NaN` when it did not within `limit`.
pub(crate) async fn until_balanced(
    group: &mut Group,
    owners: &mut Owners,
    since: Instant,
    limit: Duration,
) -> f64 {
    let until = since + limit;
    if owners.balanced() {
        return 0.0;
    }
    while let Some(e) = group.next_event(until).await {
        if owners.apply(&e) && owners.balanced() {
            return (e.at - since).as_secs_f64();
        }
    }
    eprintln!(
        "  not balanced within {} s: {:?}",
        limit.as_secs(),
        owners.counts()
    );
    f64::NAN
}

/// Starts one worker of the set behind a proxy of its own.
pub(crate) fn spawn(
    group: &mut Group,
    azurite: &Azurite,
    proxies: &mut BTreeMap<String, Proxy>,
    owners: &mut Owners,
) -> String {
    let proxy = Proxy::start(azurite.port);
    let id = group.spawn(&proxy.endpoint());
    proxies.insert(id.clone(), proxy);
    owners.live.insert(id.clone());
    id
}

/// The lines of a worker's log (`<out>/logs/<id>.log`) that mention a
/// deadline; 0 when there is no log.
pub(crate) fn deadline_log_lines(config: &Config, id: &str) -> usize {
    std::fs::read_to_string(config.out.join("logs").join(format!("{id}.log")))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("deadline"))
        .count()
}

#[allow(clippy::cast_precision_loss)] // KiB counts are small
pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// How many partition terms ended for each reason, as JSON.
pub(crate) fn released_json(released: &BTreeMap<String, usize>) -> Json {
    json::obj(released.iter().map(|(r, n)| (r.as_str(), json::count(*n))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, line: &str) -> Event {
        Event {
            at: Instant::now(),
            id: id.to_owned(),
            what: blob_mutex_testkit::workers::parse_line(line).expect("a worker's line"),
        }
    }

    #[test]
    fn balanced_when_every_live_instance_owns_its_share() {
        let mut owners = Owners::new(3);
        owners.live.extend(["a".to_owned(), "b".to_owned()]);
        for (id, p) in [("a", "p00"), ("a", "p01"), ("a", "p02")] {
            owners.apply(&event(id, &format!("OWNING partition={p} epoch=1 id={id}")));
        }
        assert!(!owners.balanced());
        owners.apply(&event(
            "a",
            "RELEASED partition=p02 epoch=1 id=a reason=shutdown",
        ));
        assert!(!owners.balanced(), "p02 is owned by nobody");
        owners.apply(&event("b", "OWNING partition=p02 epoch=2 id=b"));
        assert!(owners.balanced());
        owners.live.remove("b");
        assert!(
            !owners.balanced(),
            "a dead instance's partitions do not count"
        );
        owners.apply(&event(
            "a",
            "RELEASED partition=p00 epoch=1 id=a reason=deadline",
        ));
        assert_eq!(owners.deadlines, 1);
    }

    #[test]
    fn formula_of_the_module_docs() {
        assert!((formula(0) - 1080.0).abs() < 1e-9);
        assert!((formula(1000) - (360.0 * 1001.0 + 720.0)).abs() < 1e-9);
    }
}
