//! The end-to-end harness: crr installed from `manifests/` (hack/install.sh) on the local test
//! bed, driven through the real API server as a user would. Each scenario gets a fresh
//! namespace (labelled `crr-e2e=true`), deleted afterwards unless `CRR_KEEP_NAMESPACES=1`.
//!
//! This crate decides nothing about CRRs: it creates objects, waits on watches with timeouts and
//! reads what the components did.

#![forbid(unsafe_code)]

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use crr_crds::keys;
use crr_crds::v1beta1::ContainerRecreateRequest;
use k8s_openapi::api::core::v1::{ContainerStatus, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};

pub mod doc;
pub mod faults;
pub mod kwok;
pub mod measure;
pub mod rollout;
pub mod tenant;

/// Namespace the components are installed in.
pub const SYSTEM_NAMESPACE: &str = "crr-system";
/// Image every test pod runs (imported by hack/cluster.sh).
pub const BUSYBOX: &str = "crr.local/busybox:1.35";

pub type ScenarioFuture = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// One scenario: a name and the test, given its own namespace.
pub struct Scenario {
    pub name: &'static str,
    pub run: fn(Ctx) -> ScenarioFuture,
}

/// What a scenario works with: a client and its namespace.
#[derive(Clone)]
pub struct Ctx {
    pub client: Client,
    pub namespace: String,
}

/// The API versions a CRR can be written in.
#[derive(Clone, Copy, Debug)]
pub enum Version {
    V1alpha1,
    V1beta1,
}

impl Version {
    fn api_resource(self) -> ApiResource {
        let version = match self {
            Version::V1alpha1 => keys::V1ALPHA1,
            Version::V1beta1 => keys::V1BETA1,
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(keys::GROUP, version, keys::KIND),
            keys::PLURAL,
        )
    }
}

/// A container's long-running command that exits at once on SIGTERM: the shell waits on `wait`,
/// which a trapped signal interrupts, not on `sleep`, which would hold the trap back for up to a
/// second (a StopContainer would then measure the workload, not the kill).
pub const EXIT_ON_TERM_LOOP: &str = "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done";

