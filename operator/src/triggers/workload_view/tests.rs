//! The slim workload against the whole object: a tenant-fattened Deployment (1.2 MB) is kept in
//! about 500 bytes (serialized), and every decision the trigger wing makes on it is the one it made on the whole object
//! decoded the old way (`DynamicObject`, the template parsed into a `PodSpec`).

use std::collections::BTreeMap;

use crr_crds::keys;
use k8s_openapi::api::core::v1::PodSpec;
use kube::core::{DynamicObject, ObjectList, WatchEvent};
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value, json};

use super::*;
use crate::triggers::annotations;
use crate::triggers::context::api_resource;
use crate::triggers::controller::entry_of;
use crate::triggers::index::{
    ConfigEvent, ObjectKey, TriggerIndex, WorkloadEntry, WorkloadEvent, WorkloadKey,
};
use crate::triggers::refs::ConfigRef;

/// A Deployment a tenant made fat: 1 MB of env values, 200 KB of foreign annotations,
/// `managedFields`, a status; it uses a ConfigMap through a volume, a Secret through a
/// `secretKeyRef`, more through `envFrom` and a projected volume, and runs `image`.
fn fat_deployment(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "tenant", "uid": "uid-web", "resourceVersion": "42",
            "generation": 7, "labels": {"app": "web"},
            "annotations": {
                "big": "a".repeat(200_000),
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
                keys::ANNOTATION_RECREATE_SCHEDULE: "0 3 * * *",
                keys::ANNOTATION_CONFIG_HASHES: r#"{"configmap/app-config":"0123"}"#,
                keys::RELOADER_SECRETS: "password",
            },
            "managedFields": [{"manager": "kubectl", "operation": "Apply",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"t": "b".repeat(1_000)}},
                "spec": {
                    "initContainers": [{"name": "init", "image": "busybox",
                                        "envFrom": [{"configMapRef": {"name": "init-only"}}]}],
                    "containers": [
                        {"name": "app", "image": "app:1", "command": ["run"], "args": ["--x"],
                         "env": [
                            {"name": "BIG", "value": "e".repeat(1_000_000)},
                            {"name": "PASSWORD",
                             "valueFrom": {"secretKeyRef": {"name": "password", "key": "p"}}},
                            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                         ],
                         "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}]},
                        {"name": "sidecar", "image": image,
                         "envFrom": [{"configMapRef": {"name": "bulk"}, "prefix": "B_"}],
                         "volumeMounts": [{"name": "all", "mountPath": "/etc/all", "readOnly": true},
                                          {"name": "scratch", "mountPath": "/tmp"}]},
                    ],
                    "volumes": [
                        {"name": "config", "configMap": {"name": "app-config",
                                                         "items": [{"key": "a", "path": "a"}]}},
                        {"name": "all", "projected": {"sources": [
                            {"configMap": {"name": "settings"}},
                            {"secret": {"name": "tls"}},
                            {"serviceAccountToken": {"path": "token"}},
                        ]}},
                        {"name": "unmounted", "secret": {"secretName": "nobody-mounts-me"}},
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "csi", "csi": {"driver": "x", "volumeAttributes": {"k": "c".repeat(10_000)}}},
                    ],
                },
            },
        },
        "status": {"observedGeneration": 7, "conditions": [{"type": "Available", "status": "True"}]},
    })
}

/// What the index kept of a workload before the slim view: the whole object's annotations
/// under crr's or Reloader's prefix, the template parsed whole into a `PodSpec`.
fn old_entry(object: &DynamicObject, reloader: bool) -> Option<WorkloadEntry> {
    let annotations = object.annotations();
    if !annotations::has_trigger_annotations(annotations, reloader) {
        return None;
    }
    let workload = crr_runtime::workload::from_object(object);
    let spec: PodSpec = workload
        .template
        .and_then(|template| template.spec)
        .unwrap_or_default();
    Some(WorkloadEntry {
        uid: workload.uid,
        annotations: annotations
            .iter()
            .filter(|(key, _)| {
                key.starts_with("crr.dev/") || key.contains("reloader.stakater.com/")
            })
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        containers: spec.containers.iter().map(|c| c.name.clone()).collect(),
        references: refs::references(&spec),
        mounted: refs::mounted(&spec),
        references_refused: None,
    })
}

