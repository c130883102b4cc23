//! The per-request decisions of the node daemon, as functions of values: each container's
//! state from what the runtime shows, what to do next, and the grace period a kill gets. No I/O
//! here; `round` carries the decisions out. Which request of a pod goes first is `schedule`'s.
//!
//! Every number here comes from a user (the request's strategy, the pod's spec), so every bit
//! of arithmetic with time is checked: an overflow means "as late as possible" or the cap,
//! never a panic (the property tests below run the whole integer ranges).

use std::time::Duration;

use crr_crds::keys::{CONDITION_PRE_RECREATE_GRACE, LABEL_POD_UID};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerRecreateState as State,
    FailurePolicy, Phase,
};

use crate::kill_marker::KillMarker;

/// Whose container the runtime says a container is: the kubelet's CRI labels
/// (`io.kubernetes.pod.uid`, `.pod.namespace`, `.pod.name`, `io.kubernetes.container.name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerOwner {
    pub pod_uid: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub container_name: String,
}

impl std::fmt::Display for ContainerOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "container {:?} of pod {:?}/{:?} (uid {:?})",
            self.container_name, self.pod_namespace, self.pod_name, self.pod_uid
        )
    }
}

/// The owner a container of `crr` named `container` must have: the request's pod (its
/// namespace, `podName`, and the pod-uid label admission set).
pub fn expected_owner(crr: &ContainerRecreateRequest, container: &str) -> ContainerOwner {
    ContainerOwner {
        pod_uid: crr
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_POD_UID))
            .cloned()
            .unwrap_or_default(),
        pod_namespace: crr.metadata.namespace.clone().unwrap_or_default(),
        pod_name: crr.spec.pod_name.clone(),
        container_name: container.to_owned(),
    }
}

/// Why the runtime's container may not be touched for `crr`'s `container`: it belongs to
/// another pod or container than the request names. `None`: it is the request's.
pub fn owner_mismatch(
    crr: &ContainerRecreateRequest,
    container: &str,
    found: &RuntimeContainer,
) -> Option<String> {
    let expected = expected_owner(crr, container);
    (found.owner != expected || expected.pod_uid.is_empty()).then(|| {
        format!(
            "refusing to touch runtime container {}: the runtime labels it {}, not {expected}",
            found.id, found.owner
        )
    })
}

/// What the runtime shows of one container name of the pod: its newest attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeContainer {
    /// `<runtime>://<id>`, as the kubelet reports it.
    pub id: String,
    /// The kubelet's restart count (from the CRI annotation).
    pub restart_count: i32,
    pub running: bool,
    /// When it started, by the runtime: this node's clock, compared only with this node's
    /// clock (`now` below), never with times written on other machines.
    pub started_at: Option<jiff::Timestamp>,
    /// Whose container the runtime's labels say it is.
    pub owner: ContainerOwner,
}

/// `start + seconds`, or the end of time when that is beyond it (never a panic).
pub fn saturating_after(start: jiff::Timestamp, seconds: i64) -> jiff::Timestamp {
    start
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(if seconds < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        })
}

/// The unready grace a request waits out before its first kill, once the operator marked
/// PreRecreateGrace: `key` names that marking (the request's UID and the condition's transition
/// time, so a grace marked anew is a new one), `length` is `unreadyGracePeriodSeconds`.
///
/// The grace is measured from when this daemon first saw the marking, on its own monotonic
/// clock (`grace_clock::GraceClock`), never by comparing the operator's `lastTransitionTime` with
/// this node's wall clock: a daemon whose clock runs ahead would shorten the grace by the skew.
/// A daemon that restarts mid-grace waits the whole grace again (longer, never shorter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadyGrace {
    pub key: String,
    pub length: Duration,
}

