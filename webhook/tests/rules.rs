//! Every admission rule, through the same entry point the API server calls (AdmissionReview JSON
//! in, AdmissionReview out), for both API versions, against pods given as plain values.

use std::sync::Arc;

use crr_webhook::admission::Lookup;
use crr_webhook::review::{self, ClusterLookup, Hook, Verdict};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

struct Cluster {
    pod: Option<Pod>,
    node: Option<Node>,
}

impl ClusterLookup for Cluster {
    async fn pod(&self, _namespace: &str, _name: &str) -> Lookup<Arc<Pod>> {
        self.pod
            .clone()
            .map_or(Lookup::NotFound, |pod| Lookup::Found(Arc::new(pod)))
    }
    async fn node(&self, _name: &str) -> Lookup<Arc<ObjectMeta>> {
        self.node.clone().map_or(Lookup::NotFound, |node| {
            Lookup::Found(Arc::new(node.metadata))
        })
    }
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "uid": "pod-uid-1"},
        "spec": {
            "nodeName": "node-a", "terminationGracePeriodSeconds": 45,
            "containers": [
                {"name": "app", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}],
                 "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": "http"}}}},
                {"name": "sidecar", "image": "busybox",
                 "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}}}
            ],
            "initContainers": [
                {"name": "init", "image": "busybox"},
                {"name": "proxy", "image": "busybox", "restartPolicy": "Always"}
            ]
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "app", "containerID": "containerd://app-1", "restartCount": 2, "ready": true, "image": "busybox", "imageID": ""},
                {"name": "sidecar", "containerID": "containerd://sidecar-1", "restartCount": 0, "ready": true, "image": "busybox", "imageID": ""}
            ],
            "initContainerStatuses": [
                {"name": "init", "containerID": "containerd://init-1", "restartCount": 0, "ready": false, "image": "busybox", "imageID": ""},
                {"name": "proxy", "containerID": "containerd://proxy-1", "restartCount": 1, "ready": true, "image": "busybox", "imageID": ""}
            ]
        }
    })
}

fn cluster_with(pod: Value) -> Cluster {
    Cluster {
        pod: Some(serde_json::from_value(pod).unwrap()),
        node: Some(serde_json::from_value(json!({"metadata": {"name": "node-a"}})).unwrap()),
    }
}

fn crr(version: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("apps.kruise.io/{version}"), "kind": "ContainerRecreateRequest",
           "metadata": {"name": "r", "namespace": "default"}, "spec": spec})
}

fn review_body(operation: &str, version: &str, object: Value, old: Option<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "apps.kruise.io", "version": version, "kind": "ContainerRecreateRequest"},
            "resource": {"group": "apps.kruise.io", "version": version, "resource": "containerrecreaterequests"},
            "name": "r", "namespace": "default", "operation": operation,
            "userInfo": {"username": "tester"},
            "object": object, "oldObject": old, "dryRun": false
        }
    }))
    .unwrap()
}

/// Runs a review; returns the verdict, the response JSON and (when patched) the patched object.
async fn run(
    cluster: &Cluster,
    operation: &str,
    version: &str,
    object: Value,
    old: Option<Value>,
) -> (Verdict, Value, Option<Value>) {
    let body = review_body(operation, version, object.clone(), old);
    let (review, verdict) = review::review_crr(&body, cluster, true, Hook::Mutate).await;
    let review = serde_json::to_value(&review).unwrap();
    // The envelope the API server matches the answer by.
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{review}");
    assert_eq!(review["kind"], "AdmissionReview", "{review}");
    assert_eq!(review["response"]["uid"], "u-1", "{review}");
    let response = review["response"].clone();
    // kube writes the patch bytes as a JSON array of numbers (Go's decoder accepts both forms).
    let patched = response["patch"].as_array().map(|bytes| {
        let bytes: Vec<u8> = bytes.iter().map(|b| b.as_u64().unwrap() as u8).collect();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).expect("patch applies to the raw object");
        patched
    });
    (verdict, response, patched)
}

