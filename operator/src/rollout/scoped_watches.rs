//! The pods of running rollouts, and the ReplicaSets their Deployments own, from watches
//! scoped to them: one watch per namespace and label selector a running rollout reads (its
//! target's, and that of each PodDisruptionBudget that selects the target), its pods decoded
//! slim ([`SlimPod`]) into a store, and for a Deployment one metadata-only watch of the
//! ReplicaSets its selector selects (which of them the Deployment controls: their owner
//! references). A reconcile reads from there, with no list of its own: the first reconcile that
//! needs a scope starts its watch and waits for the watch's first list (up to [`FIRST_LIST_WAIT`]);
//! only a watch that has not listed by then, or that failed and shows no event since, is read by
//! a list of the reconcile's. A watch no reconcile has read for [`IDLE_AFTER`] stops, so the
//! operator watches only what rollouts at work read, never the cluster's pods (and only the
//! leader, which alone reconciles, watches any).
//!
//! The workload a rollout names is read the same way: a watch of that one object by name
//! (`metadata.name` field selector) per namespace and kind, kept as its UID and `spec.selector`
//! only ([`SlimWorkload`]), not a GET per reconcile.
//!
//! A watched pod that turns Ready or unready, starts terminating, or goes, wakes the rollouts of
//! its namespace ([`wakes`]) once the store shows it: the reconcile it causes reads the change.
//! Like the disruption controller's own count, which a PDB's status comes from, what a watch
//! shows may trail the API server by the watch's delay; pods with a request in flight count as
//! disrupted whatever their copy shows (`world::read_budgets`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crr_runtime::backoff::WatchBackoffExt as _;
use crr_runtime::workload::Workload;
use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec, StatefulSet,
    StatefulSetSpec,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::core::{PartialObjectMeta, Selector};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, Resource};
use tracing::{debug, warn};

use crate::pod_view::{POD_PAGE, SlimPod};

/// A scope's watch stops once no reconcile has read it for this long.
pub const IDLE_AFTER: Duration = Duration::from_secs(120);

/// How long a reconcile waits for a new watch's first list before it lists for itself.
pub const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);

/// How many wake-ups may wait for the controller; beyond that they are dropped (a rollout
/// waiting on pods still looks again at `decide::READY_POLL`).
const WAKE_BUFFER: usize = 256;

/// A namespace and a label selector (as the API spells it), or for a workload its name as a
/// field selector (`metadata.name=web`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Scope {
    namespace: String,
    selector: String,
}

impl Scope {
    fn new(namespace: &str, selector: &Selector) -> Self {
        Self {
            namespace: namespace.to_owned(),
            selector: selector.to_string(),
        }
    }

    fn named(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            selector: format!("metadata.name={name}"),
        }
    }
}

/// A workload kind a rollout may name, as its watch keeps it: identity and `spec.selector`,
/// nothing a tenant can make large (the template, a StatefulSet's claim templates, labels,
/// annotations, the status).
pub trait SlimWorkload:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// `spec.selector`.
    fn selector(&self) -> Option<&LabelSelector>;
    /// Drops all but the name, namespace, UID, resourceVersion and `spec.selector`.
    fn slim(&mut self);
}

macro_rules! slim_workload {
    ($kind:ty, $spec:ident) => {
        impl SlimWorkload for $kind {
            fn selector(&self) -> Option<&LabelSelector> {
                self.spec.as_ref().map(|spec| &spec.selector)
            }

            fn slim(&mut self) {
                self.metadata = slim_meta(std::mem::take(&mut self.metadata));
                self.spec = self.spec.take().map(|spec| $spec {
                    selector: spec.selector,
                    ..$spec::default()
                });
                self.status = None;
            }
        }
    };
}

slim_workload!(Deployment, DeploymentSpec);
slim_workload!(StatefulSet, StatefulSetSpec);
slim_workload!(DaemonSet, DaemonSetSpec);
slim_workload!(ReplicaSet, ReplicaSetSpec);

fn slim_meta(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        ..ObjectMeta::default()
    }
}

/// Whether a scope's store shows what the API server has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Currency {
    /// The watch has not ended its first list (a read waits for that, a while).
    NotListedYet,
    Current,
    /// The watch failed and has shown nothing since (a read does not wait).
    Stale,
}

