//! The admission rules that need no live API data: what a request's spec may hold, whether a pod
//! (as already read) may have containers recreated, and which of its containers. Pure functions
//! of the hub model ([`crate::v1beta1`]) and a `k8s_openapi` [`Pod`].
//!
//! The admission webhook and `kubectl crr` both call these, so the plugin can never offer what
//! the webhook refuses. Every [`Violation`] displays the webhook's message (upstream's wording)
//! and names a short machine [`reason`](Violation::reason).
//!
//! Whether a container may be named rests on what the kubelet does once it has stopped:
//! [`after_exit`] answers that for one exit code from the container's restart policy in force and
//! its `restartPolicyRules` (Kubernetes 1.35+), [`restart_rule`] derives the admission decision
//! from it over every exit code, and [`not_restarted`] tells the node daemon, after a kill, that a
//! container will stay stopped.
//!
//! This module does not fetch the pod or the node, default or inject fields, judge updates, or
//! decide HTTP codes: those are the webhook's. The webhook checks in this order, and callers that
//! want the same first error should too: [`check_spec`], [`check_pod`], then per container in
//! request order [`ContainerNames::add`], [`recreatable_container`] and
//! [`RecreatableContainer::status_context`].

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, ContainerStatus, Pod, PodSpec};

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
/// The restart policy under which the kubelet never restarts a container (unless a rule does).
const RESTART_NEVER: &str = "Never";
/// `restartPolicyRules` action: restart this container.
const RULE_RESTART: &str = "Restart";
/// `restartPolicyRules` action: restart the whole pod in place (every container killed, init
/// containers run again).
const RULE_RESTART_ALL_CONTAINERS: &str = "RestartAllContainers";
/// `restartPolicyRules` operators on `exitCodes.values`.
const OPERATOR_IN: &str = "In";
const OPERATOR_NOT_IN: &str = "NotIn";

/// The exit codes a kill leaves a container with: 0 (it exits cleanly on SIGTERM), 137 (SIGKILL,
/// 128 + 9: at the end of the grace period, or a program that ignores SIGTERM) and 143 (SIGTERM,
/// 128 + 15: a program that dies of it, the default without a handler).
pub const KILL_EXIT_CODES: [i32; 3] = [0, 137, 143];

/// The exit codes a process can report (`exit(n)` keeps the low 8 bits; signals are 128 + n).
pub const EXIT_CODES: std::ops::RangeInclusive<i32> = 0..=255;

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

/// Where the restart policy in force for a container is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// The container's own `restartPolicy`.
    Container,
    /// The pod's `restartPolicy`.
    Pod,
    /// Neither: the kubelet's default, `Always`.
    PodDefault,
}

impl std::fmt::Display for PolicySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Container => "container",
            Self::Pod => "pod",
            Self::PodDefault => "pod default",
        })
    }
}

/// The restart policy in force for a container, as the kubelet resolves it: the container's own
/// `restartPolicy` (with its `restartPolicyRules`), else the pod's, else `Always`. Displays as
/// `restartPolicy Never (container) with restartPolicyRules`, `restartPolicy OnFailure (pod)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectivePolicy {
    /// `Always`, `OnFailure` or `Never`.
    pub policy: String,
    pub source: PolicySource,
    /// The container has `restartPolicyRules` and its own `restartPolicy`, so they are in force.
    pub rules: bool,
}

impl std::fmt::Display for EffectivePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "restartPolicy {} ({})", self.policy, self.source)?;
        if self.rules {
            f.write_str(" with restartPolicyRules")?;
        }
        Ok(())
    }
}

/// What the kubelet does once a container has exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterExit {
    /// It starts the container again (after its back-off).
    Restart,
    /// It leaves the container stopped.
    StayStopped,
    /// It restarts the whole pod in place (`RestartAllContainers`): every container is killed
    /// and the init containers run again.
    RestartAllContainers,
}

/// What the kubelet does after one exit code, and what decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitDecision {
    pub after: AfterExit,
    /// The index in `restartPolicyRules` of the rule that decided; `None` when the restart
    /// policy did (no rule matched, or the first match's action is one the kubelet falls back on
    /// the policy for).
    pub rule: Option<usize>,
    /// The restart policy in force for the container.
    pub policy: EffectivePolicy,
}

