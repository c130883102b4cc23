//! Conversion between v1alpha1 and v1beta1 (the hub). Pure and lossless:
//!
//! * v1beta1 `status.containerStatusSnapshot` ⇄ v1alpha1 annotation
//!   `crr.apps.kruise.io/sync-container-statuses` (JSON list).
//! * v1beta1 `PreRecreateGrace=True` condition ⇄ v1alpha1 annotation
//!   `crr.apps.kruise.io/unready-acquired` (RFC3339, whole seconds, UTC), as upstream does.
//! * Conditions that annotation cannot express exactly (other types, other reasons or messages,
//!   sub-second times) additionally travel in `crr.apps.kruise.io/status-conditions` (ours), so
//!   v1beta1 → v1alpha1 → v1beta1 is the identity. Upstream drops them.
//! * Unlike upstream, the legacy annotations are removed from the v1beta1 view once they have
//!   been turned into typed fields, and an annotation that cannot be parsed is kept verbatim
//!   instead of being dropped.
//!
//! An empty `annotations` map and an absent one are treated as the same thing, as are an empty
//! `status` and an absent one when the only content was the snapshot or conditions.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use crate::keys::{
    ANNOTATION_STATUS_CONDITIONS, ANNOTATION_SYNC_CONTAINER_STATUSES, ANNOTATION_UNREADY_ACQUIRED,
    CONDITION_PRE_RECREATE_GRACE, GROUP, MESSAGE_PRE_RECREATE_GRACE, REASON_PRE_RECREATE_GRACE,
    V1ALPHA1, V1BETA1,
};
use crate::{v1alpha1, v1beta1};

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The object or the desired version names an apiVersion we do not serve.
    #[error(
        "unsupported apiVersion {0:?}: expected apps.kruise.io/v1alpha1 or apps.kruise.io/v1beta1"
    )]
    UnsupportedVersion(String),
    /// The object is not a ContainerRecreateRequest of its declared version.
    #[error("invalid {api_version} ContainerRecreateRequest: {source}")]
    InvalidObject {
        /// The object's declared apiVersion.
        api_version: String,
        /// The decoding error.
        source: serde_json::Error,
    },
}

/// A served version of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// `apps.kruise.io/v1alpha1`.
    V1alpha1,
    /// `apps.kruise.io/v1beta1`.
    V1beta1,
}

impl Version {
    /// Parses a full `apps.kruise.io/<version>` apiVersion.
    pub fn from_api_version(api_version: &str) -> Result<Self, ConversionError> {
        match api_version
            .strip_prefix(GROUP)
            .and_then(|rest| rest.strip_prefix('/'))
        {
            Some(V1ALPHA1) => Ok(Self::V1alpha1),
            Some(V1BETA1) => Ok(Self::V1beta1),
            _ => Err(ConversionError::UnsupportedVersion(api_version.to_owned())),
        }
    }

    /// The bare version name (`v1alpha1`, `v1beta1`).
    pub fn name(self) -> &'static str {
        match self {
            Self::V1alpha1 => V1ALPHA1,
            Self::V1beta1 => V1BETA1,
        }
    }

    /// Parses a bare version name (`v1alpha1`, `v1beta1`), as admission requests carry it.
    pub fn from_version(version: &str) -> Result<Self, ConversionError> {
        match version {
            V1ALPHA1 => Ok(Self::V1alpha1),
            V1BETA1 => Ok(Self::V1beta1),
            other => Err(ConversionError::UnsupportedVersion(other.to_owned())),
        }
    }
}

/// Decodes a CRR of either served version into the hub (v1beta1) model.
pub fn decode_to_hub(
    object: Value,
    version: Version,
) -> Result<v1beta1::ContainerRecreateRequest, ConversionError> {
    decode(object, version)
}

/// [`decode_to_hub`] from raw JSON: decoded straight into the version's typed model.
pub fn decode_raw_to_hub(
    object: &serde_json::value::RawValue,
    version: Version,
) -> Result<v1beta1::ContainerRecreateRequest, ConversionError> {
    decode(
        &mut serde_json::Deserializer::from_str(object.get()),
        version,
    )
}

/// The one decoding of both: from any JSON deserializer into the model of `version`, then the
/// hub.
fn decode<'de, D>(
    object: D,
    version: Version,
) -> Result<v1beta1::ContainerRecreateRequest, ConversionError>
where
    D: serde::Deserializer<'de, Error = serde_json::Error>,
{
    use serde::Deserialize as _;
    let invalid = |source| ConversionError::InvalidObject {
        api_version: format!("{GROUP}/{}", version.name()),
        source,
    };
    match version {
        Version::V1beta1 => v1beta1::ContainerRecreateRequest::deserialize(object).map_err(invalid),
        Version::V1alpha1 => v1alpha1::ContainerRecreateRequest::deserialize(object)
            .map(to_v1beta1)
            .map_err(invalid),
    }
}

