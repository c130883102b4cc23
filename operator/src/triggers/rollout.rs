//! The rollout a trigger creates, and the trigger rollouts of a workload that still run.
//!
//! A trigger's rollout is named after its cause (the workload's name, then `-config-` and a
//! hash of the record it rolls out, `-schedule-` and the tick, or `-restart-` and a hash of the
//! requested value), and is created before the cause is recorded in the workload's
//! TriggerRecord. So a leader that fails between the two, or a record write that is refused,
//! finds the same name held by its earlier try when it evaluates again, running or done, and
//! only writes the record: one cause, one rollout ([`name_taken`]). A name held by an older
//! config-change rollout that a later one followed (the config went back to data rolled out
//! before) or by anything else is not that: the next name is tried (`-2`, `-3`, ...). It is
//! controlled by the workload (an owner reference with its UID and
//! `controller: true`; deleting the workload deletes it) and labelled with its trigger and the
//! workload's UID for people and `kubectl crr`. A workload's newest [`HISTORY_LIMIT`] finished
//! trigger rollouts are kept, as a Deployment keeps its `revisionHistoryLimit` ReplicaSets; older
//! ones are deleted ([`beyond_history`]), however recent.
//!
//! A rollout is the workload's by identity, never by its labels: it is in the workload's
//! namespace and the workload's UID is its controller ([`of_workload`]). Labels are anyone's to
//! write: a tenant could label its own rollouts with another namespace's workload UID, and a
//! lookup by label would count them as that workload's (holding its triggers) or delete that
//! namespace's rollouts of the same names.

use std::sync::Arc;

use crr_crds::keys;
use crr_crds::rollout::{
    ContainerRecreateRollout, ContainerRecreateRolloutSpec, Limit, RolloutRecreateStrategy,
    RolloutTarget, WorkloadRef,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use super::refs::ConfigRef;

/// How many finished trigger rollouts of one workload are kept (its newest).
pub const HISTORY_LIMIT: usize = 3;
/// How long a trigger rollout's requests are kept after they finish (never while the rollout
/// runs): the rollout's status keeps their counts and failures, and the rollout itself is kept
/// by [`HISTORY_LIMIT`].
pub const REQUEST_TTL_SECONDS: i32 = 3600;
/// The longest rollout name: it labels the rollout's requests.
const MAX_NAME: usize = 63;

/// Which trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A ConfigMap or Secret changed.
    ConfigChange,
    /// A schedule ticked.
    Schedule,
    /// `crr.dev/restart-requested-at` took a new value.
    Restart,
}

impl Trigger {
    /// The value of the `crr.dev/trigger` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigChange => "config-change",
            Self::Schedule => "schedule",
            Self::Restart => "restart",
        }
    }
}

/// The workload a trigger restarts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadView {
    /// `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// Why a rollout is created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// These objects changed; `record` identifies the data rolled out (a hash of the record).
    ConfigChange {
        /// The objects whose data changed.
        changed: Vec<ConfigRef>,
        /// A short hash of the record the rollout rolls out.
        record: String,
    },
    /// The schedule's tick.
    Schedule {
        /// The tick.
        tick: Timestamp,
    },
    /// A restart asked for by `crr.dev/restart-requested-at`.
    Restart {
        /// The annotation's value.
        value: String,
        /// A short hash of it: the rollout's name.
        hash: String,
    },
}

impl Cause {
    /// The trigger this cause belongs to.
    pub fn trigger(&self) -> Trigger {
        match self {
            Self::ConfigChange { .. } => Trigger::ConfigChange,
            Self::Schedule { .. } => Trigger::Schedule,
            Self::Restart { .. } => Trigger::Restart,
        }
    }

    fn suffix(&self) -> String {
        match self {
            Self::ConfigChange { record, .. } => {
                format!("-config-{}", &record[..record.len().min(10)])
            }
            Self::Schedule { tick } => format!("-schedule-{}", tick.as_second()),
            Self::Restart { hash, .. } => format!("-restart-{}", &hash[..hash.len().min(10)]),
        }
    }

