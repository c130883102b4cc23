//! The rollout controller: its watches, the reconcile shell (decide with
//! [`decide`], carry out with [`Executor`]), and its error policy.
//!
//! # Watches
//! * ContainerRecreateRollouts (all namespaces, or the watched one): the controller's own
//!   reflector. Rollouts are few and small.
//! * The requests the rollouts created, from the request wing's shared cache
//!   (`request::start`): no second watch or copy of requests. A change of a request
//!   labelled `crr.dev/rollout` re-queues its rollout, and the reconcile reads the rollout's
//!   requests from that cache, settled ones included (`cache` keeps their outcome).
//! * PodDisruptionBudgets (all namespaces): a PDB's change re-queues the unfinished rollouts of
//!   its namespace. Its status moves when a selected pod's readiness does, so a rollout waiting
//!   on a budget wakes when it can go on.
//! * Pods: the pods a running rollout reads (its target's, its PDBs'), from a watch per
//!   namespace and selector started by its first reconcile and stopped once no reconcile reads
//!   it (`scoped_watches`); a change of a watched pod's readiness or termination re-queues the
//!   unfinished rollouts of its namespace. The request wing's watch of all pods re-queues them
//!   on a readiness change too (`ready_flips`), before a scoped watch exists.
//!
//! # Leadership
//! As the request controller: every replica watches, only the Lease holder reconciles, and
//! every rollout is reconciled when a replica becomes leader. Nothing is kept only in memory:
//! the plan is derived from the pods and the requests each time, so a new leader goes on where
//! the old one stopped and never starts a pod twice (a pod's request has a fixed name).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crr_crds::keys;
use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_runtime::backoff::WatchBackoffExt as _;
use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{Instrument, debug, info_span, warn};

use super::cluster_cap::{self, Admission, CapView};
use super::context::RolloutContext;
use super::decide::{self, Reading, Stage, World};
use super::error::Error;
use super::executor::{CONFLICT_RETRY, Executor};
use super::plan::RequestState;
use super::ready_flips::ReadyFlips;
use super::request::{is_queued, pod_uid, request_state};
use super::world;
use crate::pod_view::{PodReadiness, SlimPod};
use crr_crds::rollout_order::pod_view;

/// Triggers of one rollout within this are served by one reconcile.
pub const TRIGGER_DEBOUNCE: Duration = Duration::from_millis(250);
/// Reconciles one rollout: decides from the rollout alone, or reads its target's pods and
/// budgets and its requests and decides from them ([`decide`]), then carries the decision out
/// ([`Executor`]).
pub async fn reconcile(
    rollout: Arc<ContainerRecreateRollout>,
    ctx: Arc<RolloutContext>,
) -> Result<controller::Action, Error> {
    if !ctx.is_leader() {
        return Ok(controller::Action::await_change());
    }
    let name = rollout.name_any();
    let namespace = rollout
        .namespace()
        .ok_or_else(|| Error::MissingNamespace { name: name.clone() })?;
    let span = info_span!("rollout", rollout = %format!("{namespace}/{name}"));
    async move {
        let now = Timestamp::now();
        let decision = match decide::before_reading(&rollout, now) {
            Stage::Decided(decision) => *decision,
            Stage::Refused(why) => {
                warn!("{why}");
                return Ok(controller::Action::await_change());
            }
            Stage::ReadWorld(reading) => match cluster_admission(&ctx, &namespace, &name) {
                Admission::Wait { cap, ahead, .. } => {
                    decide::wait_for_cluster_cap(&rollout, cap, ahead, now)?
                }
                Admission::Start => {
                    let uid = rollout.uid().unwrap_or_default();
                    let mine: Vec<_> = of_rollout(&ctx.requests, &namespace, &name, &uid).collect();
                    let world = read_world(&ctx, &namespace, &rollout, &reading, &mine).await?;
                    let requests = rollout_requests(&mine, &name);
                    decide::decide(&rollout, &reading, &world, &requests, now)?
                }
            },
        };
        debug!(
            start = decision.create.len(),
            status = decision.status.is_some(),
            next = ?decision.next,
            "decided"
        );
        Executor::new(&ctx, &rollout).carry_out(decision).await
    }
    .instrument(span)
    .await
}

