//! Rounds against the fake CRI server and an in-memory request. The tests play the
//! operator (the snapshot) between rounds; the fake plays the kubelet (a stopped
//! container is replaced).

use std::sync::Mutex;

use crr_crds::keys::{CONDITION_SUCCEEDED, LABEL_NODE_NAME, LABEL_POD_UID};
use crr_crds::v1beta1::{
    ContainerRecreateRequestStrategy, ContainerRecreateRequestSyncContainerStatus, ProbeHandler,
};
use crr_runtime::metrics::missing_lines;
use k8s_openapi::api::core::v1::{
    ContainerPort, ExecAction, HTTPGetAction, Lifecycle, LifecycleHandler,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::fake_runtime::{FakeRuntime, POD_UID};
use crate::recreate::IN_FLIGHT_POLL;

/// The API server, for one request: resourceVersion preconditions, merge patches.
#[derive(Default)]
struct Memory {
    crr: Mutex<Option<ContainerRecreateRequest>>,
    events: Mutex<Vec<(String, String)>>,
    /// Events on the pod: its reference, type, reason and note.
    pod_events: Mutex<Vec<(ObjectReference, EventType, String, String)>>,
    /// The live pod (`None`: deleted).
    pod: Mutex<Option<Pod>>,
    /// The operator completes the request when the daemon re-reads it (before a kill).
    complete_on_fresh: bool,
    /// How many re-reads to come find the API server away.
    failing_fresh_reads: std::sync::atomic::AtomicUsize,
    /// Pod reads refused for good (403, as the node-scope policy answers).
    refused_pod_reads: bool,
    /// How many times the live pod was read.
    pod_reads: std::sync::atomic::AtomicUsize,
    /// The pod as the API server has it while the node's pod watch (`pod`) lags behind it
    /// (`None`: the watch is in step).
    api_pod: Mutex<Option<Pod>>,
    /// How many times the pod was read past the watch.
    api_pod_reads: std::sync::atomic::AtomicUsize,
    /// Every status patch written, as JSON.
    writes: Mutex<Vec<serde_json::Value>>,
}

fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(target), serde_json::Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(json!({})), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

impl Memory {
    /// The request, and its pod as the kubelet runs it: the request's containers, without
    /// hooks, the API server's default grace period.
    fn new(crr: ContainerRecreateRequest) -> Self {
        let containers: Vec<_> = crr
            .spec
            .containers
            .iter()
            .map(|container| json!({"name": container.name}))
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": POD_UID},
            "spec": {"containers": containers},
        }))
        .unwrap();
        Self {
            crr: Mutex::new(Some(crr)),
            pod: Mutex::new(Some(pod)),
            ..Default::default()
        }
    }

    fn set_pod(&self, change: impl FnOnce(&mut Pod)) {
        change(self.pod.lock().unwrap().as_mut().expect("the pod exists"));
    }

    fn get(&self) -> ContainerRecreateRequest {
        self.crr
            .lock()
            .unwrap()
            .clone()
            .expect("the request exists")
    }

    fn set(&self, change: impl FnOnce(&mut ContainerRecreateRequest)) {
        let mut guard = self.crr.lock().unwrap();
        let crr = guard.as_mut().expect("the request exists");
        change(crr);
        let version: u64 = crr.resource_version().unwrap().parse().unwrap();
        crr.metadata.resource_version = Some((version + 1).to_string());
    }

    fn events(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|(reason, _)| reason.clone())
            .collect()
    }

    fn states(&self) -> Vec<(String, Phase, bool)> {
        self.get()
            .status
            .unwrap_or_default()
            .container_recreate_states
            .into_iter()
            .map(|state| (state.name, state.phase, state.is_killed))
            .collect()
    }
}

impl Requests for Memory {
    async fn write_status(
        &self,
        patch: &StatusPatch,
    ) -> Result<ContainerRecreateRequest, WriteError> {
        let mut guard = self.crr.lock().unwrap();
        let current = guard.as_mut().ok_or(WriteError::Gone)?;
        if current.resource_version().as_deref() != Some(patch.resource_version()) {
            return Err(WriteError::Conflict);
        }
        self.writes
            .lock()
            .unwrap()
            .push(serde_json::to_value(patch).unwrap());
        let mut object = serde_json::to_value(&*current).unwrap();
        merge(&mut object, &serde_json::to_value(patch).unwrap());
        let mut updated: ContainerRecreateRequest = serde_json::from_value(object).unwrap();
        let version: u64 = current.resource_version().unwrap().parse().unwrap();
        updated.metadata.resource_version = Some((version + 1).to_string());
        *current = updated.clone();
        Ok(updated)
    }

    async fn fresh(
        &self,
        _: &ContainerRecreateRequest,
    ) -> Result<Option<ContainerRecreateRequest>, WriteError> {
        use std::sync::atomic::Ordering;
        if self
            .failing_fresh_reads
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok()
        {
            return Err(WriteError::Api(
                "connection refused (API server away)".into(),
            ));
        }
        if self.complete_on_fresh {
            self.set(|crr| {
                let status = crr.status.get_or_insert_default();
                status.phase = Some(Phase::Completed);
                status.completion_time = Some(Time(jiff::Timestamp::now()));
                status.message = Some("recreating has exceeded the activeDeadlineSeconds".into());
            });
        }
        Ok(self.crr.lock().unwrap().clone())
    }

    async fn pod(&self, _: &str, _: &str) -> Result<Option<Pod>, WriteError> {
        if self.refused_pod_reads {
            return Err(WriteError::Refused(
                "Forbidden (403): pods \"p\" is forbidden: not this node's pod".to_owned(),
            ));
        }
        self.pod_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(self.pod.lock().unwrap().clone())
    }

    async fn read_pod(&self, _: &str, _: &str) -> Result<Option<Pod>, WriteError> {
        self.api_pod_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let api_pod = self.api_pod.lock().unwrap().clone();
        Ok(api_pod.or_else(|| self.pod.lock().unwrap().clone()))
    }

    fn watched_copy(&self, _: &ContainerRecreateRequest) -> Option<ContainerRecreateRequest> {
        // The watch shows the request while it is active; one the operator completes on the
        // re-read (`complete_on_fresh`) has left it, so the round reads it afresh.
        if self.complete_on_fresh
            || self
                .failing_fresh_reads
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
        {
            return None;
        }
        self.crr.lock().unwrap().clone()
    }

    async fn finished(&self, _: &ContainerRecreateRequest) {
        // The watch, played by polling the in-memory request.
        loop {
            let finished = self
                .crr
                .lock()
                .unwrap()
                .as_ref()
                .is_none_or(must_leave_alone);
            if finished {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn event(&self, _: &ContainerRecreateRequest, _: EventType, reason: &str, note: &str) {
        self.events
            .lock()
            .unwrap()
            .push((reason.to_owned(), note.to_owned()));
    }

    async fn pod_event(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        self.pod_events.lock().unwrap().push((
            regarding.clone(),
            type_,
            reason.to_owned(),
            note.to_owned(),
        ));
    }
}

/// A request as the webhook leaves it: labels, statusContext of each first attempt.
fn request(
    containers: &[&str],
    strategy: ContainerRecreateRequestStrategy,
) -> ContainerRecreateRequest {
    let mut crr = crate::recreate::admitted_request(containers, strategy);
    crr.metadata.namespace = Some("ns".into());
    crr.metadata.resource_version = Some("1".into());
    crr.metadata.creation_timestamp = Some(Time(jiff::Timestamp::now()));
    crr.metadata.labels = Some(
        [
            (LABEL_POD_UID.to_owned(), POD_UID.to_owned()),
            (LABEL_NODE_NAME.to_owned(), "node".to_owned()),
        ]
        .into(),
    );
    crr
}

/// The request, its pod's first container with `handler` as preStop and these ports.
fn with_pre_stop(
    crr: ContainerRecreateRequest,
    handler: ProbeHandler,
    ports: Vec<ContainerPort>,
) -> Memory {
    let memory = Memory::new(crr);
    memory.set_pod(|pod| {
        let container = &mut pod.spec.as_mut().unwrap().containers[0];
        container.lifecycle = Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                exec: handler.exec,
                http_get: handler.http_get,
                tcp_socket: handler.tcp_socket,
                ..Default::default()
            }),
            ..Default::default()
        });
        container.ports = Some(ports);
    });
    memory
}

fn exec(command: &[&str]) -> ProbeHandler {
    ProbeHandler {
        exec: Some(ExecAction {
            command: Some(command.iter().map(|part| (*part).to_owned()).collect()),
        }),
        ..Default::default()
    }
}

