//! The fault suite (faults survived, on the real test bed), against crr installed
//! from manifests/ on the local test bed: `make chaos`, or
//! `cargo test -p crr-e2e --test chaos -- --include-ignored [FILTER]` (hack/cluster-test.sh runs
//! it after the e2e suite). Each scenario breaks something in the middle of a recreate (a test-bed
//! daemon restarted in place with `hack/cluster.sh restart`, a crr process SIGKILLed, watches
//! ended with 410 Gone) and then demands what the issue demands: the request in the right final
//! state, every named container killed exactly once (a new container ID, restartCount exactly one
//! more), the others untouched, the pod Ready again (and `KruisePodReady` True when gated), and
//! nothing stuck Terminating (the request, once deleted, goes; the pod is not being deleted).
//!
//! One scenario is a load, not a fault: `fat-tenant` fills a namespace with
//! objects as large as the API server takes (Pending pods and Deployments of 1 MB, 250 requests
//! of 190 KiB queued on one pod) and demands that every crr process stay under 70% of its
//! container's memory limit (RSS sampled every second), that none restart, and that another
//! tenant's plain request complete within 10 s once crr has taken the burst in.
//!
//! Like the e2e suite, the scenarios count as ignored unless asked for, and run one after
//! another: they restart shared daemons. A scenario marked `Expect::KnownFailure` waits for a fix
//! elsewhere: its failure is reported as expected, never as a pass, and does not fail the suite.
//!
//! Not here: the webhook scaled to 0 (the e2e scenario `webhook-down`), and clock skew, which one
//! machine cannot give to one process; the operator's Lease expiry is proven by unit tests
//! (`operator/src/lease.rs`), the daemon's unready grace is the node daemon's to measure.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context as _, anyhow, ensure};
use crr_crds::keys;
use crr_crds::trigger_record::{TriggerRecord, record_name};
use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};
use crr_e2e::faults::{self, NODE_DAEMON_LABEL, NODE_DAEMON_PROGRAM, OPERATOR_PROGRAM};
use crr_e2e::{
    Ctx, Expect, Scenario, Version, check, id_and_restarts, pod_condition, pod_ready, wait,
};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{DeleteParams, ListParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

/// How long a request may take to complete after its fault.
const COMPLETION: Duration = Duration::from_secs(90);

/// What each scenario's slow preStop writes to its container's log as it starts.
const HOOK_STARTED: &str = "chaos: preStop started";

fn scenarios() -> Vec<(Scenario, Expect)> {
    vec![
        (
            Scenario {
                name: "apiserver-restart",
                run: |ctx| Box::pin(apiserver_restart(ctx)),
            },
            Expect::Pass,
        ),
        (
            Scenario {
                name: "watch-gone",
                run: |ctx| Box::pin(watch_gone(ctx)),
            },
            Expect::Pass,
        ),
        (
            Scenario {
                name: "daemon-sigkill",
                run: |ctx| Box::pin(daemon_sigkill(ctx)),
            },
            Expect::Pass,
        ),
        (
            Scenario {
                name: "leader-sigkill",
                run: |ctx| Box::pin(leader_sigkill(ctx)),
            },
            Expect::Pass,
        ),
        (
            Scenario {
                name: "containerd-restart",
                run: |ctx| Box::pin(containerd_restart(ctx)),
            },
            Expect::Pass,
        ),
        (
            Scenario {
                name: "rollout-leader-sigkill",
                run: |ctx| Box::pin(rollout_fault(ctx, RolloutFault::LeaderSigkill)),
            },
            Expect::Pass,
        ),
        (
            Scenario {
                name: "rollout-apiserver-restart",
                run: |ctx| Box::pin(rollout_fault(ctx, RolloutFault::ApiserverRestart)),
            },
            Expect::Pass,
        ),
        // Measured on the test bed (dev build, as make test installs it), 2026-11-28
        // (BENCHMARKS.md, "A fat tenant beside a plain request"). Before: the operator kept
        // unfinished requests whole, so its replicas peaked at 73 to 95% of 128 MiB and once the
        // leader was OOMKilled four times in a row; the plain request took 31 to 52 s, because
        // the daemon waited for the operator's snapshot write and the operator worked through
        // the fat tenant's requests first. After (requests kept without the tenant's bulk, lists
        // paged 50 at a time, the daemon reading the new container's Ready from its own pod
        // watch, the gate's writes 4 at once with slim answers): every memory bound holds (the
        // operator at 33 to 40%, the node daemons at 43 to 48%, the webhooks at 25%) and no crr
        // container restarts. The plain request took 2.4 and 3.0 s in two runs on the one-node
        // bed, but 30 s (16 s by its own timestamps) in a fresh-clone CI run on the three-node
        // bed and 45.6 s in one run there after it. Four later runs on the three-node bed took
        // 7.55, 2.78 and 2.65 s (dev build) and 2.08 s (release build). The cause is the two
        // cores: the scenario keeps them busy (about 290 CPU-seconds in 170 s, the API server
        // 140 of them), and the dev build's crr takes 71 of them where the release build's takes
        // 16; the API server's watches then lag by seconds (the plain request reached the
        // daemon's request watch 4.5 s after its create in the 7.55 s run, a list of it waited
        // 3.4 s). Run right after rollout-apiserver-restart, as here and in CI, it takes 30 to
        // 47 s: the daemon, idle, got the request 13 s and the kubelet's Ready 16 s late from
        // the API server's watches. On 2026-11-29 the plain request took 1.9 to 6.6 s in five runs
        // on the three-node bed (two of them after rollout-apiserver-restart), and the one failure
        // left was memory: a gate sweep of the fat pods (pages of 20 MB) took the leader to 86%.
        // The scenario now restarts the API server under the load, so that the watches relist the
        // fat objects: before every client read one list page at a time
        // (`crr_runtime::list_pages`), the operator replicas reached 95 and 99% and a daemon 74%;
        // after, 52 to 57% (BENCHMARKS.md, "Relists under a fat tenant"). The fresh-clone CI run
        // of 9105832 passed it (6.34 s; operator 55%, daemon 52%), and so did the run of 185307e
        // (5.74 s), but the run of 4fdd36f took 37.2 s again (memory within bounds). On
        // 2026-11-29 evening, one run in three on the bed took 19.3 s: the daemon killed the
        // container 0.5 s after the create, the kubelet reported the new one Ready 3 s later
        // (the audit log), and the daemon's pod watch showed it 15 s after that. The daemon now
        // reads the pod past a watch that still lacks the new container 2 s after the runtime
        // started it (`node-daemon/src/watch_lag.rs`). In the next four runs it took 12.8, 3.6,
        // 2.4 and 2.2 s (reads past the watch in two of them); in the 12.8 s one the read past the watch came at once, but the request itself
        // reached the daemon's request watch 8.4 s after its create, while the API server was
        // still delivering the tenant's 250 requests of 190 KiB. No read past a watch can find a
        // request the daemon has not heard of, so the mark stays for that lag. On 2026-11-29 night a
        // watch straight from etcd showed where it sits: etcd delivered the plain request 0.3 s after
        // its create, every API server watch 13 s later (BENCHMARKS.md, "A fat tenant: the request
        // watch's lag is the API server's"). The operator's writes of the 60 Deployments and its
        // conflict retries are gone from that window since; the plain request took 22.9 and 3.9 s.
        // On 2026-12-03 the plain request is timed by reads from etcd (`completed_by_reads`), not by
        // a watch that lags too: 4.2, 11.7 and 7.9 s. The same objects from a client that creates
        // 6 to 7 requests a second, with crr's parts off one by one and then all on, left no lag;
        // the scenario's client creates 8 to 12.5 a second, and the API server's watch stream from
        // etcd passes about 10 a second on: the backlog ahead of the plain request is the tenant's
        // creates (81%) and the daemon's Pending marks (19%; BENCHMARKS.md, "A fat tenant: the
        // backlog is a rate"). In CI's order (after five suites) it took 32 s at 6.7 creates a
        // second: etcd held 381 events for watchers that read slowly, the API server's. Since the
        // stale-copy read, in CI's order: 3.91, 5.02 and (serde_json optimized in the dev build,
        // crr's CPU under this load down 40%) 4.11 and 1.71 s; alone on the bed 2.66 and 2.56 s.
        // Too few against the morning's 14.6 to 16.9 s to drop the mark. In the evening the gate
        // stopped writing pods no node has taken (200 MB of watch events before the plain
        // request): six runs on the bed took 1.5 to 3.6 s, and a CI rehearsal 1.82 s, but the
        // next rehearsal 14.65 s. What the bound had measured in the slow runs was the API
        // server's watch caches digesting the burst (every controller waits for them, crr no
        // more than any other), so since 2026-12-04 the scenario times two plain requests: one
        // right after the burst, a figure with its trip to a watch through the API server (the
        // API server's own lag), and one once crr has taken the burst in (the newest
        // tenant request shows a phase), held to 10 s while crr works through the tenant's
        // requests, their deadlines and TTLs.
        (
            Scenario {
                name: "fat-tenant",
                run: |ctx| Box::pin(fat_tenant(ctx)),
            },
            Expect::Pass,
        ),
    ]
}

/// Why a scenario is not run unless asked for (libtest's words for an ignored test).
const IGNORED: &str = "needs crr installed on the local test bed; make chaos runs it";

fn main() {
    crr_e2e::suite_main("chaos", scenarios(), IGNORED, |client| async move {
        crr_e2e::installed(&client).await
    });
}

/// Pod with the readiness gate injected by the webhook (opt-in label).
/// The scenario's pod on the first node, whose daemons (containerd, the node daemon) the faults
/// hit on a test bed of several nodes.
fn on_first_node(customize: impl FnOnce(&mut Value)) -> impl FnOnce(&mut Value) {
    move |pod| {
        customize(pod);
        pod["spec"]["nodeName"] = json!(crr_e2e::FIRST_NODE);
    }
}

fn gated(pod: &mut Value) {
    pod["metadata"]["labels"][keys::LABEL_READINESS_GATE] = json!("true");
}

/// A preStop on `app` that announces itself in the container log (PID 1's stdout), takes
/// `seconds`, then records that it finished in the shared emptyDir.
fn slow_pre_stop(seconds: u32) -> impl FnOnce(&mut Value) {
    move |pod| {
        let hook = format!(
            "echo '{HOOK_STARTED}' > /proc/1/fd/1; sleep {seconds}; echo done >> /data/pre-stop"
        );
        pod["spec"]["containers"][0]["lifecycle"] =
            json!({"preStop": {"exec": {"command": ["sh", "-c", hook]}}});
        // The daemon bounds a preStop by the pod's grace period: room for the whole hook.
        pod["spec"]["terminationGracePeriodSeconds"] = json!(30);
    }
}

/// The pod's containers before the fault: (name, container ID, restartCount).
fn snapshot(pod: &Pod) -> anyhow::Result<Vec<(String, String, i32)>> {
    ["app", "sidecar"]
        .into_iter()
        .map(|name| {
            let (id, restarts) = id_and_restarts(pod, name)?;
            Ok((name.to_owned(), id, restarts))
        })
        .collect()
}

async fn create_request(ctx: &Ctx, name: &str, strategy: Value) -> anyhow::Result<String> {
    ctx.create_crr(
        Version::V1beta1,
        json!({"metadata": {"name": name},
               "spec": {"podName": name, "containers": [{"name": "app"}], "strategy": strategy}}),
    )
    .await
}

/// What the request and the pod look like, in one line (for the report and failures).
fn observed(crr: &ContainerRecreateRequest, pod: &Pod) -> String {
    let status = crr.status.clone().unwrap_or_default();
    let states: Vec<String> = status
        .container_recreate_states
        .iter()
        .map(|state| {
            format!(
                "{}={:?}{}{}",
                state.name,
                state.phase,
                if state.is_killed { " killed" } else { "" },
                state
                    .message
                    .as_deref()
                    .map(|message| format!(" ({message})"))
                    .unwrap_or_default()
            )
        })
        .collect();
    let started = crr_e2e::container(pod, "app")
        .ok()
        .and_then(|status| status.state.as_ref()?.running.as_ref()?.started_at.clone())
        .map(|time| time.0.to_string())
        .unwrap_or_default();
    let restarts = id_and_restarts(pod, "app")
        .map(|(id, restarts)| format!("app {id} restartCount {restarts} started {started}"))
        .unwrap_or_else(|error| error.to_string());
    let completed = status
        .completion_time
        .as_ref()
        .map(|time| time.0.to_string())
        .unwrap_or_default();
    format!(
        "phase {:?} at {completed}, message {:?}, states [{}], {restarts}, pod Ready {}, \
         KruisePodReady {:?}",
        status.phase,
        status.message.unwrap_or_default(),
        states.join(", "),
        pod_ready(pod),
        pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY),
    )
}

