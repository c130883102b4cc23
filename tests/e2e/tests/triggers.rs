//! Trigger scenarios against crr installed on the local test bed:
//! `cargo test -p crr-e2e --test triggers -- --include-ignored [FILTER]` (hack/cluster-test.sh).
//! A workload opts in with annotations; crr starts rollouts of it when a ConfigMap it uses
//! changes, or on a schedule, says so in Events on the workload, and keeps what it did in the
//! workload's TriggerRecord (never on the workload).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use crr_crds::keys;
use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::trigger_record::{RecordedWorkload, TriggerRecord, record_name};
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_e2e::rollout::{
    Unavailable, all_ready, apply, budget_over, finished, pod_template, recreated_in_place,
    rollouts, started, wait_phase,
};
use crr_e2e::tenant::Tenant;
use crr_e2e::{Ctx, Scenario, check, faults};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use serde_json::{Value, json};

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "trigger-config-change",
            run: |ctx| Box::pin(config_change(ctx)),
        },
        Scenario {
            name: "trigger-schedule",
            run: |ctx| Box::pin(schedule(ctx)),
        },
        Scenario {
            name: "trigger-secret-ignored",
            run: |ctx| Box::pin(secret_ignored(ctx)),
        },
        Scenario {
            name: "trigger-secret-change",
            run: |ctx| Box::pin(secret_change(ctx)),
        },
        Scenario {
            name: "trigger-reloader",
            run: |ctx| Box::pin(reloader(ctx)),
        },
        Scenario {
            name: "record-migration",
            run: |ctx| Box::pin(record_migration(ctx)),
        },
        Scenario {
            name: "trigger-window",
            run: |ctx| Box::pin(window(ctx)),
        },
        Scenario {
            name: "trigger-restart-requested",
            run: |ctx| Box::pin(restart_requested(ctx)),
        },
        Scenario {
            name: "trigger-churn",
            run: |ctx| Box::pin(churn(ctx)),
        },
        Scenario {
            name: "trigger-cluster-cap",
            run: |ctx| Box::pin(cluster_cap(ctx)),
        },
        Scenario {
            name: "tenant-forged-trigger-labels",
            run: |ctx| Box::pin(forged_trigger_labels(ctx)),
        },
        Scenario {
            name: "trigger-record-refused",
            run: |ctx| Box::pin(record_refused(ctx)),
        },
    ]
}

fn main() {
    crr_e2e::installed_suite_main("triggers", scenarios());
}

fn config_map(data: &str, label: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "app-config", "labels": {"edited": label}},
           "data": {"setting": data}})
}

/// A Deployment of `replicas` pods of `app` and `sidecar` with these annotations; only `app`
/// mounts the ConfigMap `app-config`, and prints its `setting` when it starts
/// (`setting=<data>`, read by [`app_reads`]).
fn web(replicas: i32, annotations: Value) -> Value {
    web_named("web", replicas, annotations)
}

/// [`web`], named (and its pods labelled `app: <name>`) `name`.
fn web_named(name: &str, replicas: i32, annotations: Value) -> Value {
    let mut template = pod_template(name);
    template["spec"]["containers"][0]["command"] = json!([
        "sh",
        "-c",
        format!(
            "echo setting=$(cat /etc/app/setting); {}",
            crr_e2e::EXIT_ON_TERM_LOOP
        )
    ]);
    template["spec"]["volumes"] = json!([{"name": "config", "configMap": {"name": "app-config"}}]);
    template["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "config", "mountPath": "/etc/app"}]);
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "annotations": annotations},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": template}})
}

/// Every pod of `web`: its running `app` started with the ConfigMap's data at `data` (the line
/// it printed when it started).
async fn app_reads(ctx: &Ctx, data: &str) -> anyhow::Result<()> {
    let pods = ctx
        .pods()
        .list(&ListParams::default().labels("app=web"))
        .await?;
    for pod in pods
        .items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
    {
        let params = LogParams {
            container: Some("app".to_owned()),
            ..LogParams::default()
        };
        let log = ctx.pods().logs(&pod.name_any(), &params).await?;
        let read = log
            .lines()
            .find_map(|line| line.strip_prefix("setting="))
            .unwrap_or_default();
        check(read == data, || {
            format!(
                "{}'s app started with setting {read:?}, where app-config holds {data:?}",
                pod.name_any()
            )
        })?;
    }
    Ok(())
}

fn deployments(ctx: &Ctx) -> Api<Deployment> {
    Api::namespaced(ctx.client.clone(), &ctx.namespace)
}

/// The rollouts a trigger created in the namespace.
async fn trigger_rollouts(
    ctx: &Ctx,
    trigger: &str,
) -> anyhow::Result<Vec<ContainerRecreateRollout>> {
    Ok(rollouts(ctx)
        .list(&ListParams::default().labels(&format!("{}={trigger}", keys::LABEL_ROLLOUT_TRIGGER)))
        .await?
        .items)
}

fn records(ctx: &Ctx) -> Api<TriggerRecord> {
    Api::namespaced(ctx.client.clone(), &ctx.namespace)
}

