//! The rollout wing's metrics (prefix `crr_operator`; docs/metrics.md):
//!
//! * `rollouts{phase}`, `rollouts_waiting_for_budget` and `rollouts_waiting_for_cluster_cap`:
//!   read from the rollout cache at scrape
//!   time ([`RolloutCollector`]), by every replica (aggregate with `max`);
//! * `rollout_pods_total{outcome}`: pods recreated or failed, counted by the leader from the
//!   growth of a rollout's status counts, which it writes once per change;
//! * `rollout_duration_seconds{outcome}`: start to end of a rollout, observed by the leader when
//!   it writes the ending status;
//! * `rollout_budget_wait_seconds`: how long rollouts waited on a PodDisruptionBudget, from the
//!   leader's memory of when each wait began (a wait across a change of leader is measured from
//!   the new leader's first sight of it).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crr_crds::keys;
use crr_crds::rollout::{ContainerRecreateRollout, ContainerRecreateRolloutStatus, RolloutPhase};
use crr_runtime::metrics::ScrapeSource;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `outcome` label of pods and of rollouts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutOutcomeLabels {
    /// Pods: `recreated` or `failed`. Rollouts: `completed` or `failed`.
    pub outcome: &'static str,
}

/// Buckets of a rollout's duration and of a budget wait (seconds).
const BUCKETS: [f64; 14] = [
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    43200.0,
];

/// The metrics the rollout reconciler updates.
#[derive(Clone, Debug)]
pub struct RolloutMetrics {
    /// Pods recreated or failed.
    pub pods: Family<RolloutOutcomeLabels, Counter>,
    /// Rollout durations by outcome.
    pub duration: Family<RolloutOutcomeLabels, Histogram>,
    /// Budget waits.
    pub budget_wait: Histogram,
    /// When the wait on a budget began, per `namespace/name`.
    waits: Arc<Mutex<HashMap<String, Instant>>>,
}

impl RolloutMetrics {
    /// Creates the metrics and registers them (every label value starts at 0).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            pods: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(BUCKETS.iter().copied())),
            budget_wait: Histogram::new(BUCKETS.iter().copied()),
            waits: Arc::default(),
        };
        use crr_runtime::metrics::start_at_zero;
        start_at_zero(
            &metrics.pods,
            ["recreated", "failed"].map(|outcome| RolloutOutcomeLabels { outcome }),
        );
        start_at_zero(
            &metrics.duration,
            ["completed", "failed"].map(|outcome| RolloutOutcomeLabels { outcome }),
        );
        registry.register(
            "rollout_pods",
            "Pods of ContainerRecreateRollouts recreated or failed, counted by the leader",
            metrics.pods.clone(),
        );
        registry.register(
            "rollout_duration_seconds",
            "Seconds from a ContainerRecreateRollout's start to its end, by outcome",
            metrics.duration.clone(),
        );
        registry.register(
            "rollout_budget_wait_seconds",
            "Seconds rollouts waited on a PodDisruptionBudget before they could go on",
            metrics.budget_wait.clone(),
        );
        metrics
    }

    /// Records a status change the leader wrote: pods newly recreated or failed, the end of the
    /// rollout, and the start or end of a wait on a budget.
    pub fn observe(
        &self,
        key: &str,
        previous: Option<&ContainerRecreateRolloutStatus>,
        next: &ContainerRecreateRolloutStatus,
    ) {
        let grown = |before: i32, after: i32| u64::try_from(after - before).unwrap_or(0);
        let (recreated, failed) =
            previous.map_or((0, 0), |status| (status.recreated, status.failed));
        self.pods
            .get_or_create(&RolloutOutcomeLabels {
                outcome: "recreated",
            })
            .inc_by(grown(recreated, next.recreated));
        self.pods
            .get_or_create(&RolloutOutcomeLabels { outcome: "failed" })
            .inc_by(grown(failed, next.failed));
        let phase = |status: Option<&ContainerRecreateRolloutStatus>| {
            status
                .and_then(|status| status.phase.as_deref())
                .and_then(RolloutPhase::parse)
        };
        let ended = phase(Some(next)).filter(|phase| phase.is_finished());
        if let Some(ended) = ended
            && phase(previous) != Some(ended)
            && let (Some(start), Some(end)) = (&next.start_time, &next.completion_time)
        {
            let seconds = end.0.as_second() - start.0.as_second();
            self.duration
                .get_or_create(&RolloutOutcomeLabels {
                    outcome: match ended {
                        RolloutPhase::Completed => "completed",
                        RolloutPhase::Aborted => "aborted",
                        _ => "failed",
                    },
                })
                .observe(seconds.max(0) as f64);
        }
        let mut waits = self
            .waits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // A finished rollout waits no more: its entry goes, whatever the condition says.
        let waiting = waiting_for_budget(next) && ended.is_none();
        match (waiting, waits.get(key)) {
            (true, None) => {
                waits.insert(key.to_owned(), Instant::now());
            }
            (false, Some(began)) => {
                self.budget_wait.observe(began.elapsed().as_secs_f64());
                waits.remove(key);
            }
            _ => {}
        }
    }
}

