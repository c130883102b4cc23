//! Faults injected into the running test bed, for the chaos suite (tests/chaos.rs): one of its
//! daemons restarted in place (`hack/cluster.sh restart`), and a crr component's process
//! SIGKILLed on this machine (the test bed's containers are this host's processes, found through
//! /proc by their pod's cgroup).
//!
//! It injects and finds; what must hold afterwards is each scenario's to check.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt as _};

use crate::SYSTEM_NAMESPACE;

/// The pod label of the node daemon's DaemonSet.
pub const NODE_DAEMON_LABEL: &str = "app.kubernetes.io/name=crr-node-daemon";
/// The program the node daemon's container runs.
pub const NODE_DAEMON_PROGRAM: &str = "crr-node-daemon";
/// The program the operator's containers run.
pub const OPERATOR_PROGRAM: &str = "crr-operator";
/// The operator's leader Lease.
pub const OPERATOR_LEASE: &str = "crr-operator";

fn cluster_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../hack/cluster.sh")
}

/// Restarts one test-bed daemon in place (`hack/cluster.sh restart NAME`) and returns how long it
/// was gone, until healthy again. `stop_seconds` bounds its SIGTERM before the SIGKILL.
pub async fn restart_daemon(name: &str, stop_seconds: u32) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let output = tokio::process::Command::new(cluster_script())
        .args(["restart", name])
        .env("CRR_STOP_SECONDS", stop_seconds.to_string())
        // An API server restarted under a fat tenant's load, with a Kubernetes build beside it
        // (CI builds the older stack meanwhile), has taken over 2 minutes to be ready: the wait
        // is long, the time taken is reported.
        .env("CRR_APISERVER_READY_SECONDS", "600")
        .output()
        .await
        .context("running hack/cluster.sh")?;
    ensure!(
        output.status.success(),
        "hack/cluster.sh restart {name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(start.elapsed())
}

/// Stops a test-bed daemon (`hack/cluster.sh stop NAME`), leaves it down for `down`, and starts
/// it again; returns how long it was gone.
pub async fn stop_for(name: &str, down: Duration) -> anyhow::Result<Duration> {
    let start = Instant::now();
    for action in ["stop", "start"] {
        if action == "start" {
            tokio::time::sleep(down).await;
        }
        let output = tokio::process::Command::new(cluster_script())
            .args([action, name])
            .output()
            .await
            .context("running hack/cluster.sh")?;
        ensure!(
            output.status.success(),
            "hack/cluster.sh {action} {name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(start.elapsed())
}

/// Waits until the control plane acts on new objects again after an apiserver restart: a fresh
/// namespace gets its default ServiceAccount from the controller manager, whose informers may sit
/// in their reconnect backoff for tens of seconds after the apiserver came back (seen: over 30 s).
/// Returns how long that took. The next scenario's namespace then does not pay for this one's fault.
pub async fn control_plane_settled(client: &Client) -> anyhow::Result<Duration> {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    let start = Instant::now();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let name = format!("e2e-settle-{:05x}", std::process::id() & 0xfffff);
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"crr-e2e": "true"}},
    }))?;
    namespaces
        .create(&Default::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    let found = crate::wait(
        accounts,
        "default",
        Duration::from_secs(120),
        |account: Option<&ServiceAccount>| account.is_some(),
    )
    .await;
    let _ = namespaces.delete(&name, &Default::default()).await;
    found.context("the controller manager never gave a new namespace its ServiceAccount")?;
    Ok(start.elapsed())
}

/// The pods of a crr component in the system namespace, by label selector.
pub async fn component_pods(client: &Client, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    Ok(pods
        .list(&ListParams::default().labels(selector))
        .await
        .with_context(|| format!("listing {selector}"))?
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .collect())
}

/// The node daemon pod of node `node`.
pub async fn node_daemon_on(client: &Client, node: &str) -> anyhow::Result<Pod> {
    let daemons = component_pods(client, NODE_DAEMON_LABEL).await?;
    let names: Vec<String> = daemons
        .iter()
        .map(|pod| {
            let on = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref());
            format!(
                "{} on {on:?}",
                pod.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    daemons
        .into_iter()
        .find(|pod| pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()) == Some(node))
        .ok_or_else(|| anyhow::anyhow!("no node daemon on {node}: {names:?}"))
}

/// The operator's current leader: the Lease holder, a pod of the system namespace.
pub async fn operator_leader(client: &Client) -> anyhow::Result<Pod> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let holder = leases
        .get(OPERATOR_LEASE)
        .await
        .context("reading the operator Lease")?
        .spec
        .and_then(|spec| spec.holder_identity)
        .filter(|holder| !holder.is_empty())
        .ok_or_else(|| anyhow!("the operator Lease has no holder"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    pods.get(&holder)
        .await
        .with_context(|| format!("reading the leader pod {holder}"))
}

/// The process id of `program` running in a container of `pod`, found through /proc: the
/// process's cgroup names the pod's UID (cgroupfs keeps its dashes, systemd makes them
/// underscores) and its command line starts with the program.
pub fn process_of(pod: &Pod, program: &str) -> anyhow::Result<u32> {
    let uid = pod
        .metadata
        .uid
        .clone()
        .ok_or_else(|| anyhow!("pod {} has no uid", pod.name_any()))?;
    let marks = [format!("pod{uid}"), format!("pod{}", uid.replace('-', "_"))];
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").context("reading /proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes come and go while we look: an unreadable one is not ours.
        let Ok(cgroup) = std::fs::read_to_string(entry.path().join("cgroup")) else {
            continue;
        };
        if !marks.iter().any(|mark| cgroup.contains(mark.as_str())) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv0 = cmdline.split(|byte| *byte == 0).next().unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0);
        if argv0.rsplit('/').next() == Some(program) {
            found.push(pid);
        }
    }
    match found.as_slice() {
        [pid] => Ok(*pid),
        [] => Err(anyhow!(
            "no {program} process in the cgroup of pod {} ({uid})",
            pod.name_any()
        )),
        many => Err(anyhow!(
            "{} {program} processes in pod {}: {many:?}",
            many.len(),
            pod.name_any()
        )),
    }
}

