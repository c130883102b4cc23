//! The ContainerRecreateRequest admission rules, as pure functions of values: the request's
//! object(s) in the hub model, plus the pod and node the I/O layer looked up. One set of rules
//! serves both API versions (upstream keeps a copy per version).
//!
//! The rules that need no live API data (spec checks, pod state, which containers) are
//! `crr_crds::rules`, shared with `kubectl crr`; this module applies them in upstream's order,
//! adds the lookups' outcomes, defaults and injection, and the UPDATE rules.
//!
//! This module decides; it does not fetch, encode patches or speak HTTP (see `review`).

use std::collections::BTreeMap;

use crr_crds::keys::{
    ANNOTATION_STATUS_CONDITIONS, ANNOTATION_SYNC_CONTAINER_STATUSES, ANNOTATION_UNREADY_ACQUIRED,
    CONDITION_PRE_RECREATE_GRACE, LABEL_ACTIVE, LABEL_NODE_NAME, LABEL_POD_UID,
};
use crr_crds::rules::{self, Caveat, ContainerNames, Violation};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerContext,
    ContainerRecreateRequestStatus, ProbeHandler,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Node label that marks virtual-kubelet nodes (no node daemon runs there), copied to the CRR.
pub const VIRTUAL_KUBELET_LABEL_KEY: &str = "type";
/// Value of [`VIRTUAL_KUBELET_LABEL_KEY`] on virtual-kubelet nodes.
pub const VIRTUAL_KUBELET_LABEL_VALUE: &str = "virtual-kubelet";

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

