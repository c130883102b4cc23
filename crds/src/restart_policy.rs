//! What the kubelet does once a container has exited, from the container's restart policy in
//! force and its `restartPolicyRules` (Kubernetes 1.35+): the one model of that decision, which
//! the admission rules (`rules::restart_rule`) and the node daemon's verdict after a kill
//! (`rules::not_restarted`) both read.

use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, PodSpec};

/// The restart policy the kubelet applies when a pod or container names none.
pub(crate) const RESTART_ALWAYS: &str = "Always";
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
pub(crate) fn decide(
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