/// The request's unready grace: `None` while the operator has not marked PreRecreateGrace.
pub fn unready_grace(crr: &ContainerRecreateRequest) -> Option<UnreadyGrace> {
    let seconds = crr.strategy().unready_grace_period_seconds?;
    let condition = crr.condition(CONDITION_PRE_RECREATE_GRACE)?;
    if condition.status != "True" {
        return None;
    }
    Some(UnreadyGrace {
        key: format!(
            "{}/{}",
            crr.metadata.uid.as_deref().unwrap_or_default(),
            condition.last_transition_time.0
        ),
        length: Duration::from_secs(u64::try_from(seconds).unwrap_or(0)),
    })
}

/// What is left of a grace of `length` first seen at `seen`, at `now` (monotonic instants).
pub fn grace_left(length: Duration, seen: std::time::Instant, now: std::time::Instant) -> Duration {
    length.saturating_sub(now.saturating_duration_since(seen))
}

/// When the request's `activeDeadlineSeconds` (counted from its creation) runs out; `None`
/// without a deadline or a creation time. A deadline beyond the end of time is the end of time.
pub fn deadline(crr: &ContainerRecreateRequest) -> Option<jiff::Timestamp> {
    let seconds = crr.spec.active_deadline_seconds?;
    let created = crr.metadata.creation_timestamp.as_ref()?.0;
    Some(saturating_after(created, seconds.max(0)))
}

/// Seconds kept in hand when the daemon judges whether a kill could outlast the operator's
/// patience: the write itself, and the skew between this node's clock and the API server's.
const PHASE_MARGIN_SECONDS: i64 = 15;

/// Whether the phase `Recreating` must be written before a kill starting at `now` with a grace
/// period of `grace_seconds` (preStop and stop together, the stop never under 2 s): when the kill
/// could end after the operator completes a request without a phase as `DaemonNotResponding`
/// (`crr_crds::status::DAEMON_RESPONSE_TIMEOUT_SECONDS` from creation), with a margin. Otherwise
/// the phase goes with the record of the kill, one write instead of two. Without a creation
/// time, always.
pub fn phase_before_kill(
    created: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
    grace_seconds: u64,
) -> bool {
    let Some(created) = created else {
        return true;
    };
    let kill = i64::try_from(grace_seconds)
        .unwrap_or(i64::MAX)
        .saturating_add(2 + PHASE_MARGIN_SECONDS);
    let patience = crr_crds::status::DAEMON_RESPONSE_TIMEOUT_SECONDS;
    saturating_after(now, kill) >= saturating_after(created, patience)
}

