//! A rollout's requests: the one it creates for a pod, and what a request says about its pod.
//! Pure functions of the objects.

use crr_crds::keys;
use crr_crds::rollout::{
    ContainerRecreateRollout, DEFAULT_POD_DEADLINE_SECONDS, RolloutRecreateStrategy, request_name,
};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainer, ContainerRecreateRequestSpec,
    Phase,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use super::plan::{PodRef, RequestState};

/// Where a request stands, for its rollout: in flight until finished (queued while nothing was
/// done to its containers yet); then succeeded when its `Succeeded` condition is True (or,
/// without the condition, when no container failed), and failed otherwise, naming the first
/// failed container.
pub fn request_state(crr: &ContainerRecreateRequest) -> RequestState {
    if !crr_crds::status::is_finished(crr) {
        if is_queued(crr) {
            return RequestState::Queued {
                resource_version: crr.resource_version().unwrap_or_default(),
            };
        }
        return RequestState::InFlight;
    }
    let Some(status) = &crr.status else {
        return RequestState::InFlight;
    };
    let failed_container = status
        .container_recreate_states
        .iter()
        .find(|state| state.phase == Phase::Failed);
    let succeeded = match crr.condition(keys::CONDITION_SUCCEEDED) {
        Some(condition) => condition.status == "True",
        None => failed_container.is_none(),
    };
    if succeeded {
        return RequestState::Succeeded;
    }
    let message = crr
        .condition(keys::CONDITION_SUCCEEDED)
        .map(|condition| condition.message.clone())
        .filter(|message| !message.is_empty())
        .or_else(|| failed_container.and_then(|state| state.message.clone()))
        .or_else(|| status.message.clone())
        .unwrap_or_else(|| "the request failed".to_owned());
    RequestState::Failed {
        container: failed_container.map(|state| state.name.clone()),
        message,
    }
}

/// Whether an unfinished request has done nothing to its containers yet: its phase is unset or
/// `Pending` and no container state has moved past `Pending`. The node daemon writes a
/// request's first state once its first container was stopped, so one whose first container is
/// in its preStop hook or being stopped still reads as queued: deleting it cancels the hook, and
/// a stop already sent still ends with the kubelet starting the container again.
pub(super) fn is_queued(crr: &ContainerRecreateRequest) -> bool {
    let Some(status) = &crr.status else {
        return true;
    };
    status.phase.is_none_or(|phase| phase == Phase::Pending)
        && status
            .container_recreate_states
            .iter()
            .all(|state| state.phase == Phase::Pending)
}

/// The UID of the pod a request of `rollout` was created for, read from its name
/// ([`request_name`]); `None` for a name the rollout did not give.
pub fn pod_uid<'a>(rollout: &str, request: &'a str) -> Option<&'a str> {
    request
        .strip_prefix(rollout)
        .and_then(|rest| rest.strip_prefix('-'))
        .filter(|uid| !uid.is_empty())
}