impl Ctx {
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn crrs(&self) -> Api<ContainerRecreateRequest> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// CRRs in a given served version, as plain JSON objects.
    pub fn crrs_in(&self, version: Version) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &version.api_resource(),
        )
    }

    /// A running pod with two long-running containers, `app` and `sidecar`, sharing an
    /// emptyDir at /data. `customize` edits the pod JSON before it is created (hooks, labels).
    pub async fn two_container_pod(
        &self,
        name: &str,
        customize: impl FnOnce(&mut Value),
    ) -> anyhow::Result<Pod> {
        let container = |name: &str| {
            json!({
                "name": name,
                "image": BUSYBOX,
                "command": ["sh", "-c", EXIT_ON_TERM_LOOP],
                "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            })
        };
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "terminationGracePeriodSeconds": 3,
                "containers": [container("app"), container("sidecar")],
                "volumes": [{"name": "data", "emptyDir": {}}],
            },
        });
        customize(&mut pod);
        let pod: Pod = serde_json::from_value(pod).context("test pod JSON")?;
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        self.wait_pod(name, "Ready", Duration::from_secs(90), pod_ready)
            .await
    }

    /// The Events (events.k8s.io) of this namespace with `reason` regarding pod `pod`.
    pub async fn pod_events(
        &self,
        pod: &str,
        reason: &str,
    ) -> anyhow::Result<Vec<k8s_openapi::api::events::v1::Event>> {
        self.events_regarding("Pod", pod, reason).await
    }

    /// The Events (events.k8s.io) of this namespace with `reason` regarding the `kind` named
    /// `name`.
    pub async fn events_regarding(
        &self,
        kind: &str,
        name: &str,
        reason: &str,
    ) -> anyhow::Result<Vec<k8s_openapi::api::events::v1::Event>> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.namespace);
        Ok(events
            .list(&Default::default())
            .await
            .context("listing Events")?
            .items
            .into_iter()
            .filter(|event| {
                event.reason.as_deref() == Some(reason)
                    && event.regarding.as_ref().is_some_and(|regarding| {
                        regarding.kind.as_deref() == Some(kind)
                            && regarding.name.as_deref() == Some(name)
                    })
            })
            .collect())
    }

    /// Runs the kubectl plugin (built by `cargo test --workspace`, as hack/cluster-test.sh
    /// does, or `cargo build -p kubectl-crr`) in this namespace: `CRR_KUBECTL_CRR`, or the
    /// `kubectl-crr` of the target folder this test was built in.
    pub async fn plugin(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        let binary = match std::env::var_os("CRR_KUBECTL_CRR") {
            Some(binary) => std::path::PathBuf::from(binary),
            None => built_beside_tests("kubectl-crr")?,
        };
        tokio::process::Command::new(&binary)
            .args(["-n", &self.namespace])
            .args(args)
            .output()
            .await
            .with_context(|| format!("running {} (cargo build -p kubectl-crr)", binary.display()))
    }

    /// Waits (by watch) until `condition` holds for the pod; the pod must exist.
    pub async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        condition: impl Fn(&Pod) -> bool,
    ) -> anyhow::Result<Pod> {
        let found = wait(self.pods(), name, timeout, move |pod: Option<&Pod>| {
            pod.is_some_and(&condition)
        })
        .await
        .with_context(|| format!("pod {name} never became {what}"))?;
        found.ok_or_else(|| anyhow!("pod {name} vanished"))
    }

    /// Creates a CRR from JSON (`apiVersion` and `kind` are filled in) in `version`.
    pub async fn create_crr(&self, version: Version, crr: Value) -> anyhow::Result<String> {
        let mut crr = crr;
        crr["apiVersion"] = json!(format!("{}/{}", keys::GROUP, version_str(version)));
        crr["kind"] = json!(keys::KIND);
        let object: DynamicObject = serde_json::from_value(crr).context("CRR JSON")?;
        let created = self
            .crrs_in(version)
            .create(&PostParams::default(), &object)
            .await
            .context("creating the ContainerRecreateRequest")?;
        Ok(created.name_any())
    }

    /// Waits until the CRR is Completed and returns it (v1beta1 view).
    pub async fn wait_completed(
        &self,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<ContainerRecreateRequest> {
        let found = wait(
            self.crrs(),
            name,
            timeout,
            |crr: Option<&ContainerRecreateRequest>| {
                crr.is_some_and(ContainerRecreateRequest::is_completed)
            },
        )
        .await
        .with_context(|| format!("ContainerRecreateRequest {name} never Completed"))?;
        found.ok_or_else(|| anyhow!("ContainerRecreateRequest {name} vanished"))
    }

    /// Runs a command in a container of a pod (through the real kubelet) and returns stdout.
    pub async fn exec(&self, pod: &str, container: &str, command: &str) -> anyhow::Result<String> {
        let output = kubectl(&[
            "-n",
            &self.namespace,
            "exec",
            pod,
            "-c",
            container,
            "--",
            "sh",
            "-c",
            command,
        ])
        .await?;
        ensure!(
            output.status.success(),
            "exec {command:?} in {pod}/{container} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

impl Ctx {
    /// Follows the log of a container (from its start) until a line contains `text`.
    pub async fn log_line(
        &self,
        pod: &str,
        container: &str,
        text: &str,
        within: Duration,
    ) -> anyhow::Result<()> {
        use futures::{AsyncBufReadExt as _, StreamExt as _};
        let params = kube::api::LogParams {
            container: Some(container.to_owned()),
            follow: true,
            ..Default::default()
        };
        let following = async {
            let mut lines = self.pods().log_stream(pod, &params).await?.lines();
            while let Some(line) = lines.next().await {
                if line?.contains(text) {
                    return Ok(true);
                }
            }
            Ok::<_, anyhow::Error>(false)
        };
        match tokio::time::timeout(within, following).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(anyhow!(
                "the log of {pod}/{container} ended without {text:?}"
            )),
            Ok(Err(error)) => Err(error.context(format!("following the log of {pod}/{container}"))),
            Err(_) => Err(anyhow!(
                "no {text:?} in the log of {pod}/{container} within {}s",
                within.as_secs()
            )),
        }
    }
}

/// The status of a pod condition (`"True"`, `"False"`), if the pod has it.
pub fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|condition| condition.type_ == type_))
        .map(|condition| condition.status.as_str())
}