/// Whether the rollout may start under the cluster's cap, from the rollout cache.
fn cluster_admission(ctx: &RolloutContext, namespace: &str, name: &str) -> Admission {
    let Some((rollouts, cap)) = &ctx.cluster_cap else {
        return Admission::Start;
    };
    let views: Vec<CapView> = rollouts
        .state()
        .iter()
        .map(|rollout| CapView::of(rollout))
        .collect();
    cluster_cap::admission(&views, namespace, name, *cap)
}

/// Reads what [`decide::decide`] needs of the cluster: the target's pods and, when the rollout
/// respects them, the budgets of its namespace (from the PDB cache) that select them; `mine` are
/// the rollout's requests (to tell its own entries in a PDB's status).
async fn read_world(
    ctx: &RolloutContext,
    namespace: &str,
    rollout: &ContainerRecreateRollout,
    reading: &Reading,
    mine: &[Arc<ContainerRecreateRequest>],
) -> Result<World, Error> {
    let target =
        world::read_target(&ctx.client, &ctx.watches, namespace, &rollout.spec.target).await?;
    let budgets = if reading.respect_budgets {
        let in_namespace: Vec<_> = ctx
            .budgets
            .state()
            .into_iter()
            .filter(|budget| budget.namespace().as_deref() == Some(namespace))
            .collect();
        let busy = pods_being_recreated(&ctx.requests, namespace);
        let own = own_requests(mine, rollout.spec.aborted);
        world::read_budgets(
            &ctx.client,
            &ctx.watches,
            namespace,
            &target,
            &in_namespace,
            &busy,
            &own,
        )
        .await?
    } else {
        Vec::new()
    };
    Ok(World {
        pods: target.pods.iter().map(pod_view).collect(),
        budgets,
        target_exists: target.exists,
    })
}

/// The UIDs of the pods of `namespace` with an unfinished request, whoever made it (another
/// rollout, a user): still Ready at first, but about to be disrupted, so no budget counts them
/// healthy.
fn pods_being_recreated(
    requests: &Store<ContainerRecreateRequest>,
    namespace: &str,
) -> std::collections::BTreeSet<String> {
    requests
        .state()
        .iter()
        .filter(|crr| crr.namespace().as_deref() == Some(namespace))
        .filter(|crr| !crr_crds::status::is_finished(crr))
        .filter_map(|crr| crr.labels().get(keys::LABEL_POD_UID).cloned())
        .collect()
}

/// The requests of rollout `name` in `namespace` (labelled with its name and controlled by its
/// `uid`), from the request cache. A rollout deleted and made again under the same name does not
/// adopt its predecessor's requests (which the garbage collector is deleting): its pods are
/// restarted again.
fn of_rollout<'a>(
    requests: &Store<ContainerRecreateRequest>,
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
) -> impl Iterator<Item = Arc<ContainerRecreateRequest>> + 'a {
    requests.state().into_iter().filter(move |crr| {
        crr.namespace().as_deref() == Some(namespace)
            && crr.labels().get(keys::LABEL_ROLLOUT).map(String::as_str) == Some(name)
            && crr_crds::controller_uid(&crr.metadata) == Some(uid)
    })
}

/// The states of `mine`, the requests of rollout `name`, by pod UID.
fn rollout_requests(
    mine: &[Arc<ContainerRecreateRequest>],
    name: &str,
) -> BTreeMap<String, RequestState> {
    mine.iter()
        .filter_map(|crr| {
            let uid = pod_uid(name, crr.metadata.name.as_deref()?)?;
            Some((uid.to_owned(), request_state(crr)))
        })
        .collect()
}

/// `mine`, the requests of a rollout, by pod name, as its budgets' reading needs them (to tell
/// its own entries in a PDB's `disruptedPods`). An aborted rollout's queued requests count as
/// finished: the reconcile deletes them before it writes the budgets.
fn own_requests(
    mine: &[Arc<ContainerRecreateRequest>],
    aborted: bool,
) -> BTreeMap<String, world::OwnRequest> {
    mine.iter()
        .filter_map(|crr| {
            let created = crr.metadata.creation_timestamp.as_ref()?.0;
            let finished = crr_crds::status::is_finished(crr);
            Some((
                crr.spec.pod_name.clone(),
                world::OwnRequest {
                    created,
                    finished: finished || (aborted && is_queued(crr)),
                },
            ))
        })
        .collect()
}

