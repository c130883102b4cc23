//! What one reconcile of a ContainerRecreateRollout does, decided purely: the steps of a
//! [`Decision`] (requests to create, the status to write, the Events that follow it, a budget
//! wait to announce, the deletion after the TTL, and when to look again). The executor
//! (`executor`) carries them out; nothing here calls the API server or reads a clock.
//!
//! A reconcile decides in two stages:
//! 1. [`before_reading`] looks at the rollout alone. A rollout being deleted, a finished one
//!    (only its TTL is left) and one whose `maxUnavailable` cannot be read are decided without
//!    reading anything.
//! 2. Otherwise the shell reads the target's pods and budgets (`world`) and the rollout's
//!    requests (the request cache), and [`decide`] plans (`plan`), builds the requests of the
//!    pods to start (`request`) and the status and Events (`status`).
//!
//! The status write is a [`RolloutStatusPatch`] preconditioned on the resourceVersion of the
//! rollout decided from: a rollout changed meanwhile fails it with a conflict, and the reconcile
//! reads again and decides again. The Events of a status change follow its successful write
//! only, so a decision made on a stale copy never announces a change twice.

use std::collections::BTreeMap;
use std::time::Duration;

use crr_crds::rollout::{
    ContainerRecreateRollout, ContainerRecreateRolloutStatus, DEFAULT_PROGRESS_DEADLINE_SECONDS,
    Limit, max_unavailable, target_name,
};
use crr_crds::status::{NoResourceVersion, RolloutStatusPatch};
use crr_crds::v1beta1::ContainerRecreateRequest;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::plan::{self, BudgetView, PodView, Progress, RequestState, Settings, Waiting};
use super::request::new_request;
use super::status::{RolloutEvent, events, next_status};

/// How soon a rollout waiting for its pods to turn Ready looks again at the latest: a pod turning
/// Ready wakes it sooner (`ready_flips`, from the operator's pod watch); this only covers a
/// report that was dropped.
pub const READY_POLL: Duration = Duration::from_secs(5);
/// How soon a rollout waiting on a budget looks again at the latest (the PDB watch wakes it
/// sooner).
pub const BUDGET_POLL: Duration = Duration::from_secs(5);
/// How soon a rollout with requests in flight looks again at the latest (their changes wake it
/// sooner).
pub const IN_FLIGHT_POLL: Duration = Duration::from_secs(10);

/// When to reconcile the rollout again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// When it, or what it watches, changes.
    AwaitChange,
    /// After this long at the latest.
    After(Duration),
}

impl Next {
    /// This, or after `at_most` if that is sooner.
    fn sooner(self, at_most: Option<Duration>) -> Self {
        match (self, at_most) {
            (Self::After(after), Some(at_most)) => Self::After(after.min(at_most)),
            (Self::AwaitChange, Some(at_most)) => Self::After(at_most),
            (next, None) => next,
        }
    }
}

/// A PodDisruptionBudget a pod waits on, to announce (at most once a minute per rollout and
/// PDB: the executor keeps that memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetWait {
    /// The PDB's name.
    pub budget: String,
    /// The pod that waits.
    pub pod: String,
}

/// A merge patch of a PDB's status that reserves and releases a rollout's slots
/// ([`plan::BudgetWrite`]), preconditioned on the resourceVersion read.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetPatch {
    /// The PDB's name.
    pub budget: String,
    /// The patch.
    pub patch: serde_json::Value,
}

impl BudgetPatch {
    /// The patch of `write`, its reservations entered at `now` (the eviction API's form: the
    /// disruption controller drops an entry two minutes after its time, or once the pod is
    /// being deleted).
    pub fn of(write: &plan::BudgetWrite, now: Timestamp) -> Self {
        let mut entries = serde_json::Map::new();
        for pod in &write.release {
            entries.insert(pod.clone(), serde_json::Value::Null);
        }
        // The API's time format (`metav1.Time`: RFC 3339, whole seconds), written directly: a
        // null here would remove the entry instead of reserving it.
        let at = serde_json::Value::String(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        for pod in &write.reserve {
            entries.insert(pod.clone(), at.clone());
        }
        Self {
            budget: write.budget.clone(),
            patch: serde_json::json!({
                "metadata": {"resourceVersion": write.resource_version},
                "status": {
                    "disruptedPods": entries,
                    "disruptionsAllowed": write.disruptions_allowed,
                    "currentHealthy": write.current_healthy,
                },
            }),
        }
    }
}

/// A queued request an aborted rollout deletes, preconditioned on the resourceVersion read (a
/// request that started meanwhile is left to finish).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestDeletion {
    /// The request's name.
    pub name: String,
    /// Its resourceVersion as read.
    pub resource_version: String,
}

