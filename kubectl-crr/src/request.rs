//! Building a ContainerRecreateRequest from a pod and the user's flags: only what a user would
//! write (`podName`, `containers[].name`, `strategy`, deadline, TTL). Labels, `statusContext`,
//! `preStop` and defaults are the admission webhook's job, so this module never sets them.
//!
//! It checks what the plugin can check from the pod it read (the pod is running and scheduled,
//! each container is one the kubelet would restart, no name twice, the spec's limits) so that
//! the user gets a precise message before anything is sent. Those decisions are
//! `crr_crds::rules`, the admission webhook's own rules: the plugin never offers what the webhook
//! refuses. Only the wording is the plugin's (flags, the pod's containers). The server still has
//! the last word, on what needs live data (whether each container has started by then).

use std::time::Duration;

use crr_crds::rules::{self, MIN_ACTIVE_DEADLINE_SECONDS, Violation};
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainer, ContainerRecreateRequestSpec,
    ContainerRecreateRequestStrategy,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cli::{FailurePolicyArg, RecreateArgs};
use crate::error::Error;

/// How the containers are recreated: the flags of `recreate` that end up in the spec.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecreateOptions {
    /// Containers to recreate; empty means every container of the pod.
    pub containers: Vec<String>,
    pub ordered: bool,
    pub force: bool,
    pub failure_policy: Option<FailurePolicyArg>,
    pub grace_period: Option<Duration>,
    pub unready_grace: Option<Duration>,
    pub min_started: Option<Duration>,
    pub deadline: Option<Duration>,
    pub ttl: Option<Duration>,
}

impl From<&RecreateArgs> for RecreateOptions {
    fn from(args: &RecreateArgs) -> Self {
        Self {
            containers: args.containers.clone(),
            ordered: args.ordered,
            force: args.force,
            failure_policy: args.failure_policy,
            grace_period: args.grace_period,
            unready_grace: args.unready_grace,
            min_started: args.min_started,
            deadline: args.deadline,
            ttl: args.ttl,
        }
    }
}

impl RecreateOptions {
    /// Checks the values that do not depend on a pod.
    pub fn validate(&self) -> Result<(), Error> {
        // Both rules are about flags, so no pod name is needed to word them.
        rules::check_unique_container_names(self.containers.iter().map(String::as_str))
            .map_err(|violation| rule_error("", violation))?;
        rules::check_active_deadline(seconds_i64(self.deadline))
            .map_err(|violation| rule_error("", violation))?;
        seconds_i32("--min-started", self.min_started)?;
        seconds_i32("--ttl", self.ttl)?;
        Ok(())
    }

    fn strategy(&self) -> Result<Option<ContainerRecreateRequestStrategy>, Error> {
        let strategy = ContainerRecreateRequestStrategy {
            failure_policy: self.failure_policy.map(|policy| policy.as_str().to_owned()),
            ordered_recreate: self.ordered,
            force_recreate: self.force,
            termination_grace_period_seconds: seconds_i64(self.grace_period),
            unready_grace_period_seconds: seconds_i64(self.unready_grace),
            min_started_seconds: seconds_i32("--min-started", self.min_started)?.unwrap_or(0),
        };
        Ok((strategy != ContainerRecreateRequestStrategy::default()).then_some(strategy))
    }
}

/// A broken rule in the plugin's words: the flag it is about, or the rule's own message for the
/// request to `pod`.
fn rule_error(pod: &str, violation: Violation) -> Error {
    let invalid = |flag, message: String| Error::InvalidFlag { flag, message };
    let must_not_be_negative = || "must not be negative".to_owned();
    match violation {
        Violation::DuplicateContainer { name } => Error::DuplicateContainer { name },
        Violation::ActiveDeadlineTooShort { .. } => invalid(
            "--deadline",
            format!("must be at least {MIN_ACTIVE_DEADLINE_SECONDS}s"),
        ),
        Violation::NegativeGracePeriod { .. } => invalid("--grace-period", must_not_be_negative()),
        Violation::NegativeUnreadyGracePeriod { .. } => {
            invalid("--unready-grace", must_not_be_negative())
        }
        rule => Error::RuleBroken {
            pod: pod.to_owned(),
            rule,
        },
    }
}

fn seconds_i64(duration: Option<Duration>) -> Option<i64> {
    duration.map(|duration| i64::try_from(duration.as_secs()).unwrap_or(i64::MAX))
}

