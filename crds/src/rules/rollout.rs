//! The admission rules of a ContainerRecreateRollout: what its spec may hold, what an update may
//! change, and whether its workload's pod template has the containers it names. Pure functions;
//! the webhook and `kubectl crr rollout` both call them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use crate::rollout::{
    BadMaxUnavailable, ContainerRecreateRolloutSpec, MAX_NAME_LENGTH, WorkloadRef, max_unavailable,
    missing_containers,
};

/// The workload kinds a rollout may target, all `apps/v1`.
pub const WORKLOAD_KINDS: [&str; 4] = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"];
/// The API version of every workload kind a rollout may target.
pub const WORKLOAD_API_VERSION: &str = "apps/v1";

/// Why a rollout breaks an admission rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RolloutViolation {
    /// The name is longer than a label value may be.
    #[error(
        "the rollout's name is {length} characters long; at most {MAX_NAME_LENGTH} (it labels every request of the rollout)"
    )]
    NameTooLong { length: usize },
    /// Neither or both of `workloadRef` and `selector`.
    #[error("target must name exactly one of workloadRef and selector")]
    TargetNotExactlyOne,
    /// A `workloadRef` of a kind or version a rollout cannot target.
    #[error(
        "target.workloadRef must be an apps/v1 Deployment, StatefulSet, DaemonSet or ReplicaSet, not {api_version} {kind}"
    )]
    UnknownWorkload { api_version: String, kind: String },
    /// A `workloadRef` without a name.
    #[error("target.workloadRef.name can not be empty")]
    WorkloadNameEmpty,
    /// A selector that selects every pod of the namespace.
    #[error(
        "target.selector must have at least one requirement: an empty selector would restart every pod of the namespace"
    )]
    SelectorEmpty,
    /// No container named.
    #[error("containers can not be empty")]
    ContainersEmpty,
    /// A container named twice.
    #[error("container {name} is named twice")]
    DuplicateContainer { name: String },
    /// An empty container name.
    #[error("a container name can not be empty")]
    ContainerNameEmpty,
    /// `maxUnavailable` out of range.
    #[error(transparent)]
    BadMaxUnavailable(#[from] BadMaxUnavailable),
    /// A negative `maxFailedPods`.
    #[error("maxFailedPods must be at least 0")]
    NegativeMaxFailedPods,
    /// A `progressDeadlineSeconds` below 1.
    #[error("progressDeadlineSeconds must be at least 1")]
    ProgressDeadlineNotPositive,
    /// An `order` this version does not know.
    #[error("order must be Default, not {order}")]
    UnknownOrder { order: String },
    /// A per-pod deadline below a request's minimum.
    #[error("recreateStrategy.activeDeadlineSeconds can not be less than {minimum}s", minimum = crate::rules::MIN_ACTIVE_DEADLINE_SECONDS)]
    ActiveDeadlineTooShort,
    /// An update changed a field other than `paused` and `aborted`.
    #[error("spec is immutable except paused and aborted: {field} changed")]
    Immutable { field: &'static str },
    /// An update unset `aborted`.
    #[error(
        "an aborted rollout can not be resumed: create a new one (kubectl crr rollout retry NAME)"
    )]
    AbortUndone,
    /// `onlyPods` lists too many pods, or a name twice, or an empty name.
    #[error("onlyPods {problem}")]
    BadOnlyPods { problem: String },
    /// The workload's pod template lacks containers the rollout names.
    #[error("the pod template of {kind}/{workload} has no container {}", .names.join(", "))]
    MissingContainers {
        kind: String,
        workload: String,
        names: Vec<String>,
    },
    /// The workload does not exist.
    #[error("{kind}/{workload} not found")]
    WorkloadNotFound { kind: String, workload: String },
}

