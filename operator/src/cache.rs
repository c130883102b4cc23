//! What the request cache keeps of each request: the request wing fills it, and the rollout wing
//! reads its rollouts' requests from it.
//!
//! The operator caches every request of the cluster, finished ones too: it deletes them when
//! their `ttlSecondsAfterFinished` runs out. A finished request nobody deletes stays in the cache
//! for good, so a tenant who creates requests faster than their TTL removes them (or without a
//! TTL) grows every operator replica. Most of a request is of no use once it is *settled*:
//! finished, its `active` label removed (the operator has observed its outcome), holding no
//! finalizer and not being deleted. From then on the only thing the operator does with it is the
//! TTL deletion, and [`slim_settled`] keeps just what that and the metrics read: the identity
//! (name, namespace, UID, resourceVersion, creation time), the pod name, the deadlines and the
//! TTL, the phase and the completion time. Spec containers (with their preStop hooks),
//! annotations, labels, conditions and per-container states go.
//!
//! A settled request no rollout made does not even stay slim: it leaves the cache for the
//! settled index (`settled`), a few dozen bytes each. What stays in the cache settled is a request
//! a ContainerRecreateRollout created (labelled with the rollout's name), which keeps a little more:
//! that label, its controller owner reference (the rollout's UID), and its outcome (the `Succeeded` condition and the states of failed containers),
//! which the rollout's plan reads for as long as the rollout exists.
//!
//! An unfinished request is kept without the bulk a tenant can add to it (up to the webhook's
//! 256 KiB review cap), which no reconcile reads: 250 requests queued with 190 KiB annotations
//! are kept in about a kilobyte each, not 46 MiB.
//!
//! A settled request that changes again (say someone labels it active) arrives from the watch
//! whole, and is kept whole until it settles again: the decision is made on every object the
//! watch delivers, never on what the cache already holds.

use crr_crds::keys;
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestSpec, ContainerRecreateRequestStatus, Phase,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

/// Prepares a request for the cache (a `WatchStreamExt::modify` step): drops what a tenant can
/// make large and no reconcile reads (`crr_crds::slim::drop_tenant_bulk`: annotations, foreign
/// labels, the injected preStop and ports copies, `managedFields`) always, and everything but
/// what the TTL needs once the request is settled.
pub fn keep_what_reconciles_read(crr: &mut ContainerRecreateRequest) {
    crr_crds::slim::drop_tenant_bulk(crr);
    if is_settled(crr) {
        slim_settled(crr);
    }
}

/// Finished, no longer labelled active, holding no finalizer and not being deleted: the
/// operator's only remaining action on it is the TTL deletion.
pub fn is_settled(crr: &ContainerRecreateRequest) -> bool {
    crr_crds::status::is_finished(crr)
        && crr.metadata.deletion_timestamp.is_none()
        && crr.finalizers().is_empty()
        && !crr.labels().contains_key(keys::LABEL_ACTIVE)
}

