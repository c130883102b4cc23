//! Prometheus metrics of the node daemon (prefix `crr_node_daemon`): kills, preStop outcomes
//! and durations, recreate durations, CRI errors, rounds that panicked.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub outcome: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    pub kills: Family<Outcome, Counter>,
    pub pre_stops: Family<Outcome, Counter>,
    pub pre_stop_duration: Histogram,
    pub recreate_duration: Family<Outcome, Histogram>,
    pub cri_errors: Counter,
    /// Rounds that panicked (a bug): their pod was released and retried.
    pub round_panics: Counter,
}

fn outcome(ok: bool) -> Outcome {
    Outcome {
        outcome: if ok { "success" } else { "failure" },
    }
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            kills: Family::default(),
            pre_stops: Family::default(),
            pre_stop_duration: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            recreate_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.25, 2.0, 12))
            }),
            cri_errors: Counter::default(),
            round_panics: Counter::default(),
        };
        let sub = registry.sub_registry_with_prefix("crr_node_daemon");
        sub.register(
            "kills",
            "Containers stopped through CRI, by outcome",
            metrics.kills.clone(),
        );
        sub.register(
            "pre_stop_hooks",
            "preStop hooks run, by outcome",
            metrics.pre_stops.clone(),
        );
        sub.register(
            "pre_stop_duration_seconds",
            "Time spent in preStop hooks",
            metrics.pre_stop_duration.clone(),
        );
        sub.register(
            "recreate_duration_seconds",
            "Request creation to completion, by outcome",
            metrics.recreate_duration.clone(),
        );
        sub.register(
            "cri_errors",
            "Failed calls to the container runtime",
            metrics.cri_errors.clone(),
        );
        sub.register(
            "round_panics",
            "Rounds that panicked; their pod was released and is retried",
            metrics.round_panics.clone(),
        );
        metrics
    }

    pub fn observe_kill(&self, ok: bool) {
        self.kills.get_or_create(&outcome(ok)).inc();
        if !ok {
            self.cri_errors.inc();
        }
    }

    pub fn observe_pre_stop(&self, ok: bool, took: Duration) {
        self.pre_stops.get_or_create(&outcome(ok)).inc();
        self.pre_stop_duration.observe(took.as_secs_f64());
    }

    pub fn observe_recreate(&self, ok: bool, took: Duration) {
        self.recreate_duration
            .get_or_create(&outcome(ok))
            .observe(took.as_secs_f64());
    }
}
