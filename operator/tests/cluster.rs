//! The operator against a real cluster (the local one from `hack/`, see hack/README.md).
//!
//! Each test gets a fresh namespace, runs the real `crr-operator` binary restricted to that
//! namespace (so parallel tests do not act on each other's objects) and deletes the namespace
//! afterwards (keep it with `CRR_KEEP_NAMESPACES=1`). The node daemon does not take part: where the
//! daemon would write a phase, the test writes it through the real API server.
//!
//! The tests are ignored unless asked for (`-- --include-ignored`, as hack/cluster-test.sh runs
//! them); run without the test bed, they fail (see `crr_testbed`). The CRD is created when
//! missing, without its conversion webhook (these tests use only v1beta1, the storage version,
//! so nothing needs converting).
//!
//! Pods that need not run are bound to a node that does not exist, so no kubelet touches them.
//! Gated pods carry a test label that the operator is told to select (`--readiness-gate-selector`),
//! so the operator starts their `KruisePodReady` condition at True.
//! The readiness tests need a running container: image `CRR_TEST_IMAGE` (default
//! `crr.local/pause:3.10`, which `hack/cluster.sh up` imports) must be on the cluster's nodes.

use std::collections::BTreeMap;
use std::future::Future;
use std::process::Stdio;
use std::time::Duration;

use crr_crds::keys;
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainer,
    ContainerRecreateRequestContainerContext, ContainerRecreateRequestSpec,
    ContainerRecreateRequestStrategy, Phase,
};
use crr_testbed as testbed;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Pod, PodReadinessGate, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::Condition;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::process::{Child, Command};

const WAIT: Duration = Duration::from_secs(60);
/// Label the tests put on pods with the readiness gate, and the operator's selector for them.
const GATED_POD_LABEL: &str = "crr.apps.kruise.io/readiness-gate";
const GATED_POD_SELECTOR: &str = "crr.apps.kruise.io/readiness-gate=true";

/// Runs `body` in a fresh namespace (see `crr_testbed::with_namespace`).
async fn with_namespace<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    testbed::with_namespace("crr-op", "operator", test, WAIT, body).await;
}

/// A `crr-operator` process watching only `namespace`, killed when dropped.
struct Operator {
    child: Child,
    identity: String,
}

impl Operator {
    fn start(namespace: &str, identity: &str) -> Self {
        Self::start_with_log(namespace, identity, Stdio::inherit())
    }

    /// [`Operator::start`], its log (stdout) going to `log`.
    fn start_with_log(namespace: &str, identity: &str, log: Stdio) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_crr-operator"))
            .args([
                "--watch-namespace",
                namespace,
                "--lease-namespace",
                namespace,
                "--lease-name",
                "crr-operator",
                "--identity",
                identity,
                "--admin-addr",
                "127.0.0.1:0",
                "--lease-duration-seconds",
                "4",
                "--renew-deadline-seconds",
                "3",
                "--retry-period-seconds",
                "1",
                "--readiness-gate-selector",
                GATED_POD_SELECTOR,
            ])
            .env("RUST_LOG", "info,crr_operator=debug")
            .stdin(Stdio::null())
            .stdout(log)
            .kill_on_drop(true)
            .spawn()
            .expect("starting crr-operator");
        Self {
            child,
            identity: identity.to_owned(),
        }
    }

    async fn kill(mut self) {
        self.child.kill().await.expect("killing crr-operator");
    }
}

/// The Lease holder, once someone holds it.
async fn leader(client: &Client, namespace: &str) -> String {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let held = |lease: Option<&Lease>| {
        lease
            .and_then(|lease| lease.spec.as_ref())
            .and_then(|spec| spec.holder_identity.as_deref())
            .is_some_and(|holder| !holder.is_empty())
    };
    let lease = testbed::wait_for(leases, "crr-operator", held, "a leader", WAIT).await;
    lease
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
        .unwrap_or_default()
}

fn image() -> String {
    std::env::var("CRR_TEST_IMAGE").unwrap_or_else(|_| "crr.local/pause:3.10".to_owned())
}

