//! The status model every component shares: when a request is finished, what completing one
//! writes, how a condition is set, and the one shape of a status write ([`StatusPatch`], and
//! [`RolloutStatusPatch`] for a rollout's).
//!
//! The operator and the node daemon both write `status` as JSON merge patches of the status
//! subresource. [`StatusPatch`] is that body, typed: it names the fields a writer changes (absent
//! = untouched) and always carries `metadata.resourceVersion` of the request it was built from,
//! so the payload and its precondition come from the same object and cannot drift apart. A
//! request changed since it was read fails the write with a conflict, and the writer decides
//! again on the new version (docs/decisions.md, "Completed stays completed").
//!
//! [`snapshot`] says what `status.containerStatusSnapshot` holds for a pod: the operator writes it
//! while a request recreates, and the node daemon reads the same from its own pod watch.
//!
//! Pure values only; sending the patch (client, field manager, retries) is each binary's job,
//! and so is deciding *when* to write.

pub mod snapshot;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Resource, ResourceExt as _};
use serde::Serialize;

use crate::keys;
use crate::rollout::{ContainerRecreateRollout, ContainerRecreateRolloutStatus};
use crate::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerRecreateState,
    ContainerRecreateRequestStatus, ContainerRecreateRequestSyncContainerStatus, Phase,
};

/// How long, from its creation, a request may stay without a phase before the operator completes
/// it with `DaemonNotResponding`: the operator waits this long, and the node daemon writes the
/// phase before a kill that could end later.
pub const DAEMON_RESPONSE_TIMEOUT_SECONDS: i64 = 60;

/// Whether the request is finished: completing it sets both phase `Completed` and
/// `completionTime`, and either one marks it. Nothing acts on a finished request again except
/// to let go of its pod, drop its `active` label and expire it by TTL.
///
/// Being deleted is a separate question (a deleted request may still be unfinished).
pub fn is_finished(crr: &ContainerRecreateRequest) -> bool {
    crr.status.as_ref().is_some_and(|status| {
        status.completion_time.is_some() || status.phase == Some(Phase::Completed)
    })
}

/// Sets `condition` in `conditions` the way `meta.SetStatusCondition` does: replaces the
/// condition of the same type, but keeps its `lastTransitionTime` when the status does not
/// change, so a repeated write never moves a transition time forward; appends a new type.
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) {
    match conditions
        .iter_mut()
        .find(|existing| existing.type_ == condition.type_)
    {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
}

/// How a finished request ended, as its `Succeeded` condition says. The request-level phase is
/// `Completed` either way (upstream compatibility).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every container was recreated (`Succeeded=True`).
    Succeeded,
    /// Not every container was recreated (`Succeeded=False`).
    Failed,
}

impl Outcome {
    /// The `Succeeded` condition's status.
    pub fn condition_status(self) -> &'static str {
        match self {
            Self::Succeeded => "True",
            Self::Failed => "False",
        }
    }
}

/// What completing a request writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// How it ended.
    pub outcome: Outcome,
    /// Machine-readable reason of the `Succeeded` condition (`Recreated`, `PodGone`, …).
    pub reason: String,
    /// `status.message`, and the `Succeeded` condition's message unless `condition_message`
    /// says more.
    pub message: String,
    /// The `Succeeded` condition's message when it says more than `status.message` (which
    /// clients compare with upstream's fixed texts); `None`: the same.
    pub condition_message: Option<String>,
    /// The per-container states to write, or `None` to leave them as they are.
    pub container_recreate_states: Option<Vec<ContainerRecreateRequestContainerRecreateState>>,
    /// The completion time (and the condition's transition time).
    pub time: Timestamp,
}

/// Completes `status`: phase `Completed`, `completionTime`, `message`, the per-container states
/// when given, and the `Succeeded` condition (set with [`set_condition`]).
pub fn complete(
    status: &mut ContainerRecreateRequestStatus,
    completion: &Completion,
    observed_generation: Option<i64>,
) {
    status.phase = Some(Phase::Completed);
    status.completion_time = Some(Time(completion.time));
    status
        .conditions
        .retain(|condition| condition.type_ != keys::CONDITION_QUEUED);
    status.message = Some(completion.message.clone());
    if let Some(states) = &completion.container_recreate_states {
        status.container_recreate_states = states.clone();
    }
    set_condition(
        &mut status.conditions,
        Condition {
            type_: keys::CONDITION_SUCCEEDED.to_owned(),
            status: completion.outcome.condition_status().to_owned(),
            reason: completion.reason.clone(),
            message: completion
                .condition_message
                .clone()
                .unwrap_or_else(|| completion.message.clone()),
            last_transition_time: Time(completion.time),
            observed_generation,
        },
    );
}

