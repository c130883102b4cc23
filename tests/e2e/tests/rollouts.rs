//! ContainerRecreateRollout scenarios against crr installed on the local test bed:
//! `cargo test -p crr-e2e --test rollouts -- --include-ignored [FILTER]` (hack/cluster-test.sh).
//! Each scenario restarts containers of a workload's pods in place and checks what a user
//! would: never more pods unavailable than allowed (sampled by a pod watch for the whole
//! rollout), each target pod recreated exactly once, pod names, UIDs and IPs unchanged, and the
//! rollout's own status.

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use crr_crds::rollout::ContainerRecreateRollout;
use crr_e2e::rollout::{
    Unavailable, all_ready, apply, budget_over, create_rollout, deployment_of, finished,
    pod_template, recreated_in_place, rollouts, started, wait_phase,
};
use crr_e2e::tenant::Tenant;
use crr_e2e::{Ctx, Scenario, check, container, wait};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "rollout-deployment",
            run: |ctx| Box::pin(deployment(ctx)),
        },
        Scenario {
            name: "rollout-budget",
            run: |ctx| Box::pin(budget(ctx)),
        },
        Scenario {
            name: "rollout-statefulset-order",
            run: |ctx| Box::pin(statefulset_order(ctx)),
        },
        Scenario {
            name: "rollout-paused",
            run: |ctx| Box::pin(paused(ctx)),
        },
        Scenario {
            name: "rollout-max-failed",
            run: |ctx| Box::pin(max_failed(ctx)),
        },
        Scenario {
            name: "rollout-deleted-midway",
            run: |ctx| Box::pin(deleted_midway(ctx)),
        },
        Scenario {
            name: "rollout-scaled-up",
            run: |ctx| Box::pin(scaled_up(ctx)),
        },
        Scenario {
            name: "rollout-refused",
            run: |ctx| Box::pin(refused(ctx)),
        },
        Scenario {
            name: "rollout-budget-drain",
            run: |ctx| Box::pin(budget_drain(ctx)),
        },
        Scenario {
            name: "rollout-plugin",
            run: |ctx| Box::pin(plugin(ctx)),
        },
        Scenario {
            name: "rollout-aborted",
            run: |ctx| Box::pin(aborted(ctx)),
        },
        Scenario {
            name: "rollout-cluster-cap",
            run: |ctx| Box::pin(cluster_cap(ctx)),
        },
        Scenario {
            name: "rollout-reapplied",
            run: |ctx| Box::pin(reapplied(ctx)),
        },
        Scenario {
            name: "tenant-paused-rollouts",
            run: |ctx| Box::pin(tenant_paused(ctx)),
        },
        Scenario {
            name: "rollout-pending-pod",
            run: |ctx| Box::pin(pending_pod(ctx)),
        },
        Scenario {
            name: "rollout-progress-deadline",
            run: |ctx| Box::pin(progress_deadline(ctx)),
        },
        Scenario {
            name: "rollout-made-again",
            run: |ctx| Box::pin(made_again(ctx)),
        },
    ]
}

fn main() {
    crr_e2e::installed_suite_main("rollouts", scenarios());
}

async fn deployment(ctx: Ctx) -> anyhow::Result<()> {
    let before = deployment_of(&ctx, "web", 8).await?;
    let unavailable = Unavailable::watch(&ctx, "web");
    tokio::time::sleep(Duration::from_millis(500)).await;
    create_rollout(
        &ctx,
        "restart-app",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"], "maxUnavailable": 2}),
    )
    .await?;
    let done = wait_phase(&ctx, "restart-app", "Completed").await?;
    let most = unavailable.most();
    let status = done.status.unwrap_or_default();
    check(status.recreated == 8 && status.target_pods == 8, || {
        format!("status: {status:?}")
    })?;
    check(most <= 2, || {
        format!("{most} pods were unavailable at once")
    })?;
    check(most >= 1, || {
        "the watch never saw a pod unavailable".to_owned()
    })?;
    all_ready(&ctx, "web", 8).await?;
    recreated_in_place(&ctx, &before, 1).await
}

/// Applies PodDisruptionBudget `web` with `spec` over 8 pods, and waits until its status counts
/// the 8 healthy and allows `allowed` disruptions.
async fn budget_web(ctx: &Ctx, spec: Value, allowed: i32) -> anyhow::Result<()> {
    budget_over(ctx, spec, 8, allowed).await
}

async fn budget(ctx: Ctx) -> anyhow::Result<()> {
    let before = deployment_of(&ctx, "web", 8).await?;
    budget_web(
        &ctx,
        json!({"minAvailable": 7, "selector": {"matchLabels": {"app": "web"}}}),
        1,
    )
    .await?;
    let unavailable = Unavailable::watch(&ctx, "web");
    tokio::time::sleep(Duration::from_millis(500)).await;
    create_rollout(
        &ctx,
        "restart-app",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"], "maxUnavailable": 4}),
    )
    .await?;
    wait_phase(&ctx, "restart-app", "Completed").await?;
    let most = unavailable.most();
    check(most == 1, || {
        format!("{most} pods were unavailable at once under minAvailable 7 of 8")
    })?;
    recreated_in_place(&ctx, &before, 1).await
}

