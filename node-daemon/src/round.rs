//! One round of one request: read the runtime, record the containers' states, and carry out
//! `recreate`'s next step (preStop, kill, or completion). The API server is behind
//! [`Requests`], so the round runs the same against the real one (`api_server`) and against
//! an in-memory request in tests; the runtime is always real CRI (a fake server in tests).
//!
//! Every status write is a [`StatusPatch`] built from the request the round decided on, so it
//! carries that request's resourceVersion as precondition: a request changed
//! meanwhile (completed by the operator: deadline, pod gone) fails the write with a conflict
//! and the next round decides again. Kills of one request run one after another in the
//! listed order, each stop finished before the next begins; the kills a round makes in a row
//! (an unordered request's containers) are recorded in one write, and nothing is written before
//! a kill: with the completion, two writes per request (`round::kill`).
//!
//! A round that kills reads the live pod once ([`LivePod`]) and takes from it, never from the
//! request, the preStop handler, the ports, the address and the grace period; the runtime's
//! container must carry the request's pod and container in its CRI labels. No kill starts past
//! the request's deadline, but a kill under way finishes, as upstream's and the kubelet's do:
//! the preStop hook gets the container's whole grace period (never beyond the daemon's cap),
//! the request's deadline does not shorten it, and a request completed meanwhile (deadline, pod
//! gone) still gets the stop and its container's state. The hook ends early only when the
//! request is deleted (or being deleted), or when the worker takes the slot back
//! ([`Preemption`]) from a request still running.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};

use crr_crds::keys::{CONDITION_SUCCEEDED, LABEL_POD_UID, REASON_POD_GONE};
use crr_crds::status::{
    self, Completion, NoResourceVersion, Outcome as RequestOutcome, StatusPatch,
};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerRecreateState as State,
    ContainerRecreateRequestSyncContainerStatus, Phase,
};
use kube::runtime::events::EventType;
use kube::{Resource as _, ResourceExt as _};

use crate::cri::{CriError, Runtime};
use crate::metrics::Metrics;
use crate::recreate::{self, NOT_RESTARTED_AFTER, Next};
use crate::timeline::PhaseName;
use in_flight::Live;

/// How long a round waits before looking again at a request whose pod is gone or replaced (the
/// operator completes such a request) or whose deadline passed (the operator completes it).
pub const LEFT_TO_THE_OPERATOR: Duration = Duration::from_secs(5);

/// How long a round waits for an API server that is away (restarting) after a preStop hook ran.
const API_AWAY_BOUND: Duration = Duration::from_secs(30);
/// Between two reads while it is away.
const API_RETRY: Duration = Duration::from_millis(500);

/// How many times the states after a kill are written against a request changing meanwhile.
const STATE_WRITE_ATTEMPTS: usize = 5;

