//! The request wing's kube-runtime controller: watches, the reconcile shell that executes a [`reconcile::plan`],
//! and the error policy.
//!
//! # Watches
//! * ContainerRecreateRequests (v1beta1, all namespaces) through the controller's own reflector:
//!   the operator needs every request, finished ones included (TTL). Their `managedFields` are
//!   dropped before the store (about half of a cached request). A settled request (finished and
//!   observed) leaves the store for a compact index that drives its TTL deletion (`settled`);
//!   one a rollout made stays, keeping only what the rollout reads (`cache`). Requests piling up
//!   cost little.
//! * Pods through a **slim** watch of all pods (`pod_view::SlimPod`: decoded straight into the
//!   fields the plan reads, [`pod_view::POD_PAGE`] pods a list page). A pod event re-queues the
//!   requests that name it (see `pod_events`), and the pods of requests in flight are kept from
//!   the watch (`pod_memo`). A request the daemon has not started on, or a recreating one whose
//!   pod the watch has shown no change of since, is planned on the pod its admission saw
//!   (`reconcile::admitted_pod`) unless the watch reported that pod deleted; a reconcile that
//!   needs the pod's status reads the watch's copy, or with one GET when there is none yet (an
//!   unready grace to start, a restarted operator). Other pods are dropped as they come, so
//!   memory follows the requests in flight, not the cluster; per-pod field-selector watches would
//!   need dynamic watch management.
//!
//! [`pod_view::POD_PAGE`]: crate::pod_view::POD_PAGE
//!
//! # Writes
//! Status writes are [`StatusPatch`]es: JSON merge patches of the status subresource, each built
//! from the request as it is when the action runs and preconditioned on that request's
//! resourceVersion. After every write of a reconcile the executor continues from the object the
//! API server returned, so a later action never sends a body computed from a stale copy, and
//! a request changed by someone else meanwhile fails the write with a conflict (retried soon).
//!
//! # Leadership
//! Every replica runs the watches (caches stay warm), but only the Lease holder reconciles and
//! writes: followers return at once, and the holder checks leadership again before each write.
//! When a replica becomes leader, every cached request is reconciled.

use std::sync::Arc;
use std::time::Duration;

use crr_crds::status::StatusPatch;
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_runtime::backoff::WatchBackoffExt as _;
use futures::{FutureExt, Stream, StreamExt};
use jiff::Timestamp;
use kube::api::Patch;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{Instrument, debug, info_span, warn};

use crate::pod_view::{POD_PAGE, ReadinessReports, SlimPod};
use crate::request::context::Context;
use crate::request::error::Error;
use crate::request::executor::{Executor, Step};
use crate::request::metrics::OutcomeLabels;
use crate::request::pod_events;
use crate::request::reconcile;
use crate::request::settled::SettledIndex;
use crate::wing::FIELD_MANAGER;