/// Two rollouts of two Deployments under one PodDisruptionBudget (maxUnavailable 2 of 8), and a
/// `kubectl drain` of a node meanwhile (cordon, then the Eviction API for each of the node's
/// pods, retried on 429 as kubectl does): a pod watch checks that never more than 2 of the 8
/// were unavailable (not Ready, terminating, or evicted and not replaced yet), whoever took them.
async fn budget_drain(ctx: Ctx) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::EvictParams;

    const EACH: i32 = 4;
    const EXPECTED: usize = 8;
    for name in ["web-a", "web-b"] {
        let mut template = pod_template(name);
        template["metadata"]["labels"]["tier"] = json!("web");
        apply(
            &ctx,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {"replicas": EACH, "selector": {"matchLabels": {"app": name}},
                         "template": template},
            }),
        )
        .await?;
    }
    for name in ["web-a", "web-b"] {
        all_ready(&ctx, name, EACH).await?;
    }
    budget_web(
        &ctx,
        json!({"maxUnavailable": 2, "selector": {"matchLabels": {"tier": "web"}}}),
        2,
    )
    .await?;

    // The node with the most of the tier's pods is drained.
    let tier = ListParams::default().labels("tier=web");
    let pods = ctx.pods().list(&tier).await?.items;
    let mut by_node = std::collections::BTreeMap::<String, usize>::new();
    for pod in &pods {
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
        *by_node.entry(node.unwrap_or_default()).or_default() += 1;
    }
    let (drained, on_it) = by_node
        .into_iter()
        .max_by_key(|(_, count)| *count)
        .ok_or_else(|| anyhow!("no pods of the tier"))?;
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let cordon = |unschedulable: bool| {
        let nodes = nodes.clone();
        let drained = drained.clone();
        async move {
            nodes
                .patch(
                    &drained,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"unschedulable": unschedulable}})),
                )
                .await
                .with_context(|| format!("cordoning {drained}: {unschedulable}"))
        }
    };

    let unavailable = Unavailable::watch_selected(&ctx, "tier=web", Some(EXPECTED));
    tokio::time::sleep(Duration::from_millis(500)).await;
    cordon(true).await?;
    let outcome = async {
        for name in ["web-a", "web-b"] {
            create_rollout(
                &ctx,
                &format!("restart-{name}"),
                json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}},
                       "containers": ["app"], "maxUnavailable": 2}),
            )
            .await?;
        }
        // kube's client retries a 429 itself; the drain counts each refusal, as `kubectl drain`
        // reports them, so its client does not.
        let mut config = kube::Config::infer().await.context("the drain's client")?;
        config.default_retry = false;
        let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, &ctx.namespace);
        let drain = async {
            let mut evicted = 0;
            let mut refused = 0;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
            loop {
                let mut left: Vec<Pod> = pods.list(&tier).await?.items;
                left.retain(|pod| {
                    pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref())
                        == Some(drained.as_str())
                        && pod.metadata.deletion_timestamp.is_none()
                });
                if left.is_empty() {
                    return anyhow::Ok((evicted, refused));
                }
                for pod in left {
                    match pods.evict(&pod.name_any(), &EvictParams::default()).await {
                        Ok(_) => evicted += 1,
                        Err(kube::Error::Api(status)) if status.code == 429 => refused += 1,
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Err(error) => return Err(error).context("evicting"),
                    }
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(anyhow!(
                        "the drain of {drained} had not ended after 180 s ({evicted} evicted)"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        };
        let (drained_out, a, b) = tokio::join!(
            drain,
            wait_phase(&ctx, "restart-web-a", "Completed"),
            wait_phase(&ctx, "restart-web-b", "Completed"),
        );
        let (evicted, refused) = drained_out?;
        a?;
        b?;
        println!(
            "rollouts:   {drained} drained of its {on_it} pods of the tier ({evicted} evictions, \
             {refused} refused by the budget) while both rollouts ran"
        );
        anyhow::Ok(())
    }
    .await;
    cordon(false).await?;
    outcome?;
    let most = unavailable.most();
    println!("rollouts:   at most {most} of {EXPECTED} unavailable at once");
    check(most <= 2, || {
        format!("{most} of {EXPECTED} pods were unavailable at once under maxUnavailable 2")
    })
}

async fn statefulset_order(ctx: Ctx) -> anyhow::Result<()> {
    apply(
        &ctx,
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 4, "serviceName": "db", "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "db"}},
                "template": pod_template("db"),
            },
        }),
    )
    .await?;
    let before = all_ready(&ctx, "db", 4).await?;
    create_rollout(
        &ctx,
        "restart-app",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}},
               "containers": ["app"]}),
    )
    .await?;
    wait_phase(&ctx, "restart-app", "Completed").await?;
    recreated_in_place(&ctx, &before, 1).await?;
    // One at a time, highest ordinal first: the requests were created in that order.
    let mut requests = ctx.crrs().list(&ListParams::default()).await?.items;
    requests.sort_by_key(|crr| crr.metadata.creation_timestamp.clone().map(|time| time.0));
    let order: Vec<String> = requests
        .iter()
        .map(|crr| crr.spec.pod_name.clone())
        .collect();
    check(order == ["db-3", "db-2", "db-1", "db-0"], || {
        format!("requests in order: {order:?}")
    })
}

