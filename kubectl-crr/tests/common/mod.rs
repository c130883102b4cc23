//! What the plugin's cluster tests share: a namespace per test where an installed operator or
//! node daemon may not write, Ready pods, the plugin as a process (run to the end, or followed
//! line by line), and status writes as the node daemon would make them.

#![allow(dead_code)] // each test file uses its own part of this

use std::collections::BTreeMap;
use std::future::Future;
use std::process::{Output, Stdio};
use std::time::Duration;

use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_testbed as testbed;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

pub const WAIT: Duration = Duration::from_secs(90);
/// Service accounts of an installed operator and node daemon (manifests/).
pub const INSTALLED_WRITERS: [&str; 2] = ["crr-node-daemon", "crr-operator"];

/// Runs `body` in a fresh namespace where an installed operator or node daemon may not write
/// (see `crr_testbed::with_namespace`).
pub async fn with_namespace<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    testbed::with_namespace(
        "crr-kc",
        "kubectl-crr",
        test,
        WAIT,
        |client, name| async move {
            testbed::deny_writes(
                &client,
                &name,
                &INSTALLED_WRITERS,
                "requests of this namespace are driven by the kubectl-crr test",
                WAIT,
            )
            .await;
            body(client, name).await;
        },
    )
    .await;
}

pub fn image() -> String {
    std::env::var("CRR_TEST_IMAGE").unwrap_or_else(|_| "crr.local/pause:3.10".to_owned())
}

/// Running pods with containers `app` and `sidecar`, labelled `app=<label>`; returned once Ready.
pub async fn ready_pods(client: &Client, namespace: &str, label: &str, names: &[&str]) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for name in names {
        let container = |container: &str| Container {
            name: container.to_owned(),
            image: Some(image()),
            image_pull_policy: Some("IfNotPresent".to_owned()),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some((*name).to_owned()),
                labels: Some(BTreeMap::from([("app".to_owned(), label.to_owned())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                termination_grace_period_seconds: Some(0),
                containers: vec![container("app"), container("sidecar")],
                ..Default::default()
            }),
            status: None,
        };
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("creating a pod");
    }
    for name in names {
        testbed::wait_for(
            pods.clone(),
            name,
            |pod: Option<&Pod>| {
                pod.and_then(|pod| pod.status.as_ref())
                    .and_then(|status| status.conditions.as_ref())
                    .is_some_and(|conditions| {
                        conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    })
            },
            "the pod to be Ready",
            WAIT,
        )
        .await;
    }
}

pub fn plugin(namespace: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-crr"));
    command
        .args(["-n", namespace])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs the plugin to the end.
pub async fn run(namespace: &str, args: &[&str]) -> Output {
    let output = tokio::time::timeout(WAIT, plugin(namespace, args).output())
        .await
        .expect("the plugin finishes")
        .expect("running the plugin");
    eprintln!(
        "kubectl-crr {args:?} -> {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// A plugin process whose output lines are collected as they come.
pub struct Running {
    pub child: Child,
    stdout: watch::Receiver<Lines>,
    stderr: watch::Receiver<Lines>,
}

/// One output stream of the plugin: the lines so far, and whether the stream has ended.
#[derive(Default)]
pub struct Lines {
    lines: Vec<String>,
    ended: bool,
}

impl Running {
    pub fn start(namespace: &str, args: &[&str]) -> Self {
        let mut child = plugin(namespace, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the plugin");
        let collect = |stream: Box<dyn tokio::io::AsyncRead + Unpin + Send>| {
            let (sender, receiver) = watch::channel(Lines::default());
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    eprintln!("plugin: {line}");
                    sender.send_modify(|output| output.lines.push(line));
                }
                sender.send_modify(|output| output.ended = true);
            });
            receiver
        };
        let stdout = collect(Box::new(child.stdout.take().expect("stdout")));
        let stderr = collect(Box::new(child.stderr.take().expect("stderr")));
        Self {
            child,
            stdout,
            stderr,
        }
    }

    pub fn stdout(&self) -> String {
        self.stdout.borrow().lines.join("\n")
    }

    pub fn stderr(&self) -> String {
        self.stderr.borrow().lines.join("\n")
    }

    /// Waits until a stdout line contains `text`: woken by each line the reader hands over.
    pub async fn wait_for_line(&self, text: &str) {
        let mut stdout = self.stdout.clone();
        let seen = stdout.wait_for(|output| output.lines.iter().any(|l| l.contains(text)));
        match tokio::time::timeout(WAIT, seen)
            .await
            .map(|seen| seen.is_ok())
        {
            Ok(true) => {}
            Ok(false) => panic!(
                "stdout ended without a line with {text:?}:\n{}",
                self.stdout()
            ),
            Err(_) => panic!(
                "no line with {text:?} within {WAIT:?}; stdout:\n{}",
                self.stdout()
            ),
        }
    }

    /// Waits for the plugin to exit and for both readers to reach the end of what it wrote.
    pub async fn exit_code(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the plugin exits")
            .expect("waiting for the plugin");
        for output in [&self.stdout, &self.stderr] {
            let mut output = output.clone();
            let drained = tokio::time::timeout(WAIT, output.wait_for(|output| output.ended))
                .await
                .map(|ended| ended.is_ok());
            assert_eq!(
                drained,
                Ok(true),
                "the plugin's output did not end after it exited"
            );
        }
        status.code()
    }
}

/// Writes a status the way the node daemon would.
pub async fn daemon_writes(client: &Client, namespace: &str, name: &str, status: Value) {
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), namespace);
    crrs.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .expect("writing the request status as the daemon");
}

pub fn completed(states: Value) -> Value {
    json!({
        "phase": "Completed",
        "completionTime": Time(jiff::Timestamp::now()),
        "containerRecreateStates": states,
    })
}

/// The first request that appears in the namespace.
pub async fn first_request(client: &Client, namespace: &str) -> ContainerRecreateRequest {
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), namespace);
    let mut appeared = watcher(crrs, watcher::Config::default())
        .applied_objects()
        .boxed();
    match tokio::time::timeout(WAIT, appeared.next()).await {
        Ok(Some(Ok(crr))) => crr,
        other => panic!("no request appeared: {other:?}"),
    }
}
