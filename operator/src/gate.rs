//! Starts the `KruisePodReady` readiness gate of gated pods at True, once a node has taken them
//! (`readiness::initial`: a pod waiting to be scheduled costs no write).
//!
//! A pod that declares the gate is never Ready until someone writes the condition, and pod
//! status cannot be set at creation (the API server resets it), so the admission webhook that
//! injects the gate cannot do it. Upstream's `podreadiness` controller does this for every pod
//! with the gate. Here, without watching every pod's spec:
//! - pods matching a label selector are watched, slim (`pod_view::SlimPod`: identity, readiness
//!   gates, conditions; a tenant's fat pods cost a page's body, never a cache of them): the pod
//!   webhook labels every pod created with the gate, and adds the gate to every pod created with
//!   the label;
//! - a periodic sweep ([`sweep`]) lists all pods, slim, a page at a time, keeping nothing, and starts
//!   the condition of any gated pod that lacks it: pods created before crr was installed (an
//!   OpenKruise template, OpenKruise removed) or while the webhook was away (the pod hook fails
//!   open). It runs when a replica becomes leader and then every `--readiness-gate-sweep-seconds`.
//!
//! Like the request controller, every replica watches and only the Lease holder writes.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{ListParams, Patch};
use kube::runtime::controller::{self, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::pod_view::{POD_PAGE, SlimPod};
use crate::readiness::{self, PodConditionsPatch};
use crate::wing::FIELD_MANAGER;

/// Shared state of the initializer.
pub struct GateContext {
    /// API client.
    pub client: Client,
    /// `true` while this replica holds the Lease.
    pub leader: watch::Receiver<bool>,
}

/// The initial condition could not be written.
#[derive(Debug, thiserror::Error)]
#[error("initialising KruisePodReady on pod {pod}: {source}")]
pub struct GateError {
    /// `namespace/name`.
    pub pod: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

async fn reconcile(
    pod: Arc<SlimPod>,
    ctx: Arc<GateContext>,
) -> Result<controller::Action, GateError> {
    if !*ctx.leader.borrow() {
        return Ok(controller::Action::await_change());
    }
    start_condition(&ctx.client, &pod).await?;
    Ok(controller::Action::await_change())
}

/// Writes the initial `KruisePodReady` condition when `pod` needs one; whether it wrote.
///
/// The write is preconditioned on the copy's resourceVersion. A conflict means the copy is stale,
/// and a watch can stay stale for a while on a loaded control plane: the pod is read once and
/// decided on again (on 2026-12-03 a copy 20 s behind was refused twice and the pod, left to a
/// watch event that never made the cache current, stayed without its condition until the sweep).
async fn start_condition(client: &Client, pod: &Pod) -> Result<bool, GateError> {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let error = |source| GateError {
        pod: format!("{namespace}/{name}"),
        source,
    };
    // The answers are the whole pod, as large as its tenant made it: decoded slim, then dropped.
    let pods: Api<SlimPod> = Api::namespaced(client.clone(), &namespace);
    match write_initial(&pods, pod).await {
        Err(kube::Error::Api(status)) if status.is_conflict() => {}
        written => return written.map_err(error),
    }
    let Some(read) = pods.get_opt(&name).await.map_err(error)? else {
        return Ok(false);
    };
    // A second conflict is an error: the controller tries again later.
    write_initial(&pods, &read.0).await.map_err(error)
}

/// One preconditioned write of the initial condition, when `pod` as given needs one: whether it
/// wrote (a pod gone is not an error).
async fn write_initial(pods: &Api<SlimPod>, pod: &Pod) -> Result<bool, kube::Error> {
    let Some(condition) = readiness::initial(pod, Timestamp::now()) else {
        return Ok(false);
    };
    // The resourceVersion precondition keeps us from racing a holder that just added its entry.
    let patch = PodConditionsPatch::new(pod, vec![condition]);
    let params = crr_runtime::client::patch_params(FIELD_MANAGER);
    match pods
        .patch_status(&pod.name_any(), &params, &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => {
            info!(pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), "initialised KruisePodReady to True");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(false),
        Err(error) => Err(error),
    }
}

/// A page of the sweep's LIST, decoded slim ([`SlimPod`]): a page's memory is its body, whatever
/// the cluster's size, and nothing of it is kept.
#[derive(Deserialize)]
struct SweepPage {
    metadata: ListMeta,
    items: Vec<SlimPod>,
}

/// Starts the condition of every pod in `namespace` (all when `None`) that declares the gate
/// and lacks it, label or not. Returns how many it started.
pub async fn sweep(client: &Client, namespace: Option<&str>) -> Result<usize, kube::Error> {
    let path = match namespace {
        Some(namespace) => format!("/api/v1/namespaces/{namespace}/pods"),
        None => "/api/v1/pods".to_owned(),
    };
    let mut params = ListParams::default().limit(POD_PAGE);
    let mut started = 0;
    loop {
        let request = kube::core::Request::new(&path)
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        let page: SweepPage = client.request(request).await?;
        for pod in page.items {
            match start_condition(client, &pod).await {
                Ok(true) => started += 1,
                Ok(false) => {}
                Err(error) => warn!(%error, "readiness gate sweep"),
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(started),
        }
    }
}

/// Sweeps each time this replica becomes leader and then every `interval` while it leads,
/// until `shutdown` resolves.
pub async fn sweep_while_leading(
    ctx: Arc<GateContext>,
    namespace: Option<String>,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut leader = ctx.leader.clone();
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            leading = leader.wait_for(|leading| *leading) => if leading.is_err() { return },
        }
        match sweep(&ctx.client, namespace.as_deref()).await {
            Ok(0) => debug!("readiness gate sweep: nothing to start"),
            Ok(started) => info!(started, "readiness gate sweep started gated pods"),
            Err(error) => warn!(%error, "readiness gate sweep"),
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

fn error_policy(
    _pod: Arc<SlimPod>,
    error: &GateError,
    _ctx: Arc<GateContext>,
) -> controller::Action {
    warn!(%error, "readiness gate initialisation failed");
    controller::Action::requeue(Duration::from_secs(5))
}

/// Condition writes at once. Each answer is the whole pod, held as one body before it is decoded
/// slim, and a tenant's pod may be about 1.5 MB: kube's default (no limit) let 100 fat pods
/// labelled at once take the leader past 80% of its 128 Mi limit; 4 bodies are at most 6 MB.
pub const GATE_WRITES: u16 = 4;

/// Runs the initializer over pods matching `selector` in `namespace` (all when `None`) until
/// `shutdown` resolves.
pub async fn run(
    ctx: Arc<GateContext>,
    namespace: Option<&str>,
    selector: &str,
    became_leader: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let pods: Api<SlimPod> = crr_runtime::client::namespaced_or_all(ctx.client.clone(), namespace);
    let config = watcher::Config::default()
        .labels(selector)
        .page_size(POD_PAGE);
    Controller::new(pods, config)
        .with_config(controller::Config::default().concurrency(GATE_WRITES))
        .reconcile_all_on(became_leader)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                debug!(%error, "readiness gate initializer event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response};
    use kube::client::Body;
    use serde_json::{Value, json};

    fn pod(name: &str, gated: bool, condition: bool) -> Value {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": format!("{name}-rv")},
            "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "busybox"}]},
            "status": {"conditions": []},
        });
        if gated {
            pod["spec"]["readinessGates"] = json!([{"conditionType": "KruisePodReady"}]);
        }
        if condition {
            pod["status"]["conditions"] = json!([{"type": "KruisePodReady", "status": "False"}]);
        }
        pod
    }

    /// `pod` before the scheduler bound it.
    fn unbound(mut pod: Value) -> Value {
        pod["spec"].as_object_mut().unwrap().remove("nodeName");
        pod
    }

    fn list(items: Vec<Value>, continue_token: &str) -> Response<Body> {
        let body = json!({"apiVersion": "v1", "kind": "PodList",
                          "metadata": {"continue": continue_token}, "items": items});
        Response::new(Body::from(serde_json::to_vec(&body).unwrap()))
    }

    /// A pod as the API server serves it, with what real pods carry beside the gate.
    fn real_pod(gated: bool, condition: bool) -> Value {
        let mut pod = pod("web-0", gated, condition);
        pod["metadata"]["annotations"] = json!({"team.example/notes": "n".repeat(200)});
        pod["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Apply",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {}}}}]);
        pod["spec"]["containers"][0]["env"] = json!([{"name": "MODE", "value": "production"}]);
        pod["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Ready", "status": "True"}));
        pod
    }

    #[test]
    fn the_sweep_decides_on_its_slim_pod_as_on_the_whole_pod() {
        let now = Timestamp::UNIX_EPOCH;
        for (gated, condition, bound) in [
            (false, false, true),
            (true, false, true),
            (true, true, true),
            (true, false, false),
        ] {
            let json = real_pod(gated, condition);
            let json = if bound { json } else { unbound(json) };
            let whole: Pod = serde_json::from_value(json.clone()).unwrap();
            let slim: SlimPod = serde_json::from_value(json).unwrap();
            assert_eq!(
                readiness::initial(&slim, now),
                readiness::initial(&whole, now)
            );
            assert_eq!(
                readiness::initial(&slim, now).is_some(),
                gated && !condition && bound
            );
            assert_eq!(slim.resource_version(), whole.resource_version());
            assert_eq!(slim.namespace(), whole.namespace());
            assert_eq!(slim.name_any(), whole.name_any());
            assert_eq!(slim.metadata.managed_fields, None);
            assert_eq!(slim.metadata.annotations, None);
        }
    }

    fn conflict() -> Response<Body> {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "Conflict", "code": 409, "message": "the object has been modified"});
        let mut response = Response::new(Body::from(serde_json::to_vec(&status).unwrap()));
        *response.status_mut() = http::StatusCode::CONFLICT;
        response
    }

    #[tokio::test]
    async fn a_stale_copy_refused_is_read_again_and_written_on_the_fresh_one() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let stale: Pod = serde_json::from_value(pod("web-0", true, false)).unwrap();
        let starting = tokio::spawn(async move {
            let first = start_condition(&client, &stale).await;
            let second = start_condition(&client, &stale).await;
            (first, second)
        });
        // The stale copy's write is refused...
        let (request, send) = handle.next_request().await.unwrap();
        assert_eq!(request.method(), Method::PATCH);
        send.send_response(conflict());
        // ...so the pod is read, and the write carries the version read.
        let (request, send) = handle.next_request().await.unwrap();
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.uri().path(), "/api/v1/namespaces/ns/pods/web-0");
        let mut fresh = pod("web-0", true, false);
        fresh["metadata"]["resourceVersion"] = json!("fresh-rv");
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&fresh).unwrap(),
        )));
        let (request, send) = handle.next_request().await.unwrap();
        assert_eq!(request.method(), Method::PATCH);
        let body = request.into_body().collect_bytes().await.unwrap();
        let patch: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "fresh-rv");
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&pod("web-0", true, true)).unwrap(),
        )));
        // The second time the pod read already has its condition (a holder wrote it): no write.
        let (_, send) = handle.next_request().await.unwrap();
        send.send_response(conflict());
        let (request, send) = handle.next_request().await.unwrap();
        assert_eq!(request.method(), Method::GET);
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&pod("web-0", true, true)).unwrap(),
        )));
        let (first, second) = starting.await.unwrap();
        assert!(first.unwrap(), "written on the fresh copy");
        assert!(!second.unwrap(), "nothing to write");
    }

    #[tokio::test]
    async fn a_second_conflict_is_an_error_for_the_controller_to_retry() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let stale: Pod = serde_json::from_value(pod("web-0", true, false)).unwrap();
        let starting = tokio::spawn(async move { start_condition(&client, &stale).await });
        let (_, send) = handle.next_request().await.unwrap();
        send.send_response(conflict());
        let (_, send) = handle.next_request().await.unwrap();
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&pod("web-0", true, false)).unwrap(),
        )));
        let (_, send) = handle.next_request().await.unwrap();
        send.send_response(conflict());
        let error = starting.await.unwrap().expect_err("a second conflict");
        assert_eq!(error.pod, "ns/web-0");
    }

    #[tokio::test]
    async fn the_sweep_pages_through_every_pod_and_starts_only_gated_ones_without_the_condition() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let sweeping = tokio::spawn(async move { sweep(&client, None).await });
        // Page 1: a plain pod, a gated pod without the condition (OpenKruise's template, no
        // label), a gated pod whose condition a holder owns, a gated pod no node has taken yet.
        let (request, send) = handle.next_request().await.unwrap();
        assert_eq!(request.method(), Method::GET);
        assert!(
            request
                .uri()
                .to_string()
                .contains(&format!("limit={POD_PAGE}")),
            "{}",
            request.uri()
        );
        send.send_response(list(
            vec![
                pod("plain", false, false),
                pod("legacy", true, false),
                pod("held", true, true),
                unbound(pod("queued", true, false)),
            ],
            "page-2",
        ));
        let (request, send) = handle.next_request().await.unwrap();
        assert_eq!(request.method(), Method::PATCH);
        assert_eq!(
            request.uri().path(),
            "/api/v1/namespaces/ns/pods/legacy/status"
        );
        let body = request.into_body().collect_bytes().await.unwrap();
        let patch: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "legacy-rv");
        assert_eq!(patch["status"]["conditions"][0]["type"], "KruisePodReady");
        assert_eq!(patch["status"]["conditions"][0]["status"], "True");
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&pod("legacy", true, true)).unwrap(),
        )));
        // Page 2, asked for with the continue token.
        let (request, send) = handle.next_request().await.unwrap();
        assert!(
            request.uri().to_string().contains("continue=page-2"),
            "{}",
            request.uri()
        );
        send.send_response(list(vec![pod("late", true, false)], ""));
        let (request, send) = handle.next_request().await.unwrap();
        assert_eq!(
            request.uri().path(),
            "/api/v1/namespaces/ns/pods/late/status"
        );
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&pod("late", true, true)).unwrap(),
        )));
        assert_eq!(sweeping.await.unwrap().unwrap(), 2);
    }
}
