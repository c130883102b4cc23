//! The trigger controller: its watches, its wake-up queue and the evaluation of a workload that
//! comes due. What the watches saw is kept in the index (`index`); this file turns watch events
//! into the index's plain events and wakes what the index says to wake.
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
//! # Evaluation (`evaluate`)
//! A woken workload is evaluated after the debounce (`TriggerSettings::debounce`, a second by
//! default), so changes within it make one rollout. The config-change trigger compares the
//! hashes with the record on the workload and creates a rollout of the containers that use what
//! changed (`config_change`); while an earlier one of the workload still runs, it looks again
//! later and the change makes a rollout of its own after it. The schedule trigger acts on its
//! tick and sleeps until the next (`schedule`). Every outcome is an Event on the workload. A
//! failed evaluation is counted by kind and retried with backoff.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::{debug, warn};

use super::annotations;
use super::context::{KINDS, api_resource, kept_annotation, locked};
pub use super::context::{SecretAccess, TriggerContext, TriggerSettings};
use super::evaluate;
use super::index::{ConfigEvent, ObjectKey, WorkloadEntry, WorkloadEvent, WorkloadKey};
use super::refs::{self, ConfigKind, ConfigRef};

impl TriggerContext {
    /// Takes one event of a workload watch: the index keeps a small view of a workload with
    /// triggers, and a new one or one whose triggers or used objects changed is woken.
    fn workload_event(&self, kind: &'static str, event: watcher::Event<DynamicObject>) {
        let event = match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                let Some(key) = workload_key(kind, &object) else {
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
                let entry = self.workload_entry(&object);
                WorkloadEvent::Seen { key, entry }
            }
            watcher::Event::Delete(object) => {
                let Some(key) = workload_key(kind, &object) else {
                    return;
                };
                locked(&self.reloaders).remove(&key);
                WorkloadEvent::Gone(key)
            }
            watcher::Event::Init => WorkloadEvent::Relisting(kind),
            watcher::Event::InitDone => WorkloadEvent::Relisted(kind),
        };
        let wake = self.index().apply_workload(event);
        if let Some(key) = wake {
            self.queue.wake(key, self.settings.debounce);
        }
    }

    /// What the index keeps of `object`: `None` when it has no trigger annotation.
    fn workload_entry(&self, object: &DynamicObject) -> Option<WorkloadEntry> {
        let annotations = object.annotations();
        if !annotations::has_trigger_annotations(annotations, self.settings.reloader_annotations) {
            return None;
        }
        let workload = crr_runtime::workload::from_object(object);
        let spec: PodSpec = workload
            .template
            .and_then(|template| template.spec)
            .unwrap_or_default();
        Some(WorkloadEntry {
            uid: workload.uid,
            annotations: annotations
                .iter()
                .filter(|(key, _)| kept_annotation(key))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            containers: spec.containers.iter().map(|c| c.name.clone()).collect(),
            references: refs::references(&spec),
        })
    }

    /// Takes one event of a ConfigMap or Secret metadata watch: a moved resourceVersion wakes
    /// the workloads of the namespace that use the object; after a re-list, changes may have
    /// been missed and every workload is looked at again.
    fn config_event(&self, event: &ConfigEvent) {
        let users = self.index().apply_config(event);
        if let ConfigEvent::Seen { object, .. } | ConfigEvent::Gone(object) = event {
            for user in &users {
                debug!(workload = ?user, object = %object.object, "a used object changed");
            }
        }
        self.wake(users, self.settings.debounce);
    }
}

/// The key of a workload object of `kind`; `None` without a namespace.
fn workload_key(kind: &'static str, object: &DynamicObject) -> Option<WorkloadKey> {
    Some(WorkloadKey {
        kind,
        namespace: object.namespace()?,
        name: object.name_any(),
    })
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

/// The metadata watch of the `K`s (ConfigMaps or Secrets, as `kind` says) in `namespace` (all
/// when `None`).
fn config_watch<K>(
    client: Client,
    kind: ConfigKind,
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
        .filter_map(move |event| {
            let identity = |object: &PartialObjectMeta<K>| ObjectKey {
                namespace: object.namespace().unwrap_or_default(),
                object: ConfigRef {
                    kind,
                    name: object.name_any(),
                },
            };
            futures::future::ready(match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    Some(Ok(ConfigEvent::Seen {
                        object: identity(&object),
                        version: object.resource_version().unwrap_or_default(),
                    }))
                }
                Ok(watcher::Event::Delete(object)) => {
                    Some(Ok(ConfigEvent::Gone(identity(&object))))
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
        config_watch::<ConfigMap>(
            ctx.client.clone(),
            ConfigKind::ConfigMap,
            namespace.as_deref(),
        )
        .boxed(),
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
            config_watch::<Secret>(
                ctx.client.clone(),
                ConfigKind::Secret,
                secrets_of.as_deref(),
            )
            .boxed(),
        ));
    }
    for (kind, stream) in config_watches {
        let ctx = ctx.clone();
        watches.push(Box::pin(stream.for_each(move |event| {
            match event {
                Ok(event) => ctx.config_event(&event),
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
            evaluate_due(&ctx, key).await;
        }
    };
    tokio::select! {
        () = shutdown => {}
        _ = futures::future::join_all(watches) => {}
        () = leading => {}
        () = evaluating => {}
    }
}

/// Evaluates a workload that came due: it is queued again when it asks to be looked at again;
/// a failure is counted in `errors` by its kind and retried with backoff.
pub(super) async fn evaluate_due(ctx: &TriggerContext, key: WorkloadKey) {
    let name = format!("{}/{}/{}", key.kind, key.namespace, key.name);
    match evaluate::evaluate(ctx, &key).await {
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