/// The config hashes of the Deployment `web`'s TriggerRecord (`configmap/<name>` or
/// `secret/<name>` to hash), once `condition` holds of them; polled.
async fn until_recorded(
    ctx: &Ctx,
    what: &str,
    within: Duration,
    condition: impl Fn(&BTreeMap<String, String>) -> bool,
) -> anyhow::Result<BTreeMap<String, String>> {
    let name = record_name("Deployment", "web");
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let hashes = records(ctx)
            .get_opt(&name)
            .await?
            .and_then(|record| record.spec.config_hashes);
        if let Some(hashes) = hashes.filter(|hashes| condition(hashes)) {
            return Ok(hashes);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!("{what}: not after {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the TriggerRecord of the Deployment `web` has a hash of `object`
/// (`configmap/app-config`); returns its config hashes.
async fn recorded(
    ctx: &Ctx,
    object: &str,
    within: Duration,
) -> anyhow::Result<BTreeMap<String, String>> {
    until_recorded(ctx, &format!("{object} recorded"), within, |hashes| {
        hashes.contains_key(object)
    })
    .await
}

/// Waits for an Event with `reason` on the Deployment `web`; returns its note.
async fn web_event(ctx: &Ctx, reason: &str, within: Duration) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let events = ctx.events_regarding("Deployment", "web", reason).await?;
        if let Some(event) = events.first() {
            return Ok(event.note.clone().unwrap_or_default());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "no {reason} Event on the Deployment web after {within:?}"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Polls until a rollout of `trigger` exists; returns the first.
async fn first_rollout(
    ctx: &Ctx,
    trigger: &str,
    within: Duration,
) -> anyhow::Result<ContainerRecreateRollout> {
    new_rollout(ctx, trigger, &[], within).await
}

/// Polls until a rollout of `trigger` not named in `known` exists; returns it.
async fn new_rollout(
    ctx: &Ctx,
    trigger: &str,
    known: &[String],
    within: Duration,
) -> anyhow::Result<ContainerRecreateRollout> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(rollout) = trigger_rollouts(ctx, trigger)
            .await?
            .into_iter()
            .find(|rollout| !known.contains(&rollout.name_any()))
        {
            return Ok(rollout);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "no {trigger} rollout besides {known:?} after {within:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// No rollout of `trigger` appears for `quiet`.
async fn none_for(ctx: &Ctx, trigger: &str, quiet: Duration, after: &str) -> anyhow::Result<()> {
    tokio::time::sleep(quiet).await;
    let found = trigger_rollouts(ctx, trigger).await?;
    check(found.is_empty(), || {
        format!(
            "{after} started {:?}",
            found.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        )
    })
}

/// Restarts the operator (a rollout restart of its Deployment) and waits until a new replica
/// holds the Lease.
async fn restart_operator(ctx: &Ctx) -> anyhow::Result<()> {
    roll_operator(
        ctx,
        &[
            "-n",
            "crr-system",
            "rollout",
            "restart",
            "deployment/crr-operator",
        ],
    )
    .await
}

/// Runs `change` (a kubectl command that rolls the operator's Deployment), waits for the
/// rollout and until a replica that did not run before holds the Lease.
async fn roll_operator(ctx: &Ctx, change: &[&str]) -> anyhow::Result<()> {
    let old: Vec<String> =
        faults::component_pods(&ctx.client, "app.kubernetes.io/name=crr-operator")
            .await?
            .iter()
            .map(ResourceExt::name_any)
            .collect();
    for args in [
        change,
        &[
            "-n",
            "crr-system",
            "rollout",
            "status",
            "deployment/crr-operator",
            "--timeout=180s",
        ][..],
    ] {
        let output = crr_e2e::kubectl(args).await?;
        check(output.status.success(), || {
            format!(
                "kubectl {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(leader) = faults::operator_leader(&ctx.client).await
            && !old.contains(&leader.name_any())
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!("no new operator replica took the Lease"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `app-config` holding `data`, and `web` of `replicas` pods with the config-change trigger, Ready
/// and recorded (first sight: the operator records what it saw and restarts nothing); its pods.
async fn triggered_web(ctx: &Ctx, data: &str, replicas: i32) -> anyhow::Result<Vec<Pod>> {
    apply(ctx, config_map(data, "no")).await?;
    let trigger = json!({keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true"});
    apply(ctx, web(replicas, trigger)).await?;
    let pods = all_ready(ctx, "web", replicas).await?;
    recorded(ctx, "configmap/app-config", Duration::from_secs(60)).await?;
    Ok(pods)
}

async fn config_change(ctx: Ctx) -> anyhow::Result<()> {
    let before = triggered_web(&ctx, "one", 3).await?;

    // Labels only: nothing.
    apply(&ctx, config_map("one", "yes")).await?;
    none_for(
        &ctx,
        "config-change",
        Duration::from_secs(8),
        "a label edit",
    )
    .await?;

    // The operator restarts: nothing.
    restart_operator(&ctx).await?;
    none_for(
        &ctx,
        "config-change",
        Duration::from_secs(10),
        "an operator restart",
    )
    .await?;
    recreated_in_place(&ctx, &before, 0).await?;

    // The data: a rollout of `app` only, one pod at a time.
    let unavailable = Unavailable::watch(&ctx, "web");
    tokio::time::sleep(Duration::from_millis(500)).await;
    apply(&ctx, config_map("two", "yes")).await?;
    let rollout = first_rollout(&ctx, "config-change", Duration::from_secs(60)).await?;
    check(rollout.spec.containers == ["app"], || {
        format!("the rollout recreates {:?}", rollout.spec.containers)
    })?;
    let done = wait_phase(&ctx, &rollout.name_any(), "Completed").await?;
    let status = done.status.unwrap_or_default();
    check(status.recreated == 3, || format!("status: {status:?}"))?;
    let most = unavailable.most();
    check(most <= 1, || {
        format!("{most} pods were unavailable at once")
    })?;
    all_ready(&ctx, "web", 3).await?;
    recreated_in_place(&ctx, &before, 1).await?;
    app_reads(&ctx, "two").await?;
    // Its requests are kept an hour after they finish (the rollout keeps their outcome).
    let requests: Api<ContainerRecreateRequest> =
        Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let made = requests
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            keys::LABEL_ROLLOUT,
            rollout.name_any()
        )))
        .await?
        .items;
    check(
        made.len() == 3
            && made
                .iter()
                .all(|crr| crr.spec.ttl_seconds_after_finished == Some(3600)),
        || {
            format!(
                "the rollout's requests and their TTLs: {:?}",
                made.iter()
                    .map(|crr| (crr.name_any(), crr.spec.ttl_seconds_after_finished))
                    .collect::<Vec<_>>()
            )
        },
    )?;
    let changed = ctx
        .events_regarding("Deployment", "web", "ConfigChanged")
        .await?;
    check(!changed.is_empty(), || {
        "no ConfigChanged Event on the Deployment".to_owned()
    })?;
    let note = changed[0].note.clone().unwrap_or_default();
    check(
        note.contains("configmap/app-config") && note.contains(&rollout.name_any()),
        || format!("the Event says {note:?}"),
    )?;
    check(
        trigger_rollouts(&ctx, "config-change").await?.len() == 1,
        || "more than one rollout for one change".to_owned(),
    )?;

    // Three, then back to two: both are rolled out. The return's first name is held by the
    // rollout of two, kept for its TTL and Completed: never taken as done. All three pods at once
    // (the kubelet holds a container restarted again soon in its back-off: 10 s, then 20 s).
    apply(
        &ctx,
        web(
            3,
            json!({keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
                   keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE: "3"}),
        ),
    )
    .await?;
    let mut known = vec![rollout.name_any()];
    for (data, recreated) in [("three", 2), ("two", 3)] {
        apply(&ctx, config_map(data, "yes")).await?;
        let next = new_rollout(&ctx, "config-change", &known, Duration::from_secs(60))
            .await
            .with_context(|| format!("app-config's data set to {data}"))?;
        wait_phase(&ctx, &next.name_any(), "Completed").await?;
        all_ready(&ctx, "web", 3).await?;
        recreated_in_place(&ctx, &before, recreated)
            .await
            .with_context(|| {
                format!(
                    "after app-config's data went to {data} ({})",
                    next.name_any()
                )
            })?;
        app_reads(&ctx, data).await?;
        known.push(next.name_any());
    }
    check(known[2] == format!("{}-2", known[0]), || {
        format!(
            "the return to earlier data was rolled out as {:?}",
            known[2]
        )
    })?;
    // `kubectl crr triggers` lists the workload, its trigger and that rollout.
    let output = ctx.plugin(&["triggers"]).await?;
    let listed = String::from_utf8_lossy(&output.stdout);
    check(
        output.status.success()
            && listed.contains("deployment/web")
            && listed.contains("config-change")
            && listed.contains(&format!("{} (Completed", known[2])),
        || {
            format!(
                "kubectl crr triggers printed {listed:?} {}",
                String::from_utf8_lossy(&output.stderr)
            )
        },
    )
}

async fn schedule(ctx: Ctx) -> anyhow::Result<()> {
    apply(&ctx, config_map("one", "no")).await?;
    apply(&ctx, web(2, json!({}))).await?;
    all_ready(&ctx, "web", 2).await?;
    // A budget that allows no disruption: the first scheduled rollout waits, and runs into the
    // next tick. The schedule comes after the budget counts both pods: a tick between the two
    // would start a rollout the budget does not yet hold, which ends, and the skip at the next
    // tick would name the second rollout.
    budget_over(
        &ctx,
        json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
        2,
        0,
    )
    .await?;
    apply(
        &ctx,
        web(
            2,
            json!({keys::ANNOTATION_RECREATE_SCHEDULE: "* * * * *",
                      keys::ANNOTATION_RECREATE_CONTAINERS: "app"}),
        ),
    )
    .await?;
    let rollout = first_rollout(&ctx, "schedule", Duration::from_secs(150))
        .await
        .context("a schedule of every minute started no rollout")?;
    check(rollout.spec.containers == ["app"], || {
        format!(
            "the scheduled rollout recreates {:?}",
            rollout.spec.containers
        )
    })?;
    let note = web_event(&ctx, "ScheduledRolloutSkipped", Duration::from_secs(150)).await?;
    check(note.contains(&rollout.name_any()), || {
        format!("the skip says {note:?}")
    })?;
    check(trigger_rollouts(&ctx, "schedule").await?.len() == 1, || {
        "an overlapping tick started a second rollout".to_owned()
    })
}

/// Without `triggers.secrets` (the default install), a workload whose containers use a Secret
/// gets one Warning Event naming the Secret its trigger ignores; its ConfigMap still counts.
async fn secret_ignored(ctx: Ctx) -> anyhow::Result<()> {
    apply(&ctx, config_map("one", "no")).await?;
    apply(
        &ctx,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "password"},
               "stringData": {"password": "one"}}),
    )
    .await?;
    let mut deployment = web(
        1,
        json!({keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true"}),
    );
    deployment["spec"]["template"]["spec"]["containers"][0]["env"] = json!([
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "password", "key": "password"}}}
    ]);
    apply(&ctx, deployment).await?;
    all_ready(&ctx, "web", 1).await?;
    let note = web_event(&ctx, "SecretsIgnored", Duration::from_secs(60)).await?;
    check(note.contains("secret/password"), || {
        format!("the Event says {note:?}")
    })?;
    // The ConfigMap is still recorded; the Secret is not.
    let record = recorded(&ctx, "configmap/app-config", Duration::from_secs(30)).await?;
    check(
        !record.keys().any(|object| object.starts_with("secret/")),
        || format!("the record has a Secret: {record:?}"),
    )
}

/// Runs `kubectl` with `args`; an error with its stderr unless it succeeds.
async fn kubectl_ok(args: &[&str]) -> anyhow::Result<String> {
    let output = crr_e2e::kubectl(args).await?;
    check(output.status.success(), || {
        format!(
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The operator's arguments as installed (a JSON array).
async fn current_operator_args() -> anyhow::Result<Value> {
    serde_json::from_str(
        &kubectl_ok(&[
            "-n",
            "crr-system",
            "get",
            "deployment",
            "crr-operator",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ])
        .await?,
    )
    .context("the operator's args")
}

/// Sets the operator's arguments (a JSON array) and waits until a new replica leads.
async fn operator_args(ctx: &Ctx, args: &Value) -> anyhow::Result<()> {
    let patch =
        json!([{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}])
            .to_string();
    roll_operator(
        ctx,
        &[
            "-n",
            "crr-system",
            "patch",
            "deployment",
            "crr-operator",
            "--type=json",
            "-p",
            &patch,
        ],
    )
    .await
}

/// With the operator allowed to read this namespace's Secrets (as the chart's
/// `triggers.secrets: true` with `secretNamespaces` sets it up: the flag and a Role here), an
/// env-referenced Secret's data change restarts the container that uses it, in place.
async fn secret_change(ctx: Ctx) -> anyhow::Result<()> {
    let original = current_operator_args().await?;
    let mut allowed = original.as_array().cloned().unwrap_or_default();
    allowed.push(json!(format!("--trigger-secrets={}", ctx.namespace)));
    apply(
        &ctx,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "crr-operator-trigger-secrets"},
               "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]}),
    )
    .await?;
    apply(
        &ctx,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "crr-operator-trigger-secrets"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "crr-operator-trigger-secrets"},
               "subjects": [{"kind": "ServiceAccount", "name": "crr-operator", "namespace": "crr-system"}]}),
    )
    .await?;
    operator_args(&ctx, &Value::Array(allowed)).await?;
    let outcome = secret_change_restarts_app(&ctx).await;
    // The install as it was, whatever happened.
    let restored = operator_args(&ctx, &original).await;
    outcome.and(restored)
}

async fn secret_change_restarts_app(ctx: &Ctx) -> anyhow::Result<()> {
    apply(ctx, config_map("one", "no")).await?;
    let secret = |value: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "password"},
               "stringData": {"password": value}})
    };
    apply(ctx, secret("one")).await?;
    let mut deployment = web(
        2,
        json!({keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true"}),
    );
    deployment["spec"]["template"]["spec"]["containers"][1]["env"] = json!([
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "password", "key": "password"}}}
    ]);
    apply(ctx, deployment).await?;
    let before = all_ready(ctx, "web", 2).await?;
    recorded(ctx, "secret/password", Duration::from_secs(60)).await?;
    apply(ctx, secret("two")).await?;
    let rollout = first_rollout(ctx, "config-change", Duration::from_secs(30)).await?;
    check(rollout.spec.containers == ["sidecar"], || {
        format!(
            "the rollout recreates {:?}, not the Secret's user",
            rollout.spec.containers
        )
    })?;
    wait_phase(ctx, &rollout.name_any(), "Completed").await?;
    all_ready(ctx, "web", 2).await?;
    // `sidecar` uses the Secret: restarted once; `app` (the ConfigMap's) never.
    for old in &before {
        let name = old.name_any();
        let pod = ctx.pods().get(&name).await?;
        check(pod.uid() == old.uid(), || format!("{name} was replaced"))?;
        let app = crr_e2e::container(&pod, "app")?.restart_count;
        let sidecar = crr_e2e::container(&pod, "sidecar")?.restart_count;
        check(app == 0 && sidecar == 1, || {
            format!("{name}: app restarted {app} times, sidecar {sidecar} (want 0, 1)")
        })?;
    }
    Ok(())
}

/// docs/migrating-from-reloader.md's steps: Reloader's `auto` annotation does nothing while
/// `triggers.reloaderAnnotations` is off; with it on (the operator's flag, as the chart sets it),
/// a ConfigMap change restarts the workload in place, and a Reloader Deployment in the cluster
/// brings a `ReloaderAlsoActs` Event on the workload.
async fn reloader(ctx: Ctx) -> anyhow::Result<()> {
    apply(&ctx, config_map("one", "no")).await?;
    apply(&ctx, web(2, json!({keys::RELOADER_AUTO: "true"}))).await?;
    let before = all_ready(&ctx, "web", 2).await?;
    // Off (the default install): nothing.
    apply(&ctx, config_map("two", "no")).await?;
    none_for(
        &ctx,
        "config-change",
        Duration::from_secs(8),
        "Reloader's annotation with the option off",
    )
    .await?;
    // Reloader itself, as its chart deploys it (no pod needed: crr tells it by its image).
    apply(
        &ctx,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "reloader-reloader"},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "reloader"}},
                        "template": {"metadata": {"labels": {"app": "reloader"}},
                                     "spec": {"containers": [{"name": "reloader",
                                                              "image": "ghcr.io/stakater/reloader:v1.4.2"}]}}}}),
    )
    .await?;
    let original = current_operator_args().await?;
    let on: Vec<Value> = original
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|arg| {
            !arg.as_str()
                .is_some_and(|arg| arg.starts_with("--trigger-reloader-annotations"))
        })
        .chain([json!("--trigger-reloader-annotations=true")])
        .collect();
    operator_args(&ctx, &Value::Array(on)).await?;
    let outcome = reloader_restarts_in_place(&ctx, &before).await;
    let restored = operator_args(&ctx, &original).await;
    outcome.and(restored)
}

