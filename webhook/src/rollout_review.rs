//! Admission of ContainerRecreateRollouts (validating only): the rules of
//! [`crr_crds::rules::rollout`] on CREATE and UPDATE, and on CREATE that the workload's pod
//! template has every container the rollout names (one GET of the workload).

use std::future::Future;
use std::pin::Pin;

use crr_crds::keys::{ROLLOUT_GROUP, ROLLOUT_KIND};
use crr_crds::rollout::{ContainerRecreateRollout, WorkloadRef};
use crr_crds::rules::rollout::{
    RolloutViolation, check_rollout, check_rollout_update, check_template,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::Client;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionReview, Operation};
use serde_json::value::RawValue;

use crate::admission::{self, Lookup, Rejection};
use crate::review::{Verdict, deny, invalid, read_request};

/// Reads a workload's pod template.
pub trait TemplateLookup: Send + Sync {
    /// The pod template of `workload` in `namespace`.
    fn template<'a>(
        &'a self,
        namespace: &'a str,
        workload: &'a WorkloadRef,
    ) -> Pin<Box<dyn Future<Output = Lookup<PodTemplateSpec>> + Send + 'a>>;
}

/// Workload templates by GET (no cache: rollouts are created rarely).
pub struct ApiTemplates {
    /// The webhook's API client.
    pub client: Client,
}

impl TemplateLookup for ApiTemplates {
    fn template<'a>(
        &'a self,
        namespace: &'a str,
        workload: &'a WorkloadRef,
    ) -> Pin<Box<dyn Future<Output = Lookup<PodTemplateSpec>> + Send + 'a>> {
        Box::pin(async move {
            match crr_runtime::workload::get(
                &self.client,
                namespace,
                &workload.kind,
                &workload.name,
            )
            .await
            {
                Ok(Some(found)) => Lookup::Found(found.template.unwrap_or_default()),
                Ok(None) | Err(crr_runtime::workload::WorkloadError::UnknownKind { .. }) => {
                    Lookup::NotFound
                }
                Err(error) => Lookup::Failed(error.to_string()),
            }
        })
    }
}

/// Answers one ContainerRecreateRollout AdmissionReview body.
pub async fn review_rollout(
    body: &[u8],
    templates: &dyn TemplateLookup,
) -> (AdmissionReview<DynamicObject>, Verdict) {
    let (request, response) = match read_request(body) {
        Ok(read) => read,
        Err(error) => return invalid(&error),
    };
    if request.kind.group != ROLLOUT_GROUP || request.kind.kind != ROLLOUT_KIND {
        return deny(
            response,
            bad_request(
                "InvalidObject",
                format!(
                    "this endpoint admits {ROLLOUT_GROUP} {ROLLOUT_KIND} objects, not {}/{} {}",
                    request.kind.group, request.kind.version, request.kind.kind
                ),
            ),
        );
    }
    let decided = match request.operation {
        Operation::Create => match decode(request.object) {
            Ok(rollout) => admit_create(request.namespace.as_deref(), &rollout, templates).await,
            Err(rejection) => Err(rejection),
        },
        Operation::Update => match (decode(request.old_object), decode(request.object)) {
            (Ok(old), Ok(new)) => admit_update(request.namespace.as_deref(), &old, &new),
            (Err(rejection), _) | (_, Err(rejection)) => Err(rejection),
        },
        Operation::Delete | Operation::Connect => Ok(()),
    };
    match decided {
        Ok(()) => (response.into_review(), Verdict::Allowed),
        Err(rejection) => deny(response, rejection),
    }
}

fn decode(object: Option<&RawValue>) -> Result<ContainerRecreateRollout, Rejection> {
    let object = object.ok_or_else(|| bad_request("InvalidObject", "the request has no object"))?;
    serde_json::from_str(object.get())
        .map_err(|error| bad_request("InvalidObject", error.to_string()))
}

async fn admit_create(
    request_namespace: Option<&str>,
    rollout: &ContainerRecreateRollout,
    templates: &dyn TemplateLookup,
) -> Result<(), Rejection> {
    let namespace = admission::review_namespace(request_namespace, &rollout.metadata)?;
    let name = rollout.metadata.name.as_deref().unwrap_or_default();
    check_rollout(name, &rollout.spec).map_err(violation)?;
    if let Some(workload) = &rollout.spec.target.workload_ref {
        match templates.template(&namespace, workload).await {
            Lookup::Found(template) => {
                check_template(workload, &template, &rollout.spec.containers).map_err(violation)?;
            }
            Lookup::NotFound => {
                return Err(violation(RolloutViolation::WorkloadNotFound {
                    kind: workload.kind.clone(),
                    workload: workload.name.clone(),
                }));
            }
            Lookup::Failed(error) => {
                return Err(Rejection {
                    code: 500,
                    message: format!(
                        "reading {}/{} failed: {error}",
                        workload.kind, workload.name
                    ),
                    reason: "LookupFailed",
                });
            }
        }
    }
    Ok(())
}