fn grace(seconds: i64) -> ContainerRecreateRequestStrategy {
    ContainerRecreateRequestStrategy {
        termination_grace_period_seconds: Some(seconds),
        ..Default::default()
    }
}

/// The operator's snapshot: every running newest container, Ready unless `unready` names it.
fn operator_snapshot(memory: &Memory, fake: &FakeRuntime, unready: &[&str]) {
    let state = fake.lock();
    let crr = memory.get();
    let snapshot: Vec<_> = crr
        .spec
        .containers
        .iter()
        .filter_map(|container| state.newest(&container.name))
        .filter(|container| container.running)
        .map(|container| ContainerRecreateRequestSyncContainerStatus {
            name: container.name.clone(),
            ready: !unready.contains(&container.name.as_str()),
            restart_count: i32::try_from(container.attempt).unwrap(),
            container_id: format!("containerd://{}", container.id),
        })
        .collect();
    drop(state);
    memory.set(|crr| crr.status.get_or_insert_default().container_status_snapshot = snapshot);
}

/// Rounds until the request completes or `rounds` ran; the operator snapshots between.
async fn drive(
    memory: &Memory,
    fake: &FakeRuntime,
    runtime: &Runtime,
    rounds: usize,
    unready: &[&str],
) -> Vec<Outcome> {
    let metrics = Metrics::register(&mut Default::default());
    drive_reporting(&metrics, memory, fake, runtime, rounds, unready).await
}

/// What the daemon remembers across a request's rounds, fresh for one test.
#[derive(Default)]
struct Memories {
    grace_clock: crate::grace_clock::GraceClock,
    lagging_reads: crate::watch_lag::LaggingPodReads,
    container_events: crate::runtime_events::ContainerEvents,
    restart_policies: crate::live_pod::RestartPolicies,
}

impl Memories {
    /// A round over `requests` and `runtime` that remembers here: a 300 s grace cap, never
    /// preempted.
    fn round<'a, R: Requests>(
        &'a self,
        requests: &'a R,
        runtime: &'a Runtime,
        metrics: &'a Metrics,
    ) -> Round<'a, R> {
        Round {
            requests,
            runtime,
            metrics,
            max_grace_seconds: 300,
            preemption: Preemption::never(),
            grace_clock: &self.grace_clock,
            lagging_reads: &self.lagging_reads,
            restart_policies: &self.restart_policies,
            container_events: &self.container_events,
        }
    }
}

/// [`drive`], reporting to `metrics`.
async fn drive_reporting(
    metrics: &Metrics,
    memory: &Memory,
    fake: &FakeRuntime,
    runtime: &Runtime,
    rounds: usize,
    unready: &[&str],
) -> Vec<Outcome> {
    let memories = Memories::default();
    let round = memories.round(memory, runtime, metrics);
    let mut outcomes = vec![];
    for _ in 0..rounds {
        let crr = memory.get();
        if must_leave_alone(&crr) {
            break;
        }
        outcomes.push(round.run(crr).await.expect("a round"));
        operator_snapshot(memory, fake, unready);
    }
    outcomes
}

fn succeeded(memory: &Memory) -> Option<String> {
    memory
        .get()
        .condition(CONDITION_SUCCEEDED)
        .map(|condition| condition.status.clone())
}

#[tokio::test]
async fn a_recreate_observes_each_of_its_phases_once() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let runtime = fake.serve_reporting(metrics.cri.clone()).await;
    let mut crr = request(&["app"], grace(3));
    crr.metadata.uid = Some("crr-uid".into());
    crr.metadata.creation_timestamp = Some(Time(jiff::Timestamp::now()));
    let memory = with_pre_stop(crr, exec(&["drain"]), vec![]);
    drive_reporting(&metrics, &memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    // A stale copy of the request (as a cache may still hold it) comes round again: its
    // completing write conflicts, and nothing is observed twice.
    let mut stale = memory.get();
    stale.metadata.resource_version = Some("stale".into());
    let status = stale.status.get_or_insert_default();
    status.phase = None;
    status.completion_time = None;
    status.conditions.clear();
    let memories = Memories::default();
    let round = memories.round(&memory, &runtime, &metrics);
    let _ = round.run(stale).await;
    let text = crr_runtime::metrics::encode(&registry).expect("encode");
    let expected = [
        "phase_duration_seconds_count{phase=\"pick_up\"} 1",
        "phase_duration_seconds_count{phase=\"unready_grace\"} 0",
        "phase_duration_seconds_count{phase=\"pre_stop\"} 1",
        "phase_duration_seconds_count{phase=\"kill\"} 1",
        "phase_duration_seconds_count{phase=\"restart\"} 1",
        "phase_duration_seconds_count{phase=\"complete\"} 1",
        "pre_stop_duration_seconds_count{outcome=\"success\"} 1",
        "recreate_duration_seconds_count{outcome=\"success\"} 1",
        "cri_request_duration_seconds_count{method=\"ExecSync\"} 1",
        "cri_request_duration_seconds_count{method=\"StopContainer\"} 1",
        "cri_errors_total{method=\"StopContainer\"} 0",
        // The container it killed came back: one restart that was crr's, once.
        "crr_container_recreates_total{namespace=\"ns\",pod=\"p\",container=\"app\"} 1",
    ];
    let missing = missing_lines(&text, &expected);
    assert!(missing.is_empty(), "{missing:?} missing from\n{text}");
}

#[tokio::test]
async fn status_writes_are_patches_preconditioned_on_the_version_they_were_built_from() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], grace(3)));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert!(must_leave_alone(&memory.get()));
    let writes = memory.writes.lock().unwrap().clone();
    // Nothing is written before the kill: the phase goes with the kill's outcome; then the
    // completion. Two writes for one container.
    assert_eq!(
        writes[0],
        json!({"metadata": {"resourceVersion": "1"}, "status": {
                "phase": "Recreating",
                "containerRecreateStates": [{"name": "app", "phase": "Recreating",
                                             "isKilled": true}]}})
    );
    assert_eq!(writes.len(), 2, "{writes:#?}");
    let shapes: Vec<Vec<String>> = writes
        .iter()
        .map(|write| {
            let mut keys: Vec<String> = write.as_object().unwrap().keys().cloned().collect();
            let mut status: Vec<String> = write["status"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            keys.sort();
            status.sort();
            keys.extend(status);
            keys
        })
        .collect();
    let completion = writes.last().unwrap();
    assert_eq!(
        shapes.last().unwrap(),
        &[
            "metadata",
            "status",
            "completionTime",
            "conditions",
            "containerRecreateStates",
            "message",
            "phase"
        ]
    );
    assert_eq!(completion["status"]["phase"], "Completed");
    let message = "recreated 1 container(s)";
    assert_eq!(completion["status"]["message"], message);
    assert_eq!(
        completion["status"]["conditions"],
        json!([{
            "type": "Succeeded", "status": "True", "reason": "Recreated", "message": message,
            "lastTransitionTime": completion["status"]["completionTime"],
        }])
    );
    assert_eq!(
        completion["status"]["containerRecreateStates"],
        json!([{"name": "app", "phase": "Succeeded", "isKilled": true}])
    );
}

#[tokio::test]
async fn request_without_runtime_completes_without_touching_states() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let mut crr = request(&["app"], grace(3));
    crr.metadata.labels.as_mut().unwrap().remove(LABEL_POD_UID);
    crr.status.get_or_insert_default().phase = Some(Phase::Recreating);
    let memory = Memory::new(crr);
    drive(&memory, &fake, &runtime, 1, &[]).await;
    let writes = memory.writes.lock().unwrap().clone();
    let [completion] = writes.as_slice() else {
        panic!("expected one write, got {writes:#?}");
    };
    let message = "the request has no pod-uid label (was it admitted by the crr webhook?)";
    assert_eq!(
        *completion,
        json!({
            "metadata": {"resourceVersion": "1"},
            "status": {
                "phase": "Completed",
                "completionTime": completion["status"]["completionTime"],
                "message": message,
                "conditions": [{
                    "type": "Succeeded", "status": "False", "reason": "RecreateFailed",
                    "message": message,
                    "lastTransitionTime": completion["status"]["completionTime"],
                }],
            },
        })
    );
}

