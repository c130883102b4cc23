//! What a request's status means to a user: per container Pending → Recreating →
//! Succeeded/Failed with its restart count, and for the whole request whether it is still
//! running, succeeded or failed. Upstream's request-level phase is always `Completed`, so the
//! outcome is read from our `Succeeded` condition when present, else from the container states.
//!
//! Pure functions of the object; the watch loop and the display live elsewhere.

use std::collections::BTreeMap;

use crr_crds::keys;
use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};
use kube::ResourceExt as _;

use crate::printable::printable;

/// The outcome of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not finished yet (`crr_crds::status::is_finished`).
    Running,
    /// Completed and every container was recreated.
    Succeeded,
    /// Completed without recreating every container; the reason.
    Failed(String),
}

impl Outcome {
    /// Whether the request is finished, either way.
    pub fn is_finished(&self) -> bool {
        !matches!(self, Outcome::Running)
    }
}

/// One container of a request as the user sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerProgress {
    pub name: String,
    /// `Pending` until the daemon reports otherwise.
    pub phase: Phase,
    /// The container's restart count: the operator's latest snapshot, else the count the
    /// request was created with.
    pub restarts: Option<i32>,
    pub message: Option<String>,
    /// Why the kubelet has not started the container again, once crr stopped it: its waiting
    /// reason and back-off (`CrashLoopBackOff, back-off 40s`), from the pod
    /// ([`with_kubelet_waiting`]).
    pub waiting: Option<String>,
}

/// A request as the user sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestProgress {
    pub namespace: String,
    pub name: String,
    pub pod: String,
    /// The request-level phase; `None` until someone picks the request up.
    pub phase: Option<Phase>,
    pub containers: Vec<ContainerProgress>,
    pub outcome: Outcome,
}

impl RequestProgress {
    /// How many containers were recreated (Succeeded).
    pub fn succeeded(&self) -> usize {
        self.containers
            .iter()
            .filter(|container| container.phase == Phase::Succeeded)
            .count()
    }
}

/// Reads the progress of `crr`.
pub fn progress(crr: &ContainerRecreateRequest) -> RequestProgress {
    let status = crr.status.clone().unwrap_or_default();
    let containers: Vec<ContainerProgress> = crr
        .spec
        .containers
        .iter()
        .map(|container| {
            let state = status
                .container_recreate_states
                .iter()
                .find(|state| state.name == container.name);
            let snapshot = status
                .container_status_snapshot
                .iter()
                .find(|snapshot| snapshot.name == container.name);
            ContainerProgress {
                name: container.name.clone(),
                phase: state.map_or(Phase::Pending, |state| state.phase),
                restarts: snapshot.map(|snapshot| snapshot.restart_count).or_else(|| {
                    container
                        .status_context
                        .as_ref()
                        .map(|context| context.restart_count)
                }),
                message: state
                    .and_then(|state| state.message.as_deref())
                    .filter(|message| !message.is_empty())
                    // A request still queued says why in its own message (the node daemon's
                    // "queued: waiting for request ...").
                    .or_else(|| queued_message(&status, state.map(|state| state.phase)))
                    .map(|message| short_container_ids(&printable(message))),
                waiting: None,
            }
        })
        .collect();
    let outcome = if !crr_crds::status::is_finished(crr) {
        Outcome::Running
    } else {
        outcome_of_completed(crr, &containers, status.message.as_deref())
    };
    RequestProgress {
        namespace: crr.namespace().unwrap_or_default(),
        name: crr.name_any(),
        pod: crr.spec.pod_name.clone(),
        phase: status.phase,
        containers,
        outcome,
    }
}

/// Each container of `pod` the kubelet holds waiting, with why: its waiting reason, and the
/// back-off when the kubelet's message gives one (`CrashLoopBackOff, back-off 40s`).
pub fn kubelet_waiting(pod: &k8s_openapi::api::core::v1::Pod) -> BTreeMap<String, String> {
    let status = pod.status.as_ref();
    status
        .into_iter()
        .flat_map(|status| {
            status
                .container_statuses
                .iter()
                .flatten()
                .chain(status.init_container_statuses.iter().flatten())
        })
        .filter_map(|container| {
            let waiting = container.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting
                .reason
                .as_deref()
                .filter(|reason| !reason.is_empty())?;
            // The kubelet's message: "back-off 40s restarting failed container=app pod=...".
            let back_off = waiting
                .message
                .as_deref()
                .and_then(|message| message.strip_prefix("back-off "))
                .and_then(|rest| rest.split_whitespace().next())
                .map(|duration| format!(", back-off {duration}"))
                .unwrap_or_default();
            Some((
                container.name.clone(),
                printable(&format!("{reason}{back_off}")),
            ))
        })
        .collect()
}

