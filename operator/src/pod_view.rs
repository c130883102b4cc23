//! The operator's slim view of a pod: what the request wing and the readiness gate decide on,
//! decoded straight from the API server's JSON so that nothing else is ever allocated.
//!
//! | kept | read by |
//! |---|---|
//! | name, namespace, uid, resourceVersion, creation and deletion times | the pod-gone check, every pod write's precondition, a rollout's order |
//! | labels, the controller's owner reference | a rollout's target and PodDisruptionBudgets (`rollout::world`) |
//! | `spec.readinessGates` | whether the pod declares `KruisePodReady` (`readiness`, `gate`) |
//! | `spec.nodeName` | whether the pod is bound to a node yet: the gate starts only bound pods (`readiness`) |
//! | `status.phase` | whether a rollout can restart the pod (Succeeded and Failed pods are skipped: `crr_crds::rules::check_pod`) |
//! | `status.conditions` | the readiness holders and the gate's initial condition (`readiness`) |
//! | each container status's name, ready, restartCount, containerID and `state.running` (regular and init containers) | the snapshot (`crr_crds::status::snapshot`) |
//!
//! Everything a tenant can make large goes unread: env, command, args, annotations,
//! `managedFields`, volumes, termination messages (labels are bounded by the API server's own
//! validation: 63 characters a value). A pod with 1 MB of env and annotations is
//! kept in about 1 KB (the tests below). [`SlimPod`] is a [`kube::Resource`], so watches, lists,
//! GETs and the responses of pod writes decode into it directly (`Api<SlimPod>`); the code that
//! decides reads the [`Pod`] inside, which has only these fields set.
//!
//! A watch or list of all pods still has the API server send whole pods: [`POD_PAGE`] bounds how
//! many one list page holds before they are decoded.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition, PodReadinessGate,
    PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;

/// Pods per page of a list of pods (a watch's relist, the gate's sweep, a rollout's first read):
/// a page's body is held whole before it is decoded, and once more while the client copies it
/// to decode it, and one pod may be as large as the API server stores (about 1.5 MB). The client
/// reads one page at a time (`crr_runtime::list_pages`), so 10 of the largest cost about 30 MB
/// at the peak of a relist: under a quarter of the operator's 128 Mi limit. (At 20, two watches
/// relisting 100 pods of 1 MB beside a sweep took the leader to 110 MiB on the test bed.)
pub const POD_PAGE: u32 = 10;

/// A pod with only the fields the operator reads (see the module's table).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimPod(pub Pod);

impl SlimPod {
    /// Slims a whole pod to the same fields decoding does (a pod built in memory, in tests).
    pub fn of(pod: &Pod) -> Self {
        // A pod always serializes; were it not to, nothing would be kept rather than too much.
        serde_json::to_value(pod)
            .and_then(serde_json::from_value)
            .unwrap_or_default()
    }
}

impl std::ops::Deref for SlimPod {
    type Target = Pod;

    fn deref(&self) -> &Pod {
        &self.0
    }
}

impl kube::Resource for SlimPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dynamic: &()) -> Cow<'_, str> {
        Pod::kind(dynamic)
    }

    fn group(dynamic: &()) -> Cow<'_, str> {
        Pod::group(dynamic)
    }

    fn version(dynamic: &()) -> Cow<'_, str> {
        Pod::version(dynamic)
    }

    fn plural(dynamic: &()) -> Cow<'_, str> {
        Pod::plural(dynamic)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Wire::deserialize(deserializer)
            .map(Wire::into_pod)
            .map(SlimPod)
    }
}

impl serde::Serialize for SlimPod {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// The wire shape of the fields kept; serde skips every other field without allocating it.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Vec<WireOwner>,
}

