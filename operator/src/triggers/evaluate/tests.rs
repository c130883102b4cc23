//! The exact API calls evaluating a workload makes, against a scripted API server (tower-test
//! mock): each step checks method, path and body, and answers like the API server would. The
//! index is fed plain watch events, the rollout cache a plain store.

use std::time::Duration;

use crr_crds::keys;
use crr_crds::rollout::{ContainerRecreateRollout, Limit};
use crr_runtime::events::EventPublisher;
use http::{Method, StatusCode};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::evaluate;
use crate::api_mock::{self, Handle, api_status, expect, expect_nothing_more, respond};
use crate::reconcile_errors::ControllerErrors;
use crate::triggers::config_change::{Hashes, WAIT_FOR_RUNNING};
use crate::triggers::context::{SecretAccess, TriggerContext, TriggerSettings};
use crate::triggers::controller::evaluate_due;
use crate::triggers::error::TriggerError;
use crate::triggers::hash;
use crate::triggers::index::{
    ConfigEvent, ObjectKey, ReadHash, WorkloadEntry, WorkloadEvent, WorkloadKey,
};
use crate::triggers::record;
use crate::triggers::refs::ConfigRef;
use crate::triggers::rollout::{Cause, WorkloadView, trigger_rollout};

const RECORD_PATH: &str = "/apis/crr.dev/v1alpha1/namespaces/shop/triggerrecords/deployment-web";
const ROLLOUTS_PATH: &str = "/apis/crr.dev/v1alpha1/namespaces/shop/containerrecreaterollouts";
const APP_CONFIG_PATH: &str = "/api/v1/namespaces/shop/configmaps/app-config";
const PROXY_CONFIG_PATH: &str = "/api/v1/namespaces/shop/configmaps/proxy-config";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

/// A trigger context over the scripted API server, leading, with `rollouts` in its cache.
fn context(rollouts: Vec<ContainerRecreateRollout>) -> (TriggerContext, Handle) {
    let (client, handle) = api_mock::client();
    let (_, leader) = watch::channel(true);
    let mut writer: Writer<ContainerRecreateRollout> = Writer::default();
    let store = writer.as_reader();
    for rollout in rollouts {
        writer.apply_watcher_event(&watcher::Event::Apply(rollout));
    }
    let ctx = TriggerContext::new(
        client.clone(),
        EventPublisher::new(client, "crr-operator", "test"),
        leader,
        store,
        TriggerSettings {
            secrets: SecretAccess::Denied,
            reloader_annotations: false,
            starting_deadline: Duration::from_secs(900),
            debounce: Duration::from_secs(1),
            volume_sync: Duration::from_secs(95),
        },
        ControllerErrors::unregistered("triggers", &TriggerError::KINDS),
        crate::triggers::metrics::TriggerMetrics::default(),
    );
    (ctx, handle)
}

fn web() -> WorkloadKey {
    WorkloadKey {
        kind: "Deployment",
        namespace: "shop".to_owned(),
        name: "web".to_owned(),
    }
}

fn web_view() -> WorkloadView {
    WorkloadView {
        kind: "Deployment",
        namespace: "shop".to_owned(),
        name: "web".to_owned(),
        uid: "uid-web".to_owned(),
    }
}

fn app_config() -> ConfigRef {
    ConfigRef::config_map("app-config")
}

fn proxy_config() -> ConfigRef {
    ConfigRef::config_map("proxy-config")
}

fn in_shop(object: ConfigRef) -> ObjectKey {
    ObjectKey {
        namespace: "shop".to_owned(),
        object,
    }
}

/// `web` as the workload watch would index it: `app` uses `app-config`, `proxy` uses
/// `proxy-config`.
fn index_web(ctx: &TriggerContext, annotations: &[(&str, &str)]) {
    let entry = WorkloadEntry {
        uid: "uid-web".to_owned(),
        annotations: annotations
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
        containers: vec!["app".to_owned(), "proxy".to_owned()],
        references: [
            (app_config(), ["app".to_owned()].into()),
            (proxy_config(), ["proxy".to_owned()].into()),
        ]
        .into(),
        mounted: Default::default(),
        references_refused: None,
    };
    let wake = ctx.index().apply_workload(WorkloadEvent::Seen {
        key: web(),
        entry: Some(entry),
    });
    assert_eq!(wake, Some(web()));
}

/// The ConfigMap watch saw `object` at `version`.
fn seen(ctx: &TriggerContext, object: ConfigRef, version: &str) {
    ctx.index().apply_config(&ConfigEvent::Seen {
        object: in_shop(object),
        version: version.to_owned(),
    });
}

fn config_map(name: &str, version: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("shop".to_owned()),
            resource_version: Some(version.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("setting".to_owned(), value.to_owned())].into()),
        ..ConfigMap::default()
    }
}

fn record_of(pairs: &[(&str, &str)]) -> Hashes {
    pairs
        .iter()
        .map(|(key, hash)| ((*key).to_owned(), (*hash).to_owned()))
        .collect()
}

/// Expects the server-side apply of one field of `web`'s TriggerRecord; answers it as the API
/// server would (at resourceVersion 100) and returns the record's `spec`.
async fn expect_record_apply(handle: &mut Handle) -> Value {
    let (mut body, send) = expect(handle, Method::PATCH, RECORD_PATH).await;
    assert_eq!(body["kind"], "TriggerRecord");
    assert_eq!(
        body["metadata"]["ownerReferences"][0]["uid"], "uid-web",
        "owned by the workload: {body}"
    );
    assert_eq!(
        body["spec"]["workload"],
        json!({"kind": "Deployment", "name": "web", "uid": "uid-web"})
    );
    body["metadata"]["resourceVersion"] = json!("100");
    send.send_response(respond(StatusCode::OK, &body));
    body["spec"].clone()
}

