//! The daemon's loop: a label-selected watch of this node's active CRRs, a work queue keyed by
//! pod (one pod's requests one at a time, pods in parallel up to a limit), and the choice of
//! which request of a pod goes now. `round.rs` does the work of one request.
//!
//! The watch cache lags the daemon's own writes. Rather than re-reading every round, the daemon
//! remembers what it wrote and which versions that write superseded: while the cache still
//! shows a superseded version, its own copy is the current one (upstream's "resourceVersion
//! expectation"). Anything else is a conflict on the next write, and a new round.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crr_crds::keys::{LABEL_ACTIVE, LABEL_NODE_NAME};
use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::cri::Runtime;
use crate::metrics::Metrics;
use crate::recreate;
use crate::round::{Outcome, Requests, Round, RoundError, WriteError, is_finished};

/// The watch: this node's active requests only.
pub fn selector(node: &str) -> String {
    format!("{LABEL_NODE_NAME}={node},{LABEL_ACTIVE}=true")
}

fn pod_key(crr: &ContainerRecreateRequest) -> String {
    format!(
        "{}/{}",
        crr.namespace().unwrap_or_default(),
        crr.spec.pod_name
    )
}

fn request_key(crr: &ContainerRecreateRequest) -> String {
    format!("{}/{}", crr.namespace().unwrap_or_default(), crr.name_any())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Pod keys (`namespace/podName`) waiting, running, or to run again once the running round
/// ends; plus at most one timer per key.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    notify: Notify,
}

#[derive(Default)]
struct QueueState {
    pending: BTreeSet<String>,
    running: HashSet<String>,
    rerun: HashSet<String>,
    timers: HashMap<String, Instant>,
}

impl Queue {
    fn add(&self, key: String) {
        let mut state = lock(&self.state);
        if state.running.contains(&key) {
            state.rerun.insert(key);
        } else {
            state.pending.insert(key);
        }
        drop(state);
        self.notify.notify_one();
    }

    /// Adds the key after `after`, unless it is already due earlier.
    fn add_after(self: &Arc<Self>, key: String, after: Duration) {
        let at = Instant::now() + after;
        {
            let mut state = lock(&self.state);
            if state.timers.get(&key).is_some_and(|due| *due <= at) {
                return;
            }
            state.timers.insert(key.clone(), at);
        }
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let mut state = lock(&queue.state);
            if state.timers.get(&key) == Some(&at) {
                state.timers.remove(&key);
                drop(state);
                queue.add(key);
            }
        });
    }

    fn take(&self) -> Vec<String> {
        let mut state = lock(&self.state);
        let keys: Vec<String> = std::mem::take(&mut state.pending).into_iter().collect();
        for key in &keys {
            state.running.insert(key.clone());
        }
        keys
    }

    /// The round of `key` ended; whether it must run again at once.
    fn done(&self, key: &str) -> bool {
        let mut state = lock(&self.state);
        state.running.remove(key);
        state.rerun.remove(key)
    }
}

/// The API server side of rounds, with the memory of the daemon's own writes.
pub struct ApiRequests {
    client: Client,
    recorder: Recorder,
    written: Mutex<HashMap<String, Written>>,
}

/// The daemon's latest write of one request and the versions it made stale.
struct Written {
    superseded: HashSet<String>,
    latest: ContainerRecreateRequest,
}

impl ApiRequests {
    pub fn new(client: Client, recorder: Recorder) -> Self {
        Self {
            client,
            recorder,
            written: Mutex::default(),
        }
    }

    /// The current version of a request the cache shows: the daemon's own copy while the cache
    /// still shows a version that copy superseded.
    fn current(&self, cached: &ContainerRecreateRequest) -> ContainerRecreateRequest {
        let key = request_key(cached);
        let mut written = lock(&self.written);
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

    fn forget(&self, crr: &ContainerRecreateRequest) {
        lock(&self.written).remove(&request_key(crr));
    }
}

fn write_error(error: kube::Error) -> WriteError {
    match &error {
        kube::Error::Api(status) if status.code == 409 => WriteError::Conflict,
        kube::Error::Api(status) if status.code == 404 => WriteError::Gone,
        _ => WriteError::Api(error.to_string()),
    }
}

impl Requests for ApiRequests {
    async fn write_status(
        &self,
        crr: &ContainerRecreateRequest,
        status: serde_json::Value,
    ) -> Result<ContainerRecreateRequest, WriteError> {
        let namespace = crr.namespace().unwrap_or_default();
        let api: Api<ContainerRecreateRequest> = Api::namespaced(self.client.clone(), &namespace);
        let sent = crr.resource_version();
        let patch = json!({
            "metadata": {"resourceVersion": sent},
            "status": status,
        });
        let updated = api
            .patch_status(
                &crr.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(write_error)?;
        let mut written = lock(&self.written);
        let entry = written.entry(request_key(crr)).or_insert_with(|| Written {
            superseded: HashSet::new(),
            latest: updated.clone(),
        });
        entry.superseded.extend(sent);
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

    async fn pod_address(&self, namespace: &str, pod: &str) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let status = pods.get_opt(pod).await.ok()??.status?;
        status.pod_ip.filter(|ip| !ip.is_empty()).or(status.host_ip)
    }

    async fn event(
        &self,
        crr: &ContainerRecreateRequest,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.to_owned()),
            action: reason.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &crr.object_ref(&())).await {
            tracing::debug!(%error, reason, "could not publish an Event");
        }
    }
}