async fn reloader_restarts_in_place(
    ctx: &Ctx,
    before: &[k8s_openapi::api::core::v1::Pod],
) -> anyhow::Result<()> {
    recorded(ctx, "configmap/app-config", Duration::from_secs(60)).await?;
    let note = web_event(ctx, "ReloaderAlsoActs", Duration::from_secs(30)).await?;
    check(note.contains("reloader-reloader"), || {
        format!("the Event says {note:?}")
    })?;
    apply(ctx, config_map("three", "no")).await?;
    let rollout = first_rollout(ctx, "config-change", Duration::from_secs(60)).await?;
    check(rollout.spec.containers == ["app"], || {
        format!("the rollout recreates {:?}", rollout.spec.containers)
    })?;
    wait_phase(ctx, &rollout.name_any(), "Completed").await?;
    all_ready(ctx, "web", 2).await?;
    recreated_in_place(ctx, before, 1).await
}

/// An upgrade from a release that kept the trigger's record on the workload: a Deployment that
/// has no TriggerRecord but the annotation `crr.dev/config-hashes` of before, whose hash differs
/// from its ConfigMap's data. The operator takes the annotation as the record, so it sees a
/// change and restarts `app` in place; then the TriggerRecord holds the hash of the data rolled
/// out. The Deployment is left as it was: crr writes no workload (same generation, the old
/// annotation unchanged, no field of the operator's in its managedFields).
async fn record_migration(ctx: Ctx) -> anyhow::Result<()> {
    apply(&ctx, config_map("one", "no")).await?;
    let before_upgrade = json!({"configmap/app-config": "0000"}).to_string();
    // The pods Ready first (as a workload's are when crr is upgraded), then the trigger on, so
    // that the rollout finds them Ready.
    apply(
        &ctx,
        web(2, json!({keys::ANNOTATION_CONFIG_HASHES: before_upgrade})),
    )
    .await?;
    let before = all_ready(&ctx, "web", 2).await?;
    apply(
        &ctx,
        web(
            2,
            json!({keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
                   keys::ANNOTATION_CONFIG_HASHES: before_upgrade}),
        ),
    )
    .await?;
    let workload = deployments(&ctx).get("web").await?;
    let uid = workload.uid().context("web has no UID")?;
    let generation = workload.metadata.generation;

    let rollout = first_rollout(&ctx, "config-change", Duration::from_secs(60))
        .await
        .context("the annotation of before was not taken as the record: no rollout")?;
    check(
        rollout.labels().get(keys::LABEL_WORKLOAD_UID) == Some(&uid),
        || format!("the rollout is labelled {:?}", rollout.labels()),
    )?;
    check(rollout.spec.containers == ["app"], || {
        format!("the rollout recreates {:?}", rollout.spec.containers)
    })?;
    wait_phase(&ctx, &rollout.name_any(), "Completed").await?;
    all_ready(&ctx, "web", 2).await?;
    recreated_in_place(&ctx, &before, 1).await?;

    // The record now: the data rolled out, of this workload, owned by it.
    let hashes = until_recorded(
        &ctx,
        "configmap/app-config recorded past the annotation of before",
        Duration::from_secs(30),
        |hashes| {
            hashes
                .get("configmap/app-config")
                .is_some_and(|hash| hash != "0000")
        },
    )
    .await?;
    let record = records(&ctx).get(&record_name("Deployment", "web")).await?;
    check(
        record.spec.workload
            == RecordedWorkload {
                kind: "Deployment".to_owned(),
                name: "web".to_owned(),
                uid: uid.clone(),
            },
        || format!("the record is of {:?}", record.spec.workload),
    )?;
    check(
        record
            .owner_references()
            .iter()
            .any(|owner| owner.kind == "Deployment" && owner.uid == uid),
        || format!("the record is owned by {:?}", record.owner_references()),
    )?;
    check(
        trigger_rollouts(&ctx, "config-change").await?.len() == 1,
        || format!("more than one rollout for one change (record {hashes:?})"),
    )?;

    // The workload as the user left it.
    let after = deployments(&ctx).get("web").await?;
    check(after.metadata.generation == generation, || {
        format!(
            "the Deployment's generation went {generation:?} → {:?}",
            after.metadata.generation
        )
    })?;
    check(
        after.annotations().get(keys::ANNOTATION_CONFIG_HASHES) == Some(&before_upgrade),
        || {
            format!(
                "the annotation of before is now {:?}",
                after.annotations().get(keys::ANNOTATION_CONFIG_HASHES)
            )
        },
    )?;
    // The operator's field managers (`crr-operator`, and one per trigger) all start so.
    let managers: Vec<&str> = after
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.manager.as_deref())
        .collect();
    check(
        !managers
            .iter()
            .any(|manager| manager.starts_with("crr-operator")),
        || format!("the operator wrote the Deployment: managers {managers:?}"),
    )
}

