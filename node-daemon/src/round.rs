//! One round of one request: read the runtime, record the containers' states, and carry out
//! `recreate`'s next step (preStop, kill, or completion). The API server is behind
//! [`Requests`], so the round runs the same against the real one (`worker.rs`) and against
//! an in-memory request in tests; the runtime is always real CRI (a fake server in tests).
//!
//! Every status write carries the resourceVersion the round decided on: a request changed
//! meanwhile (completed by the operator: deadline, pod gone) fails the write with a conflict
//! and the next round decides again. Before a kill the request is read afresh: a request
//! completed while its preStop ran is left alone, its container not killed.

use std::future::Future;
use std::time::{Duration, Instant};

use crr_crds::keys::{CONDITION_SUCCEEDED, LABEL_POD_UID};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerRecreateState as State, Phase,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt as _;
use kube::runtime::events::EventType;
use serde_json::json;

use crate::cri::{CriError, Runtime};
use crate::metrics::Metrics;
use crate::recreate::{self, IN_FLIGHT_POLL, Next};

/// A write the API server refused or could not take.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The request changed since the round read it: decide again on the new version.
    #[error("the request changed meanwhile (resourceVersion conflict)")]
    Conflict,
    /// The request is gone.
    #[error("the request no longer exists")]
    Gone,
    #[error("API server: {0}")]
    Api(String),
}

/// What went wrong in a round; the round is retried.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    #[error("writing the request's status: {0}")]
    Write(#[from] WriteError),
    #[error("container runtime: {0}")]
    Runtime(#[from] CriError),
}

/// What a round needs from the API server.
pub trait Requests: Send + Sync {
    /// Merge-patches status fields, with the request's resourceVersion as precondition; returns
    /// the updated request.
    fn write_status(
        &self,
        crr: &ContainerRecreateRequest,
        status: serde_json::Value,
    ) -> impl Future<Output = Result<ContainerRecreateRequest, WriteError>> + Send;

    /// The request as the API server has it now (`None`: deleted).
    fn fresh(
        &self,
        crr: &ContainerRecreateRequest,
    ) -> impl Future<Output = Result<Option<ContainerRecreateRequest>, WriteError>> + Send;

    /// The address preStop hooks reach the pod at: its IP (the node's with host network).
    fn pod_address(
        &self,
        namespace: &str,
        pod: &str,
    ) -> impl Future<Output = Option<String>> + Send;

    /// Records an Event about the request (best effort).
    fn event(
        &self,
        crr: &ContainerRecreateRequest,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> impl Future<Output = ()> + Send;
}

/// Whether the daemon must leave the request alone.
pub fn is_finished(crr: &ContainerRecreateRequest) -> bool {
    crr.is_completed()
        || crr.phase() == Some(Phase::Completed)
        || crr.metadata.deletion_timestamp.is_some()
}

/// What one round did, for the caller's requeue decision.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Look again after this long (a recreate is in flight, or a grace period runs).
    After(Duration),
    /// Nothing to do until the request changes (the watch brings that).
    OnChange,
    /// The request completed: the pod's next request can start at once.
    Completed,
}

/// Everything a round uses.
pub struct Round<'a, R> {
    pub requests: &'a R,
    pub runtime: &'a Runtime,
    pub metrics: &'a Metrics,
}

