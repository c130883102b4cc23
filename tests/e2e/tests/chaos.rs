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
//! Like the e2e suite, the scenarios count as ignored unless asked for, and run one after
//! another: they restart shared daemons. A scenario marked `Expect::KnownFailure` waits for a fix
//! elsewhere: its failure is reported as expected, never as a pass, and does not fail the suite.
//!
//! Not here: the webhook scaled to 0 (the e2e scenario `webhook-down`), and clock skew, which one
//! machine cannot give to one process; the operator's Lease expiry is proven by unit tests
//! (`operator/src/lease.rs`), the daemon's unready grace is the node daemon's to measure.

use std::time::Duration;

use anyhow::{Context as _, anyhow, ensure};
use crr_crds::keys;
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
    create_request(&ctx, name, json!({})).await?;
    hook_running(&ctx, name).await?;
    let gone = faults::restart_daemon("kube-apiserver", 2).await?;
    println!(
        "chaos:   kube-apiserver restarted in {:.1}s",
        gone.as_secs_f64()
    );
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