/// An object without `metadata.resourceVersion` cannot be written: there is nothing to
/// precondition the write on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{kind} {namespace}/{name} has no resourceVersion to write against (it was not read from the API server)"
)]
pub struct NoResourceVersion {
    /// The object's kind.
    pub kind: &'static str,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
}

/// The resourceVersion of `object` to precondition a write on.
fn precondition<K: Resource<DynamicType = ()>>(
    object: &K,
) -> Result<Precondition, NoResourceVersion> {
    match object
        .resource_version()
        .filter(|version| !version.is_empty())
    {
        Some(resource_version) => Ok(Precondition { resource_version }),
        None => Err(NoResourceVersion {
            kind: K::kind(&()).into_owned().leak(),
            namespace: object.namespace().unwrap_or_default(),
            name: object.name_any(),
        }),
    }
}

/// A JSON merge patch of a request's status subresource, preconditioned on the resourceVersion
/// of the request it was built from.
///
/// Serializes as `{"metadata": {"resourceVersion": …}, "status": {…}}` with only the fields the
/// writer set: an absent field is left untouched by the API server, and lists (states, snapshot,
/// conditions) are replaced whole, as merge patches do.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusPatch {
    #[serde(skip)]
    namespace: String,
    #[serde(skip)]
    name: String,
    /// The conditions of the request the patch was built from: [`StatusPatch::condition`] sets
    /// one among them, since a merge patch replaces the whole list.
    #[serde(skip)]
    base_conditions: Vec<Condition>,
    /// Whether the request's message is the node daemon's "queued" one ([`queued_message`]),
    /// which a patch that moves the request past Pending clears.
    #[serde(skip)]
    queued: bool,
    metadata: Precondition,
    status: StatusFields,
}

/// How a request marked Pending behind another of its pod begins its `status.message`.
pub const QUEUED_PREFIX: &str = "queued: ";

/// The `status.message` of a request the node daemon marks Pending behind `ahead`, the pod's
/// request whose round runs: written with the phase, in that one write. A later patch that moves
/// the request on ([`StatusPatch::phase`]) clears it.
pub fn queued_message(ahead: &ContainerRecreateRequest) -> String {
    format!(
        "{QUEUED_PREFIX}waiting for request {} of the same pod to finish first",
        ahead.name_any()
    )
}

#[derive(Clone, Debug, PartialEq, Serialize)]
struct Precondition {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

/// The status fields a [`StatusPatch`] writes; `None` = not part of the patch.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusFields {
    /// `status.phase`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// `status.completionTime`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// `status.message`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `status.containerRecreateStates`, whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_recreate_states: Option<Vec<ContainerRecreateRequestContainerRecreateState>>,
    /// `status.containerStatusSnapshot`, whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_status_snapshot: Option<Vec<ContainerRecreateRequestSyncContainerStatus>>,
    /// `status.conditions`, whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

impl StatusPatch {
    /// An empty patch of `crr`'s status, preconditioned on `crr`'s resourceVersion.
    pub fn of(crr: &ContainerRecreateRequest) -> Result<Self, NoResourceVersion> {
        let metadata = precondition(crr)?;
        Ok(Self {
            namespace: crr.namespace().unwrap_or_default(),
            name: crr.name_any(),
            base_conditions: crr
                .status
                .as_ref()
                .map(|status| status.conditions.clone())
                .unwrap_or_default(),
            queued: crr.status.as_ref().is_some_and(|status| {
                status
                    .message
                    .as_deref()
                    .is_some_and(|message| message.starts_with(QUEUED_PREFIX))
                    || status
                        .conditions
                        .iter()
                        .any(|condition| condition.type_ == keys::CONDITION_QUEUED)
            }),
            metadata,
            status: StatusFields::default(),
        })
    }

    /// The patch that completes `crr` (see [`complete`]): phase, completionTime, message and
    /// the whole conditions list with `Succeeded`, and the per-container states when the
    /// completion names them.
    pub fn completion(
        crr: &ContainerRecreateRequest,
        completion: &Completion,
    ) -> Result<Self, NoResourceVersion> {
        let mut patch = Self::of(crr)?;
        let mut status = crr.status.clone().unwrap_or_default();
        complete(&mut status, completion, crr.metadata.generation);
        patch.status = StatusFields {
            phase: status.phase,
            completion_time: status.completion_time,
            message: status.message,
            container_recreate_states: completion
                .container_recreate_states
                .as_ref()
                .map(|_| status.container_recreate_states),
            container_status_snapshot: None,
            conditions: Some(status.conditions.clone()),
        };
        patch.base_conditions = status.conditions;
        Ok(patch)
    }

