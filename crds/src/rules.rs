//! The admission rules that need no live API data: what a request's spec may hold, whether a pod
//! (as already read) may have containers recreated, and which of its containers. Pure functions
//! of the hub model ([`crate::v1beta1`]) and a `k8s_openapi` [`Pod`].
//!
//! The admission webhook and `kubectl crr` both call these, so the plugin can never offer what
//! the webhook refuses. Every [`Violation`] displays the webhook's message (upstream's wording)
//! and names a short machine [`reason`](Violation::reason).
//!
//! This module does not fetch the pod or the node, default or inject fields, judge updates, or
//! decide HTTP codes: those are the webhook's. The webhook checks in this order, and callers that
//! want the same first error should too: [`check_spec`], [`check_pod`], then per container in
//! request order [`ContainerNames::add`], [`recreatable_container`] and
//! [`RecreatableContainer::status_context`].

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};

use crate::v1beta1::{
    ContainerRecreateRequestContainerContext, ContainerRecreateRequestSpec, FailurePolicy,
    UnknownFailurePolicy,
};

/// Smallest accepted `activeDeadlineSeconds`.
pub const MIN_ACTIVE_DEADLINE_SECONDS: i64 = 3;

/// Pod condition that lets an inactive pod with terminated sidecars still have containers
/// recreated (upstream's sidecar terminator relies on it).
pub const SIDECAR_TERMINATED_CONDITION: &str = "SidecarTerminated";

/// The restart policy the kubelet applies when a pod or container names none.
const RESTART_ALWAYS: &str = "Always";
/// The restart policy under which the kubelet restarts a container only after a non-zero exit.
const RESTART_ON_FAILURE: &str = "OnFailure";

/// Why a request, or a pod it names, breaks an admission rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// `spec.podName` is empty.
    #[error("podName can not be empty")]
    PodNameEmpty,
    /// `spec.containers` is empty.
    #[error("containers list can not be null")]
    ContainersEmpty,
    /// `spec.activeDeadlineSeconds` is below [`MIN_ACTIVE_DEADLINE_SECONDS`].
    #[error("activeDeadlineSeconds can not be less than {MIN_ACTIVE_DEADLINE_SECONDS}s")]
    ActiveDeadlineTooShort { seconds: i64 },
    /// `strategy.terminationGracePeriodSeconds` is negative.
    #[error("terminationGracePeriodSeconds must be non-negative integer")]
    NegativeGracePeriod { seconds: i64 },
    /// `strategy.unreadyGracePeriodSeconds` is negative.
    #[error("unreadyGracePeriodSeconds must be non-negative integer")]
    NegativeUnreadyGracePeriod { seconds: i64 },
    /// `strategy.failurePolicy` is neither `Fail` nor `Ignore`.
    #[error(transparent)]
    UnknownFailurePolicy(#[from] UnknownFailurePolicy),
    /// The pod has finished (Succeeded or Failed) or is being deleted.
    #[error("not allowed to recreate containers in an inactive Pod")]
    PodInactive,
    /// The pod is not scheduled to a node yet.
    #[error("not allowed to recreate containers in a pending Pod")]
    PodPending,
    /// The request names one container twice.
    #[error("can not recreate {name} multi times")]
    DuplicateContainer { name: String },
    /// The pod has no container of that name.
    #[error("container {name} not found in Pod")]
    ContainerNotFound { name: String },
    /// The container is an init container that runs once, not a native sidecar.
    #[error(
        "container {name} is an init container that runs once; only native sidecars (restartPolicy: Always) can be recreated"
    )]
    InitContainer { name: String },
    /// The kubelet would not start the container again once stopped (pod or container
    /// `restartPolicy` `Never`, or anything but `Always` and `OnFailure`).
    #[error(
        "container {name} would not be started again after it is stopped (restartPolicy {policy}); only containers the kubelet restarts can be recreated"
    )]
    ContainerNotRestartable { name: String, policy: String },
    /// The pod's status has no entry for the container.
    #[error("not found {name} containerStatus in Pod Status")]
    ContainerStatusMissing { name: String },
    /// The container's status has no container ID: it has not run yet.
    #[error(
        "no containerID in {name} containerStatus, maybe the container has not been initialized"
    )]
    ContainerNotStarted { name: String },
}