async fn paused(ctx: Ctx) -> anyhow::Result<()> {
    let before = deployment_of(&ctx, "web", 3).await?;
    create_rollout(
        &ctx,
        "restart-app",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"], "paused": true}),
    )
    .await?;
    wait_phase(&ctx, "restart-app", "Paused").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = ctx.crrs().list(&ListParams::default()).await?.items.len();
    check(started == 0, || format!("{started} requests while paused"))?;
    rollouts(&ctx)
        .patch(
            "restart-app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await?;
    let done = wait_phase(&ctx, "restart-app", "Completed").await?;
    check(
        done.status.is_some_and(|status| status.recreated == 3),
        || "not every pod recreated".to_owned(),
    )?;
    recreated_in_place(&ctx, &before, 1).await
}

async fn max_failed(ctx: Ctx) -> anyhow::Result<()> {
    // Pods the kubelet does not restart after a clean exit (OnFailure; `app` exits 0 on
    // SIGTERM): the first recreate fails, and with maxFailedPods 0 the rollout ends there.
    for index in 0..3 {
        let mut pod = pod_template("batch");
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"]["name"] = json!(format!("batch-{index}"));
        pod["spec"]["restartPolicy"] = json!("OnFailure");
        apply(&ctx, pod).await?;
    }
    all_ready(&ctx, "batch", 3).await?;
    create_rollout(
        &ctx,
        "restart-app",
        json!({"target": {"selector": {"matchLabels": {"app": "batch"}}},
               "containers": ["app"], "maxFailedPods": 0}),
    )
    .await?;
    let failed = wait_phase(&ctx, "restart-app", "Failed").await?;
    let status = failed.status.unwrap_or_default();
    check(
        status.failed == 1 && status.recreated == 0 && status.pending == 2,
        || format!("status: {status:?}"),
    )?;
    let failure = status
        .failures
        .first()
        .ok_or_else(|| anyhow!("no failure listed: {status:?}"))?;
    check(
        failure.pod == "batch-0" && failure.container.as_deref() == Some("app"),
        || format!("failure: {failure:?}"),
    )?;
    let condition = status
        .conditions
        .iter()
        .find(|condition| condition.type_ == "Failed")
        .ok_or_else(|| anyhow!("no Failed condition"))?;
    check(
        condition.reason == "FailureLimit" && condition.message.contains("batch-0"),
        || format!("condition: {condition:?}"),
    )?;
    let requests = ctx.crrs().list(&ListParams::default()).await?.items.len();
    check(requests == 1, || {
        format!("{requests} requests after the first failure")
    })
}

async fn deleted_midway(ctx: Ctx) -> anyhow::Result<()> {
    deployment_of(&ctx, "web", 6).await?;
    create_rollout(
        &ctx,
        "restart-app",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"],
               "recreateStrategy": {"unreadyGracePeriodSeconds": 3}}),
    )
    .await?;
    // The first request in flight, then the rollout goes.
    wait(
        rollouts(&ctx),
        "restart-app",
        Duration::from_secs(60),
        |rollout: Option<&ContainerRecreateRollout>| {
            rollout
                .and_then(|rollout| rollout.status.as_ref())
                .is_some_and(|status| status.in_flight >= 1)
        },
    )
    .await?;
    rollouts(&ctx)
        .delete("restart-app", &DeleteParams::foreground())
        .await?;
    wait(
        rollouts(&ctx),
        "restart-app",
        Duration::from_secs(120),
        |rollout: Option<&ContainerRecreateRollout>| rollout.is_none(),
    )
    .await
    .context("the rollout was never deleted")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = ctx.crrs().list(&ListParams::default()).await?.items;
        if left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let finalizers: Vec<_> = left.iter().map(|crr| crr.finalizers().to_vec()).collect();
            return Err(anyhow!("requests left: {finalizers:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    all_ready(&ctx, "web", 6).await.map(|_| ())
}

async fn scaled_up(ctx: Ctx) -> anyhow::Result<()> {
    let before = deployment_of(&ctx, "web", 4).await?;
    create_rollout(
        &ctx,
        "restart-app",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"],
               "recreateStrategy": {"minStartedSeconds": 3}}),
    )
    .await?;
    wait(
        rollouts(&ctx),
        "restart-app",
        Duration::from_secs(60),
        |rollout: Option<&ContainerRecreateRollout>| {
            rollout
                .and_then(|rollout| rollout.status.as_ref())
                .is_some_and(|status| status.in_flight >= 1)
        },
    )
    .await?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(ctx.client.clone(), &ctx.namespace);
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 6}})),
        )
        .await?;
    let done = wait_phase(&ctx, "restart-app", "Completed").await?;
    let status = done.status.unwrap_or_default();
    check(status.recreated == 4 && status.target_pods == 4, || {
        format!("status: {status:?}")
    })?;
    recreated_in_place(&ctx, &before, 1).await?;
    let old: Vec<String> = before.iter().map(ResourceExt::name_any).collect();
    for pod in all_ready(&ctx, "web", 6).await? {
        if !old.contains(&pod.name_any()) {
            let restarts = container(&pod, "app")?.restart_count;
            check(restarts == 0, || {
                format!("new pod {} restarted {restarts} times", pod.name_any())
            })?;
        }
    }
    Ok(())
}

