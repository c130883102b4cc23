//! The trigger wing's metrics (docs/metrics.md), registered whether or not triggers are on (at 0
//! when off):
//! * `trigger_rollouts_total{trigger}`: rollouts the triggers created, by trigger;
//! * `trigger_warnings_total{reason}`: Warning Events given about workloads, by reason: a bad
//!   annotation, too many references (the workload refused), Secrets ignored, Reloader also
//!   acting, Reloader annotations crr does not read;
//! * `trigger_pending_changes`: config changes that wait for their workload's restart window;
//! * `trigger_evaluation_seconds`: how long evaluating one workload took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::rollout::Trigger;
use super::warnings;

/// The `trigger` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabels {
    /// `config-change`, `schedule` or `restart`.
    pub trigger: &'static str,
}

/// The `reason` label: the Warning Event's reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Evaluation seconds: a look at the index is milliseconds; reads of many objects, seconds.
const EVALUATION_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// The trigger wing's metrics.
#[derive(Clone, Debug)]
pub struct TriggerMetrics {
    pub rollouts: Family<TriggerLabels, Counter>,
    pub warnings: Family<ReasonLabels, Counter>,
    pub pending_changes: Gauge,
    pub evaluation: Histogram,
}

impl Default for TriggerMetrics {
    /// The metrics, every label value at 0, registered nowhere.
    fn default() -> Self {
        let metrics = Self {
            rollouts: Family::default(),
            warnings: Family::default(),
            pending_changes: Gauge::default(),
            evaluation: Histogram::new(EVALUATION_BUCKETS),
        };
        use crr_runtime::metrics::start_at_zero;
        start_at_zero(
            &metrics.rollouts,
            [Trigger::ConfigChange, Trigger::Schedule, Trigger::Restart].map(|trigger| {
                TriggerLabels {
                    trigger: trigger.as_str(),
                }
            }),
        );
        start_at_zero(
            &metrics.warnings,
            [
                warnings::BAD_ANNOTATION,
                warnings::TOO_MANY_REFERENCES,
                warnings::SECRETS_IGNORED,
                warnings::RELOADER_ALSO_ACTS,
                warnings::RELOADER_NOT_READ,
            ]
            .map(|reason| ReasonLabels { reason }),
        );
        metrics
    }
}

impl TriggerMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "trigger_rollouts",
            "ContainerRecreateRollouts the triggers created, by trigger",
            metrics.rollouts.clone(),
        );
        registry.register(
            "trigger_warnings",
            "Warning Events the triggers gave about workloads, by reason",
            metrics.warnings.clone(),
        );
        registry.register(
            "trigger_pending_changes",
            "Config changes that wait for their workload's restart window",
            metrics.pending_changes.clone(),
        );
        registry.register(
            "trigger_evaluation_seconds",
            "Seconds the leader took to evaluate one workload's triggers",
            metrics.evaluation.clone(),
        );
        metrics
    }

    /// Counts a rollout `trigger` created.
    pub fn rollout_created(&self, trigger: Trigger) {
        self.rollouts
            .get_or_create(&TriggerLabels {
                trigger: trigger.as_str(),
            })
            .inc();
    }

    /// Counts a Warning Event of `reason`.
    pub fn warned(&self, reason: &'static str) {
        self.warnings.get_or_create(&ReasonLabels { reason }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_served_from_the_start() {
        let mut registry = Registry::with_prefix("crr_operator");
        let metrics = TriggerMetrics::register(&mut registry);
        metrics.rollout_created(Trigger::Restart);
        metrics.warned(warnings::TOO_MANY_REFERENCES);
        metrics.pending_changes.set(2);
        let text = crr_runtime::metrics::encode(&registry).expect("encodes");
        for line in [
            r#"crr_operator_trigger_rollouts_total{trigger="config-change"} 0"#,
            r#"crr_operator_trigger_rollouts_total{trigger="restart"} 1"#,
            r#"crr_operator_trigger_warnings_total{reason="BadTriggerAnnotation"} 0"#,
            r#"crr_operator_trigger_warnings_total{reason="TooManyConfigReferences"} 1"#,
            "crr_operator_trigger_pending_changes 2",
            "crr_operator_trigger_evaluation_seconds_count 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
