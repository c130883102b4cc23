//! `apps.kruise.io/v1beta1` ContainerRecreateRequest: the storage version and the hub every other
//! version converts to. The shared building blocks (container entries, strategy, per-container
//! states) live here and are reused by v1alpha1, whose JSON shape is identical for them.

use k8s_openapi::api::core::v1::{ContainerPort, ExecAction, HTTPGetAction, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// ContainerRecreateRequestSpec names the pod and the containers to recreate (restart in place:
/// the pod, its IP and volumes stay; the named containers get new container IDs) and how.
#[allow(clippy::duplicated_attributes)] // kube takes one `derive = ...` per trait.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1beta1",
    kind = "ContainerRecreateRequest",
    namespaced,
    status = "ContainerRecreateRequestStatus",
    shortname = "crr",
    derive = "PartialEq",
    derive = "Default",
    doc = "ContainerRecreateRequest is the Schema for the containerrecreaterequests API",
    printcolumn(
        name = "PHASE",
        type_ = "string",
        json_path = ".status.phase",
        description = "Phase of this ContainerRecreateRequest."
    ),
    printcolumn(
        name = "POD",
        type_ = "string",
        json_path = ".spec.podName",
        description = "Pod name of this ContainerRecreateRequest."
    ),
    printcolumn(
        name = "NODE",
        type_ = "string",
        json_path = ".metadata.labels.crr\\.apps\\.kruise\\.io/node-name",
        description = "Node name of this ContainerRecreateRequest."
    ),
    printcolumn(
        name = "SUCCEEDED",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Succeeded\")].status",
        description = "Whether every container was recreated (the Succeeded condition): a Completed request may have failed."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created."
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestSpec {
    /// PodName is name of the Pod that owns the recreated containers.
    pub pod_name: String,
    /// Containers contains the containers that need to recreate in the Pod.
    pub containers: Vec<ContainerRecreateRequestContainer>,
    /// Strategy defines strategies for containers recreation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ContainerRecreateRequestStrategy>,
    /// ActiveDeadlineSeconds is the deadline duration of this ContainerRecreateRequest (at most
    /// 365 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::MAX_ACTIVE_DEADLINE_SECONDS))]
    pub active_deadline_seconds: Option<i64>,
    /// TTLSecondsAfterFinished is the TTL duration after this ContainerRecreateRequest has
    /// completed (at most 365 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::MAX_TTL_SECONDS_AFTER_FINISHED))]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// A container of the pod to recreate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainer {
    /// Name of the container that need to recreate. It must be existing in the real pod.Spec.Containers.
    pub name: String,
    /// PreStop is synced from the real container in Pod spec during this ContainerRecreateRequest
    /// creating. Populated by the system. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<ProbeHandler>,
    /// Ports is synced from the real container in Pod spec during this ContainerRecreateRequest
    /// creating. Populated by the system. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    /// StatusContext is synced from the real Pod status during this ContainerRecreateRequest
    /// creating. Populated by the system. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_context: Option<ContainerRecreateRequestContainerContext>,
}

/// ProbeHandler (upstream `CRRProbeHandler`) defines a specific action to take against a
/// container; exactly one of the fields is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeHandler {
    /// Exec specifies the action to take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    /// HTTPGet specifies the http request to perform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HTTPGetAction>,
    /// TCPSocket specifies an action involving a TCP port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TCPSocketAction>,
}

/// The container as it was when the request was created.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainerContext {
    /// Container's ID in the format 'docker://<container_id>'.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// The number of times the container has been restarted, currently based on
    /// the number of dead containers that have not yet been removed.
    pub restart_count: i32,
}

