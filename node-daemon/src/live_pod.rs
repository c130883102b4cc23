//! What the daemon takes from the live pod, read once in a round that kills: its UID, its grace
//! period, the address hooks reach it at, and each container's preStop handler and ports. The
//! request carries copies of the preStop handler and ports that admission wrote; the daemon
//! never trusts them (a user who can write a request could otherwise have the daemon run any
//! command in any container it names, or wait as long as it likes).
//!
//! Pure: `api_server` reads the pod, `round` decides with what this returns.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crr_crds::restart_policy::{AfterExit, after_exit};
use crr_crds::rules::{Caveat, recreatable_containers};
use crr_crds::v1beta1::ProbeHandler;
use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodSpec};

/// What a recreate uses of the pod, as the API server has it now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LivePod {
    pub uid: Option<String>,
    /// `spec.terminationGracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// The address hooks without a host reach the pod at: its IP (the node's with host network).
    pub address: Option<String>,
    pub containers: Vec<LiveContainer>,
}

/// One container of the live pod: a regular one, or a native sidecar (an init container with
/// `restartPolicy: Always`), the ones a request may name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveContainer {
    pub name: String,
    /// `lifecycle.preStop`, in the request's handler shape (exec, httpGet, tcpSocket).
    pub pre_stop: Option<ProbeHandler>,
    /// The ports named ports of httpGet and tcpSocket handlers resolve against.
    pub ports: Vec<ContainerPort>,
}

/// Keeps of a pod only what a recreate reads (`LivePod::of`, the restart rules, the
/// not-restarted check, the Events' object reference): identity, labels, the containers' names,
/// images, ports, lifecycle and restart policies, the grace period, host network, the addresses
/// and the container statuses. What a tenant can make large and the daemon never reads goes:
/// annotations, `managedFields`, volumes, and each container's env, command, args, mounts,
/// resources and probes. The node's pod watch stores pods this way (`api_server::watch_pods`).
pub fn slim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        spec.ephemeral_containers = None;
        let slim = |container: &mut Container| {
            container.env = None;
            container.env_from = None;
            container.command = None;
            container.args = None;
            container.volume_mounts = None;
            container.volume_devices = None;
            container.resources = None;
            container.liveness_probe = None;
            container.readiness_probe = None;
            container.startup_probe = None;
            container.working_dir = None;
        };
        spec.containers.iter_mut().for_each(slim);
        spec.init_containers.iter_mut().flatten().for_each(slim);
    }
}

impl LivePod {
    pub fn of(pod: &Pod) -> Self {
        let spec = pod.spec.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|container| container.restart_policy.as_deref() == Some("Always"));
        Self {
            uid: pod.metadata.uid.clone(),
            grace_period_seconds: spec.termination_grace_period_seconds,
            address: status
                .pod_ip
                .filter(|ip| !ip.is_empty())
                .or(status.host_ip.filter(|ip| !ip.is_empty())),
            containers: spec
                .containers
                .iter()
                .chain(sidecars)
                .map(LiveContainer::of)
                .collect(),
        }
    }

    /// The container named `name`, if the pod has one a request may name.
    pub fn container(&self, name: &str) -> Option<&LiveContainer> {
        self.containers
            .iter()
            .find(|container| container.name == name)
    }
}

impl LiveContainer {
    fn of(container: &Container) -> Self {
        let pre_stop = container
            .lifecycle
            .as_ref()
            .and_then(|lifecycle| lifecycle.pre_stop.as_ref())
            .map(|handler| ProbeHandler {
                exec: handler.exec.clone(),
                http_get: handler.http_get.clone(),
                tcp_socket: handler.tcp_socket.clone(),
            })
            .filter(|handler| {
                handler.exec.is_some() || handler.http_get.is_some() || handler.tcp_socket.is_some()
            });
        Self {
            name: container.name.clone(),
            pre_stop,
            ports: container.ports.clone().unwrap_or_default(),
        }
    }
}

/// Whether a request's pod may leave a killed container stopped after a given exit code
/// (`restartPolicy: OnFailure` and an exit 0, or `restartPolicyRules` that restart it on some
/// codes only), learnt from the live pod read at the kill, by request UID. A pod's restart
/// policies never change, so the check for containers the kubelet does not start again reads
/// the pod only when this says it may happen, or when this daemon has not read it (it started
/// after the kill): an ordinary recreate, or one whose container exits with a code the kubelet
/// restarts it after, costs no pod reads while the kubelet takes its time (or its back-off) to
/// restart it.
#[derive(Debug, Default)]
pub struct RestartPolicies {
    /// Per request UID: `None` when every container the pod lets a request name is started
    /// again whatever its exit code; else the pod's `restartPolicy` and, for each container
    /// started again only after some codes (one with a restart [`Caveat`]), its name, own policy
    /// and rules: what [`after_exit`] needs.
    known: Mutex<HashMap<String, Option<Box<PodSpec>>>>,
}

