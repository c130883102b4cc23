//! `crr.dev/v1alpha1` TriggerRecord: what the operator's triggers last did for one workload, kept
//! in an object crr owns, beside the workload, instead of on it.
//!
//! One record per workload that carries a trigger annotation, in the workload's namespace, named
//! after it ([`record_name`]) and owned by it (`ownerReferences`, so that the garbage collector
//! deletes it with the workload). Like a Lease, the record is the writer's state: the operator
//! writes its `spec` with server-side apply, and nobody else writes it. Before it, the operator
//! kept the same two facts in the workload's annotations `crr.dev/config-hashes` and
//! `crr.dev/last-scheduled`: a workload without a record still has them read once, as its record
//! (`operator/src/triggers/record.rs`).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::keys;

/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// TriggerRecordSpec is what the operator's triggers last did for one workload.
#[allow(clippy::duplicated_attributes)] // kube takes one `derive = ...` and `type_` per column.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "crr.dev",
    version = "v1alpha1",
    kind = "TriggerRecord",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    doc = "TriggerRecord is what crr's triggers last did for one workload: the data of the ConfigMaps and Secrets last rolled out (and a change that waits for the restart window), the schedule tick and the requested restart last acted on. Written by the crr operator; deleted with its workload.",
    printcolumn(
        name = "WORKLOAD",
        type_ = "string",
        json_path = ".spec.workload.name",
        description = "The workload the record is of."
    ),
    printcolumn(
        name = "KIND",
        type_ = "string",
        json_path = ".spec.workload.kind",
        description = "The workload's kind."
    ),
    printcolumn(
        name = "PENDING-UNTIL",
        type_ = "string",
        json_path = ".spec.pendingChange.runsAt",
        description = "When a config change that waits for the restart window is rolled out (RFC 3339: a date column would print a time to come as <invalid>)."
    ),
    printcolumn(
        name = "LAST-SCHEDULED",
        type_ = "date",
        json_path = ".spec.lastScheduled",
        description = "The schedule tick last acted on."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created."
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TriggerRecordSpec {
    /// Workload is the Deployment, StatefulSet or DaemonSet the record is of.
    pub workload: RecordedWorkload,
    /// ConfigHashes maps each ConfigMap and Secret the workload's pods run with
    /// (`configmap/<name>`, `secret/<name>`) to the hash of its data last rolled out. Absent until
    /// the config-change trigger first looks at the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hashes: Option<BTreeMap<String, String>>,
    /// LastScheduled is the schedule tick last acted on (RFC 3339): rolled out, or skipped.
    /// Absent until the schedule trigger first looks at the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled: Option<String>,
    /// PendingChange is a config change seen outside the workload's restart window
    /// (`crr.dev/recreate-window`): rolled out, in one rollout with every change after it, when
    /// the window opens. ConfigHashes keeps the data rolled out before it until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_change: Option<PendingChange>,
    /// RestartRequested is the value of `crr.dev/restart-requested-at` last acted on: the same
    /// value never restarts again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_requested: Option<String>,
}

/// PendingChange is a config change that waits for the restart window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingChange {
    /// Since is when the change was first seen outside the window (RFC 3339).
    pub since: String,
    /// Changed lists the ConfigMaps and Secrets whose data changed (`configmap/<name>`,
    /// `secret/<name>`).
    pub changed: Vec<String>,
    /// RunsAt is when the window next opens (RFC 3339): the change is rolled out then.
    pub runs_at: String,
}

/// RecordedWorkload names the workload a record is of.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordedWorkload {
    /// Kind is Deployment, StatefulSet or DaemonSet (apps/v1).
    pub kind: String,
    /// Name of the workload, in the record's namespace.
    pub name: String,
    /// UID of the workload: a workload deleted and created again under its name is another one.
    pub uid: String,
}

/// The record's name for a workload: `<kind>-<name>` in lower case (`deployment-web`); a name
/// past the 253 characters an object name may have is cut and ends in a hash of the whole, so
/// that two long names never share a record.
pub fn record_name(kind: &str, name: &str) -> String {
    let whole = format!("{}-{name}", kind.to_ascii_lowercase());
    if whole.len() <= MAX_NAME {
        return whole;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, whole.as_bytes());
    let suffix: String = digest.as_ref()[..5]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    // Names are ASCII (DNS subdomains): any byte index is a character boundary.
    let kept = whole[..MAX_NAME - suffix.len() - 1].trim_end_matches(['-', '.']);
    format!("{kept}-{suffix}")
}

/// The record CRD: `crr.dev/v1alpha1`, namespaced, no subresources.
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    let mut crd = TriggerRecord::crd();
    crd.spec.names.list_kind = Some(format!("{}List", keys::TRIGGER_RECORD_KIND));
    crd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_named_after_its_workload_in_lower_case() {
        assert_eq!(record_name("Deployment", "web"), "deployment-web");
        assert_eq!(record_name("StatefulSet", "db.0"), "statefulset-db.0");
    }

    #[test]
    fn a_long_name_is_cut_to_an_object_name_and_stays_distinct() {
        let a = "a".repeat(253);
        let b = format!("{}b", "a".repeat(252));
        let (ra, rb) = (record_name("DaemonSet", &a), record_name("DaemonSet", &b));
        assert_eq!(ra.len(), 253);
        assert!(rb.len() <= 253);
        assert_ne!(ra, rb);
        assert!(ra.starts_with("daemonset-aaa"));
        // The same workload always gets the same record.
        assert_eq!(ra, record_name("DaemonSet", &a));
    }

    #[test]
    fn the_crd_is_namespaced_in_crr_dev_with_the_kinds_names() {
        let crd = crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(keys::TRIGGER_RECORD_CRD_NAME)
        );
        assert_eq!(crd.spec.group, keys::ROLLOUT_GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.plural, keys::TRIGGER_RECORD_PLURAL);
        assert_eq!(crd.spec.names.kind, keys::TRIGGER_RECORD_KIND);
    }
}
