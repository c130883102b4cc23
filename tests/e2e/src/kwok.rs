//! Simulated nodes for the benches that run thousands of pods (`crr-scale`,
//! `crr-bench-triggers`): Nodes that kwok (`bench/kwok.sh`) plays the kubelet of, and the
//! namespaces the benches put their objects in.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The taint and label kwok's nodes carry; only pods that tolerate it land there.
pub const KWOK_TAINT: &str = "kwok.x-k8s.io/node";

/// The field manager of what the benches apply.
const FIELD_MANAGER: &str = "crr-bench";

/// The name of the kwok node `index`.
pub fn kwok_node(index: usize) -> String {
    format!("kwok-node-{index}")
}

/// The toleration of the kwok nodes' taint, for the pods (or pod templates) meant for them.
pub fn kwok_toleration() -> Value {
    json!({"key": KWOK_TAINT, "operator": "Exists", "effect": "NoSchedule"})
}

/// `count` Nodes kwok manages (its annotation), tainted so that only the bench's pods land
/// there, labelled `type: kwok`; returns once all are Ready.
pub async fn kwok_nodes(client: &Client, count: usize) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let creations = (0..count).map(|index| {
        let nodes = nodes.clone();
        async move {
            let name = kwok_node(index);
            let node: Node = serde_json::from_value(json!({
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_TAINT: "fake"},
                    "labels": {"type": "kwok", "kubernetes.io/hostname": name},
                },
                "spec": {"taints": [{"key": KWOK_TAINT, "value": "fake", "effect": "NoSchedule"}]},
                "status": {
                    "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "500"},
                    "capacity": {"cpu": "32", "memory": "256Gi", "pods": "500"},
                },
            }))?;
            nodes
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Apply(&node),
                )
                .await
                .with_context(|| format!("creating node {name}"))?;
            anyhow::Ok(())
        }
    });
    futures::stream::iter(creations)
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = nodes
            .list(&ListParams::default().labels("type=kwok"))
            .await?
            .items
            .iter()
            .filter(|node| crate::node_ready(node))
            .count();
        if ready >= count {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "only {ready} of {count} kwok nodes Ready after 120 s: is kwok running (bench/kwok.sh)?"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The namespace `name` with `labels` (a JSON object), applied; returns once its default
/// ServiceAccount exists (pods can be created).
pub async fn ensure_namespace(client: &Client, name: &str, labels: &Value) -> anyhow::Result<()> {
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    Api::<Namespace>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&namespace),
        )
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    crate::wait(
        Api::<ServiceAccount>::namespaced(client.clone(), name),
        "default",
        Duration::from_secs(30),
        |account: Option<&_>| account.is_some(),
    )
    .await?;
    Ok(())
}
