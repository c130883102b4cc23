//! `apps.kruise.io/v1alpha1` ContainerRecreateRequest: the legacy version, still served so that
//! existing manifests and clients keep working, exactly as leniently as upstream's v1alpha1. Its
//! spec is the v1beta1 spec without the schema minimums on `activeDeadlineSeconds`,
//! `ttlSecondsAfterFinished` and `strategy.minStartedSeconds` (admission sets a negative value to
//! 0, as upstream behaves, and warns), and its `status.phase` has no enum (the kruise Go client
//! sends `""`, which decodes as unset); the strategy type is shared, so the difference is made on
//! this version's schema by [`crate::schema`]. Its status lacks `containerStatusSnapshot` and
//! `conditions`, which travel as annotations instead (see [`crate::conversion`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::v1beta1::{
    ContainerRecreateRequestContainer, ContainerRecreateRequestContainerContext,
    ContainerRecreateRequestContainerRecreateState, ContainerRecreateRequestStrategy, Phase,
    ProbeHandler,
};

/// ContainerRecreateRequestSpec names the pod and the containers to recreate, and how
/// (legacy version; stored as v1beta1).
#[allow(clippy::duplicated_attributes)] // kube takes one `derive = ...` per trait.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
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
    /// ActiveDeadlineSeconds is the deadline duration of this ContainerRecreateRequest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// TTLSecondsAfterFinished is the TTL duration after this ContainerRecreateRequest has completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// Status of a v1alpha1 ContainerRecreateRequest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::v1beta1::require_phase)]
pub struct ContainerRecreateRequestStatus {
    /// Phase of this ContainerRecreateRequest, e.g. Pending, Recreating, Completed.
    #[serde(
        default,
        deserialize_with = "crate::v1beta1::deserialize_optional_phase",
        skip_serializing_if = "Option::is_none"
    )]
    pub phase: Option<Phase>,
    /// Represents time when the ContainerRecreateRequest was completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// A human readable message indicating details about this ContainerRecreateRequest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// ContainerRecreateStates contains the recreation states of the containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_recreate_states: Vec<ContainerRecreateRequestContainerRecreateState>,
}
