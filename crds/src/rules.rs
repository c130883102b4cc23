//! The admission rules that need no live API data: what a request's spec may hold, whether a pod
//! (as already read) may have containers recreated, and which of its containers. Pure functions
//! of the hub model ([`crate::v1beta1`]) and a `k8s_openapi` [`Pod`].
//!
//! The admission webhook and `kubectl crr` both call these, so the plugin can never offer what
//! the webhook refuses. Every [`Violation`] displays the webhook's message (upstream's wording)
//! and names a short machine [`reason`](Violation::reason).
//!
//! Whether a container may be named rests on what the kubelet does once it has stopped:
//! [`after_exit`](crate::restart_policy::after_exit) answers that for one exit code from the container's restart policy in force and
//! its `restartPolicyRules` (Kubernetes 1.35+), [`restart_rule`] derives the admission decision
//! from it over every exit code, and [`not_restarted`] tells the node daemon, after a kill, that a
//! container will stay stopped.
//!
//! This module does not fetch the pod or the node, default or inject fields, judge updates, or
//! decide HTTP codes: those are the webhook's. The webhook checks in this order, and callers that
//! want the same first error should too: [`check_spec`], [`check_pod`], then per container in
//! request order [`ContainerNames::add`], [`recreatable_container`] and
//! [`RecreatableContainer::status_context`].

pub mod rollout;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec};

use crate::restart_policy::{
    AfterExit, EXIT_CODES, EffectivePolicy, KILL_EXIT_CODES, RESTART_ALWAYS, after_exit, decide,
    effective_policy,
};
use crate::v1beta1::{
    ContainerRecreateRequestContainerContext, ContainerRecreateRequestSpec, FailurePolicy,
    UnknownFailurePolicy,
};

/// Smallest accepted `activeDeadlineSeconds`.
pub const MIN_ACTIVE_DEADLINE_SECONDS: i64 = 3;

/// Pod condition that lets an inactive pod with terminated sidecars still have containers
/// recreated (upstream's sidecar terminator relies on it).
pub const SIDECAR_TERMINATED_CONDITION: &str = "SidecarTerminated";

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
    /// The kubelet would not start the container again once stopped, whatever its exit code
    /// (see [`after_exit`]): its restart policy in force is `Never` and none of its
    /// `restartPolicyRules` restarts it.
    #[error(
        "container {name} would not be started again after it is stopped, whatever its exit code, under {policy}; only containers the kubelet restarts can be recreated"
    )]
    ContainerNotRestartable {
        name: String,
        policy: EffectivePolicy,
    },
    /// A `restartPolicyRules` rule of the container restarts the whole pod
    /// (`RestartAllContainers`) on an exit code a kill produces ([`KILL_EXIT_CODES`]): recreating
    /// it would restart every container of the pod. No opt-in: that is a pod restart, not a
    /// container recreate.
    #[error(
        "container {name} restarts all containers of the pod (restartPolicyRules action RestartAllContainers) on exit code {listed}, which a kill produces ({KILL_CODES_TEXT}): recreating it would restart the whole pod, every container killed and the init containers run again",
        listed = ExitCodes(.codes)
    )]
    RestartsAllContainers { name: String, codes: Vec<i32> },
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
            Self::RestartsAllContainers { .. } => "RestartsAllContainers",
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
    /// The kubelet starts the container again after some exit codes and not after others (see
    /// [`after_exit`]): `restartPolicy: OnFailure` (only after a non-zero exit), or
    /// `restartPolicyRules` that restart it on some codes only. Upstream accepts `OnFailure`, and
    /// most programs exit non-zero on SIGTERM, but one that ends with a code the kubelet does not
    /// restart on stays down and the request fails for it.
    RestartsOnlyOnSomeExitCodes {
        name: String,
        /// The restart policy in force for the container.
        policy: EffectivePolicy,
        /// The codes of [`KILL_EXIT_CODES`] after which the kubelet leaves it stopped (may be
        /// empty: then only other codes, e.g. from a SIGTERM handler, do).
        kill_codes_not_restarted: Vec<i32>,
    },
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
            Self::RestartsOnlyOnSomeExitCodes {
                name,
                policy,
                kill_codes_not_restarted,
            } => {
                write!(
                    f,
                    "container {name} has {policy}: the kubelet starts it again only after some \
                     exit codes; "
                )?;
                if kill_codes_not_restarted.is_empty() {
                    write!(
                        f,
                        "it does after every code a kill produces ({KILL_CODES_TEXT}), but if it \
                         exits with another code after the kill (from a SIGTERM handler) it will \
                         not be restarted and the request will fail for it"
                    )
                } else {
                    write!(
                        f,
                        "of the codes a kill produces ({KILL_CODES_TEXT}) not after {codes}: if it \
                         {how} it will not be restarted and the request will fail for it",
                        codes = ExitCodes(kill_codes_not_restarted),
                        how = KillEndings(kill_codes_not_restarted),
                    )
                }
            }
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
            Self::RestartsOnlyOnSomeExitCodes { .. } => "RestartsOnlyOnSomeExitCodes",
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

