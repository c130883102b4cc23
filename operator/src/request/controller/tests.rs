//! The exact API calls a reconcile makes, against a scripted API server (tower-test mock): each
//! step checks method, path and body, and answers like the API server would.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crr_crds::keys;
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainer, ContainerRecreateRequestSpec,
    ContainerRecreateRequestStatus, ContainerRecreateRequestStrategy, Phase,
};
use http::{Method, StatusCode};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition, PodReadinessGate,
    PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::ResourceExt as _;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::{error_policy, reconcile};
use crate::api_mock::{Handle, api_status, expect, respond};
use crate::request::context::mocked as context;
use crate::request::error::Error;

const CRR_PATH: &str = "/apis/apps.kruise.io/v1beta1/namespaces/ns/containerrecreaterequests/crr-a";
const POD_PATH: &str = "/api/v1/namespaces/ns/pods/web";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";

fn ago(seconds: i64) -> Time {
    Time(Timestamp::now() - SignedDuration::from_secs(seconds))
}

fn crr(phase: Option<Phase>) -> ContainerRecreateRequest {
    ContainerRecreateRequest {
        metadata: ObjectMeta {
            name: Some("crr-a".to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some("crr-uid".to_owned()),
            resource_version: Some("7".to_owned()),
            creation_timestamp: Some(ago(10)),
            labels: Some(BTreeMap::from([
                (keys::LABEL_ACTIVE.to_owned(), "true".to_owned()),
                (keys::LABEL_POD_UID.to_owned(), "pod-uid".to_owned()),
            ])),
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
        status: Some(ContainerRecreateRequestStatus {
            phase,
            ..Default::default()
        }),
    }
}

fn pod(gate: bool, conditions: Vec<PodCondition>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some("pod-uid".to_owned()),
            resource_version: Some("40".to_owned()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            readiness_gates: gate.then(|| {
                vec![PodReadinessGate {
                    condition_type: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
                }]
            }),
            ..Default::default()
        }),
        status: Some(PodStatus {
            conditions: Some(conditions),
            ..Default::default()
        }),
    }
}

async fn expect_event(handle: &mut Handle, reason: &str, regarding_kind: &str) {
    let (body, send) = expect(handle, Method::POST, EVENTS_PATH).await;
    assert_eq!(body["reason"], reason);
    assert_eq!(body["regarding"]["kind"], regarding_kind);
    send.send_response(respond(StatusCode::CREATED, &body));
}

#[tokio::test]
async fn follower_makes_no_api_calls() {
    let (ctx, mut handle, _leader) = context(false);
    let action = reconcile(Arc::new(crr(None)), ctx)
        .await
        .expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let next = tokio::time::timeout(Duration::from_millis(50), handle.next_request()).await;
    assert!(
        !matches!(next, Ok(Some(_))),
        "a follower must not call the API server"
    );
}