#[tokio::test]
async fn parallel_recreate_stops_each_container_once_and_completes() {
    let fake = FakeRuntime::with_containers(&["app", "sidecar"]);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app", "sidecar"], grace(7)));
    // The operator withholds readiness: parallel recreate does not wait for it.
    drive(&memory, &fake, &runtime, 4, &["app", "sidecar"]).await;
    assert_eq!(fake.lock().stopped_ids(), ["app-1", "sidecar-1"]);
    assert_eq!(
        fake.lock().stops[0].1,
        7,
        "the whole grace period without preStop"
    );
    drive(&memory, &fake, &runtime, 10, &[]).await;
    let crr = memory.get();
    assert!(must_leave_alone(&crr), "{crr:?}");
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    assert_eq!(
        memory.states(),
        [
            ("app".into(), Phase::Succeeded, true),
            ("sidecar".into(), Phase::Succeeded, true)
        ]
    );
    assert_eq!(fake.lock().stops.len(), 2, "no container stopped twice");
    assert!(crr.status.unwrap().completion_time.is_some());
}

#[tokio::test]
async fn ordered_recreate_stops_the_next_container_only_after_the_previous_is_ready() {
    let fake = FakeRuntime::with_containers(&["app", "sidecar"]);
    let runtime = fake.serve().await;
    let strategy = ContainerRecreateRequestStrategy {
        ordered_recreate: true,
        ..Default::default()
    };
    let memory = Memory::new(request(&["app", "sidecar"], strategy));
    drive(&memory, &fake, &runtime, 6, &["app"]).await;
    assert_eq!(
        fake.lock().stopped_ids(),
        ["app-1"],
        "sidecar waits for app"
    );
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(fake.lock().stopped_ids(), ["app-1", "sidecar-1"]);
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
}

#[tokio::test]
async fn failure_policy_fail_completes_at_the_first_failed_kill() {
    let fake = FakeRuntime::with_containers(&["app", "sidecar"]);
    fake.lock().failing_stops.push("app-1".into());
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app", "sidecar"], Default::default()));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(
        fake.lock().stopped_ids(),
        ["app-1"],
        "sidecar is left alone"
    );
    assert_eq!(succeeded(&memory).as_deref(), Some("False"));
    let states = memory.get().status.unwrap().container_recreate_states;
    assert_eq!(states[0].phase, Phase::Failed);
    assert!(
        states[0]
            .message
            .as_deref()
            .is_some_and(|message| message.starts_with("kill container error")),
        "{states:?}"
    );
    assert!(
        memory
            .get()
            .status
            .unwrap()
            .message
            .unwrap()
            .contains("app")
    );
}

#[tokio::test]
async fn a_runtime_away_during_the_kill_is_retried_not_a_failure() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().unavailable_stops = 2;
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], Default::default()));
    let metrics = Metrics::register(&mut Default::default());
    let memories = Memories::default();
    let round = memories.round(&memory, &runtime, &metrics);
    let mut transient = 0;
    for _ in 0..12 {
        let crr = memory.get();
        if must_leave_alone(&crr) {
            break;
        }
        match round.run(crr).await {
            Ok(_) => {}
            Err(RoundError::Runtime(error)) if error.is_transient() => transient += 1,
            Err(error) => panic!("a round failed: {error}"),
        }
        assert!(
            memory
                .get()
                .status
                .unwrap_or_default()
                .container_recreate_states
                .iter()
                .all(|state| state.phase != Phase::Failed),
            "a runtime restart never fails a container"
        );
        operator_snapshot(&memory, &fake, &[]);
    }
    assert_eq!(transient, 2, "both failed kills were retried");
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    assert_eq!(
        fake.lock()
            .stops
            .iter()
            .filter(|(id, _)| id == "app-1")
            .count(),
        3,
        "two refused calls, then the one kill"
    );
    assert_eq!(memory.states(), [("app".into(), Phase::Succeeded, true)]);
}

#[tokio::test]
async fn failure_policy_ignore_goes_on_and_reports_the_failure() {
    let fake = FakeRuntime::with_containers(&["app", "sidecar"]);
    fake.lock().failing_stops.push("app-1".into());
    let runtime = fake.serve().await;
    let strategy = ContainerRecreateRequestStrategy {
        failure_policy: Some("Ignore".into()),
        ..Default::default()
    };
    let memory = Memory::new(request(&["app", "sidecar"], strategy));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(fake.lock().stopped_ids(), ["app-1", "sidecar-1"]);
    assert_eq!(succeeded(&memory).as_deref(), Some("False"));
    assert_eq!(
        memory.states(),
        [
            ("app".into(), Phase::Failed, false),
            ("sidecar".into(), Phase::Succeeded, true)
        ]
    );
}

/// The container restarted on its own after the request was made.
fn already_restarted(fake: &FakeRuntime) {
    let mut state = fake.lock();
    state.containers[0].running = false;
    state.containers.push(crate::fake_runtime::FakeContainer {
        id: "app-2".into(),
        name: "app".into(),
        namespace_label: None,
        attempt: 1,
        running: true,
        started_at: jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60),
        finished_at: None,
    });
}

#[tokio::test]
async fn a_container_restarted_since_the_request_counts_as_recreated() {
    let fake = FakeRuntime::with_containers(&["app"]);
    already_restarted(&fake);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], Default::default()));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert!(fake.lock().stops.is_empty());
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
}

#[tokio::test]
async fn force_recreate_stops_a_restarted_container_exactly_once() {
    let fake = FakeRuntime::with_containers(&["app"]);
    already_restarted(&fake);
    let runtime = fake.serve().await;
    let strategy = ContainerRecreateRequestStrategy {
        force_recreate: true,
        ..Default::default()
    };
    let memory = Memory::new(request(&["app"], strategy));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(fake.lock().stopped_ids(), ["app-2"]);
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    assert_eq!(memory.states(), [("app".into(), Phase::Succeeded, true)]);
}

#[tokio::test]
async fn force_recreate_never_kills_again_a_container_found_exiting_once_it_restarted() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().containers[0].running = false;
    let runtime = fake.serve().await;
    let strategy = ContainerRecreateRequestStrategy {
        force_recreate: true,
        ..Default::default()
    };
    let memory = Memory::new(request(&["app"], strategy));
    drive(&memory, &fake, &runtime, 1, &[]).await;
    assert_eq!(memory.states(), [("app".into(), Phase::Recreating, true)]);
    // The kubelet restarts the exited container.
    fake.lock()
        .containers
        .push(crate::fake_runtime::FakeContainer {
            id: "app-2".into(),
            name: "app".into(),
            namespace_label: None,
            attempt: 1,
            running: true,
            started_at: jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60),
            finished_at: None,
        });
    operator_snapshot(&memory, &fake, &[]);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert!(fake.lock().stops.is_empty(), "{:?}", fake.lock().stops);
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    assert_eq!(memory.states(), [("app".into(), Phase::Succeeded, true)]);
}

#[tokio::test]
async fn a_container_without_status_context_fails_the_request_without_a_kill() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let mut crr = request(&["app"], Default::default());
    // Created while the webhook was away: nothing recorded which container to replace.
    crr.spec.containers[0].status_context = None;
    let memory = Memory::new(crr);
    operator_snapshot(&memory, &fake, &[]);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert!(fake.lock().stops.is_empty(), "{:?}", fake.lock().stops);
    assert_eq!(succeeded(&memory).as_deref(), Some("False"));
    assert_eq!(memory.states(), [("app".into(), Phase::Failed, false)]);
    let message = memory.get().status.unwrap().message.unwrap_or_default();
    assert!(
        message.contains("no statusContext or empty containerID in app container"),
        "{message}"
    );
}

#[tokio::test]
async fn killing_and_failed_pre_stop_hook_go_on_the_pod_with_a_summary_on_the_request() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().exec.exit_code = 3;
    let runtime = fake.serve().await;
    let memory = with_pre_stop(request(&["app"], grace(9)), exec(&["false"]), vec![]);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    let pod_events = memory.pod_events.lock().unwrap().clone();
    let summary: Vec<_> = pod_events
        .iter()
        .map(|(_, type_, reason, _)| (*type_, reason.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (EventType::Warning, "FailedPreStopHook"),
            (EventType::Normal, "Killing")
        ]
    );
    for (regarding, _, reason, note) in &pod_events {
        assert_eq!(regarding.kind.as_deref(), Some("Pod"), "{reason}");
        assert_eq!(regarding.api_version.as_deref(), Some("v1"), "{reason}");
        assert_eq!(regarding.namespace.as_deref(), Some("ns"), "{reason}");
        assert_eq!(regarding.name.as_deref(), Some("p"), "{reason}");
        assert_eq!(regarding.uid.as_deref(), Some(POD_UID), "{reason}");
        // The kubelet's field path: one Event per container, not one series per pod.
        assert_eq!(
            regarding.field_path.as_deref(),
            Some("spec.containers{app}"),
            "{reason}"
        );
        assert!(note.contains("app"), "{reason}: {note}");
        assert!(
            note.contains("ContainerRecreateRequest r"),
            "{reason}: {note}"
        );
    }
    let on_request = memory.events();
    // On the request: the failed hook, and its one result Event (a stop that worked was said on
    // the pod).
    assert_eq!(on_request, ["FailedPreStopHook", "Recreated"]);
}

