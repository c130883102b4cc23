//! What a ContainerRecreateRollout does next, as a pure function of the world as read: the
//! target's pods, the rollout's requests, the namespace's PodDisruptionBudgets and the spec.
//!
//! [`plan`] decides which pods to start now (create their request), and the status that
//! describes the rollout. Nothing here is kept between calls: a restarted operator reads the
//! same pods and requests and plans the same thing, and a pod whose request exists (the name is
//! the rollout's and the pod's UID) is never started again.
//!
//! The rules, in the words of `docs/rollouts.md`:
//! - The target is the pods created before the rollout (by `creationTimestamp`, whole seconds:
//!   a pod of the same second is not the rollout's) that still exist, not terminating. Pods
//!   created later are not restarted: their containers are new. Pods that disappear leave the
//!   counts. A pod that cannot have containers recreated (Pending: not bound to a node;
//!   Succeeded or Failed: an evicted pod a Deployment keeps) is skipped, counted apart, unless
//!   it has a request already: admission would refuse its request, and the rollout must end.
//! - A pod is *unavailable* while it is not Ready or has a request of this rollout in flight. A
//!   Ready pod starts only while fewer than `maxUnavailable` target pods are unavailable. A pod
//!   already not Ready costs nothing to start.
//! - Budgets: a Ready pod starts only when every PDB selecting it allows one more disruption,
//!   judged from the pods as read, as the disruption controller will judge once it catches up:
//!   its Ready pods without a request in flight (this rollout's, another's, a user's) and not
//!   evicted (`disruptedPods`), less its `desiredHealthy`. So a pod turning Ready frees its slot at
//!   once, without waiting for the controller to rewrite the PDB, and a request created a moment
//!   ago counts against every PDB that selects its pod before the PDB's status shows it. When
//!   the status was computed for another set of pods than the one read (`expectedPods` differs:
//!   a scale or a replacement under way), the status's own `disruptionsAllowed` bounds it too;
//!   a PDB whose status is older than its spec allows nothing.
//! - Every Ready pod started is reserved in the status of each PDB that selects it before its
//!   request is created ([`BudgetWrite`]), as the eviction API takes a slot, so a drain sees the
//!   rollout's slots; this rollout's entries whose requests finished are released in the same
//!   write.
//! - Pods go in order: not Ready first, then StatefulSet pods from the highest ordinal, then the
//!   oldest, ties by name. The first pod that cannot start stops the pass (its reason is the
//!   Progressing condition's), so the order is kept exactly.
//! - Once more pods failed than `maxFailedPods`, nothing starts; the rollout ends Failed when
//!   its requests in flight have finished. Paused: nothing starts.
//! - `onlyPods` (a retry) narrows the target to the pods of those names.
//! - Once no pod has started or finished for `progressDeadlineSeconds` while it runs, nothing
//!   starts; the rollout ends Failed (`ProgressDeadlineExceeded`) when its requests in flight
//!   have finished.
//! - Aborted: nothing starts; the executor deletes the requests not yet started; the rollout ends
//!   Aborted when the ones under way have finished (unless every pod was handled by then: it
//!   ended Completed or Failed on its own).

use std::collections::{BTreeMap, BTreeSet};

use crr_crds::rollout::{Limit, MAX_LISTED_FAILURES, RolloutFailure, RolloutPhase};
use jiff::Timestamp;

/// A pod of the target, as the planner needs it (shared with `kubectl crr rollout --dry-run`).
pub use crr_crds::rollout_order::PodView;

/// Where a pod's request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestState {
    /// Not finished yet, and under way: a container was stopped.
    InFlight,
    /// Not finished yet, and nothing done to the pod's containers so far (waiting for the node
    /// daemon, or behind another request of the pod). An aborted rollout deletes it.
    Queued {
        /// The request's resourceVersion as read: its deletion is preconditioned on it, so a
        /// request that started meanwhile is not deleted.
        resource_version: String,
    },
    /// Every container was recreated.
    Succeeded,
    /// It finished without recreating every container.
    Failed {
        /// The container that failed, when the request says.
        container: Option<String>,
        /// Why.
        message: String,
    },
}

