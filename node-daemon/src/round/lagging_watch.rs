//! A round's read of the pod past the node's pod watch when the watch lags (`watch_lag`).

use std::time::{Duration, Instant};

use crr_crds::v1beta1::ContainerRecreateRequest;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;

use super::{Requests, Round};
use crate::recreate::RuntimeContainer;

/// The `successors` (running successors of killed containers) that `watched` does not show, by
/// name, each with its runtime ID and how long it has run by the runtime's clock (zero for a
/// start ahead of now); those without a start time are left out.
fn missing_from_watch<'a>(
    watched: &'a Pod,
    successors: &'a [&'a (String, RuntimeContainer)],
) -> impl Iterator<Item = (&'a String, &'a str, Duration)> {
    let now = jiff::Timestamp::now();
    successors
        .iter()
        .filter(|(name, successor)| {
            !crate::watch_lag::shows_container(watched, name, &successor.id)
        })
        .filter_map(move |(name, successor)| {
            let running_for = Duration::try_from(now.duration_since(successor.started_at?))
                .unwrap_or(Duration::ZERO);
            Some((name, successor.id.as_str(), running_for))
        })
}

impl<R: Requests> Round<'_, R> {
    /// The pod read from the API server when the node's pod watch lags (`watch_lag`): one of
    /// `successors` (the running successors of killed containers) has run
    /// [`watch_lag::BEHIND_AFTER`] by the runtime, and `watched` still lacks it. `None` while the watch is in step, between two reads, or when the read
    /// fails.
    ///
    /// [`watch_lag::BEHIND_AFTER`]: crate::watch_lag::BEHIND_AFTER
    pub(super) async fn read_past_lagging_watch(
        &self,
        crr: &ContainerRecreateRequest,
        watched: &Pod,
        successors: &[&(String, RuntimeContainer)],
    ) -> Option<Pod> {
        // Every successor due a read is recorded as read: one read serves them all, and the
        // next comes on their schedule, not at once for the second.
        let due: Vec<(&String, Duration)> = missing_from_watch(watched, successors)
            .filter(|(_, id, running_for)| self.lagging_reads.due(id, *running_for, Instant::now()))
            .map(|(name, _, running_for)| (name, running_for))
            .collect();
        let (container, running_for) = *due.first()?;
        tracing::info!(
            %container,
            running_ms = running_for.as_millis() as u64,
            "the node's pod watch does not show the new container yet: reading the pod"
        );
        self.metrics.pod_reads_past_watch.inc();
        let namespace = crr.namespace().unwrap_or_default();
        // A read that fails (the API server away) leaves the round to the watched pod: the
        // next read comes on the schedule, and the round does not fail into its own backoff.
        self.requests
            .read_pod(&namespace, &crr.spec.pod_name)
            .await
            .inspect_err(|error| tracing::debug!(%error, "reading the pod past the watch"))
            .ok()
            .flatten()
    }

    /// How long until the pod is due its next read past the watch (`watch_lag`): the soonest
    /// over `successors` that `watched` lacks; `None` when it shows them all, or their start
    /// times are unknown.
    pub(super) fn next_lagging_read(
        &self,
        watched: &Pod,
        successors: &[&(String, RuntimeContainer)],
    ) -> Option<Duration> {
        missing_from_watch(watched, successors)
            .map(|(_, id, running_for)| {
                self.lagging_reads
                    .next_read_in(id, running_for, Instant::now())
            })
            .min()
    }
}
