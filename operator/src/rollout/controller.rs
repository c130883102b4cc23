//! The rollout controller: its watches, the reconcile shell around [`plan`](super::plan::plan),
//! and its error policy.
//!
//! # Watches
//! * ContainerRecreateRollouts (all namespaces, or the watched one): the controller's own
//!   reflector. Rollouts are few and small.
//! * The requests the rollouts created, from the request controller's shared cache
//!   (`controller::new_controller`): no second watch or copy of requests. A change of a request
//!   labelled `crr.dev/rollout` re-queues its rollout, and the reconcile reads the rollout's
//!   requests from that cache, settled ones included (`cache` keeps their outcome).
//! * PodDisruptionBudgets (all namespaces): a PDB's change re-queues the unfinished rollouts of
//!   its namespace. Its status moves when a selected pod's readiness does, so a rollout waiting
//!   on a budget wakes when it can go on.
//! * Pods are not watched: a reconcile lists the target's pods by label selector (`world`).
//!   A rollout waiting for pods to turn Ready looks again after a second.
//!
//! # Leadership
//! As the request controller: every replica watches, only the Lease holder reconciles, and
//! every rollout is reconciled when a replica becomes leader. Nothing is kept only in memory:
//! the plan is derived from the pods and the requests each time, so a new leader goes on where
//! the old one stopped and never starts a pod twice (a pod's request has a fixed name).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crr_crds::keys;
use crr_crds::rollout::{ContainerRecreateRollout, max_unavailable, target_name};
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_runtime::backoff::Backoff;
use crr_runtime::events::EventPublisher;
use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PostParams, PropagationPolicy};
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tracing::{Instrument, debug, info_span, warn};

use super::error::Error;
use super::metrics::RolloutMetrics;
use super::plan::{self, RequestState, Settings, Waiting};
use super::request::{new_request, pod_uid, request_state};
use super::status::{events, next_status};
use super::world::{self, pod_view};
use crate::FIELD_MANAGER;
use crate::reconcile_errors::{ControllerErrors, RETRY_BASE, RETRY_CAP};

/// How soon a rollout waiting for its pods to turn Ready looks again (pods are not watched).
pub const READY_POLL: Duration = Duration::from_secs(1);
/// How soon a rollout waiting on a budget looks again at the latest (the PDB watch wakes it
/// sooner).
pub const BUDGET_POLL: Duration = Duration::from_secs(5);
/// How soon a rollout with requests in flight looks again at the latest (their changes wake it
/// sooner).
pub const IN_FLIGHT_POLL: Duration = Duration::from_secs(10);
/// Triggers of one rollout within this are served by one reconcile.
pub const TRIGGER_DEBOUNCE: Duration = Duration::from_millis(250);
/// A budget wait is announced with an Event at most this often per rollout and PDB.
pub const BUDGET_EVENT_INTERVAL: Duration = Duration::from_secs(60);

/// What every rollout reconcile shares.
pub struct RolloutContext {
    /// API client.
    pub client: Client,
    /// Publishes Events.
    pub events: EventPublisher,
    /// `true` while this replica holds the Lease.
    pub leader: watch::Receiver<bool>,
    /// The request controller's cache.
    pub requests: Store<ContainerRecreateRequest>,
    /// The PodDisruptionBudgets of the cluster (or of the watched namespace).
    pub budgets: Store<PodDisruptionBudget>,
    /// Failed reconciles in a row, per rollout.
    pub backoff: Backoff,
    /// The rollout metrics the leader updates.
    pub metrics: RolloutMetrics,
    /// Failed reconciles, by kind.
    pub errors: ControllerErrors,
    /// When a budget wait was last announced, per `namespace/rollout/pdb`.
    budget_events: Mutex<HashMap<String, Instant>>,
}

impl RolloutContext {
    /// A context with no history.
    pub fn new(
        client: Client,
        events: EventPublisher,
        leader: watch::Receiver<bool>,
        requests: Store<ContainerRecreateRequest>,
        budgets: Store<PodDisruptionBudget>,
        metrics: RolloutMetrics,
        errors: ControllerErrors,
    ) -> Self {
        Self {
            client,
            events,
            leader,
            requests,
            budgets,
            metrics,
            errors,
            backoff: Backoff::new(RETRY_BASE, RETRY_CAP),
            budget_events: Mutex::new(HashMap::new()),
        }
    }

    fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Whether to announce a wait on `key` now (at most once per [`BUDGET_EVENT_INTERVAL`]).
    fn budget_event_due(&self, key: String) -> bool {
        let mut announced = self
            .budget_events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        announced.retain(|_, at| now.duration_since(*at) < BUDGET_EVENT_INTERVAL);
        if announced.contains_key(&key) {
            return false;
        }
        announced.insert(key, now);
        true
    }
}

