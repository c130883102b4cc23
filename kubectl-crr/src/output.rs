//! `-o json|yaml`: objects as kubectl prints them (managed fields left out), several objects as
//! a `v1` `List`.

use crr_crds::v1beta1::ContainerRecreateRequest;
use serde_json::{Value, json};

use crate::cli::OutputFormat;
use crate::error::Error;

fn cleaned(crr: &ContainerRecreateRequest) -> Result<Value, Error> {
    let mut crr = crr.clone();
    crr.metadata.managed_fields = None;
    serde_json::to_value(&crr).map_err(|error| Error::Output(error.to_string()))
}

/// One object in `format`, ending with a newline.
pub fn object(crr: &ContainerRecreateRequest, format: OutputFormat) -> Result<String, Error> {
    render(&cleaned(crr)?, format)
}

/// Several objects as a `List`.
pub fn list(crrs: &[ContainerRecreateRequest], format: OutputFormat) -> Result<String, Error> {
    let items = crrs.iter().map(cleaned).collect::<Result<Vec<_>, _>>()?;
    render(
        &json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}),
        format,
    )
}

fn render(value: &Value, format: OutputFormat) -> Result<String, Error> {
    let mut text = match format {
        OutputFormat::Json => {
            serde_json::to_string_pretty(value).map_err(|error| Error::Output(error.to_string()))?
        }
        OutputFormat::Yaml => {
            serde_saphyr::to_string(value).map_err(|error| Error::Output(error.to_string()))?
        }
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn crr() -> ContainerRecreateRequest {
        let mut crr: ContainerRecreateRequest = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "ContainerRecreateRequest",
            "metadata": {"name": "web-0-a", "namespace": "prod"},
            "spec": {"podName": "web-0", "containers": [{"name": "app"}]},
        }))
        .unwrap();
        crr.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        crr
    }

    #[test]
    fn json_and_yaml_round_trip_without_managed_fields() {
        let json_text = object(&crr(), OutputFormat::Json).unwrap();
        let parsed: ContainerRecreateRequest = serde_json::from_str(&json_text).unwrap();
        assert_eq!(parsed.spec, crr().spec);
        assert!(!json_text.contains("managedFields"));
        let yaml_text = object(&crr(), OutputFormat::Yaml).unwrap();
        let parsed: ContainerRecreateRequest = serde_saphyr::from_str(&yaml_text).unwrap();
        assert_eq!(parsed.spec, crr().spec);
        assert!(
            yaml_text.contains("kind: ContainerRecreateRequest"),
            "{yaml_text}"
        );
    }

    #[test]
    fn several_objects_make_a_list() {
        let text = list(&[crr(), crr()], OutputFormat::Json).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["kind"], "List");
        assert_eq!(value["items"].as_array().map(Vec::len), Some(2));
    }
}
