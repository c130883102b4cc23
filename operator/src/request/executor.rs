//! Carries out a [`reconcile::plan`] against the API server: one action after the other, each
//! status write a [`StatusPatch`](crr_crds::status::StatusPatch) built from the request as the
//! previous write left it (the object the API server returned) and preconditioned on its
//! resourceVersion; pod readiness through [`readiness::PodConditionsPatch`], read fresh and
//! written again on a conflict; Events on the request and its pod.

use crr_crds::keys;
use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::status::StatusPatch;
use crr_crds::v1beta1::ContainerRecreateRequest;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::readiness::{self, Holder, PodConditionsPatch};
use crate::request::context::Context;
use crate::request::error::Error;
use crate::request::metrics::CompletionLabels;
use crate::request::reconcile::{self, Action, Completion};
use crate::wing::FIELD_MANAGER;

/// How many times a pod status write is retried on a conflict within one reconcile.
const POD_WRITE_ATTEMPTS: usize = 5;

/// Whether the rest of a plan goes on after an action.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The next action runs.
    Continue,
    /// The request is gone: the rest of the plan has nothing to act on.
    Stop,
    /// Nothing more now: look at the request again after this long.
    Later(std::time::Duration),
}

/// Executes one reconcile's plan, action by action, each write built from the request as the
/// previous write left it.
pub(crate) struct Executor<'a> {
    pub(crate) ctx: &'a Context,
    pub(crate) crrs: Api<ContainerRecreateRequest>,
    pub(crate) pods: Api<crate::pod_view::SlimPod>,
    /// The request as last read or written (its resourceVersion guards the next write).
    pub(crate) current: ContainerRecreateRequest,
    /// The pod as read at the start of the reconcile.
    pub(crate) pod: Option<Pod>,
    pub(crate) now: Timestamp,
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

    /// Runs `action`; the first error stops the plan (the error policy retries it).
    pub(crate) async fn execute(&mut self, action: Action) -> Result<Step, Error> {
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
    /// builds on, without the tenant's bulk (as the cache keeps it); a CRR deleted meanwhile stops
    /// the reconcile.
    fn keep_answer(
        &mut self,
        action: &'static str,
        result: Result<ContainerRecreateRequest, kube::Error>,
    ) -> Result<Step, Error> {
        match result {
            Ok(mut updated) => {
                crr_crds::slim::drop_tenant_bulk(&mut updated);
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
        if let Some(rollout) = self.current.labels().get(keys::LABEL_ROLLOUT).cloned() {
            // One read, when the TTL has run out: the rollout's own watch is another wing's.
            let rollouts: Api<ContainerRecreateRollout> = Api::namespaced(
                self.ctx.client.clone(),
                &self.current.namespace().unwrap_or_default(),
            );
            let owner = rollouts
                .get_opt(&rollout)
                .await
                .map_err(|source| Error::ReadRollout {
                    rollout: format!("{}/{rollout}", self.current.namespace().unwrap_or_default()),
                    source,
                })?;
            if reconcile::rollout_keeps_request(&self.current, owner.as_ref()) {
                let later = reconcile::rollout_keeps_request_recheck(&self.current);
                debug!(%rollout, ?later, "past its TTL, kept while its rollout runs");
                return Ok(Step::Later(later));
            }
        }
        let name = self.current.name_any();
        let params = DeleteParams::default().preconditions(Preconditions {
            uid: self.current.uid(),
            resource_version: None,
        });
        match self.crrs.delete(&name, &params).await {
            Ok(_) => {
                // No Event: it would be about an object that is gone, one more write per
                // request for nobody to read with `kubectl describe` (docs/behaviour.md §4: Events).
                info!("deleted after ttlSecondsAfterFinished");
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
                    Ok(Some(pod)) => pod.0,
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
            let patch = PodConditionsPatch::new(&pod, conditions);
            match self
                .pods
                .patch_status(&pod_name, &params(), &Patch::Strategic(&patch))
                .await
            {
                Ok(updated) => {
                    self.pod = Some(updated.0);
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
