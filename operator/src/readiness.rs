//! The `KruisePodReady` readiness gate as a shared lock: which holders keep a pod not-ready.
//!
//! Several writers (CRRs, and other OpenKruise-style components) share one pod condition. Its
//! `message` is a JSON list of `{"userAgent","key"}` holders, sorted by userAgent then key; the
//! condition is `False` while any holder remains and `True` once the list is empty. This module
//! decides the new conditions for a pod from the pod as read; it does not write anything (the
//! caller patches pod status with a resourceVersion precondition and retries on conflict, so two
//! CRRs sharing a pod cannot lose each other's entries).
//!
//! Differences from upstream: the condition is created with status `False`, never an empty status;
//! a holder list that is not valid JSON is never overwritten on acquire (another component owns
//! it), and on release it is treated as "our entry is not there" so a deleted CRR is never stuck.

use crr_crds::{keys, readiness_gate};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// The pod's own `Ready` condition type (owned by the kubelet).
const POD_CONDITION_READY: &str = "Ready";
/// Reason the kubelet gives when a readiness gate keeps the pod not Ready.
const REASON_READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// One entry of the `KruisePodReady` holder list.
///
/// Field order matters twice: it is the serialized key order (`userAgent` first, as upstream
/// writes it) and the derived ordering (by userAgent, then key).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// The kind of component holding the pod not-ready.
    pub user_agent: String,
    /// Which object of that component holds it.
    pub key: String,
}

impl Holder {
    /// The entry of the CRR `<namespace>/<name>`.
    pub fn for_crr(namespace: &str, name: &str) -> Self {
        Self {
            user_agent: keys::READINESS_USER_AGENT.to_owned(),
            key: format!("{namespace}/{name}"),
        }
    }
}

/// The `KruisePodReady` message cannot be read as a holder list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {condition} condition's message is not a JSON list of holders: {reason}")]
pub struct UnreadableHolders {
    /// The condition type.
    pub condition: &'static str,
    /// Why decoding failed.
    pub reason: String,
}

/// Reads a holder list; an absent or empty message is the empty list.
pub fn parse_holders(message: Option<&str>) -> Result<Vec<Holder>, UnreadableHolders> {
    let message = message.map(str::trim).unwrap_or_default();
    if message.is_empty() || message == "null" {
        return Ok(Vec::new());
    }
    serde_json::from_str(message).map_err(|error| UnreadableHolders {
        condition: keys::POD_CONDITION_KRUISE_POD_READY,
        reason: error.to_string(),
    })
}

/// Writes a holder list in the canonical form: sorted, without duplicates, `[]` when empty.
pub fn format_holders(holders: &[Holder]) -> String {
    let mut sorted = holders.to_vec();
    sorted.sort();
    sorted.dedup();
    // Serializing a list of plain string structs cannot fail.
    serde_json::to_string(&sorted).unwrap_or_else(|_| "[]".to_owned())
}

/// The one write of pod conditions the operator makes (the readiness holders, the gate's
/// initial condition): a strategic-merge patch of `status.conditions`, which merges by condition
/// type and leaves the other conditions alone, preconditioned on the resourceVersion of the pod
/// the conditions were decided on, so a holder added meanwhile makes it fail with a conflict
/// instead of being lost.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct PodConditionsPatch {
    metadata: PatchMetadata,
    status: PatchStatus,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct PatchMetadata {
    resource_version: Option<String>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
struct PatchStatus {
    conditions: Vec<PodCondition>,
}

impl PodConditionsPatch {
    /// Sets `conditions` on `pod` as it was read.
    pub fn new(pod: &Pod, conditions: Vec<PodCondition>) -> Self {
        Self {
            metadata: PatchMetadata {
                resource_version: pod.metadata.resource_version.clone(),
            },
            status: PatchStatus { conditions },
        }
    }
}

/// Whether the pod declares the `KruisePodReady` readiness gate, without which the condition
/// does not affect the pod's readiness ([`readiness_gate::declares_kruise_pod_ready`]).
pub fn has_readiness_gate(pod: &Pod) -> bool {
    readiness_gate::declares_kruise_pod_ready(pod.spec.as_ref())
}

fn pod_condition<'a>(pod: &'a Pod, condition_type: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|condition| condition.type_ == condition_type)
}

