//! End-to-end scenarios (upstream's suite, docs/behaviour.md §5, and ours), against crr installed from
//! manifests/ on the local test bed:
//! `cargo test -p crr-e2e --test e2e -- --include-ignored [FILTER]` (hack/cluster-test.sh).
//! Like every cluster test, each scenario counts as ignored unless asked for: without
//! `--include-ignored` (or `--ignored`) the suite runs none and reports them ignored; asked for,
//! it fails with the reason when the local test bed or the installed crr is missing (see
//! `crr_testbed`, whose module docs say why this suite is not simply left out of `cargo test`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, ensure};
use crr_crds::keys;
use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};
use crr_e2e::{
    Ctx, Scenario, Version, check, container, id_and_restarts, kill_container, kubectl,
    kubectl_with_stdin, pod_ready, succeeded, timestamp, uid, wait,
};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};

const COMPLETION: Duration = Duration::from_secs(70);

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "simple",
            run: |ctx| Box::pin(simple(ctx)),
        },
        Scenario {
            name: "two-containers",
            run: |ctx| Box::pin(two_containers(ctx)),
        },
        Scenario {
            name: "post-start",
            run: |ctx| Box::pin(post_start(ctx)),
        },
        Scenario {
            name: "pre-stop",
            run: |ctx| Box::pin(pre_stop(ctx)),
        },
        Scenario {
            name: "force-recreate",
            run: |ctx| Box::pin(force_recreate(ctx, true)),
        },
        Scenario {
            name: "already-restarted",
            run: |ctx| Box::pin(force_recreate(ctx, false)),
        },
        Scenario {
            name: "v1beta1-ordered",
            run: |ctx| Box::pin(v1beta1_ordered(ctx)),
        },
        Scenario {
            name: "conversion",
            run: |ctx| Box::pin(conversion(ctx)),
        },
        Scenario {
            name: "invalid-refused",
            run: |ctx| Box::pin(invalid_refused(ctx)),
        },
        Scenario {
            name: "endpoints-drain",
            run: |ctx| Box::pin(endpoints_drain(ctx)),
        },
        Scenario {
            name: "active-deadline",
            run: |ctx| Box::pin(active_deadline(ctx)),
        },
        Scenario {
            name: "deadline-pre-stop",
            run: |ctx| Box::pin(deadline_pre_stop(ctx)),
        },
        Scenario {
            name: "target-pod-deleted",
            run: |ctx| Box::pin(target_pod_deleted(ctx)),
        },
        Scenario {
            name: "plugin-wait",
            run: |ctx| Box::pin(plugin_wait(ctx)),
        },
        Scenario {
            name: "plugin-batch",
            run: |ctx| Box::pin(plugin_batch(ctx)),
        },
        Scenario {
            name: "daemon-deleted",
            run: |ctx| Box::pin(daemon_deleted(ctx)),
        },
        Scenario {
            name: "leader-deleted",
            run: |ctx| Box::pin(leader_deleted(ctx)),
        },
        Scenario {
            name: "webhook-down",
            run: |ctx| Box::pin(webhook_down(ctx)),
        },
        Scenario {
            name: "node-scope",
            run: |ctx| Box::pin(node_scope(ctx)),
        },
        Scenario {
            name: "webhook-callers",
            run: |ctx| Box::pin(webhook_callers(ctx)),
        },
        Scenario {
            name: "review-other-namespace",
            run: |ctx| Box::pin(review_other_namespace(ctx)),
        },
        Scenario {
            name: "slow-loris",
            run: |ctx| Box::pin(slow_loris(ctx)),
        },
        Scenario {
            name: "least-privilege",
            run: |ctx| Box::pin(least_privilege(ctx)),
        },
        Scenario {
            name: "gate-without-label",
            run: |ctx| Box::pin(gate_without_label(ctx)),
        },
        Scenario {
            name: "on-failure",
            run: |ctx| Box::pin(on_failure(ctx)),
        },
        Scenario {
            name: "restart-rules-pod-never",
            run: |ctx| Box::pin(restart_rules_pod_never(ctx)),
        },
        Scenario {
            name: "restart-rules-refused",
            run: |ctx| Box::pin(restart_rules_refused(ctx)),
        },
        Scenario {
            name: "restart-rules-exit-codes",
            run: |ctx| Box::pin(restart_rules_exit_codes(ctx)),
        },
        Scenario {
            name: "native-sidecar",
            run: |ctx| Box::pin(native_sidecar(ctx)),
        },
        Scenario {
            name: "v1beta1-min-started-ttl",
            run: |ctx| Box::pin(v1beta1_min_started_ttl(ctx)),
        },
        Scenario {
            name: "grace-in-v1beta1-view",
            run: |ctx| Box::pin(grace_in_v1beta1_view(ctx)),
        },
    ]
}

/// Why a scenario is not run unless asked for (libtest's words for an ignored test).
const IGNORED: &str = "needs crr installed on the local test bed; hack/cluster-test.sh runs it";

fn main() {
    let scenarios = scenarios()
        .into_iter()
        .map(|scenario| (scenario, crr_e2e::Expect::Pass))
        .collect();
    crr_e2e::suite_main("e2e", scenarios, IGNORED, |client| async move {
        crr_e2e::installed(&client).await
    });
}

/// Pod with the readiness gate injected by the webhook (opt-in label).
fn gated(pod: &mut Value) {
    pod["metadata"]["labels"][keys::LABEL_READINESS_GATE] = json!("true");
}

fn plain(_: &mut Value) {}

// 1. Simple, through the v1alpha1 API: defaults, labels, statusContext, completion, TTL.
async fn simple(ctx: Ctx) -> anyhow::Result<()> {
    let pod = ctx.two_container_pod("simple", plain).await?;
    let (app_id, _) = id_and_restarts(&pod, "app")?;
    let (sidecar_id, _) = id_and_restarts(&pod, "sidecar")?;
    let name = ctx
        .create_crr(
            Version::V1alpha1,
            json!({
                "metadata": {"name": "simple"},
                "spec": {"podName": "simple", "containers": [{"name": "app"}],
                         "strategy": {"minStartedSeconds": 5}, "ttlSecondsAfterFinished": 3},
            }),
        )
        .await?;
    let created = ctx.crrs().get(&name).await?;
    let labels = created.labels();
    check(labels.get(keys::LABEL_POD_UID) == Some(&uid(&pod)?), || {
        format!("pod-uid label: {labels:?}")
    })?;
    check(
        labels.get(keys::LABEL_NODE_NAME).map(String::as_str)
            == pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        || format!("node-name label: {labels:?}"),
    )?;
    check(
        labels.get(keys::LABEL_ACTIVE).map(String::as_str) == Some("true"),
        || format!("active label: {labels:?}"),
    )?;
    check(
        created.strategy().failure_policy.as_deref() == Some("Fail"),
        || format!("failurePolicy not defaulted: {:?}", created.spec.strategy),
    )?;
    let context = created.spec.containers[0]
        .status_context
        .clone()
        .unwrap_or_default();
    check(context.container_id == app_id, || {
        format!("statusContext {context:?} vs {app_id}")
    })?;

    let done = ctx.wait_completed(&name, COMPLETION).await?;
    let status = done.status.clone().unwrap_or_default();
    let completion = status
        .completion_time
        .as_ref()
        .ok_or_else(|| anyhow!("no completionTime"))?;
    // The operator drops the active label once the request is complete (before the TTL).
    wait(
        ctx.crrs(),
        &name,
        Duration::from_secs(3),
        |crr: Option<&ContainerRecreateRequest>| {
            crr.is_some_and(|crr| !crr.labels().contains_key(keys::LABEL_ACTIVE))
        },
    )
    .await
    .context("active label not removed after completion")?;
    let states = &status.container_recreate_states;
    check(
        states.len() == 1
            && states[0].name == "app"
            && states[0].phase == Phase::Succeeded
            && states[0].is_killed,
        || format!("states: {states:?}"),
    )?;
    let pod = ctx
        .wait_pod("simple", "Ready", Duration::from_secs(30), pod_ready)
        .await?;
    let (new_id, restarts) = id_and_restarts(&pod, "app")?;
    check(new_id != app_id && restarts == 1, || {
        format!("app: {new_id} restarts {restarts}")
    })?;
    check(id_and_restarts(&pod, "sidecar")?.0 == sidecar_id, || {
        "sidecar was restarted".into()
    })?;
    completed_min_started_after(&pod, "app", completion, 5)?;
    // TTL 3s: the operator deletes it.
    deleted_after_ttl(&ctx, &name).await?;
    Ok(())
}

// 1b. Both containers of another pod.
async fn two_containers(ctx: Ctx) -> anyhow::Result<()> {
    let pod = ctx.two_container_pod("both", plain).await?;
    let before = [
        id_and_restarts(&pod, "app")?,
        id_and_restarts(&pod, "sidecar")?,
    ];
    let name = ctx
        .create_crr(
            Version::V1alpha1,
            json!({"metadata": {"generateName": "both-"},
                   "spec": {"podName": "both", "containers": [{"name": "app"}, {"name": "sidecar"}]}}),
        )
        .await?;
    let done = ctx.wait_completed(&name, COMPLETION).await?;
    succeeded(&done, 2)?;
    // Without orderedRecreate both go at once: the second kill follows the first within a
    // round, not after the first container is back and Ready (a second or more here).
    let kills = killing_events(&ctx, "both").await?;
    let times: Vec<_> = kills.iter().map(|(_, time, _)| *time).collect();
    check(
        times.len() == 2 && times[1].duration_since(times[0]).as_millis() < 1000,
        || format!("Killing events on the pod: {kills:?}"),
    )?;
    let pod = ctx
        .wait_pod("both", "Ready", Duration::from_secs(30), pod_ready)
        .await?;
    for (index, container) in ["app", "sidecar"].into_iter().enumerate() {
        let (id, restarts) = id_and_restarts(&pod, container)?;
        check(id != before[index].0 && restarts == 1, || {
            format!("{container}: {id} restarts {restarts}")
        })?;
    }
    Ok(())
}

/// The request completed at least `min_started` seconds (less the second `startedAt` truncates)
/// after the new `container` started.
fn completed_min_started_after(
    pod: &Pod,
    container_name: &str,
    completion: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    min_started: i64,
) -> anyhow::Result<()> {
    let started = container(pod, container_name)?
        .state
        .as_ref()
        .and_then(|state| state.running.as_ref())
        .and_then(|running| running.started_at.as_ref())
        .ok_or_else(|| anyhow!("{container_name} not running"))?;
    let gap = timestamp(completion).duration_since(timestamp(started));
    check(gap.as_secs() + 1 >= min_started, || {
        format!(
            "completed {gap:?} after the new {container_name} started (minStartedSeconds {min_started})"
        )
    })
}

