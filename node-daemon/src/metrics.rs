//! Prometheus metrics of the node daemon (prefix `crr_node_daemon`; the catalog with label
//! values is docs/metrics.md): kills and preStop hooks by outcome, durations of recreates and of
//! their phases on this daemon ([`crate::timeline`]), CRI calls by method, requests in flight,
//! whether the runtime answers, rounds that panicked.
//!
//! Every label value is from a fixed set (`success`/`failure`, [`PhaseName`], [`CRI_METHODS`]);
//! each known series is exported from the first scrape.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crr_runtime::metrics::ScrapeSource;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::recreates::ContainerRecreates;
use crate::timeline::{PhaseName, Timeline};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    /// `success` or `failure`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// A [`PhaseName`].
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// The CRI RPC, one of [`CRI_METHODS`].
    pub method: &'static str,
}

/// The CRI RPCs the daemon makes (`cri::Runtime`).
pub const CRI_METHODS: [&str; 5] = [
    "Version",
    "ListContainers",
    "ContainerStatus",
    "ExecSync",
    "StopContainer",
];

const OUTCOMES: [&str; 2] = ["success", "failure"];

fn outcome(ok: bool) -> Outcome {
    Outcome {
        outcome: if ok { "success" } else { "failure" },
    }
}

/// Latency and failures of CRI calls, by method: `cri::Runtime` reports every call it makes.
#[derive(Clone, Debug)]
pub struct CriMetrics {
    pub duration: Family<MethodLabels, Histogram>,
    pub errors: Family<MethodLabels, Counter>,
}

impl Default for CriMetrics {
    fn default() -> Self {
        Self {
            duration: Family::new_with_constructor(|| {
                // 0.5 ms .. ~65 s (a StopContainer waits out the grace period).
                Histogram::new(exponential_buckets(0.0005, 2.0, 18))
            }),
            errors: Family::default(),
        }
    }
}

impl CriMetrics {
    /// Records one call of `method` (one of [`CRI_METHODS`]) that took `took`; `ok`: the
    /// runtime answered without an error status.
    pub fn observe(&self, method: &'static str, took: Duration, ok: bool) {
        let labels = MethodLabels { method };
        self.duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if !ok {
            self.errors.get_or_create(&labels).inc();
        }
    }
}

