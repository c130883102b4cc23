//! `crr.dev/v1alpha1` ContainerRecreateRollout: in-place restarts of the named containers of a
//! whole workload's pods, a few pods at a time, within the namespace's PodDisruptionBudgets.
//!
//! The types, the pure helpers every component shares (how `maxUnavailable` resolves, how a pod's
//! request is named, what a request of a rollout carries), and the CRD built from the types. The
//! rollout controller's decisions live in the operator (`operator/src/rollout/plan.rs`), the
//! admission rules in [`crate::rules::rollout`].

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::keys;
use crate::v1beta1::ContainerRecreateRequestStrategy;

/// The per-pod deadline a rollout's requests get when `recreateStrategy.activeDeadlineSeconds`
/// is not set.
pub const DEFAULT_POD_DEADLINE_SECONDS: i64 = 300;
/// The most failures `status.failures` lists.
pub const MAX_LISTED_FAILURES: usize = 10;
/// The longest rollout name: it labels every request of the rollout, and label values are at
/// most 63 characters.
pub const MAX_NAME_LENGTH: usize = 63;

/// ContainerRecreateRolloutSpec restarts the named containers of every pod of a target in place
/// (pod, IP, node and volumes kept), a few pods at a time. Immutable after creation except
/// `paused`, and `aborted`, which may only be set.
#[allow(clippy::duplicated_attributes)] // kube takes one `derive = ...` per trait.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "crr.dev",
    version = "v1alpha1",
    kind = "ContainerRecreateRollout",
    namespaced,
    status = "ContainerRecreateRolloutStatus",
    shortname = "crro",
    derive = "PartialEq",
    derive = "Default",
    doc = "ContainerRecreateRollout restarts named containers across a workload's pods in place, a few pods at a time, never breaking a PodDisruptionBudget.",
    printcolumn(
        name = "PHASE",
        type_ = "string",
        json_path = ".status.phase",
        description = "Phase of the rollout."
    ),
    printcolumn(
        name = "TARGET",
        type_ = "string",
        json_path = ".status.targetName",
        description = "The workload (kind/name) or the pod selector the rollout restarts."
    ),
    printcolumn(
        name = "RECREATED",
        type_ = "string",
        json_path = ".status.progress",
        description = "Pods recreated of the target's pods (recreated/targetPods)."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created."
    ),
    printcolumn(
        name = "REASON",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Progressing\")].reason",
        description = "Why the rollout is where it is: Started, WaitingForBudget, Paused, Completed, ...",
        priority = "1"
    ),
    printcolumn(
        name = "MESSAGE",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Progressing\")].message",
        description = "What the rollout waits for, in words.",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRolloutSpec {
    /// Target names the pods: exactly one of workloadRef and selector.
    pub target: RolloutTarget,
    /// Containers lists the names of the containers to recreate in every target pod.
    pub containers: Vec<String>,
    /// MaxUnavailable is how many target pods may be unavailable (not Ready, or with a request
    /// of this rollout in flight) at once: a count, or a percent of the target's pods rounded
    /// down, at least 1. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// RespectDisruptionBudgets starts a pod only when every PodDisruptionBudget of the
    /// namespace that selects it allows one more disruption, counting this rollout's requests in
    /// flight. Defaults to true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub respect_disruption_budgets: Option<bool>,
    /// Order of the pods: `Default` (pods already not Ready first, then StatefulSet pods from
    /// the highest ordinal, other pods oldest first, ties by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Default"]))]
    pub order: Option<String>,
    /// Paused stops new pods from starting; requests in flight finish.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// Aborted ends the rollout for good: no pod starts again, requests not yet started are
    /// deleted, those under way finish, then the phase is Aborted. It can not be unset.
    #[serde(default, skip_serializing_if = "is_false")]
    pub aborted: bool,
    /// OnlyPods, when not empty, limits the target to the pods of these names (at most 1000):
    /// `kubectl crr rollout retry` sets it to the pods an earlier rollout did not recreate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub only_pods: Vec<String>,
    /// MaxFailedPods is how many pods may fail before the rollout stops starting new ones and
    /// ends Failed. Defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_failed_pods: Option<i32>,
    /// RecreateStrategy is what each pod's ContainerRecreateRequest gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recreate_strategy: Option<RolloutRecreateStrategy>,
    /// TTLSecondsAfterFinished deletes the rollout, and its requests with it, this long after it
    /// ends (at most 365 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::MAX_TTL_SECONDS_AFTER_FINISHED))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// ProgressDeadlineSeconds ends the rollout Failed (reason ProgressDeadlineExceeded) once no
    /// pod has started or finished for this long while it runs (not paused, not waiting under the
    /// cluster's cap): no new pod starts, and requests in flight finish first. Defaults to 1800.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i32>,
}

/// `spec.progressDeadlineSeconds` when unset: a Deployment's 600 s, scaled for pods restarted a
/// few at a time behind budgets.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 1800;

fn is_false(value: &bool) -> bool {
    !value
}

/// The pods a rollout restarts: exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutTarget {
    /// WorkloadRef names a Deployment, StatefulSet, DaemonSet or ReplicaSet of the rollout's
    /// namespace: its pods are those its selector matches that it owns, directly or through its
    /// ReplicaSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<WorkloadRef>,
    /// Selector selects pods of the rollout's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// A workload of the rollout's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// APIVersion of the workload, e.g. `apps/v1`.
    pub api_version: String,
    /// Kind of the workload: Deployment, StatefulSet, DaemonSet or ReplicaSet.
    pub kind: String,
    /// Name of the workload.
    pub name: String,
}