/// The steps of one reconcile, in the order the executor takes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The queued requests an aborted rollout deletes, before anything else: their slots are
    /// released by the budget writes that follow.
    pub cancel: Vec<RequestDeletion>,
    /// 0. The PDB status writes that reserve the slots of the pods to start (and release the
    ///    rollout's finished ones), each preconditioned: a conflict ends the reconcile before
    ///    any request is created.
    pub budgets: Vec<BudgetPatch>,
    /// 1. The requests to create, one per pod to start, in the plan's order. A request that
    ///    exists already (its name is the rollout's and the pod's UID) counts as created.
    pub create: Vec<ContainerRecreateRequest>,
    /// 2. The status to write; `None` when it would not change.
    pub status: Option<RolloutStatusPatch>,
    /// 3. The Events the status change calls for, published once `status` is written.
    pub events: Vec<RolloutEvent>,
    /// 4. The budget a pod waits on, to announce.
    pub budget_wait: Option<BudgetWait>,
    /// 5. Delete the rollout (with its requests): it finished `ttlSecondsAfterFinished` ago.
    pub delete: bool,
    /// 6. When to look again.
    pub next: Next,
}

impl Decision {
    /// Nothing to do until something changes.
    pub fn idle() -> Self {
        Self {
            cancel: Vec::new(),
            budgets: Vec::new(),
            create: Vec::new(),
            status: None,
            events: Vec::new(),
            budget_wait: None,
            delete: false,
            next: Next::AwaitChange,
        }
    }
}

/// What [`decide`] needs read, besides the rollout: its target's pods and budgets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct World {
    /// The target's pods.
    pub pods: Vec<PodView>,
    /// The PDBs of the namespace that select a target pod (none when budgets are not respected).
    pub budgets: Vec<BudgetView>,
    /// Whether the target workload exists.
    pub target_exists: bool,
}

/// What the rollout alone decides.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// Nothing to read: the decision is made.
    Decided(Box<Decision>),
    /// The spec cannot be carried out as it stands (admission refuses it; one stored while the
    /// webhook was away waits for a fix instead of a guess): log why, await a change.
    Refused(String),
    /// Read the world, then [`decide`].
    ReadWorld(Reading),
}

/// What the rollout's spec says of how to read and plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// `maxUnavailable`, parsed.
    pub limit: Limit,
    /// `respectDisruptionBudgets` (default true): read the budgets.
    pub respect_budgets: bool,
}

/// Stage 1: what the rollout alone decides at `now`.
pub fn before_reading(rollout: &ContainerRecreateRollout, now: Timestamp) -> Stage {
    if rollout.metadata.deletion_timestamp.is_some() {
        // Its requests go with it (owner references): the garbage collector deletes them, and a
        // deleted request in flight is cancelled as any is.
        return Stage::Decided(Box::new(Decision::idle()));
    }
    if rollout.phase().is_some_and(|phase| phase.is_finished()) {
        let completed = rollout
            .status
            .as_ref()
            .and_then(|status| status.completion_time.as_ref());
        let (delete, next) = expiry(rollout.spec.ttl_seconds_after_finished, completed, now);
        // A spec edit after the end (only `paused` may change) changes nothing, but is observed:
        // `observedGeneration` catches up, as GitOps tools and `kubectl wait` read it.
        let status = match observe_generation(rollout) {
            Some(status) => match RolloutStatusPatch::of(rollout, status) {
                Ok(patch) => Some(patch),
                Err(error) => return Stage::Refused(error.to_string()),
            },
            None => None,
        };
        return Stage::Decided(Box::new(Decision {
            delete,
            next,
            status,
            ..Decision::idle()
        }));
    }
    match max_unavailable(rollout.spec.max_unavailable.as_ref()) {
        Ok(limit) => Stage::ReadWorld(Reading {
            limit,
            respect_budgets: rollout.spec.respect_disruption_budgets.unwrap_or(true),
        }),
        Err(error) => Stage::Refused(format!("not starting: invalid maxUnavailable: {error}")),
    }
}