#[derive(Clone)]
pub struct Metrics {
    pub kills: Family<Outcome, Counter>,
    pub pre_stops: Family<Outcome, Counter>,
    pub pre_stop_duration: Family<Outcome, Histogram>,
    pub recreate_duration: Family<Outcome, Histogram>,
    pub phase_duration: Family<PhaseLabels, Histogram>,
    pub cri: CriMetrics,
    /// 1 while the runtime answers through the mounted socket (`socket_watch`).
    pub runtime_ready: Gauge,
    /// 1 while the runtime's container events wake rounds (`runtime_events`).
    pub container_events_followed: Gauge,
    /// Rounds that panicked (a bug): their pod was released and retried.
    pub round_panics: Counter,
    /// Pods read from the API server because the node's pod watch lagged (`watch_lag`).
    pub pod_reads_past_watch: Counter,
    /// Which phases of each request are still to be observed.
    pub timeline: Arc<Timeline>,
    /// `crr_container_recreates_total`, at the registry's root.
    pub recreates: ContainerRecreates,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            kills: Family::default(),
            pre_stops: Family::default(),
            pre_stop_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 2.0, 16))
            }),
            recreate_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.25, 2.0, 14))
            }),
            phase_duration: Family::new_with_constructor(|| {
                // 5 ms .. ~22 min
                Histogram::new(exponential_buckets(0.005, 2.0, 19))
            }),
            cri: CriMetrics::default(),
            runtime_ready: Gauge::default(),
            container_events_followed: Gauge::default(),
            round_panics: Counter::default(),
            pod_reads_past_watch: Counter::default(),
            timeline: Arc::default(),
            recreates: ContainerRecreates::register(registry),
        };
        use crr_runtime::metrics::start_at_zero;
        let outcomes = || OUTCOMES.map(|outcome| Outcome { outcome });
        start_at_zero(&metrics.kills, outcomes());
        start_at_zero(&metrics.pre_stops, outcomes());
        start_at_zero(&metrics.pre_stop_duration, outcomes());
        start_at_zero(&metrics.recreate_duration, outcomes());
        start_at_zero(
            &metrics.phase_duration,
            PhaseName::ALL.map(|phase| PhaseLabels {
                phase: phase.as_str(),
            }),
        );
        let methods = || CRI_METHODS.map(|method| MethodLabels { method });
        start_at_zero(&metrics.cri.duration, methods());
        start_at_zero(&metrics.cri.errors, methods());

        let sub = registry.sub_registry_with_prefix("crr_node_daemon");
        sub.register(
            "kills",
            "Containers stopped through CRI StopContainer, by outcome (success, failure)",
            metrics.kills.clone(),
        );
        sub.register(
            "pre_stop_hooks",
            "preStop hooks run to their end, by outcome (success, failure)",
            metrics.pre_stops.clone(),
        );
        sub.register(
            "pre_stop_duration_seconds",
            "Seconds one preStop hook ran, by outcome",
            metrics.pre_stop_duration.clone(),
        );
        sub.register(
            "recreate_duration_seconds",
            "Seconds from a request's creation to the daemon's completing write, by outcome (success, failure); requests the operator completes are not here",
            metrics.recreate_duration.clone(),
        );
        sub.register(
            "phase_duration_seconds",
            "Seconds each phase of a request took on this daemon (pick_up, unready_grace, pre_stop, kill, restart, complete), observed once per request where the phase applies",
            metrics.phase_duration.clone(),
        );
        sub.register(
            "cri_request_duration_seconds",
            "Seconds of CRI calls, by RPC method",
            metrics.cri.duration.clone(),
        );
        sub.register(
            "cri_errors",
            "CRI calls that returned an error status (or no answer), by RPC method",
            metrics.cri.errors.clone(),
        );
        sub.register(
            "runtime_ready",
            "1 while the container runtime answers through the mounted CRI socket, 0 while it does not",
            metrics.runtime_ready.clone(),
        );
        sub.register(
            "container_events_followed",
            "1 while the container runtime's events (CRI GetContainerEvents) wake the rounds of recreates in flight, 0 while rounds look at the runtime every 500 ms",
            metrics.container_events_followed.clone(),
        );
        sub.register(
            "round_panics",
            "Rounds that panicked; their pod was released and is retried",
            metrics.round_panics.clone(),
        );
        sub.register(
            "pod_reads_past_watch",
            "Pods read from the API server because the node's pod watch still lacked a new container 2 s after the runtime started it (the watch was behind)",
            metrics.pod_reads_past_watch.clone(),
        );
        metrics
    }

    pub fn observe_kill(&self, ok: bool) {
        self.kills.get_or_create(&outcome(ok)).inc();
    }

    pub fn observe_pre_stop(&self, ok: bool, took: Duration) {
        self.pre_stops.get_or_create(&outcome(ok)).inc();
        self.pre_stop_duration
            .get_or_create(&outcome(ok))
            .observe(took.as_secs_f64());
    }

    pub fn observe_recreate(&self, ok: bool, took: Duration) {
        self.recreate_duration
            .get_or_create(&outcome(ok))
            .observe(took.as_secs_f64());
    }

    /// Records how long `phase` of one request took (the caller asked [`Timeline`] whether it
    /// is due, so each is observed once per request).
    pub fn observe_phase(&self, phase: PhaseName, took: Duration) {
        self.phase_duration
            .get_or_create(&PhaseLabels {
                phase: phase.as_str(),
            })
            .observe(took.as_secs_f64());
    }
}

