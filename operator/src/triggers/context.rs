//! The trigger controller's shared state: its settings, its index of what the watches saw
//! (`index`: the workloads with triggers, the versions and hashes of the objects they use), the
//! warnings given, the Deployments that run Reloader (told by the workload watch's slim view,
//! `workload_view`), the workloads' records (`record`), the wake-up queue and the retry backoff;
//! and the kinds watched, with the `ApiResource` each is watched through.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crr_crds::rollout::ContainerRecreateRollout;
use crr_runtime::backoff::Backoff;
use crr_runtime::events::EventPublisher;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use super::index::{TriggerIndex, WorkloadKey};
use super::metrics::TriggerMetrics;
use super::queue::WakeQueue;
use super::record::Records;
use super::settle::ChangeTimes;
use super::warnings::Warnings;
use crate::reconcile_errors::ControllerErrors;

/// Which Secrets the triggers may read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SecretAccess {
    /// None: Secret references are ignored, with an Event.
    #[default]
    Denied,
    /// Every namespace's.
    All,
    /// Only these namespaces'.
    Namespaces(BTreeSet<String>),
}

impl SecretAccess {
    /// Whether the Secrets of `namespace` may be read.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::Denied => false,
            Self::All => true,
            Self::Namespaces(namespaces) => namespaces.contains(namespace),
        }
    }
}

/// How the triggers behave (operator flags).
#[derive(Clone, Debug)]
pub struct TriggerSettings {
    /// Which Secrets may be read.
    pub secrets: SecretAccess,
    /// Whether Reloader's annotations count.
    pub reloader_annotations: bool,
    /// A missed tick later than this after its time is skipped.
    pub starting_deadline: Duration,
    /// Changes of one workload within this of the first make one evaluation (and one rollout);
    /// a rollout is created this long after the change that starts it.
    pub debounce: Duration,
    /// A change that reaches a container through a volume is rolled out this long after the
    /// last change seen: the kubelets' sync, which writes it to the pods' volumes (`settle`).
    pub volume_sync: Duration,
}

/// The kinds the triggers watch.
pub(super) const KINDS: [(&str, &str); 3] = [
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
    ("DaemonSet", "daemonsets"),
];

/// The shared state of the trigger controller.
pub struct TriggerContext {
    pub(super) client: Client,
    pub(super) events: EventPublisher,
    pub(super) leader: watch::Receiver<bool>,
    pub(super) rollouts: Store<ContainerRecreateRollout>,
    pub(super) settings: TriggerSettings,
    /// What the watches saw: the workloads with triggers, the objects' versions and hashes.
    pub(super) index: Mutex<TriggerIndex>,
    /// What the workloads' TriggerRecords say (their watch and the operator's own writes).
    pub(super) records: Mutex<Records>,
    /// Warnings already given, so one problem is one Event (per workload and reason).
    pub(super) warned: Mutex<Warnings>,
    /// When each workload's ConfigMaps and Secrets last changed (`settle`).
    pub(super) change_times: Mutex<ChangeTimes>,
    /// The Deployments that run Reloader (an image of `stakater/reloader`, as
    /// `SlimWorkload::runs_reloader` says): with Reloader's
    /// annotations honoured, both would act on a change, and the workload is told.
    pub(super) reloaders: Mutex<HashSet<WorkloadKey>>,
    pub(super) queue: WakeQueue<WorkloadKey>,
    pub(super) backoff: Backoff,
    /// Failed evaluations, by kind.
    pub(super) errors: ControllerErrors,
    pub(super) metrics: TriggerMetrics,
}

pub(super) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TriggerContext {
    /// The context; `rollouts` is the rollout controller's cache.
    pub fn new(
        client: Client,
        events: EventPublisher,
        leader: watch::Receiver<bool>,
        rollouts: Store<ContainerRecreateRollout>,
        settings: TriggerSettings,
        errors: ControllerErrors,
        metrics: TriggerMetrics,
    ) -> Self {
        Self {
            client,
            events,
            leader,
            rollouts,
            settings,
            index: Mutex::default(),
            records: Mutex::default(),
            warned: Mutex::default(),
            change_times: Mutex::default(),
            reloaders: Mutex::default(),
            queue: WakeQueue::default(),
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(60)),
            errors,
            metrics,
        }
    }

    pub(super) fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// The index, locked (never held across an await).
    pub(super) fn index(&self) -> MutexGuard<'_, TriggerIndex> {
        locked(&self.index)
    }

    /// The records, locked (never held across an await).
    pub(super) fn records(&self) -> MutexGuard<'_, Records> {
        locked(&self.records)
    }

    /// Keeps `crr_operator_trigger_pending_changes` equal to the records' pending changes.
    pub(super) fn count_pending_changes(&self) {
        let pending = self.records().pending_count();
        self.metrics
            .pending_changes
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// How many workloads have triggers (the `kubectl crr triggers` view reads the cluster).
    pub fn workload_count(&self) -> usize {
        self.index().workload_count()
    }

    /// Wakes each workload in `keys` after `after`.
    pub(super) fn wake(&self, keys: Vec<WorkloadKey>, after: Duration) {
        for key in keys {
            self.queue.wake(key, after);
        }
    }

    /// Wakes every workload with triggers after `after`.
    pub(super) fn wake_all(&self, after: Duration) {
        let keys = self.index().workload_keys();
        self.wake(keys, after);
    }

    /// Warns with an Event on the workload, once per workload and reason while the message
    /// stays the same.
    pub(super) async fn warn_once(
        &self,
        workload: &ObjectReference,
        reason: &'static str,
        message: &str,
    ) {
        self.warn_once_as(workload, reason, reason, message).await;
    }

    /// [`Self::warn_once`], remembered under `problem` rather than the Event's reason: one
    /// reason may name problems that come and go apart (a trigger's rollout refused at create
    /// is a `BadTriggerAnnotation`, beside the annotations' own).
    pub(super) async fn warn_once_as(
        &self,
        workload: &ObjectReference,
        problem: &'static str,
        reason: &'static str,
        message: &str,
    ) {
        let uid = workload.uid.as_deref().unwrap_or_default();
        if !locked(&self.warned).is_news(uid, problem, message) {
            return;
        }
        self.metrics.warned(reason);
        self.events
            .publish(workload, EventType::Warning, reason, message)
            .await;
    }

    /// The workload `uid` no longer has the problem of `reason`: it is warned again if it
    /// comes back.
    pub(super) fn clear_warning(&self, uid: &str, reason: &'static str) {
        locked(&self.warned).cleared(uid, reason);
    }

    /// Forgets the warnings and change times of workloads the index no longer holds.
    pub(super) fn forget_gone_workloads(&self) {
        let live = self.index().workload_uids();
        let live: HashSet<&str> = live.iter().map(String::as_str).collect();
        locked(&self.warned).retain_workloads(&live);
        let live: HashSet<WorkloadKey> = self.index().workload_keys().into_iter().collect();
        locked(&self.change_times).retain(|key| live.contains(key));
    }
}

/// The dynamic API resource of a workload kind of [`KINDS`].
pub(super) fn api_resource(kind: &str) -> ApiResource {
    let plural = KINDS
        .iter()
        .find(|(known, _)| *known == kind)
        .map_or("deployments", |(_, plural)| plural);
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("apps", "v1", kind), plural)
}