/// One scope's watch: its store, whether the store is current, when a reconcile last read it.
struct Scoped<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    current: tokio::sync::watch::Receiver<Currency>,
    last_read: Instant,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource<DynamicType = ()> + 'static> Drop for Scoped<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watches of one kind, by scope.
struct Scopes<K: Resource<DynamicType = ()> + 'static> {
    what: &'static str,
    scopes: Mutex<HashMap<Scope, Scoped<K>>>,
}

impl<K> Scopes<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    fn new(what: &'static str) -> Self {
        Self {
            what,
            scopes: Mutex::new(HashMap::new()),
        }
    }

    /// What `scope`'s watch shows once it is current, waiting up to `within` for that (`start`
    /// starts the watch at the first read); `None` if it is not current by then.
    async fn read(
        &self,
        scope: Scope,
        start: impl FnOnce(&Scope) -> Scoped<K>,
        within: Duration,
    ) -> Option<Vec<Arc<K>>> {
        let (store, mut current) = {
            let mut scopes = self.lock();
            let scoped = scopes.entry(scope).or_insert_with_key(|scope| {
                debug!(namespace = %scope.namespace, selector = %scope.selector, what = self.what, "watching what a rollout reads");
                start(scope)
            });
            scoped.last_read = Instant::now();
            (scoped.store.clone(), scoped.current.clone())
        };
        // Only a watch that has not listed yet is waited for: one that failed since is read by
        // the caller's list at once.
        let waited = tokio::time::timeout(
            within,
            current.wait_for(|current| *current != Currency::NotListedYet),
        )
        .await;
        matches!(waited, Ok(Ok(current)) if *current == Currency::Current).then(|| store.state())
    }

    /// Stops the watches no reconcile has read for [`IDLE_AFTER`]; how many are left.
    fn stop_idle(&self, now: Instant) -> usize {
        let mut scopes = self.lock();
        scopes.retain(|scope, scoped| {
            let keep = !idle(scoped.last_read, now);
            if !keep {
                debug!(namespace = %scope.namespace, selector = %scope.selector, what = self.what, "no rollout reads these: their watch stops");
            }
            keep
        });
        scopes.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Scope, Scoped<K>>> {
        self.scopes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Runs `events` into a new store until the watch is dropped; `seen` is told each event with
/// the store as it was before it. The store is current from the first list's end until an error,
/// and again from the next event (a relist's end, or a change the resumed watch delivers).
fn spawn_watch<K>(
    scope: &Scope,
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    mut seen: impl FnMut(&Store<K>, &Event<K>) + Send + 'static,
) -> Scoped<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let (store, mut writer) = reflector::store();
    let (is_current, current) = tokio::sync::watch::channel(Currency::NotListedYet);
    let task = tokio::spawn({
        let store = store.clone();
        let scope = scope.clone();
        async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        is_current.send_replace(Currency::Stale);
                        warn!(namespace = %scope.namespace, selector = %scope.selector, %error, "watching what a rollout reads; listing it until the watch recovers");
                        continue;
                    }
                };
                seen(&store, &event);
                writer.apply_watcher_event(&event);
                if is_current_after(&event) {
                    is_current.send_replace(Currency::Current);
                }
            }
        }
    });
    Scoped {
        store,
        current,
        last_read: Instant::now(),
        task,
    }
}

/// The scoped watches of the rollout wing.
pub struct ScopedWatches {
    client: Client,
    wakes: mpsc::Sender<SlimPod>,
    pods: Scopes<SlimPod>,
    replica_sets: Scopes<PartialObjectMeta<ReplicaSet>>,
    deployments: Scopes<Deployment>,
    stateful_sets: Scopes<StatefulSet>,
    daemon_sets: Scopes<DaemonSet>,
    /// ReplicaSets a rollout names (by name, slim), apart from a Deployment's (by selector,
    /// metadata).
    named_replica_sets: Scopes<ReplicaSet>,
}

impl ScopedWatches {
    /// No watches yet; a watched pod's change is sent to `wakes` (the pod's namespace, name and
    /// UID) for the controller to wake the rollouts of its namespace.
    pub fn new(client: Client) -> (Self, mpsc::Receiver<SlimPod>) {
        let (wakes, woken) = mpsc::channel(WAKE_BUFFER);
        let watches = Self {
            client,
            wakes,
            pods: Scopes::new("pods"),
            replica_sets: Scopes::new("replicasets"),
            deployments: Scopes::new("deployment"),
            stateful_sets: Scopes::new("statefulset"),
            daemon_sets: Scopes::new("daemonset"),
            named_replica_sets: Scopes::new("replicaset"),
        };
        (watches, woken)
    }