impl Violation {
    /// Short machine-readable reason (the webhook's metrics label), one per variant.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::PodNameEmpty => "PodNameEmpty",
            Self::ContainersEmpty => "ContainersEmpty",
            Self::ActiveDeadlineTooShort { .. } => "ActiveDeadlineTooShort",
            Self::NegativeGracePeriod { .. } => "NegativeGracePeriod",
            Self::NegativeUnreadyGracePeriod { .. } => "NegativeUnreadyGracePeriod",
            Self::UnknownFailurePolicy(_) => "UnknownFailurePolicy",
            Self::PodInactive => "PodInactive",
            Self::PodPending => "PodPending",
            Self::DuplicateContainer { .. } => "DuplicateContainer",
            Self::ContainerNotFound { .. } => "ContainerNotFound",
            Self::InitContainer { .. } => "InitContainer",
            Self::ContainerNotRestartable { .. } => "ContainerNotRestartable",
            Self::ContainerStatusMissing { .. } => "ContainerStatusMissing",
            Self::ContainerNotStarted { .. } => "ContainerNotStarted",
        }
    }
}

/// The checks on a spec alone, in the webhook's order: podName, containers present, deadline,
/// grace periods, failure policy. Repeated container names are checked per container
/// ([`ContainerNames`]), after the pod, as the webhook does. A negative `minStartedSeconds` or
/// `ttlSecondsAfterFinished` is not refused (upstream's v1alpha1 accepts them): see
/// [`normalize_spec`].
pub fn check_spec(spec: &ContainerRecreateRequestSpec) -> Result<(), Violation> {
    if spec.pod_name.is_empty() {
        return Err(Violation::PodNameEmpty);
    }
    if spec.containers.is_empty() {
        return Err(Violation::ContainersEmpty);
    }
    check_active_deadline(spec.active_deadline_seconds)?;
    let strategy = spec.strategy.clone().unwrap_or_default();
    if let Some(seconds) = strategy.termination_grace_period_seconds.filter(|s| *s < 0) {
        return Err(Violation::NegativeGracePeriod { seconds });
    }
    if let Some(seconds) = strategy.unready_grace_period_seconds.filter(|s| *s < 0) {
        return Err(Violation::NegativeUnreadyGracePeriod { seconds });
    }
    FailurePolicy::parse(strategy.failure_policy.as_deref().unwrap_or_default())?;
    Ok(())
}

/// Something admission accepts that the user should still hear about: the webhook answers it as
/// an admission warning (kubectl prints it), `kubectl crr` prints the same text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caveat {
    /// The container is restarted by the kubelet only after a non-zero exit (pod or container
    /// `restartPolicy: OnFailure`): upstream accepts it, and most programs exit non-zero on
    /// SIGTERM, but one that exits 0 stays down and the request fails for it.
    RestartsOnlyOnFailure { name: String },
    /// A negative `strategy.minStartedSeconds` (upstream's v1alpha1 accepts it and behaves as
    /// 0: the new container counts as soon as it is started and ready) was set to 0.
    NegativeMinStartedSetToZero { seconds: i32 },
    /// A negative `ttlSecondsAfterFinished` (upstream's v1alpha1 accepts it and deletes the
    /// request as soon as it completes, as for 0) was set to 0.
    NegativeTtlSetToZero { seconds: i32 },
}

impl std::fmt::Display for Caveat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RestartsOnlyOnFailure { name } => write!(
                f,
                "container {name} has restartPolicy OnFailure: the kubelet starts it again only \
                 if it exits non-zero; if it exits 0 on SIGTERM it will not be restarted and the \
                 request will fail for it"
            ),
            Self::NegativeMinStartedSetToZero { seconds } => write!(
                f,
                "strategy.minStartedSeconds {seconds} is negative and was set to 0, which is how \
                 OpenKruise treats it: the new container counts as soon as it is started and ready"
            ),
            Self::NegativeTtlSetToZero { seconds } => write!(
                f,
                "ttlSecondsAfterFinished {seconds} is negative and was set to 0, which is how \
                 OpenKruise treats it: the request is deleted as soon as it completes"
            ),
        }
    }
}

impl Caveat {
    /// Short machine-readable name, one per variant.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::RestartsOnlyOnFailure { .. } => "RestartsOnlyOnFailure",
            Self::NegativeMinStartedSetToZero { .. } => "NegativeMinStartedSetToZero",
            Self::NegativeTtlSetToZero { .. } => "NegativeTtlSetToZero",
        }
    }
}

