//! A round's read of the pod past the node's pod watch when the watch lags (`watch_lag`).

use std::time::{Duration, Instant};

use crr_crds::v1beta1::ContainerRecreateRequest;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;

use super::{Requests, Round};

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
        successors: &[&(String, crate::recreate::RuntimeContainer)],
    ) -> Option<Pod> {
        let now = jiff::Timestamp::now();
        // Every successor due a read is recorded as read: one read serves them all, and the
        // next comes on their schedule, not at once for the second.
        let due: Vec<(&String, Duration)> = successors
            .iter()
            .filter(|(name, successor)| {
                !crate::watch_lag::shows_container(watched, name, &successor.id)
            })
            .filter_map(|(name, successor)| {
                let running_for = now.duration_since(successor.started_at?);
                let running_for = Duration::try_from(running_for).ok()?;
                self.lagging_reads
                    .due(&successor.id, running_for, Instant::now())
                    .then_some((name, running_for))
            })
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
        successors: &[&(String, crate::recreate::RuntimeContainer)],
    ) -> Option<Duration> {
        let now = jiff::Timestamp::now();
        successors
            .iter()
            .filter(|(name, successor)| {
                !crate::watch_lag::shows_container(watched, name, &successor.id)
            })
            .filter_map(|(_, successor)| {
                let running_for = Duration::try_from(now.duration_since(successor.started_at?))
                    .unwrap_or(Duration::ZERO);
                Some(
                    self.lagging_reads
                        .next_read_in(&successor.id, running_for, Instant::now()),
                )
            })
            .min()
    }
}
