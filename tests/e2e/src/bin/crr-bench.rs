//! `crr-bench`: the figures of BENCHMARKS.md, measured on the local test bed with crr installed
//! (run through `make bench`, which builds release binaries and installs them first).
//!
//! Every time is taken on one clock, this machine's monotonic clock, by watching the API server:
//! the whole cluster runs here, so there is no clock skew to correct for. API timestamps have
//! whole-second resolution, so they are not used for durations.
//!
//! Writes `bench/results/<date>.json` and `.md` and prints the table.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};
use crr_e2e::measure::{PROGRAMS, Summary, env_or, pids_of, summarize, total_usage};
use crr_e2e::{Ctx, Version, id_and_restarts, kill_container, pod_ready};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};

/// Milestones of one recreate, in milliseconds after the create call.
#[derive(Default, Debug, Clone, serde::Serialize)]
struct Milestones {
    admitted: f64,
    /// The request seen `Recreating`: the daemon writes the phase with the record
    /// of the kill (before it only for an unready grace or a kill that could outlast the
    /// operator's patience), so this is after the stop for a plain request.
    picked_up: Option<f64>,
    /// The daemon's `Killing` Event on the pod: it calls StopContainer now, as the kubelet says
    /// it (the Event's own microsecond timestamp, on this machine's clock). Earlier daemons said
    /// it on the request once StopContainer had returned.
    stopped_by_daemon: Option<f64>,
    killed: Option<f64>,
    restarted: Option<f64>,
    ready: Option<f64>,
    completed: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let client = crr_e2e::installed_client().await?;
    let repetitions = env_or("CRR_BENCH_REPETITIONS", 10)?;
    let burst = env_or("CRR_BENCH_BURST", 50)?;
    let idle_pods = env_or("CRR_BENCH_IDLE_PODS", 100)?;
    let idle_seconds = env_or("CRR_BENCH_IDLE_SECONDS", 300)?;
    let probes = PodProbes::from_env()?;
    eprintln!("bench: test pods with {probes:?} readiness probes (CRR_BENCH_PROBES)");
    let out_dir =
        PathBuf::from(std::env::var("CRR_BENCH_OUT").unwrap_or_else(|_| "bench/results".into()));

    let mut report = BTreeMap::<String, Value>::new();
    let ctx = namespace(&client, "bench").await?;

    let shutdown_repetitions = env_or("CRR_BENCH_SHUTDOWN_REPETITIONS", 3)?;
    eprintln!(
        "bench: 6. two containers with 3 s shutdowns each, {shutdown_repetitions} repetitions"
    );
    let shutdowns = slow_shutdowns(&ctx, shutdown_repetitions, probes).await?;
    report.insert("two_slow_shutdowns".into(), shutdowns);
    if std::env::var("CRR_BENCH_ONLY").as_deref() == Ok("shutdowns") {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(&ctx.namespace, &DeleteParams::default())
            .await;
        return write_report(&out_dir, &report);
    }

    eprintln!("bench: 1. kubelet floor and CRR latency, {repetitions} repetitions");
    let mut floors = Vec::new();
    let mut plain = Vec::new();
    // Separate fresh pods for the floor and the request: the kubelet delays a container's
    // second restart within its crash back-off window (10 s), which would land on whichever
    // measurement came second.
    for repetition in 0..repetitions {
        let floor_pod = format!("floor-{repetition}");
        let pod = format!("latency-{repetition}");
        bench_pod(&ctx, &floor_pod, probes, |_| {}).await?;
        bench_pod(&ctx, &pod, probes, |_| {}).await?;
        floors.push(kubelet_restart(&ctx, &floor_pod).await?);
        plain.push(recreate(&ctx, &pod, json!({})).await?);
    }
    let totals: Vec<f64> = plain.iter().map(|m| m.completed).collect();
    let floor_median = summarize(&floors).median;
    let overheads: Vec<f64> = plain
        .iter()
        .zip(&floors)
        .map(|(milestones, floor)| milestones.completed - floor)
        .collect();
    report.insert("kubelet_restart_ms".into(), json!(summarize(&floors)));
    report.insert("crr_total_ms".into(), json!(summarize(&totals)));
    report.insert("crr_overhead_ms".into(), json!(summarize(&overheads)));
    report.insert("phases_ms".into(), json!(phase_summaries(&plain)));
    report.insert("pod_readiness_probes".into(), json!(format!("{probes:?}")));

