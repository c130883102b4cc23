//! The node daemon against a real cluster and its real containerd (the local one from `hack/`,
//! see hack/README.md).
//!
//! Each test gets a fresh namespace, runs the real `crr-node-daemon` binary restricted to that
//! namespace (`--watch-namespace`) inside the node's network namespace (`nsenter`, so that pod
//! IPs are reachable, as from a host-network DaemonSet pod), and deletes the namespace
//! afterwards (keep it with `CRR_KEEP_NAMESPACES=1`). The daemon's log goes to a file whose path
//! the test prints.
//!
//! Without a reachable cluster the tests print why and pass; with `CRR_CLUSTER_TESTS=1` a missing
//! cluster is a failure. The CRD is created when missing, without its conversion webhook.
//!
//! The cluster may have crr installed (hack/install.sh) or not:
//! - webhook installed: requests are created as users write them and the webhook adds labels,
//!   preStop and statusContext; not installed: the test adds what the webhook would.
//! - operator installed: it writes the snapshot; not installed: the test runs
//!   `target/debug/crr-operator` (or `CRR_OPERATOR_BIN`) for its namespace, when built.
//! - a node daemon installed: a ValidatingAdmissionPolicy denies it every write to this test's
//!   namespace, so only the daemon under test acts (its first act is always a status write,
//!   and no kill comes before one).

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crr_crds::keys;
use crr_crds::v1beta1::{
    ContainerRecreateRequest, ContainerRecreateRequestContainer,
    ContainerRecreateRequestContainerContext, ContainerRecreateRequestSpec,
    ContainerRecreateRequestStrategy, Phase, ProbeHandler,
};
use futures::FutureExt as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;
use tokio::process::{Child, Command};

const WAIT: Duration = Duration::from_secs(120);
const TEST_LABEL: &str = "crr.apps.kruise.io/test";
/// How an installed node daemon's service account is named (manifests/).
const INSTALLED_DAEMON_SUFFIX: &str = ":crr-node-daemon";

/// The cluster client, or `None` (after saying why) when the tests should be skipped.
async fn cluster() -> Option<Client> {
    let required = std::env::var("CRR_CLUSTER_TESTS").as_deref() == Ok("1");
    let connect = async {
        let client = Client::try_default().await.map_err(|e| e.to_string())?;
        client
            .apiserver_version()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(client)
    };
    let reason = match tokio::time::timeout(Duration::from_secs(15), connect).await {
        Ok(Ok(client)) => return Some(client),
        Ok(Err(error)) => error,
        Err(_) => "the API server did not answer within 15 s".to_owned(),
    };
    if required {
        panic!("CRR_CLUSTER_TESTS=1 but no cluster is reachable: {reason}");
    }
    // Written to the stderr handle, not with eprintln!, so the test harness does not swallow it.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: no Kubernetes cluster reachable ({reason}). Start the local cluster \
         (hack/README.md), export its KUBECONFIG and set CRR_CLUSTER_TESTS=1 to run these tests."
    );
    None
}

/// Creates the CRD when it is missing (without conversion webhook) and waits until established.
async fn ensure_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt(keys::CRD_NAME)
        .await
        .expect("reading the CRD")
        .is_none()
    {
        let mut crd =
            crr_crds::crd(&crr_crds::ConversionService::default()).expect("building the CRD");
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: "None".to_owned(),
            webhook: None,
        });
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => panic!("creating the CRD: {error}"),
        }
    }
    let established = |crd: Option<&CustomResourceDefinition>| {
        crd.and_then(|crd| crd.status.as_ref())
            .and_then(|status| status.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    };
    wait_for(
        crds,
        keys::CRD_NAME,
        established,
        "the CRD to be established",
    )
    .await;
}

/// Waits (by watch) until `condition` holds for the named object; panics after [`WAIT`].
async fn wait_for<K>(api: Api<K>, name: &str, condition: impl Condition<K>, what: &str) -> Option<K>
where
    K: Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + kube::Resource + 'static,
{
    match tokio::time::timeout(WAIT, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(object)) => object,
        Ok(Err(error)) => panic!("waiting for {what}: {error}"),
        Err(_) => {
            let current = api.get_opt(name).await;
            panic!("timed out after {WAIT:?} waiting for {what}; current object: {current:#?}")
        }
    }
}

