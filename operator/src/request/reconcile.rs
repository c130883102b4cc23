//! What the request wing does with one ContainerRecreateRequest, as a pure function of the request,
//! its pod (as just read; `None` when it does not exist) and the current time.
//!
//! [`plan`] returns an ordered list of [`Action`]s and when to look again. It does not talk to the
//! API server: the caller executes the actions in order, stops at the first failure and retries
//! later. Every action is idempotent and every plan is computed from the world as read, so a
//! repeated or interrupted reconcile is harmless (level-triggered).
//!
//! The order follows docs/behaviour.md §3: finished or deleted requests let go of the pod first,
//! then lose the `active` label and expire by TTL (a request no rollout made through the settled
//! index, `settled`); live requests complete when their pod is gone
//! or a deadline passes; a recreating request gets its status snapshot and, before any container
//! is killed, takes the pod out of endpoints for `unreadyGracePeriodSeconds`.
//!
//! Status actions carry what was decided from the pod and the time, not the status body: the
//! executor builds each body with [`completion_patch`], [`pre_recreate_grace_patch`] or
//! [`snapshot_patch`] from the request as it is when the action runs (after the reconcile's
//! earlier writes, the object the API server returned), so a body and its resourceVersion
//! precondition always come from the same object.

use std::time::Duration;

use crr_crds::keys;
use crr_crds::status::{self, NoResourceVersion, Outcome, StatusPatch};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestSyncContainerStatus, Phase,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::{deadline, readiness};
use crr_crds::status::snapshot;

/// A rollout's request whose TTL has run out while the rollout still runs is looked at again
/// this long after (or after its TTL, when that is longer): the rollout reads its outcome.
pub const ROLLOUT_RUNNING_RECHECK: Duration = Duration::from_secs(300);

/// Whether the rollout a request was made by (read by its `crr.dev/rollout` label) keeps the
/// request past its TTL: it exists, is the request's owner, and has not finished. A running
/// rollout counts a pod whose request is gone as not started, and would restart it again.
pub fn rollout_keeps_request(
    crr: &ContainerRecreateRequest,
    rollout: Option<&crr_crds::rollout::ContainerRecreateRollout>,
) -> bool {
    let Some(rollout) = rollout else {
        return false;
    };
    let owned = rollout
        .metadata
        .uid
        .as_deref()
        .is_some_and(|uid| crr.owner_references().iter().any(|owner| owner.uid == uid));
    let finished = rollout
        .phase()
        .is_some_and(crr_crds::rollout::RolloutPhase::is_finished);
    owned && !finished
}

/// When to look again at a request kept past its TTL by its running rollout.
pub fn rollout_keeps_request_recheck(crr: &ContainerRecreateRequest) -> Duration {
    let ttl = crr
        .spec
        .ttl_seconds_after_finished
        .and_then(|seconds| u64::try_from(seconds).ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    ttl.max(ROLLOUT_RUNNING_RECHECK)
}

/// Status message when the pod cannot be taken out of endpoints before recreation.
pub const MESSAGE_NO_READINESS_GATE: &str = "the pod could not be taken out of endpoints before recreating: it has no KruisePodReady readiness gate";

/// One step towards the desired state, executed in plan order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Remove this request's entry from the pod's `KruisePodReady` holder list (the condition
    /// turns True when no holder remains). Harmless when the pod or the entry is gone.
    ReleasePodReadiness,
    /// Drop the `unready-acquired` finalizer.
    RemoveFinalizer,
    /// Drop the `active` label of a finished request.
    RemoveActiveLabel,
    /// Delete the request: its TTL after completion has run out.
    Delete,
    /// Finish the request (status phase Completed).
    Complete(Completion),
    /// Add the `unready-acquired` finalizer, before the pod is made not-ready, so a deleted
    /// request always gets to let go of the pod.
    AddFinalizer,
    /// Add this request's entry to the pod's `KruisePodReady` holder list (condition False).
    AcquirePodReadiness,
    /// Record that the unready grace period started: the `PreRecreateGrace` condition, and a
    /// status message when the pod could not be made not-ready ([`pre_recreate_grace_patch`]).
    MarkPreRecreateGrace {
        /// When the grace period started (the condition's transition time).
        time: Timestamp,
        /// Whether the pod lacks the readiness gate (a status message; the caller also warns
        /// with Events).
        missing_readiness_gate: bool,
    },
    /// Write `status.containerStatusSnapshot` ([`snapshot_patch`]). Always the first write of a
    /// plan, so the request it was computed from is the one it is written against.
    PatchSnapshot(Vec<ContainerRecreateRequestSyncContainerStatus>),
}

/// Why the operator finishes a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompletionReason {
    /// The pod is missing, terminating, or was replaced by another with the same name.
    PodGone,
    /// The daemon did not pick the request up within a minute.
    DaemonNotResponding,
    /// `activeDeadlineSeconds` passed.
    ActiveDeadlineExceeded,
}