    eprintln!("bench: 2. with a preStop exec hook and unreadyGracePeriodSeconds=1");
    let mut hooked = Vec::new();
    let mut graced = Vec::new();
    for repetition in 0..repetitions.min(5) {
        let hooked_pod = format!("hooked-{repetition}");
        let graced_pod = format!("graced-{repetition}");
        for pod in [&hooked_pod, &graced_pod] {
            bench_pod(&ctx, pod, probes, |pod| {
                pod["metadata"]["labels"][crr_crds::keys::LABEL_READINESS_GATE] = json!("true");
                pod["spec"]["containers"][0]["lifecycle"] =
                    json!({"preStop": {"exec": {"command": ["true"]}}});
            })
            .await?;
        }
        // A grace period of 0 leaves no time for a hook (the daemon skips it, as the kubelet
        // does); the containers exit at once on SIGTERM, so 2 s of grace cost nothing.
        hooked.push(
            recreate(
                &ctx,
                &hooked_pod,
                json!({"terminationGracePeriodSeconds": 2}),
            )
            .await?,
        );
        graced.push(recreate(&ctx, &graced_pod, json!({"unreadyGracePeriodSeconds": 1})).await?);
    }
    let completed =
        |samples: &[Milestones]| -> Vec<f64> { samples.iter().map(|m| m.completed).collect() };
    let stopped = |samples: &[Milestones]| -> Vec<f64> {
        samples.iter().filter_map(|m| m.stopped_by_daemon).collect()
    };
    report.insert(
        "prestop_exec_total_ms".into(),
        json!(summarize(&completed(&hooked))),
    );
    report.insert(
        "unready_grace_1s_total_ms".into(),
        json!(summarize(&completed(&graced))),
    );
    // The kubelet's relist (1 s) hides sub-second differences in the totals; the daemon's own
    // Killing Event shows what the hook and the grace add before the kill.
    report.insert(
        "prestop_exec_stopped_by_daemon_ms".into(),
        json!(summarize(&stopped(&hooked))),
    );
    report.insert(
        "unready_grace_1s_stopped_by_daemon_ms".into(),
        json!(summarize(&stopped(&graced))),
    );

    eprintln!("bench: 3. burst of {burst} pods: the kubelet alone, then 1 CRR each");
    let burst_floor = kubelet_burst(&client, burst, probes).await?;
    report.insert("kubelet_burst_ms".into(), json!(burst_floor));
    let burst_report = burst_run(&client, burst, probes).await?;
    report.insert("burst".into(), burst_report);

    eprintln!("bench: 5. idle footprint with {idle_pods} pods, {idle_seconds}s");
    let idle = idle_run(&client, idle_pods, Duration::from_secs(idle_seconds as u64)).await?;
    report.insert("idle".into(), idle);

    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ctx.namespace, &DeleteParams::default())
        .await;

    let burst_ratio = report["burst"]["all_completed_ms"]
        .as_f64()
        .unwrap_or(f64::NAN)
        / summarize(&totals).median;
    report.insert(
        "ratios".into(),
        json!({
            "overhead_over_kubelet_restart": summarize(&overheads).median / floor_median,
            "burst_over_single": burst_ratio,
            "burst_over_kubelet_burst": report["burst"]["all_completed_ms"].as_f64().unwrap_or(f64::NAN) / burst_floor,
            "kubelet_burst_over_kubelet_restart": burst_floor / floor_median,
        }),
    );
    write_report(&out_dir, &report)
}

