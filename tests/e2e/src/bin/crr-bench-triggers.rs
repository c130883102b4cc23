//! `crr-bench-triggers`: the config-change trigger beside thousands of ConfigMaps, run by
//! `bench/triggers.sh` (`make bench-triggers`), which brings up the test bed, installs a release
//! build of crr and starts kwok, and then runs this.
//!
//! `CRR_TRIGGERS_DEPLOYMENTS` (200) Deployments of one pod on `CRR_TRIGGERS_KWOK_NODES` (10) kwok
//! nodes, spread over `CRR_TRIGGERS_NAMESPACES` (10) namespaces, each annotated
//! `crr.dev/recreate-on-config-change: "true"`, with two containers: `app` mounts the ConfigMap
//! `<name>-app`, `sidecar` reads `<name>-sidecar` through `env.valueFrom`. Other ConfigMaps (1 KiB
//! of data each, as the Deployments' own) fill the namespaces up to each step of
//! `CRR_TRIGGERS_CONFIGMAPS` (1000 2000) ConfigMaps. It measures:
//! - the RSS and CPU of every crr process (the operator's leader and follower marked) before
//!   anything, with the Deployments, and idle at each step, over `CRR_TRIGGERS_WINDOW_SECONDS` (20);
//!   the operator's growth per 1,000 ConfigMaps between the first and last step;
//! - the time until every new Deployment has its first record (its TriggerRecord's
//!   `spec.configHashes`, both ConfigMaps);
//! - the time from a ConfigMap update (the PATCH sent) to the rollout's creation (its watch event
//!   here), `CRR_TRIGGERS_SAMPLES` (20) times, idle and while `CRR_TRIGGERS_CHURN_RATE` (20)
//!   ConfigMaps no workload uses change every second; each rollout must recreate `app` only, and
//!   is deleted once seen (its pods are simulated);
//! - that two changes within the debounce make one rollout of both containers.
//!
//! The operator's debounce (`--trigger-debounce-ms`) is read from its Deployment: the time to a
//! rollout is the debounce plus the operator's own work, shown apart.
//!
//! Writes `bench/results/<date>-triggers.{json,md}` (`CRR_BENCH_OUT`) and prints the table.
//! Deletes its namespaces at the end; the kwok nodes stay for `bench/triggers.sh` to remove.

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, ensure};
use crr_crds::keys;
use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::trigger_record::TriggerRecord;
use crr_e2e::kwok::{ensure_namespace, kwok_nodes, kwok_toleration};
use crr_e2e::measure::{PROGRAMS, env_or, sample_processes, summarize, write_results};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The label on the bench's namespaces (`bench/triggers.sh` deletes them by it).
const BENCH_LABEL: &str = "crr.dev/bench";
const FIELD_MANAGER: &str = "crr-bench";
/// Data of every ConfigMap the bench creates: 1 KiB.
const DATA_BYTES: usize = 1024;
/// The longest wait for one rollout.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(30);

struct Config {
    kwok_nodes: usize,
    deployments: usize,
    namespaces: usize,
    steps: Vec<usize>,
    samples: usize,
    churn_rate: usize,
    window: Duration,
    out: PathBuf,
}

impl Config {
    fn from_env() -> anyhow::Result<Self> {
        let steps: Vec<usize> = std::env::var("CRR_TRIGGERS_CONFIGMAPS")
            .unwrap_or_else(|_| "1000 2000".into())
            .split_whitespace()
            .map(|step| {
                step.parse()
                    .map_err(|_| anyhow!("CRR_TRIGGERS_CONFIGMAPS: {step:?} is not a count"))
            })
            .collect::<anyhow::Result<_>>()?;
        let config = Self {
            kwok_nodes: env_or("CRR_TRIGGERS_KWOK_NODES", 10)?,
            deployments: env_or("CRR_TRIGGERS_DEPLOYMENTS", 200)?,
            namespaces: env_or("CRR_TRIGGERS_NAMESPACES", 10)?,
            steps,
            samples: env_or("CRR_TRIGGERS_SAMPLES", 20)?,
            churn_rate: env_or("CRR_TRIGGERS_CHURN_RATE", 20)?,
            window: Duration::from_secs(env_or("CRR_TRIGGERS_WINDOW_SECONDS", 20)?),
            out: env_or("CRR_BENCH_OUT", PathBuf::from("bench/results"))?,
        };
        ensure!(
            config.kwok_nodes > 0 && config.namespaces > 0 && config.deployments > 0,
            "CRR_TRIGGERS_KWOK_NODES, _NAMESPACES and _DEPLOYMENTS must be positive"
        );
        ensure!(
            config.steps.windows(2).all(|pair| pair[0] < pair[1])
                && config
                    .steps
                    .first()
                    .is_some_and(|first| *first >= 2 * config.deployments),
            "CRR_TRIGGERS_CONFIGMAPS must rise and start at two per Deployment or more ({})",
            2 * config.deployments
        );
        ensure!(
            2 * config.samples < config.deployments,
            "CRR_TRIGGERS_SAMPLES: each sample needs a Deployment of its own (2 × samples + 1 ≤ {})",
            config.deployments
        );
        Ok(config)
    }

