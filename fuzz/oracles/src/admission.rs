//! `admission_create`: a CREATE AdmissionReview with an arbitrary request and pod, through both
//! hooks, plus the raw bytes as a body.
//!
//! Oracles besides "never panics": every answer carries the request's uid; the validating hook
//! never patches; a mutating patch applies to the object as sent; and an object the mutating
//! hook admits (with its patch applied) is admitted unchanged by the validating hook and by a
//! second mutating call (reinvocation), since both re-run the same creation rules.

use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use crr_crds::limits::MAX_TERMINATION_GRACE_PERIOD_SECONDS;
use crr_webhook::admission::Lookup;
use crr_webhook::review::{self, ClusterLookup, Hook, Verdict};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use crate::objects::{Handler, LabelKey, Name, Port, Request, put};

/// A container restart policy (pod or container level).
#[derive(Arbitrary, Clone, Debug)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
    Any(String),
}

impl RestartPolicy {
    fn text(&self) -> String {
        match self {
            Self::Always => "Always".to_owned(),
            Self::OnFailure => "OnFailure".to_owned(),
            Self::Never => "Never".to_owned(),
            Self::Any(text) => text.clone(),
        }
    }
}

/// A container of the pod spec.
#[derive(Arbitrary, Clone, Debug)]
pub struct PodContainer {
    pub name: Name,
    pub restart_policy: Option<RestartPolicy>,
    pub pre_stop: Option<Handler>,
    pub ports: Option<Vec<Port>>,
}

impl PodContainer {
    fn json(&self) -> Value {
        let mut container = Map::new();
        container.insert("name".to_owned(), json!(self.name.text()));
        container.insert("image".to_owned(), json!("busybox"));
        put(
            &mut container,
            "restartPolicy",
            self.restart_policy.as_ref().map(RestartPolicy::text),
        );
        put(
            &mut container,
            "lifecycle",
            self.pre_stop
                .as_ref()
                .map(|handler| json!({"preStop": handler.json()})),
        );
        put(
            &mut container,
            "ports",
            self.ports
                .as_ref()
                .map(|ports| ports.iter().map(Port::json).collect::<Vec<_>>()),
        );
        Value::Object(container)
    }
}

/// A container status of the pod.
#[derive(Arbitrary, Clone, Debug)]
pub struct ContainerStatus {
    pub name: Name,
    pub container_id: Option<String>,
    pub restart_count: i32,
    pub ready: bool,
}

impl ContainerStatus {
    fn json(&self) -> Value {
        let mut status = Map::new();
        status.insert("name".to_owned(), json!(self.name.text()));
        status.insert("image".to_owned(), json!("busybox"));
        status.insert("imageID".to_owned(), json!(""));
        status.insert("ready".to_owned(), json!(self.ready));
        status.insert("restartCount".to_owned(), json!(self.restart_count));
        put(&mut status, "containerID", self.container_id.clone());
        Value::Object(status)
    }
}

/// A pod condition type: the ones the rules look at, or any.
#[derive(Arbitrary, Clone, Debug)]
pub enum PodConditionType {
    SidecarTerminated,
    Ready,
    KruisePodReady,
    Any(String),
}

/// A pod phase.
#[derive(Arbitrary, Clone, Debug)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
    Any(String),
}

/// The pod a request names.
#[derive(Arbitrary, Clone, Debug)]
pub struct PodInput {
    pub uid: Option<String>,
    pub node_name: Option<Name>,
    pub restart_policy: Option<RestartPolicy>,
    pub termination_grace_period_seconds: Option<i64>,
    pub containers: Vec<PodContainer>,
    pub init_containers: Option<Vec<PodContainer>>,
    pub phase: Option<PodPhase>,
    pub deleting: bool,
    pub conditions: Vec<(PodConditionType, String)>,
    pub statuses: Option<Vec<ContainerStatus>>,
    pub init_statuses: Option<Vec<ContainerStatus>>,
    pub without_spec: bool,
    pub without_status: bool,
}