/// The operator deletes the request after its `ttlSecondsAfterFinished` (a few seconds here).
/// No Event says so: it would be about an object that is gone.
async fn deleted_after_ttl(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    wait(
        ctx.crrs(),
        name,
        Duration::from_secs(20),
        |crr: Option<&ContainerRecreateRequest>| crr.is_none(),
    )
    .await
    .context("CRR not deleted after ttlSecondsAfterFinished")?;
    Ok(())
}

/// The node daemon's `Killing` Events on pod `pod`: (container named in the note, event time,
/// note), oldest first.
async fn killing_events(
    ctx: &Ctx,
    pod: &str,
) -> anyhow::Result<Vec<(String, jiff::Timestamp, String)>> {
    let mut found: Vec<(String, jiff::Timestamp, String)> = ctx
        .pod_events(pod, "Killing")
        .await?
        .into_iter()
        .filter(|event| {
            event
                .reporting_controller
                .as_deref()
                .is_some_and(|c| c.contains("crr"))
        })
        .filter_map(|event| {
            let note = event.note.clone().unwrap_or_default();
            let container = note.split_whitespace().nth(2)?.to_owned();
            let time = event
                .event_time
                .as_ref()
                .map(|time| time.0)
                .or_else(|| event.deprecated_first_timestamp.as_ref().map(|time| time.0))?;
            Some((container, time, note))
        })
        .collect();
    found.sort_by_key(|(_, time, _)| *time);
    Ok(found)
}

// 2. postStart runs again in the new container; the emptyDir survives.
async fn post_start(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("hooks", |pod| {
        pod["spec"]["containers"][0]["lifecycle"] =
            json!({"postStart": {"exec": {"command": ["sh", "-c", "echo started >> /data/post-start"]}}});
    })
    .await?;
    ctx.exec("hooks", "sidecar", "echo kept > /data/marker")
        .await?;
    let name = ctx
        .create_crr(Version::V1alpha1, json!({"metadata": {"name": "hooks"}, "spec": {"podName": "hooks", "containers": [{"name": "app"}]}}))
        .await?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)?;
    let runs = ctx.exec("hooks", "sidecar", "cat /data/post-start").await?;
    check(runs.lines().count() == 2, || {
        format!("postStart ran {} times: {runs:?}", runs.lines().count())
    })?;
    let kept = ctx.exec("hooks", "sidecar", "cat /data/marker").await?;
    check(kept.trim() == "kept", || {
        format!("emptyDir content lost: {kept:?}")
    })?;
    Ok(())
}

// 3. preStop: injected from the pod, run by the daemon before the kill.
async fn pre_stop(ctx: Ctx) -> anyhow::Result<()> {
    // The hook takes 3 s of the pod's 7 s grace period: the stop gets the 4 s left.
    ctx.two_container_pod("prestop", |pod| {
        pod["spec"]["terminationGracePeriodSeconds"] = json!(7);
        pod["spec"]["containers"][0]["lifecycle"] = json!({"preStop": {"exec": {"command":
            ["sh", "-c", "echo stopping >> /data/pre-stop; sleep 3"]}}});
    })
    .await?;
    let name = ctx
        .create_crr(Version::V1beta1, json!({"metadata": {"name": "prestop"}, "spec": {"podName": "prestop", "containers": [{"name": "app"}]}}))
        .await?;
    let created = ctx.crrs().get(&name).await?;
    check(
        created.spec.containers[0]
            .pre_stop
            .as_ref()
            .and_then(|hook| hook.exec.as_ref())
            .is_some(),
        || format!("preStop not injected: {:?}", created.spec.containers[0]),
    )?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)?;
    let runs = ctx.exec("prestop", "sidecar", "cat /data/pre-stop").await?;
    check(runs.lines().count() == 1, || {
        format!("preStop ran {} times: {runs:?}", runs.lines().count())
    })?;
    let pod = ctx.pods().get("prestop").await?;
    check(id_and_restarts(&pod, "app")?.1 == 1, || {
        "app not restarted once".into()
    })?;
    let kills = killing_events(&ctx, "prestop").await?;
    check(
        kills.len() == 1 && kills[0].2.contains("grace period 4s"),
        || format!("the hook's 3 s not deducted from the 7 s grace: {kills:?}"),
    )
}

// 4. A container restarted after the CRR was made: forceRecreate kills it again (restartCount
// 2); without it, the restart counts as the recreate (restartCount 1).
async fn force_recreate(ctx: Ctx, force: bool) -> anyhow::Result<()> {
    let pod = ctx.two_container_pod("force", gated).await?;
    let (app_id, _) = id_and_restarts(&pod, "app")?;
    // The unready grace holds the daemon back for 8s, time for the crash to happen first.
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "force"},
                   "spec": {"podName": "force", "containers": [{"name": "app"}],
                            "strategy": {"forceRecreate": force, "unreadyGracePeriodSeconds": 8}}}),
        )
        .await?;
    kill_container(&app_id).await?;
    ctx.wait_pod("force", "restarted", Duration::from_secs(30), |pod| {
        id_and_restarts(pod, "app").is_ok_and(|(_, restarts)| restarts == 1)
    })
    .await?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)?;
    let pod = ctx
        .wait_pod("force", "Ready", Duration::from_secs(30), pod_ready)
        .await?;
    let expected = if force { 2 } else { 1 };
    let (_, restarts) = id_and_restarts(&pod, "app")?;
    check(restarts == expected, || {
        format!("forceRecreate={force}: restartCount {restarts}, want {expected}")
    })
}

// 5. v1beta1 with orderedRecreate: the sidecar goes only once app is back and Ready; the
// snapshot is in the status.
async fn v1beta1_ordered(ctx: Ctx) -> anyhow::Result<()> {
    let pod = ctx.two_container_pod("ordered", plain).await?;
    let (app_id, _) = id_and_restarts(&pod, "app")?;
    let (sidecar_id, _) = id_and_restarts(&pod, "sidecar")?;
    // The first pod state the API server shows with the sidecar recreated, by watch, while the
    // request runs.
    let pods = ctx.pods();
    let first_new_sidecar = async {
        let config = watcher::Config::default().fields("metadata.name=ordered");
        let mut stream = watcher(pods, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        let mut states = 0usize;
        let watching = async {
            while let Some(event) = stream.next().await {
                match event {
                    Ok(pod) => {
                        states += 1;
                        let recreated = id_and_restarts(&pod, "sidecar")
                            .is_ok_and(|(id, _)| id != sidecar_id && !id.is_empty());
                        if recreated {
                            return Some(pod);
                        }
                    }
                    Err(error) => eprintln!("e2e: pod watch: {error}"),
                }
            }
            None
        };
        let found = tokio::time::timeout(COMPLETION, watching).await;
        match found {
            Ok(Some(pod)) => Ok(pod),
            Ok(None) => Err(anyhow!("the pod watch ended ({states} pod states)")),
            Err(_) => Err(anyhow!(
                "never saw the sidecar recreated within {}s ({states} pod states)",
                COMPLETION.as_secs()
            )),
        }
    };
    let recreate = async {
        let name = ctx
            .create_crr(
                Version::V1beta1,
                json!({"metadata": {"name": "ordered"},
                       "spec": {"podName": "ordered", "containers": [{"name": "app"}, {"name": "sidecar"}],
                                "strategy": {"orderedRecreate": true}}}),
            )
            .await?;
        let done = ctx.wait_completed(&name, COMPLETION).await?;
        succeeded(&done, 2)?;
        let status = done.status.clone().unwrap_or_default();
        // The snapshot holds each named container as the pod shows it at completion: the new
        // container ID, Ready, restarted once.
        let pod = ctx.pods().get("ordered").await?;
        let mut snapshot = status.container_status_snapshot.clone();
        snapshot.sort_by(|a, b| a.name.cmp(&b.name));
        let expected: Vec<(String, String, bool, i32)> = ["app", "sidecar"]
            .into_iter()
            .map(|name| {
                let (id, restarts) = id_and_restarts(&pod, name)?;
                Ok((name.to_owned(), id, true, restarts))
            })
            .collect::<anyhow::Result<_>>()?;
        let got: Vec<(String, String, bool, i32)> = snapshot
            .iter()
            .map(|entry| {
                (
                    entry.name.clone(),
                    entry.container_id.clone(),
                    entry.ready,
                    entry.restart_count,
                )
            })
            .collect();
        check(
            got == expected
                && expected.iter().all(|(_, id, _, restarts)| {
                    *restarts == 1 && id != &app_id && id != &sidecar_id
                }),
            || format!("containerStatusSnapshot {got:?}, pod {expected:?}"),
        )
    };
    let (first_new_sidecar, ()) = tokio::try_join!(first_new_sidecar, recreate)?;
    let app = container(&first_new_sidecar, "app")?;
    check(
        app.container_id.as_deref().is_some_and(|id| id != app_id) && app.ready,
        || {
            format!(
                "sidecar recreated while app was {:?} ready={}",
                app.container_id, app.ready
            )
        },
    )
}

// 6. One object, two versions: typed status on the v1beta1 view, legacy annotations on v1alpha1.
async fn conversion(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("convert", gated).await?;
    let alpha = ctx
        .create_crr(Version::V1alpha1, json!({"metadata": {"name": "alpha"}, "spec": {"podName": "convert", "containers": [{"name": "app"}]}}))
        .await?;
    ctx.wait_completed(&alpha, COMPLETION).await?;
    let beta_view = ctx.crrs_in(Version::V1beta1).get(&alpha).await?;
    let phase = beta_view.data["status"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    check(phase == "Completed", || {
        format!("v1beta1 view phase {phase:?}")
    })?;
    let annotations = beta_view.annotations();
    for legacy in [
        keys::ANNOTATION_SYNC_CONTAINER_STATUSES,
        keys::ANNOTATION_UNREADY_ACQUIRED,
    ] {
        check(!annotations.contains_key(legacy), || {
            format!("v1beta1 view carries {legacy}")
        })?;
    }

    let beta = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "beta"},
                   "spec": {"podName": "convert", "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": 2}}}),
        )
        .await?;
    let graced = wait(
        ctx.crrs(),
        &beta,
        Duration::from_secs(30),
        |crr: Option<&ContainerRecreateRequest>| {
            crr.is_some_and(|crr| crr.condition(keys::CONDITION_PRE_RECREATE_GRACE).is_some())
        },
    )
    .await?
    .ok_or_else(|| anyhow!("CRR beta vanished"))?;
    let condition_time = graced
        .condition(keys::CONDITION_PRE_RECREATE_GRACE)
        .map(|condition| timestamp(&condition.last_transition_time))
        .ok_or_else(|| anyhow!("no PreRecreateGrace condition"))?;
    let alpha_view = ctx.crrs_in(Version::V1alpha1).get(&beta).await?;
    let acquired = alpha_view
        .annotations()
        .get(keys::ANNOTATION_UNREADY_ACQUIRED)
        .ok_or_else(|| {
            anyhow!(
                "v1alpha1 view lacks {}: {:?}",
                keys::ANNOTATION_UNREADY_ACQUIRED,
                alpha_view.annotations()
            )
        })?;
    let acquired: jiff::Timestamp = acquired
        .parse()
        .with_context(|| format!("annotation {acquired:?}"))?;
    check(acquired.as_second() == condition_time.as_second(), || {
        format!("annotation {acquired} vs condition {condition_time}")
    })?;
    ctx.wait_completed(&beta, COMPLETION).await?;
    Ok(())
}

