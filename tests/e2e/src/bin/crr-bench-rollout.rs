//! `crr-bench-rollout`: restarting a whole Deployment, rescheduling against in place, on the
//! local test bed with crr installed (`bench/rollout.sh`, `make bench-rollout`).
//!
//! One Deployment of `CRR_ROLLOUT_PODS` (60) two-container pods (`app` serves HTTP, `sidecar`
//! sleeps), a readiness probe that passes once `app` listens (httpGet, every second), a
//! PodDisruptionBudget of `maxUnavailable: 10%`. Then, in turn:
//! - **floor**: one kubelet restart of `app` (its container killed, until the pod is Ready);
//! - **a)** `kubectl rollout restart deployment`: time until every pod is new and Ready, pods
//!   rescheduled, the most pods unavailable at once (a pod watch), API writes (audit log, every
//!   user);
//! - **b)** a ContainerRecreateRollout of `app`, `maxUnavailable: 10%`: the same figures, crr's
//!   own API requests per pod (audit log, crr's service accounts, every verb), and the operator
//!   processes' peak RSS (sampled every 250 ms).
//!
//! The ideal for b is ceil(pods / maxUnavailable) batches of one kubelet restart. Writes
//! `bench/results/<date>-rollout.{md,json}`.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, ensure};
use crr_crds::rollout::ContainerRecreateRollout;
use crr_e2e::rollout::{apply, wait_phase};
use crr_e2e::{BUSYBOX, Ctx, EXIT_ON_TERM_LOOP, id_and_restarts, kill_container, pod_ready};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const APP: &str = "bench";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pods: usize = std::env::var("CRR_ROLLOUT_PODS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(60);
    let cluster_dir =
        std::env::var("CRR_CLUSTER_DIR").unwrap_or_else(|_| "/var/lib/crr-cluster".into());
    let audit_log = format!("{cluster_dir}/audit/audit.log");
    let client = Client::try_default()
        .await
        .context("connecting to the test bed")?;
    let namespace = crr_e2e::create_namespace(&client, "bench-rollout").await?;
    let ctx = Ctx {
        client: client.clone(),
        namespace: namespace.clone(),
    };
    let outcome = measure(&ctx, pods, &audit_log).await;
    Api::<Namespace>::all(client)
        .delete(&namespace, &DeleteParams::default())
        .await
        .ok();
    let (report, json) = outcome?;
    println!("{report}");
    let out = std::env::var("CRR_BENCH_OUT").unwrap_or_else(|_| "bench/results".into());
    std::fs::create_dir_all(&out)?;
    let stem = format!(
        "{out}/{}-rollout",
        jiff::Timestamp::now().strftime("%Y-%m-%dT%H%M")
    );
    std::fs::write(format!("{stem}.md"), &report)?;
    std::fs::write(format!("{stem}.json"), serde_json::to_string_pretty(&json)?)?;
    eprintln!("bench-rollout: wrote {stem}.md and .json");
    Ok(())
}

fn deployment(replicas: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "terminationGracePeriodSeconds": 3,
                    "containers": [
                        {"name": "app", "image": BUSYBOX,
                         "command": ["sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"],
                         "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}},
                        {"name": "sidecar", "image": BUSYBOX,
                         "command": ["sh", "-c", EXIT_ON_TERM_LOOP]},
                    ],
                },
            },
        },
    })
}

/// What a pod watch saw: the most pods not Ready at once, and every pod name.
#[derive(Default)]
struct Seen {
    most_unavailable: usize,
    names: BTreeSet<String>,
}

fn watch_pods(ctx: &Ctx) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let pods = ctx.pods();
    let task = tokio::spawn({
        let seen = seen.clone();
        async move {
            let mut ready: BTreeMap<String, bool> = BTreeMap::new();
            let config = watcher::Config::default().labels(&format!("app={APP}"));
            let mut events = watcher(pods, config).default_backoff().boxed();
            while let Some(Ok(event)) = events.next().await {
                match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                        // A terminating pod of a rolling restart is unavailable until it is gone.
                        let available =
                            pod_ready(&pod) && pod.metadata.deletion_timestamp.is_none();
                        ready.insert(pod.name_any(), available);
                    }
                    watcher::Event::Delete(pod) => {
                        ready.remove(&pod.name_any());
                    }
                    _ => {}
                }
                let mut seen = seen.lock().expect("the sample");
                let now = ready.values().filter(|ready| !**ready).count();
                seen.most_unavailable = seen.most_unavailable.max(now);
                seen.names.extend(ready.keys().cloned());
            }
        }
    });
    (seen, task)
}

