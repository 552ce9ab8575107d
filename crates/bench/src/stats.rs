//! Summary statistics of the samples, a least-squares fit, the random
//! pauses between repetitions, and requests counted by kind.

use std::collections::BTreeMap;
use std::time::Instant;

use blob_mutex_testkit::proxy::Kind;

#[allow(clippy::cast_precision_loss)] // counts far below 2^52
pub(crate) fn float(n: usize) -> f64 {
    n as f64
}

#[derive(Debug, Clone)]
pub(crate) struct Stats {
    pub(crate) n: usize,
    pub(crate) min: f64,
    pub(crate) median: f64,
    pub(crate) mean: f64,
    pub(crate) p95: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

/// Count, extremes, mean, median and percentiles of `samples`; every figure
/// is `NaN` when there are none.
pub(crate) fn stats(samples: &[f64]) -> Stats {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let median = match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => f64::midpoint(v[n / 2 - 1], v[n / 2]),
    };
    Stats {
        n: v.len(),
        min: v.first().copied().unwrap_or(f64::NAN),
        median,
        mean: v.iter().sum::<f64>() / float(v.len()),
        p95: percentile(&v, 95.0),
        p99: percentile(&v, 99.0),
        max: v.last().copied().unwrap_or(f64::NAN),
    }
}

/// The nearest-rank percentile of sorted samples: the smallest sample with
/// at least `p` % of the samples at or below it. With 10 samples p95 is the
/// largest; with 30 it is the second largest.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0 ≤ rank ≤ len
    let rank = (p / 100.0 * float(sorted.len())).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The test kit's `SplitMix64`, for the random pauses between repetitions.
pub(crate) use blob_mutex_testkit::chaos::Rng;

/// How many requests of each kind.
pub(crate) fn count_by_kind(requests: &[(Instant, Kind)]) -> BTreeMap<Kind, usize> {
    let mut counts = BTreeMap::new();
    for (_, kind) in requests {
        *counts.entry(*kind).or_insert(0) += 1;
    }
    counts
}

/// A random source seeded from a fresh UUID.
pub(crate) fn fresh_rng() -> Rng {
    Rng(uuid::Uuid::new_v4().as_u64_pair().0)
}

/// A least-squares line through `(x, y)`: slope, and the standard deviation
/// of the residuals. `None` with fewer than three points.
pub(crate) fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    #[allow(clippy::cast_precision_loss)] // a few hundred points
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let residuals: f64 = points
        .iter()
        .map(|p| (p.1 - (my + slope * (p.0 - mx))).powi(2))
        .sum();
    Some((slope, (residuals / (n - 2.0)).sqrt()))
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // small integers and halves, exact in an f64
mod tests {
    use super::*;

    fn one_to(n: usize) -> Vec<f64> {
        (1..=n).map(float).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        // The cases BENCHMARKS.md relies on: p95 of 12 crash samples is the
        // largest, of 30 graceful samples the second largest.
        let twelve = stats(&one_to(12));
        assert_eq!((twelve.p95, twelve.p99), (12.0, 12.0));
        let thirty = stats(&one_to(30));
        assert_eq!((thirty.p95, thirty.p99), (29.0, 30.0));
        let hundred = stats(&one_to(100));
        assert_eq!((hundred.p95, hundred.p99), (95.0, 99.0));
        let ten = stats(&one_to(10));
        assert_eq!(ten.p95, 10.0);
        let one = stats(&[7.0]);
        assert_eq!(
            (one.min, one.median, one.p95, one.max),
            (7.0, 7.0, 7.0, 7.0)
        );
    }

    #[test]
    fn median_mean_and_extremes_of_unsorted_samples() {
        let odd = stats(&[5.0, 1.0, 3.0]);
        assert_eq!((odd.n, odd.min, odd.median, odd.max), (3, 1.0, 3.0, 5.0));
        assert!((odd.mean - 3.0).abs() < 1e-12);
        let even = stats(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(even.median, 2.5);
        assert!((even.mean - 2.5).abs() < 1e-12);
    }

    #[test]
    fn no_samples_give_nan() {
        let none = stats(&[]);
        assert_eq!(none.n, 0);
        for v in [
            none.min,
            none.median,
            none.mean,
            none.p95,
            none.p99,
            none.max,
        ] {
            assert!(v.is_nan());
        }
    }

    #[test]
    fn a_line_is_fitted_exactly() {
        let points: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), 3.0 + 2.0 * f64::from(i)))
            .collect();
        let (slope, sd) = fit(&points).expect("fit");
        assert!((slope - 2.0).abs() < 1e-9, "{slope}");
        assert!(sd < 1e-9, "{sd}");
    }

    #[test]
    fn noise_around_a_flat_line_has_no_slope() {
        let points: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), if i % 2 == 0 { 1.0 } else { -1.0 }))
            .collect();
        let (slope, sd) = fit(&points).expect("fit");
        assert!(slope.abs() < 0.1, "{slope}");
        assert!(sd > 0.9, "{sd}");
        assert!(fit(&points[..2]).is_none());
    }
}
