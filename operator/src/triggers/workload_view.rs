//! The trigger wing's slim view of a Deployment, StatefulSet or DaemonSet: what its workload
//! watch decides on, decoded straight from the API server's JSON so that nothing else is ever
//! allocated (serde skips every other field; foreign annotations are skipped key by key).
//!
//! | kind | scope | fields kept | read by | bytes kept (fat object → view) |
//! |---|---|---|---|---|
//! | Deployment, StatefulSet, DaemonSet | all (the operator's namespace when it watches one); 6 a list page ([`WORKLOAD_PAGE`]) | name, namespace, uid, resourceVersion; the annotations a trigger reads or the controller writes ([`TRIGGER_ANNOTATIONS`], no others); the template's regular containers' names; which ConfigMaps and Secrets each uses (from `env[].valueFrom`, `envFrom`, `volumeMounts[].name` and `volumes[]`' `configMap`, `secret`, `projected` sources: names only); whether an image is Reloader's (a flag, not the image) | the watch's key and resourceVersion, the index's entry (`index::WorkloadEntry`), the Reloader warning (`context::TriggerContext::reloaders`) | 1,212,811 → 508 serialized (`workload_view::tests`) |
//!
//! Everything a tenant can make large goes unread: env values, commands, args, foreign
//! annotations, labels, `managedFields`, other volume sources, init containers (never restarted
//! in place, so they use nothing a trigger counts), the status. `hash` hashes only ConfigMap and
//! Secret data, read by GET at evaluation: nothing of the workload is hashed, so nothing more is
//! kept for it. The references are computed while decoding by the one function the rest of crr
//! uses (`refs::references`), given a pod spec holding only the names it reads; so the view
//! holds the answer, not the template. The generation, labels, selector and template are not
//! read: a trigger's rollout names the workload (`rollout::trigger_rollout`), and the rollout
//! wing reads the selector itself.
//!
//! [`SlimWorkload`] is a [`kube::Resource`] whose dynamic type is the kind's [`ApiResource`]
//! (`context::api_resource`), so the watches and the responses of the controller's annotation
//! patches (`evaluate::annotate`) decode into it directly (`Api<SlimWorkload>`).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crr_crds::keys;
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapKeySelector, ConfigMapProjection, ConfigMapVolumeSource,
    Container, EnvFromSource, EnvVar, EnvVarSource, PodSpec, ProjectedVolumeSource,
    SecretEnvSource, SecretKeySelector, SecretProjection, SecretVolumeSource, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};

use super::refs::{self, ConfigRef, References};

/// Workloads per page of a list (a watch's first list and its re-lists): a page's body is held
/// whole before it is decoded and one workload may be as large as the API server stores (about
/// 1.5 MB). The three kinds list at once, so their pages together hold what one page of pods
/// may (the operator's pod page of 20, a quarter of the operator's 128 Mi): 6 each, about 27 MB at worst.
pub const WORKLOAD_PAGE: u32 = 6;

/// The annotations kept: those a trigger reads (`annotations::parse`,
/// `annotations::has_trigger_annotations`: crr's and Reloader's) and the two the controller
/// wrote before the TriggerRecord (the config-change record, the last tick), read as the record
/// of a workload that has none (`record`). No other key is kept, so a tenant's annotations,
/// crr-looking or not, cost nothing.
pub const TRIGGER_ANNOTATIONS: [&str; 16] = [
    keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE,
    keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE,
    keys::ANNOTATION_RECREATE_SCHEDULE,
    keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE,
    keys::ANNOTATION_RECREATE_CONTAINERS,
    keys::ANNOTATION_RECREATE_WINDOW,
    keys::ANNOTATION_RESTART_REQUESTED_AT,
    keys::ANNOTATION_CONFIG_HASHES,
    keys::ANNOTATION_LAST_SCHEDULED,
    keys::RELOADER_AUTO,
    keys::RELOADER_CONFIGMAPS,
    keys::RELOADER_SECRETS,
    keys::RELOADER_NOT_READ[0],
    keys::RELOADER_NOT_READ[1],
    keys::RELOADER_NOT_READ[2],
    keys::RELOADER_NOT_READ[3],
];

