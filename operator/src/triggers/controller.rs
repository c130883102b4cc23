//! The trigger controller: its watches, its wake-up queue and the evaluation of one workload.
//!
//! # Watches (every replica; only the Lease holder acts)
//! * Deployments, StatefulSets and DaemonSets through the dynamic API. Only workloads with a
//!   trigger annotation are kept, as a small view: UID, annotations of the triggers, the
//!   template's regular containers and what each uses (`refs`). A change of one wakes it.
//! * ConfigMaps, and Secrets when allowed, **metadata only**: their `resourceVersion`s. A change
//!   wakes the workloads of its namespace that use it. Data is read (one GET) only when a
//!   workload that uses the object is evaluated and its `resourceVersion` moved since the last
//!   read; only the hash of the data is kept.
//!
//! # Evaluation
//! A woken workload is evaluated after the debounce (`TriggerSettings::debounce`, a second by
//! default), so changes within it make one rollout. The config-change trigger compares the
//! hashes with the record on the workload and creates a rollout of the containers that use what
//! changed (`config_change`); while an earlier one of the workload still runs, it looks again
//! later and the change makes a rollout of its own after it. The schedule trigger acts on its tick and sleeps until the next (`schedule`). Every
//! outcome is an Event on the workload.

use std::collections::HashSet;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::{debug, warn};

use super::annotations;
use super::context::{KINDS, WorkloadEntry, WorkloadKey, api_resource, kept_annotation, locked};
pub use super::context::{SecretAccess, TriggerContext, TriggerSettings};
use super::evaluate;
use super::refs::{self, ConfigKind, ConfigRef};

impl TriggerContext {
    /// Takes one event of a workload watch.
    fn workload_event(&self, kind: &'static str, event: watcher::Event<DynamicObject>) {
        let view = |object: &DynamicObject| -> Option<(WorkloadKey, Option<WorkloadEntry>)> {
            let key = WorkloadKey {
                kind,
                namespace: object.namespace()?,
                name: object.name_any(),
            };
            let annotations = object.annotations();
            if !annotations::has_trigger_annotations(
                annotations,
                self.settings.reloader_annotations,
            ) {
                return Some((key, None));
            }
            let workload = crr_runtime::workload::from_object(object);
            let spec: PodSpec = workload
                .template
                .and_then(|template| template.spec)
                .unwrap_or_default();
            Some((
                key,
                Some(WorkloadEntry {
                    uid: workload.uid,
                    annotations: annotations
                        .iter()
                        .filter(|(key, _)| kept_annotation(key))
                        .map(|(key, value)| (key.clone(), value.clone()))
                        .collect(),
                    containers: spec.containers.iter().map(|c| c.name.clone()).collect(),
                    references: refs::references(&spec),
                }),
            ))
        };
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                let Some((key, entry)) = view(&object) else {
                    return;
                };
                if kind == "Deployment" {
                    let mut reloaders = locked(&self.reloaders);
                    if runs_reloader(&object) {
                        reloaders.insert(key.clone());
                    } else {
                        reloaders.remove(&key);
                    }
                }
                if let Some(listed) = locked(&self.relisting).get_mut(kind) {
                    listed.insert(key.clone());
                }
                let mut workloads = locked(&self.workloads);
                match entry {
                    Some(entry) => {
                        let changed = workloads.get(&key).is_none_or(|old| {
                            old.annotations != entry.annotations
                                || old.references != entry.references
                        });
                        workloads.insert(key.clone(), entry);
                        drop(workloads);
                        if changed {
                            self.queue.wake(key, self.settings.debounce);
                        }
                    }
                    None => {
                        workloads.remove(&key);
                    }
                }
            }
            watcher::Event::Delete(object) => {
                if let Some(namespace) = object.namespace() {
                    let key = WorkloadKey {
                        kind,
                        namespace,
                        name: object.name_any(),
                    };
                    locked(&self.reloaders).remove(&key);
                    locked(&self.workloads).remove(&key);
                }
            }
            watcher::Event::Init => {
                locked(&self.relisting).insert(kind, HashSet::new());
            }
            watcher::Event::InitDone => {
                if let Some(listed) = locked(&self.relisting).remove(kind) {
                    locked(&self.workloads)
                        .retain(|key, _| key.kind != kind || listed.contains(key));
                }
            }
        }
    }

    /// Takes one event of a ConfigMap or Secret metadata watch: a moved resourceVersion wakes
    /// the workloads of the namespace that use the object.
    fn config_event(&self, kind: ConfigKind, event: ConfigEvent) {
        let (namespace, name, version) = match event {
            ConfigEvent::Seen {
                namespace,
                name,
                version,
            } => (namespace, name, Some(version)),
            ConfigEvent::Gone { namespace, name } => (namespace, name, None),
            ConfigEvent::Relisted => {
                // After a re-list, changes may have been missed: look at everything again.
                self.wake_all(self.settings.debounce);
                return;
            }
        };
        let key = (kind, namespace.clone(), name.clone());
        let moved = {
            let mut versions = locked(&self.versions);
            match version {
                None => versions.remove(&key).is_some(),
                Some(version) => {
                    let same = versions.get(&key) == Some(&version);
                    let known = versions.insert(key, version).is_some();
                    known && !same
                }
            }
        };
        if !moved {
            return;
        }
        let object = ConfigRef { kind, name };
        let users: Vec<WorkloadKey> = locked(&self.workloads)
            .iter()
            .filter(|(key, entry)| {
                key.namespace == namespace && entry.references.contains_key(&object)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for user in users {
            debug!(workload = ?user, %object, "a used object changed");
            self.queue.wake(user, self.settings.debounce);
        }
    }
}

/// Whether a workload runs Reloader: a container image of `stakater/reloader` (Docker Hub's or
/// GHCR's, any tag or digest).
pub fn runs_reloader(object: &DynamicObject) -> bool {
    object.data["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|container| container["image"].as_str())
        .any(|image| {
            let path = image.split(['@', ':']).next().unwrap_or_default();
            path == "stakater/reloader" || path.ends_with("/stakater/reloader")
        })
}

/// What a metadata watch of ConfigMaps or Secrets says.
enum ConfigEvent {
    /// The object exists at this resourceVersion.
    Seen {
        namespace: String,
        name: String,
        version: String,
    },
    /// The object is gone.
    Gone { namespace: String, name: String },
    /// The watch listed everything again.
    Relisted,
}

/// The metadata watch of the `K`s (ConfigMaps or Secrets) in `namespace` (all when `None`).
fn config_watch<K>(
    client: Client,
    namespace: Option<&str>,
) -> impl Stream<Item = Result<ConfigEvent, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = crr_runtime::client::namespaced_or_all(client, namespace);
    watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(|event| {
            let identity = |object: &PartialObjectMeta<K>| {
                (object.namespace().unwrap_or_default(), object.name_any())
            };
            futures::future::ready(match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    let (namespace, name) = identity(&object);
                    Some(Ok(ConfigEvent::Seen {
                        namespace,
                        name,
                        version: object.resource_version().unwrap_or_default(),
                    }))
                }
                Ok(watcher::Event::Delete(object)) => {
                    let (namespace, name) = identity(&object);
                    Some(Ok(ConfigEvent::Gone { namespace, name }))
                }
                Ok(watcher::Event::InitDone) => Some(Ok(ConfigEvent::Relisted)),
                Ok(watcher::Event::Init) => None,
                Err(error) => Some(Err(error)),
            })
        })
}

