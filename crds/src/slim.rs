//! What a controller's store keeps of a ContainerRecreateRequest: everything crr decides on, none
//! of the bulk a tenant can add and no component reads.
//!
//! A request is admitted up to the webhook's review cap (256 KiB), and most of that can be the
//! tenant's: annotations, labels, and the copies of the pod's preStop handlers and ports the
//! webhook injects into `spec.containers` (each component runs the live pod's handlers, never
//! the request's). [`drop_tenant_bulk`] takes all of that off before an object reaches a store,
//! so a store's size follows the number of requests, not their bytes. The operator and the node
//! daemon both call it from their watches' `modify` step, and on the answers to their writes.

use crate::v1beta1::ContainerRecreateRequest;

/// Requests per page of the operator's request watch's lists. A page is held about three times
/// before its requests are slimmed (the body, its text, the requests decoded whole), and a
/// request can be as large as the webhook's 256 KiB review cap lets it be: 20 of the largest are
/// 5 MiB of JSON, where kube's default page of 500 would be 125 MiB, past the operator's memory
/// limit. With 50 a page, the relist after an API server restart under a tenant's 250 requests
/// of 190 KiB took both replicas from 45 to 79 MiB (2026-12-03). A flood of 20,000 small
/// requests is listed in 1,000 pages. The node daemon, with half the memory and only its node's
/// requests, pages smaller (`crr-node-daemon`'s `view::REQUEST_PAGE`).
pub const REQUEST_PAGE: u32 = 20;

/// The label prefixes crr sets and reads on a request: `crr.apps.kruise.io/` (node name, pod
/// UID, active) and `crr.dev/` (the rollout or trigger that made it).
pub const CRR_LABEL_PREFIXES: [&str; 2] = ["crr.apps.kruise.io/", "crr.dev/"];

/// Drops what no component reads of a request: `managedFields`, annotations, owner references
/// but a ContainerRecreateRollout's controller reference (the rollout that made it, by UID),
/// labels outside [`CRR_LABEL_PREFIXES`], and the injected preStop and ports copies. The
/// identity, finalizers, deletion time, the rest of the spec and the whole status stay.
pub fn drop_tenant_bulk(crr: &mut ContainerRecreateRequest) {
    let metadata = &mut crr.metadata;
    metadata.managed_fields = None;
    metadata.annotations = None;
    metadata.owner_references = metadata
        .owner_references
        .take()
        .and_then(|owners| {
            owners.into_iter().find(|owner| {
                owner.controller == Some(true) && owner.kind == "ContainerRecreateRollout"
            })
        })
        .map(|owner| vec![owner]);
    if let Some(labels) = metadata.labels.as_mut() {
        labels.retain(|key, _| is_crr_label(key));
    }
    for container in &mut crr.spec.containers {
        container.pre_stop = None;
        container.ports = None;
    }
}

/// Whether crr sets or reads the request label `key`.
pub fn is_crr_label(key: &str) -> bool {
    CRR_LABEL_PREFIXES
        .iter()
        .any(|prefix| key.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;
    use crate::v1beta1::{ContainerRecreateRequestContainer, ProbeHandler};
    use k8s_openapi::api::core::v1::{ContainerPort, ExecAction};

    #[test]
    fn the_tenants_bulk_goes_and_what_crr_reads_stays() {
        let mut crr = ContainerRecreateRequest::new("r", Default::default());
        crr.metadata.annotations = Some([("big".to_owned(), "a".repeat(190_000))].into());
        crr.metadata.finalizers = Some(vec![keys::FINALIZER_UNREADY_ACQUIRED.to_owned()]);
        crr.metadata.labels = Some(
            [
                (keys::LABEL_ACTIVE, "true"),
                (keys::LABEL_POD_UID, "uid"),
                (keys::LABEL_ROLLOUT, "nightly"),
                ("tenant.example/big", "v"),
            ]
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .into(),
        );
        crr.spec.pod_name = "pod".into();
        crr.spec.containers = vec![ContainerRecreateRequestContainer {
            name: "app".into(),
            pre_stop: Some(ProbeHandler {
                exec: Some(ExecAction {
                    command: Some(vec!["x".repeat(50_000)]),
                }),
                ..Default::default()
            }),
            ports: Some(vec![ContainerPort {
                container_port: 80,
                ..Default::default()
            }]),
            status_context: None,
        }];
        let whole = crr.clone();
        drop_tenant_bulk(&mut crr);
        assert!(serde_json::to_vec(&crr).unwrap().len() < 600, "{crr:#?}");
        assert_eq!(crr.metadata.annotations, None);
        let labels: Vec<_> = crr
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            labels,
            [keys::LABEL_ACTIVE, keys::LABEL_POD_UID, keys::LABEL_ROLLOUT]
        );
        assert_eq!(crr.metadata.finalizers, whole.metadata.finalizers);
        assert_eq!(crr.spec.containers[0].name, "app");
        assert_eq!(crr.spec.containers[0].pre_stop, None);
        assert_eq!(crr.spec.containers[0].ports, None);
        assert_eq!(crr.spec.pod_name, whole.spec.pod_name);
        assert_eq!(crr.status, whole.status);
    }
}