// Invalid requests are refused by the webhook with a message kubectl shows.
async fn invalid_refused(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("target", plain).await?;
    let cases = [
        (
            "missing-pod",
            json!({"podName": "nope", "containers": [{"name": "app"}]}),
            "nope",
        ),
        (
            "unknown-container",
            json!({"podName": "target", "containers": [{"name": "ghost"}]}),
            "ghost",
        ),
        (
            "duplicate",
            json!({"podName": "target", "containers": [{"name": "app"}, {"name": "app"}]}),
            "app",
        ),
        (
            "no-containers",
            json!({"podName": "target", "containers": []}),
            "containers",
        ),
    ];
    for (name, spec, expected) in cases {
        let manifest = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": name, "namespace": ctx.namespace}, "spec": spec,
        });
        let output = kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string())).await?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(!output.status.success(), "{name}: accepted");
        check(
            stderr.contains("denied the request") && stderr.contains(expected),
            || format!("{name}: {stderr}"),
        )?;
    }
    // The schema's maximums, from the API server itself (crds/src/limits.rs).
    let too_long = json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
        "metadata": {"name": "too-long", "namespace": ctx.namespace},
        "spec": {"podName": "target", "containers": [{"name": "app"}],
                 "strategy": {"unreadyGracePeriodSeconds": 9_223_372_036_854_775_000_i64}},
    });
    let output = kubectl_with_stdin(&["apply", "-f", "-"], Some(&too_long.to_string())).await?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(!output.status.success(), "too-long: accepted");
    check(
        stderr.contains("unreadyGracePeriodSeconds") && stderr.contains("less than or equal to"),
        || format!("too-long: {stderr}"),
    )?;
    Ok(())
}

// The readiness gate takes the pod out of the Service's EndpointSlice during the unready grace
// and puts it back afterwards.
async fn endpoints_drain(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("web", gated).await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }))?;
    Api::<Service>::namespaced(ctx.client.clone(), &ctx.namespace)
        .create(&PostParams::default(), &service)
        .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let mut endpoint = EndpointReadiness::watch(slices, "web");
    endpoint
        .until("endpoint never ready", Duration::from_secs(30), |ready| {
            ready == Some(true)
        })
        .await?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "drain"},
                   "spec": {"podName": "web", "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": 3}}}),
        )
        .await?;
    // The grace comes before the kill, so the endpoint leaves ready before the request completes;
    // the watch is read meanwhile, so no state is missed.
    tokio::try_join!(
        endpoint.until("endpoint never left ready", COMPLETION, |ready| {
            ready != Some(true)
        }),
        async { succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1) },
    )?;
    endpoint
        .until(
            "endpoint not ready again after completion",
            Duration::from_secs(30),
            |ready| ready == Some(true),
        )
        .await
}

/// Whether the first endpoint with a ready condition among `slices` is ready (`None`: no endpoint
/// says).
fn endpoint_ready<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> Option<bool> {
    slices
        .into_iter()
        .flat_map(|slice| slice.endpoints.iter())
        .find_map(|endpoint| {
            endpoint
                .conditions
                .as_ref()
                .and_then(|conditions| conditions.ready)
        })
}

/// A Service's endpoint readiness, change by change, from a watch of its EndpointSlices.
struct EndpointReadiness {
    events: BoxStream<'static, Result<watcher::Event<EndpointSlice>, watcher::Error>>,
    /// The slices of a (re)listing in progress.
    listing: BTreeMap<String, EndpointSlice>,
    /// The slices as of the last event read.
    slices: BTreeMap<String, EndpointSlice>,
    /// The readiness after the last change read, for failure messages.
    last: Option<Option<bool>>,
}

impl EndpointReadiness {
    fn watch(api: Api<EndpointSlice>, service: &str) -> Self {
        let config =
            watcher::Config::default().labels(&format!("kubernetes.io/service-name={service}"));
        Self {
            events: watcher(api, config).default_backoff().boxed(),
            listing: BTreeMap::new(),
            slices: BTreeMap::new(),
            last: None,
        }
    }

    /// Reads the watch until the readiness after a change (or after the first complete listing)
    /// is one `wanted` accepts; fails with `what` after `within`.
    async fn until(
        &mut self,
        what: &str,
        within: Duration,
        wanted: impl Fn(Option<bool>) -> bool,
    ) -> anyhow::Result<()> {
        let reading = async {
            while let Some(event) = self.events.next().await {
                let changed = match event {
                    Ok(watcher::Event::Init) => {
                        self.listing.clear();
                        false
                    }
                    Ok(watcher::Event::InitApply(slice)) => {
                        self.listing.insert(slice.name_any(), slice);
                        false
                    }
                    Ok(watcher::Event::InitDone) => {
                        self.slices = std::mem::take(&mut self.listing);
                        true
                    }
                    Ok(watcher::Event::Apply(slice)) => {
                        self.slices.insert(slice.name_any(), slice);
                        true
                    }
                    Ok(watcher::Event::Delete(slice)) => {
                        self.slices.remove(&slice.name_any());
                        true
                    }
                    Err(error) => {
                        eprintln!("e2e: EndpointSlice watch: {error}");
                        false
                    }
                };
                if changed {
                    let ready = endpoint_ready(self.slices.values());
                    self.last = Some(ready);
                    if wanted(ready) {
                        return true;
                    }
                }
            }
            false
        };
        let reached = tokio::time::timeout(within, reading).await;
        match reached {
            Ok(true) => Ok(()),
            Ok(false) => Err(anyhow!("{what}: the EndpointSlice watch ended")),
            Err(_) => Err(anyhow!(
                "{what} within {}s (readiness after the last change: {:?})",
                within.as_secs(),
                self.last
            )),
        }
    }
}

// activeDeadlineSeconds ends a request that cannot finish in time.
async fn active_deadline(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("slow", plain).await?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "deadline"},
                   "spec": {"podName": "slow", "containers": [{"name": "app"}], "activeDeadlineSeconds": 5,
                            "strategy": {"minStartedSeconds": 120}}}),
        )
        .await?;
    let done = ctx.wait_completed(&name, Duration::from_secs(40)).await?;
    let message = done
        .status
        .and_then(|status| status.message)
        .unwrap_or_default();
    check(message.contains("activeDeadlineSeconds"), || {
        format!("message {message:?}")
    })
}

// OpenKruise's own e2e block with `activeDeadlineSeconds: 3`: `app` has an 8 s preStop hook,
// one request names `app` and `sidecar`. The deadline completes the request at about 3 s but
// cuts nothing short: the hook runs its 8 s, `app`'s kill under way finishes and is recorded,
// and no new kill starts, so `sidecar` is never killed. The states stay as the daemon wrote
// them; the outcome is in the message and the `Succeeded` condition.
async fn deadline_pre_stop(ctx: Ctx) -> anyhow::Result<()> {
    let hook = "date +%s >> /data/hook; sleep 8; date +%s >> /data/hook";
    let pod = ctx
        .two_container_pod("deadline-hook", |pod| {
            pod["spec"]["terminationGracePeriodSeconds"] = json!(30);
            pod["spec"]["containers"][0]["lifecycle"] =
                json!({"preStop": {"exec": {"command": ["sh", "-c", hook]}}});
        })
        .await?;
    let (sidecar_id, _) = id_and_restarts(&pod, "sidecar")?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "deadline-hook"},
                   "spec": {"podName": "deadline-hook", "activeDeadlineSeconds": 3,
                            "containers": [{"name": "app"}, {"name": "sidecar"}]}}),
        )
        .await?;
    let done = ctx.wait_completed(&name, Duration::from_secs(40)).await?;
    let status = done.status.clone().unwrap_or_default();
    check(
        status.message.as_deref() == Some("recreating has exceeded the activeDeadlineSeconds"),
        || format!("message {:?}", status.message),
    )?;
    let created = done
        .metadata
        .creation_timestamp
        .as_ref()
        .context("no creationTimestamp")?
        .0;
    let completed = status
        .completion_time
        .as_ref()
        .context("no completionTime")?
        .0;
    let took = completed.duration_since(created).as_secs_f64();
    check((3.0..=6.0).contains(&took), || {
        format!("completed {took}s after creation, not at the 3 s deadline")
    })?;
    let condition = done
        .condition(keys::CONDITION_SUCCEEDED)
        .context("no Succeeded condition")?;
    check(
        condition.status == "False"
            && condition.reason == "ActiveDeadlineExceeded"
            && condition.message.contains("not recreated: app"),
        || format!("Succeeded condition {condition:?}"),
    )?;

    // The hook runs on past the deadline, then the kill: app restarts once.
    let pod = ctx
        .wait_pod(
            "deadline-hook",
            "app restarted",
            Duration::from_secs(60),
            |pod| id_and_restarts(pod, "app").is_ok_and(|(_, restarts)| restarts >= 1),
        )
        .await?;
    let stamps = ctx
        .exec("deadline-hook", "sidecar", "cat /data/hook")
        .await?;
    let stamps: Vec<i64> = stamps
        .lines()
        .map(|line| line.trim().parse())
        .collect::<Result<_, _>>()
        .with_context(|| format!("the hook's stamps {stamps:?}"))?;
    check(stamps.len() == 2 && stamps[1] - stamps[0] >= 8, || {
        format!("the preStop hook did not run its 8 s once: stamps {stamps:?}")
    })?;

    // The daemon records the kill it finished: app Recreating and killed, sidecar Pending.
    let expected = vec![
        ("app".to_owned(), Phase::Recreating, true),
        ("sidecar".to_owned(), Phase::Pending, false),
    ];
    let states_of = |crr: &ContainerRecreateRequest| -> Vec<(String, Phase, bool)> {
        crr.status
            .iter()
            .flat_map(|status| &status.container_recreate_states)
            .map(|state| (state.name.clone(), state.phase, state.is_killed))
            .collect()
    };
    let recorded = wait(
        ctx.crrs(),
        &name,
        Duration::from_secs(30),
        |crr: Option<&ContainerRecreateRequest>| crr.is_some_and(|crr| states_of(crr) == expected),
    )
    .await
    .with_context(|| format!("the states never became {expected:?}"))?
    .context("the request vanished")?;
    check(recorded.is_completed(), || {
        "the state write moved the request back from Completed".into()
    })?;

    // No new kill after completion: sidecar is never killed, app only once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pod = ctx.pods().get(&pod.name_any()).await?;
    let (app_restarts, sidecar) = (
        id_and_restarts(&pod, "app")?.1,
        id_and_restarts(&pod, "sidecar")?,
    );
    check(app_restarts == 1 && sidecar == (sidecar_id, 0), || {
        format!("app restarts {app_restarts}, sidecar {sidecar:?}: only app, once")
    })
}

