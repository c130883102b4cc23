//! What the rollout suites share (tests/rollouts.rs, and the rollout faults of tests/chaos.rs):
//! workloads of two-container pods, creating and awaiting rollouts, sampling how many pods were
//! unavailable at once, and checking that pods were recreated in place.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use crr_crds::rollout::ContainerRecreateRollout;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};

use crate::{BUSYBOX, Ctx, EXIT_ON_TERM_LOOP, check, container, pod_ready, wait};

/// How long a rollout of the suites may take.
pub const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(240);

pub fn rollouts(ctx: &Ctx) -> Api<ContainerRecreateRollout> {
    Api::namespaced(ctx.client.clone(), &ctx.namespace)
}

/// Two containers, `app` and `sidecar`, Ready once started (a readiness probe every second).
/// Whether `rollout` has started: its status has a start time.
pub fn started(rollout: &ContainerRecreateRollout) -> bool {
    rollout
        .status
        .as_ref()
        .is_some_and(|status| status.start_time.is_some())
}

/// Whether `rollout` has ended, Completed or Failed.
pub fn finished(rollout: &ContainerRecreateRollout) -> bool {
    rollout.phase().is_some_and(|phase| phase.is_finished())
}

pub fn pod_template(app: &str) -> Value {
    let container = |name: &str| {
        json!({
            "name": name,
            "image": BUSYBOX,
            "command": ["sh", "-c", EXIT_ON_TERM_LOOP],
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
        })
    };
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 3,
            "containers": [container("app"), container("sidecar")],
        },
    })
}

pub async fn apply(ctx: &Ctx, object: Value) -> anyhow::Result<()> {
    let text = serde_json::to_string(&object)?;
    let output =
        crate::kubectl_with_stdin(&["-n", &ctx.namespace, "apply", "-f", "-"], Some(&text)).await?;
    check(output.status.success(), || {
        format!("kubectl apply: {}", String::from_utf8_lossy(&output.stderr))
    })
}

pub async fn deployment_of(ctx: &Ctx, name: &str, replicas: i32) -> anyhow::Result<Vec<Pod>> {
    apply(
        ctx,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": pod_template(name),
            },
        }),
    )
    .await?;
    all_ready(ctx, name, replicas).await
}

/// Applies PodDisruptionBudget `web` with `spec`, and waits until its status counts `healthy`
/// pods and allows `allowed` disruptions.
pub async fn budget_over(ctx: &Ctx, spec: Value, healthy: i32, allowed: i32) -> anyhow::Result<()> {
    apply(
        ctx,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "web"}, "spec": spec}),
    )
    .await?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    wait(
        pdbs,
        "web",
        Duration::from_secs(60),
        |pdb: Option<&PodDisruptionBudget>| {
            pdb.and_then(|pdb| pdb.status.as_ref())
                .is_some_and(|status| {
                    status.current_healthy == healthy && status.disruptions_allowed == allowed
                })
        },
    )
    .await
    .with_context(|| {
        format!("the PDB never allowed {allowed} disruptions of {healthy} healthy pods")
    })?;
    Ok(())
}

