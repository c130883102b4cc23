use super::*;
use crate::restart_policy::*;
use crate::v1beta1::{ContainerRecreateRequestContainer, ContainerRecreateRequestStrategy};
use k8s_openapi::api::core::v1::ContainerRestartRule;
use k8s_openapi::api::core::v1::{
    ContainerRestartRuleOnExitCodes, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

fn container(name: &str, restart_policy: Option<&str>) -> Container {
    Container {
        name: name.to_owned(),
        restart_policy: restart_policy.map(str::to_owned),
        ..Default::default()
    }
}

fn status(name: &str, container_id: Option<&str>) -> ContainerStatus {
    ContainerStatus {
        name: name.to_owned(),
        container_id: container_id.map(str::to_owned),
        restart_count: 2,
        ..Default::default()
    }
}

/// A running, scheduled pod: init container `migrate`, native sidecar `proxy`, regular
/// containers `app` and `worker`, all started.
fn pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web-0".to_owned()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".to_owned()),
            init_containers: Some(vec![
                container("migrate", None),
                container("proxy", Some("Always")),
            ]),
            containers: vec![container("app", None), container("worker", None)],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            container_statuses: Some(vec![
                status("app", Some("containerd://app")),
                status("worker", Some("containerd://worker")),
            ]),
            init_container_statuses: Some(vec![
                status("migrate", Some("containerd://migrate")),
                status("proxy", Some("containerd://proxy")),
            ]),
            ..Default::default()
        }),
    }
}

fn with_pod_restart_policy(policy: &str) -> Pod {
    let mut pod = pod();
    pod.spec.as_mut().unwrap().restart_policy = Some(policy.to_owned());
    pod
}

fn exited(mut pod: Pod, name: &str, id: &str, code: i32) -> Pod {
    let status = pod.status.get_or_insert_default();
    let statuses = status.container_statuses.get_or_insert_default();
    statuses.retain(|status| status.name != name);
    statuses.push(
        serde_json::from_value(serde_json::json!({
            "name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "containerID": id,
            "state": {"terminated": {"exitCode": code, "containerID": id}},
        }))
        .unwrap(),
    );
    pod
}

#[test]
fn only_an_on_failure_container_that_exited_zero_is_not_restarted() {
    let on_failure = with_pod_restart_policy("OnFailure");
    let message = not_restarted(
        &exited(on_failure.clone(), "app", "containerd://a1", 0),
        "app",
        "containerd://a1",
    )
    .expect("exit 0 under OnFailure stays exited");
    assert!(
        message.contains("OnFailure") && message.contains("app"),
        "{message}"
    );
    assert_eq!(
        not_restarted(
            &exited(on_failure.clone(), "app", "containerd://a1", 143),
            "app",
            "containerd://a1"
        ),
        None,
        "a non-zero exit is restarted after the back-off"
    );
    assert_eq!(
        not_restarted(
            &exited(on_failure.clone(), "app", "containerd://a0", 0),
            "app",
            "containerd://a1"
        ),
        None,
        "another attempt's exit says nothing of this one"
    );
    assert_eq!(
        not_restarted(
            &exited(pod(), "app", "containerd://a1", 0),
            "app",
            "containerd://a1"
        ),
        None,
        "Always restarts after exit 0 too"
    );
    assert_eq!(
        not_restarted(&on_failure, "app", "containerd://a1"),
        None,
        "no status yet"
    );
}

fn with_container_restart_policy(name: &str, policy: &str) -> Pod {
    let mut pod = pod();
    let spec = pod.spec.as_mut().unwrap();
    for container in spec.containers.iter_mut() {
        if container.name == name {
            container.restart_policy = Some(policy.to_owned());
        }
    }
    pod
}

