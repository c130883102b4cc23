//! Scenarios across nodes, on a test bed of at least two nodes
//! (`CRR_NODES=2 hack/cluster.sh up`; hack/cluster-test.sh brings up two):
//!
//! - `per-node`: one request per node at the same time; each is handled by its own node's daemon
//!   (the `Killing` Event on each pod is reported by the daemon instance of that pod's node) and
//!   no daemon touches another node's pod;
//! - `rolling-across-nodes`: `kubectl crr recreate -l` over pods on every node, at most two at a
//!   time;
//! - `node-lost`: a node's kubelet and containerd stop right after a kill; the request ends at its
//!   deadline with a clear message, nothing is left Terminating, a request on the other node
//!   completes meanwhile, and once the node is back its daemon serves requests again;
//! - `late-node`: a node that joins later gets the DaemonSet's daemon, and requests for its pods
//!   work (the test bed keeps that node).

use std::time::Duration;

use anyhow::{Context as _, anyhow, ensure};
use crr_crds::v1beta1::Phase;
use crr_e2e::faults;
use crr_e2e::{Ctx, Expect, Scenario, Version, check, id_and_restarts, pod_ready, succeeded};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use serde_json::{Value, json};

const IGNORED: &str =
    "needs a test bed of two nodes with crr installed; hack/cluster-test.sh runs it";
const COMPLETION: Duration = Duration::from_secs(90);

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "per-node",
            run: |ctx| Box::pin(per_node(ctx)),
        },
        Scenario {
            name: "rolling-across-nodes",
            run: |ctx| Box::pin(rolling_across_nodes(ctx)),
        },
        Scenario {
            name: "node-lost",
            run: |ctx| Box::pin(node_lost(ctx)),
        },
        Scenario {
            name: "late-node",
            run: |ctx| Box::pin(late_node(ctx)),
        },
    ]
}

fn main() {
    let scenarios = scenarios()
        .into_iter()
        .map(|scenario| (scenario, Expect::Pass))
        .collect();
    crr_e2e::suite_main("nodes", scenarios, IGNORED, |client| async move {
        crr_e2e::installed(&client).await?;
        match crr_e2e::ready_nodes(&client).await {
            Ok(nodes) if nodes.len() >= 2 => Ok(()),
            Ok(nodes) => Err(format!(
                "{} Ready node(s) ({nodes:?}): bring the test bed up with CRR_NODES=2",
                nodes.len()
            )),
            Err(error) => Err(format!("{error:#}")),
        }
    });
}

/// The two-container test pod, placed on `node`.
async fn pod_on(
    ctx: &Ctx,
    name: &str,
    node: &str,
    customize: impl FnOnce(&mut Value),
) -> anyhow::Result<Pod> {
    let node = node.to_owned();
    ctx.two_container_pod(name, move |pod| {
        pod["spec"]["nodeName"] = json!(node);
        customize(pod);
    })
    .await
}

async fn request(ctx: &Ctx, name: &str, pod: &str, strategy: Value) -> anyhow::Result<String> {
    ctx.create_crr(
        Version::V1beta1,
        json!({"metadata": {"name": name},
               "spec": {"podName": pod, "containers": [{"name": "app"}], "strategy": strategy}}),
    )
    .await
}

/// Who reported the `Killing` Events on pod `pod`: (reportingController, reportingInstance).
async fn killing_reporters(ctx: &Ctx, pod: &str) -> anyhow::Result<Vec<(String, String)>> {
    Ok(ctx
        .pod_events(pod, "Killing")
        .await?
        .into_iter()
        .map(|event| {
            (
                event.reporting_controller.unwrap_or_default(),
                event.reporting_instance.unwrap_or_default(),
            )
        })
        .collect())
}

