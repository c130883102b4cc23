//! The switch from OpenKruise to crr, on the local test bed, by the commands of
//! `docs/migrating-from-openkruise.md` : every `# step:` block of that document runs
//! here, in its order, and a block the test does not know fails the suite.
//!
//! OpenKruise is stood in for by a Helm release `kruise` in `kruise-system` holding what its
//! install leaves that matters to a switch: its ContainerRecreateRequest CRD exactly as upstream
//! generates it (`crds/tests/fixtures/`), and its `kruise-mutating-webhook-configuration` with
//! the `mcontainerrecreaterequest.kb.io` entry (`failurePolicy: Ignore` here, where upstream has
//! `Fail`: no kruise-manager serves it on the test bed). Requests and pods are written in the state
//! kruise leaves them: completed requests with their status, one request in flight (kruise
//! labels, finalizer, PreRecreateGrace, its container Pending) whose pod kruise holds not-Ready,
//! and a gated pod kruise started at `KruisePodReady: True`.
//!
//! Then: crr's install refuses beside that webhook (install script and chart, naming it); the
//! CRD is kept and OpenKruise removed; crr is installed with Helm (adopting the CRD); every old
//! request reads in both versions, the one in flight completes and its pod comes back Ready,
//! gated pods stay Ready, a new gated pod becomes Ready and a new request works; crr is rolled
//! back with Helm (requests stay readable in both versions, no pod is left not-Ready); and crr
//! is installed again with kustomize, as the test bed had it, and works.
//!
//! It uninstalls and reinstalls crr: `hack/cluster-test.sh` runs it after the other suites.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use crr_crds::keys;
use crr_e2e::doc::{Doc, repo_root, shell};
use crr_e2e::{Ctx, Expect, Scenario, Version, check, id_and_restarts, pod_ready};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const IGNORED: &str = "needs the local test bed with crr installed; hack/cluster-test.sh runs it";
const DOC: &str = include_str!("../../../docs/migrating-from-openkruise.md");
const UPSTREAM_CRD: &str =
    include_str!("../../../crds/tests/fixtures/apps.kruise.io_containerrecreaterequests.yaml");
const COMPLETION: Duration = Duration::from_secs(90);

fn main() {
    let scenario = Scenario {
        name: "migration",
        run: |ctx| Box::pin(migration(ctx)),
    };
    // crr is removed and installed again by the scenario itself: nothing to check first.
    crr_e2e::suite_main(
        "migration",
        vec![(scenario, Expect::Pass)],
        IGNORED,
        |_| async { Ok(()) },
    );
}

/// The stand-in for OpenKruise's release: its CRD as upstream generates it and its CRR webhook.
fn write_kruise_chart(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("templates"))?;
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: kruise\nversion: 1.8.0\ndescription: stand-in for OpenKruise in crr's migration test\n",
    )?;
    std::fs::write(dir.join("templates/crd.yaml"), UPSTREAM_CRD)?;
    let webhooks = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "kruise-mutating-webhook-configuration"},
        "webhooks": [{
            "name": "mcontainerrecreaterequest.kb.io",
            "admissionReviewVersions": ["v1", "v1beta1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 2,
            "clientConfig": {"service": {
                "namespace": "kruise-system", "name": "kruise-webhook-service",
                "path": "/mutate-apps-kruise-io-containerrecreaterequest"}},
            "rules": [{
                "apiGroups": ["apps.kruise.io"], "apiVersions": ["v1alpha1", "v1beta1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["containerrecreaterequests"]}],
        }],
    });
    std::fs::write(
        dir.join("templates/webhooks.yaml"),
        serde_json::to_string_pretty(&webhooks)?,
    )?;
    Ok(())
}

/// A running two-container pod declaring the `KruisePodReady` gate, as an OpenKruise workload's
/// pod (no crr label); waits until its containers run.
async fn gated_pod(ctx: &Ctx, name: &str) -> anyhow::Result<Pod> {
    let container = |container: &str| {
        json!({"name": container, "image": crr_e2e::BUSYBOX,
               "command": ["sh", "-c", crr_e2e::EXIT_ON_TERM_LOOP]})
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 3,
                 "readinessGates": [{"conditionType": keys::POD_CONDITION_KRUISE_POD_READY}],
                 "containers": [container("app"), container("sidecar")]},
    }))?;
    ctx.pods().create(&PostParams::default(), &pod).await?;
    ctx.wait_pod(name, "running", Duration::from_secs(90), |pod| {
        crr_e2e::pod_condition(pod, "ContainersReady") == Some("True")
    })
    .await
}

