//! The node daemon against a real cluster and its real containerd (the local one from `hack/`,
//! see hack/README.md).
//!
//! Each test gets a fresh namespace (or two), runs the real `crr-node-daemon` binary restricted
//! to it (`--watch-namespace`) inside the node's network namespace (`nsenter`, so that pod
//! IPs are reachable, as from a host-network DaemonSet pod), and deletes the namespace
//! afterwards (keep it with `CRR_KEEP_NAMESPACES=1`). The daemon's log goes to a file whose path
//! the test prints.
//!
//! The tests are ignored unless asked for (`-- --include-ignored`, as hack/cluster-test.sh runs
//! them); run without the test bed, they fail (see `crr_testbed`). The CRD is created when
//! missing, without its conversion webhook.
//!
//! The cluster may have crr installed (hack/install.sh) or not:
//! - webhook installed: requests are created as users write them and the webhook adds labels,
//!   preStop and statusContext; not installed: the test adds what the webhook would.
//! - operator installed: it writes the snapshot; not installed: the test runs
//!   `crr-operator` beside this package's binary in cargo's target folder (or `CRR_OPERATOR_BIN`)
//!   for its namespace, when built.
//! - a node daemon installed: a ValidatingAdmissionPolicy denies it every write to this test's
//!   namespace, so only the daemon under test acts (its first act is always a status write,
//!   and no kill comes before one).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crr_crds::keys;
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainer,
    ContainerRecreateRequestContainerContext, ContainerRecreateRequestSpec,
    ContainerRecreateRequestStrategy, Phase, ProbeHandler,
};
use crr_testbed as testbed;
use futures::FutureExt as _;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{LogParams, PostParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;
use tokio::process::{Child, Command};

const WAIT: Duration = Duration::from_secs(120);
/// The service account of an installed node daemon (manifests/).
const INSTALLED_DAEMON: &str = "crr-node-daemon";

/// Runs `body` in a fresh namespace (see `crr_testbed::with_namespace`).
async fn with_namespace<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    testbed::with_namespace("crr-nd", "node-daemon", test, WAIT, body).await;
}

/// What of crr is installed in the cluster.
struct Installed {
    webhook: bool,
    operator: bool,
}

async fn installed(client: &Client) -> Installed {
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let webhook = webhooks
        .list(&Default::default())
        .await
        .expect("listing mutating webhooks")
        .items
        .iter()
        .flat_map(|config| config.webhooks.iter().flatten())
        .flat_map(|webhook| webhook.rules.iter().flatten())
        .flat_map(|rule| rule.resources.iter().flatten())
        .any(|resource| resource == keys::PLURAL);
    let deployments: Api<Deployment> = Api::all(client.clone());
    let operator = deployments
        .list(&Default::default())
        .await
        .expect("listing deployments")
        .items
        .iter()
        .any(|deployment| {
            deployment.name_any() == "crr-operator"
                && deployment
                    .status
                    .as_ref()
                    .and_then(|status| status.available_replicas)
                    .unwrap_or(0)
                    > 0
        });
    Installed { webhook, operator }
}

/// The node whose runtime socket ([`cri_socket`]) and network namespace the daemon under test
/// uses: the test pods are bound to it, so that a test bed with more nodes (`CRR_NODES`) never
/// schedules them where this daemon cannot reach.
const TESTED_NODE: &str = "crr-node";

fn cri_socket() -> PathBuf {
    std::env::var_os("CRR_CRI_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/crr-cluster/containerd/containerd.sock"))
}

/// A process killed when dropped, its log in a file.
struct Process {
    _child: Child,
}

/// Starts `program` inside the node's network namespace when there is one.
fn spawn(program: &Path, args: &[&str], log: &Path) -> Process {
    let netns = Path::new("/run/netns/crr-node");
    let mut command = if netns.exists() {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net={}", netns.display()))
            .arg(program);
        command
    } else {
        Command::new(program)
    };
    let log_file = std::fs::File::create(log).expect("creating a log file");
    let child = command
        .args(args)
        .env("RUST_LOG", "info,crr_node_daemon=debug")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log file"))
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|error| panic!("starting {}: {error}", program.display()));
    eprintln!("{} logs to {}", program.display(), log.display());
    Process { _child: child }
}

fn start_daemon(namespace: &str, node: &str) -> Process {
    start_daemon_with(namespace, node, &[])
}

