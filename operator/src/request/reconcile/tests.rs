use super::*;
use crr_crds::v1beta1::{
    ContainerRecreateRequestContainer, ContainerRecreateRequestContainerContext,
    ContainerRecreateRequestContainerRecreateState, ContainerRecreateRequestSpec,
    ContainerRecreateRequestStatus, ContainerRecreateRequestStrategy,
};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, PodReadinessGate, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

const POD_UID: &str = "uid-1";

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

/// A request for containers `app` and `sidecar` of pod `web`, created at `at(0)`, active.
fn crr() -> ContainerRecreateRequest {
    let container = |name: &str| ContainerRecreateRequestContainer {
        name: name.to_owned(),
        status_context: Some(ContainerRecreateRequestContainerContext {
            container_id: format!("containerd://{name}-0"),
            restart_count: 0,
        }),
        ..Default::default()
    };
    ContainerRecreateRequest {
        metadata: ObjectMeta {
            name: Some("crr-a".to_owned()),
            namespace: Some("ns".to_owned()),
            resource_version: Some("7".to_owned()),
            creation_timestamp: Some(Time(at(0))),
            labels: Some(BTreeMap::from([
                (keys::LABEL_ACTIVE.to_owned(), "true".to_owned()),
                (keys::LABEL_POD_UID.to_owned(), POD_UID.to_owned()),
            ])),
            ..Default::default()
        },
        spec: ContainerRecreateRequestSpec {
            pod_name: "web".to_owned(),
            containers: vec![container("app"), container("sidecar")],
            ..Default::default()
        },
        status: None,
    }
}

fn with_phase(mut crr: ContainerRecreateRequest, phase: Phase) -> ContainerRecreateRequest {
    crr.status.get_or_insert_default().phase = Some(phase);
    crr
}

fn completed_at(mut crr: ContainerRecreateRequest, seconds: i64) -> ContainerRecreateRequest {
    let status = crr.status.get_or_insert_default();
    status.phase = Some(Phase::Completed);
    status.completion_time = Some(Time(at(seconds)));
    crr
}

#[test]
fn only_requests_at_work_or_holding_readiness_need_the_pod() {
    assert!(needs_pod(&crr()), "pending");
    assert!(needs_pod(&with_phase(crr(), Phase::Recreating)));
    let done = completed_at(crr(), 10);
    assert!(!needs_pod(&done), "completed, holding nothing");
    let mut holding = done.clone();
    holding.metadata.finalizers = Some(vec![keys::FINALIZER_UNREADY_ACQUIRED.to_owned()]);
    assert!(
        needs_pod(&holding),
        "completed, still holding the pod's readiness"
    );
    let mut deleting = crr();
    deleting.metadata.deletion_timestamp = Some(Time(at(20)));
    assert!(!needs_pod(&deleting));
}

#[test]
fn a_request_the_daemon_has_not_started_on_needs_only_its_pods_existence() {
    assert_eq!(pod_need(&crr()), PodNeed::Existence, "no phase");
    assert_eq!(
        pod_need(&with_phase(crr(), Phase::Pending)),
        PodNeed::Existence
    );
    assert_eq!(
        pod_need(&with_phase(crr(), Phase::Recreating)),
        PodNeed::Whole
    );
    assert_eq!(pod_need(&completed_at(crr(), 10)), PodNeed::Nothing);
    assert_eq!(
        pod_need(&with_finalizer(completed_at(crr(), 10))),
        PodNeed::Whole
    );
}