/// A workload with only what the trigger wing reads (see the module's table).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimWorkload {
    /// Name, namespace, uid, resourceVersion and the [`TRIGGER_ANNOTATIONS`] present, only.
    pub metadata: ObjectMeta,
    /// The names of the template's regular containers, in order.
    pub containers: Vec<String>,
    /// Which ConfigMaps and Secrets each regular container uses (`refs::references`).
    pub references: References,
    /// Those of them that reach a container through a volume (`refs::mounted`).
    pub mounted: BTreeSet<ConfigRef>,
    /// Whether a regular container runs Reloader ([`is_reloader_image`]).
    pub runs_reloader: bool,
}

impl SlimWorkload {
    /// The annotations kept (none: empty).
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        kube::ResourceExt::annotations(self)
    }
}

/// Whether `image` is Reloader's: `stakater/reloader` (Docker Hub's or GHCR's, any tag or
/// digest).
pub fn is_reloader_image(image: &str) -> bool {
    let path = image.split(['@', ':']).next().unwrap_or_default();
    path == "stakater/reloader" || path.ends_with("/stakater/reloader")
}

impl kube::Resource for SlimWorkload {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.kind)
    }

    fn group(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.group)
    }

    fn version(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.version)
    }

    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.api_version)
    }

    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.plural)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de> Deserialize<'de> for SlimWorkload {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Wire::deserialize(deserializer).map(Wire::into_view)
    }
}

/// The wire shape of the fields read; serde skips every other field without allocating it.
/// Every field is optional and null-tolerant: an odd object decodes to less, never fails the
/// watch.
#[derive(Deserialize)]
struct Wire {
    metadata: Option<WireMeta>,
    spec: Option<WireSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    #[serde(default, deserialize_with = "trigger_annotations")]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct WireSpec {
    template: Option<WireTemplate>,
}

#[derive(Deserialize)]
struct WireTemplate {
    spec: Option<WirePodSpec>,
}

/// `spec.template.spec`: regular containers and volumes only (`initContainers` is skipped).
#[derive(Deserialize)]
struct WirePodSpec {
    containers: Option<Vec<WireContainer>>,
    volumes: Option<Vec<WireVolume>>,
}

/// A container: its name, its image (read for [`is_reloader_image`], then dropped), the objects
/// its env and envFrom name and the volumes it mounts. Never an env value.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainer {
    name: Option<String>,
    image: Option<String>,
    env: Option<Vec<WireEnv>>,
    env_from: Option<Vec<WireEnvFrom>>,
    volume_mounts: Option<Vec<WireName>>,
}

