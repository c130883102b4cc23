//! The kube-runtime controller: watches, the reconcile shell that executes a [`reconcile::plan`],
//! and the error policy.
//!
//! # Watches
//! * ContainerRecreateRequests (v1beta1, all namespaces) through the controller's own reflector:
//!   the operator needs every request, finished ones included (TTL). Their `managedFields` are
//!   dropped before the store (about half of a cached request), and a settled request (finished
//!   and observed) keeps only what its TTL needs (`cache`), so requests piling up cost little.
//! * Pods through a **metadata-only** watch. A pod event only has to say "this pod changed" so
//!   the requests that name it are re-queued (see `trigger`); the reconcile then GETs the one pod
//!   it needs, fresh. A full pod watch would cache every pod spec and status of the cluster to
//!   serve the few pods that have requests; per-pod field-selector watches would need dynamic
//!   watch management. The metadata stream is small per object and nothing from it is kept in
//!   memory (no pod store), at the price of one GET per reconcile and events for pods without
//!   requests, which the mapper drops after a lookup in the request cache.
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

use crr_crds::keys;
use crr_crds::status::{NoResourceVersion, StatusPatch};
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_runtime::backoff::Backoff;
use crr_runtime::events::EventPublisher;
use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::metrics::{CompletionLabels, ErrorLabels, Metrics, OutcomeLabels};
use crate::readiness::{self, Holder};
use crate::reconcile::{self, Action, Completion};
use crate::trigger;

/// Field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "crr-operator";

/// How many times a pod status write is retried on a conflict within one reconcile.
const POD_WRITE_ATTEMPTS: usize = 5;

/// Shared state of all reconciles.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Publishes Events.
    pub events: EventPublisher,
    /// Metrics to update.
    pub metrics: Metrics,
    /// `true` while this replica holds the Lease.
    pub leader: watch::Receiver<bool>,
    /// The pods of requests in flight as last read (a reconcile reads a pod again only when
    /// the metadata watch reported a change).
    pub pod_memo: Arc<crate::pod_memo::PodMemo>,
    /// Failed reconciles in a row, per request: their retries back off.
    pub backoff: Backoff,
}

/// The first retry of a failed reconcile comes after about this, doubling per failure in a row.
pub const RETRY_BASE: Duration = Duration::from_millis(500);
/// A failing request is retried at least this often.
pub const RETRY_CAP: Duration = Duration::from_secs(60);

impl Context {
    /// A context with no backoff history.
    pub fn new(
        client: Client,
        events: EventPublisher,
        metrics: Metrics,
        leader: watch::Receiver<bool>,
        pod_memo: Arc<crate::pod_memo::PodMemo>,
    ) -> Self {
        Self {
            client,
            events,
            metrics,
            leader,
            pod_memo,
            backoff: Backoff::new(RETRY_BASE, RETRY_CAP),
        }
    }

    fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }
}