#[test]
fn the_admitted_pod_plans_a_fresh_request_as_its_read_pod_would() {
    let mut request = crr();
    request.spec.active_deadline_seconds = Some(5);
    let created = request
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("created")
        .0;
    let admitted = admitted_pod(&request, created).expect("fresh, pending");
    assert_eq!(admitted.metadata.uid, pod().metadata.uid);
    assert_eq!(admitted.metadata.resource_version, None, "never read");
    // Every time within the trust, the plan on the admitted pod is the plan on the live one
    // (the daemon's response deadline and the active deadline included).
    for seconds in [0, 1, 5, 29] {
        let now = created + jiff::SignedDuration::from_secs(seconds);
        assert_eq!(
            plan(&request, Some(&admitted), now),
            plan(&request, Some(&pod()), now),
            "{seconds}s after creation"
        );
    }
    let late = created + jiff::SignedDuration::try_from(ADMITTED_POD_TRUSTED_FOR).unwrap();
    assert_eq!(
        admitted_pod(&request, late),
        None,
        "read once the trust ran out"
    );
    // Recreating: the plan on the admitted pod copies nothing into the snapshot (the watch's
    // next copy of the pod will) and otherwise is the plan on the live pod.
    let recreating = with_phase(crr(), Phase::Recreating);
    let admitted = admitted_pod(&recreating, created).expect("no grace to start");
    let on_admitted = plan(&recreating, Some(&admitted), at(1));
    let mut live = pod();
    live.status.get_or_insert_default().container_statuses = Some(vec![app_recreated_and_ready()]);
    let mut on_live = plan(&recreating, Some(&live), at(1));
    assert!(
        on_live
            .actions
            .iter()
            .any(|action| matches!(action, Action::PatchSnapshot(_))),
        "{on_live:?}"
    );
    on_live
        .actions
        .retain(|action| !matches!(action, Action::PatchSnapshot(_)));
    assert_eq!(on_admitted, on_live);
    // An unready grace still to start reads the pod (its gate, its conditions).
    assert_eq!(
        admitted_pod(&with_unready_grace(recreating.clone()), created),
        None
    );
    assert_eq!(admitted_pod(&with_finalizer(recreating), created), None);
    let mut unlabelled = crr();
    unlabelled
        .metadata
        .labels
        .get_or_insert_default()
        .remove(keys::LABEL_POD_UID);
    assert_eq!(admitted_pod(&unlabelled, created), None);
}

fn with_unready_grace(mut crr: ContainerRecreateRequest) -> ContainerRecreateRequest {
    crr.spec.strategy = Some(ContainerRecreateRequestStrategy {
        unready_grace_period_seconds: Some(5),
        ..Default::default()
    });
    crr
}

fn with_finalizer(mut crr: ContainerRecreateRequest) -> ContainerRecreateRequest {
    crr.metadata.finalizers = Some(vec![keys::FINALIZER_UNREADY_ACQUIRED.to_owned()]);
    crr
}

fn deleted(mut crr: ContainerRecreateRequest) -> ContainerRecreateRequest {
    crr.metadata.deletion_timestamp = Some(Time(at(30)));
    crr
}

/// Pod `web` as read from the API server (a resourceVersion: not the admitted pod).
fn pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some(POD_UID.to_owned()),
            resource_version: Some("3".to_owned()),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus::default()),
    }
}

