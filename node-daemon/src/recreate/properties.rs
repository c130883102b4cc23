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
