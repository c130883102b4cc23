//! Reading an `apps/v1` workload (Deployment, StatefulSet, DaemonSet, ReplicaSet) by kind and
//! name, as one shape: its UID, pod selector and pod template. One GET through the dynamic API,
//! whatever the kind; the operator's rollouts and the webhook's rollout admission read workloads
//! this way.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client, ResourceExt};

/// The kinds of `apps/v1` with a pod template, and their plurals.
pub const KINDS: [(&str, &str); 4] = [
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
    ("DaemonSet", "daemonsets"),
    ("ReplicaSet", "replicasets"),
];

/// What a workload says about its pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    /// The workload's UID (its pods, or its ReplicaSets, name it as their controller).
    pub uid: String,
    /// `spec.selector`.
    pub selector: Option<LabelSelector>,
    /// `spec.template`.
    pub template: Option<PodTemplateSpec>,
}

/// Why a workload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// Not a kind of [`KINDS`].
    #[error("{kind} is not an apps/v1 workload with a pod template")]
    UnknownKind {
        /// The kind asked for.
        kind: String,
    },
    /// The API call failed.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Reads workload `kind`/`name` of `namespace`; `None` when it does not exist.
pub async fn get(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Result<Option<Workload>, WorkloadError> {
    let (kind, plural) = KINDS
        .iter()
        .find(|(known, _)| *known == kind)
        .ok_or_else(|| WorkloadError::UnknownKind {
            kind: kind.to_owned(),
        })?;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("apps", "v1", kind), plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let Some(object) = api.get_opt(name).await? else {
        return Ok(None);
    };
    Ok(Some(from_object(&object)))
}

/// The workload shape of an object as read.
pub fn from_object(object: &DynamicObject) -> Workload {
    let spec = &object.data["spec"];
    Workload {
        uid: object.uid().unwrap_or_default(),
        selector: serde_json::from_value(spec["selector"].clone()).ok(),
        template: serde_json::from_value(spec["template"].clone()).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_is_read_from_its_spec() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "uid": "u-1"},
            "spec": {"selector": {"matchLabels": {"app": "db"}},
                     "template": {"spec": {"containers": [{"name": "app"}]}}},
        }))
        .expect("an object");
        let workload = from_object(&object);
        assert_eq!(workload.uid, "u-1");
        assert_eq!(
            workload.selector.and_then(|selector| selector.match_labels),
            Some([("app".to_owned(), "db".to_owned())].into())
        );
        let template = workload.template.expect("a template");
        assert_eq!(template.spec.expect("a spec").containers[0].name, "app");
    }

    #[test]
    fn a_workload_without_a_spec_has_no_selector_or_template() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        }))
        .expect("an object");
        assert_eq!(from_object(&object), Workload::default());
    }
}