impl CompletionReason {
    /// Every reason (metrics export each one from the start).
    pub const ALL: [Self; 3] = [
        Self::PodGone,
        Self::DaemonNotResponding,
        Self::ActiveDeadlineExceeded,
    ];

    /// The status message (upstream's wording).
    pub fn message(self) -> &'static str {
        match self {
            Self::PodGone => "pod has gone",
            Self::DaemonNotResponding => "daemon has not responded for a long time",
            Self::ActiveDeadlineExceeded => "recreating has exceeded the activeDeadlineSeconds",
        }
    }

    /// A machine-readable reason for conditions, Events and metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Self::PodGone => keys::REASON_POD_GONE,
            Self::DaemonNotResponding => "DaemonNotResponding",
            Self::ActiveDeadlineExceeded => "ActiveDeadlineExceeded",
        }
    }
}

/// Why and when the operator finishes a request; [`completion_patch`] turns it into the status
/// write against the request as it is then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Why.
    pub reason: CompletionReason,
    /// The completion time.
    pub time: Timestamp,
}

/// What to do now and when to look again.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    /// Actions, in order.
    pub actions: Vec<Action>,
    /// Reconcile again after this long even without an event; `None` waits for a change.
    pub requeue_after: Option<Duration>,
}

/// What [`plan`] reads of the request's pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodNeed {
    /// Nothing: the request is finished or being deleted and holds no readiness.
    Nothing,
    /// Only that the pod the request was admitted for is still there: the node daemon has not
    /// started on the request (no phase, or `Pending` behind another), and [`plan`] reads no
    /// more than the pod-gone check before the phase is `Recreating`.
    Existence,
    /// The pod as it is: conditions and container statuses (the snapshot, the readiness it
    /// holds or is to take).
    Whole,
}

/// What [`plan`] needs of the live pod for `crr`: a request that is finished or being deleted
/// needs it only to release the pod's readiness it still holds (its finalizer says so); one the
/// daemon has not started on needs only its existence. The reconcile reads the pod (memo or
/// GET) only for [`PodNeed::Whole`] (finished requests cost no pod reads, and a request's first
/// reconcile none either, [`admitted_pod`]).
pub fn pod_need(crr: &ContainerRecreateRequest) -> PodNeed {
    let holds_finalizer = crr
        .finalizers()
        .iter()
        .any(|finalizer| finalizer == keys::FINALIZER_UNREADY_ACQUIRED);
    let done = crr.metadata.deletion_timestamp.is_some() || status::is_finished(crr);
    if done {
        return if holds_finalizer {
            PodNeed::Whole
        } else {
            PodNeed::Nothing
        };
    }
    if holds_finalizer || crr.phase() == Some(Phase::Recreating) {
        PodNeed::Whole
    } else {
        PodNeed::Existence
    }
}

/// Whether [`plan`] needs the live pod for `crr` at all ([`pod_need`]).
pub fn needs_pod(crr: &ContainerRecreateRequest) -> bool {
    pod_need(crr) != PodNeed::Nothing
}

/// How long after its creation a request may be planned on [`admitted_pod`] (its pod not read):
/// past it, a reconcile reads the pod, so a deletion the pod watch never reported (one made
/// while the watch was away) still completes the request, before the daemon's response deadline.
pub const ADMITTED_POD_TRUSTED_FOR: Duration = Duration::from_secs(30);

/// The pod `crr` was admitted for, as the webhook saw it (name, namespace, the `pod-uid` label;
/// nothing else, no resourceVersion: never read), within [`ADMITTED_POD_TRUSTED_FOR`] of the
/// request's creation, for a request whose plan reads no more of its pod than that it is still
/// there: one the daemon has not started on ([`PodNeed::Existence`]), or a `Recreating` one
/// with no unready grace to start, whose pod the watch has shown no change of since the
/// operator asked for it (the caller knows: `pod_memo`) so that there is nothing new to copy
/// into the snapshot. `None` when its pod has to be read.
pub fn admitted_pod(crr: &ContainerRecreateRequest, now: Timestamp) -> Option<Pod> {
    let need = pod_need(crr);
    let recreating_without_grace_to_start = need == PodNeed::Whole
        && crr.phase() == Some(Phase::Recreating)
        && crr.finalizers().is_empty()
        && (crr.strategy().unready_grace_period_seconds.is_none()
            || pre_recreate_grace_started(crr));
    if need != PodNeed::Existence && !recreating_without_grace_to_start {
        return None;
    }
    let created = crr.metadata.creation_timestamp.as_ref()?.0;
    let trust = i64::try_from(ADMITTED_POD_TRUSTED_FOR.as_secs()).ok()?;
    if deadline::has_passed(deadline::after(created, trust)?, now) {
        return None;
    }
    let uid = crr.labels().get(keys::LABEL_POD_UID)?;
    let mut pod = Pod::default();
    pod.metadata.name = Some(crr.spec.pod_name.clone());
    pod.metadata.namespace = crr.namespace();
    pod.metadata.uid = Some(uid.clone());
    Some(pod)
}