    /// What started it, for people.
    pub fn describe(&self) -> String {
        match self {
            Self::ConfigChange { changed, .. } => format!(
                "changed: {}",
                changed
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::Schedule { tick } => format!("scheduled at {tick}"),
            Self::Restart { value, .. } => format!("restart requested: {value}"),
        }
    }
}

/// How many names a trigger tries for one cause before it gives up (and retries later).
pub const MAX_NAME_TRIES: u32 = 20;

/// The name of the rollout `cause` creates for the workload named `workload`: at most 63
/// characters, the workload's name cut to fit.
pub fn rollout_name(workload: &str, cause: &Cause) -> String {
    rollout_name_try(workload, cause, 1)
}

/// The name `cause`'s rollout takes on try `attempt` (1 for the first): [`rollout_name`], then
/// the same with `-2`, `-3`, ... once earlier names are held by rollouts that ended.
pub fn rollout_name_try(workload: &str, cause: &Cause, attempt: u32) -> String {
    let mut suffix = cause.suffix();
    if attempt > 1 {
        suffix.push_str(&format!("-{attempt}"));
    }
    let room = MAX_NAME - suffix.len();
    let mut base: String = workload.chars().take(room).collect();
    while base.ends_with(['-', '.']) {
        base.pop();
    }
    format!("{base}{suffix}")
}

/// The rollout `cause` creates for `workload`, recreating `containers`.
pub fn trigger_rollout(
    workload: &WorkloadView,
    containers: Vec<String>,
    max_unavailable: Limit,
    cause: &Cause,
) -> ContainerRecreateRollout {
    let mut rollout = ContainerRecreateRollout::new(
        &rollout_name(&workload.name, cause),
        ContainerRecreateRolloutSpec {
            target: RolloutTarget {
                workload_ref: Some(WorkloadRef {
                    api_version: "apps/v1".to_owned(),
                    kind: workload.kind.to_owned(),
                    name: workload.name.clone(),
                }),
                selector: None,
            },
            containers,
            max_unavailable: Some(max_unavailable.to_int_or_string()),
            recreate_strategy: Some(RolloutRecreateStrategy {
                ttl_seconds_after_finished: Some(REQUEST_TTL_SECONDS),
                ..RolloutRecreateStrategy::default()
            }),
            ..ContainerRecreateRolloutSpec::default()
        },
    );
    rollout.metadata = ObjectMeta {
        namespace: Some(workload.namespace.clone()),
        labels: Some(
            [
                (
                    keys::LABEL_ROLLOUT_TRIGGER.to_owned(),
                    cause.trigger().as_str().to_owned(),
                ),
                (keys::LABEL_WORKLOAD_UID.to_owned(), workload.uid.clone()),
            ]
            .into(),
        ),
        annotations: Some([(keys::ANNOTATION_CAUSE.to_owned(), cause.describe())].into()),
        owner_references: Some(vec![OwnerReference {
            api_version: "apps/v1".to_owned(),
            kind: workload.kind.to_owned(),
            name: workload.name.clone(),
            uid: workload.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(false),
        }]),
        ..rollout.metadata
    };
    rollout
}

/// What a rollout already holding the name a trigger's rollout wants means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameTaken {
    /// This very rollout, made by an earlier try (a leader that failed before recording it, or a
    /// record write that was refused): running or done. Nothing to create; the record is
    /// written.
    EarlierTry,
    /// A rollout being deleted, or one of another workload, trigger or author, or an older
    /// rollout of the same data that a later one followed: its work is not this change's. The
    /// next name is tried.
    Other,
}

/// Whether `existing`, holding the name of the rollout `trigger` wants for `workload`, is an
/// earlier try of it; `rollouts` is the rollout cache. A cause's rollout is made once however
/// often its record write fails:
/// - one still to run or running is the earlier try;
/// - a requested restart's name is its value's, a schedule's its tick's: one of them, even
///   finished, is that restart or tick, done;
/// - a config change's name is its data's: a finished one is this change done unless a later
///   config-change rollout of the workload followed it (the config went back to data rolled
///   out before, and the pods run other data now).
pub fn name_taken(
    existing: &ContainerRecreateRollout,
    rollouts: &[Arc<ContainerRecreateRollout>],
    workload: &WorkloadId,
    trigger: Trigger,
) -> NameTaken {
    if !of_workload(existing, workload, Some(trigger))
        || existing.metadata.deletion_timestamp.is_some()
    {
        return NameTaken::Other;
    }
    let done = match trigger {
        Trigger::Restart | Trigger::Schedule => true,
        Trigger::ConfigChange => {
            let followed = rollouts.iter().any(|later| {
                of_workload(later, workload, Some(trigger))
                    && later.uid() != existing.uid()
                    && later.created() > existing.created()
            });
            !followed
        }
    };
    if runs(existing) || done {
        NameTaken::EarlierTry
    } else {
        NameTaken::Other
    }
}