/// How long until `deadline`, from `now`: zero once it passed, `None` without one.
pub fn time_left(deadline: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Option<Duration> {
    let left = deadline?.duration_since(now);
    Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
}

/// Whether the request has to wait for the operator at all.
pub fn needs_grace(crr: &ContainerRecreateRequest) -> bool {
    crr.strategy().unready_grace_period_seconds.is_some()
}

/// The runtime the request's containers were recorded under, when it is not the one this
/// daemon talks to (`scheme`, e.g. `containerd`): then no container of it can be found here.
pub fn foreign_runtime(crr: &ContainerRecreateRequest, scheme: &str) -> Option<String> {
    crr.spec
        .containers
        .iter()
        .filter_map(|container| container.status_context.as_ref())
        .filter_map(|context| context.container_id.split_once("://"))
        .map(|(runtime, _)| runtime)
        .find(|runtime| *runtime != scheme)
        .map(str::to_owned)
}

/// Each spec container's state, from its previous state, the runtime and the operator's
/// snapshot (docs/behaviour.md §4); `now` is this node's clock, as the runtime's start times are.
pub fn container_states(
    crr: &ContainerRecreateRequest,
    runtime: &dyn Fn(&str) -> Option<RuntimeContainer>,
    now: jiff::Timestamp,
) -> Vec<State> {
    let strategy = crr.strategy();
    let status = crr.status.clone().unwrap_or_default();
    let min_started =
        jiff::SignedDuration::from_secs(i64::from(strategy.min_started_seconds.max(0)));
    crr.spec
        .containers
        .iter()
        .map(|container| {
            let previous = status
                .container_recreate_states
                .iter()
                .find(|state| state.name == container.name);
            let mut is_killed = previous.is_some_and(|state| state.is_killed);
            if let Some(previous) = previous
                && matches!(previous.phase, Phase::Succeeded | Phase::Failed)
            {
                return previous.clone();
            }
            let state = |phase: Phase, message: Option<String>, is_killed: bool| State {
                name: container.name.clone(),
                phase,
                message,
                is_killed,
            };
            // Without the container admission recorded (a request created while the webhook
            // was away), nothing tells the old container from its replacement: fail, as
            // upstream does, never count it as already replaced.
            let Some(context) = container
                .status_context
                .clone()
                .filter(|context| !context.container_id.is_empty())
            else {
                return state(
                    Phase::Failed,
                    Some(format!(
                        "no statusContext or empty containerID in {} container",
                        container.name
                    )),
                    is_killed,
                );
            };
            let Some(current) = runtime(&container.name) else {
                return state(
                    Phase::Pending,
                    Some("not found container on Node".into()),
                    is_killed,
                );
            };
            if let Some(mismatch) = owner_mismatch(crr, &container.name, &current) {
                // Never run a hook in or stop a container the request does not own.
                return state(Phase::Failed, Some(mismatch), is_killed);
            }
            // A kill that was under way when the daemon stopped: it happened if the container
            // it named is gone or stopped.
            if let Some(previous) = previous
                && previous
                    .message
                    .as_deref()
                    .and_then(KillMarker::parse)
                    .is_some_and(|marker| marker.container_id != current.id || !current.running)
            {
                is_killed = true;
            }
            let replaced =
                current.id != context.container_id || current.restart_count > context.restart_count;
            // A container found Recreating is marked killed (docs/behaviour.md §4): exited, the
            // kubelet restarts it, and forceRecreate must not kill its successor again.
            if !current.running {
                return state(Phase::Recreating, None, true);
            }
            if strategy.force_recreate && !is_killed {
                return state(Phase::Pending, None, false);
            }
            if is_killed && !replaced {
                // Stopped by us, not yet seen replaced: wait, never a second kill.
                return state(Phase::Recreating, None, is_killed);
            }
            if replaced {
                let ready = status.container_status_snapshot.iter().any(|snapshot| {
                    snapshot.name == container.name
                        && snapshot.container_id == current.id
                        && snapshot.ready
                });
                let started_long_enough = current
                    .started_at
                    .is_some_and(|started| now.duration_since(started) >= min_started);
                if ready && started_long_enough {
                    return state(Phase::Succeeded, None, is_killed);
                }
                return state(Phase::Recreating, None, true);
            }
            state(Phase::Pending, None, is_killed)
        })
        .collect()
}

/// What the walk over the states decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Kill the container at this index of the spec (after its preStop).
    Kill(usize),
    /// Nothing to do until the runtime or the snapshot changes.
    Wait,
    /// Every container is done (or one failed under `Fail`): complete with this outcome.
    Complete { succeeded: bool, message: String },
}

pub fn next_step(crr: &ContainerRecreateRequest, states: &[State]) -> Next {
    let strategy = crr.strategy();
    let fail_fast = strategy.failure_policy() != FailurePolicy::Ignore;
    let mut done = 0;
    let mut failed = Vec::new();
    for (index, state) in states.iter().enumerate() {
        match state.phase {
            Phase::Succeeded => done += 1,
            Phase::Failed => {
                done += 1;
                failed.push(state.name.clone());
                if fail_fast {
                    return Next::Complete {
                        succeeded: false,
                        message: format!(
                            "container {} failed: {}",
                            state.name,
                            state.message.clone().unwrap_or_default()
                        ),
                    };
                }
            }
            Phase::Recreating => {
                if strategy.ordered_recreate {
                    return Next::Wait;
                }
            }
            Phase::Pending | Phase::Completed => return Next::Kill(index),
        }
    }
    if done == states.len() {
        if failed.is_empty() {
            Next::Complete {
                succeeded: true,
                message: format!("recreated {done} container(s)"),
            }
        } else {
            Next::Complete {
                succeeded: false,
                message: format!(
                    "{} of {done} container(s) failed: {}",
                    failed.len(),
                    failed.join(", ")
                ),
            }
        }
    } else {
        Next::Wait
    }
}

