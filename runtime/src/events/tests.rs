use super::*;
use http::{Method, Request, Response};
use kube::client::Body;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
}

fn reference(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        namespace: Some("ns".to_owned()),
        name: Some(name.to_owned()),
        uid: Some(format!("{name}-uid")),
        field_path: Some("spec.containers{app}".to_owned()),
        ..ObjectReference::default()
    }
}

fn key(name: &str) -> SeriesKey {
    SeriesKey::new(&reference(name), "Normal", "Killing", "Killing")
}

fn published(name: &str, seconds: i64) -> Published {
    Published {
        name: format!("{name}.event"),
        namespace: "ns".to_owned(),
        count: 1,
        last_observed: at(seconds),
    }
}

#[test]
fn a_repeat_within_the_window_counts_and_one_after_it_starts_anew() {
    let mut cache = SeriesCache::new(16);
    assert_eq!(cache.repeat(&key("web-0"), at(0)), None);
    cache.remember(key("web-0"), published("web-0", 0));
    let repeat = cache.repeat(&key("web-0"), at(10)).expect("a repeat");
    assert_eq!((repeat.count, repeat.last_observed), (2, at(10)));
    assert_eq!(
        cache.repeat(&key("web-0"), at(20)).expect("a repeat").count,
        3
    );
    // The window runs from the last repeat: 6 minutes after it, a new Event.
    assert!(cache.repeat(&key("web-0"), at(20 + 359)).is_some());
    assert_eq!(cache.repeat(&key("web-0"), at(20 + 359 + 360)), None);
    assert_eq!(cache.len(), 0);
}

#[test]
fn another_reason_container_or_object_is_another_event() {
    let mut cache = SeriesCache::new(16);
    cache.remember(key("web-0"), published("web-0", 0));
    let mut sidecar = reference("web-0");
    sidecar.field_path = Some("spec.containers{sidecar}".to_owned());
    for other in [
        SeriesKey::new(&reference("web-0"), "Warning", "Killing", "Killing"),
        SeriesKey::new(
            &reference("web-0"),
            "Normal",
            "FailedPreStopHook",
            "FailedPreStopHook",
        ),
        SeriesKey::new(&sidecar, "Normal", "Killing", "Killing"),
        key("web-1"),
    ] {
        assert_eq!(cache.repeat(&other, at(1)), None, "{other:?}");
    }
}

#[test]
fn the_cache_never_holds_more_than_its_capacity_and_forgets_the_oldest_first() {
    let mut cache = SeriesCache::new(64);
    for index in 0..1000 {
        cache.remember(
            key(&format!("pod-{index}")),
            published(&format!("pod-{index}"), index),
        );
        assert!(cache.len() <= 64, "{} entries after {index}", cache.len());
    }
    // The newest are remembered, the oldest forgotten.
    assert!(cache.repeat(&key("pod-999"), at(1000)).is_some());
    assert_eq!(cache.repeat(&key("pod-0"), at(1000)), None);
}

#[test]
fn entries_past_the_window_go_before_any_recent_one() {
    let mut cache = SeriesCache::new(4);
    for index in 0..3 {
        cache.remember(key(&format!("old-{index}")), published("old", index));
    }
    cache.remember(key("recent"), published("recent", 500));
    // Full: the three old ones are past the window at 500 + 10.
    cache.remember(key("new"), published("new", 510));
    assert_eq!(cache.len(), 2);
    assert!(cache.repeat(&key("recent"), at(511)).is_some());
}

#[tokio::test]
async fn the_first_event_is_created_and_a_repeat_patches_its_series() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let publisher = EventPublisher::new(client, "crr-node-daemon", "node-1");
    let regarding = reference("web-0");
    let publishing = tokio::spawn({
        let publisher = publisher.clone();
        let regarding = regarding.clone();
        async move {
            publisher
                .normal(&regarding, "Killing", "Stopping container app")
                .await;
            publisher
                .normal(&regarding, "Killing", "Stopping container app")
                .await;
        }
    });
    let (request, send) = handle.next_request().await.expect("a create");
    assert_eq!(request.method(), Method::POST);
    assert_eq!(
        request.uri().path(),
        "/apis/events.k8s.io/v1/namespaces/ns/events"
    );
    let body = request.into_body().collect_bytes().await.expect("a body");
    let created: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(created["reason"], "Killing");
    assert_eq!(created["action"], "Killing");
    assert_eq!(created["type"], "Normal");
    assert_eq!(created["note"], "Stopping container app");
    assert_eq!(created["reportingController"], "crr-node-daemon");
    assert_eq!(created["reportingInstance"], "node-1");
    assert_eq!(created["regarding"]["fieldPath"], "spec.containers{app}");
    let name = created["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    assert!(name.starts_with("web-0."), "{name}");
    send.send_response(Response::new(Body::from(body.to_vec())));
    let (request, send) = handle.next_request().await.expect("a patch");
    assert_eq!(request.method(), Method::PATCH);
    assert_eq!(
        request.uri().path(),
        format!("/apis/events.k8s.io/v1/namespaces/ns/events/{name}")
    );
    let patch: serde_json::Value =
        serde_json::from_slice(&request.into_body().collect_bytes().await.expect("a body"))
            .expect("json");
    assert_eq!(patch["series"]["count"], 2);
    assert!(patch["series"]["lastObservedTime"].is_string());
    assert_eq!(
        patch.as_object().map(|fields| fields.len()),
        Some(1),
        "{patch}"
    );
    send.send_response(Response::new(Body::from(
        serde_json::to_vec(&created).expect("json"),
    )));
    publishing.await.expect("published");
    assert_eq!(publisher.remembered(), 1);
}
