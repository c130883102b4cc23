//! A rollout's status and Events from its plan: pure functions of the previous status, the plan
//! and the time.

use crr_crds::keys;
use crr_crds::rollout::{ContainerRecreateRolloutStatus, RolloutPhase};
use crr_crds::status::set_condition;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::plan::{Plan, Waiting};

/// The status that describes `plan`: counts, phase, conditions and failures. The start time is
/// kept from `previous` (or is `now` on the first write), the completion time is set once the
/// rollout ends, and a condition's transition time moves only when its status changes.
pub fn next_status(
    previous: Option<&ContainerRecreateRolloutStatus>,
    plan: &Plan,
    generation: Option<i64>,
    target_name: String,
    now: Timestamp,
) -> ContainerRecreateRolloutStatus {
    let previous = previous.cloned().unwrap_or_default();
    let counts = plan.counts;
    let count = |value: usize| i32::try_from(value).unwrap_or(i32::MAX);
    let finished = plan.phase.is_finished();
    let mut conditions = previous.conditions.clone();
    let condition = |type_: &str, status: bool, reason: &str, message: String| Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: Time(now),
        observed_generation: generation,
    };
    let (reason, message) = progressing_reason(plan);
    // kstatus (Flux): Reconciling while pods are being started or waited for; Stalled once
    // Failed. A paused or finished rollout reconciles nothing.
    let reconciling = !finished && !matches!(plan.waiting, Waiting::Paused);
    set_condition(
        &mut conditions,
        condition(
            keys::CONDITION_ROLLOUT_RECONCILING,
            reconciling,
            reason,
            message.clone(),
        ),
    );
    set_condition(
        &mut conditions,
        condition(
            keys::CONDITION_ROLLOUT_PROGRESSING,
            !finished,
            reason,
            message,
        ),
    );
    if plan.phase == RolloutPhase::Completed {
        set_condition(
            &mut conditions,
            condition(
                keys::CONDITION_ROLLOUT_COMPLETE,
                true,
                "Completed",
                format!(
                    "{} of {} pods recreated, {} failed",
                    counts.recreated, counts.target_pods, counts.failed
                ),
            ),
        );
    }
    if plan.phase == RolloutPhase::Aborted {
        set_condition(
            &mut conditions,
            condition(
                keys::CONDITION_ROLLOUT_STALLED,
                true,
                REASON_ABORTED,
                aborted_message(counts),
            ),
        );
    }
    if let Some(reason) = plan.failed_reason {
        let message = match reason {
            super::plan::REASON_TARGET_GONE => "the target workload is gone".to_owned(),
            super::plan::REASON_PROGRESS_DEADLINE => format!(
                "no pod started or finished within the progress deadline; {} of {} pods recreated",
                counts.recreated, counts.target_pods
            ),
            _ => format!(
                "{} pods failed, more than maxFailedPods allows; first: {}",
                counts.failed,
                plan.failures
                    .first()
                    .map(|failure| format!("{}: {}", failure.pod, failure.message))
                    .unwrap_or_default()
            ),
        };
        set_condition(
            &mut conditions,
            condition(
                keys::CONDITION_ROLLOUT_STALLED,
                true,
                reason,
                message.clone(),
            ),
        );
        set_condition(
            &mut conditions,
            condition(keys::CONDITION_ROLLOUT_FAILED, true, reason, message),
        );
    }
    // Progress: a pod started or finished, or the rollout (re)starts running now.
    let runs_on = runs(&previous);
    let moved = (previous.recreated, previous.failed, previous.in_flight)
        != (
            count(counts.recreated),
            count(counts.failed),
            count(counts.in_flight),
        );
    let last_progress_time = match previous.last_progress_time {
        Some(last) if runs_on && !moved => Some(last),
        _ if plan.phase == RolloutPhase::Progressing => Some(Time(now)),
        last => last,
    };
    ContainerRecreateRolloutStatus {
        observed_generation: generation,
        last_progress_time,
        phase: Some(plan.phase.as_str().to_owned()),
        // A rollout paused before it started has not started: it holds no slot under the cap.
        start_time: previous
            .start_time
            .or_else(|| (plan.phase != RolloutPhase::Paused).then_some(Time(now))),
        completion_time: if finished {
            previous.completion_time.or(Some(Time(now)))
        } else {
            None
        },
        target_name: Some(target_name),
        target_pods: count(counts.target_pods),
        recreated: count(counts.recreated),
        failed: count(counts.failed),
        in_flight: count(counts.in_flight),
        pending: count(counts.pending),
        skipped: count(counts.skipped),
        progress: Some(format!("{}/{}", counts.recreated, counts.target_pods)),
        conditions,
        failures: plan.failures.clone(),
    }
}

