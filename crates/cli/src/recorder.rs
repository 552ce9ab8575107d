//! The `metrics` recorder of `run --metrics-addr`: `metrics-exporter-prometheus`
//! keeps the figures and renders them in the Prometheus text format
//! (histograms with buckets).

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// The buckets of `blob_mutex_renew_seconds`, in seconds: a renewal takes
/// milliseconds when storage is well and up to the request timeout (3 s by
/// default) when it is not.
const RENEW_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The figures recorded so far, and the recorder that records them; cheap
/// to clone.
#[derive(Clone)]
pub(crate) struct Figures(Arc<Inner>);

struct Inner {
    /// The exporter's recorder, and its handle that renders.
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
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

    /// Every figure in the Prometheus text format (version 0.0.4). Rendering
    /// also folds the histograms' samples into their buckets, which
    /// [`Figures::upkeep`] does for a process that nobody scrapes.
    pub(crate) fn render(&self) -> String {
        self.0.handle.render()
    }

    /// Folds the histograms' samples into their buckets without rendering.
    pub(crate) fn upkeep(&self) {
        self.0.handle.run_upkeep();
    }
}

impl Default for Figures {
    /// Figures with nothing recorded yet, not installed.
    fn default() -> Figures {
        // Only an empty list of buckets is refused; without them the
        // histogram would render as a summary.
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("blob_mutex_renew_seconds".to_owned()),
                &RENEW_BUCKETS,
            )
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        Figures(Arc::new(Inner {
            handle: recorder.handle(),
            recorder,
        }))
    }
}

impl Recorder for Figures {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.recorder.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.recorder.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.recorder.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.0.recorder.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.recorder.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.0.recorder.register_histogram(key, metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_render_in_the_prometheus_text_format_with_buckets() {
        let figures = Figures::default();
        metrics::with_local_recorder(&figures, || {
            let labels = [("container", "c"), ("blob", "a\"b")];
            metrics::counter!("t_total", &labels).increment(2);
            metrics::gauge!("t_is", &labels).set(1.0);
            metrics::histogram!("blob_mutex_renew_seconds", &labels).record(0.02);
            metrics::histogram!("blob_mutex_renew_seconds", &labels).record(0.3);
        });
        let text = figures.render();
        for line in [
            "# TYPE t_total counter",
            r#"t_total{container="c",blob="a\"b"} 2"#,
            r#"t_is{container="c",blob="a\"b"} 1"#,
            "# TYPE blob_mutex_renew_seconds histogram",
            r#"blob_mutex_renew_seconds_bucket{container="c",blob="a\"b",le="0.01"} 0"#,
            r#"blob_mutex_renew_seconds_bucket{container="c",blob="a\"b",le="0.025"} 1"#,
            r#"blob_mutex_renew_seconds_bucket{container="c",blob="a\"b",le="0.5"} 2"#,
            r#"blob_mutex_renew_seconds_bucket{container="c",blob="a\"b",le="+Inf"} 2"#,
            r#"blob_mutex_renew_seconds_sum{container="c",blob="a\"b"} 0.32"#,
            r#"blob_mutex_renew_seconds_count{container="c",blob="a\"b"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
