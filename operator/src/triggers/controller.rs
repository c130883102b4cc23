//! The trigger controller: its watches, its wake-up queue and the evaluation of a workload that
//! comes due. What the watches saw is kept in the index (`index`); this file turns watch events
//! into the index's plain events and wakes what the index says to wake.
//!
//! # Watches (every replica; only the Lease holder acts)
//! * Deployments, StatefulSets and DaemonSets through the dynamic API, each object decoded
//!   straight into a slim view (`workload_view::SlimWorkload`: identity, the triggers'
//!   annotations, the template's regular containers, what each uses, whether it runs Reloader;
//!   never env values, foreign annotations or the rest of the template), a few a list page
//!   (`workload_view::WORKLOAD_PAGE`). Only workloads with a trigger annotation enter the index
//!   (`entry_of`). A change of one wakes it.
//! * ConfigMaps, and Secrets when allowed, **metadata only**: their `resourceVersion`s. A change
//!   wakes the workloads of its namespace that use it. Data is read (one GET) only when a
//!   workload that uses the object is evaluated and its `resourceVersion` moved since the last
//!   read; only the hash of the data is kept.
//! * TriggerRecords: what each workload's triggers last did (`record`), kept slim.
//!
//! # Evaluation (`evaluate`)
//! Nothing is evaluated until every watch above and the rollout wing's cache have finished their
//! first list (`first_lists`): before that, a workload would look new to its trigger, or use
//! objects the index has not seen. Workloads woken meanwhile wait in the queue.
//! Up to [`EVALUATIONS_AT_ONCE`] workloads are evaluated at once, namespaces taking turns for
//! the slots (`queue`): one tenant's many workloads or slow reads never stall another's.
//! A woken workload is evaluated after the debounce (`TriggerSettings::debounce`, a second by
//! default), so changes within it make one rollout. The config-change trigger compares the
//! hashes with the workload's record and creates a rollout of the containers that use what
//! changed (`config_change`); while an earlier one of the workload still runs, it looks again
//! later and the change makes a rollout of its own after it. The schedule trigger acts on its
//! tick and sleeps until the next (`schedule`). Every outcome is an Event on the workload. A
//! failed evaluation is counted by kind and retried with backoff.

use std::sync::Arc;

use crr_crds::trigger_record::TriggerRecord;
use crr_runtime::backoff::WatchBackoffExt as _;
use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tracing::{debug, info, warn};

use super::annotations;
use super::context::{KINDS, api_resource, locked};
pub use super::context::{SecretAccess, TriggerContext, TriggerSettings};
use super::evaluate;
use super::first_lists::FirstLists;
use super::index::{
    ConfigEvent, MAX_REFERENCES, ObjectKey, WorkloadEntry, WorkloadEvent, WorkloadKey,
};
use super::refs::{ConfigKind, ConfigRef, References};
use super::workload_view::{SlimWorkload, WORKLOAD_PAGE};

impl TriggerContext {
    /// Takes one event of a workload watch: the index keeps a small view of a workload with
    /// triggers, and a new one or one whose triggers or used objects changed is woken.
    fn workload_event(&self, kind: &'static str, event: watcher::Event<SlimWorkload>) {
        let event = match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                let Some(key) = workload_key(kind, &object) else {
                    return;
                };
                if kind == "Deployment" {
                    let mut reloaders = locked(&self.reloaders);
                    if object.runs_reloader {
                        reloaders.insert(key.clone());
                    } else {
                        reloaders.remove(&key);
                    }
                }
                let entry = entry_of(object, self.settings.reloader_annotations);
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
        // Most events of workloads without triggers leave nothing: only one the index held
        // (or a relist, which may drop several) has warnings and change times to forget.
        let gone = match &event {
            WorkloadEvent::Gone(key) | WorkloadEvent::Seen { key, entry: None } => {
                Some(key.clone())
            }
            _ => None,
        };
        let leaving = gone
            .as_ref()
            .and_then(|key| self.index().workload(key).map(|entry| entry.uid.clone()));
        let relisted = matches!(event, WorkloadEvent::Relisted(_));
        let wake = self.index().apply_workload(event);
        if let Some(uid) = leaving {
            locked(&self.warned).forget_workload(&uid);
        }
        if let Some(key) = gone {
            locked(&self.change_times).forget(&key);
        }
        if relisted {
            self.forget_gone_workloads();
        }
        if let Some(key) = wake {
            self.queue.wake(key, self.settings.debounce);
        }
    }

