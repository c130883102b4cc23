//! The daemon's loop: a label-selected watch of this node's active CRRs, a work queue keyed by
//! pod (one pod's requests one at a time, pods in parallel up to a limit), and the reconcile
//! that carries out `recreate`'s decisions through CRI and records them in the status.
//!
//! Every status write is a merge patch carrying the resourceVersion it was computed from, so
//! a request completed meanwhile (by the operator: deadline, pod gone) is never moved back and
//! no kill follows it: the write fails with a conflict, and the next round sees the completion.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crr_crds::keys::{CONDITION_SUCCEEDED, LABEL_ACTIVE, LABEL_NODE_NAME, LABEL_POD_UID};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerRecreateState as State, Phase,
};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

use crate::cri::Runtime;
use crate::metrics::Metrics;
use crate::recreate::{self, Next};

/// Interval between looks at the runtime while a recreate is in flight.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(500);

pub struct Daemon {
    pub client: Client,
    pub runtime: Runtime,
    pub node: String,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub store: Store<ContainerRecreateRequest>,
    queue: Queue,
}

/// Pod keys (`namespace/podName`) waiting, running, or to re-run once the running one ends.
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
}

impl Queue {
    fn add(&self, key: String) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.running.contains(&key) {
            state.rerun.insert(key);
        } else {
            state.pending.insert(key);
        }
        drop(state);
        self.notify.notify_one();
    }

    fn take(&self) -> Vec<String> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let keys: Vec<String> = std::mem::take(&mut state.pending).into_iter().collect();
        for key in &keys {
            state.running.insert(key.clone());
        }
        keys
    }

    fn done(&self, key: &str) -> bool {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.running.remove(key);
        state.rerun.remove(key)
    }
}

fn pod_key(crr: &ContainerRecreateRequest) -> String {
    format!(
        "{}/{}",
        crr.namespace().unwrap_or_default(),
        crr.spec.pod_name
    )
}

/// The watch: this node's active requests only.
pub fn selector(node: &str) -> String {
    format!("{LABEL_NODE_NAME}={node},{LABEL_ACTIVE}=true")
}

