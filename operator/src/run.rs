//! The operator process, wired: API client, Lease elector, the request controller, the
//! readiness-gate initializer, the admin server and the signals. `main.rs` only parses flags
//! into [`Settings`].
//!
//! Shutdown (SIGTERM or Ctrl+C): `/readyz` turns unready, the controllers stop taking work and
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
use futures::Stream;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::FIELD_MANAGER;
use crate::context::Context;
use crate::controller;
use crate::elector::{self, Elector};
use crate::gate::{self, GateContext};
use crate::metrics::{CacheCollector, Metrics};
use crate::rollout;
use crate::rollout::controller::RolloutContext;
use crate::rollout::metrics::{RolloutCollector, RolloutMetrics};
use crate::settled::{self, SettledIndex};
use crate::triggers::controller::{TriggerContext, TriggerSettings};

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
    /// The triggers' settings; `None`: no triggers.
    pub triggers: Option<TriggerSettings>,
}

/// Emits each time the receiver turns true.
fn became_leader(leader: watch::Receiver<bool>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(leader, |mut leader| async move {
        loop {
            leader.changed().await.ok()?;
            if *leader.borrow_and_update() {
                return Some(((), leader));
            }
        }
    })
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
    let metrics = Metrics::register(&mut registry);

    let (elector, leader) = Elector::new(client.clone(), settings.lease.clone());
    let context = Arc::new(Context::new(
        client.clone(),
        EventPublisher::new(client.clone(), FIELD_MANAGER, identity),
        metrics.clone(),
        leader.clone(),
        Arc::default(),
    ));

    let namespace = settings.watch_namespace.as_deref();
    let settled = Arc::new(SettledIndex::default());
    let controller::RequestWatch {
        controller,
        changes: request_changes,
        reflecting,
    } = controller::new_controller(client.clone(), namespace, settings.workers, settled.clone());
    let store = controller.store();
    let (budgets, budget_changes) = rollout::controller::budget_watch(client.clone(), namespace);
    let (rollouts, rollout_changes) = rollout::controller::rollout_watch(client.clone(), namespace);
    registry.register_collector(Box::new(RolloutCollector::new({
        let rollouts = rollouts.clone();
        move || rollouts.state()
    })));
    let rollout_context = Arc::new(RolloutContext::new(
        client.clone(),
        context.events.clone(),
        leader.clone(),
        store.clone(),
        budgets,
        RolloutMetrics::register(&mut registry),
    ));
    registry.register_collector(Box::new(CacheCollector::new(
        {
            let store = store.clone();
            move || store.state()
        },
        {
            let settled = settled.clone();
            move || settled.counts()
        },
    )));
    let requests_synced = readiness.gate("request cache");
    tokio::spawn(async move {
        match crr_runtime::store::wait_until_ready(&store).await {
            Ok(()) => requests_synced.open(),
            Err(error) => warn!(%error, "the request cache never synced"),
        }
    });
    tokio::spawn({
        let mut leader = leader.clone();
        let gauge = metrics.leader.clone();
        async move {
            loop {
                gauge.set(i64::from(*leader.borrow_and_update()));
                if leader.changed().await.is_err() {
                    break;
                }
            }
        }
    });

    tokio::spawn(crr_runtime::memory::release_freed_memory(
        crr_runtime::memory::RELEASE_INTERVAL,
    ));

    let pods_synced = readiness.gate("pod metadata watch");
    let (admin_trigger, admin_stop) = Shutdown::manual();
    let mut admin_task = tokio::spawn(admin::serve(
        settings.admin_addr,
        admin::router(readiness, registry, ""),
        admin_stop.requested(),
    ));
    let (elector_trigger, elector_stop) = watch::channel(false);
    let mut elector_task = tokio::spawn(elector.run(elector_stop));

    let expiring = settled::expire_while_leading(context.clone(), settled, shutdown.requested());
    let trigger_events = context.events.clone();
    let requests = controller::run(
        controller,
        context,
        namespace,
        move || pods_synced.open(),
        became_leader(leader.clone()),
        shutdown.requested(),
    );
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
                became_leader(leader.clone()),
                shutdown.requested(),
            );
            tokio::join!(sweeping, watching);
        }
    };
    let trigger_rollouts = rollouts.clone();
    let triggering = {
        let triggers = settings.triggers.clone();
        let client = client.clone();
        let events = trigger_events;
        let leader = leader.clone();
        let namespace = namespace.map(str::to_owned);
        let shutdown = shutdown.requested();
        async move {
            if let Some(triggers) = triggers {
                let ctx = Arc::new(TriggerContext::new(
                    client,
                    events,
                    leader.clone(),
                    trigger_rollouts,
                    triggers,
                ));
                crate::triggers::controller::run(ctx, namespace, became_leader(leader), shutdown)
                    .await;
            }
        }
    };
    let rollouts = rollout::controller::run(
        rollout_context,
        rollouts,
        rollout_changes,
        request_changes,
        budget_changes,
        became_leader(leader.clone()),
        shutdown.requested(),
    );
    let work = async {
        // The request watch feeds both controllers and ends with neither: the work is done when
        // they are.
        tokio::select! {
            _ = async { tokio::join!(requests, gates, rollouts, expiring, triggering) } => {}
            () = reflecting => {}
        }
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
