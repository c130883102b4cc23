//! Every well-known name of the ContainerRecreateRequest API in one place: the API group and
//! versions, the labels, annotations and finalizer the system writes, condition types and the
//! readiness-gate holder identity. Components import these; nobody spells a key twice.

/// API group of the ContainerRecreateRequest resource.
pub const GROUP: &str = "apps.kruise.io";
/// The legacy version, served but not stored.
pub const V1ALPHA1: &str = "v1alpha1";
/// The storage version and the hub of conversion.
pub const V1BETA1: &str = "v1beta1";
/// Kind of the resource.
pub const KIND: &str = "ContainerRecreateRequest";
/// Plural resource name.
pub const PLURAL: &str = "containerrecreaterequests";
/// Name of the CustomResourceDefinition object.
pub const CRD_NAME: &str = "containerrecreaterequests.apps.kruise.io";

/// Label `"true"` while the CRR is unfinished; removed by the operator on completion.
pub const LABEL_ACTIVE: &str = "crr.apps.kruise.io/active";
/// Label with the target pod's node name (immutable; the node daemon selects on it).
pub const LABEL_NODE_NAME: &str = "crr.apps.kruise.io/node-name";
/// The label selector of one node's active requests: what that node's daemon watches.
pub fn active_on_node_selector(node: &str) -> String {
    format!("{LABEL_NODE_NAME}={node},{LABEL_ACTIVE}=true")
}

/// Label with the target pod's UID (immutable; a mismatch means the pod was replaced).
pub const LABEL_POD_UID: &str = "crr.apps.kruise.io/pod-uid";

/// Pod label (ours) marking pods that carry the `KruisePodReady` readiness gate because crr
/// injected it; the operator starts their gate condition at True.
pub const LABEL_READINESS_GATE: &str = "crr.apps.kruise.io/readiness-gate";

/// v1alpha1 annotation carrying `status.containerStatusSnapshot` as a JSON list.
pub const ANNOTATION_SYNC_CONTAINER_STATUSES: &str = "crr.apps.kruise.io/sync-container-statuses";
/// v1alpha1 annotation carrying the `PreRecreateGrace` condition's time (RFC3339).
pub const ANNOTATION_UNREADY_ACQUIRED: &str = "crr.apps.kruise.io/unready-acquired";
/// v1alpha1 annotation (ours) carrying v1beta1 conditions the legacy annotation cannot express,
/// so that v1beta1 → v1alpha1 → v1beta1 loses nothing.
pub const ANNOTATION_STATUS_CONDITIONS: &str = "crr.apps.kruise.io/status-conditions";

/// Finalizer held while the CRR holds its pod not-ready.
pub const FINALIZER_UNREADY_ACQUIRED: &str = "crr.apps.kruise.io/unready-acquired";

/// v1beta1 condition: the pod was made not-ready and the unready grace period started.
pub const CONDITION_PRE_RECREATE_GRACE: &str = "PreRecreateGrace";
/// Reason written with the `PreRecreateGrace` condition.
pub const REASON_PRE_RECREATE_GRACE: &str = "PreRecreateGrace";
/// Message written with the `PreRecreateGrace` condition (upstream's text).
pub const MESSAGE_PRE_RECREATE_GRACE: &str =
    "Pod has been forced to not-ready for unreadyGracePeriodSeconds drain";
/// v1beta1 condition (ours): True while the request waits behind another request of its pod;
/// present only while it waits (the node daemon's write that moves it on removes it).
pub const CONDITION_QUEUED: &str = "Queued";
/// Reason of `Queued=True`.
pub const REASON_WAITING_FOR_REQUEST: &str = "WaitingForRequest";
/// v1beta1 condition (ours): the CRR's overall outcome once Completed.
pub const CONDITION_SUCCEEDED: &str = "Succeeded";
/// Reason of `Succeeded=False` when the operator completed the request because its pod is gone
/// (deleted, terminating, or replaced under the same name).
pub const REASON_POD_GONE: &str = "PodGone";

/// Pod condition type of the readiness gate a CRR flips to take the pod out of endpoints.
pub const POD_CONDITION_KRUISE_POD_READY: &str = "KruisePodReady";
/// `userAgent` of a CRR's entry in the `KruisePodReady` holder list.
pub const READINESS_USER_AGENT: &str = "ContainerRecreateRequest";

/// Kubelet's CRI label with the pod UID of a container.
pub const CRI_LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
/// Kubelet's CRI label with the container name.
pub const CRI_LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Kubelet's CRI label with the pod name.
pub const CRI_LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
/// Kubelet's CRI label with the pod namespace.
pub const CRI_LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Kubelet's CRI annotation with the container's restart count.
pub const CRI_ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";