/// Where the daemon looks for requests.
pub struct Watch {
    pub node: String,
    /// Only this namespace (tests, or a daemon confined by RBAC); all namespaces when `None`.
    pub namespace: Option<String>,
}

pub struct Daemon {
    requests: ApiRequests,
    runtime: Runtime,
    metrics: Metrics,
    store: Store<ContainerRecreateRequest>,
    queue: Arc<Queue>,
}

impl Daemon {
    /// Starts the watch; returns the daemon and a future that feeds the queue.
    pub fn new(
        client: Client,
        runtime: Runtime,
        watch: Watch,
        recorder: Recorder,
        metrics: Metrics,
        on_synced: impl Fn() + Send + 'static,
    ) -> (Arc<Self>, impl std::future::Future<Output = ()>) {
        let (store, writer) = reflector::store();
        let daemon = Arc::new(Self {
            requests: ApiRequests::new(client.clone(), recorder),
            runtime,
            metrics,
            store,
            queue: Arc::default(),
        });
        let api: Api<ContainerRecreateRequest> = match &watch.namespace {
            Some(namespace) => Api::namespaced(client, namespace),
            None => Api::all(client),
        };
        let config = watcher::Config::default().labels(&selector(&watch.node));
        let feeder = {
            let daemon = daemon.clone();
            let mut on_synced = Some(on_synced);
            async move {
                let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
                futures::pin_mut!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::Apply(crr) | watcher::Event::InitApply(crr)) => {
                            daemon.queue.add(pod_key(&crr));
                        }
                        Ok(watcher::Event::Delete(crr)) => {
                            daemon.requests.forget(&crr);
                            daemon.queue.add(pod_key(&crr));
                        }
                        Ok(watcher::Event::InitDone) => {
                            for crr in daemon.store.state() {
                                daemon.queue.add(pod_key(&crr));
                            }
                            if let Some(callback) = on_synced.take() {
                                callback();
                            }
                        }
                        Ok(watcher::Event::Init) => {}
                        Err(error) => tracing::warn!(%error, "watch of ContainerRecreateRequests"),
                    }
                }
            }
        };
        (daemon, feeder)
    }

    /// Runs pods' rounds, at most `parallel` at once, until `stop` is notified; then waits for
    /// the running ones (a kill under way is finished, never abandoned halfway; a request not
    /// yet at its kill is picked up by the next daemon from its recorded states).
    pub async fn run(self: Arc<Self>, parallel: usize, stop: Arc<Notify>) {
        let parallel = parallel.clamp(1, Semaphore::MAX_PERMITS);
        let slots = Arc::new(Semaphore::new(parallel));
        'outer: loop {
            tokio::select! {
                () = self.queue.notify.notified() => {}
                () = stop.notified() => break,
            }
            for key in self.queue.take() {
                let permit = tokio::select! {
                    permit = slots.clone().acquire_owned() => permit,
                    () = stop.notified() => break 'outer,
                };
                let Ok(permit) = permit else {
                    break 'outer;
                };
                let daemon = self.clone();
                tokio::spawn(async move {
                    let requeue = daemon.reconcile(&key).await;
                    drop(permit);
                    if daemon.queue.done(&key) {
                        daemon.queue.add(key);
                    } else if let Some(after) = requeue {
                        if after.is_zero() {
                            daemon.queue.add(key);
                        } else {
                            daemon.queue.add_after(key, after);
                        }
                    }
                });
            }
        }
        let _ = slots
            .acquire_many(u32::try_from(parallel).unwrap_or(u32::MAX))
            .await;
    }

    /// One round for one pod; returns when to look again (None: on the next event).
    async fn reconcile(&self, key: &str) -> Option<Duration> {
        let (namespace, pod_name) = key.split_once('/')?;
        let mut candidates: Vec<ContainerRecreateRequest> = self
            .store
            .state()
            .iter()
            .filter(|crr| {
                crr.namespace().as_deref() == Some(namespace) && crr.spec.pod_name == pod_name
            })
            .map(|crr| self.requests.current(crr))
            .filter(|crr| !is_finished(crr))
            .collect();
        recreate::order(&mut candidates);
        let mut candidates = candidates.into_iter();
        let crr = candidates.next()?;
        for waiting in candidates.filter(|crr| crr.phase().is_none()) {
            let pending = json!({"phase": Phase::Pending.as_str()});
            if let Err(error) = self.requests.write_status(&waiting, pending).await {
                tracing::debug!(%error, crr = %request_key(&waiting), "marking Pending");
            }
        }
        let span = tracing::info_span!("round", crr = %request_key(&crr), pod = pod_name);
        let round = Round {
            requests: &self.requests,
            runtime: &self.runtime,
            metrics: &self.metrics,
        };
        match round.run(crr.clone()).instrument(span).await {
            Ok(Outcome::After(after)) => Some(after),
            Ok(Outcome::OnChange) => None,
            Ok(Outcome::Completed) => {
                self.requests.forget(&crr);
                Some(Duration::ZERO)
            }
            Err(RoundError::Write(WriteError::Conflict)) => {
                tracing::debug!("the request changed meanwhile; deciding again");
                Some(Duration::from_millis(200))
            }
            Err(error) => {
                tracing::warn!(%error, "round failed; retrying");
                Some(Duration::from_secs(1))
            }
        }
    }
}