impl RestartPolicies {
    /// Records what `pod` says for the request with UID `request_uid`.
    pub fn record(&self, request_uid: &str, pod: &Pod) {
        let some_codes_only: Vec<Container> = recreatable_containers(pod)
            .iter()
            .filter(|container| {
                matches!(
                    container.caveat,
                    Some(Caveat::RestartsOnlyOnSomeExitCodes { .. })
                )
            })
            .map(|container| Container {
                name: container.spec.name.clone(),
                restart_policy: container.spec.restart_policy.clone(),
                restart_policy_rules: container.spec.restart_policy_rules.clone(),
                ..Default::default()
            })
            .collect();
        let policies = (!some_codes_only.is_empty()).then(|| {
            Box::new(PodSpec {
                restart_policy: pod
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.restart_policy.clone()),
                containers: some_codes_only,
                ..Default::default()
            })
        });
        self.known().insert(request_uid.to_owned(), policies);
    }

    /// `Some(false)`: the kubelet starts `container` of the request's pod again after
    /// `exit_code` (or the request's pod has no such container); `Some(true)`: it leaves it
    /// stopped; `None`: not known here.
    pub fn may_stay_stopped(
        &self,
        request_uid: &str,
        container: &str,
        exit_code: i32,
    ) -> Option<bool> {
        let known = self.known();
        let policies = known.get(request_uid)?;
        Some(policies.as_deref().is_some_and(|spec| {
            spec.containers
                .iter()
                .find(|candidate| candidate.name == container)
                .is_some_and(|candidate| {
                    after_exit(spec, candidate, exit_code).after == AfterExit::StayStopped
                })
        }))
    }

    /// Forgets the request with this UID (it is gone).
    pub fn forget(&self, request_uid: &str) {
        self.known().remove(request_uid);
    }

    fn known(&self) -> MutexGuard<'_, HashMap<String, Option<Box<PodSpec>>>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a pod")
    }

    #[test]
    fn takes_hooks_ports_grace_and_address_from_the_pod() {
        let live = LivePod::of(&pod(json!({
            "metadata": {"name": "p", "uid": "u1"},
            "spec": {
                "terminationGracePeriodSeconds": 45,
                "containers": [{
                    "name": "app",
                    "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": "http"}}},
                    "ports": [{"name": "http", "containerPort": 8080}],
                }, {"name": "plain"}],
                "initContainers": [
                    {"name": "sidecar", "restartPolicy": "Always",
                     "lifecycle": {"preStop": {"exec": {"command": ["drain"]}}}},
                    {"name": "setup"},
                ],
            },
            "status": {"podIP": "10.0.0.7", "hostIP": "192.168.0.1"},
        })));
        assert_eq!(live.uid.as_deref(), Some("u1"));
        assert_eq!(live.grace_period_seconds, Some(45));
        assert_eq!(live.address.as_deref(), Some("10.0.0.7"));
        let app = live.container("app").expect("app");
        assert_eq!(
            app.pre_stop
                .as_ref()
                .and_then(|handler| handler.http_get.as_ref())
                .and_then(|get| get.path.as_deref()),
            Some("/drain")
        );
        assert_eq!(app.ports[0].container_port, 8080);
        assert_eq!(
            live.container("plain").and_then(|c| c.pre_stop.clone()),
            None
        );
        assert!(
            live.container("sidecar")
                .and_then(|c| c.pre_stop.as_ref())
                .is_some_and(|handler| handler.exec.is_some()),
            "native sidecars too"
        );
        assert_eq!(live.container("setup"), None, "not a plain init container");
    }

    #[test]
    fn a_pod_without_an_ip_is_reached_at_its_host() {
        let live = LivePod::of(&pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app"}]},
            "status": {"podIP": "", "hostIP": "192.168.0.1"},
        })));
        assert_eq!(live.address.as_deref(), Some("192.168.0.1"));
        assert_eq!(live.grace_period_seconds, None);
    }

    #[test]
    fn restart_policies_know_only_what_a_kill_read() {
        let policies = RestartPolicies::default();
        assert_eq!(
            policies.may_stay_stopped("crr-1", "app", 0),
            None,
            "never read here"
        );
        policies.record(
            "crr-1",
            &pod(json!({"spec": {"containers": [{"name": "app"}]}})),
        );
        assert_eq!(
            policies.may_stay_stopped("crr-1", "app", 0),
            Some(false),
            "Always by default"
        );
        policies.record(
            "crr-2",
            &pod(json!({"spec": {"restartPolicy": "OnFailure",
                                 "containers": [{"name": "app"}]}})),
        );
        assert_eq!(policies.may_stay_stopped("crr-2", "app", 0), Some(true));
        assert_eq!(
            policies.may_stay_stopped("crr-2", "app", 143),
            Some(false),
            "a non-zero exit is restarted after the back-off: no read"
        );
        assert_eq!(
            policies.may_stay_stopped("crr-2", "other", 0),
            Some(false),
            "no such container"
        );
        policies.forget("crr-1");
        assert_eq!(policies.may_stay_stopped("crr-1", "app", 0), None);
    }

    #[test]
    fn restart_policies_follow_the_containers_rules() {
        let policies = RestartPolicies::default();
        // Restarted only on 143: SIGKILLed (137) or a clean exit (0) leaves it stopped.
        policies.record(
            "crr-1",
            &pod(json!({"spec": {"containers": [
                {"name": "app", "restartPolicy": "Never", "restartPolicyRules": [
                    {"action": "Restart", "exitCodes": {"operator": "In", "values": [143]}},
                ]},
                {"name": "web"},
            ]}})),
        );
        assert_eq!(policies.may_stay_stopped("crr-1", "app", 137), Some(true));
        assert_eq!(policies.may_stay_stopped("crr-1", "app", 0), Some(true));
        assert_eq!(policies.may_stay_stopped("crr-1", "app", 143), Some(false));
        assert_eq!(
            policies.may_stay_stopped("crr-1", "web", 137),
            Some(false),
            "the pod's Always for the other container"
        );
        // The pod's Never does not matter to a container with its own Always.
        policies.record(
            "crr-2",
            &pod(json!({"spec": {"restartPolicy": "Never", "containers": [
                {"name": "app", "restartPolicy": "Always"},
            ]}})),
        );
        assert_eq!(policies.may_stay_stopped("crr-2", "app", 0), Some(false));
    }

    #[test]
    fn a_slim_pod_answers_every_question_a_recreate_asks_as_the_whole_one() {
        let whole = pod(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "9",
                         "labels": {"app": "web"},
                         "annotations": {"team.example/notes": "n".repeat(100_000)},
                         "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {
                "restartPolicy": "OnFailure",
                "terminationGracePeriodSeconds": 45,
                "volumes": [{"name": "data", "emptyDir": {}}],
                "initContainers": [{
                    "name": "proxy", "image": "proxy:1", "restartPolicy": "Always",
                    "env": [{"name": "BIG", "value": "x".repeat(100_000)}],
                    "lifecycle": {"preStop": {"exec": {"command": ["drain"]}}},
                }],
                "containers": [{
                    "name": "app", "image": "web:1",
                    "command": ["serve"], "args": ["--big", &"y".repeat(10_000)],
                    "env": [{"name": "MODE", "value": "production"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": "http"}}},
                }],
            },
            "status": {
                "podIP": "10.0.0.7",
                "containerStatuses": [{
                    "name": "app", "ready": false, "restartCount": 1, "image": "web:1",
                    "imageID": "", "containerID": "containerd://abc",
                    "state": {"terminated": {"exitCode": 0, "finishedAt": "2030-01-01T00:00:00Z",
                                             "containerID": "containerd://abc"}},
                }],
            },
        }));
        let mut slim = whole.clone();
        slim_pod(&mut slim);
        assert_eq!(LivePod::of(&slim), LivePod::of(&whole));
        assert_eq!(
            crr_crds::rules::not_restarted(&slim, "app", "containerd://abc"),
            crr_crds::rules::not_restarted(&whole, "app", "containerd://abc")
        );
        let names = |pod: &Pod| -> Vec<(String, Option<Caveat>)> {
            recreatable_containers(pod)
                .iter()
                .map(|container| (container.spec.name.clone(), container.caveat.clone()))
                .collect()
        };
        assert_eq!(names(&slim), names(&whole));
        assert_eq!(slim.metadata.uid, whole.metadata.uid);
        assert_eq!(slim.metadata.labels, whole.metadata.labels);
        let bytes = |pod: &Pod| serde_json::to_vec(pod).expect("serializable").len();
        assert!(
            bytes(&slim) < 2_000,
            "{} bytes kept of {}",
            bytes(&slim),
            bytes(&whole)
        );
    }
}