/// The end every scenario demands: the request Completed with `app` Succeeded; `app` killed
/// exactly once (new ID, restartCount + 1), `sidecar` untouched; the pod Ready (and
/// KruisePodReady True when `gated`); the request, deleted, gone within seconds; the pod not
/// being deleted. Prints what it observed.
async fn settled(
    ctx: &Ctx,
    name: &str,
    before: &[(String, String, i32)],
    gated: bool,
) -> anyhow::Result<()> {
    let crr = wait(
        ctx.crrs(),
        name,
        COMPLETION,
        |crr: Option<&ContainerRecreateRequest>| {
            crr.is_some_and(ContainerRecreateRequest::is_completed)
        },
    )
    .await;
    let pod = ctx.pods().get(name).await.context("reading the pod")?;
    let crr = match crr {
        Ok(Some(crr)) => crr,
        Ok(None) => return Err(anyhow!("request {name} vanished")),
        Err(error) => {
            let now = ctx.crrs().get(name).await?;
            return Err(error.context(format!(
                "request {name} never Completed: {}",
                observed(&now, &pod)
            )));
        }
    };
    println!("chaos:   completed: {}", observed(&crr, &pod));
    let status = crr.status.clone().unwrap_or_default();
    check(
        status.phase == Some(Phase::Completed)
            && status.container_recreate_states.len() == 1
            && status
                .container_recreate_states
                .iter()
                .all(|state| state.phase == Phase::Succeeded),
        || format!("request did not succeed: {}", observed(&crr, &pod)),
    )?;
    let pod = ctx
        .wait_pod(name, "Ready again", Duration::from_secs(60), |pod| {
            pod_ready(pod)
                && (!gated
                    || pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY) == Some("True"))
        })
        .await
        .with_context(|| format!("after: {}", observed(&crr, &pod)))?;
    for (container, id, restarts) in before {
        let (now_id, now_restarts) = id_and_restarts(&pod, container)?;
        if container == "app" {
            check(now_id != *id && now_restarts == restarts + 1, || {
                format!(
                    "app not killed exactly once: {id} restartCount {restarts} -> {now_id} \
                     restartCount {now_restarts}"
                )
            })?;
        } else {
            check(now_id == *id && now_restarts == *restarts, || {
                format!("{container} was restarted: {id} -> {now_id}")
            })?;
        }
    }
    ctx.crrs()
        .delete(name, &DeleteParams::default())
        .await
        .context("deleting the request")?;
    wait(
        ctx.crrs(),
        name,
        Duration::from_secs(30),
        |crr: Option<&ContainerRecreateRequest>| crr.is_none(),
    )
    .await
    .context("the deleted request is stuck Terminating")?;
    let pod = ctx.pods().get(name).await?;
    check(pod.metadata.deletion_timestamp.is_none(), || {
        "the pod is being deleted".into()
    })?;
    let others = ctx.crrs().list(&ListParams::default()).await?;
    check(others.items.is_empty(), || {
        format!(
            "requests left: {:?}",
            others.iter().map(|crr| crr.name_any()).collect::<Vec<_>>()
        )
    })
}