/// Whether the whole object runs Reloader, as the watch told it before the slim view.
fn old_runs_reloader(object: &DynamicObject) -> bool {
    object.data["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|container| container["image"].as_str())
        .any(|image| {
            let path = image.split(['@', ':']).next().unwrap_or_default();
            path == "stakater/reloader" || path.ends_with("/stakater/reloader")
        })
}

/// The bytes of a view serialized as JSON (as `pod_view`'s slim pod is measured): its metadata,
/// container names, each used object with its users, the Reloader flag.
fn serialized_bytes(view: &SlimWorkload) -> usize {
    let references: BTreeMap<String, &std::collections::BTreeSet<String>> = view
        .references
        .iter()
        .map(|(object, users)| (object.to_string(), users))
        .collect();
    serde_json::to_vec(&json!({
        "metadata": view.metadata,
        "containers": view.containers,
        "references": references,
        "runsReloader": view.runs_reloader,
    }))
    .map_or(usize::MAX, |bytes| bytes.len())
}

fn key() -> WorkloadKey {
    WorkloadKey {
        kind: "Deployment",
        namespace: "tenant".to_owned(),
        name: "web".to_owned(),
    }
}

/// The workloads the index wakes and the users it names, fed `entry` and then a move of every
/// object `entry` uses (and one it does not).
fn index_decisions(entry: Option<WorkloadEntry>) -> Vec<Vec<WorkloadKey>> {
    let mut index = TriggerIndex::default();
    let mut decisions = vec![
        index
            .apply_workload(WorkloadEvent::Seen {
                key: key(),
                entry: entry.clone(),
            })
            .into_iter()
            .collect(),
    ];
    let mut objects: Vec<ConfigRef> = entry
        .map(|entry| entry.references.into_keys().collect())
        .unwrap_or_default();
    objects.push(ConfigRef::config_map("init-only"));
    objects.push(ConfigRef::secret("nobody-mounts-me"));
    for object in objects {
        let object = ObjectKey {
            namespace: "tenant".to_owned(),
            object,
        };
        for version in ["1", "2"] {
            decisions.push(index.apply_config(&ConfigEvent::Seen {
                object: object.clone(),
                version: version.to_owned(),
            }));
        }
        decisions.push(index.users(&object));
    }
    decisions
}

#[test]
fn a_fat_deployment_is_kept_small_with_every_trigger_decision_unchanged() {
    for image in ["proxy:1", "ghcr.io/stakater/reloader:v1.4.2"] {
        let whole_json = fat_deployment(image);
        let whole_bytes = serde_json::to_vec(&whole_json).unwrap().len();
        assert!(whole_bytes > 1_200_000, "{whole_bytes}");
        let whole: DynamicObject = serde_json::from_value(whole_json.clone()).unwrap();
        let slim: SlimWorkload = serde_json::from_slice(&serde_json::to_vec(&whole_json).unwrap())
            .expect("decoded from the API server's bytes");
        assert_eq!(
            serde_json::from_value::<SlimWorkload>(whole_json).unwrap(),
            slim,
            "decoded from a value alike"
        );

        let bytes = serialized_bytes(&slim);
        assert!(bytes < 1_000, "{bytes} bytes: {slim:#?}");

        // Identity and what the watcher reads (the resourceVersion it resumes from).
        assert_eq!(slim.name_any(), whole.name_any());
        assert_eq!(slim.namespace(), whole.namespace());
        assert_eq!(slim.uid(), whole.uid());
        assert_eq!(slim.resource_version(), whole.resource_version());
        // Reloader is told alike.
        assert_eq!(slim.runs_reloader, old_runs_reloader(&whole), "{image}");
        assert_eq!(slim.runs_reloader, image.contains("reloader"));
        // The triggers read alike, with Reloader's annotations honoured or not.
        for reloader in [false, true] {
            assert_eq!(
                annotations::has_trigger_annotations(slim.annotations(), reloader),
                annotations::has_trigger_annotations(whole.annotations(), reloader)
            );
            assert_eq!(
                annotations::parse(slim.annotations(), reloader),
                annotations::parse(whole.annotations(), reloader)
            );
            let old = old_entry(&whole, reloader);
            let new = entry_of(slim.clone(), reloader);
            assert!(new.is_some());
            assert_eq!(new, old, "the index's entry");
            assert_eq!(index_decisions(new), index_decisions(old));
        }
        // What the entry says the template uses.
        let entry = entry_of(slim.clone(), false).unwrap();
        assert_eq!(entry.containers, ["app", "sidecar"]);
        let users = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect();
        assert_eq!(
            entry.references,
            References::from([
                (ConfigRef::config_map("app-config"), users(&["app"])),
                (ConfigRef::config_map("bulk"), users(&["sidecar"])),
                (ConfigRef::config_map("settings"), users(&["sidecar"])),
                (ConfigRef::secret("password"), users(&["app"])),
                (ConfigRef::secret("tls"), users(&["sidecar"])),
            ])
        );
        // Nothing a tenant sets freely.
        assert_eq!(
            slim.annotations().keys().collect::<Vec<_>>(),
            [
                keys::ANNOTATION_CONFIG_HASHES,
                keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE,
                keys::ANNOTATION_RECREATE_SCHEDULE,
                keys::RELOADER_SECRETS,
            ]
        );
        assert!(slim.metadata.labels.is_none() && slim.metadata.managed_fields.is_none());
        assert_eq!(slim.metadata.generation, None);
    }
}

#[test]
fn reloader_is_told_by_its_image() {
    let deployment = |image: &str| -> SlimWorkload {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x", "namespace": "y"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
        }))
        .expect("a deployment")
    };
    for image in [
        "stakater/reloader",
        "stakater/reloader:v1.4.2",
        "ghcr.io/stakater/reloader:v1.4.2",
        "docker.io/stakater/reloader@sha256:0123",
    ] {
        assert!(deployment(image).runs_reloader, "{image}");
    }
    for image in [
        "busybox",
        "example.com/stakater/reloader-helper:1",
        "nginx:stakater",
    ] {
        assert!(!deployment(image).runs_reloader, "{image}");
    }
    let init_only: SlimWorkload = serde_json::from_value(json!({
        "spec": {"template": {"spec": {
            "initContainers": [{"name": "i", "image": "stakater/reloader"}],
            "containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    assert!(
        !init_only.runs_reloader,
        "only regular containers, as before"
    );
}

#[test]
fn only_the_annotations_a_trigger_reads_are_kept() {
    let mut annotations: BTreeMap<String, String> = TRIGGER_ANNOTATIONS
        .iter()
        .map(|key| ((*key).to_owned(), format!("value of {key}")))
        .collect();
    let read = annotations.clone();
    for foreign in [
        "crr.dev/note",
        "deployment.reloader.stakater.com/pause-period",
        "example.com/x",
    ] {
        annotations.insert(foreign.to_owned(), "x".repeat(1_000));
    }
    let slim: SlimWorkload = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": annotations},
    }))
    .unwrap();
    assert_eq!(slim.annotations(), &read);

    for none in [
        json!({"metadata": {"name": "web"}}),
        json!({"metadata": {"name": "web", "annotations": null}}),
        json!({"metadata": {"name": "web", "annotations": {}}}),
        json!({"metadata": {"name": "web", "annotations": {"example.com/x": "y"}}}),
    ] {
        let slim: SlimWorkload = serde_json::from_value(none.clone()).unwrap();
        assert_eq!(slim.metadata.annotations, None, "{none}");
        assert_eq!(entry_of(slim, true), None, "no trigger: not indexed");
    }
}

#[test]
fn a_bare_or_odd_workload_decodes_to_less() {
    let empty: SlimWorkload = serde_json::from_value(json!({})).unwrap();
    assert_eq!(empty, SlimWorkload::default());
    for odd in [
        json!({"metadata": {"name": "w"}, "spec": null}),
        json!({"metadata": {"name": "w"}, "spec": {"template": null}}),
        json!({"metadata": {"name": "w"}, "spec": {"template": {"spec": {"containers": null}}}}),
        json!({"metadata": {"name": "w"}, "spec": {"template": {"spec": {
            "containers": [], "volumes": null}}}}),
    ] {
        let slim: SlimWorkload = serde_json::from_value(odd.clone()).unwrap();
        assert_eq!(slim.name_any(), "w", "{odd}");
        assert!(slim.containers.is_empty() && slim.references.is_empty());
        assert!(!slim.runs_reloader);
    }
    // A reference with no name and a mount of no volume use nothing, as before.
    let slim: SlimWorkload = serde_json::from_value(json!({
        "spec": {"template": {"spec": {"containers": [{"name": "c",
            "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"key": "k"}}}],
            "envFrom": [{"secretRef": {"name": ""}}],
            "volumeMounts": [{"name": "missing", "mountPath": "/m"}]}]}}},
    }))
    .unwrap();
    assert_eq!(slim.containers, ["c"]);
    assert!(slim.references.is_empty(), "{:?}", slim.references);
}

#[test]
fn it_is_addressed_as_the_kind_it_is_watched_as_and_decodes_lists_and_watch_events() {
    let resource = api_resource("StatefulSet");
    assert_eq!(
        SlimWorkload::url_path(&resource, Some("shop")),
        "/apis/apps/v1/namespaces/shop/statefulsets"
    );
    assert_eq!(
        SlimWorkload::url_path(&resource, None),
        "/apis/apps/v1/statefulsets"
    );
    assert_eq!(SlimWorkload::kind(&resource), "StatefulSet");
    assert_eq!(SlimWorkload::api_version(&resource), "apps/v1");

    let fat = fat_deployment("app:1");
    let list: ObjectList<SlimWorkload> = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DeploymentList",
        "metadata": {"resourceVersion": "43", "continue": "next"},
        "items": [fat, {"metadata": {"name": "other", "namespace": "tenant"}}],
    }))
    .unwrap();
    assert_eq!(list.items.len(), 2);
    assert_eq!(list.metadata.continue_.as_deref(), Some("next"));
    assert_eq!(list.items[0].references.len(), 5);

    let event: WatchEvent<SlimWorkload> = serde_json::from_slice(
        &serde_json::to_vec(&json!({"type": "MODIFIED", "object": fat_deployment("app:1")}))
            .unwrap(),
    )
    .unwrap();
    let WatchEvent::Modified(slim) = event else {
        panic!("a modification: {event:?}");
    };
    assert_eq!(slim.resource_version().as_deref(), Some("42"));
    let bookmark: WatchEvent<SlimWorkload> = serde_json::from_value(json!({
        "type": "BOOKMARK",
        "object": {"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"resourceVersion": "50"}},
    }))
    .unwrap();
    assert!(matches!(bookmark, WatchEvent::Bookmark(_)));
}

