//! `status.containerStatusSnapshot`: the copy of the pod's container statuses that tells kubelet
//! progress (is the new container Ready?). The operator writes it while a request recreates; the
//! node daemon computes the same from its own watch of the node's pods, so that a recreate
//! completes when the kubelet reports the new container Ready, not when the operator's write of
//! it comes (a busy operator is no longer on a recreate's path), and writes it with the
//! completion.
//!
//! A container enters the snapshot only when it is running *and* it is a new container: its ID
//! differs from the one recorded in `statusContext` at creation, or its restart count is higher.
//! Upstream instead compares the container's `startedAt` (node clock) with the CRR's
//! `creationTimestamp` (API server clock), which drops genuinely new containers when the node's
//! clock is behind (kruise issue 895); IDs and counters come from one source and cannot skew.
//!
//! A container that is between exit and restart keeps its last entry, so the snapshot does not
//! flap while the kubelet restarts it. This module does not decide when to write; it only says
//! what the snapshot should be and whether that differs from the stored one.

use crate::v1beta1::{
    ContainerRecreateRequestContainer, ContainerRecreateRequestContainerContext,
    ContainerRecreateRequestSyncContainerStatus,
};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// Whether the pod's container is a different container from the one the CRR was made for.
/// Without a recorded context (the webhook did not run) every running container counts; the
/// daemon compares IDs itself, so an old container in the snapshot is harmless.
pub fn is_new_container(
    status: &ContainerStatus,
    context: Option<&ContainerRecreateRequestContainerContext>,
) -> bool {
    let Some(context) = context else {
        return true;
    };
    let container_id = status.container_id.as_deref().unwrap_or_default();
    (!container_id.is_empty() && container_id != context.container_id)
        || status.restart_count > context.restart_count
}

fn is_running(status: &ContainerStatus) -> bool {
    status
        .state
        .as_ref()
        .is_some_and(|state| state.running.is_some())
}

/// A named container's status, among regular containers first, then init containers (native
/// sidecars are init containers with `restartPolicy: Always`).
fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    [&status.container_statuses, &status.init_container_statuses]
        .into_iter()
        .flatten()
        .flatten()
        .find(|container| container.name == name)
}

/// The snapshot for the CRR's containers, in the CRR's container order.
pub fn compute(
    containers: &[ContainerRecreateRequestContainer],
    pod: &Pod,
    previous: &[ContainerRecreateRequestSyncContainerStatus],
) -> Vec<ContainerRecreateRequestSyncContainerStatus> {
    containers
        .iter()
        .filter_map(|container| {
            let current = container_status(pod, &container.name).filter(|status| {
                is_running(status) && is_new_container(status, container.status_context.as_ref())
            });
            match current {
                Some(status) => Some(ContainerRecreateRequestSyncContainerStatus {
                    name: container.name.clone(),
                    ready: status.ready,
                    restart_count: status.restart_count,
                    container_id: status.container_id.clone().unwrap_or_default(),
                }),
                None => previous
                    .iter()
                    .find(|entry| entry.name == container.name)
                    .cloned(),
            }
        })
        .collect()
}

/// Whether `snapshot` shows every one of `containers` as a new container, Ready. With no
/// `minStartedSeconds` to wait, that is what the node daemon completes a request on, reading it
/// from its own watch of the node's pods, and it writes this snapshot with the completion: the
/// operator then leaves that write to the daemon (two status writes of one request at the same
/// moment would make one of them a conflict, and a write more).
pub fn shows_all_ready(
    containers: &[ContainerRecreateRequestContainer],
    snapshot: &[ContainerRecreateRequestSyncContainerStatus],
) -> bool {
    containers.iter().all(|container| {
        snapshot
            .iter()
            .any(|entry| entry.name == container.name && entry.ready)
    })
}