impl PodInput {
    fn pod(&self, name: &str, namespace: &str) -> Pod {
        let mut metadata = Map::new();
        metadata.insert("name".to_owned(), json!(name));
        metadata.insert("namespace".to_owned(), json!(namespace));
        put(&mut metadata, "uid", self.uid.clone());
        if self.deleting {
            metadata.insert(
                "deletionTimestamp".to_owned(),
                json!("2026-01-01T00:00:00Z"),
            );
        }
        let mut spec = Map::new();
        put(
            &mut spec,
            "nodeName",
            self.node_name.as_ref().map(Name::text),
        );
        put(
            &mut spec,
            "restartPolicy",
            self.restart_policy.as_ref().map(RestartPolicy::text),
        );
        put(
            &mut spec,
            "terminationGracePeriodSeconds",
            self.termination_grace_period_seconds,
        );
        spec.insert(
            "containers".to_owned(),
            Value::Array(self.containers.iter().map(PodContainer::json).collect()),
        );
        put(
            &mut spec,
            "initContainers",
            self.init_containers.as_ref().map(|containers| {
                containers
                    .iter()
                    .map(PodContainer::json)
                    .collect::<Vec<_>>()
            }),
        );
        let mut status = Map::new();
        put(
            &mut status,
            "phase",
            self.phase.as_ref().map(|phase| match phase {
                PodPhase::Pending => "Pending".to_owned(),
                PodPhase::Running => "Running".to_owned(),
                PodPhase::Succeeded => "Succeeded".to_owned(),
                PodPhase::Failed => "Failed".to_owned(),
                PodPhase::Unknown => "Unknown".to_owned(),
                PodPhase::Any(text) => text.clone(),
            }),
        );
        if !self.conditions.is_empty() {
            let conditions = self
                .conditions
                .iter()
                .map(|(type_, status)| {
                    let type_ = match type_ {
                        PodConditionType::SidecarTerminated => {
                            crr_crds::rules::SIDECAR_TERMINATED_CONDITION.to_owned()
                        }
                        PodConditionType::Ready => "Ready".to_owned(),
                        PodConditionType::KruisePodReady => {
                            crr_crds::keys::POD_CONDITION_KRUISE_POD_READY.to_owned()
                        }
                        PodConditionType::Any(text) => text.clone(),
                    };
                    json!({"type": type_, "status": status})
                })
                .collect();
            status.insert("conditions".to_owned(), Value::Array(conditions));
        }
        let statuses = |statuses: &Option<Vec<ContainerStatus>>| {
            statuses
                .as_ref()
                .map(|list| list.iter().map(ContainerStatus::json).collect::<Vec<_>>())
        };
        put(&mut status, "containerStatuses", statuses(&self.statuses));
        put(
            &mut status,
            "initContainerStatuses",
            statuses(&self.init_statuses),
        );
        let mut pod = Map::new();
        pod.insert("apiVersion".to_owned(), json!("v1"));
        pod.insert("kind".to_owned(), json!("Pod"));
        pod.insert("metadata".to_owned(), Value::Object(metadata));
        if !self.without_spec {
            pod.insert("spec".to_owned(), Value::Object(spec));
        }
        if !self.without_status {
            pod.insert("status".to_owned(), Value::Object(status));
        }
        serde_json::from_value(Value::Object(pod)).expect("the harness builds a valid Pod")
    }
}

/// What the pod lookup answers.
#[allow(clippy::large_enum_variant)] // one per input: its size does not matter
#[derive(Arbitrary, Clone, Debug)]
pub enum PodLookup {
    Found(PodInput),
    NotFound,
    Failed(String),
}

/// What the node lookup answers.
#[derive(Arbitrary, Clone, Debug)]
pub enum NodeLookup {
    Found {
        virtual_kubelet: bool,
        labels: Vec<(String, String)>,
    },
    NotFound,
    Failed(String),
}

/// One CREATE review and the cluster it is answered against.
#[derive(Arbitrary, Clone, Debug)]
pub struct Input {
    // The knobs come first: an input that runs out of bytes reads zeros from there on.
    /// Makes the pod and the request agree ([`Input::cohere`]), so the rules past the pod checks
    /// and the patch are reached often, not only after a long search.
    pub coherent: bool,
    /// The node daemon's feature gate is off only for this one value (it refuses everything).
    pub node_daemon: u8,
    pub request: Request,
    pub request_namespace: Option<String>,
    pub pod: PodLookup,
    pub node: NodeLookup,
}

