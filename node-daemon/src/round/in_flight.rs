//! A recreate in flight: what a round takes from its pod's live status, and when it looks again
//! by itself (`recreate::in_flight_look`).

use std::time::Duration;

use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestSyncContainerStatus, Phase,
};
use kube::ResourceExt as _;

use super::{Requests, Round, WriteError};
use crate::recreate;

/// What a round takes from its pod's live status.
#[derive(Default)]
pub(super) struct Live {
    /// The snapshot of the request's containers, when it differs from the recorded one.
    pub(super) snapshot: Option<Vec<ContainerRecreateRequestSyncContainerStatus>>,
    /// When the pod is next due a read past the node's pod watch, which lacks a successor.
    pub(super) next_read: Option<Duration>,
}

impl<R: Requests> Round<'_, R> {
    /// When a round that waits on a recreate in flight looks again by itself, with `by_time` the
    /// soonest moment only time changes its decision (`recreate::in_flight_look`).
    pub(super) fn in_flight_look(&self, by_time: Option<Duration>) -> Duration {
        recreate::in_flight_look(by_time, self.container_events.followed())
    }

    /// The snapshot of the request's containers as this node's pod watch shows them, when it
    /// differs from the recorded one and a killed container's successor runs (the only time a
    /// round reads the pod for it: is that successor Ready?); none otherwise, or when the pod
    /// is gone or replaced. With it, when the watched pod lacks a successor, the time to the
    /// next read past the watch (`watch_lag`).
    pub(super) async fn live_snapshot(
        &self,
        crr: &ContainerRecreateRequest,
        pod_uid: &str,
        containers: &[(String, crate::recreate::RuntimeContainer)],
    ) -> Result<Live, WriteError> {
        let Some(status) = crr.status.as_ref() else {
            return Ok(Live::default());
        };
        // The killed containers whose successor runs: each waits for the kubelet's Ready.
        let successors: Vec<&(String, crate::recreate::RuntimeContainer)> = status
            .container_recreate_states
            .iter()
            .filter(|state| state.is_killed && state.phase == Phase::Recreating)
            .filter_map(|state| {
                containers
                    .iter()
                    .find(|(name, container)| *name == state.name && container.running)
            })
            .collect();
        if successors.is_empty() {
            return Ok(Live::default());
        }
        let namespace = crr.namespace().unwrap_or_default();
        let Some(mut pod) = self.requests.pod(&namespace, &crr.spec.pod_name).await? else {
            return Ok(Live::default());
        };
        if pod.metadata.uid.as_deref() != Some(pod_uid) {
            return Ok(Live::default());
        }
        let read = self
            .read_past_lagging_watch(crr, &pod, &successors)
            .await
            .filter(|read| read.metadata.uid.as_deref() == Some(pod_uid));
        // Read past or not, the watch is what the next round has: it reads again on schedule
        // while the watch lacks a successor.
        let next_read = self.next_lagging_read(&pod, &successors);
        if let Some(read) = read {
            pod = read;
        }
        Ok(Live {
            snapshot: crr_crds::status::snapshot::update(
                &crr.spec.containers,
                &pod,
                &status.container_status_snapshot,
            ),
            next_read,
        })
    }
}