/// How the containers are recreated.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestStrategy {
    /// FailurePolicy decides whether to continue if one container fails to recreate
    /// (`Fail` or `Ignore`; defaulted to `Fail` by the webhook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Fail", "Ignore"]))]
    pub failure_policy: Option<String>,
    /// OrderedRecreate indicates whether to recreate the next container only if the previous one
    /// has recreated completely.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ordered_recreate: bool,
    /// ForceRecreate indicates whether to force kill the container even if the previous container
    /// is starting.
    #[serde(default, skip_serializing_if = "is_false")]
    pub force_recreate: bool,
    /// TerminationGracePeriodSeconds is the optional duration in seconds to wait the container
    /// terminating gracefully. Value must be non-negative integer. The value zero indicates delete
    /// immediately. If this value is nil, we will use pod.Spec.TerminationGracePeriodSeconds as
    /// default value (at most 7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::MAX_TERMINATION_GRACE_PERIOD_SECONDS))]
    pub termination_grace_period_seconds: Option<i64>,
    /// UnreadyGracePeriodSeconds is the optional duration in seconds to mark Pod as not ready over
    /// this duration before executing preStop hook and stopping the container (at most 1 day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::MAX_UNREADY_GRACE_PERIOD_SECONDS))]
    pub unready_grace_period_seconds: Option<i64>,
    /// Minimum number of seconds for which a newly created container should be started and ready
    /// without any of its container crashing, for it to be considered Succeeded. Defaults to 0
    /// (container will be considered Succeeded as soon as it is started and ready; at most 1
    /// day).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = crate::limits::MAX_MIN_STARTED_SECONDS))]
    pub min_started_seconds: i32,
}

/// FailurePolicy decides what happens when one container fails to recreate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Stop at the first failure and complete the request.
    #[default]
    Fail,
    /// Go on with the remaining containers.
    Ignore,
}

/// A `failurePolicy` value that is neither `Fail` nor `Ignore`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failurePolicy {0}")]
pub struct UnknownFailurePolicy(pub String);

impl FailurePolicy {
    /// Parses a `failurePolicy` value; the empty string means the default, `Fail`.
    pub fn parse(value: &str) -> Result<Self, UnknownFailurePolicy> {
        match value {
            "" | "Fail" => Ok(Self::Fail),
            "Ignore" => Ok(Self::Ignore),
            other => Err(UnknownFailurePolicy(other.to_owned())),
        }
    }

    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "Fail",
            Self::Ignore => "Ignore",
        }
    }
}

impl ContainerRecreateRequestStrategy {
    /// The effective failure policy. Admission guarantees the stored value is valid; anything
    /// else is treated as the safe default, `Fail`.
    pub fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::parse(self.failure_policy.as_deref().unwrap_or_default()).unwrap_or_default()
    }
}

/// Phase of a ContainerRecreateRequest or of one of its containers.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Waiting for its turn (another request of the same pod runs first, or not yet killed).
    Pending,
    /// The daemon is recreating the containers.
    Recreating,
    /// Per container: recreated and running.
    Succeeded,
    /// Per container: could not be recreated.
    Failed,
    /// The request is finished (see per-container states and `message` for the outcome).
    Completed,
}

impl Phase {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Recreating => "Recreating",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Completed => "Completed",
        }
    }
}

/// Status of a ContainerRecreateRequest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = require_phase)]
pub struct ContainerRecreateRequestStatus {
    /// Phase of this ContainerRecreateRequest, e.g. Pending, Recreating, Completed.
    /// An empty or absent phase means no component has picked the request up yet.
    #[serde(
        default,
        deserialize_with = "deserialize_optional_phase",
        skip_serializing_if = "Option::is_none"
    )]
    pub phase: Option<Phase>,
    /// Represents time when the ContainerRecreateRequest was completed. It is not guaranteed to be
    /// set in happens-before order across separate operations. It is represented in RFC3339 form
    /// and is in UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// A human readable message indicating details about this ContainerRecreateRequest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// ContainerRecreateStates contains the recreation states of the containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_recreate_states: Vec<ContainerRecreateRequestContainerRecreateState>,
    /// ContainerStatusSnapshot is the operator's copy of the pod's status for the requested
    /// containers while they are recreated (the legacy v1alpha1 annotation
    /// `crr.apps.kruise.io/sync-container-statuses`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_status_snapshot: Vec<ContainerRecreateRequestSyncContainerStatus>,
    /// Conditions of the request: `PreRecreateGrace` (the pod was made not-ready and the unready
    /// grace period started; the legacy v1alpha1 annotation `crr.apps.kruise.io/unready-acquired`)
    /// and `Succeeded` (the overall outcome once Completed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The recreation state of one container.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainerRecreateState {
    /// Name of the container.
    pub name: String,
    /// Phase indicates the recreation phase of the container.
    pub phase: Phase,
    /// A human readable message indicating details about this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Containers are killed by kruise daemon.
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_killed: bool,
}