impl Input {
    /// Gives every container the request names a recreatable, started counterpart in the pod;
    /// makes the pod active and scheduled, the node found, and drops the read-only fields the
    /// request brings. Everything else stays arbitrary.
    pub fn cohere(&mut self) {
        for container in &mut self.request.spec.containers {
            container.pre_stop = None;
            container.ports = None;
            container.status_context = None;
        }
        if !matches!(self.node, NodeLookup::Found { .. }) {
            self.node = NodeLookup::Found {
                virtual_kubelet: false,
                labels: Vec::new(),
            };
        }
        let PodLookup::Found(pod) = &mut self.pod else {
            return;
        };
        pod.deleting = false;
        pod.without_spec = false;
        pod.without_status = false;
        if pod
            .node_name
            .as_ref()
            .is_none_or(|name| name.text().is_empty())
        {
            pod.node_name = Some(Name::Any("node".to_owned()));
        }
        if matches!(pod.phase, Some(PodPhase::Succeeded | PodPhase::Failed)) {
            pod.phase = Some(PodPhase::Running);
        }
        let names: Vec<String> = self
            .request
            .spec
            .containers
            .iter()
            .map(|container| container.name.text())
            .collect();
        for name in names {
            let started = |statuses: &mut Option<Vec<ContainerStatus>>| {
                let statuses = statuses.get_or_insert_with(Vec::new);
                match statuses
                    .iter_mut()
                    .find(|status| status.name.text() == name)
                {
                    Some(status) => {
                        if status.container_id.as_deref().is_none_or(str::is_empty) {
                            status.container_id = Some(format!("containerd://{name}"));
                        }
                    }
                    None => statuses.push(ContainerStatus {
                        name: Name::Any(name.clone()),
                        container_id: Some(format!("containerd://{name}")),
                        restart_count: 0,
                        ready: true,
                    }),
                }
            };
            if let Some(container) = pod.containers.iter_mut().find(|c| c.name.text() == name) {
                container.restart_policy = None;
                pod.restart_policy = None;
                started(&mut pod.statuses);
            } else if let Some(container) = pod
                .init_containers
                .iter_mut()
                .flatten()
                .find(|c| c.name.text() == name)
            {
                container.restart_policy = Some(RestartPolicy::Always);
                started(&mut pod.init_statuses);
            } else {
                pod.containers.push(PodContainer {
                    name: Name::Any(name.clone()),
                    restart_policy: None,
                    pre_stop: None,
                    ports: None,
                });
                pod.restart_policy = None;
                started(&mut pod.statuses);
            }
        }
    }
}

/// The cluster as plain values: the one pod and node of the input, whatever names are asked.
pub struct Cluster {
    pod: Lookup<Arc<Pod>>,
    node: Lookup<Arc<ObjectMeta>>,
}

impl ClusterLookup for Cluster {
    async fn pod(&self, _namespace: &str, _name: &str) -> Lookup<Arc<Pod>> {
        self.pod.clone()
    }
    async fn node(&self, _name: &str) -> Lookup<Arc<ObjectMeta>> {
        self.node.clone()
    }
}

impl Cluster {
    /// No pod, no node: what the raw bytes are answered against.
    pub fn empty() -> Self {
        Self {
            pod: Lookup::NotFound,
            node: Lookup::NotFound,
        }
    }

    fn of(input: &Input, namespace: &str) -> Self {
        let pod_name = input.request.spec.pod_name.text();
        let pod = match &input.pod {
            PodLookup::Found(pod) => Lookup::Found(Arc::new(pod.pod(&pod_name, namespace))),
            PodLookup::NotFound => Lookup::NotFound,
            PodLookup::Failed(error) => Lookup::Failed(error.clone()),
        };
        let node = match &input.node {
            NodeLookup::Found {
                virtual_kubelet,
                labels,
            } => {
                let mut labels: std::collections::BTreeMap<String, String> =
                    labels.iter().cloned().collect();
                if *virtual_kubelet {
                    labels.insert(
                        LabelKey::VirtualKubelet.text(),
                        crr_webhook::admission::VIRTUAL_KUBELET_LABEL_VALUE.to_owned(),
                    );
                }
                Lookup::Found(Arc::new(ObjectMeta {
                    name: Some("node".to_owned()),
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }))
            }
            NodeLookup::NotFound => Lookup::NotFound,
            NodeLookup::Failed(error) => Lookup::Failed(error.clone()),
        };
        Self { pod, node }
    }
}

const UID: &str = "fuzz-review-uid";

/// A CREATE AdmissionReview body for `object` of `version`.
pub fn review_body(version: &str, namespace: Option<&str>, name: &str, object: &Value) -> Vec<u8> {
    let mut request = Map::new();
    request.insert("uid".to_owned(), json!(UID));
    request.insert(
        "kind".to_owned(),
        json!({"group": "apps.kruise.io", "version": version, "kind": "ContainerRecreateRequest"}),
    );
    request.insert(
        "resource".to_owned(),
        json!({"group": "apps.kruise.io", "version": version, "resource": "containerrecreaterequests"}),
    );
    request.insert("name".to_owned(), json!(name));
    put(&mut request, "namespace", namespace);
    request.insert("operation".to_owned(), json!("CREATE"));
    request.insert("userInfo".to_owned(), json!({"username": "fuzz"}));
    request.insert("object".to_owned(), object.clone());
    request.insert("dryRun".to_owned(), json!(false));
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request,
    }))
    .expect("a Value serializes")
}