/// Why a reconcile failed; it is retried by the error policy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request without namespace (cannot happen for a namespaced resource read from the API).
    #[error("the ContainerRecreateRequest {name} has no namespace")]
    MissingNamespace {
        /// Request name.
        name: String,
    },
    /// The pod could not be read.
    #[error("reading pod {pod}: {source}")]
    ReadPod {
        /// `namespace/name`.
        pod: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Someone else changed the object between our read and our write.
    #[error("{action} on {object}: it changed meanwhile, will retry")]
    Conflict {
        /// What we tried.
        action: &'static str,
        /// `kind namespace/name`.
        object: String,
    },
    /// A write was refused or failed.
    #[error("{action} on {object}: {source}")]
    Write {
        /// What we tried.
        action: &'static str,
        /// `kind namespace/name`.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The pod's readiness-gate holder list belongs to someone we cannot understand.
    #[error("taking pod {pod} out of endpoints: {source}")]
    UnreadableHolders {
        /// `namespace/name`.
        pod: String,
        /// Why.
        #[source]
        source: readiness::UnreadableHolders,
    },
    /// The Lease was lost within the reconcile; nothing more was written.
    #[error("lost the leader Lease during the reconcile")]
    NotLeader,
    /// The request has no resourceVersion to precondition a status write on.
    #[error(transparent)]
    Unversioned(#[from] NoResourceVersion),
}

impl Error {
    /// Every [`Error::kind`], so metrics export each one from the start.
    pub const KINDS: [&'static str; 7] = [
        "missing_namespace",
        "read_pod",
        "conflict",
        "write",
        "unreadable_holders",
        "not_leader",
        "unversioned",
    ];

    /// The API server's reason when it refused the call for good: 403 Forbidden (RBAC, an
    /// admission policy) or 422 Invalid. Trying again changes nothing.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Self::ReadPod { source, .. } | Self::Write { source, .. } => match source {
                kube::Error::Api(status) if status.code == 403 || status.code == 422 => Some(
                    format!("{} ({}): {}", status.reason, status.code, status.message),
                ),
                _ => None,
            },
            _ => None,
        }
    }

    /// A short label for metrics (one of [`Error::KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingNamespace { .. } => "missing_namespace",
            Self::ReadPod { .. } => "read_pod",
            Self::Conflict { .. } => "conflict",
            Self::Write { .. } => "write",
            Self::UnreadableHolders { .. } => "unreadable_holders",
            Self::NotLeader => "not_leader",
            Self::Unversioned(_) => "unversioned",
        }
    }
}

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
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
        let pod_key = format!("{namespace}/{}", crr.spec.pod_name);
        let pod = if crr.spec.pod_name.is_empty() || !reconcile::needs_pod(&crr) {
            ctx.pod_memo.forget(&pod_key);
            None
        } else if let Some(pod) = ctx.pod_memo.current(&pod_key) {
            Some((*pod).clone())
        } else {
            let pod = pods
                .get_opt(&crr.spec.pod_name)
                .await
                .map_err(|source| Error::ReadPod {
                    pod: pod_key.clone(),
                    source,
                })?;
            if let Some(pod) = &pod {
                ctx.pod_memo.keep(&pod_key, Arc::new(pod.clone()));
            }
            pod
        };
        let now = Timestamp::now();
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
        for action in plan.actions {
            if executor.execute(action).await? == Step::Stop {
                break;
            }
        }
        // The pod as this reconcile left it (a readiness write returns the new version).
        if let Some(pod) = executor.pod.take() {
            ctx.pod_memo.keep(&pod_key, Arc::new(pod));
        }
        ctx.metrics
            .reconciles
            .get_or_create(&OutcomeLabels { outcome: "applied" })
            .inc();
        ctx.backoff.succeeded(&format!("{namespace}/{name}"));
        Ok(match plan.requeue_after {
            Some(after) => controller::Action::requeue(after),
            None => controller::Action::await_change(),
        })
    }
    .instrument(span)
    .await
}