    /// The pods `selector` selects in `namespace`, from the scope's watch (started by the first
    /// call, which waits for its first list); `None` if it is not current within
    /// [`FIRST_LIST_WAIT`]: the caller lists.
    pub async fn pods(&self, namespace: &str, selector: &Selector) -> Option<Vec<Pod>> {
        let start = |scope: &Scope| {
            let api = Api::<SlimPod>::namespaced(self.client.clone(), &scope.namespace);
            let config = watcher::Config::default()
                .labels_from(selector)
                .page_size(POD_PAGE);
            let mut wakes = self.wakes.clone();
            spawn_watch(
                scope,
                watcher(api, config).watch_backoff(),
                move |store, event| {
                    if let Some(pod) = changed_pod(store, event) {
                        // A full buffer drops the wake-up: the controller is behind anyway.
                        let _ = wakes.try_send(pod);
                    }
                },
            )
        };
        let pods = self
            .pods
            .read(Scope::new(namespace, selector), start, FIRST_LIST_WAIT)
            .await?;
        Some(pods.iter().map(|pod| pod.0.clone()).collect())
    }

    /// The metadata of the ReplicaSets `selector` selects in `namespace`, as [`Self::pods`].
    pub async fn replica_sets(
        &self,
        namespace: &str,
        selector: &Selector,
    ) -> Option<Vec<Arc<PartialObjectMeta<ReplicaSet>>>> {
        let start = |scope: &Scope| {
            let api = Api::<PartialObjectMeta<ReplicaSet>>::namespaced(
                self.client.clone(),
                &scope.namespace,
            );
            let config = watcher::Config::default().labels_from(selector);
            spawn_watch(
                scope,
                watcher(api, config)
                    .watch_backoff()
                    .modify(|replica_set| replica_set.metadata.managed_fields = None),
                |_, _| {},
            )
        };
        self.replica_sets
            .read(Scope::new(namespace, selector), start, FIRST_LIST_WAIT)
            .await
    }

    /// The workload `kind`/`name` of `namespace` (a kind of `crr_runtime::workload::KINDS`), from
    /// a watch of that one object, as [`Self::pods`]: `Some(None)` when it does not exist, `None`
    /// when the watch is not current within [`FIRST_LIST_WAIT`] or the kind is none of those
    /// (the caller reads it).
    pub async fn workload(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Option<Option<Workload>> {
        let scope = Scope::named(namespace, name);
        match kind {
            "Deployment" => self.workload_in(&self.deployments, scope).await,
            "StatefulSet" => self.workload_in(&self.stateful_sets, scope).await,
            "DaemonSet" => self.workload_in(&self.daemon_sets, scope).await,
            "ReplicaSet" => self.workload_in(&self.named_replica_sets, scope).await,
            _ => None,
        }
    }

    async fn workload_in<K: SlimWorkload>(
        &self,
        scopes: &Scopes<K>,
        scope: Scope,
    ) -> Option<Option<Workload>> {
        let start = |scope: &Scope| {
            let api = Api::<K>::namespaced(self.client.clone(), &scope.namespace);
            let config = watcher::Config::default().fields(&scope.selector);
            spawn_watch(
                scope,
                watcher(api, config).watch_backoff().modify(K::slim),
                |_, _| {},
            )
        };
        let found = scopes.read(scope, start, FIRST_LIST_WAIT).await?;
        Some(found.first().map(|workload| workload_of(workload.as_ref())))
    }

    /// Stops the watches no reconcile has read for [`IDLE_AFTER`]; how many are left.
    pub fn stop_idle(&self, now: Instant) -> usize {
        self.pods.stop_idle(now)
            + self.replica_sets.stop_idle(now)
            + self.deployments.stop_idle(now)
            + self.stateful_sets.stop_idle(now)
            + self.daemon_sets.stop_idle(now)
            + self.named_replica_sets.stop_idle(now)
    }

    /// Stops idle watches every half [`IDLE_AFTER`], forever.
    pub async fn stop_idle_forever(&self) {
        loop {
            tokio::time::sleep(IDLE_AFTER / 2).await;
            self.stop_idle(Instant::now());
        }
    }
}

/// The workload shape of a watched workload (its template is not kept: a rollout reads only the
/// UID and the selector).
fn workload_of<K: SlimWorkload>(workload: &K) -> Workload {
    Workload {
        uid: workload.meta().uid.clone().unwrap_or_default(),
        selector: workload.selector().cloned(),
        template: None,
    }
}

/// The pod of `event` when it changes what a rollout decides on (see [`wakes`]), against
/// `store`'s copy from before it.
fn changed_pod(store: &Store<SlimPod>, event: &Event<SlimPod>) -> Option<SlimPod> {
    let (pod, after) = match event {
        Event::Apply(pod) => (pod, Some(Standing::of(pod))),
        Event::Delete(pod) => (pod, None),
        Event::Init | Event::InitApply(_) | Event::InitDone => return None,
    };
    let before = store
        .get(&ObjectRef::from_obj(pod))
        .map(|old| Standing::of(&old));
    wakes(before, after).then(|| pod.clone())
}

/// What a rollout's plan reads of a pod's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Standing {
    ready: bool,
    terminating: bool,
}