async fn namespace(client: &Client, prefix: &str) -> anyhow::Result<Ctx> {
    let name = format!("{prefix}-{}", std::process::id());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([("crr-e2e".to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &name);
    crr_e2e::wait(
        accounts,
        "default",
        Duration::from_secs(30),
        |account: Option<&_>| account.is_some(),
    )
    .await?;
    Ok(Ctx {
        client: client.clone(),
        namespace: name,
    })
}

/// The floor: how long the kubelet takes to bring `app` back (new ID, Ready) after its process
/// dies, killed directly through containerd.
async fn kubelet_restart(ctx: &Ctx, pod: &str) -> anyhow::Result<f64> {
    let current = ctx.pods().get(pod).await?;
    let (id, restarts) = id_and_restarts(&current, "app")?;
    let start = Instant::now();
    kill_container(&id).await?;
    ctx.wait_pod(pod, "restarted", Duration::from_secs(60), |pod| {
        back(pod, &id, restarts) && pod_ready(pod)
    })
    .await?;
    Ok(start.elapsed().as_secs_f64() * 1000.0)
}

fn back(pod: &Pod, old_id: &str, old_restarts: i32) -> bool {
    id_and_restarts(pod, "app").is_ok_and(|(id, restarts)| id != old_id && restarts > old_restarts)
}

/// One CRR for `app` of `pod` (grace 0 unless `strategy` sets one, minStartedSeconds 0), with
/// milestones seen by watch.
async fn recreate(ctx: &Ctx, pod: &str, strategy: Value) -> anyhow::Result<Milestones> {
    let current = ctx
        .wait_pod(pod, "Ready", Duration::from_secs(60), pod_ready)
        .await?;
    let (old_id, old_restarts) = id_and_restarts(&current, "app")?;
    let mut strategy = strategy;
    if strategy.get("terminationGracePeriodSeconds").is_none() {
        strategy["terminationGracePeriodSeconds"] = json!(0);
    }
    strategy["minStartedSeconds"] = json!(0);

    let pods = ctx.pods();
    let pod_name = pod.to_owned();
    let start = Instant::now();
    let wall_start = jiff::Timestamp::now();
    let pod_times = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={pod_name}"));
        let mut stream = watcher(pods, config).applied_objects().boxed();
        let (mut killed, mut restarted) = (None, None);
        while let Some(Ok(pod)) = stream.next().await {
            let now = start.elapsed().as_secs_f64() * 1000.0;
            let status = crr_e2e::container(&pod, "app").ok();
            let not_running = status.is_some_and(|status| {
                status.container_id.as_deref() == Some(old_id.as_str())
                    && status
                        .state
                        .as_ref()
                        .is_some_and(|state| state.running.is_none())
            });
            if killed.is_none() && (not_running || back(&pod, &old_id, old_restarts)) {
                killed = Some(now);
            }
            if restarted.is_none() && back(&pod, &old_id, old_restarts) {
                restarted = Some(now);
            }
            if back(&pod, &old_id, old_restarts) && pod_ready(&pod) {
                return (killed, restarted, Some(now));
            }
        }
        (killed, restarted, None)
    });

    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"generateName": format!("{pod}-")},
                   "spec": {"podName": pod, "containers": [{"name": "app"}], "strategy": strategy}}),
        )
        .await?;
    let admitted = start.elapsed().as_secs_f64() * 1000.0;
    let mut picked_up = None;
    let crrs = ctx.crrs();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(crrs, config).applied_objects().boxed();
    let completed = loop {
        let next = tokio::time::timeout(Duration::from_secs(120), stream.try_next())
            .await
            .map_err(|_| anyhow!("CRR {name} did not complete within 120s"))??;
        let crr: ContainerRecreateRequest = next.ok_or_else(|| anyhow!("watch ended"))?;
        let now = start.elapsed().as_secs_f64() * 1000.0;
        if picked_up.is_none() && crr.phase() == Some(Phase::Recreating) {
            picked_up = Some(now);
        }
        if crr.is_completed() {
            break now;
        }
    };
    let (killed, restarted, ready) = tokio::time::timeout(Duration::from_secs(30), pod_times)
        .await
        .unwrap_or(Ok((None, None, None)))
        .unwrap_or((None, None, None));
    let stopped_by_daemon = pod_killing_event_times(ctx, pod, &name)
        .await
        .into_iter()
        .next()
        .map(|at| at.duration_since(wall_start).as_secs_f64() * 1000.0);
    let _ = ctx.crrs().delete(&name, &DeleteParams::default()).await;
    Ok(Milestones {
        admitted,
        picked_up,
        stopped_by_daemon,
        killed,
        restarted,
        ready,
        completed,
    })
}

/// The readiness probes of the test pods. `Exec` is the e2e suite's shape (an exec probe per
/// container every second: 2 exec calls a second per pod through the runtime); `None` leaves
/// Ready to the containers running, so the node's load is the recreates alone.
#[derive(Debug, Clone, Copy)]
enum PodProbes {
    None,
    Exec,
}

impl PodProbes {
    fn from_env() -> anyhow::Result<Self> {
        match std::env::var("CRR_BENCH_PROBES").as_deref() {
            Err(_) | Ok("" | "none") => Ok(Self::None),
            Ok("exec") => Ok(Self::Exec),
            Ok(other) => Err(anyhow!("CRR_BENCH_PROBES={other}: want none or exec")),
        }
    }
}

