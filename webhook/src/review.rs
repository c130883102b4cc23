//! AdmissionReview and ConversionReview handling: bytes in, review out. Never fails at the HTTP
//! level: a body that cannot be read becomes an invalid review answer, a broken rule a denial
//! with its message, defaults a JSON patch computed against the request's own version.

use std::future::Future;
use std::sync::Arc;

use crr_crds::conversion::{self, Version};
use crr_crds::keys::{GROUP, KIND};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Status};
use serde_json::value::RawValue;

use crate::admission::{self, Lookup, Rejection};
use crate::readiness_gate::GatedPod;

/// Where the review layer gets pods and nodes from (the API server in production, plain values
/// in tests). Only the mutating hook's CREATE asks, once for the pod and once for its node's
/// labels; the validating hook and UPDATEs ask nothing.
pub trait ClusterLookup: Send + Sync {
    /// The pod `namespace/name`.
    fn pod(&self, namespace: &str, name: &str) -> impl Future<Output = Lookup<Arc<Pod>>> + Send;
    /// The metadata of node `name` (admission reads its labels only).
    fn node(&self, name: &str) -> impl Future<Output = Lookup<Arc<ObjectMeta>>> + Send;
}

/// What happened to one admission request, for metrics and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed without changes.
    Allowed,
    /// Allowed with a JSON patch.
    Patched,
    /// Denied; the rule's short reason (the answer's code says whether a rule was broken, 4xx,
    /// or the webhook could not decide, 500: a lookup failed, a patch could not be encoded).
    Denied(&'static str),
    /// The body was not an AdmissionReview we could read.
    Invalid,
}

/// Which of the two CRR webhooks a review is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// Defaults, validates and injects; may answer with a patch.
    Mutate,
    /// Checks what must hold on the final object; never patches.
    Validate,
}

/// The part of a CRR AdmissionReview admission reads, borrowed from the body: the objects stay
/// raw JSON and are decoded once, straight into the typed model of their version (no
/// `DynamicObject`, no `Value` tree; a mutating CREATE builds one `Value` of the object as sent,
/// which its JSON patch is computed against).
#[derive(serde::Deserialize)]
struct CrrReviewIn<'a> {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<String>,
    #[serde(borrow)]
    request: Option<CrrRequestIn<'a>>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CrrRequestIn<'a> {
    uid: String,
    pub(crate) kind: kube::core::GroupVersionKind,
    pub(crate) operation: Operation,
    #[serde(default)]
    pub(crate) namespace: Option<String>,
    #[serde(borrow, default)]
    pub(crate) object: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) old_object: Option<&'a RawValue>,
}

/// The apiVersion of AdmissionReviews (the only one the API server sends since 1.22).
const ADMISSION_REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

pub(crate) fn read_request(body: &[u8]) -> Result<(CrrRequestIn<'_>, AdmissionResponse), String> {
    let review: CrrReviewIn<'_> =
        serde_json::from_slice(body).map_err(|error| error.to_string())?;
    let request = review
        .request
        .ok_or_else(|| "the AdmissionReview has no request".to_owned())?;
    let mut response = AdmissionResponse::invalid("");
    response.types = kube::core::TypeMeta {
        api_version: review
            .api_version
            .unwrap_or_else(|| ADMISSION_REVIEW_API_VERSION.to_owned()),
        kind: "AdmissionReview".to_owned(),
    };
    response.uid = request.uid.clone();
    response.allowed = true;
    response.result = Status::default();
    Ok((request, response))
}

pub(crate) fn invalid(error: &str) -> (AdmissionReview<DynamicObject>, Verdict) {
    (
        AdmissionResponse::invalid(format!("cannot read AdmissionReview: {error}")).into_review(),
        Verdict::Invalid,
    )
}