/// Reports `crr_node_daemon_requests_in_flight` at scrape time from `source` (the number of
/// this node's requests the daemon holds unfinished, read from its cache).
#[derive(Debug)]
pub struct InFlightCollector {
    source: ScrapeSource<usize>,
}

impl InFlightCollector {
    pub fn new(source: impl Fn() -> usize + Send + Sync + 'static) -> Self {
        Self {
            source: ScrapeSource::new(source),
        }
    }
}

impl Collector for InFlightCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let count = i64::try_from(self.source.read()).unwrap_or(i64::MAX);
        let metric = encoder.encode_descriptor(
            "requests_in_flight",
            "Requests for this node's pods that the daemon holds unfinished (neither completed nor being deleted)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(count).encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_runtime::metrics::{CatalogMismatch, catalog_mismatch, missing_lines};

    #[test]
    fn scrape_shows_every_family_with_its_labels() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        registry
            .sub_registry_with_prefix("crr_node_daemon")
            .register_collector(Box::new(InFlightCollector::new(|| 3)));
        metrics.observe_kill(true);
        metrics.observe_pre_stop(false, Duration::from_millis(40));
        metrics.observe_recreate(true, Duration::from_secs(4));
        metrics.observe_phase(PhaseName::Restart, Duration::from_secs(2));
        metrics
            .cri
            .observe("StopContainer", Duration::from_millis(30), false);
        metrics.runtime_ready.set(1);
        let text = crr_runtime::metrics::encode(&registry).expect("encode");
        let expected = [
            "crr_node_daemon_kills_total{outcome=\"success\"} 1",
            "crr_node_daemon_kills_total{outcome=\"failure\"} 0",
            "crr_node_daemon_pre_stop_hooks_total{outcome=\"failure\"} 1",
            "crr_node_daemon_pre_stop_duration_seconds_count{outcome=\"failure\"} 1",
            "crr_node_daemon_recreate_duration_seconds_count{outcome=\"success\"} 1",
            "crr_node_daemon_phase_duration_seconds_count{phase=\"restart\"} 1",
            "crr_node_daemon_phase_duration_seconds_count{phase=\"pick_up\"} 0",
            "crr_node_daemon_phase_duration_seconds_count{phase=\"unready_grace\"} 0",
            "crr_node_daemon_phase_duration_seconds_count{phase=\"pre_stop\"} 0",
            "crr_node_daemon_phase_duration_seconds_count{phase=\"kill\"} 0",
            "crr_node_daemon_phase_duration_seconds_count{phase=\"complete\"} 0",
            "crr_node_daemon_cri_request_duration_seconds_count{method=\"StopContainer\"} 1",
            "crr_node_daemon_cri_request_duration_seconds_count{method=\"Version\"} 0",
            "crr_node_daemon_cri_errors_total{method=\"StopContainer\"} 1",
            "crr_node_daemon_cri_errors_total{method=\"ExecSync\"} 0",
            "crr_node_daemon_runtime_ready 1",
            "crr_node_daemon_container_events_followed 0",
            "crr_node_daemon_round_panics_total 0",
            "crr_node_daemon_pod_reads_past_watch_total 0",
            "crr_node_daemon_requests_in_flight 3",
            "# TYPE crr_node_daemon_phase_duration_seconds histogram",
            "# TYPE crr_node_daemon_cri_request_duration_seconds histogram",
            "# TYPE crr_node_daemon_requests_in_flight gauge",
            "# TYPE crr_node_daemon_runtime_ready gauge",
        ];
        let missing = missing_lines(&text, &expected);
        assert!(missing.is_empty(), "{missing:?} missing from\n{text}");
        assert_eq!(
            catalog_mismatch(
                &text,
                include_str!("../../docs/metrics.md"),
                "crr_node_daemon_"
            ),
            CatalogMismatch::default(),
            "docs/metrics.md lists exactly the families the node daemon serves"
        );
    }
}