/// Replaces a settled request by the few fields the reconcile plan and the cache metrics read of
/// it.
fn slim_settled(crr: &mut ContainerRecreateRequest) {
    let metadata = std::mem::take(&mut crr.metadata);
    let rollout = metadata
        .labels
        .and_then(|mut labels| labels.remove_entry(keys::LABEL_ROLLOUT));
    let of_a_rollout = rollout.is_some();
    crr.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        resource_version: metadata.resource_version,
        creation_timestamp: metadata.creation_timestamp,
        labels: rollout.map(|label| [label].into()),
        // Which rollout made it, by UID (`drop_tenant_bulk` kept only that reference): a rollout
        // made again under the same name is not it.
        owner_references: metadata.owner_references.filter(|_| of_a_rollout),
        ..ObjectMeta::default()
    };
    let spec = std::mem::take(&mut crr.spec);
    crr.spec = ContainerRecreateRequestSpec {
        pod_name: spec.pod_name,
        active_deadline_seconds: spec.active_deadline_seconds,
        ttl_seconds_after_finished: spec.ttl_seconds_after_finished,
        ..ContainerRecreateRequestSpec::default()
    };
    crr.status = crr
        .status
        .take()
        .map(|status| ContainerRecreateRequestStatus {
            phase: status.phase,
            completion_time: status.completion_time,
            conditions: if of_a_rollout {
                status
                    .conditions
                    .into_iter()
                    .filter(|condition| condition.type_ == keys::CONDITION_SUCCEEDED)
                    .collect()
            } else {
                Vec::new()
            },
            container_recreate_states: if of_a_rollout {
                status
                    .container_recreate_states
                    .into_iter()
                    .filter(|state| state.phase == Phase::Failed)
                    .collect()
            } else {
                Vec::new()
            },
            ..ContainerRecreateRequestStatus::default()
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::metrics::{
        count_by_phase, count_finished_without_ttl, count_past_deadline,
    };
    use crate::request::pod_events::requests_for_pod;
    use crate::request::reconcile::{needs_pod, plan};
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
    }

    /// A finished request as the API server serves it, with everything a real one carries.
    fn finished(ttl: Option<i32>, active: bool, finalizer: bool) -> ContainerRecreateRequest {
        let mut labels = BTreeMap::from([
            (keys::LABEL_POD_UID.to_owned(), "pod-uid-1".to_owned()),
            (keys::LABEL_NODE_NAME.to_owned(), "node-1".to_owned()),
        ]);
        if active {
            labels.insert(keys::LABEL_ACTIVE.to_owned(), "true".to_owned());
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "ContainerRecreateRequest",
            "metadata": {
                "name": "restart-app", "namespace": "tenant", "uid": "crr-uid-1",
                "resourceVersion": "42", "creationTimestamp": Time(at(0)),
                "labels": labels,
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(2000)},
                "finalizers": if finalizer { vec![keys::FINALIZER_UNREADY_ACQUIRED] } else { vec![] },
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:spec": {"f:podName": {}}}}],
            },
            "spec": {
                "podName": "web-0",
                "containers": [{"name": "app", "preStop": {"exec": {"command": ["sh", "-c", "sleep 5"]}},
                                "statusContext": {"containerID": "containerd://abc", "restartCount": 2}}],
                "strategy": {"failurePolicy": "Fail", "unreadyGracePeriodSeconds": 3},
                "activeDeadlineSeconds": 600,
                "ttlSecondsAfterFinished": ttl,
            },
            "status": {
                "phase": "Completed",
                "completionTime": Time(at(20)),
                "message": "",
                "containerRecreateStates": [{"name": "app", "phase": "Succeeded"}],
                "conditions": [Condition {
                    type_: keys::CONDITION_SUCCEEDED.to_owned(),
                    status: "True".to_owned(),
                    reason: "Recreated".to_owned(),
                    message: "recreated: app".to_owned(),
                    last_transition_time: Time(at(20)),
                    observed_generation: None,
                }],
            },
        }))
        .expect("a valid request")
    }

    fn cached(mut crr: ContainerRecreateRequest) -> ContainerRecreateRequest {
        keep_what_reconciles_read(&mut crr);
        crr
    }

    #[test]
    fn a_settled_request_keeps_only_what_the_ttl_needs() {
        let slim = cached(finished(Some(3600), false, false));
        assert_eq!(slim.metadata.name.as_deref(), Some("restart-app"));
        assert_eq!(slim.metadata.namespace.as_deref(), Some("tenant"));
        assert_eq!(slim.metadata.uid.as_deref(), Some("crr-uid-1"));
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(slim.metadata.creation_timestamp, Some(Time(at(0))));
        assert_eq!(slim.metadata.annotations, None);
        assert_eq!(slim.metadata.labels, None);
        assert_eq!(slim.metadata.managed_fields, None);
        assert_eq!(slim.spec.pod_name, "web-0");
        assert!(slim.spec.containers.is_empty());
        assert_eq!(slim.spec.strategy, None);
        assert_eq!(slim.spec.ttl_seconds_after_finished, Some(3600));
        assert_eq!(slim.spec.active_deadline_seconds, Some(600));
        let status = slim.status.expect("a status");
        assert_eq!(status.phase, Some(Phase::Completed));
        assert_eq!(status.completion_time, Some(Time(at(20))));
        assert!(status.conditions.is_empty() && status.container_recreate_states.is_empty());
        assert_eq!(status.message, None);
    }

    #[test]
    fn a_settled_request_of_a_rollout_keeps_its_rollout_and_outcome() {
        let mut whole = finished(Some(3600), false, false);
        whole
            .labels_mut()
            .insert(keys::LABEL_ROLLOUT.to_owned(), "nightly".to_owned());
        let owner = |uid: &str, controller: bool| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "crr.dev/v1alpha1".to_owned(),
                kind: "ContainerRecreateRollout".to_owned(),
                name: "nightly".to_owned(),
                uid: uid.to_owned(),
                controller: Some(controller),
                block_owner_deletion: None,
            }
        };
        whole.metadata.owner_references =
            Some(vec![owner("other", false), owner("nightly-uid", true)]);
        let status = whole.status.as_mut().expect("a status");
        status.container_recreate_states = serde_json::from_value(serde_json::json!([
            {"name": "app", "phase": "Succeeded"},
            {"name": "sidecar", "phase": "Failed", "message": "not started again"},
        ]))
        .expect("states");
        let slim = cached(whole.clone());
        assert_eq!(
            slim.metadata.labels,
            Some([(keys::LABEL_ROLLOUT.to_owned(), "nightly".to_owned())].into())
        );
        assert_eq!(
            slim.metadata.owner_references,
            Some(vec![owner("nightly-uid", true)]),
            "the rollout that made it, by UID"
        );
        let status = slim.status.as_ref().expect("a status");
        assert_eq!(status.conditions, whole.status.as_ref().unwrap().conditions);
        assert_eq!(status.container_recreate_states.len(), 1);
        assert_eq!(status.container_recreate_states[0].name, "sidecar");
        assert_eq!(
            crate::rollout::request_state(&slim),
            crate::rollout::request_state(&whole)
        );
    }

    #[test]
    fn a_request_the_operator_still_acts_on_loses_only_the_tenants_bulk() {
        let still_labelled = finished(Some(3600), true, false);
        let holding_the_pod = finished(Some(3600), false, true);
        let mut being_deleted = finished(Some(3600), false, false);
        being_deleted.metadata.deletion_timestamp = Some(Time(at(30)));
        let mut unfinished = finished(Some(3600), false, false);
        unfinished.status = None;
        unfinished.metadata.annotations = Some([("big".to_owned(), "a".repeat(190_000))].into());
        for crr in [still_labelled, holding_the_pod, being_deleted, unfinished] {
            let kept = cached(crr.clone());
            let mut expected = crr.clone();
            expected.metadata.managed_fields = None;
            expected.metadata.annotations = None;
            expected.spec.containers[0].pre_stop = None;
            assert_eq!(kept, expected);
            assert!(serde_json::to_vec(&kept).unwrap().len() < 1_500);
            assert_eq!(needs_pod(&kept), needs_pod(&crr));
            for now in [at(0), at(20), at(700), at(4_000)] {
                assert_eq!(plan(&kept, None, now), plan(&crr, None, now));
            }
        }
    }

    #[test]
    fn the_plan_for_a_settled_request_is_the_same_whole_or_slim() {
        for ttl in [None, Some(0), Some(30), Some(86_400)] {
            let whole = finished(ttl, false, false);
            let slim = cached(whole.clone());
            assert_eq!(needs_pod(&slim), needs_pod(&whole));
            for now in [at(20), at(49), at(50), at(51), at(100_000)] {
                assert_eq!(
                    plan(&slim, None, now),
                    plan(&whole, None, now),
                    "ttl {ttl:?}"
                );
            }
        }
    }

    #[test]
    fn the_cache_metrics_count_a_settled_request_the_same_whole_or_slim() {
        let whole: Vec<_> = [None, Some(30)]
            .into_iter()
            .map(|ttl| finished(ttl, false, false))
            .collect();
        let slim: Vec<_> = whole.iter().cloned().map(cached).collect();
        assert_eq!(count_by_phase(&slim), count_by_phase(&whole));
        assert_eq!(count_finished_without_ttl(&slim), 1);
        assert_eq!(count_finished_without_ttl(&whole), 1);
        assert_eq!(
            count_past_deadline(&slim, at(100_000)),
            count_past_deadline(&whole, at(100_000))
        );
        let pod = ObjectMeta {
            name: Some("web-0".to_owned()),
            namespace: Some("tenant".to_owned()),
            uid: Some("pod-uid-1".to_owned()),
            ..ObjectMeta::default()
        };
        let arcs = |requests: &[ContainerRecreateRequest]| -> Vec<Arc<_>> {
            requests.iter().cloned().map(Arc::new).collect()
        };
        assert!(requests_for_pod(&arcs(&slim), &pod).is_empty());
        assert!(requests_for_pod(&arcs(&whole), &pod).is_empty());
    }

    #[test]
    fn a_slim_request_is_a_small_fraction_of_the_whole() {
        let whole = finished(Some(3600), false, false);
        let slim = cached(whole.clone());
        let size = |crr: &ContainerRecreateRequest| serde_json::to_vec(crr).expect("json").len();
        assert!(
            size(&slim) * 5 < size(&whole),
            "slim {} bytes, whole {} bytes",
            size(&slim),
            size(&whole)
        );
    }
}