fn admit_update(
    request_namespace: Option<&str>,
    old: &ContainerRecreateRollout,
    new: &ContainerRecreateRollout,
) -> Result<(), Rejection> {
    admission::review_namespace(request_namespace, &old.metadata)?;
    admission::review_namespace(request_namespace, &new.metadata)?;
    check_rollout_update(&old.spec, &new.spec).map_err(violation)
}

fn violation(violation: RolloutViolation) -> Rejection {
    Rejection {
        code: 400,
        message: violation.to_string(),
        reason: violation.reason(),
    }
}

fn bad_request(reason: &'static str, message: impl Into<String>) -> Rejection {
    Rejection {
        code: 400,
        message: message.into(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Templates from a map: `namespace/kind/name` → containers.
    struct Templates(BTreeMap<String, Vec<&'static str>>);

    impl TemplateLookup for Templates {
        fn template<'a>(
            &'a self,
            namespace: &'a str,
            workload: &'a WorkloadRef,
        ) -> Pin<Box<dyn Future<Output = Lookup<PodTemplateSpec>> + Send + 'a>> {
            let key = format!("{namespace}/{}/{}", workload.kind, workload.name);
            let found = self.0.get(&key).map(|containers| {
                serde_json::from_value(serde_json::json!({
                    "spec": {"containers": containers.iter().map(|name| serde_json::json!({"name": name})).collect::<Vec<_>>()}
                }))
                .expect("a template")
            });
            Box::pin(async move {
                match found {
                    Some(template) => Lookup::Found(template),
                    None => Lookup::NotFound,
                }
            })
        }
    }

    fn templates() -> Templates {
        Templates(BTreeMap::from([(
            "shop/Deployment/web".to_owned(),
            vec!["app", "proxy"],
        )]))
    }

    fn review(
        operation: &str,
        namespace: &str,
        object: serde_json::Value,
        old: Option<serde_json::Value>,
    ) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "crr.dev", "version": "v1alpha1", "kind": "ContainerRecreateRollout"},
                "resource": {"group": "crr.dev", "version": "v1alpha1", "resource": "containerrecreaterollouts"},
                "operation": operation, "namespace": namespace,
                "userInfo": {"username": "alice"},
                "object": object, "oldObject": old,
            }
        }))
        .unwrap()
    }

    fn rollout(name: &str, workload: &str, containers: &[&str]) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {
                "target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workload}},
                "containers": containers,
            }
        })
    }

    async fn admit(body: Vec<u8>) -> (Verdict, String) {
        let (review, verdict) = review_rollout(&body, &templates()).await;
        let message = review
            .response
            .map(|r| r.result.message)
            .unwrap_or_default();
        (verdict, message)
    }

    #[tokio::test]
    async fn a_rollout_of_an_existing_workload_and_container_is_allowed() {
        let (verdict, _) = admit(review(
            "CREATE",
            "shop",
            rollout("nightly", "web", &["app"]),
            None,
        ))
        .await;
        assert_eq!(verdict, Verdict::Allowed);
    }

    #[tokio::test]
    async fn a_container_the_template_lacks_is_refused_by_name() {
        let (verdict, message) = admit(review(
            "CREATE",
            "shop",
            rollout("nightly", "web", &["app", "cache"]),
            None,
        ))
        .await;
        assert_eq!(verdict, Verdict::Denied("RolloutMissingContainers"));
        assert!(message.contains("no container cache"), "{message}");
    }

    #[tokio::test]
    async fn a_missing_workload_a_bad_spec_and_another_namespace_are_refused() {
        let (verdict, message) = admit(review(
            "CREATE",
            "shop",
            rollout("nightly", "api", &["app"]),
            None,
        ))
        .await;
        assert_eq!(verdict, Verdict::Denied("RolloutWorkloadNotFound"));
        assert!(message.contains("Deployment/api not found"), "{message}");
        let (verdict, _) = admit(review(
            "CREATE",
            "shop",
            rollout("nightly", "web", &[]),
            None,
        ))
        .await;
        assert_eq!(verdict, Verdict::Denied("RolloutContainersEmpty"));
        let (verdict, _) = admit(review(
            "CREATE",
            "other",
            rollout("nightly", "web", &["app"]),
            None,
        ))
        .await;
        assert_eq!(verdict, Verdict::Denied("NamespaceMismatch"));
    }

    #[tokio::test]
    async fn an_update_may_only_pause_or_resume() {
        let old = rollout("nightly", "web", &["app"]);
        let mut paused = old.clone();
        paused["spec"]["paused"] = serde_json::json!(true);
        let (verdict, _) = admit(review("UPDATE", "shop", paused, Some(old.clone()))).await;
        assert_eq!(verdict, Verdict::Allowed);
        let changed = rollout("nightly", "web", &["proxy"]);
        let (verdict, message) = admit(review("UPDATE", "shop", changed, Some(old))).await;
        assert_eq!(verdict, Verdict::Denied("RolloutImmutable"));
        assert!(message.contains("containers changed"), "{message}");
    }

    #[tokio::test]
    async fn unreadable_bodies_are_invalid_not_panics() {
        let (_, verdict) = review_rollout(b"{", &templates()).await;
        assert_eq!(verdict, Verdict::Invalid);
    }
}