/// Reconciles one rollout: reads its target, requests and budgets, plans, creates the requests
/// of the pods to start, writes the status, and says when to look again.
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
    if rollout.metadata.deletion_timestamp.is_some() {
        // Its requests go with it (owner references): the garbage collector deletes them, and a
        // deleted request in flight is cancelled as any is.
        return Ok(controller::Action::await_change());
    }
    let span = info_span!("rollout", rollout = %format!("{namespace}/{name}"));
    async move {
        let now = Timestamp::now();
        let rollouts: Api<ContainerRecreateRollout> =
            Api::namespaced(ctx.client.clone(), &namespace);
        if rollout.phase().is_some_and(|phase| phase.is_finished()) {
            return expire(&rollouts, &rollout, now).await;
        }
        let limit = match max_unavailable(rollout.spec.max_unavailable.as_ref()) {
            Ok(limit) => limit,
            Err(error) => {
                // Admission refuses it; a rollout stored while the webhook was away waits for a
                // fix instead of guessing.
                warn!(%error, "not starting: invalid maxUnavailable");
                return Ok(controller::Action::await_change());
            }
        };
        let target = world::read_target(&ctx.client, &namespace, &rollout.spec.target).await?;
        let respect_budgets = rollout.spec.respect_disruption_budgets.unwrap_or(true);
        let budgets = if respect_budgets {
            let in_namespace: Vec<_> = ctx
                .budgets
                .state()
                .into_iter()
                .filter(|budget| budget.namespace().as_deref() == Some(namespace.as_str()))
                .collect();
            world::read_budgets(&ctx.client, &namespace, &target, &in_namespace).await?
        } else {
            Vec::new()
        };
        let pods: Vec<_> = target.pods.iter().map(pod_view).collect();
        let requests = rollout_requests(&ctx.requests, &namespace, &name);
        let settings = Settings {
            created: rollout
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(now, |time| time.0),
            max_unavailable: limit,
            respect_budgets,
            paused: rollout.spec.paused,
            max_failed_pods: usize::try_from(rollout.spec.max_failed_pods.unwrap_or(0))
                .unwrap_or(0),
            target_exists: target.exists,
        };
        let plan = plan::plan(&settings, &pods, &requests, &budgets);
        debug!(start = plan.start.len(), phase = ?plan.phase, waiting = ?plan.waiting, "planned");

        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(ctx.client.clone(), &namespace);
        for pod in &plan.start {
            let Some(request) = new_request(&rollout, pod) else {
                break;
            };
            if !ctx.is_leader() {
                return Err(Error::NotLeader);
            }
            match crrs.create(&PostParams::default(), &request).await {
                Ok(_) => debug!(pod = %pod.name, "started"),
                // Created before (by us, before a restart): the cache has not shown it yet.
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(source) => {
                    return Err(Error::Write {
                        action: "creating the request of a pod",
                        object: format!("pod {namespace}/{}", pod.name),
                        source,
                    });
                }
            }
        }

        let previous = rollout.status.as_ref();
        let status = next_status(
            previous,
            &plan,
            rollout.metadata.generation,
            target_name(&rollout.spec.target),
            now,
        );
        let reference = rollout.object_ref(&());
        if previous != Some(&status) {
            if !ctx.is_leader() {
                return Err(Error::NotLeader);
            }
            rollouts
                .patch_status(
                    &name,
                    &crr_runtime::client::patch_params(FIELD_MANAGER),
                    &Patch::Merge(&json!({ "status": status })),
                )
                .await
                .map_err(|source| Error::Write {
                    action: "writing the status",
                    object: format!("rollout {namespace}/{name}"),
                    source,
                })?;
            ctx.metrics
                .observe(&format!("{namespace}/{name}"), previous, &status);
            for event in events(previous, &status) {
                let type_ = if event.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                ctx.events
                    .publish(&reference, type_, event.reason, &event.note)
                    .await;
            }
        }
        if let Waiting::ForBudget { budget, pod } = &plan.waiting
            && ctx.budget_event_due(format!("{namespace}/{name}/{budget}"))
        {
            ctx.events
                .normal(
                    &reference,
                    "WaitingForBudget",
                    &format!(
                        "pod {pod} waits: PodDisruptionBudget {budget} allows no more disruptions"
                    ),
                )
                .await;
        }
        ctx.backoff.succeeded(&format!("{namespace}/{name}"));
        if plan.phase.is_finished() {
            return expire(&rollouts, &rollout, now).await;
        }
        Ok(match &plan.waiting {
            Waiting::Paused => controller::Action::await_change(),
            Waiting::ForUnavailable { .. } => controller::Action::requeue(READY_POLL),
            Waiting::ForBudget { .. } => controller::Action::requeue(BUDGET_POLL),
            Waiting::FailureLimit | Waiting::Nothing => controller::Action::requeue(IN_FLIGHT_POLL),
        })
    }
    .instrument(span)
    .await
}

