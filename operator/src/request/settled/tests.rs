use std::collections::BTreeMap;
use std::time::Duration;

use crr_crds::v1beta1::{ContainerRecreateRequestSpec, ContainerRecreateRequestStatus, Phase};
use http::{Method, StatusCode};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::reflector::{ObjectRef, store::Writer};

use super::*;
use crate::api_mock::{api_status, expect, respond};
use crate::request::context::mocked as context;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
}

/// A request in `namespace/name`, completed at `completed` (unfinished when `None`).
fn request(name: &str, completed: Option<Timestamp>, ttl: Option<i32>) -> ContainerRecreateRequest {
    ContainerRecreateRequest {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("tenant".to_owned()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("1".to_owned()),
            ..ObjectMeta::default()
        },
        spec: ContainerRecreateRequestSpec {
            pod_name: "web-0".to_owned(),
            ttl_seconds_after_finished: ttl,
            ..ContainerRecreateRequestSpec::default()
        },
        status: Some(ContainerRecreateRequestStatus {
            phase: Some(if completed.is_some() {
                Phase::Completed
            } else {
                Phase::Recreating
            }),
            completion_time: completed.map(Time),
            ..ContainerRecreateRequestStatus::default()
        }),
    }
}

fn labelled(mut crr: ContainerRecreateRequest, key: &str) -> ContainerRecreateRequest {
    crr.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), "x".to_owned());
    crr
}

fn key(name: &str) -> Key {
    ("tenant".into(), name.into())
}

fn names(due: &[Due]) -> Vec<&str> {
    let mut names: Vec<&str> = due.iter().map(|due| due.name.as_str()).collect();
    names.sort_unstable();
    names
}

#[test]
fn a_settled_request_becomes_an_entry_with_its_expiry() {
    let (entry_key, settled) =
        settled_entry(&request("done", Some(at(10)), Some(60))).expect("settled");
    assert_eq!(entry_key, key("done"));
    assert_eq!(
        settled,
        Settled {
            uid: Some("uid-done".into()),
            has_ttl: true,
            expiry: Some(at(70)),
        }
    );
    let (_, kept) = settled_entry(&request("kept", Some(at(10)), None)).expect("settled");
    assert_eq!((kept.has_ttl, kept.expiry), (false, None));
}

#[test]
fn requests_the_operator_still_acts_on_or_a_rollout_reads_are_no_entries() {
    let done = || request("done", Some(at(10)), Some(60));
    assert_eq!(settled_entry(&request("running", None, Some(60))), None);
    assert_eq!(settled_entry(&labelled(done(), keys::LABEL_ACTIVE)), None);
    assert_eq!(settled_entry(&labelled(done(), keys::LABEL_ROLLOUT)), None);
    let mut finalized = done();
    finalized.metadata.finalizers = Some(vec![keys::FINALIZER_UNREADY_ACQUIRED.to_owned()]);
    assert_eq!(settled_entry(&finalized), None);
    let mut deleting = done();
    deleting.metadata.deletion_timestamp = Some(Time(at(20)));
    assert_eq!(settled_entry(&deleting), None);
}

/// Routes `events` through `index` into a real reflector store and returns the store's keys.
fn store_after(
    index: &SettledIndex,
    events: Vec<watcher::Event<ContainerRecreateRequest>>,
) -> Vec<String> {
    let mut writer: Writer<ContainerRecreateRequest> = Writer::default();
    let store = writer.as_reader();
    for event in events {
        if let Some(event) = index.route(event) {
            writer.apply_watcher_event(&event);
        }
    }
    let mut names: Vec<String> = store.state().iter().map(|crr| crr.name_any()).collect();
    names.sort();
    names
}

#[test]
fn a_request_that_settles_leaves_the_store_for_the_index() {
    let index = SettledIndex::default();
    let active = labelled(request("a", Some(at(10)), Some(60)), keys::LABEL_ACTIVE);
    let settled = request("a", Some(at(10)), Some(60));
    let names = store_after(
        &index,
        vec![
            watcher::Event::Init,
            watcher::Event::InitApply(active),
            watcher::Event::InitApply(request("b", None, None)),
            watcher::Event::InitDone,
            watcher::Event::Apply(settled),
        ],
    );
    assert_eq!(names, ["b"]);
    assert_eq!(index.len(), 1);
    assert_eq!(
        index
            .state()
            .entries
            .get("tenant", "a")
            .and_then(|s| s.expiry),
        Some(at(70))
    );
}