// One request per node at once: each completes, recreated by its own node's daemon only.
async fn per_node(ctx: Ctx) -> anyhow::Result<()> {
    let nodes = crr_e2e::ready_nodes(&ctx.client).await?;
    let mut pods = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        let name = format!("per-node-{index}");
        let pod = pod_on(&ctx, &name, node, |_| {}).await?;
        pods.push((name, node.clone(), id_and_restarts(&pod, "app")?));
    }
    let creates = pods
        .iter()
        .map(|(name, _, _)| request(&ctx, name, name, json!({})));
    for created in futures::future::join_all(creates).await {
        created?;
    }
    for (name, node, (app_id, restarts)) in &pods {
        succeeded(&ctx.wait_completed(name, COMPLETION).await?, 1)?;
        let pod = ctx
            .wait_pod(name, "Ready", Duration::from_secs(30), pod_ready)
            .await?;
        let (id, now) = id_and_restarts(&pod, "app")?;
        check(&id != app_id && now == restarts + 1, || {
            format!("{name} on {node}: app {app_id}/{restarts} -> {id}/{now}")
        })?;
        let reporters = killing_reporters(&ctx, name).await?;
        check(
            reporters.len() == 1
                && reporters.iter().all(|(controller, instance)| {
                    controller.contains("node-daemon") && instance == node
                }),
            || format!("{name} on {node}: Killing reported by {reporters:?}"),
        )?;
    }
    Ok(())
}

// `kubectl crr recreate -l` over two pods per node, at most two unavailable at a time.
async fn rolling_across_nodes(ctx: Ctx) -> anyhow::Result<()> {
    let nodes = crr_e2e::ready_nodes(&ctx.client).await?;
    let mut pods = Vec::new();
    for (index, node) in nodes.iter().take(2).enumerate() {
        for replica in 0..2 {
            let name = format!("roll-{index}-{replica}");
            let pod = pod_on(&ctx, &name, node, |pod| {
                pod["metadata"]["labels"]["tier"] = json!("roll");
            })
            .await?;
            pods.push((name, id_and_restarts(&pod, "app")?));
        }
    }
    let output = ctx
        .plugin(&[
            "recreate",
            "-l",
            "tier=roll",
            "-c",
            "app",
            "--max-unavailable",
            "2",
            "--timeout",
            "180s",
        ])
        .await?;
    ensure!(
        output.status.success(),
        "kubectl crr recreate -l tier=roll: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    for (name, (app_id, restarts)) in &pods {
        let pod = ctx
            .wait_pod(name, "Ready", Duration::from_secs(30), pod_ready)
            .await?;
        let (id, now) = id_and_restarts(&pod, "app")?;
        check(&id != app_id && now == restarts + 1, || {
            format!("{name}: app {app_id}/{restarts} -> {id}/{now}")
        })?;
    }
    Ok(())
}