/// The daemon for `namespaces` (comma-separated), with more flags.
fn start_daemon_with(namespaces: &str, node: &str, flags: &[&str]) -> Process {
    let socket = cri_socket();
    let log =
        std::env::temp_dir().join(format!("{}-node-daemon.log", namespaces.replace(',', "+")));
    let socket = socket.to_string_lossy();
    let mut args = vec![
        "--node-name",
        node,
        "--watch-namespace",
        namespaces,
        "--cri-socket",
        &socket,
        "--admin-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(flags);
    spawn(
        Path::new(env!("CARGO_BIN_EXE_crr-node-daemon")),
        &args,
        &log,
    )
}

/// The operator for this namespace, unless an installed one serves every namespace.
fn start_operator(namespace: &str) -> Process {
    let binary = std::env::var_os("CRR_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // Beside this package's own binary, in whatever target folder cargo builds into.
            Path::new(env!("CARGO_BIN_EXE_crr-node-daemon")).with_file_name("crr-operator")
        });
    assert!(
        binary.exists(),
        "no operator installed and no {} (build it with `cargo build -p crr-operator` or set \
         CRR_OPERATOR_BIN)",
        binary.display()
    );
    let log = std::env::temp_dir().join(format!("{namespace}-operator.log"));
    spawn(
        &binary,
        &[
            "--watch-namespace",
            namespace,
            "--lease-namespace",
            namespace,
            "--identity",
            "node-daemon-test",
            "--admin-addr",
            "127.0.0.1:0",
        ],
        &log,
    )
}

const LOOP: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// A running two-container pod sharing an emptyDir; each start of `app` appends to
/// /data/starts and prints the file, and its preStop appends to /data/prestop.
async fn two_container_pod(client: &Client, namespace: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let app = format!(
        "echo started >> /data/starts; cat /data/starts; cat /data/prestop 2>/dev/null; {LOOP}"
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "two"},
        "spec": {
            "nodeName": TESTED_NODE,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "app",
                    "image": "crr.local/busybox:1.35",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", app],
                    "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo prestop ran >> /data/prestop"]}}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {
                    "name": "sidecar",
                    "image": "crr.local/busybox:1.35",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", LOOP],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("creating the pod");
    testbed::wait_for(pods, "two", all_ready, "the pod to be Ready", WAIT)
        .await
        .expect("the pod")
}

fn all_ready(pod: Option<&Pod>) -> bool {
    pod.and_then(|pod| pod.status.as_ref())
        .and_then(|status| status.container_statuses.as_ref())
        .is_some_and(|statuses| !statuses.is_empty() && statuses.iter().all(|status| status.ready))
}

/// (containerID, restartCount) of a container of the pod.
fn container(pod: &Pod, name: &str) -> (String, i32) {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|status| status.name == name))
        .map(|status| {
            (
                status.container_id.clone().unwrap_or_default(),
                status.restart_count,
            )
        })
        .unwrap_or_else(|| panic!("no status of container {name}"))
}

/// A request for `names` of the pod, carrying what the webhook adds unless it is installed.
fn request(pod: &Pod, names: &[&str], webhook: bool) -> ContainerRecreateRequest {
    let mut crr = ContainerRecreateRequest::new(
        "recreate-app",
        ContainerRecreateRequestSpec {
            pod_name: pod.name_any(),
            containers: names
                .iter()
                .map(|name| ContainerRecreateRequestContainer {
                    name: (*name).to_owned(),
                    ..Default::default()
                })
                .collect(),
            strategy: Some(ContainerRecreateRequestStrategy::default()),
            ..Default::default()
        },
    );
    if webhook {
        return crr;
    }
    let spec = pod.spec.as_ref().expect("a pod spec");
    crr.metadata.labels = Some(BTreeMap::from([
        (keys::LABEL_ACTIVE.to_owned(), "true".to_owned()),
        (
            keys::LABEL_NODE_NAME.to_owned(),
            spec.node_name.clone().expect("a scheduled pod"),
        ),
        (
            keys::LABEL_POD_UID.to_owned(),
            pod.uid().expect("a pod UID"),
        ),
    ]));
    let strategy = crr.spec.strategy.as_mut().expect("a strategy");
    strategy.failure_policy = Some("Fail".to_owned());
    strategy.termination_grace_period_seconds = spec.termination_grace_period_seconds;
    for target in &mut crr.spec.containers {
        let (container_id, restart_count) = container(pod, &target.name);
        target.status_context = Some(ContainerRecreateRequestContainerContext {
            container_id,
            restart_count,
        });
        let pre_stop = spec
            .containers
            .iter()
            .find(|container| container.name == target.name)
            .and_then(|container| container.lifecycle.as_ref())
            .and_then(|lifecycle| lifecycle.pre_stop.as_ref());
        target.pre_stop = pre_stop.map(|handler| ProbeHandler {
            exec: handler.exec.clone(),
            http_get: handler.http_get.clone(),
            tcp_socket: handler.tcp_socket.clone(),
        });
    }
    crr
}