/// Whether the pod's `Ready` condition is True: what Services, PodDisruptionBudgets and a
/// rollout's `maxUnavailable` count as available.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// Whether the pod may have containers recreated at all: it must be active (not finished, not
/// being deleted; upstream excepts pods with the [`SIDECAR_TERMINATED_CONDITION`]) and then
/// scheduled. Returns the name of its node.
pub fn check_pod(pod: &Pod) -> Result<&str, Violation> {
    if !is_pod_active(pod) && !has_condition(pod, SIDECAR_TERMINATED_CONDITION) {
        return Err(Violation::PodInactive);
    }
    bound_node(pod).ok_or(Violation::PodPending)
}

/// The node the pod is bound to (`spec.nodeName`), `None` before the scheduler bound it.
pub fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|node| !node.is_empty())
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
/// container with `restartPolicy: Always`) that the kubelet would start again once stopped (see
/// [`restart_rule`]). A container the kubelet restarts only after some exit codes is accepted
/// with a [`Caveat`].
pub fn recreatable_container<'a>(
    pod: &'a Pod,
    name: &str,
) -> Result<RecreatableContainer<'a>, Violation> {
    let Some(named) = NamedContainer::find(pod, name) else {
        return Err(Violation::ContainerNotFound {
            name: name.to_owned(),
        });
    };
    if named.init {
        check_init_container(named.container)?;
    }
    let caveat = restart_rule(named.pod_spec, named.container)?;
    Ok(RecreatableContainer {
        spec: named.container,
        status: named.status,
        caveat,
    })
}

/// Why the kubelet will not start `name` again after its container `container_id` exited: what
/// [`after_exit`] decides for that container's exit code is [`AfterExit::StayStopped`] (exit 0
/// under `OnFailure`, or a code none of its `restartPolicyRules` restarts on under `Never`).
/// `None` while a restart may still come (the kubelet's back-off), when the pod's status does not
/// show that container terminated (another container ID is an older or newer attempt), or for a
/// container no request may name (a one-shot init container).
pub fn not_restarted(pod: &Pod, name: &str, container_id: &str) -> Option<String> {
    let named = NamedContainer::find(pod, name)?;
    if named.init {
        check_init_container(named.container).ok()?;
    }
    let status = named.status?;
    let terminated = status.state.as_ref()?.terminated.as_ref()?;
    let same_container = terminated
        .container_id
        .as_deref()
        .or(status.container_id.as_deref())
        == Some(container_id);
    if !same_container {
        return None;
    }
    let code = terminated.exit_code;
    let decision = after_exit(named.pod_spec, named.container, code);
    if decision.after != AfterExit::StayStopped {
        return None;
    }
    let EffectivePolicy {
        policy,
        source,
        rules,
    } = &decision.policy;
    let rules = if *rules {
        format!(", none of its restartPolicyRules restarts it on exit code {code}")
    } else {
        String::new()
    };
    Some(format!(
        "container {name} exited with code {code} after the kill{rules} and its restartPolicy is \
         {policy} ({source}): the kubelet does not start it again"
    ))
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

/// A container of the pod found by name: a regular one first, else an init container.
struct NamedContainer<'a> {
    pod_spec: &'a PodSpec,
    container: &'a Container,
    /// Its entry in the pod's container (or init container) statuses.
    status: Option<&'a ContainerStatus>,
    /// It is an init container (a native sidecar or a one-shot one).
    init: bool,
}

