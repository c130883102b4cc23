//! The pod hook, at creation, makes the opt-in label and the `KruisePodReady` readiness gate go
//! together (label `crr.apps.kruise.io/readiness-gate: "true"` by default; the key is
//! configurable and must match the operator's `--readiness-gate-selector`):
//! - a pod that opts in with the label gets the gate, so that the operator can take it out of
//!   Service endpoints during `unreadyGracePeriodSeconds` (plain Deployments' pods lack the
//!   gate, and without it marking them not-ready changes nothing);
//! - a pod that declares the gate itself (a template written for OpenKruise) gets the label,
//!   so that the operator, which watches labelled pods only, starts its condition: upstream
//!   starts the condition of every gated pod, and such a pod would otherwise never be Ready.
//!
//! Pod status cannot be written through admission (the API server resets a new pod's status),
//! so the initial condition is not part of the patch: the operator starts it at True
//! (operator/src/gate.rs), and the pod becomes Ready as soon as its containers are. The API
//! server calls this hook only for pods that carry the label or the gate (the chart's
//! `matchConditions`). Decides only; the HTTP handler lives in `routes.rs`.

use crr_crds::keys::POD_CONDITION_KRUISE_POD_READY;
use crr_crds::readiness_gate;
use k8s_openapi::api::core::v1::PodReadinessGate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

/// A pod as this hook reads it: its name, namespace and labels, and its readiness gates.
/// Everything else in the (possibly large) pod, annotations and managedFields included, is
/// skipped while parsing, never stored.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct GatedPod {
    #[serde(default, deserialize_with = "labels_only")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GatedPodSpec,
}

/// The part of a pod spec this hook reads.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct GatedPodSpec {
    #[serde(
        rename = "readinessGates",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub readiness_gates: Option<Vec<PodReadinessGate>>,
}

fn labels_only<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Slim {
        name: Option<String>,
        generate_name: Option<String>,
        namespace: Option<String>,
        labels: Option<std::collections::BTreeMap<String, String>>,
    }
    let slim = <Slim as serde::Deserialize>::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: slim.name,
        generate_name: slim.generate_name,
        namespace: slim.namespace,
        labels: slim.labels,
        ..ObjectMeta::default()
    })
}

impl k8s_openapi::Resource for GatedPod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for GatedPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The JSON patch for a pod being created: `None` when nothing is to change (neither the
/// opt-in label `opt_in_label: "true"` nor the gate, or both already).
pub fn patch_for(pod: &GatedPod, opt_in_label: &str) -> Option<json_patch::Patch> {
    let labels = pod.metadata.labels.as_ref();
    let opted_in = labels
        .and_then(|labels| labels.get(opt_in_label))
        .map(String::as_str)
        == Some("true");
    let gated = readiness_gate::lists_kruise_pod_ready(pod.spec.readiness_gates.as_deref());
    let operation = match (opted_in, gated) {
        (true, true) | (false, false) => return None,
        (true, false) => {
            let gate = json!({"conditionType": POD_CONDITION_KRUISE_POD_READY});
            match &pod.spec.readiness_gates {
                Some(_) => json!({"op": "add", "path": "/spec/readinessGates/-", "value": gate}),
                None => json!({"op": "add", "path": "/spec/readinessGates", "value": [gate]}),
            }
        }
        (false, true) => match labels {
            // JSON pointer escaping: `~` is `~0`, `/` is `~1`.
            Some(_) => json!({
                "op": "add",
                "path": format!("/metadata/labels/{}", opt_in_label.replace('~', "~0").replace('/', "~1")),
                "value": "true",
            }),
            None => {
                json!({"op": "add", "path": "/metadata/labels", "value": {opt_in_label: "true"}})
            }
        },
    };
    serde_json::from_value(json!([operation])).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_crds::keys::LABEL_READINESS_GATE;
    use serde_json::Value;

    fn view(pod: &Value) -> GatedPod {
        serde_json::from_value(pod.clone()).expect("a pod")
    }

    fn apply(pod: &Value) -> Value {
        let mut patched = pod.clone();
        if let Some(patch) = patch_for(&view(pod), LABEL_READINESS_GATE) {
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
        assert!(patch_for(&view(&plain), LABEL_READINESS_GATE).is_none());
        let other_value =
            json!({"metadata": {"labels": {LABEL_READINESS_GATE: "false"}}, "spec": {}});
        assert!(patch_for(&view(&other_value), LABEL_READINESS_GATE).is_none());
        let already = json!({"metadata": {"labels": {LABEL_READINESS_GATE: "true"}},
                             "spec": {"readinessGates": [{"conditionType": "KruisePodReady"}]}});
        assert!(patch_for(&view(&already), LABEL_READINESS_GATE).is_none());
    }

    #[test]
    fn a_pod_that_declares_the_gate_itself_gets_the_label() {
        for pod in [
            json!({"metadata": {"labels": {"app": "web"}},
                   "spec": {"readinessGates": [{"conditionType": "KruisePodReady"}]}}),
            json!({"metadata": {}, "spec": {"readinessGates": [{"conditionType": "KruisePodReady"}]}}),
        ] {
            let patched = apply(&pod);
            assert_eq!(
                patched["metadata"]["labels"][LABEL_READINESS_GATE], "true",
                "{pod}"
            );
            assert_eq!(
                patched["spec"]["readinessGates"],
                pod["spec"]["readinessGates"]
            );
        }
        // Another gate only: nothing to do.
        let other =
            json!({"metadata": {}, "spec": {"readinessGates": [{"conditionType": "other"}]}});
        assert!(patch_for(&view(&other), LABEL_READINESS_GATE).is_none());
    }

    #[test]
    fn the_opt_in_label_is_configurable() {
        let pod = json!({"metadata": {"labels": {"example.com/gate": "true"}}, "spec": {}});
        assert!(patch_for(&view(&pod), LABEL_READINESS_GATE).is_none());
        assert!(patch_for(&view(&pod), "example.com/gate").is_some());
    }
}