/// Whether `rollout` is a trigger's rollout of `workload` (of `trigger`; `None`: of any): in the
/// workload's namespace and controlled by its UID. The trigger label only tells which trigger made
/// it; it is never what makes a rollout the workload's.
fn of_workload(
    rollout: &ContainerRecreateRollout,
    workload: &WorkloadId,
    trigger: Option<Trigger>,
) -> bool {
    let controlled = crr_crds::controller_uid(&rollout.metadata) == Some(workload.uid);
    let made_by = rollout
        .labels()
        .get(keys::LABEL_ROLLOUT_TRIGGER)
        .map(String::as_str);
    rollout.namespace().as_deref() == Some(workload.namespace)
        && controlled
        && match trigger {
            Some(trigger) => made_by == Some(trigger.as_str()),
            None => made_by.is_some(),
        }
}

/// Who a workload is, for finding its trigger rollouts: its namespace and UID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadId<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// UID.
    pub uid: &'a str,
}

impl WorkloadView {
    /// A reference to it, for Events.
    pub fn reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("apps/v1".to_owned()),
            kind: Some(self.kind.to_owned()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        }
    }

    /// Its identity.
    pub fn id(&self) -> WorkloadId<'_> {
        WorkloadId {
            namespace: &self.namespace,
            uid: &self.uid,
        }
    }
}

/// A rollout to delete, with the UID it was read with: the delete's precondition, so that a
/// rollout made again under the name since is never the one deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doomed {
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// Whether `rollout` is still to run or running: not finished, not being deleted.
fn runs(rollout: &ContainerRecreateRollout) -> bool {
    rollout.metadata.deletion_timestamp.is_none() && !finished(rollout)
}

fn finished(rollout: &ContainerRecreateRollout) -> bool {
    rollout.phase().is_some_and(|phase| phase.is_finished())
}

/// The finished trigger rollouts of `workload` beyond its newest `limit` (by completion, then
/// creation): the ones to delete. Rollouts still running, or already being deleted, are never
/// among them.
pub fn beyond_history(
    rollouts: &[Arc<ContainerRecreateRollout>],
    workload: &WorkloadId,
    limit: usize,
) -> Vec<Doomed> {
    let mut finished: Vec<&ContainerRecreateRollout> = rollouts
        .iter()
        .map(Arc::as_ref)
        .filter(|rollout| {
            of_workload(rollout, workload, None)
                && rollout.metadata.deletion_timestamp.is_none()
                && finished(rollout)
        })
        .collect();
    let newest_first = |rollout: &&ContainerRecreateRollout| {
        std::cmp::Reverse((
            rollout
                .status
                .as_ref()
                .and_then(|status| status.completion_time.as_ref())
                .map(|time| time.0),
            rollout.created(),
            rollout.name_any(),
        ))
    };
    finished.sort_by_key(newest_first);
    finished
        .into_iter()
        .skip(limit)
        .map(|rollout| Doomed {
            name: rollout.name_any(),
            uid: rollout.uid().unwrap_or_default(),
        })
        .collect()
}

/// When the newest finished trigger rollout of `workload` ended, of any trigger (the kubelet's
/// back-off counts every restart).
pub fn last_ended(
    rollouts: &[Arc<ContainerRecreateRollout>],
    workload: &WorkloadId,
) -> Option<Timestamp> {
    rollouts
        .iter()
        .filter(|rollout| of_workload(rollout, workload, None) && finished(rollout))
        .filter_map(|rollout| rollout.status.as_ref()?.completion_time.as_ref())
        .map(|time| time.0)
        .max()
}

/// The unfinished rollout of `trigger` for `workload`, if one runs.
pub fn running(
    rollouts: &[Arc<ContainerRecreateRollout>],
    workload: &WorkloadId,
    trigger: Trigger,
) -> Option<String> {
    rollouts
        .iter()
        .find(|rollout| of_workload(rollout, workload, Some(trigger)) && runs(rollout))
        .map(|rollout| rollout.name_any())
}

#[cfg(test)]
mod tests;