impl Standing {
    fn of(pod: &SlimPod) -> Self {
        Self {
            ready: crr_crds::rules::pod_ready(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// Whether a pod's change from `before` to `after` (`None`: not there) wakes the rollouts of
/// its namespace: a change of readiness or termination, a pod gone, or a new pod that is Ready
/// (one that is not cannot free a slot).
fn wakes(before: Option<Standing>, after: Option<Standing>) -> bool {
    match (before, after) {
        (None, None) => false,
        (None, Some(after)) => after.ready,
        (Some(_), None) => true,
        (Some(before), Some(after)) => before != after,
    }
}

/// Whether a watch's store is current after `event` (it may not be after an error): at the end
/// of a list, and at a change, which a resumed watch delivers only once it is back.
fn is_current_after<K>(event: &Event<K>) -> bool {
    matches!(event, Event::InitDone | Event::Apply(_) | Event::Delete(_))
}

/// Whether a watch last read at `last_read` is idle at `now`.
fn idle(last_read: Instant, now: Instant) -> bool {
    now.saturating_duration_since(last_read) >= IDLE_AFTER
}

#[cfg(test)]
mod tests {
    use super::*;

    const READY: Standing = Standing {
        ready: true,
        terminating: false,
    };
    const UNREADY: Standing = Standing {
        ready: false,
        terminating: false,
    };

    #[test]
    fn readiness_termination_and_departures_wake_and_a_repeat_does_not() {
        assert!(wakes(Some(READY), Some(UNREADY)));
        assert!(wakes(Some(UNREADY), Some(READY)));
        assert!(
            !wakes(Some(READY), Some(READY)),
            "a status write, still Ready"
        );
        assert!(wakes(
            Some(READY),
            Some(Standing {
                ready: true,
                terminating: true
            })
        ));
        assert!(wakes(Some(UNREADY), None), "a pod gone");
        assert!(wakes(None, Some(READY)), "a new pod, Ready");
        assert!(!wakes(None, Some(UNREADY)), "a new pod, not Ready yet");
    }

    fn web_pod(name: &str) -> SlimPod {
        SlimPod::of(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name},
            }))
            .expect("a pod"),
        )
    }

    /// A read waits for the watch's first list, and after an error for the next event; it never
    /// answers from a store that is not current.
    #[tokio::test]
    async fn a_read_waits_for_the_first_list_and_after_an_error_for_the_next_event() {
        let (events, stream) = futures::channel::mpsc::unbounded();
        let mut stream = Some(stream);
        let scopes = Scopes::<SlimPod>::new("pods");
        let scope = Scope {
            namespace: "ns".into(),
            selector: "app=web".into(),
        };
        let wait = Duration::from_millis(50);
        let start = |stream: &mut Option<_>| {
            let stream = stream.take().expect("one watch started");
            move |scope: &Scope| spawn_watch(scope, stream, |_, _| {})
        };
        let names = |pods: Option<Vec<Arc<SlimPod>>>| {
            pods.map(|pods| {
                let mut names: Vec<String> = pods.iter().map(|pod| pod.name_any()).collect();
                names.sort();
                names
            })
        };
        use kube::ResourceExt as _;

        // Started, not listed yet.
        assert_eq!(
            names(scopes.read(scope.clone(), start(&mut stream), wait).await),
            None
        );
        events.unbounded_send(Ok(Event::Init)).unwrap();
        events
            .unbounded_send(Ok(Event::InitApply(web_pod("web-1"))))
            .unwrap();
        assert_eq!(
            names(scopes.read(scope.clone(), |_| unreachable!(), wait).await),
            None
        );
        // The list ends while a read waits: the read answers.
        let read = scopes.read(scope.clone(), |_| unreachable!(), Duration::from_secs(5));
        let listed = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            events.unbounded_send(Ok(Event::InitDone)).unwrap();
        };
        let (read, ()) = tokio::join!(read, listed);
        assert_eq!(names(read), Some(vec!["web-1".to_owned()]));

