//! The checked-in CRD YAML is exactly what the types generate, and it carries what clients of the
//! upstream CRD rely on.

use crr_crds::keys;

const CHECKED_IN: &str = include_str!("../crr.yaml");

#[test]
fn checked_in_crd_yaml_matches_the_generated_one() {
    let generated = crr_crds::crd_yaml().expect("CRD generation");
    assert!(
        generated == CHECKED_IN,
        "crds/crr.yaml is stale: run `cargo run -p crr-crds --bin crdgen crds/crr.yaml`"
    );
}

#[test]
fn crd_serves_both_versions_and_stores_v1beta1_with_webhook_conversion() {
    let crd = crr_crds::crd(&Default::default()).expect("CRD generation");
    assert_eq!(crd.metadata.name.as_deref(), Some(keys::CRD_NAME));
    assert_eq!(crd.spec.group, keys::GROUP);
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["crr".to_owned()]));
    let versions: Vec<_> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(
        versions,
        vec![("v1alpha1", true, false), ("v1beta1", true, true)]
    );
    for version in &crd.spec.versions {
        let subresources = version.subresources.as_ref().expect("subresources");
        assert!(
            subresources.status.is_some(),
            "{} has a status subresource",
            version.name
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.json_path.as_str()))
            .collect();
        // Upstream's columns; v1beta1 (the version kubectl prefers) adds SUCCEEDED before AGE,
        // since a Completed request may have failed.
        let mut expected = vec![
            ("PHASE", ".status.phase"),
            ("POD", ".spec.podName"),
            (
                "NODE",
                ".metadata.labels.crr\\.apps\\.kruise\\.io/node-name",
            ),
            ("AGE", ".metadata.creationTimestamp"),
        ];
        if version.name == "v1beta1" {
            expected.insert(
                3,
                (
                    "SUCCEEDED",
                    ".status.conditions[?(@.type==\"Succeeded\")].status",
                ),
            );
        }
        assert_eq!(columns, expected, "{}", version.name);
    }
    let conversion = crd.spec.conversion.expect("conversion");
    assert_eq!(conversion.strategy, "Webhook");
    let service = conversion
        .webhook
        .and_then(|w| w.client_config)
        .and_then(|c| c.service)
        .expect("service");
    assert_eq!(service.path.as_deref(), Some(crr_crds::CONVERSION_PATH));
}

fn schema_of(version: &str) -> serde_json::Value {
    let crd = crr_crds::crd(&Default::default()).expect("CRD generation");
    let version = crd
        .spec
        .versions
        .into_iter()
        .find(|v| v.name == version)
        .expect("version");
    serde_json::to_value(
        version
            .schema
            .expect("schema")
            .open_api_v3_schema
            .expect("openAPIV3Schema"),
    )
    .unwrap()
}

#[test]
fn v1beta1_schema_has_upstream_enums_and_minimums() {
    let schema = schema_of("v1beta1");
    let spec = &schema["properties"]["spec"];
    assert_eq!(
        spec["required"],
        serde_json::json!(["containers", "podName"])
    );
    let strategy = &spec["properties"]["strategy"]["properties"];
    assert_eq!(
        strategy["failurePolicy"]["enum"],
        serde_json::json!(["Fail", "Ignore"])
    );
    for field in [
        "terminationGracePeriodSeconds",
        "unreadyGracePeriodSeconds",
        "minStartedSeconds",
    ] {
        assert_eq!(strategy[field]["minimum"], 0.0, "{field}");
    }
    assert_eq!(spec["properties"]["activeDeadlineSeconds"]["minimum"], 0.0);
    assert_eq!(
        spec["properties"]["ttlSecondsAfterFinished"]["minimum"],
        0.0
    );
    let status = &schema["properties"]["status"];
    assert_eq!(status["required"], serde_json::json!(["phase"]));
    assert_eq!(
        status["properties"]["phase"]["enum"],
        serde_json::json!(["Pending", "Recreating", "Succeeded", "Failed", "Completed"])
    );
    assert!(status["properties"]["containerStatusSnapshot"].is_object());
    assert_eq!(
        status["properties"]["conditions"]["x-kubernetes-list-type"],
        "map"
    );
    let container = &spec["properties"]["containers"]["items"]["properties"];
    for field in ["name", "preStop", "ports", "statusContext"] {
        assert!(container[field].is_object(), "container field {field}");
    }
    for handler in ["exec", "httpGet", "tcpSocket"] {
        assert!(
            container["preStop"]["properties"][handler].is_object(),
            "preStop.{handler}"
        );
    }
}

