//! Triggers: rollouts started for a workload when a ConfigMap or Secret it uses changes, or on
//! a schedule, as its annotations ask (`annotations`). Every trigger creates a
//! ContainerRecreateRollout, so its work is visible, auditable and bounded by the same budgets.
//!
//! Pure decisions: `annotations` and `refs` (from `crr_crds::triggers`: what a workload asks
//! for, which containers use which object), `hash` (an object's data, hashed),
//! `config_change` (what changed since the workload's record, and whether to wait for the
//! running rollout), `schedule` (which tick runs). `index` keeps what the watches saw (which
//! workload uses which object, the versions seen, the hashes read), fed plain events;
//! `workload_view` is what the workload watch decodes of a Deployment, StatefulSet or DaemonSet
//! (identity, the triggers' annotations, the template's container names and the names of the
//! objects they use; nothing else). The I/O: `controller` (watches, queue), `evaluate` (reads,
//! the rollout, the record, Events); `record` (what the workload's TriggerRecord says, and what
//! writing it sends: the operator never writes the workload).

pub use crr_crds::triggers::{annotations, refs};
pub mod config_change;
pub mod context;
pub mod controller;
pub mod error;
mod evaluate;
mod first_lists;
pub mod hash;
pub mod index;
pub mod metrics;
pub mod queue;
pub mod record;
pub mod rollout;
pub mod schedule;
pub mod settle;
pub mod warnings;
pub mod workload_view;

use std::sync::Arc;

use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::trigger_record::TriggerRecord;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use kube::runtime::reflector::Store;

use crate::reconcile_errors::ReconcileErrors;
use crate::wing::WingContext;
use context::{TriggerContext, TriggerSettings};
use error::TriggerError;

/// Starts the trigger wing: its watches on every replica, its evaluations on the Lease holder,
/// to run until shutdown. `rollouts` is the rollout wing's cache (a running rollout of a
/// workload defers its next trigger); failed evaluations count in `errors` as
/// `controller="triggers"`. Until the ContainerRecreateRollout CRD is served (every trigger
/// creates a rollout) it waits and says so once.
pub fn start(
    wing: &WingContext,
    settings: TriggerSettings,
    rollouts: Store<ContainerRecreateRollout>,
    errors: &ReconcileErrors,
    metrics: metrics::TriggerMetrics,
) -> BoxFuture<'static, ()> {
    let ctx = Arc::new(TriggerContext::new(
        wing.client.clone(),
        wing.events.clone(),
        wing.leader.clone(),
        rollouts,
        settings,
        errors.controller("triggers", &TriggerError::KINDS),
        metrics,
    ));
    let wing = wing.clone();
    async move {
        if !wing
            .wait_until_served::<ContainerRecreateRollout>("triggers")
            .await
            || !wing.wait_until_served::<TriggerRecord>("triggers").await
        {
            return;
        }
        controller::run(
            ctx,
            wing.namespace.clone(),
            wing.became_leader(),
            wing.shutdown.requested(),
        )
        .await;
    }
    .boxed()
}
