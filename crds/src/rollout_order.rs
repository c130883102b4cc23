//! The order a rollout restarts its target's pods in, and the view of a pod it decides on: the
//! operator's plan and `kubectl crr rollout --dry-run` read pods through the same functions, so
//! the dry run shows the order the operator keeps. Pure.
//!
//! Not Ready first (restarting them costs no availability), then StatefulSet pods from the
//! highest ordinal (as a StatefulSet's own rolling update goes), then the oldest; ties by name.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;

/// A pod of a rollout's target, as the planner needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// The pod's name.
    pub name: String,
    /// The pod's UID (its request is named after it).
    pub uid: String,
    /// When the pod was created.
    pub created: Timestamp,
    /// Whether the pod is Ready (its `Ready` condition is True).
    pub ready: bool,
    /// Whether the pod is being deleted.
    pub terminating: bool,
    /// Whether the pod can have containers recreated at all: active and bound to a node, as
    /// admission demands (`rules::check_pod`). A rollout skips the others.
    pub restartable: bool,
    /// The pod's ordinal when a StatefulSet owns it.
    pub ordinal: Option<u32>,
}

impl PodView {
    /// The key pods are restarted in the order of (ascending).
    pub fn restart_order(&self) -> (bool, bool, std::cmp::Reverse<u32>, Timestamp, &str) {
        (
            self.ready,
            self.ordinal.is_none(),
            std::cmp::Reverse(self.ordinal.unwrap_or(0)),
            self.created,
            self.name.as_str(),
        )
    }
}

/// A pod as the plan sees it.
pub fn pod_view(pod: &Pod) -> PodView {
    let statefulset_owned = pod
        .owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && owner.kind == "StatefulSet");
    PodView {
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |time| time.0),
        ready: crate::rules::pod_ready(pod),
        terminating: is_terminating(pod),
        restartable: crate::rules::check_pod(pod).is_ok(),
        ordinal: statefulset_owned.then(|| ordinal(pod)).flatten(),
    }
}

/// A StatefulSet pod's ordinal: its `apps.kubernetes.io/pod-index` label, else its name's last
/// dash-separated part.
fn ordinal(pod: &Pod) -> Option<u32> {
    pod.labels()
        .get("apps.kubernetes.io/pod-index")
        .and_then(|index| index.parse().ok())
        .or_else(|| pod.name_any().rsplit('-').next()?.parse().ok())
}

/// Whether the pod is being deleted.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// `pods` in the order a rollout restarts them: the target's pods (not terminating), sorted.
pub fn in_restart_order(pods: &[Pod]) -> Vec<PodView> {
    let mut views: Vec<PodView> = pods
        .iter()
        .map(pod_view)
        .filter(|view| !view.terminating)
        .collect();
    views.sort_by(|a, b| a.restart_order().cmp(&b.restart_order()));
    views
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a pod")
    }

    #[test]
    fn a_statefulset_pod_has_its_ordinal_and_readiness() {
        let view = pod_view(&pod(serde_json::json!({
            "metadata": {"name": "db-12", "uid": "u", "creationTimestamp": "2026-11-27T00:00:00Z",
                         "labels": {"apps.kubernetes.io/pod-index": "12"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                                              "uid": "s", "controller": true}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        })));
        assert_eq!(view.ordinal, Some(12));
        assert!(view.ready && !view.terminating);
        let unlabelled = pod_view(&pod(serde_json::json!({
            "metadata": {"name": "db-3", "uid": "u",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                                              "uid": "s", "controller": true}]},
        })));
        assert_eq!(unlabelled.ordinal, Some(3));
        assert!(!unlabelled.ready);
    }

    #[test]
    fn other_pods_have_no_ordinal_even_with_a_numeric_suffix() {
        let view = pod_view(&pod(serde_json::json!({
            "metadata": {"name": "web-7", "uid": "u", "deletionTimestamp": "2026-11-27T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                              "uid": "r", "controller": true}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        })));
        assert_eq!(view.ordinal, None);
        assert!(view.terminating && !view.ready);
    }

    #[test]
    fn not_ready_first_then_the_highest_ordinal_then_the_oldest() {
        let owned = |name: &str, created: &str, ready: &str| {
            pod(serde_json::json!({
                "metadata": {"name": name, "uid": name, "creationTimestamp": created,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                                  "name": "db", "uid": "s", "controller": true}]},
                "status": {"conditions": [{"type": "Ready", "status": ready}]},
            }))
        };
        let loose = |name: &str, created: &str| {
            pod(serde_json::json!({
                "metadata": {"name": name, "uid": name, "creationTimestamp": created},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }))
        };
        let order: Vec<String> = in_restart_order(&[
            owned("db-0", "2026-01-01T00:00:00Z", "True"),
            loose("web-b", "2026-01-02T00:00:00Z"),
            owned("db-2", "2026-01-03T00:00:00Z", "True"),
            owned("db-1", "2026-01-01T00:00:00Z", "False"),
            loose("web-a", "2026-01-02T00:00:00Z"),
        ])
        .into_iter()
        .map(|view| view.name)
        .collect();
        assert_eq!(order, ["db-1", "db-2", "db-0", "web-a", "web-b"]);
    }
}
