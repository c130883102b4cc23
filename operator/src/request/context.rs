//! What every request reconcile shares (the request wing's context): the API client, Events, metrics, leadership, the pod memo and
//! the retry backoff.

use std::sync::Arc;

use crr_runtime::backoff::Backoff;
use crr_runtime::events::EventPublisher;
use kube::Client;
use tokio::sync::watch;

use crate::reconcile_errors::{RETRY_BASE, RETRY_CAP};
use crate::request::metrics::Metrics;

/// Shared state of all reconciles.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Publishes Events.
    pub events: EventPublisher,
    /// Metrics to update.
    pub metrics: Metrics,
    /// `true` while this replica holds the Lease.
    pub leader: watch::Receiver<bool>,
    /// The pods of requests in flight as last read (a reconcile reads a pod again only when
    /// the metadata watch reported a change).
    pub pod_memo: Arc<crate::request::pod_memo::PodMemo>,
    /// Failed reconciles in a row, per request: their retries back off.
    pub backoff: Backoff,
    /// The cached copies a write found stale: reconciled next from a read of the request.
    pub stale_copies: crate::request::stale_copies::StaleCopies,
}

impl Context {
    /// A context with no backoff history.
    pub fn new(
        client: Client,
        events: EventPublisher,
        metrics: Metrics,
        leader: watch::Receiver<bool>,
        pod_memo: Arc<crate::request::pod_memo::PodMemo>,
    ) -> Self {
        Self {
            client,
            events,
            metrics,
            leader,
            pod_memo,
            backoff: Backoff::new(RETRY_BASE, RETRY_CAP),
            stale_copies: Default::default(),
        }
    }

    /// Whether this replica holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }
}

/// A context whose client talks to the returned scripted API server, leading or not.
#[cfg(test)]
pub fn mocked(leader: bool) -> (Arc<Context>, crate::api_mock::Handle, watch::Sender<bool>) {
    let (client, handle) = crate::api_mock::client();
    let (leader_tx, leader_rx) = watch::channel(leader);
    let errors = crate::reconcile_errors::ReconcileErrors::default();
    let ctx = Context::new(
        client.clone(),
        EventPublisher::new(client, "crr-operator", "test"),
        Metrics::register(
            &mut prometheus_client::registry::Registry::default(),
            &errors,
        ),
        leader_rx,
        Arc::default(),
    );
    (Arc::new(ctx), handle, leader_tx)
}