#[tokio::test]
async fn min_started_seconds_holds_success_until_the_new_container_ran_that_long() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let strategy = ContainerRecreateRequestStrategy {
        min_started_seconds: 600,
        ..Default::default()
    };
    let memory = Memory::new(request(&["app"], strategy));
    let outcomes = drive(&memory, &fake, &runtime, 6, &[]).await;
    assert!(
        !must_leave_alone(&memory.get()),
        "the new container started just now"
    );
    assert_eq!(outcomes.last(), Some(&Outcome::After(IN_FLIGHT_POLL)));
    assert_eq!(memory.states(), [("app".into(), Phase::Recreating, true)]);
    // Ten minutes later, by the runtime's clock.
    fake.lock().containers[1].started_at -= jiff::SignedDuration::from_secs(601);
    drive(&memory, &fake, &runtime, 3, &[]).await;
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    assert_eq!(fake.lock().stops.len(), 1);
}

#[tokio::test]
async fn exec_pre_stop_runs_in_the_old_container_before_the_kill_with_the_grace_period() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = with_pre_stop(
        request(&["app"], grace(9)),
        exec(&["sh", "-c", "drain"]),
        vec![],
    );
    drive(&memory, &fake, &runtime, 10, &[]).await;
    let state = fake.lock();
    assert_eq!(
        state.execs,
        [(
            "app-1".to_owned(),
            vec!["sh".to_owned(), "-c".to_owned(), "drain".to_owned()],
            9
        )]
    );
    assert_eq!(state.stops.len(), 1);
    assert!(
        state.stops[0].1 <= 9 && state.stops[0].1 >= 2,
        "{:?}",
        state.stops
    );
    assert!(!memory.events().contains(&"FailedPreStopHook".to_owned()));
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
}

#[tokio::test]
async fn failed_exec_pre_stop_is_reported_and_the_kill_goes_on() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().exec.exit_code = 3;
    let runtime = fake.serve().await;
    let memory = with_pre_stop(request(&["app"], grace(9)), exec(&["false"]), vec![]);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert!(memory.events().contains(&"FailedPreStopHook".to_owned()));
    let note = memory
        .events
        .lock()
        .unwrap()
        .iter()
        .find(|(reason, _)| reason == "FailedPreStopHook")
        .map(|(_, note)| note.clone())
        .unwrap();
    assert!(note.contains("code 3"), "{note}");
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
}

#[tokio::test]
async fn exec_pre_stop_that_outlasts_the_grace_period_times_out_and_the_kill_gets_the_minimum() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().exec.hang = true;
    let runtime = fake.serve().await;
    let memory = with_pre_stop(request(&["app"], grace(1)), exec(&["sleep", "100"]), vec![]);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    let notes: Vec<_> = memory.events.lock().unwrap().clone();
    assert!(
        notes
            .iter()
            .any(|(reason, note)| reason == "FailedPreStopHook" && note.contains("timed out")),
        "{notes:?}"
    );
    assert_eq!(
        fake.lock().stops,
        [("app-1".to_owned(), 2)],
        "never below 2 s"
    );
}

#[tokio::test]
async fn http_pre_stop_reaches_the_pod_address_on_the_named_port() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buffer = vec![0u8; 1024];
        let read = stream.read(&mut buffer).await.unwrap();
        stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        String::from_utf8_lossy(&buffer[..read]).into_owned()
    });
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let handler = ProbeHandler {
        http_get: Some(HTTPGetAction {
            path: Some("/drain".into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let ports = vec![ContainerPort {
        name: Some("http".into()),
        container_port: i32::from(port),
        ..Default::default()
    }];
    let memory = with_pre_stop(request(&["app"], grace(9)), handler, ports);
    memory.set_pod(|pod| {
        pod.status.get_or_insert_default().pod_ip = Some("127.0.0.1".into());
    });
    drive(&memory, &fake, &runtime, 10, &[]).await;
    let received = server.await.unwrap();
    assert!(received.starts_with("GET /drain HTTP/1.1"), "{received}");
    assert!(!memory.events().contains(&"FailedPreStopHook".to_owned()));
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
}

#[tokio::test]
async fn a_request_completed_during_pre_stop_still_gets_its_kill_and_no_other() {
    let fake = FakeRuntime::with_containers(&["app", "sidecar"]);
    let runtime = fake.serve().await;
    let mut memory = with_pre_stop(
        request(&["app", "sidecar"], grace(9)),
        exec(&["drain"]),
        vec![],
    );
    memory.complete_on_fresh = true;
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(fake.lock().execs.len(), 1);
    assert_eq!(
        fake.lock().stopped_ids(),
        ["app-1"],
        "the kill under way finishes; no new kill starts"
    );
    assert!(must_leave_alone(&memory.get()));
    assert_eq!(
        memory.states(),
        [
            ("app".to_owned(), Phase::Recreating, true),
            ("sidecar".to_owned(), Phase::Pending, false),
        ]
    );
}

#[tokio::test]
async fn a_refused_read_fails_the_request_with_the_reason_and_kills_nothing() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let mut memory = Memory::new(request(&["app"], grace(9)));
    memory.refused_pod_reads = true;
    let metrics = Metrics::register(&mut Default::default());
    let memories = Memories::default();
    let round = memories.round(&memory, &runtime, &metrics);
    let crr = memory.get();
    let Err(RoundError::Write(WriteError::Refused(reason))) = round.run(crr.clone()).await else {
        panic!("a refused pod read ends the round as refused");
    };
    round.fail_refused(&crr, &reason).await;
    let failed = memory.get();
    assert!(must_leave_alone(&failed));
    assert_eq!(succeeded(&memory).as_deref(), Some("False"));
    let message = failed.status.unwrap().message.unwrap_or_default();
    assert!(
        message.starts_with("the API server refused the node daemon: Forbidden (403)"),
        "{message}"
    );
    assert!(memory.events().contains(&"Refused".to_owned()));
    assert!(fake.lock().stops.is_empty());
}

#[tokio::test]
async fn an_api_server_away_after_the_hook_is_waited_for_and_the_hook_runs_once() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = with_pre_stop(request(&["app"], grace(9)), exec(&["drain"]), vec![]);
    memory
        .failing_fresh_reads
        .store(3, std::sync::atomic::Ordering::Relaxed);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(
        memory
            .failing_fresh_reads
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "the re-read was tried again"
    );
    assert_eq!(fake.lock().execs.len(), 1, "the hook ran once");
    assert_eq!(fake.lock().stopped_ids(), ["app-1"], "then the kill");
}

#[tokio::test]
async fn an_on_failure_container_that_exits_zero_after_the_kill_fails_with_a_message() {
    let fake = FakeRuntime::with_containers(&["app"]);
    // The kubelet does not start it again: it exited 0 under OnFailure, a while ago.
    fake.lock().restart_on_stop = false;
    fake.lock().exited_ago = Duration::from_secs(10);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], Default::default()));
    memory.set_pod(|pod| {
        pod.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
        pod.status = Some(app_terminated_with(0));
    });
    let message = killed_once_and_not_restarted(&memory, &fake, &runtime).await;
    assert!(message.contains("OnFailure"), "{message}");
}

/// The pod status the kubelet reports once `app` (container app-1) exited with `exit_code`.
fn app_terminated_with(exit_code: i32) -> k8s_openapi::api::core::v1::PodStatus {
    serde_json::from_value(json!({"containerStatuses": [{
        "name": "app", "image": "i", "imageID": "", "ready": false,
        "restartCount": 0, "containerID": "containerd://app-1",
        "state": {"terminated": {"exitCode": exit_code, "containerID": "containerd://app-1"}},
    }]}))
    .unwrap()
}