impl RequestState {
    /// Not finished: under way or queued.
    pub fn is_in_flight(&self) -> bool {
        matches!(self, Self::InFlight | Self::Queued { .. })
    }
}

/// A request an aborted rollout deletes: it has not started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancel {
    /// The UID of its pod.
    pub pod_uid: String,
    /// Its resourceVersion as read (the deletion's precondition).
    pub resource_version: String,
}

/// A PodDisruptionBudget of the rollout's namespace that selects at least one target pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetView {
    /// The PDB's name.
    pub name: String,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// `status.desiredHealthy`.
    pub desired_healthy: i32,
    /// Whether `status.observedGeneration` has caught up with the spec: a PDB whose status
    /// describes an older spec allows nothing.
    pub status_current: bool,
    /// Every pod the PDB selects (not only the target's), by UID, with whether it is Ready.
    pub pods: BTreeMap<String, bool>,
    /// `status.expectedPods`: how many pods the status was computed for.
    pub expected_pods: i32,
    /// The UIDs of the pods about to be disrupted although maybe still Ready: evicted
    /// (`status.disruptedPods`: a drain, say), reserved by a rollout, or with a request of
    /// anyone's in flight (another rollout, a user). No budget counts them healthy.
    pub disrupted: BTreeSet<String>,
    /// `status.currentHealthy`.
    pub current_healthy: i32,
    /// The PDB's resourceVersion as read: a write of its status is preconditioned on it, so an
    /// eviction (or another rollout) that took a slot meanwhile makes the write fail.
    pub resource_version: String,
    /// The names of the pods whose entry in `status.disruptedPods` this rollout wrote and whose
    /// request has finished: the slot is free again, the entry goes in the next write. They are
    /// not in `disrupted`.
    pub released: BTreeSet<String>,
}

/// A write of a PDB's status, before the plan's requests are created: it reserves the slots of
/// the Ready pods the plan starts (as the eviction API takes one: an entry in
/// `status.disruptedPods`, `disruptionsAllowed` and `currentHealthy` lowered) and releases this
/// rollout's entries whose requests have finished. Preconditioned on the resourceVersion read,
/// so a drain's eviction and a rollout's start are ordered by the PDB itself: whichever writes
/// second reads again and decides again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetWrite {
    /// The PDB's name.
    pub budget: String,
    /// Its resourceVersion as read (the precondition).
    pub resource_version: String,
    /// The pods to enter into `status.disruptedPods`, by name, in the plan's order.
    pub reserve: Vec<String>,
    /// The entries to remove, by pod name (sorted).
    pub release: Vec<String>,
    /// `status.disruptionsAllowed` after the write: never more than the status said less the
    /// slots reserved, nor more than the pods read allow after this plan's starts; never below 0
    /// (the eviction API refuses every eviction of a PDB whose allowance is negative).
    pub disruptions_allowed: i32,
    /// `status.currentHealthy` after the write, lowered the same way: the eviction API deletes a
    /// pod that is not Ready without taking a slot only while `currentHealthy >= desiredHealthy`.
    pub current_healthy: i32,
}

/// What the plan is given besides the pods, requests and budgets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// When the rollout was created: pods created then or later are not its target.
    pub created: Timestamp,
    /// `maxUnavailable`, resolved against the target's pods when planning.
    pub max_unavailable: Limit,
    /// `respectDisruptionBudgets`.
    pub respect_budgets: bool,
    /// `paused`.
    pub paused: bool,
    /// `aborted`.
    pub aborted: bool,
    /// `onlyPods`: when not empty, the only pod names of the target.
    pub only_pods: BTreeSet<String>,
    /// `maxFailedPods`.
    pub max_failed_pods: usize,
    /// Whether the target (its workload) still exists.
    pub target_exists: bool,
    /// When the progress deadline has passed since the last progress: the counts the status
    /// showed then. Unchanged now, the rollout is stalled: it starts nothing and ends Failed once
    /// nothing is in flight.
    pub past_deadline: Option<Progress>,
}

/// What counts as progress: a pod recreated, failed or started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Target pods whose request succeeded.
    pub recreated: usize,
    /// Target pods whose request failed.
    pub failed: usize,
    /// Target pods with an unfinished request.
    pub in_flight: usize,
}