#[test]
fn a_settled_request_that_changes_back_returns_to_the_store() {
    let index = SettledIndex::default();
    let names = store_after(
        &index,
        vec![
            watcher::Event::Init,
            watcher::Event::InitApply(request("a", Some(at(10)), Some(60))),
            watcher::Event::InitDone,
            watcher::Event::Apply(labelled(
                request("a", Some(at(10)), Some(60)),
                keys::LABEL_ACTIVE,
            )),
        ],
    );
    assert_eq!(names, ["a"]);
    assert!(index.is_empty());
}

#[test]
fn requests_of_rollouts_stay_in_the_store() {
    let index = SettledIndex::default();
    let of_rollout = labelled(request("r", Some(at(10)), Some(60)), keys::LABEL_ROLLOUT);
    let names = store_after(
        &index,
        vec![
            watcher::Event::Init,
            watcher::Event::InitApply(of_rollout.clone()),
            watcher::Event::InitDone,
            watcher::Event::Apply(of_rollout),
        ],
    );
    assert_eq!(names, ["r"]);
    assert!(index.is_empty());
}

#[test]
fn a_deleted_request_leaves_the_index() {
    let index = SettledIndex::default();
    let done = request("a", Some(at(10)), Some(60));
    store_after(
        &index,
        vec![
            watcher::Event::Apply(done.clone()),
            watcher::Event::Delete(done),
        ],
    );
    assert!(index.is_empty());
}

#[test]
fn a_relist_rebuilds_the_index_and_keeps_serving_the_old_one_meanwhile() {
    let index = SettledIndex::default();
    store_after(
        &index,
        vec![
            watcher::Event::Init,
            watcher::Event::InitApply(request("gone", Some(at(10)), Some(60))),
            watcher::Event::InitApply(request("stays", Some(at(10)), Some(60))),
            watcher::Event::InitDone,
        ],
    );
    assert_eq!(index.len(), 2);
    let mut writer: Writer<ContainerRecreateRequest> = Writer::default();
    for event in [
        watcher::Event::Init,
        watcher::Event::InitApply(request("stays", Some(at(10)), Some(60))),
        watcher::Event::InitApply(request("new", Some(at(10)), None)),
    ] {
        assert!(
            index.route(event).is_none_or(|event| {
                writer.apply_watcher_event(&event);
                matches!(event, watcher::Event::Init)
            }),
            "a settled request of the re-list never reaches the store"
        );
    }
    assert_eq!(
        index.len(),
        2,
        "the old entries serve until the re-list ends"
    );
    index.route(watcher::Event::InitDone);
    let mut kept: Vec<Key> = index
        .state()
        .entries
        .iter()
        .map(|settled| (settled.namespace.into(), settled.name.into()))
        .collect();
    kept.sort();
    assert_eq!(kept, [key("new"), key("stays")]);
    assert_eq!(index.without_ttl(), 1);
}

#[test]
fn due_returns_the_expired_and_the_next_expiry() {
    let index = SettledIndex::default();
    for (name, completed, ttl) in [
        ("old", 0, Some(10)),
        ("just", 5, Some(5)),
        ("later", 10, Some(100)),
        ("sooner", 10, Some(50)),
        ("never", 0, None),
    ] {
        index.route(watcher::Event::Apply(request(
            name,
            Some(at(completed)),
            ttl,
        )));
    }
    let (due, next) = index.due(at(10));
    assert_eq!(names(&due), ["just", "old"]);
    assert_eq!(next, Some(at(60)));
    assert_eq!(
        due.iter()
            .find(|d| d.name == "old")
            .and_then(|d| d.uid.as_deref()),
        Some("uid-old")
    );
}

#[test]
fn forget_and_retry_touch_only_the_same_request() {
    let index = SettledIndex::default();
    index.route(watcher::Event::Apply(request("a", Some(at(0)), Some(1))));
    let (due, _) = index.due(at(10));
    let mut other = due[0].clone();
    other.uid = Some("uid-of-a-new-a".to_owned());
    index.forget(&other);
    index.retry_at(&other, at(500));
    assert_eq!(
        names(&index.due(at(10)).0),
        ["a"],
        "another request's UID changes nothing"
    );
    index.retry_at(&due[0], at(30));
    assert!(index.due(at(20)).0.is_empty());
    assert_eq!(names(&index.due(at(30)).0), ["a"]);
    index.forget(&due[0]);
    assert!(index.is_empty());
}