#[tokio::test]
async fn deadline_completion_is_one_preconditioned_status_patch_and_events() {
    let (ctx, mut handle, _leader) = context(true);
    let mut request = crr(Some(Phase::Recreating));
    request.spec.active_deadline_seconds = Some(3);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        send.send_response(respond(StatusCode::OK, &pod(false, vec![])));

        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{CRR_PATH}/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(body["status"]["phase"], "Completed");
        assert_eq!(
            body["status"]["message"],
            "recreating has exceeded the activeDeadlineSeconds"
        );
        assert!(body["status"]["completionTime"].is_string());
        assert!(
            body["status"].get("containerRecreateStates").is_none(),
            "the daemon's states are left as they are: {body}"
        );
        assert_eq!(body["status"]["conditions"][0]["type"], "Succeeded");
        assert_eq!(body["status"]["conditions"][0]["status"], "False");
        let mut completed = crr(Some(Phase::Completed));
        completed.metadata.resource_version = Some("8".to_owned());
        send.send_response(respond(StatusCode::OK, &completed));

        expect_event(&mut handle, "ActiveDeadlineExceeded", keys::KIND).await;
        expect_event(&mut handle, "ActiveDeadlineExceeded", "Pod").await;
    });
    let action = reconcile(Arc::new(request), ctx).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn stale_completion_conflicts_instead_of_overwriting() {
    let (ctx, mut handle, _leader) = context(true);
    let mut request = crr(Some(Phase::Recreating));
    request.spec.active_deadline_seconds = Some(3);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        send.send_response(respond(StatusCode::OK, &pod(false, vec![])));
        let (_, send) = expect(&mut handle, Method::PATCH, &format!("{CRR_PATH}/status")).await;
        send.send_response(respond(StatusCode::CONFLICT, &api_status(409, "Conflict")));
    });
    let error = reconcile(Arc::new(request), ctx)
        .await
        .expect_err("conflict");
    assert_eq!(error.kind(), "conflict");
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn unready_grace_adds_finalizer_then_holder_then_condition() {
    let (ctx, mut handle, _leader) = context(true);
    let mut request = crr(Some(Phase::Recreating));
    request.spec.strategy = Some(ContainerRecreateRequestStrategy {
        unready_grace_period_seconds: Some(5),
        ..Default::default()
    });
    let server = tokio::spawn(async move {
        let gate_true = PodCondition {
            type_: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
            status: "True".to_owned(),
            message: Some("[]".to_owned()),
            ..Default::default()
        };
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        send.send_response(respond(StatusCode::OK, &pod(true, vec![gate_true.clone()])));

        let (body, send) = expect(&mut handle, Method::PATCH, CRR_PATH).await;
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(
            body["metadata"]["finalizers"],
            json!([keys::FINALIZER_UNREADY_ACQUIRED])
        );
        let mut with_finalizer = crr(Some(Phase::Recreating));
        with_finalizer.metadata.resource_version = Some("8".to_owned());
        with_finalizer.metadata.finalizers =
            Some(vec![keys::FINALIZER_UNREADY_ACQUIRED.to_owned()]);
        send.send_response(respond(StatusCode::OK, &with_finalizer));

        // A concurrent writer changed the pod: the operator reads it again and retries.
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{POD_PATH}/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "40");
        send.send_response(respond(StatusCode::CONFLICT, &api_status(409, "Conflict")));
        let other = PodCondition {
            status: "False".to_owned(),
            message: Some(r#"[{"userAgent":"Other","key":"x"}]"#.to_owned()),
            ..gate_true
        };
        let mut changed = pod(true, vec![other]);
        changed.metadata.resource_version = Some("41".to_owned());
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        send.send_response(respond(StatusCode::OK, &changed));
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{POD_PATH}/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "41");
        let condition = &body["status"]["conditions"][0];
        assert_eq!(condition["type"], keys::POD_CONDITION_KRUISE_POD_READY);
        assert_eq!(condition["status"], "False");
        assert_eq!(
            condition["message"],
            r#"[{"userAgent":"ContainerRecreateRequest","key":"ns/crr-a"},{"userAgent":"Other","key":"x"}]"#
        );
        send.send_response(respond(StatusCode::OK, &changed));
        expect_event(&mut handle, "PodNotReady", keys::KIND).await;
        expect_event(&mut handle, "PodNotReady", "Pod").await;

        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{CRR_PATH}/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "8");
        assert_eq!(body["status"]["conditions"][0]["type"], "PreRecreateGrace");
        assert_eq!(body["status"]["conditions"][0]["status"], "True");
        send.send_response(respond(StatusCode::OK, &with_finalizer));
        expect_event(&mut handle, "PreRecreateGrace", keys::KIND).await;
    });
    let action = reconcile(Arc::new(request), ctx).await.expect("reconcile");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(3))
    );
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn deleted_request_releases_the_pod_then_drops_its_finalizer() {
    let (ctx, mut handle, _leader) = context(true);
    let mut request = crr(Some(Phase::Recreating));
    request.metadata.deletion_timestamp = Some(ago(1));
    request.metadata.finalizers = Some(vec![keys::FINALIZER_UNREADY_ACQUIRED.to_owned()]);
    let server = tokio::spawn(async move {
        let held = PodCondition {
            type_: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
            status: "False".to_owned(),
            message: Some(
                r#"[{"userAgent":"ContainerRecreateRequest","key":"ns/crr-a"}]"#.to_owned(),
            ),
            ..Default::default()
        };
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        send.send_response(respond(StatusCode::OK, &pod(true, vec![held])));
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{POD_PATH}/status")).await;
        assert_eq!(body["status"]["conditions"][0]["status"], "True");
        assert_eq!(body["status"]["conditions"][0]["message"], "[]");
        send.send_response(respond(StatusCode::OK, &pod(true, vec![])));
        expect_event(&mut handle, "PodReadinessRestored", keys::KIND).await;
        expect_event(&mut handle, "PodReadinessRestored", "Pod").await;
        let (body, send) = expect(&mut handle, Method::PATCH, CRR_PATH).await;
        assert_eq!(body["metadata"]["finalizers"], json!([]));
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        send.send_response(respond(StatusCode::NOT_FOUND, &api_status(404, "NotFound")));
    });
    let action = reconcile(Arc::new(request), ctx).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn expired_ttl_deletes_with_a_uid_precondition() {
    let (ctx, mut handle, _leader) = context(true);
    let mut request = crr(Some(Phase::Completed));
    request.metadata.labels = None;
    request.spec.ttl_seconds_after_finished = Some(1);
    request.status.get_or_insert_default().completion_time = Some(ago(5));
    // A finished request that holds no readiness needs no pod: the first request is the delete.
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::DELETE, CRR_PATH).await;
        assert_eq!(body["preconditions"]["uid"], "crr-uid");
        send.send_response(respond(StatusCode::OK, &crr(Some(Phase::Completed))));
        // No TTLExpired Event about the object just deleted: nothing after the delete (the
        // reconcile ends and its client goes, or nothing comes).
        let after = tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await;
        if let Ok(Some((request, _))) = after {
            panic!(
                "a request after the delete: {} {}",
                request.method(),
                request.uri()
            );
        }
    });
    let action = reconcile(Arc::new(request), ctx).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    server.await.expect("scripted API server");
}

