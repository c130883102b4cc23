//! `crr-bench-rollout`: restarting a whole Deployment, rescheduling against in place, on the
//! local test bed with crr installed (`bench/rollout.sh`, `make bench-rollout`).
//!
//! One Deployment of `CRR_ROLLOUT_PODS` (60) two-container pods (`app` serves HTTP and exits
//! on SIGTERM at once, `sidecar` sleeps), a 3 s termination grace period, a readiness probe
//! that passes once `app` listens (httpGet, every second), a PodDisruptionBudget of
//! `maxUnavailable: 10%`. Then, in turn:
//! - **floor**: one kubelet restart of `app` (its container killed, until the pod is Ready), the
//!   median of 5 pods;
//! - **a)** `kubectl rollout restart deployment`: time until every pod is new and Ready, pods
//!   rescheduled, the most pods unavailable at once (a pod watch), API writes (audit log, every
//!   user);
//! - **b)** a ContainerRecreateRollout of `app`, `maxUnavailable: 10%`: the same figures, crr's
//!   own API requests per pod (audit log, crr's service accounts, every verb), and the operator
//!   processes' peak RSS (sampled every 250 ms).
//!
//! For b it also prints where a slot's time goes: per pod, the steps between crr's writes (the
//! audit log's times) and the pod turning Ready (the pod watch), and how long a freed slot
//! waited for its next request; median and 90th percentile.
//!
//! The ideal for b is ceil(pods / maxUnavailable) batches of one kubelet restart. Writes
//! `bench/results/<date>-rollout.{md,json}`.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
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
/// Pods whose kubelet restart gives the floor (their median).
const FLOOR_SAMPLES: usize = 5;
/// The app: serves HTTP (the readiness probe's), and exits at once on SIGTERM: the shell is
/// PID 1 and traps it, the server is its child.
const APP_COMMAND: &str = "mkdir -p /www && echo ok > /www/index.html && trap 'exit 0' TERM; \
                           httpd -f -p 8080 -h /www & wait $!";

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
                         // Exits on SIGTERM, as a server that shuts down gracefully does (busybox
                         // httpd as PID 1 ignores it and would wait out the grace period).
                         "command": ["sh", "-c", APP_COMMAND],
                         "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}},
                        {"name": "sidecar", "image": BUSYBOX,
                         "command": ["sh", "-c", EXIT_ON_TERM_LOOP]},
                    ],
                },
            },
        },
    })
}

