//! A small `metrics` recorder that keeps every figure in memory and renders
//! them in the Prometheus text format, for `run --metrics-addr`: counters and
//! gauges as they are, histograms as summaries (`_sum` and `_count`, no
//! quantiles). The library records a handful of figures; no exporter crate
//! is needed for them.
//!
//! It also notes when a counter last moved: every counter the library keeps
//! counts a step of the election (an acquire attempt, a renewal that
//! succeeded or failed, a term's start or end), so that instant is the
//! campaign's progress signal, which `/livez` reads (see `endpoint`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use tokio::time::Instant;

/// One figure's series, by name and then by rendered labels.
type Series<T> = Mutex<BTreeMap<String, BTreeMap<String, Arc<T>>>>;

/// The figures recorded so far; cheap to clone, shared with the recorder.
#[derive(Clone, Default)]
pub(crate) struct Figures(Arc<Inner>);

#[derive(Default)]
struct Inner {
    counters: Series<AtomicU64>,
    /// `f64` bits.
    gauges: Series<AtomicU64>,
    histograms: Series<Summary>,
    /// When a counter last moved, if one has.
    moved: Mutex<Option<Instant>>,
}

impl Inner {
    fn moved(&self) {
        *lock(&self.moved) = Some(Instant::now());
    }
}

/// A counter's handle: adds to its series and notes the move.
struct Moving {
    count: Arc<AtomicU64>,
    figures: Arc<Inner>,
}

impl CounterFn for Moving {
    fn increment(&self, value: u64) {
        self.count.fetch_add(value, Ordering::Relaxed);
        self.figures.moved();
    }

    fn absolute(&self, value: u64) {
        self.count.fetch_max(value, Ordering::Relaxed);
        self.figures.moved();
    }
}

/// A histogram kept as its sum and count.
#[derive(Default)]
struct Summary(Mutex<(f64, u64)>);

impl HistogramFn for Summary {
    fn record(&self, value: f64) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.0 += value;
        s.1 += 1;
    }
}

impl Figures {
    /// Installs a recorder that records into the figures returned.
    ///
    /// # Errors
    ///
    /// When a recorder is already installed.
    pub(crate) fn install() -> anyhow::Result<Figures> {
        let figures = Figures::default();
        metrics::set_global_recorder(figures.clone())
            .map_err(|_| anyhow::anyhow!("a metrics recorder is already installed"))?;
        Ok(figures)
    }

    /// When a counter last moved: the last step of the election that the
    /// library counted. `None` before the first.
    pub(crate) fn last_moved(&self) -> Option<Instant> {
        *lock(&self.0.moved)
    }

    /// Every figure in the Prometheus text format (version 0.0.4).
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for (name, series) in &*lock(&self.0.counters) {
            let _ = writeln!(out, "# TYPE {name} counter");
            for (labels, value) in series {
                let _ = writeln!(out, "{name}{labels} {}", value.load(Ordering::Relaxed));
            }
        }
        for (name, series) in &*lock(&self.0.gauges) {
            let _ = writeln!(out, "# TYPE {name} gauge");
            for (labels, value) in series {
                let value = f64::from_bits(value.load(Ordering::Relaxed));
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        }
        for (name, series) in &*lock(&self.0.histograms) {
            let _ = writeln!(out, "# TYPE {name} summary");
            for (labels, summary) in series {
                let (sum, count) = *summary.0.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = writeln!(out, "{name}_sum{labels} {sum}");
                let _ = writeln!(out, "{name}_count{labels} {count}");
            }
        }
        out
    }
}

fn lock<T>(series: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    series.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The series of `key` in `series`, made on first use.
fn series<T: Default>(series: &Series<T>, key: &Key) -> Arc<T> {
    let mut labels = String::new();
    for (i, label) in key.labels().enumerate() {
        labels.push(if i == 0 { '{' } else { ',' });
        let value = label
            .value()
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(labels, "{}=\"{value}\"", label.key());
    }
    if !labels.is_empty() {
        labels.push('}');
    }
    lock(series)
        .entry(key.name().to_owned())
        .or_default()
        .entry(labels)
        .or_default()
        .clone()
}

impl Recorder for Figures {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Moving {
            count: series(&self.0.counters, key),
            figures: self.0.clone(),
        }))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(series(&self.0.gauges, key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(series(&self.0.histograms, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_render_in_the_prometheus_text_format() {
        let figures = Figures::default();
        metrics::with_local_recorder(&figures, || {
            let labels = [("container", "c"), ("blob", "a\"b")];
            metrics::counter!("t_total", &labels).increment(2);
            metrics::gauge!("t_is", &labels).set(1.0);
            metrics::histogram!("t_seconds", &labels).record(0.5);
            metrics::histogram!("t_seconds", &labels).record(0.25);
        });
        let text = figures.render();
        for line in [
            "# TYPE t_total counter",
            r#"t_total{container="c",blob="a\"b"} 2"#,
            r#"t_is{container="c",blob="a\"b"} 1"#,
            "# TYPE t_seconds summary",
            r#"t_seconds_sum{container="c",blob="a\"b"} 0.75"#,
            r#"t_seconds_count{container="c",blob="a\"b"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_counter_that_moves_is_noted_and_a_gauge_is_not() {
        let figures = Figures::default();
        assert_eq!(figures.last_moved(), None);
        metrics::with_local_recorder(&figures, || {
            metrics::gauge!("t_is").set(1.0);
            metrics::histogram!("t_seconds").record(0.5);
        });
        assert_eq!(figures.last_moved(), None);
        tokio::time::advance(std::time::Duration::from_secs(7)).await;
        metrics::with_local_recorder(&figures, || metrics::counter!("t_total").increment(1));
        assert_eq!(figures.last_moved(), Some(Instant::now()));
        tokio::time::advance(std::time::Duration::from_secs(3)).await;
        metrics::with_local_recorder(&figures, || metrics::counter!("t_total").absolute(5));
        assert_eq!(figures.last_moved(), Some(Instant::now()));
        assert!(figures.render().lines().any(|l| l == "t_total 5"));
    }
}