#[tokio::test]
async fn create_defaults_and_injects_in_both_versions() {
    let cluster = cluster_with(pod());
    for version in ["v1alpha1", "v1beta1"] {
        let object = crr(
            version,
            json!({"podName": "web-0", "containers": [{"name": "app"}, {"name": "sidecar"}, {"name": "proxy"}]}),
        );
        let (verdict, response, patched) = run(&cluster, "CREATE", version, object, None).await;
        assert_eq!(verdict, Verdict::Patched, "{version}: {response}");
        assert_eq!(response["allowed"], true);
        let patched = patched.unwrap();
        let labels = &patched["metadata"]["labels"];
        assert_eq!(labels["crr.apps.kruise.io/active"], "true");
        assert_eq!(labels["crr.apps.kruise.io/node-name"], "node-a");
        assert_eq!(labels["crr.apps.kruise.io/pod-uid"], "pod-uid-1");
        let spec = &patched["spec"];
        assert_eq!(spec["strategy"]["failurePolicy"], "Fail");
        assert_eq!(spec["strategy"]["terminationGracePeriodSeconds"], 45);
        let app = &spec["containers"][0];
        assert_eq!(
            app["statusContext"],
            json!({"containerID": "containerd://app-1", "restartCount": 2})
        );
        assert_eq!(app["preStop"]["httpGet"]["path"], "/drain");
        assert_eq!(
            app["ports"][0]["name"], "http",
            "ports are copied for httpGet preStop"
        );
        let sidecar = &spec["containers"][1];
        assert_eq!(sidecar["preStop"]["exec"]["command"], json!(["sleep", "1"]));
        assert!(
            sidecar.get("ports").is_none(),
            "ports only travel with httpGet"
        );
        // (ours) native sidecars are recreatable, with the init container status.
        assert_eq!(
            spec["containers"][2]["statusContext"]["containerID"],
            "containerd://proxy-1"
        );
    }
}

/// Our own output admitted again (reinvocation, or two webhook configurations during an
/// upgrade) passes unchanged; a read-only field that differs from the pod is still refused.
#[tokio::test]
async fn readmitting_our_own_output_is_harmless() {
    let cluster = cluster_with(pod());
    for version in ["v1alpha1", "v1beta1"] {
        let object = crr(
            version,
            json!({"podName": "web-0", "containers": [{"name": "app"}, {"name": "sidecar"}]}),
        );
        let (_, _, patched) = run(&cluster, "CREATE", version, object, None).await;
        let patched = patched.expect("first admission patches");
        let (verdict, response, again) =
            run(&cluster, "CREATE", version, patched.clone(), None).await;
        assert_eq!(verdict, Verdict::Allowed, "{version}: {response}");
        assert!(again.is_none(), "{version}: nothing left to change");

        let mut stale = patched;
        stale["spec"]["containers"][0]["statusContext"]["restartCount"] = json!(1);
        let (verdict, response, _) = run(&cluster, "CREATE", version, stale, None).await;
        assert_eq!(
            verdict,
            Verdict::Denied("ReadOnlyField"),
            "{version}: {response}"
        );
        assert!(
            response["status"]["message"]
                .as_str()
                .is_some_and(|message| message.contains("ready-only fields")),
            "{version}: {response}"
        );
    }
}

#[tokio::test]
async fn explicit_strategy_values_are_kept() {
    let cluster = cluster_with(pod());
    let object = crr(
        "v1beta1",
        json!({"podName": "web-0", "containers": [{"name": "app"}],
        "strategy": {"failurePolicy": "Ignore", "terminationGracePeriodSeconds": 0}}),
    );
    let (_, _, patched) = run(&cluster, "CREATE", "v1beta1", object, None).await;
    let strategy = &patched.unwrap()["spec"]["strategy"];
    assert_eq!(strategy["failurePolicy"], "Ignore");
    assert_eq!(strategy["terminationGracePeriodSeconds"], 0);
}

async fn expect_denied(cluster: &Cluster, spec: Value, code: u16, message: &str) {
    for version in ["v1alpha1", "v1beta1"] {
        let (verdict, response, _) =
            run(cluster, "CREATE", version, crr(version, spec.clone()), None).await;
        assert!(
            matches!(verdict, Verdict::Denied(_)),
            "{version} {spec}: {response}"
        );
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], code, "{response}");
        let text = response["status"]["message"].as_str().unwrap();
        assert!(
            text.contains(message),
            "{version}: expected {message:?} in {text:?}"
        );
    }
}

#[tokio::test]
async fn create_rejections_carry_upstream_messages() {
    let cluster = cluster_with(pod());
    let cases = [
        (
            json!({"podName": "", "containers": [{"name": "app"}]}),
            400,
            "podName can not be empty",
        ),
        (
            json!({"podName": "web-0", "containers": []}),
            400,
            "containers list can not be null",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "app"}], "activeDeadlineSeconds": 2}),
            400,
            "activeDeadlineSeconds can not be less than 3s",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "app"}], "strategy": {"terminationGracePeriodSeconds": -1}}),
            400,
            "terminationGracePeriodSeconds must be non-negative integer",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "app"}], "strategy": {"unreadyGracePeriodSeconds": -1}}),
            400,
            "unreadyGracePeriodSeconds must be non-negative integer",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "app"}], "strategy": {"failurePolicy": "Retry"}}),
            400,
            "unknown failurePolicy Retry",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "app"}, {"name": "app"}]}),
            400,
            "can not recreate app multi times",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "app", "statusContext": {"containerID": "x", "restartCount": 0}}]}),
            400,
            "ready-only fields",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "app", "preStop": {"exec": {"command": ["true"]}}}]}),
            400,
            "ready-only fields",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "nope"}]}),
            400,
            "container nope not found in Pod",
        ),
        (
            json!({"podName": "web-0", "containers": [{"name": "init"}]}),
            400,
            "only native sidecars",
        ),
    ];
    for (spec, code, message) in cases {
        expect_denied(&cluster, spec, code, message).await;
    }
}