/// The snapshot to write, or `None` when the stored one is already right.
pub fn update(
    containers: &[ContainerRecreateRequestContainer],
    pod: &Pod,
    previous: &[ContainerRecreateRequestSyncContainerStatus],
) -> Option<Vec<ContainerRecreateRequestSyncContainerStatus>> {
    let next = compute(containers, pod, previous);
    (next != previous).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn requested(name: &str, id: &str, restarts: i32) -> ContainerRecreateRequestContainer {
        ContainerRecreateRequestContainer {
            name: name.to_owned(),
            status_context: Some(ContainerRecreateRequestContainerContext {
                container_id: id.to_owned(),
                restart_count: restarts,
            }),
            ..Default::default()
        }
    }

    fn running(name: &str, id: &str, restarts: i32, ready: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.to_owned(),
            container_id: Some(id.to_owned()),
            restart_count: restarts,
            ready,
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    // Deliberately long before any CRR: start times are never compared.
                    started_at: Some(Time(Timestamp::from_second(0).unwrap())),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn exited(name: &str, id: &str, restarts: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.to_owned(),
            container_id: Some(id.to_owned()),
            restart_count: restarts,
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(statuses: Vec<ContainerStatus>) -> Pod {
        Pod {
            status: Some(PodStatus {
                container_statuses: Some(statuses),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn entry(
        name: &str,
        id: &str,
        restarts: i32,
        ready: bool,
    ) -> ContainerRecreateRequestSyncContainerStatus {
        ContainerRecreateRequestSyncContainerStatus {
            name: name.to_owned(),
            ready,
            restart_count: restarts,
            container_id: id.to_owned(),
        }
    }

    #[test]
    fn old_container_is_left_out_even_when_it_runs() {
        let containers = [requested("app", "containerd://old", 0)];
        let pod = pod(vec![running("app", "containerd://old", 0, true)]);
        assert_eq!(compute(&containers, &pod, &[]), vec![]);
    }

    #[test]
    fn new_container_id_enters_regardless_of_start_time() {
        let containers = [requested("app", "containerd://old", 0)];
        let pod = pod(vec![running("app", "containerd://new", 1, false)]);
        assert_eq!(
            compute(&containers, &pod, &[]),
            vec![entry("app", "containerd://new", 1, false)]
        );
    }

    #[test]
    fn higher_restart_count_counts_as_new_with_the_same_id() {
        let containers = [requested("app", "containerd://same", 2)];
        let pod = pod(vec![running("app", "containerd://same", 3, true)]);
        assert_eq!(
            compute(&containers, &pod, &[]),
            vec![entry("app", "containerd://same", 3, true)]
        );
    }

    #[test]
    fn exited_container_keeps_its_last_entry() {
        let containers = [requested("app", "containerd://old", 0)];
        let previous = [entry("app", "containerd://new", 1, true)];
        let pod = pod(vec![exited("app", "containerd://new", 1)]);
        assert_eq!(compute(&containers, &pod, &previous), previous.to_vec());
        assert_eq!(update(&containers, &pod, &previous), None);
    }

    #[test]
    fn snapshot_follows_crr_container_order_and_skips_missing_containers() {
        let containers = [
            requested("sidecar", "containerd://s0", 0),
            requested("app", "containerd://a0", 0),
            requested("gone", "containerd://g0", 0),
        ];
        let pod = pod(vec![
            running("app", "containerd://a1", 1, true),
            running("sidecar", "containerd://s1", 1, false),
        ]);
        assert_eq!(
            compute(&containers, &pod, &[]),
            vec![
                entry("sidecar", "containerd://s1", 1, false),
                entry("app", "containerd://a1", 1, true),
            ]
        );
    }

    #[test]
    fn native_sidecar_status_is_found_among_init_containers() {
        let containers = [requested("proxy", "containerd://p0", 0)];
        let pod = Pod {
            status: Some(PodStatus {
                init_container_statuses: Some(vec![running("proxy", "containerd://p1", 1, true)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            compute(&containers, &pod, &[]),
            vec![entry("proxy", "containerd://p1", 1, true)]
        );
    }

    #[test]
    fn update_reports_only_changes() {
        let containers = [requested("app", "containerd://old", 0)];
        let pod = pod(vec![running("app", "containerd://new", 1, true)]);
        let stale = [entry("app", "containerd://new", 1, false)];
        assert_eq!(
            update(&containers, &pod, &stale),
            Some(vec![entry("app", "containerd://new", 1, true)])
        );
        let fresh = [entry("app", "containerd://new", 1, true)];
        assert_eq!(update(&containers, &pod, &fresh), None);
    }

    #[test]
    fn without_status_context_a_running_container_is_reported() {
        let containers = [ContainerRecreateRequestContainer {
            name: "app".to_owned(),
            ..Default::default()
        }];
        let pod = pod(vec![running("app", "containerd://x", 0, true)]);
        assert_eq!(compute(&containers, &pod, &[]).len(), 1);
    }

    #[test]
    fn all_ready_only_when_every_requested_container_has_a_ready_entry() {
        let containers = [
            requested("app", "containerd://a1", 0),
            requested("sidecar", "containerd://s1", 0),
        ];
        let entry = |name: &str, ready: bool| ContainerRecreateRequestSyncContainerStatus {
            name: name.to_owned(),
            ready,
            restart_count: 1,
            container_id: format!("containerd://{name}2"),
        };
        assert!(shows_all_ready(
            &containers,
            &[entry("app", true), entry("sidecar", true)]
        ));
        assert!(!shows_all_ready(
            &containers,
            &[entry("app", true), entry("sidecar", false)]
        ));
        assert!(
            !shows_all_ready(&containers, &[entry("app", true)]),
            "sidecar not back yet"
        );
        assert!(!shows_all_ready(&containers, &[]));
        assert!(
            shows_all_ready(&[], &[]),
            "nothing requested: nothing to wait for"
        );
    }
}