/// A write the API server refused or could not take.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The request changed since the round read it: decide again on the new version.
    #[error("the request changed meanwhile (resourceVersion conflict)")]
    Conflict,
    /// The request is gone.
    #[error("the request no longer exists")]
    Gone,
    /// The API server refused the call for good (403 Forbidden, by RBAC or an admission
    /// policy; 422 Invalid): trying again changes nothing.
    #[error("refused by the API server: {0}")]
    Refused(String),
    #[error("API server: {0}")]
    Api(String),
    /// The request has no resourceVersion to precondition the write on.
    #[error(transparent)]
    Unversioned(#[from] NoResourceVersion),
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
    /// Sends `patch` (a merge patch of the status subresource, preconditioned on the
    /// resourceVersion of the request it was built from); returns the updated request.
    fn write_status(
        &self,
        patch: &StatusPatch,
    ) -> impl Future<Output = Result<ContainerRecreateRequest, WriteError>> + Send;

    /// The request as the API server has it now (`None`: deleted).
    fn fresh(
        &self,
        crr: &ContainerRecreateRequest,
    ) -> impl Future<Output = Result<Option<ContainerRecreateRequest>, WriteError>> + Send;

    /// The live pod (`None`: it does not exist), from the node's pod watch when it shows it.
    fn pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Pod>, WriteError>> + Send;

    /// The pod as the API server has it now, read past the node's pod watch (`None`: it does
    /// not exist); kept as slim as the watch keeps it.
    fn read_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Pod>, WriteError>> + Send;

    /// The request as this node's watch shows it now, the daemon's own later writes included;
    /// `None` when the watch does not show it (completed, deleted, or not seen yet). No API call.
    fn watched_copy(&self, crr: &ContainerRecreateRequest) -> Option<ContainerRecreateRequest>;

    /// Completes once the request is finished, being deleted, deleted, or no longer this node's
    /// active request, as the watch shows it. A round's preStop hook then reads the request
    /// afresh: deleted, the hook is cancelled; only completed, it runs on.
    fn finished(&self, crr: &ContainerRecreateRequest) -> impl Future<Output = ()> + Send;

    /// Records an Event about the request (best effort).
    fn event(
        &self,
        crr: &ContainerRecreateRequest,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> impl Future<Output = ()> + Send;

    /// Records an Event about the pod (`regarding`: the live pod's reference), where the
    /// kubelet and upstream put `Killing` and `FailedPreStopHook` (best effort).
    fn pod_event(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> impl Future<Output = ()> + Send;
}

/// Whether the daemon must leave the request alone: it is finished
/// ([`crr_crds::status::is_finished`]) or being deleted.
pub fn must_leave_alone(crr: &ContainerRecreateRequest) -> bool {
    status::is_finished(crr) || crr.metadata.deletion_timestamp.is_some()
}

/// Whether a kill under way (its preStop hook, then the stop) goes on against `fresh`, the
/// request as it is now: yes while it runs, and once completed by the operator for its deadline;
/// no once it is being deleted, or completed because its pod is gone (the kubelet stops the
/// containers of a deleted pod itself).
pub fn kill_under_way_goes_on(fresh: &ContainerRecreateRequest) -> bool {
    fresh.metadata.deletion_timestamp.is_none()
        && fresh
            .condition(CONDITION_SUCCEEDED)
            .is_none_or(|condition| condition.reason != REASON_POD_GONE)
}

/// Whole milliseconds of `duration`, for logs.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The states that are Failed now and were not before: containers refused this round (their
/// runtime labels name another pod or container).
fn newly_failed<'a>(recorded: &[State], states: &'a [State]) -> Vec<&'a State> {
    states
        .iter()
        .filter(|state| state.phase == Phase::Failed)
        .filter(|state| {
            !recorded
                .iter()
                .any(|before| before.name == state.name && before.phase == Phase::Failed)
        })
        .collect()
}

/// The key of a request in the metrics' timeline (`timeline::Timeline`): its UID, as the
/// worker forgets it when the request leaves the watch.
pub fn timeline_key(crr: &ContainerRecreateRequest) -> String {
    crr.metadata
        .uid
        .clone()
        .unwrap_or_else(|| format!("{}/{}", crr.namespace().unwrap_or_default(), crr.name_any()))
}

/// An empty status patch of `crr`, preconditioned on its resourceVersion.
fn patch_of(crr: &ContainerRecreateRequest) -> Result<StatusPatch, WriteError> {
    Ok(StatusPatch::of(crr)?)
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
    /// The worker took the slot back during the preStop hook: the hook was abandoned, nothing
    /// was killed, and the pod's work waits for a slot again (its hook runs anew then).
    Preempted,
}

/// The worker's request that a round give its slot back (another namespace waits, see
/// `schedule::to_preempt`, or the daemon shuts down). Only a preStop hook yields to it: a kill
/// under way always finishes.
#[derive(Clone, Debug)]
pub struct Preemption(tokio::sync::watch::Receiver<bool>);