impl Daemon {
    /// Starts the watch; returns the daemon and a future that feeds the queue.
    pub fn new(
        client: Client,
        runtime: Runtime,
        node: String,
        recorder: Recorder,
        metrics: Metrics,
        on_synced: impl Fn() + Send + 'static,
    ) -> (Arc<Self>, impl std::future::Future<Output = ()>) {
        let (store, writer) = reflector::store();
        let daemon = Arc::new(Self {
            client: client.clone(),
            runtime,
            node: node.clone(),
            recorder,
            metrics,
            store,
            queue: Queue::default(),
        });
        let api: Api<ContainerRecreateRequest> = Api::all(client);
        let config = watcher::Config::default().labels(&selector(&node));
        let feeder = {
            let daemon = daemon.clone();
            let mut on_synced = Some(on_synced);
            async move {
                let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
                futures::pin_mut!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(
                            watcher::Event::Apply(crr)
                            | watcher::Event::Delete(crr)
                            | watcher::Event::InitApply(crr),
                        ) => {
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

    /// Runs pods' reconciles, at most `parallel` at once, until `stop` is notified; then waits
    /// for the running ones (a kill under way is finished, never abandoned halfway).
    pub async fn run(self: Arc<Self>, parallel: usize, stop: Arc<Notify>) {
        let slots = Arc::new(Semaphore::new(parallel.max(1)));
        loop {
            tokio::select! {
                () = self.queue.notify.notified() => {}
                () = stop.notified() => break,
            }
            for key in self.queue.take() {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                let daemon = self.clone();
                tokio::spawn(async move {
                    let requeue = daemon.reconcile(&key).await;
                    drop(permit);
                    if daemon.queue.done(&key) {
                        daemon.queue.add(key.clone());
                    }
                    if let Some(after) = requeue {
                        tokio::time::sleep(after).await;
                        daemon.queue.add(key);
                    }
                });
            }
        }
        let _ = slots.acquire_many(parallel.max(1) as u32).await;
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
            .filter(|crr| crr.metadata.deletion_timestamp.is_none() && !crr.is_completed())
            .map(|crr| (**crr).clone())
            .collect();
        recreate::order(&mut candidates);
        let first = candidates.first()?.name_any();
        let api: Api<ContainerRecreateRequest> = Api::namespaced(self.client.clone(), namespace);
        for waiting in candidates
            .iter()
            .skip(1)
            .filter(|crr| crr.phase().is_none())
        {
            let _ = self
                .write_status(&api, waiting, json!({"phase": Phase::Pending.as_str()}))
                .await;
        }
        // The cache may lag our own writes: decide on a fresh read.
        let crr = match api.get_opt(&first).await {
            Ok(Some(crr)) if !crr.is_completed() && crr.metadata.deletion_timestamp.is_none() => {
                crr
            }
            Ok(_) => return Some(Duration::ZERO),
            Err(error) => {
                tracing::warn!(%error, crr = %first, "reading the request");
                return Some(Duration::from_secs(1));
            }
        };
        let span =
            tracing::info_span!("reconcile", crr = %format!("{namespace}/{first}"), pod = pod_name);
        let _entered = span.enter();
        match self.step(&api, namespace, crr).await {
            Ok(requeue) => requeue,
            Err(error) => {
                tracing::warn!(%error, "round failed; retrying");
                Some(Duration::from_secs(1))
            }
        }
    }

    async fn step(
        &self,
        api: &Api<ContainerRecreateRequest>,
        namespace: &str,
        crr: ContainerRecreateRequest,
    ) -> anyhow::Result<Option<Duration>> {
        if crr.phase() != Some(Phase::Recreating) {
            self.write_status(api, &crr, json!({"phase": Phase::Recreating.as_str()}))
                .await?;
            self.event(
                &crr,
                EventType::Normal,
                "Recreating",
                "started recreating containers",
            )
            .await;
            return Ok(Some(Duration::ZERO));
        }
        if recreate::needs_grace(&crr) {
            match recreate::grace_ends_at(&crr) {
                None => return Ok(None), // the operator marks PreRecreateGrace; its write wakes us
                Some(end) => {
                    let left = end.duration_since(jiff::Timestamp::now());
                    if left.is_positive() {
                        return Ok(Some(
                            Duration::try_from(left).unwrap_or(Duration::from_secs(1)),
                        ));
                    }
                }
            }
        }
        let Some(pod_uid) = crr.labels().get(LABEL_POD_UID).cloned() else {
            self.complete(
                api,
                &crr,
                vec![],
                false,
                "the request has no pod-uid label (was it admitted by the crr webhook?)",
            )
            .await?;
            return Ok(None);
        };
        let containers: HashMap<String, recreate::RuntimeContainer> = self
            .runtime
            .pod_containers(&pod_uid)
            .await?
            .into_iter()
            .collect();
        let mut states = recreate::container_states(&crr, &|name| containers.get(name).cloned());
        let recorded = crr
            .status
            .as_ref()
            .map(|s| s.container_recreate_states.clone())
            .unwrap_or_default();
        let mut crr = crr;
        if states != recorded {
            crr = self
                .write_status(api, &crr, json!({"containerRecreateStates": states}))
                .await?;
        }
        match recreate::next_step(&crr, &states) {
            Next::Wait => Ok(Some(IN_FLIGHT_POLL)),
            Next::Complete { succeeded, message } => {
                self.complete(api, &crr, states, succeeded, &message)
                    .await?;
                Ok(None)
            }
            Next::Kill(index) => {
                let container = crr.spec.containers[index].clone();
                let Some(current) = containers.get(&container.name).cloned() else {
                    return Ok(Some(IN_FLIGHT_POLL));
                };
                // Recorded before the kill: a restart after it knows it happened (recreate.rs).
                states[index].message = Some(recreate::killing_message(&current.id));
                crr = self
                    .write_status(api, &crr, json!({"containerRecreateStates": states}))
                    .await?;

                let started = Instant::now();
                if let Some(handler) = &container.pre_stop {
                    let pod_ip = self.pod_ip(namespace, &crr.spec.pod_name).await;
                    let outcome = crate::pre_stop::run(
                        &self.runtime,
                        &current.id,
                        handler,
                        container.ports.as_deref().unwrap_or_default(),
                        pod_ip.as_deref(),
                        recreate::pre_stop_budget(&crr),
                    )
                    .await;
                    self.metrics
                        .observe_pre_stop(outcome.is_ok(), started.elapsed());
                    if let Err(error) = outcome {
                        let note = format!(
                            "preStop hook of container {} failed: {error}",
                            container.name
                        );
                        tracing::warn!(container = %container.name, %error, "preStop failed; killing anyway");
                        self.event(&crr, EventType::Warning, "FailedPreStopHook", &note)
                            .await;
                    }
                }
                let grace = recreate::kill_grace(&crr, started.elapsed());
                let killed = self.runtime.stop(&current.id, grace).await;
                states[index] = match &killed {
                    Ok(()) => State {
                        name: container.name.clone(),
                        phase: Phase::Recreating,
                        message: None,
                        is_killed: true,
                    },
                    Err(error) => State {
                        name: container.name.clone(),
                        phase: Phase::Failed,
                        message: Some(format!("kill container error: {error}")),
                        is_killed: false,
                    },
                };
                self.metrics.observe_kill(killed.is_ok());
                tracing::info!(container = %container.name, id = %current.id, grace, ok = killed.is_ok(), "stopped container");
                self.write_status(api, &crr, json!({"containerRecreateStates": states}))
                    .await?;
                Ok(Some(IN_FLIGHT_POLL))
            }
        }
    }

    async fn pod_ip(&self, namespace: &str, name: &str) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        pods.get_opt(name).await.ok()??.status?.pod_ip
    }

    async fn complete(
        &self,
        api: &Api<ContainerRecreateRequest>,
        crr: &ContainerRecreateRequest,
        states: Vec<State>,
        succeeded: bool,
        message: &str,
    ) -> anyhow::Result<()> {
        let now = Time(jiff::Timestamp::now());
        let mut conditions: Vec<Condition> = crr
            .status
            .as_ref()
            .map(|status| status.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|condition| condition.type_ != CONDITION_SUCCEEDED)
            .collect();
        conditions.push(Condition {
            type_: CONDITION_SUCCEEDED.to_owned(),
            status: if succeeded { "True" } else { "False" }.to_owned(),
            reason: if succeeded {
                "Recreated"
            } else {
                "RecreateFailed"
            }
            .to_owned(),
            message: message.to_owned(),
            last_transition_time: now.clone(),
            observed_generation: crr.metadata.generation,
        });
        let mut status = json!({
            "phase": Phase::Completed.as_str(),
            "completionTime": now,
            "message": message,
            "conditions": conditions,
        });
        if !states.is_empty() {
            status["containerRecreateStates"] = json!(states);
        }
        self.write_status(api, crr, status).await?;
        let started = crr.metadata.creation_timestamp.as_ref().map(|time| time.0);
        if let Some(started) = started {
            let took = jiff::Timestamp::now().duration_since(started);
            self.metrics
                .observe_recreate(succeeded, Duration::try_from(took).unwrap_or_default());
        }
        let type_ = if succeeded {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.event(
            crr,
            type_,
            if succeeded {
                "Recreated"
            } else {
                "RecreateFailed"
            },
            message,
        )
        .await;
        tracing::info!(succeeded, message, "completed");
        Ok(())
    }

    /// Merge-patches status fields with the object's resourceVersion as precondition; returns
    /// the updated object.
    async fn write_status(
        &self,
        api: &Api<ContainerRecreateRequest>,
        crr: &ContainerRecreateRequest,
        status: serde_json::Value,
    ) -> Result<ContainerRecreateRequest, kube::Error> {
        let patch = json!({
            "metadata": {"resourceVersion": crr.resource_version()},
            "status": status,
        });
        api.patch_status(
            &crr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
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