/// The status of a finished rollout whose spec changed after its end, with `observedGeneration`
/// at the spec's generation; `None` when it is observed already.
fn observe_generation(
    rollout: &ContainerRecreateRollout,
) -> Option<ContainerRecreateRolloutStatus> {
    let generation = rollout.metadata.generation?;
    let status = rollout.status.as_ref()?;
    (status.observed_generation != Some(generation)).then(|| ContainerRecreateRolloutStatus {
        observed_generation: Some(generation),
        ..status.clone()
    })
}

/// Stage 2: the decision from the world as read and the rollout's requests (by pod UID).
pub fn decide(
    rollout: &ContainerRecreateRollout,
    reading: &Reading,
    world: &World,
    requests: &BTreeMap<String, RequestState>,
    now: Timestamp,
) -> Result<Decision, NoResourceVersion> {
    let settings = Settings {
        created: rollout
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |time| time.0),
        max_unavailable: reading.limit,
        respect_budgets: reading.respect_budgets,
        paused: rollout.spec.paused,
        aborted: rollout.spec.aborted,
        only_pods: rollout.spec.only_pods.iter().cloned().collect(),
        max_failed_pods: usize::try_from(rollout.spec.max_failed_pods.unwrap_or(0)).unwrap_or(0),
        target_exists: world.target_exists,
        past_deadline: past_deadline(rollout, now),
    };
    let plan = plan::plan(&settings, &world.pods, requests, &world.budgets);
    let budgets = plan
        .budget_writes
        .iter()
        .map(|write| BudgetPatch::of(write, now))
        .collect();
    let create = plan
        .start
        .iter()
        .map_while(|pod| new_request(rollout, pod))
        .collect();
    let rollout_name = rollout.metadata.name.as_deref().unwrap_or_default();
    let cancel = plan
        .cancel
        .iter()
        .map(|cancel| RequestDeletion {
            name: crr_crds::rollout::request_name(rollout_name, &cancel.pod_uid),
            resource_version: cancel.resource_version.clone(),
        })
        .collect();
    let previous = rollout.status.as_ref();
    let status = next_status(
        previous,
        &plan,
        rollout.metadata.generation,
        target_name(&rollout.spec.target),
        now,
    );
    let deadline_left = progress_deadline_left(rollout, &status, now);
    let (delete, next) = if plan.phase.is_finished() {
        expiry(
            rollout.spec.ttl_seconds_after_finished,
            status.completion_time.as_ref(),
            now,
        )
    } else {
        (
            false,
            match &plan.waiting {
                Waiting::Paused => Next::AwaitChange,
                Waiting::ForUnavailable { .. } => Next::After(READY_POLL),
                Waiting::ForBudget { .. } => Next::After(BUDGET_POLL),
                Waiting::FailureLimit | Waiting::Aborting | Waiting::Nothing => {
                    Next::After(IN_FLIGHT_POLL)
                }
            }
            .sooner(deadline_left),
        )
    };
    let starts_now = previous
        .and_then(|status| status.start_time.as_ref())
        .is_none()
        && status.start_time.is_some();
    let (status, events) = if previous == Some(&status) {
        (None, Vec::new())
    } else {
        let mut events = events(previous, &status);
        if starts_now && let Some(event) = only_pods_not_found(rollout, &world.pods) {
            events.push(event);
        }
        (Some(RolloutStatusPatch::of(rollout, status)?), events)
    };
    let budget_wait = match plan.waiting {
        Waiting::ForBudget { budget, pod } => Some(BudgetWait { budget, pod }),
        _ => None,
    };
    Ok(Decision {
        cancel,
        budgets,
        create,
        status,
        events,
        budget_wait,
        delete,
        next,
    })
}

/// The `OnlyPodsNotFound` Warning a rollout gets when it starts, naming (the first ten of) the
/// `onlyPods` names no pod of its target has: a retry of pods that are gone, or a typo, would
/// otherwise complete without a word.
fn only_pods_not_found(
    rollout: &ContainerRecreateRollout,
    pods: &[PodView],
) -> Option<RolloutEvent> {
    let missing: Vec<&str> = rollout
        .spec
        .only_pods
        .iter()
        .filter(|name| !pods.iter().any(|pod| pod.name == **name))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return None;
    }
    let shown = missing
        .iter()
        .take(10)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    let more = missing.len().saturating_sub(10);
    Some(RolloutEvent {
        warning: true,
        reason: "OnlyPodsNotFound",
        note: format!(
            "{} of onlyPods match no pod of the target, left out: {shown}{}",
            missing.len(),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    })
}