/// Sets the pod's `KruisePodReady` condition as kruise-manager does.
async fn kruise_condition(ctx: &Ctx, pod: &str, status: &str, message: &str) -> anyhow::Result<()> {
    let patch = json!({"status": {"conditions": [{
        "type": keys::POD_CONDITION_KRUISE_POD_READY, "status": status, "message": message,
        "lastTransitionTime": jiff::Timestamp::now().to_string()}]}});
    ctx.pods()
        .patch_status(pod, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .with_context(|| format!("setting KruisePodReady on {pod}"))?;
    Ok(())
}

/// A request as kruise leaves it, written through v1beta1 (its storage version): the object,
/// then its status.
async fn kruise_request(ctx: &Ctx, object: Value, status: Value) -> anyhow::Result<()> {
    let api = ctx.crrs_in(Version::V1beta1);
    let mut object = object;
    object["apiVersion"] = json!(format!("{}/{}", keys::GROUP, keys::V1BETA1));
    object["kind"] = json!(keys::KIND);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let object: DynamicObject = serde_json::from_value(object)?;
    api.create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating {name} as kruise would"))?;
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .with_context(|| format!("writing {name}'s status"))?;
    Ok(())
}

/// Every request of the namespace reads in both versions; returns name → v1beta1 phase.
async fn readable_in_both_versions(ctx: &Ctx) -> anyhow::Result<BTreeMap<String, String>> {
    let mut phases = BTreeMap::new();
    let beta = ctx
        .crrs_in(Version::V1beta1)
        .list(&Default::default())
        .await?;
    let alpha = ctx
        .crrs_in(Version::V1alpha1)
        .list(&Default::default())
        .await?;
    ensure!(
        beta.items.len() == alpha.items.len(),
        "{} in v1beta1, {} in v1alpha1",
        beta.items.len(),
        alpha.items.len()
    );
    for object in &beta.items {
        let name = object.name_any();
        ctx.crrs_in(Version::V1alpha1)
            .get(&name)
            .await
            .with_context(|| format!("reading {name} as v1alpha1"))?;
        let phase = object.data["status"]["phase"].as_str().unwrap_or_default();
        phases.insert(name, phase.to_owned());
    }
    Ok(phases)
}

async fn all_pods_ready(ctx: &Ctx) -> anyhow::Result<()> {
    for pod in ctx.pods().list(&Default::default()).await?.items {
        let name = pod.name_any();
        ctx.wait_pod(&name, "Ready", Duration::from_secs(30), pod_ready)
            .await?;
    }
    Ok(())
}

/// A new request through v1alpha1 on `pod` completes with `app` recreated.
async fn new_request_works(ctx: &Ctx, pod: &str, name: &str) -> anyhow::Result<()> {
    let before = id_and_restarts(&ctx.pods().get(pod).await?, "app")?;
    let name = ctx
        .create_crr(
            Version::V1alpha1,
            json!({"metadata": {"name": name}, "spec": {"podName": pod, "containers": [{"name": "app"}]}}),
        )
        .await?;
    crr_e2e::succeeded(&ctx.wait_completed(&name, COMPLETION).await?, 1)?;
    let after = id_and_restarts(&ctx.pods().get(pod).await?, "app")?;
    check(after.0 != before.0 && after.1 == before.1 + 1, || {
        format!("{pod} app {before:?} -> {after:?}")
    })
}

async fn migration(ctx: Ctx) -> anyhow::Result<()> {
    let mut doc = Doc::new("migration", DOC)?;
    let scratch = std::env::temp_dir().join(format!("crr-migration-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let values = scratch.join("values.yaml");
    // The test bed's images (hack/install.sh imported them) and runtime socket.
    std::fs::write(
        &values,
        "images:\n  operator: {repository: crr.local/crr-operator, tag: dev}\n  \
         webhook: {repository: crr.local/crr-webhook, tag: dev}\n  \
         nodeDaemon: {repository: crr.local/crr-node-daemon, tag: dev}\n  pullPolicy: Never\n\
         nodeDaemon:\n  criSocket: /var/lib/crr-cluster/containerd/containerd.sock\n\
         tests:\n  image: {repository: crr.local/curl, tag: \"7.88\"}\n",
    )?;
    doc.env = vec![
        ("VALUES".into(), values.display().to_string()),
        ("OVERLAY".into(), "manifests/overlays/local".into()),
    ];

    // --- OpenKruise as it was --------------------------------------------------------------
    let (ok, _, stderr) = shell(
        "helm uninstall kruise --namespace kruise-system --ignore-not-found && hack/uninstall.sh",
        &[],
    )
    .await?;
    ensure!(ok, "hack/uninstall.sh: {stderr}");
    let chart = scratch.join("kruise");
    write_kruise_chart(&chart)?;
    let (ok, _, stderr) = shell(
        &format!(
            "helm install kruise {} --namespace kruise-system --create-namespace --wait && \
             kubectl wait --for=condition=Established crd/{} --timeout=60s",
            chart.display(),
            keys::CRD_NAME
        ),
        &[],
    )
    .await?;
    ensure!(ok, "installing the OpenKruise stand-in: {stderr}");
    println!("migration:   OpenKruise stand-in installed (upstream CRD, kruise webhook)");

    let ns = ctx.namespace.clone();
    gated_pod(&ctx, "kept").await?;
    kruise_condition(&ctx, "kept", "True", "").await?;
    let inflight_pod = gated_pod(&ctx, "inflight").await?;
    let holder = format!(r#"[{{"userAgent":"ContainerRecreateRequest","key":"{ns}/inflight"}}]"#);
    kruise_condition(&ctx, "inflight", "False", &holder).await?;
    for name in ["done-1", "done-2"] {
        kruise_request(
            &ctx,
            json!({"metadata": {"name": name, "labels": {keys::LABEL_POD_UID: "gone-pod"}},
                   "spec": {"podName": "gone", "containers": [{"name": "app"}],
                            "strategy": {"failurePolicy": "Fail"}}}),
            json!({"phase": "Completed", "completionTime": "2026-11-01T10:00:00Z",
                   "message": "Recreating has succeeded",
                   "containerRecreateStates": [{"name": "app", "phase": "Succeeded", "isKilled": true}],
                   "containerStatusSnapshot": [{"name": "app", "ready": true, "restartCount": 1,
                                                "containerID": "containerd://old"}]}),
        )
        .await?;
    }
    let (app_id, app_restarts) = id_and_restarts(&inflight_pod, "app")?;
    let node = inflight_pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.clone())
        .unwrap_or_default();
    kruise_request(
        &ctx,
        json!({"metadata": {"name": "inflight",
                            "labels": {keys::LABEL_POD_UID: crr_e2e::uid(&inflight_pod)?,
                                       keys::LABEL_NODE_NAME: node, keys::LABEL_ACTIVE: "true"},
                            "finalizers": [keys::FINALIZER_UNREADY_ACQUIRED]},
               "spec": {"podName": "inflight",
                        "containers": [{"name": "app", "statusContext":
                                        {"containerID": app_id, "restartCount": app_restarts}}],
                        "strategy": {"failurePolicy": "Fail", "unreadyGracePeriodSeconds": 3}}}),
        json!({"phase": "Recreating",
               "conditions": [{"type": keys::CONDITION_PRE_RECREATE_GRACE, "status": "True",
                               "reason": keys::REASON_PRE_RECREATE_GRACE, "message": "",
                               "lastTransitionTime": jiff::Timestamp::now().to_string()}],
               "containerRecreateStates": [{"name": "app", "phase": "Pending"}]}),
    )
    .await?;
    println!("migration:   requests and pods as kruise leaves them");

    // --- 1. Before switching --------------------------------------------------------------
    let webhooks = doc.run("check-webhooks").await?;
    check(
        webhooks.contains(
            "MutatingWebhookConfiguration kruise-mutating-webhook-configuration (webhook mcontainerrecreaterequest.kb.io)",
        ),
        || format!("check-webhooks did not find kruise's: {webhooks:?}"),
    )?;
    doc.run("check-conversion").await?;
    let in_flight = doc.run("check-in-flight").await?;
    check(
        in_flight.contains("inflight") && !in_flight.contains("done-1"),
        || format!("check-in-flight: {in_flight:?}"),
    )?;
    let held = doc.run("check-gated-pods").await?;
    check(held.contains(&format!("{ns}/inflight held by")), || {
        format!("check-gated-pods: {held:?}")
    })?;

    // crr refuses to install beside kruise's webhook, naming it, and changes nothing.
    let (ok, _, stderr) = shell("hack/install.sh", &[]).await?;
    check(
        !ok && stderr.contains(
            "kruise-mutating-webhook-configuration (webhook mcontainerrecreaterequest.kb.io)",
        ),
        || format!("hack/install.sh beside OpenKruise: ok={ok} {stderr}"),
    )?;
    let (ok, _, stderr) = shell(
        "helm install crr manifests/helm/crr --namespace default --dry-run=server",
        &[],
    )
    .await?;
    check(
        !ok && stderr.contains(
            "refuses to install beside another ContainerRecreateRequest admission webhook",
        ) && stderr.contains("kruise-mutating-webhook-configuration"),
        || format!("helm install beside OpenKruise: ok={ok} {stderr}"),
    )?;
    println!("migration:   install script and chart refuse beside kruise's webhook");

    // --- 2. Keep the CRD, remove OpenKruise -----------------------------------------------
    doc.run("remove-openkruise").await?;
    std::fs::remove_file(repo_root().join("kruise-manifest.yaml")).ok();
    let left = doc.run("check-webhooks").await?;
    check(left.trim().is_empty(), || {
        format!("still registered: {left:?}")
    })?;
    let phases = ctx
        .crrs_in(Version::V1beta1)
        .list(&Default::default())
        .await
        .context("the requests after OpenKruise's removal")?;
    check(phases.items.len() == 3, || {
        format!(
            "{} requests left after removing OpenKruise",
            phases.items.len()
        )
    })?;

    // --- 3. Install crr with Helm ---------------------------------------------------------
    doc.run("adopt-crd").await?;
    doc.run("install-helm").await?;
    doc.run("verify").await?;
    doc.run("helm-test").await?;
    crr_e2e::helm_test_left_nothing().await?;

    // --- After the switch -----------------------------------------------------------------
    let phases = readable_in_both_versions(&ctx).await?;
    check(
        phases.get("done-1").map(String::as_str) == Some("Completed")
            && phases.get("done-2").map(String::as_str) == Some("Completed"),
        || format!("phases after the switch: {phases:?}"),
    )?;
    crr_e2e::succeeded(&ctx.wait_completed("inflight", COMPLETION).await?, 1)
        .context("the request in flight")?;
    let pod = ctx
        .wait_pod(
            "inflight",
            "Ready (kruise's hold released)",
            Duration::from_secs(60),
            pod_ready,
        )
        .await?;
    let (id, restarts) = id_and_restarts(&pod, "app")?;
    check(id != app_id && restarts == app_restarts + 1, || {
        format!("inflight app {app_id}/{app_restarts} -> {id}/{restarts}")
    })?;
    ctx.wait_pod("kept", "Ready", Duration::from_secs(30), pod_ready)
        .await?;
    gated_pod(&ctx, "new-gated").await?;
    ctx.wait_pod(
        "new-gated",
        "Ready (gate started by crr)",
        Duration::from_secs(60),
        pod_ready,
    )
    .await?;
    new_request_works(&ctx, "kept", "after-switch").await?;
    println!(
        "migration:   old requests readable, in-flight completed, gated pods Ready, new request works"
    );

    // --- Rolling back ---------------------------------------------------------------------
    doc.run("wait-in-flight").await?;
    doc.run("uninstall-helm").await?;
    doc.run("conversion-none").await?;
    let phases = readable_in_both_versions(&ctx).await?;
    check(
        phases.len() == 4 && phases.values().all(|phase| phase == "Completed"),
        || format!("after the rollback: {phases:?}"),
    )?;
    all_pods_ready(&ctx).await?;
    println!("migration:   rolled back: requests readable in both versions, every pod Ready");

    // --- crr with kustomize: in, out (keeping the requests), and in again as the test bed had it
    doc.run("install-kustomize").await?;
    doc.run("verify").await?;
    new_request_works(&ctx, "kept", "after-kustomize").await?;
    doc.run("wait-in-flight").await?;
    doc.run("uninstall-kustomize").await?;
    let left = ctx
        .crrs_in(Version::V1beta1)
        .list(&Default::default())
        .await?;
    check(left.items.len() == 5, || {
        format!(
            "{} requests after the kustomize uninstall, want 5",
            left.items.len()
        )
    })?;
    all_pods_ready(&ctx).await?;
    doc.run("install-kustomize").await?;
    doc.run("verify").await?;
    let phases = readable_in_both_versions(&ctx).await?;
    check(phases.len() == 5, || {
        format!("after reinstalling: {phases:?}")
    })?;
    println!("migration:   kustomize install, uninstall keeping the requests, install again");
    doc.done()?;
    shell(
        "kubectl delete namespace kruise-system --ignore-not-found --wait=false",
        &[],
    )
    .await?;
    std::fs::remove_dir_all(&scratch).ok();
    Ok(())
}
