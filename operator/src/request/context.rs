//! What every reconcile shares: the API client, Events, metrics, leadership, the pod memo and
//! the retry backoff.

use std::sync::Arc;
use std::time::Duration;

use crr_runtime::backoff::Backoff;
use crr_runtime::events::EventPublisher;
use kube::Client;
use tokio::sync::watch;

use crate::metrics::Metrics;

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
    pub pod_memo: Arc<crate::pod_memo::PodMemo>,
    /// Failed reconciles in a row, per request: their retries back off.
    pub backoff: Backoff,
}

/// The first retry of a failed reconcile comes after about this, doubling per failure in a row.
pub const RETRY_BASE: Duration = Duration::from_millis(500);
/// A failing request is retried at least this often.
pub const RETRY_CAP: Duration = Duration::from_secs(60);

impl Context {
    /// A context with no backoff history.
    pub fn new(
        client: Client,
        events: EventPublisher,
        metrics: Metrics,
        leader: watch::Receiver<bool>,
        pod_memo: Arc<crate::pod_memo::PodMemo>,
    ) -> Self {
        Self {
            client,
            events,
            metrics,
            leader,
            pod_memo,
            backoff: Backoff::new(RETRY_BASE, RETRY_CAP),
        }
    }

    /// Whether this replica holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }
}