// The target pod deleted mid-flight: the request completes with a message.
async fn target_pod_deleted(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("doomed", gated).await?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "doomed"},
                   "spec": {"podName": "doomed", "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": 30}}}),
        )
        .await?;
    ctx.pods()
        .delete("doomed", &DeleteParams::default().grace_period(0))
        .await?;
    let done = ctx.wait_completed(&name, Duration::from_secs(40)).await?;
    let message = done
        .status
        .and_then(|status| status.message)
        .unwrap_or_default();
    check(!message.is_empty(), || "completed without a message".into())
}

/// What the slow preStop of `daemon_deleted` writes to its container's log as it starts.
const PRE_STOP_STARTED: &str = "e2e: preStop started";

// The node daemon's pod deleted while it runs a (slow) preStop: the DaemonSet's next pod
// finishes the request, and the container is killed exactly once.
async fn daemon_deleted(ctx: Ctx) -> anyhow::Result<()> {
    // The hook announces itself on the container's own stdout (PID 1's), so its start shows in
    // the container log, then takes 4 s: the window in which the daemon is deleted.
    let hook = format!(
        "echo '{PRE_STOP_STARTED}' > /proc/1/fd/1; sleep 4; echo stopping >> /data/pre-stop"
    );
    ctx.two_container_pod("survivor", |pod| {
        pod["spec"]["containers"][0]["lifecycle"] =
            json!({"preStop": {"exec": {"command": ["sh", "-c", hook]}}});
    })
    .await?;
    let name = ctx
        .create_crr(Version::V1beta1, json!({"metadata": {"name": "survivor"}, "spec": {"podName": "survivor", "containers": [{"name": "app"}]}}))
        .await?;
    ctx.log_line("survivor", "app", PRE_STOP_STARTED, Duration::from_secs(60))
        .await
        .context("the daemon never started the preStop hook")?;
    let output = kubectl(&[
        "-n",
        crr_e2e::SYSTEM_NAMESPACE,
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=crr-node-daemon",
        "--wait=false",
    ])
    .await?;
    ensure!(
        output.status.success(),
        "deleting the daemon pod: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    succeeded(
        &ctx.wait_completed(&name, Duration::from_secs(120)).await?,
        1,
    )?;
    let pod = ctx
        .wait_pod("survivor", "Ready", Duration::from_secs(30), pod_ready)
        .await?;
    let (_, restarts) = id_and_restarts(&pod, "app")?;
    check(restarts == 1, || format!("app restarted {restarts} times"))
}

// The operator's leader deleted mid-flight: the other replica takes over, the request completes
// and the pod's readiness comes back.
async fn leader_deleted(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("led", gated).await?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "led"},
                   "spec": {"podName": "led", "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": 4}}}),
        )
        .await?;
    delete_operator_leader(&ctx).await?;
    succeeded(
        &ctx.wait_completed(&name, Duration::from_secs(120)).await?,
        1,
    )?;
    ctx.wait_pod("led", "Ready again", Duration::from_secs(60), pod_ready)
        .await?;
    Ok(())
}

/// Deletes the operator's leader pod (the Lease holder); its Deployment makes a new one.
async fn delete_operator_leader(ctx: &Ctx) -> anyhow::Result<()> {
    let leader = crr_e2e::faults::operator_leader(&ctx.client)
        .await?
        .name_any();
    Api::<Pod>::namespaced(ctx.client.clone(), crr_e2e::SYSTEM_NAMESPACE)
        .delete(&leader, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting leader {leader}"))?;
    Ok(())
}

/// Runs the test bed's kubectl and fails with its stderr when it fails.
async fn kubectl_ok(args: &[&str]) -> anyhow::Result<String> {
    let output = crr_e2e::kubectl(args).await?;
    ensure!(
        output.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Scales the webhook to 0 and waits until its pods are gone; returns its replica count.
async fn scale_webhook_to_zero() -> anyhow::Result<String> {
    let deployment = ["-n", crr_e2e::SYSTEM_NAMESPACE, "deployment/crr-webhook"];
    let replicas = kubectl_ok(&[
        "get",
        deployment[0],
        deployment[1],
        deployment[2],
        "-o",
        "jsonpath={.spec.replicas}",
    ])
    .await?;
    kubectl_ok(&[
        "scale",
        deployment[0],
        deployment[1],
        deployment[2],
        "--replicas=0",
    ])
    .await?;
    kubectl_ok(&[
        "wait",
        "-n",
        crr_e2e::SYSTEM_NAMESPACE,
        "--for=delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=crr-webhook",
        "--timeout=90s",
    ])
    .await?;
    Ok(replicas.trim().to_owned())
}

/// Scales the webhook back to `replicas` and waits for the rollout.
async fn restore_webhook(replicas: &str) -> anyhow::Result<()> {
    let deployment = ["-n", crr_e2e::SYSTEM_NAMESPACE, "deployment/crr-webhook"];
    let replicas = format!("--replicas={replicas}");
    kubectl_ok(&[
        "scale",
        deployment[0],
        deployment[1],
        deployment[2],
        &replicas,
    ])
    .await?;
    kubectl_ok(&[
        "rollout",
        "status",
        deployment[0],
        deployment[1],
        deployment[2],
        "--timeout=120s",
    ])
    .await?;
    Ok(())
}

// Only the API server may call the admission hooks: the test bed's webhook requires the API
// server's client certificate (manifests/overlays/local-client-auth). A review forged by a pod,
// naming a pod of its own namespace, gets 403 and nothing of that pod; a create through the
// API server, which presents the certificate, is admitted.
async fn webhook_callers(ctx: Ctx) -> anyhow::Result<()> {
    let target = ctx
        .two_container_pod("callers", |pod| {
            pod["spec"]["containers"][0]["lifecycle"] = json!({"preStop": {"exec": {"command":
                ["sh", "-c", "echo secret-drain-token"]}}});
        })
        .await?;
    let forged = forged_create_review(
        "forged",
        &ctx.namespace,
        &ctx.namespace,
        &target.name_any(),
        "app",
    );
    let (status, log) = call_webhook(&ctx, "forger", &forged, false).await?;
    check(status == "403", || {
        format!("a forged review from a pod got HTTP {status:?}, not 403: {log}")
    })?;
    check(
        !log.contains("secret-drain-token") && !log.contains("containerd://"),
        || format!("the refusal carried the pod's data: {log}"),
    )?;
    // Through the API server (with its client certificate), a request is admitted and works.
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "callers"},
                   "spec": {"podName": "callers", "containers": [{"name": "sidecar"}]}}),
        )
        .await?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)
}

/// A hand-made AdmissionReview of a CREATE by "attacker": request `name` in `namespace`, whose
/// object sits in `object_namespace` and names `pod`'s `container`.
fn forged_create_review(
    name: &str,
    namespace: &str,
    object_namespace: &str,
    pod: &str,
    container: &str,
) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": name,
            "kind": {"group": "apps.kruise.io", "version": "v1beta1", "kind": "ContainerRecreateRequest"},
            "resource": {"group": "apps.kruise.io", "version": "v1beta1", "resource": "containerrecreaterequests"},
            "name": name, "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "attacker"},
            "object": {"apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
                       "metadata": {"name": name, "namespace": object_namespace},
                       "spec": {"podName": pod, "containers": [{"name": container}]}}
        }
    })
}

/// Posts `review` to the webhook's mutating endpoint from a pod named `caller` (curl, through
/// the webhook's Service), with the API server's own client certificate when `as_api_server`;
/// returns the HTTP status and the pod's whole output (status line, then the answer).
async fn call_webhook(
    ctx: &Ctx,
    caller: &str,
    review: &Value,
    as_api_server: bool,
) -> anyhow::Result<(String, String)> {
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), crr_e2e::SYSTEM_NAMESPACE);
    let address = services
        .get("crr-webhook")
        .await?
        .spec
        .and_then(|spec| spec.cluster_ip)
        .context("the crr-webhook Service has no cluster IP")?;
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": caller},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "curl", "image": "crr.local/curl:7.88",
                                 "imagePullPolicy": "Never"}]},
    });
    let client = if as_api_server {
        let (cert, key) = crr_e2e::api_server_webhook_client();
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
        };
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": format!("{caller}-client")},
                            "stringData": {"tls.crt": read(&cert)?, "tls.key": read(&key)?}});
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(ctx.client.clone(), &ctx.namespace);
        secrets
            .create(&PostParams::default(), &serde_json::from_value(secret)?)
            .await?;
        pod["spec"]["volumes"] =
            json!([{"name": "client", "secret": {"secretName": format!("{caller}-client")}}]);
        pod["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "client", "mountPath": "/client"}]);
        "--cert /client/tls.crt --key /client/tls.key"
    } else {
        ""
    };
    let script = format!(
        "curl -sk {client} -o /tmp/answer -w '%{{http_code}}\\n' -X POST -H 'Content-Type: application/json' \\
           --data '{review}' https://{address}:443/mutate-apps-kruise-io-v1alpha1-containerrecreaterequest; \\
         cat /tmp/answer; echo; echo done"
    );
    pod["spec"]["containers"][0]["command"] = json!(["sh", "-c", script]);
    ctx.pods()
        .create(&PostParams::default(), &serde_json::from_value(pod)?)
        .await?;
    ctx.wait_pod(caller, "finished", Duration::from_secs(90), |pod| {
        pod.status
            .as_ref()
            .and_then(|status| status.phase.as_deref())
            .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
    })
    .await?;
    let log = ctx.pods().logs(caller, &Default::default()).await?;
    let status = log.lines().next().unwrap_or_default().trim().to_owned();
    Ok((status, log))
}