/// An env var: only where its value comes from (`name` and `value` are skipped).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEnv {
    value_from: Option<WireEnvSource>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEnvSource {
    config_map_key_ref: Option<WireName>,
    secret_key_ref: Option<WireName>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEnvFrom {
    config_map_ref: Option<WireName>,
    secret_ref: Option<WireName>,
}

/// Any `{"name": ...}`: a key selector, an env source, a volume mount, a projection.
#[derive(Deserialize)]
struct WireName {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireVolume {
    name: Option<String>,
    config_map: Option<WireName>,
    secret: Option<WireSecretVolume>,
    projected: Option<WireProjected>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSecretVolume {
    secret_name: Option<String>,
}

#[derive(Deserialize)]
struct WireProjected {
    sources: Option<Vec<WireProjection>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireProjection {
    config_map: Option<WireName>,
    secret: Option<WireName>,
}

fn name_of(name: Option<WireName>) -> String {
    name.and_then(|name| name.name).unwrap_or_default()
}

impl WireContainer {
    /// The container as a pod spec holds it, with only the names `refs::references` reads.
    fn into_container(self) -> Container {
        let env: Vec<EnvVar> = self
            .env
            .into_iter()
            .flatten()
            .filter_map(|env| env.value_from)
            .map(|from| EnvVar {
                value_from: Some(EnvVarSource {
                    config_map_key_ref: from.config_map_key_ref.map(|key| ConfigMapKeySelector {
                        name: name_of(Some(key)),
                        ..ConfigMapKeySelector::default()
                    }),
                    secret_key_ref: from.secret_key_ref.map(|key| SecretKeySelector {
                        name: name_of(Some(key)),
                        ..SecretKeySelector::default()
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            })
            .collect();
        let env_from: Vec<EnvFromSource> = self
            .env_from
            .into_iter()
            .flatten()
            .map(|from| EnvFromSource {
                config_map_ref: from.config_map_ref.map(|source| ConfigMapEnvSource {
                    name: name_of(Some(source)),
                    ..ConfigMapEnvSource::default()
                }),
                secret_ref: from.secret_ref.map(|source| SecretEnvSource {
                    name: name_of(Some(source)),
                    ..SecretEnvSource::default()
                }),
                ..EnvFromSource::default()
            })
            .collect();
        let volume_mounts: Vec<VolumeMount> = self
            .volume_mounts
            .into_iter()
            .flatten()
            .map(|mount| VolumeMount {
                name: name_of(Some(mount)),
                ..VolumeMount::default()
            })
            .collect();
        Container {
            name: self.name.unwrap_or_default(),
            env: Some(env),
            env_from: Some(env_from),
            volume_mounts: Some(volume_mounts),
            ..Container::default()
        }
    }
}

impl WireVolume {
    /// The volume as a pod spec holds it, with only its name and the objects behind it.
    fn into_volume(self) -> Volume {
        Volume {
            name: self.name.unwrap_or_default(),
            config_map: self.config_map.map(|source| ConfigMapVolumeSource {
                name: name_of(Some(source)),
                ..ConfigMapVolumeSource::default()
            }),
            secret: self.secret.map(|source| SecretVolumeSource {
                secret_name: source.secret_name,
                ..SecretVolumeSource::default()
            }),
            projected: self.projected.map(|projected| ProjectedVolumeSource {
                sources: projected.sources.map(|sources| {
                    sources
                        .into_iter()
                        .map(|source| VolumeProjection {
                            config_map: source.config_map.map(|map| ConfigMapProjection {
                                name: name_of(Some(map)),
                                ..ConfigMapProjection::default()
                            }),
                            secret: source.secret.map(|secret| SecretProjection {
                                name: name_of(Some(secret)),
                                ..SecretProjection::default()
                            }),
                            ..VolumeProjection::default()
                        })
                        .collect()
                }),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        }
    }
}

impl Wire {
    fn into_view(self) -> SlimWorkload {
        let metadata = self
            .metadata
            .map_or_else(ObjectMeta::default, |meta| ObjectMeta {
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                annotations: meta.annotations,
                ..ObjectMeta::default()
            });
        let pod = self
            .spec
            .and_then(|spec| spec.template)
            .and_then(|template| template.spec);
        let Some(pod) = pod else {
            return SlimWorkload {
                metadata,
                ..SlimWorkload::default()
            };
        };
        let runs_reloader = pod
            .containers
            .iter()
            .flatten()
            .any(|container| container.image.as_deref().is_some_and(is_reloader_image));
        // A pod spec of names only, for the one function that says what a template uses.
        let spec = PodSpec {
            containers: pod
                .containers
                .into_iter()
                .flatten()
                .map(WireContainer::into_container)
                .collect(),
            volumes: pod
                .volumes
                .map(|volumes| volumes.into_iter().map(WireVolume::into_volume).collect()),
            ..PodSpec::default()
        };
        let references = refs::references(&spec);
        let mounted = refs::mounted(&spec);
        SlimWorkload {
            metadata,
            containers: spec
                .containers
                .into_iter()
                .map(|container| container.name)
                .collect(),
            references,
            mounted,
            runs_reloader,
        }
    }
}

/// Decodes `metadata.annotations` keeping only the [`TRIGGER_ANNOTATIONS`]: another key is
/// matched without being copied and its value skipped unread. `None` when none is kept, as a
/// workload without annotations decodes.
fn trigger_annotations<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    deserializer.deserialize_option(AnnotationsVisitor)
}

struct AnnotationsVisitor;

impl<'de> Visitor<'de> for AnnotationsVisitor {
    type Value = Option<BTreeMap<String, String>>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a map of annotations")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kept = BTreeMap::new();
        while let Some(TriggerKey(key)) = map.next_key()? {
            match key {
                Some(key) => {
                    let value: String = map.next_value()?;
                    kept.insert(key.to_owned(), value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((!kept.is_empty()).then_some(kept))
    }
}

/// An annotation key: which of the [`TRIGGER_ANNOTATIONS`] it is, `None` for any other (read
/// as the deserializer's `&str`, never copied).
struct TriggerKey(Option<&'static str>);

impl<'de> Deserialize<'de> for TriggerKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl Visitor<'_> for KeyVisitor {
            type Value = TriggerKey;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("an annotation key")
            }

            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<TriggerKey, E> {
                Ok(TriggerKey(
                    TRIGGER_ANNOTATIONS
                        .iter()
                        .copied()
                        .find(|known| *known == key),
                ))
            }
        }

        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests;