        // An error: not current until the resumed watch delivers a change.
        events
            .unbounded_send(Err(watcher::Error::NoResourceVersion))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // ...and a read of it does not wait: the caller lists at once.
        let asked = tokio::time::Instant::now();
        assert_eq!(
            names(
                scopes
                    .read(scope.clone(), |_| unreachable!(), Duration::from_secs(5))
                    .await
            ),
            None
        );
        assert!(
            asked.elapsed() < Duration::from_secs(4),
            "a failed watch was waited for"
        );
        events
            .unbounded_send(Ok(Event::Apply(web_pod("web-2"))))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            names(scopes.read(scope, |_| unreachable!(), wait).await),
            Some(vec!["web-1".to_owned(), "web-2".to_owned()])
        );
    }

    #[test]
    fn a_watched_workload_keeps_its_identity_and_selector_and_nothing_a_tenant_makes_large() {
        let blob = "x".repeat(1 << 20);
        let spec = serde_json::json!({
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "app", "image": "db",
                                                  "env": [{"name": "BLOB", "value": blob}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data", "annotations": {"blob": blob}}}],
        });
        let mut stateful_set: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                         "labels": {"app": "db"}, "annotations": {"blob": blob}},
            "spec": spec,
            "status": {"replicas": 3},
        }))
        .expect("a StatefulSet");
        stateful_set.slim();
        let kept = serde_json::to_string(&stateful_set).expect("serialized");
        assert!(kept.len() < 300, "{kept}");
        let workload = workload_of(&stateful_set);
        assert_eq!(workload.uid, "u-1");
        assert_eq!(
            workload.selector.and_then(|selector| selector.match_labels),
            Some([("app".to_owned(), "db".to_owned())].into())
        );
        assert_eq!(stateful_set.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(stateful_set.meta().name.as_deref(), Some("db"));

        let mut deployment: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "uid": "u-2", "annotations": {"blob": blob}},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": blob}]}]}}},
        }))
        .expect("a Deployment");
        deployment.slim();
        assert!(
            serde_json::to_string(&deployment)
                .expect("serialized")
                .len()
                < 200
        );
        assert_eq!(workload_of(&deployment).uid, "u-2");
    }

    #[test]
    fn a_watch_is_idle_only_after_its_time() {
        let read = Instant::now();
        assert!(!idle(read, read + IDLE_AFTER - Duration::from_secs(1)));
        assert!(idle(read, read + IDLE_AFTER));
        assert!(
            !idle(read + Duration::from_secs(5), read),
            "a clock read before"
        );
    }

    #[test]
    fn the_store_copy_before_the_event_decides() {
        let (store, mut writer) = reflector::store::<SlimPod>();
        let pod = |ready: &str| {
            SlimPod::of(
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "web-1", "namespace": "ns", "uid": "u"},
                    "status": {"conditions": [{"type": "Ready", "status": ready}]},
                }))
                .expect("a pod"),
            )
        };
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(pod("True")));
        writer.apply_watcher_event(&Event::InitDone);
        assert!(changed_pod(&store, &Event::Apply(pod("True"))).is_none());
        let woken = changed_pod(&store, &Event::Apply(pod("False"))).expect("turned unready");
        assert_eq!(woken.metadata.uid.as_deref(), Some("u"));
        assert!(changed_pod(&store, &Event::Delete(pod("True"))).is_some());
        assert!(changed_pod(&store, &Event::InitDone).is_none());
    }
}