/// Why the rollout is not starting more pods now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Nothing to wait for: every pod it could start was started (or none is left).
    Nothing,
    /// `maxUnavailable` target pods are unavailable.
    ForUnavailable {
        /// How many are.
        unavailable: usize,
        /// The limit.
        limit: usize,
    },
    /// The named PDB allows no more disruptions.
    ForBudget {
        /// The PDB's name.
        budget: String,
        /// The pod that waits on it.
        pod: String,
    },
    /// `paused`.
    Paused,
    /// More pods failed than `maxFailedPods`: requests in flight finish, then it ends.
    FailureLimit,
    /// `aborted`: requests under way finish, then it ends Aborted.
    Aborting,
}

/// What to do now and how the rollout stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The pods whose request to create now, in order.
    pub start: Vec<PodRef>,
    /// The phase.
    pub phase: RolloutPhase,
    /// Why no more pods start now.
    pub waiting: Waiting,
    /// Why the rollout ended, when it did: `FailureLimit` or `TargetGone`; `None` otherwise.
    pub failed_reason: Option<&'static str>,
    /// The counts, after this plan's starts.
    pub counts: Counts,
    /// The first failed pods (at most [`MAX_LISTED_FAILURES`]), by pod name.
    pub failures: Vec<RolloutFailure>,
    /// The budget writes to make before the requests are created.
    pub budget_writes: Vec<BudgetWrite>,
    /// The queued requests to delete (aborted), before the budget writes release their slots.
    pub cancel: Vec<Cancel>,
}

/// A pod to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// The pod's name.
    pub name: String,
    /// The pod's UID.
    pub uid: String,
}

/// The status counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// The target's pods.
    pub target_pods: usize,
    /// Target pods whose request succeeded.
    pub recreated: usize,
    /// Target pods whose request failed.
    pub failed: usize,
    /// Target pods with an unfinished request.
    pub in_flight: usize,
    /// Target pods not started.
    pub pending: usize,
    /// Pods of the target that cannot be restarted (Pending, Succeeded or Failed) and have no
    /// request: not in `target_pods`, never started.
    pub skipped: usize,
}

/// Reason of the Failed condition when more pods failed than allowed.
pub const REASON_FAILURE_LIMIT: &str = "FailureLimit";
/// Reason of the Failed condition when the target workload is gone.
pub const REASON_TARGET_GONE: &str = "TargetGone";
/// Reason of the Failed condition when no pod started or finished within the progress deadline.
pub const REASON_PROGRESS_DEADLINE: &str = "ProgressDeadlineExceeded";

/// Plans the next step of a rollout that has not ended. `requests` maps a pod UID to its
/// request's state; `pods` are the pods the target's selector matches now (any order).
pub fn plan(
    settings: &Settings,
    pods: &[PodView],
    requests: &BTreeMap<String, RequestState>,
    budgets: &[BudgetView],
) -> Plan {
    let mut plan = plan_starts(settings, pods, requests, budgets);
    if settings.respect_budgets {
        plan.budget_writes = budget_writes(budgets, &in_flight(requests), &plan.start);
    }
    plan
}

/// The UIDs of the pods whose request of this rollout is in flight.
fn in_flight(requests: &BTreeMap<String, RequestState>) -> BTreeSet<&str> {
    requests
        .iter()
        .filter(|(_, state)| state.is_in_flight())
        .map(|(uid, _)| uid.as_str())
        .collect()
}