#[tokio::test]
async fn create_rejects_by_pod_state() {
    let spec = json!({"podName": "web-0", "containers": [{"name": "app"}]});
    expect_denied(
        &Cluster {
            pod: None,
            node: None,
        },
        spec.clone(),
        400,
        "no found Pod named web-0",
    )
    .await;

    let mut finished = pod();
    finished["status"]["phase"] = "Succeeded".into();
    expect_denied(&cluster_with(finished), spec.clone(), 400, "inactive Pod").await;

    let mut deleting = pod();
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
    expect_denied(&cluster_with(deleting), spec.clone(), 400, "inactive Pod").await;

    let mut pending = pod();
    pending["spec"]["nodeName"] = Value::Null;
    expect_denied(&cluster_with(pending), spec.clone(), 400, "pending Pod").await;

    let mut no_node = cluster_with(pod());
    no_node.node = None;
    expect_denied(&no_node, spec.clone(), 400, "failed to get Node node-a").await;

    let mut not_started = pod();
    not_started["status"]["containerStatuses"][0]["containerID"] = "".into();
    expect_denied(
        &cluster_with(not_started),
        spec.clone(),
        400,
        "maybe the container has not been initialized",
    )
    .await;

    let mut no_status = pod();
    no_status["status"]["containerStatuses"] = json!([]);
    expect_denied(
        &cluster_with(no_status),
        spec.clone(),
        400,
        "not found app containerStatus",
    )
    .await;

    // (ours) the kubelet would never start it again.
    let mut never = pod();
    never["spec"]["restartPolicy"] = "Never".into();
    expect_denied(
        &cluster_with(never),
        spec.clone(),
        400,
        "would not be started again",
    )
    .await;
}

#[tokio::test]
async fn lookup_failures_are_internal_errors() {
    struct Broken;
    impl ClusterLookup for Broken {
        async fn pod(&self, _: &str, _: &str) -> Lookup<Arc<Pod>> {
            Lookup::Failed("connection refused".into())
        }
        async fn node(&self, _: &str) -> Lookup<Arc<ObjectMeta>> {
            Lookup::NotFound
        }
    }
    let body = review_body(
        "CREATE",
        "v1beta1",
        crr(
            "v1beta1",
            json!({"podName": "web-0", "containers": [{"name": "app"}]}),
        ),
        None,
    );
    let (review, _) = review::review_crr(&body, &Broken, true, Hook::Mutate).await;
    let response = serde_json::to_value(&review).unwrap()["response"].clone();
    assert_eq!(response["status"]["code"], 500);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("connection refused")
    );
}

#[tokio::test]
async fn feature_gate_off_refuses_everything() {
    let cluster = cluster_with(pod());
    let body = review_body(
        "CREATE",
        "v1beta1",
        crr(
            "v1beta1",
            json!({"podName": "web-0", "containers": [{"name": "app"}]}),
        ),
        None,
    );
    let (review, verdict) = review::review_crr(&body, &cluster, false, Hook::Mutate).await;
    assert_eq!(verdict, Verdict::Denied("FeatureGateDisabled"));
    let response = serde_json::to_value(&review).unwrap()["response"].clone();
    assert_eq!(response["status"]["code"], 403);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("feature-gate KruiseDaemon is not enabled")
    );
}

