//! `helm upgrade` from the previous release to the working tree, on the local test bed, by the
//! commands of `docs/upgrading.md` : every `# step:` block of that document runs here,
//! in its order, and a block the test does not know fails the suite.
//!
//! The previous release is the commit `CRR_PREVIOUS_RELEASE` of `hack/versions.sh`;
//! `hack/previous-release.sh` builds its images (`crr.local/<binary>:previous`, cached by commit)
//! and imports them into every node. crr is removed (`hack/uninstall.sh`) and the previous
//! release's chart installed with Helm. On every node a pod with the readiness gate gets a request
//! with an unready grace of [`GRACE_SECONDS`], some written as v1alpha1 (through the conversion
//! webhook), some as v1beta1; while they wait in that grace (their pods held not-Ready, no
//! container killed yet) the release is upgraded to the working tree's chart and images
//! (`crr.local/<binary>:dev`, hack/install.sh's). Then: crr's pods all run the new images, every
//! request completes (Succeeded, its container recreated once, its pod Ready again with
//! `KruisePodReady` True, no finalizer left), at least one was carried over by a new node daemon
//! (a daemon that restarts mid-grace waits the grace again), `helm test` passes, a new request
//! works, and the requests are deleted without anything stuck Terminating.
//!
//! At the end crr is installed again as the test bed had it (hack/install.sh). It uninstalls
//! and reinstalls crr: `hack/cluster-test.sh` runs it after the chaos suite, before the migration.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use crr_crds::keys;
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_e2e::doc::{Doc, shell};
use crr_e2e::{
    Ctx, Expect, Scenario, Version, check, id_and_restarts, pod_condition, pod_ready, succeeded,
};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

const IGNORED: &str = "needs the local test bed with crr installed; hack/cluster-test.sh runs it";
const DOC: &str = include_str!("../../../docs/upgrading.md");
/// Long enough that the requests still wait when `helm upgrade` starts (their pods and the
/// requests are made just before), short enough for the suite: a daemon replaced mid-grace waits
/// it again from its start, so the last request ends about this long after the last new daemon.
const GRACE_SECONDS: i64 = 30;
const COMPLETION: Duration = Duration::from_secs(180);
/// The test bed's runtime socket (hack/cluster-env.sh), as manifests/overlays/local sets it.
const CRI_SOCKET: &str = "/var/lib/crr-cluster/containerd/containerd.sock";

/// Waits (120 s at most) until the webhook put its CA into both webhook configurations and the
/// CRD's conversion webhook.
const CA_PUBLISHED: &str = r#"
deadline=$(( SECONDS + 120 ))
until [ -n "$(kubectl get mutatingwebhookconfiguration crr-webhook -o 'jsonpath={.webhooks[0].clientConfig.caBundle}')" ] &&
      [ -n "$(kubectl get validatingwebhookconfiguration crr-webhook -o 'jsonpath={.webhooks[0].clientConfig.caBundle}')" ] &&
      [ -n "$(kubectl get crd containerrecreaterequests.apps.kruise.io -o 'jsonpath={.spec.conversion.webhook.clientConfig.caBundle}')" ]; do
  (( SECONDS < deadline )) || { echo "the webhook did not publish its CA within 120s" >&2; exit 1; }
  sleep 1
done
"#;

fn main() {
    let scenario = Scenario {
        name: "upgrade",
        run: |ctx| Box::pin(upgrade(ctx)),
    };
    // crr is removed and installed by the scenario itself: nothing to check first.
    crr_e2e::suite_main(
        "upgrade",
        vec![(scenario, Expect::Pass)],
        IGNORED,
        |_| async { Ok(()) },
    );
}

/// Helm values for the test bed: images `crr.local/<binary>:<tag>`, never pulled, and its runtime
/// socket; `extra` is appended.
fn values(tag: &str, extra: &str) -> String {
    format!(
        "images:\n  operator: {{repository: crr.local/crr-operator, tag: {tag}}}\n  \
         webhook: {{repository: crr.local/crr-webhook, tag: {tag}}}\n  \
         nodeDaemon: {{repository: crr.local/crr-node-daemon, tag: {tag}}}\n  pullPolicy: Never\n\
         nodeDaemon:\n  criSocket: {CRI_SOCKET}\n{extra}"
    )
}