/// Answers one CRR AdmissionReview body for `hook`.
pub async fn review_crr(
    body: &[u8],
    cluster: &impl ClusterLookup,
    node_daemon_enabled: bool,
    hook: Hook,
) -> (AdmissionReview<DynamicObject>, Verdict) {
    let (request, response) = match read_request(body) {
        Ok(read) => read,
        Err(error) => return invalid(&error),
    };
    match decide_crr(&request, cluster, node_daemon_enabled, hook).await {
        Ok(Decision { patch, warnings }) => {
            let mut response = response;
            if !warnings.is_empty() {
                response.warnings = Some(warnings);
            }
            match patch {
                None => (response.into_review(), Verdict::Allowed),
                Some(patch) => match response.clone().with_patch(patch) {
                    Ok(patched) => (patched.into_review(), Verdict::Patched),
                    Err(error) => deny(
                        response,
                        Rejection {
                            code: 500,
                            message: error.to_string(),
                            reason: "PatchEncoding",
                        },
                    ),
                },
            }
        }
        Err(rejection) => deny(response, rejection),
    }
}

/// What admission answers when it allows a request.
#[derive(Debug, Default)]
struct Decision {
    /// Changes to the object (the mutating hook only).
    patch: Option<json_patch::Patch>,
    /// Shown to the client by kubectl.
    warnings: Vec<String>,
}

pub(crate) fn deny(
    response: AdmissionResponse,
    rejection: Rejection,
) -> (AdmissionReview<DynamicObject>, Verdict) {
    let mut response = response.deny(&rejection.message);
    response.result.code = rejection.code;
    response.result.reason = http_reason(rejection.code).to_owned();
    (response.into_review(), Verdict::Denied(rejection.reason))
}

fn http_reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        403 => "Forbidden",
        _ => "InternalError",
    }
}

/// The decision for one request: `None` = allow as is, `Some(patch)` = allow with changes.
async fn decide_crr(
    request: &CrrRequestIn<'_>,
    cluster: &impl ClusterLookup,
    node_daemon_enabled: bool,
    hook: Hook,
) -> Result<Decision, Rejection> {
    admission::check_feature_gate(node_daemon_enabled)?;
    if request.kind.group != GROUP || request.kind.kind != KIND {
        return Err(bad_request(format!(
            "this webhook admits {GROUP} {KIND} objects, not {}/{} {}",
            request.kind.group, request.kind.version, request.kind.kind
        )));
    }
    let version = Version::from_version(&request.kind.version)
        .map_err(|error| bad_request(error.to_string()))?;
    let decode = |object: Option<&RawValue>, what: &str| {
        let object = object.ok_or_else(|| bad_request(format!("the request has no {what}")))?;
        conversion::decode_raw_to_hub(object, version)
            .map_err(|error| bad_request(error.to_string()))
    };
    match request.operation {
        Operation::Create => {
            let raw = request.object;
            let mut crr = decode(raw, "object")?;
            let namespace =
                admission::review_namespace(request.namespace.as_deref(), &crr.metadata)?;
            match hook {
                Hook::Mutate => {
                    // The one pod read of a request: what this hook injects comes from it.
                    let pod = if crr.spec.pod_name.is_empty() {
                        Lookup::NotFound
                    } else {
                        cluster.pod(&namespace, &crr.spec.pod_name).await
                    };
                    let node_name = match &pod {
                        Lookup::Found(pod) => {
                            pod.spec.as_ref().and_then(|spec| spec.node_name.clone())
                        }
                        _ => None,
                    };
                    let node = match node_name.filter(|name| !name.is_empty()) {
                        Some(name) => cluster.node(&name).await,
                        None => Lookup::NotFound,
                    };
                    let mut warnings: Vec<String> =
                        admission::strip_status(&mut crr).into_iter().collect();
                    let admitted = admission::admit_create(crr, as_ref(&pod), as_ref(&node))?;
                    warnings.extend(admitted.caveats.iter().map(ToString::to_string));
                    // The patch applies to the object as sent, so it is computed against that,
                    // not against its re-encoding: what the model drops (an empty v1alpha1
                    // `status: {}` beside the legacy annotations, say) is removed by the patch
                    // too (fuzz finding).
                    let original: serde_json::Value =
                        serde_json::from_str(raw.map_or("null", RawValue::get))
                            .map_err(|error| bad_request(error.to_string()))?;
                    let patch = json_patch::diff(
                        &original,
                        &conversion::encode_from_hub(admitted.crr, version),
                    );
                    Ok(Decision {
                        patch: (!patch.0.is_empty()).then_some(patch),
                        warnings,
                    })
                }
                Hook::Validate => {
                    // No lookup: the object carries what the mutating hook read from the pod
                    // (`admission::validate_create` says why that is safe).
                    admission::validate_create(&crr)?;
                    Ok(Decision::default())
                }
            }
        }
        Operation::Update => {
            let old = decode(request.old_object, "oldObject")?;
            let new = decode(request.object, "object")?;
            admission::review_namespace(request.namespace.as_deref(), &old.metadata)?;
            admission::review_namespace(request.namespace.as_deref(), &new.metadata)?;
            admission::admit_update(&old, &new, version == Version::V1alpha1)?;
            Ok(Decision::default())
        }
        Operation::Delete | Operation::Connect => Ok(Decision::default()),
    }
}

