//! Arbitrary pieces of a ContainerRecreateRequest shared by the admission and conversion inputs,
//! turned into the JSON the API server would send.

use arbitrary::Arbitrary;
use serde_json::{Map, Value, json};

/// Inserts `value` under `key` when it is `Some`: optional fields are left out, never `null`.
pub fn put<T: Into<Value>>(object: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(value) = value {
        object.insert(key.to_owned(), value.into());
    }
}

/// A container (or any other) name: usually one of four, so requests and pods share names.
#[derive(Arbitrary, Clone, Debug)]
pub enum Name {
    Known(u8),
    Any(String),
}

impl Name {
    pub fn text(&self) -> String {
        match self {
            Self::Known(index) => format!("c{}", index % 4),
            Self::Any(text) => text.clone(),
        }
    }
}

/// A port of an httpGet or tcpSocket handler (an IntOrString).
#[derive(Arbitrary, Clone, Debug)]
pub enum PortRef {
    Number(i32),
    Named(Name),
}

impl PortRef {
    fn json(&self) -> Value {
        match self {
            Self::Number(number) => json!(number),
            Self::Named(name) => json!(name.text()),
        }
    }
}

/// A preStop handler (pod lifecycle handler or the CRR's copy of it).
#[derive(Arbitrary, Clone, Debug)]
pub enum Handler {
    Exec(Option<Vec<String>>),
    HttpGet {
        path: Option<String>,
        port: PortRef,
        host: Option<String>,
        scheme: Option<String>,
    },
    TcpSocket {
        port: PortRef,
        host: Option<String>,
    },
    Empty,
}

impl Handler {
    pub fn json(&self) -> Value {
        match self {
            Self::Exec(command) => {
                let mut exec = Map::new();
                put(&mut exec, "command", command.clone());
                json!({"exec": exec})
            }
            Self::HttpGet {
                path,
                port,
                host,
                scheme,
            } => {
                let mut get = Map::new();
                get.insert("port".to_owned(), port.json());
                put(&mut get, "path", path.clone());
                put(&mut get, "host", host.clone());
                put(&mut get, "scheme", scheme.clone());
                json!({"httpGet": get})
            }
            Self::TcpSocket { port, host } => {
                let mut tcp = Map::new();
                tcp.insert("port".to_owned(), port.json());
                put(&mut tcp, "host", host.clone());
                json!({"tcpSocket": tcp})
            }
            Self::Empty => json!({}),
        }
    }
}

/// A container port.
#[derive(Arbitrary, Clone, Debug)]
pub struct Port {
    pub name: Option<Name>,
    pub container_port: i32,
    pub protocol: Option<String>,
    pub host_port: Option<i32>,
}

impl Port {
    pub fn json(&self) -> Value {
        let mut port = Map::new();
        port.insert("containerPort".to_owned(), json!(self.container_port));
        put(&mut port, "name", self.name.as_ref().map(Name::text));
        put(&mut port, "protocol", self.protocol.clone());
        put(&mut port, "hostPort", self.host_port);
        Value::Object(port)
    }
}

/// One container entry of a request.
#[derive(Arbitrary, Clone, Debug)]
pub struct RequestContainer {
    pub name: Name,
    pub pre_stop: Option<Handler>,
    pub ports: Option<Vec<Port>>,
    pub status_context: Option<(String, i32)>,
}

impl RequestContainer {
    fn json(&self) -> Value {
        let mut container = Map::new();
        container.insert("name".to_owned(), json!(self.name.text()));
        put(
            &mut container,
            "preStop",
            self.pre_stop.as_ref().map(Handler::json),
        );
        put(
            &mut container,
            "ports",
            self.ports
                .as_ref()
                .map(|ports| ports.iter().map(Port::json).collect::<Vec<_>>()),
        );
        put(
            &mut container,
            "statusContext",
            self.status_context
                .as_ref()
                .map(|(id, restarts)| json!({"containerID": id, "restartCount": restarts})),
        );
        Value::Object(container)
    }
}

/// A `failurePolicy` value.
#[derive(Arbitrary, Clone, Debug)]
pub enum FailurePolicy {
    Fail,
    Ignore,
    Empty,
    Any(String),
}