/// Shows the kubelet's waiting reasons (`waiting`, from [`kubelet_waiting`]) beside the
/// containers crr has acted on (past Pending); the others are left as they are.
pub fn with_kubelet_waiting(progress: &mut RequestProgress, waiting: &BTreeMap<String, String>) {
    for container in &mut progress.containers {
        container.waiting = if container.phase == Phase::Pending {
            None
        } else {
            waiting.get(&container.name).cloned()
        };
    }
}

/// The request's own message while it is Pending and the container has not moved past
/// Pending: what a queued request waits for.
fn queued_message(
    status: &crr_crds::v1beta1::ContainerRecreateRequestStatus,
    container: Option<Phase>,
) -> Option<&str> {
    (status.phase == Some(Phase::Pending) && container.is_none_or(|phase| phase == Phase::Pending))
        .then_some(status.message.as_deref())
        .flatten()
        .filter(|message| !message.is_empty())
}

fn outcome_of_completed(
    crr: &ContainerRecreateRequest,
    containers: &[ContainerProgress],
    message: Option<&str>,
) -> Outcome {
    let message = message.filter(|message| !message.is_empty());
    if let Some(condition) = crr.condition(keys::CONDITION_SUCCEEDED) {
        match condition.status.as_str() {
            "True" => return Outcome::Succeeded,
            "False" => {
                // The condition's message says at least what status.message says (the
                // operator's adds the containers not recreated).
                let reason = Some(condition.message.as_str())
                    .filter(|m| !m.is_empty())
                    .or(message)
                    .map(printable)
                    .unwrap_or_else(|| unfinished_summary(containers));
                return Outcome::Failed(reason);
            }
            _ => {}
        }
    }
    if containers
        .iter()
        .all(|container| container.phase == Phase::Succeeded)
    {
        Outcome::Succeeded
    } else {
        Outcome::Failed(
            message
                .map(printable)
                .unwrap_or_else(|| unfinished_summary(containers)),
        )
    }
}

fn unfinished_summary(containers: &[ContainerProgress]) -> String {
    let unfinished: Vec<String> = containers
        .iter()
        .filter(|container| container.phase != Phase::Succeeded)
        .map(|container| match &container.message {
            Some(message) => format!("{} {}: {message}", container.name, container.phase.as_str()),
            None => format!("{} {}", container.name, container.phase.as_str()),
        })
        .collect();
    format!("not recreated: {}", unfinished.join("; "))
}