/// The restart policy in force for `container` of the pod `spec` (see [`EffectivePolicy`]). A
/// value the kubelet does not know is passed over, as it does: a container's falls back on the
/// pod's, the pod's on `Always`.
pub fn effective_policy(spec: &PodSpec, container: &Container) -> EffectivePolicy {
    let known = |policy: &Option<String>| {
        policy
            .as_deref()
            .filter(|policy| [RESTART_ALWAYS, RESTART_ON_FAILURE, RESTART_NEVER].contains(policy))
            .map(str::to_owned)
    };
    let rules = container.restart_policy.is_some()
        && container
            .restart_policy_rules
            .as_ref()
            .is_some_and(|rules| !rules.is_empty());
    let (policy, source) = match (
        known(&container.restart_policy),
        known(&spec.restart_policy),
    ) {
        (Some(policy), _) => (policy, PolicySource::Container),
        (None, Some(policy)) => (policy, PolicySource::Pod),
        (None, None) => (RESTART_ALWAYS.to_owned(), PolicySource::PodDefault),
    };
    EffectivePolicy {
        policy,
        source,
        rules,
    }
}

/// The first of the container's `restartPolicyRules` that matches `exit_code`, with its index
/// (the kubelet's `FindMatchingContainerRestartRule`): `exitCodes.operator` `In` and the code in
/// `values`, or `NotIn` and not in them. A rule without `exitCodes`, or with another operator,
/// never matches.
pub fn matching_rule(
    container: &Container,
    exit_code: i32,
) -> Option<(usize, &ContainerRestartRule)> {
    container
        .restart_policy_rules
        .iter()
        .flatten()
        .enumerate()
        .find(|(_, rule)| {
            rule.exit_codes.as_ref().is_some_and(|on| {
                let listed = on.values.iter().flatten().any(|value| *value == exit_code);
                match on.operator.as_str() {
                    OPERATOR_IN => listed,
                    OPERATOR_NOT_IN => !listed,
                    _ => false,
                }
            })
        })
}

/// What the kubelet does when `container` of the pod `spec` exits with `exit_code` (Kubernetes
/// 1.37's `ContainerShouldRestart` and `ShouldAllContainersRestart`):
///
/// 1. the first matching rule ([`matching_rule`]) with action `RestartAllContainers` restarts
///    the whole pod (the kubelet checks this for every container, init and regular);
/// 2. if the container has its own `restartPolicy`, a first matching rule with action `Restart`
///    restarts it; with any other action, or no match, its policy decides;
/// 3. else the pod's `restartPolicy` (default `Always`) decides.
///
/// `Always` restarts, `OnFailure` restarts after a non-zero code, `Never` leaves it stopped. It
/// assumes the kubelet's `RestartAllContainersOnContainerExits` gate is on whenever a pod holds
/// such a rule (the API server refuses the action otherwise).
pub fn after_exit(spec: &PodSpec, container: &Container, exit_code: i32) -> ExitDecision {
    let policy = effective_policy(spec, container);
    let (after, rule) = decide(container, &policy, exit_code);
    ExitDecision {
        after,
        rule,
        policy,
    }
}

