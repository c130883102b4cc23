//! Which requests a pod event concerns (the request wing's pod metadata watch).
//!
//! The operator watches pods metadata-only (see `controller`), so a pod event carries only the
//! pod's namespace, name and UID. It re-queues the unfinished requests in that namespace that
//! target the pod by UID label (the pod they were made for, also when it is being deleted) or by
//! name (a new pod that reuses the name, which makes the request's pod "gone").

use std::sync::Arc;

use crr_crds::keys;
use crr_crds::v1beta1::ContainerRecreateRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

/// The unfinished requests `requests` that target the pod described by `pod`.
pub fn requests_for_pod(
    requests: &[Arc<ContainerRecreateRequest>],
    pod: &ObjectMeta,
) -> Vec<ObjectRef<ContainerRecreateRequest>> {
    let (Some(namespace), Some(name)) = (pod.namespace.as_deref(), pod.name.as_deref()) else {
        return Vec::new();
    };
    let uid = pod.uid.as_deref();
    requests
        .iter()
        .filter(|crr| crr.namespace().as_deref() == Some(namespace))
        .filter(|crr| {
            crr.metadata.deletion_timestamp.is_none() && !crr_crds::status::is_finished(crr)
        })
        .filter(|crr| {
            let labelled_uid = crr.labels().get(keys::LABEL_POD_UID).map(String::as_str);
            (uid.is_some() && labelled_uid == uid) || crr.spec.pod_name == name
        })
        .map(|crr| ObjectRef::from_obj(crr.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_crds::v1beta1::{ContainerRecreateRequestSpec, ContainerRecreateRequestStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::BTreeMap;

    fn crr(name: &str, namespace: &str, pod: &str, uid: &str) -> ContainerRecreateRequest {
        ContainerRecreateRequest {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(
                    keys::LABEL_POD_UID.to_owned(),
                    uid.to_owned(),
                )])),
                ..Default::default()
            },
            spec: ContainerRecreateRequestSpec {
                pod_name: pod.to_owned(),
                ..Default::default()
            },
            status: None,
        }
    }

    fn pod(namespace: &str, name: &str, uid: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            uid: Some(uid.to_owned()),
            ..Default::default()
        }
    }

    fn names(refs: Vec<ObjectRef<ContainerRecreateRequest>>) -> Vec<String> {
        let mut names: Vec<_> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn pod_event_requeues_every_unfinished_request_of_that_pod() {
        let mut finished = crr("done", "ns", "web", "u1");
        finished.status = Some(ContainerRecreateRequestStatus {
            completion_time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        });
        let mut deleting = crr("deleting", "ns", "web", "u1");
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let requests: Vec<_> = [
            crr("a", "ns", "web", "u1"),
            crr("b", "ns", "web", "u1"),
            crr("other-pod", "ns", "db", "u2"),
            crr("other-ns", "prod", "web", "u1"),
            finished,
            deleting,
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        assert_eq!(
            names(requests_for_pod(&requests, &pod("ns", "web", "u1"))),
            vec!["a", "b"]
        );
    }

    #[test]
    fn replacement_pod_with_the_same_name_requeues_by_name() {
        let requests = vec![Arc::new(crr("a", "ns", "web", "old-uid"))];
        assert_eq!(
            names(requests_for_pod(&requests, &pod("ns", "web", "new-uid"))),
            vec!["a"]
        );
    }

    #[test]
    fn request_is_found_by_its_pod_uid_label_alone() {
        let requests = vec![Arc::new(crr("a", "ns", "", "u1"))];
        assert_eq!(
            names(requests_for_pod(&requests, &pod("ns", "web", "u1"))),
            vec!["a"]
        );
    }
}
