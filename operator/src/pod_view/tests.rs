use super::*;
use serde_json::json;

/// A pod a tenant made fat: 1 MB of env, 200 KB of annotations, a termination message.
fn fat_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "tenant", "uid": "pod-uid", "resourceVersion": "42",
            "creationTimestamp": "2026-11-28T09:00:00Z",
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s",
                 "controller": true, "blockOwnerDeletion": true},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "c"}],
            "labels": {"app": "web", "crr.apps.kruise.io/readiness-gate": "true"},
            "annotations": {"big": "a".repeat(200_000)},
            "managedFields": [{"manager": "kubectl", "operation": "Apply",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": "node-a",
            "readinessGates": [{"conditionType": "KruisePodReady"}],
            "containers": [{"name": "app", "image": "app:1",
                            "env": [{"name": "BIG", "value": "e".repeat(1_000_000)}]},
                           {"name": "sidecar", "image": "proxy:1"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "KruisePodReady", "status": "False",
                 "message": "[{\"userAgent\":\"ContainerRecreateRequest\",\"key\":\"tenant/r\"}]"},
                {"type": "Ready", "status": "False"},
            ],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 1, "image": "app:1",
                 "imageID": "sha256:1", "containerID": "containerd://app-2",
                 "state": {"running": {"startedAt": "2026-11-28T10:00:00Z"}},
                 "lastState": {"terminated": {"exitCode": 137,
                                              "message": "m".repeat(4_000)}}},
                {"name": "sidecar", "ready": false, "restartCount": 0, "image": "proxy:1",
                 "imageID": "sha256:2", "containerID": "containerd://sidecar-1",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            ],
        },
    })
}

#[test]
fn a_fat_pod_is_kept_in_about_a_kilobyte_with_what_the_operator_reads() {
    let whole_json = fat_pod();
    let whole: Pod = serde_json::from_value(whole_json.clone()).unwrap();
    let slim: SlimPod = serde_json::from_value(whole_json.clone()).unwrap();
    let bytes = serde_json::to_vec(&slim).unwrap().len();
    let whole_bytes = serde_json::to_vec(&whole_json).unwrap().len();
    assert!(whole_bytes > 1_200_000, "{whole_bytes}");
    assert!(bytes < 1_200, "{bytes} bytes: {slim:#?}");
    // What the operator reads is there as the whole pod has it.
    assert_eq!(slim.metadata.uid, whole.metadata.uid);
    assert_eq!(
        slim.metadata.resource_version,
        whole.metadata.resource_version
    );
    assert_eq!(
        crate::readiness::has_readiness_gate(&slim),
        crate::readiness::has_readiness_gate(&whole)
    );
    assert!(crate::readiness::has_readiness_gate(&slim));
    assert_eq!(
        slim.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-a")
    );
    assert_eq!(
        crate::readiness::holders(&slim).unwrap(),
        crate::readiness::holders(&whole).unwrap()
    );
    assert_eq!(
        slim.status.as_ref().unwrap().conditions,
        whole.status.as_ref().unwrap().conditions
    );
    let app = &slim
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        (
            app.name.as_str(),
            app.ready,
            app.restart_count,
            app.container_id.as_deref()
        ),
        ("app", true, 1, Some("containerd://app-2"))
    );
    assert!(app.state.as_ref().unwrap().running.is_some());
    assert!(
        app.last_state.is_none(),
        "termination messages are not kept"
    );
    let sidecar = &slim
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[1];
    assert!(sidecar.state.as_ref().unwrap().running.is_none());
    assert_eq!(slim.metadata.labels, whole.metadata.labels);
    let owner = |pod: &Pod| {
        kube::ResourceExt::owner_references(pod)
            .iter()
            .map(|owner| {
                (
                    owner.kind.clone(),
                    owner.name.clone(),
                    owner.uid.clone(),
                    owner.controller,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(owner(&slim), owner(&whole)[..1], "the controller's only");
    assert_eq!(
        slim.metadata.creation_timestamp,
        whole.metadata.creation_timestamp
    );
    // Nothing a tenant sets freely.
    assert!(slim.metadata.annotations.is_none());
    assert!(slim.metadata.managed_fields.is_none());
    assert!(slim.spec.as_ref().unwrap().containers.is_empty());
    // Slimming a pod in memory keeps the same.
    assert_eq!(SlimPod::of(&whole), slim);
}

#[test]
fn a_deleted_or_bare_pod_decodes() {
    let slim: SlimPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u",
                     "deletionTimestamp": "2026-11-28T10:00:00Z"},
    }))
    .unwrap();
    assert!(slim.metadata.deletion_timestamp.is_some());
    assert!(slim.spec.is_none() && slim.status.is_none());
    assert_eq!(kube::ResourceExt::name_any(&slim), "p");
    let empty: SlimPod = serde_json::from_value(json!({})).unwrap();
    assert_eq!(empty, SlimPod::default());
}