/// `spec.progressDeadlineSeconds`, or its default.
fn progress_deadline(rollout: &ContainerRecreateRollout) -> Duration {
    let seconds = rollout
        .spec
        .progress_deadline_seconds
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    Duration::from_secs(u64::try_from(seconds.max(1)).unwrap_or(1))
}

/// The counts of the last status when the rollout ran on it and its progress deadline has passed
/// since its last progress (`None`: not running, or within the deadline).
fn past_deadline(rollout: &ContainerRecreateRollout, now: Timestamp) -> Option<Progress> {
    let status = rollout.status.as_ref()?;
    let since = status
        .last_progress_time
        .as_ref()
        .or(status.start_time.as_ref())?;
    let count = |value: i32| usize::try_from(value).unwrap_or(0);
    let running = super::status::runs(status) && !rollout.spec.paused;
    (running && elapsed(since, now) >= progress_deadline(rollout)).then(|| Progress {
        recreated: count(status.recreated),
        failed: count(status.failed),
        in_flight: count(status.in_flight),
    })
}

/// How long `status` (the one about to be written) has left before its progress deadline, while
/// it runs.
fn progress_deadline_left(
    rollout: &ContainerRecreateRollout,
    status: &ContainerRecreateRolloutStatus,
    now: Timestamp,
) -> Option<Duration> {
    let since = status.last_progress_time.as_ref()?;
    super::status::runs(status).then(|| {
        progress_deadline(rollout)
            .saturating_sub(elapsed(since, now))
            .max(Duration::from_secs(1))
    })
}

fn elapsed(since: &Time, now: Timestamp) -> Duration {
    Duration::from_secs(u64::try_from(now.as_second() - since.0.as_second()).unwrap_or(0))
}

/// How soon a rollout waiting under the cluster's cap looks again if nothing wakes it first. A
/// rollout that ends, or a started one deleted, wakes the waiting ones as soon as the rollout
/// watch shows it (`cluster_cap::frees_a_slot`); this is only the fallback.
pub const CLUSTER_CAP_POLL: Duration = Duration::from_secs(60);

/// The decision for a rollout that has not started and waits under the cluster's cap
/// (`cluster_cap`): its status says so, once, with an Event; nothing starts.
pub fn wait_for_cluster_cap(
    rollout: &ContainerRecreateRollout,
    cap: usize,
    ahead: usize,
    now: Timestamp,
) -> Result<Decision, NoResourceVersion> {
    let previous = rollout.status.as_ref();
    let status = super::status::waiting_for_cluster_cap(
        previous,
        rollout.metadata.generation,
        target_name(&rollout.spec.target),
        cap,
        now,
    );
    let (status, events) = if previous == Some(&status) {
        (None, Vec::new())
    } else {
        let event = RolloutEvent {
            warning: false,
            reason: super::status::REASON_WAITING_FOR_CLUSTER_CAP,
            note: format!(
                "waiting to start: at most {cap} rollouts run at once in this cluster; {ahead} waiting start before this one"
            ),
        };
        (Some(RolloutStatusPatch::of(rollout, status)?), vec![event])
    };
    Ok(Decision {
        status,
        events,
        next: Next::After(CLUSTER_CAP_POLL),
        ..Decision::idle()
    })
}

/// A finished rollout: delete it once `ttl` seconds have passed since `completed`, else look
/// again then; without a TTL (or a completion time) it stays.
fn expiry(ttl: Option<i32>, completed: Option<&Time>, now: Timestamp) -> (bool, Next) {
    let (Some(ttl), Some(completed)) = (ttl, completed) else {
        return (false, Next::AwaitChange);
    };
    let left = completed.0.as_second() + i64::from(ttl) - now.as_second();
    if left > 0 {
        (false, Next::After(Duration::from_secs(left.unsigned_abs())))
    } else {
        (true, Next::AwaitChange)
    }
}

#[cfg(test)]
mod tests;