/// The answer of one review, as data.
struct Answer {
    verdict: Verdict,
    uid: String,
    patch: Option<json_patch::Patch>,
    message: String,
}

fn answer(body: &[u8], cluster: &Cluster, node_daemon_enabled: bool, hook: Hook) -> Answer {
    let (review, verdict) =
        futures::executor::block_on(review::review_crr(body, cluster, node_daemon_enabled, hook));
    let encoded = serde_json::to_value(&review).expect("an AdmissionReview serializes");
    let response = &encoded["response"];
    let patch = response["patch"].as_array().map(|bytes| {
        let bytes: Vec<u8> = bytes
            .iter()
            .map(|byte| byte.as_u64().expect("patch bytes") as u8)
            .collect();
        serde_json::from_slice(&bytes).expect("the patch is a JSON patch")
    });
    Answer {
        verdict,
        uid: response["uid"].as_str().unwrap_or_default().to_owned(),
        patch,
        message: response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// The raw bytes as an AdmissionReview body, through both hooks.
pub fn run_raw(data: &[u8]) {
    let cluster = Cluster::empty();
    for hook in [Hook::Mutate, Hook::Validate] {
        let answer = answer(data, &cluster, true, hook);
        assert!(
            !(hook == Hook::Validate && answer.verdict == Verdict::Patched),
            "the validating hook patched"
        );
    }
}

/// The structured review through both hooks, with the oracles of the module comment. Returns the
/// mutating hook's verdict (to see which rules a corpus reaches).
pub fn run_structured(input: &Input) -> Verdict {
    let namespace = input
        .request_namespace
        .clone()
        .or_else(|| input.request.namespace.clone())
        .unwrap_or_default();
    let cluster = Cluster::of(input, &namespace);
    let enabled = input.node_daemon != 0xA5;
    let version = input.request.version();
    let object = input.request.json();
    let body_of = |object: &Value| {
        review_body(
            version,
            input.request_namespace.as_deref(),
            &input.request.name,
            object,
        )
    };

    let validated = answer(&body_of(&object), &cluster, enabled, Hook::Validate);
    assert_eq!(validated.uid, UID);
    assert_ne!(validated.verdict, Verdict::Invalid, "{}", validated.message);
    assert_ne!(validated.verdict, Verdict::Patched);

    let mutated = answer(&body_of(&object), &cluster, enabled, Hook::Mutate);
    assert_eq!(mutated.uid, UID);
    assert_ne!(mutated.verdict, Verdict::Invalid, "{}", mutated.message);
    if matches!(mutated.verdict, Verdict::Denied(_)) {
        return mutated.verdict;
    }
    let mut admitted = object.clone();
    if let Some(patch) = &mutated.patch {
        json_patch::patch(&mut admitted, patch).expect("the patch applies to the object as sent");
    }
    // The API server checks the schema after the mutating hook: what the hook injects itself
    // (terminationGracePeriodSeconds, from the pod) must pass it.
    let requested = input
        .request
        .spec
        .strategy
        .as_ref()
        .and_then(|strategy| strategy.termination_grace_period_seconds);
    if requested.is_none() {
        let injected = admitted["spec"]["strategy"]["terminationGracePeriodSeconds"].as_i64();
        assert!(
            injected.is_none_or(|seconds| (0..=MAX_TERMINATION_GRACE_PERIOD_SECONDS)
                .contains(&seconds)),
            "the mutating hook injected terminationGracePeriodSeconds {injected:?}, which the schema refuses"
        );
    }

    let validated = answer(&body_of(&admitted), &cluster, enabled, Hook::Validate);
    assert_eq!(
        validated.verdict,
        Verdict::Allowed,
        "the validating hook refuses what the mutating hook admitted: {}\nobject: {admitted}",
        validated.message
    );
    let reinvoked = answer(&body_of(&admitted), &cluster, enabled, Hook::Mutate);
    assert_eq!(
        reinvoked.verdict,
        Verdict::Allowed,
        "a second mutating call changes or refuses its own output: {} {:?}\nobject: {admitted}",
        reinvoked.message,
        reinvoked.patch
    );
    mutated.verdict
}

/// The fuzz target: the bytes as a body, then as a structured input.
pub fn run(data: &[u8]) {
    run_raw(data);
    if let Ok(mut input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        if input.coherent {
            input.cohere();
        }
        run_structured(&input);
    }
}
