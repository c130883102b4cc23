//! v1alpha1 ⇄ v1beta1 conversion: the mapping the spec describes, checked on examples, and the
//! round trips checked as properties over generated objects.

use std::collections::BTreeMap;

use crr_crds::conversion::{self, pre_recreate_grace_condition, to_v1alpha1, to_v1beta1};
use crr_crds::keys::*;
use crr_crds::v1beta1::{
    ContainerRecreateRequestContainer, ContainerRecreateRequestContainerContext,
    ContainerRecreateRequestContainerRecreateState, ContainerRecreateRequestStrategy,
    ContainerRecreateRequestSyncContainerStatus, Phase, ProbeHandler,
};
use crr_crds::{v1alpha1, v1beta1};
use k8s_openapi::api::core::v1::{ContainerPort, ExecAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use proptest::prelude::*;

fn time(second: i64) -> Time {
    Time(jiff::Timestamp::from_second(second).unwrap())
}

fn snapshot() -> Vec<ContainerRecreateRequestSyncContainerStatus> {
    vec![ContainerRecreateRequestSyncContainerStatus {
        name: "app".into(),
        ready: true,
        restart_count: 1,
        container_id: "containerd://new".into(),
    }]
}

fn alpha_with_annotations(annotations: &[(&str, &str)]) -> v1alpha1::ContainerRecreateRequest {
    let mut crr = v1alpha1::ContainerRecreateRequest::new(
        "crr",
        v1alpha1::ContainerRecreateRequestSpec {
            pod_name: "pod".into(),
            containers: vec![ContainerRecreateRequestContainer {
                name: "app".into(),
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    crr.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    crr.status = Some(v1alpha1::ContainerRecreateRequestStatus {
        phase: Some(Phase::Recreating),
        ..Default::default()
    });
    crr
}

#[test]
fn legacy_annotations_become_typed_status_and_leave_the_v1beta1_view() {
    let alpha = alpha_with_annotations(&[
        (
            ANNOTATION_SYNC_CONTAINER_STATUSES,
            r#"[{"name":"app","ready":true,"restartCount":1,"containerID":"containerd://new"}]"#,
        ),
        (ANNOTATION_UNREADY_ACQUIRED, "2026-01-02T03:04:05Z"),
        ("team", "payments"),
    ]);
    let beta = to_v1beta1(alpha);
    let status = beta.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(Phase::Recreating));
    assert_eq!(status.container_status_snapshot, snapshot());
    assert_eq!(
        status.conditions,
        vec![pre_recreate_grace_condition(time(1_767_323_045))]
    );
    let annotations = beta.metadata.annotations.unwrap();
    assert_eq!(
        annotations,
        BTreeMap::from([("team".to_string(), "payments".to_string())])
    );
}

#[test]
fn typed_status_becomes_legacy_annotations_for_v1alpha1_clients() {
    let mut beta = to_v1beta1(alpha_with_annotations(&[]));
    let status = beta.status.as_mut().unwrap();
    status.container_status_snapshot = snapshot();
    status.conditions = vec![pre_recreate_grace_condition(time(1_767_323_045))];
    let alpha = to_v1alpha1(beta);
    let annotations = alpha.metadata.annotations.unwrap();
    assert_eq!(
        annotations[ANNOTATION_UNREADY_ACQUIRED],
        "2026-01-02T03:04:05Z"
    );
    let statuses: serde_json::Value =
        serde_json::from_str(&annotations[ANNOTATION_SYNC_CONTAINER_STATUSES]).unwrap();
    assert_eq!(
        statuses,
        serde_json::json!([{"name":"app","ready":true,"restartCount":1,"containerID":"containerd://new"}])
    );
    // The upstream-shaped condition needs no extra annotation.
    assert!(!annotations.contains_key(ANNOTATION_STATUS_CONDITIONS));
    assert_eq!(alpha.status.unwrap().phase, Some(Phase::Recreating));
}

#[test]
fn conditions_the_legacy_annotation_cannot_express_survive_a_v1alpha1_round_trip() {
    let mut beta = to_v1beta1(alpha_with_annotations(&[]));
    let succeeded = Condition {
        type_: CONDITION_SUCCEEDED.into(),
        status: "False".into(),
        reason: "ContainerFailed".into(),
        message: "app: kill container error".into(),
        last_transition_time: time(1_767_323_100),
        observed_generation: Some(1),
    };
    beta.status.as_mut().unwrap().conditions =
        vec![pre_recreate_grace_condition(time(1_767_323_045)), succeeded];
    let alpha = to_v1alpha1(beta.clone());
    let annotations = alpha.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        annotations[ANNOTATION_UNREADY_ACQUIRED],
        "2026-01-02T03:04:05Z"
    );
    assert!(annotations.contains_key(ANNOTATION_STATUS_CONDITIONS));
    assert_eq!(to_v1beta1(alpha), beta);
}

#[test]
fn unparseable_legacy_annotations_are_kept_not_dropped() {
    let alpha = alpha_with_annotations(&[
        (ANNOTATION_SYNC_CONTAINER_STATUSES, "not json"),
        (ANNOTATION_UNREADY_ACQUIRED, "yesterday"),
    ]);
    let beta = to_v1beta1(alpha.clone());
    let status = beta.status.as_ref().unwrap();
    assert!(status.container_status_snapshot.is_empty());
    assert!(status.conditions.is_empty());
    let annotations = beta.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[ANNOTATION_SYNC_CONTAINER_STATUSES], "not json");
    assert_eq!(annotations[ANNOTATION_UNREADY_ACQUIRED], "yesterday");
    assert_eq!(to_v1alpha1(beta), alpha);
}

#[test]
fn annotations_alone_create_a_status_in_v1beta1_and_disappear_again() {
    let mut alpha =
        alpha_with_annotations(&[(ANNOTATION_UNREADY_ACQUIRED, "2026-01-02T03:04:05Z")]);
    alpha.status = None;
    let beta = to_v1beta1(alpha.clone());
    let status = beta.status.as_ref().unwrap();
    assert_eq!(status.phase, None);
    assert_eq!(status.conditions.len(), 1);
    assert_eq!(to_v1alpha1(beta), alpha);
}

#[test]
fn convert_json_rejects_unknown_versions_and_invalid_objects() {
    let object = serde_json::json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
        "metadata": {"name": "x"}, "spec": {"podName": "p", "containers": [{"name": "app"}]}});
    let error = conversion::convert_json(object.clone(), "apps.kruise.io/v2").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("unsupported apiVersion \"apps.kruise.io/v2\""),
        "{error}"
    );
    let mut wrong_group = object.clone();
    wrong_group["apiVersion"] = "apps/v1".into();
    assert!(conversion::convert_json(wrong_group, "apps.kruise.io/v1beta1").is_err());
    let mut broken = object.clone();
    broken["spec"]["containers"] = "app".into();
    let error = conversion::convert_json(broken, "apps.kruise.io/v1beta1").unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("invalid apps.kruise.io/v1alpha1 ContainerRecreateRequest"),
        "{error}"
    );
    // Converting to the version the object already has is the identity (the API server may ask).
    let same = conversion::convert_json(object.clone(), "apps.kruise.io/v1alpha1").unwrap();
    assert_eq!(same, object);
}

