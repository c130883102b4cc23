//! The daemon's I/O against the API server: the label-selected watch of this node's active
//! requests and the field-selected watch of this node's pods, both kept slim (`view`), and
//! [`Requests`] for rounds (sending the rounds' [`StatusPatch`]es, merge patches of the status
//! subresource preconditioned on the resourceVersion they were built from; fresh reads, the
//! pod from the node's pod store, Events).
//!
//! The watch cache lags the daemon's own writes. Rather than re-reading every round, the daemon
//! remembers what it wrote and which versions that write superseded: while the cache still
//! shows a superseded version, its own copy is the current one (upstream's "resourceVersion
//! expectation"). Anything else is a conflict on the next write, and a new round.
//!
//! Nothing here decides what to write or when (`round` and `worker` do); it decides only which
//! copy of a request is the current one, and when the watch shows a request finished (which
//! cancels a preStop hook under way: [`Requests::finished`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crr_crds::status::StatusPatch;
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_runtime::backoff::WatchBackoffExt as _;
use crr_runtime::client::namespaced_or_all;
use crr_runtime::events::EventPublisher;
use futures::{Stream, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, Patch};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource as _, ResourceExt as _};

use crate::round::{Requests, WriteError, must_leave_alone};

/// Field manager of the daemon's writes, so `managedFields` shows what the daemon wrote.
pub const FIELD_MANAGER: &str = "crr-node-daemon";

/// Where the daemon looks for requests.
pub struct Watch {
    pub node: String,
    /// Only these namespaces (tests, or a daemon confined by RBAC to one); all when empty. One
    /// namespace is watched there; several are picked out of the watch of all.
    pub namespaces: Vec<String>,
}

/// The watch of the requests `watch` names, feeding `writer`'s store, retried with backoff.
pub fn watch_requests(
    client: Client,
    watch: &Watch,
    writer: Writer<ContainerRecreateRequest>,
) -> impl Stream<Item = Result<watcher::Event<ContainerRecreateRequest>, watcher::Error>> + Send + use<>
{
    // A lone namespace is watched alone; several are picked out of the watch of all (`wanted`).
    let only_namespace = match watch.namespaces.as_slice() {
        [namespace] => Some(namespace.as_str()),
        _ => None,
    };
    let api: Api<ContainerRecreateRequest> = namespaced_or_all(client, only_namespace);
    let config = watcher::Config::default()
        .labels(&crr_crds::keys::active_on_node_selector(&watch.node))
        .page_size(crate::view::REQUEST_PAGE);
    let namespaces = watch.namespaces.clone();
    let wanted = move |event: &watcher::Event<ContainerRecreateRequest>| {
        let namespace = match event {
            watcher::Event::Apply(crr)
            | watcher::Event::InitApply(crr)
            | watcher::Event::Delete(crr) => crr.namespace(),
            watcher::Event::Init | watcher::Event::InitDone => return true,
        };
        namespaces.is_empty() || namespace.is_some_and(|namespace| namespaces.contains(&namespace))
    };
    let events = watcher(api, config)
        .modify(crate::view::slim_request)
        .try_filter(move |event| std::future::ready(wanted(event)));
    reflector::reflector(writer, events).watch_backoff()
}

/// The watch of the pods of `watch`'s node (field selector `spec.nodeName`), slimmed to what a
/// recreate reads (`live_pod::slim_pod`), feeding `writer`'s store, retried with backoff. The
/// daemon reads its pods there instead of a GET per kill.
pub fn watch_pods(
    client: Client,
    watch: &Watch,
    writer: Writer<Pod>,
) -> impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + use<> {
    let only_namespace = match watch.namespaces.as_slice() {
        [namespace] => Some(namespace.as_str()),
        _ => None,
    };
    let api: Api<Pod> = namespaced_or_all(client, only_namespace);
    let config = watcher::Config::default()
        .fields(&format!("spec.nodeName={}", watch.node))
        .page_size(crate::view::POD_PAGE);
    let events = watcher(api, config).modify(crate::view::slim_pod);
    reflector::reflector(writer, events).watch_backoff()
}

/// `namespace/name` of a request.
pub fn request_key(crr: &ContainerRecreateRequest) -> String {
    format!("{}/{}", crr.namespace().unwrap_or_default(), crr.name_any())
}

/// The API server side of rounds, with the memory of the daemon's own writes.
pub struct ApiRequests {
    client: Client,
    events: EventPublisher,
    written: Mutex<HashMap<String, Written>>,
    /// The watch's store, and a signal for every event it delivered.
    store: Store<ContainerRecreateRequest>,
    watched: tokio::sync::Notify,
    /// The node's pods, slim (`watch_pods`).
    pods: Store<Pod>,
}

/// The daemon's latest write of one request and the versions it made stale.
struct Written {
    superseded: HashSet<String>,
    latest: ContainerRecreateRequest,
}