    /// Writes `status.phase`; a phase past Pending also clears a queued request's message
    /// (unless the patch writes one of its own) and removes its `Queued` condition.
    pub fn phase(mut self, phase: Phase) -> Self {
        self.status.phase = Some(phase);
        if self.queued && phase != Phase::Pending {
            if self.status.message.is_none() {
                self.status.message = Some(String::new());
            }
            self.base_conditions
                .retain(|condition| condition.type_ != keys::CONDITION_QUEUED);
            self.status.conditions = Some(self.base_conditions.clone());
            self.queued = false;
        }
        self
    }

    /// Marks the request Pending behind `ahead`, the pod's request whose round runs: phase
    /// Pending, [`queued_message`] as the message, and `Queued=True` (reason
    /// `WaitingForRequest`) saying the same, all in one write.
    pub fn queued_behind(
        self,
        ahead: &ContainerRecreateRequest,
        now: Timestamp,
        observed_generation: Option<i64>,
    ) -> Self {
        let message = queued_message(ahead);
        self.phase(Phase::Pending)
            .message(message.clone())
            .condition(Condition {
                type_: keys::CONDITION_QUEUED.to_owned(),
                status: "True".to_owned(),
                reason: keys::REASON_WAITING_FOR_REQUEST.to_owned(),
                message,
                last_transition_time: Time(now),
                observed_generation,
            })
    }

    /// Writes `status.message`.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.status.message = Some(message.into());
        self
    }

    /// Writes the whole `status.containerRecreateStates`.
    pub fn container_recreate_states(
        mut self,
        states: Vec<ContainerRecreateRequestContainerRecreateState>,
    ) -> Self {
        self.status.container_recreate_states = Some(states);
        self
    }

    /// Writes the whole `status.containerStatusSnapshot`.
    pub fn container_status_snapshot(
        mut self,
        snapshot: Vec<ContainerRecreateRequestSyncContainerStatus>,
    ) -> Self {
        self.status.container_status_snapshot = Some(snapshot);
        self
    }

    /// Sets `condition` (with [`set_condition`]) among the request's conditions and writes the
    /// whole list.
    pub fn condition(mut self, condition: Condition) -> Self {
        set_condition(&mut self.base_conditions, condition);
        self.status.conditions = Some(self.base_conditions.clone());
        self
    }

    /// Namespace of the request to write.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Name of the request to write.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The precondition: the resourceVersion of the request the patch was built from.
    pub fn resource_version(&self) -> &str {
        &self.metadata.resource_version
    }

    /// The status fields the patch writes.
    pub fn fields(&self) -> &StatusFields {
        &self.status
    }
}

/// A JSON merge patch of a ContainerRecreateRollout's status subresource: the whole status the
/// controller decided, preconditioned on the resourceVersion of the rollout it decided from.
///
/// Serializes as `{"metadata": {"resourceVersion": …}, "status": {…}}`. A rollout changed since
/// it was read (a status written meanwhile by another leader, or by this one on a stale copy)
/// fails the write with a conflict: the controller reads again and decides again, and the
/// Events and metrics that follow a write are never emitted twice for one change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RolloutStatusPatch {
    #[serde(skip)]
    namespace: String,
    #[serde(skip)]
    name: String,
    metadata: Precondition,
    status: ContainerRecreateRolloutStatus,
}

impl RolloutStatusPatch {
    /// The patch that writes `status` onto `rollout`, preconditioned on its resourceVersion.
    pub fn of(
        rollout: &ContainerRecreateRollout,
        status: ContainerRecreateRolloutStatus,
    ) -> Result<Self, NoResourceVersion> {
        Ok(Self {
            namespace: rollout.namespace().unwrap_or_default(),
            name: rollout.name_any(),
            metadata: precondition(rollout)?,
            status,
        })
    }

    /// Namespace of the rollout to write.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Name of the rollout to write.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The precondition: the resourceVersion of the rollout the patch was built from.
    pub fn resource_version(&self) -> &str {
        &self.metadata.resource_version
    }

    /// The status it writes.
    pub fn status(&self) -> &ContainerRecreateRolloutStatus {
        &self.status
    }
}

#[cfg(test)]
mod tests;