impl<R: Requests> Round<'_, R> {
    /// One round for a request that is not finished.
    pub async fn run(&self, mut crr: ContainerRecreateRequest) -> Result<Outcome, RoundError> {
        if crr.phase() != Some(Phase::Recreating) {
            crr = self
                .requests
                .write_status(&crr, json!({"phase": Phase::Recreating.as_str()}))
                .await?;
            self.requests
                .event(
                    &crr,
                    EventType::Normal,
                    "Recreating",
                    "started recreating containers",
                )
                .await;
        }
        if recreate::needs_grace(&crr) {
            // The operator marks PreRecreateGrace; its write wakes the round.
            let Some(end) = recreate::grace_ends_at(&crr) else {
                return Ok(Outcome::OnChange);
            };
            let left = end.duration_since(jiff::Timestamp::now());
            if left.is_positive() {
                return Ok(Outcome::After(
                    Duration::try_from(left).unwrap_or(IN_FLIGHT_POLL),
                ));
            }
        }
        let Some(pod_uid) = crr.labels().get(LABEL_POD_UID).cloned() else {
            let message = "the request has no pod-uid label (was it admitted by the crr webhook?)";
            self.complete(&crr, vec![], false, message).await?;
            return Ok(Outcome::Completed);
        };
        if let Some(foreign) = recreate::foreign_runtime(&crr, self.runtime.scheme()) {
            let message = format!(
                "containers of runtime {foreign} cannot be recreated by this node's runtime {}",
                self.runtime.scheme()
            );
            self.complete(&crr, vec![], false, &message).await?;
            return Ok(Outcome::Completed);
        }
        let containers = self
            .runtime
            .pod_containers(&pod_uid)
            .await
            .inspect_err(|_| {
                self.metrics.cri_errors.inc();
            })?;
        let lookup = |name: &str| {
            containers
                .iter()
                .find(|(found, _)| found == name)
                .map(|(_, container)| container.clone())
        };
        let mut states = recreate::container_states(&crr, &lookup, jiff::Timestamp::now());
        let recorded = crr
            .status
            .as_ref()
            .map(|status| status.container_recreate_states.clone())
            .unwrap_or_default();
        if states != recorded {
            crr = self
                .requests
                .write_status(&crr, json!({"containerRecreateStates": states}))
                .await?;
        }
        match recreate::next_step(&crr, &states) {
            Next::Wait => Ok(Outcome::After(IN_FLIGHT_POLL)),
            Next::Complete { succeeded, message } => {
                self.complete(&crr, states, succeeded, &message).await?;
                Ok(Outcome::Completed)
            }
            Next::Kill(index) => {
                let Some(current) = lookup(&crr.spec.containers[index].name) else {
                    return Ok(Outcome::After(IN_FLIGHT_POLL));
                };
                self.kill(crr, &mut states, index, &current.id).await
            }
        }
    }

    /// preStop, then StopContainer with the grace period left; the kill is announced in the
    /// status first, so that a daemon restarted after it knows it happened.
    async fn kill(
        &self,
        crr: ContainerRecreateRequest,
        states: &mut [State],
        index: usize,
        container_id: &str,
    ) -> Result<Outcome, RoundError> {
        let container = crr.spec.containers[index].clone();
        states[index].message = Some(recreate::killing_message(container_id));
        let crr = self
            .requests
            .write_status(&crr, json!({"containerRecreateStates": states}))
            .await?;

        let started = Instant::now();
        if let (Some(handler), Some(budget)) =
            (&container.pre_stop, recreate::pre_stop_budget(&crr))
        {
            let namespace = crr.namespace().unwrap_or_default();
            let address = self
                .requests
                .pod_address(&namespace, &crr.spec.pod_name)
                .await;
            let outcome = crate::pre_stop::run(
                self.runtime,
                container_id,
                handler,
                container.ports.as_deref().unwrap_or_default(),
                address.as_deref(),
                budget,
            )
            .await;
            self.metrics
                .observe_pre_stop(outcome.is_ok(), started.elapsed());
            if let Err(error) = outcome {
                let note = format!(
                    "preStop hook of container {} failed: {error}",
                    container.name
                );
                tracing::warn!(container = %container.name, %error, "preStop failed; killing anyway");
                self.requests
                    .event(&crr, EventType::Warning, "FailedPreStopHook", &note)
                    .await;
            }
        }

        // The operator may have completed the request while the hook ran: then no kill.
        let crr = match self.requests.fresh(&crr).await? {
            Some(fresh) if !is_finished(&fresh) => fresh,
            _ => {
                tracing::info!(container = %container.name, "request finished before the kill; container left running");
                return Ok(Outcome::OnChange);
            }
        };
        let grace = recreate::kill_grace(&crr, started.elapsed());
        let killed = self.runtime.stop(container_id, grace).await;
        states[index] = match &killed {
            // A container already removed is as good as stopped: the kubelet makes a new one.
            Ok(()) | Err(CriError::NotFound(_)) => State {
                name: container.name.clone(),
                phase: Phase::Recreating,
                message: None,
                is_killed: true,
            },
            Err(error) => State {
                name: container.name.clone(),
                phase: Phase::Failed,
                message: Some(format!("kill container error: {error}")),
                is_killed: false,
            },
        };
        let ok = !matches!(states[index].phase, Phase::Failed);
        self.metrics.observe_kill(ok);
        tracing::info!(container = %container.name, id = container_id, grace, ok, "stopped container");
        self.requests
            .event(
                &crr,
                if ok {
                    EventType::Normal
                } else {
                    EventType::Warning
                },
                if ok { "Killing" } else { "FailedKilling" },
                &format!(
                    "container {} stopped with a grace period of {grace}s{}",
                    container.name,
                    killed
                        .as_ref()
                        .err()
                        .map(|error| format!(": {error}"))
                        .unwrap_or_default()
                ),
            )
            .await;
        self.requests
            .write_status(&crr, json!({"containerRecreateStates": states}))
            .await?;
        Ok(Outcome::After(IN_FLIGHT_POLL))
    }

    async fn complete(
        &self,
        crr: &ContainerRecreateRequest,
        states: Vec<State>,
        succeeded: bool,
        message: &str,
    ) -> Result<(), WriteError> {
        let now = Time(jiff::Timestamp::now());
        let mut conditions: Vec<Condition> = crr
            .status
            .as_ref()
            .map(|status| status.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|condition| condition.type_ != CONDITION_SUCCEEDED)
            .collect();
        let reason = if succeeded {
            "Recreated"
        } else {
            "RecreateFailed"
        };
        conditions.push(Condition {
            type_: CONDITION_SUCCEEDED.to_owned(),
            status: if succeeded { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: now.clone(),
            observed_generation: crr.metadata.generation,
        });
        let mut status = json!({
            "phase": Phase::Completed.as_str(),
            "completionTime": now,
            "message": message,
            "conditions": conditions,
        });
        if !states.is_empty() {
            status["containerRecreateStates"] = json!(states);
        }
        self.requests.write_status(crr, status).await?;
        if let Some(created) = crr.metadata.creation_timestamp.as_ref() {
            // Creation time is the API server's clock: approximate across machines, which a
            // metric may be and a decision may not.
            let took = jiff::Timestamp::now().duration_since(created.0);
            self.metrics
                .observe_recreate(succeeded, Duration::try_from(took).unwrap_or_default());
        }
        let type_ = if succeeded {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.requests.event(crr, type_, reason, message).await;
        tracing::info!(succeeded, message, "completed");
        Ok(())
    }
}