fn version_str(version: Version) -> &'static str {
    match version {
        Version::V1alpha1 => keys::V1ALPHA1,
        Version::V1beta1 => keys::V1BETA1,
    }
}

/// Waits with a watch until `condition` holds, failing after `timeout`.
pub async fn wait<K>(
    api: Api<K>,
    name: &str,
    timeout: Duration,
    condition: impl Condition<K>,
) -> anyhow::Result<Option<K>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::time::timeout(timeout, await_condition(api, name, condition))
        .await
        .map_err(|_| anyhow!("timed out after {}s", timeout.as_secs()))?
        .context("watching")
}

/// Whether a node's `Ready` condition is True.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// The names of the test bed's Ready nodes, sorted.
pub async fn ready_nodes(client: &Client) -> anyhow::Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut names: Vec<String> = nodes
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(node_ready)
        .map(|node| node.name_any())
        .collect();
    names.sort();
    Ok(names)
}

/// Whether the pod's `Ready` condition is True (`crr_crds::rules::pod_ready`).
pub fn pod_ready(pod: &Pod) -> bool {
    crr_crds::rules::pod_ready(pod)
}

/// The status of one container of a pod.
pub fn container<'a>(pod: &'a Pod, name: &str) -> anyhow::Result<&'a ContainerStatus> {
    let status = pod.status.as_ref();
    status
        .and_then(|status| status.container_statuses.as_ref())
        .into_iter()
        .chain(status.and_then(|status| status.init_container_statuses.as_ref()))
        .flatten()
        .find(|status| status.name == name)
        .ok_or_else(|| anyhow!("pod {} has no status for container {name}", pod.name_any()))
}

/// The container ID and restart count of one container.
pub fn id_and_restarts(pod: &Pod, name: &str) -> anyhow::Result<(String, i32)> {
    let status = container(pod, name)?;
    Ok((
        status.container_id.clone().unwrap_or_default(),
        status.restart_count,
    ))
}

/// Runs the test bed's kubectl (same version as the cluster) with the admin kubeconfig.
pub async fn kubectl(args: &[&str]) -> anyhow::Result<std::process::Output> {
    kubectl_with_stdin(args, None).await
}

pub async fn kubectl_with_stdin(
    args: &[&str],
    stdin: Option<&str>,
) -> anyhow::Result<std::process::Output> {
    use tokio::io::AsyncWriteExt as _;
    let mut command = tokio::process::Command::new(kubectl_path());
    command
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().context("starting kubectl")?;
    if let Some(mut pipe) = child.stdin.take() {
        if let Some(input) = stdin {
            pipe.write_all(input.as_bytes()).await?;
        }
        drop(pipe);
    }
    child.wait_with_output().await.context("running kubectl")
}

/// The binary `name` of this workspace, built into the target folder this test binary was built
/// in (`<target>/debug/deps/<test>` → `<target>/debug/<name>`), wherever `CARGO_TARGET_DIR` put it.
fn built_beside_tests(name: &str) -> anyhow::Result<PathBuf> {
    let test = std::env::current_exe().context("the path of this test binary")?;
    let profile = test
        .parent()
        .and_then(std::path::Path::parent)
        .with_context(|| format!("{} is not in <target>/<profile>/deps", test.display()))?;
    Ok(profile.join(name))
}

fn kubectl_path() -> PathBuf {
    if let Some(path) = std::env::var_os("CRR_KUBECTL") {
        return path.into();
    }
    test_bed_program("kubectl")
}

/// A program of the running test bed's stack (kubectl, ctr): `hack/cluster.sh up` links them in
/// `$CRR_CLUSTER_DIR/bin`, whichever stack (hack/versions.sh) it runs.
fn test_bed_program(name: &str) -> PathBuf {
    PathBuf::from(cluster_dir()).join("bin").join(name)
}

/// The containerd socket of the test bed's node, for scenarios that act on a container behind
/// the kubelet's back (as a crash would).
pub fn containerd_socket() -> String {
    format!("{}/containerd/containerd.sock", cluster_dir())
}