/// How many times the hook started (markers in the killed container's log) and finished (lines
/// in the emptyDir), for the report.
async fn hook_runs(ctx: &Ctx, pod: &str) -> anyhow::Result<(usize, usize)> {
    let previous =
        crr_e2e::kubectl(&["-n", &ctx.namespace, "logs", pod, "-c", "app", "--previous"]).await?;
    let started = String::from_utf8_lossy(&previous.stdout)
        .matches(HOOK_STARTED)
        .count();
    let finished = ctx
        .exec(pod, "sidecar", "cat /data/pre-stop 2>/dev/null || true")
        .await?
        .lines()
        .count();
    Ok((started, finished))
}

/// After an apiserver restart: waits until the controller manager serves new namespaces again.
async fn recovered(ctx: &Ctx) -> anyhow::Result<()> {
    let took = faults::control_plane_settled(&ctx.client).await?;
    println!(
        "chaos:   controller manager serving new namespaces again after {:.1}s",
        took.as_secs_f64()
    );
    Ok(())
}

/// Waits until the daemon runs the slow preStop of `pod`'s app.
async fn hook_running(ctx: &Ctx, pod: &str) -> anyhow::Result<()> {
    ctx.log_line(pod, "app", HOOK_STARTED, Duration::from_secs(60))
        .await
        .context("the daemon never started the preStop hook")
}

// The apiserver restarted while the daemon runs a preStop (3 s): the hook ends and the kill
// happens while the apiserver is away; the status writes wait for it.
async fn apiserver_restart(ctx: Ctx) -> anyhow::Result<()> {
    let name = "apiserver";
    let pod = ctx
        .two_container_pod(name, on_first_node(slow_pre_stop(3)))
        .await?;
    let before = snapshot(&pod)?;
    // A second pod, asked for a recreate as soon as the API server is back: how long crr is
    // blind after a restart (every watch is answered 410 Gone and lists again).
    let after = "after-restart";
    let after_before = snapshot(&ctx.two_container_pod(after, on_first_node(|_| {})).await?)?;
    create_request(&ctx, name, json!({})).await?;
    hook_running(&ctx, name).await?;
    let gone = faults::restart_daemon("kube-apiserver", 2).await?;
    println!(
        "chaos:   kube-apiserver restarted in {:.1}s",
        gone.as_secs_f64()
    );
    // The API server itself may not reach the webhook for a moment after its restart ("failed
    // calling webhook"): that is retried, as a user would. crr's own refusals are not.
    let asked = std::time::Instant::now();
    let mut refused = 0;
    while let Err(error) = create_request(&ctx, after, json!({})).await {
        if !format!("{error:#}").contains("failed calling webhook") || refused == 30 {
            return Err(error.context("creating a request as the API server came back"));
        }
        refused += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let completed = ctx
        .wait_completed(after, COMPLETION)
        .await
        .context("the request created as the API server came back")?;
    println!(
        "chaos:   a request created as the API server came back completed {:.2}s later \
         ({refused} tries refused before the API server reached the webhook)",
        asked.elapsed().as_secs_f64()
    );
    crr_e2e::succeeded(&completed, 1)?;
    let pod = ctx.pods().get(after).await?;
    let (id, restarts) = id_and_restarts(&pod, "app")?;
    check(
        id != after_before[0].1 && restarts == after_before[0].2 + 1,
        || {
            format!(
                "the request created as the API server came back: app {id} restartCount {restarts}"
            )
        },
    )?;
    ctx.crrs().delete(after, &DeleteParams::default()).await?;
    wait(
        ctx.crrs(),
        after,
        COMPLETION,
        |crr: Option<&ContainerRecreateRequest>| crr.is_none(),
    )
    .await?;
    settled(&ctx, name, &before, false).await?;
    recovered(&ctx).await?;
    let (started, finished) = hook_runs(&ctx, name).await?;
    println!("chaos:   preStop started {started}, finished {finished}");
    check(started == 1 && finished == 1, || {
        format!("preStop started {started} times, finished {finished}")
    })
}

// Every watch ended with 410 Gone during the unready grace: the apiserver restarted, its new
// watch cache starts after the resourceVersion every watcher holds, so each resumed watch is
// answered `too old resource version` (410, Expired) and must list again. The scenario proves the
// 410 with a watch of its own from the old version, and looks for it in both components' logs.
async fn watch_gone(ctx: Ctx) -> anyhow::Result<()> {
    let name = "gone";
    let pod = ctx.two_container_pod(name, on_first_node(gated)).await?;
    let before = snapshot(&pod)?;
    create_request(&ctx, name, json!({"unreadyGracePeriodSeconds": 5})).await?;
    ctx.wait_pod(
        name,
        "unready for the grace",
        Duration::from_secs(30),
        |pod| pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY) == Some("False"),
    )
    .await?;
    let old_version = ctx
        .crrs()
        .list_metadata(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .ok_or_else(|| anyhow!("list without resourceVersion"))?;
    let since = jiff::Timestamp::now();
    let gone = faults::restart_daemon("kube-apiserver", 2).await?;
    println!(
        "chaos:   kube-apiserver restarted in {:.1}s",
        gone.as_secs_f64()
    );
    let mut events = ctx
        .crrs()
        .watch(&WatchParams::default(), &old_version)
        .await
        .context("watching from the old resourceVersion")?
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .context("no answer to a watch from the old resourceVersion")?;
    match first {
        Some(Ok(WatchEvent::Error(error))) if error.code == 410 => {
            println!("chaos:   a watch from {old_version}: 410 {}", error.message);
        }
        other => {
            return Err(anyhow!(
                "a watch from {old_version} after the restart was not ended with 410: {other:?}"
            ));
        }
    }
    drop(events);
    settled(&ctx, name, &before, true).await?;
    recovered(&ctx).await?;
    for (component, selector) in [
        ("node daemon", NODE_DAEMON_LABEL),
        ("operator", "app.kubernetes.io/name=crr-operator"),
    ] {
        let logs = faults::component_logs(selector, since).await?;
        let gone = logs
            .lines()
            .filter(|line| line.contains("too old resource version"))
            .count();
        println!("chaos:   {component}: {gone} log line(s) with a 410 since the restart");
        ensure!(
            gone > 0,
            "the {component} logged no 410 (too old resource version) since the restart"
        );
    }
    Ok(())
}

// The node daemon SIGKILLed (its process, on this host) while the preStop (5 s) runs: the
// DaemonSet's container restarts, the request completes, the container is killed exactly once.
// The hook may run again (the new daemon cannot know how far the old one got).
async fn daemon_sigkill(ctx: Ctx) -> anyhow::Result<()> {
    let name = "sigkill";
    let pod = ctx
        .two_container_pod(name, on_first_node(slow_pre_stop(5)))
        .await?;
    let before = snapshot(&pod)?;
    create_request(&ctx, name, json!({})).await?;
    hook_running(&ctx, name).await?;
    let daemon = faults::node_daemon_on(&ctx.client, crr_e2e::FIRST_NODE).await?;
    let pid = faults::process_of(&daemon, NODE_DAEMON_PROGRAM)?;
    faults::sigkill(pid).await?;
    println!("chaos:   SIGKILLed {NODE_DAEMON_PROGRAM} pid {pid}");
    settled(&ctx, name, &before, false).await?;
    let (started, finished) = hook_runs(&ctx, name).await?;
    println!("chaos:   preStop started {started}, finished {finished}");
    check((1..=2).contains(&started), || {
        format!("preStop started {started} times")
    })
}

// The operator's leader SIGKILLed during the unready grace (5 s): it cannot release the Lease; the
// request completes and the pod's readiness comes back.
async fn leader_sigkill(ctx: Ctx) -> anyhow::Result<()> {
    let name = "leader";
    let pod = ctx.two_container_pod(name, on_first_node(gated)).await?;
    let before = snapshot(&pod)?;
    create_request(&ctx, name, json!({"unreadyGracePeriodSeconds": 5})).await?;
    ctx.wait_pod(
        name,
        "unready for the grace",
        Duration::from_secs(30),
        |pod| pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY) == Some("False"),
    )
    .await?;
    let leader = faults::operator_leader(&ctx.client).await?;
    let pid = faults::process_of(&leader, OPERATOR_PROGRAM)?;
    faults::sigkill(pid).await?;
    println!(
        "chaos:   SIGKILLed {OPERATOR_PROGRAM} pid {pid} (leader {})",
        leader.name_any()
    );
    settled(&ctx, name, &before, true).await?;
    let after = faults::operator_leader(&ctx.client).await?;
    println!("chaos:   leader now {}", after.name_any());
    Ok(())
}