/// API group of the ContainerRecreateRollout resource (ours).
pub const ROLLOUT_GROUP: &str = "crr.dev";
/// The one version of the ContainerRecreateRollout resource.
pub const ROLLOUT_VERSION: &str = "v1alpha1";
/// Kind of the rollout resource.
pub const ROLLOUT_KIND: &str = "ContainerRecreateRollout";
/// Plural resource name of the rollout resource.
pub const ROLLOUT_PLURAL: &str = "containerrecreaterollouts";
/// Name of the rollout's CustomResourceDefinition object.
pub const ROLLOUT_CRD_NAME: &str = "containerrecreaterollouts.crr.dev";
/// Label on a request a rollout created: the rollout's name (the operator selects on it).
pub const LABEL_ROLLOUT: &str = "crr.dev/rollout";
/// Rollout condition: the rollout is (or may be) starting pods; its reason says what it waits on.
pub const CONDITION_ROLLOUT_PROGRESSING: &str = "Progressing";
/// Rollout condition: every target pod was recreated, or failed within `maxFailedPods`.
pub const CONDITION_ROLLOUT_COMPLETE: &str = "Complete";
/// Rollout condition: the rollout ended without finishing (`FailureLimit`, `TargetGone`).
pub const CONDITION_ROLLOUT_FAILED: &str = "Failed";
/// Rollout condition for kstatus (Flux): True while the rollout runs and is not paused.
pub const CONDITION_ROLLOUT_RECONCILING: &str = "Reconciling";
/// Rollout condition for kstatus (Flux): True once the rollout ended `Failed` or `Aborted`.
pub const CONDITION_ROLLOUT_STALLED: &str = "Stalled";

/// Workload annotation: `"true"` makes a change of the data of a ConfigMap or Secret its pod
/// template uses start a rollout of the containers that use it.
pub const ANNOTATION_RECREATE_ON_CONFIG_CHANGE: &str = "crr.dev/recreate-on-config-change";
/// Workload annotation: the `maxUnavailable` of the rollouts its triggers start (default 1).
pub const ANNOTATION_RECREATE_MAX_UNAVAILABLE: &str = "crr.dev/recreate-max-unavailable";
/// Workload annotation: a cron schedule (five fields, as a CronJob's) of rollouts.
pub const ANNOTATION_RECREATE_SCHEDULE: &str = "crr.dev/recreate-schedule";
/// Workload annotation: the IANA time zone of `crr.dev/recreate-schedule` (default UTC).
pub const ANNOTATION_RECREATE_SCHEDULE_TIMEZONE: &str = "crr.dev/recreate-schedule-timezone";
/// Workload annotation: the containers a scheduled rollout recreates, comma-separated (default:
/// every regular container).
pub const ANNOTATION_RECREATE_CONTAINERS: &str = "crr.dev/recreate-containers";
/// Workload annotation: any new value restarts the containers (`crr.dev/recreate-containers`,
/// default all) in place, once per value; `kubectl crr rollout restart` sets it.
pub const ANNOTATION_RESTART_REQUESTED_AT: &str = "crr.dev/restart-requested-at";
/// Workload annotation the operator wrote before the TriggerRecord: the hashes of the data of the
/// ConfigMaps and Secrets last rolled out (JSON object, `configmap/<name>` or `secret/<name>` to
/// hash). Read once, as the record of a workload that has none.
pub const ANNOTATION_CONFIG_HASHES: &str = "crr.dev/config-hashes";
/// Workload annotation the operator wrote before the TriggerRecord: the schedule tick last acted
/// on (RFC 3339). Read once, as the record of a workload that has none.
pub const ANNOTATION_LAST_SCHEDULED: &str = "crr.dev/last-scheduled";
/// Workload annotation: when the triggers may start rollouts (`Mon-Fri 01:00-05:00`, in the
/// schedule's time zone).
pub const ANNOTATION_RECREATE_WINDOW: &str = "crr.dev/recreate-window";
/// Kind of the record of a workload's triggers (group [`ROLLOUT_GROUP`], [`ROLLOUT_VERSION`]).
pub const TRIGGER_RECORD_KIND: &str = "TriggerRecord";
/// Plural of [`TRIGGER_RECORD_KIND`].
pub const TRIGGER_RECORD_PLURAL: &str = "triggerrecords";
/// Name of the TriggerRecord CRD.
pub const TRIGGER_RECORD_CRD_NAME: &str = "triggerrecords.crr.dev";
/// Label on a rollout a trigger created: `config-change`, `schedule` or `restart`.
pub const LABEL_ROLLOUT_TRIGGER: &str = "crr.dev/trigger";
/// Label on a rollout a trigger created: the UID of the workload it restarts.
pub const LABEL_WORKLOAD_UID: &str = "crr.dev/workload-uid";
/// Annotation on a rollout `kubectl crr rollout retry` created: the rollout it retries.
pub const ANNOTATION_RETRY_OF: &str = "crr.dev/retry-of";
/// Annotation on a rollout a trigger created: what started it, for people.
pub const ANNOTATION_CAUSE: &str = "crr.dev/cause";
/// Reloader's annotation: restart on a change of any ConfigMap or Secret the template uses.
pub const RELOADER_AUTO: &str = "reloader.stakater.com/auto";
/// Reloader's annotation: restart on a change of these ConfigMaps (comma-separated).
pub const RELOADER_CONFIGMAPS: &str = "configmap.reloader.stakater.com/reload";
/// Reloader's annotation: restart on a change of these Secrets (comma-separated).
pub const RELOADER_SECRETS: &str = "secret.reloader.stakater.com/reload";
/// Reloader's workload annotations crr does not read: its search mode, its typed `auto`s, its
/// rollout strategy. A workload carrying one is told so (with Reloader's annotations honoured).
pub const RELOADER_NOT_READ: [&str; 4] = [
    "reloader.stakater.com/search",
    "configmap.reloader.stakater.com/auto",
    "secret.reloader.stakater.com/auto",
    "reloader.stakater.com/rollout-strategy",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_daemon_selects_its_nodes_active_requests_by_upstreams_labels() {
        assert_eq!(
            active_on_node_selector("node-1"),
            "crr.apps.kruise.io/node-name=node-1,crr.apps.kruise.io/active=true"
        );
    }
}