/// The e2e suite's two-container pod, with the probes chosen for the run.
async fn bench_pod(
    ctx: &Ctx,
    name: &str,
    probes: PodProbes,
    customize: impl FnOnce(&mut Value),
) -> anyhow::Result<Pod> {
    ctx.two_container_pod(name, |pod| {
        if let (PodProbes::None, Some(containers)) =
            (probes, pod["spec"]["containers"].as_array_mut())
        {
            for container in containers {
                if let Some(container) = container.as_object_mut() {
                    container.remove("readinessProbe");
                }
            }
        }
        customize(pod);
    })
    .await
}

/// What a container of the slow-shutdown pods does on SIGTERM: 3 s of shutdown, then exit.
const SLOW_SHUTDOWN_LOOP: &str =
    "trap 'sleep 3; exit 0' TERM; while true; do sleep 1 & wait $!; done";

/// Section 6: one request for both containers of a pod whose containers each take 3 s to shut
/// down (grace 10 s). Containers are stopped one after another in the listed order, each stop
/// finished before the next begins, so the second stop ends about 6 s after the first began.
/// Milestones from the create call: each container's stop by the daemon (its `Killing` Events)
/// and the request's completion.
async fn slow_shutdowns(ctx: &Ctx, repetitions: usize, probes: PodProbes) -> anyhow::Result<Value> {
    let (mut first, mut second, mut completed) = (Vec::new(), Vec::new(), Vec::new());
    for repetition in 0..repetitions {
        let pod = format!("shutdown-{repetition}");
        bench_pod(ctx, &pod, probes, |pod| {
            pod["spec"]["terminationGracePeriodSeconds"] = json!(10);
            for container in pod["spec"]["containers"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                container["command"] = json!(["sh", "-c", SLOW_SHUTDOWN_LOOP]);
            }
        })
        .await?;
        let start = Instant::now();
        let wall_start = jiff::Timestamp::now();
        let name = ctx
            .create_crr(
                Version::V1beta1,
                json!({"metadata": {"generateName": format!("{pod}-")},
                       "spec": {"podName": pod, "containers": [{"name": "app"}, {"name": "sidecar"}],
                                "strategy": {"minStartedSeconds": 0}}}),
            )
            .await?;
        ctx.wait_completed(&name, Duration::from_secs(120)).await?;
        completed.push(start.elapsed().as_secs_f64() * 1000.0);
        let stops = pod_killing_event_times(ctx, &pod, &name).await;
        let after = |at: &jiff::Timestamp| at.duration_since(wall_start).as_secs_f64() * 1000.0;
        if let [app, sidecar, ..] = stops.as_slice() {
            first.push(after(app));
            second.push(after(sidecar));
        }
        let _ = ctx.crrs().delete(&name, &DeleteParams::default()).await;
    }
    Ok(json!({
        "first_stopped_ms": summarize(&first),
        "second_stopped_ms": summarize(&second),
        "completed_ms": summarize(&completed),
    }))
}

/// The times of the daemon's `Killing` Events on `pod` for request `crr` (one per container: on
/// the request itself, Events of one reason form a series that keeps its first time), earliest
/// first.
async fn pod_killing_event_times(ctx: &Ctx, pod: &str, crr: &str) -> Vec<jiff::Timestamp> {
    let events: Api<Event> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let selector = format!("involvedObject.name={pod},involvedObject.kind=Pod,reason=Killing");
    let Ok(list) = events.list(&ListParams::default().fields(&selector)).await else {
        return Vec::new();
    };
    let mut times: Vec<jiff::Timestamp> = list
        .items
        .iter()
        .filter(|event| {
            event.message.as_deref().is_some_and(|message| {
                message.contains(&format!("ContainerRecreateRequest {crr} "))
            })
        })
        .filter_map(|event| event.event_time.as_ref().map(|time| time.0))
        .collect();
    times.sort();
    times
}