/// Expects the write of the config-change record; returns the record written.
async fn expect_record(handle: &mut Handle) -> Hashes {
    let spec = expect_record_apply(handle).await;
    assert!(
        spec.get("lastScheduled").is_none(),
        "only its own field: {spec}"
    );
    serde_json::from_value(spec["configHashes"].clone()).expect("the hashes")
}

/// Expects the write of the last tick acted on; returns the tick.
async fn expect_last_scheduled(handle: &mut Handle) -> Timestamp {
    let spec = expect_record_apply(handle).await;
    assert!(
        spec.get("configHashes").is_none(),
        "only its own field: {spec}"
    );
    spec["lastScheduled"]
        .as_str()
        .expect("a string")
        .parse()
        .expect("a timestamp")
}

/// Expects an Event on the workload; returns its note.
async fn expect_event(handle: &mut Handle, type_: &str, reason: &str) -> String {
    let (body, send) = expect(handle, Method::POST, EVENTS_PATH).await;
    assert_eq!(body["type"], type_);
    assert_eq!(body["reason"], reason);
    assert_eq!(body["regarding"]["kind"], "Deployment");
    assert_eq!(body["regarding"]["name"], "web");
    assert_eq!(body["regarding"]["uid"], "uid-web");
    send.send_response(respond(StatusCode::CREATED, &body));
    body["note"].as_str().unwrap_or_default().to_owned()
}

/// Expects the creation of a rollout; returns its body.
async fn expect_rollout(handle: &mut Handle) -> Value {
    let (body, send) = expect(handle, Method::POST, ROLLOUTS_PATH).await;
    send.send_response(respond(StatusCode::CREATED, &body));
    body
}

/// Answers a GET with `config_map`.
async fn serve(handle: &mut Handle, path: &str, config_map: &ConfigMap) {
    let (_, send) = expect(handle, Method::GET, path).await;
    send.send_response(respond(StatusCode::OK, config_map));
}

/// An unfinished rollout of `web` that `cause` started.
fn running(cause: &Cause) -> ContainerRecreateRollout {
    trigger_rollout(&web_view(), vec!["app".to_owned()], Limit::Count(1), cause)
}

const CONFIG_CHANGE: (&str, &str) = (keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE, "true");

#[tokio::test]
async fn first_sight_reads_the_used_objects_and_records_them_only() {
    let (ctx, mut handle) = context(Vec::new());
    index_web(&ctx, &[CONFIG_CHANGE]);
    seen(&ctx, app_config(), "1");
    seen(&ctx, proxy_config(), "1");
    let app = config_map("app-config", "1", "a");
    let proxy = config_map("proxy-config", "1", "p");
    let expected = record_of(&[
        ("configmap/app-config", &hash::config_map(&app)),
        ("configmap/proxy-config", &hash::config_map(&proxy)),
    ]);
    let server = tokio::spawn(async move {
        serve(&mut handle, APP_CONFIG_PATH, &app).await;
        serve(&mut handle, PROXY_CONFIG_PATH, &proxy).await;
        assert_eq!(expect_record(&mut handle).await, expected);
        // The script ends here: a rollout's POST would fail the evaluation.
    });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    assert_eq!(again, None);
    server.await.expect("scripted API server");
    let index = ctx.index();
    assert!(!index.needs_read(&in_shop(app_config())));
    assert!(!index.needs_read(&in_shop(proxy_config())));
}

#[tokio::test]
async fn a_changed_config_map_rolls_out_the_containers_that_use_it_and_records_the_new_hashes() {
    let before = config_map("app-config", "1", "old");
    let proxy = config_map("proxy-config", "4", "p");
    let recorded = record_of(&[
        ("configmap/app-config", &hash::config_map(&before)),
        ("configmap/proxy-config", &hash::config_map(&proxy)),
    ]);
    let recorded_text = serde_json::to_string(&recorded).expect("JSON");
    let (ctx, mut handle) = context(Vec::new());
    index_web(
        &ctx,
        &[
            CONFIG_CHANGE,
            (keys::ANNOTATION_CONFIG_HASHES, &recorded_text),
        ],
    );
    // proxy-config was read at the version the watch last saw: no read. app-config moved.
    seen(&ctx, proxy_config(), "4");
    ctx.index().record_read(
        in_shop(proxy_config()),
        Some(ReadHash {
            version: "4".to_owned(),
            hash: hash::config_map(&proxy),
        }),
    );
    seen(&ctx, app_config(), "1");
    ctx.index().record_read(
        in_shop(app_config()),
        Some(ReadHash {
            version: "1".to_owned(),
            hash: hash::config_map(&before),
        }),
    );
    seen(&ctx, app_config(), "2");
    let after = config_map("app-config", "2", "new");
    let new_hash = hash::config_map(&after);
    let expected = record_of(&[
        ("configmap/app-config", &new_hash),
        ("configmap/proxy-config", &hash::config_map(&proxy)),
    ]);
    let server = tokio::spawn(async move {
        serve(&mut handle, APP_CONFIG_PATH, &after).await;

        let rollout = expect_rollout(&mut handle).await;
        let name = format!("web-config-{}", &hash::record(&expected)[..10]);
        assert_eq!(rollout["metadata"]["name"], name.as_str());
        assert_eq!(rollout["spec"]["containers"], json!(["app"]));
        assert_eq!(
            rollout["spec"]["target"]["workloadRef"],
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
        );
        assert_eq!(rollout["spec"]["maxUnavailable"], 1);
        let labels = &rollout["metadata"]["labels"];
        assert_eq!(labels[keys::LABEL_ROLLOUT_TRIGGER], "config-change");
        assert_eq!(labels[keys::LABEL_WORKLOAD_UID], "uid-web");
        assert_eq!(
            rollout["metadata"]["annotations"][keys::ANNOTATION_CAUSE],
            "changed: configmap/app-config"
        );

        assert_eq!(expect_record(&mut handle).await, expected);
        let note = expect_event(&mut handle, "Normal", "ConfigChanged").await;
        assert_eq!(
            note,
            format!("changed: configmap/app-config: rollout {name} recreates app in place")
        );
    });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    assert_eq!(again, None);
    server.await.expect("scripted API server");
    assert_eq!(
        ctx.index().fresh_hash(&in_shop(app_config())),
        Some(new_hash.as_str())
    );
}