/// What every request of the rollout gets: a ContainerRecreateRequest's strategy, its fields as
/// they are there (`failurePolicy`, `orderedRecreate`, `forceRecreate`,
/// `terminationGracePeriodSeconds`, `unreadyGracePeriodSeconds`, `minStartedSeconds`), and the
/// request's deadline.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutRecreateStrategy {
    /// The strategy each request gets.
    #[serde(flatten)]
    pub request: ContainerRecreateRequestStrategy,
    /// ActiveDeadlineSeconds is each pod's request deadline. Defaults to 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 3, max = crate::limits::MAX_ACTIVE_DEADLINE_SECONDS))]
    pub active_deadline_seconds: Option<i64>,
    /// TTLSecondsAfterFinished is each request's `ttlSecondsAfterFinished`: a request is deleted
    /// this long after it finishes, but never while its rollout runs (the rollout reads its
    /// outcome). Unset, the requests stay as long as the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::MAX_TTL_SECONDS_AFTER_FINISHED))]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// The observed state of a rollout, derived from its requests and the target's pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRolloutStatus {
    /// ObservedGeneration is the spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Phase is Progressing, Paused, Completed, Failed or Aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Progressing", "Paused", "Completed", "Failed", "Aborted"]))]
    pub phase: Option<String>,
    /// StartTime is when the operator first acted on the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// CompletionTime is when the rollout ended (Completed, Failed or Aborted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// TargetName is the target as `kind/name`, or the selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_name: Option<String>,
    /// TargetPods counts the target's pods that existed when the rollout was created and still
    /// exist.
    #[serde(default)]
    pub target_pods: i32,
    /// Recreated counts target pods whose request succeeded.
    #[serde(default)]
    pub recreated: i32,
    /// Failed counts target pods whose request failed.
    #[serde(default)]
    pub failed: i32,
    /// InFlight counts target pods with an unfinished request.
    #[serde(default)]
    pub in_flight: i32,
    /// Pending counts target pods not started yet.
    #[serde(default)]
    pub pending: i32,
    /// Skipped counts the pods of the target that cannot have containers recreated, so are not
    /// counted in `targetPods`: Pending (not bound to a node), Succeeded or Failed (evicted, say).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: i32,
    /// LastProgressTime is when a pod last started or finished, or the rollout started or
    /// resumed: `spec.progressDeadlineSeconds` counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_time: Option<Time>,
    /// Progress is `recreated/targetPods`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Conditions: Progressing (its reason says what the rollout waits on), Complete, Failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Failures lists the first pods that failed (at most 10), with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<RolloutFailure>,
}