fn phase_summaries(samples: &[Milestones]) -> BTreeMap<&'static str, Summary> {
    let mut phases = BTreeMap::new();
    let pick =
        |f: fn(&Milestones) -> Option<f64>| -> Vec<f64> { samples.iter().filter_map(f).collect() };
    phases.insert("1_admitted", summarize(&pick(|m| Some(m.admitted))));
    phases.insert("2_picked_up", summarize(&pick(|m| m.picked_up)));
    phases.insert(
        "3_stopped_by_daemon",
        summarize(&pick(|m| m.stopped_by_daemon)),
    );
    phases.insert("4_seen_stopped", summarize(&pick(|m| m.killed)));
    phases.insert("5_restarted", summarize(&pick(|m| m.restarted)));
    phases.insert("6_ready", summarize(&pick(|m| m.ready)));
    phases.insert("7_completed", summarize(&pick(|m| Some(m.completed))));
    phases
}

/// `count` Ready bench pods named `<prefix>-<index>` in a fresh namespace.
async fn burst_pods(
    client: &Client,
    prefix: &str,
    count: usize,
    probes: PodProbes,
) -> anyhow::Result<(Ctx, Vec<Pod>)> {
    let ctx = namespace(client, prefix).await?;
    let creations = (0..count).map(|index| {
        let ctx = ctx.clone();
        async move { bench_pod(&ctx, &format!("{prefix}-{index}"), probes, |_| {}).await }
    });
    let pods = futures::stream::iter(creations)
        .buffer_unordered(10)
        .try_collect::<Vec<_>>()
        .await?;
    Ok((ctx, pods))
}