#[tokio::test]
async fn update_keeps_spec_and_identity_labels_frozen() {
    let cluster = cluster_with(pod());
    let mut old = crr(
        "v1beta1",
        json!({"podName": "web-0", "containers": [{"name": "app"}]}),
    );
    old["metadata"]["labels"] = json!({"crr.apps.kruise.io/pod-uid": "u", "crr.apps.kruise.io/node-name": "n", "crr.apps.kruise.io/active": "true"});
    for version in ["v1alpha1", "v1beta1"] {
        let mut old = old.clone();
        old["apiVersion"] = format!("apps.kruise.io/{version}").into();

        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"]["team"] = "a".into();
        relabelled["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("crr.apps.kruise.io/active");
        let (verdict, _, _) = run(&cluster, "UPDATE", version, relabelled, Some(old.clone())).await;
        assert_eq!(
            verdict,
            Verdict::Allowed,
            "other labels and active may change"
        );

        let mut changed_spec = old.clone();
        changed_spec["spec"]["podName"] = "web-1".into();
        let (_, response, _) =
            run(&cluster, "UPDATE", version, changed_spec, Some(old.clone())).await;
        assert_eq!(response["status"]["code"], 403);
        assert_eq!(
            response["status"]["message"],
            "spec of ContainerRecreateRequest is immutable"
        );

        for key in ["crr.apps.kruise.io/pod-uid", "crr.apps.kruise.io/node-name"] {
            let mut changed = old.clone();
            changed["metadata"]["labels"][key] = "other".into();
            let (_, response, _) =
                run(&cluster, "UPDATE", version, changed, Some(old.clone())).await;
            assert_eq!(response["status"]["code"], 403);
            assert!(
                response["status"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(key)
            );
        }
    }
}

#[tokio::test]
async fn v1alpha1_unready_acquired_annotation_is_immutable_once_set() {
    let cluster = cluster_with(pod());
    let mut old = crr(
        "v1alpha1",
        json!({"podName": "web-0", "containers": [{"name": "app"}]}),
    );
    old["metadata"]["annotations"] =
        json!({"crr.apps.kruise.io/unready-acquired": "2026-01-02T03:04:05Z"});
    let mut changed = old.clone();
    changed["metadata"]["annotations"]["crr.apps.kruise.io/unready-acquired"] =
        "2026-01-02T03:09:05Z".into();
    let (_, response, _) = run(&cluster, "UPDATE", "v1alpha1", changed, Some(old.clone())).await;
    assert_eq!(response["status"]["code"], 403, "{response}");
    let mut removed = old.clone();
    removed["metadata"]["annotations"] = json!({});
    let (verdict, _, _) = run(&cluster, "UPDATE", "v1alpha1", removed, Some(old.clone())).await;
    assert!(matches!(verdict, Verdict::Denied("ImmutableAnnotation")));
    let (verdict, _, _) = run(&cluster, "UPDATE", "v1alpha1", old.clone(), Some(old)).await;
    assert_eq!(verdict, Verdict::Allowed);
}

#[tokio::test]
async fn malformed_bodies_and_wrong_kinds_get_clean_answers() {
    let cluster = cluster_with(pod());
    for body in [&b""[..], b"{", b"[]", b"{\"request\": 5}", b"\xff\xfe"] {
        let (review, verdict) = review::review_crr(body, &cluster, true, Hook::Mutate).await;
        assert_eq!(verdict, Verdict::Invalid);
        assert!(!review.response.unwrap().allowed);
    }
    let mut body: Value = serde_json::from_slice(&review_body(
        "CREATE",
        "v1",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}),
        None,
    ))
    .unwrap();
    body["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    let (review, _) = review::review_crr(
        &serde_json::to_vec(&body).unwrap(),
        &cluster,
        true,
        Hook::Mutate,
    )
    .await;
    let response = review.response.unwrap();
    assert!(!response.allowed);
    assert_eq!(response.result.code, 400);
    let (review, _) = review::review_crr(
        &review_body("CREATE", "v9", crr("v9", json!({})), None),
        &cluster,
        true,
        Hook::Mutate,
    )
    .await;
    assert!(
        review
            .response
            .unwrap()
            .result
            .message
            .contains("unsupported apiVersion")
    );
}

#[test]
fn conversion_review_converts_every_object_and_reports_failures() {
    let objects = json!([crr(
        "v1alpha1",
        json!({"podName": "p", "containers": [{"name": "app"}]})
    )]);
    let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": "apps.kruise.io/v1beta1", "objects": objects}});
    let review: Value = serde_json::from_slice(&review::review_conversion(
        &serde_json::to_vec(&body).unwrap(),
    ))
    .unwrap();
    assert_eq!(review["response"]["uid"], "c-1");
    assert_eq!(review["response"]["result"]["status"], "Success");
    assert_eq!(
        review["response"]["convertedObjects"][0]["apiVersion"],
        "apps.kruise.io/v1beta1"
    );

    let mut bad = body.clone();
    bad["request"]["desiredAPIVersion"] = "apps.kruise.io/v2".into();
    let review: Value = serde_json::from_slice(&review::review_conversion(
        &serde_json::to_vec(&bad).unwrap(),
    ))
    .unwrap();
    assert_eq!(review["response"]["result"]["status"], "Failure");

    let review: Value = serde_json::from_slice(&review::review_conversion(b"not json")).unwrap();
    assert_eq!(review["response"]["result"]["status"], "Failure");
}

proptest::proptest! {
    #[test]
    fn arbitrary_bodies_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let cluster = cluster_with(pod());
        let _ = runtime.block_on(review::review_crr(&body, &cluster, true, Hook::Mutate));
        let _ = review::review_conversion(&body);
    }
}