impl RolloutViolation {
    /// Short machine-readable reason (the webhook's metrics label), one per variant.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NameTooLong { .. } => "RolloutNameTooLong",
            Self::TargetNotExactlyOne => "RolloutTargetNotExactlyOne",
            Self::UnknownWorkload { .. } => "RolloutUnknownWorkload",
            Self::WorkloadNameEmpty => "RolloutWorkloadNameEmpty",
            Self::SelectorEmpty => "RolloutSelectorEmpty",
            Self::ContainersEmpty => "RolloutContainersEmpty",
            Self::DuplicateContainer { .. } => "RolloutDuplicateContainer",
            Self::ContainerNameEmpty => "RolloutContainerNameEmpty",
            Self::BadMaxUnavailable(_) => "RolloutBadMaxUnavailable",
            Self::NegativeMaxFailedPods => "RolloutNegativeMaxFailedPods",
            Self::ProgressDeadlineNotPositive => "RolloutProgressDeadlineNotPositive",
            Self::UnknownOrder { .. } => "RolloutUnknownOrder",
            Self::ActiveDeadlineTooShort => "RolloutActiveDeadlineTooShort",
            Self::Immutable { .. } => "RolloutImmutable",
            Self::AbortUndone => "RolloutAbortUndone",
            Self::BadOnlyPods { .. } => "RolloutBadOnlyPods",
            Self::MissingContainers { .. } => "RolloutMissingContainers",
            Self::WorkloadNotFound { .. } => "RolloutWorkloadNotFound",
        }
    }

    /// Every reason, so that metrics can export each from the start.
    pub const REASONS: [&'static str; 18] = [
        "RolloutNameTooLong",
        "RolloutTargetNotExactlyOne",
        "RolloutUnknownWorkload",
        "RolloutWorkloadNameEmpty",
        "RolloutSelectorEmpty",
        "RolloutContainersEmpty",
        "RolloutDuplicateContainer",
        "RolloutContainerNameEmpty",
        "RolloutBadMaxUnavailable",
        "RolloutNegativeMaxFailedPods",
        "RolloutProgressDeadlineNotPositive",
        "RolloutUnknownOrder",
        "RolloutActiveDeadlineTooShort",
        "RolloutImmutable",
        "RolloutAbortUndone",
        "RolloutBadOnlyPods",
        "RolloutMissingContainers",
        "RolloutWorkloadNotFound",
    ];
}

/// Checks a rollout's name and spec, in this order: name, target, containers, `maxUnavailable`,
/// `maxFailedPods`, `progressDeadlineSeconds`, order, the per-pod deadline.
pub fn check_rollout(
    name: &str,
    spec: &ContainerRecreateRolloutSpec,
) -> Result<(), RolloutViolation> {
    if name.len() > MAX_NAME_LENGTH {
        return Err(RolloutViolation::NameTooLong { length: name.len() });
    }
    match (&spec.target.workload_ref, &spec.target.selector) {
        (Some(workload), None) => check_workload_ref(workload)?,
        (None, Some(selector)) => {
            let requirements = selector
                .match_labels
                .as_ref()
                .map_or(0, |labels| labels.len())
                + selector.match_expressions.as_ref().map_or(0, Vec::len);
            if requirements == 0 {
                return Err(RolloutViolation::SelectorEmpty);
            }
        }
        _ => return Err(RolloutViolation::TargetNotExactlyOne),
    }
    if spec.containers.is_empty() {
        return Err(RolloutViolation::ContainersEmpty);
    }
    let mut seen = BTreeSet::new();
    for name in &spec.containers {
        if name.is_empty() {
            return Err(RolloutViolation::ContainerNameEmpty);
        }
        if !seen.insert(name.as_str()) {
            return Err(RolloutViolation::DuplicateContainer { name: name.clone() });
        }
    }
    max_unavailable(spec.max_unavailable.as_ref())?;
    if spec.max_failed_pods.is_some_and(|count| count < 0) {
        return Err(RolloutViolation::NegativeMaxFailedPods);
    }
    if spec
        .progress_deadline_seconds
        .is_some_and(|seconds| seconds < 1)
    {
        return Err(RolloutViolation::ProgressDeadlineNotPositive);
    }
    if let Some(order) = spec.order.as_deref().filter(|order| *order != "Default") {
        return Err(RolloutViolation::UnknownOrder {
            order: order.to_owned(),
        });
    }
    let deadline = spec
        .recreate_strategy
        .as_ref()
        .and_then(|strategy| strategy.active_deadline_seconds);
    if deadline.is_some_and(|seconds| seconds < crate::rules::MIN_ACTIVE_DEADLINE_SECONDS) {
        return Err(RolloutViolation::ActiveDeadlineTooShort);
    }
    check_only_pods(&spec.only_pods)
}

/// The most pods `onlyPods` may name: a retry of more is a new rollout of the whole target.
pub const MAX_ONLY_PODS: usize = 1000;