/// The kubelet's grace period for a pod without one (the API server defaults it to this).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// The grace period of a recreate (preStop hook and stop together), in whole seconds, as the
/// kubelet bounds a kill: the live pod's `terminationGracePeriodSeconds` (30 without one), which
/// the request's may only shorten, never more than `cap` (the daemon's flag). Negative values
/// count as 0. Always within `0..=cap`.
pub fn grace_period_seconds(pod: Option<i64>, request: Option<i64>, cap: u64) -> u64 {
    let pod = pod.unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS).max(0);
    let chosen = request.map_or(pod, |request| request.clamp(0, pod));
    u64::try_from(chosen).unwrap_or(0).min(cap)
}

/// The grace period `StopContainer` gets: the recreate's grace period minus whole seconds spent
/// in preStop, never below 2 s (as the kubelet does).
pub fn kill_grace(grace_period_seconds: u64, spent_in_pre_stop: Duration) -> i64 {
    let left = grace_period_seconds.saturating_sub(spent_in_pre_stop.as_secs());
    i64::try_from(left).unwrap_or(i64::MAX).max(2)
}

/// How a StopContainer call ended, as far as the container's state goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopResult {
    /// Stopped.
    Stopped,
    /// The runtime no longer has the container (its error text): as good as stopped, the
    /// kubelet makes a new one.
    AlreadyRemoved(String),
    /// Any other error, with its text.
    Failed(String),
}

/// The state of container `name` after its stop: `Recreating` and killed when it stopped (or was
/// already gone), `Failed` with the error otherwise (upstream's "kill container error: …").
pub fn state_after_stop(name: &str, stop: &StopResult) -> State {
    match stop {
        StopResult::Stopped | StopResult::AlreadyRemoved(_) => State {
            name: name.to_owned(),
            phase: Phase::Recreating,
            message: None,
            is_killed: true,
        },
        StopResult::Failed(error) => State {
            name: name.to_owned(),
            phase: Phase::Failed,
            message: Some(format!("kill container error: {error}")),
            is_killed: false,
        },
    }
}

/// How long the preStop hook may take: the whole grace period, as the kubelet gives it (the
/// request's deadline never shortens a hook under way); `None` (no hook) with a grace period of
/// 0, as the kubelet runs hooks only when there is time for them.
pub fn pre_stop_budget(grace_period_seconds: u64) -> Option<Duration> {
    let budget = Duration::from_secs(grace_period_seconds);
    (!budget.is_zero()).then_some(budget)
}

/// Interval between looks at the runtime while a recreate is in flight and the runtime's
/// container events are not followed (`runtime_events`).
pub const IN_FLIGHT_POLL: Duration = Duration::from_millis(500);

/// The look while a recreate is in flight and the runtime's container events are followed: the
/// runtime's events, the node's pod watch and the request's watch wake the round, and the
/// round's own timers cover what only time changes ([`time_to_next_change`]); this look is
/// there only for a wake that was lost.
pub const IN_FLIGHT_SAFETY_LOOK: Duration = Duration::from_secs(5);

/// How long a killed container must have been exited (with a code its pod's restart policies may
/// leave it stopped after) before the daemon asks whether the kubelet will ever start it again
/// (`restartPolicy: OnFailure`, `restartPolicyRules`).
pub const NOT_RESTARTED_AFTER: Duration = Duration::from_secs(3);