fn completed(crr: Option<&ContainerRecreateRequest>) -> bool {
    crr.is_some_and(|crr| crr.is_completed())
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn recreates_one_container_of_two_in_place() {
    with_namespace("two", |client, namespace| async move {
        let installed = installed(&client).await;
        testbed::deny_writes(
            &client,
            &namespace,
            &[INSTALLED_DAEMON],
            "requests of this namespace belong to the node daemon under test",
            WAIT,
        )
        .await;
        let _operator = (!installed.operator).then(|| start_operator(&namespace));
        let pod = two_container_pod(&client, &namespace).await;
        let node = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.node_name.clone())
            .expect("a scheduled pod");
        let _daemon = start_daemon(&namespace, &node);
        let (app_before, app_restarts) = container(&pod, "app");
        let sidecar_before = container(&pod, "sidecar");
        let ip_before = pod.status.as_ref().and_then(|status| status.pod_ip.clone());
        assert!(ip_before.is_some(), "the pod has an IP");

        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        let created = crrs
            .create(
                &PostParams::default(),
                &request(&pod, &["app"], installed.webhook),
            )
            .await
            .expect("creating the request");
        assert_eq!(
            created.labels().get(keys::LABEL_POD_UID),
            pod.uid().as_ref(),
            "the request targets this pod"
        );
        let done = testbed::wait_for(
            crrs,
            "recreate-app",
            completed,
            "the request to complete",
            WAIT,
        )
        .await
        .expect("the request");
        let status = done.status.clone().expect("a status");
        assert_eq!(status.phase, Some(Phase::Completed));
        assert_eq!(
            done.condition(keys::CONDITION_SUCCEEDED)
                .map(|condition| condition.status.as_str()),
            Some("True"),
            "{status:#?}"
        );
        let states: Vec<_> = status
            .container_recreate_states
            .iter()
            .map(|state| (state.name.as_str(), state.phase, state.is_killed))
            .collect();
        assert_eq!(states, [("app", Phase::Succeeded, true)]);

        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let after = pods.get("two").await.expect("the pod");
        assert_eq!(after.uid(), pod.uid(), "the same pod");
        let (app_after, app_restarts_after) = container(&after, "app");
        assert_ne!(app_after, app_before, "app has a new container");
        assert_eq!(app_restarts_after, app_restarts + 1);
        assert_eq!(
            container(&after, "sidecar"),
            sidecar_before,
            "sidecar untouched"
        );
        assert_eq!(
            after
                .status
                .as_ref()
                .and_then(|status| status.pod_ip.clone()),
            ip_before,
            "the pod keeps its IP"
        );
        // The new app printed the emptyDir's files at its start: the first start's line
        // survived, and the preStop hook ran in the old container before it was stopped.
        let log = pods
            .logs(
                "two",
                &LogParams {
                    container: Some("app".to_owned()),
                    ..Default::default()
                },
            )
            .await
            .expect("app's log");
        assert_eq!(log.matches("started").count(), 2, "{log}");
        assert!(log.contains("prestop ran"), "{log}");
    })
    .await;
}

/// A running one-container pod `name` whose `app` container has `pre_stop` (a shell command) as
/// its preStop hook, and `grace_seconds` as its grace period.
async fn pod_with_hook(
    client: &Client,
    namespace: &str,
    name: &str,
    pre_stop: Option<&str>,
    grace_seconds: i64,
) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut app = json!({
        "name": "app",
        "image": "crr.local/busybox:1.35",
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", LOOP],
    });
    if let Some(command) = pre_stop {
        app["lifecycle"] = json!({"preStop": {"exec": {"command": ["sh", "-c", command]}}});
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": TESTED_NODE, "terminationGracePeriodSeconds": grace_seconds, "containers": [app]},
    }))
    .expect("a pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("creating the pod");
    testbed::wait_for(pods, name, all_ready, "the pod to be Ready", WAIT)
        .await
        .expect("the pod")
}

/// Creates a request named after its pod, for the pod's `app`.
async fn recreate_app(client: &Client, pod: &Pod, webhook: bool) {
    let namespace = pod.namespace().expect("a namespaced pod");
    let mut crr = request(pod, &["app"], webhook);
    crr.metadata.name = Some(pod.name_any());
    Api::<ContainerRecreateRequest>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &crr)
        .await
        .expect("creating the request");
}