/// Decides what to do with `crr`, given its pod and the time.
pub fn plan(crr: &ContainerRecreateRequest, pod: Option<&Pod>, now: Timestamp) -> Plan {
    let mut actions = Vec::new();
    let holds_finalizer = crr
        .finalizers()
        .iter()
        .any(|finalizer| finalizer == keys::FINALIZER_UNREADY_ACQUIRED);
    let deleting = crr.metadata.deletion_timestamp.is_some();
    let completion_time = crr
        .status
        .as_ref()
        .and_then(|status| status.completion_time.as_ref())
        .map(|time| time.0);

    if deleting || status::is_finished(crr) {
        if holds_finalizer {
            actions.push(Action::ReleasePodReadiness);
            actions.push(Action::RemoveFinalizer);
        }
        if deleting {
            return Plan {
                actions,
                requeue_after: None,
            };
        }
        let expiry = completion_time.and_then(|completed| {
            deadline::ttl_expiry(completed, crr.spec.ttl_seconds_after_finished)
        });
        let expired = expiry.is_some_and(|expiry| deadline::has_passed(expiry, now));
        // A request about to be deleted keeps its `active` label: dropping it would be one more
        // write, and would settle the request into the settled index, whose loop would delete it
        // a second time (a 404) beside this reconcile's deletion.
        if crr.labels().contains_key(keys::LABEL_ACTIVE) && !expired {
            actions.push(Action::RemoveActiveLabel);
        }
        // Once these actions ran, a request no rollout made is settled and leaves the cache for
        // the settled index, whose loop deletes it at its expiry (`settled`): no requeue here
        // to hold in the controller's queue for as long as the TTL.
        let indexed_once_settled = !crr.labels().contains_key(keys::LABEL_ROLLOUT);
        let mut requeue_after = None;
        match expiry {
            Some(_) if expired => actions.push(Action::Delete),
            Some(expiry) if !indexed_once_settled => {
                requeue_after = Some(deadline::until(expiry, now));
            }
            Some(_) | None => {}
        }
        return Plan {
            actions,
            requeue_after,
        };
    }

    let Some(pod) = pod.filter(|pod| !pod_has_gone(crr, pod)) else {
        actions.push(Action::Complete(Completion {
            reason: CompletionReason::PodGone,
            time: now,
        }));
        return Plan {
            actions,
            requeue_after: None,
        };
    };

    let phase = crr.phase();
    let created = crr.metadata.creation_timestamp.as_ref().map(|time| time.0);
    let mut wake_ups = Vec::new();
    let deadlines = [
        (
            CompletionReason::DaemonNotResponding,
            created
                .filter(|_| phase.is_none())
                .and_then(deadline::daemon_response_deadline),
        ),
        (
            CompletionReason::ActiveDeadlineExceeded,
            created.and_then(|created| {
                deadline::active_deadline(created, crr.spec.active_deadline_seconds)
            }),
        ),
    ];
    for (reason, at) in deadlines {
        let Some(at) = at else { continue };
        if deadline::has_passed(at, now) {
            actions.push(Action::Complete(Completion { reason, time: now }));
            return Plan {
                actions,
                requeue_after: None,
            };
        }
        wake_ups.push(at);
    }

    if phase == Some(Phase::Recreating) {
        let previous = crr
            .status
            .as_ref()
            .map(|status| status.container_status_snapshot.as_slice())
            .unwrap_or_default();
        // The admitted pod was never read: no statuses to copy (the watch's next copy brings them).
        let read = pod.metadata.resource_version.is_some();
        if read && let Some(next) = snapshot::update(&crr.spec.containers, pod, previous) {
            // Every container back and Ready, no minStartedSeconds: the daemon completes now and
            // writes this snapshot with the completion (docs/behaviour.md, §4, ours).
            let the_daemon_writes_it = crr.strategy().min_started_seconds == 0
                && snapshot::shows_all_ready(&crr.spec.containers, &next);
            if !the_daemon_writes_it {
                actions.push(Action::PatchSnapshot(next));
            }
        }
        if let Some(resync) = deadline::after(now, deadline::RECREATING_RESYNC.as_secs() as i64) {
            wake_ups.push(resync);
        }
        if crr.strategy().unready_grace_period_seconds.is_some() && !pre_recreate_grace_started(crr)
        {
            let missing_readiness_gate = !readiness::has_readiness_gate(pod);
            if !missing_readiness_gate {
                if !holds_finalizer {
                    actions.push(Action::AddFinalizer);
                }
                actions.push(Action::AcquirePodReadiness);
            }
            actions.push(Action::MarkPreRecreateGrace {
                time: now,
                missing_readiness_gate,
            });
        }
    }

    Plan {
        actions,
        requeue_after: deadline::requeue_after(now, wake_ups),
    }
}