impl<'a> NamedContainer<'a> {
    fn find(pod: &'a Pod, name: &str) -> Option<Self> {
        let pod_spec = pod.spec.as_ref()?;
        let status = pod.status.as_ref();
        let by_name = |statuses: Option<&'a Vec<ContainerStatus>>| {
            statuses.into_iter().flatten().find(|s| s.name == name)
        };
        if let Some(container) = pod_spec.containers.iter().find(|c| c.name == name) {
            return Some(Self {
                pod_spec,
                container,
                status: by_name(status.and_then(|s| s.container_statuses.as_ref())),
                init: false,
            });
        }
        let container = pod_spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)?;
        Some(Self {
            pod_spec,
            container,
            status: by_name(status.and_then(|s| s.init_container_statuses.as_ref())),
            init: true,
        })
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

/// The admission rule on restarts, from [`after_exit`] over every exit code ([`EXIT_CODES`]):
/// refused if a rule restarts the whole pod on a code a kill produces ([`KILL_EXIT_CODES`]), or
/// if the kubelet never starts the container again (a pod restart on some other code counts as a
/// start); accepted with a [`Caveat`] if it does after some codes only; accepted as is if after
/// every code.
pub fn restart_rule(spec: &PodSpec, container: &Container) -> Result<Option<Caveat>, Violation> {
    let policy = effective_policy(spec, container);
    let after = |code: i32| decide(container, &policy, code).0;
    let kill_codes = |wanted: AfterExit| -> Vec<i32> {
        KILL_EXIT_CODES
            .into_iter()
            .filter(|code| after(*code) == wanted)
            .collect()
    };
    let restarts_all = kill_codes(AfterExit::RestartAllContainers);
    if !restarts_all.is_empty() {
        return Err(Violation::RestartsAllContainers {
            name: container.name.clone(),
            codes: restarts_all,
        });
    }
    let stays_stopped = EXIT_CODES
        .filter(|code| after(*code) == AfterExit::StayStopped)
        .count();
    if stays_stopped == 0 {
        Ok(None)
    } else if stays_stopped == EXIT_CODES.count() {
        Err(Violation::ContainerNotRestartable {
            name: container.name.clone(),
            policy,
        })
    } else {
        Ok(Some(Caveat::RestartsOnlyOnSomeExitCodes {
            name: container.name.clone(),
            kill_codes_not_restarted: kill_codes(AfterExit::StayStopped),
            policy,
        }))
    }
}

/// [`KILL_EXIT_CODES`] as the messages explain them.
const KILL_CODES_TEXT: &str = "0, 137 = SIGKILL, 143 = SIGTERM";

/// Exit codes as a message lists them: `0`, `137 or 143`, `0, 137 or 143`.
struct ExitCodes<'a>(&'a [i32]);

impl std::fmt::Display for ExitCodes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_alternatives(f, self.0.iter())
    }
}

/// How a killed container ends with each of some [`KILL_EXIT_CODES`], for a message: "exits 0 on
/// SIGTERM, is SIGKILLed (137) or dies of SIGTERM (143)".
struct KillEndings<'a>(&'a [i32]);

impl std::fmt::Display for KillEndings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ending = |code: &i32| match code {
            0 => "exits 0 on SIGTERM".to_owned(),
            137 => "is SIGKILLed (137)".to_owned(),
            143 => "dies of SIGTERM (143)".to_owned(),
            other => format!("exits {other}"),
        };
        write_alternatives(f, self.0.iter().map(ending))
    }
}

/// `a`, `a or b`, `a, b or c`.
fn write_alternatives<T: std::fmt::Display>(
    f: &mut std::fmt::Formatter<'_>,
    items: impl ExactSizeIterator<Item = T>,
) -> std::fmt::Result {
    let count = items.len();
    for (index, item) in items.enumerate() {
        if index > 0 {
            f.write_str(if index + 1 == count { " or " } else { ", " })?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