/// `pod` with container `app` running as a new container (restarted once), not Ready yet (a
/// snapshot showing it Ready is the daemon's to write, with the completion).
fn with_new_app_container(mut pod: Pod) -> Pod {
    pod.status.get_or_insert_default().container_statuses = Some(vec![ContainerStatus {
        name: "app".to_owned(),
        container_id: Some("containerd://app-1".to_owned()),
        restart_count: 1,
        ready: false,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    pod
}

#[tokio::test]
async fn snapshot_write_is_preconditioned_on_the_request_read() {
    let (ctx, mut handle, _leader) = context(true);
    let request = crr(Some(Phase::Recreating));
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        send.send_response(respond(
            StatusCode::OK,
            &with_new_app_container(pod(false, vec![])),
        ));
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{CRR_PATH}/status")).await;
        assert_eq!(
            body,
            json!({
                "metadata": {"resourceVersion": "7"},
                "status": {"containerStatusSnapshot": [{
                    "name": "app", "ready": false, "restartCount": 1,
                    "containerID": "containerd://app-1",
                }]},
            })
        );
        send.send_response(respond(StatusCode::CONFLICT, &api_status(409, "Conflict")));
    });
    let error = reconcile(Arc::new(request), ctx)
        .await
        .expect_err("a request changed since it was read conflicts");
    assert_eq!(error.kind(), "conflict");
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn each_write_builds_on_the_object_the_previous_write_returned() {
    let (ctx, mut handle, _leader) = context(true);
    let mut request = crr(Some(Phase::Recreating));
    request.spec.strategy = Some(ContainerRecreateRequestStrategy {
        unready_grace_period_seconds: Some(5),
        ..Default::default()
    });
    let answered = |version: &str, conditions: Vec<Condition>| {
        let mut answer = request.clone();
        answer.metadata.resource_version = Some(version.to_owned());
        answer.status.get_or_insert_default().conditions = conditions;
        answer
    };
    // Someone else's condition shows up in the first answer: the grace write must keep it.
    let other = Condition {
        type_: "Other".to_owned(),
        status: "True".to_owned(),
        reason: "Other".to_owned(),
        message: String::new(),
        last_transition_time: ago(100),
        observed_generation: None,
    };
    let after_snapshot = answered("8", vec![other.clone()]);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        // No readiness gate: snapshot, then the grace condition with a status message.
        send.send_response(respond(
            StatusCode::OK,
            &with_new_app_container(pod(false, vec![])),
        ));

        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{CRR_PATH}/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert!(body["status"]["containerStatusSnapshot"].is_array());
        send.send_response(respond(StatusCode::OK, &after_snapshot));

        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{CRR_PATH}/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "8");
        let conditions = body["status"]["conditions"].as_array().expect("conditions");
        let types: Vec<_> = conditions.iter().map(|c| c["type"].clone()).collect();
        assert_eq!(types, vec![json!("Other"), json!("PreRecreateGrace")]);
        assert_eq!(
            body["status"]["message"],
            crate::request::reconcile::MESSAGE_NO_READINESS_GATE
        );
        let mut body_keys: Vec<_> = body["status"].as_object().unwrap().keys().collect();
        body_keys.sort();
        assert_eq!(body_keys, vec!["conditions", "message"]);
        send.send_response(respond(StatusCode::OK, &after_snapshot));
        expect_event(&mut handle, "NoReadinessGate", keys::KIND).await;
        expect_event(&mut handle, "NoReadinessGate", "Pod").await;
    });
    let action = reconcile(Arc::new(request.clone()), ctx)
        .await
        .expect("reconcile");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(3))
    );
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn a_finished_request_is_observed_once_when_its_active_label_goes() {
    let (ctx, mut handle, _leader) = context(true);
    let mut request = crr(Some(Phase::Completed));
    let status = request.status.get_or_insert_default();
    status.completion_time = Some(ago(4));
    status.conditions = vec![Condition {
        type_: keys::CONDITION_SUCCEEDED.to_owned(),
        status: "True".to_owned(),
        reason: "Recreated".to_owned(),
        message: String::new(),
        last_transition_time: ago(4),
        observed_generation: None,
    }];
    let mut unlabelled = request.clone();
    unlabelled.metadata.labels = None;
    let answer = unlabelled.clone();
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::PATCH, CRR_PATH).await;
        assert_eq!(body["metadata"]["labels"][keys::LABEL_ACTIVE], Value::Null);
        send.send_response(respond(StatusCode::OK, &answer));
    });
    reconcile(Arc::new(request), ctx.clone())
        .await
        .expect("reconcile");
    server.await.expect("scripted API server");
    // A relist (or a new leader) sees the request without the label: nothing to observe.
    reconcile(Arc::new(unlabelled), ctx.clone())
        .await
        .expect("reconcile");
    let mut registry = Registry::with_prefix("crr_operator");
    registry.register(
        "recreate_duration_seconds",
        "",
        ctx.metrics.recreate_duration.clone(),
    );
    registry.register("outcomes", "", ctx.metrics.outcomes.clone());
    let text = crr_runtime::metrics::encode(&registry).expect("encode");
    assert!(
        text.contains("crr_operator_recreate_duration_seconds_count{outcome=\"succeeded\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("crr_operator_outcomes_total{outcome=\"succeeded\",reason=\"Recreated\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_forbidden_pod_read_is_not_retried_and_says_why_on_the_request() {
    let (ctx, mut handle, _leader) = context(true);
    let request = Arc::new(crr(Some(Phase::Recreating)));
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        send.send_response(respond(
            StatusCode::FORBIDDEN,
            &api_status(403, "Forbidden"),
        ));
        handle
    });
    let error = reconcile(request.clone(), ctx.clone())
        .await
        .expect_err("forbidden");
    let mut handle = server.await.expect("scripted API server");
    assert!(
        error.refusal().is_some_and(|reason| reason.contains("403")),
        "{error}"
    );
    let action = error_policy(request, &error, ctx.clone());
    assert_eq!(
        action,
        kube::runtime::controller::Action::await_change(),
        "not retried"
    );
    expect_event(&mut handle, "Refused", keys::KIND).await;
    let (body, send) = expect(&mut handle, Method::PATCH, &format!("{CRR_PATH}/status")).await;
    assert_eq!(body["metadata"]["resourceVersion"], "7", "{body}");
    let message = body["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the API server refused the operator: Forbidden (403)"),
        "{body}"
    );
    send.send_response(respond(StatusCode::OK, &crr(Some(Phase::Recreating))));
}