// ---- properties -------------------------------------------------------------------------------

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,8}"
}

fn timestamp() -> impl Strategy<Value = Time> {
    (0i64..4_000_000_000).prop_map(time)
}

fn optional_text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("[ -~]{0,20}")
}

fn user_annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map("[a-z]{1,6}\\.example/[a-z]{1,6}", "[ -~]{0,12}", 0..3)
}

fn container() -> impl Strategy<Value = ContainerRecreateRequestContainer> {
    (
        name(),
        any::<bool>(),
        proptest::option::of((name(), 0i32..10)),
        proptest::option::of(1i32..65535),
    )
        .prop_map(
            |(name, with_pre_stop, context, port)| ContainerRecreateRequestContainer {
                pre_stop: with_pre_stop.then(|| ProbeHandler {
                    exec: Some(ExecAction {
                        command: Some(vec!["sh".into(), "-c".into(), format!("echo {name}")]),
                    }),
                    ..Default::default()
                }),
                ports: port.map(|port| {
                    vec![ContainerPort {
                        container_port: port,
                        name: Some("http".into()),
                        ..Default::default()
                    }]
                }),
                status_context: context.map(|(id, restart_count)| {
                    ContainerRecreateRequestContainerContext {
                        container_id: format!("containerd://{id}"),
                        restart_count,
                    }
                }),
                name,
            },
        )
}

fn strategy() -> impl Strategy<Value = ContainerRecreateRequestStrategy> {
    (
        proptest::option::of(prop_oneof![
            Just("Fail".to_string()),
            Just("Ignore".to_string())
        ]),
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(0i64..100),
        proptest::option::of(0i64..100),
        0i32..100,
    )
        .prop_map(
            |(
                failure_policy,
                ordered_recreate,
                force_recreate,
                termination,
                unready,
                min_started,
            )| {
                ContainerRecreateRequestStrategy {
                    failure_policy,
                    ordered_recreate,
                    force_recreate,
                    termination_grace_period_seconds: termination,
                    unready_grace_period_seconds: unready,
                    min_started_seconds: min_started,
                }
            },
        )
}

fn phase() -> impl Strategy<Value = Phase> {
    prop_oneof![
        Just(Phase::Pending),
        Just(Phase::Recreating),
        Just(Phase::Succeeded),
        Just(Phase::Failed),
        Just(Phase::Completed)
    ]
}

fn condition() -> impl Strategy<Value = Condition> {
    (
        prop_oneof![
            Just(CONDITION_PRE_RECREATE_GRACE.to_string()),
            Just(CONDITION_SUCCEEDED.to_string()),
            name()
        ],
        prop_oneof![Just("True".to_string()), Just("False".to_string())],
        // Whole seconds: metav1.Time has no fractions on the wire.
        timestamp(),
        any::<bool>(),
    )
        .prop_map(|(type_, status, at, canonical)| {
            if canonical && type_ == CONDITION_PRE_RECREATE_GRACE {
                return pre_recreate_grace_condition(at);
            }
            Condition {
                type_,
                status,
                reason: "Reason".into(),
                message: "message".into(),
                last_transition_time: at,
                observed_generation: None,
            }
        })
}