/// Whether `status` says the rollout runs: it started, its phase is `Progressing`, and it does
/// not wait under the cluster's cap (a resumed rollout waits again, its start time kept). Only a
/// running rollout holds a slot under the cap, and only one has a progress deadline.
pub fn runs(status: &ContainerRecreateRolloutStatus) -> bool {
    let waits_under_cap = status.conditions.iter().any(|condition| {
        condition.type_ == keys::CONDITION_ROLLOUT_PROGRESSING
            && condition.reason == REASON_WAITING_FOR_CLUSTER_CAP
    });
    status.start_time.is_some()
        && status.phase.as_deref() == Some(RolloutPhase::Progressing.as_str())
        && !waits_under_cap
}

/// The reason of the Progressing and Stalled conditions of an aborted rollout.
pub const REASON_ABORTED: &str = "Aborted";

fn aborted_message(counts: super::plan::Counts) -> String {
    format!(
        "aborted: {} of {} pods recreated, {} failed, {} not started",
        counts.recreated, counts.target_pods, counts.failed, counts.pending
    )
}

/// The reason of the Progressing condition of a rollout that waits under the cluster's cap.
pub const REASON_WAITING_FOR_CLUSTER_CAP: &str = "WaitingForClusterCap";

/// The status of a rollout that has not started and waits under the cluster's cap
/// (`cluster_cap`): phase Progressing, no start time yet, the Progressing condition saying why.
/// Its message names only the cap, so it is written once, not on every change of the queue.
pub fn waiting_for_cluster_cap(
    previous: Option<&ContainerRecreateRolloutStatus>,
    generation: Option<i64>,
    target_name: String,
    cap: usize,
    now: Timestamp,
) -> ContainerRecreateRolloutStatus {
    let previous = previous.cloned().unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    let waiting = |type_: &str| Condition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        reason: REASON_WAITING_FOR_CLUSTER_CAP.to_owned(),
        message: format!(
            "waiting to start: at most {cap} rollouts run at once in this cluster (the operator's --max-running-rollouts)"
        ),
        last_transition_time: Time(now),
        observed_generation: generation,
    };
    set_condition(
        &mut conditions,
        waiting(keys::CONDITION_ROLLOUT_RECONCILING),
    );
    set_condition(
        &mut conditions,
        waiting(keys::CONDITION_ROLLOUT_PROGRESSING),
    );
    ContainerRecreateRolloutStatus {
        observed_generation: generation,
        phase: Some(RolloutPhase::Progressing.as_str().to_owned()),
        target_name: Some(target_name),
        conditions,
        ..previous
    }
}

/// The Progressing condition's reason and message.
fn progressing_reason(plan: &Plan) -> (&'static str, String) {
    match (&plan.phase, &plan.waiting) {
        (RolloutPhase::Completed, _) => ("Completed", "every target pod was handled".to_owned()),
        (RolloutPhase::Failed, _) => (
            plan.failed_reason.unwrap_or("Failed"),
            "the rollout ended".to_owned(),
        ),
        (RolloutPhase::Aborted, _) => (REASON_ABORTED, aborted_message(plan.counts)),
        (_, Waiting::Aborting) => (
            "Aborting",
            format!(
                "aborted: no new pod starts; waiting for {} requests under way to finish",
                plan.counts.in_flight
            ),
        ),
        (_, Waiting::Paused) => ("Paused", "paused: no new pod starts".to_owned()),
        (_, Waiting::ForBudget { budget, pod }) => (
            "WaitingForBudget",
            format!("pod {pod} waits: PodDisruptionBudget {budget} allows no more disruptions"),
        ),
        (_, Waiting::ForUnavailable { unavailable, limit }) => (
            "WaitingForUnavailable",
            format!("{unavailable} target pods are unavailable, maxUnavailable is {limit}"),
        ),
        (_, Waiting::FailureLimit) => (
            "FailureLimit",
            "more pods failed than maxFailedPods allows: waiting for requests in flight to end"
                .to_owned(),
        ),
        (_, Waiting::Nothing) => ("Started", "starting pods".to_owned()),
    }
}

