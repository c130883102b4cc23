//! Which ConfigMaps and Secrets a pod template uses, and which of its containers use each.
//!
//! A container uses an object it names in `env[].valueFrom` (`configMapKeyRef`, `secretKeyRef`)
//! or `envFrom` (`configMapRef`, `secretRef`), and an object behind a volume it mounts: a
//! `configMap` or `secret` volume, or a `projected` volume's `configMap` and `secret` sources. A
//! volume nobody mounts is used by no container. Only regular containers count: init containers
//! are not restarted in place.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

/// The kind of a configuration object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

impl ConfigKind {
    /// The lower-case name used in annotations and messages (`configmap`, `secret`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "configmap",
            Self::Secret => "secret",
        }
    }

    /// The API kind (`ConfigMap`, `Secret`).
    pub fn kind(self) -> &'static str {
        match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        }
    }
}

/// A ConfigMap or Secret of the workload's namespace, by name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigRef {
    /// ConfigMap or Secret.
    pub kind: ConfigKind,
    /// Its name.
    pub name: String,
}

impl ConfigRef {
    /// A ConfigMap reference.
    pub fn config_map(name: impl Into<String>) -> Self {
        Self {
            kind: ConfigKind::ConfigMap,
            name: name.into(),
        }
    }

    /// A Secret reference.
    pub fn secret(name: impl Into<String>) -> Self {
        Self {
            kind: ConfigKind::Secret,
            name: name.into(),
        }
    }
}

impl fmt::Display for ConfigRef {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}/{}", self.kind.as_str(), self.name)
    }
}

/// Each object the template uses, with the names of the regular containers that use it.
pub type References = BTreeMap<ConfigRef, BTreeSet<String>>;

/// The objects `spec` uses, by the containers that use them.
pub fn references(spec: &PodSpec) -> References {
    let volumes = volume_objects(spec.volumes.as_deref().unwrap_or_default());
    let mut references = References::new();
    for container in &spec.containers {
        for object in container_objects(container, &volumes) {
            references
                .entry(object)
                .or_default()
                .insert(container.name.clone());
        }
    }
    references
}

/// The objects behind each volume, by volume name.
/// The ConfigMaps and Secrets that reach a regular container through a volume it mounts. The
/// kubelet writes a change of these to the pod's volume at its next sync of the pod (within its
/// `syncFrequency` and half as much again), not when a container restarts: a container started
/// sooner reads the data of before. An env reference is read when the container is created.
pub fn mounted(spec: &PodSpec) -> BTreeSet<ConfigRef> {
    let volumes = volume_objects(spec.volumes.as_deref().unwrap_or_default());
    spec.containers
        .iter()
        .flat_map(|container| container.volume_mounts.iter().flatten())
        .filter_map(|mount| volumes.get(mount.name.as_str()))
        .flatten()
        .filter(|object| !object.name.is_empty())
        .cloned()
        .collect()
}

fn volume_objects(volumes: &[Volume]) -> BTreeMap<&str, Vec<ConfigRef>> {
    volumes
        .iter()
        .map(|volume| {
            let mut objects = Vec::new();
            if let Some(name) = volume.config_map.as_ref().map(|source| &source.name) {
                objects.push(ConfigRef::config_map(name));
            }
            if let Some(name) = volume
                .secret
                .as_ref()
                .and_then(|source| source.secret_name.as_ref())
            {
                objects.push(ConfigRef::secret(name));
            }
            for source in volume
                .projected
                .iter()
                .flat_map(|projected| projected.sources.iter().flatten())
            {
                if let Some(config_map) = &source.config_map {
                    objects.push(ConfigRef::config_map(&config_map.name));
                }
                if let Some(secret) = &source.secret {
                    objects.push(ConfigRef::secret(&secret.name));
                }
            }
            (volume.name.as_str(), objects)
        })
        .collect()
}