/// Retries a failed reconcile: conflicts soon (the cache is about to catch up), others later.
pub fn error_policy(
    crr: Arc<ContainerRecreateRequest>,
    error: &Error,
    ctx: Arc<Context>,
) -> controller::Action {
    ctx.metrics
        .reconciles
        .get_or_create(&OutcomeLabels { outcome: "error" })
        .inc();
    ctx.metrics
        .errors
        .get_or_create(&ErrorLabels { kind: error.kind() })
        .inc();
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
            debug!(crr = %key, %error, "reconcile conflicted");
            controller::Action::requeue(Duration::from_millis(500))
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
/// reason in `status.message` (a merge patch that writes the same message again changes
/// nothing, so it wakes no reconcile). Best effort: a refusal of that very write is logged.
async fn report_refusal(crr: Arc<ContainerRecreateRequest>, ctx: Arc<Context>, reason: String) {
    let message = format!("the API server refused the operator: {reason}");
    let reference = crr.object_ref(&());
    ctx.events
        .publish(&reference, EventType::Warning, "Refused", &message)
        .await;
    let Some(namespace) = crr.namespace() else {
        return;
    };
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({ "status": { "message": message } });
    if let Err(error) = crrs
        .patch_status(
            &crr.name_any(),
            &crr_runtime::client::patch_params(FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await
    {
        warn!(crr = %crr.name_any(), %error, "writing the refusal into the status message");
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Step {
    Continue,
    /// The request is gone: the rest of the plan has nothing to act on.
    Stop,
}

struct Executor<'a> {
    ctx: &'a Context,
    crrs: Api<ContainerRecreateRequest>,
    pods: Api<Pod>,
    /// The request as last read or written (its resourceVersion guards the next write).
    current: ContainerRecreateRequest,
    /// The pod as read at the start of the reconcile.
    pod: Option<Pod>,
    now: Timestamp,
}

fn params() -> PatchParams {
    crr_runtime::client::patch_params(FIELD_MANAGER)
}

impl Executor<'_> {
    fn crr_key(&self) -> String {
        format!(
            "{}/{}",
            self.current.namespace().unwrap_or_default(),
            self.current.name_any()
        )
    }

    fn holder(&self) -> Holder {
        Holder::for_crr(
            &self.current.namespace().unwrap_or_default(),
            &self.current.name_any(),
        )
    }

    fn api_error(&self, action: &'static str, object: String, source: kube::Error) -> Error {
        match &source {
            kube::Error::Api(status) if status.is_conflict() => Error::Conflict { action, object },
            _ => Error::Write {
                action,
                object,
                source,
            },
        }
    }

    async fn execute(&mut self, action: Action) -> Result<Step, Error> {
        if !self.ctx.is_leader() {
            return Err(Error::NotLeader);
        }
        match action {
            Action::ReleasePodReadiness => self.release_pod_readiness().await,
            Action::RemoveFinalizer => {
                let finalizers: Vec<String> = self
                    .current
                    .finalizers()
                    .iter()
                    .filter(|finalizer| *finalizer != keys::FINALIZER_UNREADY_ACQUIRED)
                    .cloned()
                    .collect();
                self.patch_crr(
                    "removing the unready-acquired finalizer",
                    json!({
                        "metadata": {
                            "resourceVersion": self.current.resource_version(),
                            "finalizers": finalizers,
                        }
                    }),
                )
                .await
            }
            Action::AddFinalizer => {
                let mut finalizers = self.current.finalizers().to_vec();
                finalizers.push(keys::FINALIZER_UNREADY_ACQUIRED.to_owned());
                self.patch_crr(
                    "adding the unready-acquired finalizer",
                    json!({
                        "metadata": {
                            "resourceVersion": self.current.resource_version(),
                            "finalizers": finalizers,
                        }
                    }),
                )
                .await
            }
            Action::RemoveActiveLabel => {
                let step = self
                    .patch_crr(
                        "removing the active label",
                        json!({
                            "metadata": { "labels": { keys::LABEL_ACTIVE: null } }
                        }),
                    )
                    .await?;
                // Once per request: the label is gone after this write (see `metrics`). A
                // request deleted meanwhile (`Stop`) is observed too: nobody else will.
                self.ctx.metrics.observe_finished(&self.current);
                Ok(step)
            }
            Action::Delete => self.delete().await,
            Action::Complete(completion) => self.complete(completion).await,
            Action::AcquirePodReadiness => self.acquire_pod_readiness().await,
            Action::MarkPreRecreateGrace {
                time,
                missing_readiness_gate,
            } => {
                let patch = reconcile::pre_recreate_grace_patch(
                    &self.current,
                    time,
                    missing_readiness_gate,
                )?;
                let step = self
                    .patch_crr_status("starting the unready grace period", &patch)
                    .await?;
                if missing_readiness_gate {
                    let note = reconcile::MESSAGE_NO_READINESS_GATE;
                    warn!("{note}");
                    self.publish_on_crr(EventType::Warning, "NoReadinessGate", note)
                        .await;
                    self.publish_on_pod(EventType::Warning, "NoReadinessGate", note)
                        .await;
                } else {
                    self.publish_on_crr(
                        EventType::Normal,
                        "PreRecreateGrace",
                        keys::MESSAGE_PRE_RECREATE_GRACE,
                    )
                    .await;
                }
                Ok(step)
            }
            Action::PatchSnapshot(snapshot) => {
                let patch = reconcile::snapshot_patch(&self.current, snapshot)?;
                self.patch_crr_status("writing the container status snapshot", &patch)
                    .await
            }
        }
    }

    /// Merge-patches the CRR's metadata (finalizers, labels).
    async fn patch_crr(&mut self, action: &'static str, patch: Value) -> Result<Step, Error> {
        let name = self.current.name_any();
        let result = self
            .crrs
            .patch(&name, &params(), &Patch::Merge(&patch))
            .await;
        self.keep_answer(action, result)
    }

    /// Merge-patches the CRR's status subresource with a patch built from `self.current`.
    async fn patch_crr_status(
        &mut self,
        action: &'static str,
        patch: &StatusPatch,
    ) -> Result<Step, Error> {
        let result = self
            .crrs
            .patch_status(patch.name(), &params(), &Patch::Merge(patch))
            .await;
        self.keep_answer(action, result)
    }

    /// Keeps the API server's answer to a write as the current object, which the next action
    /// builds on; a CRR deleted meanwhile stops the reconcile.
    fn keep_answer(
        &mut self,
        action: &'static str,
        result: Result<ContainerRecreateRequest, kube::Error>,
    ) -> Result<Step, Error> {
        match result {
            Ok(updated) => {
                self.current = updated;
                Ok(Step::Continue)
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(Step::Stop),
            Err(source) => Err(self.api_error(action, format!("crr {}", self.crr_key()), source)),
        }
    }

    async fn complete(&mut self, completion: Completion) -> Result<Step, Error> {
        // The resourceVersion precondition keeps a stale cache from overwriting a completion
        // the daemon has just written.
        let patch = reconcile::completion_patch(&self.current, &completion)?;
        // The Succeeded condition's message: the reason and the containers not recreated.
        let message = patch
            .fields()
            .conditions
            .iter()
            .flatten()
            .find(|condition| condition.type_ == keys::CONDITION_SUCCEEDED)
            .map_or_else(
                || completion.reason.message().to_owned(),
                |condition| condition.message.clone(),
            );
        let step = self
            .patch_crr_status("completing the request", &patch)
            .await?;
        if step == Step::Continue {
            info!(reason = completion.reason.reason(), "completed: {message}");
            self.ctx
                .metrics
                .completions
                .get_or_create(&CompletionLabels {
                    reason: completion.reason.reason(),
                })
                .inc();
            let note = format!(
                "ContainerRecreateRequest {} completed: {message}",
                self.crr_key()
            );
            self.publish_on_crr(EventType::Warning, completion.reason.reason(), &note)
                .await;
            self.publish_on_pod(EventType::Warning, completion.reason.reason(), &note)
                .await;
        }
        Ok(step)
    }

    async fn delete(&mut self) -> Result<Step, Error> {
        let name = self.current.name_any();
        let params = DeleteParams::default().preconditions(Preconditions {
            uid: self.current.uid(),
            resource_version: None,
        });
        match self.crrs.delete(&name, &params).await {
            Ok(_) => {
                info!("deleted after ttlSecondsAfterFinished");
                self.publish_on_crr(
                    EventType::Normal,
                    "TTLExpired",
                    "deleted: ttlSecondsAfterFinished passed since completion",
                )
                .await;
                Ok(Step::Stop)
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(Step::Stop),
            Err(source) => Err(self.api_error(
                "deleting the finished request",
                format!("crr {}", self.crr_key()),
                source,
            )),
        }
    }

    /// Writes pod conditions computed from a fresh read, retrying on conflicts, so concurrent
    /// holders of the same pod never lose each other's entries. Returns whether it wrote.
    async fn update_pod_conditions<F>(
        &mut self,
        action: &'static str,
        decide: F,
    ) -> Result<bool, Error>
    where
        F: Fn(
            &Pod,
        ) -> Result<
            Option<Vec<k8s_openapi::api::core::v1::PodCondition>>,
            readiness::UnreadableHolders,
        >,
    {
        let pod_name = self.current.spec.pod_name.clone();
        let pod_key = format!(
            "{}/{pod_name}",
            self.current.namespace().unwrap_or_default()
        );
        for attempt in 1..=POD_WRITE_ATTEMPTS {
            let pod = match attempt {
                1 => self.pod.clone(),
                _ => None,
            };
            let pod = match pod {
                Some(pod) => pod,
                None => match self.pods.get_opt(&pod_name).await {
                    Ok(Some(pod)) => pod,
                    Ok(None) => return Ok(false),
                    Err(source) => {
                        return Err(Error::ReadPod {
                            pod: pod_key,
                            source,
                        });
                    }
                },
            };
            let changes = decide(&pod).map_err(|source| Error::UnreadableHolders {
                pod: pod_key.clone(),
                source,
            })?;
            let Some(conditions) = changes else {
                return Ok(false);
            };
            if !self.ctx.is_leader() {
                return Err(Error::NotLeader);
            }
            let patch = json!({
                "metadata": { "resourceVersion": pod.resource_version() },
                "status": { "conditions": conditions },
            });
            match self
                .pods
                .patch_status(&pod_name, &params(), &Patch::Strategic(&patch))
                .await
            {
                Ok(updated) => {
                    self.pod = Some(updated);
                    return Ok(true);
                }
                Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(false),
                Err(kube::Error::Api(status)) if status.is_conflict() => {
                    debug!(attempt, "pod changed meanwhile, reading it again");
                    self.pod = None;
                }
                Err(source) => {
                    return Err(Error::Write {
                        action,
                        object: format!("pod {pod_key}"),
                        source,
                    });
                }
            }
        }
        Err(Error::Conflict {
            action,
            object: format!("pod {pod_key}"),
        })
    }

    async fn acquire_pod_readiness(&mut self) -> Result<Step, Error> {
        let holder = self.holder();
        let now = self.now;
        let wrote = self
            .update_pod_conditions("taking the pod out of endpoints", |pod| {
                readiness::acquire(pod, &holder, now)
            })
            .await?;
        if wrote {
            let note = format!(
                "pod {} set not ready (KruisePodReady=False) by ContainerRecreateRequest {} before recreating containers",
                self.current.spec.pod_name,
                self.crr_key()
            );
            info!("{note}");
            self.publish_on_crr(EventType::Normal, "PodNotReady", &note)
                .await;
            self.publish_on_pod(EventType::Normal, "PodNotReady", &note)
                .await;
        }
        Ok(Step::Continue)
    }

    async fn release_pod_readiness(&mut self) -> Result<Step, Error> {
        let holder = self.holder();
        let now = self.now;
        let result = self
            .update_pod_conditions("restoring the pod's readiness", |pod| {
                readiness::release(pod, &holder, now).map(|change| change.map(|c| vec![c]))
            })
            .await;
        let wrote = match result {
            Ok(wrote) => wrote,
            // An unreadable list cannot contain our entry in a form we wrote; never let that
            // keep the finalizer (and so the request) forever.
            Err(Error::UnreadableHolders { pod, source }) => {
                warn!(%pod, %source, "cannot read the readiness holders; assuming ours is gone");
                false
            }
            Err(error) => return Err(error),
        };
        if wrote {
            let note = format!(
                "ContainerRecreateRequest {} released pod {} (KruisePodReady)",
                self.crr_key(),
                self.current.spec.pod_name
            );
            info!("{note}");
            self.publish_on_crr(EventType::Normal, "PodReadinessRestored", &note)
                .await;
            self.publish_on_pod(EventType::Normal, "PodReadinessRestored", &note)
                .await;
        }
        Ok(Step::Continue)
    }

    async fn publish_on_crr(&self, type_: EventType, reason: &str, note: &str) {
        let reference = self.current.object_ref(&());
        self.publish(type_, reason, note, reference).await;
    }

    async fn publish_on_pod(&self, type_: EventType, reason: &str, note: &str) {
        if let Some(pod) = &self.pod {
            let reference = pod.object_ref(&());
            self.publish(type_, reason, note, reference).await;
        }
    }

    async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        note: &str,
        reference: k8s_openapi::api::core::v1::ObjectReference,
    ) {
        self.ctx
            .events
            .publish(&reference, type_, reason, note)
            .await;
    }
}

/// Pod metadata events (the objects touched). Calls `on_synced` once the first list of pods has
/// been seen.
pub fn pod_triggers(
    client: Client,
    namespace: Option<&str>,
    pod_memo: Arc<crate::pod_memo::PodMemo>,
    on_synced: impl Fn() + Send + 'static,
) -> impl Stream<Item = Result<PartialObjectMeta<Pod>, watcher::Error>> + Send + 'static {
    // `Api<PartialObjectMeta<_>>` makes metadata-only list and watch requests.
    let pods: Api<PartialObjectMeta<Pod>> = match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    watcher(pods, watcher::Config::default())
        .default_backoff()
        .inspect(move |event| {
            let key = |pod: &PartialObjectMeta<Pod>| {
                format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
            };
            match event {
                Ok(watcher::Event::InitDone) => on_synced(),
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                    pod_memo.reported(&key(pod), pod.resource_version());
                }
                Ok(watcher::Event::Delete(pod)) => {
                    pod_memo.deleted(&key(pod), pod.metadata.uid.clone());
                }
                _ => {}
            }
        })
        .touched_objects()
}

/// The controller over the requests of `namespace` (all namespaces when `None`); its `store()`
/// is the request cache.
pub fn new_controller(
    client: Client,
    namespace: Option<&str>,
    concurrency: u16,
) -> Controller<ContainerRecreateRequest> {
    let crrs: Api<ContainerRecreateRequest> = match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let (requests, writer) = reflector::store();
    let stream = watcher(crrs, watcher::Config::default())
        .default_backoff()
        .modify(crate::cache::keep_what_reconciles_read)
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(stream, requests)
        .with_config(controller::Config::default().concurrency(concurrency))
}

/// Runs `controller` until `shutdown` resolves and in-flight reconciles have finished. Pod
/// events re-queue the requests that name the pod; `became_leader` emits whenever this replica
/// gains the Lease, and then every cached request is reconciled.
pub async fn run(
    controller: Controller<ContainerRecreateRequest>,
    ctx: Arc<Context>,
    namespace: Option<&str>,
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
                on_pods_synced,
            ),
            move |pod| trigger::requests_for_pod(&store.state(), &pod.metadata),
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
                Err(error) => warn!(%error, "controller event"),
            }
        })
        .await;
}

#[cfg(test)]
mod tests;