// containerd stopped for 3 s and started again while the daemon runs a preStop (3 s). At first the
// daemon's ExecSync / StopContainer got `Unavailable` and the request ended Completed with app Failed
// ("kill container error: runtime unavailable"), the container never recreated. Now those are
// retried; and since the daemon mounts the socket alone, which containerd replaces when it
// starts, the daemon exits after --cri-unavailable-exit-seconds and the kubelet starts it with
// the new socket (the scenario checks that restart happened).
async fn containerd_restart(ctx: Ctx) -> anyhow::Result<()> {
    let name = "runtime";
    let pod = ctx
        .two_container_pod(name, on_first_node(slow_pre_stop(3)))
        .await?;
    let before = snapshot(&pod)?;
    create_request(&ctx, name, json!({})).await?;
    hook_running(&ctx, name).await?;
    let daemon_restarts = || async {
        let daemon = faults::node_daemon_on(&ctx.client, crr_e2e::FIRST_NODE).await?;
        let status = daemon.status.clone().unwrap_or_default();
        let container = status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("the node daemon pod has no container status"))?;
        Ok::<_, anyhow::Error>((container.restart_count, container.ready))
    };
    let (restarts_before, _) = daemon_restarts().await?;
    let gone = faults::stop_for("containerd", Duration::from_secs(3)).await?;
    println!(
        "chaos:   containerd stopped and started again in {:.1}s",
        gone.as_secs_f64()
    );
    settled(&ctx, name, &before, false).await?;
    // The daemon's mount kept the socket containerd unlinked: it exited and the kubelet started
    // it again with the new one; it is Ready.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (restarts, ready) = daemon_restarts().await?;
        if restarts > restarts_before && ready {
            println!("chaos:   node daemon restarted {restarts_before} -> {restarts}, Ready");
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "the node daemon did not come back with the new socket: restarts {restarts_before} -> {restarts}, ready {ready}"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What breaks in the middle of a rollout.
#[derive(Clone, Copy)]
enum RolloutFault {
    /// The operator leader's process is SIGKILLed (a follower takes the Lease).
    LeaderSigkill,
    /// The API server restarts.
    ApiserverRestart,
}

/// A rollout of 6 pods, 2 at a time, broken once some pods are done and others in flight: it
/// still completes, every pod's `app` restarted exactly once (never twice: each pod's request
/// has a fixed name), `sidecar` never, no pod replaced.
async fn rollout_fault(ctx: Ctx, fault: RolloutFault) -> anyhow::Result<()> {
    use crr_crds::rollout::ContainerRecreateRollout;
    use crr_e2e::rollout::{
        create_rollout, deployment_of, recreated_in_place, rollouts, wait_phase,
    };
    let before = deployment_of(&ctx, "web", 6).await?;
    create_rollout(
        &ctx,
        "restart-app",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"], "maxUnavailable": 2,
               "recreateStrategy": {"minStartedSeconds": 2}}),
    )
    .await?;
    wait(
        rollouts(&ctx),
        "restart-app",
        Duration::from_secs(120),
        |rollout: Option<&ContainerRecreateRollout>| {
            rollout
                .and_then(|rollout| rollout.status.as_ref())
                .is_some_and(|status| status.recreated >= 1 && status.in_flight >= 1)
        },
    )
    .await
    .context("the rollout never had pods both done and in flight")?;
    match fault {
        RolloutFault::LeaderSigkill => {
            let leader = faults::operator_leader(&ctx.client).await?;
            let pid = faults::process_of(&leader, OPERATOR_PROGRAM)?;
            faults::sigkill(pid).await?;
            println!(
                "chaos:   SIGKILLed {OPERATOR_PROGRAM} pid {pid} (leader {}) mid-rollout",
                leader.name_any()
            );
        }
        RolloutFault::ApiserverRestart => {
            let gone = faults::restart_daemon("kube-apiserver", 2).await?;
            println!(
                "chaos:   kube-apiserver restarted in {:.1}s mid-rollout",
                gone.as_secs_f64()
            );
        }
    }
    let done = wait_phase(&ctx, "restart-app", "Completed").await?;
    let status = done.status.unwrap_or_default();
    check(status.recreated == 6 && status.failed == 0, || {
        format!("status: {status:?}")
    })?;
    recreated_in_place(&ctx, &before, 1).await?;
    let requests = ctx.crrs().list(&ListParams::default()).await?.items.len();
    check(requests == 6, || format!("{requests} requests for 6 pods"))?;
    recovered(&ctx).await
}

// ---------------------------------------------------------------------------------------------
// fat-tenant: one tenant makes its objects as large as the API server lets
// them be, and crr must neither grow toward its memory limits nor slow another tenant's request.

/// Pending pods (a nodeSelector no node matches) carrying the readiness-gate label, so that the
/// pod webhook reviews them and the operator's gated-pod watch and sweep read them.
const FAT_PODS: usize = 100;
/// Their env value: about 1 MB (the API server takes about 1.5 MiB an object).
const FAT_POD_BYTES: usize = 1_000_000;
/// Deployments of `replicas: 0` with the config-change trigger and the same 1 MB env value.
const FAT_DEPLOYMENTS: usize = 60;
/// Requests queued on one running pod, each with an annotation of [`FAT_REQUEST_BYTES`].
const FAT_REQUESTS: usize = 250;
/// Under the webhook's 256 KiB cap on a request's AdmissionReview.
const FAT_REQUEST_BYTES: usize = 190 * 1024;
/// The queued requests end at their deadline and go at their TTL.
const FAT_DEADLINE_SECONDS: u64 = 30;
const FAT_TTL_SECONDS: u64 = 5;
/// Objects created at once.
const FAT_CONCURRENCY: usize = 8;
/// The plain request in another namespace, created once crr has taken the tenant's burst in,
/// completes within this of its create.
const PLAIN_WITHIN: Duration = Duration::from_secs(10);
/// crr takes the tenant's burst of requests in (the newest shows a phase) within this of its
/// last create.
const INTAKE_WITHIN: Duration = Duration::from_secs(120);
/// Every crr process stays under this share of its container's memory limit.
const RSS_SHARE: f64 = 0.70;
/// The ConfigMap the fat Deployments use (what the trigger wing records on first sight).
const FAT_CONFIG: &str = "fat-tenant-config";

/// `bytes` of letters and digits, from a seed (not one repeated byte: nothing on the way may
/// shrink it).
fn filler(bytes: usize, seed: u64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut state = seed;
    (0..bytes)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from(ALPHABET[usize::try_from(state >> 58).unwrap_or(0) % ALPHABET.len()])
        })
        .collect()
}