/// Runs `body` in a fresh namespace, deletes the namespace (and the isolation policy) afterwards,
/// also when `body` panics.
async fn with_namespace<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(client) = cluster().await else {
        return;
    };
    ensure_crd(&client).await;
    let suffix = format!(
        "{:x}",
        std::process::id() ^ jiff::Timestamp::now().subsec_nanosecond() as u32
    );
    let name = format!("crr-nd-{test}-{suffix}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(BTreeMap::from([(
                        TEST_LABEL.to_owned(),
                        "node-daemon".to_owned(),
                    )])),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("creating the test namespace");
    let outcome = std::panic::AssertUnwindSafe(body(client.clone(), name.clone()))
        .catch_unwind()
        .await;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let _ = bindings.delete(&name, &DeleteParams::default()).await;
    let _ = policies.delete(&name, &DeleteParams::default()).await;
    if std::env::var("CRR_KEEP_NAMESPACES").as_deref() == Ok("1") {
        eprintln!("keeping namespace {name}");
    } else {
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &name);
        if let Ok(list) = crrs.list(&Default::default()).await {
            for crr in list {
                let _ = crrs
                    .patch(
                        &crr.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
                    )
                    .await;
            }
        }
        let _ = namespaces.delete(&name, &DeleteParams::background()).await;
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
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

/// Denies any installed node daemon every write in `namespace` (see the module comment); returns
/// once the API server enforces it, proven by a dry-run as that daemon being refused.
async fn keep_installed_daemons_out(client: &Client, namespace: &str) {
    let is_daemon = format!("request.userInfo.username.endsWith('{INSTALLED_DAEMON_SUFFIX}')");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": namespace, "labels": {TEST_LABEL: "node-daemon"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [keys::GROUP, ""],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "resources": [keys::PLURAL, format!("{}/status", keys::PLURAL), "configmaps"],
            }]},
            "matchConditions": [{"name": "installed-node-daemon", "expression": is_daemon}],
            "validations": [{
                "expression": "false",
                "message": "requests of this namespace belong to the node daemon under test",
            }],
        },
    }))
    .expect("a policy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": namespace, "labels": {TEST_LABEL: "node-daemon"}},
        "spec": {
            "policyName": namespace,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": namespace,
            }}},
        },
    }))
    .expect("a binding");
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("creating the isolation policy");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("creating the isolation policy binding");
    // Probe as an installed daemon (with every right, so only the policy can refuse).
    let mut config = kube::Config::infer().await.expect("a kubeconfig");
    config.auth_info.impersonate = Some(format!(
        "system:serviceaccount:crr-system{INSTALLED_DAEMON_SUFFIX}"
    ));
    config.auth_info.impersonate_groups = Some(vec!["system:masters".to_owned()]);
    let impersonated = Client::try_from(config).expect("an impersonating client");
    let config_maps: Api<ConfigMap> = Api::namespaced(impersonated, namespace);
    let probe = ConfigMap {
        metadata: ObjectMeta {
            name: Some("isolation-probe".to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    let enforced = async {
        loop {
            match config_maps
                .create(
                    &PostParams {
                        dry_run: true,
                        ..Default::default()
                    },
                    &probe,
                )
                .await
            {
                Err(kube::Error::Api(status))
                    if status.message.contains("node daemon under test") =>
                {
                    return;
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    };
    tokio::time::timeout(WAIT, enforced)
        .await
        .expect("the isolation policy is never enforced");
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

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
    let socket = cri_socket();
    let log = std::env::temp_dir().join(format!("{namespace}-node-daemon.log"));
    spawn(
        Path::new(env!("CARGO_BIN_EXE_crr-node-daemon")),
        &[
            "--node-name",
            node,
            "--watch-namespace",
            namespace,
            "--cri-socket",
            &socket.to_string_lossy(),
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &log,
    )
}

/// The operator for this namespace, unless an installed one serves every namespace.
fn start_operator(namespace: &str) -> Process {
    let binary = std::env::var_os("CRR_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repository().join("target/debug/crr-operator"));
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
    wait_for(pods, "two", all_ready, "the pod to be Ready")
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
async fn recreates_one_container_of_two_in_place() {
    with_namespace("two", |client, namespace| async move {
        let installed = installed(&client).await;
        keep_installed_daemons_out(&client, &namespace).await;
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
        let done = wait_for(crrs, "recreate-app", completed, "the request to complete")
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
