//! Inputs the fuzz targets (`fuzz/`) found, replayed through the same entry point.
//! Each fixture in `tests/fuzz/` holds the pod and node the review is answered against and the
//! CREATE AdmissionReview body; its `note` says what the fuzzer saw.
//!
//! Each was a finding of `admission_create`, fixed in `webhook/src/admission.rs` (the pod's
//! grace period is clamped to the schema) and `webhook/src/review.rs` (the patch is computed
//! against the object as sent).

use std::sync::Arc;

use crr_crds::limits::MAX_TERMINATION_GRACE_PERIOD_SECONDS;
use crr_webhook::admission::Lookup;
use crr_webhook::review::{self, ClusterLookup, Hook, Verdict};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

struct Cluster {
    pod: Pod,
    node: Node,
}

impl ClusterLookup for Cluster {
    async fn pod(&self, _namespace: &str, _name: &str) -> Lookup<Arc<Pod>> {
        Lookup::Found(Arc::new(self.pod.clone()))
    }
    async fn node(&self, _name: &str) -> Lookup<Arc<ObjectMeta>> {
        Lookup::Found(Arc::new(self.node.metadata.clone()))
    }
}

/// The fixture's cluster and review body.
fn fixture(name: &str) -> (Cluster, Value) {
    let path = format!("{}/tests/fuzz/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
    let fixture: Value = serde_json::from_slice(&bytes).unwrap();
    let cluster = Cluster {
        pod: serde_json::from_value(fixture["pod"].clone()).unwrap(),
        node: serde_json::from_value(fixture["node"].clone()).unwrap(),
    };
    (cluster, fixture["review"].clone())
}

/// Runs the mutating hook; returns its verdict and the object with its patch applied.
async fn mutate(cluster: &Cluster, body: &Value) -> (Verdict, Value) {
    let (review, verdict) = review::review_crr(
        &serde_json::to_vec(body).unwrap(),
        cluster,
        true,
        Hook::Mutate,
    )
    .await;
    let response = serde_json::to_value(&review).unwrap()["response"].clone();
    let mut object = body["request"]["object"].clone();
    if let Some(bytes) = response["patch"].as_array() {
        let bytes: Vec<u8> = bytes.iter().map(|b| b.as_u64().unwrap() as u8).collect();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
    }
    (verdict, object)
}

async fn validate(cluster: &Cluster, body: &Value, object: Value) -> Verdict {
    let mut body = body.clone();
    body["request"]["object"] = object;
    review::review_crr(
        &serde_json::to_vec(&body).unwrap(),
        cluster,
        true,
        Hook::Validate,
    )
    .await
    .1
}

/// Both hooks re-run the same creation rules, so what the mutating hook admits the validating
/// hook admits too.
#[tokio::test]
async fn validating_hook_admits_what_mutating_hook_admitted_for_a_pod_with_negative_grace_period() {
    let (cluster, body) = fixture("pod-grace-period-negative.json");
    let (verdict, admitted) = mutate(&cluster, &body).await;
    if matches!(verdict, Verdict::Denied(_)) {
        return; // refusing the request outright also keeps the hooks in agreement
    }
    assert_eq!(
        validate(&cluster, &body, admitted.clone()).await,
        Verdict::Allowed,
        "{admitted}"
    );
}

/// The API server checks the CRD schema after the mutating hook: a value the hook injects on its
/// own must be within the schema, or a request the user wrote correctly is refused.
#[tokio::test]
async fn injected_grace_period_stays_within_the_schema_for_a_pod_with_a_long_grace_period() {
    let (cluster, body) = fixture("pod-grace-period-above-schema-maximum.json");
    let (verdict, admitted) = mutate(&cluster, &body).await;
    assert_eq!(verdict, Verdict::Patched);
    let injected = admitted["spec"]["strategy"]["terminationGracePeriodSeconds"].as_i64();
    assert!(
        injected
            .is_none_or(|seconds| (0..=MAX_TERMINATION_GRACE_PERIOD_SECONDS).contains(&seconds)),
        "injected terminationGracePeriodSeconds {injected:?} is outside the schema's 0..={MAX_TERMINATION_GRACE_PERIOD_SECONDS}"
    );
}

/// A new request's status, in either form, is removed with a warning by the mutating hook, so
/// the validating hook never sees one.
#[tokio::test]
async fn validating_hook_admits_a_v1alpha1_request_sent_with_empty_status_and_legacy_annotation() {
    let (cluster, body) = fixture("v1alpha1-empty-status-with-legacy-annotation.json");
    let (verdict, admitted) = mutate(&cluster, &body).await;
    assert_eq!(verdict, Verdict::Patched);
    assert_eq!(
        validate(&cluster, &body, admitted.clone()).await,
        Verdict::Allowed,
        "{admitted}"
    );
}
