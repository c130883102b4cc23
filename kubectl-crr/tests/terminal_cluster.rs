//! The plugin's live output in a real terminal: `kubectl crr recreate --wait` and `kubectl crr
//! rollout status` run inside tmux at 80 columns, against the local test bed, while the test writes
//! the statuses (as `cluster.rs` does: no node daemon or operator takes part). A message longer
//! than a row wraps; once a shorter frame replaces it, the screen tmux shows must hold no row of
//! the longer one, each container once, and container IDs in their 12-digit form.
//!
//! The screens are written to `CARGO_TARGET_TMPDIR`; with `CRR_WRITE_CAPTURES=1` also to
//! `tests/captures/`, where the committed ones show what a user sees.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::{WAIT, completed, daemon_writes, first_request, ready_pods, with_namespace};
use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_testbed as testbed;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;
use tokio::process::Command;

const COLUMNS: u16 = 80;
const ROWS: u16 = 24;

/// A tmux server of its own (its own socket), running one command in an 80×24 window whose pane
/// stays after the command ends.
struct Terminal {
    socket: String,
}

impl Terminal {
    async fn start(namespace: &str, args: &[&str]) -> Self {
        let socket = format!("crr-term-{}", testbed::unique_suffix());
        let mut command = vec![
            env!("CARGO_BIN_EXE_kubectl-crr").to_owned(),
            "-n".into(),
            namespace.into(),
        ];
        command.extend(args.iter().map(|arg| (*arg).to_owned()));
        let script = format!("{}; echo \"exit=$?\"; sleep 600", command.join(" "));
        let kubeconfig =
            std::env::var("KUBECONFIG").unwrap_or_else(|_| testbed::TESTBED_KUBECONFIG.to_owned());
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &COLUMNS.to_string(), "-y", &ROWS.to_string()])
            .args([
                "-e",
                &format!("KUBECONFIG={kubeconfig}"),
                "-e",
                "TERM=xterm-256color",
            ])
            .arg(script)
            .stdin(Stdio::null())
            .status()
            .await
            .expect("running tmux (hack/install-deps.sh installs it)");
        assert!(status.success(), "tmux new-session: {status}");
        Self { socket }
    }

    /// What the pane shows now, row by row, trailing blanks trimmed.
    async fn screen(&self) -> String {
        self.capture(&[]).await
    }

    /// The same with the rows a long line wrapped to joined back (`capture-pane -J`).
    async fn lines(&self) -> String {
        self.capture(&["-J"]).await
    }

    async fn capture(&self, flags: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p"])
            .args(flags)
            .output()
            .await
            .expect("tmux capture-pane");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let rows: Vec<&str> = text.lines().map(str::trim_end).collect();
        let used = rows
            .iter()
            .rposition(|row| !row.is_empty())
            .map_or(0, |last| last + 1);
        rows[..used].join("\n")
    }

    /// Waits until the screen shows `text`; returns that screen.
    async fn wait_for(&self, text: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            // A long line wraps to rows: the text may straddle two.
            if self.lines().await.contains(text) {
                return self.screen().await;
            }
            let screen = self.screen().await;
            assert!(
                tokio::time::Instant::now() < deadline,
                "the terminal never showed {text:?}:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// Keeps a screen: in the target's temporary folder, and in `tests/captures/` when asked.
fn keep(file: &str, screen: &str) {
    let mut folders = vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR"))];
    if std::env::var("CRR_WRITE_CAPTURES").as_deref() == Ok("1") {
        folders.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/captures"));
    }
    for folder in folders {
        std::fs::create_dir_all(&folder).expect("a captures folder");
        std::fs::write(folder.join(file), format!("{screen}\n")).expect("writing a capture");
    }
}

/// How many rows show `part`.
fn rows_with(screen: &str, part: &str) -> usize {
    screen.lines().filter(|row| row.contains(part)).count()
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn recreate_live_output_at_80_columns_leaves_no_stale_rows() {
    with_namespace("term-recreate", |client, namespace| async move {
        ready_pods(&client, &namespace, "web", &["web"]).await;
        let terminal = Terminal::start(
            &namespace,
            &["recreate", "web", "-c", "app", "-c", "sidecar", "--wait"],
        )
        .await;
        let name = first_request(&client, &namespace).await.name_any();
        terminal.wait_for("web/sidecar").await;
        let id = "9f3c2a7b41d0e5c6".repeat(4);
        let long = format!(
            "killing container containerd://{id}: running its preStop hook, which drains the \
             connections of this pod before the kill"
        );
        daemon_writes(
            &client,
            &namespace,
            &name,
            json!({"phase": "Recreating", "containerRecreateStates": [
                {"name": "app", "phase": "Recreating", "message": long},
                {"name": "sidecar", "phase": "Pending"}]}),
        )
        .await;
        let wrapped = terminal.wait_for("preStop").await;
        keep("recreate-80-wrapped.txt", &wrapped);
        let joined = terminal.lines().await;
        assert!(
            joined.contains("containerd://9f3c2a7b41d0:") && !joined.contains(&id),
            "the container ID in its 12-digit form:\n{wrapped}"
        );
        let row_of = |part: &str| wrapped.lines().position(|row| row.contains(part));
        assert!(
            row_of("web/app")
                .zip(row_of("web/sidecar"))
                .is_some_and(|(app, sidecar)| sidecar >= app + 2),
            "app's message wraps at 80 columns onto rows of its own:\n{wrapped}"
        );
        daemon_writes(
            &client,
            &namespace,
            &name,
            json!({"phase": "Recreating", "containerRecreateStates": [
                {"name": "app", "phase": "Succeeded"},
                {"name": "sidecar", "phase": "Recreating", "message": "stopping"}]}),
        )
        .await;
        daemon_writes(
            &client,
            &namespace,
            &name,
            completed(json!([
                {"name": "app", "phase": "Succeeded"},
                {"name": "sidecar", "phase": "Succeeded"}])),
        )
        .await;
        let done = terminal.wait_for("exit=").await;
        keep("recreate-80-done.txt", &done);
        assert!(done.contains("exit=0"), "{done}");
        assert!(
            !done.contains("preStop"),
            "a row of the wrapped message is left:\n{done}"
        );
        assert!(!done.contains("stopping"), "a stale row is left:\n{done}");
        assert_eq!(rows_with(&done, "web/app"), 1, "{done}");
        assert_eq!(rows_with(&done, "web/sidecar"), 1, "{done}");
    })
    .await;
}

/// The rollout CRD, as the cluster tests create the request CRD when it is missing.
async fn ensure_rollout_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crr_crds::rollout::crd().expect("the rollout CRD");
    let name = crd.name_any();
    if crds
        .get_opt(&name)
        .await
        .expect("reading the CRD")
        .is_none()
    {
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => panic!("creating the rollout CRD: {error}"),
        }
    }
    testbed::wait_established(client, &name, WAIT).await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn rollout_status_at_80_columns_leaves_no_stale_rows() {
    with_namespace("term-rollout", |client, namespace| async move {
        ensure_rollout_crd(&client).await;
        let rollouts: Api<ContainerRecreateRollout> = Api::namespaced(client.clone(), &namespace);
        let rollout: ContainerRecreateRollout = serde_json::from_value(json!({
            "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
            "metadata": {"name": "web-app"},
            "spec": {"target": {"selector": {"matchLabels": {"app": "web"}}},
                     "containers": ["app"]},
        }))
        .expect("a rollout");
        rollouts
            .create(&PostParams::default(), &rollout)
            .await
            .expect("creating the rollout");
        let write = |status: serde_json::Value| {
            let rollouts = rollouts.clone();
            async move {
                rollouts
                    .patch_status(
                        "web-app",
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": status })),
                    )
                    .await
                    .expect("writing the rollout's status as the operator");
            }
        };
        let condition = |reason: &str, message: &str| {
            json!([{"type": "Progressing", "status": "True", "reason": reason, "message": message,
                    "lastTransitionTime": "2026-12-02T00:00:00Z"}])
        };
        write(json!({"phase": "Progressing", "targetPods": 4, "recreated": 1, "inFlight": 1,
                     "conditions": condition("WaitingForBudget",
                        "pod web-7c9f8d6b5-x2x9q waits: PodDisruptionBudget web-frontend-budget allows no more disruptions")}))
            .await;
        // The rollout's request in flight, queued behind another of its pod, as the operator
        // and the daemon leave it.
        ready_pods(&client, &namespace, "web", &["web-1"]).await;
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        let request: ContainerRecreateRequest = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": "web-app-1", "labels": {"crr.dev/rollout": "web-app"}},
            "spec": {"podName": "web-1", "containers": [{"name": "app"}]},
        }))
        .expect("a request");
        crrs.create(&PostParams::default(), &request)
            .await
            .expect("creating the rollout's request");
        daemon_writes(
            &client,
            &namespace,
            "web-app-1",
            json!({"phase": "Pending",
                   "message": "queued: waiting for request other of the same pod to finish first"}),
        )
        .await;
        let terminal = Terminal::start(&namespace, &["rollout", "status", "web-app"]).await;
        let wrapped = terminal.wait_for("allows no more").await;
        let wrapped = if wrapped.contains("web-1:") {
            wrapped
        } else {
            terminal.wait_for("web-1:").await
        };
        keep("rollout-80-waiting.txt", &wrapped);
        assert!(
            wrapped.contains("web-1: app Pending (queued: waiting for request other"),
            "the pod in flight is listed under the bar:\n{wrapped}"
        );
        daemon_writes(&client, &namespace, "web-app-1", completed(json!([{"name": "app", "phase": "Succeeded"}]))).await;
        write(json!({"phase": "Progressing", "targetPods": 4, "recreated": 3, "inFlight": 1,
                     "conditions": condition("Started", "starting pods")}))
            .await;
        write(json!({"phase": "Completed", "targetPods": 4, "recreated": 4, "inFlight": 0,
                     "conditions": condition("Completed", "every target pod was handled")}))
            .await;
        let done = terminal.wait_for("exit=").await;
        keep("rollout-80-done.txt", &done);
        assert!(done.contains("exit=0"), "{done}");
        assert!(
            done.contains("web-app: Completed [####################] 4/4 recreated"),
            "{done}"
        );
        assert!(
            !done.contains("disruptions") && !done.contains("budget"),
            "a row of the wrapped line is left:\n{done}"
        );
        assert_eq!(rows_with(&done, "web-app:"), 1, "{done}");
        assert_eq!(rows_with(&done, "web-1:"), 0, "a finished pod is left listed:\n{done}");
    })
    .await;
}
