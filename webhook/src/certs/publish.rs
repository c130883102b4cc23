//! Publishing the CA: `caBundle` in the webhook configurations and the CRD's conversion.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::sync::Arc;

use kube::Client;
use kube::api::{Api, Patch};
use serde_json::json;
use tokio::sync::Notify;

use super::bundle::CertError;
use super::follow::{Followed, follow};

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

/// The client configs the CA goes into, each kept current by a watch of its object by name
/// ([`follow`]): a pass that finds the CA published everywhere makes no API call.
#[derive(Clone, Debug, Default)]
pub struct Watched {
    /// The MutatingWebhookConfiguration's webhooks' client configs, in order.
    pub mutating: Option<Followed<Vec<WebhookClientConfig>>>,
    /// The ValidatingWebhookConfiguration's.
    pub validating: Option<Followed<Vec<WebhookClientConfig>>>,
    /// The CRD's conversion webhook, if it has one.
    pub crd: Option<Followed<Option<Conversion>>>,
}

impl Watched {
    /// Starts a watch of each of `targets`, notifying `changes` whenever one changes.
    pub fn start(client: &Client, targets: &CaTargets, changes: &Arc<Notify>) -> Self {
        Self {
            mutating: targets.mutating.as_deref().map(|name| {
                follow(
                    Api::all(client.clone()),
                    name,
                    mutating_configs,
                    changes.clone(),
                )
            }),
            validating: targets.validating.as_deref().map(|name| {
                follow(
                    Api::all(client.clone()),
                    name,
                    validating_configs,
                    changes.clone(),
                )
            }),
            crd: targets.crd.as_deref().map(|name| {
                follow(
                    Api::all(client.clone()),
                    name,
                    conversion_config,
                    changes.clone(),
                )
            }),
        }
    }
}

fn mutating_configs(config: MutatingWebhookConfiguration) -> Vec<WebhookClientConfig> {
    config
        .webhooks
        .into_iter()
        .flatten()
        .map(|hook| hook.client_config)
        .collect()
}

fn validating_configs(config: ValidatingWebhookConfiguration) -> Vec<WebhookClientConfig> {
    config
        .webhooks
        .into_iter()
        .flatten()
        .map(|hook| hook.client_config)
        .collect()
}

/// A CRD's conversion webhook, as far as its CA goes.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversion {
    /// Its client config's caBundle.
    pub ca_bundle: Option<ByteString>,
}

fn conversion_config(crd: CustomResourceDefinition) -> Option<Conversion> {
    let config = crd.spec.conversion?.webhook?.client_config?;
    Some(Conversion {
        ca_bundle: config.ca_bundle,
    })
}

/// Puts `ca_pem` into every webhook of the named configurations and into the CRD's conversion,
/// where it is not there yet, as `watched` shows them (read by GET where a watch has not
/// listed its object). Missing objects are skipped (installed later, or not by us).
/// Returns how many objects were patched.
pub async fn publish_ca(
    client: &Client,
    targets: &CaTargets,
    watched: &Watched,
    ca_pem: &str,
) -> Result<usize, CertError> {
    let bundle = serde_json::to_value(ByteString(ca_pem.as_bytes().to_vec())).unwrap_or_default();
    let mut patched = 0;
    let params = crr_runtime::client::patch_params(crate::FIELD_MANAGER);
    if let Some(name) = &targets.mutating {
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let configs =
            Followed::or_get(watched.mutating.as_ref(), &mutating, name, mutating_configs).await?;
        if let Some(patch) = configs.and_then(|configs| ca_bundle_patch(configs.iter(), ca_pem)) {
            mutating
                .patch(name, &params, &Patch::<()>::Json(patch))
                .await?;
            patched += 1;
        }
    }
    if let Some(name) = &targets.validating {
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let configs = Followed::or_get(
            watched.validating.as_ref(),
            &validating,
            name,
            validating_configs,
        )
        .await?;
        if let Some(patch) = configs.and_then(|configs| ca_bundle_patch(configs.iter(), ca_pem)) {
            validating
                .patch(name, &params, &Patch::<()>::Json(patch))
                .await?;
            patched += 1;
        }
    }
    if let Some(name) = &targets.crd {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let current = Followed::or_get(watched.crd.as_ref(), &crds, name, conversion_config)
            .await?
            .flatten();
        if let Some(config) = current
            && config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes())
        {
            let patch = json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": bundle}}}}});
            crds.patch(name, &params, &Patch::Merge(&patch)).await?;
            patched += 1;
        }
    }
    Ok(patched)
}