/// The starts and the status, without the budget writes.
fn plan_starts(
    settings: &Settings,
    pods: &[PodView],
    requests: &BTreeMap<String, RequestState>,
    budgets: &[BudgetView],
) -> Plan {
    let (target, skipped): (Vec<&PodView>, Vec<&PodView>) = pods
        .iter()
        .filter(|pod| pod.created < settings.created && !pod.terminating)
        .filter(|pod| settings.only_pods.is_empty() || settings.only_pods.contains(&pod.name))
        .partition(|pod| pod.restartable || requests.contains_key(&pod.uid));
    let mut counts = Counts {
        target_pods: target.len(),
        skipped: skipped.len(),
        ..Counts::default()
    };
    let mut pending: Vec<&PodView> = Vec::new();
    let mut failures: Vec<RolloutFailure> = Vec::new();
    let mut unavailable = 0;
    for pod in &target {
        let state = requests.get(&pod.uid);
        if !pod.ready || state.is_some_and(RequestState::is_in_flight) {
            unavailable += 1;
        }
        match state {
            None => pending.push(pod),
            Some(RequestState::InFlight | RequestState::Queued { .. }) => counts.in_flight += 1,
            Some(RequestState::Succeeded) => counts.recreated += 1,
            Some(RequestState::Failed { container, message }) => {
                counts.failed += 1;
                failures.push(RolloutFailure {
                    pod: pod.name.clone(),
                    container: container.clone(),
                    message: message.clone(),
                });
            }
        }
    }
    failures.sort_by(|a, b| a.pod.cmp(&b.pod));
    failures.truncate(MAX_LISTED_FAILURES);
    pending.sort_by(|a, b| a.restart_order().cmp(&b.restart_order()));
    counts.pending = pending.len();

    let ended = |phase, reason, counts| Plan {
        start: Vec::new(),
        phase,
        waiting: Waiting::Nothing,
        failed_reason: reason,
        counts,
        failures: failures.clone(),
        budget_writes: Vec::new(),
        cancel: Vec::new(),
    };
    if !settings.target_exists && counts.in_flight == 0 {
        return ended(RolloutPhase::Failed, Some(REASON_TARGET_GONE), counts);
    }
    let over_limit = counts.failed > settings.max_failed_pods;
    if over_limit && counts.in_flight == 0 {
        return ended(RolloutPhase::Failed, Some(REASON_FAILURE_LIMIT), counts);
    }
    if !over_limit && pending.is_empty() && counts.in_flight == 0 {
        return ended(RolloutPhase::Completed, None, counts);
    }
    if settings.aborted {
        // The queued requests go: their pods count as not started.
        let cancel: Vec<Cancel> = requests
            .iter()
            .filter_map(|(uid, state)| match state {
                RequestState::Queued { resource_version } => Some(Cancel {
                    pod_uid: uid.clone(),
                    resource_version: resource_version.clone(),
                }),
                _ => None,
            })
            .collect();
        let cancelled = target
            .iter()
            .filter(|pod| matches!(requests.get(&pod.uid), Some(RequestState::Queued { .. })))
            .count();
        counts.in_flight -= cancelled;
        counts.pending += cancelled;
        let (phase, waiting) = if counts.in_flight == 0 {
            (RolloutPhase::Aborted, Waiting::Nothing)
        } else {
            (RolloutPhase::Progressing, Waiting::Aborting)
        };
        return Plan {
            waiting,
            cancel,
            ..ended(phase, None, counts)
        };
    }
    let holding = |waiting| Plan {
        start: Vec::new(),
        phase: if settings.paused {
            RolloutPhase::Paused
        } else {
            RolloutPhase::Progressing
        },
        waiting,
        failed_reason: None,
        counts,
        failures: failures.clone(),
        budget_writes: Vec::new(),
        cancel: Vec::new(),
    };
    if over_limit {
        return holding(Waiting::FailureLimit);
    }
    let now = Progress {
        recreated: counts.recreated,
        failed: counts.failed,
        in_flight: counts.in_flight,
    };
    if !settings.paused && settings.past_deadline == Some(now) {
        if counts.in_flight == 0 {
            return ended(RolloutPhase::Failed, Some(REASON_PROGRESS_DEADLINE), counts);
        }
        return holding(Waiting::Nothing);
    }
    if !settings.target_exists {
        // In flight only: let them finish, start nothing.
        return holding(Waiting::Nothing);
    }
    if settings.paused {
        return holding(Waiting::Paused);
    }

    let limit = settings.max_unavailable.resolve(counts.target_pods);
    // Every pod with a request in flight is disrupted, in the target or not (one that began
    // terminating, say): no budget counts it healthy.
    let in_flight_uids = in_flight(requests);
    let mut allowed: Vec<i64> = budgets
        .iter()
        .map(|budget| fresh_allowance(budget, &in_flight_uids))
        .collect();
    let mut start = Vec::new();
    let mut waiting = Waiting::Nothing;
    for pod in pending {
        if pod.ready {
            if unavailable >= limit {
                waiting = Waiting::ForUnavailable { unavailable, limit };
                break;
            }
            if settings.respect_budgets {
                let blocking = budgets
                    .iter()
                    .zip(&allowed)
                    .find(|(budget, allowed)| budget.pods.contains_key(&pod.uid) && **allowed < 1);
                if let Some((budget, _)) = blocking {
                    waiting = Waiting::ForBudget {
                        budget: budget.name.clone(),
                        pod: pod.name.clone(),
                    };
                    break;
                }
                for (budget, allowed) in budgets.iter().zip(allowed.iter_mut()) {
                    if budget.pods.contains_key(&pod.uid) {
                        *allowed -= 1;
                    }
                }
            }
            unavailable += 1;
        }
        start.push(PodRef {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        });
    }
    counts.in_flight += start.len();
    counts.pending -= start.len();
    Plan {
        start,
        phase: RolloutPhase::Progressing,
        waiting,
        failed_reason: None,
        counts,
        failures,
        budget_writes: Vec::new(),
        cancel: Vec::new(),
    }
}