/// Runs `create(i)` for `0..count`, [`FAT_CONCURRENCY`] at once; prints and returns how long it
/// took, and each create's median and slowest.
async fn create_all<F, Fut>(what: &str, count: usize, create: F) -> anyhow::Result<String>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use futures::TryStreamExt as _;
    let start = std::time::Instant::now();
    let each: Vec<f64> = futures::stream::iter(0..count)
        .map(|index| {
            let created = create(index);
            async move {
                let start = std::time::Instant::now();
                created.await?;
                Ok::<_, anyhow::Error>(start.elapsed().as_secs_f64())
            }
        })
        .buffer_unordered(FAT_CONCURRENCY)
        .try_collect()
        .await
        .with_context(|| format!("creating {count} {what}"))?;
    let each = crr_e2e::measure::summarize(&each);
    let line = format!(
        "{count} {what} in {:.1}s (each: median {:.2}s, slowest {:.2}s)",
        start.elapsed().as_secs_f64(),
        each.median,
        each.max
    );
    println!("chaos:   created {line}");
    Ok(line)
}

/// How many objects `api` lists: one item and the API server's count of the rest (exact for a
/// list without selectors), so that counting fat objects reads one of them.
async fn count<K>(api: &kube::Api<K>) -> anyhow::Result<usize>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let page = api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .context("counting")?;
    let rest = page.metadata.remaining_item_count.unwrap_or(0);
    Ok(page.items.len() + usize::try_from(rest).unwrap_or(0))
}

/// Waits until `api` lists nothing.
async fn all_gone<K>(api: &kube::Api<K>, what: &str, within: Duration) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = count(api).await?;
        if left == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "{left} {what} still there after {}s",
                within.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Deletes the named objects ([`FAT_CONCURRENCY`] at once); one already gone is no error.
async fn delete_named<K>(api: &kube::Api<K>, names: Vec<String>) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    use futures::TryStreamExt as _;
    let params = DeleteParams::background();
    futures::stream::iter(names)
        .map(|name| {
            let params = &params;
            async move {
                match api.delete(&name, params).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                    Err(error) => {
                        Err(anyhow::Error::from(error).context(format!("deleting {name}")))
                    }
                }
            }
        })
        .buffer_unordered(FAT_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// The memory limit (bytes) of each crr program, from the installed Deployments' and
/// DaemonSet's container resources.
async fn memory_limits(
    client: &kube::Client,
) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    let deployments: kube::Api<Deployment> =
        kube::Api::namespaced(client.clone(), crr_e2e::SYSTEM_NAMESPACE);
    let daemon_sets: kube::Api<DaemonSet> =
        kube::Api::namespaced(client.clone(), crr_e2e::SYSTEM_NAMESPACE);
    let limit = |program: &str, template: Option<PodTemplateSpec>| {
        let quantity = template
            .and_then(|template| template.spec)
            .and_then(|spec| spec.containers.into_iter().next())
            .and_then(|container| container.resources)
            .and_then(|resources| resources.limits)
            .and_then(|limits| limits.get("memory").cloned())
            .ok_or_else(|| anyhow!("{program} has no memory limit"))?;
        let bytes = crr_e2e::measure::memory_bytes(&quantity.0)
            .ok_or_else(|| anyhow!("{program}'s memory limit {:?} unread", quantity.0))?;
        Ok::<_, anyhow::Error>((program.to_owned(), bytes))
    };
    let mut limits = std::collections::BTreeMap::new();
    for name in ["crr-operator", "crr-webhook"] {
        let deployment = deployments
            .get(name)
            .await
            .with_context(|| format!("reading {name}"))?;
        let (program, bytes) = limit(name, deployment.spec.map(|spec| spec.template))?;
        limits.insert(program, bytes);
    }
    let daemon = daemon_sets
        .get(NODE_DAEMON_PROGRAM)
        .await
        .context("reading the node daemon's DaemonSet")?;
    let (program, bytes) = limit(NODE_DAEMON_PROGRAM, daemon.spec.map(|spec| spec.template))?;
    limits.insert(program, bytes);
    Ok(limits)
}

/// `pod/container` → restartCount of every container in crr's namespace.
async fn crr_restarts(
    client: &kube::Client,
) -> anyhow::Result<std::collections::BTreeMap<String, i32>> {
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), crr_e2e::SYSTEM_NAMESPACE);
    let mut restarts = std::collections::BTreeMap::new();
    for pod in pods.list(&ListParams::default()).await?.items {
        let name = pod.name_any();
        let status = pod.status.unwrap_or_default();
        for container in status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .chain(status.init_container_statuses.unwrap_or_default())
        {
            restarts.insert(
                format!("{name}/{}", container.name),
                container.restart_count,
            );
        }
    }
    Ok(restarts)
}

/// How often [`completed_by_reads`] reads the request.
const READ_EVERY: Duration = Duration::from_millis(200);

/// Waits until the request `name` is Completed, reading it every [`READ_EVERY`] by a GET without
/// a resourceVersion, which the API server answers from etcd. A watch is answered from the API
/// server's watch cache, which the fat tenant's load puts seconds behind etcd: timed by a watch,
/// the plain request's time included the test's own wait for that cache (11 s by the request's
/// timestamps, 26.8 s by the test's watch in one run, 2026-11-29).
async fn completed_by_reads(
    api: &kube::Api<ContainerRecreateRequest>,
    name: &str,
    within: Duration,
) -> anyhow::Result<ContainerRecreateRequest> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let read = api
            .get(name)
            .await
            .with_context(|| format!("reading ContainerRecreateRequest {name}"))?;
        if read.is_completed() {
            return Ok(read);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "ContainerRecreateRequest {name} not Completed after {}s (phase {:?})",
                within.as_secs(),
                read.phase()
            ));
        }
        tokio::time::sleep(READ_EVERY).await;
    }
}

/// The plain tenant's pod for its request right after the burst. Not the pod of the one after the
/// intake: the kubelet starts a container that stops a second time within ten minutes only 10 s
/// after it stopped (its crash-loop back-off), whoever stopped it; in one CI rehearsal the second
/// request on one pod took 12.37 s, 10 of them that wait.
const AT_BURST_POD: &str = "plain-at-burst";

/// A plain request's times from before its create: until a watch of its namespace first showed
/// it (what the API server's watch cache of requests owed of earlier writes), until a watch with
/// the node daemon's selector did (every active request of its pod's node, the tenant's fat ones
/// among them: no daemon hears of it sooner), and until it was Completed; and the node daemon's
/// log lines about it, each with its time from the create (`+1.23s message`).
struct PlainTimes {
    seen: Duration,
    seen_by_node: Duration,
    completed: Duration,
    daemon: Vec<String>,
}

