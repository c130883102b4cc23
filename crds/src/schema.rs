//! What the CRD's schemas say beyond what the Rust types generate, applied to the generated
//! CustomResourceDefinition by [`crate::crd`]:
//!
//! * what upstream's CRD has from Go markers and k8s.io types that schemars does not know: list
//!   types (`x-kubernetes-list-type: atomic` on `exec.command` and `httpHeaders`), the `TCP`
//!   default on port protocols, and `metav1.Condition`'s field validation;
//! * v1alpha1's upstream leniency: its `status.phase` has no enum (the kruise Go client's
//!   `UpdateStatus` sends `phase: ""`), and its `strategy.minStartedSeconds` no minimum
//!   (admission sets a negative value to 0, see [`crate::rules::normalize_spec`]). The strategy
//!   type is shared between the versions, so v1alpha1's difference is made here, on its schema
//!   only; v1beta1 keeps its minimums.
//!
//! It does not change what the types decode: `crds/tests/upstream_crd.rs` compares the result
//! with upstream's CRD, and every difference left is listed there with its reason.

use serde_json::{Value, json};

use crate::keys::{ROLLOUT_VERSION, V1ALPHA1, V1BETA1};

/// A path in a generated schema that [`complete`] expected and did not find: the types changed
/// and this module was not updated with them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the generated {version} schema has no {path}")]
pub struct MissingSchemaPath {
    /// The API version whose schema lacks it.
    pub version: String,
    /// The path, e.g. `.spec.containers[].ports[].protocol`.
    pub path: String,
}

/// Applies the additions and the v1alpha1 leniency to the `openAPIV3Schema` of `version`.
pub fn complete(version: &str, schema: &mut Value) -> Result<(), MissingSchemaPath> {
    let container = ".spec.containers[]";
    let edits: Vec<(String, Value)> = vec![
        (
            format!("{container}.preStop.exec.command"),
            json!({"x-kubernetes-list-type": "atomic"}),
        ),
        (
            format!("{container}.preStop.httpGet.httpHeaders"),
            json!({"x-kubernetes-list-type": "atomic"}),
        ),
        (
            format!("{container}.ports[].protocol"),
            json!({"default": "TCP"}),
        ),
    ];
    for (path, additions) in edits {
        extend(version, schema, &path, additions)?;
    }
    if version == V1BETA1 {
        complete_conditions(V1BETA1, schema)?;
    }
    if version == V1ALPHA1 {
        remove(version, schema, ".status.phase", "enum")?;
        remove(
            version,
            schema,
            ".spec.strategy.minStartedSeconds",
            "minimum",
        )?;
    }
    Ok(())
}

/// What the ContainerRecreateRollout schema says beyond its types: `metav1.Condition`'s
/// validation, and that a target names exactly one of a workload and a selector (the webhook
/// refuses it too, with a clearer message; this rule holds while the webhook is away).
pub fn complete_rollout(schema: &mut Value) -> Result<(), MissingSchemaPath> {
    complete_conditions(ROLLOUT_VERSION, schema)?;
    extend(
        ROLLOUT_VERSION,
        schema,
        ".spec.target",
        json!({"x-kubernetes-validations": [{
            "rule": "has(self.workloadRef) != has(self.selector)",
            "message": "target must name exactly one of workloadRef and selector",
        }]}),
    )
}

/// `metav1.Condition`'s validation, as controller-gen writes it from the type's markers.
fn complete_conditions(version: &str, schema: &mut Value) -> Result<(), MissingSchemaPath> {
    let condition = ".status.conditions[]";
    let edits = [
        (
            "type",
            json!({
                "maxLength": 316,
                "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            }),
        ),
        ("status", json!({"enum": ["True", "False", "Unknown"]})),
        (
            "reason",
            json!({
                "maxLength": 1024,
                "minLength": 1,
                "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            }),
        ),
        ("message", json!({"maxLength": 32768})),
        ("observedGeneration", json!({"minimum": 0})),
    ];
    for (field, additions) in edits {
        extend(version, schema, &format!("{condition}.{field}"), additions)?;
    }
    Ok(())
}

fn extend(
    version: &str,
    schema: &mut Value,
    path: &str,
    additions: Value,
) -> Result<(), MissingSchemaPath> {
    let node = node_at(version, schema, path)?;
    if let (Some(node), Value::Object(additions)) = (node.as_object_mut(), additions) {
        node.extend(additions);
    }
    Ok(())
}

fn remove(
    version: &str,
    schema: &mut Value,
    path: &str,
    key: &str,
) -> Result<(), MissingSchemaPath> {
    let node = node_at(version, schema, path)?;
    match node.as_object_mut().and_then(|node| node.remove(key)) {
        Some(_) => Ok(()),
        None => Err(missing(version, &format!("{path}.{key}"))),
    }
}

/// The schema node at `path`: `.name` steps into `properties.name`, a trailing `[]` into `items`.
fn node_at<'a>(
    version: &str,
    schema: &'a mut Value,
    path: &str,
) -> Result<&'a mut Value, MissingSchemaPath> {
    let mut node = schema;
    for step in path.split('.').skip(1) {
        let (name, items) = match step.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (step, false),
        };
        node = node
            .get_mut("properties")
            .and_then(|properties| properties.get_mut(name))
            .ok_or_else(|| missing(version, path))?;
        if items {
            node = node
                .get_mut("items")
                .ok_or_else(|| missing(version, path))?;
        }
    }
    Ok(node)
}

fn missing(version: &str, path: &str) -> MissingSchemaPath {
    MissingSchemaPath {
        version: version.to_owned(),
        path: path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_the_types_do_not_generate_is_an_error_not_a_silent_no_op() {
        let mut schema = json!({"properties": {"spec": {"properties": {}}}});
        assert_eq!(
            complete(V1BETA1, &mut schema),
            Err(MissingSchemaPath {
                version: V1BETA1.to_owned(),
                path: ".spec.containers[].preStop.exec.command".to_owned(),
            })
        );
    }

    #[test]
    fn steps_follow_properties_and_items() {
        let mut schema =
            json!({"properties": {"a": {"items": {"properties": {"b": {"type": "string"}}}}}});
        extend("v", &mut schema, ".a[].b", json!({"default": "x"})).unwrap();
        assert_eq!(
            schema["properties"]["a"]["items"]["properties"]["b"],
            json!({"type": "string", "default": "x"})
        );
        assert!(remove("v", &mut schema, ".a[].b", "minimum").is_err());
    }
}