/// The review `hook` gives for `object` (and `old`), as a verdict and the response JSON.
async fn review_as(
    hook: Hook,
    cluster: &impl ClusterLookup,
    operation: &str,
    version: &str,
    object: Value,
    old: Option<Value>,
) -> (Verdict, Value) {
    let body = review_body(operation, version, object, old);
    let (review, verdict) = review::review_crr(&body, cluster, true, hook).await;
    (
        verdict,
        serde_json::to_value(&review).unwrap()["response"].clone(),
    )
}

fn with_annotations(mut object: Value, annotations: Value) -> Value {
    object["metadata"]["annotations"] = annotations;
    object
}

#[tokio::test]
async fn a_new_v1alpha1_request_cannot_bring_its_own_status_annotations() {
    let cluster = cluster_with(pod());
    let object = with_annotations(
        crr(
            "v1alpha1",
            json!({"podName": "web-0", "containers": [{"name": "app"}]}),
        ),
        json!({
            "crr.apps.kruise.io/unready-acquired": "2020-01-01T00:00:00Z",
            "crr.apps.kruise.io/sync-container-statuses": "[]",
            "team": "web",
        }),
    );
    let (verdict, response, patched) = run(&cluster, "CREATE", "v1alpha1", object, None).await;
    assert_eq!(verdict, Verdict::Patched, "{response}");
    let annotations = &patched.unwrap()["metadata"]["annotations"];
    assert!(
        annotations
            .get("crr.apps.kruise.io/unready-acquired")
            .is_none(),
        "{annotations}"
    );
    assert_eq!(annotations["team"], "web", "other annotations stay");
    let warnings = response["warnings"].to_string();
    assert!(
        warnings.contains("crr.apps.kruise.io/unready-acquired") && warnings.contains("removed"),
        "{response}"
    );
}