/// Creates a plain request for the app of `pod` in `plain`'s namespace, with a watch of it by
/// name and a watch with the node daemon's selector beside, and waits until it is Completed
/// ([`completed_by_reads`]): its times, and the request as read then.
async fn plain_request(
    plain: &Ctx,
    name: &str,
    pod: &str,
) -> anyhow::Result<(PlainTimes, ContainerRecreateRequest)> {
    let node = plain
        .pods()
        .get(pod)
        .await
        .with_context(|| format!("reading pod {pod}"))?
        .spec
        .and_then(|spec| spec.node_name)
        .with_context(|| format!("pod {pod} is on no node"))?;
    let node_requests: kube::Api<ContainerRecreateRequest> = kube::Api::all(plain.client.clone());
    let selector = keys::active_on_node_selector(&node);
    let from = node_requests
        .list_metadata(&ListParams::default().labels(&selector).limit(1))
        .await
        .context("listing the node's active requests")?
        .metadata
        .resource_version
        .context("a list without a resourceVersion")?;
    let node_watch = node_requests
        .watch(&WatchParams::default().labels(&selector), &from)
        .await
        .context("watching the node's active requests")?;
    let created_at = jiff::Timestamp::now();
    let start = std::time::Instant::now();
    let seen = async {
        wait(
            plain.crrs(),
            name,
            COMPLETION,
            |crr: Option<&ContainerRecreateRequest>| crr.is_some(),
        )
        .await
        .with_context(|| format!("watching for ContainerRecreateRequest {name}"))?;
        Ok::<_, anyhow::Error>(start.elapsed())
    };
    let seen_by_node = async {
        let shown = node_watch.boxed().any(|event| {
            std::future::ready(match event {
                Ok(WatchEvent::Added(crr) | WatchEvent::Modified(crr)) => {
                    crr.name_any() == name
                        && crr.namespace().as_deref() == Some(plain.namespace.as_str())
                }
                _ => false,
            })
        });
        match tokio::time::timeout(COMPLETION, shown).await {
            Ok(true) => Ok(start.elapsed()),
            Ok(false) => Err(anyhow!(
                "the watch of the node's requests ended without {name}"
            )),
            Err(_) => Err(anyhow!(
                "the watch of the node's requests never showed {name}"
            )),
        }
    };
    let created = plain.create_crr(
        Version::V1beta1,
        json!({"metadata": {"name": name},
               "spec": {"podName": pod, "containers": [{"name": "app"}]}}),
    );
    let (seen, seen_by_node, created) = tokio::join!(seen, seen_by_node, created);
    created?;
    let crr = completed_by_reads(&plain.crrs(), name, COMPLETION).await?;
    let completed = start.elapsed();
    // The daemon's lines only explain the times: a failed read of them fails nothing.
    let daemon = match faults::component_logs(NODE_DAEMON_LABEL, created_at).await {
        Ok(logs) => daemon_lines(&logs, &format!("{}/{name}", plain.namespace), created_at),
        Err(error) => vec![format!("(its log not read: {error:#})")],
    };
    let times = PlainTimes {
        seen: seen?,
        seen_by_node: seen_by_node?,
        completed,
        daemon,
    };
    Ok((times, crr))
}

/// The node daemon's log lines (JSON, `kubectl logs --prefix`) that name `request`
/// (`namespace/name`), each as its time after `since` and its message.
fn daemon_lines(logs: &str, request: &str, since: jiff::Timestamp) -> Vec<String> {
    logs.lines()
        .filter(|line| line.contains(request))
        .map(|line| {
            let json = line.find('{').map_or("", |start| &line[start..]);
            let Ok(entry) = serde_json::from_str::<Value>(json) else {
                return line.to_owned();
            };
            let after = entry["timestamp"]
                .as_str()
                .and_then(|time| time.parse::<jiff::Timestamp>().ok())
                .map(|time| time.duration_since(since).as_secs_f64())
                .unwrap_or(f64::NAN);
            let fields = &entry["fields"];
            let detail: Vec<String> = fields
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(key, _)| !matches!(key.as_str(), "message" | "crr" | "id"))
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            format!(
                "+{after:.2}s {} {}",
                fields["message"].as_str().unwrap_or_default(),
                detail.join(" ")
            )
            .trim_end()
            .to_owned()
        })
        .collect()
}

/// Prints the figure of a plain request `when` (its times by the test's clock and by its
/// timestamps), the node daemon's lines about it beneath, and returns the figure.
fn report_plain(
    when: &str,
    namespace: &str,
    times: &PlainTimes,
    crr: &ContainerRecreateRequest,
) -> String {
    let server = crr
        .status
        .as_ref()
        .and_then(|status| status.completion_time.as_ref())
        .zip(crr.metadata.creation_timestamp.as_ref())
        .map(|(done, made)| {
            format!(
                ", {:.0}s by its timestamps",
                done.0.duration_since(made.0).as_secs_f64()
            )
        })
        .unwrap_or_default();
    let line = format!(
        "the plain request in {namespace} {when} reached a watch of its namespace {:.2}s and one \
         with the node daemon's selector {:.2}s, and was Completed {:.2}s after its create{server}",
        times.seen.as_secs_f64(),
        times.seen_by_node.as_secs_f64(),
        times.completed.as_secs_f64()
    );
    println!("chaos:   {line}");
    for daemon_line in &times.daemon {
        println!("chaos:     node daemon {daemon_line}");
    }
    line
}

/// What the fat tenant's load showed: the figures to print, and what failed.
#[derive(Default)]
struct FatLoad {
    figures: Vec<String>,
    failures: Vec<String>,
}