// With the API server's own client certificate (what mTLS admits), a review that names the
// test's namespace but carries an object of another namespace is refused before any lookup:
// the answer carries nothing of that namespace's pod.
async fn review_other_namespace(ctx: Ctx) -> anyhow::Result<()> {
    let daemons =
        crr_e2e::faults::component_pods(&ctx.client, "app.kubernetes.io/name=crr-node-daemon")
            .await?;
    let victim = daemons.first().context("no node daemon pod")?.name_any();
    let review = forged_create_review(
        "other",
        &ctx.namespace,
        crr_e2e::SYSTEM_NAMESPACE,
        &victim,
        "node-daemon",
    );
    let (status, log) = call_webhook(&ctx, "other-namespace", &review, true).await?;
    check(status == "200", || {
        format!("the API server's certificate was not admitted (HTTP {status:?}): {log}")
    })?;
    check(
        log.contains("\"allowed\":false")
            && log.contains("is not the admission request's namespace"),
        || format!("a review naming another namespace was not refused: {log}"),
    )?;
    check(!log.contains("containerd://"), || {
        format!("the refusal carried the other namespace's pod: {log}")
    })
}

/// The webhook's cap on connections from one peer address (`crr_webhook::run::
/// WEBHOOK_CONNECTIONS_PER_PEER`): the slow-loris scenario opens more than this to each replica.
const WEBHOOK_CONNECTIONS_PER_PEER: usize = 256;
/// Connections the slow-loris pod opens to each webhook replica, over the per-peer cap.
const SLOW_LORIS_CONNECTIONS: usize = 300;

/// The connections from `peer` that the webhook process `pid` holds: the established ones on
/// :9443 in its network namespace, less those still in the listener's accept queue (the kernel
/// completes handshakes before the server accepts them, and the server closes one over its cap
/// only once it has accepted it). One `ss` call reads both.
async fn connections_from(pid: u32, peer: &str) -> anyhow::Result<usize> {
    let output = tokio::process::Command::new("nsenter")
        .args([
            "-t",
            &pid.to_string(),
            "-n",
            "ss",
            "-Htn",
            "state",
            "established",
            "state",
            "listening",
            "( sport = :9443 )",
        ])
        .output()
        .await
        .context("running ss in a webhook pod's network namespace")?;
    ensure!(
        output.status.success(),
        "ss in the network namespace of pid {pid}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(held_connections(
        &String::from_utf8_lossy(&output.stdout),
        peer,
    ))
}

/// From `ss -Htn state established state listening` lines (state, Recv-Q, Send-Q, local, peer):
/// the established connections from `peer` less the listener's accept queue (its Recv-Q).
fn held_connections(ss: &str, peer: &str) -> usize {
    let peer_prefix = format!("{peer}:");
    let (mut established, mut queued) = (0usize, 0usize);
    for line in ss.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.first().copied() {
            Some("LISTEN") => {
                queued += fields
                    .get(1)
                    .and_then(|q| q.parse::<usize>().ok())
                    .unwrap_or(0);
            }
            Some("ESTAB")
                if fields
                    .get(4)
                    .is_some_and(|remote| remote.starts_with(&peer_prefix)) =>
            {
                established += 1;
            }
            _ => {}
        }
    }
    established.saturating_sub(queued)
}

// Slow-loris against the webhook from the pod network: one pod opens more connections to each
// webhook replica than the per-peer cap allows, each trickling a conversion body (the endpoint
// open without a client certificate) a byte a second, again and again. Each replica holds at
// most the cap from that pod, and meanwhile a create (mutating and validating hooks) and a
// v1alpha1 read (conversion) through the API server, a different peer, still succeed, and the
// request recreates its container.
async fn slow_loris(ctx: Ctx) -> anyhow::Result<()> {
    let target = ctx.two_container_pod("loris-target", |_| {}).await?;
    let webhook_pods: Api<Pod> = Api::namespaced(ctx.client.clone(), crr_e2e::SYSTEM_NAMESPACE);
    let replicas = webhook_pods
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=crr-webhook"))
        .await?
        .items;
    let addresses: Vec<String> = replicas
        .iter()
        .filter_map(|pod| pod.status.as_ref()?.pod_ip.clone())
        .collect();
    ensure!(!addresses.is_empty(), "no webhook pod has an IP");
    let urls: Vec<String> = addresses
        .iter()
        .flat_map(|address| {
            std::iter::repeat_n(
                format!("https://{address}:9443/convert"),
                SLOW_LORIS_CONNECTIONS,
            )
        })
        .collect();
    // curl --parallel: one process, a connection per URL (HTTP/1.1), each uploading a 64 KiB
    // body at 1 byte a second; when the server has cut them all off, start over.
    let script = format!(
        "head -c 65536 /dev/zero > /tmp/body; echo attacking; \\
         while true; do curl -sk --http1.1 -Z --parallel-max {max} --limit-rate 1 -X POST \\
           -H 'Content-Type: application/json' --data-binary @/tmp/body {urls} >/dev/null 2>&1; done",
        max = urls.len(),
        urls = urls.join(" "),
    );
    let attacker: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "loris"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "curl", "image": "crr.local/curl:7.88",
                                 "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", script]}]},
    }))?;
    ctx.pods().create(&PostParams::default(), &attacker).await?;
    let attacker = ctx
        .wait_pod(
            "loris",
            "running with an IP",
            Duration::from_secs(90),
            |pod| {
                pod.status.as_ref().is_some_and(|status| {
                    status.phase.as_deref() == Some("Running") && status.pod_ip.is_some()
                })
            },
        )
        .await?;
    let attacker_ip = attacker
        .status
        .and_then(|status| status.pod_ip)
        .context("the attacker pod has no IP")?;
    // Every webhook process on this machine: the replicas' network namespaces.
    let pids = crr_e2e::measure::pids_of("crr-webhook");
    ensure!(
        pids.len() == replicas.len(),
        "found webhook processes {pids:?} for {} replicas",
        replicas.len()
    );
    // Wait until the attack holds connections on every replica, and never more than the cap. A
    // reading can catch a connection over the cap in the moment between its accept and its close
    // (the server closes it at once; a CI run read 258 once): a replica fails on two readings in
    // a row over the cap, 500 ms apart, and the wait ends on none pending.
    let mut held = vec![0; pids.len()];
    let mut over: Vec<Option<usize>> = vec![None; pids.len()];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        for (index, pid) in pids.iter().enumerate() {
            let now = connections_from(*pid, &attacker_ip).await?;
            if now <= WEBHOOK_CONNECTIONS_PER_PEER {
                over[index] = None;
                held[index] = held[index].max(now);
                continue;
            }
            check(over[index].is_none(), || {
                format!(
                    "a webhook replica holds {} then {now} connections from one pod, over the cap of {WEBHOOK_CONNECTIONS_PER_PEER}",
                    over[index].unwrap_or_default()
                )
            })?;
            over[index] = Some(now);
        }
        if over.iter().all(Option::is_none)
            && held
                .iter()
                .all(|&count| count >= WEBHOOK_CONNECTIONS_PER_PEER / 2)
        {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the slow-loris pod did not get its connections up: held {held:?} after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "  slow-loris holds {held:?} connections on the webhook replicas (cap {WEBHOOK_CONNECTIONS_PER_PEER} each)"
    );
    // Under attack: a create through the API server, its v1alpha1 read, and the recreate.
    let started = std::time::Instant::now();
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "under-attack"},
                   "spec": {"podName": target.name_any(), "containers": [{"name": "app"}]}}),
        )
        .await?;
    println!(
        "  create admitted in {:.0?} under attack",
        started.elapsed()
    );
    let read = kubectl(&[
        "-n",
        &ctx.namespace,
        "get",
        "containerrecreaterequests.v1alpha1.apps.kruise.io",
        &name,
        "-o",
        "jsonpath={.apiVersion}",
    ])
    .await?;
    check(
        read.status.success() && String::from_utf8_lossy(&read.stdout) == "apps.kruise.io/v1alpha1",
        || {
            format!(
                "the v1alpha1 read failed under attack: {}",
                String::from_utf8_lossy(&read.stderr)
            )
        },
    )?;
    let finished = ctx.wait_completed(&name, COMPLETION).await;
    ctx.pods()
        .delete("loris", &DeleteParams::default().grace_period(0))
        .await?;
    succeeded(&finished?, 1)
}

/// `kubectl --as` one of crr's identities; the output.
async fn as_identity(identity: &str, args: &[&str]) -> anyhow::Result<std::process::Output> {
    let user = format!(
        "--as=system:serviceaccount:{}:{identity}",
        crr_e2e::SYSTEM_NAMESPACE
    );
    let mut all = vec![user.as_str()];
    all.extend_from_slice(args);
    kubectl(&all).await
}

/// Whether `output` is a refusal by the named policy's message.
fn refused_by(output: &std::process::Output, message: &str) -> bool {
    !output.status.success() && String::from_utf8_lossy(&output.stderr).contains(message)
}

/// A client that acts as the operator's service account (impersonated by the admin), for the
/// writes only its identity makes.
async fn client_as_operator() -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::infer().await?;
    config.auth_info.impersonate = Some(format!(
        "system:serviceaccount:{}:crr-operator",
        crr_e2e::SYSTEM_NAMESPACE
    ));
    Ok(kube::Client::try_from(config)?)
}