/// Drives the request to its end and checks that `app` was killed once and ended Failed, the
/// request Completed, with a NotRestarted Event; returns the request's message.
async fn killed_once_and_not_restarted(
    memory: &Memory,
    fake: &FakeRuntime,
    runtime: &Runtime,
) -> String {
    drive(memory, fake, runtime, 10, &[]).await;
    assert_eq!(fake.lock().stopped_ids(), ["app-1"], "killed once");
    assert_eq!(memory.states(), [("app".to_owned(), Phase::Failed, true)]);
    let status = memory.get().status.unwrap();
    assert_eq!(status.phase, Some(Phase::Completed));
    assert!(memory.events().contains(&"NotRestarted".to_owned()));
    status.message.unwrap_or_default()
}

#[tokio::test]
async fn a_container_its_restart_rules_leave_stopped_after_the_kill_fails_with_a_message() {
    let fake = FakeRuntime::with_containers(&["app"]);
    // SIGKILLed (137), and only 143 restarts it: the kubelet leaves it stopped.
    fake.lock().restart_on_stop = false;
    fake.lock().exited_ago = Duration::from_secs(10);
    fake.lock().exit_code = 137;
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], Default::default()));
    memory.set_pod(|pod| {
        let app = &mut pod.spec.as_mut().unwrap().containers[0];
        app.restart_policy = Some("Never".into());
        app.restart_policy_rules = Some(
            serde_json::from_value(json!([
                {"action": "Restart", "exitCodes": {"operator": "In", "values": [143]}},
            ]))
            .unwrap(),
        );
        pod.status = Some(app_terminated_with(137));
    });
    let message = killed_once_and_not_restarted(&memory, &fake, &runtime).await;
    assert!(
        message.contains("exited with code 137")
            && message.contains("none of its restartPolicyRules restarts it")
            && message.contains("restartPolicy is Never (container)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_code_the_kubelet_restarts_after_costs_no_pod_read() {
    let fake = FakeRuntime::with_containers(&["app"]);
    // OnFailure and 143: the kubelet restarts it after its back-off, however long.
    fake.lock().restart_on_stop = false;
    fake.lock().exited_ago = Duration::from_secs(10);
    fake.lock().exit_code = 143;
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], Default::default()));
    memory.set_pod(|pod| {
        pod.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    });
    drive(&memory, &fake, &runtime, 3, &[]).await;
    assert_eq!(
        memory.states(),
        [("app".to_owned(), Phase::Recreating, true)]
    );
    assert_eq!(
        memory.pod_reads.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the kill round's read only"
    );
}

#[tokio::test]
async fn an_exited_container_of_an_always_pod_is_waited_for() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().restart_on_stop = false;
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], Default::default()));
    let outcomes = drive(&memory, &fake, &runtime, 3, &[]).await;
    assert_eq!(
        memory.states(),
        [("app".to_owned(), Phase::Recreating, true)]
    );
    assert!(
        matches!(outcomes.last(), Some(Outcome::After(_))),
        "{outcomes:?}"
    );
    // Just exited: the runtime's answer spares a pod read (the kill round's is the only one).
    assert_eq!(
        memory.pod_reads.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn a_stale_copy_of_a_finished_request_is_never_acted_on() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], Default::default()));
    let stale = memory.get();
    // The operator completed it; the copy the round was handed predates that.
    memory.set(|crr| {
        let status = crr.status.get_or_insert_default();
        status.phase = Some(Phase::Completed);
        status.completion_time = Some(Time(jiff::Timestamp::now()));
    });
    let metrics = Metrics::register(&mut Default::default());
    let memories = Memories::default();
    let round = memories.round(&memory, &runtime, &metrics);
    assert_eq!(round.run(stale).await.expect("a round"), Outcome::OnChange);
    assert!(fake.lock().stops.is_empty());
    assert!(memory.writes.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_kill_made_on_a_stale_copy_is_recorded_on_the_current_version() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], Default::default()));
    let stale = memory.get();
    // Changed meanwhile, nothing the kill depends on (the operator's snapshot, say).
    memory.set(|_| {});
    let metrics = Metrics::register(&mut Default::default());
    let memories = Memories::default();
    let round = memories.round(&memory, &runtime, &metrics);
    round.run(stale).await.expect("a round");
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
    assert_eq!(memory.states(), [("app".into(), Phase::Recreating, true)]);
    assert_eq!(memory.get().phase(), Some(Phase::Recreating));
}

#[tokio::test]
async fn a_daemon_restarted_mid_recreate_never_stops_a_container_twice() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().exec.hang = true;
    let runtime = fake.serve().await;
    let memory = std::sync::Arc::new(with_pre_stop(
        request(&["app"], grace(30)),
        exec(&["drain"]),
        vec![],
    ));
    // First daemon: dies while the preStop hook runs, before its kill.
    let first = {
        let (memory, fake, runtime) = (memory.clone(), fake.clone(), runtime.clone());
        tokio::spawn(async move { drive(&memory, &fake, &runtime, 10, &[]).await })
    };
    fake.exec_started.notified().await;
    first.abort();
    let _ = first.await;
    assert!(fake.lock().stops.is_empty());
    // Nothing was written before the kill: no announcement, no phase.
    assert!(
        memory.get().status.is_none_or(
            |status| status.phase.is_none() && status.container_recreate_states.is_empty()
        ),
        "{:?}",
        memory.get().status
    );
    // Second daemon: the container still runs, so the kill did not happen: do it once.
    fake.lock().exec.hang = false;
    let metrics = Metrics::register(&mut Default::default());
    let round = Round {
        requests: memory.as_ref(),
        runtime: &runtime,
        metrics: &metrics,
        max_grace_seconds: 300,
        preemption: Preemption::never(),
        grace_clock: &crate::grace_clock::GraceClock::default(),
        lagging_reads: &crate::watch_lag::LaggingPodReads::default(),
        container_events: &crate::runtime_events::ContainerEvents::default(),
        restart_policies: &Default::default(),
    };
    round.run(memory.get()).await.expect("a round");
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
    // It dies right after the kill, before recording it: the status as it was before.
    memory.set(|crr| {
        crr.status = None;
    });
    // Third daemon: sees the container the statusContext names replaced, as upstream's does,
    // and never kills its replacement.
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
    assert_eq!(memory.states(), [("app".into(), Phase::Succeeded, true)]);
}

#[tokio::test]
async fn the_pre_stop_hook_comes_from_the_live_pod_never_from_the_request() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    // A request carrying a hook of its own (admission would have refused it; the daemon
    // does not rely on that), for a pod whose container has another.
    let mut crr = request(&["app"], grace(9));
    crr.spec.containers[0].pre_stop = Some(exec(&["sh", "-c", "rm -rf /data"]));
    let memory = with_pre_stop(crr, exec(&["drain"]), vec![]);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    let execs: Vec<_> = fake
        .lock()
        .execs
        .iter()
        .map(|exec| exec.1.clone())
        .collect();
    assert_eq!(execs, [vec!["drain".to_owned()]]);
    // And a pod without a hook gets none, whatever the request says.
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let mut crr = request(&["app"], grace(9));
    crr.spec.containers[0].pre_stop = Some(exec(&["sh", "-c", "rm -rf /data"]));
    let memory = Memory::new(crr);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert!(fake.lock().execs.is_empty());
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
}

#[tokio::test]
async fn named_ports_resolve_against_the_live_pod_not_the_request() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let handler = ProbeHandler {
        tcp_socket: Some(k8s_openapi::api::core::v1::TCPSocketAction {
            host: None,
            port: IntOrString::String("drain".into()),
        }),
        ..Default::default()
    };
    let mut crr = request(&["app"], grace(9));
    // The request's ports point elsewhere (say, another tenant's service).
    crr.spec.containers[0].ports = Some(vec![ContainerPort {
        name: Some("drain".into()),
        container_port: 1,
        ..Default::default()
    }]);
    let live_ports = vec![ContainerPort {
        name: Some("drain".into()),
        container_port: i32::from(port),
        ..Default::default()
    }];
    let memory = with_pre_stop(crr, handler, live_ports);
    memory.set_pod(|pod| {
        pod.status.get_or_insert_default().pod_ip = Some("127.0.0.1".into());
    });
    drive(&memory, &fake, &runtime, 10, &[]).await;
    let accepted = tokio::time::timeout(Duration::from_secs(1), listener.accept()).await;
    assert!(
        accepted.is_ok(),
        "the hook connected to the live pod's port"
    );
    assert!(!memory.events().contains(&"FailedPreStopHook".to_owned()));
}