/// `spec.strategy`, every number over its full range.
#[derive(Arbitrary, Clone, Debug)]
pub struct Strategy {
    pub failure_policy: Option<FailurePolicy>,
    pub ordered_recreate: Option<bool>,
    pub force_recreate: Option<bool>,
    pub termination_grace_period_seconds: Option<i64>,
    pub unready_grace_period_seconds: Option<i64>,
    pub min_started_seconds: Option<i32>,
}

impl Strategy {
    fn json(&self) -> Value {
        let mut strategy = Map::new();
        put(
            &mut strategy,
            "failurePolicy",
            self.failure_policy.as_ref().map(|policy| match policy {
                FailurePolicy::Fail => "Fail".to_owned(),
                FailurePolicy::Ignore => "Ignore".to_owned(),
                FailurePolicy::Empty => String::new(),
                FailurePolicy::Any(text) => text.clone(),
            }),
        );
        put(&mut strategy, "orderedRecreate", self.ordered_recreate);
        put(&mut strategy, "forceRecreate", self.force_recreate);
        put(
            &mut strategy,
            "terminationGracePeriodSeconds",
            self.termination_grace_period_seconds,
        );
        put(
            &mut strategy,
            "unreadyGracePeriodSeconds",
            self.unready_grace_period_seconds,
        );
        put(&mut strategy, "minStartedSeconds", self.min_started_seconds);
        Value::Object(strategy)
    }
}

/// `spec`.
#[derive(Arbitrary, Clone, Debug)]
pub struct Spec {
    pub pod_name: Name,
    pub containers: Vec<RequestContainer>,
    pub strategy: Option<Strategy>,
    pub active_deadline_seconds: Option<i64>,
    pub ttl_seconds_after_finished: Option<i32>,
}

impl Spec {
    pub fn json(&self) -> Value {
        let mut spec = Map::new();
        spec.insert("podName".to_owned(), json!(self.pod_name.text()));
        spec.insert(
            "containers".to_owned(),
            Value::Array(self.containers.iter().map(RequestContainer::json).collect()),
        );
        put(
            &mut spec,
            "strategy",
            self.strategy.as_ref().map(Strategy::json),
        );
        put(
            &mut spec,
            "activeDeadlineSeconds",
            self.active_deadline_seconds,
        );
        put(
            &mut spec,
            "ttlSecondsAfterFinished",
            self.ttl_seconds_after_finished,
        );
        Value::Object(spec)
    }
}

/// A phase of a request or of one of its containers.
#[derive(Arbitrary, Clone, Debug)]
pub enum Phase {
    Pending,
    Recreating,
    Succeeded,
    Failed,
    Completed,
    Empty,
    Any(String),
}

impl Phase {
    pub fn text(&self) -> String {
        match self {
            Self::Pending => "Pending".to_owned(),
            Self::Recreating => "Recreating".to_owned(),
            Self::Succeeded => "Succeeded".to_owned(),
            Self::Failed => "Failed".to_owned(),
            Self::Completed => "Completed".to_owned(),
            Self::Empty => String::new(),
            Self::Any(text) => text.clone(),
        }
    }
}

/// A timestamp: usually a valid RFC 3339 one (whole or fractional seconds), sometimes any text.
#[derive(Arbitrary, Clone, Debug)]
pub enum Timestamp {
    Seconds(i64),
    Fractional(i64, u32),
    Any(String),
}

impl Timestamp {
    pub fn text(&self) -> String {
        let at = |seconds: i64, nanos: i32| {
            // Within jiff's range, so most inputs are real times.
            let seconds = seconds.rem_euclid(253_402_207_200 - 1);
            jiff::Timestamp::new(seconds, nanos).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        };
        match self {
            Self::Seconds(seconds) => at(*seconds, 0).to_string(),
            Self::Fractional(seconds, nanos) => {
                at(*seconds, (*nanos % 1_000_000_000) as i32).to_string()
            }
            Self::Any(text) => text.clone(),
        }
    }
}

/// A `metav1.Condition` of a request's status.
#[derive(Arbitrary, Clone, Debug)]
pub struct Condition {
    pub type_: ConditionType,
    pub status: ConditionStatus,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub last_transition_time: Timestamp,
    pub observed_generation: Option<i64>,
}

#[derive(Arbitrary, Clone, Debug)]
pub enum ConditionType {
    PreRecreateGrace,
    Succeeded,
    Any(String),
}