/// Sets a negative `strategy.minStartedSeconds` or `ttlSecondsAfterFinished` to 0, the value
/// upstream behaves as (its v1alpha1 schema and webhook accept negatives; its daemon compares
/// `now − startedAt > minStartedSeconds` and its controller deletes once `ttl − elapsed ≤ 0`),
/// and says so. The v1beta1 schema refuses negatives before admission; v1alpha1 lets them through.
pub fn normalize_spec(spec: &mut ContainerRecreateRequestSpec) -> Vec<Caveat> {
    let mut caveats = Vec::new();
    if let Some(strategy) = spec.strategy.as_mut()
        && strategy.min_started_seconds < 0
    {
        caveats.push(Caveat::NegativeMinStartedSetToZero {
            seconds: strategy.min_started_seconds,
        });
        strategy.min_started_seconds = 0;
    }
    if let Some(ttl) = spec.ttl_seconds_after_finished.as_mut()
        && *ttl < 0
    {
        caveats.push(Caveat::NegativeTtlSetToZero { seconds: *ttl });
        *ttl = 0;
    }
    caveats
}

/// `activeDeadlineSeconds`, when set, must leave the request time to act.
pub fn check_active_deadline(seconds: Option<i64>) -> Result<(), Violation> {
    match seconds {
        Some(seconds) if seconds < MIN_ACTIVE_DEADLINE_SECONDS => {
            Err(Violation::ActiveDeadlineTooShort { seconds })
        }
        _ => Ok(()),
    }
}

/// Whether the pod may have containers recreated at all: it must be active (not finished, not
/// being deleted; upstream excepts pods with the [`SIDECAR_TERMINATED_CONDITION`]) and then
/// scheduled. Returns the name of its node.
pub fn check_pod(pod: &Pod) -> Result<&str, Violation> {
    if !is_pod_active(pod) && !has_condition(pod, SIDECAR_TERMINATED_CONDITION) {
        return Err(Violation::PodInactive);
    }
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|node| !node.is_empty())
        .ok_or(Violation::PodPending)
}

/// A pod is active while it has not finished and is not being deleted.
fn is_pod_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

fn has_condition(pod: &Pod, condition_type: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == condition_type))
}

/// The container names of one request, added in request order; refuses the first repeat.
#[derive(Clone, Debug, Default)]
pub struct ContainerNames {
    seen: BTreeSet<String>,
}

impl ContainerNames {
    /// Records `name`; refuses it if the request already named it.
    pub fn add(&mut self, name: &str) -> Result<(), Violation> {
        if self.seen.insert(name.to_owned()) {
            Ok(())
        } else {
            Err(Violation::DuplicateContainer {
                name: name.to_owned(),
            })
        }
    }
}

/// Refuses the first container name that repeats an earlier one.
pub fn check_unique_container_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), Violation> {
    let mut seen = ContainerNames::default();
    names.into_iter().try_for_each(|name| seen.add(name))
}

/// A container of the pod that a request may name, with its current status (if any).
#[derive(Clone, Debug)]
pub struct RecreatableContainer<'a> {
    /// The container as the pod spec declares it.
    pub spec: &'a Container,
    /// Its entry in the pod's container (or init container) statuses.
    pub status: Option<&'a ContainerStatus>,
    /// What the user should hear about before recreating it (see [`Caveat`]).
    pub caveat: Option<Caveat>,
}

impl RecreatableContainer<'_> {
    /// What the request records about the running container, so the node daemon can tell the
    /// recreated container from this one. Refuses a container that has not run yet.
    pub fn status_context(&self) -> Result<ContainerRecreateRequestContainerContext, Violation> {
        let name = &self.spec.name;
        let status = self
            .status
            .ok_or_else(|| Violation::ContainerStatusMissing { name: name.clone() })?;
        let container_id = status.container_id.clone().unwrap_or_default();
        if container_id.is_empty() {
            return Err(Violation::ContainerNotStarted { name: name.clone() });
        }
        Ok(ContainerRecreateRequestContainerContext {
            container_id,
            restart_count: status.restart_count,
        })
    }
}

