//! `crr-scale`: crr against a cluster of thousands of pods on simulated nodes,
//! run by `bench/scale.sh` (`make bench-scale`), which brings up the test bed, installs a release
//! build of crr and starts kwok, and then runs this.
//!
//! kwok (`sigs.k8s.io/kwok`) plays the kubelet of `CRR_SCALE_KWOK_NODES` (100) nodes for the API
//! server: it keeps their leases and status, and moves the pods bound to them to Running and away
//! again when deleted. The real nodes of the test bed run crr's daemons and the pods that are
//! recreated for real. For each step of `CRR_SCALE_STEPS` (1000 5000 10000) pods on the kwok
//! nodes, it measures:
//! - the RSS and CPU of every crr process (each replica), idle and while `CRR_SCALE_CHURN_RATE`
//!   (50) pods a second are created and deleted on the kwok nodes, over `CRR_SCALE_WINDOW_SECONDS`
//!   (30) each;
//! - the admission latency of a CRR through the API server (the create call, webhooks included,
//!   as a dry run so nothing is recreated; on pods of the real nodes, which have container IDs),
//!   p50 and p99 of `CRR_SCALE_ADMISSIONS` (200), idle and during the churn.
//!
//! At the last step it also runs, in this order:
//! - `crr-bench` during the churn (create → Completed on real pods against the kubelet floor);
//! - `crr-bench` `CRR_SCALE_BURST_RUNS` (3) times for the burst of 50 against the kubelet's own
//!   burst, with nothing else running;
//! - `crr-api-costs` (API requests per CRR from the audit log, nothing else running);
//! - the flood: `CRR_SCALE_TTL_REQUESTS` (20000) requests that end at their deadline on kwok
//!   pods and then sit completed with a day of TTL, as a tenant could leave them: every crr
//!   process's RSS before and after (the operator's leader and follower marked), the operator's
//!   reconciles and its API requests (audit log) over the window.
//!
//! The bulk pods are like real ones: applied server-side (managedFields), with env values, a
//! 200-character annotation, probes and resources. The operator's processes are marked leader
//! and follower: its leader-only work (the readiness-gate sweep, which `bench/scale.sh` runs
//! every 20 s here) must not make it grow with the cluster's pods.
//!
//! Writes `bench/results/<date>-scale.json` and `.md` (`CRR_BENCH_OUT`) and prints the table.
//! Everything it created is deleted at the end; the kwok nodes stay for `bench/scale.sh` to remove.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, ensure};
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_e2e::kwok::{ensure_namespace, kwok_node, kwok_nodes, kwok_toleration};
use crr_e2e::measure::{
    PROGRAMS, Summary, audit_counts, env_or, sample_processes, summarize, write_results,
};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};

/// Where the simulated pods live; the churn and the real pods have their own namespaces.
const BULK_NAMESPACE: &str = "crr-scale";
const CHURN_NAMESPACE: &str = "crr-scale-churn";
const REAL_NAMESPACE: &str = "crr-scale-real";
const TTL_NAMESPACE: &str = "crr-scale-ttl";
const REAL_PODS: usize = 4;

struct Config {
    steps: Vec<usize>,
    kwok_nodes: usize,
    window: Duration,
    churn_rate: usize,
    admissions: usize,
    burst_runs: usize,
    ttl_requests: usize,
    out: PathBuf,
    cluster_dir: String,
    /// Parts left out (`CRR_SCALE_SKIP`: any of bench, bursts, api-costs, ttl).
    skip: Vec<String>,
}