#[tokio::test]
async fn v1alpha1_status_annotations_cannot_be_set_or_changed_through_the_main_resource() {
    let cluster = cluster_with(pod());
    let (_, _, admitted) = run(
        &cluster,
        "CREATE",
        "v1alpha1",
        crr(
            "v1alpha1",
            json!({"podName": "web-0", "containers": [{"name": "app"}]}),
        ),
        None,
    )
    .await;
    let stored = admitted.unwrap();
    let snapshot =
        r#"[{"name":"app","containerID":"containerd://app-1","restartCount":2,"ready":true}]"#;
    for (key, value) in [
        // Backdating the grace: the drain would be skipped.
        (
            "crr.apps.kruise.io/unready-acquired",
            "2020-01-01T00:00:00Z",
        ),
        ("crr.apps.kruise.io/sync-container-statuses", snapshot),
        ("crr.apps.kruise.io/status-conditions", "not json"),
    ] {
        let changed = with_annotations(stored.clone(), json!({key: value}));
        for hook in [Hook::Mutate, Hook::Validate] {
            let (verdict, response) = review_as(
                hook,
                &cluster,
                "UPDATE",
                "v1alpha1",
                changed.clone(),
                Some(stored.clone()),
            )
            .await;
            assert_eq!(
                verdict,
                Verdict::Denied("ImmutableAnnotation"),
                "{key}: {response}"
            );
            assert!(
                response["status"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(key),
                "{response}"
            );
        }
    }
    // Other annotations are the user's.
    let labelled = with_annotations(stored.clone(), json!({"team": "web"}));
    let (verdict, _) = review_as(
        Hook::Validate,
        &cluster,
        "UPDATE",
        "v1alpha1",
        labelled,
        Some(stored),
    )
    .await;
    assert_eq!(verdict, Verdict::Allowed);
}

/// The validating hook checks the object as it will be stored without reading the pod again
/// (one pod read per request, the mutating hook's; `admission::validate_create` says
/// why that is safe): the creation rules that need no live data, and the marks of the mutating
/// hook.
#[tokio::test]
async fn validating_a_create_checks_the_final_object_without_the_pod() {
    let cluster = cluster_with(pod());
    let pod_gone = Cluster {
        pod: None,
        node: None,
    };
    for version in ["v1alpha1", "v1beta1"] {
        let object = crr(
            version,
            json!({"podName": "web-0", "containers": [{"name": "app"}]}),
        );
        // What the mutating hook made of it passes, even once the pod is gone: the validating
        // hook no longer reads it (the operator completes a request whose pod is gone).
        let (_, _, mutated) = run(&cluster, "CREATE", version, object.clone(), None).await;
        let mutated = mutated.unwrap();
        for lookups in [&cluster, &pod_gone] {
            let (verdict, response) = review_as(
                Hook::Validate,
                lookups,
                "CREATE",
                version,
                mutated.clone(),
                None,
            )
            .await;
            assert_eq!(verdict, Verdict::Allowed, "{version}: {response}");
        }
        // Something that skipped the mutating hook does not.
        let (verdict, _) =
            review_as(Hook::Validate, &cluster, "CREATE", version, object, None).await;
        assert_eq!(verdict, Verdict::Denied("NotMutated"), "{version}");
        // Nor does a request that lost a mark of the mutating hook after it: a statusContext
        // without a container ID, the pod-uid or node-name label.
        let mut no_container_id = mutated.clone();
        no_container_id["spec"]["containers"][0]["statusContext"]["containerID"] = json!("");
        let (verdict, _) = review_as(
            Hook::Validate,
            &cluster,
            "CREATE",
            version,
            no_container_id,
            None,
        )
        .await;
        assert_eq!(verdict, Verdict::Denied("NotMutated"), "{version}");
        for key in ["crr.apps.kruise.io/pod-uid", "crr.apps.kruise.io/node-name"] {
            let mut unlabelled = mutated.clone();
            unlabelled["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove(key);
            let (verdict, response) = review_as(
                Hook::Validate,
                &cluster,
                "CREATE",
                version,
                unlabelled,
                None,
            )
            .await;
            assert_eq!(
                verdict,
                Verdict::Denied("ImmutableLabel"),
                "{version} {key}: {response}"
            );
        }
        // A request relabelled for another pod after our mutating hook used to be refused here,
        // by comparing the label with a second read of the pod. The premise changed: that read is
        // gone, and the node daemon never acts on another pod for such a request (it refuses a
        // container whose runtime labels are not the request's namespace, podName and pod-uid,
        // `owner_mismatch`, and re-reads the live pod's UID before a kill: node-daemon's
        // `a_container_labelled_for_another_pod_is_refused_never_stopped` and
        // `a_replaced_pod_of_the_same_name_is_never_touched`). Our mutating hook, which cannot be
        // skipped for a CREATE, overwrites the label with the pod's own UID anyway.
        let mut relabelled = mutated.clone();
        relabelled["metadata"]["labels"]["crr.apps.kruise.io/pod-uid"] = json!("someone-else");
        let (verdict, response) = review_as(
            Hook::Validate,
            &cluster,
            "CREATE",
            version,
            relabelled.clone(),
            None,
        )
        .await;
        assert_eq!(verdict, Verdict::Allowed, "{version}: {response}");
        let (verdict, response, patched) = run(&cluster, "CREATE", version, relabelled, None).await;
        assert_eq!(verdict, Verdict::Patched, "{version}: {response}");
        assert_eq!(
            patched.unwrap()["metadata"]["labels"]["crr.apps.kruise.io/pod-uid"],
            "pod-uid-1",
            "{version}: the mutating hook writes the pod's own UID"
        );
        // And every creation rule that needs no pod applies again, e.g. a container named twice.
        let mut doubled = mutated;
        let app = doubled["spec"]["containers"][0].clone();
        doubled["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(app);
        let (verdict, _) =
            review_as(Hook::Validate, &cluster, "CREATE", version, doubled, None).await;
        assert_eq!(verdict, Verdict::Denied("DuplicateContainer"), "{version}");
    }
}

/// Upstream accepts `restartPolicy: OnFailure` pods; so do we, with a warning that a container
/// exiting 0 on SIGTERM is not restarted. `Never` stays refused (see
/// `create_rejects_by_pod_state`).
#[tokio::test]
async fn on_failure_pods_are_accepted_with_a_warning() {
    let mut on_failure = pod();
    on_failure["spec"]["restartPolicy"] = "OnFailure".into();
    let cluster = cluster_with(on_failure);
    for version in ["v1alpha1", "v1beta1"] {
        let object = crr(
            version,
            json!({"podName": "web-0", "containers": [{"name": "app"}, {"name": "proxy"}]}),
        );
        let (verdict, response, patched) = run(&cluster, "CREATE", version, object, None).await;
        assert_eq!(verdict, Verdict::Patched, "{version}: {response}");
        assert_eq!(
            patched.unwrap()["spec"]["containers"][0]["statusContext"]["containerID"],
            "containerd://app-1"
        );
        let warnings = response["warnings"].as_array().expect("warnings");
        assert_eq!(
            warnings.len(),
            1,
            "only app, not the native sidecar: {response}"
        );
        let warning = warnings[0].as_str().unwrap();
        assert!(
            warning.contains("container app has restartPolicy OnFailure")
                && warning.contains("exits 0 on SIGTERM it will not be restarted")
                && warning.contains("request will fail for it"),
            "{warning}"
        );
    }

    // A pod that restarts always gets no warning.
    let (_, response, _) = run(
        &cluster_with(pod()),
        "CREATE",
        "v1beta1",
        crr(
            "v1beta1",
            json!({"podName": "web-0", "containers": [{"name": "app"}]}),
        ),
        None,
    )
    .await;
    assert!(response.get("warnings").is_none(), "{response}");

    // The validating hook lets the final object through too.
    let mut on_failure = pod();
    on_failure["spec"]["restartPolicy"] = "OnFailure".into();
    let cluster = cluster_with(on_failure);
    let object = crr(
        "v1beta1",
        json!({"podName": "web-0", "containers": [{"name": "app"}]}),
    );
    let (_, _, patched) = run(&cluster, "CREATE", "v1beta1", object, None).await;
    let (verdict, response) = review_as(
        Hook::Validate,
        &cluster,
        "CREATE",
        "v1beta1",
        patched.unwrap(),
        None,
    )
    .await;
    assert_eq!(verdict, Verdict::Allowed, "{response}");
}

/// Kubernetes 1.35+ `restartPolicyRules`: a container the kubelet restarts only on some exit
/// codes is accepted with a warning naming the kill codes it stays down after; one whose rule
/// restarts the whole pod on a kill code is refused; the container's own `Never` is refused.
#[tokio::test]
async fn restart_rules_decide_as_the_kubelet_does() {
    let spec = json!({"podName": "web-0", "containers": [{"name": "app"}]});
    let with_app = |policy: &str, rules: Value| {
        let mut pod = pod();
        pod["spec"]["containers"][0]["restartPolicy"] = policy.into();
        pod["spec"]["containers"][0]["restartPolicyRules"] = rules;
        pod
    };
    let restart_on_143 = with_app(
        "Never",
        json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [143]}}]),
    );
    for version in ["v1alpha1", "v1beta1"] {
        let (verdict, response, _) = run(
            &cluster_with(restart_on_143.clone()),
            "CREATE",
            version,
            crr(version, spec.clone()),
            None,
        )
        .await;
        assert_eq!(verdict, Verdict::Patched, "{version}: {response}");
        let warnings = response["warnings"].as_array().expect("warnings");
        assert_eq!(warnings.len(), 1, "{response}");
        let warning = warnings[0].as_str().unwrap();
        assert!(
            warning.contains(
                "container app has restartPolicy Never (container) with restartPolicyRules"
            ) && warning.contains("not after 0 or 137"),
            "{warning}"
        );
    }
    let restarts_all = with_app(
        "Always",
        json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [143]}}]),
    );
    expect_denied(
        &cluster_with(restarts_all),
        spec.clone(),
        400,
        "container app restarts all containers of the pod (restartPolicyRules action RestartAllContainers) on exit code 143",
    )
    .await;
    let (verdict, _, _) = run(
        &cluster_with(with_app(
            "Always",
            json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [143]}}]),
        )),
        "CREATE",
        "v1beta1",
        crr("v1beta1", spec.clone()),
        None,
    )
    .await;
    assert_eq!(verdict, Verdict::Denied("RestartsAllContainers"));
    expect_denied(
        &cluster_with(with_app("Never", json!([]))),
        spec.clone(),
        400,
        "container app would not be started again after it is stopped, whatever its exit code, under restartPolicy Never (container)",
    )
    .await;
    // The pod's Never does not matter to a container with its own Always.
    let mut always_in_never_pod = with_app("Always", json!([]));
    always_in_never_pod["spec"]["restartPolicy"] = "Never".into();
    let (verdict, response, _) = run(
        &cluster_with(always_in_never_pod),
        "CREATE",
        "v1beta1",
        crr("v1beta1", spec),
        None,
    )
    .await;
    assert_eq!(verdict, Verdict::Patched, "{response}");
    assert!(response.get("warnings").is_none(), "{response}");
}