/// When a round that waits on a recreate in flight looks again by itself: at `by_time` (the
/// soonest moment only time changes what it decides), and never later than the poll's interval,
/// or the safety look's when the runtime's container events wake it (`events_followed`).
pub fn in_flight_look(by_time: Option<Duration>, events_followed: bool) -> Duration {
    let look = if events_followed {
        IN_FLIGHT_SAFETY_LOOK
    } else {
        IN_FLIGHT_POLL
    };
    by_time.map_or(look, |by_time| by_time.min(look))
}

/// How long until only time changes what a round decides about `crr`'s killed containers, as
/// the runtime showed them (`containers`, by name) at `now` (this node's clock, as the runtime's
/// start times are): a successor reaching the request's `minStartedSeconds`, or a killed
/// container still exited [`NOT_RESTARTED_AFTER`] from now (the kubelet may never start it
/// again). `None`: no timer; the runtime's, the pod's or the request's next change wakes the
/// round.
pub fn time_to_next_change(
    crr: &ContainerRecreateRequest,
    states: &[State],
    containers: &[(String, RuntimeContainer)],
    now: jiff::Timestamp,
) -> Option<Duration> {
    let min_started =
        Duration::from_secs(u64::try_from(crr.strategy().min_started_seconds).unwrap_or(0));
    states
        .iter()
        .filter(|state| state.phase == Phase::Recreating && state.is_killed)
        .filter_map(|state| {
            let (_, container) = containers.iter().find(|(name, _)| *name == state.name)?;
            if !container.running {
                return Some(NOT_RESTARTED_AFTER);
            }
            let running_for = Duration::try_from(now.duration_since(container.started_at?))
                .unwrap_or(Duration::ZERO);
            Some(min_started.checked_sub(running_for)?).filter(|left| !left.is_zero())
        })
        .min()
}

/// Test fixture shared by this module's, `round`'s and `schedule`'s tests: a request for
/// `containers` of pod `p` in namespace `ns` (pod UID `pod-uid-1`) as the webhook admits it, each
/// container's statusContext naming its first attempt (`containerd://<name>-1`, restart count 0).
#[cfg(test)]
pub(crate) fn admitted_request(
    containers: &[&str],
    strategy: crr_crds::v1beta1::ContainerRecreateRequestStrategy,
) -> ContainerRecreateRequest {
    use crr_crds::v1beta1::{
        ContainerRecreateRequestContainer, ContainerRecreateRequestContainerContext,
        ContainerRecreateRequestSpec,
    };
    let mut crr = ContainerRecreateRequest::new(
        "r",
        ContainerRecreateRequestSpec {
            pod_name: "p".into(),
            containers: containers
                .iter()
                .map(|name| ContainerRecreateRequestContainer {
                    name: (*name).into(),
                    status_context: Some(ContainerRecreateRequestContainerContext {
                        container_id: format!("containerd://{name}-1"),
                        restart_count: 0,
                    }),
                    ..Default::default()
                })
                .collect(),
            strategy: Some(strategy),
            ..Default::default()
        },
    );
    crr.metadata.namespace = Some(FIXTURE_NAMESPACE.into());
    crr.metadata.labels = Some([(LABEL_POD_UID.to_owned(), FIXTURE_POD_UID.to_owned())].into());
    crr
}

/// The namespace of [`admitted_request`]'s requests.
#[cfg(test)]
pub(crate) const FIXTURE_NAMESPACE: &str = "ns";
/// The pod UID [`admitted_request`]'s requests carry (the fake runtime's pod).
#[cfg(test)]
pub(crate) const FIXTURE_POD_UID: &str = "pod-uid-1";

#[cfg(test)]
mod tests;

/// The whole integer range of every strategy field, against the state machine and the grace
/// arithmetic: nothing panics, and every result stays within its bounds.
#[cfg(test)]
mod properties;