/// The client certificate and key the test bed's API server presents to admission webhooks
/// (`hack/cluster.sh`), for scenarios that call the webhook as the API server would.
pub fn api_server_webhook_client() -> (PathBuf, PathBuf) {
    let pki = PathBuf::from(cluster_dir()).join("pki");
    (
        pki.join("apiserver-webhook-client.crt"),
        pki.join("apiserver-webhook-client.key"),
    )
}

/// The test bed's folder (`$CRR_CLUSTER_DIR`, by default `/var/lib/crr-cluster`).
pub fn cluster_dir() -> String {
    std::env::var("CRR_CLUSTER_DIR").unwrap_or_else(|_| "/var/lib/crr-cluster".into())
}

/// The first node of the test bed (its control plane's); `CRR_NODES=N` adds crr-node-2...
pub const FIRST_NODE: &str = "crr-node";

/// The containerd socket of test-bed node `node`, as this (root) namespace reaches it.
pub fn containerd_socket_of(node: &str) -> String {
    if node == FIRST_NODE {
        containerd_socket()
    } else {
        format!("{}/nodes/{node}/containerd/containerd.sock", cluster_dir())
    }
}

/// Every node's containerd socket.
fn containerd_sockets() -> Vec<String> {
    let mut sockets = vec![containerd_socket()];
    if let Ok(entries) = std::fs::read_dir(format!("{}/nodes", cluster_dir())) {
        let mut nodes: Vec<String> = entries
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name.starts_with("crr-node-"))
            .collect();
        nodes.sort();
        sockets.extend(nodes.iter().map(|node| containerd_socket_of(node)));
    }
    sockets
}