/// SIGKILLs one process: no drain, no Lease release, no goodbye.
pub async fn sigkill(pid: u32) -> anyhow::Result<()> {
    let output = tokio::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .output()
        .await
        .context("running kill")?;
    ensure!(
        output.status.success(),
        "kill -KILL {pid}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// The logs of every container of a component since `since` (all of its pods, previous
/// containers too when one was restarted), as one text.
pub async fn component_logs(selector: &str, since: jiff::Timestamp) -> anyhow::Result<String> {
    let since = since.to_string();
    let mut text = String::new();
    for previous in [false, true] {
        let mut args = vec![
            "-n",
            SYSTEM_NAMESPACE,
            "logs",
            "-l",
            selector,
            "--tail=-1",
            "--prefix",
        ];
        let since_arg = format!("--since-time={since}");
        args.push(&since_arg);
        if previous {
            args.push("--previous");
        }
        let output = crate::kubectl(&args).await?;
        // `--previous` fails for a container never restarted: that is no error here.
        text.push_str(&String::from_utf8_lossy(&output.stdout));
    }
    Ok(text)
}

/// The network namespace the test bed's control plane (etcd among it) runs in.
const CONTROL_PLANE_NETNS: &str = "/run/netns/crr-node";

/// One call to the test bed's etcd through its JSON gateway (the v3 API over HTTP on its client
/// port, which listens on the namespace's loopback only): bash's `/dev/tcp` inside the namespace,
/// HTTP/1.0 so that the answer ends with the connection. Returns the answer's JSON.
async fn etcd_call(path: &str, body: &str) -> anyhow::Result<serde_json::Value> {
    const CALL: &str = r#"exec 3<>/dev/tcp/127.0.0.1/2379 || exit 1
printf 'POST %s HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' "$1" "${#2}" "$2" >&3
sed '1,/^\r$/d' <&3"#;
    let output = tokio::process::Command::new("nsenter")
        .args([
            &format!("--net={CONTROL_PLANE_NETNS}"),
            "bash",
            "-c",
            CALL,
            "etcd-call",
            path,
            body,
        ])
        .output()
        .await
        .context("running nsenter")?;
    ensure!(
        output.status.success(),
        "etcd {path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "etcd {path} answered {:?}",
            String::from_utf8_lossy(&output.stdout)
        )
    })?;
    ensure!(answer.get("error").is_none(), "etcd {path}: {answer}");
    Ok(answer)
}

/// An int64 of the etcd gateway's JSON (written as a string).
fn etcd_int(value: &serde_json::Value) -> Option<u64> {
    value
        .as_str()
        .and_then(|text| text.parse().ok())
        .or_else(|| value.as_u64())
}

/// Compacts the test bed's etcd to its current revision and defragments it; returns its database
/// size before and after, bytes. A scenario that wrote hundreds of MB of revisions (the fat
/// tenant) leaves etcd as small as its live data: the API server compacts only every five minutes
/// and etcd never shrinks its file by itself, so two such runs in a row would otherwise reach its
/// 2 GiB quota (`--quota-backend-bytes`, hack/cluster.sh) and refuse every write.
pub async fn compact_etcd() -> anyhow::Result<(u64, u64)> {
    let status = etcd_call("/v3/maintenance/status", "{}").await?;
    let before = etcd_int(&status["dbSize"]).ok_or_else(|| anyhow!("etcd status: {status}"))?;
    let revision =
        etcd_int(&status["header"]["revision"]).ok_or_else(|| anyhow!("etcd status: {status}"))?;
    let compacted = etcd_call(
        "/v3/kv/compaction",
        &format!(r#"{{"revision":"{revision}","physical":true}}"#),
    )
    .await;
    // The API server's own compaction may have got there first: nothing left to compact.
    if let Err(error) = compacted
        && !format!("{error:#}").contains("compacted")
    {
        return Err(error);
    }
    etcd_call("/v3/maintenance/defragment", "{}").await?;
    let status = etcd_call("/v3/maintenance/status", "{}").await?;
    let after = etcd_int(&status["dbSize"]).ok_or_else(|| anyhow!("etcd status: {status}"))?;
    Ok((before, after))
}