/// Every broken rule is invalid input, named by the rule's own reason.
impl From<Violation> for Rejection {
    fn from(violation: Violation) -> Self {
        Self::bad_request(violation.reason(), violation.to_string())
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

/// A CREATE that admission allows: the object to store, and what the user should hear about it
/// (answered as admission warnings).
#[derive(Clone, Debug)]
pub struct Admitted {
    /// The request with defaults applied and the pod's fields injected.
    pub crr: ContainerRecreateRequest,
    /// Accepted, but worth a warning: values set to what upstream behaves as, containers the
    /// kubelet restarts only on failure.
    pub caveats: Vec<Caveat>,
}

/// CREATE: validates the request, applies defaults and injects what the system derives from
/// the pod. Returns the object to store, with the caveats to warn about.
pub fn admit_create(
    mut crr: ContainerRecreateRequest,
    pod: Lookup<&Pod>,
    node: Lookup<&ObjectMeta>,
) -> Result<Admitted, Rejection> {
    let pod_name = crr.spec.pod_name.clone();
    rules::check_spec(&crr.spec)?;
    let mut caveats = rules::normalize_spec(&mut crr.spec);
    labels(&mut crr.metadata.labels).insert(LABEL_ACTIVE.to_owned(), "true".to_owned());
    let strategy = crr.spec.strategy.get_or_insert_with(Default::default);
    // check_spec accepted the value, so this only spells out the default.
    strategy.failure_policy = Some(strategy.failure_policy().as_str().to_owned());

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
    let node_name = rules::check_pod(pod)?.to_owned();
    let pod_spec = pod.spec.as_ref();
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
        // The pod's own value, within what the schema takes: a pod has no upper limit, and the
        // API server would refuse a request whose user never set a grace period (fuzz finding).
        strategy.termination_grace_period_seconds = pod_spec
            .and_then(|spec| spec.termination_grace_period_seconds)
            .map(|seconds| {
                seconds.clamp(0, crr_crds::limits::MAX_TERMINATION_GRACE_PERIOD_SECONDS)
            });
    }

    let mut names = ContainerNames::default();
    for container in &mut crr.spec.containers {
        names.add(&container.name)?;
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
        let (derived, caveat) = match derive_container_fields(pod, &container.name) {
            Ok(derived) => derived,
            Err(_) if user_supplied => return Err(read_only()),
            Err(violation) => return Err(violation.into()),
        };
        if user_supplied && supplied != derived {
            return Err(read_only());
        }
        (
            container.pre_stop,
            container.ports,
            container.status_context,
        ) = derived;
        caveats.extend(caveat);
    }
    Ok(Admitted { crr, caveats })
}

/// What admission fills into one named container: its preStop handler, its ports (when the
/// handler is httpGet) and its status context.
type DerivedFields = (
    Option<ProbeHandler>,
    Option<Vec<k8s_openapi::api::core::v1::ContainerPort>>,
    Option<ContainerRecreateRequestContainerContext>,
);

fn derive_container_fields(
    pod: &Pod,
    name: &str,
) -> Result<(DerivedFields, Option<Caveat>), Violation> {
    let target = rules::recreatable_container(pod, name)?;
    let status_context = target.status_context()?;
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
    Ok(((pre_stop, ports, Some(status_context)), target.caveat))
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
    if legacy_request && let Some(key) = changed_system_annotation(old, new) {
        return Err(Rejection::forbidden(
            "ImmutableAnnotation",
            format!("not allowed to update immutable annotation {key}: it is written by crr"),
        ));
    }
    Ok(())
}

/// The v1alpha1 annotations that carry status written by crr (the operator and the node
/// daemon): on a v1alpha1 object they stand for the v1beta1 status fields.
pub const SYSTEM_ANNOTATIONS: [&str; 3] = [
    ANNOTATION_UNREADY_ACQUIRED,
    ANNOTATION_STATUS_CONDITIONS,
    ANNOTATION_SYNC_CONTAINER_STATUSES,
];

/// Which system annotation a v1alpha1 UPDATE of the main resource would change, if any. In the
/// hub model a parsed annotation has become a status field (the PreRecreateGrace condition,
/// other conditions, the container status snapshot); one that could not be parsed is still an
/// annotation. Status is written through the status subresource only: through the main resource
/// these annotations would let a user backdate PreRecreateGrace and skip the drain.
fn changed_system_annotation(
    old: &ContainerRecreateRequest,
    new: &ContainerRecreateRequest,
) -> Option<&'static str> {
    let grace =
        |crr: &ContainerRecreateRequest| crr.condition(CONDITION_PRE_RECREATE_GRACE).cloned();
    let other_conditions = |crr: &ContainerRecreateRequest| {
        crr.status
            .as_ref()
            .map(|status| {
                status
                    .conditions
                    .iter()
                    .filter(|condition| condition.type_ != CONDITION_PRE_RECREATE_GRACE)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let snapshot = |crr: &ContainerRecreateRequest| {
        crr.status
            .as_ref()
            .map(|status| status.container_status_snapshot.clone())
            .unwrap_or_default()
    };
    let raw = |crr: &ContainerRecreateRequest, key: &str| {
        crr.metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(key).cloned())
    };
    if grace(old) != grace(new)
        || raw(old, ANNOTATION_UNREADY_ACQUIRED) != raw(new, ANNOTATION_UNREADY_ACQUIRED)
    {
        return Some(ANNOTATION_UNREADY_ACQUIRED);
    }
    if other_conditions(old) != other_conditions(new)
        || raw(old, ANNOTATION_STATUS_CONDITIONS) != raw(new, ANNOTATION_STATUS_CONDITIONS)
    {
        return Some(ANNOTATION_STATUS_CONDITIONS);
    }
    if snapshot(old) != snapshot(new)
        || raw(old, ANNOTATION_SYNC_CONTAINER_STATUSES)
            != raw(new, ANNOTATION_SYNC_CONTAINER_STATUSES)
    {
        return Some(ANNOTATION_SYNC_CONTAINER_STATUSES);
    }
    None
}

/// CREATE: a new request carries no status. Removes what a client sent of it, in either form
/// (v1beta1 status, or the v1alpha1 annotations that stand for it: a `kubectl get -o yaml`
/// re-applied, say), and returns the warning that says so. Leaving them would let a new request
/// start with PreRecreateGrace already acquired.
pub fn strip_status(crr: &mut ContainerRecreateRequest) -> Option<String> {
    let mut removed: Vec<&str> = Vec::new();
    if let Some(annotations) = crr.metadata.annotations.as_mut() {
        for key in SYSTEM_ANNOTATIONS {
            if annotations.remove(key).is_some() {
                removed.push(key);
            }
        }
    }
    // A status that carries nothing goes without a word: OpenKruise's Go type always sends
    // `status: {phase: ""}`, so every create from its clients would be warned about.
    if let Some(status) = crr.status.take().filter(|status| !carries_nothing(status)) {
        // Parsed legacy annotations arrive here as status fields.
        if status
            .conditions
            .iter()
            .any(|condition| condition.type_ == CONDITION_PRE_RECREATE_GRACE)
        {
            removed.push(ANNOTATION_UNREADY_ACQUIRED);
        }
        if status
            .conditions
            .iter()
            .any(|condition| condition.type_ != CONDITION_PRE_RECREATE_GRACE)
        {
            removed.push(ANNOTATION_STATUS_CONDITIONS);
        }
        if !status.container_status_snapshot.is_empty() {
            removed.push(ANNOTATION_SYNC_CONTAINER_STATUSES);
        }
        if removed.is_empty() {
            removed.push("status");
        }
    }
    removed.sort_unstable();
    removed.dedup();
    (!removed.is_empty()).then(|| {
        format!(
            "{} of a new ContainerRecreateRequest are written by crr and were removed",
            removed.join(", ")
        )
    })
}

/// The namespace a review is answered in: the review's own `request.namespace`, which the API
/// server always sets for a namespaced resource, and which the object must not contradict. A
/// hand-made review naming one namespace and carrying an object of another is refused before
/// any lookup, so an answer never carries anything from a pod outside the request's namespace.
pub fn review_namespace(
    request_namespace: Option<&str>,
    object: &ObjectMeta,
) -> Result<String, Rejection> {
    let Some(namespace) = request_namespace.filter(|namespace| !namespace.is_empty()) else {
        return Err(Rejection::bad_request(
            "NamespaceMismatch",
            "the admission request names no namespace: ContainerRecreateRequests are namespaced",
        ));
    };
    match object.namespace.as_deref() {
        Some(other) if !other.is_empty() && other != namespace => Err(Rejection::bad_request(
            "NamespaceMismatch",
            format!(
                "the object's namespace {other} is not the admission request's namespace {namespace}"
            ),
        )),
        _ => Ok(namespace.to_owned()),
    }
}

/// Whether a status sent by a client says nothing: no phase (or an empty one), no time, an
/// empty message at most, and no states, snapshot or conditions.
fn carries_nothing(status: &ContainerRecreateRequestStatus) -> bool {
    status.phase.is_none()
        && status.completion_time.is_none()
        && status.message.as_deref().is_none_or(str::is_empty)
        && status.container_recreate_states.is_empty()
        && status.container_status_snapshot.is_empty()
        && status.conditions.is_empty()
}

/// Validating a CREATE, on the object as it will be stored (after every mutating webhook), with
/// no lookup: the creation rules that need no live data again (spec limits, names given twice),
/// no status, and the marks of crr's mutating hook present and well formed: a `statusContext`
/// with a container ID on every container, the `pod-uid` label, a non-empty `node-name` label.
///
/// The pod is not read again (one pod read per request, the mutating hook's: docs/decisions.md). What
/// the mutating hook derived from the pod (pod active and scheduled, its node, which containers
/// can be recreated, their container IDs) was decided a moment earlier on a consistent read; a
/// second read would only see the same pod, or a pod that changed since, which the operator and
/// the node daemon handle for every request anyway (a pod gone or replaced completes it).
///
/// Why marks that a client could write itself are enough:
/// - Our mutating hook cannot be skipped for a CREATE: the chart registers it with the same
///   rules as this hook (CREATE of both versions, no namespace or object selector), a
///   `matchConditions` that every CREATE matches, and `failurePolicy: Fail`; the API server runs
///   every mutating webhook before any validating one; and `crr-webhook-ca-bundle-only` (a
///   ValidatingAdmissionPolicy) stops the webhook's own identity from changing either
///   configuration. Whatever a client sends in these fields, the mutating hook overwrote the
///   labels and refused a `statusContext` other than the pod's.
/// - Were it skipped anyway (an administrator removing only the mutating configuration), forged
///   marks still cannot reach another pod: the node daemon lists containers by the `pod-uid`
///   label, refuses any whose runtime (CRI) labels are not the request's own namespace, `podName`,
///   `pod-uid` and container name (`node-daemon/src/recreate.rs`, `owner_mismatch`), and before a
///   kill re-reads the live pod and stops unless its UID is the label's. It trusts the live pod,
///   never the request: the preStop hook and ports it runs are the live pod's, and a forged
///   `statusContext` can at most make it count a container as replaced already. A `node-name`
///   label naming another node sends the request to a daemon that does not find the pod's
///   containers. The operator completes a request whose `pod-uid` is not its pod's. What such a
///   request would still get past, and only in its own pod, are the refusals that need the pod
///   (a container the kubelet would not start again, say): the daemon does not check those
///   again before the kill, only reports the container not restarted after it.
pub fn validate_create(crr: &ContainerRecreateRequest) -> Result<(), Rejection> {
    let mut bare = crr.clone();
    if strip_status(&mut bare).is_some() {
        return Err(Rejection::forbidden(
            "StatusOnCreate",
            "a new ContainerRecreateRequest may not carry status: it is written by crr",
        ));
    }
    if let Some(container) = crr.spec.containers.iter().find(|container| {
        container
            .status_context
            .as_ref()
            .is_none_or(|context| context.container_id.is_empty())
    }) {
        return Err(Rejection::bad_request(
            "NotMutated",
            format!(
                "container {} has no statusContext: the request did not pass crr's mutating webhook",
                container.name
            ),
        ));
    }
    rules::check_spec(&crr.spec)?;
    let mut names = ContainerNames::default();
    for container in &crr.spec.containers {
        names.add(&container.name)?;
    }
    // The mutating hook writes both labels on every request it admits; a node name is never
    // empty (an unscheduled pod is refused). A pod's UID is never empty either, in a real API
    // server, but the label is written as the pod has it, so only its presence is a mark.
    let label = |key: &str| crr.metadata.labels.as_ref().and_then(|l| l.get(key));
    for (key, must_have_a_value) in [(LABEL_POD_UID, false), (LABEL_NODE_NAME, true)] {
        if label(key).is_none_or(|value| must_have_a_value && value.is_empty()) {
            return Err(Rejection::forbidden(
                "ImmutableLabel",
                format!(
                    "label {key} must name the request's pod, as crr's mutating webhook sets it: {}",
                    label(key).map_or("<none>", String::as_str)
                ),
            ));
        }
    }
    Ok(())
}

fn labels(labels: &mut Option<BTreeMap<String, String>>) -> &mut BTreeMap<String, String> {
    labels.get_or_insert_with(BTreeMap::new)
}