/// Kills a container's task through containerd (whichever node runs it), so the kubelet
/// restarts it.
pub async fn kill_container(container_id: &str) -> anyhow::Result<()> {
    let id = container_id.trim_start_matches("containerd://");
    let mut errors = Vec::new();
    for socket in containerd_sockets() {
        let output = tokio::process::Command::new(test_bed_program("ctr"))
            .args([
                "--address",
                &socket,
                "-n",
                "k8s.io",
                "tasks",
                "kill",
                "-s",
                "SIGKILL",
                id,
            ])
            .output()
            .await
            .context("running ctr")?;
        if output.status.success() {
            return Ok(());
        }
        errors.push(format!(
            "{socket}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Err(anyhow!("ctr tasks kill {id}: {}", errors.join("; ")))
}

/// What a scenario is expected to do today.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// It passes; a failure fails the suite.
    Pass,
    /// It fails until the named fix lands: its failure is reported as expected and does not
    /// fail the suite, and it never counts as a pass. Should it pass, the table says so
    /// (`UNEXPECTED PASS`) so the mark gets removed.
    KnownFailure(&'static str),
}

/// A failure of a scenario marked [`Expect::KnownFailure`] that is not the one it is known for:
/// it fails the suite all the same (a scenario known to miss a time still checks its memory).
#[derive(Debug)]
pub struct NotTheKnownFailure(pub String);

impl std::fmt::Display for NotTheKnownFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotTheKnownFailure {}

/// Outcome of one scenario, for the timing table.
pub struct Outcome {
    pub name: &'static str,
    pub elapsed: Duration,
    pub error: Option<anyhow::Error>,
    pub expect: Expect,
}

impl Outcome {
    fn verdict(&self) -> String {
        match (&self.error, self.expect) {
            (None, Expect::Pass) => "pass".to_owned(),
            (Some(_), Expect::Pass) => "FAIL".to_owned(),
            (Some(error), Expect::KnownFailure(_))
                if error.downcast_ref::<NotTheKnownFailure>().is_some() =>
            {
                "FAIL (not its known failure)".to_owned()
            }
            (Some(_), Expect::KnownFailure(reason)) => format!("expected failure: {reason}"),
            (None, Expect::KnownFailure(reason)) => {
                format!("UNEXPECTED PASS (remove the known-failure mark: {reason})")
            }
        }
    }

    /// Whether this outcome fails the suite.
    fn fails_suite(&self) -> bool {
        self.error.as_ref().is_some_and(|error| {
            self.expect == Expect::Pass || error.downcast_ref::<NotTheKnownFailure>().is_some()
        })
    }
}

/// Runs the scenarios one after another (several of them kill components on purpose), each in
/// its own namespace, and prints a timing table. Returns whether all passed.
pub async fn run_all(client: Client, scenarios: &[Scenario], filter: Option<&str>) -> bool {
    let expected: Vec<(&Scenario, Expect)> = scenarios
        .iter()
        .filter(|scenario| filter.is_none_or(|filter| scenario.name.contains(filter)))
        .map(|scenario| (scenario, Expect::Pass))
        .collect();
    run_suite(client, "e2e", &expected).await
}

/// The request completed with `count` containers, every one Succeeded.
pub fn succeeded(crr: &ContainerRecreateRequest, count: usize) -> anyhow::Result<()> {
    let status = crr.status.clone().unwrap_or_default();
    let states = &status.container_recreate_states;
    check(
        status.phase == Some(crr_crds::v1beta1::Phase::Completed)
            && states.len() == count
            && states
                .iter()
                .all(|state| state.phase == crr_crds::v1beta1::Phase::Succeeded),
        || {
            format!(
                "{}: phase {:?} states {states:?} message {:?}",
                crr.name_any(),
                status.phase,
                status.message
            )
        },
    )
}

/// The `main` of a suite whose scenarios all must pass on the test bed with crr installed, and
/// are ignored by a plain `cargo test` (hack/cluster-test.sh runs them).
pub fn installed_suite_main(suite: &str, scenarios: Vec<Scenario>) {
    let scenarios = scenarios
        .into_iter()
        .map(|scenario| (scenario, Expect::Pass))
        .collect();
    installed_suite_main_expecting(suite, scenarios);
}

/// [`installed_suite_main`] with an expectation per scenario (a known failure named).
pub fn installed_suite_main_expecting(suite: &str, scenarios: Vec<(Scenario, Expect)>) {
    suite_main(
        suite,
        scenarios,
        "needs crr installed on the local test bed; hack/cluster-test.sh runs it",
        |client| async move { installed(&client).await },
    );
}

/// The `main` of a scenario suite built with `harness = false`, speaking libtest's language: with
/// `--list` it names the selected scenarios; without `--ignored`/`--include-ignored` it reports
/// them ignored (`ignored_because` says why) and runs none; asked to run them, it connects to the
/// test bed, checks `ready` (crr installed, enough nodes...), runs them in order and exits 1 if
/// one fails unexpectedly or they cannot run.
pub fn suite_main<Ready, ReadyFuture>(
    suite: &str,
    scenarios: Vec<(Scenario, Expect)>,
    ignored_because: &str,
    ready: Ready,
) where
    Ready: FnOnce(Client) -> ReadyFuture,
    ReadyFuture: Future<Output = Result<(), String>>,
{
    let args = crr_testbed::SuiteArgs::parse(std::env::args().skip(1));
    let total = scenarios.len();
    let selected: Vec<(Scenario, Expect)> = scenarios
        .into_iter()
        .filter(|(scenario, _)| args.selects(scenario.name))
        .collect();
    if args.list {
        for (scenario, _) in &selected {
            println!("{}: test", scenario.name);
        }
        return;
    }
    if !args.run_ignored {
        // Reported as libtest reports ignored tests: nothing ran, nothing passed.
        println!("\nrunning {} tests", selected.len());
        for (scenario, _) in &selected {
            println!("test {} ... ignored, {ignored_because}", scenario.name);
        }
        println!(
            "\ntest result: ok. 0 passed; 0 failed; {} ignored; 0 measured; {} filtered out\n",
            selected.len(),
            total - selected.len()
        );
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let passed = runtime.block_on(async move {
        let client = match crr_testbed::connect().await {
            Ok(client) => client,
            Err(reason) => {
                eprintln!("{suite}: FAILED: the scenarios cannot run: {reason}");
                return false;
            }
        };
        if let Err(reason) = ready(client.clone()).await {
            eprintln!("{suite}: FAILED: the scenarios cannot run: {reason}");
            return false;
        }
        let expected: Vec<(&Scenario, Expect)> = selected
            .iter()
            .map(|(scenario, expect)| (scenario, *expect))
            .collect();
        run_suite(client, suite, &expected).await
    });
    if !passed {
        std::process::exit(1);
    }
}

/// Runs `scenarios` as [`run_all`] does, each with what it is expected to do, its lines prefixed
/// with `suite`. Returns whether none failed unexpectedly (a known failure does not fail it).
pub async fn run_suite(client: Client, suite: &str, scenarios: &[(&Scenario, Expect)]) -> bool {
    let mut outcomes = Vec::new();
    for (scenario, expect) in scenarios {
        println!("{suite}: {} ...", scenario.name);
        let start = Instant::now();
        let result = run_one(client.clone(), scenario).await;
        let elapsed = start.elapsed();
        let outcome = Outcome {
            name: scenario.name,
            elapsed,
            error: result.err(),
            expect: *expect,
        };
        let seconds = elapsed.as_secs_f64();
        match &outcome.error {
            None => println!(
                "{suite}: {} {} ({seconds:.1}s)",
                scenario.name,
                match expect {
                    Expect::Pass => "ok".to_owned(),
                    Expect::KnownFailure(_) => outcome.verdict(),
                }
            ),
            Some(error) => println!(
                "{suite}: {} {} ({seconds:.1}s): {error:#}",
                scenario.name,
                match expect {
                    Expect::Pass => "FAILED".to_owned(),
                    Expect::KnownFailure(_) => outcome.verdict(),
                }
            ),
        }
        outcomes.push(outcome);
    }
    print_table(&outcomes);
    !outcomes.iter().any(Outcome::fails_suite)
}

async fn run_one(client: Client, scenario: &Scenario) -> anyhow::Result<()> {
    let namespace = create_namespace(&client, scenario.name).await?;
    let ctx = Ctx {
        client: client.clone(),
        namespace: namespace.clone(),
    };
    let result = (scenario.run)(ctx.clone()).await;
    if result.is_err() {
        dump_namespace(&namespace).await;
    }
    if std::env::var("CRR_KEEP_NAMESPACES").as_deref() != Ok("1") {
        let namespaces: Api<Namespace> = Api::all(client);
        let _ = namespaces
            .delete(&namespace, &DeleteParams::default())
            .await;
    }
    result
}

/// A fresh namespace `e2e-<scenario>-<suffix>` (label `crr-e2e: "true"`), once its default
/// ServiceAccount exists.
pub async fn create_namespace(client: &Client, scenario: &str) -> anyhow::Result<String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let suffix = std::process::id() ^ (jiff::Timestamp::now().subsec_nanosecond() as u32);
    let name = format!("e2e-{scenario}-{:05x}", suffix & 0xfffff);
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([("crr-e2e".to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    // Pods need the namespace's default ServiceAccount, which the controller manager adds.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &name);
    wait(
        accounts,
        "default",
        Duration::from_secs(30),
        |account: Option<&_>| account.is_some(),
    )
    .await
    .context("default ServiceAccount")?;
    Ok(name)
}

async fn dump_namespace(namespace: &str) {
    for args in [
        vec![
            "-n",
            namespace,
            "get",
            "pods,containerrecreaterequests.apps.kruise.io",
            "-o",
            "yaml",
        ],
        vec!["-n", namespace, "get", "events", "--sort-by=.lastTimestamp"],
        vec![
            "-n",
            SYSTEM_NAMESPACE,
            "logs",
            "-l",
            "app.kubernetes.io/name=crr-node-daemon",
            "--tail=40",
        ],
        vec![
            "-n",
            SYSTEM_NAMESPACE,
            "logs",
            "-l",
            "app.kubernetes.io/name=crr-operator",
            "--tail=40",
        ],
    ] {
        if let Ok(output) = kubectl(&args).await {
            println!(
                "--- kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

fn print_table(outcomes: &[Outcome]) {
    println!();
    println!("| scenario | result | seconds |");
    println!("|---|---|---|");
    for outcome in outcomes {
        println!(
            "| {} | {} | {:.1} |",
            outcome.name,
            outcome.verdict(),
            outcome.elapsed.as_secs_f64()
        );
    }
    let total: f64 = outcomes.iter().map(|o| o.elapsed.as_secs_f64()).sum();
    let passed = outcomes
        .iter()
        .filter(|o| o.error.is_none() && o.expect == Expect::Pass)
        .count();
    let expected_failures = outcomes
        .iter()
        .filter(|o| o.error.is_some() && o.expect != Expect::Pass)
        .count();
    let also = if expected_failures > 0 {
        format!(", {expected_failures} expected failure(s)")
    } else {
        String::new()
    };
    println!(
        "| total | {passed}/{} passed{also} | {total:.1} |",
        outcomes.len()
    );
}

/// A client of the cluster of the kubeconfig (`KUBECONFIG`), once crr is installed and ready there
/// (the benches start with it).
pub async fn installed_client() -> anyhow::Result<Client> {
    let client = Client::try_default()
        .await
        .context("connecting to the cluster")?;
    installed(&client)
        .await
        .map_err(|reason| anyhow!("crr is not installed: {reason}"))?;
    Ok(client)
}

/// Whether crr is installed and ready on the cluster the client talks to: the reason if not.
pub async fn installed(client: &Client) -> Result<(), String> {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    for name in ["crr-operator", "crr-webhook"] {
        let deployment = deployments
            .get_opt(name)
            .await
            .map_err(|error| format!("reading deployment {name}: {error}"))?
            .ok_or_else(|| {
                format!("deployment {SYSTEM_NAMESPACE}/{name} not found (run hack/install.sh)")
            })?;
        let ready = deployment
            .status
            .and_then(|status| status.ready_replicas)
            .unwrap_or(0);
        if ready == 0 {
            return Err(format!("deployment {name} has no ready replica"));
        }
    }
    Ok(())
}

/// Parses an RFC 3339 time from the API.
pub fn timestamp(time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> jiff::Timestamp {
    time.0
}

/// Fails with `message` unless `condition`.
pub fn check(condition: bool, message: impl FnOnce() -> String) -> anyhow::Result<()> {
    if !condition {
        bail!(message());
    }
    Ok(())
}

/// The object's UID, or an error.
pub fn uid<K: kube::Resource>(object: &K) -> anyhow::Result<String> {
    object
        .meta()
        .uid
        .clone()
        .ok_or_else(|| anyhow!("object without uid"))
}

/// After a successful `helm test`: none of its objects is left (they are test hooks deleted on
/// success): no `crr-test` ServiceAccount, Role, RoleBinding or pod in the system namespace, no
/// `crr-test` ClusterRole or ClusterRoleBinding.
pub async fn helm_test_left_nothing() -> anyhow::Result<()> {
    let namespaced = ["serviceaccount", "role", "rolebinding", "pod"];
    let cluster = ["clusterrole", "clusterrolebinding"];
    let mut left = Vec::new();
    for kind in namespaced.iter().chain(&cluster) {
        let mut args = vec!["get", kind, "crr-test", "--ignore-not-found", "-o", "name"];
        if namespaced.contains(kind) {
            args.extend(["-n", SYSTEM_NAMESPACE]);
        }
        let output = kubectl(&args).await?;
        ensure!(
            output.status.success(),
            "kubectl get {kind} crr-test: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let found = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !found.is_empty() {
            left.push(found);
        }
    }
    ensure!(left.is_empty(), "helm test left behind: {left:?}");
    Ok(())
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    fn outcome(error: Option<anyhow::Error>, expect: Expect) -> Outcome {
        Outcome {
            name: "scenario",
            elapsed: Duration::ZERO,
            error,
            expect,
        }
    }

    #[test]
    fn a_known_failure_passes_the_suite_and_any_other_failure_of_it_does_not() {
        let known = Expect::KnownFailure("too slow here");
        assert!(!outcome(Some(anyhow::anyhow!("took 30 s")), known).fails_suite());
        let other =
            anyhow::Error::new(NotTheKnownFailure("over its memory".into())).context("fat-tenant");
        let other = outcome(Some(other), known);
        assert!(other.fails_suite());
        assert_eq!(other.verdict(), "FAIL (not its known failure)");
        assert!(!outcome(None, known).fails_suite());
        assert!(outcome(Some(anyhow::anyhow!("broken")), Expect::Pass).fails_suite());
        assert!(!outcome(None, Expect::Pass).fails_suite());
    }
}