/// Container IDs shortened to 12 hex digits, as kubectl and crictl show them:
/// `containerd://0123456789ab…` (64 hex) reads `containerd://0123456789ab`.
pub fn short_container_ids(text: &str) -> String {
    const FULL: usize = 64;
    const SHORT: usize = 12;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let hex = after.bytes().take_while(u8::is_ascii_hexdigit).count();
        if hex == FULL {
            out.push_str(&after[..SHORT]);
            rest = &after[FULL..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crr(status: serde_json::Value) -> ContainerRecreateRequest {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "ContainerRecreateRequest",
            "metadata": {"name": "web-0-x1", "namespace": "prod"},
            "spec": {
                "podName": "web-0",
                "containers": [
                    {"name": "app", "statusContext": {"containerID": "containerd://a", "restartCount": 2}},
                    {"name": "sidecar"},
                ],
            },
            "status": status,
        }))
        .expect("a valid request")
    }

    #[test]
    fn fresh_request_is_running_with_every_container_pending() {
        let progress = progress(&crr(json!({})));
        assert_eq!(progress.outcome, Outcome::Running);
        assert_eq!(progress.phase, None);
        assert_eq!(progress.pod, "web-0");
        assert!(
            progress
                .containers
                .iter()
                .all(|c| c.phase == Phase::Pending)
        );
        assert_eq!(
            progress.containers[0].restarts,
            Some(2),
            "from statusContext"
        );
        assert_eq!(progress.containers[1].restarts, None);
    }

    #[test]
    fn either_completion_marker_finishes_the_request_as_the_daemon_and_operator_see_it() {
        for status in [
            json!({"phase": "Recreating", "completionTime": "2026-01-01T00:00:00Z"}),
            json!({"phase": "Completed"}),
        ] {
            let progress = progress(&crr(status.clone()));
            assert_ne!(progress.outcome, Outcome::Running, "{status}");
        }
        assert_eq!(
            progress(&crr(json!({"phase": "Recreating"}))).outcome,
            Outcome::Running
        );
    }

    #[test]
    fn states_and_snapshot_give_per_container_phase_and_restarts() {
        let progress = progress(&crr(json!({
            "phase": "Recreating",
            "containerRecreateStates": [
                {"name": "app", "phase": "Succeeded", "isKilled": true},
                {"name": "sidecar", "phase": "Recreating", "message": "killing"},
            ],
            "containerStatusSnapshot": [{"name": "app", "ready": true, "restartCount": 3}],
        })));
        assert_eq!(progress.outcome, Outcome::Running);
        assert_eq!(progress.containers[0].phase, Phase::Succeeded);
        assert_eq!(progress.containers[0].restarts, Some(3));
        assert_eq!(progress.containers[1].phase, Phase::Recreating);
        assert_eq!(progress.containers[1].message.as_deref(), Some("killing"));
        assert_eq!(progress.succeeded(), 1);
    }

    #[test]
    fn the_kubelets_back_off_shows_beside_a_container_crr_stopped() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0"},
            "status": {"containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 4, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": "back-off 40s restarting failed container=app pod=web-0_shop(uid)"}}},
                {"name": "sidecar", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "ContainerCreating"}}},
                {"name": "log", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {}}},
            ]},
        }))
        .expect("a pod");
        let waiting = kubelet_waiting(&pod);
        assert_eq!(
            waiting,
            BTreeMap::from([
                (
                    "app".to_owned(),
                    "CrashLoopBackOff, back-off 40s".to_owned()
                ),
                ("sidecar".to_owned(), "ContainerCreating".to_owned()),
            ])
        );
        let mut seen = progress(&crr(json!({
            "phase": "Recreating",
            "containerRecreateStates": [{"name": "app", "phase": "Recreating"}],
        })));
        with_kubelet_waiting(&mut seen, &waiting);
        assert_eq!(
            seen.containers[0].waiting.as_deref(),
            Some("CrashLoopBackOff, back-off 40s")
        );
        // Not yet stopped by crr: the kubelet's reason is not crr's doing.
        let mut untouched = progress(&crr(json!({"phase": "Pending"})));
        with_kubelet_waiting(&mut untouched, &waiting);
        assert_eq!(untouched.containers[0].waiting, None);
    }

    #[test]
    fn a_queued_request_says_what_it_waits_for_until_it_moves() {
        let queued = progress(&crr(json!({
            "phase": "Pending",
            "message": "queued: waiting for request first of the same pod to finish first",
        })));
        assert_eq!(
            queued.containers[0].message.as_deref(),
            Some("queued: waiting for request first of the same pod to finish first")
        );
        let moving = progress(&crr(json!({
            "phase": "Recreating",
            "message": "queued: waiting for request first of the same pod to finish first",
            "containerRecreateStates": [{"name": "app", "phase": "Recreating"}],
        })));
        assert_eq!(moving.containers[0].message, None);
    }

    #[test]
    fn completed_with_every_container_succeeded_is_a_success() {
        let progress = progress(&crr(json!({
            "phase": "Completed",
            "completionTime": "2026-01-01T00:00:00Z",
            "containerRecreateStates": [
                {"name": "app", "phase": "Succeeded"},
                {"name": "sidecar", "phase": "Succeeded"},
            ],
        })));
        assert_eq!(progress.outcome, Outcome::Succeeded);
    }

    #[test]
    fn completed_with_a_failed_container_is_a_failure_naming_it() {
        let progress = progress(&crr(json!({
            "phase": "Completed",
            "completionTime": "2026-01-01T00:00:00Z",
            "containerRecreateStates": [
                {"name": "app", "phase": "Failed", "message": "kill container error: boom"},
                {"name": "sidecar", "phase": "Succeeded"},
            ],
        })));
        assert_eq!(
            progress.outcome,
            Outcome::Failed("not recreated: app Failed: kill container error: boom".to_owned())
        );
    }

    #[test]
    fn completion_message_explains_a_failure() {
        let progress = progress(&crr(json!({
            "phase": "Completed",
            "completionTime": "2026-01-01T00:00:00Z",
            "message": "pod has gone",
        })));
        assert_eq!(progress.outcome, Outcome::Failed("pod has gone".to_owned()));
    }

    #[test]
    fn succeeded_condition_decides_when_present() {
        let condition = |status: &str| {
            json!({
                "phase": "Completed",
                "completionTime": "2026-01-01T00:00:00Z",
                "containerRecreateStates": [
                    {"name": "app", "phase": "Succeeded"},
                    {"name": "sidecar", "phase": "Succeeded"},
                ],
                "conditions": [{
                    "type": "Succeeded", "status": status, "reason": "R",
                    "message": "daemon says so", "lastTransitionTime": "2026-01-01T00:00:00Z",
                }],
            })
        };
        assert_eq!(
            progress(&crr(condition("False"))).outcome,
            Outcome::Failed("daemon says so".to_owned())
        );
        assert_eq!(
            progress(&crr(condition("True"))).outcome,
            Outcome::Succeeded
        );
    }

    #[test]
    fn container_ids_read_as_kubectl_shows_them() {
        let id = "0123456789abcdef".repeat(4);
        assert_eq!(
            short_container_ids(&format!(
                "killing container containerd://{id}, then cri-o://{id}"
            )),
            "killing container containerd://0123456789ab, then cri-o://0123456789ab"
        );
        for unchanged in [
            "see http://example.test/x",
            "containerd://0123",
            "no id",
            "",
        ] {
            assert_eq!(short_container_ids(unchanged), unchanged);
        }
    }
}