#[tokio::test]
async fn other_failures_back_off_per_request() {
    let (ctx, _handle, _leader) = context(true);
    let request = Arc::new(crr(Some(Phase::Recreating)));
    let error = Error::MissingNamespace { name: "r".into() };
    let delays: Vec<_> = (0..8)
        .map(|_| error_policy(request.clone(), &error, ctx.clone()))
        .collect();
    assert_ne!(delays[0], delays[7], "the delay grows");
    assert_eq!(
        ctx.backoff.failures(&format!(
            "{}/{}",
            request.namespace().unwrap(),
            request.name_any()
        )),
        8
    );
}

/// A conflict waits for the watch to show the change (its event wakes the reconcile); the
/// requeue is a fallback, not a poll of the stale cache, and no backoff builds up.
#[tokio::test]
async fn a_conflict_waits_for_the_change_with_a_fallback() {
    let (ctx, _handle, _leader) = context(true);
    let request = Arc::new(crr(Some(Phase::Recreating)));
    let error = Error::Conflict {
        action: "completing",
        object: "ns/crr-a".to_owned(),
    };
    let action = error_policy(request.clone(), &error, ctx.clone());
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(super::CONFLICT_FALLBACK)
    );
    assert_eq!(
        ctx.backoff.failures(&format!(
            "{}/{}",
            request.namespace().unwrap(),
            request.name_any()
        )),
        0
    );
}