#[tokio::test]
async fn a_change_waits_for_the_running_config_change_rollout_and_looks_again() {
    let before = config_map("app-config", "1", "old");
    let proxy = config_map("proxy-config", "1", "p");
    let recorded = serde_json::to_string(&record_of(&[
        ("configmap/app-config", &hash::config_map(&before)),
        ("configmap/proxy-config", &hash::config_map(&proxy)),
    ]))
    .expect("JSON");
    let earlier = running(&Cause::ConfigChange {
        changed: vec![app_config()],
        record: "0123456789abcdef".to_owned(),
    });
    let (ctx, mut handle) = context(vec![earlier]);
    index_web(
        &ctx,
        &[CONFIG_CHANGE, (keys::ANNOTATION_CONFIG_HASHES, &recorded)],
    );
    seen(&ctx, app_config(), "2");
    seen(&ctx, proxy_config(), "1");
    let after = config_map("app-config", "2", "new");
    let server = tokio::spawn(async move {
        serve(&mut handle, APP_CONFIG_PATH, &after).await;
        serve(&mut handle, PROXY_CONFIG_PATH, &proxy).await;
        // No rollout, no record: the script ends, and any further call would fail.
    });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    assert_eq!(again, Some(WAIT_FOR_RUNNING));
    server.await.expect("scripted API server");
    assert!(
        !ctx.index().needs_read(&in_shop(app_config())),
        "the next look reads nothing again"
    );
}

#[tokio::test]
async fn a_failed_read_is_an_api_error_counted_and_retried() {
    let (ctx, mut handle) = context(Vec::new());
    index_web(&ctx, &[CONFIG_CHANGE]);
    seen(&ctx, app_config(), "1");
    seen(&ctx, proxy_config(), "1");
    let server = tokio::spawn(async move {
        for _ in 0..2 {
            let (_, send) = expect(&mut handle, Method::GET, APP_CONFIG_PATH).await;
            send.send_response(respond(
                StatusCode::INTERNAL_SERVER_ERROR,
                &api_status(500, "InternalError"),
            ));
        }
    });
    let error = evaluate(&ctx, &web()).await.expect_err("the read failed");
    assert_eq!(error.kind(), "api");
    assert!(
        error
            .to_string()
            .contains("reading configmap/app-config in shop"),
        "{error}"
    );
    assert_eq!(ctx.errors.get("api"), 0, "evaluate itself counts nothing");

    evaluate_due(&ctx, web()).await;
    server.await.expect("scripted API server");
    assert_eq!(ctx.errors.get("api"), 1);
    assert_eq!(ctx.queue.len(), 1, "retried with backoff");
    assert!(
        ctx.index().needs_read(&in_shop(app_config())),
        "nothing was recorded"
    );
}

#[tokio::test]
async fn a_schedule_seen_for_the_first_time_records_the_time_and_waits() {
    let (ctx, mut handle) = context(Vec::new());
    index_web(&ctx, &[(keys::ANNOTATION_RECREATE_SCHEDULE, "0 3 * * *")]);
    let asked = Timestamp::now();
    let server = tokio::spawn(async move { expect_last_scheduled(&mut handle).await });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    let recorded = server.await.expect("scripted API server");
    assert!(
        recorded >= asked && recorded <= Timestamp::now(),
        "{recorded}"
    );
    let again = again.expect("looks again");
    assert!(again <= Duration::from_secs(60), "{again:?}");
}

#[tokio::test]
async fn a_due_tick_creates_a_scheduled_rollout_of_every_container_and_records_the_tick() {
    let (ctx, mut handle) = context(Vec::new());
    let last = (Timestamp::now() - SignedDuration::from_mins(2)).to_string();
    index_web(
        &ctx,
        &[
            (keys::ANNOTATION_RECREATE_SCHEDULE, "* * * * *"),
            (keys::ANNOTATION_LAST_SCHEDULED, &last),
        ],
    );
    let server = tokio::spawn(async move {
        let rollout = expect_rollout(&mut handle).await;
        assert_eq!(rollout["spec"]["containers"], json!(["app", "proxy"]));
        assert_eq!(
            rollout["metadata"]["labels"][keys::LABEL_ROLLOUT_TRIGGER],
            "schedule"
        );
        let tick = expect_last_scheduled(&mut handle).await;
        assert_eq!(tick.as_second() % 60, 0, "a whole minute: {tick}");
        assert_eq!(
            rollout["metadata"]["name"],
            format!("web-schedule-{}", tick.as_second()).as_str()
        );
        let note = expect_event(&mut handle, "Normal", "ScheduledRollout").await;
        assert!(note.contains(&format!("the tick at {tick}")), "{note}");
    });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    server.await.expect("scripted API server");
    let again = again.expect("sleeps until the next tick");
    assert!(again <= Duration::from_secs(60), "{again:?}");
}