/// `app`'s new container (`app-1`, one restart), running and Ready.
fn app_recreated_and_ready() -> ContainerStatus {
    ContainerStatus {
        name: "app".to_owned(),
        container_id: Some("containerd://app-1".to_owned()),
        restart_count: 1,
        ready: true,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with_gate(mut pod: Pod) -> Pod {
    pod.spec.get_or_insert_default().readiness_gates = Some(vec![PodReadinessGate {
        condition_type: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
    }]);
    pod
}

fn secs(seconds: u64) -> Option<Duration> {
    Some(Duration::from_secs(seconds))
}

fn completion(plan: &Plan) -> &Completion {
    match plan.actions.as_slice() {
        [Action::Complete(completion)] => completion,
        other => panic!("expected one Complete action, got {other:?}"),
    }
}

#[test]
fn new_request_waits_for_the_daemon_until_one_minute_after_creation() {
    let plan = plan(&crr(), Some(&pod()), at(20));
    assert_eq!(plan.actions, vec![]);
    assert_eq!(plan.requeue_after, secs(40));
}

#[test]
fn daemon_silence_for_a_minute_completes_the_request() {
    let plan = plan(&crr(), Some(&pod()), at(60));
    let completion = completion(&plan);
    assert_eq!(completion.reason, CompletionReason::DaemonNotResponding);
    assert_eq!(
        completion.reason.message(),
        "daemon has not responded for a long time"
    );
    assert_eq!(completion.time, at(60));
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn pending_request_has_no_daemon_timeout_and_no_wake_up_without_deadline() {
    let plan = plan(&with_phase(crr(), Phase::Pending), Some(&pod()), at(600));
    assert_eq!(plan, Plan::default());
}

#[test]
fn requeue_falls_on_the_earliest_deadline() {
    let mut request = crr();
    request.spec.active_deadline_seconds = Some(10);
    assert_eq!(plan(&request, Some(&pod()), at(4)).requeue_after, secs(6));
    request.spec.active_deadline_seconds = Some(100);
    assert_eq!(plan(&request, Some(&pod()), at(4)).requeue_after, secs(56));
}

#[test]
fn active_deadline_completes_and_leaves_the_states_as_the_daemon_wrote_them() {
    let mut request = with_phase(crr(), Phase::Recreating);
    request.spec.active_deadline_seconds = Some(3);
    request
        .status
        .get_or_insert_default()
        .container_recreate_states = vec![
        ContainerRecreateRequestContainerRecreateState {
            name: "app".to_owned(),
            phase: Phase::Recreating,
            message: None,
            is_killed: true,
        },
        ContainerRecreateRequestContainerRecreateState {
            name: "sidecar".to_owned(),
            phase: Phase::Pending,
            message: None,
            is_killed: false,
        },
    ];
    let plan = plan(&request, Some(&pod()), at(3));
    let completion = completion(&plan);
    assert_eq!(completion.reason, CompletionReason::ActiveDeadlineExceeded);
    let patch = completion_patch(&request, completion).unwrap();
    let fields = patch.fields();
    assert_eq!(fields.phase, Some(Phase::Completed));
    assert_eq!(fields.completion_time, Some(Time(at(3))));
    assert_eq!(
        fields.message.as_deref(),
        Some("recreating has exceeded the activeDeadlineSeconds"),
        "status.message is upstream's text, which clients compare"
    );
    assert_eq!(
        fields.container_recreate_states, None,
        "the states are not written"
    );
    let succeeded = &fields.conditions.as_ref().unwrap()[0];
    assert_eq!(succeeded.type_, keys::CONDITION_SUCCEEDED);
    assert_eq!(succeeded.status, "False");
    assert_eq!(succeeded.reason, "ActiveDeadlineExceeded");
    assert_eq!(
        succeeded.message,
        "recreating has exceeded the activeDeadlineSeconds; \
             not recreated: app (Recreating, killed), sidecar (Pending)"
    );
    assert_eq!(patch.resource_version(), "7");
}

#[test]
fn the_succeeded_condition_names_only_containers_not_recreated() {
    let mut request = with_phase(crr(), Phase::Recreating);
    request.spec.active_deadline_seconds = Some(5);
    request
        .status
        .get_or_insert_default()
        .container_recreate_states = vec![ContainerRecreateRequestContainerRecreateState {
        name: "app".to_owned(),
        phase: Phase::Succeeded,
        message: None,
        is_killed: true,
    }];
    assert_eq!(
        naming_not_recreated(&request, "late"),
        "late; not recreated: sidecar (Pending)",
        "a container the daemon never reported counts as Pending"
    );
    request.status.as_mut().unwrap().container_recreate_states[0].phase = Phase::Failed;
    request.status.as_mut().unwrap().container_recreate_states[0].is_killed = false;
    assert_eq!(
        naming_not_recreated(&request, "late"),
        "late; not recreated: app (Failed), sidecar (Pending)"
    );
    request.spec.containers.truncate(1);
    request.status.as_mut().unwrap().container_recreate_states[0].phase = Phase::Succeeded;
    assert_eq!(naming_not_recreated(&request, "late"), "late");
}

#[test]
fn a_daemon_that_never_answered_leaves_no_states() {
    let request = crr();
    let plan = plan(&request, Some(&pod()), at(120));
    let completion = completion(&plan);
    assert_eq!(completion.reason, CompletionReason::DaemonNotResponding);
    let patch = completion_patch(&request, completion).unwrap();
    assert_eq!(patch.fields().container_recreate_states, None);
    assert_eq!(
        patch.fields().conditions.as_ref().unwrap()[0].message,
        "daemon has not responded for a long time; \
             not recreated: app (Pending), sidecar (Pending)"
    );
}

#[test]
fn missing_pod_completes_with_pod_has_gone() {
    let request = with_phase(crr(), Phase::Recreating);
    let plan = plan(&request, None, at(5));
    let completion = completion(&plan);
    assert_eq!(completion.reason, CompletionReason::PodGone);
    assert_eq!(completion.reason.message(), "pod has gone");
    let patch = completion_patch(&request, completion).unwrap();
    assert_eq!(patch.fields().container_recreate_states, None);
    assert_eq!(patch.fields().message.as_deref(), Some("pod has gone"));
}

#[test]
fn terminating_or_replaced_pod_completes_with_pod_has_gone() {
    let mut terminating = pod();
    terminating.metadata.deletion_timestamp = Some(Time(at(1)));
    let mut replaced = pod();
    replaced.metadata.uid = Some("uid-2".to_owned());
    for pod in [terminating, replaced] {
        let plan = plan(&crr(), Some(&pod), at(5));
        assert_eq!(completion(&plan).reason, CompletionReason::PodGone);
    }
}

#[test]
fn recreating_request_snapshots_new_containers_and_resyncs_every_three_seconds() {
    let mut pod = pod();
    pod.status.get_or_insert_default().container_statuses = Some(vec![app_recreated_and_ready()]);
    let request = with_phase(crr(), Phase::Recreating);
    let first = plan(&request, Some(&pod), at(5));
    let Some(Action::PatchSnapshot(snapshot)) = first.actions.first() else {
        panic!("expected a snapshot patch, got {:?}", first.actions);
    };
    assert_eq!(snapshot.len(), 1);
    assert_eq!(snapshot[0].container_id, "containerd://app-1");
    assert_eq!(first.requeue_after, secs(3));

    // Once stored, the same snapshot is not written again.
    let mut stored = request.clone();
    stored
        .status
        .get_or_insert_default()
        .container_status_snapshot = snapshot.clone();
    let again = plan(&stored, Some(&pod), at(6));
    assert_eq!(again.actions, vec![]);
    assert_eq!(again.requeue_after, secs(3));
}

/// Every requested container back and Ready: with no minStartedSeconds the daemon completes now
/// and writes that snapshot with the completion, so the operator does not race it; with
/// minStartedSeconds to wait, the operator writes it as before.
#[test]
fn a_snapshot_of_every_container_ready_is_left_to_the_daemon_unless_it_must_wait() {
    let mut pod = pod();
    pod.status.get_or_insert_default().container_statuses = Some(vec![app_recreated_and_ready()]);
    let mut request = with_phase(crr(), Phase::Recreating);
    request
        .spec
        .containers
        .retain(|container| container.name == "app");
    let plan_now = plan(&request, Some(&pod), at(5));
    assert!(
        !plan_now
            .actions
            .iter()
            .any(|action| matches!(action, Action::PatchSnapshot(_))),
        "{:?}",
        plan_now.actions
    );
    assert_eq!(plan_now.requeue_after, secs(3), "still looked at again");

    request.spec.strategy = Some(ContainerRecreateRequestStrategy {
        min_started_seconds: 5,
        ..Default::default()
    });
    let waiting = plan(&request, Some(&pod), at(5));
    assert!(
        matches!(waiting.actions.first(), Some(Action::PatchSnapshot(snapshot)) if snapshot[0].ready),
        "{:?}",
        waiting.actions
    );
}

#[test]
fn unready_grace_takes_the_gated_pod_out_of_endpoints_finalizer_first() {
    let request = with_unready_grace(with_phase(crr(), Phase::Recreating));
    let plan = plan(&request, Some(&with_gate(pod())), at(7));
    assert_eq!(plan.actions.len(), 3);
    assert_eq!(plan.actions[0], Action::AddFinalizer);
    assert_eq!(plan.actions[1], Action::AcquirePodReadiness);
    assert_eq!(
        plan.actions[2],
        Action::MarkPreRecreateGrace {
            time: at(7),
            missing_readiness_gate: false,
        }
    );
    let patch = pre_recreate_grace_patch(&request, at(7), false).unwrap();
    let conditions = patch.fields().conditions.as_ref().unwrap();
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0].type_, keys::CONDITION_PRE_RECREATE_GRACE);
    assert_eq!(conditions[0].status, "True");
    assert_eq!(conditions[0].last_transition_time, Time(at(7)));
    assert_eq!(patch.fields().message, None);
}

#[test]
fn unready_grace_does_not_add_the_finalizer_twice() {
    let request = with_finalizer(with_unready_grace(with_phase(crr(), Phase::Recreating)));
    let plan = plan(&request, Some(&with_gate(pod())), at(7));
    assert_eq!(plan.actions[0], Action::AcquirePodReadiness);
}

#[test]
fn unready_grace_waits_for_the_daemon_to_pick_the_request() {
    let request = with_unready_grace(with_phase(crr(), Phase::Pending));
    assert_eq!(
        plan(&request, Some(&with_gate(pod())), at(7)).actions,
        vec![]
    );
}

#[test]
fn unready_grace_is_done_once() {
    let mut request = with_finalizer(with_unready_grace(with_phase(crr(), Phase::Recreating)));
    request.status.get_or_insert_default().conditions = vec![Condition {
        type_: keys::CONDITION_PRE_RECREATE_GRACE.to_owned(),
        status: "True".to_owned(),
        reason: keys::REASON_PRE_RECREATE_GRACE.to_owned(),
        message: String::new(),
        last_transition_time: Time(at(7)),
        observed_generation: None,
    }];
    assert_eq!(
        plan(&request, Some(&with_gate(pod())), at(9)).actions,
        vec![]
    );
}

#[test]
fn pod_without_readiness_gate_gets_a_message_but_the_grace_still_starts() {
    let request = with_unready_grace(with_phase(crr(), Phase::Recreating));
    let plan = plan(&request, Some(&pod()), at(7));
    assert_eq!(
        plan.actions,
        vec![Action::MarkPreRecreateGrace {
            time: at(7),
            missing_readiness_gate: true,
        }]
    );
    let patch = pre_recreate_grace_patch(&request, at(7), true).unwrap();
    assert_eq!(
        patch.fields().conditions.as_ref().unwrap()[0].status,
        "True"
    );
    assert_eq!(
        patch.fields().message.as_deref(),
        Some(MESSAGE_NO_READINESS_GATE)
    );
}

#[test]
fn existing_grace_transition_time_is_never_moved_forward() {
    let grace = |status: &str| Condition {
        type_: keys::CONDITION_PRE_RECREATE_GRACE.to_owned(),
        status: status.to_owned(),
        reason: keys::REASON_PRE_RECREATE_GRACE.to_owned(),
        message: String::new(),
        last_transition_time: Time(at(1)),
        observed_generation: None,
    };
    let mut request = with_unready_grace(with_phase(crr(), Phase::Recreating));
    request.status.get_or_insert_default().conditions = vec![grace("True")];
    let patch = pre_recreate_grace_patch(&request, at(9), false).unwrap();
    let conditions = patch.fields().conditions.as_ref().unwrap();
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0].last_transition_time, Time(at(1)));
    assert_eq!(conditions[0].message, keys::MESSAGE_PRE_RECREATE_GRACE);
    request.status.get_or_insert_default().conditions = vec![grace("False")];
    let patch = pre_recreate_grace_patch(&request, at(9), false).unwrap();
    let conditions = patch.fields().conditions.as_ref().unwrap();
    assert_eq!(conditions[0].last_transition_time, Time(at(9)));
}

