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
    // An earlier daemon (they announced each kill in the status) announced the kill of app-2,
    // killed it, and was replaced by this one before writing isKilled: a request in flight
    // across an upgrade.
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

#[test]
fn a_stopped_or_already_removed_container_is_recreating_and_killed() {
    for stop in [
        StopResult::Stopped,
        StopResult::AlreadyRemoved("container not found: abc".to_owned()),
    ] {
        assert_eq!(
            state_after_stop("app", &stop),
            State {
                name: "app".to_owned(),
                phase: Phase::Recreating,
                message: None,
                is_killed: true,
            }
        );
    }
}

#[test]
fn a_container_the_runtime_failed_to_stop_fails_with_upstreams_message() {
    assert_eq!(
        state_after_stop(
            "sidecar",
            &StopResult::Failed("runtime error: boom".to_owned())
        ),
        State {
            name: "sidecar".to_owned(),
            phase: Phase::Failed,
            message: Some("kill container error: runtime error: boom".to_owned()),
            is_killed: false,
        }
    );
}

#[test]
fn the_phase_goes_first_only_for_a_kill_that_could_outlast_the_operators_patience() {
    let created = now();
    let at = |seconds: i64| saturating_after(created, seconds);
    // A plain request picked up at once, the default grace: the phase goes with the kill's record.
    assert!(!phase_before_kill(Some(created), at(1), 30));
    assert!(!phase_before_kill(Some(created), at(0), 0));
    // 60 s of patience: 30 s of grace + 2 + 15 in hand end at 47 + the start.
    assert!(!phase_before_kill(Some(created), at(12), 30));
    assert!(phase_before_kill(Some(created), at(13), 30));
    // A long grace, or a request found late, writes the phase first.
    assert!(phase_before_kill(Some(created), at(0), 300));
    assert!(phase_before_kill(Some(created), at(50), 0));
    // No creation time to judge by, or absurd numbers: first, never a panic.
    assert!(phase_before_kill(None, at(0), 0));
    assert!(phase_before_kill(Some(created), at(0), u64::MAX));
    assert!(phase_before_kill(
        Some(jiff::Timestamp::MIN),
        jiff::Timestamp::MAX,
        0
    ));
}

#[test]
fn only_time_wakes_a_round_for_min_started_seconds_and_a_container_left_exited() {
    let state = |name: &str, phase: Phase, is_killed: bool| State {
        name: name.into(),
        phase,
        message: None,
        is_killed,
    };
    let strategy = ContainerRecreateRequestStrategy {
        min_started_seconds: 10,
        ..Default::default()
    };
    let request = crr(&["app", "side", "gone"], strategy);
    let mut exited = running("containerd://gone-2", 1, 1);
    exited.running = false;
    let containers = vec![
        ("app".to_owned(), running("containerd://app-2", 1, 4)),
        ("side".to_owned(), running("containerd://side-2", 1, 30)),
        ("gone".to_owned(), exited),
    ];
    let killed = |names: &[&str]| -> Vec<State> {
        ["app", "side", "gone"]
            .iter()
            .map(|name| {
                if names.contains(name) {
                    state(name, Phase::Recreating, true)
                } else {
                    state(name, Phase::Pending, false)
                }
            })
            .collect()
    };
    // A successor 4 s old under minStartedSeconds 10: 6 s to go.
    assert_eq!(
        time_to_next_change(&request, &killed(&["app"]), &containers, now()),
        Some(Duration::from_secs(6))
    );
    // One that ran long enough has no timer: its Ready comes by the pod watch.
    assert_eq!(
        time_to_next_change(&request, &killed(&["side"]), &containers, now()),
        None
    );
    // A killed container still exited is looked at again once the kubelet would have
    // restarted it.
    assert_eq!(
        time_to_next_change(&request, &killed(&["gone"]), &containers, now()),
        Some(NOT_RESTARTED_AFTER)
    );
    assert_eq!(
        time_to_next_change(
            &request,
            &killed(&["app", "side", "gone"]),
            &containers,
            now()
        ),
        Some(NOT_RESTARTED_AFTER),
        "the soonest"
    );
    // Containers not killed, or done, wait on nothing but events.
    let mut done = killed(&["app"]);
    done[0].phase = Phase::Succeeded;
    assert_eq!(
        time_to_next_change(&request, &done, &containers, now()),
        None
    );
    assert_eq!(
        time_to_next_change(&request, &killed(&[]), &containers, now()),
        None
    );
    // Without minStartedSeconds a running successor has no timer.
    let plain = crr(&["app"], ContainerRecreateRequestStrategy::default());
    assert_eq!(
        time_to_next_change(&plain, &killed(&["app"])[..1], &containers, now()),
        None
    );
}

#[test]
fn a_round_in_flight_looks_at_its_timer_or_the_poll_or_the_safety_look() {
    let soon = Some(Duration::from_millis(200));
    let later = Some(Duration::from_secs(3));
    assert_eq!(in_flight_look(None, false), IN_FLIGHT_POLL);
    assert_eq!(in_flight_look(soon, false), Duration::from_millis(200));
    assert_eq!(in_flight_look(later, false), IN_FLIGHT_POLL);
    assert_eq!(in_flight_look(None, true), IN_FLIGHT_SAFETY_LOOK);
    assert_eq!(in_flight_look(later, true), Duration::from_secs(3));
    assert_eq!(
        in_flight_look(Some(Duration::from_secs(60)), true),
        IN_FLIGHT_SAFETY_LOOK
    );
}