// The identities narrowed to the field each writes (templates/least-privilege.yaml): the
// webhook's may change only caBundle of its webhook configurations and of the CRD, the
// operator's only the KruisePodReady condition of a pod's status and a budget's reservations, it
// creates only the requests of a rollout, and it writes no workload at all (RBAC), only its
// TriggerRecords. Each forbidden change is refused by its policy or by RBAC and the needed one
// passes, through the real API server.
async fn least_privilege(ctx: Ctx) -> anyhow::Result<()> {
    // The webhook: a longer timeout on its own webhook is refused; the caBundle it holds, passes.
    let refused = as_identity(
        "crr-webhook",
        &[
            "patch",
            "mutatingwebhookconfiguration",
            "crr-webhook",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/webhooks/0/timeoutSeconds","value":30}]"#,
        ],
    )
    .await?;
    check(
        refused_by(&refused, "may change only clientConfig.caBundle"),
        || {
            format!(
                "the webhook changed its own timeout: {}",
                String::from_utf8_lossy(&refused.stderr)
            )
        },
    )?;
    let bundle = kubectl(&[
        "get",
        "mutatingwebhookconfiguration",
        "crr-webhook",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.caBundle}",
    ])
    .await?;
    let bundle = String::from_utf8_lossy(&bundle.stdout).into_owned();
    ensure!(!bundle.is_empty(), "crr-webhook has no caBundle");
    let allowed = as_identity(
        "crr-webhook",
        &["patch", "mutatingwebhookconfiguration", "crr-webhook", "--type=json",
          "-p", &format!(r#"[{{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":"{bundle}"}}]"#)],
    )
    .await?;
    check(allowed.status.success(), || {
        format!(
            "the webhook could not write its caBundle: {}",
            String::from_utf8_lossy(&allowed.stderr)
        )
    })?;
    // The CRD: a label is refused; the conversion caBundle passes.
    let crd = "containerrecreaterequests.apps.kruise.io";
    let refused = as_identity(
        "crr-webhook",
        &[
            "label",
            "customresourcedefinition",
            crd,
            "crr-test/owned=true",
        ],
    )
    .await?;
    check(refused_by(&refused, "may not change labels"), || {
        format!(
            "the webhook labelled the CRD: {}",
            String::from_utf8_lossy(&refused.stderr)
        )
    })?;
    let bundle = kubectl(&[
        "get",
        "customresourcedefinition",
        crd,
        "-o",
        "jsonpath={.spec.conversion.webhook.clientConfig.caBundle}",
    ])
    .await?;
    let bundle = String::from_utf8_lossy(&bundle.stdout).into_owned();
    let allowed = as_identity(
        "crr-webhook",
        &["patch", "customresourcedefinition", crd, "--type=merge",
          "-p", &format!(r#"{{"spec":{{"conversion":{{"webhook":{{"clientConfig":{{"caBundle":"{bundle}"}}}}}}}}}}"#)],
    )
    .await?;
    check(allowed.status.success(), || {
        format!(
            "the webhook could not write the CRD's caBundle: {}",
            String::from_utf8_lossy(&allowed.stderr)
        )
    })?;

    // The operator: on a gated pod, flipping another condition, turning Ready True or changing
    // the pod's IP is refused; KruisePodReady passes. Through the API as the operator writes
    // (it may patch pods/status, not read it, so not with kubectl patch).
    ctx.two_container_pod("privilege", gated).await?;
    let operator = client_as_operator().await?;
    let as_operator: Api<Pod> = Api::namespaced(operator.clone(), &ctx.namespace);
    let status_patch = |patch: Value| {
        let pods = as_operator.clone();
        async move {
            pods.patch_status(
                "privilege",
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        }
    };
    for (what, patch) in [
        (
            "flipped PodScheduled",
            json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}}),
        ),
        (
            "turned Ready True by hand",
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ByHand"}]}}),
        ),
        (
            "changed the pod's IP",
            json!({"status": {"podIP": "10.0.0.1"}}),
        ),
    ] {
        let answer = status_patch(patch).await;
        check(
            matches!(&answer, Err(kube::Error::Api(status)) if status.code == 403
                && status.message.contains("crr-operator-kruise-pod-ready-only")),
            || format!("the operator {what}: {answer:?}"),
        )?;
    }
    let allowed = status_patch(json!({"status": {"conditions": [
        {"type": "KruisePodReady", "status": "True", "message": "e2e"}]}}))
    .await;
    check(allowed.is_ok(), || {
        format!("the operator could not write KruisePodReady: {allowed:?}")
    })?;
    // The operator creates only the requests of a rollout (the rollout suite proves those pass):
    // a plain request by its identity, for a pod that exists (the webhook admits it, the policy
    // runs after), is refused.
    ctx.two_container_pod("plain", |_| {}).await?;
    let plain = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
                       "metadata": {"name": "by-the-operator", "namespace": ctx.namespace},
                       "spec": {"podName": "plain", "containers": [{"name": "app"}]}})
    .to_string();
    let user = format!(
        "--as=system:serviceaccount:{}:crr-operator",
        crr_e2e::SYSTEM_NAMESPACE
    );
    let created = kubectl_with_stdin(&[&user, "create", "-f", "-"], Some(&plain)).await?;
    check(
        refused_by(
            &created,
            "may create only the requests of a ContainerRecreateRollout",
        ),
        || {
            format!(
                "the operator created a plain request: {}",
                String::from_utf8_lossy(&created.stderr)
            )
        },
    )?;
    // The operator writes a PodDisruptionBudget's status only to reserve a rollout's slots (and
    // release them): raising the allowance or changing another field is refused; an entry of
    // disruptedPods with the allowance and currentHealthy lowered passes.
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "plain-budget"},
        "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "plain"}}},
    }))?;
    budgets.create(&PostParams::default(), &budget).await?;
    crr_e2e::wait(
        budgets.clone(),
        "plain-budget",
        Duration::from_secs(60),
        |budget: Option<&PodDisruptionBudget>| {
            budget
                .and_then(|budget| budget.status.as_ref())
                .is_some_and(|status| {
                    status.current_healthy == 1 && status.disruptions_allowed == 1
                })
        },
    )
    .await
    .context("waiting for plain-budget's status")?;
    let budgets_as_operator: Api<PodDisruptionBudget> =
        Api::namespaced(operator.clone(), &ctx.namespace);
    let budget_patch = |patch: Value| {
        let budgets = budgets_as_operator.clone();
        async move {
            budgets
                .patch_status(
                    "plain-budget",
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
        }
    };
    for (what, patch) in [
        (
            "raised a budget's allowance",
            json!({"status": {"disruptionsAllowed": 5}}),
        ),
        (
            "changed a budget's desiredHealthy",
            json!({"status": {"desiredHealthy": 3}}),
        ),
    ] {
        let answer = budget_patch(patch).await;
        check(
            matches!(&answer, Err(kube::Error::Api(status)) if status.code == 403
                && status.message.contains("crr-operator-budget-reservations-only")),
            || format!("the operator {what}: {answer:?}"),
        )?;
    }
    let reserved = budget_patch(json!({"status": {
        "disruptedPods": {"plain": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
        "disruptionsAllowed": 0, "currentHealthy": 0}}))
    .await;
    check(reserved.is_ok(), || {
        format!("the operator could not reserve a slot: {reserved:?}")
    })?;
    operator_deletes_only_finished_rollouts(&ctx).await?;
    operator_writes_no_workload(&ctx, operator).await
}

/// The operator deletes only a finished rollout it may delete (past its TTL, or a trigger's):
/// a user's rollout, running or finished without a TTL, is refused by its policy.
async fn operator_deletes_only_finished_rollouts(ctx: &Ctx) -> anyhow::Result<()> {
    use crr_e2e::rollout::{create_rollout, wait_phase};
    let nothing = json!({"target": {"selector": {"matchLabels": {"app": "nothing"}}},
                         "containers": ["app"]});
    create_rollout(ctx, "users-own", nothing).await?;
    wait_phase(ctx, "users-own", "Completed").await?;
    let refused = as_identity(
        "crr-operator",
        &[
            "-n",
            &ctx.namespace,
            "delete",
            "containerrecreaterollout",
            "users-own",
        ],
    )
    .await?;
    check(
        refused_by(
            &refused,
            "the crr operator may delete only a finished rollout",
        ),
        || {
            format!(
                "the operator deleted a user's finished rollout kept without a TTL: {}",
                String::from_utf8_lossy(&refused.stderr)
            )
        },
    )
}

// The operator's triggers write no workload: RBAC gives the operator no right to patch or
// update a Deployment, StatefulSet or DaemonSet (so no policy narrows one), and what its
// triggers did goes to TriggerRecords, which it may watch and apply.
async fn operator_writes_no_workload(ctx: &Ctx, operator: kube::Client) -> anyhow::Result<()> {
    use crr_crds::trigger_record::{
        RecordedWorkload, TriggerRecord, TriggerRecordSpec, record_name,
    };
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "privileged-web", "namespace": ctx.namespace},
                            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "privileged-web"}},
                                     "template": {"metadata": {"labels": {"app": "privileged-web"}},
                                                  "spec": {"containers": [{"name": "app", "image": "busybox"}]}}}})
    .to_string();
    let applied = kubectl_with_stdin(&["apply", "-f", "-"], Some(&deployment)).await?;
    ensure!(
        applied.status.success(),
        "creating privileged-web: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    // Through kubectl as the operator: a label, and the annotation its triggers wrote before the
    // TriggerRecord, are both refused by RBAC (kubectl reads the workload, then patches it).
    let workload = ["-n", ctx.namespace.as_str()];
    for (what, args) in [
        (
            "labelled a workload",
            [
                "label",
                "deployment",
                "privileged-web",
                "crr-test/owned=true",
            ],
        ),
        (
            "wrote the trigger annotation of before",
            [
                "annotate",
                "deployment",
                "privileged-web",
                "crr.dev/last-scheduled=2026-01-01T00:00:00Z",
            ],
        ),
    ] {
        let mut all = workload.to_vec();
        all.extend_from_slice(&args);
        let refused = as_identity("crr-operator", &all).await?;
        check(
            refused_by(&refused, r#"cannot patch resource "deployments""#),
            || {
                format!(
                    "the operator {what}: {}",
                    String::from_utf8_lossy(&refused.stderr)
                )
            },
        )?;
    }
    // The API server's own answer for every workload kind and write (a SubjectAccessReview), and
    // for every verb the triggers need on TriggerRecords in a tenant's namespace.
    for resource in ["deployments", "statefulsets", "daemonsets"] {
        for verb in ["patch", "update"] {
            let allowed = operator_may(ctx, "apps", resource, verb).await?;
            check(!allowed, || format!("the operator may {verb} {resource}"))?;
        }
    }
    // Watched and applied: never read one by one, never deleted (the garbage collector deletes a
    // record with its workload).
    for (verb, needed) in [
        ("list", true),
        ("watch", true),
        ("create", true),
        ("patch", true),
        ("get", false),
        ("delete", false),
    ] {
        let allowed =
            operator_may(ctx, keys::ROLLOUT_GROUP, keys::TRIGGER_RECORD_PLURAL, verb).await?;
        check(allowed == needed, || {
            format!("the operator may {verb} triggerrecords: {allowed} (want {needed})")
        })?;
    }
    // And the writes themselves, as the operator makes them (server-side apply): a record owned
    // by the workload, applied (created, then changed).
    let web = Api::<Deployment>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get("privileged-web")
        .await?;
    let uid = web.uid().context("privileged-web has no UID")?;
    let name = record_name("Deployment", "privileged-web");
    let record = |spec: TriggerRecordSpec| {
        let mut record = TriggerRecord::new(&name, spec);
        record.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".to_owned(),
            kind: "Deployment".to_owned(),
            name: "privileged-web".to_owned(),
            uid: uid.clone(),
            ..OwnerReference::default()
        }]);
        record
    };
    let workload = RecordedWorkload {
        kind: "Deployment".to_owned(),
        name: "privileged-web".to_owned(),
        uid: uid.clone(),
    };
    let records: Api<TriggerRecord> = Api::namespaced(operator, &ctx.namespace);
    for spec in [
        TriggerRecordSpec {
            workload: workload.clone(),
            config_hashes: Some(BTreeMap::from([(
                "configmap/app-config".to_owned(),
                "e2e".to_owned(),
            )])),
            last_scheduled: None,
            pending_change: None,
            restart_requested: None,
        },
        TriggerRecordSpec {
            workload: workload.clone(),
            config_hashes: Some(BTreeMap::new()),
            last_scheduled: Some("2026-01-01T00:00:00Z".to_owned()),
            pending_change: None,
            restart_requested: None,
        },
    ] {
        let applied = records
            .patch(
                &name,
                &PatchParams::apply("crr-e2e-least-privilege"),
                &Patch::Apply(&record(spec)),
            )
            .await;
        check(applied.is_ok(), || {
            format!("the operator could not apply its TriggerRecord: {applied:?}")
        })?;
    }
    Ok(())
}

