//! `crr-api-costs`: what one ContainerRecreateRequest costs the API server, by component, verb and
//! resource, measured on the local test bed with crr installed
//! (`bench/api-costs.sh`).
//!
//! N pods run; N requests (`CRR_COST_REQUESTS`, 20) are created at once, each recreating one
//! container with `ttlSecondsAfterFinished: 1`, and the run waits until every request is deleted.
//! The counts come from the API server itself:
//! - its audit log (`$CRR_CLUSTER_DIR/audit/audit.log`, every request's metadata, written by the
//!   test bed's apiserver): requests by crr's service accounts between the first create and the
//!   last deletion, by component, verb and resource;
//! - its `/metrics`: `apiserver_admission_webhook_request_total` before and after, for the calls
//!   to crr's admission webhooks (the API server's own requests, absent from the audit log).
//!
//! Prints a Markdown table per request and writes it to `bench/results/<date>-api-costs.md`.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, anyhow, ensure};
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_e2e::pod_ready;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let requests: usize = std::env::var("CRR_COST_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let cluster_dir =
        std::env::var("CRR_CLUSTER_DIR").unwrap_or_else(|_| "/var/lib/crr-cluster".into());
    let audit_log = format!("{cluster_dir}/audit/audit.log");
    let client = Client::try_default()
        .await
        .context("connecting to the test bed")?;
    let namespace = crr_e2e::create_namespace(&client, "cost").await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let outcome = measure(&client, &namespace, requests, &audit_log).await;
    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await
        .ok();
    let report = outcome?;
    println!("{report}");
    let out = std::env::var("CRR_BENCH_OUT").unwrap_or_else(|_| "bench/results".into());
    std::fs::create_dir_all(&out)?;
    let path = format!(
        "{out}/{}-api-costs.md",
        jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M")
    );
    std::fs::write(&path, &report)?;
    eprintln!("api-costs: wrote {path}");
    Ok(())
}

async fn measure(
    client: &Client,
    namespace: &str,
    requests: usize,
    audit_log: &str,
) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for index in 0..requests {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("cost-{index}")},
            "spec": {"terminationGracePeriodSeconds": 2, "containers": [{
                "name": "app", "image": crr_e2e::BUSYBOX,
                "command": ["sh", "-c", crr_e2e::EXIT_ON_TERM_LOOP]}]},
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    for index in 0..requests {
        crr_e2e::wait(
            pods.clone(),
            &format!("cost-{index}"),
            Duration::from_secs(180),
            |pod: Option<&Pod>| pod.is_some_and(pod_ready),
        )
        .await
        .with_context(|| format!("pod cost-{index} never Ready"))?;
    }
    // Quiet the pods' own startup traffic (kubelet status writes) before the window opens.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let webhooks_before = webhook_calls(client).await?;
    let start = jiff::Timestamp::now();
    let crrs: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            crr_crds::keys::GROUP,
            crr_crds::keys::V1BETA1,
            crr_crds::keys::KIND,
        )),
    );
    let creates = (0..requests).map(|index| {
        let crrs = crrs.clone();
        async move {
            let object: kube::api::DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{}/{}", crr_crds::keys::GROUP, crr_crds::keys::V1BETA1),
                "kind": crr_crds::keys::KIND,
                "metadata": {"name": format!("cost-{index}")},
                "spec": {"podName": format!("cost-{index}"), "containers": [{"name": "app"}],
                         "ttlSecondsAfterFinished": 1},
            }))?;
            crrs.create(&PostParams::default(), &object).await?;
            Ok::<_, anyhow::Error>(())
        }
    });
    for created in futures::future::join_all(creates).await {
        created?;
    }
    let typed: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let left = typed.list(&Default::default()).await?.items;
        if left.is_empty() {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{} requests still there after 300 s: {:?}",
            left.len(),
            left.iter().map(|crr| crr.name_any()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Events and the last status writes settle; the audit log is flushed as requests complete.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end = jiff::Timestamp::now();
    let webhooks_after = webhook_calls(client).await?;
    let counts = crr_e2e::measure::audit_counts(audit_log, start, end)?;
    Ok(render(
        requests,
        &counts,
        &webhooks_before,
        &webhooks_after,
        end.duration_since(start),
    ))
}

/// `apiserver_admission_webhook_request_total` by webhook name, for crr's webhooks.
async fn webhook_calls(client: &Client) -> anyhow::Result<BTreeMap<String, f64>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut calls = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_admission_webhook_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let name = labels
            .split(',')
            .find_map(|label| label.strip_prefix("name=\""))
            .map(|name| name.trim_end_matches('"').to_owned())
            .unwrap_or_default();
        let operation = labels
            .split(',')
            .find_map(|label| label.strip_prefix("operation=\""))
            .map(|op| op.trim_end_matches('"').to_owned())
            .unwrap_or_default();
        if !name.contains("containerrecreaterequest") && !name.contains("crr.apps.kruise.io") {
            continue;
        }
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| anyhow!("metric value {value:?}"))?;
        *calls.entry(format!("{name} {operation}")).or_insert(0.0) += value;
    }
    Ok(calls)
}

fn render(
    requests: usize,
    counts: &BTreeMap<(String, String, String), usize>,
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    took: jiff::SignedDuration,
) -> String {
    let per = |count: f64| count / requests as f64;
    let mut out = format!(
        "# API requests per ContainerRecreateRequest\n\n{requests} requests at once, one container each, \
         `ttlSecondsAfterFinished: 1`; {:.1} s from the first create to the last deletion.\n\n\
         | component | verb | resource | per request |\n|---|---|---|---|\n",
        took.as_secs_f64()
    );
    let mut writes = BTreeMap::<String, usize>::new();
    let mut pod_gets = BTreeMap::<String, usize>::new();
    for ((component, verb, resource), count) in counts {
        out.push_str(&format!(
            "| {component} | {verb} | {resource} | {:.2} |\n",
            per(*count as f64)
        ));
        if matches!(verb.as_str(), "create" | "update" | "patch" | "delete")
            && !resource.starts_with("events")
        {
            *writes.entry(component.clone()).or_insert(0) += count;
        }
        if verb == "get" && resource == "pods" {
            *pod_gets.entry(component.clone()).or_insert(0) += count;
        }
    }
    let total_writes: usize = writes.values().sum();
    let total_gets: usize = pod_gets.values().sum();
    out.push_str(&format!(
        "\n**Writes** (create, update, patch, delete; Events apart) per request: {:.2} by crr \
         ({}), plus the client's create.\n\n**Pod GETs** per request: {:.2} ({}).\n\n",
        per(total_writes as f64),
        writes
            .iter()
            .map(|(component, count)| format!("{component} {:.2}", per(*count as f64)))
            .collect::<Vec<_>>()
            .join(", "),
        per(total_gets as f64),
        pod_gets
            .iter()
            .map(|(component, count)| format!("{component} {:.2}", per(*count as f64)))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    out.push_str("**Admission webhook calls** per request (the API server's `apiserver_admission_webhook_request_total`):\n\n| webhook | operation | per request |\n|---|---|---|\n");
    let mut total_calls = 0.0;
    for (key, value) in after {
        let calls = value - before.get(key).copied().unwrap_or(0.0);
        if calls > 0.0 {
            let (name, operation) = key.split_once(' ').unwrap_or((key, ""));
            out.push_str(&format!("| {name} | {operation} | {:.2} |\n", per(calls)));
            if name.contains("containerrecreaterequest") {
                total_calls += calls;
            }
        }
    }
    out.push_str(&format!(
        "\nCRR webhook calls per request: {:.2}.\n",
        per(total_calls)
    ));
    out
}
