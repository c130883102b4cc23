//! The ContainerRecreateRequest admission rules, as pure functions of values: the request's
//! object(s) in the hub model, plus the pod and node the I/O layer looked up. One set of rules
//! serves both API versions (upstream keeps a copy per version).
//!
//! This module decides; it does not fetch, encode patches or speak HTTP (see `review`).

use std::collections::BTreeMap;

use crr_crds::keys::{CONDITION_PRE_RECREATE_GRACE, LABEL_ACTIVE, LABEL_NODE_NAME, LABEL_POD_UID};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerContext, FailurePolicy, ProbeHandler,
};
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Smallest accepted `activeDeadlineSeconds`.
pub const MIN_ACTIVE_DEADLINE_SECONDS: i64 = 3;
/// Node label that marks virtual-kubelet nodes (no node daemon runs there), copied to the CRR.
pub const VIRTUAL_KUBELET_LABEL_KEY: &str = "type";
/// Value of [`VIRTUAL_KUBELET_LABEL_KEY`] on virtual-kubelet nodes.
pub const VIRTUAL_KUBELET_LABEL_VALUE: &str = "virtual-kubelet";
/// Pod condition that lets an inactive pod with terminated sidecars still be recreated (upstream).
const SIDECAR_TERMINATED_CONDITION: &str = "SidecarTerminated";

/// Why a request is refused, with the HTTP-style code the API server passes on to the client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    /// 400 for invalid input, 403 for forbidden changes, 500 for our own failures.
    pub code: u16,
    /// What a kubectl user reads.
    pub message: String,
    /// Short machine-readable reason, used as a metrics label.
    pub reason: &'static str,
}

impl Rejection {
    fn bad_request(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code: 400,
            message: message.into(),
            reason,
        }
    }

    fn forbidden(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code: 403,
            message: message.into(),
            reason,
        }
    }

    fn internal(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code: 500,
            message: message.into(),
            reason,
        }
    }
}

/// The outcome of looking an object up.
#[derive(Clone, Debug)]
pub enum Lookup<T> {
    /// The object exists.
    Found(T),
    /// The API server says it does not exist.
    NotFound,
    /// The lookup itself failed (the message says how).
    Failed(String),
}

/// Refuses everything while the node daemon is disabled (upstream's `KruiseDaemon` gate).
pub fn check_feature_gate(node_daemon_enabled: bool) -> Result<(), Rejection> {
    if node_daemon_enabled {
        Ok(())
    } else {
        Err(Rejection::forbidden(
            "FeatureGateDisabled",
            "feature-gate KruiseDaemon is not enabled: the crr node daemon is disabled in this cluster, so ContainerRecreateRequests cannot be served",
        ))
    }
}

