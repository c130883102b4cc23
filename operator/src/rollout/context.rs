//! What every rollout reconcile shares: the API client, the scoped pod watches, Events,
//! leadership, the request and PDB caches, the retry backoff, the metrics and the memory of announced budget waits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_runtime::backoff::Backoff;
use crr_runtime::events::EventPublisher;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use super::cluster_cap::Cap;
use super::metrics::RolloutMetrics;
use super::scoped_watches::ScopedWatches;
use crate::reconcile_errors::{ControllerErrors, RETRY_BASE, RETRY_CAP};

/// A budget wait is announced with an Event at most this often per rollout and PDB.
pub const BUDGET_EVENT_INTERVAL: Duration = Duration::from_secs(60);

/// What every rollout reconcile shares.
pub struct RolloutContext {
    /// API client.
    pub client: Client,
    /// The watches of the pods and ReplicaSets running rollouts read.
    pub watches: ScopedWatches,
    /// Publishes Events.
    pub events: EventPublisher,
    /// `true` while this replica holds the Lease.
    pub leader: watch::Receiver<bool>,
    /// The request controller's cache.
    pub requests: Store<ContainerRecreateRequest>,
    /// The PodDisruptionBudgets of the cluster (or of the watched namespace).
    pub budgets: Store<PodDisruptionBudget>,
    /// Failed reconciles in a row, per rollout.
    pub backoff: Backoff,
    /// The rollout metrics the leader updates.
    pub metrics: RolloutMetrics,
    /// Failed reconciles, by kind.
    pub errors: ControllerErrors,
    /// When a budget wait was last announced, per `namespace/rollout/pdb`.
    budget_events: Mutex<HashMap<String, Instant>>,
    /// The rollout cache and the most rollouts running at once (`cluster_cap`); `None`: no cap.
    pub cluster_cap: Option<(Store<ContainerRecreateRollout>, Cap)>,
}

impl RolloutContext {
    /// A context with no history.
    #[allow(clippy::too_many_arguments)] // The wing's shared parts, wired once in `rollout::start`.
    pub fn new(
        client: Client,
        watches: ScopedWatches,
        events: EventPublisher,
        leader: watch::Receiver<bool>,
        requests: Store<ContainerRecreateRequest>,
        budgets: Store<PodDisruptionBudget>,
        metrics: RolloutMetrics,
        errors: ControllerErrors,
    ) -> Self {
        Self {
            client,
            watches,
            events,
            leader,
            requests,
            budgets,
            metrics,
            errors,
            backoff: Backoff::new(RETRY_BASE, RETRY_CAP),
            budget_events: Mutex::new(HashMap::new()),
            cluster_cap: None,
        }
    }

    /// The context with the cluster's cap on running rollouts, counted from `rollouts`.
    pub fn with_cluster_cap(mut self, rollouts: Store<ContainerRecreateRollout>, cap: Cap) -> Self {
        self.cluster_cap = Some((rollouts, cap));
        self
    }

    pub(super) fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Whether to announce a wait on `key` now (at most once per [`BUDGET_EVENT_INTERVAL`]).
    pub(super) fn budget_event_due(&self, key: String) -> bool {
        let mut announced = self
            .budget_events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        announced.retain(|_, at| now.duration_since(*at) < BUDGET_EVENT_INTERVAL);
        if announced.contains_key(&key) {
            return false;
        }
        announced.insert(key, now);
        true
    }
}