async fn refused(ctx: Ctx) -> anyhow::Result<()> {
    deployment_of(&ctx, "web", 1).await?;
    let attempt = |name: &'static str, spec: Value| {
        let ctx = ctx.clone();
        async move {
            let error = create_rollout(&ctx, name, spec)
                .await
                .err()
                .ok_or_else(|| anyhow!("rollout {name} was admitted"))?;
            Ok::<String, anyhow::Error>(format!("{error:#}"))
        }
    };
    let missing = attempt(
        "cache",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app", "cache"]}),
    )
    .await?;
    check(missing.contains("has no container cache"), || {
        missing.clone()
    })?;
    let both = attempt(
        "both",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                          "selector": {"matchLabels": {"app": "web"}}},
               "containers": ["app"]}),
    )
    .await?;
    check(
        both.contains("exactly one of workloadRef and selector"),
        || both.clone(),
    )?;
    create_rollout(
        &ctx,
        "fine",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"], "paused": true}),
    )
    .await?;
    let changed = rollouts(&ctx)
        .patch(
            "fine",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"containers": ["sidecar"]}})),
        )
        .await
        .err()
        .map(|error| error.to_string())
        .ok_or_else(|| anyhow!("the containers of a rollout changed"))?;
    check(changed.contains("immutable except paused"), || {
        changed.clone()
    })
}

/// `kubectl crr rollout` by kubectl's rules. Beside a paused rollout of the same Deployment
/// (`web-held`), `--dry-run=server` prints the plan and stores nothing; `rollout deploy/web -c app
/// --wait` warns of the paused one, creates, follows and exits 0.
/// Then `status deploy/web` waits for the newest rollout of the workload (exit 0 once Completed),
/// `list -o name` and `history` show both, oldest first; `pause` of the finished rollout is
/// refused (exit 1), a selector the API would refuse is a usage error (exit 2); `abort` deletes,
/// and `status` of a deleted rollout exits 1.
async fn plugin(ctx: Ctx) -> anyhow::Result<()> {
    let before = deployment_of(&ctx, "web", 4).await?;
    create_rollout(
        &ctx,
        "web-held",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"], "paused": true}),
    )
    .await?;
    wait_phase(&ctx, "web-held", "Paused").await?;
    // --dry-run=server: the webhook checks it, nothing is stored, the plan is printed.
    let dry = ctx
        .plugin(&[
            "rollout",
            "deploy/web",
            "-c",
            "app",
            "--max-unavailable",
            "50%",
            "--dry-run=server",
        ])
        .await?;
    let plan = String::from_utf8_lossy(&dry.stdout).into_owned();
    check(
        dry.status.success()
            && plan.contains("(dry run, server): Deployment/web, containers app")
            && plan.contains("4 pods, restarted in this order")
            && plan.contains("at most 2 unavailable at once (maxUnavailable 50% of 4)"),
        || {
            format!(
                "rollout --dry-run=server: exit {:?}: {plan}{}",
                dry.status.code(),
                String::from_utf8_lossy(&dry.stderr)
            )
        },
    )?;
    let stored = rollouts(&ctx)
        .list(&ListParams::default())
        .await?
        .items
        .len();
    check(stored == 1, || {
        format!("{stored} rollouts after a dry run, not 1")
    })?;
    // Creation times count whole seconds: the plugin's rollout is the newer one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let output = ctx
        .plugin(&[
            "rollout",
            "deploy/web",
            "-c",
            "app",
            "--max-unavailable",
            "50%",
            "--wait",
            "--timeout",
            "3m",
        ])
        .await?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    check(output.status.code() == Some(0), || {
        format!("exit {:?}: {stdout}{stderr}", output.status.code())
    })?;
    check(
        stderr.contains("containerrecreaterollout/web-held") && stderr.contains("has not finished"),
        || format!("no warning of the paused rollout: {stderr}"),
    )?;
    let name = stdout
        .lines()
        .find_map(|line| line.strip_prefix("containerrecreaterollout/"))
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| anyhow!("no rollout named in: {stdout}"))?
        .to_owned();
    check(
        stdout.contains("Completed [####################] 4/4 recreated"),
        || stdout.clone(),
    )?;
    recreated_in_place(&ctx, &before, 1).await?;
    let status = ctx
        .plugin(&["rollout", "status", "deploy/web", "--timeout", "30s"])
        .await?;
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    check(
        status.status.code() == Some(0) && text.contains(&format!("{name}: Completed")),
        || format!("status deploy/web: exit {:?}: {text}", status.status.code()),
    )?;
    let listed = ctx
        .plugin(&["rollout", "list", "deploy/web", "-o", "name"])
        .await?;
    let names = String::from_utf8_lossy(&listed.stdout).into_owned();
    let mut expected = vec![
        "containerrecreaterollout.crr.dev/web-held".to_owned(),
        format!("containerrecreaterollout.crr.dev/{name}"),
    ];
    expected.sort();
    check(names.lines().collect::<Vec<_>>() == expected, || {
        format!("rollout list -o name: {names}")
    })?;
    let history = ctx.plugin(&["rollout", "history", "deploy/web"]).await?;
    let rows: Vec<Vec<String>> = String::from_utf8_lossy(&history.stdout)
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect();
    check(
        rows.len() == 2
            && rows[0][..3] == ["1", "web-held", "manual"]
            && rows[0][4] == "Paused"
            && rows[1][..2] == ["2".to_owned(), name.clone()]
            && rows[1][4] == "Completed",
        || format!("rollout history: {rows:?}"),
    )?;
    let pause = ctx.plugin(&["rollout", "pause", &name]).await?;
    let error = String::from_utf8_lossy(&pause.stderr).into_owned();
    check(
        pause.status.code() == Some(1)
            && error.contains("is Completed: a finished rollout cannot be paused"),
        || {
            format!(
                "pause of a finished rollout: exit {:?}: {error}",
                pause.status.code()
            )
        },
    )?;
    let usage = ctx
        .plugin(&["rollout", "-l", "app web", "-c", "app"])
        .await?;
    check(usage.status.code() == Some(2), || {
        format!(
            "a bad selector: exit {:?}: {}",
            usage.status.code(),
            String::from_utf8_lossy(&usage.stderr)
        )
    })?;
    // Abort keeps the object: a finished rollout is refused, the paused one ends Aborted.
    let refused = ctx.plugin(&["rollout", "abort", &name]).await?;
    check(
        refused.status.code() == Some(1)
            && String::from_utf8_lossy(&refused.stderr)
                .contains("is Completed: a finished rollout cannot be aborted"),
        || {
            format!(
                "abort of a finished rollout: exit {:?}: {}",
                refused.status.code(),
                String::from_utf8_lossy(&refused.stderr)
            )
        },
    )?;
    let abort = ctx.plugin(&["rollout", "abort", "web-held"]).await?;
    check(abort.status.success(), || {
        String::from_utf8_lossy(&abort.stderr).into_owned()
    })?;
    let aborted = wait_phase(&ctx, "web-held", "Aborted").await?;
    let stalled = aborted
        .status
        .iter()
        .flat_map(|status| &status.conditions)
        .find(|condition| condition.type_ == "Stalled")
        .map(|condition| (condition.status.clone(), condition.reason.clone()));
    check(
        stalled == Some(("True".to_owned(), "Aborted".to_owned())),
        || format!("Stalled condition of an aborted rollout: {stalled:?}"),
    )?;
    let status = ctx
        .plugin(&["rollout", "status", "web-held", "--watch=false"])
        .await?;
    check(status.status.code() == Some(3), || {
        format!(
            "status of an aborted rollout: exit {:?}: {}",
            status.status.code(),
            String::from_utf8_lossy(&status.stdout)
        )
    })?;
    // An abort cannot be undone: the webhook refuses it.
    let undo = rollouts(&ctx)
        .patch(
            "web-held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"aborted": false}})),
        )
        .await;
    check(
        matches!(&undo, Err(kube::Error::Api(status))
            if status.code == 400 && status.message.contains("an aborted rollout can not be resumed")),
        || format!("unsetting aborted: {undo:?}"),
    )?;
    // Retry: a new rollout of the pods the aborted one never started (all 4), kept apart.
    let retry = ctx
        .plugin(&[
            "rollout",
            "retry",
            "web-held",
            "--name",
            "web-again",
            "-w",
            "--timeout",
            "3m",
        ])
        .await?;
    let retried = String::from_utf8_lossy(&retry.stdout).into_owned();
    check(
        retry.status.code() == Some(0)
            && retried.contains("4 pods containerrecreaterollout/web-held did not recreate")
            && retried.contains("Completed [####################] 4/4 recreated"),
        || {
            format!(
                "retry: exit {:?}: {retried}{}",
                retry.status.code(),
                String::from_utf8_lossy(&retry.stderr)
            )
        },
    )?;
    let again = rollouts(&ctx).get("web-again").await?;
    check(
        again.spec.only_pods.len() == 4
            && again
                .annotations()
                .get("crr.dev/retry-of")
                .map(String::as_str)
                == Some("web-held"),
        || {
            format!(
                "the retry's spec and annotations: {:?} {:?}",
                again.spec, again.metadata.annotations
            )
        },
    )?;
    let history = ctx.plugin(&["rollout", "history", "deploy/web"]).await?;
    let history = String::from_utf8_lossy(&history.stdout).into_owned();
    check(
        history.lines().any(|line| {
            line.starts_with("3 ")
                && line.contains("web-again")
                && line.contains("retry of web-held")
        }),
        || format!("rollout history after the retry: {history}"),
    )?;
    let nothing = ctx.plugin(&["rollout", "retry", "web-again"]).await?;
    check(
        nothing.status.code() == Some(1)
            && String::from_utf8_lossy(&nothing.stderr).contains("nothing to retry"),
        || {
            format!(
                "retry of a rollout that recreated every pod: exit {:?}: {}",
                nothing.status.code(),
                String::from_utf8_lossy(&nothing.stderr)
            )
        },
    )?;
    let missing = ctx.plugin(&["rollout", "status", "nope"]).await?;
    let error = String::from_utf8_lossy(&missing.stderr).into_owned();
    check(
        missing.status.code() == Some(1) && error.contains("not found"),
        || error.clone(),
    )
}