impl ApiRequests {
    pub fn new(
        client: Client,
        events: EventPublisher,
        store: Store<ContainerRecreateRequest>,
        pods: Store<Pod>,
    ) -> Self {
        Self {
            client,
            events,
            written: Mutex::default(),
            store,
            watched: tokio::sync::Notify::new(),
            pods,
        }
    }

    /// The watch delivered an event (the store has applied it): wakes [`Requests::finished`].
    pub fn watched(&self) {
        self.watched.notify_waiters();
    }

    /// The current version of a request the cache shows: the daemon's own copy while the cache
    /// still shows a version that copy superseded.
    pub fn current(&self, cached: &ContainerRecreateRequest) -> ContainerRecreateRequest {
        let key = request_key(cached);
        let mut written = self.written();
        if let Some(entry) = written.get(&key) {
            if cached
                .resource_version()
                .is_some_and(|version| entry.superseded.contains(&version))
            {
                return entry.latest.clone();
            }
            // The cache caught up (or moved past us): forget our copy.
            written.remove(&key);
        }
        cached.clone()
    }

    /// Drops the daemon's copy of a request (completed or deleted).
    pub fn forget(&self, crr: &ContainerRecreateRequest) {
        self.written().remove(&request_key(crr));
    }

    fn written(&self) -> MutexGuard<'_, HashMap<String, Written>> {
        // Each change under the lock is one insert, update or remove: consistent after a panic.
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn write_error(error: kube::Error) -> WriteError {
    match &error {
        kube::Error::Api(status) if status.code == 409 => WriteError::Conflict,
        kube::Error::Api(status) if status.code == 404 => WriteError::Gone,
        kube::Error::Api(status) if status.code == 403 || status.code == 422 => {
            WriteError::Refused(format!(
                "{} ({}): {}",
                status.reason, status.code, status.message
            ))
        }
        _ => WriteError::Api(error.to_string()),
    }
}

impl Requests for ApiRequests {
    async fn write_status(
        &self,
        patch: &StatusPatch,
    ) -> Result<ContainerRecreateRequest, WriteError> {
        let api: Api<ContainerRecreateRequest> =
            Api::namespaced(self.client.clone(), patch.namespace());
        let updated = api
            .patch_status(
                patch.name(),
                &crr_runtime::client::patch_params(FIELD_MANAGER),
                &Patch::Merge(patch),
            )
            .await
            .map_err(write_error)?;
        let mut updated = updated;
        crate::view::slim_request(&mut updated);
        let mut written = self.written();
        let key = format!("{}/{}", patch.namespace(), patch.name());
        let entry = written.entry(key).or_insert_with(|| Written {
            superseded: HashSet::new(),
            latest: updated.clone(),
        });
        entry.superseded.insert(patch.resource_version().to_owned());
        entry.latest = updated.clone();
        Ok(updated)
    }

    async fn fresh(
        &self,
        crr: &ContainerRecreateRequest,
    ) -> Result<Option<ContainerRecreateRequest>, WriteError> {
        let namespace = crr.namespace().unwrap_or_default();
        let api: Api<ContainerRecreateRequest> = Api::namespaced(self.client.clone(), &namespace);
        api.get_opt(&crr.name_any()).await.map_err(write_error)
    }

    async fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, WriteError> {
        if let Some(pod) = self.pods.get(&ObjectRef::new(name).within(namespace)) {
            return Ok(Some(Pod::clone(&pod)));
        }
        // Not in the node's pod watch (yet): not synced, just bound, or gone. Ask the API server.
        self.read_pod(namespace, name).await
    }

    async fn read_pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, WriteError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let mut pod = pods.get_opt(name).await.map_err(write_error)?;
        if let Some(pod) = pod.as_mut() {
            crate::view::slim_pod(pod);
        }
        Ok(pod)
    }

    fn watched_copy(&self, crr: &ContainerRecreateRequest) -> Option<ContainerRecreateRequest> {
        let reference = ObjectRef::<ContainerRecreateRequest>::new(&crr.name_any())
            .within(&crr.namespace().unwrap_or_default());
        self.store
            .get(&reference)
            .map(|cached| self.current(&cached))
    }

    async fn finished(&self, crr: &ContainerRecreateRequest) {
        let reference = ObjectRef::<ContainerRecreateRequest>::new(&crr.name_any())
            .within(&crr.namespace().unwrap_or_default());
        loop {
            // Listen before looking, so an event between the look and the wait is not missed.
            let watched = self.watched.notified();
            let mut watched = std::pin::pin!(watched);
            watched.as_mut().enable();
            let finished = self
                .store
                .get(&reference)
                .is_none_or(|cached| must_leave_alone(&cached));
            if finished {
                return;
            }
            watched.await;
        }
    }

    async fn event(
        &self,
        crr: &ContainerRecreateRequest,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        self.events
            .publish(&crr.object_ref(&()), type_, reason, note)
            .await;
    }

    async fn pod_event(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        self.events.publish(regarding, type_, reason, note).await;
    }
}