/// Reconciles one request: reads its pod, plans, executes the plan, and says when to look again.
pub async fn reconcile(
    crr: Arc<ContainerRecreateRequest>,
    ctx: Arc<Context>,
) -> Result<controller::Action, Error> {
    if !ctx.is_leader() {
        ctx.metrics
            .reconciles
            .get_or_create(&OutcomeLabels { outcome: "skipped" })
            .inc();
        return Ok(controller::Action::await_change());
    }
    let name = crr.name_any();
    let namespace = crr
        .namespace()
        .ok_or_else(|| Error::MissingNamespace { name: name.clone() })?;
    let span =
        info_span!("reconcile", crr = %format!("{namespace}/{name}"), pod = %crr.spec.pod_name);
    async move {
        let key = format!("{namespace}/{name}");
        let crr = if ctx
            .stale_copies
            .is_stale(&key, crr.metadata.resource_version.as_deref())
        {
            // A write found this very copy stale and the watch has shown nothing newer: decide
            // on the request as the API server has it (a GET without resourceVersion is served
            // from etcd), not on the copy again (`stale_copies`).
            let requests: Api<ContainerRecreateRequest> =
                Api::namespaced(ctx.client.clone(), &namespace);
            let read = requests
                .get_opt(&name)
                .await
                .map_err(|source| Error::ReadRequest {
                    request: key.clone(),
                    source,
                })?;
            ctx.stale_copies.forget(&key);
            let Some(mut fresh) = read else {
                debug!("gone since the conflict");
                return Ok(controller::Action::await_change());
            };
            debug!(
                stale = ?crr.metadata.resource_version,
                read = ?fresh.metadata.resource_version,
                "reconciling the request as read, past a stale cache"
            );
            crate::cache::keep_what_reconciles_read(&mut fresh);
            Arc::new(fresh)
        } else {
            crr
        };
        let pods: Api<SlimPod> = Api::namespaced(ctx.client.clone(), &namespace);
        let pod_key = format!("{namespace}/{}", crr.spec.pod_name);
        let now = Timestamp::now();
        // Looked up only when the memo holds no current copy (no memo lookups on the other paths).
        let admitted = || {
            reconcile::admitted_pod(&crr, now).filter(|admitted| {
                let uid = admitted.metadata.uid.as_deref().unwrap_or_default();
                let unchanged = reconcile::pod_need(&crr) == reconcile::PodNeed::Existence
                    || ctx.pod_memo.unchanged_since_wanted(&pod_key);
                unchanged && !ctx.pod_memo.reported_deleted(&pod_key, uid)
            })
        };
        let pod = if crr.spec.pod_name.is_empty() || !reconcile::needs_pod(&crr) {
            ctx.pod_memo.forget(&pod_key);
            None
        } else if let Some(pod) = ctx.pod_memo.current(&pod_key) {
            Some((*pod).clone())
        } else if let Some(admitted) = admitted() {
            // Not started on by the daemon (or started, and the pod has not changed since the
            // operator asked for it): the pod its admission saw, unless the watch said it went;
            // the watch's copies are kept from now on, for when the pod is read.
            ctx.pod_memo.want(&pod_key);
            Some(admitted)
        } else {
            let pod = pods
                .get_opt(&crr.spec.pod_name)
                .await
                .map_err(|source| Error::ReadPod {
                    pod: pod_key.clone(),
                    source,
                })?
                .map(|pod| pod.0);
            if let Some(pod) = &pod {
                ctx.pod_memo.keep(&pod_key, Arc::new(pod.clone()));
            }
            pod
        };
        let plan = reconcile::plan(&crr, pod.as_ref(), now);
        debug!(actions = ?plan.actions, requeue_after = ?plan.requeue_after, "planned");
        let mut executor = Executor {
            ctx: &ctx,
            crrs: Api::namespaced(ctx.client.clone(), &namespace),
            pods,
            current: (*crr).clone(),
            pod,
            now,
        };
        let mut requeue_after = plan.requeue_after;
        for action in plan.actions {
            match executor.execute(action).await? {
                Step::Continue => {}
                Step::Stop => break,
                Step::Later(after) => {
                    requeue_after = Some(after);
                    break;
                }
            }
        }
        // The pod as this reconcile left it (a readiness write returns the new version); the
        // admitted pod, never read, has no version and is not kept.
        if let Some(pod) = executor.pod.take()
            && pod.metadata.resource_version.is_some()
        {
            ctx.pod_memo.keep(&pod_key, Arc::new(pod));
        }
        ctx.metrics
            .reconciles
            .get_or_create(&OutcomeLabels { outcome: "applied" })
            .inc();
        ctx.backoff.succeeded(&key);
        Ok(match requeue_after {
            Some(after) => controller::Action::requeue(after),
            None => controller::Action::await_change(),
        })
    }
    .instrument(span)
    .await
}

/// How long after a conflict a request is reconciled again if no watch event of it came first.
/// A conflict says the request changed since the cached copy, so its watch event is on the way
/// and wakes the reconcile as soon as the cache shows it; this is only the fallback. (At 500 ms,
/// a cache 13 s behind under a tenant's fat requests made up to eight conflicts per request on
/// the test bed, each a read of the whole object from etcd on the API server.) A fallback
/// reconcile that finds the same copy in the cache reads the request first (`stale_copies`).
pub const CONFLICT_FALLBACK: Duration = Duration::from_secs(5);