/// An Event to publish on the rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutEvent {
    /// Warning, else Normal.
    pub warning: bool,
    /// The Event's reason.
    pub reason: &'static str,
    /// Its note.
    pub note: String,
}

/// The Events a change of status calls for: the start, each newly listed failure, pause and
/// resume, the end. Budget waits are published by the caller, at most once a minute per PDB.
pub fn events(
    previous: Option<&ContainerRecreateRolloutStatus>,
    next: &ContainerRecreateRolloutStatus,
) -> Vec<RolloutEvent> {
    let mut events = Vec::new();
    let phase = |status: Option<&ContainerRecreateRolloutStatus>| {
        status
            .and_then(|status| status.phase.as_deref())
            .and_then(RolloutPhase::parse)
    };
    let before = phase(previous);
    let after = phase(Some(next));
    if previous
        .and_then(|status| status.start_time.as_ref())
        .is_none()
    {
        events.push(RolloutEvent {
            warning: false,
            reason: "Started",
            note: format!(
                "restarting {} pods of {} in place",
                next.target_pods,
                next.target_name.as_deref().unwrap_or_default()
            ),
        });
    }
    for failure in &next.failures {
        let known = previous.is_some_and(|status| {
            status
                .failures
                .iter()
                .any(|listed| listed.pod == failure.pod)
        });
        if !known {
            events.push(RolloutEvent {
                warning: true,
                reason: "PodFailed",
                note: failure.to_string(),
            });
        }
    }
    if before != after {
        match after {
            Some(RolloutPhase::Paused) => events.push(RolloutEvent {
                warning: false,
                reason: "Paused",
                note: "paused: requests in flight finish, no new pod starts".to_owned(),
            }),
            Some(RolloutPhase::Progressing) if before == Some(RolloutPhase::Paused) => {
                events.push(RolloutEvent {
                    warning: false,
                    reason: "Resumed",
                    note: "resumed".to_owned(),
                });
            }
            Some(RolloutPhase::Completed) => events.push(RolloutEvent {
                warning: false,
                reason: "Completed",
                note: format!(
                    "{} of {} pods recreated, {} failed",
                    next.recreated, next.target_pods, next.failed
                ),
            }),
            Some(RolloutPhase::Aborted) => events.push(RolloutEvent {
                warning: true,
                reason: REASON_ABORTED,
                note: condition_message(next, keys::CONDITION_ROLLOUT_STALLED)
                    .unwrap_or_else(|| "aborted".to_owned()),
            }),
            Some(RolloutPhase::Failed) => events.push(RolloutEvent {
                warning: true,
                reason: "Failed",
                note: condition_message(next, keys::CONDITION_ROLLOUT_FAILED)
                    .unwrap_or_else(|| "the rollout failed".to_owned()),
            }),
            _ => {}
        }
    }
    events
}

