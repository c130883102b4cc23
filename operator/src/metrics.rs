//! Prometheus metrics of the operator (prometheus-client, OpenMetrics text on `/metrics`).
//!
//! Counters and the time-to-completion histogram are updated by the reconciler; the number of
//! requests by phase is read from the request cache at scrape time, so it is exact even for
//! requests deleted since the last reconcile.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label of a reconcile outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `applied` (leader reconciled), `skipped` (not the leader) or `error`.
    pub outcome: &'static str,
}

/// Label of a reconcile error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The error kind, see `controller::Error::kind`.
    pub kind: &'static str,
}

/// Label of an operator-made completion.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompletionLabels {
    /// See `reconcile::CompletionReason::reason`.
    pub reason: &'static str,
}

/// All metrics the reconciler updates.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Reconciles by outcome.
    pub reconciles: Family<OutcomeLabels, Counter>,
    /// Reconcile errors by kind.
    pub errors: Family<ErrorLabels, Counter>,
    /// Requests the operator completed, by reason.
    pub completions: Family<CompletionLabels, Counter>,
    /// Seconds from creation to completion, observed once per request when it leaves `active`.
    pub time_to_completion: Histogram,
    /// 1 while this replica holds the Lease.
    pub leader: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them (prefix `crr_operator`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reconciles: Family::default(),
            errors: Family::default(),
            completions: Family::default(),
            time_to_completion: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            leader: Gauge::default(),
        };
        registry.register(
            "reconciles",
            "Reconciles of ContainerRecreateRequests by outcome",
            metrics.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles by error kind",
            metrics.errors.clone(),
        );
        registry.register(
            "completions",
            "ContainerRecreateRequests the operator completed, by reason",
            metrics.completions.clone(),
        );
        registry.register(
            "time_to_completion_seconds",
            "Seconds from a ContainerRecreateRequest's creation to its completion",
            metrics.time_to_completion.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease",
            metrics.leader.clone(),
        );
        metrics
    }

    /// Records a finished request's duration.
    pub fn observe_completion(&self, took: Duration) {
        self.time_to_completion.observe(took.as_secs_f64());
    }
}

/// The phase label of a request: `Completed` once it is finished (`crr_crds::status::is_finished`:
/// a completionTime wins over a stale phase), else its phase, `Unset` while nobody picked it up.
pub fn phase_label(crr: &ContainerRecreateRequest) -> &'static str {
    if crr_crds::status::is_finished(crr) {
        return Phase::Completed.as_str();
    }
    crr.phase().map(Phase::as_str).unwrap_or("Unset")
}

/// Counts requests by phase label; the request phases always appear, with 0 when none.
pub fn count_by_phase<'a>(
    requests: impl IntoIterator<Item = &'a ContainerRecreateRequest>,
) -> BTreeMap<&'static str, i64> {
    let mut counts: BTreeMap<&'static str, i64> = ["Unset", "Pending", "Recreating", "Completed"]
        .into_iter()
        .map(|phase| (phase, 0))
        .collect();
    for crr in requests {
        *counts.entry(phase_label(crr)).or_default() += 1;
    }
    counts
}

/// Reports `crr_operator_requests{phase}` from a snapshot source at scrape time.
pub struct PhaseCollector {
    source: Arc<dyn Fn() -> Vec<Arc<ContainerRecreateRequest>> + Send + Sync>,
}

impl PhaseCollector {
    /// `source` returns the cached requests (e.g. `Store::state`).
    pub fn new(
        source: impl Fn() -> Vec<Arc<ContainerRecreateRequest>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            source: Arc::new(source),
        }
    }
}

impl fmt::Debug for PhaseCollector {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("PhaseCollector")
            .finish_non_exhaustive()
    }
}

impl Collector for PhaseCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let requests = (self.source)();
        let counts = count_by_phase(requests.iter().map(Arc::as_ref));
        let mut metric = encoder.encode_descriptor(
            "requests",
            "ContainerRecreateRequests in the cache by phase",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (phase, count) in counts {
            let labels = [("phase", phase)];
            ConstGauge::new(count).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_crds::v1beta1::ContainerRecreateRequestStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn crr(phase: Option<Phase>, completed: bool) -> ContainerRecreateRequest {
        ContainerRecreateRequest {
            status: Some(ContainerRecreateRequestStatus {
                phase,
                completion_time: completed.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn completion_time_wins_over_a_stale_phase() {
        assert_eq!(
            phase_label(&crr(Some(Phase::Recreating), true)),
            "Completed"
        );
        assert_eq!(phase_label(&crr(None, false)), "Unset");
        assert_eq!(phase_label(&crr(Some(Phase::Pending), false)), "Pending");
    }

    #[test]
    fn counts_every_phase_including_zeroes() {
        let requests = [
            crr(Some(Phase::Recreating), false),
            crr(Some(Phase::Recreating), false),
            crr(None, false),
        ];
        let counts = count_by_phase(requests.iter());
        assert_eq!(counts["Recreating"], 2);
        assert_eq!(counts["Unset"], 1);
        assert_eq!(counts["Pending"], 0);
        assert_eq!(counts["Completed"], 0);
    }

    #[test]
    fn scrape_shows_requests_by_phase_and_counters() {
        let mut registry = Registry::with_prefix("crr_operator");
        let metrics = Metrics::register(&mut registry);
        metrics
            .reconciles
            .get_or_create(&OutcomeLabels { outcome: "applied" })
            .inc();
        metrics.observe_completion(Duration::from_secs(3));
        registry.register_collector(Box::new(PhaseCollector::new(|| {
            vec![Arc::new(crr(Some(Phase::Pending), false))]
        })));
        let text = crr_runtime::metrics::encode(&registry).unwrap();
        assert!(text.contains("crr_operator_reconciles_total{outcome=\"applied\"} 1"));
        assert!(text.contains("crr_operator_requests{phase=\"Pending\"} 1"));
        assert!(text.contains("crr_operator_time_to_completion_seconds_count 1"));
    }
}
