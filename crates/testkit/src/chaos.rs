//! What the chaos runner (`crates/cli/tests/it/chaos.rs`, `chaos_rig.rs`,
//! `nemesis.rs`) and the benchmark build on: a small seedable random source,
//! and settings from the environment.

use std::time::Duration;

/// `SplitMix64`: reproducible from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }

    /// A float in [0, 1).
    pub fn unit(&mut self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // 53 bits fit an f64 exactly
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        unit
    }

    /// A duration drawn uniformly from [`low`, `high`).
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        low + high.saturating_sub(low).mul_f64(self.unit())
    }
}

/// A whole number from the environment variable `name`, if set.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The seed in `BLOB_MUTEX_CHAOS_SEED`, or one from the clock.
pub fn seed() -> u64 {
    env_u64("BLOB_MUTEX_CHAOS_SEED").unwrap_or_else(|| {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        since.as_secs() ^ u64::from(since.subsec_nanos())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_between_two_durations_stay_in_range() {
        let mut rng = Rng(42);
        let (low, high) = (Duration::from_millis(700), Duration::from_millis(2200));
        for _ in 0..1000 {
            let pause = rng.between(low, high);
            assert!(low <= pause && pause < high, "{pause:?}");
        }
    }
}