/// An owner reference; only the controller's is kept.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireOwner {
    api_version: String,
    kind: String,
    name: String,
    uid: String,
    controller: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    readiness_gates: Option<Vec<PodReadinessGate>>,
    node_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    phase: Option<String>,
    conditions: Option<Vec<PodCondition>>,
    container_statuses: Option<Vec<WireContainerStatus>>,
    init_container_statuses: Option<Vec<WireContainerStatus>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainerStatus {
    name: String,
    #[serde(default)]
    ready: bool,
    #[serde(default)]
    restart_count: i32,
    #[serde(rename = "containerID")]
    container_id: Option<String>,
    state: Option<WireContainerState>,
}

#[derive(Deserialize)]
struct WireContainerState {
    running: Option<ContainerStateRunning>,
}

impl WireContainerStatus {
    fn into_status(self) -> ContainerStatus {
        ContainerStatus {
            name: self.name,
            ready: self.ready,
            restart_count: self.restart_count,
            container_id: self.container_id,
            state: self.state.map(|state| ContainerState {
                running: state.running,
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }
}

/// The controller's owner reference alone (`None` without one).
fn controller_reference(owners: Vec<WireOwner>) -> Option<Vec<OwnerReference>> {
    let owner = owners
        .into_iter()
        .find(|owner| owner.controller == Some(true))?;
    Some(vec![OwnerReference {
        api_version: owner.api_version,
        kind: owner.kind,
        name: owner.name,
        uid: owner.uid,
        controller: Some(true),
        block_owner_deletion: None,
    }])
}

impl Wire {
    fn into_pod(self) -> Pod {
        let statuses = |list: Option<Vec<WireContainerStatus>>| {
            list.map(|list| {
                list.into_iter()
                    .map(WireContainerStatus::into_status)
                    .collect()
            })
        };
        Pod {
            metadata: ObjectMeta {
                name: self.metadata.name,
                namespace: self.metadata.namespace,
                uid: self.metadata.uid,
                resource_version: self.metadata.resource_version,
                creation_timestamp: self.metadata.creation_timestamp,
                deletion_timestamp: self.metadata.deletion_timestamp,
                labels: self.metadata.labels,
                owner_references: controller_reference(self.metadata.owner_references),
                ..ObjectMeta::default()
            },
            spec: self.spec.map(|spec| PodSpec {
                readiness_gates: spec.readiness_gates,
                node_name: spec.node_name,
                ..PodSpec::default()
            }),
            status: self.status.map(|status| PodStatus {
                phase: status.phase,
                conditions: status.conditions,
                container_statuses: statuses(status.container_statuses),
                init_container_statuses: statuses(status.init_container_statuses),
                ..PodStatus::default()
            }),
        }
    }
}

/// A pod's readiness as the operator's pod watch showed it (the request wing reports every
/// pod event; a rollout waiting for its restarted pods to be Ready again reads them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodReadiness {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The pod's `Ready` condition is True.
    pub ready: bool,
}

impl PodReadiness {
    /// The readiness `pod` shows.
    pub fn of(pod: &Pod) -> Self {
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            ready: crr_crds::rules::pod_ready(pod),
        }
    }
}

/// How many readiness reports may wait for their reader; beyond that they are dropped, and the
/// reader's own poll catches up.
pub const READINESS_BUFFER: usize = 1024;

/// Where the pod watch reports readiness: never waits (a report that does not fit, or that
/// nobody reads, is dropped).
#[derive(Clone, Debug)]
pub struct ReadinessReports(futures::channel::mpsc::Sender<PodReadiness>);

impl ReadinessReports {
    /// The reports' sender and the stream of them.
    pub fn channel() -> (Self, futures::channel::mpsc::Receiver<PodReadiness>) {
        let (sender, receiver) = futures::channel::mpsc::channel(READINESS_BUFFER);
        (Self(sender), receiver)
    }

    /// Reports `pod`'s readiness, or drops it when the reader is behind or gone.
    pub fn report(&self, pod: &Pod) {
        let _ = self.0.clone().try_send(PodReadiness::of(pod));
    }
}

#[cfg(test)]
mod tests;