/// The fat tenant's load, the plain request timed beside it, and the checks that the work was
/// done.
async fn fat_load(ctx: &Ctx, plain: &Ctx) -> anyhow::Result<FatLoad> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    let mut figures = Vec::new();
    let mut failures = Vec::new();
    let blob = filler(FAT_POD_BYTES, 36);

    let configs: kube::Api<ConfigMap> = kube::Api::namespaced(ctx.client.clone(), &ctx.namespace);
    configs
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": FAT_CONFIG}, "data": {"mode": "fat"}}),
            )?,
        )
        .await
        .context("creating the ConfigMap")?;

    // 100 Pending pods of 1 MB with the readiness-gate label: the pod webhook reviews each
    // (1 MB) and gives it the gate, the operator's gated-pod watch sees each (and the sweep lists
    // them), and no node ever takes them, so the operator writes none of them.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "fat", keys::LABEL_READINESS_GATE: "true"}},
        "spec": {
            "nodeSelector": {"crr-e2e/fat-tenant": "no-such-node"},
            "containers": [{
                "name": "app",
                "image": crr_e2e::BUSYBOX,
                "command": ["sh", "-c", crr_e2e::EXIT_ON_TERM_LOOP],
                "env": [{"name": "BLOB", "value": blob}],
            }],
        },
    }))?;
    let gated = std::sync::atomic::AtomicUsize::new(0);
    figures.push(
        create_all("Pending pods of 1 MB", FAT_PODS, |index| {
            let mut pod = pod.clone();
            pod.metadata.name = Some(format!("fat-{index:03}"));
            let (pods, gated) = (ctx.pods(), &gated);
            async move {
                let created = pods.create(&PostParams::default(), &pod).await?;
                if created
                    .spec
                    .and_then(|spec| spec.readiness_gates)
                    .unwrap_or_default()
                    .iter()
                    .any(|gate| gate.condition_type == keys::POD_CONDITION_KRUISE_POD_READY)
                {
                    gated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            }
        })
        .await?,
    );
    let gated = gated.into_inner();
    if gated != FAT_PODS {
        failures.push(format!(
            "the pod webhook gave the readiness gate to {gated} of {FAT_PODS} fat pods"
        ));
    }
    drop(pod);

    // 60 Deployments of 1 MB with the config-change trigger: the trigger wing's watch reads each
    // (and its ReplicaSet's changes never reach it) and records its first sight of each, in the
    // Deployment's TriggerRecord.
    let deployments: kube::Api<Deployment> =
        kube::Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"annotations": {keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "fat-deployment"}},
            "template": {
                "metadata": {"labels": {"app": "fat-deployment"}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": crr_e2e::BUSYBOX,
                    "command": ["sh", "-c", crr_e2e::EXIT_ON_TERM_LOOP],
                    "env": [{"name": "BLOB", "value": blob}],
                    "envFrom": [{"configMapRef": {"name": FAT_CONFIG}}],
                }]},
            },
        },
    }))?;
    drop(blob);
    figures.push(
        create_all(
            "Deployments of 1 MB (replicas 0, config-change trigger)",
            FAT_DEPLOYMENTS,
            |index| {
                let mut deployment = deployment.clone();
                deployment.metadata.name = Some(format!("fat-{index:02}"));
                let deployments = deployments.clone();
                async move {
                    deployments
                        .create(&PostParams::default(), &deployment)
                        .await?;
                    Ok(())
                }
            },
        )
        .await?,
    );
    drop(deployment);

    // 250 requests of 190 KiB queued on one running pod: the webhook reviews each, the
    // operator and the node daemon watch each; they end at their deadline and go at their TTL.
    let annotation = filler(FAT_REQUEST_BYTES, 7);
    let created = std::time::Instant::now();
    figures.push(
        create_all(
            "requests of 190 KiB queued on one pod",
            FAT_REQUESTS,
            |index| {
                let request = json!({
                    "metadata": {"name": format!("fat-{index:03}"),
                                 "annotations": {"tenant.example.com/blob": annotation}},
                    "spec": {"podName": "target", "containers": [{"name": "app"}],
                             "activeDeadlineSeconds": FAT_DEADLINE_SECONDS,
                             "ttlSecondsAfterFinished": FAT_TTL_SECONDS},
                });
                async move {
                    ctx.create_crr(Version::V1beta1, request).await?;
                    Ok(())
                }
            },
        )
        .await?,
    );
    drop(annotation);

    // Another tenant, on another pod of the same node, right after the burst: a plain request,
    // timed to a watch of it through the API server and to Completed. Both are figures: what the
    // API server's watch cache of requests still owes of the burst (crr hears of the request no
    // sooner: on the two-core bed up to 30 s), and what the request waits with it.
    let burst_ended = std::time::Instant::now();
    let newest = format!("fat-{:03}", FAT_REQUESTS - 1);
    let intake = wait(
        ctx.crrs(),
        &newest,
        INTAKE_WITHIN,
        |crr: Option<&ContainerRecreateRequest>| crr.is_some_and(|crr| crr.phase().is_some()),
    );
    let (intake, at_burst) =
        tokio::join!(intake, plain_request(plain, "plain-at-burst", AT_BURST_POD));
    match at_burst {
        Ok((times, crr)) => {
            let line = report_plain("right after the burst", &plain.namespace, &times, &crr);
            figures.push(line);
            if let Err(error) = crr_e2e::succeeded(&crr, 1) {
                failures.push(format!("the request right after the burst: {error:#}"));
            }
        }
        Err(error) => failures.push(format!("the request right after the burst: {error:#}")),
    }
    // Then once crr has taken the burst in: the newest of the tenant's requests shows a phase
    // (the node daemon's Pending mark, or the operator's end at its deadline), so every crr
    // watch has delivered the tenant's creates and crr works on its requests (their rounds on
    // the target, their deadlines and TTLs). The plain request then completes within
    // PLAIN_WITHIN: crr holding and working through a fat tenant's load does not slow another.
    match intake {
        Ok(_) => {
            let line = format!(
                "crr took the burst in {:.1}s after its last create (its newest request, \
                 {newest}, showed a phase)",
                burst_ended.elapsed().as_secs_f64()
            );
            println!("chaos:   {line}");
            figures.push(line);
        }
        Err(error) => failures.push(format!(
            "the newest request {newest} showed no phase: {error:#}"
        )),
    }
    match plain_request(plain, "plain", "plain").await {
        Ok((times, crr)) => {
            let took = times.completed;
            let line = report_plain("once crr took the burst in", &plain.namespace, &times, &crr);
            figures.push(line);
            if let Err(error) = crr_e2e::succeeded(&crr, 1) {
                failures.push(format!("the plain request did not succeed: {error:#}"));
            }
            if took > PLAIN_WITHIN {
                failures.push(format!(
                    "the plain request took {:.2}s, over {}s",
                    took.as_secs_f64(),
                    PLAIN_WITHIN.as_secs()
                ));
            }
        }
        Err(error) => failures.push(format!("the plain request: {error:#}")),
    }
    // What the plain tenant's time went to, as the API server saw it (CI keeps no audit log).
    let audit = format!("{}/audit/audit.log", crr_e2e::cluster_dir());
    match crr_e2e::measure::audit_timeline(&audit, &plain.namespace) {
        Ok(lines) => {
            for line in lines {
                println!("chaos:     {line}");
            }
        }
        Err(error) => println!("chaos:     no audit timeline: {error:#}"),
    }

    // The API server restarts under the fat load: every watch of every crr process reconnects,
    // and those too far behind list the fat objects again (all pods and the gated ones, the
    // Deployments, the queued requests), several at once in one process. The memory bounds are
    // checked over this too.
    match faults::restart_daemon("kube-apiserver", 2).await {
        Ok(gone) => {
            let line = format!(
                "kube-apiserver restarted in {:.1}s under the fat load",
                gone.as_secs_f64()
            );
            println!("chaos:   {line}");
            figures.push(line);
            if let Err(error) = faults::control_plane_settled(&ctx.client).await {
                failures.push(format!("after the API server restart: {error:#}"));
            }
        }
        Err(error) => {
            // Nothing after this can run without the API server: say so, and what came before.
            failures.push(format!("restarting the API server: {error:#}"));
            return Ok(FatLoad { figures, failures });
        }
    }

    // The queued requests end and go: nothing is lost under the load. How long it takes is a
    // figure, not the check: 98 to 116 s after the first create in most runs on the three-node
    // bed, over 125 s in one where the API server took 23 s to restart (the operator completes
    // the 250 at their deadline and deletes them at their TTL, 500 writes of 190 KiB objects on
    // two saturated cores). The bound only says they do go.
    let ends = Duration::from_secs(FAT_DEADLINE_SECONDS + FAT_TTL_SECONDS + 210)
        .saturating_sub(created.elapsed());
    match all_gone(&ctx.crrs(), "queued requests", ends).await {
        Ok(()) => {
            let target = ctx.pods().get("target").await?;
            let (_, restarts) = id_and_restarts(&target, "app")?;
            let line = format!(
                "the {FAT_REQUESTS} queued requests ended and were deleted by their TTL {:.1}s \
                 after the first was created; they recreated the target's app {restarts} times",
                created.elapsed().as_secs_f64()
            );
            println!("chaos:   {line}");
            figures.push(line);
        }
        Err(error) => failures.push(format!("the queued requests: {error:#}")),
    }

    // The operator wrote no gate condition to the fat pods: no node took them (read ten at a
    // time). Each write would have been the whole pod, and a watch event of twice its size.
    let mut written = 0;
    let mut params = ListParams::default().labels("app=fat").limit(10);
    loop {
        let page = ctx.pods().list(&params).await?;
        written += page
            .items
            .iter()
            .filter(|pod| pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY).is_some())
            .count();
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    println!(
        "chaos:   KruisePodReady written on {written} of the {FAT_PODS} fat pods no node took"
    );
    if written != 0 {
        failures.push(format!(
            "the operator wrote the gate of {written} of the {FAT_PODS} fat pods no node took"
        ));
    }

    // The trigger wing recorded its first sight of every fat Deployment: its TriggerRecord has
    // the hash of the ConfigMap.
    let records: kube::Api<TriggerRecord> =
        kube::Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let fat_records: HashSet<String> = (0..FAT_DEPLOYMENTS)
        .map(|i| record_name("Deployment", &format!("fat-{i:02}")))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let recorded = loop {
        let recorded = records
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|record| {
                fat_records.contains(&record.name_any())
                    && record.spec.config_hashes.as_ref().is_some_and(|hashes| {
                        hashes.contains_key(&format!("configmap/{FAT_CONFIG}"))
                    })
            })
            .count();
        if recorded == FAT_DEPLOYMENTS || tokio::time::Instant::now() > deadline {
            break recorded;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    println!("chaos:   the trigger wing recorded {recorded} of {FAT_DEPLOYMENTS} fat Deployments");
    if recorded != FAT_DEPLOYMENTS {
        failures.push(format!(
            "the trigger wing recorded {recorded} of {FAT_DEPLOYMENTS} fat Deployments"
        ));
    }
    Ok(FatLoad { figures, failures })
}