fn check_only_pods(names: &[String]) -> Result<(), RolloutViolation> {
    let bad = |problem: String| Err(RolloutViolation::BadOnlyPods { problem });
    if names.len() > MAX_ONLY_PODS {
        return bad(format!(
            "names {} pods, more than {MAX_ONLY_PODS}: restart the whole target instead",
            names.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for name in names {
        if name.is_empty() {
            return bad("has an empty name".to_owned());
        }
        if !seen.insert(name.as_str()) {
            return bad(format!("names pod {name} twice"));
        }
    }
    Ok(())
}

fn check_workload_ref(workload: &WorkloadRef) -> Result<(), RolloutViolation> {
    if workload.api_version != WORKLOAD_API_VERSION
        || !WORKLOAD_KINDS.contains(&workload.kind.as_str())
    {
        return Err(RolloutViolation::UnknownWorkload {
            api_version: workload.api_version.clone(),
            kind: workload.kind.clone(),
        });
    }
    if workload.name.is_empty() {
        return Err(RolloutViolation::WorkloadNameEmpty);
    }
    Ok(())
}

/// Checks an update: only `paused` may change, and `aborted` may be set but never unset.
pub fn check_rollout_update(
    old: &ContainerRecreateRolloutSpec,
    new: &ContainerRecreateRolloutSpec,
) -> Result<(), RolloutViolation> {
    if old.aborted && !new.aborted {
        return Err(RolloutViolation::AbortUndone);
    }
    let changed = |field: &'static str, same: bool| {
        if same {
            Ok(())
        } else {
            Err(RolloutViolation::Immutable { field })
        }
    };
    changed("target", old.target == new.target)?;
    changed("containers", old.containers == new.containers)?;
    changed("maxUnavailable", old.max_unavailable == new.max_unavailable)?;
    changed(
        "respectDisruptionBudgets",
        old.respect_disruption_budgets == new.respect_disruption_budgets,
    )?;
    changed("order", old.order == new.order)?;
    changed("onlyPods", old.only_pods == new.only_pods)?;
    changed("maxFailedPods", old.max_failed_pods == new.max_failed_pods)?;
    changed(
        "recreateStrategy",
        old.recreate_strategy == new.recreate_strategy,
    )?;
    changed(
        "ttlSecondsAfterFinished",
        old.ttl_seconds_after_finished == new.ttl_seconds_after_finished,
    )?;
    changed(
        "progressDeadlineSeconds",
        old.progress_deadline_seconds == new.progress_deadline_seconds,
    )
}

/// Checks that the workload's pod template has every container the rollout names (a regular
/// container or a native sidecar).
pub fn check_template(
    workload: &WorkloadRef,
    template: &PodTemplateSpec,
    containers: &[String],
) -> Result<(), RolloutViolation> {
    let missing = missing_containers(template, containers);
    if missing.is_empty() {
        return Ok(());
    }
    Err(RolloutViolation::MissingContainers {
        kind: workload.kind.clone(),
        workload: workload.name.clone(),
        names: missing.into_iter().map(str::to_owned).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{RolloutRecreateStrategy, RolloutTarget};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn deployment(name: &str) -> WorkloadRef {
        WorkloadRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: name.into(),
        }
    }

    fn spec() -> ContainerRecreateRolloutSpec {
        ContainerRecreateRolloutSpec {
            target: RolloutTarget {
                workload_ref: Some(deployment("web")),
                selector: None,
            },
            containers: vec!["app".into()],
            ..ContainerRecreateRolloutSpec::default()
        }
    }

    type Edit = dyn FnOnce(&mut ContainerRecreateRolloutSpec);

    fn violation(edit: impl FnOnce(&mut ContainerRecreateRolloutSpec)) -> Option<&'static str> {
        let mut spec = spec();
        edit(&mut spec);
        check_rollout("nightly", &spec)
            .err()
            .map(|violation| violation.reason())
    }

    #[test]
    fn a_plain_rollout_passes() {
        assert_eq!(violation(|_| {}), None);
        assert_eq!(
            violation(|spec| {
                spec.target = RolloutTarget {
                    workload_ref: None,
                    selector: Some(LabelSelector {
                        match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                        match_expressions: None,
                    }),
                };
                spec.max_unavailable = Some(IntOrString::String("25%".into()));
                spec.max_failed_pods = Some(2);
                spec.order = Some("Default".into());
            }),
            None
        );
    }

    #[test]
    fn each_rule_is_enforced_with_its_reason() {
        let cases: Vec<(&str, Box<Edit>)> = vec![
            (
                "RolloutTargetNotExactlyOne",
                Box::new(|spec| spec.target.workload_ref = None),
            ),
            (
                "RolloutTargetNotExactlyOne",
                Box::new(|spec| spec.target.selector = Some(LabelSelector::default())),
            ),
            (
                "RolloutUnknownWorkload",
                Box::new(|spec| spec.target.workload_ref.as_mut().unwrap().kind = "Job".into()),
            ),
            (
                "RolloutUnknownWorkload",
                Box::new(|spec| {
                    spec.target.workload_ref.as_mut().unwrap().api_version = "apps/v1beta2".into();
                }),
            ),
            (
                "RolloutWorkloadNameEmpty",
                Box::new(|spec| spec.target.workload_ref.as_mut().unwrap().name.clear()),
            ),
            (
                "RolloutSelectorEmpty",
                Box::new(|spec| {
                    spec.target = RolloutTarget {
                        workload_ref: None,
                        selector: Some(LabelSelector::default()),
                    };
                }),
            ),
            (
                "RolloutContainersEmpty",
                Box::new(|spec| spec.containers.clear()),
            ),
            (
                "RolloutDuplicateContainer",
                Box::new(|spec| spec.containers.push("app".into())),
            ),
            (
                "RolloutContainerNameEmpty",
                Box::new(|spec| spec.containers.push(String::new())),
            ),
            (
                "RolloutBadMaxUnavailable",
                Box::new(|spec| spec.max_unavailable = Some(IntOrString::Int(0))),
            ),
            (
                "RolloutBadMaxUnavailable",
                Box::new(|spec| spec.max_unavailable = Some(IntOrString::String("150%".into()))),
            ),
            (
                "RolloutNegativeMaxFailedPods",
                Box::new(|spec| spec.max_failed_pods = Some(-1)),
            ),
            (
                "RolloutProgressDeadlineNotPositive",
                Box::new(|spec| spec.progress_deadline_seconds = Some(0)),
            ),
            (
                "RolloutUnknownOrder",
                Box::new(|spec| spec.order = Some("Random".into())),
            ),
            (
                "RolloutActiveDeadlineTooShort",
                Box::new(|spec| {
                    spec.recreate_strategy = Some(RolloutRecreateStrategy {
                        active_deadline_seconds: Some(2),
                        ..RolloutRecreateStrategy::default()
                    });
                }),
            ),
        ];
        let cases = cases.into_iter().chain([
            (
                "RolloutBadOnlyPods",
                Box::new(|spec: &mut ContainerRecreateRolloutSpec| {
                    spec.only_pods = vec!["web-1".into(), "web-1".into()];
                }) as Box<Edit>,
            ),
            (
                "RolloutBadOnlyPods",
                Box::new(|spec: &mut ContainerRecreateRolloutSpec| {
                    spec.only_pods = vec![String::new()];
                }),
            ),
            (
                "RolloutBadOnlyPods",
                Box::new(|spec: &mut ContainerRecreateRolloutSpec| {
                    spec.only_pods = (0..=MAX_ONLY_PODS).map(|n| format!("web-{n}")).collect();
                }),
            ),
        ]);
        for (reason, edit) in cases {
            assert_eq!(violation(edit), Some(reason));
        }
        assert_eq!(
            violation(
                |spec| spec.only_pods = (0..MAX_ONLY_PODS).map(|n| format!("web-{n}")).collect()
            ),
            None
        );
        let long = "r".repeat(MAX_NAME_LENGTH + 1);
        assert_eq!(
            check_rollout(&long, &spec()).map_err(|v| v.reason()),
            Err("RolloutNameTooLong")
        );
        assert!(check_rollout(&"r".repeat(MAX_NAME_LENGTH), &spec()).is_ok());
    }

    #[test]
    fn only_paused_and_aborted_may_change_and_an_abort_stays() {
        let old = spec();
        let mut paused = old.clone();
        paused.paused = true;
        assert_eq!(check_rollout_update(&old, &paused), Ok(()));
        let mut aborted = old.clone();
        aborted.aborted = true;
        assert_eq!(check_rollout_update(&old, &aborted), Ok(()));
        assert_eq!(check_rollout_update(&aborted, &aborted), Ok(()));
        assert_eq!(
            check_rollout_update(&aborted, &old),
            Err(RolloutViolation::AbortUndone)
        );
        let mut narrowed = old.clone();
        narrowed.only_pods = vec!["web-1".into()];
        assert_eq!(
            check_rollout_update(&old, &narrowed),
            Err(RolloutViolation::Immutable { field: "onlyPods" })
        );
        let mut retargeted = old.clone();
        retargeted.target.workload_ref = Some(deployment("api"));
        assert_eq!(
            check_rollout_update(&old, &retargeted),
            Err(RolloutViolation::Immutable { field: "target" })
        );
        let mut wider = old.clone();
        wider.max_unavailable = Some(IntOrString::Int(5));
        assert_eq!(
            check_rollout_update(&old, &wider).map_err(|v| v.to_string()),
            Err("spec is immutable except paused and aborted: maxUnavailable changed".to_owned())
        );
    }

    #[test]
    fn a_template_without_a_named_container_is_refused_with_its_name() {
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [{"name": "app"}, {"name": "proxy"}]}
        }))
        .unwrap();
        let workload = deployment("web");
        assert_eq!(
            check_template(&workload, &template, &["app".into(), "proxy".into()]),
            Ok(())
        );
        let refused = check_template(&workload, &template, &["app".into(), "cache".into()])
            .expect_err("cache is not in the template");
        assert_eq!(
            refused.to_string(),
            "the pod template of Deployment/web has no container cache"
        );
    }

    #[test]
    fn reasons_are_listed_once_each() {
        let unique: BTreeSet<_> = RolloutViolation::REASONS.iter().collect();
        assert_eq!(unique.len(), RolloutViolation::REASONS.len());
    }
}