#[test]
fn user_durations_have_sane_maximums_in_both_versions() {
    use crr_crds::limits;
    for version in ["v1alpha1", "v1beta1"] {
        let schema = schema_of(version);
        let strategy = &schema["properties"]["spec"]["properties"]["strategy"]["properties"];
        for (field, maximum) in [
            (
                "terminationGracePeriodSeconds",
                limits::MAX_TERMINATION_GRACE_PERIOD_SECONDS,
            ),
            (
                "unreadyGracePeriodSeconds",
                limits::MAX_UNREADY_GRACE_PERIOD_SECONDS,
            ),
            (
                "minStartedSeconds",
                i64::from(limits::MAX_MIN_STARTED_SECONDS),
            ),
        ] {
            assert_eq!(
                strategy[field]["maximum"], maximum as f64,
                "{version} {field}"
            );
        }
    }
    let spec = &schema_of("v1beta1")["properties"]["spec"]["properties"];
    assert_eq!(
        spec["activeDeadlineSeconds"]["maximum"],
        limits::MAX_ACTIVE_DEADLINE_SECONDS as f64
    );
    assert_eq!(
        spec["ttlSecondsAfterFinished"]["maximum"],
        f64::from(limits::MAX_TTL_SECONDS_AFTER_FINISHED)
    );
}

#[test]
fn v1alpha1_schema_keeps_legacy_status_and_no_deadline_minimums() {
    let schema = schema_of("v1alpha1");
    let status = &schema["properties"]["status"]["properties"];
    assert!(status["containerStatusSnapshot"].is_null());
    assert!(status["conditions"].is_null());
    assert!(status["containerRecreateStates"].is_object());
    let spec = &schema["properties"]["spec"]["properties"];
    assert!(spec["activeDeadlineSeconds"]["minimum"].is_null());
    assert!(spec["ttlSecondsAfterFinished"]["minimum"].is_null());
}

#[test]
fn every_schema_property_has_a_description_for_kubectl_explain() {
    fn walk(path: &str, schema: &serde_json::Value, missing: &mut Vec<String>) {
        if !schema.is_object() {
            return;
        }
        if let Some(properties) = schema["properties"].as_object() {
            for (name, property) in properties {
                let path = format!("{path}.{name}");
                if property["description"].as_str().is_none_or(str::is_empty)
                    && path != ".metadata"
                    && path != ".apiVersion"
                    && path != ".kind"
                {
                    missing.push(path.clone());
                }
                walk(&path, property, missing);
            }
        }
        walk(path, &schema["items"], missing);
    }
    for version in ["v1alpha1", "v1beta1"] {
        let mut missing = Vec::new();
        walk("", &schema_of(version), &mut missing);
        assert!(
            missing.is_empty(),
            "{version} fields without description: {missing:?}"
        );
    }
}

const CHECKED_IN_ROLLOUT: &str = include_str!("../rollout.yaml");

#[test]
fn checked_in_rollout_crd_yaml_matches_the_generated_one() {
    let generated = crr_crds::rollout_crd_yaml().expect("rollout CRD generation");
    assert!(
        generated == CHECKED_IN_ROLLOUT,
        "crds/rollout.yaml is stale: run `cargo run -p crr-crds --bin crdgen -- --rollout crds/rollout.yaml`"
    );
}

#[test]
fn rollout_crd_is_namespaced_with_status_short_name_and_columns() {
    let crd = crr_crds::rollout::crd().expect("rollout CRD generation");
    assert_eq!(crd.metadata.name.as_deref(), Some(keys::ROLLOUT_CRD_NAME));
    assert_eq!(crd.spec.group, keys::ROLLOUT_GROUP);
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.plural, keys::ROLLOUT_PLURAL);
    assert_eq!(crd.spec.names.short_names, Some(vec!["crro".to_owned()]));
    let [version] = crd.spec.versions.as_slice() else {
        panic!("one version");
    };
    assert_eq!(
        (version.name.as_str(), version.served, version.storage),
        (keys::ROLLOUT_VERSION, true, true)
    );
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let columns: Vec<_> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.priority.unwrap_or(0)))
        .collect();
    assert_eq!(
        columns,
        [
            ("PHASE", 0),
            ("TARGET", 0),
            ("RECREATED", 0),
            ("AGE", 0),
            ("REASON", 1),
            ("MESSAGE", 1)
        ]
    );
    let schema = serde_json::to_value(
        version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema"),
    )
    .unwrap();
    let spec = &schema["properties"]["spec"];
    assert_eq!(
        spec["required"],
        serde_json::json!(["containers", "target"])
    );
    assert_eq!(
        spec["properties"]["target"]["x-kubernetes-validations"][0]["rule"],
        "has(self.workloadRef) != has(self.selector)"
    );
    assert_eq!(
        spec["properties"]["maxUnavailable"]["x-kubernetes-int-or-string"],
        true
    );
    let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["items"]["properties"]["status"]["enum"],
        serde_json::json!(["True", "False", "Unknown"])
    );
}
