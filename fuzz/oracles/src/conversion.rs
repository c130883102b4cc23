//! `conversion_review`: ConversionReview bodies, raw and structured (objects of both versions
//! with arbitrary fields and the legacy status annotations holding arbitrary text).
//!
//! Oracles besides "never panics": the answer is JSON with a `response.uid` (the request's, when
//! it has one); a successful answer holds one object per request object, each of the desired
//! apiVersion; and v1beta1 → v1alpha1 → v1beta1 is the identity for v1beta1 objects that do not
//! themselves carry the legacy annotations (which belong to v1alpha1 objects).

use arbitrary::{Arbitrary, Unstructured};
use crr_crds::keys;
use serde_json::{Value, json};

use crate::objects::Request;

/// The desired apiVersion of a review.
#[derive(Arbitrary, Clone, Debug)]
pub enum Desired {
    V1alpha1,
    V1beta1,
    Any(String),
}

impl Desired {
    fn text(&self) -> String {
        match self {
            Self::V1alpha1 => "apps.kruise.io/v1alpha1".to_owned(),
            Self::V1beta1 => "apps.kruise.io/v1beta1".to_owned(),
            Self::Any(text) => text.clone(),
        }
    }
}

/// One ConversionReview.
#[derive(Arbitrary, Clone, Debug)]
pub struct Input {
    pub api_version: Option<String>,
    pub uid: String,
    pub desired: Desired,
    pub objects: Vec<Request>,
}

impl Input {
    pub fn body(&self) -> Vec<u8> {
        let mut review = serde_json::Map::new();
        if let Some(api_version) = &self.api_version {
            review.insert("apiVersion".to_owned(), json!(api_version));
        }
        review.insert("kind".to_owned(), json!("ConversionReview"));
        review.insert(
            "request".to_owned(),
            json!({
                "uid": self.uid,
                "desiredAPIVersion": self.desired.text(),
                "objects": self.objects.iter().map(Request::json).collect::<Vec<_>>(),
            }),
        );
        serde_json::to_vec(&review).expect("a Value serializes")
    }
}

/// The answer to `body`, checked to be JSON with a string `response.uid`.
fn answer(body: &[u8]) -> Value {
    let out = crr_webhook::review::review_conversion(body);
    let answer: Value = serde_json::from_slice(&out).unwrap_or_else(|error| {
        panic!(
            "the answer is not JSON ({error}): {}",
            String::from_utf8_lossy(&out)
        )
    });
    assert!(
        answer["response"]["uid"].is_string(),
        "the answer has no response.uid: {answer}"
    );
    answer
}

fn succeeded(answer: &Value) -> bool {
    answer["response"]["result"]["status"] == "Success"
}

/// Converts one object; `None` when the webhook refuses it.
fn convert(object: &Value, desired: &str) -> Option<Value> {
    let answer = answer(
        &serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": desired, "objects": [object]}
        }))
        .expect("a Value serializes"),
    );
    succeeded(&answer).then(|| answer["response"]["convertedObjects"][0].clone())
}

fn carries_legacy_annotations(object: &Value) -> bool {
    let annotations = &object["metadata"]["annotations"];
    [
        keys::ANNOTATION_SYNC_CONTAINER_STATUSES,
        keys::ANNOTATION_UNREADY_ACQUIRED,
        keys::ANNOTATION_STATUS_CONDITIONS,
    ]
    .iter()
    .any(|key| annotations.get(key).is_some())
}

/// The structured review, with the oracles of the module comment.
pub fn run_structured(input: &Input) {
    let answer = answer(&input.body());
    assert_eq!(answer["response"]["uid"], json!(input.uid));
    if succeeded(&answer) {
        let converted = answer["response"]["convertedObjects"]
            .as_array()
            .expect("convertedObjects is a list");
        assert_eq!(converted.len(), input.objects.len());
        for object in converted {
            assert_eq!(object["apiVersion"], json!(input.desired.text()));
        }
    }
    for request in input.objects.iter().filter(|request| request.v1beta1) {
        let object = request.json();
        if carries_legacy_annotations(&object) {
            continue;
        }
        let Some(hub) = convert(&object, "apps.kruise.io/v1beta1") else {
            continue;
        };
        let legacy = convert(&object, "apps.kruise.io/v1alpha1")
            .expect("a v1beta1 object that converts to v1beta1 converts to v1alpha1");
        let back = convert(&legacy, "apps.kruise.io/v1beta1")
            .expect("a converted v1alpha1 object converts back");
        assert_eq!(
            back, hub,
            "v1beta1 -> v1alpha1 -> v1beta1 is not the identity\nv1alpha1: {legacy}"
        );
    }
}

/// The fuzz target: the bytes as a body, then as a structured input.
pub fn run(data: &[u8]) {
    answer(data);
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        run_structured(&input);
    }
}