/// The objects one container uses.
fn container_objects(
    container: &Container,
    volumes: &BTreeMap<&str, Vec<ConfigRef>>,
) -> BTreeSet<ConfigRef> {
    let mut objects = BTreeSet::new();
    for env in container.env.iter().flatten() {
        let Some(from) = &env.value_from else {
            continue;
        };
        if let Some(key) = &from.config_map_key_ref {
            objects.insert(ConfigRef::config_map(&key.name));
        }
        if let Some(key) = &from.secret_key_ref {
            objects.insert(ConfigRef::secret(&key.name));
        }
    }
    for from in container.env_from.iter().flatten() {
        if let Some(source) = &from.config_map_ref {
            objects.insert(ConfigRef::config_map(&source.name));
        }
        if let Some(source) = &from.secret_ref {
            objects.insert(ConfigRef::secret(&source.name));
        }
    }
    for mount in container.volume_mounts.iter().flatten() {
        if let Some(behind) = volumes.get(mount.name.as_str()) {
            objects.extend(behind.iter().cloned());
        }
    }
    objects.retain(|object| !object.name.is_empty());
    objects
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).expect("a pod spec")
    }

    fn containers(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn a_mounted_volume_counts_for_the_containers_that_mount_it_only() {
        let references = references(&spec(serde_json::json!({
            "containers": [
                {"name": "app", "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}]},
                {"name": "sidecar"},
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "app-config"}},
                {"name": "unused", "secret": {"secretName": "nobody-mounts-me"}},
            ],
        })));
        assert_eq!(
            references,
            References::from([(ConfigRef::config_map("app-config"), containers(&["app"]))])
        );
    }

    #[test]
    fn only_objects_behind_a_mounted_volume_are_mounted() {
        let spec = spec(serde_json::json!({
            "containers": [
                {"name": "app",
                 "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "a"}}}],
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/app"},
                                  {"name": "all", "mountPath": "/etc/all"}]},
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "app-config"}},
                {"name": "all", "projected": {"sources": [{"secret": {"name": "tls"}}]}},
                {"name": "unused", "configMap": {"name": "nobody-mounts-me"}},
            ],
        }));
        assert_eq!(
            mounted(&spec),
            BTreeSet::from([
                ConfigRef::config_map("app-config"),
                ConfigRef::secret("tls")
            ])
        );
    }

    #[test]
    fn env_env_from_and_projected_sources_count() {
        let references = references(&spec(serde_json::json!({
            "containers": [
                {"name": "app",
                 "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "a"}}},
                         {"name": "B", "valueFrom": {"secretKeyRef": {"name": "password", "key": "b"}}},
                         {"name": "C", "value": "plain"}],
                 "envFrom": [{"configMapRef": {"name": "bulk"}}]},
                {"name": "proxy",
                 "envFrom": [{"secretRef": {"name": "tls"}}],
                 "volumeMounts": [{"name": "all", "mountPath": "/etc/all"}]},
            ],
            "initContainers": [
                {"name": "init", "envFrom": [{"configMapRef": {"name": "init-only"}}]},
            ],
            "volumes": [
                {"name": "all", "projected": {"sources": [
                    {"configMap": {"name": "settings"}},
                    {"secret": {"name": "password"}},
                    {"serviceAccountToken": {"path": "token"}},
                ]}},
            ],
        })));
        assert_eq!(
            references,
            References::from([
                (ConfigRef::config_map("bulk"), containers(&["app"])),
                (
                    ConfigRef::config_map("settings"),
                    containers(&["app", "proxy"])
                ),
                (ConfigRef::secret("password"), containers(&["app", "proxy"])),
                (ConfigRef::secret("tls"), containers(&["proxy"])),
            ])
        );
    }

    #[test]
    fn a_template_without_config_uses_nothing() {
        let references = references(&spec(serde_json::json!({"containers": [{"name": "app"}]})));
        assert!(references.is_empty());
    }

    #[test]
    fn refs_print_as_kind_and_name() {
        assert_eq!(ConfigRef::secret("tls").to_string(), "secret/tls");
        assert_eq!(ConfigRef::config_map("a").to_string(), "configmap/a");
    }
}
