//! The exact API calls a rollout decision makes, against a scripted API server (tower-test
//! mock): each step checks method, path and body, and answers like the API server would.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crr_crds::rollout::ContainerRecreateRollout;
use crr_runtime::events::EventPublisher;
use http::{Method, StatusCode};
use jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::*;
use crate::api_mock::{self, Handle, api_status, expect, expect_nothing_more, respond};
use crate::reconcile_errors::ControllerErrors;
use crate::rollout::decide::{self, BudgetWait, Stage, World};
use crate::rollout::metrics::RolloutMetrics;
use crate::rollout::plan::{BudgetView, PodView, RequestState};
use crate::rollout::scoped_watches::ScopedWatches;

const REQUESTS_PATH: &str = "/apis/apps.kruise.io/v1beta1/namespaces/ns/containerrecreaterequests";
const ROLLOUT_PATH: &str = "/apis/crr.dev/v1alpha1/namespaces/ns/containerrecreaterollouts/restart";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";

fn context(leader: bool) -> (Arc<RolloutContext>, Handle, watch::Sender<bool>) {
    let (client, handle) = api_mock::client();
    let (leader_tx, leader_rx) = watch::channel(leader);
    let ctx = RolloutContext::new(
        client.clone(),
        ScopedWatches::new(client.clone()).0,
        EventPublisher::new(client, FIELD_MANAGER, "test"),
        leader_rx,
        reflector::store().0,
        reflector::store().0,
        RolloutMetrics::register(&mut Registry::default()),
        ControllerErrors::unregistered("rollout", &Error::KINDS),
    );
    (Arc::new(ctx), handle, leader_tx)
}

fn rollout(spec: Value) -> ContainerRecreateRollout {
    let mut full = json!({
        "target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        "containers": ["app"],
        "maxUnavailable": 2,
    });
    full.as_object_mut()
        .expect("an object")
        .extend(spec.as_object().expect("an object").clone());
    serde_json::from_value(json!({
        "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
        "metadata": {"name": "restart", "namespace": "ns", "uid": "rollout-uid",
                     "resourceVersion": "41", "generation": 1,
                     "creationTimestamp": "2030-01-01T00:00:00Z"},
        "spec": full,
    }))
    .expect("a rollout")
}

fn pod(name: &str, ready: bool) -> PodView {
    PodView {
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        created: "2029-12-31T00:00:00Z".parse().expect("a time"),
        ready,
        terminating: false,
        restartable: true,
        ordinal: None,
    }
}

/// The decision for `rollout` over `pods` and `requests`, as the reconcile makes it.
fn decision(
    rollout: &ContainerRecreateRollout,
    pods: Vec<PodView>,
    requests: &[(&str, RequestState)],
) -> Decision {
    decision_under(rollout, pods, requests, Vec::new())
}

/// [`decision`] with the PDBs `budgets` read.
fn decision_under(
    rollout: &ContainerRecreateRollout,
    pods: Vec<PodView>,
    requests: &[(&str, RequestState)],
    budgets: Vec<BudgetView>,
) -> Decision {
    let now: Timestamp = "2030-01-01T00:00:10Z".parse().expect("a time");
    let Stage::ReadWorld(reading) = decide::before_reading(rollout, now) else {
        panic!("an unfinished rollout reads the world");
    };
    let requests: BTreeMap<_, _> = requests
        .iter()
        .map(|(pod, state)| (format!("uid-{pod}"), state.clone()))
        .collect();
    let world = World {
        pods,
        budgets,
        target_exists: true,
    };
    decide::decide(rollout, &reading, &world, &requests, now).expect("decided")
}

async fn expect_event(handle: &mut Handle, reason: &str) {
    let (body, send) = expect(handle, Method::POST, EVENTS_PATH).await;
    assert_eq!(body["reason"], reason);
    assert_eq!(body["regarding"]["kind"], "ContainerRecreateRollout");
    assert_eq!(body["regarding"]["name"], "restart");
    send.send_response(respond(StatusCode::CREATED, &body));
}