/// The holders currently recorded on the pod.
pub fn holders(pod: &Pod) -> Result<Vec<Holder>, UnreadableHolders> {
    parse_holders(
        pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY)
            .and_then(|condition| condition.message.as_deref()),
    )
}

/// The `KruisePodReady` condition a gated pod starts with: True, no holders. `None` when the pod
/// has no gate, already has the condition (whatever its status: a holder may own it), or is not
/// bound to a node yet. Without it the kubelet would never report the pod Ready; before the pod
/// is bound no kubelet reads it, and a pod that waits to be scheduled (a queue's, or one no node
/// fits) would cost a write of the whole pod, and a watch event of twice its size on every
/// watcher of pods, for nothing. The write comes when the binding's watch event does, long
/// before the kubelet has started the pod's containers.
pub fn initial(pod: &Pod, now: Timestamp) -> Option<PodCondition> {
    if crr_crds::rules::bound_node(pod).is_none()
        || !has_readiness_gate(pod)
        || pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY).is_some()
    {
        return None;
    }
    Some(PodCondition {
        type_: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
        status: "True".to_owned(),
        message: Some(format_holders(&[])),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    })
}

/// The pod conditions to write so that `holder` keeps the pod not-ready, or `None` when the pod
/// already says so. Besides `KruisePodReady=False`, the pod's `Ready` condition is turned False
/// the way the kubelet would, so endpoints drop the pod now rather than at the next kubelet sync.
pub fn acquire(
    pod: &Pod,
    holder: &Holder,
    now: Timestamp,
) -> Result<Option<Vec<PodCondition>>, UnreadableHolders> {
    let existing = pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY);
    let mut holders = parse_holders(existing.and_then(|condition| condition.message.as_deref()))?;
    let already_false = existing.is_some_and(|condition| condition.status == "False");
    if already_false && holders.contains(holder) {
        return Ok(None);
    }
    holders.push(holder.clone());
    let last_transition_time = match existing {
        Some(condition) if already_false => condition.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    let mut changes = vec![PodCondition {
        type_: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
        status: "False".to_owned(),
        message: Some(format_holders(&holders)),
        last_transition_time,
        ..existing.cloned().unwrap_or_default()
    }];
    if let Some(ready) = pod_condition(pod, POD_CONDITION_READY)
        && ready.status == "True"
    {
        changes.push(PodCondition {
            type_: POD_CONDITION_READY.to_owned(),
            status: "False".to_owned(),
            reason: Some(REASON_READINESS_GATES_NOT_READY.to_owned()),
            message: Some(format!(
                "the status of pod readiness gate \"{}\" is not \"True\", but False",
                keys::POD_CONDITION_KRUISE_POD_READY
            )),
            last_transition_time: Some(Time(now)),
            ..ready.clone()
        });
    }
    Ok(Some(changes))
}

/// The `KruisePodReady` condition to write once `holder` lets go, or `None` when the holder is
/// not recorded. The condition turns True when no holder remains; the pod's `Ready` condition is
/// left to the kubelet, which recomputes it from the gates.
pub fn release(
    pod: &Pod,
    holder: &Holder,
    now: Timestamp,
) -> Result<Option<PodCondition>, UnreadableHolders> {
    let Some(existing) = pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY) else {
        return Ok(None);
    };
    let mut holders = parse_holders(existing.message.as_deref())?;
    if !holders.contains(holder) {
        return Ok(None);
    }
    holders.retain(|entry| entry != holder);
    let status = if holders.is_empty() { "True" } else { "False" };
    let last_transition_time = if existing.status == status {
        existing.last_transition_time.clone()
    } else {
        Some(Time(now))
    };
    Ok(Some(PodCondition {
        status: status.to_owned(),
        message: Some(format_holders(&holders)),
        last_transition_time,
        ..existing.clone()
    }))
}

#[cfg(test)]
mod tests;