fn is_zero(count: &i32) -> bool {
    *count == 0
}

/// One pod that failed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutFailure {
    /// Pod is the pod's name.
    pub pod: String,
    /// Container is the container that failed, when the request says which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Message is why.
    pub message: String,
}

/// The failure as one line of text, the way the rollout's `PodFailed` Events and
/// `kubectl crr rollout status` show it: `pod web-1 container app: <message>` (no container part
/// when the request does not say which).
impl std::fmt::Display for RolloutFailure {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "pod {}", self.pod)?;
        if let Some(container) = &self.container {
            write!(formatter, " container {container}")?;
        }
        write!(formatter, ": {}", self.message)
    }
}

/// A rollout's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RolloutPhase {
    /// Starting pods, or waiting to.
    Progressing,
    /// `spec.paused`: no pod starts; requests in flight finish.
    Paused,
    /// Every target pod was recreated, or failed within `maxFailedPods`.
    Completed,
    /// More pods failed than `maxFailedPods`, or the target is gone.
    Failed,
    /// `spec.aborted`: ended by hand, once the requests under way finished.
    Aborted,
}

impl RolloutPhase {
    /// The phase as `status.phase` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Progressing => "Progressing",
            Self::Paused => "Paused",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::Aborted => "Aborted",
        }
    }

    /// Parses `status.phase`; `None` for a phase this version does not know.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "Progressing" => Some(Self::Progressing),
            "Paused" => Some(Self::Paused),
            "Completed" => Some(Self::Completed),
            "Failed" => Some(Self::Failed),
            "Aborted" => Some(Self::Aborted),
            _ => None,
        }
    }

    /// Whether the rollout has ended: it starts nothing again.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Aborted)
    }
}

impl ContainerRecreateRollout {
    /// When it was created (`metadata.creationTimestamp`), once the API server has stored it.
    pub fn created(&self) -> Option<jiff::Timestamp> {
        self.metadata.creation_timestamp.as_ref().map(|time| time.0)
    }

    /// The phase the status records, if any.
    pub fn phase(&self) -> Option<RolloutPhase> {
        self.status
            .as_ref()
            .and_then(|status| status.phase.as_deref())
            .and_then(RolloutPhase::parse)
    }
}

/// A `maxUnavailable` that is neither a positive count nor a percent from 1% to 100%.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("maxUnavailable {value} is neither a count of at least 1 nor a percent from 1% to 100%")]
pub struct BadMaxUnavailable {
    /// The value as given.
    pub value: String,
}

/// `maxUnavailable`, parsed: a count or a percent of the target's pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// A count of pods, at least 1.
    Count(usize),
    /// A percent of the target's pods, 1 to 100.
    Percent(u8),
}

impl Limit {
    /// The limit for a target of `target_pods` pods: a percent rounded down, never below 1.
    pub fn resolve(self, target_pods: usize) -> usize {
        match self {
            Self::Count(count) => count.max(1),
            Self::Percent(percent) => (target_pods * usize::from(percent) / 100).max(1),
        }
    }
}

impl Limit {
    /// The value as `maxUnavailable` holds it: an integer, or a string such as `25%`.
    pub fn to_int_or_string(self) -> IntOrString {
        match self {
            Self::Count(count) => IntOrString::Int(i32::try_from(count).unwrap_or(i32::MAX)),
            Self::Percent(percent) => IntOrString::String(format!("{percent}%")),
        }
    }
}

/// Reads a limit as a command line writes it: `2` or `25%`.
impl std::str::FromStr for Limit {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let (number, percent) = match text.strip_suffix('%') {
            Some(number) => (number, true),
            None => (text, false),
        };
        let value: u32 = number
            .parse()
            .map_err(|_| format!("{text:?} is neither a number nor a percentage such as 25%"))?;
        if value == 0 {
            return Err("must be at least 1 (or 1%)".to_owned());
        }
        if percent {
            let percent = u8::try_from(value)
                .ok()
                .filter(|percent| *percent <= 100)
                .ok_or_else(|| format!("{value}% is more than 100%"))?;
            Ok(Self::Percent(percent))
        } else {
            Ok(Self::Count(usize::try_from(value).unwrap_or(usize::MAX)))
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Count(count) => write!(formatter, "{count}"),
            Self::Percent(percent) => write!(formatter, "{percent}%"),
        }
    }
}