#[tokio::test]
async fn starts_requests_writes_the_preconditioned_status_then_publishes_its_events() {
    let (ctx, mut handle, _leader) = context(true);
    let rollout = rollout(json!({}));
    let decision = decision(&rollout, vec![pod("a", true), pod("b", true)], &[]);
    assert_eq!(decision.create.len(), 2);
    let stored = rollout.clone();
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::POST, REQUESTS_PATH).await;
        assert_eq!(body["metadata"]["name"], "restart-uid-a");
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "rollout-uid");
        send.send_response(respond(StatusCode::CREATED, &body));
        // Created before, by a reconcile on a stale copy or before a restart: fine.
        let (body, send) = expect(&mut handle, Method::POST, REQUESTS_PATH).await;
        assert_eq!(body["metadata"]["name"], "restart-uid-b");
        send.send_response(respond(
            StatusCode::CONFLICT,
            &api_status(409, "AlreadyExists"),
        ));

        let (body, send) = expect(
            &mut handle,
            Method::PATCH,
            &format!("{ROLLOUT_PATH}/status"),
        )
        .await;
        assert_eq!(body["metadata"], json!({"resourceVersion": "41"}));
        assert_eq!(body["status"]["phase"], "Progressing");
        assert_eq!(body["status"]["inFlight"], 2);
        send.send_response(respond(StatusCode::OK, &stored));

        expect_event(&mut handle, "Started").await;
        expect_nothing_more(&mut handle).await;
    });
    let action = Executor::new(&ctx, &rollout)
        .carry_out(decision)
        .await
        .expect("carried out");
    assert_eq!(action, Action::requeue(decide::IN_FLIGHT_POLL));
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn a_conflicting_status_write_publishes_nothing_and_decides_again_soon() {
    let (ctx, mut handle, _leader) = context(true);
    let rollout = rollout(json!({}));
    let decision = decision(
        &rollout,
        vec![pod("a", false)],
        &[("a", RequestState::InFlight)],
    );
    assert!(decision.create.is_empty());
    assert!(
        !decision.events.is_empty(),
        "a first status announces the start"
    );
    let server = tokio::spawn(async move {
        let (_, send) = expect(
            &mut handle,
            Method::PATCH,
            &format!("{ROLLOUT_PATH}/status"),
        )
        .await;
        send.send_response(respond(StatusCode::CONFLICT, &api_status(409, "Conflict")));
        expect_nothing_more(&mut handle).await;
    });
    let error = Executor::new(&ctx, &rollout)
        .carry_out(decision)
        .await
        .expect_err("a conflict");
    assert_eq!(error.kind(), "conflict");
    server.await.expect("scripted API server");
    let rollout = Arc::new(rollout);
    assert_eq!(
        crate::rollout::controller::error_policy(rollout, &error, ctx.clone()),
        Action::requeue(CONFLICT_RETRY)
    );
    assert_eq!(ctx.errors.get("conflict"), 1);
}

const BUDGET_STATUS_PATH: &str =
    "/apis/policy/v1/namespaces/ns/poddisruptionbudgets/web-pdb/status";

/// PDB `web-pdb` over `pods`, all Ready, `desired` of them wanted healthy, its status caught up;
/// `released` holds this rollout's entries whose requests finished.
fn web_pdb(pods: &[&str], desired: i32, released: &[&str]) -> BudgetView {
    let count = i32::try_from(pods.len()).expect("a few pods");
    BudgetView {
        name: "web-pdb".to_owned(),
        disruptions_allowed: count - desired - i32::try_from(released.len()).expect("a few"),
        desired_healthy: desired,
        status_current: true,
        pods: pods
            .iter()
            .map(|pod| (format!("uid-{pod}"), true))
            .collect(),
        expected_pods: count,
        disrupted: Default::default(),
        current_healthy: count - i32::try_from(released.len()).expect("a few"),
        resource_version: "7".to_owned(),
        released: released.iter().map(|pod| (*pod).to_owned()).collect(),
    }
}