#[tokio::test]
async fn the_pre_stop_budget_is_the_pods_grace_period_capped_by_the_daemon() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    // No grace period in the request; the pod asks for a day.
    let memory = with_pre_stop(
        request(&["app"], Default::default()),
        exec(&["drain"]),
        vec![],
    );
    memory
        .set_pod(|pod| pod.spec.as_mut().unwrap().termination_grace_period_seconds = Some(86_400));
    let metrics = Metrics::register(&mut Default::default());
    let round = Round {
        requests: &memory,
        runtime: &runtime,
        metrics: &metrics,
        max_grace_seconds: 20,
        preemption: Preemption::never(),
        grace_clock: &crate::grace_clock::GraceClock::default(),
        lagging_reads: &crate::watch_lag::LaggingPodReads::default(),
        container_events: &crate::runtime_events::ContainerEvents::default(),
        restart_policies: &Default::default(),
    };
    for _ in 0..3 {
        round.run(memory.get()).await.expect("a round");
    }
    {
        let state = fake.lock();
        assert_eq!(state.execs.len(), 1);
        assert_eq!(state.execs[0].2, 20, "the hook's timeout is the cap");
        assert!(state.stops[0].1 <= 20, "{:?}", state.stops);
    }
    // A request may shorten the pod's grace period, never lengthen it.
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = with_pre_stop(request(&["app"], grace(3600)), exec(&["drain"]), vec![]);
    memory.set_pod(|pod| pod.spec.as_mut().unwrap().termination_grace_period_seconds = Some(7));
    drive(&memory, &fake, &runtime, 3, &[]).await;
    assert_eq!(fake.lock().execs[0].2, 7);
}

#[tokio::test]
async fn the_requests_deadline_never_shortens_the_pre_stop_budget() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let mut crr = request(&["app"], grace(200));
    crr.spec.active_deadline_seconds = Some(3);
    crr.metadata.creation_timestamp = Some(Time(jiff::Timestamp::now()));
    let memory = with_pre_stop(crr, exec(&["drain"]), vec![]);
    memory.set_pod(|pod| pod.spec.as_mut().unwrap().termination_grace_period_seconds = Some(200));
    drive(&memory, &fake, &runtime, 3, &[]).await;
    assert_eq!(
        fake.lock().execs[0].2,
        200,
        "the hook gets the whole grace period"
    );
}

#[tokio::test]
async fn past_its_deadline_a_request_gets_no_hook_and_no_kill() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let mut crr = request(&["app"], grace(200));
    crr.spec.active_deadline_seconds = Some(3);
    crr.metadata.creation_timestamp = Some(Time(
        jiff::Timestamp::now() - jiff::SignedDuration::from_secs(10),
    ));
    let memory = with_pre_stop(crr, exec(&["drain"]), vec![]);
    let outcomes = drive(&memory, &fake, &runtime, 3, &[]).await;
    assert_eq!(outcomes.last(), Some(&Outcome::After(LEFT_TO_THE_OPERATOR)));
    assert!(fake.lock().execs.is_empty());
    assert!(fake.lock().stops.is_empty());
}

/// Runs rounds of `memory`'s request in the background, as the worker would, until one ends
/// otherwise than `After` or the request is to be left alone; the last round's outcome.
fn rounds_in_background(
    memory: std::sync::Arc<Memory>,
    runtime: Runtime,
    preemption: Preemption,
) -> tokio::task::JoinHandle<Result<Outcome, RoundError>> {
    tokio::spawn(async move {
        let metrics = Metrics::register(&mut Default::default());
        let round = Round {
            requests: memory.as_ref(),
            runtime: &runtime,
            metrics: &metrics,
            max_grace_seconds: 300,
            preemption,
            grace_clock: &crate::grace_clock::GraceClock::default(),
            lagging_reads: &crate::watch_lag::LaggingPodReads::default(),
            container_events: &crate::runtime_events::ContainerEvents::default(),
            restart_policies: &Default::default(),
        };
        loop {
            let outcome = round.run(memory.get()).await?;
            if !matches!(outcome, Outcome::After(_)) || must_leave_alone(&memory.get()) {
                return Ok(outcome);
            }
        }
    })
}

/// Runs rounds in the background with the exec hook hanging; returns once the hook runs.
async fn hanging_hook(
    grace_seconds: i64,
    preemption: Preemption,
) -> (
    std::sync::Arc<Memory>,
    FakeRuntime,
    tokio::task::JoinHandle<Result<Outcome, RoundError>>,
) {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().exec.hang = true;
    let runtime = fake.serve().await;
    let memory = std::sync::Arc::new(with_pre_stop(
        request(&["app"], grace(grace_seconds)),
        exec(&["sleep", "infinity"]),
        vec![],
    ));
    let rounds = rounds_in_background(memory.clone(), runtime, preemption);
    fake.exec_started.notified().await;
    (memory, fake, rounds)
}

#[tokio::test]
async fn a_hook_runs_on_when_its_request_completes_and_the_kill_follows() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().exec.delay = Duration::from_millis(300);
    let runtime = fake.serve().await;
    let memory = std::sync::Arc::new(with_pre_stop(
        request(&["app"], grace(300)),
        exec(&["sleep", "8"]),
        vec![],
    ));
    let (preempt, preemption) = Preemption::new();
    let rounds = rounds_in_background(memory.clone(), runtime, preemption);
    fake.exec_started.notified().await;
    memory.set(|crr| {
        let status = crr.status.get_or_insert_default();
        status.phase = Some(Phase::Completed);
        status.message = Some("recreating has exceeded the activeDeadlineSeconds".into());
    });
    // Once completed, the slot is not taken back either: no later round would redo it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    preempt.send_replace(true);
    let outcome = tokio::time::timeout(Duration::from_secs(5), rounds)
        .await
        .expect("the round ends with the hook")
        .unwrap()
        .expect("a round");
    assert_eq!(outcome, Outcome::After(IN_FLIGHT_POLL));
    assert_eq!(fake.lock().execs.len(), 1);
    assert_eq!(
        fake.lock().stopped_ids(),
        ["app-1"],
        "the kill follows the hook"
    );
    assert_eq!(
        memory.states(),
        [("app".to_owned(), Phase::Recreating, true)]
    );
}

#[tokio::test]
async fn a_hook_is_cancelled_when_its_request_is_deleted() {
    let (memory, fake, rounds) = hanging_hook(300, Preemption::never()).await;
    *memory.crr.lock().unwrap() = None;
    let outcome = tokio::time::timeout(Duration::from_secs(5), rounds)
        .await
        .expect("the hook was cancelled, not waited out")
        .unwrap()
        .expect("a round");
    assert_eq!(outcome, Outcome::OnChange);
    assert!(fake.lock().stops.is_empty());
}

#[tokio::test]
async fn a_hook_is_cancelled_when_its_pod_is_gone() {
    let (memory, fake, rounds) = hanging_hook(300, Preemption::never()).await;
    memory.set(|crr| {
        let status = crr.status.get_or_insert_default();
        status.phase = Some(Phase::Completed);
        status.message = Some("pod has gone".into());
        status.conditions = vec![succeeded_false(REASON_POD_GONE)];
    });
    let outcome = tokio::time::timeout(Duration::from_secs(5), rounds)
        .await
        .expect("the hook was cancelled, not waited out")
        .unwrap()
        .expect("a round");
    assert_eq!(outcome, Outcome::OnChange);
    assert!(fake.lock().stops.is_empty());
}

fn succeeded_false(reason: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: CONDITION_SUCCEEDED.to_owned(),
        status: "False".to_owned(),
        reason: reason.to_owned(),
        message: String::new(),
        last_transition_time: Time(jiff::Timestamp::now()),
        observed_generation: None,
    }
}

#[test]
fn a_kill_under_way_goes_on_past_the_deadline_not_past_deletion_or_pod_loss() {
    let mut crr = request(&["app"], grace(30));
    assert!(kill_under_way_goes_on(&crr), "running");
    crr.status.get_or_insert_default().phase = Some(Phase::Completed);
    crr.status.as_mut().unwrap().conditions = vec![succeeded_false("ActiveDeadlineExceeded")];
    assert!(kill_under_way_goes_on(&crr), "completed at its deadline");
    crr.status.as_mut().unwrap().conditions = vec![succeeded_false(REASON_POD_GONE)];
    assert!(!kill_under_way_goes_on(&crr), "its pod is gone");
    crr.status.as_mut().unwrap().conditions.clear();
    crr.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    assert!(!kill_under_way_goes_on(&crr), "being deleted");
}