fn seconds_i32(flag: &'static str, duration: Option<Duration>) -> Result<Option<i32>, Error> {
    duration
        .map(|duration| {
            i32::try_from(duration.as_secs()).map_err(|_| Error::InvalidFlag {
                flag,
                message: format!("must be at most {}s", i32::MAX),
            })
        })
        .transpose()
}

/// Names of the containers a request may name, in the order the kubelet starts them: native
/// sidecars (init containers with `restartPolicy: Always`), then regular containers, each only if
/// the kubelet would start it again once stopped (not under `restartPolicy: Never` without a
/// rule that restarts it; under `OnFailure`, or rules on some exit codes, only after some codes,
/// which [`warnings`] tells the user) and would not restart the whole pod on a kill.
pub fn recreatable_containers(pod: &Pod) -> Vec<String> {
    rules::recreatable_containers(pod)
        .into_iter()
        .map(|container| container.spec.name.clone())
        .collect()
}

/// What the admission webhook will warn about for `crr` (built for `pod`), in its words: the
/// same [`rules::Caveat`]s, e.g. a container the kubelet restarts only after some exit codes.
pub fn warnings(pod: &Pod, crr: &ContainerRecreateRequest) -> Vec<String> {
    let mut spec = crr.spec.clone();
    let mut caveats = rules::normalize_spec(&mut spec);
    caveats.extend(
        crr.spec
            .containers
            .iter()
            .filter_map(|container| rules::recreatable_container(pod, &container.name).ok())
            .filter_map(|container| container.caveat),
    );
    caveats.iter().map(ToString::to_string).collect()
}

/// Why a pod cannot have its containers recreated, if it cannot (finished, being deleted, or not
/// scheduled yet), in the plugin's words.
pub fn pod_not_recreatable(pod: &Pod) -> Option<String> {
    match rules::check_pod(pod) {
        Ok(_) => None,
        Err(Violation::PodInactive) if pod.metadata.deletion_timestamp.is_some() => {
            Some("it is being deleted".to_owned())
        }
        Err(Violation::PodInactive) => {
            let phase = pod
                .status
                .as_ref()
                .and_then(|status| status.phase.as_deref());
            Some(format!(
                "it has finished ({})",
                phase.unwrap_or("unknown phase")
            ))
        }
        Err(Violation::PodPending) => Some("it is not scheduled to a node yet".to_owned()),
        Err(other) => Some(other.to_string()),
    }
}

/// The request for `pod`: `generateName` `<pod>-`, the named containers (all recreatable ones
/// when none is named).
pub fn build(pod: &Pod, options: &RecreateOptions) -> Result<ContainerRecreateRequest, Error> {
    options.validate()?;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone();
    if let Some(reason) = pod_not_recreatable(pod) {
        return Err(Error::PodNotRecreatable {
            pod: pod_name,
            reason,
        });
    }
    let available = recreatable_containers(pod);
    let names = if options.containers.is_empty() {
        if available.is_empty() {
            return Err(Error::PodNotRecreatable {
                reason: no_recreatable_container(pod),
                pod: pod_name,
            });
        }
        available
    } else {
        for name in &options.containers {
            match rules::recreatable_container(pod, name) {
                Ok(_) => {}
                Err(Violation::ContainerNotFound { .. }) => {
                    return Err(Error::ContainerNotInPod {
                        pod: pod_name,
                        container: name.clone(),
                        available,
                    });
                }
                Err(violation) => return Err(rule_error(&pod_name, violation)),
            }
        }
        options.containers.clone()
    };
    let spec = ContainerRecreateRequestSpec {
        pod_name,
        containers: names
            .into_iter()
            .map(|name| ContainerRecreateRequestContainer {
                name,
                ..Default::default()
            })
            .collect(),
        strategy: options.strategy()?,
        active_deadline_seconds: seconds_i64(options.deadline),
        ttl_seconds_after_finished: seconds_i32("--ttl", options.ttl)?,
    };
    rules::check_spec(&spec).map_err(|violation| rule_error(&spec.pod_name, violation))?;
    Ok(ContainerRecreateRequest {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", spec.pod_name)),
            namespace,
            ..Default::default()
        },
        spec,
        status: None,
    })
}

/// Why a pod offers no container: the rule its first container breaks.
fn no_recreatable_container(pod: &Pod) -> String {
    let first = pod.spec.iter().flat_map(|spec| &spec.containers).next();
    first
        .and_then(|container| rules::recreatable_container(pod, &container.name).err())
        .map_or_else(
            || "it has no containers".to_owned(),
            |rule| rule.to_string(),
        )
}

#[cfg(test)]
mod tests;