impl Config {
    fn from_env() -> anyhow::Result<Self> {
        let steps = std::env::var("CRR_SCALE_STEPS").unwrap_or_else(|_| "1000 5000 10000".into());
        let steps = steps
            .split_whitespace()
            .map(|step| {
                step.parse()
                    .map_err(|_| anyhow!("CRR_SCALE_STEPS: {step:?} is not a count"))
            })
            .collect::<anyhow::Result<Vec<usize>>>()?;
        ensure!(
            !steps.is_empty() && steps.windows(2).all(|pair| pair[0] < pair[1]),
            "CRR_SCALE_STEPS must be increasing counts"
        );
        Ok(Self {
            steps,
            kwok_nodes: env_or("CRR_SCALE_KWOK_NODES", 100)?,
            window: Duration::from_secs(env_or("CRR_SCALE_WINDOW_SECONDS", 30)?),
            churn_rate: env_or("CRR_SCALE_CHURN_RATE", 50)?,
            admissions: env_or("CRR_SCALE_ADMISSIONS", 200)?,
            burst_runs: env_or("CRR_SCALE_BURST_RUNS", 3)?,
            ttl_requests: env_or("CRR_SCALE_TTL_REQUESTS", 20_000)?,
            out: PathBuf::from(env_or("CRR_BENCH_OUT", "bench/results".to_owned())?),
            cluster_dir: env_or("CRR_CLUSTER_DIR", "/var/lib/crr-cluster".to_owned())?,
            skip: env_or("CRR_SCALE_SKIP", String::new())?
                .split([',', ' '])
                .filter(|part| !part.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }

    fn skips(&self, part: &str) -> bool {
        self.skip.iter().any(|skipped| skipped == part)
    }
}

/// Records one part of the report; a part that failed is recorded with its error (the rest of
/// the bench still runs) and listed under `errors`, which fails the run once the report is out.
fn part(report: &mut Value, key: &str, outcome: anyhow::Result<Value>) {
    match outcome {
        Ok(value) => report[key] = value,
        Err(error) => {
            eprintln!("scale: {key} failed: {error:#}");
            report[key] = json!({"error": format!("{error:#}")});
            match report["errors"].as_array_mut() {
                Some(errors) => errors.push(json!(key)),
                None => report["errors"] = json!([key]),
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    let client = crr_e2e::installed_client().await?;
    let outcome = run(&client, &config).await;
    eprintln!("scale: deleting what the bench created");
    for namespace in [
        BULK_NAMESPACE,
        CHURN_NAMESPACE,
        REAL_NAMESPACE,
        TTL_NAMESPACE,
    ] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(namespace, &DeleteParams::default())
            .await;
    }
    let report = outcome?;
    write_report(&config.out, &report)?;
    match report["errors"].as_array() {
        Some(failed) if !failed.is_empty() => Err(anyhow!("parts failed: {failed:?}")),
        _ => Ok(()),
    }
}

async fn run(client: &Client, config: &Config) -> anyhow::Result<Value> {
    let started = Instant::now();
    let mut report = json!({
        "kwok_nodes": config.kwok_nodes,
        "window_seconds": config.window.as_secs(),
        "churn_rate_per_second": config.churn_rate,
        "steps": [],
    });
    kwok_nodes(client, config.kwok_nodes).await?;
    for namespace in [
        BULK_NAMESPACE,
        CHURN_NAMESPACE,
        REAL_NAMESPACE,
        TTL_NAMESPACE,
    ] {
        ensure_namespace(client, namespace, &json!({})).await?;
    }
    let real_pods = real_pods(client).await?;
    let last = *config.steps.last().expect("steps are never empty");
    for &pods in &config.steps {
        eprintln!(
            "scale: {pods} pods on {} kwok nodes ({:.0?} so far)",
            config.kwok_nodes,
            started.elapsed()
        );
        bulk_pods(client, pods, config.kwok_nodes).await?;
        settle(client).await?;
        let idle = sample_processes(client, config.window).await;
        let idle_admission = admission(client, &real_pods, config.admissions).await?;
        let churn = Churn::start(client.clone(), config.churn_rate, config.kwok_nodes);
        let busy = sample_processes(client, config.window).await;
        let busy_admission = admission(client, &real_pods, config.admissions).await?;
        let bench = if pods == last && !config.skips("bench") {
            eprintln!("scale: crr-bench on the real nodes while the churn runs");
            Some(crr_bench(config, "churn", 5, 0).await?)
        } else {
            None
        };
        let churned = churn.stop().await?;
        let step = json!({
            "pods": pods,
            "idle": idle,
            "churn": busy,
            "churn_achieved": churned,
            "admission_ms": {"idle": idle_admission, "churn": busy_admission},
            "recreate_during_churn": bench,
        });
        report["steps"].as_array_mut().expect("steps").push(step);
    }
    if !config.skips("bursts") {
        eprintln!(
            "scale: {} bursts of 50, nothing else running",
            config.burst_runs
        );
        let bursts = async {
            let mut bursts = Vec::new();
            for run in 0..config.burst_runs {
                bursts.push(crr_bench(config, &format!("burst-{run}"), 1, 50).await?);
            }
            let ratios: Vec<f64> = bursts
                .iter()
                .filter_map(|bench| bench["ratios"]["burst_over_kubelet_burst"].as_f64())
                .collect();
            anyhow::Ok(json!({"runs": bursts, "burst_over_kubelet_burst": summarize(&ratios)}))
        };
        part(&mut report, "bursts", bursts.await);
    }
    if !config.skips("api-costs") {
        eprintln!("scale: API requests per CRR (crr-api-costs)");
        part(
            &mut report,
            "api_costs",
            api_costs(config).await.map(Value::from),
        );
    }
    if !config.skips("ttl") {
        eprintln!(
            "scale: {} completed requests with a TTL sitting in the cluster",
            config.ttl_requests
        );
        part(&mut report, "ttl", ttl_window(client, config).await);
    }
    report["took_seconds"] = json!(started.elapsed().as_secs());
    Ok(report)
}

/// One bulk pod, like a real one: two containers with ports, env values, probes and resources,
/// a 200-character annotation (about 8 KiB of JSON once defaulted, with its managedFields),
/// bound to a kwok node, applied server-side.
fn bulk_pod(name: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "scale", "tier": "backend", "release": "stable"},
                     "annotations": {"scale.crr.dev/notes": "n".repeat(200)}},
        "spec": {
            "nodeName": node,
            "tolerations": [kwok_toleration()],
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {"name": "app", "image": crr_e2e::BUSYBOX,
                 "command": ["sh", "-c", crr_e2e::EXIT_ON_TERM_LOOP],
                 "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}],
                 "env": [{"name": "MODE", "value": "production"}, {"name": "LOG_LEVEL", "value": "info"},
                         {"name": "DATABASE_URL", "value": format!("postgres://app@db-{node}.internal:5432/orders")},
                         {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-ranking,async-invoices"},
                         {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
                         {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5},
                 "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 1"]}}}},
                {"name": "sidecar", "image": crr_e2e::BUSYBOX,
                 "command": ["sh", "-c", crr_e2e::EXIT_ON_TERM_LOOP],
                 "ports": [{"name": "admin", "containerPort": 15000}],
                 "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}}},
            ],
        },
    }))?)
}