/// Retries a failed reconcile: a conflict when the cache shows the change (or after
/// [`CONFLICT_FALLBACK`]), others with backoff.
pub fn error_policy(
    crr: Arc<ContainerRecreateRequest>,
    error: &Error,
    ctx: Arc<Context>,
) -> controller::Action {
    ctx.metrics
        .reconciles
        .get_or_create(&OutcomeLabels { outcome: "error" })
        .inc();
    ctx.metrics.errors.count(error.kind());
    let key = format!("{}/{}", crr.namespace().unwrap_or_default(), crr.name_any());
    if let Some(reason) = error.refusal() {
        // Forbidden or invalid: no retry until the request changes. The reason goes in the
        // request's status message and a Warning Event, where `kubectl describe` shows it.
        warn!(crr = %key, %error, "the API server refused the operator; not retrying");
        ctx.backoff.succeeded(&key);
        tokio::spawn(report_refusal(crr, ctx.clone(), reason));
        return controller::Action::await_change();
    }
    match error {
        Error::Conflict { .. } => {
            debug!(crr = %key, %error, "reconcile conflicted; waiting for the cache to show the change");
            ctx.stale_copies
                .mark(&key, crr.metadata.resource_version.as_deref());
            controller::Action::requeue(CONFLICT_FALLBACK)
        }
        Error::NotLeader => controller::Action::await_change(),
        _ => {
            let after = ctx.backoff.failed(&key);
            warn!(crr = %key, %error, failures = ctx.backoff.failures(&key), retry_in = ?after, "reconcile failed");
            controller::Action::requeue(after)
        }
    }
}