#[tokio::test]
async fn the_budget_is_reserved_before_any_request_and_a_conflict_starts_nothing() {
    let (ctx, mut handle, _leader) = context(true);
    let rollout = rollout(json!({}));
    // a finished: its entry is released in the write that reserves b and c.
    let decision = decision_under(
        &rollout,
        vec![
            pod("a", true),
            pod("b", true),
            pod("c", true),
            pod("d", true),
        ],
        &[("a", RequestState::Succeeded)],
        vec![web_pdb(&["a", "b", "c", "d"], 2, &["a"])],
    );
    assert_eq!(decision.create.len(), 2);
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::PATCH, BUDGET_STATUS_PATH).await;
        assert_eq!(
            body,
            json!({
                "metadata": {"resourceVersion": "7"},
                "status": {
                    "disruptedPods": {"a": null, "b": "2030-01-01T00:00:10Z", "c": "2030-01-01T00:00:10Z"},
                    // The status allowed 1 (a's entry held a slot) and 2 are taken: never below 0.
                    "disruptionsAllowed": 0,
                    "currentHealthy": 1,
                },
            })
        );
        // An eviction took a slot since the PDB was read: nothing starts.
        send.send_response(respond(StatusCode::CONFLICT, &api_status(409, "Conflict")));
        expect_nothing_more(&mut handle).await;
    });
    let error = Executor::new(&ctx, &rollout)
        .carry_out(decision)
        .await
        .expect_err("a conflict");
    assert_eq!(error.kind(), "conflict");
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn a_refused_request_creation_is_a_write_error_with_its_reason() {
    let (ctx, mut handle, _leader) = context(true);
    let rollout = rollout(json!({}));
    let decision = decision(&rollout, vec![pod("a", true)], &[]);
    let stored = rollout.clone();
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::POST, REQUESTS_PATH).await;
        send.send_response(respond(
            StatusCode::FORBIDDEN,
            &api_status(403, "Forbidden"),
        ));
        // The status is written all the same, and the refusal is a Warning on the rollout.
        let (body, send) = expect(
            &mut handle,
            Method::PATCH,
            &format!("{ROLLOUT_PATH}/status"),
        )
        .await;
        assert_eq!(body["status"]["phase"], "Progressing");
        send.send_response(respond(StatusCode::OK, &stored));
        expect_event(&mut handle, "Started").await;
        let (event, send) = expect(&mut handle, Method::POST, EVENTS_PATH).await;
        assert_eq!(event["reason"], "RequestRefused");
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["note"], "pod ns/a: Forbidden");
        send.send_response(respond(StatusCode::CREATED, &event));
        expect_nothing_more(&mut handle).await;
    });
    let error = Executor::new(&ctx, &rollout)
        .carry_out(decision)
        .await
        .expect_err("refused");
    assert_eq!(error.kind(), "write");
    assert_eq!(
        error.refusal().as_deref(),
        Some("Forbidden (403): Forbidden")
    );
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn a_decision_creates_its_requests_at_once_and_tries_every_one() {
    let (ctx, mut handle, _leader) = context(true);
    let rollout = rollout(json!({}));
    let decision = decision(&rollout, vec![pod("a", true), pod("b", true)], &[]);
    assert_eq!(decision.create.len(), 2);
    let stored = rollout.clone();
    let server = tokio::spawn(async move {
        // Both creates reach the API server before either is answered: one after the other,
        // the second would never come.
        let (first, answer_first) = expect(&mut handle, Method::POST, REQUESTS_PATH).await;
        let (second, answer_second) = tokio::time::timeout(
            Duration::from_secs(5),
            expect(&mut handle, Method::POST, REQUESTS_PATH),
        )
        .await
        .expect("the second create is sent while the first waits");
        let mut names = [
            first["metadata"]["name"].clone(),
            second["metadata"]["name"].clone(),
        ];
        names.sort_by_key(|name| name.to_string());
        assert_eq!(names, [json!("restart-uid-a"), json!("restart-uid-b")]);
        // A refusal of one does not keep the other from being created, nor the status from
        // being written.
        answer_first.send_response(respond(
            StatusCode::FORBIDDEN,
            &api_status(403, "Forbidden"),
        ));
        answer_second.send_response(respond(StatusCode::CREATED, &second));
        let (_, send) = expect(
            &mut handle,
            Method::PATCH,
            &format!("{ROLLOUT_PATH}/status"),
        )
        .await;
        send.send_response(respond(StatusCode::OK, &stored));
        expect_event(&mut handle, "Started").await;
        let (event, send) = expect(&mut handle, Method::POST, EVENTS_PATH).await;
        assert_eq!(event["reason"], "RequestRefused");
        send.send_response(respond(StatusCode::CREATED, &event));
        expect_nothing_more(&mut handle).await;
    });
    let error = Executor::new(&ctx, &rollout)
        .carry_out(decision)
        .await
        .expect_err("one refused");
    assert_eq!(error.kind(), "write");
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn a_follower_writes_nothing() {
    let (ctx, mut handle, _leader) = context(false);
    let rollout = rollout(json!({}));
    let decision = decision(&rollout, vec![pod("a", true)], &[]);
    let error = Executor::new(&ctx, &rollout)
        .carry_out(decision)
        .await
        .expect_err("not the leader");
    assert_eq!(error.kind(), "not_leader");
    expect_nothing_more(&mut handle).await;
}

#[tokio::test]
async fn a_budget_wait_is_announced_once_a_minute() {
    let (ctx, mut handle, _leader) = context(true);
    let rollout = rollout(json!({}));
    let wait = Decision {
        budget_wait: Some(BudgetWait {
            budget: "web-pdb".to_owned(),
            pod: "a".to_owned(),
        }),
        next: Next::After(decide::BUDGET_POLL),
        ..Decision::idle()
    };
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::POST, EVENTS_PATH).await;
        assert_eq!(body["reason"], "WaitingForBudget");
        assert_eq!(
            body["note"],
            "pod a waits: PodDisruptionBudget web-pdb allows no more disruptions"
        );
        send.send_response(respond(StatusCode::CREATED, &body));
        expect_nothing_more(&mut handle).await;
    });
    let executor = Executor::new(&ctx, &rollout);
    for _ in 0..2 {
        let action = executor.carry_out(wait.clone()).await.expect("carried out");
        assert_eq!(action, Action::requeue(decide::BUDGET_POLL));
    }
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn a_rollout_past_its_ttl_is_deleted_with_its_requests_and_a_gone_one_is_fine() {
    let (ctx, mut handle, _leader) = context(true);
    let rollout = rollout(json!({}));
    let delete = Decision {
        delete: true,
        ..Decision::idle()
    };
    let server = tokio::spawn(async move {
        let (body, send) = expect(&mut handle, Method::DELETE, ROLLOUT_PATH).await;
        assert_eq!(body["propagationPolicy"], "Background");
        send.send_response(respond(
            StatusCode::OK,
            &json!({"kind": "Status", "status": "Success"}),
        ));
        let (_, send) = expect(&mut handle, Method::DELETE, ROLLOUT_PATH).await;
        send.send_response(respond(StatusCode::NOT_FOUND, &api_status(404, "NotFound")));
    });
    let executor = Executor::new(&ctx, &rollout);
    for _ in 0..2 {
        let action = executor
            .carry_out(delete.clone())
            .await
            .expect("carried out");
        assert_eq!(action, Action::await_change());
    }
    server.await.expect("scripted API server");
}