/// Brings the bulk namespace to `count` pods (`bulk-<n>`, spread round-robin over the kwok
/// nodes), 32 applies at a time.
async fn bulk_pods(client: &Client, count: usize, kwok_nodes: usize) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), BULK_NAMESPACE);
    let existing = pods
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    let done = Arc::new(AtomicUsize::new(existing));
    let started = Instant::now();
    let applies = (existing..count).map(|index| {
        let pods = pods.clone();
        let done = done.clone();
        async move {
            let name = format!("bulk-{index}");
            let pod = bulk_pod(&name, &kwok_node(index % kwok_nodes))?;
            pods.patch(&name, &PatchParams::apply("crr-scale"), &Patch::Apply(&pod))
                .await
                .with_context(|| format!("applying pod {name}"))?;
            let now = done.fetch_add(1, Ordering::Relaxed) + 1;
            if now.is_multiple_of(1000) {
                eprintln!("scale: {now} pods ({:.0?})", started.elapsed());
            }
            anyhow::Ok(())
        }
    });
    futures::stream::iter(applies)
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Waits until kwok has every bulk pod Running, then lets the watches settle.
async fn settle(client: &Client) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), BULK_NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let pending = pods
            .list_metadata(&ListParams::default().fields("status.phase!=Running"))
            .await?
            .items
            .len();
        if pending == 0 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{pending} bulk pods still not Running after 600 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

/// `REAL_PODS` Ready pods on the real nodes (they tolerate no kwok taint), for dry-run creates.
async fn real_pods(client: &Client) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), REAL_NAMESPACE);
    let mut names = Vec::new();
    for index in 0..REAL_PODS {
        let name = format!("real-{index}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "app", "image": crr_e2e::BUSYBOX,
                                     "command": ["sh", "-c", crr_e2e::EXIT_ON_TERM_LOOP]}]},
        }))?;
        if pods.get_opt(&name).await?.is_none() {
            pods.create(&PostParams::default(), &pod).await?;
        }
        names.push(name);
    }
    for name in &names {
        crr_e2e::wait(
            pods.clone(),
            name,
            Duration::from_secs(120),
            |pod: Option<&Pod>| pod.is_some_and(crr_e2e::pod_ready),
        )
        .await?;
    }
    Ok(names)
}