/// Retries a failed reconcile with the shared backoff; refusals (403, 422) wait for a change.
pub fn error_policy(
    rollout: Arc<ContainerRecreateRollout>,
    error: &Error,
    ctx: Arc<RolloutContext>,
) -> controller::Action {
    ctx.errors.count(error.kind());
    let key = format!(
        "{}/{}",
        rollout.namespace().unwrap_or_default(),
        rollout.name_any()
    );
    if let Some(reason) = error.refusal() {
        warn!(rollout = %key, %error, "the API server refused the operator; not retrying");
        ctx.backoff.succeeded(&key);
        let ctx = ctx.clone();
        tokio::spawn(async move {
            ctx.events
                .warning(
                    &rollout.object_ref(&()),
                    "Refused",
                    &format!("the API server refused the operator: {reason}"),
                )
                .await;
        });
        return controller::Action::await_change();
    }
    match error {
        Error::NotLeader => controller::Action::await_change(),
        // The rollout changed since it was read: decide again on the new copy, no backoff.
        Error::Conflict { .. } => {
            debug!(rollout = %key, %error, "status write conflicted");
            controller::Action::requeue(CONFLICT_RETRY)
        }
        _ => {
            let after = ctx.backoff.failed(&key);
            warn!(rollout = %key, %error, retry_in = ?after, "rollout reconcile failed");
            controller::Action::requeue(after)
        }
    }
}

/// The PDB cache and the stream that keeps it (and re-queues rollouts).
pub fn budget_watch(
    client: Client,
    namespace: Option<&str>,
) -> (
    Store<PodDisruptionBudget>,
    impl Stream<Item = Result<PodDisruptionBudget, watcher::Error>> + Send + 'static,
) {
    let api: Api<PodDisruptionBudget> = crr_runtime::client::namespaced_or_all(client, namespace);
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .watch_backoff()
        .modify(|budget| {
            budget.metadata.managed_fields = None;
        })
        .reflect(writer)
        .applied_objects();
    (reader, stream)
}

/// The rollout cache, the stream that keeps it, and the slots it shows freed under the cluster's
/// cap (`cluster_cap::frees_a_slot`: a rollout that ended or went), each the rollout that freed
/// it, once the cache holds the change.
pub fn rollout_watch(
    client: Client,
    namespace: Option<&str>,
) -> (
    Store<ContainerRecreateRollout>,
    impl Stream<Item = Result<ContainerRecreateRollout, watcher::Error>> + Send + 'static,
    impl Stream<Item = ContainerRecreateRollout> + Send + 'static,
) {
    let api: Api<ContainerRecreateRollout> =
        crr_runtime::client::namespaced_or_all(client, namespace);
    let (reader, writer) = reflector::store();
    let (freed, slots_freed) = futures::channel::mpsc::unbounded();
    let stream = watcher(api, watcher::Config::default())
        .watch_backoff()
        .modify(|rollout| {
            rollout.metadata.managed_fields = None;
        })
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(event) = event
                && cluster_cap::frees_a_slot(event)
                && let watcher::Event::Apply(rollout) | watcher::Event::Delete(rollout) = event
            {
                // The controller's end of the channel lives as long as this stream.
                let _ = freed.unbounded_send(rollout.clone());
            }
        })
        .applied_objects()
        // Only spec changes (and new rollouts) trigger: the controller's own status writes do
        // not come back as reconciles of their own.
        .predicate_filter(predicates::generation, PredicateConfig::default());
    (reader, stream, slots_freed)
}

/// The rollouts waiting under the cluster's cap, from the rollout cache.
fn waiting_under_the_cap(
    rollouts: &Store<ContainerRecreateRollout>,
) -> Vec<ObjectRef<ContainerRecreateRollout>> {
    let views: Vec<CapView> = rollouts
        .state()
        .iter()
        .map(|rollout| CapView::of(rollout))
        .collect();
    cluster_cap::waiting(&views)
        .map(|view| ObjectRef::new(&view.name).within(&view.namespace))
        .collect()
}

