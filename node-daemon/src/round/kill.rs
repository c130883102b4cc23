//! The kills of one round, in named phases: [`Round::prepare_kill`] reads the live pod and
//! checks that the kill may start (the pod is still the request's, the deadline has not passed,
//! the kubelet would start the container again: else it is `Failed` and never stopped);
//! [`Round::run_pre_stop_hook`] runs the live pod's preStop hook, watching for the request's
//! deletion and for preemption; [`Round::still_to_kill`] decides, from the watch (or a fresh
//! read when the watch no longer shows the request), whether the stop goes on;
//! [`Round::stop_container`] says `Killing` on the pod, as the kubelet does, and asks the runtime;
//! `recreate::state_after_stop` decides the container's state; [`Round::report_kill`] tells the
//! metrics and the log; `write_states_after_the_kill` records the outcomes.
//!
//! Nothing is written before a kill: a daemon restarted after one finds the container the request's
//! `statusContext` names exited or replaced (`recreate::container_states`), as upstream's does. One
//! write records the outcomes of the kills a round makes one after another (an unordered request's
//! containers), with the phase when it is still to be written.

use std::time::{Duration, Instant};

use crr_crds::keys::LABEL_POD_UID;
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerRecreateState as State, Phase,
    ProbeHandler,
};
use k8s_openapi::api::core::v1::{ContainerPort, ObjectReference};
use kube::ResourceExt as _;
use kube::runtime::events::EventType;

use super::{
    HookEnd, LEFT_TO_THE_OPERATOR, Outcome, Requests, Round, RoundError, container_reference,
    kill_under_way_goes_on, millis, must_leave_alone, patch_of, timeline_key,
};
use crate::cri::CriError;
use crate::live_pod::LivePod;
use crate::recreate::{self, Next, StopResult};

/// A kill, once prepared: what the later phases work with.
struct Kill {
    /// The request the kill was decided on.
    crr: ContainerRecreateRequest,
    /// The container's name.
    container: String,
    /// The runtime's container to stop.
    container_id: String,
    /// The live pod's preStop handler for the container, and the ports it resolves against.
    pre_stop: Option<ProbeHandler>,
    ports: Vec<ContainerPort>,
    /// Where hooks without a host go: the pod's IP.
    address: Option<String>,
    /// The grace period of preStop and stop together, in seconds.
    grace: u64,
    /// The container in the pod, where `Killing` and `FailedPreStopHook` Events go.
    pod_reference: ObjectReference,
}

/// What preparing a kill found: the kill to make, or why the container may not be stopped.
enum Prepared {
    Kill(Box<Kill>),
    Refused(String),
}

/// Whether a phase lets the kill go on, or ends the round with an outcome.
enum Then<T> {
    Go(T),
    Stop(Outcome),
}