/// Abort with a request queued: a user's request holds a pod (in its unready grace period), the
/// rollout's request for the same pod (`onlyPods`) waits behind it; `aborted: true` deletes the
/// queued request, the rollout ends Aborted with the pod not started, and the user's request is
/// untouched and succeeds.
async fn aborted(ctx: Ctx) -> anyhow::Result<()> {
    let pods = deployment_of(&ctx, "web", 2).await?;
    let pod = pods[0].name_any();
    let user = ctx
        .create_crr(
            crr_e2e::Version::V1beta1,
            json!({"metadata": {"name": "user"},
                   "spec": {"podName": pod, "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": 15},
                            "activeDeadlineSeconds": 120}}),
        )
        .await?;
    wait(
        ctx.crrs(),
        &user,
        Duration::from_secs(60),
        |crr: Option<&crr_crds::v1beta1::ContainerRecreateRequest>| {
            crr.and_then(|crr| crr.status.as_ref())
                .is_some_and(|status| status.phase == Some(crr_crds::v1beta1::Phase::Recreating))
        },
    )
    .await
    .context("the user's request was never picked up")?;
    create_rollout(
        &ctx,
        "stop-me",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"], "onlyPods": [pod]}),
    )
    .await?;
    // The rollout's request, queued by the node daemon behind the user's: it says so.
    let mine = ListParams::default().labels("crr.dev/rollout=stop-me");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let listed = ctx.crrs().list(&mine).await?.items;
        let queued = listed.iter().find_map(|crr| {
            crr.condition("Queued")
                .filter(|condition| condition.status == "True")
                .map(|condition| condition.message.clone())
        });
        if let Some(message) = queued {
            check(message.contains("waiting for request user"), || {
                format!("the Queued condition's message: {message}")
            })?;
            break;
        }
        check(tokio::time::Instant::now() < deadline, || {
            format!("the rollout's request was never marked queued: {listed:?}")
        })?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rollouts(&ctx)
        .patch(
            "stop-me",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"aborted": true}})),
        )
        .await?;
    let done = wait_phase(&ctx, "stop-me", "Aborted").await?;
    // As Flux and a CI job wait for it: kstatus's Stalled, and Reconciling no more.
    for condition in ["condition=Stalled", "condition=Reconciling=false"] {
        let waited = crr_e2e::kubectl_with_stdin(
            &[
                "-n",
                &ctx.namespace,
                "wait",
                &format!("--for={condition}"),
                "containerrecreaterollout/stop-me",
                "--timeout=30s",
            ],
            None,
        )
        .await?;
        check(waited.status.success(), || {
            format!(
                "kubectl wait --for={condition}: {}",
                String::from_utf8_lossy(&waited.stderr)
            )
        })?;
    }
    let status = done.status.unwrap_or_default();
    check(
        status.target_pods == 1 && status.pending == 1 && status.in_flight == 0,
        || format!("the aborted rollout's counts: {status:?}"),
    )?;
    let left = ctx.crrs().list(&mine).await?.items;
    check(left.is_empty(), || {
        format!("the queued request was not deleted: {left:?}")
    })?;
    let finished = ctx.wait_completed(&user, Duration::from_secs(120)).await?;
    crr_e2e::succeeded(&finished, 1)
}