/// Whether the daemon announced the kill of the request's container: its preStop hook runs.
fn in_pre_stop(crr: Option<&ContainerRecreateRequest>) -> bool {
    // Nothing records a kill before it is made; a hook whose grace (600 s, capped at 300) could
    // outlast the operator's patience has the phase written first, so `Recreating` with no
    // container killed yet is the hook running.
    crr.and_then(|crr| crr.status.as_ref())
        .is_some_and(|status| {
            status.phase == Some(crr_crds::v1beta1::Phase::Recreating)
                && !status
                    .container_recreate_states
                    .iter()
                    .any(|state| state.is_killed)
        })
}

/// Deletes the hook pods at once, so their hour-long hooks do not keep the namespace.
async fn delete_now(client: &Client, namespace: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let _ = pods
        .delete_collection(
            &kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
            &Default::default(),
        )
        .await;
}

/// How long a freed slot may take to be used: far below the hooks' grace period (600 s), so a
/// slot freed only by a hook running out fails the test.
const SOON: Duration = Duration::from_secs(60);

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn hanging_hooks_of_one_namespace_never_starve_another() {
    with_namespace("hog", |client, hog| async move {
        let tenant_client = client.clone();
        let hog_for_tenant = hog.clone();
        // Boxed: the nested test futures are too large for the test thread's stack.
        Box::pin(with_namespace("tenant", |_, tenant| async move {
            let client = tenant_client;
            let hog = hog_for_tenant;
            let installed = installed(&client).await;
            for namespace in [&hog, &tenant] {
                testbed::deny_writes(
                    &client,
                    namespace,
                    &[INSTALLED_DAEMON],
                    "requests of this namespace belong to the node daemon under test",
                    WAIT,
                )
                .await;
            }
            let _operators: Vec<_> = if installed.operator {
                vec![]
            } else {
                vec![start_operator(&hog), start_operator(&tenant)]
            };
            let hook = "sleep 3600";
            let mut hogs = vec![];
            for name in ["hog-1", "hog-2", "hog-3"] {
                hogs.push(pod_with_hook(&client, &hog, name, Some(hook), 600).await);
            }
            let plain = pod_with_hook(&client, &tenant, "plain", None, 5).await;
            let node = plain
                .spec
                .as_ref()
                .and_then(|spec| spec.node_name.clone())
                .expect("a scheduled pod");
            let _daemon = start_daemon_with(
                &format!("{hog},{tenant}"),
                &node,
                &["--max-parallel-pods", "2"],
            );
            let result = Box::pin(async {
                let hog_requests: Api<ContainerRecreateRequest> =
                    Api::namespaced(client.clone(), &hog);
                // Two hooks that never end take both slots.
                recreate_app(&client, &hogs[0], installed.webhook).await;
                recreate_app(&client, &hogs[1], installed.webhook).await;
                for name in ["hog-1", "hog-2"] {
                    testbed::wait_for(
                        hog_requests.clone(),
                        name,
                        in_pre_stop,
                        "the hanging preStop hook to run",
                        WAIT,
                    )
                    .await;
                }
                recreate_app(&client, &hogs[2], installed.webhook).await;
                // Deleting a request cancels its hook and frees its slot: the third starts.
                hog_requests
                    .delete("hog-1", &Default::default())
                    .await
                    .expect("deleting a request");
                testbed::wait_for(
                    hog_requests.clone(),
                    "hog-3",
                    in_pre_stop,
                    "the slot of the deleted request to go to the waiting one",
                    SOON,
                )
                .await;
                // Every slot is held by a hanging hook again; another namespace still gets one.
                recreate_app(&client, &plain, installed.webhook).await;
                let tenant_requests: Api<ContainerRecreateRequest> =
                    Api::namespaced(client.clone(), &tenant);
                let done = testbed::wait_for(
                    tenant_requests,
                    "plain",
                    completed,
                    "the other namespace's request to complete",
                    SOON,
                )
                .await
                .expect("the request");
                assert_eq!(
                    done.condition(keys::CONDITION_SUCCEEDED)
                        .map(|condition| condition.status.as_str()),
                    Some("True"),
                    "{:#?}",
                    done.status
                );
                // The hooks never ran out: no hog container was stopped.
                let pods: Api<Pod> = Api::namespaced(client.clone(), &hog);
                for before in &hogs {
                    let after = pods.get(&before.name_any()).await.expect("the pod");
                    assert_eq!(container(&after, "app"), container(before, "app"));
                }
            });
            let outcome = std::panic::AssertUnwindSafe(result).catch_unwind().await;
            delete_now(&client, &hog).await;
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        }))
        .await;
    })
    .await;
}
