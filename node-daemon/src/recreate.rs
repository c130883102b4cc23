//! The per-request decisions of the node daemon, as functions of values: each container's
//! state from what the runtime shows, what to do next, and the grace period a kill gets. No I/O
//! here; `round` carries the decisions out. Which request of a pod goes first is `schedule`'s.

use std::time::Duration;

use crr_crds::keys::CONDITION_PRE_RECREATE_GRACE;
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerRecreateState as State,
    FailurePolicy, Phase,
};

use crate::kill_marker::KillMarker;

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
}

/// When the unready grace is over: `None` while the operator has not marked PreRecreateGrace.
pub fn grace_ends_at(crr: &ContainerRecreateRequest) -> Option<jiff::Timestamp> {
    let grace = crr.strategy().unready_grace_period_seconds?;
    let condition = crr.condition(CONDITION_PRE_RECREATE_GRACE)?;
    if condition.status != "True" {
        return None;
    }
    Some(condition.last_transition_time.0 + jiff::SignedDuration::from_secs(grace.max(0)))
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
/// snapshot (spec section 4); `now` is this node's clock, as the runtime's start times are.
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
            let Some(current) = runtime(&container.name) else {
                return state(
                    Phase::Pending,
                    Some("not found container on Node".into()),
                    is_killed,
                );
            };
            let context = container.status_context.clone().unwrap_or_default();
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
            if !current.running {
                return state(Phase::Recreating, None, is_killed);
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
                let phase = if ready && started_long_enough {
                    Phase::Succeeded
                } else {
                    Phase::Recreating
                };
                return state(phase, None, is_killed);
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

/// The grace period of a kill: the strategy's (the webhook copies the pod's), 30 s without
/// one, minus whole seconds spent in preStop, never below 2 s (as the kubelet does).
pub fn kill_grace(crr: &ContainerRecreateRequest, spent_in_pre_stop: Duration) -> i64 {
    let total = crr
        .strategy()
        .termination_grace_period_seconds
        .unwrap_or(30);
    (total - spent_in_pre_stop.as_secs() as i64).max(2)
}

/// How long the preStop hook may take: the whole grace period; `None` (no hook) with a grace
/// period of 0, as the kubelet runs hooks only when there is time for them.
pub fn pre_stop_budget(crr: &ContainerRecreateRequest) -> Option<Duration> {
    let grace = crr
        .strategy()
        .termination_grace_period_seconds
        .unwrap_or(30);
    (grace > 0).then(|| Duration::from_secs(grace.unsigned_abs()))
}

/// Interval between looks at the runtime while a recreate is in flight.
pub const IN_FLIGHT_POLL: Duration = Duration::from_millis(500);

/// Test fixture shared by this module's, `round`'s and `schedule`'s tests: a request for
/// `containers` of pod `p` as the webhook admits it, each container's statusContext naming its
/// first attempt (`containerd://<name>-1`, restart count 0).
#[cfg(test)]
pub(crate) fn admitted_request(
    containers: &[&str],
    strategy: crr_crds::v1beta1::ContainerRecreateRequestStrategy,
) -> ContainerRecreateRequest {
    use crr_crds::v1beta1::{
        ContainerRecreateRequestContainer, ContainerRecreateRequestContainerContext,
        ContainerRecreateRequestSpec,
    };
    ContainerRecreateRequest::new(
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
    )
}

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

    fn running(id: &str, restarts: i32, for_secs: i64) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            restart_count: restarts,
            running: true,
            started_at: Some(now() - jiff::SignedDuration::from_secs(for_secs)),
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
            id: "containerd://app-1".into(),
            restart_count: 0,
            running: false,
            started_at: None,
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
        let request = crr(
            &["app"],
            ContainerRecreateRequestStrategy {
                termination_grace_period_seconds: Some(10),
                ..Default::default()
            },
        );
        assert_eq!(kill_grace(&request, Duration::from_millis(3900)), 7);
        assert_eq!(kill_grace(&request, Duration::from_secs(60)), 2);
        assert_eq!(
            kill_grace(&crr(&["app"], Default::default()), Duration::ZERO),
            30
        );
    }
}
