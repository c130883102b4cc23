//! The rollout wing: the ContainerRecreateRollout controller. It restarts the named containers
//! of a workload's pods in place, a few pods at a time, through one ContainerRecreateRequest per
//! pod, never breaking a PodDisruptionBudget.
//!
//! Pure: [`decide`] returns a reconcile's steps, from [`plan`] (which pods start now),
//! [`request`] (the requests it creates, and what a request's state means to it) and [`status`]
//! (the status and Events). At the edges: [`world`] reads the target's pods (from the watches
//! of [`scoped_watches`]) and budgets,
//! [`executor`] carries a decision out, [`controller`] wires the watches, the reconcile and the
//! error policy; [`metrics`] and [`error`] are the wing's metrics and error type.

pub mod cluster_cap;
pub mod context;
pub mod controller;
pub mod decide;
pub mod error;
pub mod executor;
pub mod metrics;
pub mod plan;
pub mod ready_flips;
pub mod request;
pub mod scoped_watches;
pub mod status;
pub mod world;

pub use request::request_state;

use std::sync::Arc;

use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::v1beta1::ContainerRecreateRequest;
use futures::future::BoxFuture;
use futures::{FutureExt as _, Stream, StreamExt as _};
use kube::runtime::reflector::Store;
use prometheus_client::registry::Registry;

use crate::pod_view::PodReadiness;
use crate::reconcile_errors::ReconcileErrors;
use crate::wing::WingContext;
use context::RolloutContext;
use error::Error;
use metrics::{RolloutCollector, RolloutMetrics};

/// The rollout wing, started.
pub struct RolloutWing {
    /// The rollout cache, which the trigger wing reads (a running rollout of a workload defers
    /// its next trigger).
    pub rollouts: Store<ContainerRecreateRollout>,
    /// The watches and the controller: run it until shutdown.
    pub work: BoxFuture<'static, ()>,
}

/// Starts the rollout wing over the request wing's cache (`requests`) and its changes
/// (`request_changes`): registers its metrics in `registry` (its reconcile errors as
/// `controller="rollout"`). Until the ContainerRecreateRollout CRD is served it waits, says so
/// once, and lets the request changes pass.
pub fn start(
    wing: &WingContext,
    requests: Store<ContainerRecreateRequest>,
    request_changes: impl Stream<Item = Arc<ContainerRecreateRequest>> + Send + 'static,
    pod_readiness: impl Stream<Item = PodReadiness> + Send + 'static,
    cap: cluster_cap::Cap,
    registry: &mut Registry,
    errors: &ReconcileErrors,
) -> RolloutWing {
    let namespace = wing.namespace.as_deref();
    let (budgets, budget_changes) = controller::budget_watch(wing.client.clone(), namespace);
    let (rollouts, rollout_changes, slots_freed) =
        controller::rollout_watch(wing.client.clone(), namespace);
    registry.register_collector(Box::new(RolloutCollector::new({
        let rollouts = rollouts.clone();
        move || rollouts.state()
    })));
    let (watches, pod_changes) = scoped_watches::ScopedWatches::new(wing.client.clone());
    let context = Arc::new(
        RolloutContext::new(
            wing.client.clone(),
            watches,
            wing.events.clone(),
            wing.leader.clone(),
            requests,
            budgets,
            RolloutMetrics::register(registry),
            errors.controller("rollout", &Error::KINDS),
        )
        .with_cluster_cap(rollouts.clone(), cap),
    );
    let wing = wing.clone();
    let store = rollouts.clone();
    let work = async move {
        let mut request_changes = Box::pin(request_changes);
        let served = tokio::select! {
            served = wing.wait_until_served::<ContainerRecreateRollout>("rollout") => served,
            // Nobody reads them yet: the request wing must not wait on this one.
            () = request_changes.by_ref().for_each(|_| futures::future::ready(())) => false,
        };
        if !served {
            return;
        }
        let shared = context.clone();
        let controller = controller::run(
            context,
            store,
            rollout_changes,
            request_changes,
            budget_changes,
            pod_readiness,
            pod_changes,
            slots_freed,
            wing.became_leader(),
            wing.shutdown.requested(),
        );
        tokio::select! {
            () = controller => {}
            () = shared.watches.stop_idle_forever() => {}
        }
    }
    .boxed();
    RolloutWing { rollouts, work }
}