/// The budget writes for `start` (the plan's starts): for every PDB that selects a Ready pod
/// started, or holds an entry this rollout may release.
fn budget_writes(
    budgets: &[BudgetView],
    in_flight: &BTreeSet<&str>,
    start: &[PodRef],
) -> Vec<BudgetWrite> {
    let mut after = in_flight.clone();
    after.extend(start.iter().map(|pod| pod.uid.as_str()));
    budgets
        .iter()
        .filter_map(|budget| {
            let reserve: Vec<String> = start
                .iter()
                .filter(|pod| budget.pods.get(&pod.uid) == Some(&true))
                .map(|pod| pod.name.clone())
                .collect();
            let release: Vec<String> = budget.released.iter().cloned().collect();
            if reserve.is_empty() && release.is_empty() {
                return None;
            }
            let taken = i64::try_from(reserve.len()).unwrap_or(i64::MAX);
            let healthy = healthy(budget, &after);
            let allowed = (healthy - i64::from(budget.desired_healthy))
                .min(i64::from(budget.disruptions_allowed) - taken)
                .max(0);
            let current = healthy
                .min(i64::from(budget.current_healthy) - taken)
                .max(0);
            Some(BudgetWrite {
                budget: budget.name.clone(),
                resource_version: budget.resource_version.clone(),
                reserve,
                release,
                disruptions_allowed: i32::try_from(allowed).unwrap_or(i32::MAX),
                current_healthy: i32::try_from(current).unwrap_or(i32::MAX),
            })
        })
        .collect()
}

/// The pods of `budget` it counts healthy: Ready, not in flight, not disrupted.
fn healthy(budget: &BudgetView, in_flight: &BTreeSet<&str>) -> i64 {
    let healthy = budget
        .pods
        .iter()
        .filter(|(uid, ready)| {
            **ready && !in_flight.contains(uid.as_str()) && !budget.disrupted.contains(*uid)
        })
        .count();
    i64::try_from(healthy).unwrap_or(i64::MAX)
}

/// How many more disruptions a PDB allows now, judged from the pods as read: Ready, not in
/// flight and not evicted, less `desiredHealthy`; also no more than the status's
/// `disruptionsAllowed` when the status counted another number of pods than were read.
fn fresh_allowance(budget: &BudgetView, in_flight: &BTreeSet<&str>) -> i64 {
    if !budget.status_current {
        return 0;
    }
    let seen = healthy(budget, in_flight) - i64::from(budget.desired_healthy);
    let same_pods =
        i64::try_from(budget.pods.len()).unwrap_or(i64::MAX) == i64::from(budget.expected_pods);
    if same_pods {
        seen
    } else {
        seen.min(i64::from(budget.disruptions_allowed))
    }
}

#[cfg(test)]
mod tests;