#[tokio::test]
async fn an_earlier_expiry_wakes_the_loop_and_a_later_one_does_not() {
    let index = SettledIndex::default();
    index.route(watcher::Event::Apply(request("a", Some(at(0)), Some(100))));
    let _ = index.due(at(10));
    let woke = |index: &SettledIndex| futures::FutureExt::now_or_never(index.changed()).is_some();
    let _ = woke(&index);
    index.route(watcher::Event::Apply(request(
        "later",
        Some(at(0)),
        Some(500),
    )));
    assert!(!woke(&index));
    index.route(watcher::Event::Apply(request(
        "sooner",
        Some(at(0)),
        Some(50),
    )));
    assert!(woke(&index));
}

const PATH: &str = "/apis/apps.kruise.io/v1beta1/namespaces/tenant/containerrecreaterequests";

fn expired(name: &str) -> ContainerRecreateRequest {
    request(
        name,
        Some(Timestamp::now() - SignedDuration::from_secs(120)),
        Some(60),
    )
}

#[tokio::test]
async fn the_leader_deletes_expired_requests_by_uid_without_an_event() {
    let (ctx, mut handle, _leader) = context(true);
    let index = Arc::new(SettledIndex::default());
    index.route(watcher::Event::Apply(expired("done")));
    index.route(watcher::Event::Apply(request(
        "fresh",
        Some(Timestamp::now()),
        Some(3600),
    )));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let expiring = tokio::spawn(expire_while_leading(ctx, index.clone(), async {
        let _ = stopped.await;
    }));

    let (body, send) = expect(&mut handle, Method::DELETE, &format!("{PATH}/done")).await;
    assert_eq!(body["preconditions"]["uid"], "uid-done");
    send.send_response(respond(StatusCode::OK, &api_status(200, "Success")));

    // No Event about the deleted request, and nothing else is due: the loop sleeps without
    // calling the API server.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), handle.next_request())
            .await
            .is_err()
    );
    assert_eq!(index.len(), 1, "the fresh request waits for its TTL");
    let _ = stop.send(());
    expiring.await.expect("the loop ends on shutdown");
}

#[tokio::test]
async fn a_replaced_request_is_forgotten_and_a_failed_deletion_is_retried_later() {
    let (ctx, mut handle, _leader) = context(true);
    let index = Arc::new(SettledIndex::default());
    index.route(watcher::Event::Apply(expired("replaced")));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let expiring = tokio::spawn(expire_while_leading(ctx.clone(), index.clone(), async {
        let _ = stopped.await;
    }));
    let (_, send) = expect(&mut handle, Method::DELETE, &format!("{PATH}/replaced")).await;
    send.send_response(respond(StatusCode::CONFLICT, &api_status(409, "Conflict")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        index.is_empty(),
        "a UID precondition that fails means another request now"
    );

    index.route(watcher::Event::Apply(expired("flaky")));
    let (_, send) = expect(&mut handle, Method::DELETE, &format!("{PATH}/flaky")).await;
    send.send_response(respond(
        StatusCode::INTERNAL_SERVER_ERROR,
        &api_status(500, "InternalError"),
    ));
    // Retried after the backoff (about 0.5 s first), not at once.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), handle.next_request())
            .await
            .is_err(),
        "no immediate retry"
    );
    let (_, send) = expect(&mut handle, Method::DELETE, &format!("{PATH}/flaky")).await;
    send.send_response(respond(StatusCode::NOT_FOUND, &api_status(404, "NotFound")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(index.is_empty());
    assert_eq!(ctx.backoff.failures("tenant/flaky"), 0);
    let _ = stop.send(());
    expiring.await.expect("the loop ends on shutdown");
}

#[tokio::test]
async fn a_follower_deletes_nothing_until_it_leads() {
    let (ctx, mut handle, leader) = context(false);
    let index = Arc::new(SettledIndex::default());
    index.route(watcher::Event::Apply(expired("done")));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let expiring = tokio::spawn(expire_while_leading(ctx, index.clone(), async {
        let _ = stopped.await;
    }));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), handle.next_request())
            .await
            .is_err()
    );
    leader.send(true).expect("the loop listens");
    let (_, send) = expect(&mut handle, Method::DELETE, &format!("{PATH}/done")).await;
    send.send_response(respond(StatusCode::NOT_FOUND, &api_status(404, "NotFound")));
    let _ = stop.send(());
    expiring.await.expect("the loop ends on shutdown");
    assert!(index.is_empty());
}

#[test]
fn an_entry_is_a_small_fraction_of_a_request() {
    // An entry's strings are kept once, back to back, beside its fixed-size part.
    let entry = entries::ENTRY_BYTES;
    let request = std::mem::size_of::<ContainerRecreateRequest>()
        + std::mem::size_of::<ObjectRef<ContainerRecreateRequest>>();
    assert!(entry <= 40, "entry {entry} B");
    assert!(entry * 16 < request, "entry {entry} B, request {request} B");
}