#[tokio::test]
async fn a_preempted_hook_gives_its_slot_back_without_a_kill() {
    let (preempt, preemption) = Preemption::new();
    let (memory, fake, rounds) = hanging_hook(300, preemption).await;
    preempt.send_replace(true);
    let outcome = tokio::time::timeout(Duration::from_secs(5), rounds)
        .await
        .expect("preempted at once")
        .unwrap()
        .expect("a round");
    assert_eq!(outcome, Outcome::Preempted);
    assert!(fake.lock().stops.is_empty());
    // The next round runs the hook again and kills once.
    fake.lock().exec.hang = false;
    drive(&memory, &fake, &runtime_of(&fake).await, 10, &[]).await;
    assert_eq!(fake.lock().execs.len(), 2);
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
}

async fn runtime_of(fake: &FakeRuntime) -> Runtime {
    fake.serve().await
}

#[tokio::test]
async fn a_container_labelled_for_another_pod_is_refused_never_stopped() {
    let fake = FakeRuntime::with_containers(&["app"]);
    fake.lock().containers[0].namespace_label = Some("victim".into());
    let runtime = fake.serve().await;
    let memory = with_pre_stop(request(&["app"], grace(9)), exec(&["drain"]), vec![]);
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert!(fake.lock().execs.is_empty(), "no hook");
    assert!(fake.lock().stops.is_empty(), "no kill");
    assert_eq!(succeeded(&memory).as_deref(), Some("False"));
    let states = memory.get().status.unwrap().container_recreate_states;
    assert_eq!(states[0].phase, Phase::Failed);
    assert!(
        states[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains("\"victim\"")),
        "{states:?}"
    );
    assert!(memory.events().contains(&"RecreateRefused".to_owned()));
}

#[tokio::test]
async fn a_replaced_pod_of_the_same_name_is_never_touched() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = with_pre_stop(request(&["app"], grace(9)), exec(&["drain"]), vec![]);
    memory.set_pod(|pod| pod.metadata.uid = Some("a-new-pod".into()));
    let outcomes = drive(&memory, &fake, &runtime, 3, &[]).await;
    assert_eq!(outcomes.last(), Some(&Outcome::After(LEFT_TO_THE_OPERATOR)));
    assert!(fake.lock().execs.is_empty());
    assert!(fake.lock().stops.is_empty());
}

#[tokio::test]
async fn an_unready_grace_beyond_the_end_of_time_never_panics() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let mut crr = request(
        &["app"],
        ContainerRecreateRequestStrategy {
            unready_grace_period_seconds: Some(i64::MAX),
            ..Default::default()
        },
    );
    crr.status = Some(crr_crds::v1beta1::ContainerRecreateRequestStatus {
        phase: Some(Phase::Recreating),
        conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: crr_crds::keys::CONDITION_PRE_RECREATE_GRACE.into(),
            status: "True".into(),
            last_transition_time: Time(jiff::Timestamp::now()),
            message: String::new(),
            reason: "PreRecreateGrace".into(),
            observed_generation: None,
        }],
        ..Default::default()
    });
    let memory = Memory::new(crr);
    let outcomes = drive(&memory, &fake, &runtime, 1, &[]).await;
    assert!(
        matches!(outcomes.as_slice(), [Outcome::After(after)] if *after > Duration::from_secs(1_000_000)),
        "{outcomes:?}"
    );
    assert!(fake.lock().stops.is_empty());
}

#[tokio::test]
async fn a_grace_marked_an_hour_ago_by_another_clock_is_still_waited_out_here() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let mut crr = request(
        &["app"],
        ContainerRecreateRequestStrategy {
            unready_grace_period_seconds: Some(30),
            ..Default::default()
        },
    );
    crr.status = Some(crr_crds::v1beta1::ContainerRecreateRequestStatus {
        phase: Some(Phase::Recreating),
        conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: crr_crds::keys::CONDITION_PRE_RECREATE_GRACE.into(),
            status: "True".into(),
            // The operator's clock an hour behind this node's (or ours an hour ahead).
            last_transition_time: Time(
                jiff::Timestamp::now()
                    .checked_sub(jiff::SignedDuration::from_hours(1))
                    .expect("an hour ago"),
            ),
            message: String::new(),
            reason: "PreRecreateGrace".into(),
            observed_generation: None,
        }],
        ..Default::default()
    });
    let memory = Memory::new(crr);
    let outcomes = drive(&memory, &fake, &runtime, 1, &[]).await;
    assert!(
        matches!(outcomes.as_slice(), [Outcome::After(after)] if *after > Duration::from_secs(29) && *after <= Duration::from_secs(30)),
        "{outcomes:?}"
    );
    assert!(fake.lock().stops.is_empty());
}

/// The status writes' `status` objects, and the request's and the pod's Event reasons.
fn record(memory: &Memory) -> (Vec<serde_json::Value>, Vec<String>, Vec<String>) {
    let writes = memory
        .writes
        .lock()
        .unwrap()
        .iter()
        .map(|write| write["status"].clone())
        .collect();
    let on_pod = memory
        .pod_events
        .lock()
        .unwrap()
        .iter()
        .map(|(regarding, _, reason, _)| {
            format!(
                "{reason} {}",
                regarding.field_path.clone().unwrap_or_default()
            )
        })
        .collect();
    (writes, memory.events(), on_pod)
}

#[tokio::test]
async fn a_plain_request_costs_two_writes_and_two_events() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], grace(3)));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    let (writes, on_request, on_pod) = record(&memory);
    assert_eq!(writes.len(), 2, "{writes:#?}");
    // No state tells anything before it has an outcome: no message until then.
    assert!(writes.iter().all(|write| {
        write["containerRecreateStates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|state| state.get("message").is_none())
    }));
    assert_eq!(on_pod, ["Killing spec.containers{app}"]);
    assert_eq!(on_request, ["Recreated"]);
    // The kill's look at the pod and the successor's readiness: both from the node's pod watch
    // in the daemon (`api_server`), no API call.
    assert_eq!(
        memory.pod_reads.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

/// The pod as the kubelet reports it: each named container running as the fake runtime's newest,
/// Ready as `ready` says.
fn kubelet_reports(memory: &Memory, fake: &FakeRuntime, names: &[&str], ready: bool) {
    let statuses: Vec<serde_json::Value> = names
        .iter()
        .map(|name| {
            let newest = fake.lock().newest(name).cloned().expect("a container");
            json!({"name": name, "image": "i", "imageID": "", "ready": ready,
                   "restartCount": newest.attempt,
                   "containerID": format!("containerd://{}", newest.id),
                   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}})
        })
        .collect();
    let status = serde_json::from_value(json!({ "containerStatuses": statuses })).unwrap();
    memory.set_pod(|pod| pod.status = Some(status));
}

#[tokio::test]
async fn the_pod_watch_showing_the_successor_ready_completes_without_the_operators_snapshot() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], grace(3)));
    let metrics = Metrics::register(&mut Default::default());
    let memories = Memories::default();
    let round = memories.round(&memory, &runtime, &metrics);
    round.run(memory.get()).await.expect("the kill round");
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
    // The operator writes no snapshot at all; the kubelet restarts the container, not Ready yet.
    kubelet_reports(&memory, &fake, &["app"], false);
    let waiting = round.run(memory.get()).await.expect("a round");
    assert_eq!(waiting, Outcome::After(IN_FLIGHT_POLL));
    assert_eq!(
        succeeded(&memory),
        None,
        "not before the successor is Ready"
    );
    kubelet_reports(&memory, &fake, &["app"], true);
    let done = round.run(memory.get()).await.expect("a round");
    assert_eq!(done, Outcome::Completed);
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    // The completion carries the snapshot it was decided on, as the operator would have written.
    let newest = fake.lock().newest("app").cloned().unwrap();
    let snapshot = memory.get().status.unwrap().container_status_snapshot;
    assert_eq!(
        snapshot,
        [ContainerRecreateRequestSyncContainerStatus {
            name: "app".into(),
            ready: true,
            restart_count: i32::try_from(newest.attempt).unwrap(),
            container_id: format!("containerd://{}", newest.id),
        }]
    );
    let (writes, _, _) = record(&memory);
    assert_eq!(
        writes.len(),
        2,
        "the kill's record and the completion: {writes:#?}"
    );
}

