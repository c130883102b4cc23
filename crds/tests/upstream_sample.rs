//! The upstream documentation's sample manifest decodes in both versions with every field intact.

use crr_crds::{conversion, v1alpha1, v1beta1};

const SAMPLE: &str = include_str!("fixtures/upstream-sample.yaml");

fn assert_sample_spec(
    pod_name: &str,
    containers: &[v1beta1::ContainerRecreateRequestContainer],
    strategy: Option<&v1beta1::ContainerRecreateRequestStrategy>,
    active_deadline_seconds: Option<i64>,
    ttl_seconds_after_finished: Option<i32>,
) {
    assert_eq!(pod_name, "pod-name");
    let names: Vec<_> = containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["app", "sidecar"]);
    let strategy = strategy.expect("strategy");
    assert_eq!(strategy.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(strategy.failure_policy(), v1beta1::FailurePolicy::Fail);
    assert!(!strategy.ordered_recreate);
    assert!(!strategy.force_recreate);
    assert_eq!(strategy.termination_grace_period_seconds, Some(30));
    assert_eq!(strategy.unready_grace_period_seconds, Some(3));
    assert_eq!(strategy.min_started_seconds, 10);
    assert_eq!(active_deadline_seconds, Some(300));
    assert_eq!(ttl_seconds_after_finished, Some(1800));
}

#[test]
fn upstream_sample_decodes_as_v1alpha1() {
    let crr: v1alpha1::ContainerRecreateRequest =
        serde_saphyr::from_str(SAMPLE).expect("v1alpha1 sample");
    assert_eq!(crr.metadata.namespace.as_deref(), Some("pod-namespace"));
    assert_eq!(crr.metadata.name.as_deref(), Some("xxx"));
    let spec = &crr.spec;
    assert_sample_spec(
        &spec.pod_name,
        &spec.containers,
        spec.strategy.as_ref(),
        spec.active_deadline_seconds,
        spec.ttl_seconds_after_finished,
    );
}

#[test]
fn upstream_sample_decodes_as_v1beta1() {
    let yaml = SAMPLE.replace("apps.kruise.io/v1alpha1", "apps.kruise.io/v1beta1");
    let crr: v1beta1::ContainerRecreateRequest =
        serde_saphyr::from_str(&yaml).expect("v1beta1 sample");
    let spec = &crr.spec;
    assert_sample_spec(
        &spec.pod_name,
        &spec.containers,
        spec.strategy.as_ref(),
        spec.active_deadline_seconds,
        spec.ttl_seconds_after_finished,
    );
}

#[test]
fn upstream_sample_converts_to_v1beta1_json_and_back() {
    let crr: serde_json::Value = serde_saphyr::from_str(SAMPLE).expect("sample as JSON");
    let beta = conversion::convert_json(crr.clone(), "apps.kruise.io/v1beta1").expect("to v1beta1");
    assert_eq!(beta["apiVersion"], "apps.kruise.io/v1beta1");
    assert_eq!(beta["kind"], "ContainerRecreateRequest");
    assert_eq!(beta["spec"]["strategy"]["unreadyGracePeriodSeconds"], 3);
    let alpha = conversion::convert_json(beta, "apps.kruise.io/v1alpha1").expect("to v1alpha1");
    // Explicit `false` is omitted on the way (as Go's omitempty does); the objects are equal.
    let original: v1alpha1::ContainerRecreateRequest = serde_json::from_value(crr).unwrap();
    let round_tripped: v1alpha1::ContainerRecreateRequest = serde_json::from_value(alpha).unwrap();
    assert_eq!(round_tripped, original);
}

/// The kruise Go client's `UpdateStatus` on a v1alpha1 object sends the zero phase, `""`, and a
/// negative minStartedSeconds/TTL is legal upstream v1alpha1: the schema lets them through (no
/// enum, no minimum), and conversion to the stored v1beta1 decodes them.
#[test]
fn kruise_client_v1alpha1_objects_with_empty_phase_and_negative_durations_convert() {
    let object = serde_json::json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "r", "namespace": "default"},
        "spec": {"podName": "web-0", "containers": [{"name": "app"}],
                 "strategy": {"minStartedSeconds": -3}, "ttlSecondsAfterFinished": -1},
        "status": {"phase": ""},
    });
    let beta = conversion::convert_json(object, "apps.kruise.io/v1beta1").expect("to v1beta1");
    assert!(beta["status"].get("phase").is_none(), "{beta}");
    assert_eq!(beta["spec"]["strategy"]["minStartedSeconds"], -3);
    assert_eq!(beta["spec"]["ttlSecondsAfterFinished"], -1);

    let crd = crr_crds::crd(&Default::default()).expect("CRD");
    let schema = |name: &str| {
        let version = crd.spec.versions.iter().find(|v| v.name == name).unwrap();
        serde_json::to_value(version.schema.as_ref().unwrap().open_api_v3_schema.as_ref()).unwrap()
    };
    let (alpha, beta) = (schema("v1alpha1"), schema("v1beta1"));
    let phase =
        |schema: &serde_json::Value| schema["properties"]["status"]["properties"]["phase"].clone();
    let min_started = |schema: &serde_json::Value| {
        schema["properties"]["spec"]["properties"]["strategy"]["properties"]["minStartedSeconds"]
            .clone()
    };
    assert!(phase(&alpha).get("enum").is_none(), "{}", phase(&alpha));
    assert!(phase(&beta)["enum"].is_array(), "v1beta1 keeps its enum");
    assert!(
        min_started(&alpha).get("minimum").is_none(),
        "{}",
        min_started(&alpha)
    );
    assert_eq!(
        min_started(&beta)["minimum"],
        0.0,
        "v1beta1 keeps its minimum"
    );
}