/// The message of `status`'s condition of type `type_`, if it has one.
fn condition_message(status: &ContainerRecreateRolloutStatus, type_: &str) -> Option<String> {
    status
        .conditions
        .iter()
        .find(|condition| condition.type_ == type_)
        .map(|condition| condition.message.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::plan::{Counts, REASON_FAILURE_LIMIT};
    use crr_crds::rollout::RolloutFailure;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
    }

    fn plan(phase: RolloutPhase, waiting: Waiting, counts: Counts) -> Plan {
        Plan {
            start: Vec::new(),
            phase,
            waiting,
            failed_reason: None,
            counts,
            failures: Vec::new(),
            budget_writes: Vec::new(),
            cancel: Vec::new(),
        }
    }

    fn counts(target: usize, recreated: usize, in_flight: usize) -> Counts {
        Counts {
            target_pods: target,
            recreated,
            failed: 0,
            in_flight,
            pending: target - recreated - in_flight,
            skipped: 0,
        }
    }

    fn condition<'a>(status: &'a ContainerRecreateRolloutStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|condition| condition.type_ == type_)
            .expect("the condition")
    }

    #[test]
    fn kstatus_reads_reconciling_while_it_runs_and_stalled_once_it_failed() {
        let status_of = |phase, waiting, failed_reason| {
            let mut plan = plan(phase, waiting, counts(4, 1, 1));
            plan.failed_reason = failed_reason;
            next_status(None, &plan, Some(1), "Deployment/web".into(), at(0))
        };
        let truth = |status: &ContainerRecreateRolloutStatus, type_: &str| {
            status
                .conditions
                .iter()
                .find(|condition| condition.type_ == type_)
                .map(|condition| condition.status.clone())
        };
        let running = status_of(RolloutPhase::Progressing, Waiting::Nothing, None);
        assert_eq!(truth(&running, "Reconciling").as_deref(), Some("True"));
        assert_eq!(truth(&running, "Stalled"), None);
        let paused = status_of(RolloutPhase::Paused, Waiting::Paused, None);
        assert_eq!(truth(&paused, "Reconciling").as_deref(), Some("False"));
        assert_eq!(
            paused.start_time, None,
            "paused before it started: it has not started"
        );
        let done = status_of(RolloutPhase::Completed, Waiting::Nothing, None);
        assert_eq!(truth(&done, "Reconciling").as_deref(), Some("False"));
        assert_eq!(truth(&done, "Stalled"), None);
        let failed = status_of(
            RolloutPhase::Failed,
            Waiting::Nothing,
            Some(REASON_FAILURE_LIMIT),
        );
        assert_eq!(truth(&failed, "Reconciling").as_deref(), Some("False"));
        assert_eq!(truth(&failed, "Stalled").as_deref(), Some("True"));
        assert_eq!(condition(&failed, "Stalled").reason, REASON_FAILURE_LIMIT);
        let capped = waiting_for_cluster_cap(None, Some(1), "Deployment/web".into(), 10, at(0));
        assert_eq!(truth(&capped, "Reconciling").as_deref(), Some("True"));
    }

    #[test]
    fn a_first_status_starts_the_clock_and_says_what_it_waits_on() {
        let waiting = Waiting::ForBudget {
            budget: "web".into(),
            pod: "web-1".into(),
        };
        let status = next_status(
            None,
            &plan(RolloutPhase::Progressing, waiting, counts(8, 0, 1)),
            Some(1),
            "Deployment/web".into(),
            at(0),
        );
        assert_eq!(status.phase.as_deref(), Some("Progressing"));
        assert_eq!(status.start_time, Some(Time(at(0))));
        assert_eq!(status.completion_time, None);
        assert_eq!(status.progress.as_deref(), Some("0/8"));
        assert_eq!((status.in_flight, status.pending), (1, 7));
        let progressing = condition(&status, keys::CONDITION_ROLLOUT_PROGRESSING);
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("True", "WaitingForBudget")
        );
        assert!(
            progressing.message.contains("web"),
            "{}",
            progressing.message
        );
        let events = events(None, &status);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "Started");
    }

    #[test]
    fn completion_sets_the_time_once_and_the_complete_condition() {
        let first = next_status(
            None,
            &plan(RolloutPhase::Progressing, Waiting::Nothing, counts(2, 1, 1)),
            Some(1),
            "Deployment/web".into(),
            at(0),
        );
        let done = next_status(
            Some(&first),
            &plan(RolloutPhase::Completed, Waiting::Nothing, counts(2, 2, 0)),
            Some(1),
            "Deployment/web".into(),
            at(30),
        );
        assert_eq!(done.start_time, Some(Time(at(0))));
        assert_eq!(done.completion_time, Some(Time(at(30))));
        assert_eq!(done.progress.as_deref(), Some("2/2"));
        assert_eq!(
            condition(&done, keys::CONDITION_ROLLOUT_COMPLETE).status,
            "True"
        );
        assert_eq!(
            condition(&done, keys::CONDITION_ROLLOUT_PROGRESSING).status,
            "False"
        );
        let again = next_status(
            Some(&done),
            &plan(RolloutPhase::Completed, Waiting::Nothing, counts(2, 2, 0)),
            Some(1),
            "Deployment/web".into(),
            at(90),
        );
        assert_eq!(again, done, "a repeated plan writes nothing new");
        let reasons: Vec<_> = events(Some(&first), &done)
            .iter()
            .map(|e| e.reason)
            .collect();
        assert_eq!(reasons, ["Completed"]);
        assert!(events(Some(&done), &again).is_empty());
    }

    #[test]
    fn an_abort_reconciles_until_its_requests_finish_then_stalls_with_an_event() {
        let aborting = next_status(
            None,
            &plan(
                RolloutPhase::Progressing,
                Waiting::Aborting,
                counts(4, 1, 1),
            ),
            Some(2),
            "Deployment/web".into(),
            at(0),
        );
        let progressing = condition(&aborting, keys::CONDITION_ROLLOUT_PROGRESSING);
        assert_eq!(progressing.reason, "Aborting");
        assert!(
            progressing.message.contains("1 requests under way"),
            "{}",
            progressing.message
        );
        assert_eq!(
            condition(&aborting, keys::CONDITION_ROLLOUT_RECONCILING).status,
            "True"
        );
        let aborted = next_status(
            Some(&aborting),
            &plan(RolloutPhase::Aborted, Waiting::Nothing, counts(4, 2, 0)),
            Some(2),
            "Deployment/web".into(),
            at(5),
        );
        assert_eq!(aborted.phase.as_deref(), Some("Aborted"));
        assert_eq!(aborted.completion_time, Some(Time(at(5))));
        let stalled = condition(&aborted, keys::CONDITION_ROLLOUT_STALLED);
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str()),
            ("True", "Aborted")
        );
        assert_eq!(
            stalled.message,
            "aborted: 2 of 4 pods recreated, 0 failed, 2 not started"
        );
        assert_eq!(
            condition(&aborted, keys::CONDITION_ROLLOUT_RECONCILING).status,
            "False"
        );
        assert!(
            aborted
                .conditions
                .iter()
                .all(|c| c.type_ != keys::CONDITION_ROLLOUT_COMPLETE)
        );
        let announced = events(Some(&aborting), &aborted);
        assert_eq!(announced.len(), 1);
        assert_eq!(
            (announced[0].reason, announced[0].note.as_str()),
            ("Aborted", stalled.message.as_str())
        );
    }

    #[test]
    fn failures_are_announced_once_and_the_end_names_the_first() {
        let failure = RolloutFailure {
            pod: "web-3".into(),
            container: Some("app".into()),
            message: "not started again".into(),
        };
        let mut failing = plan(
            RolloutPhase::Progressing,
            Waiting::FailureLimit,
            counts(4, 1, 1),
        );
        failing.counts.failed = 1;
        failing.counts.pending = 1;
        failing.failures = vec![failure.clone()];
        let first = next_status(None, &failing, Some(1), "Deployment/web".into(), at(0));
        let reasons: Vec<_> = events(None, &first).iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["Started", "PodFailed"]);
        let mut ended = failing.clone();
        ended.phase = RolloutPhase::Failed;
        ended.failed_reason = Some(REASON_FAILURE_LIMIT);
        let last = next_status(
            Some(&first),
            &ended,
            Some(1),
            "Deployment/web".into(),
            at(9),
        );
        let failed = condition(&last, keys::CONDITION_ROLLOUT_FAILED);
        assert_eq!(failed.reason, REASON_FAILURE_LIMIT);
        assert!(
            failed.message.contains("web-3: not started again"),
            "{}",
            failed.message
        );
        let events = events(Some(&first), &last);
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].reason, events[0].warning), ("Failed", true));
    }

    #[test]
    fn pausing_and_resuming_are_announced() {
        let running = next_status(
            None,
            &plan(RolloutPhase::Progressing, Waiting::Nothing, counts(3, 0, 1)),
            Some(1),
            "Deployment/web".into(),
            at(0),
        );
        let paused = next_status(
            Some(&running),
            &plan(RolloutPhase::Paused, Waiting::Paused, counts(3, 1, 0)),
            Some(2),
            "Deployment/web".into(),
            at(5),
        );
        assert_eq!(
            condition(&paused, keys::CONDITION_ROLLOUT_PROGRESSING).reason,
            "Paused"
        );
        let reasons: Vec<_> = events(Some(&running), &paused)
            .iter()
            .map(|e| e.reason)
            .collect();
        assert_eq!(reasons, ["Paused"]);
        let resumed = next_status(
            Some(&paused),
            &plan(RolloutPhase::Progressing, Waiting::Nothing, counts(3, 1, 1)),
            Some(3),
            "Deployment/web".into(),
            at(9),
        );
        let reasons: Vec<_> = events(Some(&paused), &resumed)
            .iter()
            .map(|e| e.reason)
            .collect();
        assert_eq!(reasons, ["Resumed"]);
    }
}