/// Runs a script (doc::shell) and fails with its output unless it succeeds; returns stdout.
async fn run(what: &str, script: &str) -> anyhow::Result<String> {
    let (ok, stdout, stderr) = shell(script, &[]).await?;
    ensure!(ok, "{what} failed: {stdout}{stderr}");
    Ok(stdout)
}

/// crr's pods that are not being deleted: (name, node, images, when its first container started).
async fn crr_pods(
    ctx: &Ctx,
) -> anyhow::Result<Vec<(String, String, Vec<String>, Option<jiff::Timestamp>)>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), crr_e2e::SYSTEM_NAMESPACE);
    let mut found = Vec::new();
    for pod in pods.list(&ListParams::default()).await?.items {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let images = spec
            .containers
            .iter()
            .filter_map(|container| container.image.clone())
            .collect();
        let started = pod
            .status
            .as_ref()
            .and_then(|status| status.container_statuses.as_ref())
            .and_then(|statuses| statuses.first())
            .and_then(|status| status.state.as_ref())
            .and_then(|state| state.running.as_ref())
            .and_then(|running| running.started_at.as_ref())
            .map(crr_e2e::timestamp);
        found.push((
            pod.name_any(),
            spec.node_name.clone().unwrap_or_default(),
            images,
            started,
        ));
    }
    Ok(found)
}

/// Waits until no pod of crr is being deleted and every one runs images tagged `tag`.
async fn crr_runs(ctx: &Ctx, tag: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), crr_e2e::SYSTEM_NAMESPACE);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let all = pods.list(&ListParams::default()).await?.items;
        let terminating: Vec<String> = all
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_some())
            .map(|pod| pod.name_any())
            .collect();
        let running = crr_pods(ctx).await?;
        let other: Vec<String> = running
            .iter()
            .filter(|(_, _, images, _)| {
                images.iter().any(|image| {
                    !(image.starts_with("crr.local/crr-") && image.ends_with(&format!(":{tag}")))
                })
            })
            .map(|(name, _, images, _)| format!("{name} {images:?}"))
            .collect();
        if terminating.is_empty() && other.is_empty() && !running.is_empty() {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "crr's pods after 120s: terminating {terminating:?}, not on :{tag} {other:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn holds_finalizer(crr: &ContainerRecreateRequest) -> bool {
    crr.metadata.finalizers.as_ref().is_some_and(|finalizers| {
        finalizers
            .iter()
            .any(|finalizer| finalizer == keys::FINALIZER_UNREADY_ACQUIRED)
    })
}

/// The request waits in its unready grace: the operator marked PreRecreateGrace, holds the pod's
/// readiness (finalizer) and nothing is killed yet.
fn in_grace(crr: &ContainerRecreateRequest) -> bool {
    holds_finalizer(crr)
        && !crr.is_completed()
        && crr
            .condition(keys::CONDITION_PRE_RECREATE_GRACE)
            .is_some_and(|condition| condition.status == "True")
}

/// One target of the upgrade: its pod, node, request, and its `app` container before.
struct Target {
    pod: String,
    node: String,
    request: String,
    before: (String, i32),
}