/// Encodes a hub object as JSON of the given version (with its apiVersion and kind).
pub fn encode_from_hub(object: v1beta1::ContainerRecreateRequest, version: Version) -> Value {
    // Serializing these plain data types cannot fail: all map keys are strings.
    let encoded = match version {
        Version::V1beta1 => serde_json::to_value(object),
        Version::V1alpha1 => serde_json::to_value(to_v1alpha1(object)),
    };
    encoded.unwrap_or(Value::Null)
}

/// Converts one object (as a ConversionReview carries it) to the desired apiVersion.
pub fn convert_json(object: Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    let desired = Version::from_api_version(desired_api_version)?;
    let current_api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let current = Version::from_api_version(&current_api_version)?;
    let hub = decode_to_hub(object, current)?;
    Ok(encode_from_hub(hub, desired))
}

/// Converts one object given as raw JSON to `desired`, straight through the typed models: no
/// `serde_json::Value` tree of the object is built. The webhook converts whole LISTs this way
/// (one ConversionReview can carry thousands of objects), appending each to its answer.
pub fn convert_raw_into(
    object: &serde_json::value::RawValue,
    desired: Version,
    out: &mut Vec<u8>,
) -> Result<(), ConversionError> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(rename = "apiVersion", borrow, default)]
        api_version: std::borrow::Cow<'a, str>,
    }
    let invalid = |source, version: &str| ConversionError::InvalidObject {
        api_version: format!("{GROUP}/{version}"),
        source,
    };
    let head: Head<'_> =
        serde_json::from_str(object.get()).map_err(|source| ConversionError::InvalidObject {
            api_version: "(unknown)".to_owned(),
            source,
        })?;
    let current = Version::from_api_version(&head.api_version)?;
    let hub = match current {
        Version::V1beta1 => serde_json::from_str(object.get()),
        Version::V1alpha1 => serde_json::from_str(object.get()).map(to_v1beta1),
    }
    .map_err(|source| invalid(source, current.name()))?;
    // Serializing these plain data types cannot fail: all map keys are strings.
    match desired {
        Version::V1beta1 => serde_json::to_writer(out, &hub),
        Version::V1alpha1 => serde_json::to_writer(out, &to_v1alpha1(hub)),
    }
    .map_err(|source| invalid(source, desired.name()))
}

/// [`convert_raw_into`], as a raw value of its own.
pub fn convert_raw(
    object: &serde_json::value::RawValue,
    desired: Version,
) -> Result<Box<serde_json::value::RawValue>, ConversionError> {
    let mut out = Vec::new();
    convert_raw_into(object, desired, &mut out)?;
    let text = String::from_utf8(out).unwrap_or_default();
    serde_json::value::RawValue::from_string(text).map_err(|source| {
        ConversionError::InvalidObject {
            api_version: format!("{GROUP}/{}", desired.name()),
            source,
        }
    })
}

/// v1alpha1 → v1beta1.
pub fn to_v1beta1(object: v1alpha1::ContainerRecreateRequest) -> v1beta1::ContainerRecreateRequest {
    let v1alpha1::ContainerRecreateRequest {
        mut metadata,
        spec,
        status,
    } = object;
    let mut annotations = metadata.annotations.take().unwrap_or_default();

    let snapshot = take_parsed::<Vec<v1beta1::ContainerRecreateRequestSyncContainerStatus>>(
        &mut annotations,
        ANNOTATION_SYNC_CONTAINER_STATUSES,
    )
    .unwrap_or_default();

    let conditions =
        match take_parsed::<Vec<Condition>>(&mut annotations, ANNOTATION_STATUS_CONDITIONS) {
            Some(conditions) => {
                // The full list wins; the legacy annotation is dropped only when it says the same.
                if annotations.get(ANNOTATION_UNREADY_ACQUIRED)
                    == unready_acquired_annotation(&conditions).as_ref()
                {
                    annotations.remove(ANNOTATION_UNREADY_ACQUIRED);
                }
                conditions
            }
            None => match annotations
                .get(ANNOTATION_UNREADY_ACQUIRED)
                .and_then(|text| text.parse().ok())
            {
                Some(acquired_at) => {
                    annotations.remove(ANNOTATION_UNREADY_ACQUIRED);
                    vec![pre_recreate_grace_condition(Time(acquired_at))]
                }
                None => Vec::new(),
            },
        };

    metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    let mut status = status.map(|status| v1beta1::ContainerRecreateRequestStatus {
        phase: status.phase,
        completion_time: status.completion_time,
        message: status.message,
        container_recreate_states: status.container_recreate_states,
        ..Default::default()
    });
    if !snapshot.is_empty() || !conditions.is_empty() {
        let status = status.get_or_insert_with(Default::default);
        status.container_status_snapshot = snapshot;
        status.conditions = conditions;
    }

    v1beta1::ContainerRecreateRequest {
        metadata,
        spec: v1beta1::ContainerRecreateRequestSpec {
            pod_name: spec.pod_name,
            containers: spec.containers,
            strategy: spec.strategy,
            active_deadline_seconds: spec.active_deadline_seconds,
            ttl_seconds_after_finished: spec.ttl_seconds_after_finished,
        },
        status,
    }
}