#[derive(Arbitrary, Clone, Debug)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
    Any(String),
}

impl Condition {
    pub fn json(&self) -> Value {
        let type_ = match &self.type_ {
            ConditionType::PreRecreateGrace => {
                crr_crds::keys::CONDITION_PRE_RECREATE_GRACE.to_owned()
            }
            ConditionType::Succeeded => crr_crds::keys::CONDITION_SUCCEEDED.to_owned(),
            ConditionType::Any(text) => text.clone(),
        };
        let status = match &self.status {
            ConditionStatus::True => "True".to_owned(),
            ConditionStatus::False => "False".to_owned(),
            ConditionStatus::Unknown => "Unknown".to_owned(),
            ConditionStatus::Any(text) => text.clone(),
        };
        // None picks the reason and message the operator writes, so the legacy form occurs.
        let reason = self
            .reason
            .clone()
            .unwrap_or_else(|| crr_crds::keys::REASON_PRE_RECREATE_GRACE.to_owned());
        let message = self
            .message
            .clone()
            .unwrap_or_else(|| crr_crds::keys::MESSAGE_PRE_RECREATE_GRACE.to_owned());
        let mut condition = Map::new();
        condition.insert("type".to_owned(), json!(type_));
        condition.insert("status".to_owned(), json!(status));
        condition.insert("reason".to_owned(), json!(reason));
        condition.insert("message".to_owned(), json!(message));
        condition.insert(
            "lastTransitionTime".to_owned(),
            json!(self.last_transition_time.text()),
        );
        put(
            &mut condition,
            "observedGeneration",
            self.observed_generation,
        );
        Value::Object(condition)
    }
}

/// One entry of the container status snapshot (v1beta1 status, v1alpha1 annotation).
#[derive(Arbitrary, Clone, Debug)]
pub struct Snapshot {
    pub name: Name,
    pub ready: bool,
    pub restart_count: i32,
    pub container_id: Option<String>,
}

impl Snapshot {
    pub fn json(&self) -> Value {
        let mut snapshot = Map::new();
        snapshot.insert("name".to_owned(), json!(self.name.text()));
        snapshot.insert("ready".to_owned(), json!(self.ready));
        snapshot.insert("restartCount".to_owned(), json!(self.restart_count));
        put(&mut snapshot, "containerID", self.container_id.clone());
        Value::Object(snapshot)
    }
}

/// One per-container recreate state.
#[derive(Arbitrary, Clone, Debug)]
pub struct RecreateState {
    pub name: Name,
    pub phase: Phase,
    pub message: Option<String>,
    pub is_killed: Option<bool>,
}

impl RecreateState {
    fn json(&self) -> Value {
        let mut state = Map::new();
        state.insert("name".to_owned(), json!(self.name.text()));
        state.insert("phase".to_owned(), json!(self.phase.text()));
        put(&mut state, "message", self.message.clone());
        put(&mut state, "isKilled", self.is_killed);
        Value::Object(state)
    }
}

/// `status`; the snapshot and conditions are written for v1beta1 objects only.
#[derive(Arbitrary, Clone, Debug)]
pub struct Status {
    pub phase: Option<Phase>,
    pub completion_time: Option<Timestamp>,
    pub message: Option<String>,
    pub states: Vec<RecreateState>,
    pub snapshot: Vec<Snapshot>,
    pub conditions: Vec<Condition>,
}

impl Status {
    pub fn json(&self, v1beta1: bool) -> Value {
        let mut status = Map::new();
        put(&mut status, "phase", self.phase.as_ref().map(Phase::text));
        put(
            &mut status,
            "completionTime",
            self.completion_time.as_ref().map(Timestamp::text),
        );
        put(&mut status, "message", self.message.clone());
        if !self.states.is_empty() {
            status.insert(
                "containerRecreateStates".to_owned(),
                Value::Array(self.states.iter().map(RecreateState::json).collect()),
            );
        }
        if v1beta1 && !self.snapshot.is_empty() {
            status.insert(
                "containerStatusSnapshot".to_owned(),
                Value::Array(self.snapshot.iter().map(Snapshot::json).collect()),
            );
        }
        if v1beta1 && !self.conditions.is_empty() {
            status.insert(
                "conditions".to_owned(),
                Value::Array(self.conditions.iter().map(Condition::json).collect()),
            );
        }
        Value::Object(status)
    }
}