/// Runs the trigger controller until `shutdown`: its watches on every replica, its evaluations
/// on the Lease holder.
pub async fn run(
    ctx: Arc<TriggerContext>,
    namespace: Option<String>,
    became_leader: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let mut watches: Vec<futures::future::BoxFuture<'static, ()>> = Vec::new();
    for (kind, _) in KINDS {
        let resource = api_resource(kind);
        let api = crr_runtime::client::namespaced_or_all_with(
            ctx.client.clone(),
            namespace.as_deref(),
            &resource,
        );
        let ctx = ctx.clone();
        watches.push(Box::pin(
            watcher(api, watcher::Config::default())
                .default_backoff()
                .for_each(move |event| {
                    match event {
                        Ok(event) => ctx.workload_event(kind, event),
                        Err(error) => warn!(%error, kind, "workload watch"),
                    }
                    futures::future::ready(())
                }),
        ));
    }
    let mut config_watches = vec![(
        ConfigKind::ConfigMap,
        config_watch::<ConfigMap>(ctx.client.clone(), namespace.as_deref()).boxed(),
    )];
    let secret_namespaces: Vec<Option<String>> = match &ctx.settings.secrets {
        SecretAccess::Denied => Vec::new(),
        SecretAccess::All => vec![namespace.clone()],
        SecretAccess::Namespaces(allowed) => allowed
            .iter()
            .filter(|allowed| namespace.as_ref().is_none_or(|watched| watched == *allowed))
            .map(|allowed| Some(allowed.clone()))
            .collect(),
    };
    for secrets_of in secret_namespaces {
        config_watches.push((
            ConfigKind::Secret,
            config_watch::<Secret>(ctx.client.clone(), secrets_of.as_deref()).boxed(),
        ));
    }
    for (kind, stream) in config_watches {
        let ctx = ctx.clone();
        watches.push(Box::pin(stream.for_each(move |event| {
            match event {
                Ok(event) => ctx.config_event(kind, event),
                Err(error) => warn!(%error, kind = kind.kind(), "configuration watch"),
            }
            futures::future::ready(())
        })));
    }
    let leading = {
        let ctx = ctx.clone();
        became_leader.for_each(move |()| {
            ctx.wake_all(ctx.settings.debounce);
            futures::future::ready(())
        })
    };
    let evaluating = async {
        loop {
            let key = ctx.queue.next().await;
            if !ctx.is_leader() {
                continue;
            }
            let name = format!("{}/{}/{}", key.kind, key.namespace, key.name);
            match evaluate::evaluate(&ctx, &key).await {
                Ok(again) => {
                    ctx.backoff.succeeded(&name);
                    if let Some(after) = again {
                        ctx.queue.wake(key, after);
                    }
                }
                Err(error) => {
                    ctx.errors.count(error.kind());
                    let after = ctx.backoff.failed(&name);
                    warn!(workload = %name, %error, retry_in = ?after, "trigger evaluation failed");
                    ctx.queue.wake(key, after);
                }
            }
        }
    };
    tokio::select! {
        () = shutdown => {}
        _ = futures::future::join_all(watches) => {}
        () = leading => {}
        () = evaluating => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(image: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x", "namespace": "y"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
        }))
        .expect("a deployment")
    }

    #[test]
    fn reloader_is_told_by_its_image() {
        for image in [
            "stakater/reloader",
            "stakater/reloader:v1.4.2",
            "ghcr.io/stakater/reloader:v1.4.2",
            "docker.io/stakater/reloader@sha256:0123",
        ] {
            assert!(runs_reloader(&deployment(image)), "{image}");
        }
        for image in [
            "busybox",
            "example.com/stakater/reloader-helper:1",
            "nginx:stakater",
        ] {
            assert!(!runs_reloader(&deployment(image)), "{image}");
        }
    }
}