/// A daily window (UTC) from `from` to `to` minutes after now.
fn window_from_now(from: i64, to: i64) -> String {
    let at = |minutes: i64| {
        let time = (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(minutes))
            .to_zoned(jiff::tz::TimeZone::UTC)
            .time();
        format!("{:02}:{:02}", time.hour(), time.minute())
    };
    format!("{}-{}", at(from), at(to))
}

/// Two changes outside the restart window wait in the workload's TriggerRecord, through an
/// operator restart, and go out in one rollout when the window opens.
async fn window(ctx: Ctx) -> anyhow::Result<()> {
    apply(&ctx, config_map("one", "no")).await?;
    let closed = window_from_now(120, 180);
    let annotated = |window: &str| {
        web(
            2,
            json!({keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
                   keys::ANNOTATION_RECREATE_WINDOW: window}),
        )
    };
    apply(&ctx, annotated(&closed)).await?;
    let before = all_ready(&ctx, "web", 2).await?;
    until_recorded(&ctx, "first sight", Duration::from_secs(60), |hashes| {
        hashes.contains_key("configmap/app-config")
    })
    .await?;

    // A change while the window is closed: nothing rolls out; the record says what waits.
    apply(&ctx, config_map("two", "no")).await?;
    let note = web_event(&ctx, "ConfigChangePending", Duration::from_secs(60)).await?;
    check(note.contains("waits for the restart window"), || {
        format!("the ConfigChangePending note: {note}")
    })?;
    let name = record_name("Deployment", "web");
    let pending = records(&ctx)
        .get(&name)
        .await?
        .spec
        .pending_change
        .context("no pendingChange in the record")?;
    check(pending.changed == ["configmap/app-config"], || {
        format!("pendingChange lists {:?}", pending.changed)
    })?;
    // A second change joins the first; the operator restarts meanwhile.
    apply(&ctx, config_map("three", "no")).await?;
    restart_operator(&ctx).await?;
    none_for(
        &ctx,
        "config-change",
        Duration::from_secs(10),
        "a change outside the window",
    )
    .await?;
    let still = records(&ctx).get(&name).await?.spec.pending_change;
    check(
        still
            .as_ref()
            .is_some_and(|still| still.since == pending.since),
        || format!("after the restart the record's pendingChange is {still:?}, was {pending:?}"),
    )?;

    // The window opens: one rollout, for both changes; the record waits no more.
    apply(&ctx, annotated(&window_from_now(-60, 60))).await?;
    let rollout = first_rollout(&ctx, "config-change", Duration::from_secs(60))
        .await
        .context("the window opened and nothing rolled out")?;
    wait_phase(&ctx, &rollout.name_any(), "Completed").await?;
    all_ready(&ctx, "web", 2).await?;
    recreated_in_place(&ctx, &before, 1).await?;
    let record = records(&ctx).get(&name).await?;
    check(record.spec.pending_change.is_none(), || {
        format!("the record still waits: {:?}", record.spec.pending_change)
    })?;
    check(
        trigger_rollouts(&ctx, "config-change").await?.len() == 1,
        || "two changes made more than one rollout".to_owned(),
    )
}