/// v1beta1 → v1alpha1.
pub fn to_v1alpha1(
    object: v1beta1::ContainerRecreateRequest,
) -> v1alpha1::ContainerRecreateRequest {
    let v1beta1::ContainerRecreateRequest {
        mut metadata,
        spec,
        status,
    } = object;
    let mut annotations = metadata.annotations.take().unwrap_or_default();

    let status = status.and_then(|status| {
        let v1beta1::ContainerRecreateRequestStatus {
            phase,
            completion_time,
            message,
            container_recreate_states,
            container_status_snapshot,
            conditions,
        } = status;
        let carried_in_annotations =
            !container_status_snapshot.is_empty() || !conditions.is_empty();
        if !container_status_snapshot.is_empty() {
            annotations.insert(
                ANNOTATION_SYNC_CONTAINER_STATUSES.to_owned(),
                to_json(&container_status_snapshot),
            );
        }
        if let Some(acquired) = unready_acquired_annotation(&conditions) {
            annotations.insert(ANNOTATION_UNREADY_ACQUIRED.to_owned(), acquired);
        }
        if !conditions.is_empty() && !is_exactly_legacy_conditions(&conditions) {
            annotations.insert(
                ANNOTATION_STATUS_CONDITIONS.to_owned(),
                to_json(&conditions),
            );
        }
        let rest = v1alpha1::ContainerRecreateRequestStatus {
            phase,
            completion_time,
            message,
            container_recreate_states,
        };
        (!(carried_in_annotations && rest == Default::default())).then_some(rest)
    });

    metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    v1alpha1::ContainerRecreateRequest {
        metadata,
        spec: v1alpha1::ContainerRecreateRequestSpec {
            pod_name: spec.pod_name,
            containers: spec.containers,
            strategy: spec.strategy,
            active_deadline_seconds: spec.active_deadline_seconds,
            ttl_seconds_after_finished: spec.ttl_seconds_after_finished,
        },
        status,
    }
}

/// The `PreRecreateGrace` condition as the operator writes it (and as the legacy annotation
/// expands to).
pub fn pre_recreate_grace_condition(acquired_at: Time) -> Condition {
    Condition {
        type_: CONDITION_PRE_RECREATE_GRACE.to_owned(),
        status: "True".to_owned(),
        reason: REASON_PRE_RECREATE_GRACE.to_owned(),
        message: MESSAGE_PRE_RECREATE_GRACE.to_owned(),
        last_transition_time: acquired_at,
        observed_generation: None,
    }
}

/// The legacy annotation's value: the first true `PreRecreateGrace` condition's time, whole
/// seconds in UTC.
fn unready_acquired_annotation(conditions: &[Condition]) -> Option<String> {
    conditions
        .iter()
        .find(|condition| {
            condition.type_ == CONDITION_PRE_RECREATE_GRACE && condition.status == "True"
        })
        .map(|condition| whole_seconds(&condition.last_transition_time).0.to_string())
}

/// True when the conditions are exactly what the legacy annotation alone expands back to.
fn is_exactly_legacy_conditions(conditions: &[Condition]) -> bool {
    match conditions {
        [only] => *only == pre_recreate_grace_condition(whole_seconds(&only.last_transition_time)),
        _ => false,
    }
}

fn whole_seconds(time: &Time) -> Time {
    // `as_second` is within the range `from_second` accepts, so this cannot fail.
    Time(jiff::Timestamp::from_second(time.0.as_second()).unwrap_or(time.0))
}

fn take_parsed<T: serde::de::DeserializeOwned>(
    annotations: &mut BTreeMap<String, String>,
    key: &str,
) -> Option<T> {
    let parsed = serde_json::from_str(annotations.get(key)?).ok()?;
    annotations.remove(key);
    Some(parsed)
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
