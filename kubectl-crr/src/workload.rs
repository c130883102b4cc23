//! The workload a command names, as `deploy/web`: the one reading of KIND/NAME that `kubectl crr
//! rollout` and `kubectl crr rollout restart` share.

use crr_crds::rollout::WorkloadRef;
use crr_crds::rules::rollout::WORKLOAD_API_VERSION;

use crate::error::Error;

/// Reads `deploy/web`, `sts/db`, `ds/agent`, `rs/web-5d9f` (and the kinds' full names, singular
/// or plural, any case) as a workload of `apps/v1`.
pub fn workload_ref(text: &str) -> Result<WorkloadRef, Error> {
    let invalid = |message: String| Error::InvalidFlag {
        flag: "WORKLOAD",
        message,
    };
    let (kind, name) = text.split_once('/').ok_or_else(|| {
        invalid(format!(
            "{text:?} is not KIND/NAME (deploy/NAME, sts/NAME, ds/NAME or rs/NAME)"
        ))
    })?;
    let kind = match kind.to_ascii_lowercase().as_str() {
        "deploy" | "deployment" | "deployments" => "Deployment",
        "sts" | "statefulset" | "statefulsets" => "StatefulSet",
        "ds" | "daemonset" | "daemonsets" => "DaemonSet",
        "rs" | "replicaset" | "replicasets" => "ReplicaSet",
        other => {
            return Err(invalid(format!(
                "{other:?} is not a workload a rollout can restart (deploy, sts, ds or rs)"
            )));
        }
    };
    if name.is_empty() {
        return Err(invalid(format!("{text:?} names no workload")));
    }
    Ok(WorkloadRef {
        api_version: WORKLOAD_API_VERSION.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
    })
}
