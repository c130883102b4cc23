//! Carries out a rollout's [`Decision`] against the API server, step by step in its order:
//! delete an aborted rollout's queued requests (each preconditioned on its resourceVersion),
//! reserve the budgets' slots (each write preconditioned on the PDB's resourceVersion), create
//! the requests, write the status (preconditioned), publish the Events that follow the write,
//! announce a budget wait (at most once a minute per rollout and PDB), delete the rollout after
//! its TTL. Leadership is checked before every write.
//!
//! A conflict on a budget write or the status write ends the reconcile with
//! [`Error::Conflict`] before any Event: the PDB or the rollout changed since it was read, and
//! the next reconcile decides again from the new copy. Metrics of a status change
//! (`RolloutMetrics::observe`) also follow a written status only, so one change is counted
//! once.

use std::time::Duration;

use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::v1beta1::ContainerRecreateRequest;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PostParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use tracing::debug;

use super::context::RolloutContext;
use super::decide::{Decision, Next};
use super::error::Error;
use crate::wing::FIELD_MANAGER;

/// How soon a reconcile whose status write conflicted decides again (the cache is about to
/// catch up).
pub const CONFLICT_RETRY: Duration = Duration::from_millis(500);

/// Carries out decisions about one rollout.
pub struct Executor<'a> {
    ctx: &'a RolloutContext,
    rollout: &'a ContainerRecreateRollout,
    namespace: String,
    name: String,
}

impl<'a> Executor<'a> {
    /// An executor of decisions about `rollout` (read from the cache).
    pub fn new(ctx: &'a RolloutContext, rollout: &'a ContainerRecreateRollout) -> Self {
        Self {
            ctx,
            rollout,
            namespace: rollout.namespace().unwrap_or_default(),
            name: rollout.name_any(),
        }
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn leading(&self) -> Result<(), Error> {
        if *self.ctx.leader.borrow() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }

    /// Takes the steps of `decision`; returns when to look again.
    pub async fn carry_out(&self, decision: Decision) -> Result<Action, Error> {
        let Decision {
            cancel,
            budgets,
            create,
            status,
            events,
            budget_wait,
            delete,
            next,
        } = decision;
        let requests: Api<ContainerRecreateRequest> =
            Api::namespaced(self.ctx.client.clone(), &self.namespace);
        for deletion in &cancel {
            self.leading()?;
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some(deletion.resource_version.clone()),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            match requests.delete(&deletion.name, &params).await {
                Ok(_) => debug!(request = %deletion.name, "aborted: queued request deleted"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    return Err(Error::of_write(
                        "deleting a queued request of the aborted rollout",
                        format!("request {}/{}", self.namespace, deletion.name),
                        source,
                    ));
                }
            }
        }
        let pdbs: Api<PodDisruptionBudget> =
            Api::namespaced(self.ctx.client.clone(), &self.namespace);
        for write in &budgets {
            self.leading()?;
            pdbs.patch_status(
                &write.budget,
                &crr_runtime::client::patch_params(FIELD_MANAGER),
                &Patch::Merge(&write.patch),
            )
            .await
            .map_err(|source| {
                Error::of_write(
                    "reserving the rollout's slots",
                    format!("PodDisruptionBudget {}/{}", self.namespace, write.budget),
                    source,
                )
            })?;
        }
        // The requests of one decision are created at once: their slots are reserved, and each
        // create waits on admission (the webhook reads the pod), so one after the other the last
        // pod of a batch would start a few creates late. Every create is tried; the first error
        // is the reconcile's.
        if !create.is_empty() {
            self.leading()?;
        }
        let created = futures::future::join_all(create.iter().map(|request| {
            let requests = &requests;
            async move {
                let pod = &request.spec.pod_name;
                match requests.create(&PostParams::default(), request).await {
                    Ok(_) => {
                        debug!(%pod, "started");
                        Ok(())
                    }
                    // Created before (by us, before a restart or on a stale copy): the cache has
                    // not shown it yet.
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                    Err(source) => Err(Error::Write {
                        action: "creating the request of a pod",
                        object: format!("pod {}/{pod}", self.namespace),
                        source,
                    }),
                }
            }
        }))
        .await;
        // A refused create still lets the status be written: the rollout says where it stands
        // whatever admission did, and the refusal is an Event on it (then the reconcile's error).
        let refused = created.into_iter().find_map(Result::err);
        let rollouts: Api<ContainerRecreateRollout> =
            Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let reference = self.rollout.object_ref(&());
        if let Some(patch) = &status {
            self.leading()?;
            rollouts
                .patch_status(
                    patch.name(),
                    &crr_runtime::client::patch_params(FIELD_MANAGER),
                    &Patch::Merge(patch),
                )
                .await
                .map_err(|source| {
                    Error::of_write(
                        "writing the status",
                        format!("rollout {}", self.key()),
                        source,
                    )
                })?;
            self.ctx
                .metrics
                .observe(&self.key(), self.rollout.status.as_ref(), patch.status());
            for event in &events {
                let type_ = if event.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                self.ctx
                    .events
                    .publish(&reference, type_, event.reason, &event.note)
                    .await;
            }
        }
        if let Some(first) = refused {
            // Refused by the API server (admission, quota, policy): said on the rollout. A
            // failure to reach it is only the reconcile's error, retried.
            if let Error::Write {
                object,
                source: kube::Error::Api(status),
                ..
            } = &first
                && (400..500).contains(&status.code)
            {
                let note = format!("{object}: {}", status.message);
                self.ctx
                    .events
                    .publish(&reference, EventType::Warning, "RequestRefused", &note)
                    .await;
            }
            return Err(first);
        }
        if let Some(wait) = &budget_wait
            && self
                .ctx
                .budget_event_due(format!("{}/{}", self.key(), wait.budget))
        {
            self.ctx
                .events
                .normal(
                    &reference,
                    "WaitingForBudget",
                    &format!(
                        "pod {} waits: PodDisruptionBudget {} allows no more disruptions",
                        wait.pod, wait.budget
                    ),
                )
                .await;
        }
        if delete {
            self.leading()?;
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            match rollouts.delete(&self.name, &params).await {
                Ok(_) => debug!("deleted after its TTL"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    return Err(Error::Write {
                        action: "deleting after its TTL",
                        object: format!("rollout {}", self.key()),
                        source,
                    });
                }
            }
        }
        self.ctx.backoff.succeeded(&self.key());
        Ok(match next {
            Next::AwaitChange => Action::await_change(),
            Next::After(after) => Action::requeue(after),
        })
    }
}

#[cfg(test)]
mod tests;