/// What a pod watch saw: the most pods not Ready at once, every pod name, and when each pod
/// was last seen turning Ready.
#[derive(Default)]
struct Seen {
    most_unavailable: usize,
    names: BTreeSet<String>,
    turned_ready: BTreeMap<String, jiff::Timestamp>,
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
                        if ready.insert(pod.name_any(), available) == Some(false) && available {
                            let mut seen = seen.lock().expect("the sample");
                            seen.turned_ready
                                .insert(pod.name_any(), jiff::Timestamp::now());
                        }
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

/// When crr's writes about one pod of b happened (the audit log's `stageTimestamp`).
#[derive(Debug, Default)]
struct Marks {
    /// The pod's request was admitted: the mutating webhook's read of the pod (an audit entry
    /// of a create names no object).
    created: Option<jiff::Timestamp>,
    /// The operator's first write of the pod's status after that: `KruisePodReady` False (only
    /// with `unreadyGracePeriodSeconds`, which this bench does not set).
    unready: Option<jiff::Timestamp>,
    /// The daemon's first and last successful status writes of the request: a kill's outcome,
    /// and the completion.
    daemon_first: Option<jiff::Timestamp>,
    daemon_last: Option<jiff::Timestamp>,
    /// The operator's first write of the pod's status after the completion: `KruisePodReady`
    /// True again.
    released: Option<jiff::Timestamp>,
}

/// The marks of each pod of b (by name; `names` maps pod UIDs to names: a rollout's request is
/// named `<rollout>-<pod UID>`), from the audit log within [start, end].
fn slot_marks(
    path: &str,
    start: jiff::Timestamp,
    end: jiff::Timestamp,
    rollout: &str,
    names: &BTreeMap<String, String>,
) -> anyhow::Result<BTreeMap<String, Marks>> {
    use std::io::BufRead as _;
    let file = std::fs::File::open(path).with_context(|| format!("reading {path}"))?;
    let mut marks: BTreeMap<String, Marks> = BTreeMap::new();
    for line in std::io::BufReader::new(file).lines() {
        let Ok(event) = serde_json::from_str::<Value>(&line?) else {
            continue;
        };
        if event["stage"] != "ResponseComplete"
            || event["responseStatus"]["code"].as_u64() >= Some(300)
        {
            continue;
        }
        let Some(at) = event["stageTimestamp"]
            .as_str()
            .and_then(|time| time.parse::<jiff::Timestamp>().ok())
            .filter(|at| *at >= start && *at <= end)
        else {
            continue;
        };
        let user = event["user"]["username"].as_str().unwrap_or_default();
        let object = &event["objectRef"];
        let name = object["name"].as_str().unwrap_or_default();
        let (resource, subresource) = (
            object["resource"].as_str().unwrap_or_default(),
            object["subresource"].as_str(),
        );
        let request_pod = || {
            name.strip_prefix(rollout)
                .and_then(|rest| rest.strip_prefix('-'))
                .and_then(|uid| names.get(uid))
        };
        match (
            user.rsplit(':').next(),
            event["verb"].as_str(),
            resource,
            subresource,
        ) {
            (Some("crr-webhook"), Some("get"), "pods", None)
                if names.values().any(|pod| pod == name) =>
            {
                marks
                    .entry(name.to_owned())
                    .or_default()
                    .created
                    .get_or_insert(at);
            }
            (
                Some("crr-node-daemon"),
                Some("patch"),
                "containerrecreaterequests",
                Some("status"),
            ) => {
                if let Some(pod) = request_pod() {
                    let marks = marks.entry(pod.clone()).or_default();
                    marks.daemon_first.get_or_insert(at);
                    marks.daemon_last = Some(at);
                }
            }
            (Some("crr-operator"), Some("patch"), "pods", Some("status")) => {
                let Some(marks) = marks.get_mut(name) else {
                    continue;
                };
                if marks.daemon_last.is_some() {
                    marks.released.get_or_insert(at);
                } else if marks.created.is_some() {
                    marks.unready.get_or_insert(at);
                }
            }
            _ => {}
        }
    }
    Ok(marks)
}

/// Where a slot's time goes in b: per pod, each step between crr's writes and the pod's Ready,
/// and how long a freed slot waited for its next request; median and 90th percentile over the
/// pods, in seconds.
fn slot_timeline(
    marks: &BTreeMap<String, Marks>,
    turned_ready: &BTreeMap<String, jiff::Timestamp>,
    budget: usize,
) -> (String, Value) {
    const STEPS: [&str; 5] = [
        "request admitted → pod made not-ready (operator; only with an unready grace)",
        "admitted or not-ready → first daemon status write (pick-up, stop)",
        "first → last daemon status write (kubelet restart, probe, completion)",
        "completion → KruisePodReady restored (operator; only with an unready grace)",
        "completion or restored → pod Ready seen (kubelet, watch)",
    ];
    // Each pod's moments in order; step i runs from the last moment before i + 1 the pod has
    // (no unready grace: no operator writes) to moment i + 1.
    let moments = |pod: &str, m: &Marks| {
        let ready = turned_ready.get(pod).copied();
        [
            m.created,
            m.unready,
            m.daemon_first,
            m.daemon_last,
            m.released,
            ready,
        ]
    };
    let mut rows = String::new();
    let mut json = serde_json::Map::new();
    // A step no pod went through (no unready grace: no operator writes) adds nothing.
    let mut row = |label: &str, values: &[f64]| {
        let summary = crr_e2e::measure::summarize(values);
        if summary.samples == 0 {
            rows.push_str(&format!("| {label} | 0 | | |\n"));
            return 0.0;
        }
        rows.push_str(&format!(
            "| {label} | {} | {:.2} | {:.2} |\n",
            summary.samples, summary.median, summary.p90
        ));
        json.insert(
            label.to_owned(),
            json!({"samples": summary.samples, "median": summary.median, "p90": summary.p90}),
        );
        summary.median
    };
    let mut total = 0.0;
    for (index, label) in STEPS.iter().enumerate() {
        let values: Vec<f64> = marks
            .iter()
            .filter_map(|(pod, m)| {
                let moments = moments(pod, m);
                let to = moments[index + 1]?;
                let from = moments[..=index].iter().rev().find_map(|moment| *moment)?;
                Some(to.duration_since(from).as_secs_f64())
            })
            .collect();
        total += row(label, &values);
    }
    // A pod started after the first batch took a freed slot: from the last pod turning Ready
    // before its request to the request.
    let mut created: Vec<jiff::Timestamp> = marks.values().filter_map(|m| m.created).collect();
    created.sort();
    let readies: Vec<jiff::Timestamp> = turned_ready.values().copied().collect();
    let waits: Vec<f64> = created
        .iter()
        .skip(budget)
        .filter_map(|at| {
            let freed = readies.iter().filter(|ready| *ready <= at).max()?;
            Some(at.duration_since(*freed).as_secs_f64())
        })
        .collect();
    total += row(
        "a pod Ready → the next request created (rollout woken, reconcile)",
        &waits,
    );
    rows.push_str(&format!(
        "| **one slot's cycle, medians summed** | | **{total:.2}** | |\n"
    ));
    json.insert("cycle_median_sum".to_owned(), json!(total));
    (rows, Value::Object(json))
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

    // The floor: one kubelet restart of app, the median of FLOOR_SAMPLES pods (one sample
    // moves with where the kill falls in the kubelet's relist and probe periods).
    let mut samples = Vec::new();
    for name in original.iter().take(FLOOR_SAMPLES) {
        let pod = ctx.pods().get(name).await?;
        let (id, restarts) = id_and_restarts(&pod, "app")?;
        let started = Instant::now();
        kill_container(&id).await?;
        ctx.wait_pod(name, "restarted", Duration::from_secs(60), |pod: &Pod| {
            id_and_restarts(pod, "app").is_ok_and(|(new, count)| new != id && count > restarts)
                && pod_ready(pod)
        })
        .await?;
        samples.push(started.elapsed().as_secs_f64());
    }
    let floor_summary = crr_e2e::measure::summarize(&samples);
    let floor = floor_summary.median;
    eprintln!(
        "bench-rollout: floor {floor:.2}s (median of {}, {:.2} to {:.2})",
        floor_summary.samples, floor_summary.min, floor_summary.max
    );
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
    let names: BTreeMap<String, String> = ctx
        .pods()
        .list(&ListParams::default().labels(&format!("app={APP}")))
        .await?
        .items
        .iter()
        .filter_map(|pod| Some((pod.metadata.uid.clone()?, pod.name_any())))
        .collect();
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
    let (most_b, turned_ready) = {
        let seen = seen.lock().expect("the sample");
        (seen.most_unavailable, seen.turned_ready.clone())
    };
    let marks = slot_marks(audit_log, wall_b, end_b, "bench", &names)?;
    let (timeline, timeline_json) = slot_timeline(&marks, &turned_ready, budget);
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
         - one kubelet restart (the floor): {floor:.2} s, the median of {} pods ({:.2} to {:.2} s); the ideal for b: {} batches × the floor = {ideal:.1} s\n\
         - **b / ideal = {:.2}** (target ≤ 1.25); **b / a = {:.2}** (target ≤ 0.4)\n\
         - crr's API requests per pod in b, every verb, Events and reads included: **{per_pod:.1}** (target ≤ 10)\n\
         - operator peak RSS during b (largest replica): **{peak_mib:.1} MiB** (target ≤ 30)\n\n\
         crr's requests in b by component, verb and resource:\n\n| component verb resource | requests | per pod |\n|---|---|---|\n",
        floor_summary.samples,
        floor_summary.min,
        floor_summary.max,
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
    report.push_str(&format!(
        "\nWhere a slot's time goes in b (per pod, from the audit log's write times and this bench's pod watch; \
         seconds):\n\n| step | pods | median | p90 |\n|---|---|---|---|\n{timeline}"
    ));
    let json = json!({
        "pods": pods, "budget": budget, "floor_seconds": floor, "ideal_seconds": ideal,
        "restart": {"seconds": restart_seconds, "rescheduled": rescheduled_a, "most_unavailable": most_a, "writes": writes_a},
        "rollout": {"seconds": rollout_seconds, "rescheduled": rescheduled_b, "most_unavailable": most_b, "writes": writes_b,
                    "crr_requests_per_pod": per_pod, "operator_peak_rss_mib": peak_mib, "crr_requests": by_kind,
                    "slot_timeline": timeline_json},
    });
    Ok((report, json))
}
