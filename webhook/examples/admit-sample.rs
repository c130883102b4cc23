//! Unit-level demo (no cluster): runs the upstream sample CRR through the real admission and
//! conversion code against a two-container pod, and prints what the API server would get back.

use std::sync::Arc;

use crr_webhook::admission::Lookup;
use crr_webhook::review::{self, ClusterLookup};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

struct DemoCluster(Pod, Node);

impl ClusterLookup for DemoCluster {
    async fn pod(&self, _: &str, _: &str) -> Lookup<Arc<Pod>> {
        Lookup::Found(Arc::new(self.0.clone()))
    }
    async fn node(&self, _: &str) -> Lookup<Arc<ObjectMeta>> {
        Lookup::Found(Arc::new(self.1.metadata.clone()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sample: serde_json::Value = serde_saphyr::from_str(include_str!(
        "../../crds/tests/fixtures/upstream-sample.yaml"
    ))?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "pod-name", "namespace": "pod-namespace", "uid": "3f1c-demo"},
        "spec": {"nodeName": "node-a", "terminationGracePeriodSeconds": 30, "containers": [
            {"name": "app", "image": "busybox", "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 2"]}}}},
            {"name": "sidecar", "image": "busybox"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "containerID": "containerd://aaa", "restartCount": 0, "ready": true, "image": "busybox", "imageID": ""},
            {"name": "sidecar", "containerID": "containerd://bbb", "restartCount": 0, "ready": true, "image": "busybox", "imageID": ""}]}
    }))?;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-a"}}))?;
    let request = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "demo", "kind": {"group": "apps.kruise.io", "version": "v1alpha1", "kind": "ContainerRecreateRequest"},
        "resource": {"group": "apps.kruise.io", "version": "v1alpha1", "resource": "containerrecreaterequests"},
        "name": "xxx", "namespace": "pod-namespace", "operation": "CREATE", "userInfo": {}, "object": sample, "dryRun": false}});
    let (answer, verdict) = review::review_crr(
        &serde_json::to_vec(&request)?,
        &DemoCluster(pod, node),
        true,
        review::Hook::Mutate,
    )
    .await;
    let response = answer.response.ok_or("no response")?;
    println!(
        "admission verdict: {verdict:?} (allowed: {})",
        response.allowed
    );
    let patch: serde_json::Value =
        serde_json::from_slice(response.patch.as_deref().unwrap_or(b"[]"))?;
    println!(
        "JSON patch the API server applies:\n{}",
        serde_json::to_string_pretty(&patch)?
    );
    let mut admitted = request["request"]["object"].clone();
    let patch: json_patch::Patch = serde_json::from_value(patch)?;
    json_patch::patch(&mut admitted, &patch)?;
    let stored = crr_crds::conversion::convert_json(admitted, "apps.kruise.io/v1beta1")?;
    println!(
        "stored as v1beta1:\n{}",
        serde_json::to_string_pretty(&stored)?
    );
    Ok(())
}