/// Parses `maxUnavailable`: a count of at least 1, or a percent from 1% to 100%. `None` means
/// the default, 1.
pub fn max_unavailable(value: Option<&IntOrString>) -> Result<Limit, BadMaxUnavailable> {
    let bad = |value: String| BadMaxUnavailable { value };
    match value {
        None => Ok(Limit::Count(1)),
        Some(IntOrString::Int(count)) => usize::try_from(*count)
            .ok()
            .filter(|count| *count >= 1)
            .map(Limit::Count)
            .ok_or_else(|| bad(count.to_string())),
        Some(IntOrString::String(text)) => text
            .strip_suffix('%')
            .and_then(|digits| digits.parse::<u8>().ok())
            .filter(|percent| (1..=100).contains(percent))
            .map(Limit::Percent)
            .ok_or_else(|| bad(text.clone())),
    }
}

/// The name of the request a rollout creates for a pod: the rollout's name and the pod's UID, so
/// that a restarted operator finds, never duplicates, the request of a pod. At most
/// 63 + 1 + 36 characters: a valid object name.
pub fn request_name(rollout: &str, pod_uid: &str) -> String {
    format!("{rollout}-{pod_uid}")
}

/// The target as status and `kubectl get` show it: `kind/name`, or the selector's labels.
pub fn target_name(target: &RolloutTarget) -> String {
    if let Some(workload) = &target.workload_ref {
        return format!("{}/{}", workload.kind, workload.name);
    }
    let Some(selector) = &target.selector else {
        return String::new();
    };
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    for expression in selector.match_expressions.iter().flatten() {
        let values = expression.values.clone().unwrap_or_default().join(",");
        parts.push(format!(
            "{} {} ({values})",
            expression.key, expression.operator
        ));
    }
    parts.join(",")
}

/// Whether a pod template has a container (regular or native sidecar) of each name; the names
/// it lacks, in the rollout's order.
pub fn missing_containers<'a>(template: &PodTemplateSpec, names: &'a [String]) -> Vec<&'a str> {
    let Some(spec) = &template.spec else {
        return names.iter().map(String::as_str).collect();
    };
    let has = |name: &str| {
        spec.containers
            .iter()
            .any(|container| container.name == name)
            || spec.init_containers.iter().flatten().any(|container| {
                container.name == name && container.restart_policy.as_deref() == Some("Always")
            })
    };
    names
        .iter()
        .map(String::as_str)
        .filter(|name| !has(name))
        .collect()
}