#[test]
fn status_patches_are_preconditioned_on_the_request_they_are_built_from() {
    let mut request = with_unready_grace(with_phase(crr(), Phase::Recreating));
    request.metadata.resource_version = Some("8".to_owned());
    let completion = Completion {
        reason: CompletionReason::PodGone,
        time: at(3),
    };
    assert_eq!(
        completion_patch(&request, &completion)
            .unwrap()
            .resource_version(),
        "8"
    );
    assert_eq!(
        pre_recreate_grace_patch(&request, at(3), false)
            .unwrap()
            .resource_version(),
        "8"
    );
    assert_eq!(
        snapshot_patch(&request, vec![]).unwrap().resource_version(),
        "8"
    );
    request.metadata.resource_version = None;
    assert!(completion_patch(&request, &completion).is_err());
}

#[test]
fn a_phase_completed_request_counts_as_finished() {
    let mut request = with_finalizer(with_phase(crr(), Phase::Completed));
    request.metadata.labels = None;
    let plan = plan(&request, None, at(5));
    assert_eq!(
        plan.actions,
        vec![Action::ReleasePodReadiness, Action::RemoveFinalizer]
    );
}

#[test]
fn completed_request_drops_the_active_label_and_leaves_its_ttl_to_the_settled_index() {
    let mut request = completed_at(crr(), 100);
    request.spec.ttl_seconds_after_finished = Some(3);
    let plan = plan(&request, Some(&pod()), at(101));
    assert_eq!(plan.actions, vec![Action::RemoveActiveLabel]);
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn a_completed_request_of_a_rollout_waits_for_its_ttl_in_the_cache() {
    let mut request = completed_at(crr(), 100);
    request.spec.ttl_seconds_after_finished = Some(3);
    request
        .metadata
        .labels
        .get_or_insert_default()
        .insert(keys::LABEL_ROLLOUT.to_owned(), "web".to_owned());
    let plan = plan(&request, Some(&pod()), at(101));
    assert_eq!(plan.actions, vec![Action::RemoveActiveLabel]);
    assert_eq!(plan.requeue_after, secs(2));
}

#[test]
fn completed_request_is_deleted_when_its_ttl_has_passed() {
    let mut request = completed_at(crr(), 100);
    request.metadata.labels = None;
    request.spec.ttl_seconds_after_finished = Some(3);
    let plan = plan(&request, None, at(103));
    assert_eq!(plan.actions, vec![Action::Delete]);
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn a_request_past_its_ttl_is_deleted_with_its_active_label_on() {
    // Dropping the label first would settle it into the settled index, whose loop would delete
    // it a second time.
    let mut request = completed_at(crr(), 100);
    request.spec.ttl_seconds_after_finished = Some(3);
    assert!(request.labels().contains_key(keys::LABEL_ACTIVE));
    let plan = plan(&request, Some(&pod()), at(104));
    assert_eq!(plan.actions, vec![Action::Delete]);
}

#[test]
fn completed_request_without_ttl_stays() {
    let mut request = completed_at(crr(), 100);
    request.metadata.labels = None;
    assert_eq!(plan(&request, None, at(10_000)), Plan::default());
}

#[test]
fn completed_request_lets_go_of_the_pod_before_anything_else() {
    let mut request = with_finalizer(completed_at(crr(), 100));
    request.spec.ttl_seconds_after_finished = Some(0);
    let plan = plan(&request, Some(&pod()), at(100));
    assert_eq!(
        plan.actions,
        vec![
            Action::ReleasePodReadiness,
            Action::RemoveFinalizer,
            Action::Delete,
        ]
    );
}

#[test]
fn deleted_request_mid_flight_restores_readiness_and_nothing_else() {
    let request = deleted(with_finalizer(with_phase(crr(), Phase::Recreating)));
    let plan = plan(&request, Some(&with_gate(pod())), at(31));
    assert_eq!(
        plan.actions,
        vec![Action::ReleasePodReadiness, Action::RemoveFinalizer]
    );
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn deleted_request_without_finalizer_needs_nothing() {
    let request = deleted(with_phase(crr(), Phase::Recreating));
    assert_eq!(plan(&request, None, at(31)), Plan::default());
}

#[test]
fn time_to_completion_is_completion_minus_creation() {
    assert_eq!(
        time_to_completion(&completed_at(crr(), 42)),
        Some(Duration::from_secs(42))
    );
    assert_eq!(time_to_completion(&crr()), None);
}

#[test]
fn completion_keeps_other_conditions() {
    let mut request = with_phase(crr(), Phase::Recreating);
    request.spec.active_deadline_seconds = Some(3);
    request.status.get_or_insert_default().conditions = vec![Condition {
        type_: keys::CONDITION_PRE_RECREATE_GRACE.to_owned(),
        status: "True".to_owned(),
        reason: String::new(),
        message: String::new(),
        last_transition_time: Time(at(1)),
        observed_generation: None,
    }];
    let plan = plan(&request, Some(&pod()), at(4));
    let patch = completion_patch(&request, completion(&plan)).unwrap();
    let types: Vec<_> = patch
        .fields()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|condition| condition.type_.as_str())
        .collect();
    assert_eq!(types, vec!["PreRecreateGrace", "Succeeded"]);
}

#[test]
fn status_default_is_unpicked() {
    // A status object without phase counts as not yet picked up by the daemon.
    let mut request = crr();
    request.status = Some(ContainerRecreateRequestStatus::default());
    assert_eq!(plan(&request, Some(&pod()), at(59)).requeue_after, secs(1));
}

/// A rollout `web` with UID `rollout-uid` in `phase` (none: not reconciled yet).
fn rollout_in(phase: Option<&str>) -> crr_crds::rollout::ContainerRecreateRollout {
    let mut rollout = crr_crds::rollout::ContainerRecreateRollout::new(
        "web",
        crr_crds::rollout::ContainerRecreateRolloutSpec::default(),
    );
    rollout.metadata.uid = Some("rollout-uid".to_owned());
    rollout.status = phase.map(|phase| crr_crds::rollout::ContainerRecreateRolloutStatus {
        phase: Some(phase.to_owned()),
        ..Default::default()
    });
    rollout
}

/// A finished request of rollout `web`, owned by it.
fn rollouts_request(ttl: Option<i32>) -> ContainerRecreateRequest {
    let mut request = completed_at(crr(), 100);
    request.spec.ttl_seconds_after_finished = ttl;
    request
        .metadata
        .labels
        .get_or_insert_default()
        .insert(keys::LABEL_ROLLOUT.to_owned(), "web".to_owned());
    request.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "crr.dev/v1alpha1".to_owned(),
            kind: "ContainerRecreateRollout".to_owned(),
            name: "web".to_owned(),
            uid: "rollout-uid".to_owned(),
            controller: Some(true),
            ..Default::default()
        },
    ]);
    request
}