/// [`after_exit`] with the container's [`effective_policy`] already resolved.
fn decide(
    container: &Container,
    policy: &EffectivePolicy,
    exit_code: i32,
) -> (AfterExit, Option<usize>) {
    let by_rule = matching_rule(container, exit_code).and_then(|(index, rule)| {
        match rule.action.as_str() {
            RULE_RESTART_ALL_CONTAINERS => Some(AfterExit::RestartAllContainers),
            RULE_RESTART if container.restart_policy.is_some() => Some(AfterExit::Restart),
            _ => None,
        }
        .map(|after| (after, Some(index)))
    });
    by_rule.unwrap_or_else(|| {
        let after = match policy.policy.as_str() {
            RESTART_ALWAYS => AfterExit::Restart,
            RESTART_ON_FAILURE if exit_code != 0 => AfterExit::Restart,
            _ => AfterExit::StayStopped,
        };
        (after, None)
    })
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
mod tests {
    use super::*;
    use crate::v1beta1::{ContainerRecreateRequestContainer, ContainerRecreateRequestStrategy};
    use k8s_openapi::api::core::v1::{
        ContainerRestartRuleOnExitCodes, PodCondition, PodSpec, PodStatus,
    };
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
        let not_restartable = |name: &str, policy: &str, source: PolicySource| {
            Err(Violation::ContainerNotRestartable {
                name: name.to_owned(),
                policy: policy_of(policy, source, false),
            })
        };
        let on_failure_only = |name: &str, source: PolicySource| {
            Ok(Some(Caveat::RestartsOnlyOnSomeExitCodes {
                name: name.to_owned(),
                policy: policy_of("OnFailure", source, false),
                kill_codes_not_restarted: vec![0],
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
                not_restartable("app", "Never", PolicySource::Pod),
            ),
            (
                "pod restartPolicy OnFailure: accepted, with the caveat",
                with_pod_restart_policy("OnFailure"),
                "app",
                on_failure_only("app", PolicySource::Pod),
            ),
            (
                "container policy OnFailure overrides pod Always",
                with_container_restart_policy("app", "OnFailure"),
                "app",
                on_failure_only("app", PolicySource::Container),
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
                not_restartable("app", "Never", PolicySource::Container),
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
                    policy: policy_of("Never", PolicySource::Pod, false),
                },
                "ContainerNotRestartable",
                "container app would not be started again after it is stopped, whatever its exit code, under restartPolicy Never (pod); only containers the kubelet restarts can be recreated",
            ),
            (
                Violation::ContainerNotRestartable {
                    name: "app".to_owned(),
                    policy: policy_of("Never", PolicySource::Container, true),
                },
                "ContainerNotRestartable",
                "container app would not be started again after it is stopped, whatever its exit code, under restartPolicy Never (container) with restartPolicyRules; only containers the kubelet restarts can be recreated",
            ),
            (
                Violation::RestartsAllContainers {
                    name: "app".to_owned(),
                    codes: vec![143],
                },
                "RestartsAllContainers",
                "container app restarts all containers of the pod (restartPolicyRules action RestartAllContainers) on exit code 143, which a kill produces (0, 137 = SIGKILL, 143 = SIGTERM): recreating it would restart the whole pod, every container killed and the init containers run again",
            ),
            (
                Violation::RestartsAllContainers {
                    name: "app".to_owned(),
                    codes: vec![0, 137, 143],
                },
                "RestartsAllContainers",
                "container app restarts all containers of the pod (restartPolicyRules action RestartAllContainers) on exit code 0, 137 or 143, which a kill produces (0, 137 = SIGKILL, 143 = SIGTERM): recreating it would restart the whole pod, every container killed and the init containers run again",
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
    fn restart_caveat_names_the_kill_codes_that_leave_the_container_stopped() {
        let caveat = |policy: EffectivePolicy, codes: &[i32]| Caveat::RestartsOnlyOnSomeExitCodes {
            name: "app".to_owned(),
            policy,
            kill_codes_not_restarted: codes.to_vec(),
        };
        let on_failure = caveat(policy_of("OnFailure", PolicySource::Pod, false), &[0]);
        assert_eq!(on_failure.reason(), "RestartsOnlyOnSomeExitCodes");
        assert_eq!(
            on_failure.to_string(),
            "container app has restartPolicy OnFailure (pod): the kubelet starts it again only \
             after some exit codes; of the codes a kill produces (0, 137 = SIGKILL, 143 = \
             SIGTERM) not after 0: if it exits 0 on SIGTERM it will not be restarted and the \
             request will fail for it"
        );
        let rules = policy_of("Never", PolicySource::Container, true);
        assert_eq!(
            caveat(rules.clone(), &[0, 137]).to_string(),
            "container app has restartPolicy Never (container) with restartPolicyRules: the \
             kubelet starts it again only after some exit codes; of the codes a kill produces \
             (0, 137 = SIGKILL, 143 = SIGTERM) not after 0 or 137: if it exits 0 on SIGTERM or \
             is SIGKILLed (137) it will not be restarted and the request will fail for it"
        );
        assert_eq!(
            caveat(rules.clone(), &[0, 137, 143]).to_string(),
            "container app has restartPolicy Never (container) with restartPolicyRules: the \
             kubelet starts it again only after some exit codes; of the codes a kill produces \
             (0, 137 = SIGKILL, 143 = SIGTERM) not after 0, 137 or 143: if it exits 0 on \
             SIGTERM, is SIGKILLed (137) or dies of SIGTERM (143) it will not be restarted and \
             the request will fail for it"
        );
        assert_eq!(
            caveat(rules, &[]).to_string(),
            "container app has restartPolicy Never (container) with restartPolicyRules: the \
             kubelet starts it again only after some exit codes; it does after every code a kill \
             produces (0, 137 = SIGKILL, 143 = SIGTERM), but if it exits with another code after \
             the kill (from a SIGTERM handler) it will not be restarted and the request will \
             fail for it"
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

    fn policy_of(policy: &str, source: PolicySource, rules: bool) -> EffectivePolicy {
        EffectivePolicy {
            policy: policy.to_owned(),
            source,
            rules,
        }
    }

    /// A `restartPolicyRules` rule: `action` on `operator` `values`; no operator, no exitCodes.
    fn rule(action: &str, operator: Option<&str>, values: &[i32]) -> ContainerRestartRule {
        ContainerRestartRule {
            action: action.to_owned(),
            exit_codes: operator.map(|operator| ContainerRestartRuleOnExitCodes {
                operator: operator.to_owned(),
                values: Some(values.to_vec()),
            }),
        }
    }

    /// [`pod`] with the pod's `restartPolicy`, and `app`'s own policy and rules.
    fn with_rules(
        pod_policy: Option<&str>,
        app_policy: Option<&str>,
        rules: Vec<ContainerRestartRule>,
    ) -> Pod {
        let mut pod = pod();
        let spec = pod.spec.as_mut().unwrap();
        spec.restart_policy = pod_policy.map(str::to_owned);
        let app = &mut spec.containers[0];
        app.restart_policy = app_policy.map(str::to_owned);
        app.restart_policy_rules = Some(rules);
        pod
    }

    /// What [`after_exit`] decides for `app` (or the sidecar `proxy`) of `pod` on `code`.
    fn after(pod: &Pod, name: &str, code: i32) -> (AfterExit, Option<usize>) {
        let spec = pod.spec.as_ref().unwrap();
        let container = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == name)
            .unwrap();
        let decision = after_exit(spec, container, code);
        (decision.after, decision.rule)
    }

    #[test]
    fn after_exit_decides_as_the_kubelet() {
        use AfterExit::{Restart, RestartAllContainers as All, StayStopped as Stay};
        let never_restart_on_143 = with_rules(
            None,
            Some("Never"),
            vec![rule("Restart", Some("In"), &[143])],
        );
        let cases = [
            ("pod default Always, exit 0", pod(), 0, (Restart, None)),
            ("pod default Always, exit 1", pod(), 1, (Restart, None)),
            (
                "pod Never",
                with_pod_restart_policy("Never"),
                143,
                (Stay, None),
            ),
            (
                "pod OnFailure, exit 0",
                with_pod_restart_policy("OnFailure"),
                0,
                (Stay, None),
            ),
            (
                "pod OnFailure, exit 143",
                with_pod_restart_policy("OnFailure"),
                143,
                (Restart, None),
            ),
            (
                "unknown pod policy is Always",
                with_pod_restart_policy("Sometimes"),
                0,
                (Restart, None),
            ),
            (
                "container Always over pod Never",
                with_rules(Some("Never"), Some("Always"), vec![]),
                0,
                (Restart, None),
            ),
            (
                "container Never over pod Always",
                with_container_restart_policy("app", "Never"),
                143,
                (Stay, None),
            ),
            (
                "unknown container policy falls back on the pod's",
                with_rules(Some("Never"), Some("Sometimes"), vec![]),
                0,
                (Stay, None),
            ),
            (
                "In rule matches",
                never_restart_on_143.clone(),
                143,
                (Restart, Some(0)),
            ),
            (
                "In rule does not match",
                never_restart_on_143.clone(),
                137,
                (Stay, None),
            ),
            (
                "NotIn rule matches a code not listed",
                with_rules(
                    None,
                    Some("Never"),
                    vec![rule("Restart", Some("NotIn"), &[0])],
                ),
                137,
                (Restart, Some(0)),
            ),
            (
                "NotIn rule does not match a listed code",
                with_rules(
                    None,
                    Some("Never"),
                    vec![rule("Restart", Some("NotIn"), &[0])],
                ),
                0,
                (Stay, None),
            ),
            (
                "a rule without exitCodes never matches",
                with_rules(None, Some("Never"), vec![rule("Restart", None, &[])]),
                0,
                (Stay, None),
            ),
            (
                "a rule with an unknown operator never matches; the next one is tried",
                with_rules(
                    None,
                    Some("Never"),
                    vec![
                        rule("RestartAllContainers", Some("Is"), &[143]),
                        rule("Restart", Some("In"), &[143]),
                    ],
                ),
                143,
                (Restart, Some(1)),
            ),
            (
                "the first matching rule wins",
                with_rules(
                    None,
                    Some("Always"),
                    vec![
                        rule("Restart", Some("In"), &[143]),
                        rule("RestartAllContainers", Some("In"), &[143]),
                    ],
                ),
                143,
                (Restart, Some(0)),
            ),
            (
                "the first matching rule wins, the other way round",
                with_rules(
                    None,
                    Some("Always"),
                    vec![
                        rule("RestartAllContainers", Some("In"), &[143]),
                        rule("Restart", Some("In"), &[143]),
                    ],
                ),
                143,
                (All, Some(0)),
            ),
            (
                "an unknown action falls back on the container's policy, not on later rules",
                with_rules(
                    None,
                    Some("Never"),
                    vec![
                        rule("Ignore", Some("In"), &[143]),
                        rule("Restart", Some("In"), &[143]),
                    ],
                ),
                143,
                (Stay, None),
            ),
            (
                "OnFailure container with no matching rule, exit 0",
                with_rules(
                    None,
                    Some("OnFailure"),
                    vec![rule("Restart", Some("In"), &[42])],
                ),
                0,
                (Stay, None),
            ),
            (
                "Restart rules need the container's own policy",
                with_rules(
                    Some("Never"),
                    None,
                    vec![rule("Restart", Some("In"), &[143])],
                ),
                143,
                (Stay, None),
            ),
            (
                "RestartAllContainers is checked for every container, policy or not",
                with_rules(
                    Some("Never"),
                    None,
                    vec![rule("RestartAllContainers", Some("In"), &[143])],
                ),
                143,
                (All, Some(0)),
            ),
        ];
        for (case, pod, code, expected) in cases {
            assert_eq!(after(&pod, "app", code), expected, "{case}");
        }
        let mut sidecar = pod();
        sidecar
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[1]
            .restart_policy_rules = Some(vec![rule("RestartAllContainers", Some("In"), &[1])]);
        assert_eq!(
            after(&sidecar, "proxy", 0),
            (Restart, None),
            "a sidecar is Always"
        );
        assert_eq!(
            after(&sidecar, "proxy", 1),
            (All, Some(0)),
            "and has rules too"
        );
        assert_eq!(
            after_exit(&PodSpec::default(), &container("app", None), 0).policy,
            policy_of("Always", PolicySource::PodDefault, false)
        );
    }

    #[test]
    fn admission_follows_the_kubelet_over_every_exit_code() {
        let accepted = Ok(None);
        let caveat = |policy: EffectivePolicy, codes: &[i32]| {
            Ok(Some(Caveat::RestartsOnlyOnSomeExitCodes {
                name: "app".to_owned(),
                policy,
                kill_codes_not_restarted: codes.to_vec(),
            }))
        };
        let not_restartable = |policy: EffectivePolicy| {
            Err(Violation::ContainerNotRestartable {
                name: "app".to_owned(),
                policy,
            })
        };
        let restarts_all = |codes: &[i32]| {
            Err(Violation::RestartsAllContainers {
                name: "app".to_owned(),
                codes: codes.to_vec(),
            })
        };
        let container_rules = |policy: &str| policy_of(policy, PolicySource::Container, true);
        let cases = [
            (
                "pod Never, container Always",
                with_rules(Some("Never"), Some("Always"), vec![]),
                accepted.clone(),
            ),
            (
                "pod Always, container Never: refused, naming the container's policy",
                with_rules(Some("Always"), Some("Never"), vec![]),
                not_restartable(policy_of("Never", PolicySource::Container, false)),
            ),
            (
                "pod Never: refused, naming the pod's policy",
                with_rules(Some("Never"), None, vec![]),
                not_restartable(policy_of("Never", PolicySource::Pod, false)),
            ),
            (
                "pod OnFailure",
                with_pod_restart_policy("OnFailure"),
                caveat(policy_of("OnFailure", PolicySource::Pod, false), &[0]),
            ),
            (
                "container Never, Restart on In [143]: depends on the exit code",
                with_rules(
                    None,
                    Some("Never"),
                    vec![rule("Restart", Some("In"), &[143])],
                ),
                caveat(container_rules("Never"), &[0, 137]),
            ),
            (
                "container Never, Restart on In [0, 137, 143]: every kill code, not every code",
                with_rules(
                    None,
                    Some("Never"),
                    vec![rule("Restart", Some("In"), &[0, 137, 143])],
                ),
                caveat(container_rules("Never"), &[]),
            ),
            (
                "container Never, Restart on NotIn [0]",
                with_rules(
                    None,
                    Some("Never"),
                    vec![rule("Restart", Some("NotIn"), &[0])],
                ),
                caveat(container_rules("Never"), &[0]),
            ),
            (
                "container Never, Restart on NotIn []: every code",
                with_rules(
                    None,
                    Some("Never"),
                    vec![rule("Restart", Some("NotIn"), &[])],
                ),
                accepted.clone(),
            ),
            (
                "container Never, Restart only on a code no process exits with",
                with_rules(
                    None,
                    Some("Never"),
                    vec![rule("Restart", Some("In"), &[300])],
                ),
                not_restartable(container_rules("Never")),
            ),
            (
                "container Never, a rule without exitCodes",
                with_rules(None, Some("Never"), vec![rule("Restart", None, &[])]),
                not_restartable(container_rules("Never")),
            ),
            (
                "container OnFailure, Restart on In [0]: every code",
                with_rules(
                    None,
                    Some("OnFailure"),
                    vec![rule("Restart", Some("In"), &[0])],
                ),
                accepted.clone(),
            ),
            (
                "RestartAllContainers on 143: refused",
                with_rules(
                    None,
                    Some("Always"),
                    vec![rule("RestartAllContainers", Some("In"), &[143])],
                ),
                restarts_all(&[143]),
            ),
            (
                "RestartAllContainers on NotIn [42]: refused, every kill code",
                with_rules(
                    None,
                    Some("Always"),
                    vec![rule("RestartAllContainers", Some("NotIn"), &[42])],
                ),
                restarts_all(&[0, 137, 143]),
            ),
            (
                "RestartAllContainers only on 42, other codes restart: accepted",
                with_rules(
                    None,
                    Some("Always"),
                    vec![rule("RestartAllContainers", Some("In"), &[42])],
                ),
                accepted.clone(),
            ),
            (
                "RestartAllContainers only on 42, other codes do not: accepted with the caveat",
                with_rules(
                    None,
                    Some("Never"),
                    vec![rule("RestartAllContainers", Some("In"), &[42])],
                ),
                caveat(container_rules("Never"), &[0, 137, 143]),
            ),
            (
                "first match wins: Restart on 143 shadows RestartAllContainers on 143, not on 137",
                with_rules(
                    None,
                    Some("Always"),
                    vec![
                        rule("Restart", Some("In"), &[143]),
                        rule("RestartAllContainers", Some("In"), &[143, 137]),
                    ],
                ),
                restarts_all(&[137]),
            ),
            (
                "first match wins: Restart on NotIn [] shadows everything after it",
                with_rules(
                    None,
                    Some("Never"),
                    vec![
                        rule("Restart", Some("NotIn"), &[]),
                        rule("RestartAllContainers", Some("In"), &[143]),
                    ],
                ),
                accepted.clone(),
            ),
            (
                "RestartAllContainers without the container's own policy still fires",
                with_rules(
                    Some("Always"),
                    None,
                    vec![rule("RestartAllContainers", Some("In"), &[0])],
                ),
                restarts_all(&[0]),
            ),
        ];
        for (case, pod, expected) in cases {
            let found = recreatable_container(&pod, "app").map(|c| c.caveat);
            assert_eq!(found, expected, "{case}");
        }
    }

    #[test]
    fn sidecars_are_refused_only_when_a_rule_restarts_the_whole_pod_on_a_kill() {
        let with_sidecar_rules = |rules: Vec<ContainerRestartRule>| {
            let mut pod = with_pod_restart_policy("Never");
            pod.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[1].restart_policy_rules =
                Some(rules);
            pod
        };
        let caveat = |pod: &Pod, name: &str| recreatable_container(pod, name).map(|c| c.caveat);
        assert_eq!(
            caveat(
                &with_sidecar_rules(vec![rule("RestartAllContainers", Some("In"), &[42])]),
                "proxy"
            ),
            Ok(None)
        );
        assert_eq!(
            caveat(
                &with_sidecar_rules(vec![rule("RestartAllContainers", Some("In"), &[137])]),
                "proxy"
            ),
            Err(Violation::RestartsAllContainers {
                name: "proxy".to_owned(),
                codes: vec![137],
            })
        );
        // A one-shot init container is refused as such, whatever its rules.
        let mut one_shot = pod();
        let migrate = &mut one_shot
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[0];
        migrate.restart_policy = Some("Never".to_owned());
        migrate.restart_policy_rules = Some(vec![rule("Restart", Some("NotIn"), &[])]);
        assert_eq!(
            caveat(&one_shot, "migrate"),
            Err(Violation::InitContainer {
                name: "migrate".to_owned()
            })
        );
    }

    #[test]
    fn refusals_name_the_container_and_where_its_policy_is_set() {
        let message = |pod: &Pod| recreatable_container(pod, "app").unwrap_err().to_string();
        let container_never = message(&with_rules(Some("Always"), Some("Never"), vec![]));
        assert!(
            container_never.contains("container app ")
                && container_never.contains("restartPolicy Never (container)"),
            "{container_never}"
        );
        let pod_never = message(&with_pod_restart_policy("Never"));
        assert!(
            pod_never.contains("restartPolicy Never (pod)"),
            "{pod_never}"
        );
        let restarts_all = message(&with_rules(
            None,
            Some("Always"),
            vec![rule("RestartAllContainers", Some("In"), &[143])],
        ));
        assert!(
            restarts_all.contains("container app ")
                && restarts_all.contains("exit code 143")
                && restarts_all.contains("restart the whole pod"),
            "{restarts_all}"
        );
    }

    #[test]
    fn a_container_left_stopped_by_its_rules_is_not_restarted_after_the_kill() {
        let never_but_143 = with_rules(
            None,
            Some("Never"),
            vec![rule("Restart", Some("In"), &[143])],
        );
        let message = not_restarted(
            &exited(never_but_143.clone(), "app", "containerd://a1", 137),
            "app",
            "containerd://a1",
        )
        .expect("SIGKILLed, and only 143 restarts it");
        assert_eq!(
            message,
            "container app exited with code 137 after the kill, none of its restartPolicyRules \
             restarts it on exit code 137 and its restartPolicy is Never (container): the kubelet \
             does not start it again"
        );
        assert_eq!(
            not_restarted(
                &exited(never_but_143.clone(), "app", "containerd://a1", 143),
                "app",
                "containerd://a1"
            ),
            None,
            "143 restarts it"
        );
        let restarts_all_on_42 = with_rules(
            None,
            Some("Never"),
            vec![rule("RestartAllContainers", Some("In"), &[42])],
        );
        assert_eq!(
            not_restarted(
                &exited(restarts_all_on_42, "app", "containerd://a1", 42),
                "app",
                "containerd://a1"
            ),
            None,
            "the whole pod restarts, this container with it"
        );
        let message = not_restarted(
            &exited(
                with_container_restart_policy("app", "OnFailure"),
                "app",
                "containerd://a1",
                0,
            ),
            "app",
            "containerd://a1",
        )
        .expect("OnFailure and 0");
        assert_eq!(
            message,
            "container app exited with code 0 after the kill and its restartPolicy is OnFailure \
             (container): the kubelet does not start it again"
        );
        let message = not_restarted(
            &exited(
                with_pod_restart_policy("Never"),
                "app",
                "containerd://a1",
                143,
            ),
            "app",
            "containerd://a1",
        )
        .expect("pod Never");
        assert!(
            message.contains("restartPolicy is Never (pod)"),
            "{message}"
        );
    }
}