async fn cluster(args: &[&str]) -> anyhow::Result<()> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/cluster.sh");
    let output = tokio::process::Command::new(&script)
        .args(args)
        .output()
        .await
        .context("running hack/cluster.sh")?;
    ensure!(
        output.status.success(),
        "hack/cluster.sh {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

// A node lost right after a kill: its kubelet and containerd stop while the container it killed
// is stopping. The request ends at its deadline with a clear message, no pod is left Terminating,
// the other node keeps serving requests, and the node comes back cleanly.
async fn node_lost(ctx: Ctx) -> anyhow::Result<()> {
    let nodes = crr_e2e::ready_nodes(&ctx.client).await?;
    let lost = nodes
        .iter()
        .find(|node| *node != crr_e2e::FIRST_NODE)
        .cloned()
        .ok_or_else(|| anyhow!("no second node in {nodes:?}"))?;
    // app ignores SIGTERM (PID 1 without a trap): the stop takes its whole 20 s grace period.
    pod_on(&ctx, "lost", &lost, |pod| {
        pod["spec"]["terminationGracePeriodSeconds"] = json!(20);
        pod["spec"]["containers"][0]["command"] =
            json!(["sh", "-c", "while true; do sleep 1; done"]);
    })
    .await?;
    pod_on(&ctx, "kept", crr_e2e::FIRST_NODE, |_| {}).await?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "lost"},
                   "spec": {"podName": "lost", "containers": [{"name": "app"}],
                            "activeDeadlineSeconds": 40}}),
        )
        .await?;
    // The kill has begun: the daemon says `Killing` on the pod before it stops the container,
    // as the kubelet does (its state tells nothing until the kill has an outcome).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while killing_reporters(&ctx, "lost")
        .await?
        .iter()
        .all(|(controller, _)| !controller.contains("crr"))
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the daemon never began its kill (no Killing Event on pod lost)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster(&["stop", &format!("kubelet@{lost}")]).await?;
    cluster(&["stop", &format!("containerd@{lost}")]).await?;
    println!("nodes:   {lost}'s kubelet and containerd stopped after the kill");
    let outcome = async {
        // The other node is unaffected meanwhile.
        let other = request(&ctx, "kept", "kept", json!({})).await?;
        succeeded(&ctx.wait_completed(&other, COMPLETION).await?, 1)?;
        let done = ctx.wait_completed(&name, Duration::from_secs(120)).await?;
        let status = done.status.clone().unwrap_or_default();
        println!(
            "nodes:   {name}: {:?} {:?}",
            status.message, status.container_recreate_states
        );
        // Completed by its deadline; the states stay as the daemon wrote them (its node is
        // gone: the kill was announced, never recorded), and the Succeeded condition names the
        // container that was not recreated.
        let succeeded_condition = done.condition(crr_crds::keys::CONDITION_SUCCEEDED);
        check(
            status
                .message
                .as_deref()
                .is_some_and(|m| m.contains("activeDeadlineSeconds"))
                && status
                    .container_recreate_states
                    .iter()
                    .all(|state| state.phase == Phase::Pending && !state.is_killed)
                && succeeded_condition.is_some_and(|condition| {
                    condition.status == "False"
                        && condition.reason == "ActiveDeadlineExceeded"
                        && condition.message.contains("not recreated: app (Pending)")
                }),
            || format!("the lost node's request: {status:?}"),
        )?;
        let terminating: Vec<String> = ctx
            .pods()
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_some())
            .map(|pod| pod.name_any())
            .collect();
        check(terminating.is_empty(), || {
            format!("left Terminating: {terminating:?}")
        })
    }
    .await;
    // The node comes back, whatever happened above.
    cluster(&["start", &format!("containerd@{lost}")]).await?;
    cluster(&["start", &format!("kubelet@{lost}")]).await?;
    outcome?;
    println!("nodes:   {lost} back");
    wait_daemon_ready(&ctx, &lost).await?;
    let pod = ctx
        .wait_pod("lost", "Ready again", Duration::from_secs(120), pod_ready)
        .await?;
    let (id, restarts) = id_and_restarts(&pod, "app")?;
    let again = request(&ctx, "lost-again", "lost", json!({})).await?;
    succeeded(&ctx.wait_completed(&again, COMPLETION).await?, 1)?;
    let pod = ctx
        .wait_pod("lost", "Ready", Duration::from_secs(60), pod_ready)
        .await?;
    let (now_id, now) = id_and_restarts(&pod, "app")?;
    check(now_id != id && now == restarts + 1, || {
        format!("after the node came back: app {id}/{restarts} -> {now_id}/{now}")
    })
}

async fn wait_daemon_ready(ctx: &Ctx, node: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let daemon = faults::node_daemon_on(&ctx.client, node).await;
        if let Ok(pod) = &daemon
            && pod_ready(pod)
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "the node daemon on {node} never became Ready: {daemon:?}"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

// A node that joins after crr was installed gets the node daemon, and its pods' requests work.
async fn late_node(ctx: Ctx) -> anyhow::Result<()> {
    let before = crr_e2e::ready_nodes(&ctx.client).await?;
    let count = before.len() + 1;
    let node = format!("crr-node-{count}");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack");
    // The node joins; `up` imports the images built before (crr's) into it, as a registry would
    // serve them to a real node.
    let output = tokio::process::Command::new(script.join("cluster.sh"))
        .arg("up")
        .env("CRR_NODES", count.to_string())
        .output()
        .await?;
    ensure!(
        output.status.success(),
        "adding {node}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!("nodes:   {node} joined");
    wait_daemon_ready(&ctx, &node).await?;
    let pod = pod_on(&ctx, "late", &node, |_| {}).await?;
    let (app_id, restarts) = id_and_restarts(&pod, "app")?;
    let name = request(&ctx, "late", "late", json!({})).await?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)?;
    let pod = ctx
        .wait_pod("late", "Ready", Duration::from_secs(30), pod_ready)
        .await?;
    let (id, now) = id_and_restarts(&pod, "app")?;
    check(id != app_id && now == restarts + 1, || {
        format!("late: app {app_id}/{restarts} -> {id}/{now}")
    })
}
