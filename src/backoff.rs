//! How long to wait between attempts: jitter and exponential backoff.

use std::time::Duration;

/// A jitter source: `SplitMix64`, seedable for reproducible tests.
pub(crate) struct Jitter {
    state: u64,
    fraction: f64,
}

impl Jitter {
    /// Jitter of `± fraction`, seeded from `seed` or, without one, from the
    /// operating system's randomness.
    pub(crate) fn new(seed: Option<u64>, fraction: f64) -> Self {
        let state = seed.unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0);
        Jitter { state, fraction }
    }

    fn next_unit(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // 53 random bits as a float in [0, 1).
        #[allow(clippy::cast_precision_loss)] // 53 bits fit an f64 exactly
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        unit
    }

    /// A uniform whole number below `bound` (which must not be 0).
    pub(crate) fn below(&mut self, bound: usize) -> usize {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )] // a fraction of `bound` below `bound`, which fits a usize
        let pick = (self.next_unit() * bound as f64) as usize;
        pick.min(bound.saturating_sub(1))
    }

    /// `base × (1 ± fraction)`, uniformly.
    pub(crate) fn apply(&mut self, base: Duration) -> Duration {
        let factor = 1.0 + self.fraction * (2.0 * self.next_unit() - 1.0);
        base.mul_f64(factor.max(0.0))
    }
}

/// `first × 2^(failures − 1)`, at most `max`.
pub(crate) fn backoff(first: Duration, max: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    first.saturating_mul(factor).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_bounds_and_is_reproducible() {
        let base = Duration::from_secs(1);
        let mut a = Jitter::new(Some(42), 0.2);
        let mut b = Jitter::new(Some(42), 0.2);
        let (mut low, mut high) = (false, false);
        for _ in 0..10_000 {
            let x = a.apply(base);
            assert_eq!(x, b.apply(base));
            assert!(
                x >= Duration::from_millis(800) && x <= Duration::from_millis(1200),
                "{x:?}"
            );
            low |= x < Duration::from_millis(850);
            high |= x > Duration::from_millis(1150);
        }
        assert!(low && high, "the whole range is used");
        let mut none = Jitter::new(Some(1), 0.0);
        assert_eq!(none.apply(base), base);
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let s = Duration::from_secs;
        let got: Vec<Duration> = (1..=5).map(|n| backoff(s(1), s(5), n)).collect();
        assert_eq!(got, vec![s(1), s(2), s(4), s(5), s(5)]);
        assert_eq!(backoff(s(1), s(5), u32::MAX), s(5));
    }
}