/// The burst's floor: `app` of `count` pods killed directly through containerd at once, until
/// every pod is Ready again with a new `app` container (ms). What the kubelet and the runtime
/// take for that many restarts on this node, with no crr in the way.
async fn kubelet_burst(client: &Client, count: usize, probes: PodProbes) -> anyhow::Result<f64> {
    let (ctx, pods) = burst_pods(client, "floorburst", count, probes).await?;
    let before: BTreeMap<String, (String, i32)> = pods
        .iter()
        .map(|pod| Ok((pod.name_any(), id_and_restarts(pod, "app")?)))
        .collect::<anyhow::Result<_>>()?;
    let start = Instant::now();
    futures::stream::iter(before.values().map(|(id, _)| kill_container(id)))
        .buffer_unordered(10)
        .try_collect::<Vec<_>>()
        .await?;
    loop {
        let list = ctx.pods().list(&Default::default()).await?;
        let restarted = list
            .items
            .iter()
            .filter(|pod| {
                before
                    .get(&pod.name_any())
                    .is_some_and(|(id, restarts)| back(pod, id, *restarts) && pod_ready(pod))
            })
            .count();
        if restarted == count {
            break;
        }
        if start.elapsed() > Duration::from_secs(600) {
            return Err(anyhow!(
                "the kubelet did not restart {count} containers within 600s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = start.elapsed().as_secs_f64() * 1000.0;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ctx.namespace, &DeleteParams::default())
        .await;
    Ok(elapsed)
}

async fn burst_run(client: &Client, count: usize, probes: PodProbes) -> anyhow::Result<Value> {
    let (ctx, _) = burst_pods(client, "burst", count, probes).await?;
    let before: BTreeMap<_, _> = PROGRAMS.iter().map(|p| (*p, total_usage(p))).collect();
    let mut peak: BTreeMap<&str, u64> = PROGRAMS.iter().map(|p| (*p, 0)).collect();
    let start = Instant::now();
    // Created as the floor's kills are made: 10 at a time (one after another, the creations
    // alone would take count × one admission round trip).
    let creations = (0..count).map(|index| {
        let ctx = ctx.clone();
        async move {
            ctx.create_crr(
                Version::V1beta1,
                json!({"metadata": {"name": format!("burst-{index}")},
                       "spec": {"podName": format!("burst-{index}"), "containers": [{"name": "app"}],
                                "strategy": {"terminationGracePeriodSeconds": 0}}}),
            )
            .await
        }
    });
    futures::stream::iter(creations)
        .buffer_unordered(10)
        .try_collect::<Vec<_>>()
        .await?;
    let crrs = ctx.crrs();
    loop {
        for program in PROGRAMS {
            let now = total_usage(program).rss_kib;
            let entry = peak.entry(program).or_default();
            *entry = (*entry).max(now);
        }
        let list = crrs.list(&Default::default()).await?;
        if list.items.iter().filter(|crr| crr.is_completed()).count() == count {
            break;
        }
        if start.elapsed() > Duration::from_secs(600) {
            return Err(anyhow!("burst did not complete within 600s"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = start.elapsed().as_secs_f64() * 1000.0;
    let failed = crrs
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|crr| {
            crr.status.as_ref().is_some_and(|s| {
                s.container_recreate_states
                    .iter()
                    .any(|c| c.phase != Phase::Succeeded)
            })
        })
        .map(|crr| crr.name_any())
        .collect::<Vec<_>>();
    let cpu: BTreeMap<_, _> = PROGRAMS
        .iter()
        .map(|p| (*p, total_usage(p).cpu_seconds - before[p].cpu_seconds))
        .collect();
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ctx.namespace, &DeleteParams::default())
        .await;
    Ok(json!({
        "pods": count,
        "all_completed_ms": elapsed,
        "not_succeeded": failed,
        "cpu_seconds": cpu,
        "peak_rss_mib": peak.iter().map(|(p, kib)| (*p, *kib as f64 / 1024.0)).collect::<BTreeMap<_, _>>(),
    }))
}

async fn idle_run(client: &Client, count: usize, duration: Duration) -> anyhow::Result<Value> {
    let ctx = namespace(client, "idle").await?;
    let creations = (0..count).map(|index| {
        let ctx = ctx.clone();
        async move {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("idle-{index}")},
                "spec": {"terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "pause", "image": "crr.local/pause:3.10"}]},
            }))?;
            ctx.pods().create(&PostParams::default(), &pod).await?;
            anyhow::Ok(())
        }
    });
    futures::stream::iter(creations)
        .buffer_unordered(10)
        .try_collect::<Vec<_>>()
        .await?;
    let before: BTreeMap<_, _> = PROGRAMS.iter().map(|p| (*p, total_usage(p))).collect();
    tokio::time::sleep(duration).await;
    let after: BTreeMap<_, _> = PROGRAMS.iter().map(|p| (*p, total_usage(p))).collect();
    let replicas: BTreeMap<_, _> = PROGRAMS.iter().map(|p| (*p, pids_of(p).len())).collect();
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ctx.namespace, &DeleteParams::default())
        .await;
    Ok(json!({
        "pods": count,
        "seconds": duration.as_secs(),
        "processes": replicas,
        "rss_mib_per_process": PROGRAMS.iter().map(|p| (*p, after[p].rss_kib as f64 / 1024.0 / replicas[p].max(1) as f64)).collect::<BTreeMap<_, _>>(),
        "cpu_millicores": PROGRAMS.iter().map(|p| (*p, (after[p].cpu_seconds - before[p].cpu_seconds) * 1000.0 / duration.as_secs_f64())).collect::<BTreeMap<_, _>>(),
    }))
}

fn write_report(dir: &std::path::Path, report: &BTreeMap<String, Value>) -> anyhow::Result<()> {
    crr_e2e::measure::write_results(dir, "", report, &markdown(report), Some("latest.md"))
}

fn markdown(report: &BTreeMap<String, Value>) -> String {
    let mut out = String::from(
        "| figure | median | p90 | p99 | min | max | n |\n|---|---|---|---|---|---|---|\n",
    );
    let mut row = |label: &str, value: &Value| {
        if value.get("median").is_some() {
            let cell = |key: &str| {
                value[key]
                    .as_f64()
                    .map_or("–".into(), |v| format!("{v:.0}"))
            };
            out.push_str(&format!(
                "| {label} (ms) | {} | {} | {} | {} | {} | {} |\n",
                cell("median"),
                cell("p90"),
                cell("p99"),
                cell("min"),
                cell("max"),
                value["samples"]
            ));
        }
    };
    for key in [
        "kubelet_restart_ms",
        "crr_total_ms",
        "crr_overhead_ms",
        "prestop_exec_total_ms",
        "unready_grace_1s_total_ms",
        "prestop_exec_stopped_by_daemon_ms",
        "unready_grace_1s_stopped_by_daemon_ms",
    ] {
        if let Some(value) = report.get(key) {
            row(key.trim_end_matches("_ms"), value);
        }
    }
    if let Some(phases) = report.get("phases_ms").and_then(Value::as_object) {
        for (phase, value) in phases {
            row(&format!("phase {phase}"), value);
        }
    }
    out.push('\n');
    for key in [
        "two_slow_shutdowns",
        "kubelet_burst_ms",
        "burst",
        "idle",
        "ratios",
    ] {
        if let Some(value) = report.get(key) {
            out.push_str(&format!("**{key}**: `{value}`\n\n"));
        }
    }
    out
}