/// The names of the namespace's ReplicaSets.
async fn replica_sets(ctx: &Ctx) -> anyhow::Result<Vec<String>> {
    let api: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    Ok(names)
}

/// `crr.dev/restart-requested-at` set twice to one value (and the operator restarted, and the
/// rollout deleted, between), then to another: exactly two restarts in place, no new ReplicaSet,
/// and the Deployment's generation moved only by the user's own edits of the annotation (a
/// Deployment's annotations count in its generation; crr writes nothing to it).
async fn restart_requested(ctx: Ctx) -> anyhow::Result<()> {
    apply(&ctx, config_map("one", "no")).await?;
    let requested = |value: &str| {
        web(
            2,
            json!({keys::ANNOTATION_RESTART_REQUESTED_AT: value,
                   keys::ANNOTATION_RECREATE_CONTAINERS: "app"}),
        )
    };
    apply(&ctx, web(2, json!({}))).await?;
    let before = all_ready(&ctx, "web", 2).await?;
    let sets = replica_sets(&ctx).await?;
    let generation = || async {
        Ok::<_, anyhow::Error>(deployments(&ctx).get("web").await?.metadata.generation)
    };
    let unchanged = |what: &'static str, edited: Option<i64>| {
        let sets = sets.clone();
        let ctx = &ctx;
        async move {
            let now = deployments(ctx).get("web").await?.metadata.generation;
            check(now == edited, || {
                format!(
                    "{what}: the Deployment's generation is {now:?}, {edited:?} after the user's edit"
                )
            })?;
            let now = replica_sets(ctx).await?;
            check(now == sets, || {
                format!("{what}: the ReplicaSets went {sets:?} → {now:?}")
            })
        }
    };

    apply(&ctx, requested("2026-11-29T20:00:00Z")).await?;
    let edited = generation().await?;
    let first = first_rollout(&ctx, "restart", Duration::from_secs(60))
        .await
        .context("the first value started no rollout")?;
    check(first.spec.containers == ["app"], || {
        format!("the restart recreates {:?}", first.spec.containers)
    })?;
    wait_phase(&ctx, &first.name_any(), "Completed").await?;
    all_ready(&ctx, "web", 2).await?;
    recreated_in_place(&ctx, &before, 1).await?;
    let note = web_event(&ctx, "RestartRequested", Duration::from_secs(30)).await?;
    check(note.contains("2026-11-29T20:00:00Z"), || {
        format!("the RestartRequested note: {note}")
    })?;
    unchanged("after the first restart", edited).await?;

    // The same value again, applied again, past an operator restart and the rollout's deletion.
    apply(&ctx, requested("2026-11-29T20:00:00Z")).await?;
    restart_operator(&ctx).await?;
    rollouts(&ctx)
        .delete(&first.name_any(), &Default::default())
        .await?;
    none_for(
        &ctx,
        "restart",
        Duration::from_secs(15),
        "the same value again",
    )
    .await?;
    unchanged("after the same value again", edited).await?;
    let recorded = records(&ctx)
        .get(&record_name("Deployment", "web"))
        .await?
        .spec
        .restart_requested;
    check(recorded.as_deref() == Some("2026-11-29T20:00:00Z"), || {
        format!("the record says {recorded:?}")
    })?;

    // A new value: the second restart.
    apply(&ctx, requested("2026-11-29T21:00:00Z")).await?;
    let edited = generation().await?;
    let second = first_rollout(&ctx, "restart", Duration::from_secs(60))
        .await
        .context("the new value started no rollout")?;
    wait_phase(&ctx, &second.name_any(), "Completed").await?;
    all_ready(&ctx, "web", 2).await?;
    recreated_in_place(&ctx, &before, 2).await?;
    check(trigger_rollouts(&ctx, "restart").await?.len() == 1, || {
        "more than one rollout for the new value".to_owned()
    })?;
    unchanged("after the second restart", edited).await
}