/// A pod bound to a node that does not exist: it exists (with a UID) but never runs.
async fn parked_pod(client: &Client, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("crr-test-no-such-node".to_owned()),
            containers: vec![Container {
                name: "app".to_owned(),
                image: Some(image()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("creating a parked pod")
}

fn pod_condition<'a>(
    pod: &'a Pod,
    type_: &str,
) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|condition| condition.type_ == type_)
}

fn condition_is(pod: Option<&Pod>, type_: &str, status: &str) -> bool {
    pod.and_then(|pod| pod_condition(pod, type_))
        .is_some_and(|condition| condition.status == status)
}

/// A running pod with the `KruisePodReady` readiness gate, labelled so that the operator starts
/// the gate's condition at True; returned once Ready.
async fn gated_ready_pod(client: &Client, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                GATED_POD_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            readiness_gates: Some(vec![PodReadinessGate {
                condition_type: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
            }]),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "app".to_owned(),
                image: Some(image()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("creating a gated pod");
    testbed::wait_for(
        pods,
        name,
        |pod: Option<&Pod>| condition_is(pod, "Ready", "True"),
        "the gated pod to be Ready (KruisePodReady initialised by the operator)",
        WAIT,
    )
    .await
    .expect("pod exists")
}

/// A v1beta1 request as the webhook would have completed it (labels and status context).
fn request(
    name: &str,
    pod: &Pod,
    spec: impl FnOnce(&mut ContainerRecreateRequestSpec),
) -> ContainerRecreateRequest {
    let status_context = pod
        .status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|status| status.name == "app"))
        .map(|status| ContainerRecreateRequestContainerContext {
            container_id: status.container_id.clone().unwrap_or_default(),
            restart_count: status.restart_count,
        });
    let mut crr = ContainerRecreateRequest::new(
        name,
        ContainerRecreateRequestSpec {
            pod_name: pod.name_any(),
            containers: vec![ContainerRecreateRequestContainer {
                name: "app".to_owned(),
                status_context,
                ..Default::default()
            }],
            strategy: Some(ContainerRecreateRequestStrategy {
                failure_policy: Some("Fail".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    crr.metadata.labels = Some(BTreeMap::from([
        (keys::LABEL_ACTIVE.to_owned(), "true".to_owned()),
        (
            keys::LABEL_POD_UID.to_owned(),
            pod.uid().unwrap_or_default(),
        ),
        (
            keys::LABEL_NODE_NAME.to_owned(),
            pod.spec
                .as_ref()
                .and_then(|spec| spec.node_name.clone())
                .unwrap_or_default(),
        ),
    ]));
    spec(&mut crr.spec);
    crr
}

async fn create(
    client: &Client,
    namespace: &str,
    crr: &ContainerRecreateRequest,
) -> ContainerRecreateRequest {
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), namespace);
    crrs.create(&PostParams::default(), crr)
        .await
        .expect("creating the request")
}

/// Writes a status the way the node daemon would.
async fn daemon_writes(client: &Client, namespace: &str, name: &str, status: serde_json::Value) {
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), namespace);
    crrs.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .expect("writing the request status as the daemon");
}

fn completed_with(message: &'static str) -> impl Condition<ContainerRecreateRequest> {
    move |crr: Option<&ContainerRecreateRequest>| {
        crr.and_then(|crr| crr.status.as_ref())
            .is_some_and(|status| {
                status.phase == Some(Phase::Completed)
                    && status.completion_time.is_some()
                    && status.message.as_deref() == Some(message)
            })
    }
}

fn not_active(crr: Option<&ContainerRecreateRequest>) -> bool {
    crr.is_some_and(|crr| !crr.labels().contains_key(keys::LABEL_ACTIVE))
}