/// The rollout CRD: `crr.dev/v1alpha1`, namespaced, with a status subresource. Its schema
/// carries what [`crate::schema`] adds to condition lists.
pub fn crd() -> Result<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    crate::CrdError,
> {
    use kube::CustomResourceExt;
    let mut crd = ContainerRecreateRollout::crd();
    crd.spec.names.list_kind = Some(format!("{}List", keys::ROLLOUT_KIND));
    for version in &mut crd.spec.versions {
        if let Some(props) = version
            .schema
            .as_mut()
            .and_then(|validation| validation.open_api_v3_schema.as_mut())
        {
            let mut schema = serde_json::to_value(&*props)?;
            crate::schema::complete_rollout(&mut schema)?;
            *props = serde_json::from_value(schema)?;
        }
    }
    Ok(crd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_as_its_pod_its_container_when_known_and_why() {
        let mut failure = RolloutFailure {
            pod: "web-1".to_owned(),
            container: Some("app".to_owned()),
            message: "preStop hook failed: exit code 1".to_owned(),
        };
        assert_eq!(
            failure.to_string(),
            "pod web-1 container app: preStop hook failed: exit code 1"
        );
        failure.container = None;
        assert_eq!(
            failure.to_string(),
            "pod web-1: preStop hook failed: exit code 1"
        );
    }

    #[test]
    fn max_unavailable_resolves_counts_and_percents_never_below_one() {
        let int = |n| Some(IntOrString::Int(n));
        let percent = |text: &str| Some(IntOrString::String(text.to_owned()));
        let resolved = |value: Option<IntOrString>, pods| {
            max_unavailable(value.as_ref()).map(|limit| limit.resolve(pods))
        };
        assert_eq!(resolved(None, 60), Ok(1));
        assert_eq!(resolved(int(2), 8), Ok(2));
        assert_eq!(resolved(int(20), 8), Ok(20));
        assert_eq!(resolved(percent("10%"), 60), Ok(6));
        assert_eq!(resolved(percent("25%"), 10), Ok(2));
        assert_eq!(resolved(percent("1%"), 10), Ok(1));
        assert_eq!(resolved(percent("100%"), 7), Ok(7));
        assert_eq!(resolved(percent("50%"), 0), Ok(1));
        for bad in ["0%", "101%", "10", "ten%", "%", "-5%", ""] {
            assert!(resolved(percent(bad), 10).is_err(), "{bad:?} refused");
        }
        for bad in [0, -1] {
            assert!(resolved(int(bad), 10).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_read_and_write_as_a_command_line_and_the_api_hold_them() {
        assert_eq!("2".parse(), Ok(Limit::Count(2)));
        assert_eq!("25%".parse(), Ok(Limit::Percent(25)));
        for bad in ["0", "0%", "101%", "x", "-1", ""] {
            assert!(bad.parse::<Limit>().is_err(), "{bad:?} accepted");
        }
        for limit in [Limit::Count(3), Limit::Percent(10)] {
            assert_eq!(limit.to_string().parse(), Ok(limit));
            assert_eq!(max_unavailable(Some(&limit.to_int_or_string())), Ok(limit));
        }
    }

    #[test]
    fn request_names_are_deterministic_and_valid_object_names() {
        let rollout = "r".repeat(MAX_NAME_LENGTH);
        let name = request_name(&rollout, "0f8fad5b-d9cb-469f-a165-70867728950e");
        assert_eq!(
            name,
            request_name(&rollout, "0f8fad5b-d9cb-469f-a165-70867728950e")
        );
        assert!(name.len() <= 253);
        assert!(name.ends_with("-0f8fad5b-d9cb-469f-a165-70867728950e"));
    }

    #[test]
    fn target_names_show_the_workload_or_the_selector() {
        let workload = RolloutTarget {
            workload_ref: Some(WorkloadRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
            }),
            selector: None,
        };
        assert_eq!(target_name(&workload), "Deployment/web");
        let selector = RolloutTarget {
            workload_ref: None,
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                match_expressions: None,
            }),
        };
        assert_eq!(target_name(&selector), "app=web");
    }

    #[test]
    fn missing_containers_counts_native_sidecars_but_not_run_once_init_containers() {
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "spec": {
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}, {"name": "migrate"}],
                "containers": [{"name": "app"}],
            }
        }))
        .unwrap();
        let names: Vec<String> = ["app", "proxy", "migrate", "nope"]
            .map(str::to_owned)
            .into();
        assert_eq!(missing_containers(&template, &names), ["migrate", "nope"]);
    }

    #[test]
    fn phases_round_trip_and_know_when_they_end() {
        for phase in [
            RolloutPhase::Progressing,
            RolloutPhase::Paused,
            RolloutPhase::Completed,
            RolloutPhase::Failed,
            RolloutPhase::Aborted,
        ] {
            assert_eq!(RolloutPhase::parse(phase.as_str()), Some(phase));
        }
        assert!(RolloutPhase::Completed.is_finished());
        assert!(RolloutPhase::Failed.is_finished());
        assert!(RolloutPhase::Aborted.is_finished());
        assert!(!RolloutPhase::Paused.is_finished());
        assert_eq!(RolloutPhase::parse("Done"), None);
    }
}