/// Upstream's v1alpha1 accepts a negative minStartedSeconds or ttlSecondsAfterFinished and
/// behaves as for 0: we store 0 and say so.
#[tokio::test]
async fn v1alpha1_negative_min_started_and_ttl_are_set_to_zero_with_warnings() {
    let cluster = cluster_with(pod());
    let object = crr(
        "v1alpha1",
        json!({"podName": "web-0", "containers": [{"name": "app"}],
               "strategy": {"minStartedSeconds": -5}, "ttlSecondsAfterFinished": -1}),
    );
    let (verdict, response, patched) = run(&cluster, "CREATE", "v1alpha1", object, None).await;
    assert_eq!(verdict, Verdict::Patched, "{response}");
    let spec = &patched.unwrap()["spec"];
    assert!(
        spec["strategy"].get("minStartedSeconds").is_none(),
        "0 is the default and not written: {spec}"
    );
    assert_eq!(spec["ttlSecondsAfterFinished"], 0);
    let warnings = response["warnings"].to_string();
    assert!(
        warnings.contains("strategy.minStartedSeconds -5 is negative and was set to 0"),
        "{warnings}"
    );
    assert!(
        warnings.contains("ttlSecondsAfterFinished -1 is negative and was set to 0"),
        "{warnings}"
    );

    // The object as stored passes the validating hook.
    let (_, _, patched) = run(
        &cluster,
        "CREATE",
        "v1alpha1",
        crr(
            "v1alpha1",
            json!({"podName": "web-0", "containers": [{"name": "app"}], "ttlSecondsAfterFinished": -1}),
        ),
        None,
    )
    .await;
    let (verdict, response) = review_as(
        Hook::Validate,
        &cluster,
        "CREATE",
        "v1alpha1",
        patched.unwrap(),
        None,
    )
    .await;
    assert_eq!(verdict, Verdict::Allowed, "{response}");
}