#[tokio::test]
async fn with_the_runtimes_events_a_waiting_round_looks_again_only_at_its_own_timers() {
    use crate::recreate::IN_FLIGHT_SAFETY_LOOK;
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let strategy = ContainerRecreateRequestStrategy {
        min_started_seconds: 3,
        ..grace(3)
    };
    let memory = Memory::new(request(&["app"], strategy));
    let metrics = Metrics::register(&mut Default::default());
    let memories = Memories {
        container_events: crate::runtime_events::ContainerEvents::followed_from_the_start(),
        ..Memories::default()
    };
    let round = memories.round(&memory, &runtime, &metrics);
    let killed = round.run(memory.get()).await.expect("the kill round");
    assert_eq!(
        killed,
        Outcome::After(IN_FLIGHT_SAFETY_LOOK),
        "the runtime's events and the pod watch tell when the successor comes"
    );
    // The kubelet reports the successor running, not Ready: its Ready comes by the pod watch,
    // and minStartedSeconds runs from its start.
    kubelet_reports(&memory, &fake, &["app"], false);
    let Outcome::After(waiting) = round.run(memory.get()).await.expect("a round") else {
        panic!("a recreate in flight waits");
    };
    assert!(
        waiting > Duration::from_millis(2500) && waiting <= Duration::from_secs(3),
        "the look comes when minStartedSeconds is reached: {waiting:?}"
    );
    // The node's pod watch does not show the successor: the look comes at the read past it,
    // 2 s after the successor's start.
    memory.set_pod(|pod| pod.status = None);
    let Outcome::After(lagging) = round.run(memory.get()).await.expect("a round") else {
        panic!("a recreate in flight waits");
    };
    assert!(
        lagging > Duration::from_millis(1500) && lagging <= crate::watch_lag::BEHIND_AFTER,
        "the look comes at the read past the watch: {lagging:?}"
    );
    // Without a timer the round waits on the events, up to the safety look.
    let no_timer = ContainerRecreateRequestStrategy {
        min_started_seconds: 0,
        ..grace(3)
    };
    let plain = Memory::new(request(&["app"], no_timer));
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let round = memories.round(&plain, &runtime, &metrics);
    round.run(plain.get()).await.expect("the kill round");
    kubelet_reports(&plain, &fake, &["app"], false);
    assert_eq!(
        round.run(plain.get()).await.expect("a round"),
        Outcome::After(IN_FLIGHT_SAFETY_LOOK)
    );
}

#[tokio::test]
async fn a_pod_watch_behind_the_runtime_is_read_past_and_the_request_completes() {
    use std::sync::atomic::Ordering::Relaxed;
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app"], grace(3)));
    let metrics = Metrics::register(&mut Default::default());
    let memories = Memories::default();
    let round = memories.round(&memory, &runtime, &metrics);
    round.run(memory.get()).await.expect("the kill round");
    // The API server has the kubelet's word that the successor is Ready; the node's pod watch
    // has not delivered it (nor any status of the pod).
    kubelet_reports(&memory, &fake, &["app"], true);
    let reported = memory.pod.lock().unwrap().clone();
    *memory.api_pod.lock().unwrap() = reported;
    memory.set_pod(|pod| pod.status = None);
    let waiting = round.run(memory.get()).await.expect("a round");
    assert_eq!(waiting, Outcome::After(IN_FLIGHT_POLL));
    assert_eq!(
        memory.api_pod_reads.load(Relaxed),
        0,
        "no read while the successor is younger than the watch's allowance"
    );
    // The runtime started the successor longer ago than a watch in step takes to show it.
    for container in fake.lock().containers.iter_mut().filter(|c| c.running) {
        container.started_at = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(5);
    }
    let done = round.run(memory.get()).await.expect("a round");
    assert_eq!(done, Outcome::Completed);
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    assert_eq!(memory.api_pod_reads.load(Relaxed), 1);
    assert_eq!(metrics.pod_reads_past_watch.get(), 1);
    let newest = fake.lock().newest("app").cloned().unwrap();
    let snapshot = memory.get().status.unwrap().container_status_snapshot;
    assert_eq!(
        snapshot[0].container_id,
        format!("containerd://{}", newest.id)
    );
    assert!(snapshot[0].ready);
}

#[tokio::test]
async fn the_kills_of_an_unordered_request_are_recorded_in_one_write_in_order() {
    let fake = FakeRuntime::with_containers(&["app", "sidecar"]);
    let runtime = fake.serve().await;
    let memory = Memory::new(request(&["app", "sidecar"], grace(3)));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    // One after the other, in the listed order, each stop finished before the next.
    assert_eq!(fake.lock().stopped_ids(), ["app-1", "sidecar-1"]);
    let (writes, on_request, on_pod) = record(&memory);
    assert_eq!(writes.len(), 2, "{writes:#?}");
    assert_eq!(
        writes[0],
        json!({"phase": "Recreating", "containerRecreateStates": [
            {"name": "app", "phase": "Recreating", "isKilled": true},
            {"name": "sidecar", "phase": "Recreating", "isKilled": true}]})
    );
    assert_eq!(
        on_pod,
        [
            "Killing spec.containers{app}",
            "Killing spec.containers{sidecar}"
        ]
    );
    assert_eq!(on_request, ["Recreated"]);
}

#[tokio::test]
async fn an_ordered_request_records_each_kill_before_waiting_for_it() {
    let fake = FakeRuntime::with_containers(&["app", "sidecar"]);
    let runtime = fake.serve().await;
    let strategy = ContainerRecreateRequestStrategy {
        ordered_recreate: true,
        ..grace(3)
    };
    let memory = Memory::new(request(&["app", "sidecar"], strategy));
    drive(&memory, &fake, &runtime, 20, &[]).await;
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    assert_eq!(fake.lock().stopped_ids(), ["app-1", "sidecar-1"]);
    let (writes, _, _) = record(&memory);
    // The kill of app, then (once app is back and Ready) the kill of sidecar, then the
    // completion: the waits between kills are visible in the status.
    assert!(writes.len() <= 3, "{writes:#?}");
    assert_eq!(
        writes[0]["containerRecreateStates"],
        json!([{"name": "app", "phase": "Recreating", "isKilled": true},
               {"name": "sidecar", "phase": "Pending"}])
    );
}

#[tokio::test]
async fn a_kill_that_could_outlast_the_operators_patience_writes_the_phase_first() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    // The pod's grace period is long (120 s): the kill could end after the operator gives up
    // on a request without a phase (60 s from creation).
    let memory = Memory::new(request(&["app"], Default::default()));
    memory.set_pod(|pod| pod.spec.as_mut().unwrap().termination_grace_period_seconds = Some(120));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert_eq!(succeeded(&memory).as_deref(), Some("True"));
    let (writes, _, _) = record(&memory);
    assert_eq!(writes[0], json!({"phase": "Recreating"}), "{writes:#?}");
    assert_eq!(writes.len(), 3, "{writes:#?}");
    assert!(writes[1].get("phase").is_none(), "{writes:#?}");
}

#[tokio::test]
async fn a_kill_recorded_on_a_request_completed_meanwhile_never_moves_its_phase_back() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    // The operator completes the request (its deadline) while the kill is under way.
    let mut memory = with_pre_stop(request(&["app"], grace(9)), exec(&["drain"]), vec![]);
    memory.complete_on_fresh = true;
    drive(&memory, &fake, &runtime, 1, &[]).await;
    assert_eq!(fake.lock().stopped_ids(), ["app-1"]);
    let crr = memory.get();
    assert_eq!(crr.phase(), Some(Phase::Completed));
    assert_eq!(memory.states(), [("app".into(), Phase::Recreating, true)]);
    let (writes, _, _) = record(&memory);
    assert!(
        writes.iter().all(|write| write.get("phase").is_none()),
        "{writes:#?}"
    );
}

#[tokio::test]
async fn a_container_the_kubelet_would_not_start_again_is_refused_without_a_stop() {
    let fake = FakeRuntime::with_containers(&["app"]);
    let runtime = fake.serve().await;
    // Admission refuses such a request; this one did not go through it as it is now (or the
    // pod's policy is what the live pod says, whatever admission saw).
    let memory = Memory::new(request(&["app"], grace(3)));
    memory.set_pod(|pod| pod.spec.as_mut().unwrap().restart_policy = Some("Never".into()));
    drive(&memory, &fake, &runtime, 10, &[]).await;
    assert!(fake.lock().stops.is_empty(), "{:?}", fake.lock().stops);
    assert_eq!(succeeded(&memory).as_deref(), Some("False"));
    assert_eq!(memory.states(), [("app".into(), Phase::Failed, false)]);
    let message = memory.get().status.unwrap().message.unwrap_or_default();
    assert!(
        message.contains("refusing to recreate container app"),
        "{message}"
    );
    assert!(memory.events().contains(&"RecreateRefused".to_owned()));
    assert!(memory.pod_events.lock().unwrap().is_empty(), "no Killing");
}