    /// Takes one event of a ConfigMap or Secret metadata watch: a moved resourceVersion wakes
    /// the workloads of the namespace that use the object; after a re-list, changes may have
    /// been missed and every workload is looked at again.
    fn config_event(&self, event: &ConfigEvent) {
        let users = self.index().apply_config(event);
        if let ConfigEvent::Seen { object, .. } | ConfigEvent::Gone(object) = event {
            let now = Timestamp::now();
            let mut change_times = locked(&self.change_times);
            for user in &users {
                debug!(workload = ?user, object = %object.object, "a used object changed");
                change_times.changed(user.clone(), now);
            }
        }
        self.wake(users, self.settings.debounce);
    }
}

/// The key of a workload object of `kind`; `None` without a namespace.
fn workload_key(kind: &'static str, object: &SlimWorkload) -> Option<WorkloadKey> {
    Some(WorkloadKey {
        kind,
        namespace: object.namespace()?,
        name: object.name_any(),
    })
}

/// What the index keeps of `object`: `None` when it has no trigger annotation (`reloader`:
/// whether Reloader's annotations count). The view holds only the annotations a trigger reads,
/// so they are kept as they are.
pub(super) fn entry_of(object: SlimWorkload, reloader: bool) -> Option<WorkloadEntry> {
    if !annotations::has_trigger_annotations(object.annotations(), reloader) {
        return None;
    }
    let uid = object.uid().unwrap_or_default();
    let used = object.references.len();
    let (references, mounted, references_refused) = if used > MAX_REFERENCES {
        (References::new(), Default::default(), Some(used))
    } else {
        (object.references, object.mounted, None)
    };
    Some(WorkloadEntry {
        uid,
        annotations: object.metadata.annotations.unwrap_or_default(),
        containers: object.containers,
        references,
        mounted,
        references_refused,
    })
}

/// Objects per page of the ConfigMap and Secret metadata lists: a page's body is held whole
/// before it is decoded, and an object's metadata may carry 256 KB of annotations, so 100 of
/// them stay near 25 MB (the default page of 500 could reach 128 MB).
const CONFIG_PAGE: u32 = 100;

/// TriggerRecords per page of their list. crr writes them small, but whoever may write them in
/// a namespace (a role with every resource) could make each 1.5 MB: 10 of those are 15 MB,
/// decoded whole before they are slimmed.
const RECORD_PAGE: u32 = 10;

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
    watcher(api, watcher::Config::default().page_size(CONFIG_PAGE))
        .watch_backoff()
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

/// How many workloads are evaluated at once. Namespaces take turns for these slots
/// (`queue::Due`), and one workload is never evaluated twice at once.
pub const EVALUATIONS_AT_ONCE: usize = 4;

