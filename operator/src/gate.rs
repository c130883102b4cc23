//! Starts the `KruisePodReady` readiness gate of new pods at True.
//!
//! A pod that declares the gate is never Ready until someone writes the condition, and pod
//! status cannot be set at creation (the API server resets it), so the admission webhook that
//! injects the gate cannot do it. Upstream's `podreadiness` controller does this for every pod;
//! here only pods matching a label selector are watched (full objects, but only those pods are
//! cached): the component that injects the gate is expected to label the pod as well.
//!
//! Like the request controller, every replica watches and only the Lease holder writes.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Patch;
use kube::runtime::controller::{self, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::controller::FIELD_MANAGER;
use crate::readiness;

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

async fn reconcile(pod: Arc<Pod>, ctx: Arc<GateContext>) -> Result<controller::Action, GateError> {
    if !*ctx.leader.borrow() {
        return Ok(controller::Action::await_change());
    }
    let Some(condition) = readiness::initial(&pod, Timestamp::now()) else {
        return Ok(controller::Action::await_change());
    };
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    // The resourceVersion precondition keeps us from racing a holder that just added its entry.
    let patch = json!({
        "metadata": { "resourceVersion": pod.resource_version() },
        "status": { "conditions": [condition] },
    });
    let params = crr_runtime::client::patch_params(FIELD_MANAGER);
    match pods
        .patch_status(&name, &params, &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => {
            info!(pod = %format!("{namespace}/{name}"), "initialised KruisePodReady to True");
            Ok(controller::Action::await_change())
        }
        Err(kube::Error::Api(status)) if status.is_not_found() || status.is_conflict() => {
            // Gone, or changed: the watch brings the new version.
            Ok(controller::Action::await_change())
        }
        Err(source) => Err(GateError {
            pod: format!("{namespace}/{name}"),
            source,
        }),
    }
}

fn error_policy(_pod: Arc<Pod>, error: &GateError, _ctx: Arc<GateContext>) -> controller::Action {
    warn!(%error, "readiness gate initialisation failed");
    controller::Action::requeue(Duration::from_secs(5))
}

/// Runs the initializer over pods matching `selector` in `namespace` (all when `None`) until
/// `shutdown` resolves.
pub async fn run(
    ctx: Arc<GateContext>,
    namespace: Option<&str>,
    selector: &str,
    became_leader: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let pods: Api<Pod> = match namespace {
        Some(namespace) => Api::namespaced(ctx.client.clone(), namespace),
        None => Api::all(ctx.client.clone()),
    };
    Controller::new(pods, watcher::Config::default().labels(selector))
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