/// The unfinished rollouts of `namespace`.
fn running_in(
    rollouts: &Store<ContainerRecreateRollout>,
    namespace: &str,
) -> Vec<ObjectRef<ContainerRecreateRollout>> {
    rollouts
        .state()
        .into_iter()
        .filter(|rollout| {
            rollout.namespace().as_deref() == Some(namespace)
                && !rollout.phase().is_some_and(|phase| phase.is_finished())
        })
        .map(|rollout| ObjectRef::from_obj(&*rollout))
        .collect()
}

/// Runs the rollout controller until `shutdown`: `rollouts` and `rollout_changes` are
/// [`rollout_watch`]'s, `requests` a subscription to the request cache's changes,
/// `budget_changes` the PDB stream of [`budget_watch`], `pod_readiness` the pod watch's
/// readiness reports (`ready_flips` picks the ones that wake a rollout), `pod_changes` the
/// changes of pods the scoped watches show (`scoped_watches`), each waking its namespace's.
#[allow(clippy::too_many_arguments)] // The watches, wired once in `run.rs`.
pub async fn run(
    ctx: Arc<RolloutContext>,
    rollouts: Store<ContainerRecreateRollout>,
    rollout_changes: impl Stream<Item = Result<ContainerRecreateRollout, watcher::Error>>
    + Send
    + 'static,
    requests: impl Stream<Item = Arc<ContainerRecreateRequest>> + Send + 'static,
    budget_changes: impl Stream<Item = Result<PodDisruptionBudget, watcher::Error>> + Send + 'static,
    pod_readiness: impl Stream<Item = PodReadiness> + Send + 'static,
    pod_changes: impl Stream<Item = SlimPod> + Send + 'static,
    slots_freed: impl Stream<Item = ContainerRecreateRollout> + Send + 'static,
    became_leader: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // A pod of a namespace where a rollout runs turned Ready (or unready): its rollouts look
    // again at once, instead of at their next poll.
    let ready_flips = {
        let rollouts = rollouts.clone();
        let mut flips = ReadyFlips::default();
        pod_readiness.filter_map(move |report| {
            let running = !running_in(&rollouts, &report.namespace).is_empty();
            let wakes = flips.wakes(&report, running);
            futures::future::ready(wakes.then(|| {
                let mut pod = SlimPod::default();
                pod.0.metadata.namespace = Some(report.namespace);
                pod.0.metadata.name = Some(report.name);
                pod.0.metadata.uid = Some(report.uid);
                Ok(pod)
            }))
        })
    };
    // Requests of one rollout often end together: one reconcile serves them all.
    let controller = Controller::for_stream(rollout_changes, rollouts.clone())
        .with_config(controller::Config::default().debounce(TRIGGER_DEBOUNCE));
    controller
        .watches_shared_stream(requests, |crr: Arc<ContainerRecreateRequest>| {
            // Only an ending changes a rollout's plan: its requests' steps before that do not.
            if !crr_crds::status::is_finished(&crr) {
                return None;
            }
            let rollout = crr.labels().get(keys::LABEL_ROLLOUT).cloned();
            let namespace = crr.namespace();
            rollout
                .zip(namespace)
                .map(|(name, namespace)| ObjectRef::new(&name).within(&namespace))
        })
        .watches_stream(budget_changes, {
            let rollouts = rollouts.clone();
            move |budget: PodDisruptionBudget| {
                running_in(&rollouts, &budget.namespace().unwrap_or_default())
            }
        })
        .watches_stream(slots_freed.map(Ok), {
            let rollouts = rollouts.clone();
            move |_freed: ContainerRecreateRollout| waiting_under_the_cap(&rollouts)
        })
        .watches_stream(
            futures::stream::select(ready_flips, pod_changes.map(Ok)),
            move |pod: SlimPod| running_in(&rollouts, &pod.namespace().unwrap_or_default()),
        )
        .reconcile_all_on(became_leader)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(rollout = %object, "reconciled"),
                Err(controller::Error::ReconcilerFailed(_, object)) => {
                    debug!(rollout = %object, "reconcile failed");
                }
                // A deleted object's last queued reconcile: nothing to do.
                Err(controller::Error::ObjectNotFound(object)) => {
                    debug!(rollout = %object, "gone before its reconcile");
                }
                Err(error) => warn!(%error, "rollout controller event"),
            }
        })
        .await;
}