fn as_ref<T>(lookup: &Lookup<Arc<T>>) -> Lookup<&T> {
    match lookup {
        Lookup::Found(object) => Lookup::Found(object.as_ref()),
        Lookup::NotFound => Lookup::NotFound,
        Lookup::Failed(error) => Lookup::Failed(error.clone()),
    }
}

fn bad_request(message: String) -> Rejection {
    Rejection {
        code: 400,
        message,
        reason: "InvalidObject",
    }
}

/// Answers one pod AdmissionReview body: on CREATE, pods that opt in with `opt_in_label:
/// "true"` get the `KruisePodReady` readiness gate. A pod is never refused over the gate: when
/// the patch cannot be built it is admitted unchanged. The pod is read as a [`GatedPod`]
/// (metadata and readiness gates), whatever its size.
pub fn review_pod(body: &[u8], opt_in_label: &str) -> (AdmissionReview<DynamicObject>, Verdict) {
    let request: AdmissionRequest<GatedPod> =
        match serde_json::from_slice::<AdmissionReview<GatedPod>>(body)
            .map_err(|error| error.to_string())
            .and_then(|review| {
                review
                    .try_into()
                    .map_err(|_| "the AdmissionReview has no request".to_owned())
            }) {
            Ok(request) => request,
            Err(error) => {
                return (
                    AdmissionResponse::invalid(format!("cannot read AdmissionReview: {error}"))
                        .into_review(),
                    Verdict::Invalid,
                );
            }
        };
    let response = AdmissionResponse::from(&request);
    let is_pod = request.kind.group.is_empty() && request.kind.kind == "Pod";
    let patch = request
        .object
        .as_ref()
        .filter(|_| is_pod && request.operation == Operation::Create)
        .and_then(|pod| crate::readiness_gate::patch_for(pod, opt_in_label));
    match patch {
        None => (response.into_review(), Verdict::Allowed),
        Some(patch) => match response.clone().with_patch(patch) {
            Ok(patched) => (patched.into_review(), Verdict::Patched),
            Err(_) => (response.into_review(), Verdict::Allowed),
        },
    }
}

/// The ConversionReview as the API server sends it, objects kept as raw JSON: a LIST of
/// thousands of objects is converted one object at a time, never held as a `Value` tree.
#[derive(serde::Deserialize)]
struct ConversionReviewIn<'a> {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<String>,
    #[serde(borrow)]
    request: Option<ConversionRequestIn<'a>>,
}

#[derive(serde::Deserialize)]
struct ConversionRequestIn<'a> {
    uid: String,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: String,
    #[serde(borrow, default)]
    objects: Vec<&'a RawValue>,
}