fn beta_status() -> impl Strategy<Value = v1beta1::ContainerRecreateRequestStatus> {
    (
        proptest::option::of(phase()),
        proptest::option::of(timestamp()),
        optional_text(),
        proptest::collection::vec((name(), phase(), optional_text(), any::<bool>()), 0..3),
        proptest::collection::vec((name(), any::<bool>(), 0i32..5, name()), 0..3),
        proptest::collection::vec(condition(), 0..3),
    )
        .prop_map(
            |(phase, completion_time, message, states, snapshot, mut conditions)| {
                // Conditions are a map keyed by type.
                let mut seen = std::collections::BTreeSet::new();
                conditions.retain(|condition| seen.insert(condition.type_.clone()));
                v1beta1::ContainerRecreateRequestStatus {
                    phase,
                    completion_time,
                    message,
                    container_recreate_states: states
                        .into_iter()
                        .map(|(name, phase, message, is_killed)| {
                            ContainerRecreateRequestContainerRecreateState {
                                name,
                                phase,
                                message,
                                is_killed,
                            }
                        })
                        .collect(),
                    container_status_snapshot: snapshot
                        .into_iter()
                        .map(|(name, ready, restart_count, id)| {
                            ContainerRecreateRequestSyncContainerStatus {
                                name,
                                ready,
                                restart_count,
                                container_id: format!("containerd://{id}"),
                            }
                        })
                        .collect(),
                    conditions,
                }
            },
        )
}

fn beta_object() -> impl Strategy<Value = v1beta1::ContainerRecreateRequest> {
    (
        name(),
        user_annotations(),
        name(),
        proptest::collection::vec(container(), 1..3),
        proptest::option::of(strategy()),
        proptest::option::of(3i64..1000),
        proptest::option::of(0i32..1000),
        proptest::option::of(beta_status()),
    )
        .prop_map(
            |(name, annotations, pod_name, containers, strategy, deadline, ttl, status)| {
                v1beta1::ContainerRecreateRequest {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some("default".into()),
                        annotations: (!annotations.is_empty()).then_some(annotations),
                        labels: Some(BTreeMap::from([(
                            LABEL_ACTIVE.to_string(),
                            "true".to_string(),
                        )])),
                        ..Default::default()
                    },
                    spec: v1beta1::ContainerRecreateRequestSpec {
                        pod_name,
                        containers,
                        strategy,
                        active_deadline_seconds: deadline,
                        ttl_seconds_after_finished: ttl,
                    },
                    status,
                }
            },
        )
}

proptest! {
    #[test]
    fn v1beta1_to_v1alpha1_and_back_is_the_identity(beta in beta_object()) {
        prop_assert_eq!(to_v1beta1(to_v1alpha1(beta.clone())), beta);
    }

    #[test]
    fn v1alpha1_to_v1beta1_and_back_is_the_identity(beta in beta_object()) {
        // Every v1alpha1 object the system writes is the image of some v1beta1 object.
        let alpha = to_v1alpha1(beta);
        prop_assert_eq!(to_v1alpha1(to_v1beta1(alpha.clone())), alpha);
    }

    #[test]
    fn json_round_trip_through_the_other_version_is_the_identity(beta in beta_object()) {
        let json = serde_json::to_value(&beta).unwrap();
        let alpha = conversion::convert_json(json.clone(), "apps.kruise.io/v1alpha1").unwrap();
        prop_assert_eq!(&alpha["apiVersion"], "apps.kruise.io/v1alpha1");
        let back = conversion::convert_json(alpha, "apps.kruise.io/v1beta1").unwrap();
        prop_assert_eq!(back, json);
    }

    #[test]
    fn raw_conversion_gives_what_the_value_path_gives(beta in beta_object()) {
        let json = serde_json::to_value(&beta).unwrap();
        let raw = serde_json::value::RawValue::from_string(json.to_string()).unwrap();
        for (desired, api_version) in [
            (conversion::Version::V1alpha1, "apps.kruise.io/v1alpha1"),
            (conversion::Version::V1beta1, "apps.kruise.io/v1beta1"),
        ] {
            let by_value = conversion::convert_json(json.clone(), api_version).unwrap();
            let by_raw = conversion::convert_raw(&raw, desired).unwrap();
            let by_raw: serde_json::Value = serde_json::from_str(by_raw.get()).unwrap();
            prop_assert_eq!(by_raw, by_value);
        }
    }

    #[test]
    fn decoding_arbitrary_json_never_panics(text in "\\PC{0,200}") {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
            let _ = conversion::convert_json(value, "apps.kruise.io/v1beta1");
        }
        if let Ok(raw) = serde_json::from_str::<Box<serde_json::value::RawValue>>(&text) {
            let _ = conversion::convert_raw(&raw, conversion::Version::V1alpha1);
        }
    }
}