#[test]
fn a_running_rollout_keeps_its_request_past_the_ttl() {
    let request = rollouts_request(Some(3));
    for phase in [None, Some("Progressing"), Some("Paused")] {
        assert!(
            rollout_keeps_request(&request, Some(&rollout_in(phase))),
            "{phase:?}"
        );
    }
    for phase in ["Completed", "Failed"] {
        assert!(
            !rollout_keeps_request(&request, Some(&rollout_in(Some(phase)))),
            "{phase}"
        );
    }
    assert!(
        !rollout_keeps_request(&request, None),
        "the rollout is gone"
    );
}

#[test]
fn a_new_rollout_under_the_same_name_does_not_keep_an_old_request() {
    let request = rollouts_request(Some(3));
    let mut other = rollout_in(Some("Progressing"));
    other.metadata.uid = Some("another-uid".to_owned());
    assert!(!rollout_keeps_request(&request, Some(&other)));
}

#[test]
fn a_kept_request_is_looked_at_again_after_its_ttl_or_five_minutes() {
    assert_eq!(
        rollout_keeps_request_recheck(&rollouts_request(Some(3))),
        ROLLOUT_RUNNING_RECHECK
    );
    assert_eq!(
        rollout_keeps_request_recheck(&rollouts_request(Some(3600))),
        Duration::from_secs(3600)
    );
    assert_eq!(
        rollout_keeps_request_recheck(&rollouts_request(None)),
        ROLLOUT_RUNNING_RECHECK
    );
}