    fn namespace(&self, index: usize) -> String {
        format!("crr-bench-triggers-{}", index % self.namespaces)
    }

    /// Deployment `index`: its namespace and name.
    fn deployment(&self, index: usize) -> (String, String) {
        (self.namespace(index), format!("web-{index}"))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    let client = crr_e2e::installed_client().await?;
    let outcome = run(&client, &config).await;
    eprintln!("bench-triggers: deleting what the bench created");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for index in 0..config.namespaces {
        let _ = namespaces
            .delete(&config.namespace(index), &DeleteParams::default())
            .await;
    }
    let report = outcome?;
    write_report(&config.out, &report)
}

async fn run(client: &Client, config: &Config) -> anyhow::Result<Value> {
    let started = Instant::now();
    let debounce_ms = operator_debounce_ms(client).await?;
    eprintln!(
        "bench-triggers: {} Deployments, ConfigMaps {:?}, {} kwok nodes; the operator's debounce is {debounce_ms} ms",
        config.deployments, config.steps, config.kwok_nodes
    );
    kwok_nodes(client, config.kwok_nodes).await?;
    for index in 0..config.namespaces {
        ensure_namespace(
            client,
            &config.namespace(index),
            &json!({BENCH_LABEL: "triggers"}),
        )
        .await?;
    }
    let before = sample_processes(client, config.window).await;

    eprintln!(
        "bench-triggers: {} Deployments and their ConfigMaps",
        config.deployments
    );
    let created = Instant::now();
    for_all(0..config.deployments, |index| {
        let (namespace, name) = config.deployment(index);
        let client = client.clone();
        async move {
            apply_config_map(&client, &namespace, &format!("{name}-app"), "v0").await?;
            apply_config_map(&client, &namespace, &format!("{name}-sidecar"), "v0").await?;
            let node = crr_e2e::kwok::kwok_node(index % config.kwok_nodes);
            apply_deployment(&client, &namespace, &name, &node).await
        }
    })
    .await?;
    let first_records = all_recorded(client, config).await?;
    let records_seconds = created.elapsed().as_secs_f64();
    pods_running(client, config).await?;
    let with_deployments = sample_processes(client, config.window).await;

    let mut steps = Vec::new();
    let mut fillers = 0;
    for &total in &config.steps {
        let wanted = total - 2 * config.deployments;
        eprintln!(
            "bench-triggers: {total} ConfigMaps ({wanted} used by no workload) ({:.0?} so far)",
            started.elapsed()
        );
        for_all(fillers..wanted, |index| {
            let client = client.clone();
            let namespace = config.namespace(index);
            async move { apply_config_map(&client, &namespace, &filler(index), "v0").await }
        })
        .await?;
        fillers = wanted;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let idle = sample_processes(client, config.window).await;
        steps.push(json!({"configmaps": total, "idle": idle}));
    }

    let rollouts = RolloutWatch::start(client.clone());
    eprintln!(
        "bench-triggers: {} updates to a rollout, idle",
        config.samples
    );
    let idle = latencies(client, config, &rollouts, 0..config.samples).await?;
    eprintln!(
        "bench-triggers: {} updates to a rollout while {} unused ConfigMaps change a second",
        config.samples, config.churn_rate
    );
    let churn = Churn::start(client.clone(), config, fillers);
    let busy = latencies(
        client,
        config,
        &rollouts,
        config.samples..2 * config.samples,
    )
    .await;
    let during_churn = sample_processes(client, config.window).await;
    let churned = churn.stop().await;
    let busy = busy?;
    let folded = fold(client, config, &rollouts, 2 * config.samples, debounce_ms).await?;

    let debounce = debounce_ms as f64 / 1000.0;
    let overhead =
        |samples: &[f64]| summarize(&samples.iter().map(|s| s - debounce).collect::<Vec<_>>());
    Ok(json!({
        "deployments": config.deployments,
        "namespaces": config.namespaces,
        "kwok_nodes": config.kwok_nodes,
        "window_seconds": config.window.as_secs(),
        "debounce_ms": debounce_ms,
        "before": before,
        "with_deployments": with_deployments,
        "first_records": {"deployments": first_records, "seconds": records_seconds},
        "steps": steps,
        "update_to_rollout_seconds": {
            "idle": summarize(&idle),
            "idle_beyond_debounce": overhead(&idle),
            "churn": summarize(&busy),
            "churn_beyond_debounce": overhead(&busy),
            "churn_updates_per_second": churned,
            "during_churn": during_churn,
        },
        "two_changes_within_the_debounce": folded,
        "took_seconds": started.elapsed().as_secs(),
    }))
}

/// Runs `make(index)` for every index, 16 at a time.
async fn for_all<F, Fut>(indexes: std::ops::Range<usize>, make: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    futures::stream::iter(indexes.map(make))
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

fn filler(index: usize) -> String {
    format!("unused-{index}")
}

/// The `--trigger-debounce-ms` of the installed operator (its default when not given).
async fn operator_debounce_ms(client: &Client) -> anyhow::Result<u64> {
    let operator = Api::<Deployment>::namespaced(client.clone(), crr_e2e::SYSTEM_NAMESPACE)
        .get("crr-operator")
        .await
        .context("reading the operator's Deployment")?;
    let args = operator
        .spec
        .and_then(|spec| spec.template.spec)
        .and_then(|spec| spec.containers.into_iter().next())
        .and_then(|container| container.args)
        .unwrap_or_default();
    Ok(args
        .iter()
        .find_map(|arg| arg.strip_prefix("--trigger-debounce-ms="))
        .map(str::parse)
        .transpose()
        .context("the operator's --trigger-debounce-ms")?
        .unwrap_or(1000))
}

/// A ConfigMap of 1 KiB of data, `version` in its key `version` (the sidecar reads it).
async fn apply_config_map(
    client: &Client,
    namespace: &str,
    name: &str,
    version: &str,
) -> anyhow::Result<()> {
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "data": {"version": version, "settings": "x".repeat(DATA_BYTES)},
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&map),
        )
        .await
        .with_context(|| format!("applying ConfigMap {namespace}/{name}"))?;
    Ok(())
}