impl<R: Requests> Round<'_, R> {
    /// Kills the container at `index` (preStop, then StopContainer with the grace period left),
    /// then, one stop finished before the next begins, each container `next_step` names next at
    /// once (an unordered request's); then records all their outcomes in one write, with the
    /// phase when `phase_pending`. A kill that does not happen (the pod gone, the deadline
    /// passed, the request deleted, the slot taken back) ends the round with the kills before it
    /// recorded.
    pub(super) async fn kill_in_turn(
        &self,
        mut crr: ContainerRecreateRequest,
        states: &mut [State],
        mut index: usize,
        mut container_id: String,
        round_started: Instant,
        mut phase_pending: bool,
    ) -> Result<Outcome, RoundError> {
        let mut killed = false;
        let outcome = loop {
            let step = self
                .kill_one(
                    &crr,
                    states,
                    index,
                    container_id,
                    round_started,
                    &mut phase_pending,
                )
                .await;
            match step {
                Ok(Then::Go(after)) => {
                    crr = after;
                    killed = true;
                }
                Ok(Then::Stop(outcome)) => break Ok(outcome),
                Err(error) => break Err(error),
            }
            let Next::Kill(next) = recreate::next_step(&crr, states) else {
                break Ok(Outcome::After(self.in_flight_look(None)));
            };
            // A finished request gets no new kill, only the record of the one under way.
            if next == index || must_leave_alone(&crr) {
                break Ok(Outcome::After(self.in_flight_look(None)));
            }
            // The runtime again: the next container may have been restarted meanwhile.
            match self.current_container(&crr, next).await {
                Ok(Some(id)) => (index, container_id) = (next, id),
                Ok(None) => break Ok(Outcome::After(self.in_flight_look(None))),
                Err(error) => break Err(error),
            }
        };
        if killed {
            let written = self
                .write_states_after_the_kill(crr, states, phase_pending)
                .await;
            if let (Err(error), Ok(_)) = (&written, &outcome) {
                tracing::warn!(%error, "recording the kills");
            }
            written?;
        }
        outcome
    }

    /// The runtime's current container for the spec container at `index`.
    async fn current_container(
        &self,
        crr: &ContainerRecreateRequest,
        index: usize,
    ) -> Result<Option<String>, RoundError> {
        let pod_uid = crr.labels().get(LABEL_POD_UID).cloned().unwrap_or_default();
        let name = &crr.spec.containers[index].name;
        Ok(self
            .runtime
            .pod_containers(&pod_uid)
            .await?
            .into_iter()
            .find(|(found, _)| found == name)
            .map(|(_, container)| container.id))
    }

    /// One kill: preStop, then StopContainer with the grace period left. Its outcome goes into
    /// `states[index]`; the request to record it on comes back.
    async fn kill_one(
        &self,
        crr: &ContainerRecreateRequest,
        states: &mut [State],
        index: usize,
        container_id: String,
        round_started: Instant,
        phase_pending: &mut bool,
    ) -> Result<Then<ContainerRecreateRequest>, RoundError> {
        let kill = match self
            .prepare_kill(crr, index, container_id, phase_pending)
            .await?
        {
            Then::Go(Prepared::Kill(kill)) => *kill,
            Then::Go(Prepared::Refused(message)) => {
                tracing::warn!(container = %states[index].name, %message, "container refused");
                self.requests
                    .event(crr, EventType::Warning, "RecreateRefused", &message)
                    .await;
                states[index] = State {
                    name: states[index].name.clone(),
                    phase: Phase::Failed,
                    message: Some(message),
                    is_killed: false,
                };
                return Ok(Then::Go(crr.clone()));
            }
            Then::Stop(outcome) => return Ok(Then::Stop(outcome)),
        };
        let hook_started = Instant::now();
        if let Then::Stop(outcome) = self.run_pre_stop_hook(&kill).await? {
            return Ok(Then::Stop(outcome));
        }
        let pre_stop_took = hook_started.elapsed();
        let crr = match self.still_to_kill(&kill).await? {
            Then::Go(crr) => crr,
            Then::Stop(outcome) => return Ok(Then::Stop(outcome)),
        };
        let grace = recreate::kill_grace(kill.grace, hook_started.elapsed());
        let stop_started = Instant::now();
        let stop = self.stop_container(&kill, grace).await?;
        let stop_took = stop_started.elapsed();
        states[index] = recreate::state_after_stop(&kill.container, &stop);
        let timings = KillTimings {
            before_stop: stop_started.saturating_duration_since(round_started),
            pre_stop: pre_stop_took,
            stop: stop_took,
        };
        self.report_kill(&crr, &kill, &stop, grace, timings).await;
        Ok(Then::Go(crr))
    }

    /// Reads the live pod and checks that it is still the request's and the deadline has not
    /// passed. Nothing is written, unless the kill could outlast the operator's patience with a
    /// request whose phase the daemon has not written (`recreate::phase_before_kill`): then the
    /// phase goes first.
    async fn prepare_kill(
        &self,
        crr: &ContainerRecreateRequest,
        index: usize,
        container_id: String,
        phase_pending: &mut bool,
    ) -> Result<Then<Prepared>, RoundError> {
        // Nothing is written before a kill, so no precondition guards it: a copy of a request
        // the watch has since seen finished or being deleted starts no kill.
        if self
            .requests
            .watched_copy(crr)
            .is_some_and(|watched| must_leave_alone(&watched))
        {
            tracing::info!("the request finished meanwhile; no kill");
            return Ok(Then::Stop(Outcome::OnChange));
        }
        let container = crr.spec.containers[index].name.clone();
        let namespace = crr.namespace().unwrap_or_default();
        let Some(pod) = self.requests.pod(&namespace, &crr.spec.pod_name).await? else {
            tracing::info!("the pod is gone; the operator completes the request");
            return Ok(Then::Stop(Outcome::After(LEFT_TO_THE_OPERATOR)));
        };
        // Killing and FailedPreStopHook also go on the pod, where the kubelet puts them.
        // On the container, as the kubelet sets it (`spec.containers{app}`): Events of two
        // containers are two Events, not one series under the first one's note.
        let pod_reference = container_reference(&pod, &container);
        self.restart_policies
            .record(crr.metadata.uid.as_deref().unwrap_or_default(), &pod);
        // Admission refuses a container the kubelet would not start again (or one the pod does
        // not have); the live pod decides again here, so a request that did not go through
        // admission as it is now (or a pod changed since) never gets one stopped.
        let refusal = crr_crds::rules::recreatable_container(&pod, &container)
            .err()
            .map(|violation| format!("refusing to recreate container {container}: {violation}"));
        let pod = LivePod::of(&pod);
        if pod.uid.is_none()
            || pod.uid.as_deref() != crr.labels().get(LABEL_POD_UID).map(String::as_str)
        {
            tracing::info!(uid = ?pod.uid, "the pod was replaced; the operator completes the request");
            return Ok(Then::Stop(Outcome::After(LEFT_TO_THE_OPERATOR)));
        }
        let now = jiff::Timestamp::now();
        let deadline_left = recreate::time_left(recreate::deadline(crr), now);
        if deadline_left.is_some_and(|left| left.is_zero()) {
            if self.metrics.timeline.past_deadline(&timeline_key(crr)) {
                tracing::info!("past the request's deadline: no kill; the operator completes it");
            }
            return Ok(Then::Stop(Outcome::After(LEFT_TO_THE_OPERATOR)));
        }
        if let Some(refusal) = refusal {
            return Ok(Then::Go(Prepared::Refused(refusal)));
        }
        let live = pod.container(&container).cloned().unwrap_or_default();
        let grace = recreate::grace_period_seconds(
            pod.grace_period_seconds,
            crr.strategy().termination_grace_period_seconds,
            self.max_grace_seconds,
        );
        let mut crr = crr.clone();
        let created = crr.metadata.creation_timestamp.as_ref().map(|time| time.0);
        if *phase_pending && recreate::phase_before_kill(created, now, grace) {
            crr = self
                .requests
                .write_status(&patch_of(&crr)?.phase(Phase::Recreating))
                .await?;
            *phase_pending = false;
        }
        Ok(Then::Go(Prepared::Kill(Box::new(Kill {
            crr,
            container,
            container_id,
            pre_stop: live.pre_stop,
            ports: live.ports,
            address: pod.address,
            grace,
            pod_reference,
        }))))
    }

    /// Runs the container's preStop hook, if it has one and the grace leaves time for it. Stops
    /// the round when the request is deleted (or its pod gone) meanwhile, or when the worker
    /// takes the slot back; a request completed meanwhile (deadline) gets its hook finished. A
    /// failed hook is reported and the kill goes on.
    async fn run_pre_stop_hook(&self, kill: &Kill) -> Result<Then<()>, RoundError> {
        let (Some(handler), Some(budget)) = (&kill.pre_stop, recreate::pre_stop_budget(kill.grace))
        else {
            return Ok(Then::Go(()));
        };
        let started = Instant::now();
        let hook = crate::pre_stop::run(
            self.runtime,
            &kill.container_id,
            handler,
            &kill.ports,
            kill.address.as_deref(),
            budget,
        );
        // Dropping the hook's future cancels it: an exec's ExecSync call is abandoned (and its
        // own timeout, the budget, ends the command in the runtime).
        let mut hook = std::pin::pin!(hook);
        // Once the request is seen completed, the hook and its kill are the last work on it,
        // which no later round would redo: they are not preempted, and the request is not
        // watched again (nor when the watch and a fresh read disagree: the read after the hook
        // decides the kill).
        let mut watching = true;
        let mut preemptible = true;
        let outcome = loop {
            let end = tokio::select! {
                outcome = &mut hook => HookEnd::Ran(outcome),
                () = self.requests.finished(&kill.crr), if watching => HookEnd::RequestFinished,
                () = self.preemption.requested(), if preemptible => HookEnd::Preempted,
            };
            match end {
                HookEnd::Ran(outcome) => break outcome,
                HookEnd::RequestFinished => match self.fresh_after_the_hook(&kill.crr).await? {
                    Some(fresh) if kill_under_way_goes_on(&fresh) => {
                        watching = false;
                        if must_leave_alone(&fresh) {
                            tracing::info!(container = %kill.container, "request completed during its preStop hook; the hook and the kill under way finish");
                            preemptible = false;
                        }
                    }
                    _ => {
                        tracing::info!(container = %kill.container, "request deleted, or its pod gone, during its preStop hook; hook cancelled, container left running");
                        return Ok(Then::Stop(Outcome::OnChange));
                    }
                },
                HookEnd::Preempted => {
                    tracing::info!(container = %kill.container, "preStop hook preempted: the slot goes to another namespace; it runs again later");
                    return Ok(Then::Stop(Outcome::Preempted));
                }
            }
        };
        let took = started.elapsed();
        self.metrics.observe_pre_stop(outcome.is_ok(), took);
        self.metrics
            .timeline
            .pre_stop(&timeline_key(&kill.crr), took);
        if let Err(error) = outcome {
            let note = format!(
                "preStop hook of container {} failed: {error}",
                kill.container
            );
            tracing::warn!(container = %kill.container, %error, "preStop failed; killing anyway");
            self.requests
                .event(&kill.crr, EventType::Warning, "FailedPreStopHook", &note)
                .await;
            self.requests
                .pod_event(
                    &kill.pod_reference,
                    EventType::Warning,
                    "FailedPreStopHook",
                    &format!(
                        "preStop hook of container {} failed (ContainerRecreateRequest {}): {error}",
                        kill.container,
                        kill.crr.name_any()
                    ),
                )
                .await;
        }
        Ok(Then::Go(()))
    }

    /// The request as it is after the hook, when the stop goes on. Deleted while the hook ran (or
    /// its pod gone): no kill. Completed (its deadline passed, say): the kill under way finishes.
    /// The watch decides while it shows the request active and unfinished, with no read; a
    /// request it no longer shows (completed, deleted, or not yet seen) is read afresh. The hook
    /// has run: an API server away for a moment (restarting) must not send the round back to the
    /// start, where the hook would run a second time, so it is read again for a while.
    async fn still_to_kill(
        &self,
        kill: &Kill,
    ) -> Result<Then<ContainerRecreateRequest>, RoundError> {
        if let Some(watched) = self
            .requests
            .watched_copy(&kill.crr)
            .filter(|watched| !must_leave_alone(watched))
        {
            return Ok(Then::Go(watched));
        }
        match self.fresh_after_the_hook(&kill.crr).await? {
            Some(fresh) if kill_under_way_goes_on(&fresh) => Ok(Then::Go(fresh)),
            _ => {
                tracing::info!(container = %kill.container, "request deleted, or its pod gone, before the kill; container left running");
                Ok(Then::Stop(Outcome::OnChange))
            }
        }
    }

    /// `Killing` on the pod's container, as the kubelet says it before a stop, then
    /// StopContainer with `grace` seconds. The runtime away (restarting, say) is not a failure of
    /// this container: the round is retried, and the next round kills again if the container
    /// still runs (its preStop hook may run again).
    async fn stop_container(&self, kill: &Kill, grace: i64) -> Result<StopResult, RoundError> {
        self.requests
            .pod_event(
                &kill.pod_reference,
                EventType::Normal,
                "Killing",
                &format!(
                    "Stopping container {} for ContainerRecreateRequest {} (grace period {grace}s)",
                    kill.container,
                    kill.crr.name_any()
                ),
            )
            .await;
        match self.runtime.stop(&kill.container_id, grace).await {
            Ok(()) => Ok(StopResult::Stopped),
            Err(error @ CriError::NotFound(_)) => Ok(StopResult::AlreadyRemoved(error.to_string())),
            Err(error) if error.is_transient() => {
                tracing::warn!(container = %kill.container, %error, "runtime unavailable for the kill; retrying");
                Err(RoundError::Runtime(error))
            }
            Err(error) => Ok(StopResult::Failed(error.to_string())),
        }
    }

    /// Metrics, the log line of where the round's time went, and a `FailedKilling` Event on the
    /// request when the stop failed.
    async fn report_kill(
        &self,
        crr: &ContainerRecreateRequest,
        kill: &Kill,
        stop: &StopResult,
        grace: i64,
        timings: KillTimings,
    ) {
        let ok = !matches!(stop, StopResult::Failed(_));
        self.metrics.observe_kill(ok);
        self.metrics
            .timeline
            .killed(&timeline_key(crr), timings.stop, Instant::now());
        // Where a round's time goes, for whoever wonders why a recreate took long: the API
        // writes and reads before the kill, the preStop hook, the runtime's StopContainer.
        tracing::info!(
            container = %kill.container,
            id = %kill.container_id,
            grace,
            ok,
            before_stop_ms = millis(timings.before_stop),
            pre_stop_ms = millis(timings.pre_stop),
            stop_ms = millis(timings.stop),
            "stopped container"
        );
        // The outcome of a failed stop is told on the request; a stop that worked was said on the
        // pod (`Killing`), and the request's own result Event comes at its completion.
        if let StopResult::Failed(error) = stop {
            self.requests
                .event(
                    crr,
                    EventType::Warning,
                    "FailedKilling",
                    &format!(
                        "container {} not stopped (grace period {grace}s): {error}",
                        kill.container
                    ),
                )
                .await;
        }
    }
}

/// Where a kill's time went.
struct KillTimings {
    /// From the round's start to the stop: API reads and writes, and the hook.
    before_stop: Duration,
    pre_stop: Duration,
    stop: Duration,
}