/// The operator's cap on rollouts running at once in the cluster (10 as installed): with ten
/// running (started, held by a PDB that allows nothing), an eleventh waits with reason
/// `WaitingForClusterCap` and no start time; once one of the ten is deleted, it starts at once
/// (the deletion wakes it).
async fn cluster_cap(ctx: Ctx) -> anyhow::Result<()> {
    const CAP: usize = 10;
    deployment_of(&ctx, "web", 1).await?;
    budget_over(
        &ctx,
        json!({"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}),
        1,
        0,
    )
    .await?;
    // Rollouts of other scenarios still running count against the same cap.
    let all: Api<ContainerRecreateRollout> = Api::all(ctx.client.clone());
    let elsewhere = all
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|rollout| started(rollout) && !finished(rollout))
        .count();
    let holding = CAP.saturating_sub(elsewhere);
    let spec = json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
                      "containers": ["app"]});
    for index in 0..holding {
        create_rollout(&ctx, &format!("hold-{index}"), spec.clone()).await?;
    }
    for index in 0..holding {
        let name = format!("hold-{index}");
        wait(
            rollouts(&ctx),
            &name,
            Duration::from_secs(60),
            move |rollout: Option<&ContainerRecreateRollout>| rollout.is_some_and(started),
        )
        .await
        .with_context(|| format!("rollout {name} never started under the cap"))?;
    }
    create_rollout(&ctx, "over", spec).await?;
    let reason = |rollout: &ContainerRecreateRollout| {
        rollout
            .status
            .as_ref()
            .and_then(|status| {
                status
                    .conditions
                    .iter()
                    .find(|condition| condition.type_ == "Progressing")
            })
            .map(|condition| condition.reason.clone())
    };
    let waiting = wait(
        rollouts(&ctx),
        "over",
        Duration::from_secs(60),
        move |rollout: Option<&ContainerRecreateRollout>| {
            rollout.and_then(reason).as_deref() == Some("WaitingForClusterCap")
        },
    )
    .await
    .context("the eleventh rollout never waited for the cluster's cap")?
    .ok_or_else(|| anyhow!("rollout over vanished"))?;
    check(!started(&waiting), || {
        format!("a rollout over the cap started: {:?}", waiting.status)
    })?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = rollouts(&ctx).get("over").await?;
    check(!started(&still), || {
        format!("a rollout over the cap started: {:?}", still.status)
    })?;
    rollouts(&ctx)
        .delete("hold-0", &DeleteParams::default())
        .await?;
    let took = std::time::Instant::now();
    // Woken by the deletion, not by its fallback look a minute after the last.
    wait(
        rollouts(&ctx),
        "over",
        Duration::from_secs(30),
        move |rollout: Option<&ContainerRecreateRollout>| rollout.is_some_and(started),
    )
    .await
    .context("the waiting rollout did not start within 30 s of a slot freeing")?;
    println!(
        "rollouts:   {holding} running here and {elsewhere} elsewhere; the eleventh waited, then started {:.1}s after a slot freed",
        took.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A rollout applied from Git, as Argo CD or Flux apply it (`kubectl apply`), runs once: applied
/// again after it completed, nothing restarts a second time. A later `paused` edit of the
/// finished rollout is observed (`observedGeneration` catches up) and changes nothing else.
async fn reapplied(ctx: Ctx) -> anyhow::Result<()> {
    let before = deployment_of(&ctx, "web", 2).await?;
    let manifest = json!({"apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
                          "metadata": {"name": "from-git"},
                          "spec": {"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
                                   "containers": ["app"]}});
    apply(&ctx, manifest.clone()).await?;
    let done = wait_phase(&ctx, "from-git", "Completed").await?;
    // kstatus (Flux): no longer Reconciling, never Stalled.
    let truth = |type_: &str| {
        done.status.as_ref().and_then(|status| {
            status
                .conditions
                .iter()
                .find(|condition| condition.type_ == type_)
                .map(|condition| condition.status.clone())
        })
    };
    check(
        truth("Reconciling").as_deref() == Some("False") && truth("Stalled").is_none(),
        || {
            format!(
                "kstatus conditions of a completed rollout: {:?}",
                done.status
            )
        },
    )?;
    all_ready(&ctx, "web", 2).await?;
    recreated_in_place(&ctx, &before, 1).await?;
    apply(&ctx, manifest).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    all_ready(&ctx, "web", 2).await?;
    recreated_in_place(&ctx, &before, 1)
        .await
        .context("after the same manifest was applied again")?;
    rollouts(&ctx)
        .patch(
            "from-git",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await?;
    let observed = wait(
        rollouts(&ctx),
        "from-git",
        Duration::from_secs(30),
        |rollout: Option<&ContainerRecreateRollout>| {
            rollout.is_some_and(|rollout| {
                rollout.metadata.generation
                    == rollout
                        .status
                        .as_ref()
                        .and_then(|status| status.observed_generation)
            })
        },
    )
    .await
    .context("a paused edit of the finished rollout was never observed")?
    .ok_or_else(|| anyhow!("rollout from-git vanished"))?;
    check(
        observed
            .phase()
            .is_some_and(|phase| phase.as_str() == "Completed"),
        || format!("the finished rollout is now {:?}", observed.phase()),
    )?;
    recreated_in_place(&ctx, &before, 1).await
}

/// How many paused rollouts the tenant makes: the cluster's cap as installed.
const PAUSED: usize = 10;

/// A tenant (`edit` and a Role on rollouts in its own namespace) makes as many paused rollouts
/// as the cluster's cap over its own pod: paused, none starts (no start time) and none holds a
/// slot, so another namespace's rollout starts within 10 s. Resumed, a paused one starts and ends.
async fn tenant_paused(ctx: Ctx) -> anyhow::Result<()> {
    let tenant = Tenant::new(&ctx.client, "pauser").await?;
    let outcome = paused_hold_no_slot(&ctx, &tenant).await;
    tenant.remove(&ctx.client).await;
    outcome
}

async fn paused_hold_no_slot(ctx: &Ctx, tenant: &Tenant) -> anyhow::Result<()> {
    let observed = tenant.observed(&ctx.client);
    tenant
        .apply(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"name": "own"},
                       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "own"}},
                                "template": pod_template("own")}}))
        .await?;
    all_ready(&observed, "own", 1).await?;
    let paused = |name: &str| {
        json!({"apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
               "metadata": {"name": name},
               "spec": {"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                   "name": "own"}},
                        "containers": ["app"], "paused": true}})
    };
    for index in 0..PAUSED {
        tenant.apply(&paused(&format!("paused-{index}"))).await?;
    }
    for index in 0..PAUSED {
        let rollout = wait_phase(&observed, &format!("paused-{index}"), "Paused").await?;
        check(!started(&rollout), || {
            format!("paused-{index} shows a start time: {:?}", rollout.status)
        })?;
    }
    let before = deployment_of(ctx, "web", 1).await?;
    let asked = std::time::Instant::now();
    create_rollout(
        ctx,
        "theirs",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"]}),
    )
    .await?;
    wait(
        rollouts(ctx),
        "theirs",
        Duration::from_secs(10),
        |rollout: Option<&ContainerRecreateRollout>| rollout.is_some_and(started),
    )
    .await
    .context("another namespace's rollout did not start within 10 s beside the paused ones")?;
    println!(
        "{PAUSED} paused rollouts in {}: another namespace's rollout started after {:.2} s",
        tenant.namespace,
        asked.elapsed().as_secs_f64()
    );
    wait_phase(ctx, "theirs", "Completed").await?;
    recreated_in_place(ctx, &before, 1).await?;
    // Resumed, a paused rollout starts and ends as any.
    let resumed = tenant
        .kubectl(
            &[
                "patch",
                "containerrecreaterollout",
                "paused-0",
                "--type=merge",
                "-p",
                r#"{"spec":{"paused":false}}"#,
            ],
            None,
        )
        .await?;
    check(resumed.status.success(), || {
        format!("resuming: {}", String::from_utf8_lossy(&resumed.stderr))
    })?;
    let done = wait_phase(&observed, "paused-0", "Completed").await?;
    check(
        started(&done)
            && done
                .status
                .as_ref()
                .is_some_and(|status| status.recreated == 1),
        || format!("the resumed rollout: {:?}", done.status),
    )
}