/// Runs the trigger controller until `shutdown`: its watches on every replica, its evaluations
/// on the Lease holder.
pub async fn run(
    ctx: Arc<TriggerContext>,
    namespace: Option<String>,
    became_leader: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let mut watches: Vec<futures::future::BoxFuture<'static, ()>> = Vec::new();
    let secret_namespaces: Vec<Option<String>> = match &ctx.settings.secrets {
        SecretAccess::Denied => Vec::new(),
        SecretAccess::All => vec![namespace.clone()],
        SecretAccess::Namespaces(allowed) => allowed
            .iter()
            .filter(|allowed| namespace.as_ref().is_none_or(|watched| watched == *allowed))
            .map(|allowed| Some(allowed.clone()))
            .collect(),
    };
    let secret_watch_name =
        |of: &Option<String>| format!("Secret in {}", of.as_deref().unwrap_or("all namespaces"));
    let first_lists = Arc::new(FirstLists::new(
        KINDS
            .iter()
            .map(|(kind, _)| (*kind).to_owned())
            .chain([ConfigKind::ConfigMap.kind().to_owned(), RECORDS.to_owned()])
            .chain(secret_namespaces.iter().map(secret_watch_name)),
    ));
    for (kind, _) in KINDS {
        let resource = api_resource(kind);
        let api: Api<SlimWorkload> = crr_runtime::client::namespaced_or_all_with(
            ctx.client.clone(),
            namespace.as_deref(),
            &resource,
        );
        let ctx = ctx.clone();
        let first_lists = first_lists.clone();
        watches.push(Box::pin(
            watcher(api, watcher::Config::default().page_size(WORKLOAD_PAGE))
                .watch_backoff()
                .for_each(move |event| {
                    match event {
                        Ok(event) => {
                            let listed = matches!(event, watcher::Event::InitDone);
                            ctx.workload_event(kind, event);
                            if listed {
                                first_lists.listed(kind);
                            }
                        }
                        Err(error) => warn!(%error, kind, "workload watch"),
                    }
                    futures::future::ready(())
                }),
        ));
    }
    let mut config_watches = vec![(
        ConfigKind::ConfigMap.kind().to_owned(),
        config_watch::<ConfigMap>(
            ctx.client.clone(),
            ConfigKind::ConfigMap,
            namespace.as_deref(),
        )
        .boxed(),
    )];
    for secrets_of in &secret_namespaces {
        config_watches.push((
            secret_watch_name(secrets_of),
            config_watch::<Secret>(
                ctx.client.clone(),
                ConfigKind::Secret,
                secrets_of.as_deref(),
            )
            .boxed(),
        ));
    }
    {
        let api: Api<TriggerRecord> =
            crr_runtime::client::namespaced_or_all(ctx.client.clone(), namespace.as_deref());
        let ctx = ctx.clone();
        let first_lists = first_lists.clone();
        watches.push(Box::pin(
            watcher(api, watcher::Config::default().page_size(RECORD_PAGE))
                .watch_backoff()
                .for_each(move |event| {
                    match event {
                        Ok(event) => {
                            let listed = matches!(event, watcher::Event::InitDone);
                            ctx.records().apply(event);
                            ctx.count_pending_changes();
                            if listed {
                                first_lists.listed(RECORDS);
                            }
                        }
                        Err(error) => warn!(%error, "trigger record watch"),
                    }
                    futures::future::ready(())
                }),
        ));
    }
    for (name, stream) in config_watches {
        let ctx = ctx.clone();
        let first_lists = first_lists.clone();
        watches.push(Box::pin(stream.for_each(move |event| {
            match event {
                Ok(event) => {
                    ctx.config_event(&event);
                    if matches!(event, ConfigEvent::Relisted) {
                        first_lists.listed(&name);
                    }
                }
                Err(error) => warn!(%error, watch = %name, "configuration watch"),
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
        // Woken workloads wait in the queue meanwhile.
        first_lists_done(&ctx, &first_lists).await;
        super::queue::evaluate_due_keys(&ctx.queue, EVALUATIONS_AT_ONCE, |key| {
            let ctx = &ctx;
            async move {
                if ctx.is_leader() {
                    evaluate_due(ctx, key).await;
                }
            }
        })
        .await;
    };
    tokio::select! {
        () = shutdown => {}
        _ = futures::future::join_all(watches) => {}
        () = leading => {}
        () = evaluating => {}
    }
}

/// The name of the TriggerRecord watch among the first lists.
const RECORDS: &str = "TriggerRecord";

/// How often the watches still in their first list are named in a warning.
const FIRST_LISTS_WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Returns once every watch of the controller and the rollout wing's cache (a running rollout
/// defers a trigger) have finished their first list; names the ones that have not every
/// [`FIRST_LISTS_WARN_EVERY`] (a watch its RBAC refuses never lists, and no trigger acts).
async fn first_lists_done(ctx: &TriggerContext, first_lists: &FirstLists) {
    let all = async {
        first_lists.all_listed().await;
        if crr_runtime::store::wait_until_ready(&ctx.rollouts)
            .await
            .is_err()
        {
            warn!("the rollout cache has no writer: triggers evaluate without it");
        }
    };
    tokio::pin!(all);
    loop {
        match tokio::time::timeout(FIRST_LISTS_WARN_EVERY, &mut all).await {
            Ok(()) => break,
            Err(_) => {
                let mut waiting = first_lists.waiting();
                if waiting.is_empty() {
                    waiting.push("the rollout cache".to_owned());
                }
                warn!(
                    ?waiting,
                    "triggers wait for the first list of these watches before evaluating any workload"
                );
            }
        }
    }
    info!("every trigger watch listed: evaluating workloads");
}

/// Evaluates a workload that came due: it is queued again when it asks to be looked at again;
/// a failure is counted in `errors` by its kind and retried with backoff.
pub(super) async fn evaluate_due(ctx: &TriggerContext, key: WorkloadKey) {
    let name = format!("{}/{}/{}", key.kind, key.namespace, key.name);
    let started = std::time::Instant::now();
    let evaluated = evaluate::evaluate(ctx, &key).await;
    ctx.metrics
        .evaluation
        .observe(started.elapsed().as_secs_f64());
    match evaluated {
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