/// `count` dry-run CRR creates, one after another, spread over the real pods: the time of each
/// create call through the API server (both admission webhooks, no storage), in milliseconds.
async fn admission(client: &Client, pods: &[String], count: usize) -> anyhow::Result<Summary> {
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), REAL_NAMESPACE);
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut took = Vec::with_capacity(count);
    for index in 0..count {
        let crr: ContainerRecreateRequest = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": format!("admission-{index}")},
            "spec": {"podName": pods[index % pods.len()], "containers": [{"name": "app"}]},
        }))?;
        let start = Instant::now();
        crrs.create(&dry_run, &crr)
            .await
            .with_context(|| format!("dry-run create {index}"))?;
        took.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(summarize(&took))
}

/// Pods created and deleted on the kwok nodes at a steady rate, each living about five seconds,
/// until stopped (or 15 minutes, whichever comes first).
struct Churn {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<Value>>,
}

impl Churn {
    fn start(client: Client, rate: usize, kwok_nodes: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, CHURN_NAMESPACE);
            let started = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut alive = std::collections::VecDeque::<(Instant, Vec<String>)>::new();
            let (mut created, mut deleted, mut next) = (0usize, 0usize, 0usize);
            while !flag.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(900) {
                tick.tick().await;
                let names: Vec<String> = (next..next + rate)
                    .map(|index| format!("churn-{index}"))
                    .collect();
                next += rate;
                let creations: Vec<_> = names
                    .iter()
                    .enumerate()
                    .map(|(offset, name)| {
                        let pods = pods.clone();
                        let pod = bulk_pod(name, &kwok_node((next + offset) % kwok_nodes));
                        async move {
                            pods.create(&PostParams::default(), &pod?).await?;
                            anyhow::Ok(())
                        }
                    })
                    .collect();
                created += futures::stream::iter(creations)
                    .buffer_unordered(16)
                    .collect::<Vec<_>>()
                    .await
                    .into_iter()
                    .filter(Result::is_ok)
                    .count();
                alive.push_back((Instant::now(), names));
                while alive
                    .front()
                    .is_some_and(|(at, _)| at.elapsed() >= Duration::from_secs(5))
                {
                    let (_, old) = alive.pop_front().expect("front exists");
                    deleted += delete_now(&pods, &old).await;
                }
            }
            for (_, old) in alive {
                deleted += delete_now(&pods, &old).await;
            }
            let seconds = started.elapsed().as_secs_f64();
            Ok(json!({
                "seconds": seconds,
                "created": created,
                "deleted": deleted,
                "created_per_second": created as f64 / seconds,
            }))
        });
        Self { stop, task }
    }

    async fn stop(self) -> anyhow::Result<Value> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.context("the churn task")?
    }
}

async fn delete_now(pods: &Api<Pod>, names: &[String]) -> usize {
    let deletions: Vec<_> = names
        .iter()
        .map(|name| {
            let pods = pods.clone();
            let name = name.clone();
            async move {
                pods.delete(&name, &DeleteParams::default().grace_period(0))
                    .await
            }
        })
        .collect();
    futures::stream::iter(deletions)
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .filter(Result::is_ok)
        .count()
}

/// Runs the `crr-bench` built beside this program, with `repetitions` single recreates and a
/// burst of `burst`, and returns its JSON report.
async fn crr_bench(
    config: &Config,
    label: &str,
    repetitions: usize,
    burst: usize,
) -> anyhow::Result<Value> {
    let out = config.out.join(format!("scale-bench-{label}"));
    let _ = std::fs::remove_dir_all(&out);
    let status = tokio::process::Command::new(sibling("crr-bench")?)
        .env("CRR_BENCH_REPETITIONS", repetitions.to_string())
        .env("CRR_BENCH_BURST", burst.to_string())
        .env("CRR_BENCH_IDLE_PODS", "1")
        .env("CRR_BENCH_IDLE_SECONDS", "1")
        .env("CRR_BENCH_OUT", &out)
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .context("running crr-bench")?;
    ensure!(status.success(), "crr-bench ({label}) failed: {status}");
    let report = newest_json(&out)?;
    let _ = std::fs::remove_dir_all(&out);
    Ok(report)
}

