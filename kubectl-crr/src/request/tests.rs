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
            policy: crr_crds::restart_policy::EffectivePolicy {
                policy: "OnFailure".to_owned(),
                source: crr_crds::restart_policy::PolicySource::Pod,
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