/// The pod is terminating, or is not the pod the request was made for (the name was reused).
fn pod_has_gone(crr: &ContainerRecreateRequest, pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || pod.metadata.uid.as_deref() != crr.labels().get(keys::LABEL_POD_UID).map(String::as_str)
}

fn pre_recreate_grace_started(crr: &ContainerRecreateRequest) -> bool {
    crr.condition(keys::CONDITION_PRE_RECREATE_GRACE)
        .is_some_and(|condition| condition.status == "True")
}

/// The status write that completes `crr` (phase Completed, completionTime, message,
/// `Succeeded=False` with the reason), preconditioned on `crr`. The per-container states stay
/// as the daemon wrote them, as upstream leaves them: the `Succeeded` condition names the
/// containers that were not recreated.
pub fn completion_patch(
    crr: &ContainerRecreateRequest,
    completion: &Completion,
) -> Result<StatusPatch, NoResourceVersion> {
    let reason = completion.reason;
    let condition_message = match reason {
        CompletionReason::PodGone => None,
        CompletionReason::DaemonNotResponding | CompletionReason::ActiveDeadlineExceeded => {
            Some(naming_not_recreated(crr, reason.message()))
        }
    };
    StatusPatch::completion(
        crr,
        &status::Completion {
            outcome: Outcome::Failed,
            reason: reason.reason().to_owned(),
            message: reason.message().to_owned(),
            condition_message,
            container_recreate_states: None,
            time: completion.time,
        },
    )
}

/// The status write that records the start of the unready grace period: `PreRecreateGrace=True`
/// at `time` (an existing True condition keeps its time), and a status message when the pod has
/// no readiness gate; preconditioned on `crr`.
pub fn pre_recreate_grace_patch(
    crr: &ContainerRecreateRequest,
    time: Timestamp,
    missing_readiness_gate: bool,
) -> Result<StatusPatch, NoResourceVersion> {
    let patch = StatusPatch::of(crr)?.condition(Condition {
        type_: keys::CONDITION_PRE_RECREATE_GRACE.to_owned(),
        status: "True".to_owned(),
        reason: keys::REASON_PRE_RECREATE_GRACE.to_owned(),
        message: keys::MESSAGE_PRE_RECREATE_GRACE.to_owned(),
        last_transition_time: Time(time),
        observed_generation: crr.metadata.generation,
    });
    Ok(if missing_readiness_gate {
        patch.message(MESSAGE_NO_READINESS_GATE)
    } else {
        patch
    })
}

/// The status write of a new container status snapshot, preconditioned on `crr`.
pub fn snapshot_patch(
    crr: &ContainerRecreateRequest,
    snapshot: Vec<ContainerRecreateRequestSyncContainerStatus>,
) -> Result<StatusPatch, NoResourceVersion> {
    Ok(StatusPatch::of(crr)?.container_status_snapshot(snapshot))
}

/// `message`, followed by the requested containers that were not recreated (no state, or a
/// state other than Succeeded), each with the phase the daemon last wrote and whether it was
/// killed: "…; not recreated: app (Recreating, killed), sidecar (Pending)".
pub fn naming_not_recreated(crr: &ContainerRecreateRequest, message: &str) -> String {
    let states = crr
        .status
        .as_ref()
        .map(|status| status.container_recreate_states.as_slice())
        .unwrap_or_default();
    let not_recreated: Vec<String> = crr
        .spec
        .containers
        .iter()
        .filter_map(|container| {
            let state = states.iter().find(|state| state.name == container.name);
            match state {
                Some(state) if state.phase == Phase::Succeeded => None,
                Some(state) if state.is_killed => Some(format!(
                    "{} ({}, killed)",
                    container.name,
                    state.phase.as_str()
                )),
                Some(state) => Some(format!("{} ({})", container.name, state.phase.as_str())),
                None => Some(format!("{} (Pending)", container.name)),
            }
        })
        .collect();
    if not_recreated.is_empty() {
        message.to_owned()
    } else {
        format!("{message}; not recreated: {}", not_recreated.join(", "))
    }
}

/// How long the request took from creation to completion, once completed.
pub fn time_to_completion(crr: &ContainerRecreateRequest) -> Option<Duration> {
    let created = crr.metadata.creation_timestamp.as_ref()?.0;
    let completed = crr.status.as_ref()?.completion_time.as_ref()?.0;
    Some(deadline::until(completed, created))
}

#[cfg(test)]
mod tests;
