//! The operator process, wired: API client, Lease elector, the three wings (`request`,
//! `rollout`, `triggers`, each started by its `start`), the readiness-gate initializer, the
//! admin server and the signals. `main.rs` only parses flags into [`Settings`].
//!
//! The wings meet only here and through API objects: the rollout wing reads the request wing's
//! cache, the trigger wing the rollout wing's; a trigger creates a rollout, and a rollout
//! creates requests.
//!
//! Shutdown (SIGTERM or Ctrl+C): `/readyz` turns unready, the wings stop taking work and
//! finish in-flight reconciles (bounded by `shutdown_drain`), then the Lease is released and the
//! admin server stops. A second signal exits at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use crr_runtime::admin::{self, Readiness};
use crr_runtime::client::ApiClient;
use crr_runtime::events::EventPublisher;
use crr_runtime::shutdown::{self, Drain, Shutdown};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::elector::{self, Elector};
use crate::gate::{self, GateContext};
use crate::reconcile_errors::ReconcileErrors;
use crate::triggers::context::TriggerSettings;
use crate::wing::FIELD_MANAGER;
use crate::wing::WingContext;
use crate::{request, rollout, triggers};

/// What the operator process needs to know.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The leader-election Lease and this replica's identity in it.
    pub lease: elector::Settings,
    /// Address of /healthz, /readyz and /metrics.
    pub admin_addr: SocketAddr,
    /// Only this namespace's requests and pods; all namespaces when `None`.
    pub watch_namespace: Option<String>,
    /// Pods whose `KruisePodReady` gate is started at True; none when `None`.
    pub readiness_gate_selector: Option<String>,
    /// Interval of the sweep that starts the gate of gated pods without the label.
    pub readiness_gate_sweep: Duration,
    /// How long in-flight reconciles get after SIGTERM before the Lease is released anyway.
    pub shutdown_drain: Duration,
    /// Reconciles running at once.
    pub workers: u16,
    /// Rollouts running at once in the cluster, and in one namespace while others wait
    /// (`rollout::cluster_cap`).
    pub rollout_cap: crate::rollout::cluster_cap::Cap,
    /// The triggers' settings; `None`: no triggers.
    pub triggers: Option<TriggerSettings>,
}

/// The wings, started: their work, to run until shutdown.
struct Wings {
    request: futures::future::BoxFuture<'static, ()>,
    rollout: futures::future::BoxFuture<'static, ()>,
    triggers: futures::future::BoxFuture<'static, ()>,
}

/// Starts the three wings on `wing`, their metrics in `registry`.
fn start_wings(
    wing: &WingContext,
    settings: &Settings,
    registry: &mut Registry,
    readiness: &Readiness,
) -> Wings {
    let errors = ReconcileErrors::register(registry);
    let requests = request::start(wing, settings.workers, registry, &errors, readiness);
    // The request wing's pod watch reports pods' readiness; rollouts wake on it.
    let rollouts = rollout::start(
        wing,
        requests.requests,
        requests.changes,
        requests.pod_readiness,
        settings.rollout_cap,
        registry,
        &errors,
    );
    // Registered with triggers off too: every family docs/metrics.md lists is served.
    let trigger_metrics = triggers::metrics::TriggerMetrics::register(registry);
    let triggers = match settings.triggers.clone() {
        Some(triggers) => triggers::start(
            wing,
            triggers,
            rollouts.rollouts.clone(),
            &errors,
            trigger_metrics,
        ),
        None => Box::pin(std::future::ready(())),
    };
    Wings {
        request: requests.work,
        rollout: rollouts.work,
        triggers,
    }
}

/// `crr_operator_leader`, kept equal to `leader`.
fn leader_gauge(registry: &mut Registry, mut leader: watch::Receiver<bool>) {
    let gauge = Gauge::<i64>::default();
    registry.register(
        "leader",
        "1 while this replica holds the leader Lease, else 0",
        gauge.clone(),
    );
    tokio::spawn(async move {
        loop {
            gauge.set(i64::from(*leader.borrow_and_update()));
            if leader.changed().await.is_err() {
                break;
            }
        }
    });
}