/// OpenKruise's Go type always sends `status: {phase: ""}` on create: such a status, or `{}`,
/// goes without a warning. One that carries something is removed with a warning.
#[tokio::test]
async fn an_empty_status_on_create_is_dropped_without_a_warning() {
    let cluster = cluster_with(pod());
    for version in ["v1alpha1", "v1beta1"] {
        for empty in [
            json!({}),
            json!({"phase": ""}),
            json!({"phase": "", "message": ""}),
        ] {
            let mut object = crr(
                version,
                json!({"podName": "web-0", "containers": [{"name": "app"}]}),
            );
            object["status"] = empty.clone();
            let (verdict, response, patched) = run(&cluster, "CREATE", version, object, None).await;
            assert_eq!(verdict, Verdict::Patched, "{version} {empty}: {response}");
            assert!(
                response.get("warnings").is_none(),
                "{version} {empty}: {response}"
            );
            let patched = patched.unwrap();
            assert!(
                patched.get("status").is_none(),
                "{version} {empty}: the status is gone: {patched}"
            );
            let (verdict, response) =
                review_as(Hook::Validate, &cluster, "CREATE", version, patched, None).await;
            assert_eq!(verdict, Verdict::Allowed, "{version} {empty}: {response}");
        }
        let mut object = crr(
            version,
            json!({"podName": "web-0", "containers": [{"name": "app"}]}),
        );
        object["status"] = json!({"phase": "Completed"});
        let (_, response, patched) = run(&cluster, "CREATE", version, object, None).await;
        assert!(
            response["warnings"].to_string().contains("were removed"),
            "{version}: {response}"
        );
        assert!(patched.unwrap().get("status").is_none(), "{version}");
    }
}

/// A hand-made review whose object is in another namespace than the review names (or that names
/// none) is refused before any lookup: the answer carries nothing from the other namespace's pod.
#[tokio::test]
async fn a_review_naming_another_namespace_is_refused_before_any_lookup() {
    struct NoLookups;
    impl ClusterLookup for NoLookups {
        async fn pod(&self, namespace: &str, name: &str) -> Lookup<Arc<Pod>> {
            panic!("looked up pod {namespace}/{name}")
        }
        async fn node(&self, name: &str) -> Lookup<Arc<ObjectMeta>> {
            panic!("looked up node {name}")
        }
    }
    for version in ["v1alpha1", "v1beta1"] {
        let mut object = crr(
            version,
            json!({"podName": "web-0", "containers": [{"name": "app"}]}),
        );
        object["metadata"]["namespace"] = json!("victim");
        for hook in [Hook::Mutate, Hook::Validate] {
            let (verdict, response) =
                review_as(hook, &NoLookups, "CREATE", version, object.clone(), None).await;
            assert_eq!(verdict, Verdict::Denied("NamespaceMismatch"), "{version}");
            assert!(response.get("patch").is_none(), "{response}");
            assert!(
                response["status"]["message"]
                    .as_str()
                    .is_some_and(|message| message.contains("victim")),
                "{response}"
            );
        }
        let (verdict, _) = review_as(
            Hook::Mutate,
            &NoLookups,
            "UPDATE",
            version,
            object.clone(),
            Some(object.clone()),
        )
        .await;
        assert_eq!(verdict, Verdict::Denied("NamespaceMismatch"), "{version}");
        // A review without a namespace is refused too.
        let mut body: Value = serde_json::from_slice(&review_body(
            "CREATE",
            version,
            crr(
                version,
                json!({"podName": "web-0", "containers": [{"name": "app"}]}),
            ),
            None,
        ))
        .unwrap();
        body["request"].as_object_mut().unwrap().remove("namespace");
        let (_, verdict) = review::review_crr(
            &serde_json::to_vec(&body).unwrap(),
            &NoLookups,
            true,
            Hook::Mutate,
        )
        .await;
        assert_eq!(verdict, Verdict::Denied("NamespaceMismatch"), "{version}");
    }
}