#[tokio::test]
async fn a_tick_while_the_scheduled_rollout_runs_is_skipped_with_a_warning() {
    let earlier = running(&Cause::Schedule {
        tick: Timestamp::UNIX_EPOCH,
    });
    let earlier_name = kube::ResourceExt::name_any(&earlier);
    let (ctx, mut handle) = context(vec![earlier]);
    let last = (Timestamp::now() - SignedDuration::from_mins(2)).to_string();
    index_web(
        &ctx,
        &[
            (keys::ANNOTATION_RECREATE_SCHEDULE, "* * * * *"),
            (keys::ANNOTATION_LAST_SCHEDULED, &last),
        ],
    );
    let server = tokio::spawn(async move {
        // No rollout: the tick is recorded as done, and a Warning says why.
        let tick = expect_last_scheduled(&mut handle).await;
        let note = expect_event(&mut handle, "Warning", "ScheduledRolloutSkipped").await;
        assert!(
            note.contains(&format!(
                "the tick at {tick} is skipped: rollout {earlier_name} still runs"
            )),
            "{note}"
        );
    });
    evaluate(&ctx, &web()).await.expect("evaluates");
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn a_workload_the_index_does_not_hold_is_not_evaluated() {
    let (ctx, _handle) = context(Vec::new());
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
}

/// `web` recorded with app-config at `from` (read at version 1) and now seen at version 2 with
/// `to`: a change to roll out. Returns the context, the scripted API server, app-config as it is
/// now, the record the rollout writes and the rollout's first name.
fn changed_app_config(from: &str, to: &str) -> (TriggerContext, Handle, ConfigMap, Hashes, String) {
    changed_app_config_beside(from, to, Vec::new())
}

/// [`changed_app_config`] with `rollouts` in the rollout cache.
fn changed_app_config_beside(
    from: &str,
    to: &str,
    rollouts: Vec<ContainerRecreateRollout>,
) -> (TriggerContext, Handle, ConfigMap, Hashes, String) {
    let before = config_map("app-config", "1", from);
    let proxy = config_map("proxy-config", "1", "p");
    let recorded = serde_json::to_string(&record_of(&[
        ("configmap/app-config", &hash::config_map(&before)),
        ("configmap/proxy-config", &hash::config_map(&proxy)),
    ]))
    .expect("JSON");
    let (ctx, handle) = context(rollouts);
    index_web(
        &ctx,
        &[CONFIG_CHANGE, (keys::ANNOTATION_CONFIG_HASHES, &recorded)],
    );
    for (object, map) in [(app_config(), &before), (proxy_config(), &proxy)] {
        seen(&ctx, object.clone(), "1");
        ctx.index().record_read(
            in_shop(object),
            Some(ReadHash {
                version: "1".to_owned(),
                hash: hash::config_map(map),
            }),
        );
    }
    seen(&ctx, app_config(), "2");
    let after = config_map("app-config", "2", to);
    let expected = record_of(&[
        ("configmap/app-config", &hash::config_map(&after)),
        ("configmap/proxy-config", &hash::config_map(&proxy)),
    ]);
    let first = format!("web-config-{}", &hash::record(&expected)[..10]);
    (ctx, handle, after, expected, first)
}

/// Answers the creation of the rollout named `name` with 409, then its GET with `existing` (the
/// body posted, with `status`); returns the body posted.
async fn name_held(handle: &mut Handle, name: &str, status: Option<Value>) -> Value {
    let (body, send) = expect(handle, Method::POST, ROLLOUTS_PATH).await;
    assert_eq!(body["metadata"]["name"], name);
    send.send_response(respond(
        StatusCode::CONFLICT,
        &api_status(409, "AlreadyExists"),
    ));
    let (_, send) = expect(handle, Method::GET, &format!("{ROLLOUTS_PATH}/{name}")).await;
    let mut existing = body.clone();
    if let Some(status) = status {
        existing["status"] = status;
    }
    send.send_response(respond(StatusCode::OK, &existing));
    body
}

/// The rollout of a change that goes back to data rolled out before: its first name is held by
/// that earlier rollout, which ended, so the next name is taken (never the old one as done).
#[tokio::test]
async fn a_return_to_earlier_data_rolls_out_under_the_next_name_when_the_first_ended() {
    // The rollout of v3, made after v2's.
    let mut of_v3 = running(&Cause::ConfigChange {
        changed: vec![ConfigRef::config_map("app-config")],
        record: "v3v3v3v3v3v3".to_owned(),
    });
    of_v3.metadata.uid = Some("uid-of-v3".to_owned());
    of_v3.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::from_second(1_800_000_000).expect("a time"),
    ));
    of_v3.status = Some(crr_crds::rollout::ContainerRecreateRolloutStatus {
        phase: Some("Completed".to_owned()),
        ..Default::default()
    });
    let (ctx, mut handle, after, expected, first) =
        changed_app_config_beside("v3", "v2", vec![of_v3]);
    let server = tokio::spawn(async move {
        serve(&mut handle, APP_CONFIG_PATH, &after).await;
        // The rollout that rolled v2 out the first time still holds the name, Completed.
        name_held(&mut handle, &first, Some(json!({"phase": "Completed"}))).await;
        let rollout = expect_rollout(&mut handle).await;
        let second = format!("{first}-2");
        assert_eq!(rollout["metadata"]["name"], second.as_str());
        assert_eq!(expect_record(&mut handle).await, expected);
        let note = expect_event(&mut handle, "Normal", "ConfigChanged").await;
        assert!(
            note.contains(&format!("rollout {second} recreates app")),
            "{note}"
        );
    });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    assert_eq!(again, None);
    server.await.expect("scripted API server");
}