/// Runs the operator until SIGTERM (drained, Lease released) or a second signal.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    crr_runtime::tls::install_crypto_provider();
    let identity = settings.lease.identity.clone();
    info!(%identity, "starting");
    let api = ApiClient::infer(FIELD_MANAGER)
        .await
        .context("connecting to the Kubernetes API")?;
    let client = api.client();

    let shutdown = Shutdown::on_signals();
    let readiness = Readiness::default();
    readiness.follow(&shutdown);
    let mut registry = Registry::with_prefix("crr_operator");

    let (elector, leader) = Elector::new(client.clone(), settings.lease.clone());
    let wing = WingContext {
        client: client.clone(),
        events: EventPublisher::new(client.clone(), FIELD_MANAGER, identity),
        leader: leader.clone(),
        namespace: settings.watch_namespace.clone(),
        shutdown: shutdown.clone(),
    };
    let wings = start_wings(&wing, &settings, &mut registry, &readiness);
    leader_gauge(&mut registry, leader.clone());

    tokio::spawn(crr_runtime::memory::release_freed_memory(
        crr_runtime::memory::RELEASE_INTERVAL,
    ));

    let (admin_trigger, admin_stop) = Shutdown::manual();
    let mut admin_task = tokio::spawn(admin::serve(
        settings.admin_addr,
        admin::router(readiness, registry, ""),
        admin_stop.requested(),
    ));
    let (elector_trigger, elector_stop) = watch::channel(false);
    let mut elector_task = tokio::spawn(elector.run(elector_stop));

    let namespace = settings.watch_namespace.as_deref();
    let gates = async {
        if let Some(selector) = &settings.readiness_gate_selector {
            let ctx = Arc::new(GateContext {
                client: client.clone(),
                leader: leader.clone(),
            });
            let sweeping = gate::sweep_while_leading(
                ctx.clone(),
                namespace.map(str::to_owned),
                settings.readiness_gate_sweep,
                shutdown.requested(),
            );
            let watching = gate::run(
                ctx,
                namespace,
                selector,
                wing.became_leader(),
                shutdown.requested(),
            );
            tokio::join!(sweeping, watching);
        }
    };
    let work = async {
        tokio::join!(wings.request, wings.rollout, wings.triggers, gates);
    };
    let drained = shutdown::drain(work, shutdown.requested(), settings.shutdown_drain);
    tokio::select! {
        drain = drained => {
            if drain == Drain::Abandoned {
                warn!(
                    seconds = settings.shutdown_drain.as_secs(),
                    "the controllers did not drain in time (a cache that never synced, or a slow reconcile); stopping anyway"
                );
            }
        }
        result = &mut elector_task => {
            bail!("leader election ended unexpectedly: {result:?}");
        }
        result = &mut admin_task => {
            bail!("admin server ended unexpectedly: {result:?}");
        }
    }

    // Reconciles are drained: nobody writes as leader any more, so the Lease can go.
    let _ = elector_trigger.send(true);
    if let Err(error) = elector_task.await {
        warn!(%error, "leader election task failed");
    }
    admin_trigger.request();
    match admin_task.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => warn!(%error, "admin server failed"),
        Err(error) => warn!(%error, "admin server task failed"),
    }
    info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_operator_serves_exactly_the_metric_families_docs_metrics_md_lists() {
        let (client, _api) = crate::api_mock::client();
        let (_stop, shutdown) = Shutdown::manual();
        let (_, leader) = watch::channel(false);
        let wing = WingContext {
            events: EventPublisher::new(client.clone(), FIELD_MANAGER, "test"),
            client,
            leader: leader.clone(),
            namespace: None,
            shutdown,
        };
        let settings = Settings {
            lease: elector::Settings {
                namespace: "crr-system".to_owned(),
                name: "crr-operator".to_owned(),
                identity: "test".to_owned(),
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            },
            admin_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            watch_namespace: None,
            readiness_gate_selector: None,
            readiness_gate_sweep: Duration::from_secs(60),
            shutdown_drain: Duration::from_secs(5),
            workers: 1,
            rollout_cap: crate::rollout::cluster_cap::Cap::new(10, None),
            triggers: None,
        };
        let mut registry = Registry::with_prefix("crr_operator");
        let _wings = start_wings(&wing, &settings, &mut registry, &Readiness::default());
        leader_gauge(&mut registry, leader);
        let text = crr_runtime::metrics::encode(&registry).expect("encodes");
        for line in [
            r#"crr_operator_reconcile_errors_total{controller="request",kind="conflict"} 0"#,
            r#"crr_operator_reconcile_errors_total{controller="rollout",kind="read_world"} 0"#,
            "crr_operator_leader 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        use crr_runtime::metrics::{documented_families, exposed_families};
        assert_eq!(
            exposed_families(&text),
            documented_families(include_str!("../../docs/metrics.md"), "crr_operator_"),
            "docs/metrics.md lists exactly the families the operator serves"
        );
    }
}