fn holders_message(namespace: &str, names: &[&str]) -> String {
    let entries: Vec<String> = names
        .iter()
        .map(|name| {
            format!(r#"{{"userAgent":"ContainerRecreateRequest","key":"{namespace}/{name}"}}"#)
        })
        .collect();
    format!("[{}]", entries.join(","))
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn active_deadline_completes_the_request_and_leaves_the_daemons_states() {
    with_namespace("deadline", |client, namespace| async move {
        let _operator = Operator::start(&namespace, "deadline-0");
        let pod = parked_pod(&client, &namespace, "web").await;
        let crr = request("deadline", &pod, |spec| {
            spec.active_deadline_seconds = Some(3)
        });
        create(&client, &namespace, &crr).await;
        daemon_writes(
            &client,
            &namespace,
            "deadline",
            json!({
                "phase": "Recreating",
                "containerRecreateStates": [{ "name": "app", "phase": "Recreating", "isKilled": true }],
            }),
        )
        .await;
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        let done = testbed::wait_for(
            crrs.clone(),
            "deadline",
            completed_with("recreating has exceeded the activeDeadlineSeconds"),
            "completion by deadline",
            WAIT,
        )
        .await
        .expect("request exists");
        let succeeded = done
            .condition(keys::CONDITION_SUCCEEDED)
            .expect("the Succeeded condition");
        assert_eq!(succeeded.status, "False");
        assert_eq!(succeeded.reason, "ActiveDeadlineExceeded");
        assert_eq!(
            succeeded.message,
            "recreating has exceeded the activeDeadlineSeconds; not recreated: app (Recreating, killed)"
        );
        let status = done.status.clone().expect("status");
        assert_eq!(status.container_recreate_states.len(), 1);
        let state = &status.container_recreate_states[0];
        assert_eq!(
            (state.name.as_str(), state.phase, state.is_killed),
            ("app", Phase::Recreating, true),
            "the state the daemon wrote is left as it was"
        );
        let created = done.metadata.creation_timestamp.expect("created").0;
        let completed = status.completion_time.expect("completion time").0;
        let took = completed.duration_since(created).as_secs_f64();
        assert!(
            took >= 2.0,
            "completed {took}s after creation, before the deadline"
        );
        testbed::wait_for(crrs, "deadline", not_active, "the active label to go", WAIT).await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn finished_request_is_deleted_after_its_ttl() {
    with_namespace("ttl", |client, namespace| async move {
        let _operator = Operator::start(&namespace, "ttl-0");
        let pod = parked_pod(&client, &namespace, "web").await;
        let crr = request("ttl", &pod, |spec| spec.ttl_seconds_after_finished = Some(2));
        let created = create(&client, &namespace, &crr).await;
        daemon_writes(
            &client,
            &namespace,
            "ttl",
            json!({
                "phase": "Completed",
                "completionTime": Time(jiff::Timestamp::now()),
                "containerRecreateStates": [{ "name": "app", "phase": "Succeeded", "isKilled": true }],
            }),
        )
        .await;
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        let uid = created.uid().expect("uid");
        // The API server keeps whole seconds: the TTL runs from the stored
        // completion time, which may be up to a second before the write.
        let stored = crrs.get("ttl").await.expect("reading the request back");
        let completed = stored
            .status
            .and_then(|status| status.completion_time)
            .expect("stored completion time")
            .0;
        testbed::wait_for(
            crrs,
            "ttl",
            kube::runtime::conditions::is_deleted(&uid),
            "deletion by TTL",
            WAIT,
        )
        .await;
        let deleted_by = jiff::Timestamp::now();
        assert!(
            deleted_by >= completed + jiff::SignedDuration::from_secs(2),
            "deleted before its TTL: completed at {completed}, gone by {deleted_by}"
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn request_whose_pod_is_deleted_completes_with_pod_has_gone() {
    with_namespace("podgone", |client, namespace| async move {
        let _operator = Operator::start(&namespace, "podgone-0");
        let pod = parked_pod(&client, &namespace, "web").await;
        create(&client, &namespace, &request("gone", &pod, |_| {})).await;
        daemon_writes(
            &client,
            &namespace,
            "gone",
            json!({ "phase": "Recreating" }),
        )
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        pods.delete("web", &DeleteParams::default().grace_period(0))
            .await
            .expect("deleting the pod");
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        testbed::wait_for(
            crrs,
            "gone",
            completed_with("pod has gone"),
            "completion by pod loss",
            WAIT,
        )
        .await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn unready_grace_takes_the_pod_out_of_endpoints_and_completion_restores_it() {
    with_namespace("unready", |client, namespace| async move {
        let _operator = Operator::start(&namespace, "unready-0");
        let pod = gated_ready_pod(&client, &namespace, "web").await;
        let crr = request("unready", &pod, |spec| {
            spec.strategy.get_or_insert_default().unready_grace_period_seconds = Some(1);
        });
        create(&client, &namespace, &crr).await;
        daemon_writes(&client, &namespace, "unready", json!({ "phase": "Recreating" })).await;

        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        let expected = holders_message(&namespace, &["unready"]);
        let held = testbed::wait_for(
            pods.clone(),
            "web",
            |pod: Option<&Pod>| {
                pod.and_then(|pod| pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY))
                    .is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(expected.as_str()))
            },
            "KruisePodReady=False held by the request", WAIT,)
        .await
        .expect("pod exists");
        assert!(!condition_is(Some(&held), "Ready", "True"), "pod still Ready");
        let grace = testbed::wait_for(
            crrs.clone(),
            "unready",
            |crr: Option<&ContainerRecreateRequest>| {
                crr.and_then(|crr| crr.condition(keys::CONDITION_PRE_RECREATE_GRACE))
                    .is_some_and(|c| c.status == "True")
            },
            "the PreRecreateGrace condition", WAIT,)
        .await
        .expect("request exists");
        assert!(grace.finalizers().iter().any(|f| f == keys::FINALIZER_UNREADY_ACQUIRED));

        // The daemon finishes.
        daemon_writes(
            &client,
            &namespace,
            "unready",
            json!({
                "phase": "Completed",
                "completionTime": Time(jiff::Timestamp::now()),
                "containerRecreateStates": [{ "name": "app", "phase": "Succeeded", "isKilled": true }],
            }),
        )
        .await;
        testbed::wait_for(
            pods.clone(),
            "web",
            |pod: Option<&Pod>| condition_is(pod, keys::POD_CONDITION_KRUISE_POD_READY, "True"),
            "KruisePodReady back to True", WAIT,)
        .await;
        testbed::wait_for(
            pods,
            "web",
            |pod: Option<&Pod>| condition_is(pod, "Ready", "True"),
            "the pod Ready again", WAIT,)
        .await;
        testbed::wait_for(
            crrs,
            "unready",
            |crr: Option<&ContainerRecreateRequest>| {
                crr.is_some_and(|crr| crr.finalizers().is_empty() && !crr.labels().contains_key(keys::LABEL_ACTIVE))
            },
            "the finalizer and the active label to go", WAIT,)
        .await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn deleting_a_request_mid_flight_restores_the_pod_readiness() {
    with_namespace("midflight", |client, namespace| async move {
        let _operator = Operator::start(&namespace, "midflight-0");
        let pod = gated_ready_pod(&client, &namespace, "web").await;
        let crr = request("midflight", &pod, |spec| {
            spec.strategy
                .get_or_insert_default()
                .unready_grace_period_seconds = Some(30);
        });
        let created = create(&client, &namespace, &crr).await;
        daemon_writes(
            &client,
            &namespace,
            "midflight",
            json!({ "phase": "Recreating" }),
        )
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        testbed::wait_for(
            pods.clone(),
            "web",
            |pod: Option<&Pod>| condition_is(pod, keys::POD_CONDITION_KRUISE_POD_READY, "False"),
            "KruisePodReady=False",
            WAIT,
        )
        .await;
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        testbed::wait_for(
            crrs.clone(),
            "midflight",
            |crr: Option<&ContainerRecreateRequest>| {
                crr.is_some_and(|crr| {
                    crr.finalizers()
                        .iter()
                        .any(|f| f == keys::FINALIZER_UNREADY_ACQUIRED)
                })
            },
            "the unready-acquired finalizer",
            WAIT,
        )
        .await;
        crrs.delete("midflight", &DeleteParams::default())
            .await
            .expect("deleting the request");
        testbed::wait_for(
            pods.clone(),
            "web",
            |pod: Option<&Pod>| {
                pod.and_then(|pod| pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY))
                    .is_some_and(|c| c.status == "True" && c.message.as_deref() == Some("[]"))
            },
            "KruisePodReady restored after deletion",
            WAIT,
        )
        .await;
        let uid = created.uid().expect("uid");
        testbed::wait_for(
            crrs,
            "midflight",
            kube::runtime::conditions::is_deleted(&uid),
            "the request to be gone",
            WAIT,
        )
        .await;
        testbed::wait_for(
            pods,
            "web",
            |pod: Option<&Pod>| condition_is(pod, "Ready", "True"),
            "the pod Ready again",
            WAIT,
        )
        .await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn second_replica_takes_over_when_the_leader_is_killed() {
    with_namespace("failover", |client, namespace| async move {
        let first = Operator::start(&namespace, "replica-a");
        let second = Operator::start(&namespace, "replica-b");
        let holder = leader(&client, &namespace).await;
        let (leading, standing_by) = if holder == first.identity {
            (first, second)
        } else {
            (second, first)
        };
        assert_eq!(holder, leading.identity);
        leading.kill().await;

        // Only a live leader completes this request.
        let pod = parked_pod(&client, &namespace, "web").await;
        create(
            &client,
            &namespace,
            &request("failover", &pod, |spec| {
                spec.active_deadline_seconds = Some(3)
            }),
        )
        .await;
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        testbed::wait_for(
            crrs,
            "failover",
            completed_with("recreating has exceeded the activeDeadlineSeconds"),
            "completion by the replica that took over",
            WAIT,
        )
        .await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
        let lease = leases.get("crr-operator").await.expect("reading the Lease");
        assert_eq!(
            lease.spec.and_then(|spec| spec.holder_identity),
            Some(standing_by.identity.clone())
        );
        drop(standing_by);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn sigterm_releases_the_lease() {
    with_namespace("release", |client, namespace| async move {
        let mut operator = Operator::start(&namespace, "releasing");
        assert_eq!(leader(&client, &namespace).await, "releasing");
        let pid = operator.child.id().expect("operator pid");
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .expect("sending SIGTERM");
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(30), operator.child.wait())
            .await
            .expect("operator exits after SIGTERM")
            .expect("waiting for the operator");
        assert!(exit.success(), "operator exited with {exit}");
        let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
        let lease = leases.get("crr-operator").await.expect("reading the Lease");
        assert_eq!(lease.spec.and_then(|spec| spec.holder_identity), None);
    })
    .await;
}

/// Whether the API server serves ContainerRecreateRollouts (their CRD is installed).
async fn rollouts_served(client: &Client) -> bool {
    client
        .list_api_group_resources("crr.dev/v1alpha1")
        .await
        .is_ok_and(|list| {
            list.resources
                .iter()
                .any(|resource| resource.name == "containerrecreaterollouts")
        })
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn a_wing_without_its_crd_waits_and_says_so_once() {
    with_namespace("no-crd", |client, namespace| async move {
        let served = rollouts_served(&client).await;
        let operator = Operator::start_with_log(&namespace, "waiting", Stdio::piped());
        assert_eq!(leader(&client, &namespace).await, "waiting");
        // The first looks again come after 1, 2 and 4 s: three of them fit in 8 s.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let mut child = operator.child;
        child.start_kill().expect("stopping crr-operator");
        let output = child.wait_with_output().await.expect("the operator's log");
        let log = String::from_utf8_lossy(&output.stdout);
        let said = |wing: &str| {
            log.lines()
                .filter(|line| {
                    line.contains("the CRD is not installed")
                        && line.contains(&format!("wing=\"{wing}\""))
                })
                .count()
        };
        // Served (another suite installed it): nothing to say; missing: said once per wing.
        let expected = usize::from(!served);
        assert_eq!(said("rollout"), expected, "served: {served}\n{log}");
        assert_eq!(said("triggers"), expected, "served: {served}\n{log}");
        assert!(
            !log.contains("failed to perform initial object list"),
            "no watch of a kind that is not served:\n{log}"
        );
    })
    .await;
}