/// One container's status as the operator last saw it in the pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestSyncContainerStatus {
    /// Name of the container.
    pub name: String,
    /// Specifies whether the container has passed its readiness probe.
    pub ready: bool,
    /// The number of times the container has been restarted.
    pub restart_count: i32,
    /// Container's ID in the format 'containerd://<container_id>'.
    #[serde(
        default,
        rename = "containerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub container_id: String,
}

impl ContainerRecreateRequest {
    /// The strategy with defaults when absent.
    pub fn strategy(&self) -> ContainerRecreateRequestStrategy {
        self.spec.strategy.clone().unwrap_or_default()
    }

    /// The phase, `None` while nobody has picked the request up.
    pub fn phase(&self) -> Option<Phase> {
        self.status.as_ref().and_then(|status| status.phase)
    }

    /// A request is finished once it has a completion time.
    pub fn is_completed(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|status| status.completion_time.is_some())
    }

    /// The condition of the given type, if present.
    pub fn condition(&self, condition_type: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|condition| condition.type_ == condition_type)
    }
}

/// A stored status always carries a phase (as upstream's schema says), but Rust code may hold a
/// status before anybody picked the request up, hence `Option` in the type and `required` here.
pub(crate) fn require_phase(schema: &mut schemars::Schema) {
    if let Some(object) = schema.as_object_mut() {
        object.insert("required".to_owned(), serde_json::json!(["phase"]));
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// Go writes the zero phase as `""`; treat it as "not set" rather than failing to decode.
pub(crate) fn deserialize_optional_phase<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Phase>, D::Error> {
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(text) if text.is_empty() => Ok(None),
        Some(text) => {
            Phase::deserialize(serde::de::value::StringDeserializer::<D::Error>::new(text))
                .map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_policy_defaults_empty_to_fail_and_rejects_unknown_values() {
        assert_eq!(FailurePolicy::parse(""), Ok(FailurePolicy::Fail));
        assert_eq!(FailurePolicy::parse("Fail"), Ok(FailurePolicy::Fail));
        assert_eq!(FailurePolicy::parse("Ignore"), Ok(FailurePolicy::Ignore));
        let error = FailurePolicy::parse("Retry").unwrap_err();
        assert_eq!(error.to_string(), "unknown failurePolicy Retry");
    }

    #[test]
    fn empty_phase_decodes_as_unset_and_unknown_phase_is_an_error() {
        let status: ContainerRecreateRequestStatus =
            serde_json::from_str(r#"{"phase":""}"#).unwrap();
        assert_eq!(status.phase, None);
        let status: ContainerRecreateRequestStatus =
            serde_json::from_str(r#"{"phase":"Recreating"}"#).unwrap();
        assert_eq!(status.phase, Some(Phase::Recreating));
        assert!(
            serde_json::from_str::<ContainerRecreateRequestStatus>(r#"{"phase":"Sleeping"}"#)
                .is_err()
        );
    }

    #[test]
    fn defaults_are_not_serialized() {
        let strategy = ContainerRecreateRequestStrategy::default();
        assert_eq!(serde_json::to_string(&strategy).unwrap(), "{}");
        let status = ContainerRecreateRequestStatus::default();
        assert_eq!(serde_json::to_string(&status).unwrap(), "{}");
    }
}