/// A leader that created the rollout and failed before recording it: the next leader finds its
/// rollout under the first name, still to run, and only writes the record (no second rollout,
/// no second Event).
#[tokio::test]
async fn an_earlier_try_found_under_the_name_is_recorded_not_created_again() {
    let (ctx, mut handle, after, expected, first) = changed_app_config("old", "new");
    let server = tokio::spawn(async move {
        serve(&mut handle, APP_CONFIG_PATH, &after).await;
        // As created: no status yet.
        name_held(&mut handle, &first, None).await;
        assert_eq!(expect_record(&mut handle).await, expected);
        // The script ends here: another POST or an Event would fail the evaluation.
    });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    assert_eq!(again, None);
    server.await.expect("scripted API server");
}

/// A rollout made and done, whose record write was refused (a 403, a deposed leader): the next
/// evaluation finds it under the change's name, the newest of the workload's, and only writes
/// the record. The pods are restarted once for one change.
#[tokio::test]
async fn a_done_rollout_whose_record_write_failed_is_recorded_not_made_again() {
    let (ctx, mut handle, after, expected, first) = changed_app_config("old", "new");
    let server = tokio::spawn(async move {
        serve(&mut handle, APP_CONFIG_PATH, &after).await;
        name_held(&mut handle, &first, Some(json!({"phase": "Completed"}))).await;
        assert_eq!(expect_record(&mut handle).await, expected);
    });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    assert_eq!(again, None);
    server.await.expect("scripted API server");
}

/// A trigger's rollout the API server refuses (admission: a container the template lacks, say)
/// is a `BadTriggerAnnotation` Warning on the workload naming the refusal, once however often the
/// evaluation is retried, and the evaluation's error.
#[tokio::test]
async fn a_refused_trigger_rollout_is_one_warning_on_the_workload() {
    let (ctx, mut handle, after, _, _) = changed_app_config("old", "new");
    let refused = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "admission webhook denied the request: container nope not found",
        "reason": "BadRequest", "code": 400,
    });
    let server = tokio::spawn({
        let refused = refused.clone();
        async move {
            serve(&mut handle, APP_CONFIG_PATH, &after).await;
            let (_, send) = expect(&mut handle, Method::POST, ROLLOUTS_PATH).await;
            send.send_response(respond(StatusCode::BAD_REQUEST, &refused));
            let note = expect_event(&mut handle, "Warning", "BadTriggerAnnotation").await;
            assert!(note.contains("container nope not found"), "{note}");
            assert!(note.contains("config-change trigger's rollout"), "{note}");
            handle
        }
    });
    let error = evaluate(&ctx, &web()).await.expect_err("refused");
    assert_eq!(error.kind(), "api");
    let mut handle = server.await.expect("scripted API server");
    // Retried: refused again, and no second Event.
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut handle, Method::POST, ROLLOUTS_PATH).await;
        send.send_response(respond(StatusCode::BAD_REQUEST, &refused));
        expect_nothing_more(&mut handle).await;
    });
    evaluate(&ctx, &web()).await.expect_err("refused again");
    server.await.expect("scripted API server");
}