/// Whether the status says the rollout waits on a PodDisruptionBudget.
pub fn waiting_for_budget(status: &ContainerRecreateRolloutStatus) -> bool {
    progressing_because(status, "WaitingForBudget")
}

/// Whether the status's Progressing condition is True with `reason`.
fn progressing_because(status: &ContainerRecreateRolloutStatus, reason: &str) -> bool {
    status.conditions.iter().any(|condition| {
        condition.type_ == keys::CONDITION_ROLLOUT_PROGRESSING
            && condition.status == "True"
            && condition.reason == reason
    })
}

/// Counts rollouts by phase (`Pending` before the operator's first status); every phase appears.
pub fn count_by_phase<'a>(
    rollouts: impl IntoIterator<Item = &'a ContainerRecreateRollout>,
) -> BTreeMap<&'static str, i64> {
    let mut counts: BTreeMap<&'static str, i64> = [
        "Pending",
        "Progressing",
        "Paused",
        "Completed",
        "Failed",
        "Aborted",
    ]
    .into_iter()
    .map(|phase| (phase, 0))
    .collect();
    for rollout in rollouts {
        let phase = rollout.phase().map_or("Pending", RolloutPhase::as_str);
        *counts.entry(phase).or_default() += 1;
    }
    counts
}

/// Reports `crr_operator_rollouts{phase}` and `crr_operator_rollouts_waiting_for_budget` from
/// the rollout cache at scrape time.
#[derive(Debug)]
pub struct RolloutCollector {
    source: ScrapeSource<Vec<Arc<ContainerRecreateRollout>>>,
}

impl RolloutCollector {
    /// `source` returns the cached rollouts (e.g. `Store::state`).
    pub fn new(
        source: impl Fn() -> Vec<Arc<ContainerRecreateRollout>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            source: ScrapeSource::new(source),
        }
    }
}