/// The apiVersion of ConversionReviews (the only one the API server sends).
const CONVERSION_REVIEW_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// The start of a ConversionReview answer, up to where its converted objects go: the objects
/// are then appended one by one and [`answer_end`] closes it, so a LIST costs its request body
/// plus its answer, never a tree or a second copy of either.
fn answer_start(out: &mut Vec<u8>, api_version: Option<&str>, uid: &str, result: &Status) {
    let api_version = api_version.unwrap_or(CONVERSION_REVIEW_API_VERSION);
    // Strings and a Status: serializing them cannot fail.
    let _ = serde_json::to_writer(
        &mut *out,
        &serde_json::json!({"apiVersion": api_version, "kind": "ConversionReview"}),
    );
    out.pop(); // the closing brace: the response follows
    out.extend_from_slice(b",\"response\":{\"uid\":");
    let _ = serde_json::to_writer(&mut *out, uid);
    out.extend_from_slice(b",\"result\":");
    let _ = serde_json::to_writer(&mut *out, result);
    out.extend_from_slice(b",\"convertedObjects\":[");
}

fn answer_end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"]}}");
}

/// A ConversionReview answer that failed with `message`.
fn failed_answer(api_version: Option<&str>, uid: &str, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    answer_start(
        &mut out,
        api_version,
        uid,
        &Status::failure(message, "BadRequest"),
    );
    answer_end(&mut out);
    out
}

/// How a ConversionReview ended, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConversionVerdict {
    /// Every object was converted.
    Converted,
    /// The review was read but could not be answered (an unknown desired version, an object
    /// that does not convert): the answer is a failed review.
    Failed,
    /// The body was not a ConversionReview with a request.
    Invalid,
}

/// Answers one ConversionReview body (a failed review for a body that is not one), as JSON.
pub fn review_conversion(body: &[u8]) -> Vec<u8> {
    convert(body).0
}

