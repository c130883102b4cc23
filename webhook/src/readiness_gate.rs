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

/// The JSON patch for a pod being created: `None` when nothing is to change (not opted in
/// with `opt_in_label: "true"`, or the gate is already there).
pub fn patch_for(pod: &GatedPod, opt_in_label: &str) -> Option<json_patch::Patch> {
    let opted_in = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(opt_in_label))
        .map(String::as_str)
        == Some("true");
    if !opted_in {
        return None;
    }
    let gate = json!({"conditionType": POD_CONDITION_KRUISE_POD_READY});
    let operation = match &pod.spec.readiness_gates {
        Some(gates)
            if gates
                .iter()
                .any(|existing| existing.condition_type == POD_CONDITION_KRUISE_POD_READY) =>
        {
            return None;
        }
        Some(_) => json!({"op": "add", "path": "/spec/readinessGates/-", "value": gate}),
        None => json!({"op": "add", "path": "/spec/readinessGates", "value": [gate]}),
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
    fn the_opt_in_label_is_configurable() {
        let pod = json!({"metadata": {"labels": {"example.com/gate": "true"}}, "spec": {}});
        assert!(patch_for(&view(&pod), LABEL_READINESS_GATE).is_none());
        assert!(patch_for(&view(&pod), "example.com/gate").is_some());
    }
}