/// A Deployment with one pod more than the cluster has nodes, each pod refusing to share a node
/// with another (required anti-affinity): one stays Pending. A rollout over it (`maxUnavailable`
/// all of them) restarts the Running pods, skips the Pending one (admission refuses a request for
/// it) and ends `Completed`, its status written from its first reconcile.
async fn pending_pod(ctx: Ctx) -> anyhow::Result<()> {
    let nodes = crr_e2e::ready_nodes(&ctx.client).await?.len();
    let running = i32::try_from(nodes)?;
    let mut template = pod_template("spread");
    template["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "spread"}},
            "topologyKey": "kubernetes.io/hostname"}]}});
    apply(
        &ctx,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "spread"},
               "spec": {"replicas": running + 1, "selector": {"matchLabels": {"app": "spread"}},
                        "template": template}}),
    )
    .await?;
    let (before, pending) = ready_and_pending(&ctx, running).await?;
    create_rollout(
        &ctx,
        "spread",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "spread"}},
               "containers": ["app"], "maxUnavailable": running + 1}),
    )
    .await?;
    // A status from the first reconcile: a phase within seconds, not an empty status.
    wait(
        rollouts(&ctx),
        "spread",
        Duration::from_secs(15),
        |rollout: Option<&ContainerRecreateRollout>| {
            rollout.is_some_and(|rollout| rollout.phase().is_some())
        },
    )
    .await
    .context("the rollout wrote no status within 15 s")?;
    let done = wait_phase(&ctx, "spread", "Completed").await?;
    let status = done.status.unwrap_or_default();
    check(
        status.recreated == running && status.target_pods == running && status.skipped == 1,
        || format!("status over {running} Running and 1 Pending ({pending}): {status:?}"),
    )?;
    recreated_in_place(&ctx, &before, 1).await
}