impl Collector for RolloutCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let rollouts = self.source.read();
        let mut metric = encoder.encode_descriptor(
            "rollouts",
            "ContainerRecreateRollouts in this replica's cache by phase (Pending: no status yet)",
            None,
            MetricType::Gauge,
        )?;
        for (phase, count) in count_by_phase(rollouts.iter().map(Arc::as_ref)) {
            let labels = [("phase", phase)];
            ConstGauge::new(count).encode(metric.encode_family(&labels)?)?;
        }
        let waiting = rollouts
            .iter()
            .filter_map(|rollout| rollout.status.as_ref())
            .filter(|status| waiting_for_budget(status))
            .count();
        let metric = encoder.encode_descriptor(
            "rollouts_waiting_for_budget",
            "ContainerRecreateRollouts in this replica's cache waiting on a PodDisruptionBudget",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(waiting).unwrap_or(i64::MAX)).encode(metric)?;
        let capped = rollouts
            .iter()
            .filter(|rollout| !rollout.phase().is_some_and(|phase| phase.is_finished()))
            .filter_map(|rollout| rollout.status.as_ref())
            .filter(|status| {
                progressing_because(status, super::status::REASON_WAITING_FOR_CLUSTER_CAP)
            })
            .count();
        let metric = encoder.encode_descriptor(
            "rollouts_waiting_for_cluster_cap",
            "ContainerRecreateRollouts in this replica's cache waiting to start under the cluster's cap on running rollouts",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(capped).unwrap_or(i64::MAX)).encode(metric)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn status(
        phase: &str,
        recreated: i32,
        failed: i32,
        waiting: bool,
    ) -> ContainerRecreateRolloutStatus {
        serde_json::from_value(serde_json::json!({
            "phase": phase, "recreated": recreated, "failed": failed,
            "startTime": "2026-11-27T00:00:00Z",
            "completionTime": if phase == "Completed" || phase == "Failed" {
                Some("2026-11-27T00:02:00Z")
            } else {
                None
            },
            "conditions": [{"type": "Progressing", "status": "True",
                            "reason": if waiting { "WaitingForBudget" } else { "Started" },
                            "message": "", "lastTransitionTime": "2026-11-27T00:00:00Z"}],
        }))
        .expect("a status")
    }

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).expect("encoding");
        text
    }

    #[test]
    fn pods_and_durations_count_each_change_once() {
        let mut registry = Registry::with_prefix("crr_operator");
        let metrics = RolloutMetrics::register(&mut registry);
        let first = status("Progressing", 2, 0, false);
        metrics.observe("shop/r", None, &first);
        let second = status("Progressing", 5, 1, true);
        metrics.observe("shop/r", Some(&first), &second);
        metrics.observe("shop/r", Some(&second), &second);
        let done = status("Completed", 7, 1, false);
        metrics.observe("shop/r", Some(&second), &done);
        metrics.observe("shop/r", Some(&done), &done);
        let text = scrape(&registry);
        assert!(
            text.contains("crr_operator_rollout_pods_total{outcome=\"recreated\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("crr_operator_rollout_pods_total{outcome=\"failed\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("crr_operator_rollout_duration_seconds_sum{outcome=\"completed\"} 120.0"),
            "{text}"
        );
        assert!(
            text.contains("crr_operator_rollout_duration_seconds_count{outcome=\"completed\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("crr_operator_rollout_budget_wait_seconds_count 1"),
            "{text}"
        );
    }

    #[test]
    fn the_collector_counts_phases_and_budget_waits() {
        let rollout = |status: Option<ContainerRecreateRolloutStatus>| {
            Arc::new(ContainerRecreateRollout {
                status,
                ..serde_json::from_value(serde_json::json!({
                    "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
                    "metadata": {"name": "r"},
                    "spec": {"target": {"selector": {"matchLabels": {"a": "b"}}}, "containers": ["app"]},
                }))
                .expect("a rollout")
            })
        };
        let rollouts = vec![
            rollout(None),
            rollout(Some(status("Progressing", 0, 0, true))),
            rollout(Some(status("Progressing", 0, 0, false))),
            rollout(Some(status("Completed", 1, 0, false))),
        ];
        let mut registry = Registry::with_prefix("crr_operator");
        registry.register_collector(Box::new(RolloutCollector::new(move || rollouts.clone())));
        let text = scrape(&registry);
        for line in [
            "crr_operator_rollouts{phase=\"Pending\"} 1",
            "crr_operator_rollouts{phase=\"Progressing\"} 2",
            "crr_operator_rollouts{phase=\"Paused\"} 0",
            "crr_operator_rollouts{phase=\"Completed\"} 1",
            "crr_operator_rollouts{phase=\"Failed\"} 0",
            "crr_operator_rollouts{phase=\"Aborted\"} 0",
            "crr_operator_rollouts_waiting_for_budget 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