/// A completion's write on `request` refused as stale, as the error policy hears of it.
fn conflicted(request: &Arc<ContainerRecreateRequest>, ctx: &Arc<super::Context>) {
    let error = Error::Conflict {
        action: "completing",
        object: "ns/crr-a".to_owned(),
    };
    let _ = error_policy(request.clone(), &error, ctx.clone());
}

/// After a conflict, the same cached copy is not decided on again: the request is read from the
/// API server and the write is preconditioned on what the read returned.
#[tokio::test]
async fn a_copy_found_stale_is_read_again_before_the_next_write() {
    let (ctx, mut handle, _leader) = context(true);
    let mut request = crr(Some(Phase::Recreating));
    request.spec.active_deadline_seconds = Some(3);
    let request = Arc::new(request);
    conflicted(&request, &ctx);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::GET, CRR_PATH).await;
        let mut fresh = crr(Some(Phase::Recreating));
        fresh.spec.active_deadline_seconds = Some(3);
        fresh.metadata.resource_version = Some("9".to_owned());
        send.send_response(respond(StatusCode::OK, &fresh));
        let (_, send) = expect(&mut handle, Method::GET, POD_PATH).await;
        send.send_response(respond(StatusCode::OK, &pod(false, vec![])));
        let (body, send) = expect(&mut handle, Method::PATCH, &format!("{CRR_PATH}/status")).await;
        assert_eq!(body["metadata"]["resourceVersion"], "9");
        send.send_response(respond(StatusCode::CONFLICT, &api_status(409, "Conflict")));
    });
    let error = reconcile(request.clone(), ctx.clone())
        .await
        .expect_err("the scripted write conflicts again");
    assert_eq!(error.kind(), "conflict");
    server.await.expect("scripted API server");
    assert_eq!(ctx.stale_copies.len(), 0, "the read forgot the stale copy");
}

/// A request deleted since the conflict is left alone: nothing is written.
#[tokio::test]
async fn a_copy_found_stale_of_a_request_since_gone_ends_the_reconcile() {
    let (ctx, mut handle, _leader) = context(true);
    let request = Arc::new(crr(Some(Phase::Recreating)));
    conflicted(&request, &ctx);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::GET, CRR_PATH).await;
        send.send_response(respond(StatusCode::NOT_FOUND, &api_status(404, "NotFound")));
    });
    let action = reconcile(request, ctx).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    server.await.expect("scripted API server");
}
