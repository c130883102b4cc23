//! Prometheus metrics of the request wing (prometheus-client, OpenMetrics text on `/metrics`,
//! prefix `crr_operator`; the catalog with label values is docs/metrics.md).
//!
//! Counters and the recreate-duration histogram are updated by the reconciler; the number of
//! requests by phase and the number past their deadline are read from the request cache at
//! scrape time ([`CacheCollector`]), so they are exact even for requests deleted since the last
//! reconcile.
//!
//! # Finished requests are counted once
//! `crr_operator_recreate_duration_seconds` and `crr_operator_outcomes_total` are observed by
//! the leader when it removes the `active` label of a finished request ([`Metrics::observe_finished`]),
//! whoever finished it (the daemon or the operator). That write happens once per request: after
//! it the label is gone, so a restart, a relist or a new leader does not observe the request
//! again. A request deleted before its label was removed (a TTL shorter than the reconcile, a
//! user's delete) is not observed; two replicas that both believe they lead for a moment may
//! both observe one request (the Lease makes that a rare overlap, not a rule).

use crr_crds::keys;
use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};
use crr_runtime::metrics::ScrapeSource;
use jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::deadline;
use crate::reconcile_errors::{ControllerErrors, ReconcileErrors};
use crate::request::reconcile::CompletionReason;

/// Label of a reconcile outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `applied` (leader reconciled), `skipped` (not the leader) or `error`.
    pub outcome: &'static str,
}

/// Label of an operator-made completion.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompletionLabels {
    /// See `reconcile::CompletionReason::reason`.
    pub reason: &'static str,
}

/// Label of a finished request's duration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FinishedLabels {
    /// `succeeded` or `failed` ([`finished_labels`]).
    pub outcome: &'static str,
}

/// Labels of a finished request's outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeReasonLabels {
    /// `succeeded` or `failed`.
    pub outcome: &'static str,
    /// One of [`OUTCOME_REASONS`], or `Other`.
    pub reason: &'static str,
}

/// `outcome` label of a request whose `Succeeded` condition is True.
pub const SUCCEEDED: &str = "succeeded";
/// `outcome` label of any other finished request.
pub const FAILED: &str = "failed";

/// The `Succeeded` condition reasons that are their own `reason` label: the daemon's
/// (`Recreated`, `RecreateFailed`, written in node-daemon `round.rs`) and the operator's
/// ([`CompletionReason`]). Any other reason (a request finished by another writer, or without
/// the condition) is `Other`, so the label stays a bounded set.
pub const OUTCOME_REASONS: [(&str, &str); 5] = [
    (SUCCEEDED, "Recreated"),
    (FAILED, "RecreateFailed"),
    (FAILED, "PodGone"),
    (FAILED, "DaemonNotResponding"),
    (FAILED, "ActiveDeadlineExceeded"),
];

/// Buckets of a whole recreate, creation to completion (seconds; creation has second precision).
const RECREATE_BUCKETS: [f64; 15] = [
    0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
];