/// Finds a container a request may name: a regular container or a native sidecar (an init
/// container with `restartPolicy: Always`) that the kubelet would start again once stopped. A
/// container restarted only on failure (`OnFailure`) is accepted with a [`Caveat`].
pub fn recreatable_container<'a>(
    pod: &'a Pod,
    name: &str,
) -> Result<RecreatableContainer<'a>, Violation> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let by_name = |statuses: Option<&'a Vec<ContainerStatus>>| {
        statuses.into_iter().flatten().find(|s| s.name == name)
    };
    if let Some(container) = spec
        .into_iter()
        .flat_map(|s| &s.containers)
        .find(|c| c.name == name)
    {
        let caveat = check_regular_container(pod, container)?;
        return Ok(RecreatableContainer {
            spec: container,
            status: by_name(status.and_then(|s| s.container_statuses.as_ref())),
            caveat,
        });
    }
    if let Some(container) = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .find(|c| c.name == name)
    {
        check_init_container(container)?;
        return Ok(RecreatableContainer {
            spec: container,
            status: by_name(status.and_then(|s| s.init_container_statuses.as_ref())),
            caveat: None,
        });
    }
    Err(Violation::ContainerNotFound {
        name: name.to_owned(),
    })
}

/// Why the kubelet will not start `name` again after its container `container_id` exited: it
/// restarts only on failure (`OnFailure`) and that container ended with exit code 0. `None`
/// while a restart may still come (a non-zero exit waits out the kubelet's back-off; another
/// container ID is an older or newer attempt).
pub fn not_restarted(pod: &Pod, name: &str, container_id: &str) -> Option<String> {
    let container = recreatable_container(pod, name).ok()?;
    if !matches!(container.caveat, Some(Caveat::RestartsOnlyOnFailure { .. })) {
        return None;
    }
    let status = container.status?;
    let terminated = status.state.as_ref()?.terminated.as_ref()?;
    let same_container = terminated
        .container_id
        .as_deref()
        .or(status.container_id.as_deref())
        == Some(container_id);
    (same_container && terminated.exit_code == 0).then(|| {
        format!(
            "container {name} exited with code 0 after the kill and its restartPolicy is \
             OnFailure: the kubelet does not start it again"
        )
    })
}

/// Every container [`recreatable_container`] accepts, in the order the kubelet starts them
/// (native sidecars, then regular containers).
pub fn recreatable_containers(pod: &Pod) -> Vec<RecreatableContainer<'_>> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter_map(|container| recreatable_container(pod, &container.name).ok())
        .collect()
}

/// A regular container comes back if its own restart policy, else the pod's, is `Always`; under
/// `OnFailure` only after a non-zero exit, hence the caveat.
fn check_regular_container(pod: &Pod, container: &Container) -> Result<Option<Caveat>, Violation> {
    let pod_policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or(RESTART_ALWAYS);
    let policy = container.restart_policy.as_deref().unwrap_or(pod_policy);
    match policy {
        RESTART_ALWAYS => Ok(None),
        RESTART_ON_FAILURE => Ok(Some(Caveat::RestartsOnlyOnFailure {
            name: container.name.clone(),
        })),
        _ => Err(Violation::ContainerNotRestartable {
            name: container.name.clone(),
            policy: policy.to_owned(),
        }),
    }
}