/// `running` Ready pods of `spread` and the name of the one the scheduler found no node for.
async fn ready_and_pending(ctx: &Ctx, running: i32) -> anyhow::Result<(Vec<Pod>, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let mut pods = ctx
            .pods()
            .list(&ListParams::default().labels("app=spread"))
            .await?
            .items;
        pods.sort_by_key(ResourceExt::name_any);
        let pending = pods
            .iter()
            .find(|pod| crr_e2e::pod_condition(pod, "PodScheduled") == Some("False"))
            .map(ResourceExt::name_any);
        let (ready, _): (Vec<Pod>, Vec<Pod>) = pods.into_iter().partition(crr_e2e::pod_ready);
        if let Some(pending) = pending
            && ready.len() == usize::try_from(running)?
        {
            return Ok((ready, pending));
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "not {running} Ready pods of spread and one unscheduled after 180 s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A rollout that cannot progress (its only pod behind a PodDisruptionBudget of
/// `maxUnavailable: 0`) ends `Failed` with reason `ProgressDeadlineExceeded` once its progress
/// deadline (5 s here) passes: it gives its slot under the cluster's cap back.
async fn progress_deadline(ctx: Ctx) -> anyhow::Result<()> {
    let before = deployment_of(&ctx, "web", 1).await?;
    budget_over(
        &ctx,
        json!({"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}),
        1,
        0,
    )
    .await?;
    let asked = std::time::Instant::now();
    create_rollout(
        &ctx,
        "blocked",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["app"], "progressDeadlineSeconds": 5}),
    )
    .await?;
    let failed = wait_phase(&ctx, "blocked", "Failed").await?;
    let took = asked.elapsed().as_secs_f64();
    let reason = |type_: &str| {
        failed
            .status
            .as_ref()
            .and_then(|status| status.conditions.iter().find(|c| c.type_ == type_))
            .map(|condition| condition.reason.clone())
    };
    check(
        reason("Failed").as_deref() == Some("ProgressDeadlineExceeded")
            && reason("Stalled").as_deref() == Some("ProgressDeadlineExceeded"),
        || format!("the blocked rollout's status: {:?}", failed.status),
    )?;
    println!("a rollout blocked by its budget ended Failed after {took:.1} s (deadline 5 s)");
    check(took < 60.0, || {
        format!("the 5 s progress deadline ended the rollout only after {took:.1} s")
    })?;
    recreated_in_place(&ctx, &before, 0).await
}

/// A rollout deleted and made again at once under the same name is a new rollout: it does not
/// adopt its predecessor's requests (found by owner UID, not by name), and restarts its pods
/// again.
async fn made_again(ctx: Ctx) -> anyhow::Result<()> {
    let before = deployment_of(&ctx, "web", 1).await?;
    let spec = json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
                      "containers": ["app"]});
    create_rollout(&ctx, "again", spec.clone()).await?;
    let first = wait_phase(&ctx, "again", "Completed").await?;
    let first_uid = crr_e2e::uid(&first)?;
    recreated_in_place(&ctx, &before, 1).await?;
    rollouts(&ctx)
        .delete("again", &DeleteParams::background())
        .await?;
    wait(
        rollouts(&ctx),
        "again",
        Duration::from_secs(30),
        |rollout: Option<&ContainerRecreateRollout>| rollout.is_none(),
    )
    .await
    .context("the first rollout was not deleted")?;
    create_rollout(&ctx, "again", spec).await?;
    let second = wait_phase(&ctx, "again", "Completed").await?;
    check(crr_e2e::uid(&second)? != first_uid, || {
        "the second rollout is the first".to_owned()
    })?;
    let status = second.status.unwrap_or_default();
    check(status.recreated == 1, || {
        format!("the rollout made again: {status:?}")
    })?;
    all_ready(&ctx, "web", 1).await?;
    recreated_in_place(&ctx, &before, 2).await
}