/// A finished rollout: deleted (with its requests) once `ttlSecondsAfterFinished` has passed
/// since it ended; else looked at again then.
async fn expire(
    rollouts: &Api<ContainerRecreateRollout>,
    rollout: &ContainerRecreateRollout,
    now: Timestamp,
) -> Result<controller::Action, Error> {
    let (Some(ttl), Some(ended)) = (
        rollout.spec.ttl_seconds_after_finished,
        rollout
            .status
            .as_ref()
            .and_then(|status| status.completion_time.as_ref()),
    ) else {
        return Ok(controller::Action::await_change());
    };
    let left = ended.0.as_second() + i64::from(ttl) - now.as_second();
    if left > 0 {
        return Ok(controller::Action::requeue(Duration::from_secs(
            left.unsigned_abs(),
        )));
    }
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match rollouts.delete(&rollout.name_any(), &params).await {
        Ok(_) => Ok(controller::Action::await_change()),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Ok(controller::Action::await_change())
        }
        Err(source) => Err(Error::Write {
            action: "deleting after its TTL",
            object: format!(
                "rollout {}/{}",
                rollout.namespace().unwrap_or_default(),
                rollout.name_any()
            ),
            source,
        }),
    }
}

/// The states of the requests of rollout `name` in `namespace`, by pod UID, from the request
/// cache.
fn rollout_requests(
    requests: &Store<ContainerRecreateRequest>,
    namespace: &str,
    name: &str,
) -> BTreeMap<String, RequestState> {
    requests
        .state()
        .iter()
        .filter(|crr| {
            crr.namespace().as_deref() == Some(namespace)
                && crr.labels().get(keys::LABEL_ROLLOUT).map(String::as_str) == Some(name)
        })
        .filter_map(|crr| {
            let uid = pod_uid(name, crr.metadata.name.as_deref()?)?;
            Some((uid.to_owned(), request_state(crr)))
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
    let api: Api<PodDisruptionBudget> = match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|budget| {
            budget.metadata.managed_fields = None;
        })
        .reflect(writer)
        .applied_objects();
    (reader, stream)
}

/// The rollout cache and the stream that keeps it.
pub fn rollout_watch(
    client: Client,
    namespace: Option<&str>,
) -> (
    Store<ContainerRecreateRollout>,
    impl Stream<Item = Result<ContainerRecreateRollout, watcher::Error>> + Send + 'static,
) {
    let api: Api<ContainerRecreateRollout> = match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|rollout| {
            rollout.metadata.managed_fields = None;
        })
        .reflect(writer)
        .applied_objects()
        // Only spec changes (and new rollouts) trigger: the controller's own status writes do
        // not come back as reconciles of their own.
        .predicate_filter(predicates::generation, PredicateConfig::default());
    (reader, stream)
}

/// Runs the rollout controller until `shutdown`: `rollouts` and `rollout_changes` are
/// [`rollout_watch`]'s, `requests` a subscription to the request cache's changes,
/// `budget_changes` the PDB stream of [`budget_watch`].
#[allow(clippy::too_many_arguments)] // The watches, wired once in `run.rs`.
pub async fn run(
    ctx: Arc<RolloutContext>,
    rollouts: Store<ContainerRecreateRollout>,
    rollout_changes: impl Stream<Item = Result<ContainerRecreateRollout, watcher::Error>>
    + Send
    + 'static,
    requests: impl Stream<Item = Arc<ContainerRecreateRequest>> + Send + 'static,
    budget_changes: impl Stream<Item = Result<PodDisruptionBudget, watcher::Error>> + Send + 'static,
    became_leader: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
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
        .watches_stream(budget_changes, move |budget: PodDisruptionBudget| {
            let namespace = budget.namespace().unwrap_or_default();
            rollouts
                .state()
                .into_iter()
                .filter(|rollout| {
                    rollout.namespace().as_deref() == Some(namespace.as_str())
                        && !rollout.phase().is_some_and(|phase| phase.is_finished())
                })
                .map(|rollout| ObjectRef::from_obj(&*rollout))
                .collect::<Vec<_>>()
        })
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