/// An init container comes back only as a native sidecar, whatever the pod's policy.
fn check_init_container(container: &Container) -> Result<(), Violation> {
    if container.restart_policy.as_deref() == Some(RESTART_ALWAYS) {
        Ok(())
    } else {
        Err(Violation::InitContainer {
            name: container.name.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1beta1::{ContainerRecreateRequestContainer, ContainerRecreateRequestStrategy};
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn container(name: &str, restart_policy: Option<&str>) -> Container {
        Container {
            name: name.to_owned(),
            restart_policy: restart_policy.map(str::to_owned),
            ..Default::default()
        }
    }

    fn status(name: &str, container_id: Option<&str>) -> ContainerStatus {
        ContainerStatus {
            name: name.to_owned(),
            container_id: container_id.map(str::to_owned),
            restart_count: 2,
            ..Default::default()
        }
    }

    /// A running, scheduled pod: init container `migrate`, native sidecar `proxy`, regular
    /// containers `app` and `worker`, all started.
    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".to_owned()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-a".to_owned()),
                init_containers: Some(vec![
                    container("migrate", None),
                    container("proxy", Some("Always")),
                ]),
                containers: vec![container("app", None), container("worker", None)],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".to_owned()),
                container_statuses: Some(vec![
                    status("app", Some("containerd://app")),
                    status("worker", Some("containerd://worker")),
                ]),
                init_container_statuses: Some(vec![
                    status("migrate", Some("containerd://migrate")),
                    status("proxy", Some("containerd://proxy")),
                ]),
                ..Default::default()
            }),
        }
    }

    fn with_pod_restart_policy(policy: &str) -> Pod {
        let mut pod = pod();
        pod.spec.as_mut().unwrap().restart_policy = Some(policy.to_owned());
        pod
    }

    fn exited(mut pod: Pod, name: &str, id: &str, code: i32) -> Pod {
        let status = pod.status.get_or_insert_default();
        let statuses = status.container_statuses.get_or_insert_default();
        statuses.retain(|status| status.name != name);
        statuses.push(
            serde_json::from_value(serde_json::json!({
                "name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "containerID": id,
                "state": {"terminated": {"exitCode": code, "containerID": id}},
            }))
            .unwrap(),
        );
        pod
    }

    #[test]
    fn only_an_on_failure_container_that_exited_zero_is_not_restarted() {
        let on_failure = with_pod_restart_policy("OnFailure");
        let message = not_restarted(
            &exited(on_failure.clone(), "app", "containerd://a1", 0),
            "app",
            "containerd://a1",
        )
        .expect("exit 0 under OnFailure stays exited");
        assert!(
            message.contains("OnFailure") && message.contains("app"),
            "{message}"
        );
        assert_eq!(
            not_restarted(
                &exited(on_failure.clone(), "app", "containerd://a1", 143),
                "app",
                "containerd://a1"
            ),
            None,
            "a non-zero exit is restarted after the back-off"
        );
        assert_eq!(
            not_restarted(
                &exited(on_failure.clone(), "app", "containerd://a0", 0),
                "app",
                "containerd://a1"
            ),
            None,
            "another attempt's exit says nothing of this one"
        );
        assert_eq!(
            not_restarted(
                &exited(pod(), "app", "containerd://a1", 0),
                "app",
                "containerd://a1"
            ),
            None,
            "Always restarts after exit 0 too"
        );
        assert_eq!(
            not_restarted(&on_failure, "app", "containerd://a1"),
            None,
            "no status yet"
        );
    }

    fn with_container_restart_policy(name: &str, policy: &str) -> Pod {
        let mut pod = pod();
        let spec = pod.spec.as_mut().unwrap();
        for container in spec.containers.iter_mut() {
            if container.name == name {
                container.restart_policy = Some(policy.to_owned());
            }
        }
        pod
    }

    fn spec() -> ContainerRecreateRequestSpec {
        ContainerRecreateRequestSpec {
            pod_name: "web-0".to_owned(),
            containers: vec![ContainerRecreateRequestContainer {
                name: "app".to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn spec_rules_refuse_with_the_webhooks_reason_and_message() {
        let with_strategy = |edit: fn(&mut ContainerRecreateRequestStrategy)| {
            let mut spec = spec();
            edit(spec.strategy.get_or_insert_with(Default::default));
            spec
        };
        let cases = [
            ("a plain request", spec(), None),
            (
                "deadline of exactly the minimum",
                ContainerRecreateRequestSpec {
                    active_deadline_seconds: Some(3),
                    ..spec()
                },
                None,
            ),
            (
                "zero grace periods and TTL",
                ContainerRecreateRequestSpec {
                    ttl_seconds_after_finished: Some(0),
                    ..with_strategy(|s| {
                        s.termination_grace_period_seconds = Some(0);
                        s.unready_grace_period_seconds = Some(0);
                    })
                },
                None,
            ),
            (
                "explicit Ignore",
                with_strategy(|s| s.failure_policy = Some("Ignore".to_owned())),
                None,
            ),
            (
                "empty podName",
                ContainerRecreateRequestSpec {
                    pod_name: String::new(),
                    ..spec()
                },
                Some(("PodNameEmpty", "podName can not be empty")),
            ),
            (
                "no containers",
                ContainerRecreateRequestSpec {
                    containers: Vec::new(),
                    ..spec()
                },
                Some(("ContainersEmpty", "containers list can not be null")),
            ),
            (
                "deadline below the minimum",
                ContainerRecreateRequestSpec {
                    active_deadline_seconds: Some(2),
                    ..spec()
                },
                Some((
                    "ActiveDeadlineTooShort",
                    "activeDeadlineSeconds can not be less than 3s",
                )),
            ),
            (
                "negative grace period",
                with_strategy(|s| s.termination_grace_period_seconds = Some(-1)),
                Some((
                    "NegativeGracePeriod",
                    "terminationGracePeriodSeconds must be non-negative integer",
                )),
            ),
            (
                "negative unready grace period",
                with_strategy(|s| s.unready_grace_period_seconds = Some(-1)),
                Some((
                    "NegativeUnreadyGracePeriod",
                    "unreadyGracePeriodSeconds must be non-negative integer",
                )),
            ),
            (
                "negative minStartedSeconds is left to normalize_spec",
                with_strategy(|s| s.min_started_seconds = -1),
                None,
            ),
            (
                "negative TTL is left to normalize_spec",
                ContainerRecreateRequestSpec {
                    ttl_seconds_after_finished: Some(-1),
                    ..spec()
                },
                None,
            ),
            (
                "unknown failure policy",
                with_strategy(|s| s.failure_policy = Some("Retry".to_owned())),
                Some(("UnknownFailurePolicy", "unknown failurePolicy Retry")),
            ),
            (
                "empty podName comes before a short deadline",
                ContainerRecreateRequestSpec {
                    pod_name: String::new(),
                    active_deadline_seconds: Some(1),
                    ..spec()
                },
                Some(("PodNameEmpty", "podName can not be empty")),
            ),
            (
                "a short deadline comes before a bad failure policy",
                ContainerRecreateRequestSpec {
                    active_deadline_seconds: Some(1),
                    ..with_strategy(|s| s.failure_policy = Some("Retry".to_owned()))
                },
                Some((
                    "ActiveDeadlineTooShort",
                    "activeDeadlineSeconds can not be less than 3s",
                )),
            ),
        ];
        for (case, spec, expected) in cases {
            let outcome =
                check_spec(&spec).map_err(|violation| (violation.reason(), violation.to_string()));
            let expected = expected.map(|(reason, message)| (reason, message.to_owned()));
            assert_eq!(outcome.err(), expected, "{case}");
        }
    }

    #[test]
    fn repeated_container_name_is_refused_at_its_second_mention() {
        assert_eq!(check_unique_container_names(["app", "proxy"]), Ok(()));
        let violation = check_unique_container_names(["app", "proxy", "proxy", "app"]).unwrap_err();
        assert_eq!(
            violation,
            Violation::DuplicateContainer {
                name: "proxy".to_owned()
            }
        );
        assert_eq!(violation.reason(), "DuplicateContainer");
        assert_eq!(violation.to_string(), "can not recreate proxy multi times");

        let mut names = ContainerNames::default();
        assert_eq!(names.add("app"), Ok(()));
        assert_eq!(names.add("proxy"), Ok(()));
        assert!(names.add("app").is_err());
    }

    #[test]
    fn pod_must_be_active_then_scheduled() {
        let deleting = || {
            let mut pod = pod();
            pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
            pod
        };
        let phase = |phase: &str| {
            let mut pod = pod();
            pod.status.as_mut().unwrap().phase = Some(phase.to_owned());
            pod
        };
        let unscheduled = |mut pod: Pod, node: Option<&str>| {
            pod.spec.as_mut().unwrap().node_name = node.map(str::to_owned);
            pod
        };
        let sidecar_terminated = |mut pod: Pod| {
            pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
                type_: SIDECAR_TERMINATED_CONDITION.to_owned(),
                status: "True".to_owned(),
                ..Default::default()
            }]);
            pod
        };
        let cases = [
            ("running and scheduled", pod(), Ok("node-a")),
            ("pending phase but bound", phase("Pending"), Ok("node-a")),
            ("succeeded", phase("Succeeded"), Err(Violation::PodInactive)),
            ("failed", phase("Failed"), Err(Violation::PodInactive)),
            ("being deleted", deleting(), Err(Violation::PodInactive)),
            (
                "succeeded with terminated sidecars",
                sidecar_terminated(phase("Succeeded")),
                Ok("node-a"),
            ),
            (
                "deleting with terminated sidecars",
                sidecar_terminated(deleting()),
                Ok("node-a"),
            ),
            (
                "no node name",
                unscheduled(phase("Pending"), None),
                Err(Violation::PodPending),
            ),
            (
                "empty node name",
                unscheduled(pod(), Some("")),
                Err(Violation::PodPending),
            ),
            (
                "inactive comes before unscheduled",
                unscheduled(phase("Failed"), None),
                Err(Violation::PodInactive),
            ),
        ];
        for (case, pod, expected) in cases {
            assert_eq!(check_pod(&pod), expected, "{case}");
        }
        assert_eq!(Violation::PodInactive.reason(), "PodInactive");
        assert_eq!(
            Violation::PodInactive.to_string(),
            "not allowed to recreate containers in an inactive Pod"
        );
        assert_eq!(
            Violation::PodPending.to_string(),
            "not allowed to recreate containers in a pending Pod"
        );
    }

    #[test]
    fn only_containers_the_kubelet_restarts_can_be_recreated() {
        let not_restartable = |name: &str, policy: &str| {
            Err(Violation::ContainerNotRestartable {
                name: name.to_owned(),
                policy: policy.to_owned(),
            })
        };
        let on_failure_only = |name: &str| {
            Ok(Some(Caveat::RestartsOnlyOnFailure {
                name: name.to_owned(),
            }))
        };
        let cases = [
            ("regular container", pod(), "app", Ok(None)),
            ("native sidecar", pod(), "proxy", Ok(None)),
            (
                "pod restartPolicy Always",
                with_pod_restart_policy("Always"),
                "app",
                Ok(None),
            ),
            (
                "pod restartPolicy Never",
                with_pod_restart_policy("Never"),
                "app",
                not_restartable("app", "Never"),
            ),
            (
                "pod restartPolicy OnFailure: accepted, with the caveat",
                with_pod_restart_policy("OnFailure"),
                "app",
                on_failure_only("app"),
            ),
            (
                "container policy OnFailure overrides pod Always",
                with_container_restart_policy("app", "OnFailure"),
                "app",
                on_failure_only("app"),
            ),
            (
                "native sidecar of an OnFailure pod has no caveat",
                with_pod_restart_policy("OnFailure"),
                "proxy",
                Ok(None),
            ),
            (
                "native sidecar of a Never pod",
                with_pod_restart_policy("Never"),
                "proxy",
                Ok(None),
            ),
            (
                "container policy Always overrides pod Never",
                {
                    let mut pod = with_pod_restart_policy("Never");
                    pod.spec.as_mut().unwrap().containers[0].restart_policy =
                        Some("Always".to_owned());
                    pod
                },
                "app",
                Ok(None),
            ),
            (
                "container policy Never overrides pod Always",
                with_container_restart_policy("app", "Never"),
                "app",
                not_restartable("app", "Never"),
            ),
            (
                "plain init container",
                pod(),
                "migrate",
                Err(Violation::InitContainer {
                    name: "migrate".to_owned(),
                }),
            ),
            (
                "unknown container",
                pod(),
                "nginx",
                Err(Violation::ContainerNotFound {
                    name: "nginx".to_owned(),
                }),
            ),
        ];
        for (case, pod, name, expected) in cases {
            let found = recreatable_container(&pod, name).map(|c| {
                assert_eq!(c.spec.name, name, "{case}");
                c.caveat
            });
            assert_eq!(found, expected, "{case}");
        }
    }

    #[test]
    fn container_refusals_carry_the_webhooks_messages() {
        let cases = [
            (
                Violation::ContainerNotFound {
                    name: "nope".to_owned(),
                },
                "ContainerNotFound",
                "container nope not found in Pod",
            ),
            (
                Violation::InitContainer {
                    name: "init".to_owned(),
                },
                "InitContainer",
                "container init is an init container that runs once; only native sidecars (restartPolicy: Always) can be recreated",
            ),
            (
                Violation::ContainerNotRestartable {
                    name: "app".to_owned(),
                    policy: "Never".to_owned(),
                },
                "ContainerNotRestartable",
                "container app would not be started again after it is stopped (restartPolicy Never); only containers the kubelet restarts can be recreated",
            ),
            (
                Violation::ContainerStatusMissing {
                    name: "app".to_owned(),
                },
                "ContainerStatusMissing",
                "not found app containerStatus in Pod Status",
            ),
            (
                Violation::ContainerNotStarted {
                    name: "app".to_owned(),
                },
                "ContainerNotStarted",
                "no containerID in app containerStatus, maybe the container has not been initialized",
            ),
        ];
        for (violation, reason, message) in cases {
            assert_eq!(violation.reason(), reason);
            assert_eq!(violation.to_string(), message);
        }
    }

    #[test]
    fn recreatable_containers_are_listed_in_start_order() {
        let names = |pod: &Pod| -> Vec<String> {
            recreatable_containers(pod)
                .iter()
                .map(|c| c.spec.name.clone())
                .collect()
        };
        assert_eq!(names(&pod()), ["proxy", "app", "worker"]);
        assert_eq!(names(&with_pod_restart_policy("Never")), ["proxy"]);
        assert_eq!(
            names(&with_pod_restart_policy("OnFailure")),
            ["proxy", "app", "worker"]
        );
        assert_eq!(
            names(&with_container_restart_policy("worker", "Never")),
            ["proxy", "app"]
        );
        assert!(names(&Pod::default()).is_empty());
    }

    #[test]
    fn negative_min_started_and_ttl_are_set_to_zero_with_a_caveat() {
        let mut negative = spec();
        negative.strategy = Some(ContainerRecreateRequestStrategy {
            min_started_seconds: -5,
            ..Default::default()
        });
        negative.ttl_seconds_after_finished = Some(-1);
        let caveats = normalize_spec(&mut negative);
        assert_eq!(
            caveats,
            [
                Caveat::NegativeMinStartedSetToZero { seconds: -5 },
                Caveat::NegativeTtlSetToZero { seconds: -1 },
            ]
        );
        assert_eq!(negative.strategy.as_ref().unwrap().min_started_seconds, 0);
        assert_eq!(negative.ttl_seconds_after_finished, Some(0));
        assert_eq!(
            caveats[0].to_string(),
            "strategy.minStartedSeconds -5 is negative and was set to 0, which is how OpenKruise \
             treats it: the new container counts as soon as it is started and ready"
        );
        assert_eq!(
            caveats[1].to_string(),
            "ttlSecondsAfterFinished -1 is negative and was set to 0, which is how OpenKruise \
             treats it: the request is deleted as soon as it completes"
        );
        assert_eq!(caveats[1].reason(), "NegativeTtlSetToZero");

        let mut fine = spec();
        fine.ttl_seconds_after_finished = Some(0);
        fine.strategy = Some(ContainerRecreateRequestStrategy {
            min_started_seconds: 3,
            ..Default::default()
        });
        let before = fine.clone();
        assert!(normalize_spec(&mut fine).is_empty());
        assert_eq!(fine, before);
    }

    #[test]
    fn on_failure_caveat_says_the_request_fails_if_the_container_exits_zero() {
        let caveat = Caveat::RestartsOnlyOnFailure {
            name: "app".to_owned(),
        };
        assert_eq!(caveat.reason(), "RestartsOnlyOnFailure");
        assert_eq!(
            caveat.to_string(),
            "container app has restartPolicy OnFailure: the kubelet starts it again only if it \
             exits non-zero; if it exits 0 on SIGTERM it will not be restarted and the request \
             will fail for it"
        );
    }

    #[test]
    fn status_context_needs_a_started_container() {
        let found = |pod: &Pod, name: &str| {
            recreatable_container(pod, name).and_then(|container| container.status_context())
        };
        assert_eq!(
            found(&pod(), "proxy"),
            Ok(ContainerRecreateRequestContainerContext {
                container_id: "containerd://proxy".to_owned(),
                restart_count: 2,
            })
        );
        assert_eq!(
            found(&pod(), "app").map(|context| context.container_id),
            Ok("containerd://app".to_owned())
        );

        let mut no_status = pod();
        no_status.status.as_mut().unwrap().container_statuses = Some(Vec::new());
        assert_eq!(
            found(&no_status, "app"),
            Err(Violation::ContainerStatusMissing {
                name: "app".to_owned()
            })
        );
        for container_id in [None, Some("")] {
            let mut not_started = pod();
            not_started.status.as_mut().unwrap().container_statuses =
                Some(vec![status("app", container_id)]);
            assert_eq!(
                found(&not_started, "app"),
                Err(Violation::ContainerNotStarted {
                    name: "app".to_owned()
                })
            );
        }
        // A regular container's status is never taken from the init container statuses.
        let mut misplaced = pod();
        let status = misplaced.status.as_mut().unwrap();
        status.container_statuses = None;
        status.init_container_statuses = Some(vec![self::status("app", Some("containerd://x"))]);
        assert!(matches!(
            found(&misplaced, "app"),
            Err(Violation::ContainerStatusMissing { .. })
        ));
    }
}