/// The request a rollout creates for a pod: named after the rollout and the pod's UID, owned by
/// the rollout (deleting the rollout deletes it), labelled with the rollout's name, for the
/// rollout's containers with its recreate strategy, a deadline (300 s unless the strategy
/// says) and the strategy's TTL. `None` when the rollout has no name or UID yet (it was never stored).
pub fn new_request(
    rollout: &ContainerRecreateRollout,
    pod: &PodRef,
) -> Option<ContainerRecreateRequest> {
    let owner: OwnerReference = rollout.controller_owner_ref(&())?;
    let name = rollout.metadata.name.as_deref()?;
    let strategy = rollout.spec.recreate_strategy.clone().unwrap_or_default();
    let RolloutRecreateStrategy {
        request: strategy,
        active_deadline_seconds,
        ttl_seconds_after_finished,
    } = strategy;
    Some(ContainerRecreateRequest {
        metadata: ObjectMeta {
            name: Some(request_name(name, &pod.uid)),
            namespace: rollout.namespace(),
            labels: Some([(keys::LABEL_ROLLOUT.to_owned(), name.to_owned())].into()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: ContainerRecreateRequestSpec {
            pod_name: pod.name.clone(),
            containers: rollout
                .spec
                .containers
                .iter()
                .map(|container| ContainerRecreateRequestContainer {
                    name: container.clone(),
                    ..ContainerRecreateRequestContainer::default()
                })
                .collect(),
            strategy: Some(strategy),
            active_deadline_seconds: Some(
                active_deadline_seconds.unwrap_or(DEFAULT_POD_DEADLINE_SECONDS),
            ),
            ttl_seconds_after_finished,
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_crds::rollout::{ContainerRecreateRolloutSpec, RolloutTarget, WorkloadRef};
    use crr_crds::v1beta1::ContainerRecreateRequestStrategy;

    fn rollout() -> ContainerRecreateRollout {
        let mut rollout = ContainerRecreateRollout::new(
            "nightly",
            ContainerRecreateRolloutSpec {
                target: RolloutTarget {
                    workload_ref: Some(WorkloadRef {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        name: "web".into(),
                    }),
                    selector: None,
                },
                containers: vec!["app".into(), "sidecar".into()],
                recreate_strategy: Some(RolloutRecreateStrategy {
                    request: ContainerRecreateRequestStrategy {
                        unready_grace_period_seconds: Some(2),
                        ..ContainerRecreateRequestStrategy::default()
                    },
                    active_deadline_seconds: None,
                    ttl_seconds_after_finished: Some(3600),
                }),
                ..ContainerRecreateRolloutSpec::default()
            },
        );
        rollout.metadata.namespace = Some("shop".into());
        rollout.metadata.uid = Some("rollout-uid".into());
        rollout
    }

    fn finished(value: serde_json::Value) -> ContainerRecreateRequest {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": "nightly-uid-1"},
            "spec": {"podName": "web-1", "containers": [{"name": "app"}]},
            "status": value,
        }))
        .expect("a request")
    }

    #[test]
    fn a_pods_request_is_owned_labelled_and_carries_the_strategy() {
        let pod = PodRef {
            name: "web-1".into(),
            uid: "pod-uid".into(),
        };
        let crr = new_request(&rollout(), &pod).expect("a request");
        assert_eq!(crr.name_any(), "nightly-pod-uid");
        assert_eq!(crr.namespace().as_deref(), Some("shop"));
        assert_eq!(crr.labels()[keys::LABEL_ROLLOUT], "nightly");
        let owner = &crr.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ContainerRecreateRollout", "rollout-uid", Some(true))
        );
        assert_eq!(crr.spec.pod_name, "web-1");
        let names: Vec<_> = crr
            .spec
            .containers
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["app", "sidecar"]);
        assert_eq!(
            crr.spec
                .strategy
                .as_ref()
                .unwrap()
                .unready_grace_period_seconds,
            Some(2)
        );
        assert_eq!(
            crr.spec.active_deadline_seconds,
            Some(DEFAULT_POD_DEADLINE_SECONDS)
        );
        assert_eq!(crr.spec.ttl_seconds_after_finished, Some(3600));
        assert_eq!(pod_uid("nightly", &crr.name_any()), Some("pod-uid"));
        assert_eq!(pod_uid("other", &crr.name_any()), None);
        assert_eq!(pod_uid("nightly", "nightly-"), None);
    }

    #[test]
    fn a_request_of_an_unstored_rollout_is_not_built() {
        let mut unstored = rollout();
        unstored.metadata.uid = None;
        let pod = PodRef {
            name: "web-1".into(),
            uid: "pod-uid".into(),
        };
        assert_eq!(new_request(&unstored, &pod), None);
    }

    #[test]
    fn request_states_follow_completion_and_the_succeeded_condition() {
        let at = "2026-11-27T00:00:00Z";
        assert_eq!(
            request_state(&finished(serde_json::json!({"phase": "Recreating"}))),
            RequestState::InFlight
        );
        let queued = RequestState::Queued {
            resource_version: "7".into(),
        };
        let mut fresh = finished(serde_json::json!({}));
        fresh.status = None;
        for unstarted in [
            fresh,
            finished(serde_json::json!({"phase": "Pending"})),
            finished(
                serde_json::json!({"phase": "Pending", "message": "waiting for another request",
                "containerRecreateStates": [{"name": "app", "phase": "Pending"}]}),
            ),
        ] {
            let mut unstarted = unstarted;
            unstarted.metadata.resource_version = Some("7".into());
            assert_eq!(request_state(&unstarted), queued);
        }
        assert_eq!(
            request_state(&finished(serde_json::json!({"phase": "Pending",
                "containerRecreateStates": [{"name": "app", "phase": "Recreating"}]}))),
            RequestState::InFlight
        );
        let condition = |status: &str, message: &str| {
            serde_json::json!([{"type": "Succeeded", "status": status, "reason": "R",
                                "message": message, "lastTransitionTime": at}])
        };
        assert_eq!(
            request_state(&finished(serde_json::json!({
                "phase": "Completed", "completionTime": at, "conditions": condition("True", "ok"),
            }))),
            RequestState::Succeeded
        );
        assert_eq!(
            request_state(&finished(serde_json::json!({
                "phase": "Completed", "completionTime": at,
                "conditions": condition("False", "app was not started again"),
                "containerRecreateStates": [{"name": "app", "phase": "Failed", "message": "exit 1"}],
            }))),
            RequestState::Failed {
                container: Some("app".into()),
                message: "app was not started again".into()
            }
        );
        // Without the condition (a request completed by an older version): the states decide.
        assert_eq!(
            request_state(&finished(serde_json::json!({
                "phase": "Completed", "completionTime": at,
                "containerRecreateStates": [{"name": "app", "phase": "Failed", "message": "exit 1"}],
            }))),
            RequestState::Failed {
                container: Some("app".into()),
                message: "exit 1".into()
            }
        );
        assert_eq!(
            request_state(&finished(serde_json::json!({
                "phase": "Completed", "completionTime": at,
                "containerRecreateStates": [{"name": "app", "phase": "Succeeded"}],
            }))),
            RequestState::Succeeded
        );
    }
}