/// What the triggers read of the slim view is what they read of the whole workload: every
/// annotation a trigger reads, set to a value it accepts, survives the decoding.
#[test]
fn the_triggers_read_the_same_of_the_slim_view_as_of_the_workload() {
    let whole: BTreeMap<String, String> = [
        (keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE, "true"),
        (keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE, "25%"),
        (keys::ANNOTATION_RECREATE_SCHEDULE, "0 3 * * *"),
        (keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE, "Europe/Berlin"),
        (keys::ANNOTATION_RECREATE_CONTAINERS, "app"),
        (keys::ANNOTATION_RECREATE_WINDOW, "Mon-Fri 01:00-05:00"),
        (
            keys::ANNOTATION_RESTART_REQUESTED_AT,
            "2026-11-29T20:00:00Z",
        ),
        ("example.com/x", "y"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect();
    let slim: SlimWorkload = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": whole},
    }))
    .unwrap();
    let (from_slim, problems) = crate::triggers::annotations::parse(slim.annotations(), false);
    assert_eq!(problems, []);
    assert_eq!(
        from_slim,
        crate::triggers::annotations::parse(&whole, false).0
    );
    assert!(from_slim.window.is_some() && from_slim.schedule.is_some());
    assert!(from_slim.restart.is_some());
}