/// A ConfigMap changed 15 times 2 s apart: the pod's `app` restarts at most 3 times (the first
/// change at once, then what changed while the kubelet's back-off held it, once the ConfigMap
/// settled: docs/triggers.md), and its last start reads the last data. `sidecar` never restarts.
async fn churn(ctx: Ctx) -> anyhow::Result<()> {
    let before = triggered_web(&ctx, "v0", 1).await?;
    let started = tokio::time::Instant::now();
    for change in 1..=15 {
        apply(&ctx, config_map(&format!("v{change}"), "no")).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let last = "v15";
    // Until no trigger rollout runs and the app read the last data; then a quiet half minute
    // in which nothing more starts.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let rollouts = trigger_rollouts(&ctx, "config-change").await?;
        let running = rollouts.iter().any(|rollout| {
            !matches!(
                rollout
                    .status
                    .as_ref()
                    .and_then(|status| status.phase.as_deref()),
                Some("Completed" | "Failed")
            )
        });
        if !running
            && all_ready(&ctx, "web", 1).await.is_ok()
            && app_reads(&ctx, last).await.is_ok()
        {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            app_reads(&ctx, last).await?;
            return Err(anyhow!("a config-change rollout still runs after 240 s"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let settled = started.elapsed();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let rollouts = trigger_rollouts(&ctx, "config-change").await?;
    let pod = ctx.pods().get(&before[0].name_any()).await?;
    check(pod.uid() == before[0].uid(), || {
        "the pod was replaced".to_owned()
    })?;
    let app = crr_e2e::container(&pod, "app")?.restart_count;
    let sidecar = crr_e2e::container(&pod, "sidecar")?.restart_count;
    println!(
        "15 changes 2 s apart: app restarted {app} times by {} rollouts, settled {:.1} s after the first change",
        rollouts.len(),
        settled.as_secs_f64()
    );
    check((1..=3).contains(&app) && sidecar == 0, || {
        format!("app restarted {app} times, sidecar {sidecar} (want 1 to 3, 0)")
    })?;
    app_reads(&ctx, last).await
}

/// One ConfigMap shared by three Deployments, with the operator's cap at one rollout running in
/// the cluster (`--max-running-rollouts=1`): its change makes a trigger rollout per Deployment,
/// and they run one at a time, each Completed.
async fn cluster_cap(ctx: Ctx) -> anyhow::Result<()> {
    let original = current_operator_args().await?;
    let mut capped: Vec<Value> = original
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|arg| {
            !arg.as_str()
                .is_some_and(|arg| arg.starts_with("--max-running-rollouts"))
        })
        .collect();
    capped.push(json!("--max-running-rollouts=1"));
    operator_args(&ctx, &Value::Array(capped)).await?;
    let outcome = three_workloads_one_at_a_time(&ctx).await;
    // The install as it was, whatever happened.
    let restored = operator_args(&ctx, &original).await;
    outcome.and(restored)
}

async fn three_workloads_one_at_a_time(ctx: &Ctx) -> anyhow::Result<()> {
    const NAMES: [&str; 3] = ["web-a", "web-b", "web-c"];
    apply(ctx, config_map("one", "no")).await?;
    for name in NAMES {
        let annotations = json!({keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true"});
        apply(ctx, web_named(name, 1, annotations)).await?;
    }
    for name in NAMES {
        all_ready(ctx, name, 1).await?;
        let record = record_name("Deployment", name);
        let recorded = crr_e2e::wait(
            records(ctx),
            &record,
            Duration::from_secs(60),
            |record: Option<&TriggerRecord>| {
                record
                    .and_then(|record| record.spec.config_hashes.as_ref())
                    .is_some_and(|hashes| hashes.contains_key("configmap/app-config"))
            },
        )
        .await;
        recorded.with_context(|| format!("{name} never recorded app-config"))?;
    }
    apply(ctx, config_map("two", "no")).await?;
    let (mut most_running, mut waited) = (0, false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let made = trigger_rollouts(ctx, "config-change").await?;
        let running = made
            .iter()
            .filter(|rollout| started(rollout) && !finished(rollout))
            .count();
        most_running = most_running.max(running);
        waited |= made.iter().any(|rollout| {
            rollout.status.as_ref().is_some_and(|status| {
                status.conditions.iter().any(|condition| {
                    condition.type_ == "Progressing" && condition.reason == "WaitingForClusterCap"
                })
            })
        });
        if made.len() == NAMES.len()
            && made.iter().all(|rollout| {
                rollout
                    .phase()
                    .is_some_and(|phase| phase.as_str() == "Completed")
            })
        {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "the three rollouts did not all complete in 240 s: {:?}",
                made.iter()
                    .map(|rollout| (rollout.name_any(), rollout.phase()))
                    .collect::<Vec<_>>()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("cluster cap of 1: three trigger rollouts, at most {most_running} running at once");
    check(most_running == 1 && waited, || {
        format!("at most {most_running} ran at once (want 1), one waited for the cap: {waited}")
    })
}

/// How long the forged rollouts stay beside the victim's rollout, which must stay throughout:
/// the victim's workload is evaluated several times meanwhile.
const FORGERY_WATCHED: Duration = Duration::from_secs(180);

/// A tenant with `edit` in its own namespace (and a Role on rollouts there) labels its own
/// rollouts with another namespace's workload UID, as the trigger wing labels its rollouts.
/// A policy refuses the labels to anyone but the operator; the rollouts are then made as the
/// operator's identity (what no policy stops: the labels on rollouts of another namespace), four
/// finished ones named after the victim's own rollout and others, and one that runs. The
/// operator finds a workload's trigger rollouts by namespace and owner UID, never by label: the
/// victim's rollout is still there 3 minutes later, and its config change is rolled out, not held
/// by the forged running one.
async fn forged_trigger_labels(ctx: Ctx) -> anyhow::Result<()> {
    let tenant = Tenant::new(&ctx.client, "forger").await?;
    let outcome = forgeries_reach_nothing(&ctx, &tenant).await;
    tenant.remove(&ctx.client).await;
    outcome
}

async fn forgeries_reach_nothing(ctx: &Ctx, tenant: &Tenant) -> anyhow::Result<()> {
    let before = triggered_web(ctx, "one", 1).await?;
    let uid = crr_e2e::uid(&deployments(ctx).get("web").await?)?;
    // The victim's own rollout, paused: it restarts nothing, and must simply stay.
    crr_e2e::rollout::create_rollout(
        ctx,
        "nightly",
        json!({"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
               "containers": ["sidecar"], "paused": true}),
    )
    .await?;
    let nightly_uid = crr_e2e::uid(&rollouts(ctx).get("nightly").await?)?;
    let forged = |name: &str, target: Value, paused: bool| {
        json!({"apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
               "metadata": {"name": name, "labels": {
                   keys::LABEL_ROLLOUT_TRIGGER: "config-change",
                   keys::LABEL_WORKLOAD_UID: uid}},
               "spec": {"target": target, "containers": ["app"], "paused": paused}})
    };
    let nothing = json!({"selector": {"matchLabels": {"app": "nothing"}}});
    let refused = tenant
        .apply(&forged("nightly", nothing.clone(), false))
        .await
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    check(
        refused.contains("only the crr operator sets the labels"),
        || format!("the tenant's labelled rollout was not refused by the policy: {refused:?}"),
    )?;
    let as_operator = |object: Value| {
        let namespace = tenant.namespace.clone();
        async move {
            let text = serde_json::to_string(&object)?;
            let user = format!(
                "system:serviceaccount:{}:crr-operator",
                crr_e2e::SYSTEM_NAMESPACE
            );
            let output = crr_e2e::kubectl_with_stdin(
                &["--as", &user, "-n", &namespace, "create", "-f", "-"],
                Some(&text),
            )
            .await?;
            check(output.status.success(), || {
                format!(
                    "creating a forged rollout as the operator: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })
        }
    };
    // Four that end at once (their selector matches no pod), named as the victim's rollouts.
    for name in ["nightly", "x1", "x2", "x3"] {
        as_operator(forged(name, nothing.clone(), false)).await?;
    }
    // One that runs (paused over the tenant's own Deployment), as the victim's config-change
    // rollout would.
    let mut own = web_named("own", 1, json!({}));
    own["spec"]["template"]["spec"]["volumes"] = json!([]);
    own["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = json!([]);
    tenant.apply(&own).await?;
    let observed = tenant.observed(&ctx.client);
    // Pods made after a rollout are not its target: the pod first.
    all_ready(&observed, "own", 1).await?;
    let own_target =
        json!({"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "own"}});
    as_operator(forged("held", own_target, true)).await?;
    for name in ["nightly", "x1", "x2", "x3"] {
        wait_phase(&observed, name, "Completed").await?;
    }
    wait_phase(&observed, "held", "Paused").await?;
    let forged_at = tokio::time::Instant::now();
    println!(
        "forged: four finished rollouts and one paused in {}, labelled with {uid}",
        tenant.namespace
    );

    // The victim's config change is rolled out, not held by the forged running rollout.
    apply(ctx, config_map("two", "yes")).await?;
    let rollout = first_rollout(ctx, "config-change", Duration::from_secs(90))
        .await
        .context("the victim's config change was held")?;
    let done = wait_phase(ctx, &rollout.name_any(), "Completed").await?;
    check(
        done.status
            .as_ref()
            .is_some_and(|status| status.recreated == 1),
        || format!("the victim's config-change rollout: {:?}", done.status),
    )?;
    recreated_in_place(ctx, &before, 1).await?;
    app_reads(ctx, "two").await?;

    // The victim's own rollout stays, the same object, while the forgeries stay beside it.
    loop {
        let nightly = rollouts(ctx).get_opt("nightly").await?;
        check(
            nightly.as_ref().and_then(|rollout| rollout.uid()) == Some(nightly_uid.clone()),
            || {
                format!(
                    "the victim's rollout nightly was deleted {:.0} s after the forgery",
                    forged_at.elapsed().as_secs_f64()
                )
            },
        )?;
        if forged_at.elapsed() > FORGERY_WATCHED {
            break;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let left = rollouts(&observed)
        .list(&ListParams::default())
        .await?
        .items
        .len();
    check(left == 5, || {
        format!("the tenant's own five rollouts: {left} left")
    })?;
    println!(
        "the victim's rollout stayed {FORGERY_WATCHED:?} beside the forgeries; its config change rolled out"
    );
    Ok(())
}

/// The operator's ClusterRole as installed, and the same without `patch` on TriggerRecords.
async fn operator_role_without_record_writes() -> anyhow::Result<(Value, Value)> {
    let output = kubectl_ok(&["get", "clusterrole", "crr-operator", "-o", "json"]).await?;
    let mut original: Value = serde_json::from_str(&output)?;
    for key in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
    ] {
        if let Some(metadata) = original["metadata"].as_object_mut() {
            metadata.remove(key);
        }
    }
    let mut narrowed = original.clone();
    let rules = narrowed["rules"]
        .as_array_mut()
        .ok_or_else(|| anyhow!("the operator's ClusterRole has no rules"))?;
    let mut found = false;
    for rule in rules.iter_mut() {
        if rule["resources"]
            .as_array()
            .is_some_and(|resources| resources.iter().any(|r| r == "triggerrecords"))
            && let Some(verbs) = rule["verbs"].as_array_mut()
        {
            verbs.retain(|verb| verb != "patch");
            found = true;
        }
    }
    check(found, || {
        "no rule of the operator's ClusterRole grants triggerrecords".to_owned()
    })?;
    Ok((original, narrowed))
}

/// `kubectl replace` of `role`.
async fn replace_role(role: &Value) -> anyhow::Result<()> {
    let text = serde_json::to_string(role)?;
    let output = crr_e2e::kubectl_with_stdin(&["replace", "-f", "-"], Some(&text)).await?;
    check(output.status.success(), || {
        format!(
            "replacing the operator's ClusterRole: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Every record write of the operator refused (its ClusterRole without `patch` on
/// TriggerRecords: a test-only change, restored after), and the leader SIGKILLed once it has
/// created the change's rollout, before any record could land: a config change is rolled out
/// once, and not again while the record cannot say so; once the right is back the record says
/// so, and still one rollout has run, each pod restarted exactly once.
async fn record_refused(ctx: Ctx) -> anyhow::Result<()> {
    let before = triggered_web(&ctx, "one", 2).await?;
    let before_hash = recorded(&ctx, "configmap/app-config", Duration::from_secs(5))
        .await?
        .get("configmap/app-config")
        .cloned();
    let (original, narrowed) = operator_role_without_record_writes().await?;
    replace_role(&narrowed).await?;
    let outcome = one_rollout_while_refused(&ctx, &before).await;
    let restored = replace_role(&original).await;
    outcome?;
    restored?;
    until_recorded(
        &ctx,
        "the change recorded once the right is back",
        Duration::from_secs(120),
        |hashes| hashes.get("configmap/app-config") != before_hash.as_ref(),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let made = trigger_rollouts(&ctx, "config-change").await?;
    check(made.len() == 1, || {
        format!(
            "one change, rollouts: {:?}",
            made.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        )
    })?;
    recreated_in_place(&ctx, &before, 1).await
}

async fn one_rollout_while_refused(ctx: &Ctx, before: &[Pod]) -> anyhow::Result<()> {
    apply(ctx, config_map("two", "yes")).await?;
    let rollout = first_rollout(ctx, "config-change", Duration::from_secs(60)).await?;
    // The leader dies between the rollout's create and its record (which cannot land): the next
    // leader must not roll the change out again either.
    let leader = faults::operator_leader(&ctx.client).await?;
    faults::sigkill(faults::process_of(&leader, faults::OPERATOR_PROGRAM)?).await?;
    println!(
        "killed the leader {} after it created {}",
        leader.name_any(),
        rollout.name_any()
    );
    wait_phase(ctx, &rollout.name_any(), "Completed").await?;
    // The record write keeps failing: the operator tries again, and must not roll out again.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let made = trigger_rollouts(ctx, "config-change").await?;
    check(made.len() == 1, || {
        format!(
            "with the record refused, one change made rollouts {:?}",
            made.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        )
    })?;
    recreated_in_place(ctx, before, 1).await
}
