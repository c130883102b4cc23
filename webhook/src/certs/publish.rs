//! Publishing the CA: `caBundle` in the webhook configurations and the CRD's conversion.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch};
use serde_json::json;

use super::bundle::CertError;

/// The JSON patch that sets `caBundle` on every webhook (in order) whose client config does not
/// hold `ca_pem` yet; `None` when all do.
pub fn ca_bundle_patch<'a>(
    configs: impl Iterator<Item = &'a WebhookClientConfig>,
    ca_pem: &str,
) -> Option<json_patch::Patch> {
    let bundle = serde_json::to_value(ByteString(ca_pem.as_bytes().to_vec())).ok()?;
    let operations: Vec<_> = configs
        .enumerate()
        .filter(|(_, config)| config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes()))
        .map(|(index, _)| json!({"op": "add", "path": format!("/webhooks/{index}/clientConfig/caBundle"), "value": bundle}))
        .collect();
    if operations.is_empty() {
        return None;
    }
    serde_json::from_value(json!(operations)).ok()
}

/// Where the CA must be published.
#[derive(Clone, Debug)]
pub struct CaTargets {
    /// MutatingWebhookConfiguration name.
    pub mutating: Option<String>,
    /// ValidatingWebhookConfiguration name.
    pub validating: Option<String>,
    /// CustomResourceDefinition name (its conversion webhook).
    pub crd: Option<String>,
}

/// Puts `ca_pem` into every webhook of the named configurations and into the CRD's conversion,
/// where it is not there yet. Missing objects are skipped (installed later, or not by us).
/// Returns how many objects were patched.
pub async fn publish_ca(
    client: &Client,
    targets: &CaTargets,
    ca_pem: &str,
) -> Result<usize, CertError> {
    let bundle = serde_json::to_value(ByteString(ca_pem.as_bytes().to_vec())).unwrap_or_default();
    let mut patched = 0;
    let params = crr_runtime::client::patch_params(crate::FIELD_MANAGER);
    if let Some(name) = &targets.mutating {
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        if let Some(config) = mutating.get_opt(name).await? {
            let configs = config
                .webhooks
                .iter()
                .flatten()
                .map(|hook| &hook.client_config);
            if let Some(patch) = ca_bundle_patch(configs, ca_pem) {
                mutating
                    .patch(name, &params, &Patch::<()>::Json(patch))
                    .await?;
                patched += 1;
            }
        }
    }
    if let Some(name) = &targets.validating {
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        if let Some(config) = validating.get_opt(name).await? {
            let configs = config
                .webhooks
                .iter()
                .flatten()
                .map(|hook| &hook.client_config);
            if let Some(patch) = ca_bundle_patch(configs, ca_pem) {
                validating
                    .patch(name, &params, &Patch::<()>::Json(patch))
                    .await?;
                patched += 1;
            }
        }
    }
    if let Some(name) = &targets.crd {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        if let Some(crd) = crds.get_opt(name).await? {
            let current = crd
                .spec
                .conversion
                .as_ref()
                .and_then(|conversion| conversion.webhook.as_ref())
                .and_then(|webhook| webhook.client_config.as_ref());
            if let Some(config) = current
                && config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes())
            {
                let patch = json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": bundle}}}}});
                crds.patch(name, &params, &Patch::Merge(&patch)).await?;
                patched += 1;
            }
        }
    }
    Ok(patched)
}
