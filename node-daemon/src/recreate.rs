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
/// clock (`timers::GraceClock`), never by comparing the operator's `lastTransitionTime` with
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

/// How long the preStop hook may take: the whole grace period, as the kubelet gives it (the
/// request's deadline never shortens a hook under way); `None` (no hook) with a grace period of
/// 0, as the kubelet runs hooks only when there is time for them.
pub fn pre_stop_budget(grace_period_seconds: u64) -> Option<Duration> {
    let budget = Duration::from_secs(grace_period_seconds);
    (!budget.is_zero()).then_some(budget)
}

/// Interval between looks at the runtime while a recreate is in flight.
pub const IN_FLIGHT_POLL: Duration = Duration::from_millis(500);

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
mod tests {
    use super::*;
    use crr_crds::v1beta1::{
        ContainerRecreateRequestStatus, ContainerRecreateRequestStrategy,
        ContainerRecreateRequestSyncContainerStatus,
    };

    fn crr(
        containers: &[&str],
        strategy: ContainerRecreateRequestStrategy,
    ) -> ContainerRecreateRequest {
        let mut crr = admitted_request(containers, strategy);
        crr.status = Some(ContainerRecreateRequestStatus {
            phase: Some(Phase::Recreating),
            ..Default::default()
        });
        crr
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_000_000).expect("a valid time")
    }

    /// A running container of the fixture's pod, named by its ID's prefix (`app-2` → `app`).
    fn running(id: &str, restarts: i32, for_secs: i64) -> RuntimeContainer {
        let name = id
            .trim_start_matches("containerd://")
            .split('-')
            .next()
            .unwrap_or_default();
        RuntimeContainer {
            id: id.into(),
            restart_count: restarts,
            running: true,
            started_at: Some(now() - jiff::SignedDuration::from_secs(for_secs)),
            owner: expected_owner(&admitted_request(&[], Default::default()), name),
        }
    }

    fn snapshot(crr: &mut ContainerRecreateRequest, name: &str, id: &str, ready: bool) {
        crr.status.as_mut().unwrap().container_status_snapshot.push(
            ContainerRecreateRequestSyncContainerStatus {
                name: name.into(),
                container_id: id.into(),
                ready,
                restart_count: 1,
            },
        );
    }

    #[test]
    fn unchanged_container_is_pending_and_gets_killed() {
        let crr = crr(&["app"], Default::default());
        let states = container_states(
            &crr,
            &|_| Some(running("containerd://app-1", 0, 100)),
            now(),
        );
        assert_eq!(states[0].phase, Phase::Pending);
        assert_eq!(next_step(&crr, &states), Next::Kill(0));
    }

    #[test]
    fn replaced_container_succeeds_only_when_ready_and_started_long_enough() {
        let mut request = crr(
            &["app"],
            ContainerRecreateRequestStrategy {
                min_started_seconds: 5,
                ..Default::default()
            },
        );
        let new = |secs| move |_: &str| Some(running("containerd://app-2", 1, secs));
        assert_eq!(
            container_states(&request, &new(10), now())[0].phase,
            Phase::Recreating,
            "not ready in snapshot"
        );
        snapshot(&mut request, "app", "containerd://app-2", true);
        assert_eq!(
            container_states(&request, &new(3), now())[0].phase,
            Phase::Recreating,
            "minStartedSeconds"
        );
        let states = container_states(&request, &new(6), now());
        assert_eq!(states[0].phase, Phase::Succeeded);
        assert!(matches!(
            next_step(&request, &states),
            Next::Complete {
                succeeded: true,
                ..
            }
        ));
    }

    #[test]
    fn a_ready_snapshot_of_the_old_container_is_not_success() {
        let mut request = crr(&["app"], Default::default());
        snapshot(&mut request, "app", "containerd://app-1", true);
        let states = container_states(
            &request,
            &|_| Some(running("containerd://app-2", 1, 10)),
            now(),
        );
        assert_eq!(states[0].phase, Phase::Recreating);
    }

    #[test]
    fn exited_container_counts_as_recreating() {
        let request = crr(&["app"], Default::default());
        let exited = RuntimeContainer {
            running: false,
            started_at: None,
            ..running("containerd://app-1", 0, 0)
        };
        assert_eq!(
            container_states(&request, &|_| Some(exited.clone()), now())[0].phase,
            Phase::Recreating
        );
    }

    #[test]
    fn missing_container_is_pending_with_a_message() {
        let request = crr(&["app"], Default::default());
        let states = container_states(&request, &|_| None, now());
        assert_eq!(states[0].phase, Phase::Pending);
        assert_eq!(
            states[0].message.as_deref(),
            Some("not found container on Node")
        );
    }

    #[test]
    fn force_recreate_kills_an_already_replaced_container_exactly_once() {
        let mut request = crr(
            &["app"],
            ContainerRecreateRequestStrategy {
                force_recreate: true,
                ..Default::default()
            },
        );
        let replaced = |_: &str| Some(running("containerd://app-2", 1, 10));
        let states = container_states(&request, &replaced, now());
        assert_eq!(
            next_step(&request, &states),
            Next::Kill(0),
            "not killed yet: kill"
        );
        // After the kill was recorded, the replacement is waited for, never killed again.
        request.status.as_mut().unwrap().container_recreate_states = vec![State {
            name: "app".into(),
            phase: Phase::Recreating,
            message: None,
            is_killed: true,
        }];
        let after = |_: &str| Some(running("containerd://app-3", 2, 10));
        let states = container_states(&request, &after, now());
        assert_eq!(states[0].phase, Phase::Recreating);
        assert!(states[0].is_killed);
    }

    #[test]
    fn restart_between_kill_and_status_write_does_not_kill_twice() {
        let mut request = crr(
            &["app"],
            ContainerRecreateRequestStrategy {
                force_recreate: true,
                ..Default::default()
            },
        );
        // The daemon announced the kill of app-2, killed it, and died before writing isKilled.
        request.status.as_mut().unwrap().container_recreate_states = vec![State {
            name: "app".into(),
            phase: Phase::Recreating,
            message: Some(KillMarker::new("containerd://app-2").format()),
            is_killed: false,
        }];
        let states = container_states(
            &request,
            &|_| Some(running("containerd://app-3", 2, 1)),
            now(),
        );
        assert!(states[0].is_killed, "the kill is known to have happened");
        assert_ne!(next_step(&request, &states), Next::Kill(0));
        // But if the named container still runs, the kill did not happen: do it.
        let states = container_states(
            &request,
            &|_| Some(running("containerd://app-2", 1, 1)),
            now(),
        );
        assert!(!states[0].is_killed);
        assert_eq!(next_step(&request, &states), Next::Kill(0));
    }

    #[test]
    fn a_container_found_exiting_is_marked_killed_and_force_recreate_never_kills_it_again() {
        let mut request = crr(
            &["app"],
            ContainerRecreateRequestStrategy {
                force_recreate: true,
                ..Default::default()
            },
        );
        let mut exiting = running("containerd://app-1", 0, 100);
        exiting.running = false;
        let states = container_states(&request, &|_| Some(exiting.clone()), now());
        assert_eq!(states[0].phase, Phase::Recreating);
        assert!(
            states[0].is_killed,
            "a container found Recreating is marked killed"
        );
        request.status.as_mut().unwrap().container_recreate_states = states;
        // The kubelet restarted it: replaced, already killed, so no second kill.
        let states = container_states(
            &request,
            &|_| Some(running("containerd://app-2", 1, 1)),
            now(),
        );
        assert_eq!(states[0].phase, Phase::Recreating);
        assert!(states[0].is_killed);
        assert_eq!(next_step(&request, &states), Next::Wait);
    }

    #[test]
    fn a_container_never_killed_is_not_marked_killed() {
        // Running, never touched: Pending, not marked.
        let request = crr(&["app"], Default::default());
        let states = container_states(
            &request,
            &|_| Some(running("containerd://app-1", 0, 100)),
            now(),
        );
        assert_eq!(states[0].phase, Phase::Pending);
        assert!(!states[0].is_killed);
        // Restarted on its own under forceRecreate: still to be killed once, not marked.
        let forced = crr(
            &["app"],
            ContainerRecreateRequestStrategy {
                force_recreate: true,
                ..Default::default()
            },
        );
        let states = container_states(
            &forced,
            &|_| Some(running("containerd://app-2", 1, 100)),
            now(),
        );
        assert_eq!(states[0].phase, Phase::Pending);
        assert!(!states[0].is_killed);
        assert_eq!(next_step(&forced, &states), Next::Kill(0));
    }

    #[test]
    fn a_container_without_status_context_fails_and_never_counts_as_replaced() {
        for context in [
            None,
            Some(
                crr_crds::v1beta1::ContainerRecreateRequestContainerContext {
                    container_id: String::new(),
                    restart_count: 0,
                },
            ),
        ] {
            let mut request = crr(&["app"], Default::default());
            request.spec.containers[0].status_context = context.clone();
            let found = running("containerd://app-1", 0, 100);
            snapshot(&mut request, "app", "containerd://app-1", true);
            let states = container_states(&request, &|_| Some(found.clone()), now());
            assert_eq!(states[0].phase, Phase::Failed, "{context:?}");
            assert_eq!(
                states[0].message.as_deref(),
                Some("no statusContext or empty containerID in app container")
            );
            assert!(!states[0].is_killed);
            assert!(matches!(
                next_step(&request, &states),
                Next::Complete {
                    succeeded: false,
                    ..
                }
            ));
        }
    }

    #[test]
    fn ordered_recreate_waits_for_the_previous_container() {
        let request = crr(
            &["app", "sidecar"],
            ContainerRecreateRequestStrategy {
                ordered_recreate: true,
                ..Default::default()
            },
        );
        let runtime = |name: &str| {
            Some(if name == "app" {
                running("containerd://app-2", 1, 0)
            } else {
                running("containerd://sidecar-1", 0, 50)
            })
        };
        let states = container_states(&request, &runtime, now());
        assert_eq!(next_step(&request, &states), Next::Wait);
        let parallel = crr(&["app", "sidecar"], Default::default());
        let states = container_states(&parallel, &runtime, now());
        assert_eq!(next_step(&parallel, &states), Next::Kill(1));
    }

    #[test]
    fn failure_policy_fail_completes_at_the_first_failure_ignore_goes_on() {
        let failed = vec![
            State {
                name: "app".into(),
                phase: Phase::Failed,
                message: Some("kill container error: x".into()),
                is_killed: false,
            },
            State {
                name: "sidecar".into(),
                phase: Phase::Pending,
                message: None,
                is_killed: false,
            },
        ];
        let fail = crr(
            &["app", "sidecar"],
            ContainerRecreateRequestStrategy {
                failure_policy: Some("Fail".into()),
                ..Default::default()
            },
        );
        assert!(matches!(
            next_step(&fail, &failed),
            Next::Complete {
                succeeded: false,
                ..
            }
        ));
        let ignore = crr(
            &["app", "sidecar"],
            ContainerRecreateRequestStrategy {
                failure_policy: Some("Ignore".into()),
                ..Default::default()
            },
        );
        assert_eq!(next_step(&ignore, &failed), Next::Kill(1));
        let mut all_done = failed.clone();
        all_done[1].phase = Phase::Succeeded;
        assert!(matches!(
            next_step(&ignore, &all_done),
            Next::Complete {
                succeeded: false,
                ..
            }
        ));
    }

    #[test]
    fn grace_period_deducts_pre_stop_seconds_and_keeps_two() {
        assert_eq!(kill_grace(10, Duration::from_millis(3900)), 7);
        assert_eq!(kill_grace(10, Duration::from_secs(60)), 2);
        assert_eq!(kill_grace(30, Duration::ZERO), 30);
        assert_eq!(kill_grace(0, Duration::ZERO), 2);
    }

    #[test]
    fn grace_period_is_the_pods_shortened_by_the_request_and_capped() {
        assert_eq!(grace_period_seconds(Some(60), None, 300), 60, "the pod's");
        assert_eq!(grace_period_seconds(None, None, 300), 30, "the default");
        assert_eq!(
            grace_period_seconds(Some(60), Some(10), 300),
            10,
            "the request may shorten it"
        );
        assert_eq!(
            grace_period_seconds(Some(60), Some(3600), 300),
            60,
            "but never lengthen it"
        );
        assert_eq!(
            grace_period_seconds(Some(86_400), None, 300),
            300,
            "never beyond the cap"
        );
        assert_eq!(grace_period_seconds(Some(60), Some(-5), 300), 0);
        assert_eq!(grace_period_seconds(Some(-5), None, 300), 0);
    }

    #[test]
    fn the_pre_stop_budget_is_the_whole_grace_period() {
        assert_eq!(pre_stop_budget(30), Some(Duration::from_secs(30)));
        assert_eq!(pre_stop_budget(0), None, "no time, no hook");
    }

    #[test]
    fn a_container_of_another_pod_fails_and_is_never_killed() {
        let request = crr(&["app"], Default::default());
        type Change = fn(&mut ContainerOwner);
        let cases: [(&str, Change); 4] = [
            ("uid", |owner| owner.pod_uid = "other-uid".into()),
            ("namespace", |owner| owner.pod_namespace = "victim".into()),
            ("pod name", |owner| owner.pod_name = "other".into()),
            ("container name", |owner| {
                owner.container_name = "sidecar".into()
            }),
        ];
        for (what, change) in cases {
            let mut found = running("containerd://app-1", 0, 100);
            change(&mut found.owner);
            let states = container_states(&request, &|_| Some(found.clone()), now());
            assert_eq!(states[0].phase, Phase::Failed, "{what}");
            let message = states[0].message.clone().unwrap_or_default();
            assert!(message.contains("refusing to touch"), "{what}: {message}");
            assert!(
                matches!(
                    next_step(&request, &states),
                    Next::Complete {
                        succeeded: false,
                        ..
                    }
                ),
                "{what}: no kill"
            );
        }
    }

    #[test]
    fn a_request_without_a_pod_uid_owns_no_container() {
        let mut request = crr(&["app"], Default::default());
        request.metadata.labels = None;
        let mut found = running("containerd://app-1", 0, 100);
        found.owner.pod_uid = String::new();
        let states = container_states(&request, &|_| Some(found.clone()), now());
        assert_eq!(states[0].phase, Phase::Failed);
    }

    fn grace_marked(seconds: i64, at: jiff::Timestamp) -> ContainerRecreateRequest {
        let mut request = crr(
            &["app"],
            ContainerRecreateRequestStrategy {
                unready_grace_period_seconds: Some(seconds),
                ..Default::default()
            },
        );
        request.metadata.uid = Some("uid-1".into());
        request.status.as_mut().unwrap().conditions =
            vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: CONDITION_PRE_RECREATE_GRACE.into(),
                status: "True".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at),
                message: String::new(),
                reason: "PreRecreateGrace".into(),
                observed_generation: None,
            }];
        request
    }

    #[test]
    fn an_unready_grace_beyond_the_end_of_time_is_the_longest_duration_and_never_panics() {
        let grace = unready_grace(&grace_marked(i64::MAX, now())).expect("marked");
        assert_eq!(grace.length, Duration::from_secs(i64::MAX as u64));
        let seen = std::time::Instant::now();
        assert!(grace_left(grace.length, seen, seen) > Duration::from_secs(1 << 40));
        assert_eq!(
            unready_grace(&grace_marked(i64::MIN, now())).map(|grace| grace.length),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn the_grace_ignores_how_far_the_operator_s_clock_is_from_ours() {
        // Marked "an hour ago" by the operator's clock (or ours runs an hour ahead): the grace
        // still lasts its whole length from when this daemon saw it.
        let an_hour_ago = now()
            .checked_sub(jiff::SignedDuration::from_hours(1))
            .unwrap();
        let grace = unready_grace(&grace_marked(30, an_hour_ago)).expect("marked");
        let seen = std::time::Instant::now();
        assert_eq!(
            grace_left(grace.length, seen, seen),
            Duration::from_secs(30)
        );
        assert_eq!(
            grace_left(grace.length, seen, seen + Duration::from_secs(12)),
            Duration::from_secs(18)
        );
        assert_eq!(
            grace_left(grace.length, seen, seen + Duration::from_secs(31)),
            Duration::ZERO
        );
        // A grace marked anew (another transition time) is another grace.
        let again = unready_grace(&grace_marked(30, now())).expect("marked");
        assert_ne!(grace.key, again.key);
    }

    #[test]
    fn a_deadline_is_counted_from_creation_and_saturates() {
        let mut request = crr(&["app"], Default::default());
        request.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        assert_eq!(deadline(&request), None);
        request.spec.active_deadline_seconds = Some(10);
        let end = deadline(&request).unwrap();
        assert_eq!(time_left(Some(end), now()), Some(Duration::from_secs(10)));
        assert_eq!(
            time_left(Some(end), now() + jiff::SignedDuration::from_secs(60)),
            Some(Duration::ZERO)
        );
        request.spec.active_deadline_seconds = Some(i64::MAX);
        assert_eq!(deadline(&request), Some(jiff::Timestamp::MAX));
        request.spec.active_deadline_seconds = Some(i64::MIN);
        assert_eq!(deadline(&request), Some(now()));
    }
}

/// The whole integer range of every strategy field, against the state machine and the grace
/// arithmetic: nothing panics, and every result stays within its bounds.
#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crr_crds::v1beta1::{
        ContainerRecreateRequestStatus, ContainerRecreateRequestStrategy,
        ContainerRecreateRequestSyncContainerStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn timestamp() -> impl Strategy<Value = jiff::Timestamp> {
        (jiff::Timestamp::MIN.as_second()..=jiff::Timestamp::MAX.as_second())
            .prop_map(|second| jiff::Timestamp::from_second(second).expect("in range"))
    }

    fn strategy() -> impl Strategy<Value = ContainerRecreateRequestStrategy> {
        (
            any::<Option<i64>>(),
            any::<Option<i64>>(),
            any::<i32>(),
            any::<bool>(),
            any::<bool>(),
            prop_oneof![
                Just(None),
                Just(Some("Fail".to_owned())),
                Just(Some("Ignore".to_owned()))
            ],
        )
            .prop_map(
                |(termination, unready, min_started, ordered, force, failure_policy)| {
                    ContainerRecreateRequestStrategy {
                        failure_policy,
                        ordered_recreate: ordered,
                        force_recreate: force,
                        termination_grace_period_seconds: termination,
                        unready_grace_period_seconds: unready,
                        min_started_seconds: min_started,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn the_state_machine_never_panics_on_any_strategy(
            strategy in strategy(),
            active_deadline in any::<Option<i64>>(),
            ttl in any::<Option<i32>>(),
            created in timestamp(),
            granted in timestamp(),
            started in proptest::option::of(timestamp()),
            now in timestamp(),
            restart_count in any::<i32>(),
            context_restarts in any::<i32>(),
            replaced in any::<bool>(),
            ready in any::<bool>(),
        ) {
            let mut crr = admitted_request(&["app"], strategy);
            crr.spec.active_deadline_seconds = active_deadline;
            crr.spec.ttl_seconds_after_finished = ttl;
            crr.spec.containers[0].status_context.as_mut().unwrap().restart_count =
                context_restarts;
            crr.metadata.creation_timestamp = Some(Time(created));
            crr.status = Some(ContainerRecreateRequestStatus {
                phase: Some(Phase::Recreating),
                conditions: vec![Condition {
                    type_: CONDITION_PRE_RECREATE_GRACE.into(),
                    status: "True".into(),
                    last_transition_time: Time(granted),
                    message: String::new(),
                    reason: String::new(),
                    observed_generation: None,
                }],
                container_status_snapshot: vec![ContainerRecreateRequestSyncContainerStatus {
                    name: "app".into(),
                    container_id: "containerd://app-2".into(),
                    ready,
                    restart_count,
                }],
                ..Default::default()
            });
            let found = RuntimeContainer {
                id: if replaced { "containerd://app-2" } else { "containerd://app-1" }.into(),
                restart_count,
                running: true,
                started_at: started,
                owner: expected_owner(&crr, "app"),
            };
            let states = container_states(&crr, &|_| Some(found.clone()), now);
            prop_assert_eq!(states.len(), 1);
            let _ = next_step(&crr, &states);
            if let Some(grace) = unready_grace(&crr) {
                let seen = std::time::Instant::now();
                prop_assert!(grace_left(grace.length, seen, seen) == grace.length);
                if let Some(end) = seen.checked_add(grace.length) {
                    prop_assert!(grace_left(grace.length, seen, end).is_zero());
                }
            }
            let left = time_left(deadline(&crr), now);
            if let (Some(left), Some(seconds)) = (left, active_deadline)
                && now >= created
            {
                prop_assert!(left.as_secs() <= seconds.max(0).unsigned_abs());
            }
        }

        #[test]
        fn the_grace_arithmetic_stays_within_its_bounds(
            pod in any::<Option<i64>>(),
            request in any::<Option<i64>>(),
            cap in any::<u64>(),
            spent in any::<u64>(),
        ) {
            let grace = grace_period_seconds(pod, request, cap);
            prop_assert!(grace <= cap, "never beyond the cap");
            let pod_grace = pod.unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS).max(0).unsigned_abs();
            prop_assert!(grace <= pod_grace, "never beyond the pod's");
            if let Some(request) = request {
                prop_assert!(grace <= request.max(0).unsigned_abs(), "the request only shortens");
            }
            let kill = kill_grace(grace, Duration::from_secs(spent));
            prop_assert!(kill >= 2);
            prop_assert!(kill.unsigned_abs() <= grace.max(2));
            if let Some(budget) = pre_stop_budget(grace) {
                prop_assert_eq!(budget, Duration::from_secs(grace));
            } else {
                prop_assert_eq!(grace, 0);
            }
        }

        #[test]
        fn saturating_after_never_panics(start in timestamp(), seconds in any::<i64>()) {
            let end = saturating_after(start, seconds);
            let ordered = if seconds >= 0 { end >= start } else { end <= start };
            prop_assert!(ordered);
        }
    }
}