/// Whether the operator's service account may `verb` `resource` of `group` in the test's
/// namespace, by a SubjectAccessReview (the API server's RBAC decision).
async fn operator_may(ctx: &Ctx, group: &str, resource: &str, verb: &str) -> anyhow::Result<bool> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{}:crr-operator",
                crr_e2e::SYSTEM_NAMESPACE
            )),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{}", crr_e2e::SYSTEM_NAMESPACE),
                "system:authenticated".to_owned(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                verb: Some(verb.to_owned()),
                namespace: Some(ctx.namespace.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(ctx.client.clone())
        .create(&PostParams::default(), &review)
        .await
        .with_context(|| format!("reviewing whether the operator may {verb} {resource}"))?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

// A pod that declares the KruisePodReady gate without crr's label (an OpenKruise template)
// becomes Ready: created now, the pod webhook labels it and the operator starts its condition;
// created while crr's webhook was away (as before crr was installed), the operator's sweep
// finds it when a replica becomes leader.
async fn gate_without_label(ctx: Ctx) -> anyhow::Result<()> {
    let gate_only = |pod: &mut Value| {
        pod["spec"]["readinessGates"] = json!([{"conditionType": "KruisePodReady"}]);
    };
    let pod = ctx.two_container_pod("templated", gate_only).await?;
    check(
        pod.labels()
            .get(keys::LABEL_READINESS_GATE)
            .map(String::as_str)
            == Some("true"),
        || {
            format!(
                "the pod webhook did not label the gated pod: {:?}",
                pod.labels()
            )
        },
    )?;

    let replicas = scale_webhook_to_zero().await?;
    let created = async {
        let mut unlabelled = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "before-crr", "labels": {"app": "before-crr"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "app", "image": crr_e2e::BUSYBOX,
                                "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"]}],
            },
        });
        gate_only(&mut unlabelled);
        let unlabelled: Pod = serde_json::from_value(unlabelled)?;
        ctx.pods().create(&PostParams::default(), &unlabelled).await?;
        anyhow::Ok(())
    }
    .await;
    restore_webhook(&replicas).await?;
    created?;
    let pod = ctx.pods().get("before-crr").await?;
    check(
        pod.labels().get(keys::LABEL_READINESS_GATE).is_none(),
        || "the pod was labelled although the webhook was away".to_owned(),
    )?;
    // A new leader sweeps at once.
    delete_operator_leader(&ctx).await?;
    ctx.wait_pod("before-crr", "Ready", Duration::from_secs(90), pod_ready)
        .await?;
    Ok(())
}

// The webhook scaled to 0: creating a request gives a clear error, and deleting one that holds
// the pod's readiness still goes through (the operator's finalizer and label writes skip the
// webhook: matchConditions in the chart). Then the webhook comes back and all is well.
async fn webhook_down(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("held", gated).await?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "held"},
                   "spec": {"podName": "held", "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": 3600}}}),
        )
        .await?;
    let held = |crr: Option<&ContainerRecreateRequest>| {
        crr.and_then(|crr| crr.metadata.finalizers.as_ref())
            .is_some_and(|finalizers| {
                finalizers
                    .iter()
                    .any(|finalizer| finalizer == keys::FINALIZER_UNREADY_ACQUIRED)
            })
    };
    crr_e2e::wait(ctx.crrs(), &name, Duration::from_secs(60), held)
        .await
        .context("waiting for the readiness hold")?;

    let replicas = scale_webhook_to_zero().await?;
    let scenario = async {
        let refused = ctx
            .create_crr(
                Version::V1beta1,
                json!({"metadata": {"name": "refused"},
                       "spec": {"podName": "held", "containers": [{"name": "sidecar"}]}}),
            )
            .await
            .expect_err("a request admitted without the webhook");
        check(format!("{refused:#}").contains("crr-webhook"), || {
            format!("the error does not say the webhook is away: {refused:#}")
        })?;
        ctx.crrs().delete(&name, &DeleteParams::default()).await?;
        crr_e2e::wait(
            ctx.crrs(),
            &name,
            Duration::from_secs(60),
            |crr: Option<&ContainerRecreateRequest>| crr.is_none(),
        )
        .await
        .context("waiting for the held request to go")?;
        ctx.wait_pod("held", "Ready again", Duration::from_secs(60), pod_ready)
            .await?;
        anyhow::Ok(())
    }
    .await;
    // Whatever happened, bring the webhook back for the scenarios after this one.
    restore_webhook(&replicas).await?;
    scenario?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "after"},
                   "spec": {"podName": "held", "containers": [{"name": "sidecar"}]}}),
        )
        .await?;
    succeeded(
        &ctx.wait_completed(&name, Duration::from_secs(120)).await?,
        1,
    )?;
    Ok(())
}

// A node daemon's service account writes the status of its own node's requests only (the
// chart's ValidatingAdmissionPolicy, keyed on the node name in the token's `extra`): tried as
// that account, impersonated, with this node, another node and no node.
async fn node_scope(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("scoped", plain).await?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "scoped"},
                   "spec": {"podName": "scoped", "containers": [{"name": "app"}]}}),
        )
        .await?;
    succeeded(
        &ctx.wait_completed(&name, Duration::from_secs(120)).await?,
        1,
    )?;
    let node = ctx
        .crrs()
        .get(&name)
        .await?
        .labels()
        .get(keys::LABEL_NODE_NAME)
        .cloned()
        .ok_or_else(|| anyhow!("no node label"))?;
    let daemon = format!(
        "system:serviceaccount:{}:crr-node-daemon",
        crr_e2e::SYSTEM_NAMESPACE
    );
    // kube-rs sends Impersonate-User and Impersonate-Extra-* (this kubectl has no flag for the
    // latter); the admin kubeconfig may impersonate anyone.
    let write_as = |extra: Option<String>| {
        let (namespace, name, daemon) = (ctx.namespace.clone(), name.clone(), daemon.clone());
        async move {
            let mut config = kube::Config::infer().await?;
            config.auth_info.impersonate = Some(daemon);
            config.auth_info.impersonate_user_extra = extra.map(|node| {
                std::collections::HashMap::from([(
                    "authentication.kubernetes.io/node-name".to_owned(),
                    vec![node],
                )])
            });
            let client = kube::Client::try_from(config)?;
            let patch = json!({"status": {"message": "written as the node daemon"}});
            Api::<ContainerRecreateRequest>::namespaced(client, &namespace)
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(anyhow::Error::from)
        }
    };
    write_as(Some(node.clone()))
        .await
        .with_context(|| format!("the daemon of {node} writing its own request"))?;
    for extra in [Some("some-other-node".to_owned()), None] {
        let refused = write_as(extra.clone()).await;
        check(
            refused.as_ref().is_err_and(|error| {
                format!("{error:#}").contains("may not write the status of a request for node")
            }),
            || format!("token node {extra:?} writing a request of {node}: {refused:?}"),
        )?;
    }
    Ok(())
}
// `kubectl crr recreate POD -c app --wait` against the real daemon: exits 0 once app is back.
async fn plugin_wait(ctx: Ctx) -> anyhow::Result<()> {
    let pod = ctx.two_container_pod("plugged", plain).await?;
    let (app_id, _) = id_and_restarts(&pod, "app")?;
    let output = ctx
        .plugin(&[
            "recreate",
            "plugged",
            "-c",
            "app",
            "--wait",
            "--timeout",
            "90s",
        ])
        .await?;
    ensure!(
        output.status.success(),
        "kubectl crr exited {:?}: {}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let pod = ctx.pods().get("plugged").await?;
    let (id, restarts) = id_and_restarts(&pod, "app")?;
    check(id != app_id && restarts == 1, || {
        format!("app: {id} restarts {restarts}")
    })?;
    check(id_and_restarts(&pod, "sidecar")?.1 == 0, || {
        "sidecar restarted".into()
    })
}

// `kubectl crr recreate -l app=batch --max-unavailable 1`: every pod recreated, never two
// requests of the batch active at once (seen by watch).
async fn plugin_batch(ctx: Ctx) -> anyhow::Result<()> {
    for index in 0..3 {
        ctx.two_container_pod(&format!("batch-{index}"), |pod| {
            pod["metadata"]["labels"]["tier"] = json!("batch");
        })
        .await?;
    }
    let crrs = ctx.crrs();
    let peak = Arc::new(Mutex::new((
        0usize,
        std::collections::BTreeSet::<String>::new(),
    )));
    let watcher_task = tokio::spawn({
        let peak = peak.clone();
        async move {
            let mut stream = watcher(crrs, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(crr)) = stream.next().await {
                let mut guard = peak.lock().expect("lock");
                if crr.is_completed() {
                    guard.1.remove(&crr.name_any());
                } else {
                    guard.1.insert(crr.name_any());
                }
                guard.0 = guard.0.max(guard.1.len());
            }
        }
    });
    let output = ctx
        .plugin(&[
            "recreate",
            "-l",
            "tier=batch",
            "-c",
            "app",
            "--max-unavailable",
            "1",
            "--timeout",
            "180s",
        ])
        .await?;
    watcher_task.abort();
    ensure!(
        output.status.success(),
        "kubectl crr exited {:?}: {}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    for index in 0..3 {
        let pod = ctx.pods().get(&format!("batch-{index}")).await?;
        check(id_and_restarts(&pod, "app")?.1 == 1, || {
            format!("batch-{index} app not recreated once")
        })?;
    }
    let most = peak.lock().expect("lock").0;
    check(most == 1, || {
        format!("{most} requests of the batch were active at once")
    })
}

// restartPolicy OnFailure: accepted. `app` exits 0 on SIGTERM, so the kubelet does not
// start it again: its state ends Failed with a message that says so, not stuck until a deadline.
// `sidecar` ignores SIGTERM (PID 1 without a trap), is SIGKILLed at the end of its grace period,
// exits non-zero and is restarted: Succeeded.
async fn on_failure(ctx: Ctx) -> anyhow::Result<()> {
    let pod = ctx
        .two_container_pod("onfailure", |pod| {
            pod["spec"]["restartPolicy"] = json!("OnFailure");
            pod["spec"]["containers"][1]["command"] =
                json!(["sh", "-c", "while true; do sleep 1 & wait $!; done"]);
        })
        .await?;
    let (sidecar_id, _) = id_and_restarts(&pod, "sidecar")?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "onfailure"},
                   "spec": {"podName": "onfailure", "containers": [{"name": "app"}, {"name": "sidecar"}],
                            "strategy": {"failurePolicy": "Ignore"}}}),
        )
        .await?;
    let done = ctx.wait_completed(&name, COMPLETION).await?;
    let status = done.status.clone().unwrap_or_default();
    let state = |container: &str| {
        status
            .container_recreate_states
            .iter()
            .find(|state| state.name == container)
            .cloned()
    };
    let app = state("app").ok_or_else(|| anyhow!("no state for app: {status:?}"))?;
    check(
        app.phase == Phase::Failed
            && app.is_killed
            && app
                .message
                .as_deref()
                .is_some_and(|m| m.contains("OnFailure")),
        || format!("app: {app:?}"),
    )?;
    let sidecar = state("sidecar").ok_or_else(|| anyhow!("no state for sidecar: {status:?}"))?;
    check(sidecar.phase == Phase::Succeeded, || {
        format!("sidecar: {sidecar:?}")
    })?;
    let pod = ctx.pods().get("onfailure").await?;
    let (id, restarts) = id_and_restarts(&pod, "sidecar")?;
    check(id != sidecar_id && restarts == 1, || {
        format!("sidecar {id} restarts {restarts}")
    })
}