/// [`review_conversion`], and how it ended.
pub fn convert(body: &[u8]) -> (Vec<u8>, ConversionVerdict) {
    let review = match serde_json::from_slice::<ConversionReviewIn<'_>>(body) {
        Ok(review) => review,
        Err(error) => {
            return (
                failed_answer(None, "", &format!("cannot read ConversionReview: {error}")),
                ConversionVerdict::Invalid,
            );
        }
    };
    let api_version = review.api_version.as_deref();
    let Some(request) = review.request else {
        return (
            failed_answer(
                api_version,
                "",
                "cannot read ConversionReview: it has no request",
            ),
            ConversionVerdict::Invalid,
        );
    };
    let failed = |message: &str| {
        (
            failed_answer(api_version, &request.uid, message),
            ConversionVerdict::Failed,
        )
    };
    let desired = match Version::from_api_version(&request.desired_api_version) {
        Ok(desired) => desired,
        Err(error) => return failed(&error.to_string()),
    };
    // The answer is about as large as the request (v1beta1 a little larger): reserve it once.
    let mut out = Vec::with_capacity(body.len() + body.len() / 4 + 512);
    answer_start(&mut out, api_version, &request.uid, &Status::success());
    for (index, object) in request.objects.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        if let Err(error) = conversion::convert_raw_into(object, desired, &mut out) {
            drop(out);
            return failed(&error.to_string());
        }
    }
    answer_end(&mut out);
    (out, ConversionVerdict::Converted)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{Value, json};

    use super::*;

    /// One pod and its node, answered from memory, counting what the review layer asks for.
    #[derive(Default)]
    struct Counting {
        pod_reads: AtomicUsize,
        node_reads: AtomicUsize,
    }

    impl ClusterLookup for Counting {
        async fn pod(&self, _namespace: &str, _name: &str) -> Lookup<Arc<Pod>> {
            self.pod_reads.fetch_add(1, Ordering::SeqCst);
            Lookup::Found(Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": "web-0", "namespace": "default", "uid": "pod-uid-1"},
                    "spec": {
                        "nodeName": "node-a",
                        "containers": [
                            {"name": "app", "image": "busybox",
                             "lifecycle": {"preStop": {"exec": {"command": ["drain"]}}}},
                            {"name": "sidecar", "image": "busybox"}
                        ]
                    },
                    "status": {"phase": "Running", "containerStatuses": [
                        {"name": "app", "containerID": "containerd://app-1", "restartCount": 2,
                         "ready": true, "image": "busybox", "imageID": ""},
                        {"name": "sidecar", "containerID": "containerd://sidecar-1", "restartCount": 0,
                         "ready": true, "image": "busybox", "imageID": ""}
                    ]}
                }))
                .expect("a pod"),
            ))
        }

        async fn node(&self, name: &str) -> Lookup<Arc<ObjectMeta>> {
            self.node_reads.fetch_add(1, Ordering::SeqCst);
            Lookup::Found(Arc::new(ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            }))
        }
    }

    impl Counting {
        fn reads(&self) -> (usize, usize) {
            (
                self.pod_reads.load(Ordering::SeqCst),
                self.node_reads.load(Ordering::SeqCst),
            )
        }
    }

    fn create_body(version: &str, object: &Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": GROUP, "version": version, "kind": KIND},
                "resource": {"group": GROUP, "version": version, "resource": "containerrecreaterequests"},
                "name": "r", "namespace": "default", "operation": "CREATE",
                "userInfo": {"username": "tester"},
                "object": object,
            }
        }))
        .expect("a review")
    }

    fn request(version: &str) -> Value {
        json!({
            "apiVersion": format!("{GROUP}/{version}"), "kind": KIND,
            "metadata": {"name": "r", "namespace": "default"},
            "spec": {"podName": "web-0", "containers": [{"name": "app"}, {"name": "sidecar"}]}
        })
    }

    /// The object the API server hands the validating hook: the request with the mutating hook's
    /// patch applied.
    fn mutated(review: &AdmissionReview<DynamicObject>, mut object: Value) -> Value {
        let bytes = review
            .response
            .as_ref()
            .and_then(|response| response.patch.clone())
            .expect("a patch");
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("a JSON patch");
        json_patch::patch(&mut object, &patch).expect("the patch applies");
        object
    }

    #[tokio::test]
    async fn a_mutating_create_reads_the_pod_exactly_once() {
        for version in ["v1alpha1", "v1beta1"] {
            let cluster = Counting::default();
            let (_, verdict) = review_crr(
                &create_body(version, &request(version)),
                &cluster,
                true,
                Hook::Mutate,
            )
            .await;
            assert_eq!(verdict, Verdict::Patched, "{version}");
            assert_eq!(cluster.reads(), (1, 1), "{version}: (pod, node) reads");
        }
    }

    #[tokio::test]
    async fn validating_a_create_the_mutating_hook_admitted_reads_no_pod() {
        for version in ["v1alpha1", "v1beta1"] {
            let mutating = Counting::default();
            let (review, verdict) = review_crr(
                &create_body(version, &request(version)),
                &mutating,
                true,
                Hook::Mutate,
            )
            .await;
            assert_eq!(verdict, Verdict::Patched, "{version}");
            let stored = mutated(&review, request(version));
            assert_eq!(
                stored["metadata"]["labels"]["crr.apps.kruise.io/pod-uid"], "pod-uid-1",
                "{version}: {stored}"
            );

            let validating = Counting::default();
            let (review, verdict) = review_crr(
                &create_body(version, &stored),
                &validating,
                true,
                Hook::Validate,
            )
            .await;
            assert_eq!(verdict, Verdict::Allowed, "{version}: {review:?}");
            assert_eq!(validating.reads(), (0, 0), "{version}: (pod, node) reads");
        }
    }

    #[tokio::test]
    async fn validating_a_create_that_skipped_the_mutating_hook_refuses_it_without_a_read() {
        for version in ["v1alpha1", "v1beta1"] {
            let cluster = Counting::default();
            let (_, verdict) = review_crr(
                &create_body(version, &request(version)),
                &cluster,
                true,
                Hook::Validate,
            )
            .await;
            assert_eq!(verdict, Verdict::Denied("NotMutated"), "{version}");
            assert_eq!(cluster.reads(), (0, 0), "{version}: (pod, node) reads");
        }
    }
}
