//! `-o json|yaml|name`: objects as kubectl prints them (managed fields left out), several objects
//! as a `v1` `List`; `name` is kubectl's `KIND.GROUP/NAME`, one line per object.

use kube::Resource;
use serde::Serialize;
use serde_json::{Value, json};

use crate::cli::OutputFormat;
use crate::error::Error;

/// Writes `text` to standard output, flushed.
pub fn print(text: &str) -> Result<(), Error> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|error| Error::Output(error.to_string()))
}

fn cleaned<K: Resource + Serialize + Clone>(object: &K) -> Result<Value, Error> {
    let mut object = object.clone();
    object.meta_mut().managed_fields = None;
    serde_json::to_value(&object).map_err(|error| Error::Output(error.to_string()))
}

/// `containerrecreaterollout.crr.dev/NAME`, as `kubectl get -o name` prints an object.
pub fn name<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!(
        "{}.{}/{}",
        K::kind(&()).to_ascii_lowercase(),
        K::group(&()),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

/// One object in `format`, ending with a newline.
pub fn object<K>(object: &K, format: OutputFormat) -> Result<String, Error>
where
    K: Resource<DynamicType = ()> + Serialize + Clone,
{
    match format {
        OutputFormat::Name => Ok(format!("{}\n", name(object))),
        _ => render(&cleaned(object)?, format),
    }
}

/// Several objects as a `List` (`name`: a line each).
pub fn list<K>(objects: &[K], format: OutputFormat) -> Result<String, Error>
where
    K: Resource<DynamicType = ()> + Serialize + Clone,
{
    if format == OutputFormat::Name {
        return Ok(objects
            .iter()
            .map(|object| format!("{}\n", name(object)))
            .collect());
    }
    let items = objects.iter().map(cleaned).collect::<Result<Vec<_>, _>>()?;
    render(
        &json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}),
        format,
    )
}

/// The one form an object takes in a watch's stream: JSON objects one after the other, YAML
/// documents each opened by `---`, names a line each.
pub fn streamed<K>(object: &K, format: OutputFormat) -> Result<String, Error>
where
    K: Resource<DynamicType = ()> + Serialize + Clone,
{
    let text = self::object(object, format)?;
    Ok(match format {
        OutputFormat::Yaml => format!("---\n{text}"),
        _ => text,
    })
}

fn render(value: &Value, format: OutputFormat) -> Result<String, Error> {
    let mut text = match format {
        OutputFormat::Json | OutputFormat::Name => {
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
    use crr_crds::v1beta1::ContainerRecreateRequest;
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

    #[test]
    fn names_read_like_kubectls() {
        assert_eq!(
            object(&crr(), OutputFormat::Name).unwrap(),
            "containerrecreaterequest.apps.kruise.io/web-0-a\n"
        );
        assert_eq!(
            list(&[crr(), crr()], OutputFormat::Name)
                .unwrap()
                .lines()
                .count(),
            2
        );
        assert!(
            streamed(&crr(), OutputFormat::Yaml)
                .unwrap()
                .starts_with("---\n")
        );
    }
}