// Container restart rules (KEP-5307): the kubelet decides from the container's own
// restartPolicy and restartPolicyRules, else the pod's, and so does crr.

/// `trap 'exit CODE' TERM`: the container exits with CODE when the daemon stops it.
fn exits_on_term_with(code: u8) -> Value {
    json!([
        "sh",
        "-c",
        format!("trap 'exit {code}' TERM; while true; do sleep 1 & wait $!; done")
    ])
}

/// A Restart (or RestartAllContainers) rule on exit codes `In` `codes`.
fn rule_on(action: &str, codes: &[i32]) -> Value {
    json!({"action": action, "exitCodes": {"operator": "In", "values": codes}})
}

// Pod restartPolicy Never, container app Always: the kubelet restarts app, so crr recreates it.
async fn restart_rules_pod_never(ctx: Ctx) -> anyhow::Result<()> {
    let pod = ctx
        .two_container_pod("rules-never", |pod| {
            pod["spec"]["restartPolicy"] = json!("Never");
            pod["spec"]["containers"][0]["restartPolicy"] = json!("Always");
        })
        .await?;
    let (app_id, _) = id_and_restarts(&pod, "app")?;
    let (sidecar_id, _) = id_and_restarts(&pod, "sidecar")?;
    let name = ctx
        .create_crr(
            Version::V1alpha1,
            json!({"metadata": {"name": "rules-never"},
                   "spec": {"podName": "rules-never", "containers": [{"name": "app"}]}}),
        )
        .await?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)?;
    let pod = ctx.pods().get("rules-never").await?;
    let (id, restarts) = id_and_restarts(&pod, "app")?;
    check(id != app_id && restarts == 1, || {
        format!("app {id} restarts {restarts}")
    })?;
    check(id_and_restarts(&pod, "sidecar")? == (sidecar_id, 0), || {
        "sidecar was touched".to_owned()
    })
}

// Refused, naming the container: pod Always with container Never (the kubelet would never start it
// again), and a container whose rules restart the whole pod on the codes a kill produces.
async fn restart_rules_refused(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("rules-refused", |pod| {
        pod["spec"]["containers"][0]["restartPolicy"] = json!("Never");
        pod["spec"]["containers"][1]["restartPolicy"] = json!("Never");
        pod["spec"]["containers"][1]["restartPolicyRules"] =
            json!([rule_on("RestartAllContainers", &[143])]);
    })
    .await?;
    for (container, expected) in [("app", "Never"), ("sidecar", "RestartAllContainers")] {
        let manifest = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": format!("refused-{container}"), "namespace": ctx.namespace},
            "spec": {"podName": "rules-refused", "containers": [{"name": container}]},
        });
        let output = kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string())).await?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(!output.status.success(), "{container}: accepted");
        check(
            stderr.contains("denied the request")
                && stderr.contains(&format!("container {container}"))
                && stderr.contains(expected),
            || format!("{container}: {stderr}"),
        )?;
    }
    Ok(())
}

// Container Never with a rule to Restart on exit 143: accepted with a warning (it depends on the
// exit code). app exits 143 on SIGTERM and is recreated; sidecar has the same rule but exits 0,
// which no rule matches: the kubelet leaves it stopped, and its state ends Failed at once, saying
// why, instead of waiting for a restart that never comes.
async fn restart_rules_exit_codes(ctx: Ctx) -> anyhow::Result<()> {
    let pod = ctx
        .two_container_pod("rules-codes", |pod| {
            for (index, code) in [(0, 143), (1, 0)] {
                let container = &mut pod["spec"]["containers"][index];
                container["restartPolicy"] = json!("Never");
                container["restartPolicyRules"] = json!([rule_on("Restart", &[143])]);
                container["command"] = exits_on_term_with(code);
            }
        })
        .await?;
    let (app_id, _) = id_and_restarts(&pod, "app")?;
    let manifest = json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
        "metadata": {"name": "rules-codes", "namespace": ctx.namespace},
        "spec": {"podName": "rules-codes", "containers": [{"name": "app"}, {"name": "sidecar"}],
                 "strategy": {"failurePolicy": "Ignore"}},
    });
    let output = kubectl_with_stdin(&["create", "-f", "-"], Some(&manifest.to_string())).await?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(output.status.success(), "refused: {stderr}");
    check(
        stderr.contains("Warning") && stderr.contains("container app"),
        || format!("no warning about app: {stderr}"),
    )?;
    let done = ctx.wait_completed("rules-codes", COMPLETION).await?;
    let states = done
        .status
        .clone()
        .unwrap_or_default()
        .container_recreate_states;
    let state = |container: &str| {
        states
            .iter()
            .find(|state| state.name == container)
            .cloned()
            .ok_or_else(|| anyhow!("no state for {container}: {states:?}"))
    };
    let app = state("app")?;
    check(app.phase == Phase::Succeeded, || format!("app: {app:?}"))?;
    let sidecar = state("sidecar")?;
    check(
        sidecar.phase == Phase::Failed
            && sidecar.is_killed
            && sidecar
                .message
                .as_deref()
                .is_some_and(|m| m.contains("sidecar") && m.contains("code 0")),
        || format!("sidecar: {sidecar:?}"),
    )?;
    let pod = ctx.pods().get("rules-codes").await?;
    let (id, restarts) = id_and_restarts(&pod, "app")?;
    check(id != app_id && restarts == 1, || {
        format!("app {id} restarts {restarts}")
    })
}

// A native sidecar (an init container with restartPolicy Always) of a restartPolicy Never pod is
// recreated in place: the kubelet restarts sidecars whatever the pod's policy. The regular
// containers stay.
async fn native_sidecar(ctx: Ctx) -> anyhow::Result<()> {
    let pod = ctx
        .two_container_pod("native-sidecar", |pod| {
            pod["spec"]["restartPolicy"] = json!("Never");
            pod["spec"]["containers"][0]["restartPolicy"] = json!("Always");
            pod["spec"]["containers"][1]["restartPolicy"] = json!("Always");
            pod["spec"]["initContainers"] = json!([{
                "name": "proxy",
                "image": crr_e2e::BUSYBOX,
                "restartPolicy": "Always",
                "command": ["sh", "-c", crr_e2e::EXIT_ON_TERM_LOOP],
            }]);
        })
        .await?;
    let (proxy_id, _) = id_and_restarts(&pod, "proxy")?;
    let app_before = id_and_restarts(&pod, "app")?;
    let name = ctx
        .create_crr(
            Version::V1alpha1,
            json!({"metadata": {"name": "native-sidecar"},
                   "spec": {"podName": "native-sidecar", "containers": [{"name": "proxy"}]}}),
        )
        .await?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)?;
    let pod = ctx.pods().get("native-sidecar").await?;
    let (id, restarts) = id_and_restarts(&pod, "proxy")?;
    check(id != proxy_id && restarts == 1, || {
        format!("proxy {id} restarts {restarts}")
    })?;
    check(id_and_restarts(&pod, "app")? == app_before, || {
        "app was touched".to_owned()
    })
}

// Upstream's v1beta1 scenario: minStartedSeconds and ttlSecondsAfterFinished through v1beta1.
async fn v1beta1_min_started_ttl(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("beta-min", plain).await?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "beta-min"},
                   "spec": {"podName": "beta-min", "containers": [{"name": "app"}],
                            "strategy": {"minStartedSeconds": 4}, "ttlSecondsAfterFinished": 3}}),
        )
        .await?;
    let done = ctx.wait_completed(&name, COMPLETION).await?;
    succeeded(&done, 1)?;
    let completion = done
        .status
        .as_ref()
        .and_then(|status| status.completion_time.clone())
        .ok_or_else(|| anyhow!("no completionTime"))?;
    let pod = ctx.pods().get("beta-min").await?;
    completed_min_started_after(&pod, "app", &completion, 4)?;
    deleted_after_ttl(&ctx, &name).await
}

// A request created through v1alpha1 shows its PreRecreateGrace condition in the v1beta1 view
// while the grace runs (upstream keeps it in an annotation of the v1alpha1 object).
async fn grace_in_v1beta1_view(ctx: Ctx) -> anyhow::Result<()> {
    ctx.two_container_pod("alpha-grace", gated).await?;
    let name = ctx
        .create_crr(
            Version::V1alpha1,
            json!({"metadata": {"name": "alpha-grace"},
                   "spec": {"podName": "alpha-grace", "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": 8}}}),
        )
        .await?;
    let beta = ctx.crrs_in(Version::V1beta1);
    // The condition comes once the daemon has started and the operator has taken the pod's
    // readiness, and stays for the 8 s of grace: 30 s leaves room for a loaded machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let condition = loop {
        let view = beta.get(&name).await?;
        let found = view.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|condition| condition["type"] == keys::CONDITION_PRE_RECREATE_GRACE)
            .cloned();
        if let Some(condition) = found {
            break condition;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "no PreRecreateGrace condition in the v1beta1 view: {}",
                view.data["status"]
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    check(
        condition["status"] == "True" && condition["lastTransitionTime"].is_string(),
        || format!("PreRecreateGrace {condition}"),
    )?;
    let alpha = ctx.crrs_in(Version::V1alpha1).get(&name).await?;
    check(
        alpha
            .annotations()
            .contains_key(keys::ANNOTATION_UNREADY_ACQUIRED),
        || {
            format!(
                "v1alpha1 view without {}",
                keys::ANNOTATION_UNREADY_ACQUIRED
            )
        },
    )?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)
}
