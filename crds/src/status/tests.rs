use super::*;
use crate::v1beta1::{ContainerRecreateRequestContainer, ContainerRecreateRequestSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

fn time(seconds: i64) -> serde_json::Value {
    serde_json::to_value(Time(at(seconds))).unwrap()
}

fn request(status: Option<ContainerRecreateRequestStatus>) -> ContainerRecreateRequest {
    ContainerRecreateRequest {
        metadata: ObjectMeta {
            name: Some("crr-a".to_owned()),
            namespace: Some("ns".to_owned()),
            resource_version: Some("7".to_owned()),
            generation: Some(1),
            ..Default::default()
        },
        spec: ContainerRecreateRequestSpec {
            pod_name: "web".to_owned(),
            containers: vec![ContainerRecreateRequestContainer {
                name: "app".to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        },
        status,
    }
}

fn state(
    name: &str,
    phase: Phase,
    is_killed: bool,
) -> ContainerRecreateRequestContainerRecreateState {
    ContainerRecreateRequestContainerRecreateState {
        name: name.to_owned(),
        phase,
        message: None,
        is_killed,
    }
}

fn condition(type_: &str, status: &str, seconds: i64) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: format!("{type_}Reason"),
        message: String::new(),
        last_transition_time: Time(at(seconds)),
        observed_generation: None,
    }
}

fn json_of(patch: &StatusPatch) -> serde_json::Value {
    serde_json::to_value(patch).unwrap()
}

#[test]
fn is_finished_once_completion_time_or_phase_completed_is_set() {
    let status = |phase: Option<Phase>, completed: bool| {
        Some(ContainerRecreateRequestStatus {
            phase,
            completion_time: completed.then(|| Time(at(0))),
            ..Default::default()
        })
    };
    let cases = [
        ("no status", None, false),
        ("picked by nobody", status(None, false), false),
        ("pending", status(Some(Phase::Pending), false), false),
        ("recreating", status(Some(Phase::Recreating), false), false),
        ("completed", status(Some(Phase::Completed), true), true),
        ("completionTime only", status(None, true), true),
        (
            "recreating with a completionTime (overwritten completion)",
            status(Some(Phase::Recreating), true),
            true,
        ),
        (
            "phase Completed only",
            status(Some(Phase::Completed), false),
            true,
        ),
    ];
    for (name, status, finished) in cases {
        assert_eq!(is_finished(&request(status)), finished, "{name}");
    }
}

#[test]
fn deletion_alone_does_not_finish_a_request() {
    let mut crr = request(None);
    crr.metadata.deletion_timestamp = Some(Time(at(1)));
    assert!(!is_finished(&crr));
}

#[test]
fn set_condition_keeps_transition_time_unless_the_status_changes() {
    struct Case {
        name: &'static str,
        existing: Vec<Condition>,
        set: Condition,
        expected: Vec<Condition>,
    }
    let grace = |status, seconds| condition("PreRecreateGrace", status, seconds);
    let cases = [
        Case {
            name: "new type is appended with its own time",
            existing: vec![condition("Other", "True", 1)],
            set: grace("True", 9),
            expected: vec![condition("Other", "True", 1), grace("True", 9)],
        },
        Case {
            name: "same status keeps the old time, takes the rest",
            existing: vec![grace("True", 1)],
            set: Condition {
                message: "again".to_owned(),
                ..grace("True", 9)
            },
            expected: vec![Condition {
                message: "again".to_owned(),
                ..grace("True", 1)
            }],
        },
        Case {
            name: "changed status takes the new time",
            existing: vec![grace("True", 1)],
            set: grace("False", 9),
            expected: vec![grace("False", 9)],
        },
        Case {
            name: "replaced in place, others untouched",
            existing: vec![grace("True", 1), condition("Other", "False", 2)],
            set: grace("False", 9),
            expected: vec![grace("False", 9), condition("Other", "False", 2)],
        },
    ];
    for case in cases {
        let mut conditions = case.existing;
        set_condition(&mut conditions, case.set);
        assert_eq!(conditions, case.expected, "{}", case.name);
    }
}

#[test]
fn complete_sets_phase_time_message_states_and_succeeded() {
    struct Case {
        name: &'static str,
        before: ContainerRecreateRequestStatus,
        completion: Completion,
        expected: ContainerRecreateRequestStatus,
    }
    let succeeded = |status: &str, reason: &str, message: &str, seconds| Condition {
        type_: "Succeeded".to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: Time(at(seconds)),
        observed_generation: Some(1),
    };
    let recreating = ContainerRecreateRequestStatus {
        phase: Some(Phase::Recreating),
        container_recreate_states: vec![state("app", Phase::Recreating, true)],
        conditions: vec![condition("PreRecreateGrace", "True", 1)],
        ..Default::default()
    };
    let cases = [
        Case {
            name: "success with states",
            before: recreating.clone(),
            completion: Completion {
                outcome: Outcome::Succeeded,
                reason: "Recreated".to_owned(),
                message: String::new(),
                condition_message: None,
                container_recreate_states: Some(vec![state("app", Phase::Succeeded, true)]),
                time: at(30),
            },
            expected: ContainerRecreateRequestStatus {
                phase: Some(Phase::Completed),
                completion_time: Some(Time(at(30))),
                message: Some(String::new()),
                container_recreate_states: vec![state("app", Phase::Succeeded, true)],
                conditions: vec![
                    condition("PreRecreateGrace", "True", 1),
                    succeeded("True", "Recreated", "", 30),
                ],
                ..Default::default()
            },
        },
        Case {
            name: "failure leaving the states as they are",
            before: recreating.clone(),
            completion: Completion {
                outcome: Outcome::Failed,
                reason: "PodGone".to_owned(),
                message: "pod has gone".to_owned(),
                condition_message: None,
                container_recreate_states: None,
                time: at(30),
            },
            expected: ContainerRecreateRequestStatus {
                phase: Some(Phase::Completed),
                completion_time: Some(Time(at(30))),
                message: Some("pod has gone".to_owned()),
                container_recreate_states: vec![state("app", Phase::Recreating, true)],
                conditions: vec![
                    condition("PreRecreateGrace", "True", 1),
                    succeeded("False", "PodGone", "pod has gone", 30),
                ],
                ..Default::default()
            },
        },
        Case {
            name: "never picked up",
            before: ContainerRecreateRequestStatus::default(),
            completion: Completion {
                outcome: Outcome::Failed,
                reason: "DaemonNotResponding".to_owned(),
                message: "daemon has not responded for a long time".to_owned(),
                condition_message: None,
                container_recreate_states: Some(vec![state("app", Phase::Failed, false)]),
                time: at(60),
            },
            expected: ContainerRecreateRequestStatus {
                phase: Some(Phase::Completed),
                completion_time: Some(Time(at(60))),
                message: Some("daemon has not responded for a long time".to_owned()),
                container_recreate_states: vec![state("app", Phase::Failed, false)],
                conditions: vec![succeeded(
                    "False",
                    "DaemonNotResponding",
                    "daemon has not responded for a long time",
                    60,
                )],
                ..Default::default()
            },
        },
    ];
    for case in cases {
        let mut status = case.before;
        complete(&mut status, &case.completion, Some(1));
        assert_eq!(status, case.expected, "{}", case.name);
    }
}

#[test]
fn a_request_without_resource_version_cannot_be_patched() {
    let mut crr = request(None);
    crr.metadata.resource_version = None;
    let error = StatusPatch::of(&crr).unwrap_err();
    assert_eq!(
        error,
        NoResourceVersion {
            kind: "ContainerRecreateRequest",
            namespace: "ns".to_owned(),
            name: "crr-a".to_owned()
        }
    );
    crr.metadata.resource_version = Some(String::new());
    assert!(StatusPatch::of(&crr).is_err());
}

#[test]
fn patch_targets_and_preconditions_on_the_request_it_was_built_from() {
    let patch = StatusPatch::of(&request(None)).unwrap();
    assert_eq!(patch.namespace(), "ns");
    assert_eq!(patch.name(), "crr-a");
    assert_eq!(patch.resource_version(), "7");
    assert_eq!(
        json_of(&patch),
        json!({"metadata": {"resourceVersion": "7"}, "status": {}})
    );
}

/// Each kind of status write the binaries make, against the body they wrote as
/// `serde_json::json!` before the typed patch (the snapshot write gained its precondition).
#[test]
fn serializes_exactly_as_each_former_status_body() {
    let states = vec![
        state("app", Phase::Succeeded, true),
        ContainerRecreateRequestContainerRecreateState {
            message: Some("killing container containerd://app-0".to_owned()),
            ..state("sidecar", Phase::Pending, false)
        },
    ];
    let grace = Condition {
        observed_generation: Some(1),
        ..condition("PreRecreateGrace", "True", 5)
    };
    let recreating = request(Some(ContainerRecreateRequestStatus {
        phase: Some(Phase::Recreating),
        container_recreate_states: states.clone(),
        ..Default::default()
    }));
    let succeeded = |status: &str, reason: &str, message: &str, seconds| {
        json!({
            "type": "Succeeded", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": time(seconds), "observedGeneration": 1,
        })
    };
    let cases: Vec<(&str, StatusPatch, serde_json::Value)> = vec![
        (
            "daemon: picked request starts recreating",
            StatusPatch::of(&request(None))
                .unwrap()
                .phase(Phase::Recreating),
            json!({"metadata": {"resourceVersion": "7"}, "status": {"phase": "Recreating"}}),
        ),
        (
            "daemon: a request waiting behind another is Pending",
            StatusPatch::of(&request(None))
                .unwrap()
                .phase(Phase::Pending),
            json!({"metadata": {"resourceVersion": "7"}, "status": {"phase": "Pending"}}),
        ),
        (
            "daemon: container states (computed, kill marker, after the kill)",
            StatusPatch::of(&recreating)
                .unwrap()
                .container_recreate_states(states.clone()),
            json!({
                "metadata": {"resourceVersion": "7"},
                "status": {"containerRecreateStates": [
                    {"name": "app", "phase": "Succeeded", "isKilled": true},
                    {"name": "sidecar", "phase": "Pending",
                     "message": "killing container containerd://app-0"},
                ]},
            }),
        ),
        (
            "daemon: completion with states",
            StatusPatch::completion(
                &recreating,
                &Completion {
                    outcome: Outcome::Succeeded,
                    reason: "Recreated".to_owned(),
                    message: String::new(),
                    condition_message: None,
                    container_recreate_states: Some(states.clone()),
                    time: at(30),
                },
            )
            .unwrap(),
            json!({
                "metadata": {"resourceVersion": "7"},
                "status": {
                    "phase": "Completed",
                    "completionTime": time(30),
                    "message": "",
                    "conditions": [succeeded("True", "Recreated", "", 30)],
                    "containerRecreateStates": serde_json::to_value(&states).unwrap(),
                },
            }),
        ),
        (
            "daemon: completion without states (no runtime), operator: pod has gone",
            StatusPatch::completion(
                &recreating,
                &Completion {
                    outcome: Outcome::Failed,
                    reason: "PodGone".to_owned(),
                    message: "pod has gone".to_owned(),
                    condition_message: None,
                    container_recreate_states: None,
                    time: at(30),
                },
            )
            .unwrap(),
            json!({
                "metadata": {"resourceVersion": "7"},
                "status": {
                    "phase": "Completed",
                    "completionTime": time(30),
                    "message": "pod has gone",
                    "conditions": [succeeded("False", "PodGone", "pod has gone", 30)],
                },
            }),
        ),
        (
            "operator: unready grace started",
            StatusPatch::of(&recreating)
                .unwrap()
                .condition(grace.clone()),
            json!({
                "metadata": {"resourceVersion": "7"},
                "status": {"conditions": [{
                    "type": "PreRecreateGrace", "status": "True",
                    "reason": "PreRecreateGraceReason", "message": "",
                    "lastTransitionTime": time(5), "observedGeneration": 1,
                }]},
            }),
        ),
        (
            "operator: unready grace started on a pod without the readiness gate",
            StatusPatch::of(&recreating)
                .unwrap()
                .condition(grace.clone())
                .message("no gate"),
            json!({
                "metadata": {"resourceVersion": "7"},
                "status": {
                    "conditions": [{
                        "type": "PreRecreateGrace", "status": "True",
                        "reason": "PreRecreateGraceReason", "message": "",
                        "lastTransitionTime": time(5), "observedGeneration": 1,
                    }],
                    "message": "no gate",
                },
            }),
        ),
        (
            "operator: container status snapshot, now preconditioned",
            StatusPatch::of(&recreating)
                .unwrap()
                .container_status_snapshot(vec![ContainerRecreateRequestSyncContainerStatus {
                    name: "app".to_owned(),
                    ready: true,
                    restart_count: 1,
                    container_id: "containerd://app-1".to_owned(),
                }]),
            json!({
                "metadata": {"resourceVersion": "7"},
                "status": {"containerStatusSnapshot": [
                    {"name": "app", "ready": true, "restartCount": 1,
                     "containerID": "containerd://app-1"},
                ]},
            }),
        ),
    ];
    for (name, patch, expected) in cases {
        assert_eq!(json_of(&patch), expected, "{name}");
    }
}

#[test]
fn condition_builder_starts_from_the_requests_own_conditions() {
    let crr = request(Some(ContainerRecreateRequestStatus {
        conditions: vec![
            condition("Other", "True", 1),
            condition("PreRecreateGrace", "True", 2),
        ],
        ..Default::default()
    }));
    let patch = StatusPatch::of(&crr)
        .unwrap()
        .condition(condition("PreRecreateGrace", "True", 9));
    assert_eq!(
        patch.fields().conditions,
        Some(vec![
            condition("Other", "True", 1),
            condition("PreRecreateGrace", "True", 2),
        ])
    );
}

#[test]
fn completion_patch_equals_complete_applied_to_the_request() {
    let crr = request(Some(ContainerRecreateRequestStatus {
        phase: Some(Phase::Recreating),
        conditions: vec![condition("PreRecreateGrace", "True", 1)],
        ..Default::default()
    }));
    let completion = Completion {
        outcome: Outcome::Failed,
        reason: "ActiveDeadlineExceeded".to_owned(),
        message: "recreating has exceeded the activeDeadlineSeconds".to_owned(),
        condition_message: None,
        container_recreate_states: Some(vec![state("app", Phase::Failed, false)]),
        time: at(3),
    };
    let patch = StatusPatch::completion(&crr, &completion).unwrap();
    let mut expected = crr.status.clone().unwrap();
    complete(&mut expected, &completion, crr.metadata.generation);
    let fields = patch.fields();
    assert_eq!(fields.phase, expected.phase);
    assert_eq!(fields.completion_time, expected.completion_time);
    assert_eq!(fields.message, expected.message);
    assert_eq!(
        fields.container_recreate_states.as_ref(),
        Some(&expected.container_recreate_states)
    );
    assert_eq!(fields.conditions.as_ref(), Some(&expected.conditions));
    assert_eq!(fields.container_status_snapshot, None);
}

#[test]
fn a_rollout_status_patch_carries_the_whole_status_and_the_rollouts_resource_version() {
    let mut rollout: ContainerRecreateRollout = serde_json::from_value(json!({
        "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
        "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "41"},
        "spec": {"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
                 "containers": ["app"]},
    }))
    .expect("a rollout");
    let status = crate::rollout::ContainerRecreateRolloutStatus {
        phase: Some("Progressing".to_owned()),
        recreated: 2,
        ..Default::default()
    };
    let patch = RolloutStatusPatch::of(&rollout, status.clone()).unwrap();
    assert_eq!((patch.namespace(), patch.name()), ("ns", "web"));
    assert_eq!(patch.resource_version(), "41");
    assert_eq!(patch.status(), &status);
    let body = serde_json::to_value(&patch).unwrap();
    assert_eq!(body["metadata"], json!({"resourceVersion": "41"}));
    assert_eq!(body["status"]["phase"], "Progressing");
    assert_eq!(body["status"]["recreated"], 2);
    assert_eq!(body.as_object().unwrap().len(), 2, "{body}");

    rollout.metadata.resource_version = None;
    let error = RolloutStatusPatch::of(&rollout, status).unwrap_err();
    assert_eq!(error.kind, "ContainerRecreateRollout");
    assert!(
        error
            .to_string()
            .contains("ContainerRecreateRollout ns/web"),
        "{error}"
    );
}

#[test]
fn a_queued_request_says_whom_it_waits_for_until_a_patch_moves_it_on() {
    let ahead = request(None);
    let message = queued_message(&ahead);
    assert!(message.starts_with(QUEUED_PREFIX), "{message}");
    assert!(message.contains(&ahead.name_any()), "{message}");
    let marked = StatusPatch::of(&request(None))
        .unwrap()
        .queued_behind(&ahead, at(5), Some(1));
    let written = json_of(&marked);
    assert_eq!(written["status"]["phase"], json!("Pending"));
    assert_eq!(written["status"]["message"], json!(message));
    assert_eq!(written["status"]["conditions"][0]["type"], json!("Queued"));
    assert_eq!(written["status"]["conditions"][0]["status"], json!("True"));
    assert_eq!(
        written["status"]["conditions"][0]["reason"],
        json!("WaitingForRequest")
    );
    let queued: ContainerRecreateRequestStatus =
        serde_json::from_value(written["status"].clone()).unwrap();
    let queued = request(Some(queued));
    let moving = json_of(&StatusPatch::of(&queued).unwrap().phase(Phase::Recreating));
    assert_eq!(moving["status"]["message"], json!(""));
    assert_eq!(moving["status"]["conditions"], json!([]));
    let still = json_of(&StatusPatch::of(&queued).unwrap().phase(Phase::Pending));
    assert_eq!(still["status"].get("message"), None);
    assert_eq!(still["status"].get("conditions"), None);
    // Another message, or none: a phase alone leaves it.
    let plain = StatusPatch::of(&request(None))
        .unwrap()
        .phase(Phase::Recreating);
    assert_eq!(json_of(&plain)["status"].get("message"), None);
    // A completion while queued (its deadline) drops the condition too.
    let mut status = queued.status.clone().unwrap();
    complete(
        &mut status,
        &Completion {
            outcome: Outcome::Failed,
            reason: "ActiveDeadlineExceeded".to_owned(),
            message: "deadline".to_owned(),
            condition_message: None,
            container_recreate_states: None,
            time: at(9),
        },
        Some(1),
    );
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Succeeded"]);
}