/// Every bad trigger annotation of a workload goes in one Warning Event (Events of one object
/// and reason are one series, whose note stays the first), given once while the annotations
/// stay, and again once they change to another problem (counted in that series).
#[tokio::test]
async fn bad_annotations_are_one_event_given_again_only_when_they_change() {
    let (ctx, mut handle) = context(Vec::new());
    let bad = [
        (keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE, "yes please"),
        (keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE, "lots"),
        (keys::ANNOTATION_RECREATE_SCHEDULE, "every day"),
    ];
    index_web(&ctx, &bad);
    let server = tokio::spawn(async move {
        let note = expect_event(&mut handle, "Warning", "BadTriggerAnnotation").await;
        for annotation in [
            keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE,
            keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE,
            keys::ANNOTATION_RECREATE_SCHEDULE,
        ] {
            assert!(
                note.contains(&format!("annotation {annotation}: ")),
                "{note}"
            );
        }
        handle
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    let mut handle = server.await.expect("scripted API server");
    // The same annotations again: no Event (the script has no step for one).
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    // Another problem: an Event again.
    ctx.index().apply_workload(WorkloadEvent::Gone(web()));
    index_web(&ctx, &[(keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE, "many")]);
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("an Event again");
        assert_eq!(request.method(), Method::PATCH, "the series counts it");
        assert!(
            request.uri().path().starts_with(&format!("{EVENTS_PATH}/")),
            "{}",
            request.uri()
        );
        send.send_response(respond(StatusCode::OK, &json!({})));
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    server.await.expect("scripted API server");
}

#[tokio::test]
async fn a_template_of_too_many_references_is_refused_with_one_event_and_no_read() {
    let (ctx, mut handle) = context(Vec::new());
    // What the workload watch indexes of a template with 300 ConfigMaps: their count, not them.
    let many: Vec<_> = (0..300)
        .map(|index| {
            (
                ConfigRef::config_map(format!("c-{index}")),
                ["app".to_owned()].into(),
            )
        })
        .collect();
    let entry = crate::triggers::controller::entry_of(
        crate::triggers::workload_view::SlimWorkload {
            metadata: ObjectMeta {
                name: Some("web".to_owned()),
                namespace: Some("shop".to_owned()),
                uid: Some("uid-web".to_owned()),
                annotations: Some(
                    [(
                        keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE.to_owned(),
                        "true".to_owned(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            containers: vec!["app".to_owned()],
            references: many.into_iter().collect(),
            mounted: Default::default(),
            runs_reloader: false,
        },
        false,
    )
    .expect("a workload with a trigger");
    assert_eq!(entry.references_refused, Some(300));
    assert!(entry.references.is_empty(), "none of them is kept");
    ctx.index().apply_workload(WorkloadEvent::Seen {
        key: web(),
        entry: Some(entry),
    });
    // One Warning Event, and no read of any ConfigMap, no record, no rollout: the script has
    // no other step, and the mock fails a request it does not expect.
    let server = tokio::spawn(async move {
        let note = expect_event(&mut handle, "Warning", "TooManyConfigReferences").await;
        assert!(
            note.contains("300 ConfigMaps and Secrets, more than 256"),
            "{note}"
        );
        handle
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    let _handle = server.await.expect("scripted API server");
    assert_eq!(
        evaluate(&ctx, &web()).await.expect("evaluates"),
        None,
        "no Event again"
    );
    let refused = ctx
        .metrics
        .warnings
        .get_or_create(&crate::triggers::metrics::ReasonLabels {
            reason: "TooManyConfigReferences",
        })
        .get();
    assert_eq!(refused, 1, "one Warning, counted once");
}

#[tokio::test]
async fn finished_trigger_rollouts_beyond_the_newest_three_are_deleted_when_the_workload_is_evaluated()
 {
    use crr_crds::rollout::ContainerRecreateRolloutStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let finished = |name: &str, completed: i64| {
        let mut rollout = running(&Cause::Schedule {
            tick: Timestamp::from_second(completed).unwrap(),
        });
        rollout.metadata.name = Some(name.to_owned());
        rollout.status = Some(ContainerRecreateRolloutStatus {
            phase: Some("Completed".to_owned()),
            completion_time: Some(Time(Timestamp::from_second(completed).unwrap())),
            ..ContainerRecreateRolloutStatus::default()
        });
        rollout
    };
    let (ctx, mut handle) = context(vec![
        finished("web-oldest", 100),
        finished("web-b", 200),
        finished("web-c", 300),
        finished("web-d", 400),
        finished("web-older", 150),
    ]);
    index_web(&ctx, &[(keys::ANNOTATION_RECREATE_SCHEDULE, "0 3 * * *")]);
    let server = tokio::spawn(async move {
        let mut deleted = Vec::new();
        for (code, body) in [
            (
                StatusCode::OK,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
            ),
            (StatusCode::NOT_FOUND, api_status(404, "NotFound")),
        ] {
            let (request, send) = handle.next_request().await.expect("a delete");
            assert_eq!(request.method(), Method::DELETE);
            deleted.push(request.uri().path().to_owned());
            send.send_response(respond(code, &body));
        }
        expect_last_scheduled(&mut handle).await;
        deleted
    });
    evaluate(&ctx, &web())
        .await
        .expect("evaluates; a rollout already gone is fine");
    let mut deleted = server.await.expect("scripted API server");
    deleted.sort();
    assert_eq!(
        deleted,
        [
            format!("{ROLLOUTS_PATH}/web-older"),
            format!("{ROLLOUTS_PATH}/web-oldest")
        ]
    );
}

/// The record watch shows `web`'s record with `field`.
fn recorded_in_object(ctx: &TriggerContext, field: &crate::triggers::record::Field<'_>) {
    let mut object = crate::triggers::record::apply(&web(), "uid-web", field);
    object.metadata.resource_version = Some("50".to_owned());
    ctx.records().apply(watcher::Event::Apply(object));
}

/// `web` indexed with app-config and proxy-config read at version 1 with the data `app` and `p`;
/// returns their hashes as a record.
fn read_as_recorded(ctx: &TriggerContext, annotations: &[(&str, &str)]) -> Hashes {
    index_web(ctx, annotations);
    let mut record = Hashes::new();
    for (object, value) in [(app_config(), "app"), (proxy_config(), "p")] {
        let map = config_map(&object.name, "1", value);
        seen(ctx, object.clone(), "1");
        let hash = hash::config_map(&map);
        ctx.index().record_read(
            in_shop(object.clone()),
            Some(ReadHash {
                version: "1".to_owned(),
                hash: hash.clone(),
            }),
        );
        record.insert(object.to_string(), hash);
    }
    record
}

/// A workload whose annotation of before matches the data gets it written as its record, once:
/// with the record there, nothing is written again.
#[tokio::test]
async fn an_up_to_date_annotation_of_before_becomes_the_record_once() {
    let (ctx, mut handle) = context(Vec::new());
    let current = read_as_recorded(&ctx, &[CONFIG_CHANGE]);
    let text = serde_json::to_string(&current).expect("JSON");
    index_web(
        &ctx,
        &[CONFIG_CHANGE, (keys::ANNOTATION_CONFIG_HASHES, &text)],
    );
    let expected = current.clone();
    let server = tokio::spawn(async move {
        assert_eq!(expect_record(&mut handle).await, expected);
        handle
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    let _handle = server.await.expect("scripted API server");
    // The answer is the record now (before its watch event comes back): no write again; the
    // mock fails any request.
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
}

/// Once a workload has its record, the annotation of before is never read: here it claims other
/// data, and the record, up to date, says there is nothing to do.
#[tokio::test]
async fn the_record_wins_over_the_annotation_of_before() {
    let (ctx, _handle) = context(Vec::new());
    let current = read_as_recorded(&ctx, &[CONFIG_CHANGE]);
    index_web(
        &ctx,
        &[
            CONFIG_CHANGE,
            (
                keys::ANNOTATION_CONFIG_HASHES,
                r#"{"configmap/app-config":"0000","configmap/proxy-config":"0000"}"#,
            ),
        ],
    );
    recorded_in_object(
        &ctx,
        &crate::triggers::record::Field::ConfigHashes {
            hashes: &current,
            pending: None,
        },
    );
    // No rollout, no write: the mock fails any request.
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
}

/// A record of an earlier workload of the same name (deleted and made again, its record not yet
/// collected) is not this one's: first sight, recorded, nothing rolled out.
#[tokio::test]
async fn the_record_of_an_earlier_workload_of_the_name_is_first_sight() {
    let (ctx, mut handle) = context(Vec::new());
    let current = read_as_recorded(&ctx, &[CONFIG_CHANGE]);
    let stale: Hashes = [("configmap/app-config".to_owned(), "0000".to_owned())].into();
    let mut object = crate::triggers::record::apply(
        &web(),
        "uid-earlier",
        &crate::triggers::record::Field::ConfigHashes {
            hashes: &stale,
            pending: None,
        },
    );
    object.metadata.resource_version = Some("50".to_owned());
    ctx.records().apply(watcher::Event::Apply(object));
    let server = tokio::spawn(async move {
        assert_eq!(expect_record(&mut handle).await, current);
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    server.await.expect("scripted API server");
}

/// A schedule's tick of before, waiting for its next tick, becomes the record's.
#[tokio::test]
async fn a_tick_of_before_becomes_the_record_while_the_schedule_waits() {
    let (ctx, mut handle) = context(Vec::new());
    let last: Timestamp = (Timestamp::now() - SignedDuration::from_mins(2))
        .round(jiff::Unit::Second)
        .expect("rounds");
    let text = last.to_string();
    index_web(
        &ctx,
        &[
            (keys::ANNOTATION_RECREATE_SCHEDULE, "0 3 1 1 *"),
            (keys::ANNOTATION_LAST_SCHEDULED, &text),
        ],
    );
    let server = tokio::spawn(async move { expect_last_scheduled(&mut handle).await });
    let again = evaluate(&ctx, &web()).await.expect("evaluates");
    assert_eq!(server.await.expect("scripted API server"), last);
    assert!(again.is_some_and(|again| again <= Duration::from_secs(60)));
}

/// A daily window (UTC) from `from` to `to` minutes after now: closed now when both are ahead.
fn window_from_now(from: i64, to: i64) -> String {
    let at = |minutes: i64| {
        let time = (Timestamp::now() + SignedDuration::from_mins(minutes))
            .to_zoned(jiff::tz::TimeZone::UTC)
            .time();
        format!("{:02}:{:02}", time.hour(), time.minute())
    };
    format!("{}-{}", at(from), at(to))
}

/// A change outside the window: no rollout; the record keeps the hashes rolled out before and
/// says what waits and until when, with one Event; looked at again, nothing new is written.
#[tokio::test]
async fn a_change_outside_the_window_waits_in_the_record_with_one_event() {
    let (ctx, mut handle, after, _expected, _first) = changed_app_config("old", "new");
    let window = window_from_now(120, 180);
    let recorded = record::recorded_hashes(
        None,
        &ctx.index().workload(&web()).expect("indexed").annotations,
    );
    index_web(
        &ctx,
        &[
            CONFIG_CHANGE,
            (
                keys::ANNOTATION_CONFIG_HASHES,
                &serde_json::to_string(&recorded).expect("JSON"),
            ),
            (keys::ANNOTATION_RECREATE_WINDOW, &window),
        ],
    );
    let server = tokio::spawn(async move {
        serve(&mut handle, APP_CONFIG_PATH, &after).await;
        let spec = expect_record_apply(&mut handle).await;
        let note = expect_event(&mut handle, "Normal", "ConfigChangePending").await;
        (spec, note, handle)
    });
    let again = evaluate(&ctx, &web())
        .await
        .expect("evaluates")
        .expect("looks again");
    let (spec, note, _handle) = server.await.expect("scripted API server");
    assert_eq!(
        serde_json::from_value::<Hashes>(spec["configHashes"].clone()).ok(),
        recorded,
        "the hashes rolled out before stay"
    );
    assert_eq!(
        spec["pendingChange"]["changed"],
        json!(["configmap/app-config"])
    );
    let runs_at: Timestamp = spec["pendingChange"]["runsAt"]
        .as_str()
        .expect("runsAt")
        .parse()
        .expect("a time");
    let until = runs_at.duration_since(Timestamp::now());
    assert!(
        until > SignedDuration::from_mins(110) && until <= SignedDuration::from_mins(120),
        "{runs_at}"
    );
    assert!(note.contains("waits for the restart window"), "{note}");
    assert!(again <= Duration::from_secs(3600), "{again:?}");
    assert_eq!(ctx.metrics.pending_changes.get(), 1, "one change waits");
    // Again, with the record as written: no write, no Event (the mock fails any request).
    assert!(evaluate(&ctx, &web()).await.expect("evaluates").is_some());
}

/// The window open: the change waiting in the record is rolled out, and the record says it
/// waits no more.
#[tokio::test]
async fn a_waiting_change_rolls_out_once_the_window_is_open() {
    let (ctx, mut handle, after, expected, first) = changed_app_config("old", "new");
    let window = window_from_now(-60, 60);
    let recorded = record::recorded_hashes(
        None,
        &ctx.index().workload(&web()).expect("indexed").annotations,
    )
    .expect("recorded");
    let pending = crr_crds::trigger_record::PendingChange {
        since: Timestamp::now().to_string(),
        changed: vec!["configmap/app-config".to_owned()],
        runs_at: Timestamp::now().to_string(),
    };
    recorded_in_object(
        &ctx,
        &record::Field::ConfigHashes {
            hashes: &recorded,
            pending: Some(&pending),
        },
    );
    index_web(
        &ctx,
        &[CONFIG_CHANGE, (keys::ANNOTATION_RECREATE_WINDOW, &window)],
    );
    let server = tokio::spawn(async move {
        serve(&mut handle, APP_CONFIG_PATH, &after).await;
        let rollout = expect_rollout(&mut handle).await;
        assert_eq!(rollout["metadata"]["name"], first.as_str());
        let spec = expect_record_apply(&mut handle).await;
        assert!(spec.get("pendingChange").is_none(), "{spec}");
        assert_eq!(
            serde_json::from_value::<Hashes>(spec["configHashes"].clone()).expect("hashes"),
            expected
        );
        expect_event(&mut handle, "Normal", "ConfigChanged").await;
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    server.await.expect("scripted API server");
}

const RESTART_AT: &str = "2026-11-29T20:00:00Z";

/// A new value of `crr.dev/restart-requested-at`: one rollout of every container, the value
/// recorded, one Event; the value recorded, nothing again.
#[tokio::test]
async fn a_requested_restart_runs_once_per_value() {
    let (ctx, mut handle) = context(Vec::new());
    index_web(&ctx, &[(keys::ANNOTATION_RESTART_REQUESTED_AT, RESTART_AT)]);
    let server = tokio::spawn(async move {
        let rollout = expect_rollout(&mut handle).await;
        assert_eq!(
            rollout["metadata"]["name"],
            format!("web-restart-{}", &hash::restart_value(RESTART_AT)[..10]).as_str()
        );
        assert_eq!(rollout["spec"]["containers"], json!(["app", "proxy"]));
        assert_eq!(
            rollout["metadata"]["labels"][keys::LABEL_ROLLOUT_TRIGGER],
            "restart"
        );
        let spec = expect_record_apply(&mut handle).await;
        assert_eq!(spec["restartRequested"], RESTART_AT);
        assert!(
            spec.get("configHashes").is_none(),
            "only its own field: {spec}"
        );
        let note = expect_event(&mut handle, "Normal", "RestartRequested").await;
        assert!(
            note.contains(&format!("restart requested: {RESTART_AT}")),
            "{note}"
        );
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    server.await.expect("scripted API server");
    // Recorded (the answer to the write): nothing again, the mock fails any request.
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    let created = |trigger| {
        ctx.metrics
            .rollouts
            .get_or_create(&crate::triggers::metrics::TriggerLabels { trigger })
            .get()
    };
    assert_eq!((created("restart"), created("config-change")), (1, 0));
}

/// A leader that created the restart's rollout and failed before recording the value: the next
/// finds the rollout under the value's name, even finished, and only records it.
#[tokio::test]
async fn a_requested_restart_found_done_under_its_name_is_recorded_not_run_again() {
    let (ctx, mut handle) = context(Vec::new());
    index_web(&ctx, &[(keys::ANNOTATION_RESTART_REQUESTED_AT, RESTART_AT)]);
    let first = format!("web-restart-{}", &hash::restart_value(RESTART_AT)[..10]);
    let server = tokio::spawn(async move {
        name_held(&mut handle, &first, Some(json!({"phase": "Completed"}))).await;
        let spec = expect_record_apply(&mut handle).await;
        assert_eq!(spec["restartRequested"], RESTART_AT);
        // No second rollout, no Event: the script ends here.
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    server.await.expect("scripted API server");
}

/// A new value while the restart of an earlier one runs waits for it.
#[tokio::test]
async fn a_requested_restart_waits_for_the_one_that_runs() {
    let earlier = running(&Cause::Restart {
        value: "earlier".to_owned(),
        hash: hash::restart_value("earlier"),
    });
    let (ctx, _handle) = context(vec![earlier]);
    index_web(&ctx, &[(keys::ANNOTATION_RESTART_REQUESTED_AT, RESTART_AT)]);
    assert_eq!(
        evaluate(&ctx, &web()).await.expect("evaluates"),
        Some(WAIT_FOR_RUNNING)
    );
}

/// With Reloader's annotations honoured, a workload that carries one crr does not read is told
/// so, once: the Warning names it.
#[tokio::test]
async fn reloaders_annotations_crr_does_not_read_are_named_in_one_warning() {
    let (mut ctx, mut handle) = context(Vec::new());
    ctx.settings.reloader_annotations = true;
    index_web(
        &ctx,
        &[
            ("reloader.stakater.com/search", "true"),
            ("configmap.reloader.stakater.com/auto", "true"),
        ],
    );
    let server = tokio::spawn(async move {
        expect_event(&mut handle, "Warning", "ReloaderAnnotationNotRead").await
    });
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
    let note = server.await.expect("scripted API server");
    assert!(
        note.contains(
            "crr does not read reloader.stakater.com/search, configmap.reloader.stakater.com/auto"
        ),
        "{note}"
    );
    // Again: no second Event (the mock fails any request).
    assert_eq!(evaluate(&ctx, &web()).await.expect("evaluates"), None);
}