/// Says on the request why the API server refused the operator: a Warning Event, and the
/// reason in `status.message`, a [`StatusPatch`] preconditioned on the request as it was
/// reconciled (a merge patch that writes the same message again changes nothing, so it wakes
/// no reconcile). Best effort: a refusal or a conflict of that very write is logged, and the
/// next reconcile of the changed request meets the refusal again.
async fn report_refusal(crr: Arc<ContainerRecreateRequest>, ctx: Arc<Context>, reason: String) {
    let message = format!("the API server refused the operator: {reason}");
    let reference = crr.object_ref(&());
    ctx.events
        .publish(&reference, EventType::Warning, "Refused", &message)
        .await;
    let patch = match StatusPatch::of(&crr) {
        Ok(patch) => patch.message(message),
        Err(error) => {
            warn!(%error, "writing the refusal into the status message");
            return;
        }
    };
    let crrs: Api<ContainerRecreateRequest> =
        Api::namespaced(ctx.client.clone(), patch.namespace());
    if let Err(error) = crrs
        .patch_status(
            patch.name(),
            &crr_runtime::client::patch_params(FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await
    {
        warn!(crr = %crr.name_any(), %error, "writing the refusal into the status message");
    }
}

/// Pod events, slim (the objects touched, and after a relist the pods kept for requests that it
/// no longer showed: deleted while the watch was away); the pods of requests in flight go to
/// `pod_memo`. Calls `on_synced` once the first list of pods has been seen.
pub fn pod_triggers(
    client: Client,
    namespace: Option<&str>,
    pod_memo: Arc<crate::request::pod_memo::PodMemo>,
    readiness: ReadinessReports,
    on_synced: impl Fn() + Send + 'static,
) -> impl Stream<Item = Result<SlimPod, watcher::Error>> + Send + 'static {
    let pods: Api<SlimPod> = crr_runtime::client::namespaced_or_all(client, namespace);
    watcher(pods, watcher::Config::default().page_size(POD_PAGE))
        .watch_backoff()
        .flat_map(move |event| {
            let key = |pod: &SlimPod| {
                format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
            };
            let touched = match event {
                Ok(watcher::Event::Init) => {
                    pod_memo.relist_started();
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => {
                    on_synced();
                    pod_memo
                        .relisted()
                        .into_iter()
                        .map(|pod| Ok(SlimPod(pod)))
                        .collect()
                }
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                    readiness.report(&pod);
                    pod_memo.seen(&key(&pod), Arc::new(pod.0.clone()));
                    vec![Ok(pod)]
                }
                Ok(watcher::Event::Delete(pod)) => {
                    pod_memo.deleted(&key(&pod), pod.metadata.uid.clone());
                    vec![Ok(pod)]
                }
                Err(error) => vec![Err(error)],
            };
            futures::stream::iter(touched)
        })
}

/// The request cache and what feeds on it.
pub struct RequestWatch {
    /// The controller over the requests; its `store()` is the request cache.
    pub controller: Controller<ContainerRecreateRequest>,
    /// The cache's changes, for the rollout controller (it reads rollouts' requests from the
    /// same cache instead of watching them again).
    pub changes: futures::channel::mpsc::Receiver<Arc<ContainerRecreateRequest>>,
    /// The watch that fills the cache and feeds both: run it beside the controllers.
    pub reflecting: futures::future::BoxFuture<'static, ()>,
}

/// How many request changes may wait for the slower of the two controllers before the watch
/// waits for it.
const SHARED_BUFFER: usize = 1024;

/// The controller over the requests of `namespace` (all namespaces when `None`), with the
/// shared request cache; settled requests go to `settled` instead.
///
/// Both controllers are fed from the watch through channels of their own, each change once the
/// cache holds it (after a re-list, every cached request). Not through kube's shared-store
/// subscriptions: a subscriber that is handed a change of a request the cache no longer holds
/// (it changed and then settled or was deleted before the subscriber read it) answers
/// `Pending` without asking to be woken again, and then reads nothing more until something
/// else polls its task. A follower, with little else to do, could miss every later request
/// that way, and when it became leader it did not act on new requests.
pub fn new_controller(
    client: Client,
    namespace: Option<&str>,
    concurrency: u16,
    settled: Arc<SettledIndex>,
) -> RequestWatch {
    let crrs: Api<ContainerRecreateRequest> =
        crr_runtime::client::namespaced_or_all(client, namespace);
    let (requests, writer) = reflector::store();
    let (to_requests, for_requests) = futures::channel::mpsc::channel(SHARED_BUFFER);
    let (to_rollouts, changes) = futures::channel::mpsc::channel(SHARED_BUFFER);
    let cache = requests.clone();
    let reflecting = watcher(
        crrs,
        watcher::Config::default().page_size(crr_crds::slim::REQUEST_PAGE),
    )
    .watch_backoff()
    .filter_map(move |event| {
        futures::future::ready(match event {
            Ok(event) => settled.route(event).map(Ok),
            Err(error) => Some(Err(error)),
        })
    })
    .modify(crate::cache::keep_what_reconciles_read)
    .reflect(writer)
    .for_each(move |event| {
        let changed: Vec<Arc<ContainerRecreateRequest>> = match event {
            Ok(watcher::Event::Apply(crr)) => cache
                .get(&reflector::ObjectRef::from_obj(&crr))
                .into_iter()
                .collect(),
            Ok(watcher::Event::InitDone) => cache.state(),
            Ok(_) => Vec::new(),
            Err(error) => {
                warn!(%error, "request watch");
                Vec::new()
            }
        };
        let (mut to_requests, mut to_rollouts) = (to_requests.clone(), to_rollouts.clone());
        async move {
            use futures::SinkExt as _;
            for crr in changed {
                // A closed channel: its controller has ended (shutdown).
                let _ = to_requests.send(crr.clone()).await;
                let _ = to_rollouts.send(crr).await;
            }
        }
    })
    .boxed();
    let controller = Controller::for_shared_stream(for_requests, requests)
        .with_config(controller::Config::default().concurrency(concurrency));
    RequestWatch {
        controller,
        changes,
        reflecting,
    }
}

/// Runs `controller` until `shutdown` resolves and in-flight reconciles have finished. Pod
/// events re-queue the requests that name the pod; `became_leader` emits whenever this replica
/// gains the Lease, and then every cached request is reconciled.
pub async fn run(
    controller: Controller<ContainerRecreateRequest>,
    ctx: Arc<Context>,
    namespace: Option<&str>,
    readiness: ReadinessReports,
    on_pods_synced: impl Fn() + Send + 'static,
    became_leader: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store: Store<ContainerRecreateRequest> = controller.store();
    controller
        .watches_stream(
            pod_triggers(
                ctx.client.clone(),
                namespace,
                ctx.pod_memo.clone(),
                readiness,
                on_pods_synced,
            ),
            move |pod| pod_events::requests_for_pod(&store.state(), &pod.metadata),
        )
        .reconcile_all_on(became_leader)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(crr = %object, "reconciled"),
                Err(controller::Error::ReconcilerFailed(_, object)) => {
                    debug!(crr = %object, "reconcile failed");
                }
                // A deleted object's last queued reconcile: nothing to do.
                Err(controller::Error::ObjectNotFound(object)) => {
                    debug!(crr = %object, "gone before its reconcile");
                }
                Err(error) => warn!(%error, "controller event"),
            }
        })
        .await;
}

#[cfg(test)]
mod tests;