/// All metrics the reconciler updates.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Reconciles by outcome.
    pub reconciles: Family<OutcomeLabels, Counter>,
    /// Failed reconciles and TTL deletions by kind (`controller="request"`).
    pub errors: ControllerErrors,
    /// Requests the operator completed, by reason.
    pub completions: Family<CompletionLabels, Counter>,
    /// Seconds from creation to completion by outcome, observed once per finished request.
    pub recreate_duration: Family<FinishedLabels, Histogram>,
    /// Finished requests by outcome and reason, counted with `recreate_duration`.
    pub outcomes: Family<OutcomeReasonLabels, Counter>,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` (which carries the `crr_operator`
    /// prefix). Every known label value starts at 0, so each family has series before its first
    /// event.
    pub fn register(registry: &mut Registry, errors: &ReconcileErrors) -> Self {
        let metrics = Self {
            reconciles: Family::default(),
            errors: errors.controller("request", &crate::request::error::Error::KINDS),
            completions: Family::default(),
            recreate_duration: Family::new_with_constructor(|| {
                Histogram::new(RECREATE_BUCKETS.iter().copied())
            }),
            outcomes: Family::default(),
        };
        use crr_runtime::metrics::start_at_zero;
        start_at_zero(
            &metrics.reconciles,
            ["applied", "skipped", "error"].map(|outcome| OutcomeLabels { outcome }),
        );
        start_at_zero(
            &metrics.completions,
            CompletionReason::ALL.map(|reason| CompletionLabels {
                reason: reason.reason(),
            }),
        );
        start_at_zero(
            &metrics.recreate_duration,
            [SUCCEEDED, FAILED].map(|outcome| FinishedLabels { outcome }),
        );
        start_at_zero(
            &metrics.outcomes,
            OUTCOME_REASONS.map(|(outcome, reason)| OutcomeReasonLabels { outcome, reason }),
        );
        registry.register(
            "reconciles",
            "Reconciles of ContainerRecreateRequests by outcome (applied: the leader reconciled; skipped: not the leader; error: failed, retried)",
            metrics.reconciles.clone(),
        );
        registry.register(
            "completions",
            "ContainerRecreateRequests the operator itself completed, by reason (PodGone, DaemonNotResponding, ActiveDeadlineExceeded)",
            metrics.completions.clone(),
        );
        registry.register(
            "recreate_duration_seconds",
            "Seconds from a ContainerRecreateRequest's creation to its completion, by outcome; observed once per finished request by the leader",
            metrics.recreate_duration.clone(),
        );
        registry.register(
            "outcomes",
            "Finished ContainerRecreateRequests by outcome and the reason of their Succeeded condition",
            metrics.outcomes.clone(),
        );
        metrics
    }

    /// Records a finished request: its duration and its outcome (see the module comment for
    /// when this is called). A request without creation or completion time is counted in
    /// `outcomes` only.
    pub fn observe_finished(&self, crr: &ContainerRecreateRequest) {
        let labels = finished_labels(crr);
        if let Some(took) = crate::request::reconcile::time_to_completion(crr) {
            self.recreate_duration
                .get_or_create(&FinishedLabels {
                    outcome: labels.outcome,
                })
                .observe(took.as_secs_f64());
        }
        self.outcomes.get_or_create(&labels).inc();
    }
}

/// The outcome and reason labels of a finished request, from its `Succeeded` condition:
/// `succeeded` when it is True, else `failed`; the condition's reason when it is one of
/// [`OUTCOME_REASONS`], else `Other`.
pub fn finished_labels(crr: &ContainerRecreateRequest) -> OutcomeReasonLabels {
    let condition = crr.condition(keys::CONDITION_SUCCEEDED);
    let outcome = if condition.is_some_and(|condition| condition.status == "True") {
        SUCCEEDED
    } else {
        FAILED
    };
    let reason = condition
        .and_then(|condition| {
            OUTCOME_REASONS
                .iter()
                .find(|(_, known)| *known == condition.reason)
        })
        .map_or("Other", |(_, known)| *known);
    OutcomeReasonLabels { outcome, reason }
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

/// Counts the unfinished requests whose `activeDeadlineSeconds` (from creation) has passed at
/// `now`: the operator completes such a request at its next reconcile, so a count that stays
/// above 0 means requests stuck past their deadline.
pub fn count_past_deadline<'a>(
    requests: impl IntoIterator<Item = &'a ContainerRecreateRequest>,
    now: Timestamp,
) -> i64 {
    let past = requests
        .into_iter()
        .filter(|crr| !crr_crds::status::is_finished(crr))
        .filter(|crr| {
            crr.metadata
                .creation_timestamp
                .as_ref()
                .and_then(|created| {
                    deadline::active_deadline(created.0, crr.spec.active_deadline_seconds)
                })
                .is_some_and(|at| deadline::has_passed(at, now))
        })
        .count();
    i64::try_from(past).unwrap_or(i64::MAX)
}

/// Counts the finished requests without `ttlSecondsAfterFinished`: nothing deletes them, so they
/// pile up in the API server and in every cache of them (a tenant's flood, or a client that
/// never sets a TTL).
pub fn count_finished_without_ttl<'a>(
    requests: impl IntoIterator<Item = &'a ContainerRecreateRequest>,
) -> i64 {
    let kept = requests
        .into_iter()
        .filter(|crr| crr_crds::status::is_finished(crr))
        .filter(|crr| crr.spec.ttl_seconds_after_finished.is_none())
        .count();
    i64::try_from(kept).unwrap_or(i64::MAX)
}

fn as_gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Reports, at scrape time from a snapshot of the request cache, `crr_operator_requests{phase}`,
/// `crr_operator_requests_past_deadline` and `crr_operator_finished_requests_without_ttl`. Every replica reports its own cache (followers
/// included): aggregate over replicas with `max`, not `sum`.
#[derive(Debug)]
pub struct CacheCollector {
    source: ScrapeSource<Vec<Arc<ContainerRecreateRequest>>>,
    settled: ScrapeSource<SettledCounts>,
}

/// The settled requests kept out of the cache (`settled::SettledIndex`): all finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SettledCounts {
    /// How many.
    pub settled: usize,
    /// How many of them have no `ttlSecondsAfterFinished`.
    pub without_ttl: usize,
}

impl CacheCollector {
    /// `source` returns the cached requests (e.g. `Store::state`); `settled` counts the settled
    /// requests kept out of that cache (counted as `Completed`).
    pub fn new(
        source: impl Fn() -> Vec<Arc<ContainerRecreateRequest>> + Send + Sync + 'static,
        settled: impl Fn() -> SettledCounts + Send + Sync + 'static,
    ) -> Self {
        Self {
            source: ScrapeSource::new(source),
            settled: ScrapeSource::new(settled),
        }
    }
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let requests = self.source.read();
        let settled = self.settled.read();
        let mut counts = count_by_phase(requests.iter().map(Arc::as_ref));
        *counts.entry(Phase::Completed.as_str()).or_default() += as_gauge(settled.settled);
        let mut metric = encoder.encode_descriptor(
            "requests",
            "ContainerRecreateRequests in this replica's cache by phase (Unset: nobody picked it up yet; Completed: finished)",
            None,
            MetricType::Gauge,
        )?;
        for (phase, count) in counts {
            let labels = [("phase", phase)];
            ConstGauge::new(count).encode(metric.encode_family(&labels)?)?;
        }
        let past = count_past_deadline(requests.iter().map(Arc::as_ref), Timestamp::now());
        let metric = encoder.encode_descriptor(
            "requests_past_deadline",
            "Unfinished ContainerRecreateRequests in this replica's cache whose activeDeadlineSeconds has passed",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(past).encode(metric)?;
        let kept = count_finished_without_ttl(requests.iter().map(Arc::as_ref))
            + as_gauge(settled.without_ttl);
        let metric = encoder.encode_descriptor(
            "finished_requests_without_ttl",
            "Finished ContainerRecreateRequests in this replica's cache without ttlSecondsAfterFinished: nothing deletes them",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(kept).encode(metric)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_crds::v1beta1::ContainerRecreateRequestStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

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

    fn created_at(mut crr: ContainerRecreateRequest, second: i64) -> ContainerRecreateRequest {
        crr.metadata.creation_timestamp = Some(Time(Timestamp::from_second(second).unwrap()));
        crr
    }

    fn finished(status: &str, reason: &str) -> ContainerRecreateRequest {
        let mut request = created_at(crr(Some(Phase::Completed), false), 100);
        let status_fields = request.status.get_or_insert_default();
        status_fields.completion_time = Some(Time(Timestamp::from_second(142).unwrap()));
        status_fields.conditions.push(Condition {
            type_: keys::CONDITION_SUCCEEDED.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: String::new(),
            last_transition_time: Time(Timestamp::from_second(142).unwrap()),
            observed_generation: None,
        });
        request
    }

    #[test]
    fn outcome_labels_come_from_the_succeeded_condition_and_stay_bounded() {
        let labels = |crr: &ContainerRecreateRequest| {
            let labels = finished_labels(crr);
            (labels.outcome, labels.reason)
        };
        assert_eq!(
            labels(&finished("True", "Recreated")),
            ("succeeded", "Recreated")
        );
        assert_eq!(
            labels(&finished("False", "ActiveDeadlineExceeded")),
            ("failed", "ActiveDeadlineExceeded")
        );
        assert_eq!(
            labels(&finished("False", "RecreateFailed")),
            ("failed", "RecreateFailed")
        );
        // Someone else's reason (free text) never becomes a label value.
        assert_eq!(
            labels(&finished("False", "pod web-0 went away")),
            ("failed", "Other")
        );
        assert_eq!(
            labels(&crr(Some(Phase::Completed), true)),
            ("failed", "Other")
        );
    }

    #[test]
    fn the_operators_completion_reasons_are_known_outcome_reasons() {
        for reason in CompletionReason::ALL {
            assert!(
                OUTCOME_REASONS
                    .iter()
                    .any(|(outcome, known)| *outcome == FAILED && *known == reason.reason()),
                "{reason:?}"
            );
        }
    }

    #[test]
    fn finished_requests_without_ttl_are_counted() {
        let mut kept = crr(Some(Phase::Completed), false);
        kept.status.get_or_insert_default().completion_time = Some(Time(Timestamp::UNIX_EPOCH));
        let mut deleted_later = kept.clone();
        deleted_later.spec.ttl_seconds_after_finished = Some(60);
        let running = crr(Some(Phase::Recreating), false);
        assert_eq!(
            count_finished_without_ttl([&kept, &deleted_later, &running]),
            1
        );
    }

    #[test]
    fn past_deadline_counts_only_unfinished_requests_past_their_deadline() {
        let with_deadline = |seconds: i64, completed: bool| {
            let mut request = created_at(crr(Some(Phase::Recreating), completed), 1_000);
            request.spec.active_deadline_seconds = Some(seconds);
            request
        };
        let requests = [
            with_deadline(10, false),                               // passed
            with_deadline(100, false),                              // not yet
            with_deadline(10, true),                                // finished
            created_at(crr(Some(Phase::Recreating), false), 1_000), // no deadline
        ];
        let now = Timestamp::from_second(1_050).unwrap();
        assert_eq!(count_past_deadline(requests.iter(), now), 1);
        let at_the_deadline = Timestamp::from_second(1_010).unwrap();
        assert_eq!(count_past_deadline(requests.iter(), at_the_deadline), 1);
    }

    #[test]
    fn scrape_shows_every_family_with_its_labels() {
        let mut registry = Registry::with_prefix("crr_operator");
        let errors = ReconcileErrors::register(&mut registry);
        let metrics = Metrics::register(&mut registry, &errors);
        metrics
            .reconciles
            .get_or_create(&OutcomeLabels { outcome: "applied" })
            .inc();
        metrics.observe_finished(&finished("True", "Recreated"));
        // A settled request, kept out of the cache, still counts as finished.
        registry.register_collector(Box::new(CacheCollector::new(
            || vec![Arc::new(crr(Some(Phase::Pending), false))],
            || SettledCounts {
                settled: 1,
                without_ttl: 1,
            },
        )));
        let text = crr_runtime::metrics::encode(&registry).unwrap();
        for expected in [
            "crr_operator_reconciles_total{outcome=\"applied\"} 1",
            "crr_operator_reconciles_total{outcome=\"error\"} 0",
            "crr_operator_reconcile_errors_total{controller=\"request\",kind=\"conflict\"} 0",
            "crr_operator_completions_total{reason=\"PodGone\"} 0",
            "crr_operator_recreate_duration_seconds_count{outcome=\"succeeded\"} 1",
            "crr_operator_recreate_duration_seconds_sum{outcome=\"succeeded\"} 42.0",
            "crr_operator_recreate_duration_seconds_count{outcome=\"failed\"} 0",
            "crr_operator_outcomes_total{outcome=\"succeeded\",reason=\"Recreated\"} 1",
            "crr_operator_outcomes_total{outcome=\"failed\",reason=\"ActiveDeadlineExceeded\"} 0",
            "crr_operator_requests{phase=\"Pending\"} 1",
            "crr_operator_requests_past_deadline 0",
            "crr_operator_requests{phase=\"Completed\"} 1",
            "crr_operator_finished_requests_without_ttl 1",
            "# TYPE crr_operator_recreate_duration_seconds histogram",
            "# TYPE crr_operator_requests gauge",
            "# TYPE crr_operator_requests_past_deadline gauge",
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
        assert!(!text.contains("time_to_completion"), "{text}");
    }
}
