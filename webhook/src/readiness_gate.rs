//! Readiness-gate injection for pods that opt in (label `crr.apps.kruise.io/readiness-gate:
//! "true"` by default; the label key is configurable and must match the operator's
//! `--readiness-gate-selector`): adds the `KruisePodReady` readiness gate at creation, so that the operator can take
//! the pod out of Service endpoints during `unreadyGracePeriodSeconds`. Plain Deployments'
//! pods lack the gate, and without it marking them not-ready changes nothing.
//!
//! Pod status cannot be written through admission (the API server resets a new pod's status),
//! so the initial condition is not part of the patch: the operator starts it at True for
//! labelled pods (operator/src/gate.rs), and the pod becomes Ready as soon as its containers
//! are. Decides only; the HTTP handler lives in `server.rs`.

use crr_crds::keys::POD_CONDITION_KRUISE_POD_READY;
use serde_json::{Value, json};

/// The JSON patch for a pod being created: `None` when nothing is to change (not opted in
/// with `opt_in_label: "true"`, or the gate is already there).
pub fn patch_for(pod: &Value, opt_in_label: &str) -> Option<json_patch::Patch> {
    let opted_in = pod
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(opt_in_label))
        .and_then(Value::as_str)
        == Some("true");
    if !opted_in {
        return None;
    }
    let gate = json!({"conditionType": POD_CONDITION_KRUISE_POD_READY});
    let operation = match pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
    {
        Some(gates) if gates.iter().any(|existing| existing == &gate) => return None,
        Some(_) => json!({"op": "add", "path": "/spec/readinessGates/-", "value": gate}),
        None => json!({"op": "add", "path": "/spec/readinessGates", "value": [gate]}),
    };
    serde_json::from_value(json!([operation])).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_crds::keys::LABEL_READINESS_GATE;

    fn apply(pod: &Value) -> Value {
        let mut patched = pod.clone();
        if let Some(patch) = patch_for(pod, LABEL_READINESS_GATE) {
            json_patch::patch(&mut patched, &patch).expect("patch applies");
        }
        patched
    }

    #[test]
    fn adds_the_gate_to_an_opted_in_pod() {
        let pod = json!({"metadata": {"labels": {LABEL_READINESS_GATE: "true"}}, "spec": {"containers": []}});
        assert_eq!(
            apply(&pod)["spec"]["readinessGates"],
            json!([{"conditionType": "KruisePodReady"}])
        );
    }

    #[test]
    fn appends_to_existing_gates() {
        let pod = json!({"metadata": {"labels": {LABEL_READINESS_GATE: "true"}},
                         "spec": {"readinessGates": [{"conditionType": "other"}]}});
        assert_eq!(
            apply(&pod)["spec"]["readinessGates"],
            json!([{"conditionType": "other"}, {"conditionType": "KruisePodReady"}])
        );
    }

    #[test]
    fn leaves_pods_that_did_not_opt_in_or_already_have_it() {
        let plain = json!({"metadata": {"labels": {"app": "web"}}, "spec": {}});
        assert!(patch_for(&plain, LABEL_READINESS_GATE).is_none());
        let other_value =
            json!({"metadata": {"labels": {LABEL_READINESS_GATE: "false"}}, "spec": {}});
        assert!(patch_for(&other_value, LABEL_READINESS_GATE).is_none());
        let already = json!({"metadata": {"labels": {LABEL_READINESS_GATE: "true"}},
                             "spec": {"readinessGates": [{"conditionType": "KruisePodReady"}]}});
        assert!(patch_for(&already, LABEL_READINESS_GATE).is_none());
    }

    #[test]
    fn the_opt_in_label_is_configurable() {
        let pod = json!({"metadata": {"labels": {"example.com/gate": "true"}}, "spec": {}});
        assert!(patch_for(&pod, LABEL_READINESS_GATE).is_none());
        assert!(patch_for(&pod, "example.com/gate").is_some());
    }
}