/// CREATE: validates the request, applies defaults and injects what the system derives from
/// the pod. Returns the object to store.
pub fn admit_create(
    mut crr: ContainerRecreateRequest,
    pod: Lookup<&Pod>,
    node: Lookup<&ObjectMeta>,
) -> Result<ContainerRecreateRequest, Rejection> {
    let pod_name = crr.spec.pod_name.clone();
    if pod_name.is_empty() {
        return Err(Rejection::bad_request(
            "PodNameEmpty",
            "podName can not be empty",
        ));
    }
    let strategy = crr.spec.strategy.get_or_insert_with(Default::default);
    labels(&mut crr.metadata.labels).insert(LABEL_ACTIVE.to_owned(), "true".to_owned());
    if crr.spec.containers.is_empty() {
        return Err(Rejection::bad_request(
            "ContainersEmpty",
            "containers list can not be null",
        ));
    }
    if crr
        .spec
        .active_deadline_seconds
        .is_some_and(|seconds| seconds < MIN_ACTIVE_DEADLINE_SECONDS)
    {
        return Err(Rejection::bad_request(
            "ActiveDeadlineTooShort",
            format!("activeDeadlineSeconds can not be less than {MIN_ACTIVE_DEADLINE_SECONDS}s"),
        ));
    }
    if strategy
        .termination_grace_period_seconds
        .is_some_and(|seconds| seconds < 0)
    {
        return Err(Rejection::bad_request(
            "NegativeGracePeriod",
            "terminationGracePeriodSeconds must be non-negative integer",
        ));
    }
    if strategy
        .unready_grace_period_seconds
        .is_some_and(|seconds| seconds < 0)
    {
        return Err(Rejection::bad_request(
            "NegativeUnreadyGracePeriod",
            "unreadyGracePeriodSeconds must be non-negative integer",
        ));
    }
    if strategy.min_started_seconds < 0 {
        return Err(Rejection::bad_request(
            "NegativeMinStarted",
            "minStartedSeconds must be non-negative integer",
        ));
    }
    if crr
        .spec
        .ttl_seconds_after_finished
        .is_some_and(|seconds| seconds < 0)
    {
        return Err(Rejection::bad_request(
            "NegativeTtl",
            "ttlSecondsAfterFinished must be non-negative integer",
        ));
    }
    let failure_policy =
        FailurePolicy::parse(strategy.failure_policy.as_deref().unwrap_or_default())
            .map_err(|error| Rejection::bad_request("UnknownFailurePolicy", error.to_string()))?;
    strategy.failure_policy = Some(failure_policy.as_str().to_owned());

    let pod = match pod {
        Lookup::Found(pod) => pod,
        Lookup::NotFound => {
            return Err(Rejection::bad_request(
                "PodNotFound",
                format!("no found Pod named {pod_name}"),
            ));
        }
        Lookup::Failed(error) => {
            return Err(Rejection::internal(
                "PodLookupFailed",
                format!("failed to get Pod {pod_name}: {error}"),
            ));
        }
    };
    if !is_pod_active(pod) && !has_condition(pod, SIDECAR_TERMINATED_CONDITION) {
        return Err(Rejection::bad_request(
            "PodInactive",
            "not allowed to recreate containers in an inactive Pod",
        ));
    }
    let pod_spec = pod.spec.as_ref();
    let node_name = pod_spec
        .and_then(|spec| spec.node_name.clone())
        .unwrap_or_default();
    if node_name.is_empty() {
        return Err(Rejection::bad_request(
            "PodPending",
            "not allowed to recreate containers in a pending Pod",
        ));
    }
    let node = match node {
        Lookup::Found(node) => node,
        Lookup::NotFound => {
            return Err(Rejection::bad_request(
                "NodeNotFound",
                format!("failed to get Node {node_name}: not found"),
            ));
        }
        Lookup::Failed(error) => {
            return Err(Rejection::internal(
                "NodeLookupFailed",
                format!("failed to get Node {node_name}: {error}"),
            ));
        }
    };

    let crr_labels = labels(&mut crr.metadata.labels);
    crr_labels.insert(LABEL_NODE_NAME.to_owned(), node_name);
    crr_labels.insert(
        LABEL_POD_UID.to_owned(),
        pod.metadata.uid.clone().unwrap_or_default(),
    );
    let node_labels = node.labels.as_ref();
    if node_labels
        .and_then(|l| l.get(VIRTUAL_KUBELET_LABEL_KEY))
        .map(String::as_str)
        == Some(VIRTUAL_KUBELET_LABEL_VALUE)
    {
        crr_labels.insert(
            VIRTUAL_KUBELET_LABEL_KEY.to_owned(),
            VIRTUAL_KUBELET_LABEL_VALUE.to_owned(),
        );
    }
    let strategy = crr.spec.strategy.get_or_insert_with(Default::default);
    if strategy.termination_grace_period_seconds.is_none() {
        strategy.termination_grace_period_seconds =
            pod_spec.and_then(|spec| spec.termination_grace_period_seconds);
    }

    let mut seen = std::collections::BTreeSet::new();
    for container in &mut crr.spec.containers {
        if !seen.insert(container.name.clone()) {
            return Err(Rejection::bad_request(
                "DuplicateContainer",
                format!("can not recreate {} multi times", container.name),
            ));
        }
        // Read-only fields: a request may carry them only when they already hold exactly what
        // this webhook derives (its own output admitted a second time: reinvocation, or two
        // webhook configurations during an upgrade). Anything else is a user setting them.
        let supplied = (
            container.pre_stop.take(),
            container.ports.take(),
            container.status_context.take(),
        );
        let user_supplied = supplied != (None, None, None);
        let read_only = || {
            Rejection::bad_request(
                "ReadOnlyField",
                "preStop, ports, statusContext in container are ready-only fields",
            )
        };
        let derived = match derive_container_fields(pod, &container.name) {
            Ok(derived) => derived,
            Err(_) if user_supplied => return Err(read_only()),
            Err(rejection) => return Err(rejection),
        };
        if user_supplied && supplied != derived {
            return Err(read_only());
        }
        (
            container.pre_stop,
            container.ports,
            container.status_context,
        ) = derived;
    }
    Ok(crr)
}

/// What admission fills into one named container: its preStop handler, its ports (when the
/// handler is httpGet) and its status context.
type DerivedFields = (
    Option<ProbeHandler>,
    Option<Vec<k8s_openapi::api::core::v1::ContainerPort>>,
    Option<ContainerRecreateRequestContainerContext>,
);

