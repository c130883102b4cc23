//! The request wing: the ContainerRecreateRequest controller. It takes the target pod out of
//! endpoints through the `KruisePodReady` gate before the node daemon kills anything, keeps
//! `status.containerStatusSnapshot`, enforces `activeDeadlineSeconds`, gives the pod back, and
//! deletes finished requests after `ttlSecondsAfterFinished`.
//!
//! [`reconcile`] plans (pure), [`executor`] carries a plan out, [`controller`] wires the
//! watches and the reconcile; [`settled`] keeps finished requests as a compact index and
//! deletes them at their TTL; [`pod_memo`] and [`pod_events`] keep the pods of requests in
//! flight (the container snapshot is `crr_crds::status::snapshot`'s); [`context`], [`metrics`] and [`error`]
//! are the wing's shared state, metrics and error type.

pub mod context;
pub mod controller;
pub mod error;
pub mod executor;
pub mod metrics;
pub mod pod_events;
pub mod pod_memo;
pub mod reconcile;
pub mod settled;
pub mod stale_copies;

use std::sync::Arc;

use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_runtime::admin::Readiness;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use kube::runtime::reflector::Store;
use prometheus_client::registry::Registry;
use tracing::warn;

use crate::pod_view::{PodReadiness, ReadinessReports};
use crate::reconcile_errors::ReconcileErrors;
use crate::wing::WingContext;
use context::Context;
use metrics::{CacheCollector, Metrics};
use settled::SettledIndex;

/// The request wing, started.
pub struct RequestWing {
    /// The request cache, which the rollout wing reads for its rollouts' requests.
    pub requests: Store<ContainerRecreateRequest>,
    /// Each change of a cached request, once the cache holds it, for the rollout wing.
    pub changes: futures::channel::mpsc::Receiver<Arc<ContainerRecreateRequest>>,
    /// Each pod's readiness as the pod watch sees it, for the rollout wing (reports that do not
    /// fit are dropped: the pod watch never waits on it).
    pub pod_readiness: futures::channel::mpsc::Receiver<PodReadiness>,
    /// The watches, the controller and the TTL deletions: run it until shutdown.
    pub work: BoxFuture<'static, ()>,
}

/// Starts the request wing: registers its metrics in `registry` (its reconcile errors as
/// `controller="request"`), opens `readiness`'s gates of the request cache and the pod metadata
/// watch once they synced, and returns the cache for the rollout wing with the work to run.
/// `workers` reconciles run at once.
pub fn start(
    wing: &WingContext,
    workers: u16,
    registry: &mut Registry,
    errors: &ReconcileErrors,
    readiness: &Readiness,
) -> RequestWing {
    let (readiness_reports, pod_readiness) = ReadinessReports::channel();
    let context = Arc::new(Context::new(
        wing.client.clone(),
        wing.events.clone(),
        Metrics::register(registry, errors),
        wing.leader.clone(),
        Arc::default(),
    ));
    let namespace = wing.namespace.clone();
    let settled = Arc::new(SettledIndex::default());
    let controller::RequestWatch {
        controller,
        changes,
        reflecting,
    } = controller::new_controller(
        wing.client.clone(),
        namespace.as_deref(),
        workers,
        settled.clone(),
    );
    let requests = controller.store();
    registry.register_collector(Box::new(CacheCollector::new(
        {
            let requests = requests.clone();
            move || requests.state()
        },
        {
            let settled = settled.clone();
            move || settled.counts()
        },
    )));
    let requests_synced = readiness.gate("request cache");
    tokio::spawn({
        let requests = requests.clone();
        async move {
            match crr_runtime::store::wait_until_ready(&requests).await {
                Ok(()) => requests_synced.open(),
                Err(error) => warn!(%error, "the request cache never synced"),
            }
        }
    });
    let pods_synced = readiness.gate("pod metadata watch");
    let expiring =
        settled::expire_while_leading(context.clone(), settled, wing.shutdown.requested());
    let became_leader = wing.became_leader();
    let shutdown = wing.shutdown.requested();
    let work = async move {
        let reconciling = controller::run(
            controller,
            context,
            namespace.as_deref(),
            readiness_reports,
            move || pods_synced.open(),
            became_leader,
            shutdown,
        );
        // The request watch feeds both this wing's controller and the rollout wing, and ends
        // with neither: the work is done when the controller and the TTL deletions are.
        tokio::select! {
            _ = async { tokio::join!(reconciling, expiring) } => {}
            () = reflecting => {}
        }
    }
    .boxed();
    RequestWing {
        requests,
        changes,
        pod_readiness,
        work,
    }
}