/// One pod on the kwok node `node`: `app` mounts `<name>-app`, `sidecar` reads `<name>-sidecar`.
async fn apply_deployment(
    client: &Client,
    namespace: &str,
    name: &str,
    node: &str,
) -> anyhow::Result<()> {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true"},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "tolerations": [kwok_toleration()],
                    "containers": [
                        {
                            "name": "app",
                            "image": crr_e2e::BUSYBOX,
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                        },
                        {
                            "name": "sidecar",
                            "image": crr_e2e::BUSYBOX,
                            "env": [{"name": "VERSION", "valueFrom": {"configMapKeyRef": {
                                "name": format!("{name}-sidecar"), "key": "version"}}}],
                        },
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": format!("{name}-app")}}],
                },
            },
        },
    }))?;
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&deployment),
        )
        .await
        .with_context(|| format!("applying Deployment {namespace}/{name}"))?;
    Ok(())
}

/// Waits until every Deployment's TriggerRecord holds the operator's first record of both its
/// ConfigMaps.
async fn all_recorded(client: &Client, config: &Config) -> anyhow::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut recorded = 0;
        for index in 0..config.namespaces {
            let records: Api<TriggerRecord> =
                Api::namespaced(client.clone(), &config.namespace(index));
            recorded += records
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|record| {
                    record.spec.workload.kind == "Deployment"
                        && record
                            .spec
                            .config_hashes
                            .as_ref()
                            .is_some_and(|hashes| hashes.len() == 2)
                })
                .count();
        }
        if recorded == config.deployments {
            return Ok(recorded);
        }
        ensure!(
            Instant::now() < deadline,
            "only {recorded} of {} Deployments recorded after 300 s",
            config.deployments
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until every Deployment's pod runs (on its kwok node).
async fn pods_running(client: &Client, config: &Config) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut running = 0;
        for index in 0..config.namespaces {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &config.namespace(index));
            running += pods
                .list_metadata(&ListParams::default().fields("status.phase=Running"))
                .await?
                .items
                .len();
        }
        if running >= config.deployments {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "only {running} of {} pods Running after 300 s: is kwok running?",
            config.deployments
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A rollout as first seen: when, of which workload, for which containers.
struct Seen {
    at: Instant,
    namespace: String,
    name: String,
    workload: String,
    containers: Vec<String>,
}

/// The config-change rollouts of every namespace, each passed on once, when first seen.
struct RolloutWatch {
    seen: tokio::sync::Mutex<mpsc::UnboundedReceiver<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl RolloutWatch {
    fn start(client: Client) -> Self {
        let (send, receive) = mpsc::unbounded_channel();
        let api: Api<ContainerRecreateRollout> = Api::all(client);
        let selector = format!("{}=config-change", keys::LABEL_ROLLOUT_TRIGGER);
        let task = tokio::spawn(async move {
            let mut known = HashSet::new();
            let mut events = std::pin::pin!(
                watcher(api, watcher::Config::default().labels(&selector)).applied_objects()
            );
            while let Some(event) = events.next().await {
                let Ok(rollout) = event else { continue };
                if !known.insert(rollout.uid().unwrap_or_default()) {
                    continue;
                }
                let seen = Seen {
                    at: Instant::now(),
                    namespace: rollout.namespace().unwrap_or_default(),
                    name: rollout.name_any(),
                    workload: rollout
                        .spec
                        .target
                        .workload_ref
                        .as_ref()
                        .map(|target| target.name.clone())
                        .unwrap_or_default(),
                    containers: rollout.spec.containers.clone(),
                };
                if send.send(seen).is_err() {
                    return;
                }
            }
        });
        Self {
            seen: tokio::sync::Mutex::new(receive),
            task,
        }
    }

    /// The next rollout of `workload` in `namespace`, within `timeout`; others are errors.
    async fn next_of(
        &self,
        namespace: &str,
        workload: &str,
        timeout: Duration,
    ) -> anyhow::Result<Seen> {
        let mut seen = self.seen.lock().await;
        let seen = tokio::time::timeout(timeout, seen.recv())
            .await
            .map_err(|_| anyhow!("no rollout of {namespace}/{workload} after {timeout:?}"))?
            .ok_or_else(|| anyhow!("the rollout watch ended"))?;
        ensure!(
            seen.namespace == namespace && seen.workload == workload,
            "a rollout of {}/{} came, not of {namespace}/{workload}",
            seen.namespace,
            seen.workload
        );
        Ok(seen)
    }

    /// Whether another rollout comes within `quiet`.
    async fn another_within(&self, quiet: Duration) -> Option<Seen> {
        let mut seen = self.seen.lock().await;
        tokio::time::timeout(quiet, seen.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for RolloutWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn delete_rollout(client: &Client, seen: &Seen) {
    let _ = Api::<ContainerRecreateRollout>::namespaced(client.clone(), &seen.namespace)
        .delete(&seen.name, &DeleteParams::background())
        .await;
}

/// Seconds from an update of `<deployment>-app` to its rollout, for each Deployment of
/// `indexes`; each rollout must recreate `app` only.
async fn latencies(
    client: &Client,
    config: &Config,
    rollouts: &RolloutWatch,
    indexes: std::ops::Range<usize>,
) -> anyhow::Result<Vec<f64>> {
    let mut seconds = Vec::new();
    for index in indexes {
        let (namespace, name) = config.deployment(index);
        let sent = Instant::now();
        apply_config_map(client, &namespace, &format!("{name}-app"), "v1").await?;
        let seen = rollouts.next_of(&namespace, &name, ROLLOUT_TIMEOUT).await?;
        seconds.push(seen.at.duration_since(sent).as_secs_f64());
        ensure!(
            seen.containers == ["app"],
            "rollout {}/{} recreates {:?}, not app alone",
            seen.namespace,
            seen.name,
            seen.containers
        );
        delete_rollout(client, &seen).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(seconds)
}

/// Both ConfigMaps of one Deployment changed 300 ms apart: one rollout of both containers, and
/// no other for twice the debounce and 3 s.
async fn fold(
    client: &Client,
    config: &Config,
    rollouts: &RolloutWatch,
    index: usize,
    debounce_ms: u64,
) -> anyhow::Result<Value> {
    let (namespace, name) = config.deployment(index);
    let sent = Instant::now();
    apply_config_map(client, &namespace, &format!("{name}-app"), "folded").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    apply_config_map(client, &namespace, &format!("{name}-sidecar"), "folded").await?;
    let seen = rollouts.next_of(&namespace, &name, ROLLOUT_TIMEOUT).await?;
    let seconds = seen.at.duration_since(sent).as_secs_f64();
    let quiet = Duration::from_millis(2 * debounce_ms) + Duration::from_secs(3);
    let another = rollouts.another_within(quiet).await;
    delete_rollout(client, &seen).await;
    ensure!(
        seen.containers == ["app", "sidecar"],
        "two changes within the debounce made a rollout of {:?}, not of app and sidecar",
        seen.containers
    );
    if let Some(another) = another {
        delete_rollout(client, &another).await;
        return Err(anyhow!(
            "two changes within the debounce made two rollouts ({} and {})",
            seen.name,
            another.name
        ));
    }
    Ok(json!({"rollouts": 1, "containers": seen.containers, "seconds": seconds}))
}

/// Updates of ConfigMaps no workload uses, at a steady rate, until stopped.
struct Churn {
    stop: Arc<AtomicBool>,
    updates: Arc<AtomicUsize>,
    started: Instant,
    task: tokio::task::JoinHandle<()>,
}

impl Churn {
    fn start(client: Client, config: &Config, fillers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let updates = Arc::new(AtomicUsize::new(0));
        let rate = config.churn_rate.max(1);
        let namespaces: Vec<String> = (0..fillers).map(|index| config.namespace(index)).collect();
        let task = tokio::spawn({
            let stop = stop.clone();
            let updates = updates.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1) / rate as u32);
                let mut next = 0usize;
                while !stop.load(Ordering::Relaxed) && !namespaces.is_empty() {
                    tick.tick().await;
                    let index = next % namespaces.len();
                    next += 1;
                    let client = client.clone();
                    let namespace = namespaces[index].clone();
                    let updates = updates.clone();
                    tokio::spawn(async move {
                        let version = format!("churn-{next}");
                        if apply_config_map(&client, &namespace, &filler(index), &version)
                            .await
                            .is_ok()
                        {
                            updates.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            }
        });
        Self {
            stop,
            updates,
            started: Instant::now(),
            task,
        }
    }

    /// Stops; the updates per second achieved.
    async fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.updates.load(Ordering::Relaxed) as f64 / self.started.elapsed().as_secs_f64()
    }
}

fn write_report(dir: &std::path::Path, report: &Value) -> anyhow::Result<()> {
    write_results(dir, "-triggers", report, &markdown(report), None)
}

/// The operator's RSS in a sample, as (leader, follower) MiB.
fn operator_rss(sample: &Value) -> (f64, f64) {
    let of = |role: &str| {
        sample["crr-operator"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|process| process["role"] == role)
            .and_then(|process| process["rss_mib"].as_f64())
            .unwrap_or(f64::NAN)
    };
    (of("leader"), of("follower"))
}

fn operator_cpu(sample: &Value) -> f64 {
    sample["crr-operator"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|process| process["cpu_millicores"].as_f64())
        .sum()
}

fn markdown(report: &Value) -> String {
    let mut out = format!(
        "# crr: the config-change trigger beside many ConfigMaps\n\n{} Deployments with `crr.dev/recreate-on-config-change` (one pod each, on {} kwok nodes, {} namespaces), each using two ConfigMaps; the other ConfigMaps are used by no workload. Every ConfigMap holds 1 KiB of data. The operator's debounce: {} ms. RSS at the end of {} s idle windows.\n\n",
        report["deployments"],
        report["kwok_nodes"],
        report["namespaces"],
        report["debounce_ms"],
        report["window_seconds"],
    );
    out.push_str("| state | ConfigMaps | operator leader RSS (MiB) | operator follower RSS (MiB) | operator CPU, both (millicores) |\n|---|---|---|---|---|\n");
    let mut row = |state: &str, maps: String, sample: &Value| {
        let (leader, follower) = operator_rss(sample);
        out.push_str(&format!(
            "| {state} | {maps} | {leader:.1} | {follower:.1} | {:.1} |\n",
            operator_cpu(sample)
        ));
    };
    row("before the bench", "0".into(), &report["before"]);
    row(
        "with the Deployments",
        format!("{}", report["deployments"].as_u64().unwrap_or(0) * 2),
        &report["with_deployments"],
    );
    let steps = report["steps"].as_array().cloned().unwrap_or_default();
    for step in &steps {
        row("idle", step["configmaps"].to_string(), &step["idle"]);
    }
    let timing = &report["update_to_rollout_seconds"];
    row(
        &format!(
            "churn ({:.1} updates/s)",
            timing["churn_updates_per_second"]
                .as_f64()
                .unwrap_or(f64::NAN)
        ),
        steps
            .last()
            .map(|step| step["configmaps"].to_string())
            .unwrap_or_default(),
        &timing["during_churn"],
    );
    if let (Some(first), Some(last)) = (steps.first(), steps.last())
        && steps.len() > 1
    {
        let thousands = (last["configmaps"].as_f64().unwrap_or(0.0)
            - first["configmaps"].as_f64().unwrap_or(0.0))
            / 1000.0;
        let (first_leader, first_follower) = operator_rss(&first["idle"]);
        let (last_leader, last_follower) = operator_rss(&last["idle"]);
        out.push_str(&format!(
            "\nOperator growth per 1,000 ConfigMaps, {} → {}: leader {:.2} MiB, follower {:.2} MiB (target ≤ 1 MiB).\n",
            first["configmaps"],
            last["configmaps"],
            (last_leader - first_leader) / thousands,
            (last_follower - first_follower) / thousands,
        ));
    }
    out.push_str(&format!(
        "\nFirst records of {} new Deployments: all within {:.1} s of their creation began.\n",
        report["first_records"]["deployments"],
        report["first_records"]["seconds"]
            .as_f64()
            .unwrap_or(f64::NAN)
    ));
    out.push_str("\n| ConfigMap update → rollout created (s) | samples | median | p90 | max |\n|---|---|---|---|---|\n");
    for (label, key) in [
        ("idle", "idle"),
        ("idle, beyond the debounce", "idle_beyond_debounce"),
        ("churn", "churn"),
        ("churn, beyond the debounce", "churn_beyond_debounce"),
    ] {
        let summary = &timing[key];
        out.push_str(&format!(
            "| {label} | {} | {:.3} | {:.3} | {:.3} |\n",
            summary["samples"],
            summary["median"].as_f64().unwrap_or(f64::NAN),
            summary["p90"].as_f64().unwrap_or(f64::NAN),
            summary["max"].as_f64().unwrap_or(f64::NAN),
        ));
    }
    let folded = &report["two_changes_within_the_debounce"];
    out.push_str(&format!(
        "\nTwo ConfigMaps of one Deployment changed 300 ms apart: {} rollout of {}, {:.3} s after the first change.\n",
        folded["rollouts"],
        folded["containers"],
        folded["seconds"].as_f64().unwrap_or(f64::NAN)
    ));
    out.push_str("\nEvery process, RSS (MiB) at the last step: ");
    let last = steps.last().map(|step| &step["idle"]);
    for program in PROGRAMS {
        let rss: Vec<String> = last
            .and_then(|sample| sample[program].as_array())
            .into_iter()
            .flatten()
            .filter_map(|process| process["rss_mib"].as_f64())
            .map(|rss| format!("{rss:.1}"))
            .collect();
        out.push_str(&format!("{program} {}; ", rss.join(", ")));
    }
    out.push_str(&format!("\n\nTook {} s.\n", report["took_seconds"]));
    out
}