impl Preemption {
    /// A preemption and the switch that requests it.
    pub fn new() -> (tokio::sync::watch::Sender<bool>, Self) {
        let (switch, preemption) = tokio::sync::watch::channel(false);
        (switch, Self(preemption))
    }

    /// A preemption never requested.
    pub fn never() -> Self {
        Self(tokio::sync::watch::channel(false).1)
    }

    /// Completes once preemption is requested (never, if its switch is gone unused).
    #[cfg(test)]
    pub(crate) async fn requested_for_test(&self) {
        self.requested().await;
    }

    /// Completes once preemption is requested (never, if its switch is gone unused).
    async fn requested(&self) {
        let mut receiver = self.0.clone();
        if receiver.wait_for(|requested| *requested).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How a preStop hook ended.
enum HookEnd {
    Ran(Result<(), crate::hook_error::HookError>),
    RequestFinished,
    Preempted,
}

/// Everything a round uses.
pub struct Round<'a, R> {
    pub requests: &'a R,
    pub runtime: &'a Runtime,
    pub metrics: &'a Metrics,
    /// The daemon's cap on a recreate's grace period (preStop and stop), in seconds.
    pub max_grace_seconds: u64,
    pub preemption: Preemption,
    /// When this daemon first saw each unready grace (the grace is measured from there).
    pub grace_clock: &'a crate::grace_clock::GraceClock,
    /// Whether each request's pod may leave a killed container stopped, as its kill read it.
    pub restart_policies: &'a crate::live_pod::RestartPolicies,
    /// The pods read past the node's pod watch while it lagged (`watch_lag`).
    pub lagging_reads: &'a crate::watch_lag::LaggingPodReads,
    /// Whether the runtime's container events wake rounds (`runtime_events`).
    pub container_events: &'a crate::runtime_events::ContainerEvents,
}

impl<R: Requests> Round<'_, R> {
    /// One round for a request that is not finished.
    pub async fn run(&self, mut crr: ContainerRecreateRequest) -> Result<Outcome, RoundError> {
        let round_started = Instant::now();
        let key = timeline_key(&crr);
        // Writes are folded: the phase goes with the round's first status write, for a plain
        // request the record of its kill. Only a request with an unready grace writes it at once,
        // since the operator acquires the pod's readiness for a request the daemon has taken up
        // (and a kill that could outlast the operator's patience writes it first:
        // `recreate::phase_before_kill`).
        let mut phase_pending = crr.phase() != Some(Phase::Recreating);
        if phase_pending && self.metrics.timeline.pick_up(&key) {
            self.observe_pick_up(&crr);
        }
        if phase_pending && recreate::needs_grace(&crr) {
            crr = self
                .requests
                .write_status(&patch_of(&crr)?.phase(Phase::Recreating))
                .await?;
            phase_pending = false;
        }
        if recreate::needs_grace(&crr) {
            // The operator marks PreRecreateGrace; its write wakes the round.
            let Some(grace) = recreate::unready_grace(&crr) else {
                return Ok(Outcome::OnChange);
            };
            let now = std::time::Instant::now();
            let seen = self.grace_clock.first_seen(&grace.key, now);
            let left = recreate::grace_left(grace.length, seen, now);
            if !left.is_zero() {
                return Ok(Outcome::After(left));
            }
            if let Some(took) = self.metrics.timeline.grace_over(&key, seen, now) {
                self.metrics.observe_phase(PhaseName::UnreadyGrace, took);
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
        let containers = self.runtime.pod_containers(&pod_uid).await?;
        let lookup = |name: &str| {
            containers
                .iter()
                .find(|(found, _)| found == name)
                .map(|(_, container)| container.clone())
        };
        // The kubelet's word on a killed container's successor, from this node's pod watch: the
        // recreate completes once the pod shows the new container Ready, whether or not the
        // operator has copied that into the snapshot yet (a busy operator is not on the path),
        // and the completion writes the snapshot it was decided on.
        let Live {
            snapshot: live_snapshot,
            next_read,
        } = self.live_snapshot(&crr, &pod_uid, &containers).await?;
        if let Some(snapshot) = &live_snapshot {
            crr.status.get_or_insert_default().container_status_snapshot = snapshot.clone();
        }
        let mut states = recreate::container_states(&crr, &lookup, jiff::Timestamp::now());
        let recorded = crr
            .status
            .as_ref()
            .map(|status| status.container_recreate_states.clone())
            .unwrap_or_default();
        for refused in newly_failed(&recorded, &states) {
            tracing::warn!(container = %refused.name, message = ?refused.message, "container refused");
            self.requests
                .event(
                    &crr,
                    EventType::Warning,
                    "RecreateRefused",
                    refused.message.as_deref().unwrap_or_default(),
                )
                .await;
        }
        self.fail_containers_not_restarted(&crr, &mut states, &containers)
            .await?;
        let next = recreate::next_step(&crr, &states);
        tracing::debug!(?next, ?states, "next step");
        // A kill or a completion writes the states itself: one write, not two.
        let written_by_next = matches!(next, Next::Kill(_) | Next::Complete { .. });
        if (states != recorded || phase_pending) && !written_by_next {
            let mut patch = patch_of(&crr)?.container_recreate_states(states.clone());
            if phase_pending {
                patch = patch.phase(Phase::Recreating);
            }
            crr = self.requests.write_status(&patch).await?;
            phase_pending = false;
        }
        match next {
            Next::Wait => {
                let by_time = recreate::time_to_next_change(
                    &crr,
                    &states,
                    &containers,
                    jiff::Timestamp::now(),
                )
                .into_iter()
                .chain(next_read)
                .min();
                Ok(Outcome::After(self.in_flight_look(by_time)))
            }
            Next::Complete { succeeded, message } => {
                self.metrics.timeline.ready(&key, Instant::now());
                self.complete_with(&crr, states, succeeded, &message, live_snapshot)
                    .await?;
                Ok(Outcome::Completed)
            }
            Next::Kill(index) => {
                let Some(current) = lookup(&crr.spec.containers[index].name) else {
                    return Ok(Outcome::After(self.in_flight_look(None)));
                };
                self.kill_in_turn(
                    crr,
                    &mut states,
                    index,
                    current.id,
                    round_started,
                    phase_pending,
                )
                .await
            }
        }
    }

    /// Observes the request's creation to now, as its pick-up by this daemon. Creation time is
    /// the API server's clock in whole seconds: approximate, as a metric may be.
    fn observe_pick_up(&self, crr: &ContainerRecreateRequest) {
        if let Some(created) = crr.metadata.creation_timestamp.as_ref() {
            let took = jiff::Timestamp::now().duration_since(created.0);
            self.metrics.observe_phase(
                PhaseName::PickUp,
                Duration::try_from(took).unwrap_or_default(),
            );
        }
    }

    /// A container killed and found exited may never come back: under `restartPolicy:
    /// OnFailure` the kubelet does not start a container that exited 0, and under
    /// `restartPolicyRules` one that exited with a code no rule restarts on (see
    /// `crr_crds::restart_policy::after_exit`). Such a state becomes `Failed` with a message that says so,
    /// instead of waiting for a restart (or the deadline). The runtime says first how the
    /// container ended: the pod is read only for one that exited at least
    /// [`NOT_RESTARTED_AFTER`] ago (the kubelet restarts within a second or two) with a code its
    /// pod's restart policies may leave it stopped after, as read at the kill
    /// ([`RestartPolicies`](crate::live_pod::RestartPolicies); any code when this daemon did not
    /// read them), so an ordinary recreate costs no extra read.
    async fn fail_containers_not_restarted(
        &self,
        crr: &ContainerRecreateRequest,
        states: &mut [State],
        containers: &[(String, crate::recreate::RuntimeContainer)],
    ) -> Result<(), WriteError> {
        let candidates: Vec<(usize, String)> = states
            .iter()
            .enumerate()
            .filter(|(_, state)| state.phase == Phase::Recreating && state.is_killed)
            .filter_map(|(index, state)| {
                containers
                    .iter()
                    .find(|(name, container)| *name == state.name && !container.running)
                    .map(|(_, container)| (index, container.id.clone()))
            })
            .collect();
        let uid = crr.metadata.uid.as_deref().unwrap_or_default();
        let mut exited = Vec::new();
        for (index, container_id) in candidates {
            let ended = self
                .runtime
                .exit(&container_id)
                .await
                .unwrap_or_else(|error| {
                    tracing::debug!(%error, "reading an exited container's status");
                    None
                });
            let long_enough = |at: jiff::Timestamp| {
                jiff::Timestamp::now()
                    .duration_since(at)
                    .unsigned_abs()
                    .ge(&NOT_RESTARTED_AFTER)
            };
            let may_stay_stopped = |code: i32| {
                self.restart_policies
                    .may_stay_stopped(uid, &states[index].name, code)
                    != Some(false)
            };
            if ended.is_some_and(|(code, at)| long_enough(at) && may_stay_stopped(code)) {
                exited.push((index, container_id));
            }
        }
        if exited.is_empty() {
            return Ok(());
        }
        let namespace = crr.namespace().unwrap_or_default();
        let Some(pod) = self.requests.pod(&namespace, &crr.spec.pod_name).await? else {
            return Ok(());
        };
        self.restart_policies.record(uid, &pod);
        for (index, container_id) in exited {
            let name = states[index].name.clone();
            if let Some(message) = crr_crds::rules::not_restarted(&pod, &name, &container_id) {
                tracing::warn!(container = %name, %message, "container not restarted");
                self.requests
                    .event(crr, EventType::Warning, "NotRestarted", &message)
                    .await;
                states[index].phase = Phase::Failed;
                states[index].message = Some(message);
            }
        }
        Ok(())
    }

    /// Records the states after the round's kills, with the phase `Recreating` when
    /// `phase_pending` (never on a request finished meanwhile: the phase does not move back).
    /// The kills happened whatever the request became meanwhile: a write that conflicts (the
    /// operator completed the request, or removed its label) is made again on the request as it
    /// is now, unless it was deleted. The daemon is the only writer of the states, so its own
    /// vector is the truth to write.
    async fn write_states_after_the_kill(
        &self,
        mut crr: ContainerRecreateRequest,
        states: &[State],
        phase_pending: bool,
    ) -> Result<(), WriteError> {
        for _ in 0..STATE_WRITE_ATTEMPTS {
            let mut patch = patch_of(&crr)?.container_recreate_states(states.to_vec());
            if phase_pending && !status::is_finished(&crr) && crr.phase() != Some(Phase::Recreating)
            {
                patch = patch.phase(Phase::Recreating);
            }
            match self.requests.write_status(&patch).await {
                Err(WriteError::Conflict) => match self.requests.fresh(&crr).await? {
                    Some(fresh) => crr = fresh,
                    None => return Ok(()),
                },
                Err(WriteError::Gone) => return Ok(()),
                other => return other.map(drop),
            }
        }
        Err(WriteError::Conflict)
    }

    /// The request as it is now, read again on API errors for up to [`API_AWAY_BOUND`].
    async fn fresh_after_the_hook(
        &self,
        crr: &ContainerRecreateRequest,
    ) -> Result<Option<ContainerRecreateRequest>, WriteError> {
        let started = Instant::now();
        loop {
            match self.requests.fresh(crr).await {
                Err(WriteError::Api(error)) if started.elapsed() < API_AWAY_BOUND => {
                    tracing::warn!(%error, "reading the request after its preStop hook; trying again");
                    tokio::time::sleep(API_RETRY).await;
                }
                other => return other,
            }
        }
    }

    /// Fails `crr` because the API server refused one of the round's calls for good, with the
    /// reason in its status message (best effort: the refusal may be of that very write, and
    /// then the log and an Event are all there is).
    pub async fn fail_refused(&self, crr: &ContainerRecreateRequest, reason: &str) {
        let message = format!("the API server refused the node daemon: {reason}");
        self.requests
            .event(crr, EventType::Warning, "Refused", &message)
            .await;
        let fresh = match self.requests.fresh(crr).await {
            Ok(Some(fresh)) if !must_leave_alone(&fresh) => fresh,
            Ok(_) => return,
            Err(error) => {
                tracing::warn!(%error, "reading the request to fail it");
                return;
            }
        };
        if let Err(error) = self.complete(&fresh, vec![], false, &message).await {
            tracing::warn!(%error, "failing the refused request");
        }
    }

    async fn complete(
        &self,
        crr: &ContainerRecreateRequest,
        states: Vec<State>,
        succeeded: bool,
        message: &str,
    ) -> Result<(), WriteError> {
        self.complete_with(crr, states, succeeded, message, None)
            .await
    }

    /// Completes the request (see [`complete`](Self::complete)), with the container snapshot
    /// the completion was decided on when the recorded one differs.
    async fn complete_with(
        &self,
        crr: &ContainerRecreateRequest,
        states: Vec<State>,
        succeeded: bool,
        message: &str,
        snapshot: Option<Vec<ContainerRecreateRequestSyncContainerStatus>>,
    ) -> Result<(), WriteError> {
        let reason = if succeeded {
            "Recreated"
        } else {
            "RecreateFailed"
        };
        // The containers the daemon killed and saw come back: the restarts that were crr's.
        let states_counted: Vec<State> = states
            .iter()
            .filter(|state| state.phase == Phase::Succeeded && state.is_killed)
            .cloned()
            .collect();
        let completion = Completion {
            outcome: if succeeded {
                RequestOutcome::Succeeded
            } else {
                RequestOutcome::Failed
            },
            reason: reason.to_owned(),
            message: message.to_owned(),
            condition_message: None,
            // No states (no pod-uid label, foreign runtime): leave them as they are.
            container_recreate_states: (!states.is_empty()).then_some(states),
            time: jiff::Timestamp::now(),
        };
        let mut patch = StatusPatch::completion(crr, &completion)?;
        if let Some(snapshot) = snapshot {
            patch = patch.container_status_snapshot(snapshot);
        }
        self.requests.write_status(&patch).await?;
        if let Some(pod_uid) = crr.labels().get(LABEL_POD_UID) {
            let namespace = crr.namespace().unwrap_or_default();
            for state in &states_counted {
                self.metrics.recreates.recreated(
                    pod_uid,
                    &namespace,
                    &crr.spec.pod_name,
                    &state.name,
                );
            }
        }
        let phases = self
            .metrics
            .timeline
            .completed(&timeline_key(crr), succeeded, Instant::now());
        for (phase, took) in phases {
            self.metrics.observe_phase(phase, took);
        }
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

/// A reference to container `name` of `pod`, with the field path the kubelet's container Events
/// carry: `spec.containers{name}`, or `spec.initContainers{name}` for a native sidecar.
fn container_reference(pod: &Pod, name: &str) -> ObjectReference {
    let mut reference = pod.object_ref(&());
    let is_init = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.init_containers.as_ref())
        .is_some_and(|init| init.iter().any(|container| container.name == name));
    let field = if is_init {
        "initContainers"
    } else {
        "containers"
    };
    reference.field_path = Some(format!("spec.{field}{{{name}}}"));
    reference
}

mod in_flight;
mod kill;
mod lagging_watch;

#[cfg(test)]
mod tests;