/// Deletes everything the fat tenant made and waits until it is gone, the plain tenant's
/// namespace too, so that the next scenario does not pay for it.
async fn fat_cleanup(ctx: &Ctx, plain: &Ctx) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    let start = std::time::Instant::now();
    let deployments: kube::Api<Deployment> =
        kube::Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let replica_sets: kube::Api<ReplicaSet> =
        kube::Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let configs: kube::Api<ConfigMap> = kube::Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let namespaces: kube::Api<Namespace> = kube::Api::all(ctx.client.clone());
    let mut result = Ok(());
    let mut keep = |step: anyhow::Result<()>| {
        if let Err(error) = step
            && result.is_ok()
        {
            result = Err(error);
        }
    };
    keep(
        delete_named(
            &ctx.crrs(),
            (0..FAT_REQUESTS).map(|i| format!("fat-{i:03}")).collect(),
        )
        .await,
    );
    keep(
        delete_named(
            &deployments,
            (0..FAT_DEPLOYMENTS)
                .map(|i| format!("fat-{i:02}"))
                .collect(),
        )
        .await,
    );
    let mut pods: Vec<String> = (0..FAT_PODS).map(|i| format!("fat-{i:03}")).collect();
    pods.push("target".to_owned());
    keep(delete_named(&ctx.pods(), pods).await);
    keep(delete_named(&configs, vec![FAT_CONFIG.to_owned()]).await);
    keep(delete_named(&namespaces, vec![plain.namespace.clone()]).await);
    let within = Duration::from_secs(90);
    keep(all_gone(&ctx.crrs(), "requests", within).await);
    keep(all_gone(&deployments, "Deployments", within).await);
    keep(all_gone(&replica_sets, "ReplicaSets", within).await);
    keep(all_gone(&ctx.pods(), "pods", within).await);
    keep(
        wait(
            namespaces,
            &plain.namespace,
            within,
            |namespace: Option<&Namespace>| namespace.is_none(),
        )
        .await
        .map(|_| ())
        .with_context(|| format!("namespace {} never went", plain.namespace)),
    );
    println!(
        "chaos:   the fat tenant's objects deleted and gone in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    result
}

// A fat tenant: 100 Pending pods and 60 Deployments of 1 MB each, 250 requests of 190 KiB queued on
// one pod; then another tenant's plain requests on two other pods of the same node, one right after
// the burst (timed as a figure, beside the API server's own watch lag) and one once crr has taken
// the burst in; then the API server restarts, so that the crr processes' watches list the fat
// objects again. Every crr process's RSS is sampled every second throughout (cleanup included);
// demanded: each under 70% of its container's memory limit, no crr container restarted, the plain
// request after the intake Completed within 10 s, and the fat tenant's work done (gates injected
// and none written to unbound pods, Deployments recorded, the queued requests ended and deleted by
// their TTL). At the end, etcd is compacted and defragmented: the scenario writes about 1 GB of
// revisions, half of etcd's quota on the test bed.
async fn fat_tenant(ctx: Ctx) -> anyhow::Result<()> {
    let limits = memory_limits(&ctx.client).await?;
    let restarts_before = crr_restarts(&ctx.client).await?;
    let leader = faults::operator_leader(&ctx.client)
        .await
        .map(|pod| pod.name_any())
        .unwrap_or_default();
    let plain = Ctx {
        client: ctx.client.clone(),
        namespace: crr_e2e::create_namespace(&ctx.client, "fat-tenant-plain").await?,
    };
    let mut failures = Vec::new();
    let mut figures = Vec::new();
    let setup = async {
        ctx.two_container_pod("target", on_first_node(|_| {}))
            .await?;
        for pod in ["plain", AT_BURST_POD] {
            plain.two_container_pod(pod, on_first_node(|_| {})).await?;
        }
        crr_e2e::measure::RssPeaks::start(&ctx.client, Duration::from_secs(1)).await
    };
    let (loaded, peaks) = match setup.await {
        Err(error) => (Err(error), Vec::new()),
        Ok(sampler) => {
            let loaded = fat_load(&ctx, &plain).await;
            let cleaned = fat_cleanup(&ctx, &plain).await;
            if let Err(error) = cleaned {
                failures.push(format!("cleanup: {error:#}"));
            }
            let peaks = sampler.stop().await?;
            // The fat tenant wrote hundreds of MB of revisions: etcd back to its live data.
            match faults::compact_etcd().await {
                Ok((before, after)) => println!(
                    "chaos:   etcd compacted and defragmented: {:.1} MiB -> {:.1} MiB",
                    before as f64 / f64::from(1 << 20),
                    after as f64 / f64::from(1 << 20)
                ),
                Err(error) => failures.push(format!("compacting etcd: {error:#}")),
            }
            (loaded, peaks)
        }
    };
    if loaded.is_err() && peaks.is_empty() {
        // Set up failed: nothing was loaded, but the pods and the namespace may be there.
        fat_cleanup(&ctx, &plain).await?;
    }
    for peak in &peaks {
        let limit = limits.get(&peak.program).copied().unwrap_or(0);
        let mib = peak.peak_kib as f64 / 1024.0;
        let share = (peak.peak_kib * 1024) as f64 / limit.max(1) as f64;
        let role = if peak.pod == leader { " (leader)" } else { "" };
        let line = format!(
            "{} {}{role} on {}: peak RSS {mib:.1} MiB ({:.1} MiB anonymous) of its {} MiB limit \
             ({:.0}%, {} samples)",
            peak.program,
            peak.pod,
            peak.node,
            peak.peak_anon_kib as f64 / 1024.0,
            limit >> 20,
            share * 100.0,
            peak.samples
        );
        println!("chaos:   {line}");
        figures.push(line);
        if peak.samples == 0 {
            failures.push(format!("{} {}: never measured", peak.program, peak.pod));
        } else if share >= RSS_SHARE {
            failures.push(format!(
                "{} {}: peak RSS {mib:.1} MiB is {:.0}% of its {} MiB limit (over {:.0}%)",
                peak.program,
                peak.pod,
                share * 100.0,
                limit >> 20,
                RSS_SHARE * 100.0
            ));
        }
        if peak.pids.len() > 1 {
            failures.push(format!(
                "{} {}: its process was replaced ({:?})",
                peak.program, peak.pod, peak.pids
            ));
        }
    }
    match loaded {
        Ok(load) => {
            figures.extend(load.figures);
            failures.extend(load.failures);
        }
        Err(error) => failures.push(format!("{error:#}")),
    }
    // A failure to read them is one more failure, not the only one told: the others say why.
    let restarts_after = match crr_restarts(&ctx.client).await {
        Ok(restarts) => restarts,
        Err(error) => {
            failures.push(format!("reading crr's restart counts: {error:#}"));
            restarts_before.clone()
        }
    };
    let restarted: Vec<String> = restarts_before
        .iter()
        .filter_map(|(container, before)| match restarts_after.get(container) {
            Some(after) if after == before => None,
            Some(after) => Some(format!("{container} restartCount {before} -> {after}")),
            None => Some(format!("{container} gone")),
        })
        .chain(
            restarts_after
                .keys()
                .filter(|container| !restarts_before.contains_key(*container))
                .map(|container| format!("{container} new")),
        )
        .collect();
    println!(
        "chaos:   crr containers restarted: {}",
        if restarted.is_empty() {
            "none".to_owned()
        } else {
            restarted.join(", ")
        }
    );
    if !restarted.is_empty() {
        failures.push(format!(
            "crr containers restarted: {}",
            restarted.join(", ")
        ));
    }
    ensure!(
        failures.is_empty(),
        "{}\nmeasured: {}",
        failures.join("; "),
        figures.join("; ")
    );
    Ok(())
}