/// Waits until `count` pods labelled `app=<app>` are Ready; returns them by name.
pub async fn all_ready(ctx: &Ctx, app: &str, count: i32) -> anyhow::Result<Vec<Pod>> {
    let params = ListParams::default().labels(&format!("app={app}"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let mut pods = ctx.pods().list(&params).await?.items;
        pods.retain(|pod| pod.metadata.deletion_timestamp.is_none());
        let ready = pods.iter().filter(|pod| pod_ready(pod)).count();
        if ready == usize::try_from(count)? && pods.len() == ready {
            pods.sort_by_key(ResourceExt::name_any);
            return Ok(pods);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "{ready} of {count} pods of {app} Ready after 180 s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Samples, by a pod watch, the most pods labelled `app=<app>` not Ready at one time, until
/// dropped (read it with [`Unavailable::most`]).
pub struct Unavailable {
    most: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Unavailable {
    pub fn watch(ctx: &Ctx, app: &str) -> Self {
        Self::watch_selected(ctx, &format!("app={app}"), None)
    }

    /// As [`Self::watch`], for the pods `selector` selects; with `expected`, a pod missing from
    /// that many (evicted, its replacement not made yet) and a terminating one count unavailable
    /// too, as a PodDisruptionBudget counts them.
    pub fn watch_selected(ctx: &Ctx, selector: &str, expected: Option<usize>) -> Self {
        let most = Arc::new(Mutex::new(0));
        let pods = ctx.pods();
        let config = watcher::Config::default().labels(selector);
        let task = tokio::spawn({
            let most = most.clone();
            async move {
                let mut ready: BTreeMap<String, bool> = BTreeMap::new();
                // Counted against `expected` only once the first list is whole.
                let mut listed = expected.is_none();
                let mut events = watcher(pods, config).default_backoff().boxed();
                while let Some(Ok(event)) = events.next().await {
                    match event {
                        watcher::Event::InitDone => listed = true,
                        watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                            let available = pod_ready(&pod)
                                && (expected.is_none()
                                    || pod.metadata.deletion_timestamp.is_none());
                            ready.insert(pod.name_any(), available);
                        }
                        watcher::Event::Delete(pod) => {
                            ready.remove(&pod.name_any());
                        }
                        _ => {}
                    }
                    if !listed {
                        continue;
                    }
                    let now = match expected {
                        None => ready.values().filter(|ready| !**ready).count(),
                        Some(expected) => {
                            expected.saturating_sub(ready.values().filter(|ready| **ready).count())
                        }
                    };
                    let mut most = most.lock().expect("the sample");
                    *most = (*most).max(now);
                }
            }
        });
        Self { most, task }
    }

    pub fn most(&self) -> usize {
        *self.most.lock().expect("the sample")
    }
}

impl Drop for Unavailable {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn create_rollout(ctx: &Ctx, name: &str, spec: Value) -> anyhow::Result<()> {
    let rollout: ContainerRecreateRollout = serde_json::from_value(json!({
        "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
        "metadata": {"name": name},
        "spec": spec,
    }))?;
    rollouts(ctx)
        .create(&PostParams::default(), &rollout)
        .await
        .with_context(|| format!("creating rollout {name}"))?;
    Ok(())
}

/// Waits until the rollout's phase is `phase`.
pub async fn wait_phase(
    ctx: &Ctx,
    name: &str,
    phase: &'static str,
) -> anyhow::Result<ContainerRecreateRollout> {
    wait(
        rollouts(ctx),
        name,
        ROLLOUT_TIMEOUT,
        move |rollout: Option<&ContainerRecreateRollout>| {
            rollout
                .and_then(|rollout| rollout.status.as_ref())
                .and_then(|status| status.phase.as_deref())
                == Some(phase)
        },
    )
    .await
    .with_context(|| format!("rollout {name} never {phase}"))?
    .ok_or_else(|| anyhow!("rollout {name} vanished"))
}

/// Every pod of `before` still there with the same UID and IP, `app` restarted exactly
/// `app_restarts` times and `sidecar` never.
pub async fn recreated_in_place(
    ctx: &Ctx,
    before: &[Pod],
    app_restarts: i32,
) -> anyhow::Result<()> {
    for old in before {
        let name = old.name_any();
        let pod = ctx.pods().get(&name).await?;
        check(pod.uid() == old.uid(), || format!("{name} was replaced"))?;
        let ip = |pod: &Pod| pod.status.as_ref().and_then(|status| status.pod_ip.clone());
        check(ip(&pod) == ip(old), || {
            format!("{name} IP {:?} → {:?}", ip(old), ip(&pod))
        })?;
        let app = container(&pod, "app")?.restart_count;
        let sidecar = container(&pod, "sidecar")?.restart_count;
        check(app == app_restarts && sidecar == 0, || {
            format!("{name}: app restarted {app} times, sidecar {sidecar} (want {app_restarts}, 0)")
        })?;
    }
    Ok(())
}