fn derive_container_fields(pod: &Pod, name: &str) -> Result<DerivedFields, Rejection> {
    let target = find_recreatable_container(pod, name)?;
    let status = target.status.ok_or_else(|| {
        Rejection::bad_request(
            "ContainerStatusMissing",
            format!("not found {name} containerStatus in Pod Status"),
        )
    })?;
    let container_id = status.container_id.clone().unwrap_or_default();
    if container_id.is_empty() {
        return Err(Rejection::bad_request(
            "ContainerNotStarted",
            format!(
                "no containerID in {name} containerStatus, maybe the container has not been initialized"
            ),
        ));
    }
    let pre_stop = target
        .spec
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|handler| {
            let pre_stop = ProbeHandler {
                exec: handler.exec.clone(),
                http_get: handler.http_get.clone(),
                tcp_socket: handler.tcp_socket.clone(),
            };
            (pre_stop != ProbeHandler::default()).then_some(pre_stop)
        });
    let ports = if pre_stop
        .as_ref()
        .is_some_and(|handler| handler.http_get.is_some())
    {
        target.spec.ports.clone()
    } else {
        None
    };
    Ok((
        pre_stop,
        ports,
        Some(ContainerRecreateRequestContainerContext {
            container_id,
            restart_count: status.restart_count,
        }),
    ))
}

/// UPDATE: the spec and the identity labels are frozen; so is the time the pod was made
/// not-ready once recorded (checked for v1alpha1 requests, where it is an annotation users can
/// edit; v1beta1 keeps it in status, which this webhook does not see changed).
pub fn admit_update(
    old: &ContainerRecreateRequest,
    new: &ContainerRecreateRequest,
    legacy_request: bool,
) -> Result<(), Rejection> {
    if old.spec != new.spec {
        return Err(Rejection::forbidden(
            "SpecImmutable",
            "spec of ContainerRecreateRequest is immutable",
        ));
    }
    for key in [LABEL_POD_UID, LABEL_NODE_NAME] {
        let before = old.metadata.labels.as_ref().and_then(|l| l.get(key));
        let after = new.metadata.labels.as_ref().and_then(|l| l.get(key));
        if before != after {
            return Err(Rejection::forbidden(
                "ImmutableLabel",
                format!(
                    "not allowed to update immutable label {key}: {} -> {}",
                    before.map_or("<none>", String::as_str),
                    after.map_or("<none>", String::as_str)
                ),
            ));
        }
    }
    if legacy_request {
        let acquired = |crr: &ContainerRecreateRequest| {
            crr.condition(CONDITION_PRE_RECREATE_GRACE)
                .map(|c| c.last_transition_time.clone())
        };
        if let Some(before) = acquired(old)
            && acquired(new) != Some(before)
        {
            return Err(Rejection::forbidden(
                "ImmutableAnnotation",
                format!(
                    "not allowed to update immutable annotation {}",
                    crr_crds::keys::ANNOTATION_UNREADY_ACQUIRED
                ),
            ));
        }
    }
    Ok(())
}

/// A container of the pod that a CRR may name, with its current status.
struct RecreatableContainer<'a> {
    spec: &'a Container,
    status: Option<&'a ContainerStatus>,
}

/// Finds a regular container or a native sidecar (an init container with `restartPolicy:
/// Always`) by name, refusing containers the kubelet would not start again once stopped.
fn find_recreatable_container<'a>(
    pod: &'a Pod,
    name: &str,
) -> Result<RecreatableContainer<'a>, Rejection> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let by_name = |statuses: Option<&'a Vec<ContainerStatus>>| {
        statuses.into_iter().flatten().find(|s| s.name == name)
    };

    if let Some(container) = spec
        .into_iter()
        .flat_map(|s| &s.containers)
        .find(|c| c.name == name)
    {
        let pod_policy = spec
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always");
        let policy = container.restart_policy.as_deref().unwrap_or(pod_policy);
        if policy != "Always" {
            return Err(Rejection::bad_request(
                "ContainerNotRestartable",
                format!(
                    "container {name} would not be started again after it is stopped (restartPolicy {policy}); only containers the kubelet restarts can be recreated"
                ),
            ));
        }
        return Ok(RecreatableContainer {
            spec: container,
            status: by_name(status.and_then(|s| s.container_statuses.as_ref())),
        });
    }
    if let Some(container) = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .find(|c| c.name == name)
    {
        if container.restart_policy.as_deref() != Some("Always") {
            return Err(Rejection::bad_request(
                "InitContainer",
                format!(
                    "container {name} is an init container that runs once; only native sidecars (restartPolicy: Always) can be recreated"
                ),
            ));
        }
        return Ok(RecreatableContainer {
            spec: container,
            status: by_name(status.and_then(|s| s.init_container_statuses.as_ref())),
        });
    }
    Err(Rejection::bad_request(
        "ContainerNotFound",
        format!("container {name} not found in Pod"),
    ))
}

/// A pod is active while it has not finished and is not being deleted.
fn is_pod_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

fn has_condition(pod: &Pod, condition_type: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == condition_type))
}

fn labels(labels: &mut Option<BTreeMap<String, String>>) -> &mut BTreeMap<String, String> {
    labels.get_or_insert_with(BTreeMap::new)
}