async fn ready_pods(
    ctx: &Ctx,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<BTreeSet<String>> {
    let deadline = Instant::now() + timeout;
    let params = ListParams::default().labels(&format!("app={APP}"));
    loop {
        let pods = ctx.pods().list(&params).await?.items;
        let ready: BTreeSet<String> = pods
            .iter()
            .filter(|pod| pod_ready(pod) && pod.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        if ready.len() == count && pods.len() == count {
            return Ok(ready);
        }
        ensure!(
            Instant::now() < deadline,
            "{} of {count} pods Ready after {}s",
            ready.len(),
            timeout.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every write (create, update, patch, delete) in the audit log within [start, end], by anyone.
fn all_writes(path: &str, start: jiff::Timestamp, end: jiff::Timestamp) -> anyhow::Result<usize> {
    use std::io::BufRead as _;
    let file = std::fs::File::open(path).with_context(|| format!("reading {path}"))?;
    let mut writes = 0;
    for line in std::io::BufReader::new(file).lines() {
        let Ok(event) = serde_json::from_str::<Value>(&line?) else {
            continue;
        };
        if event["stage"] != "ResponseComplete" {
            continue;
        }
        let received: Option<jiff::Timestamp> = event["requestReceivedTimestamp"]
            .as_str()
            .and_then(|time| time.parse().ok());
        if !received.is_some_and(|time| time >= start && time <= end) {
            continue;
        }
        if matches!(
            event["verb"].as_str(),
            Some("create" | "update" | "patch" | "delete")
        ) {
            writes += 1;
        }
    }
    Ok(writes)
}

async fn measure(ctx: &Ctx, pods: usize, audit_log: &str) -> anyhow::Result<(String, Value)> {
    let budget = pods.div_ceil(10).max(1);
    apply(ctx, deployment(pods)).await?;
    apply(
        ctx,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": APP},
               "spec": {"maxUnavailable": "10%", "selector": {"matchLabels": {"app": APP}}}}),
    )
    .await?;
    let original = ready_pods(ctx, pods, Duration::from_secs(300)).await?;
    eprintln!("bench-rollout: {pods} pods Ready");

    // The floor: one kubelet restart of app.
    let first = original
        .iter()
        .next()
        .ok_or_else(|| anyhow!("no pod"))?
        .clone();
    let pod = ctx.pods().get(&first).await?;
    let (id, restarts) = id_and_restarts(&pod, "app")?;
    let started = Instant::now();
    kill_container(&id).await?;
    ctx.wait_pod(&first, "restarted", Duration::from_secs(60), |pod: &Pod| {
        id_and_restarts(pod, "app").is_ok_and(|(new, count)| new != id && count > restarts)
            && pod_ready(pod)
    })
    .await?;
    let floor = started.elapsed().as_secs_f64();
    eprintln!("bench-rollout: floor {floor:.2}s");
    tokio::time::sleep(Duration::from_secs(3)).await;

    // a) kubectl rollout restart.
    let (seen, watch) = watch_pods(ctx);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wall_a = jiff::Timestamp::now();
    let started = Instant::now();
    let output = crr_e2e::kubectl(&[
        "-n",
        &ctx.namespace,
        "rollout",
        "restart",
        &format!("deployment/{APP}"),
    ])
    .await?;
    ensure!(
        output.status.success(),
        "kubectl rollout restart: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let replaced = loop {
        let deployment = deployments.get(APP).await?;
        let status = deployment.status.unwrap_or_default();
        let generation = deployment.metadata.generation.unwrap_or(0);
        let done = status.observed_generation.unwrap_or(0) >= generation
            && status.updated_replicas == Some(pods as i32)
            && status.ready_replicas == Some(pods as i32)
            && status.replicas == Some(pods as i32);
        if done {
            let now = ready_pods(ctx, pods, Duration::from_secs(120)).await?;
            if now.is_disjoint(&original) {
                break now;
            }
        }
        ensure!(
            started.elapsed() < Duration::from_secs(900),
            "kubectl rollout restart never finished"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let restart_seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes_a = all_writes(audit_log, wall_a, jiff::Timestamp::now())?;
    watch.abort();
    let (most_a, rescheduled_a) = {
        let seen = seen.lock().expect("the sample");
        (
            seen.most_unavailable,
            replaced.difference(&original).count(),
        )
    };
    eprintln!(
        "bench-rollout: a) {restart_seconds:.1}s, {rescheduled_a} rescheduled, {most_a} unavailable at most"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    // b) a ContainerRecreateRollout of app.
    let before = ready_pods(ctx, pods, Duration::from_secs(120)).await?;
    let (seen, watch) = watch_pods(ctx);
    let peak_rss = Arc::new(Mutex::new(0u64));
    let sampler = tokio::spawn({
        let peak = peak_rss.clone();
        async move {
            loop {
                for pid in crr_e2e::measure::pids_of("crr-operator") {
                    if let Some(usage) = crr_e2e::measure::usage(pid) {
                        let mut peak = peak.lock().expect("the peak");
                        *peak = (*peak).max(usage.rss_kib);
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wall_b = jiff::Timestamp::now();
    let started = Instant::now();
    crr_e2e::rollout::create_rollout(
        ctx,
        "bench",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP}},
               "containers": ["app"], "maxUnavailable": "10%"}),
    )
    .await?;
    let done: ContainerRecreateRollout = wait_phase(ctx, "bench", "Completed").await?;
    let after = ready_pods(ctx, pods, Duration::from_secs(120)).await?;
    let rollout_seconds = started.elapsed().as_secs_f64();
    sampler.abort();
    // Events and the last status writes settle before the audit log is read.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end_b = jiff::Timestamp::now();
    let writes_b = all_writes(audit_log, wall_b, end_b)?;
    let crr_requests = crr_e2e::measure::audit_counts(audit_log, wall_b, end_b)?;
    watch.abort();
    let most_b = seen.lock().expect("the sample").most_unavailable;
    let rescheduled_b = after.difference(&before).count();
    let status = done.status.unwrap_or_default();
    ensure!(
        status.recreated as usize == pods,
        "recreated {} of {pods}",
        status.recreated
    );
    let crr_total: usize = crr_requests.values().sum();
    let per_pod = crr_total as f64 / pods as f64;
    let peak_mib = *peak_rss.lock().expect("the peak") as f64 / 1024.0;
    let ideal = pods.div_ceil(budget) as f64 * floor;

    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for ((component, verb, resource), count) in &crr_requests {
        *by_kind
            .entry(format!("{component} {verb} {resource}"))
            .or_default() += count;
    }
    // bench/rollout.sh installs the build CRR_PROFILE names (release unless told).
    let profile = std::env::var("CRR_PROFILE").unwrap_or_else(|_| "release".to_owned());
    let mut report = format!(
        "# Rolling restart of a Deployment: rescheduling against in place\n\n\
         {pods} two-container pods of one Deployment on the test bed, a PodDisruptionBudget of maxUnavailable 10% \
         ({budget} pods), an httpGet readiness probe every second; {profile} build of crr.\n\n\
         | figure | a) `kubectl rollout restart` | b) ContainerRecreateRollout, maxUnavailable 10% |\n|---|---|---|\n\
         | time to every pod Ready (s) | {restart_seconds:.1} | {rollout_seconds:.1} |\n\
         | pods rescheduled | {rescheduled_a} | {rescheduled_b} |\n\
         | most pods unavailable at once (watch) | {most_a} | {most_b} |\n\
         | API writes, every user (audit log) | {writes_a} | {writes_b} |\n\n\
         - one kubelet restart (the floor): {floor:.2} s; the ideal for b: {} batches × the floor = {ideal:.1} s\n\
         - **b / ideal = {:.2}** (target ≤ 1.25); **b / a = {:.2}** (target ≤ 0.5)\n\
         - crr's API requests per pod in b, every verb, Events and reads included: **{per_pod:.1}** (target ≤ 12)\n\
         - operator peak RSS during b (largest replica): **{peak_mib:.1} MiB** (target ≤ 30)\n\n\
         crr's requests in b by component, verb and resource:\n\n| component verb resource | requests | per pod |\n|---|---|---|\n",
        pods.div_ceil(budget),
        rollout_seconds / ideal,
        rollout_seconds / restart_seconds,
    );
    for (key, count) in &by_kind {
        report.push_str(&format!(
            "| {key} | {count} | {:.2} |\n",
            *count as f64 / pods as f64
        ));
    }
    let json = json!({
        "pods": pods, "budget": budget, "floor_seconds": floor, "ideal_seconds": ideal,
        "restart": {"seconds": restart_seconds, "rescheduled": rescheduled_a, "most_unavailable": most_a, "writes": writes_a},
        "rollout": {"seconds": rollout_seconds, "rescheduled": rescheduled_b, "most_unavailable": most_b, "writes": writes_b,
                    "crr_requests_per_pod": per_pod, "operator_peak_rss_mib": peak_mib, "crr_requests": by_kind},
    });
    Ok((report, json))
}