async fn upgrade(ctx: Ctx) -> anyhow::Result<()> {
    let mut doc = Doc::new("upgrade", DOC)?;
    let scratch = std::env::temp_dir().join(format!("crr-upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let previous_values = scratch.join("previous.yaml");
    std::fs::write(&previous_values, values("previous", ""))?;
    let new_values = scratch.join("values.yaml");
    std::fs::write(
        &new_values,
        values(
            "dev",
            "tests:\n  image: {repository: crr.local/curl, tag: \"7.88\"}\n",
        ),
    )?;
    doc.env = vec![("VALUES".into(), new_values.display().to_string())];

    // --- The previous release, installed with Helm ----------------------------------------
    let commit = run(
        "hack/previous-release.sh commit",
        "hack/previous-release.sh commit",
    )
    .await?;
    run(
        "building and importing the previous release",
        "hack/previous-release.sh import",
    )
    .await?;
    let chart = run(
        "hack/previous-release.sh chart",
        "hack/previous-release.sh chart",
    )
    .await?;
    let chart = chart.trim();
    run("hack/uninstall.sh", "hack/uninstall.sh").await?;
    run(
        "installing the previous release",
        &format!(
            "kubectl create namespace crr-system && \
             kubectl label namespace crr-system pod-security.kubernetes.io/enforce=privileged && \
             helm install crr {chart} --namespace crr-system --set createNamespace=false \
               --values {} --wait --timeout 5m",
            previous_values.display(),
        ),
    )
    .await?;
    // As hack/install.sh waits: the webhook published its CA where the API server needs it.
    run("waiting for the previous webhook's CA", CA_PUBLISHED).await?;
    crr_runs(&ctx, "previous").await?;
    println!(
        "upgrade:   previous release {} installed with Helm ({chart})",
        &commit.trim()[..12.min(commit.trim().len())]
    );

    // --- Requests waiting in their unready grace ---------------------------------------------
    let nodes = crr_e2e::ready_nodes(&ctx.client).await?;
    ensure!(!nodes.is_empty(), "no Ready node");
    let mut targets = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        let name = format!("held-{index}");
        let node_name = node.clone();
        let pod = ctx
            .two_container_pod(&name, move |pod| {
                pod["metadata"]["labels"][keys::LABEL_READINESS_GATE] = json!("true");
                pod["spec"]["nodeName"] = json!(node_name);
            })
            .await?;
        let gated = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.readiness_gates.as_ref())
            .is_some_and(|gates| {
                gates
                    .iter()
                    .any(|gate| gate.condition_type == keys::POD_CONDITION_KRUISE_POD_READY)
            });
        check(gated, || {
            format!("pod {name}: the previous release's webhook did not add the readiness gate")
        })?;
        targets.push(Target {
            before: id_and_restarts(&pod, "app")?,
            pod: name.clone(),
            node: node.clone(),
            request: name,
        });
    }
    for (index, target) in targets.iter().enumerate() {
        // Every other request through v1alpha1: written by the previous conversion webhook.
        let version = if index % 2 == 0 {
            Version::V1alpha1
        } else {
            Version::V1beta1
        };
        ctx.create_crr(
            version,
            json!({"metadata": {"name": target.request},
                   "spec": {"podName": target.pod, "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": GRACE_SECONDS}}}),
        )
        .await
        .with_context(|| format!("creating {} ({version:?})", target.request))?;
    }
    for target in &targets {
        crr_e2e::wait(
            ctx.crrs(),
            &target.request,
            Duration::from_secs(30),
            |crr: Option<&ContainerRecreateRequest>| crr.is_some_and(in_grace),
        )
        .await
        .with_context(|| format!("{} never entered its unready grace", target.request))?;
        ctx.wait_pod(
            &target.pod,
            "held not-Ready",
            Duration::from_secs(30),
            |pod| pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY) == Some("False"),
        )
        .await?;
    }

    // --- Before the upgrade ----------------------------------------------------------------
    let release = doc.run("check-release").await?;
    check(release.contains("deployed"), || {
        format!("check-release: {release:?}")
    })?;
    let crd = doc.run("check-crd").await?;
    check(crd.trim() == "Helm crr keep", || {
        format!("check-crd: the CRD is not the release's, kept: {crd:?}")
    })?;
    let in_flight = doc.run("check-in-flight").await?;
    for target in &targets {
        check(in_flight.contains(&target.request), || {
            format!(
                "check-in-flight does not list {}: {in_flight:?}",
                target.request
            )
        })?;
    }
    // Still waiting as the upgrade starts: nothing completed, no container recreated.
    for target in &targets {
        let crr = ctx.crrs().get(&target.request).await?;
        let now = id_and_restarts(&ctx.pods().get(&target.pod).await?, "app")?;
        check(in_grace(&crr) && now == target.before, || {
            format!(
                "{} no longer waits in its grace as the upgrade starts (app {:?} -> {now:?}, status {:?})",
                target.request, target.before, crr.status
            )
        })?;
    }
    println!(
        "upgrade:   {} request(s) in their {GRACE_SECONDS}s unready grace on {} node(s)",
        targets.len(),
        nodes.len()
    );

    // --- The upgrade -----------------------------------------------------------------------
    doc.run("upgrade-helm").await?;
    doc.run("verify").await?;
    crr_runs(&ctx, "dev").await?;
    let daemons: BTreeMap<String, Option<jiff::Timestamp>> = crr_pods(&ctx)
        .await?
        .into_iter()
        .filter(|(name, ..)| name.starts_with("crr-node-daemon"))
        .map(|(_, node, _, started)| (node, started))
        .collect();
    println!("upgrade:   crr's pods run the working tree's images (:dev)");

    // --- The requests that waited complete ---------------------------------------------------
    doc.run("wait-in-flight").await?;
    let mut carried_over = Vec::new();
    for target in &targets {
        succeeded(&ctx.wait_completed(&target.request, COMPLETION).await?, 1)
            .with_context(|| format!("{} after the upgrade", target.request))?;
        crr_e2e::wait(
            ctx.crrs(),
            &target.request,
            Duration::from_secs(60),
            |crr: Option<&ContainerRecreateRequest>| crr.is_some_and(|crr| !holds_finalizer(crr)),
        )
        .await
        .with_context(|| format!("{} kept its finalizer", target.request))?;
        let pod = ctx
            .wait_pod(&target.pod, "Ready again", Duration::from_secs(60), |pod| {
                pod_ready(pod)
                    && pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY) == Some("True")
            })
            .await?;
        let after = id_and_restarts(&pod, "app")?;
        check(
            after.0 != target.before.0 && after.1 == target.before.1 + 1,
            || format!("{} app {:?} -> {after:?}", target.pod, target.before),
        )?;
        // Which daemon killed it: the Killing Event after its node's new daemon started.
        let killed = ctx
            .pod_events(&target.pod, "Killing")
            .await?
            .into_iter()
            .filter_map(|event| {
                event
                    .event_time
                    .map(|time| time.0)
                    .or_else(|| event.metadata.creation_timestamp.map(|time| time.0))
            })
            .max();
        let new_daemon = daemons.get(&target.node).copied().flatten();
        let by_new =
            matches!((killed, new_daemon), (Some(killed), Some(started)) if killed >= started);
        println!(
            "upgrade:   {} on {}: killed at {killed:?}, new daemon since {new_daemon:?}{}",
            target.request,
            target.node,
            if by_new { " (carried over)" } else { "" }
        );
        if by_new {
            carried_over.push(target.request.clone());
        }
    }
    check(!carried_over.is_empty(), || {
        "no request waiting in its grace was finished by a new node daemon: the upgrade came too late"
            .into()
    })?;
    println!(
        "upgrade:   every request completed (recreated once, pod Ready, no finalizer); carried over: {carried_over:?}"
    );

    // --- The upgraded release works ----------------------------------------------------------
    doc.run("helm-test").await?;
    crr_e2e::helm_test_left_nothing().await?;
    let target = &targets[0];
    let before = id_and_restarts(&ctx.pods().get(&target.pod).await?, "app")?;
    let name = ctx
        .create_crr(
            Version::V1beta1,
            json!({"metadata": {"name": "after-upgrade"},
                   "spec": {"podName": target.pod, "containers": [{"name": "app"}],
                            "strategy": {"unreadyGracePeriodSeconds": 1}}}),
        )
        .await?;
    succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)?;
    let pod = ctx
        .wait_pod(&target.pod, "Ready", Duration::from_secs(60), pod_ready)
        .await?;
    let after = id_and_restarts(&pod, "app")?;
    check(after.0 != before.0 && after.1 == before.1 + 1, || {
        format!("after-upgrade: {} app {before:?} -> {after:?}", target.pod)
    })?;

    // Nothing stuck: every request deletes at once, no pod is left Terminating.
    ctx.crrs()
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    for name in targets
        .iter()
        .map(|target| target.request.as_str())
        .chain(["after-upgrade"])
    {
        crr_e2e::wait(
            ctx.crrs(),
            name,
            Duration::from_secs(30),
            |crr: Option<&ContainerRecreateRequest>| crr.is_none(),
        )
        .await
        .with_context(|| format!("{name} stuck Terminating"))?;
    }
    let stuck: Vec<String> = ctx
        .pods()
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_some() || !pod_ready(pod))
        .map(|pod| pod.name_any())
        .collect();
    check(stuck.is_empty(), || {
        format!("pods not Ready or Terminating: {stuck:?}")
    })?;
    doc.done()?;
    println!("upgrade:   helm test passed, a new request works, nothing stuck");

    // --- crr as the test bed had it ------------------------------------------------------------
    run(
        "reinstalling crr with hack/install.sh",
        "helm uninstall crr --namespace crr-system --wait --timeout 3m && \
         kubectl delete namespace crr-system --wait=true --timeout=3m && hack/install.sh",
    )
    .await?;
    std::fs::remove_dir_all(&scratch).ok();
    Ok(())
}