/// A label key: one of crr's own, or any.
#[derive(Arbitrary, Clone, Debug)]
pub enum LabelKey {
    Active,
    NodeName,
    PodUid,
    VirtualKubelet,
    Any(String),
}

impl LabelKey {
    pub fn text(&self) -> String {
        match self {
            Self::Active => crr_crds::keys::LABEL_ACTIVE.to_owned(),
            Self::NodeName => crr_crds::keys::LABEL_NODE_NAME.to_owned(),
            Self::PodUid => crr_crds::keys::LABEL_POD_UID.to_owned(),
            Self::VirtualKubelet => crr_webhook::admission::VIRTUAL_KUBELET_LABEL_KEY.to_owned(),
            Self::Any(text) => text.clone(),
        }
    }
}

/// An annotation: one of the three legacy status annotations or any key, with any text or a
/// value of the shape its key expects.
#[derive(Arbitrary, Clone, Debug)]
pub struct Annotation {
    pub key: AnnotationKey,
    pub value: AnnotationValue,
}

#[derive(Arbitrary, Clone, Debug)]
pub enum AnnotationKey {
    SyncContainerStatuses,
    UnreadyAcquired,
    StatusConditions,
    Any(String),
}

#[derive(Arbitrary, Clone, Debug)]
pub enum AnnotationValue {
    Any(String),
    Snapshot(Vec<Snapshot>),
    Time(Timestamp),
    Conditions(Vec<Condition>),
}

impl Annotation {
    pub fn entry(&self) -> (String, Value) {
        let key = match &self.key {
            AnnotationKey::SyncContainerStatuses => {
                crr_crds::keys::ANNOTATION_SYNC_CONTAINER_STATUSES.to_owned()
            }
            AnnotationKey::UnreadyAcquired => {
                crr_crds::keys::ANNOTATION_UNREADY_ACQUIRED.to_owned()
            }
            AnnotationKey::StatusConditions => {
                crr_crds::keys::ANNOTATION_STATUS_CONDITIONS.to_owned()
            }
            AnnotationKey::Any(text) => text.clone(),
        };
        let value = match &self.value {
            AnnotationValue::Any(text) => text.clone(),
            AnnotationValue::Snapshot(entries) => {
                Value::Array(entries.iter().map(Snapshot::json).collect()).to_string()
            }
            AnnotationValue::Time(at) => at.text(),
            AnnotationValue::Conditions(conditions) => {
                Value::Array(conditions.iter().map(Condition::json).collect()).to_string()
            }
        };
        (key, json!(value))
    }
}

/// A whole request object.
#[derive(Arbitrary, Clone, Debug)]
pub struct Request {
    pub v1beta1: bool,
    pub name: String,
    pub namespace: Option<String>,
    pub labels: Vec<(LabelKey, String)>,
    pub annotations: Vec<Annotation>,
    pub spec: Spec,
    pub status: Option<Status>,
}

impl Request {
    pub fn version(&self) -> &'static str {
        if self.v1beta1 { "v1beta1" } else { "v1alpha1" }
    }

    pub fn json(&self) -> Value {
        let mut metadata = Map::new();
        metadata.insert("name".to_owned(), json!(self.name));
        put(&mut metadata, "namespace", self.namespace.clone());
        if !self.labels.is_empty() {
            let labels: Map<String, Value> = self
                .labels
                .iter()
                .map(|(key, value)| (key.text(), json!(value)))
                .collect();
            metadata.insert("labels".to_owned(), Value::Object(labels));
        }
        if !self.annotations.is_empty() {
            let annotations: Map<String, Value> =
                self.annotations.iter().map(Annotation::entry).collect();
            metadata.insert("annotations".to_owned(), Value::Object(annotations));
        }
        let mut object = Map::new();
        object.insert(
            "apiVersion".to_owned(),
            json!(format!("apps.kruise.io/{}", self.version())),
        );
        object.insert("kind".to_owned(), json!("ContainerRecreateRequest"));
        object.insert("metadata".to_owned(), Value::Object(metadata));
        object.insert("spec".to_owned(), self.spec.json());
        put(
            &mut object,
            "status",
            self.status.as_ref().map(|status| status.json(self.v1beta1)),
        );
        Value::Object(object)
    }
}