/// Runs `crr-api-costs` built beside this program; returns its Markdown table.
async fn api_costs(config: &Config) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(sibling("crr-api-costs")?)
        .env("CRR_BENCH_OUT", &config.out)
        .env("CRR_CLUSTER_DIR", &config.cluster_dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .context("running crr-api-costs")?;
    ensure!(
        output.status.success(),
        "crr-api-costs failed: {}",
        output.status
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn sibling(program: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let path = me
        .parent()
        .ok_or_else(|| anyhow!("{} has no directory", me.display()))?
        .join(program);
    ensure!(
        path.exists(),
        "{} is not built (cargo build --release -p crr-e2e --bins)",
        path.display()
    );
    Ok(path)
}

fn newest_json(dir: &Path) -> anyhow::Result<Value> {
    let newest = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .max()
        .ok_or_else(|| anyhow!("no report in {}", dir.display()))?;
    Ok(serde_json::from_slice(&std::fs::read(&newest)?)?)
}

/// The flood: `count` requests on kwok pods that end at their deadline (3 s, the least the
/// webhook allows; kwok pods have no container the daemon could stop) and then sit completed
/// with a day of TTL. Every crr process's RSS and CPU before the flood and once every request is
/// settled (finished, its `active` label removed); over the window after: the operator's
/// reconciles (its leader's `/metrics`) and the API requests of every crr component (audit
/// log).
async fn ttl_window(client: &Client, config: &Config) -> anyhow::Result<Value> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), TTL_NAMESPACE);
    let names: Vec<String> = (0..config.ttl_requests.min(100))
        .map(|index| format!("ttl-{index}"))
        .collect();
    let applies = names.iter().enumerate().map(|(index, name)| {
        let pods = pods.clone();
        async move {
            let pod = bulk_pod(name, &kwok_node(index % config.kwok_nodes))?;
            pods.patch(name, &PatchParams::apply("crr-scale"), &Patch::Apply(&pod))
                .await?;
            anyhow::Ok(())
        }
    });
    futures::stream::iter(applies)
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    for name in &names {
        crr_e2e::wait(
            pods.clone(),
            name,
            Duration::from_secs(120),
            |pod: Option<&Pod>| {
                pod.and_then(|pod| pod.status.as_ref())
                    .and_then(|status| status.phase.as_deref())
                    == Some("Running")
            },
        )
        .await?;
    }
    let before = sample_processes(client, config.window).await;
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), TTL_NAMESPACE);
    let created = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let creates = (0..config.ttl_requests).map(|index| {
        let crrs = crrs.clone();
        let created = created.clone();
        let pod = names[index % names.len()].clone();
        async move {
            let crr: ContainerRecreateRequest = serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
                "metadata": {"name": format!("ttl-{index}")},
                "spec": {"podName": pod, "containers": [{"name": "app"}],
                         "activeDeadlineSeconds": 3, "ttlSecondsAfterFinished": 86400},
            }))?;
            crrs.create(&PostParams::default(), &crr)
                .await
                .with_context(|| format!("creating ttl-{index}"))?;
            let now = created.fetch_add(1, Ordering::Relaxed) + 1;
            if now.is_multiple_of(2000) {
                eprintln!("scale: {now} requests created ({:.0?})", started.elapsed());
            }
            anyhow::Ok(())
        }
    });
    futures::stream::iter(creates)
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let create_seconds = started.elapsed().as_secs_f64();
    // Settled: finished and observed by the operator, which removes the `active` label then.
    let deadline = Instant::now() + Duration::from_secs(1800);
    let active = ListParams::default().labels(crr_crds::keys::LABEL_ACTIVE);
    loop {
        let left = crrs.list_metadata(&active).await?.items.len();
        if left == 0 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{left} of {} flood requests still active after 1800 s",
            config.ttl_requests
        );
        eprintln!("scale: {left} flood requests not settled yet");
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let settled_seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let reconciles_before = operator_reconciles(client).await?;
    let start = jiff::Timestamp::now();
    let usage = sample_processes(client, config.window).await;
    let end = jiff::Timestamp::now();
    let reconciles_after = operator_reconciles(client).await?;
    let audit = audit_counts(
        &format!("{}/audit/audit.log", config.cluster_dir),
        start,
        end,
    )?;
    let requests: BTreeMap<String, usize> = audit
        .into_iter()
        .map(|((component, verb, resource), count)| {
            (format!("{component} {verb} {resource}"), count)
        })
        .collect();
    Ok(json!({
        "completed_requests": config.ttl_requests,
        "create_seconds": create_seconds,
        "settled_seconds": settled_seconds,
        "window_seconds": config.window.as_secs(),
        "operator_reconciles_per_second": (reconciles_after - reconciles_before) / config.window.as_secs_f64(),
        "api_requests_in_window": requests,
        "before": before,
        "usage": usage,
    }))
}

