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
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn container(name: &str) -> Container {
        Container {
            name: name.to_owned(),
            ..Default::default()
        }
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".to_owned()),
                namespace: Some("prod".to_owned()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                init_containers: Some(vec![
                    container("migrate"),
                    Container {
                        restart_policy: Some("Always".to_owned()),
                        ..container("proxy")
                    },
                ]),
                containers: vec![container("app"), container("sidecar")],
                node_name: Some("node-a".to_owned()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".to_owned()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn no_container_named_means_every_regular_container_and_native_sidecar() {
        let crr = build(&pod(), &RecreateOptions::default()).unwrap();
        let names: Vec<_> = crr
            .spec
            .containers
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["proxy", "app", "sidecar"]);
        assert_eq!(crr.metadata.generate_name.as_deref(), Some("web-0-"));
        assert_eq!(crr.metadata.name, None);
        assert_eq!(crr.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(crr.spec.pod_name, "web-0");
    }

    #[test]
    fn request_carries_only_what_a_user_writes() {
        let options = RecreateOptions {
            containers: vec!["app".to_owned()],
            ..Default::default()
        };
        let crr = build(&pod(), &options).unwrap();
        let value = serde_json::to_value(&crr).unwrap();
        assert_eq!(
            value,
            json!({
                "apiVersion": "apps.kruise.io/v1beta1",
                "kind": "ContainerRecreateRequest",
                "metadata": {"generateName": "web-0-", "namespace": "prod"},
                "spec": {"podName": "web-0", "containers": [{"name": "app"}]},
            })
        );
    }

    #[test]
    fn strategy_flags_map_to_the_spec() {
        let options = RecreateOptions {
            containers: vec!["sidecar".to_owned(), "app".to_owned()],
            ordered: true,
            force: true,
            failure_policy: Some(FailurePolicyArg::Ignore),
            grace_period: Some(Duration::from_secs(20)),
            unready_grace: Some(Duration::from_secs(5)),
            min_started: Some(Duration::from_secs(10)),
            deadline: Some(Duration::from_secs(300)),
            ttl: Some(Duration::from_secs(1800)),
        };
        let crr = build(&pod(), &options).unwrap();
        assert_eq!(
            serde_json::to_value(&crr.spec).unwrap(),
            json!({
                "podName": "web-0",
                "containers": [{"name": "sidecar"}, {"name": "app"}],
                "strategy": {
                    "failurePolicy": "Ignore",
                    "orderedRecreate": true,
                    "forceRecreate": true,
                    "terminationGracePeriodSeconds": 20,
                    "unreadyGracePeriodSeconds": 5,
                    "minStartedSeconds": 10,
                },
                "activeDeadlineSeconds": 300,
                "ttlSecondsAfterFinished": 1800,
            })
        );
    }

    #[test]
    fn unknown_container_is_refused_with_the_pods_containers() {
        let options = RecreateOptions {
            containers: vec!["app".to_owned(), "nginx".to_owned()],
            ..Default::default()
        };
        let error = build(&pod(), &options).unwrap_err();
        assert_eq!(
            error.to_string(),
            "container \"nginx\" is not in pod web-0 (its containers: proxy, app, sidecar)"
        );
    }

    #[test]
    fn plain_init_container_cannot_be_recreated() {
        let options = RecreateOptions {
            containers: vec!["migrate".to_owned()],
            ..Default::default()
        };
        assert_eq!(
            build(&pod(), &options).unwrap_err().to_string(),
            "cannot recreate containers of pod web-0: container migrate is an init container that \
             runs once; only native sidecars (restartPolicy: Always) can be recreated"
        );
    }

    fn with_restart_policy(policy: &str) -> Pod {
        let mut pod = pod();
        pod.spec.as_mut().unwrap().restart_policy = Some(policy.to_owned());
        pod
    }

    #[test]
    fn containers_of_a_restart_policy_never_pod_are_not_offered() {
        // The kubelet never starts them again; only the native sidecar comes back.
        let pod = with_restart_policy("Never");
        assert_eq!(recreatable_containers(&pod), ["proxy"]);
        let crr = build(&pod, &RecreateOptions::default()).unwrap();
        let names: Vec<_> = crr.spec.containers.iter().map(|c| &c.name).collect();
        assert_eq!(names, ["proxy"]);
        assert_eq!(
            recreatable_containers(&with_restart_policy("Always")),
            ["proxy", "app", "sidecar"]
        );
    }

    #[test]
    fn containers_of_an_on_failure_pod_are_offered_with_the_webhooks_warning() {
        let on_failure = with_restart_policy("OnFailure");
        assert_eq!(
            recreatable_containers(&on_failure),
            ["proxy", "app", "sidecar"]
        );
        let crr = build(&on_failure, &RecreateOptions::default()).unwrap();
        let names: Vec<_> = crr.spec.containers.iter().map(|c| &c.name).collect();
        assert_eq!(names, ["proxy", "app", "sidecar"]);
        let printed = warnings(&on_failure, &crr);
        assert_eq!(
            printed,
            ["app", "sidecar"].map(|name| rules::Caveat::RestartsOnlyOnSomeExitCodes {
                name: name.to_owned(),
                policy: rules::EffectivePolicy {
                    policy: "OnFailure".to_owned(),
                    source: rules::PolicySource::Pod,
                    rules: false,
                },
                kill_codes_not_restarted: vec![0],
            }
            .to_string())
        );
        assert!(
            printed[0].contains("if it exits 0 on SIGTERM it will not be restarted"),
            "{printed:?}"
        );
        let always = pod();
        let crr = build(&always, &RecreateOptions::default()).unwrap();
        assert!(warnings(&always, &crr).is_empty());
    }

    #[test]
    fn restart_rules_decide_what_is_offered_as_the_webhook_does() {
        // `app` restarts only on 143 (a warning); `sidecar` restarts the whole pod on 137.
        let mut pod = with_restart_policy("Never");
        let containers = &mut pod.spec.as_mut().unwrap().containers;
        containers[0].restart_policy = Some("Never".to_owned());
        containers[0].restart_policy_rules = Some(
            serde_json::from_value(json!([
                {"action": "Restart", "exitCodes": {"operator": "In", "values": [143]}},
            ]))
            .unwrap(),
        );
        containers[1].restart_policy = Some("Always".to_owned());
        containers[1].restart_policy_rules = Some(
            serde_json::from_value(json!([
                {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [137]}},
            ]))
            .unwrap(),
        );
        assert_eq!(recreatable_containers(&pod), ["proxy", "app"]);
        let crr = build(&pod, &RecreateOptions::default()).unwrap();
        let printed = warnings(&pod, &crr);
        assert_eq!(printed.len(), 1, "{printed:?}");
        assert!(
            printed[0].contains("container app has restartPolicy Never (container)")
                && printed[0].contains("not after 0 or 137"),
            "{printed:?}"
        );
        let options = RecreateOptions {
            containers: vec!["sidecar".to_owned()],
            ..Default::default()
        };
        let error = build(&pod, &options).unwrap_err();
        assert!(
            matches!(
                &error,
                Error::RuleBroken {
                    rule: Violation::RestartsAllContainers { .. },
                    ..
                }
            ),
            "{error}"
        );
        assert!(
            error.to_string().contains("would restart the whole pod"),
            "{error}"
        );
    }

    #[test]
    fn naming_a_container_of_a_restart_policy_never_pod_is_refused_as_the_webhook_does() {
        let options = RecreateOptions {
            containers: vec!["app".to_owned()],
            ..Default::default()
        };
        let error = build(&with_restart_policy("Never"), &options).unwrap_err();
        assert!(matches!(
            &error,
            Error::RuleBroken {
                rule: Violation::ContainerNotRestartable { .. },
                ..
            }
        ));
        assert_eq!(
            error.to_string(),
            "cannot recreate containers of pod web-0: container app would not be started again \
             after it is stopped, whatever its exit code, under restartPolicy Never (pod); only \
             containers the kubelet restarts can be recreated"
        );
    }

    #[test]
    fn pod_without_a_restartable_container_says_why() {
        let mut pod = with_restart_policy("Never");
        pod.spec.as_mut().unwrap().init_containers = None;
        assert_eq!(
            build(&pod, &RecreateOptions::default())
                .unwrap_err()
                .to_string(),
            "cannot recreate containers of pod web-0: container app would not be started again \
             after it is stopped, whatever its exit code, under restartPolicy Never (pod); only \
             containers the kubelet restarts can be recreated"
        );
    }

    #[test]
    fn unscheduled_pod_is_refused() {
        let mut pending = pod();
        pending.spec.as_mut().unwrap().node_name = None;
        pending.status.as_mut().unwrap().phase = Some("Pending".to_owned());
        assert_eq!(
            pod_not_recreatable(&pending).as_deref(),
            Some("it is not scheduled to a node yet")
        );
        assert_eq!(
            build(&pending, &RecreateOptions::default())
                .unwrap_err()
                .to_string(),
            "cannot recreate containers of pod web-0: it is not scheduled to a node yet"
        );
    }

    #[test]
    fn finished_pod_with_terminated_sidecars_is_accepted_as_the_webhook_does() {
        let mut finished = pod();
        let status = finished.status.as_mut().unwrap();
        status.phase = Some("Succeeded".to_owned());
        status.conditions = Some(vec![PodCondition {
            type_: rules::SIDECAR_TERMINATED_CONDITION.to_owned(),
            status: "True".to_owned(),
            ..Default::default()
        }]);
        assert_eq!(pod_not_recreatable(&finished), None);
        let options = RecreateOptions {
            containers: vec!["proxy".to_owned()],
            ..Default::default()
        };
        assert!(build(&finished, &options).is_ok());
    }

    #[test]
    fn same_container_twice_is_refused() {
        let options = RecreateOptions {
            containers: vec!["app".to_owned(), "app".to_owned()],
            ..Default::default()
        };
        assert_eq!(
            build(&pod(), &options).unwrap_err().to_string(),
            "container \"app\" is named more than once"
        );
    }

    #[test]
    fn deadline_below_three_seconds_is_refused() {
        let options = RecreateOptions {
            deadline: Some(Duration::from_secs(2)),
            ..Default::default()
        };
        assert_eq!(
            build(&pod(), &options).unwrap_err().to_string(),
            "invalid --deadline: must be at least 3s"
        );
    }

    #[test]
    fn oversized_ttl_is_refused_not_truncated() {
        let options = RecreateOptions {
            ttl: Some(Duration::from_secs(u64::from(u32::MAX))),
            ..Default::default()
        };
        assert!(matches!(
            build(&pod(), &options),
            Err(Error::InvalidFlag { flag: "--ttl", .. })
        ));
    }

    #[test]
    fn finished_or_deleted_pods_are_refused() {
        let mut finished = pod();
        finished.status.as_mut().unwrap().phase = Some("Succeeded".to_owned());
        assert_eq!(
            build(&finished, &RecreateOptions::default())
                .unwrap_err()
                .to_string(),
            "cannot recreate containers of pod web-0: it has finished (Succeeded)"
        );
        let mut deleted = pod();
        deleted.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(matches!(
            build(&deleted, &RecreateOptions::default()),
            Err(Error::PodNotRecreatable { .. })
        ));
    }
}