fn spec() -> ContainerRecreateRequestSpec {
    ContainerRecreateRequestSpec {
        pod_name: "web-0".to_owned(),
        containers: vec![ContainerRecreateRequestContainer {
            name: "app".to_owned(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn spec_rules_refuse_with_the_webhooks_reason_and_message() {
    let with_strategy = |edit: fn(&mut ContainerRecreateRequestStrategy)| {
        let mut spec = spec();
        edit(spec.strategy.get_or_insert_with(Default::default));
        spec
    };
    let cases = [
        ("a plain request", spec(), None),
        (
            "deadline of exactly the minimum",
            ContainerRecreateRequestSpec {
                active_deadline_seconds: Some(3),
                ..spec()
            },
            None,
        ),
        (
            "zero grace periods and TTL",
            ContainerRecreateRequestSpec {
                ttl_seconds_after_finished: Some(0),
                ..with_strategy(|s| {
                    s.termination_grace_period_seconds = Some(0);
                    s.unready_grace_period_seconds = Some(0);
                })
            },
            None,
        ),
        (
            "explicit Ignore",
            with_strategy(|s| s.failure_policy = Some("Ignore".to_owned())),
            None,
        ),
        (
            "empty podName",
            ContainerRecreateRequestSpec {
                pod_name: String::new(),
                ..spec()
            },
            Some(("PodNameEmpty", "podName can not be empty")),
        ),
        (
            "no containers",
            ContainerRecreateRequestSpec {
                containers: Vec::new(),
                ..spec()
            },
            Some(("ContainersEmpty", "containers list can not be null")),
        ),
        (
            "deadline below the minimum",
            ContainerRecreateRequestSpec {
                active_deadline_seconds: Some(2),
                ..spec()
            },
            Some((
                "ActiveDeadlineTooShort",
                "activeDeadlineSeconds can not be less than 3s",
            )),
        ),
        (
            "negative grace period",
            with_strategy(|s| s.termination_grace_period_seconds = Some(-1)),
            Some((
                "NegativeGracePeriod",
                "terminationGracePeriodSeconds must be non-negative integer",
            )),
        ),
        (
            "negative unready grace period",
            with_strategy(|s| s.unready_grace_period_seconds = Some(-1)),
            Some((
                "NegativeUnreadyGracePeriod",
                "unreadyGracePeriodSeconds must be non-negative integer",
            )),
        ),
        (
            "negative minStartedSeconds is left to normalize_spec",
            with_strategy(|s| s.min_started_seconds = -1),
            None,
        ),
        (
            "negative TTL is left to normalize_spec",
            ContainerRecreateRequestSpec {
                ttl_seconds_after_finished: Some(-1),
                ..spec()
            },
            None,
        ),
        (
            "unknown failure policy",
            with_strategy(|s| s.failure_policy = Some("Retry".to_owned())),
            Some(("UnknownFailurePolicy", "unknown failurePolicy Retry")),
        ),
        (
            "empty podName comes before a short deadline",
            ContainerRecreateRequestSpec {
                pod_name: String::new(),
                active_deadline_seconds: Some(1),
                ..spec()
            },
            Some(("PodNameEmpty", "podName can not be empty")),
        ),
        (
            "a short deadline comes before a bad failure policy",
            ContainerRecreateRequestSpec {
                active_deadline_seconds: Some(1),
                ..with_strategy(|s| s.failure_policy = Some("Retry".to_owned()))
            },
            Some((
                "ActiveDeadlineTooShort",
                "activeDeadlineSeconds can not be less than 3s",
            )),
        ),
    ];
    for (case, spec, expected) in cases {
        let outcome =
            check_spec(&spec).map_err(|violation| (violation.reason(), violation.to_string()));
        let expected = expected.map(|(reason, message)| (reason, message.to_owned()));
        assert_eq!(outcome.err(), expected, "{case}");
    }
}

#[test]
fn repeated_container_name_is_refused_at_its_second_mention() {
    assert_eq!(check_unique_container_names(["app", "proxy"]), Ok(()));
    let violation = check_unique_container_names(["app", "proxy", "proxy", "app"]).unwrap_err();
    assert_eq!(
        violation,
        Violation::DuplicateContainer {
            name: "proxy".to_owned()
        }
    );
    assert_eq!(violation.reason(), "DuplicateContainer");
    assert_eq!(violation.to_string(), "can not recreate proxy multi times");

    let mut names = ContainerNames::default();
    assert_eq!(names.add("app"), Ok(()));
    assert_eq!(names.add("proxy"), Ok(()));
    assert!(names.add("app").is_err());
}

#[test]
fn pod_must_be_active_then_scheduled() {
    let deleting = || {
        let mut pod = pod();
        pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        pod
    };
    let phase = |phase: &str| {
        let mut pod = pod();
        pod.status.as_mut().unwrap().phase = Some(phase.to_owned());
        pod
    };
    let unscheduled = |mut pod: Pod, node: Option<&str>| {
        pod.spec.as_mut().unwrap().node_name = node.map(str::to_owned);
        pod
    };
    let sidecar_terminated = |mut pod: Pod| {
        pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: SIDECAR_TERMINATED_CONDITION.to_owned(),
            status: "True".to_owned(),
            ..Default::default()
        }]);
        pod
    };
    let cases = [
        ("running and scheduled", pod(), Ok("node-a")),
        ("pending phase but bound", phase("Pending"), Ok("node-a")),
        ("succeeded", phase("Succeeded"), Err(Violation::PodInactive)),
        ("failed", phase("Failed"), Err(Violation::PodInactive)),
        ("being deleted", deleting(), Err(Violation::PodInactive)),
        (
            "succeeded with terminated sidecars",
            sidecar_terminated(phase("Succeeded")),
            Ok("node-a"),
        ),
        (
            "deleting with terminated sidecars",
            sidecar_terminated(deleting()),
            Ok("node-a"),
        ),
        (
            "no node name",
            unscheduled(phase("Pending"), None),
            Err(Violation::PodPending),
        ),
        (
            "empty node name",
            unscheduled(pod(), Some("")),
            Err(Violation::PodPending),
        ),
        (
            "inactive comes before unscheduled",
            unscheduled(phase("Failed"), None),
            Err(Violation::PodInactive),
        ),
    ];
    for (case, pod, expected) in cases {
        assert_eq!(check_pod(&pod), expected, "{case}");
    }
    assert_eq!(Violation::PodInactive.reason(), "PodInactive");
    assert_eq!(
        Violation::PodInactive.to_string(),
        "not allowed to recreate containers in an inactive Pod"
    );
    assert_eq!(
        Violation::PodPending.to_string(),
        "not allowed to recreate containers in a pending Pod"
    );
}

#[test]
fn only_containers_the_kubelet_restarts_can_be_recreated() {
    let not_restartable = |name: &str, policy: &str, source: PolicySource| {
        Err(Violation::ContainerNotRestartable {
            name: name.to_owned(),
            policy: policy_of(policy, source, false),
        })
    };
    let on_failure_only = |name: &str, source: PolicySource| {
        Ok(Some(Caveat::RestartsOnlyOnSomeExitCodes {
            name: name.to_owned(),
            policy: policy_of("OnFailure", source, false),
            kill_codes_not_restarted: vec![0],
        }))
    };
    let cases = [
        ("regular container", pod(), "app", Ok(None)),
        ("native sidecar", pod(), "proxy", Ok(None)),
        (
            "pod restartPolicy Always",
            with_pod_restart_policy("Always"),
            "app",
            Ok(None),
        ),
        (
            "pod restartPolicy Never",
            with_pod_restart_policy("Never"),
            "app",
            not_restartable("app", "Never", PolicySource::Pod),
        ),
        (
            "pod restartPolicy OnFailure: accepted, with the caveat",
            with_pod_restart_policy("OnFailure"),
            "app",
            on_failure_only("app", PolicySource::Pod),
        ),
        (
            "container policy OnFailure overrides pod Always",
            with_container_restart_policy("app", "OnFailure"),
            "app",
            on_failure_only("app", PolicySource::Container),
        ),
        (
            "native sidecar of an OnFailure pod has no caveat",
            with_pod_restart_policy("OnFailure"),
            "proxy",
            Ok(None),
        ),
        (
            "native sidecar of a Never pod",
            with_pod_restart_policy("Never"),
            "proxy",
            Ok(None),
        ),
        (
            "container policy Always overrides pod Never",
            {
                let mut pod = with_pod_restart_policy("Never");
                pod.spec.as_mut().unwrap().containers[0].restart_policy = Some("Always".to_owned());
                pod
            },
            "app",
            Ok(None),
        ),
        (
            "container policy Never overrides pod Always",
            with_container_restart_policy("app", "Never"),
            "app",
            not_restartable("app", "Never", PolicySource::Container),
        ),
        (
            "plain init container",
            pod(),
            "migrate",
            Err(Violation::InitContainer {
                name: "migrate".to_owned(),
            }),
        ),
        (
            "unknown container",
            pod(),
            "nginx",
            Err(Violation::ContainerNotFound {
                name: "nginx".to_owned(),
            }),
        ),
    ];
    for (case, pod, name, expected) in cases {
        let found = recreatable_container(&pod, name).map(|c| {
            assert_eq!(c.spec.name, name, "{case}");
            c.caveat
        });
        assert_eq!(found, expected, "{case}");
    }
}

#[test]
fn container_refusals_carry_the_webhooks_messages() {
    let cases = [
        (
            Violation::ContainerNotFound {
                name: "nope".to_owned(),
            },
            "ContainerNotFound",
            "container nope not found in Pod",
        ),
        (
            Violation::InitContainer {
                name: "init".to_owned(),
            },
            "InitContainer",
            "container init is an init container that runs once; only native sidecars (restartPolicy: Always) can be recreated",
        ),
        (
            Violation::ContainerNotRestartable {
                name: "app".to_owned(),
                policy: policy_of("Never", PolicySource::Pod, false),
            },
            "ContainerNotRestartable",
            "container app would not be started again after it is stopped, whatever its exit code, under restartPolicy Never (pod); only containers the kubelet restarts can be recreated",
        ),
        (
            Violation::ContainerNotRestartable {
                name: "app".to_owned(),
                policy: policy_of("Never", PolicySource::Container, true),
            },
            "ContainerNotRestartable",
            "container app would not be started again after it is stopped, whatever its exit code, under restartPolicy Never (container) with restartPolicyRules; only containers the kubelet restarts can be recreated",
        ),
        (
            Violation::RestartsAllContainers {
                name: "app".to_owned(),
                codes: vec![143],
            },
            "RestartsAllContainers",
            "container app restarts all containers of the pod (restartPolicyRules action RestartAllContainers) on exit code 143, which a kill produces (0, 137 = SIGKILL, 143 = SIGTERM): recreating it would restart the whole pod, every container killed and the init containers run again",
        ),
        (
            Violation::RestartsAllContainers {
                name: "app".to_owned(),
                codes: vec![0, 137, 143],
            },
            "RestartsAllContainers",
            "container app restarts all containers of the pod (restartPolicyRules action RestartAllContainers) on exit code 0, 137 or 143, which a kill produces (0, 137 = SIGKILL, 143 = SIGTERM): recreating it would restart the whole pod, every container killed and the init containers run again",
        ),
        (
            Violation::ContainerStatusMissing {
                name: "app".to_owned(),
            },
            "ContainerStatusMissing",
            "not found app containerStatus in Pod Status",
        ),
        (
            Violation::ContainerNotStarted {
                name: "app".to_owned(),
            },
            "ContainerNotStarted",
            "no containerID in app containerStatus, maybe the container has not been initialized",
        ),
    ];
    for (violation, reason, message) in cases {
        assert_eq!(violation.reason(), reason);
        assert_eq!(violation.to_string(), message);
    }
}

#[test]
fn recreatable_containers_are_listed_in_start_order() {
    let names = |pod: &Pod| -> Vec<String> {
        recreatable_containers(pod)
            .iter()
            .map(|c| c.spec.name.clone())
            .collect()
    };
    assert_eq!(names(&pod()), ["proxy", "app", "worker"]);
    assert_eq!(names(&with_pod_restart_policy("Never")), ["proxy"]);
    assert_eq!(
        names(&with_pod_restart_policy("OnFailure")),
        ["proxy", "app", "worker"]
    );
    assert_eq!(
        names(&with_container_restart_policy("worker", "Never")),
        ["proxy", "app"]
    );
    assert!(names(&Pod::default()).is_empty());
}

#[test]
fn negative_min_started_and_ttl_are_set_to_zero_with_a_caveat() {
    let mut negative = spec();
    negative.strategy = Some(ContainerRecreateRequestStrategy {
        min_started_seconds: -5,
        ..Default::default()
    });
    negative.ttl_seconds_after_finished = Some(-1);
    let caveats = normalize_spec(&mut negative);
    assert_eq!(
        caveats,
        [
            Caveat::NegativeMinStartedSetToZero { seconds: -5 },
            Caveat::NegativeTtlSetToZero { seconds: -1 },
        ]
    );
    assert_eq!(negative.strategy.as_ref().unwrap().min_started_seconds, 0);
    assert_eq!(negative.ttl_seconds_after_finished, Some(0));
    assert_eq!(
        caveats[0].to_string(),
        "strategy.minStartedSeconds -5 is negative and was set to 0, which is how OpenKruise \
             treats it: the new container counts as soon as it is started and ready"
    );
    assert_eq!(
        caveats[1].to_string(),
        "ttlSecondsAfterFinished -1 is negative and was set to 0, which is how OpenKruise \
             treats it: the request is deleted as soon as it completes"
    );
    assert_eq!(caveats[1].reason(), "NegativeTtlSetToZero");

    let mut fine = spec();
    fine.ttl_seconds_after_finished = Some(0);
    fine.strategy = Some(ContainerRecreateRequestStrategy {
        min_started_seconds: 3,
        ..Default::default()
    });
    let before = fine.clone();
    assert!(normalize_spec(&mut fine).is_empty());
    assert_eq!(fine, before);
}

#[test]
fn restart_caveat_names_the_kill_codes_that_leave_the_container_stopped() {
    let caveat = |policy: EffectivePolicy, codes: &[i32]| Caveat::RestartsOnlyOnSomeExitCodes {
        name: "app".to_owned(),
        policy,
        kill_codes_not_restarted: codes.to_vec(),
    };
    let on_failure = caveat(policy_of("OnFailure", PolicySource::Pod, false), &[0]);
    assert_eq!(on_failure.reason(), "RestartsOnlyOnSomeExitCodes");
    assert_eq!(
        on_failure.to_string(),
        "container app has restartPolicy OnFailure (pod): the kubelet starts it again only \
             after some exit codes; of the codes a kill produces (0, 137 = SIGKILL, 143 = \
             SIGTERM) not after 0: if it exits 0 on SIGTERM it will not be restarted and the \
             request will fail for it"
    );
    let rules = policy_of("Never", PolicySource::Container, true);
    assert_eq!(
        caveat(rules.clone(), &[0, 137]).to_string(),
        "container app has restartPolicy Never (container) with restartPolicyRules: the \
             kubelet starts it again only after some exit codes; of the codes a kill produces \
             (0, 137 = SIGKILL, 143 = SIGTERM) not after 0 or 137: if it exits 0 on SIGTERM or \
             is SIGKILLed (137) it will not be restarted and the request will fail for it"
    );
    assert_eq!(
        caveat(rules.clone(), &[0, 137, 143]).to_string(),
        "container app has restartPolicy Never (container) with restartPolicyRules: the \
             kubelet starts it again only after some exit codes; of the codes a kill produces \
             (0, 137 = SIGKILL, 143 = SIGTERM) not after 0, 137 or 143: if it exits 0 on \
             SIGTERM, is SIGKILLed (137) or dies of SIGTERM (143) it will not be restarted and \
             the request will fail for it"
    );
    assert_eq!(
        caveat(rules, &[]).to_string(),
        "container app has restartPolicy Never (container) with restartPolicyRules: the \
             kubelet starts it again only after some exit codes; it does after every code a kill \
             produces (0, 137 = SIGKILL, 143 = SIGTERM), but if it exits with another code after \
             the kill (from a SIGTERM handler) it will not be restarted and the request will \
             fail for it"
    );
}

#[test]
fn status_context_needs_a_started_container() {
    let found = |pod: &Pod, name: &str| {
        recreatable_container(pod, name).and_then(|container| container.status_context())
    };
    assert_eq!(
        found(&pod(), "proxy"),
        Ok(ContainerRecreateRequestContainerContext {
            container_id: "containerd://proxy".to_owned(),
            restart_count: 2,
        })
    );
    assert_eq!(
        found(&pod(), "app").map(|context| context.container_id),
        Ok("containerd://app".to_owned())
    );

    let mut no_status = pod();
    no_status.status.as_mut().unwrap().container_statuses = Some(Vec::new());
    assert_eq!(
        found(&no_status, "app"),
        Err(Violation::ContainerStatusMissing {
            name: "app".to_owned()
        })
    );
    for container_id in [None, Some("")] {
        let mut not_started = pod();
        not_started.status.as_mut().unwrap().container_statuses =
            Some(vec![status("app", container_id)]);
        assert_eq!(
            found(&not_started, "app"),
            Err(Violation::ContainerNotStarted {
                name: "app".to_owned()
            })
        );
    }
    // A regular container's status is never taken from the init container statuses.
    let mut misplaced = pod();
    let status = misplaced.status.as_mut().unwrap();
    status.container_statuses = None;
    status.init_container_statuses = Some(vec![self::status("app", Some("containerd://x"))]);
    assert!(matches!(
        found(&misplaced, "app"),
        Err(Violation::ContainerStatusMissing { .. })
    ));
}

fn policy_of(policy: &str, source: PolicySource, rules: bool) -> EffectivePolicy {
    EffectivePolicy {
        policy: policy.to_owned(),
        source,
        rules,
    }
}

/// A `restartPolicyRules` rule: `action` on `operator` `values`; no operator, no exitCodes.
fn rule(action: &str, operator: Option<&str>, values: &[i32]) -> ContainerRestartRule {
    ContainerRestartRule {
        action: action.to_owned(),
        exit_codes: operator.map(|operator| ContainerRestartRuleOnExitCodes {
            operator: operator.to_owned(),
            values: Some(values.to_vec()),
        }),
    }
}

/// [`pod`] with the pod's `restartPolicy`, and `app`'s own policy and rules.
fn with_rules(
    pod_policy: Option<&str>,
    app_policy: Option<&str>,
    rules: Vec<ContainerRestartRule>,
) -> Pod {
    let mut pod = pod();
    let spec = pod.spec.as_mut().unwrap();
    spec.restart_policy = pod_policy.map(str::to_owned);
    let app = &mut spec.containers[0];
    app.restart_policy = app_policy.map(str::to_owned);
    app.restart_policy_rules = Some(rules);
    pod
}

/// What [`after_exit`] decides for `app` (or the sidecar `proxy`) of `pod` on `code`.
fn after(pod: &Pod, name: &str, code: i32) -> (AfterExit, Option<usize>) {
    let spec = pod.spec.as_ref().unwrap();
    let container = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap();
    let decision = after_exit(spec, container, code);
    (decision.after, decision.rule)
}

#[test]
fn after_exit_decides_as_the_kubelet() {
    use AfterExit::{Restart, RestartAllContainers as All, StayStopped as Stay};
    let never_restart_on_143 = with_rules(
        None,
        Some("Never"),
        vec![rule("Restart", Some("In"), &[143])],
    );
    let cases = [
        ("pod default Always, exit 0", pod(), 0, (Restart, None)),
        ("pod default Always, exit 1", pod(), 1, (Restart, None)),
        (
            "pod Never",
            with_pod_restart_policy("Never"),
            143,
            (Stay, None),
        ),
        (
            "pod OnFailure, exit 0",
            with_pod_restart_policy("OnFailure"),
            0,
            (Stay, None),
        ),
        (
            "pod OnFailure, exit 143",
            with_pod_restart_policy("OnFailure"),
            143,
            (Restart, None),
        ),
        (
            "unknown pod policy is Always",
            with_pod_restart_policy("Sometimes"),
            0,
            (Restart, None),
        ),
        (
            "container Always over pod Never",
            with_rules(Some("Never"), Some("Always"), vec![]),
            0,
            (Restart, None),
        ),
        (
            "container Never over pod Always",
            with_container_restart_policy("app", "Never"),
            143,
            (Stay, None),
        ),
        (
            "unknown container policy falls back on the pod's",
            with_rules(Some("Never"), Some("Sometimes"), vec![]),
            0,
            (Stay, None),
        ),
        (
            "In rule matches",
            never_restart_on_143.clone(),
            143,
            (Restart, Some(0)),
        ),
        (
            "In rule does not match",
            never_restart_on_143.clone(),
            137,
            (Stay, None),
        ),
        (
            "NotIn rule matches a code not listed",
            with_rules(
                None,
                Some("Never"),
                vec![rule("Restart", Some("NotIn"), &[0])],
            ),
            137,
            (Restart, Some(0)),
        ),
        (
            "NotIn rule does not match a listed code",
            with_rules(
                None,
                Some("Never"),
                vec![rule("Restart", Some("NotIn"), &[0])],
            ),
            0,
            (Stay, None),
        ),
        (
            "a rule without exitCodes never matches",
            with_rules(None, Some("Never"), vec![rule("Restart", None, &[])]),
            0,
            (Stay, None),
        ),
        (
            "a rule with an unknown operator never matches; the next one is tried",
            with_rules(
                None,
                Some("Never"),
                vec![
                    rule("RestartAllContainers", Some("Is"), &[143]),
                    rule("Restart", Some("In"), &[143]),
                ],
            ),
            143,
            (Restart, Some(1)),
        ),
        (
            "the first matching rule wins",
            with_rules(
                None,
                Some("Always"),
                vec![
                    rule("Restart", Some("In"), &[143]),
                    rule("RestartAllContainers", Some("In"), &[143]),
                ],
            ),
            143,
            (Restart, Some(0)),
        ),
        (
            "the first matching rule wins, the other way round",
            with_rules(
                None,
                Some("Always"),
                vec![
                    rule("RestartAllContainers", Some("In"), &[143]),
                    rule("Restart", Some("In"), &[143]),
                ],
            ),
            143,
            (All, Some(0)),
        ),
        (
            "an unknown action falls back on the container's policy, not on later rules",
            with_rules(
                None,
                Some("Never"),
                vec![
                    rule("Ignore", Some("In"), &[143]),
                    rule("Restart", Some("In"), &[143]),
                ],
            ),
            143,
            (Stay, None),
        ),
        (
            "OnFailure container with no matching rule, exit 0",
            with_rules(
                None,
                Some("OnFailure"),
                vec![rule("Restart", Some("In"), &[42])],
            ),
            0,
            (Stay, None),
        ),
        (
            "Restart rules need the container's own policy",
            with_rules(
                Some("Never"),
                None,
                vec![rule("Restart", Some("In"), &[143])],
            ),
            143,
            (Stay, None),
        ),
        (
            "RestartAllContainers is checked for every container, policy or not",
            with_rules(
                Some("Never"),
                None,
                vec![rule("RestartAllContainers", Some("In"), &[143])],
            ),
            143,
            (All, Some(0)),
        ),
    ];
    for (case, pod, code, expected) in cases {
        assert_eq!(after(&pod, "app", code), expected, "{case}");
    }
    let mut sidecar = pod();
    sidecar
        .spec
        .as_mut()
        .unwrap()
        .init_containers
        .as_mut()
        .unwrap()[1]
        .restart_policy_rules = Some(vec![rule("RestartAllContainers", Some("In"), &[1])]);
    assert_eq!(
        after(&sidecar, "proxy", 0),
        (Restart, None),
        "a sidecar is Always"
    );
    assert_eq!(
        after(&sidecar, "proxy", 1),
        (All, Some(0)),
        "and has rules too"
    );
    assert_eq!(
        after_exit(&PodSpec::default(), &container("app", None), 0).policy,
        policy_of("Always", PolicySource::PodDefault, false)
    );
}

#[test]
fn admission_follows_the_kubelet_over_every_exit_code() {
    let accepted = Ok(None);
    let caveat = |policy: EffectivePolicy, codes: &[i32]| {
        Ok(Some(Caveat::RestartsOnlyOnSomeExitCodes {
            name: "app".to_owned(),
            policy,
            kill_codes_not_restarted: codes.to_vec(),
        }))
    };
    let not_restartable = |policy: EffectivePolicy| {
        Err(Violation::ContainerNotRestartable {
            name: "app".to_owned(),
            policy,
        })
    };
    let restarts_all = |codes: &[i32]| {
        Err(Violation::RestartsAllContainers {
            name: "app".to_owned(),
            codes: codes.to_vec(),
        })
    };
    let container_rules = |policy: &str| policy_of(policy, PolicySource::Container, true);
    let cases = [
        (
            "pod Never, container Always",
            with_rules(Some("Never"), Some("Always"), vec![]),
            accepted.clone(),
        ),
        (
            "pod Always, container Never: refused, naming the container's policy",
            with_rules(Some("Always"), Some("Never"), vec![]),
            not_restartable(policy_of("Never", PolicySource::Container, false)),
        ),
        (
            "pod Never: refused, naming the pod's policy",
            with_rules(Some("Never"), None, vec![]),
            not_restartable(policy_of("Never", PolicySource::Pod, false)),
        ),
        (
            "pod OnFailure",
            with_pod_restart_policy("OnFailure"),
            caveat(policy_of("OnFailure", PolicySource::Pod, false), &[0]),
        ),
        (
            "container Never, Restart on In [143]: depends on the exit code",
            with_rules(
                None,
                Some("Never"),
                vec![rule("Restart", Some("In"), &[143])],
            ),
            caveat(container_rules("Never"), &[0, 137]),
        ),
        (
            "container Never, Restart on In [0, 137, 143]: every kill code, not every code",
            with_rules(
                None,
                Some("Never"),
                vec![rule("Restart", Some("In"), &[0, 137, 143])],
            ),
            caveat(container_rules("Never"), &[]),
        ),
        (
            "container Never, Restart on NotIn [0]",
            with_rules(
                None,
                Some("Never"),
                vec![rule("Restart", Some("NotIn"), &[0])],
            ),
            caveat(container_rules("Never"), &[0]),
        ),
        (
            "container Never, Restart on NotIn []: every code",
            with_rules(
                None,
                Some("Never"),
                vec![rule("Restart", Some("NotIn"), &[])],
            ),
            accepted.clone(),
        ),
        (
            "container Never, Restart only on a code no process exits with",
            with_rules(
                None,
                Some("Never"),
                vec![rule("Restart", Some("In"), &[300])],
            ),
            not_restartable(container_rules("Never")),
        ),
        (
            "container Never, a rule without exitCodes",
            with_rules(None, Some("Never"), vec![rule("Restart", None, &[])]),
            not_restartable(container_rules("Never")),
        ),
        (
            "container OnFailure, Restart on In [0]: every code",
            with_rules(
                None,
                Some("OnFailure"),
                vec![rule("Restart", Some("In"), &[0])],
            ),
            accepted.clone(),
        ),
        (
            "RestartAllContainers on 143: refused",
            with_rules(
                None,
                Some("Always"),
                vec![rule("RestartAllContainers", Some("In"), &[143])],
            ),
            restarts_all(&[143]),
        ),
        (
            "RestartAllContainers on NotIn [42]: refused, every kill code",
            with_rules(
                None,
                Some("Always"),
                vec![rule("RestartAllContainers", Some("NotIn"), &[42])],
            ),
            restarts_all(&[0, 137, 143]),
        ),
        (
            "RestartAllContainers only on 42, other codes restart: accepted",
            with_rules(
                None,
                Some("Always"),
                vec![rule("RestartAllContainers", Some("In"), &[42])],
            ),
            accepted.clone(),
        ),
        (
            "RestartAllContainers only on 42, other codes do not: accepted with the caveat",
            with_rules(
                None,
                Some("Never"),
                vec![rule("RestartAllContainers", Some("In"), &[42])],
            ),
            caveat(container_rules("Never"), &[0, 137, 143]),
        ),
        (
            "first match wins: Restart on 143 shadows RestartAllContainers on 143, not on 137",
            with_rules(
                None,
                Some("Always"),
                vec![
                    rule("Restart", Some("In"), &[143]),
                    rule("RestartAllContainers", Some("In"), &[143, 137]),
                ],
            ),
            restarts_all(&[137]),
        ),
        (
            "first match wins: Restart on NotIn [] shadows everything after it",
            with_rules(
                None,
                Some("Never"),
                vec![
                    rule("Restart", Some("NotIn"), &[]),
                    rule("RestartAllContainers", Some("In"), &[143]),
                ],
            ),
            accepted.clone(),
        ),
        (
            "RestartAllContainers without the container's own policy still fires",
            with_rules(
                Some("Always"),
                None,
                vec![rule("RestartAllContainers", Some("In"), &[0])],
            ),
            restarts_all(&[0]),
        ),
    ];
    for (case, pod, expected) in cases {
        let found = recreatable_container(&pod, "app").map(|c| c.caveat);
        assert_eq!(found, expected, "{case}");
    }
}

#[test]
fn sidecars_are_refused_only_when_a_rule_restarts_the_whole_pod_on_a_kill() {
    let with_sidecar_rules = |rules: Vec<ContainerRestartRule>| {
        let mut pod = with_pod_restart_policy("Never");
        pod.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[1].restart_policy_rules =
            Some(rules);
        pod
    };
    let caveat = |pod: &Pod, name: &str| recreatable_container(pod, name).map(|c| c.caveat);
    assert_eq!(
        caveat(
            &with_sidecar_rules(vec![rule("RestartAllContainers", Some("In"), &[42])]),
            "proxy"
        ),
        Ok(None)
    );
    assert_eq!(
        caveat(
            &with_sidecar_rules(vec![rule("RestartAllContainers", Some("In"), &[137])]),
            "proxy"
        ),
        Err(Violation::RestartsAllContainers {
            name: "proxy".to_owned(),
            codes: vec![137],
        })
    );
    // A one-shot init container is refused as such, whatever its rules.
    let mut one_shot = pod();
    let migrate = &mut one_shot
        .spec
        .as_mut()
        .unwrap()
        .init_containers
        .as_mut()
        .unwrap()[0];
    migrate.restart_policy = Some("Never".to_owned());
    migrate.restart_policy_rules = Some(vec![rule("Restart", Some("NotIn"), &[])]);
    assert_eq!(
        caveat(&one_shot, "migrate"),
        Err(Violation::InitContainer {
            name: "migrate".to_owned()
        })
    );
}

#[test]
fn refusals_name_the_container_and_where_its_policy_is_set() {
    let message = |pod: &Pod| recreatable_container(pod, "app").unwrap_err().to_string();
    let container_never = message(&with_rules(Some("Always"), Some("Never"), vec![]));
    assert!(
        container_never.contains("container app ")
            && container_never.contains("restartPolicy Never (container)"),
        "{container_never}"
    );
    let pod_never = message(&with_pod_restart_policy("Never"));
    assert!(
        pod_never.contains("restartPolicy Never (pod)"),
        "{pod_never}"
    );
    let restarts_all = message(&with_rules(
        None,
        Some("Always"),
        vec![rule("RestartAllContainers", Some("In"), &[143])],
    ));
    assert!(
        restarts_all.contains("container app ")
            && restarts_all.contains("exit code 143")
            && restarts_all.contains("restart the whole pod"),
        "{restarts_all}"
    );
}

#[test]
fn a_container_left_stopped_by_its_rules_is_not_restarted_after_the_kill() {
    let never_but_143 = with_rules(
        None,
        Some("Never"),
        vec![rule("Restart", Some("In"), &[143])],
    );
    let message = not_restarted(
        &exited(never_but_143.clone(), "app", "containerd://a1", 137),
        "app",
        "containerd://a1",
    )
    .expect("SIGKILLed, and only 143 restarts it");
    assert_eq!(
        message,
        "container app exited with code 137 after the kill, none of its restartPolicyRules \
             restarts it on exit code 137 and its restartPolicy is Never (container): the kubelet \
             does not start it again"
    );
    assert_eq!(
        not_restarted(
            &exited(never_but_143.clone(), "app", "containerd://a1", 143),
            "app",
            "containerd://a1"
        ),
        None,
        "143 restarts it"
    );
    let restarts_all_on_42 = with_rules(
        None,
        Some("Never"),
        vec![rule("RestartAllContainers", Some("In"), &[42])],
    );
    assert_eq!(
        not_restarted(
            &exited(restarts_all_on_42, "app", "containerd://a1", 42),
            "app",
            "containerd://a1"
        ),
        None,
        "the whole pod restarts, this container with it"
    );
    let message = not_restarted(
        &exited(
            with_container_restart_policy("app", "OnFailure"),
            "app",
            "containerd://a1",
            0,
        ),
        "app",
        "containerd://a1",
    )
    .expect("OnFailure and 0");
    assert_eq!(
        message,
        "container app exited with code 0 after the kill and its restartPolicy is OnFailure \
             (container): the kubelet does not start it again"
    );
    let message = not_restarted(
        &exited(
            with_pod_restart_policy("Never"),
            "app",
            "containerd://a1",
            143,
        ),
        "app",
        "containerd://a1",
    )
    .expect("pod Never");
    assert!(
        message.contains("restartPolicy is Never (pod)"),
        "{message}"
    );
}