/// The operator leader's `crr_operator_reconciles_total`, summed over outcomes, read through the
/// API server's pod proxy.
async fn operator_reconciles(client: &Client) -> anyhow::Result<f64> {
    let leader = crr_e2e::faults::operator_leader(client).await?;
    let path = format!(
        "/api/v1/namespaces/{}/pods/{}:8080/proxy/metrics",
        leader.namespace().unwrap_or_default(),
        leader.name_any()
    );
    let text = client
        .request_text(http::Request::get(path).body(Vec::new())?)
        .await
        .context("reading the operator leader's metrics")?;
    Ok(text
        .lines()
        .filter(|line| line.starts_with("crr_operator_reconciles_total"))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

fn write_report(dir: &Path, report: &Value) -> anyhow::Result<()> {
    write_results(
        dir,
        "-scale",
        report,
        &markdown(report),
        Some("latest-scale.md"),
    )
}

/// The process entries of one program in a sample, as "a, b" of a field.
fn per_process(sample: &Value, program: &str, field: &str) -> String {
    sample[program]
        .as_array()
        .map(|processes| {
            processes
                .iter()
                .filter_map(|process| {
                    let value = process[field].as_f64()?;
                    Some(match process["role"].as_str() {
                        Some("leader") => format!("{value:.1} (L)"),
                        _ => format!("{value:.1}"),
                    })
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "–".into())
}

/// The operator leader's RSS minus its follower's in a sample, when both are marked.
fn leader_over_follower(sample: &Value) -> Option<f64> {
    let processes = sample["crr-operator"].as_array()?;
    let of = |role: &str| {
        processes
            .iter()
            .find(|process| process["role"] == role)
            .and_then(|process| process["rss_mib"].as_f64())
    };
    Some(of("leader")? - of("follower")?)
}

fn max_of(sample: &Value, program: &str, field: &str) -> f64 {
    sample[program]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|process| process[field].as_f64())
        .fold(f64::NAN, f64::max)
}

fn markdown(report: &Value) -> String {
    let steps = report["steps"].as_array().cloned().unwrap_or_default();
    let mut out = format!(
        "{} kwok nodes; windows of {} s; churn target {} pods/s created and deleted.\n\n",
        report["kwok_nodes"], report["window_seconds"], report["churn_rate_per_second"]
    );
    out.push_str("| pods | when | webhook RSS (MiB, per replica) | operator RSS | node daemon RSS | webhook CPU (millicores) | operator CPU | node daemon CPU | admission p50 / p99 (ms) |\n|---|---|---|---|---|---|---|---|---|\n");
    for step in &steps {
        for when in ["idle", "churn"] {
            let sample = &step[when];
            let admission = &step["admission_ms"][when];
            out.push_str(&format!(
                "| {} | {when} | {} | {} | {} | {} | {} | {} | {:.1} / {:.1} |\n",
                step["pods"],
                per_process(sample, "crr-webhook", "rss_mib"),
                per_process(sample, "crr-operator", "rss_mib"),
                per_process(sample, "crr-node-daemon", "rss_mib"),
                per_process(sample, "crr-webhook", "cpu_millicores"),
                per_process(sample, "crr-operator", "cpu_millicores"),
                per_process(sample, "crr-node-daemon", "cpu_millicores"),
                admission["median"].as_f64().unwrap_or(f64::NAN),
                admission["p99"].as_f64().unwrap_or(f64::NAN),
            ));
        }
    }
    if let (Some(first), Some(last)) = (steps.first(), steps.last()) {
        let thousands =
            (last["pods"].as_f64().unwrap_or(0.0) - first["pods"].as_f64().unwrap_or(0.0)) / 1000.0;
        out.push_str("\n| growth, idle, largest replica | from first to last step (MiB) | per 1,000 pods (MiB) |\n|---|---|---|\n");
        for program in PROGRAMS {
            let growth = max_of(&last["idle"], program, "rss_mib")
                - max_of(&first["idle"], program, "rss_mib");
            out.push_str(&format!(
                "| {program} | {growth:.1} | {:.2} |\n",
                growth / thousands.max(f64::MIN_POSITIVE)
            ));
        }
        for step in &steps {
            if let Some(difference) = leader_over_follower(&step["idle"]) {
                out.push_str(&format!(
                    "\noperator leader − follower RSS, idle at {} pods: {difference:.1} MiB",
                    step["pods"]
                ));
            }
        }
        out.push('\n');
        for step in &steps {
            let achieved = &step["churn_achieved"];
            out.push_str(&format!(
                "\nchurn at {} pods: {} created, {} deleted in {:.0} s ({:.1}/s)",
                step["pods"],
                achieved["created"],
                achieved["deleted"],
                achieved["seconds"].as_f64().unwrap_or(f64::NAN),
                achieved["created_per_second"].as_f64().unwrap_or(f64::NAN)
            ));
        }
        out.push('\n');
        let bench = &last["recreate_during_churn"];
        if !bench.is_null() {
            out.push_str(&format!(
                "\n**Recreate during the churn at {} pods** (crr-bench, ms): kubelet floor median {:.0}, CRR create → Completed median {:.0}, overhead median {:.0} (p90 {:.0}, n {}).\n",
                last["pods"],
                bench["kubelet_restart_ms"]["median"].as_f64().unwrap_or(f64::NAN),
                bench["crr_total_ms"]["median"].as_f64().unwrap_or(f64::NAN),
                bench["crr_overhead_ms"]["median"].as_f64().unwrap_or(f64::NAN),
                bench["crr_overhead_ms"]["p90"].as_f64().unwrap_or(f64::NAN),
                bench["crr_overhead_ms"]["samples"],
            ));
        }
    }
    let bursts = &report["bursts"];
    if let Some(runs) = bursts["runs"].as_array() {
        let each: Vec<String> = runs
            .iter()
            .map(|run| {
                format!(
                    "{:.0} ms vs the kubelet's {:.0} ms ({:.2}×)",
                    run["burst"]["all_completed_ms"]
                        .as_f64()
                        .unwrap_or(f64::NAN),
                    run["kubelet_burst_ms"].as_f64().unwrap_or(f64::NAN),
                    run["ratios"]["burst_over_kubelet_burst"]
                        .as_f64()
                        .unwrap_or(f64::NAN)
                )
            })
            .collect();
        out.push_str(&format!(
            "\n**Burst of 50** ({} runs): {}; median **{:.2}×** the kubelet's own burst.\n",
            runs.len(),
            each.join("; "),
            bursts["burst_over_kubelet_burst"]["median"]
                .as_f64()
                .unwrap_or(f64::NAN)
        ));
    }
    if let Some(costs) = report["api_costs"].as_str() {
        out.push_str(&format!(
            "\n**API requests per CRR** (crr-api-costs, at the largest step):\n\n{costs}\n"
        ));
    }
    let ttl = &report["ttl"];
    if !ttl.is_null() {
        out.push_str(&format!(
            "\n**The flood: {} finished requests** with a day of TTL (created in {:.0} s, all settled after {:.0} s). RSS in MiB before → after, (L) the leader: operator {} → {}; webhook {} → {}; node daemon {} → {}. Over {} s after: operator reconciles {:.2}/s, CPU {} millicores; crr's API requests: {}.\n",
            ttl["completed_requests"],
            ttl["create_seconds"].as_f64().unwrap_or(f64::NAN),
            ttl["settled_seconds"].as_f64().unwrap_or(f64::NAN),
            per_process(&ttl["before"], "crr-operator", "rss_mib"),
            per_process(&ttl["usage"], "crr-operator", "rss_mib"),
            per_process(&ttl["before"], "crr-webhook", "rss_mib"),
            per_process(&ttl["usage"], "crr-webhook", "rss_mib"),
            per_process(&ttl["before"], "crr-node-daemon", "rss_mib"),
            per_process(&ttl["usage"], "crr-node-daemon", "rss_mib"),
            ttl["window_seconds"],
            ttl["operator_reconciles_per_second"].as_f64().unwrap_or(f64::NAN),
            per_process(&ttl["usage"], "crr-operator", "cpu_millicores"),
            ttl["api_requests_in_window"],
        ));
    }
    out
}
