//! `crr-operator`: the cluster operator for ContainerRecreateRequests.
//!
//! Wires the API client, the Lease elector, the controller, the admin server and the signals.
//! Shutdown (SIGTERM or Ctrl+C): `/readyz` turns unready, the controller stops taking work and
//! finishes in-flight reconciles, then the Lease is released and the admin server stops. A
//! second signal exits at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use crr_operator::admin::{self, Health};
use crr_operator::controller::{self, Context};
use crr_operator::elector::{self, Elector};
use crr_operator::gate::{self, GateContext};
use crr_operator::metrics::{Metrics, PhaseCollector};
use crr_operator::shutdown;
use futures::Stream;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{error, info, warn};

/// Keeps ContainerRecreateRequests moving: takes pods out of endpoints before recreation,
/// snapshots container statuses for the node daemon, enforces deadlines and TTLs.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Namespace of the leader-election Lease.
    #[arg(
        long,
        env = "CRR_OPERATOR_LEASE_NAMESPACE",
        default_value = "crr-system"
    )]
    lease_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(long, env = "CRR_OPERATOR_LEASE_NAME", default_value = "crr-operator")]
    lease_name: String,

    /// Identity of this replica in the Lease (unique per replica; defaults to the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,

    /// Seconds a Lease claim lasts without renewal.
    #[arg(
        long,
        env = "CRR_OPERATOR_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    lease_duration_seconds: u64,

    /// Seconds a leader keeps acting without a successful renewal (less than the duration).
    #[arg(
        long,
        env = "CRR_OPERATOR_RENEW_DEADLINE_SECONDS",
        default_value_t = 10
    )]
    renew_deadline_seconds: u64,

    /// Seconds between Lease rounds.
    #[arg(long, env = "CRR_OPERATOR_RETRY_PERIOD_SECONDS", default_value_t = 2)]
    retry_period_seconds: u64,

    /// Address of the admin server (/healthz, /readyz, /metrics).
    #[arg(long, env = "CRR_OPERATOR_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    admin_addr: SocketAddr,

    /// Log format.
    #[arg(long, env = "CRR_OPERATOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Only handle requests (and watch pods) in this namespace; all namespaces when unset.
    #[arg(long, env = "CRR_OPERATOR_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,

    /// Label selector of pods whose `KruisePodReady` readiness gate the operator starts at True
    /// (the component injecting the gate labels them). Unset: no pod is initialised.
    #[arg(long, env = "CRR_OPERATOR_READINESS_GATE_SELECTOR")]
    readiness_gate_selector: Option<String>,

    /// Seconds in-flight reconciles get to finish after SIGTERM before the Lease is released
    /// anyway (keep it below the pod's terminationGracePeriodSeconds).
    #[arg(
        long,
        env = "CRR_OPERATOR_SHUTDOWN_DRAIN_SECONDS",
        default_value_t = 10
    )]
    shutdown_drain_seconds: u64,

    /// Reconciles running at once.
    #[arg(long, env = "CRR_OPERATOR_WORKERS", default_value_t = 3)]
    workers: u16,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
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

async fn stopped(mut stop: watch::Receiver<bool>) {
    // An error means the sender is gone, which also means stop.
    let _ = stop.wait_for(|stop| *stop).await;
}

async fn signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate =
            signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        tokio::select! {
            _ = terminate.recv() => {}
            result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl+C")?,
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl+C")?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_tracing(args.log_format);
    // Exactly one TLS crypto provider for the whole process (the API client uses rustls).
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        warn!("a TLS crypto provider was already installed");
    }
    if args.renew_deadline_seconds >= args.lease_duration_seconds {
        bail!("--renew-deadline-seconds must be less than --lease-duration-seconds");
    }
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("crr-operator-{}", std::process::id()));
    info!(%identity, "starting");

    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;

    let mut registry = Registry::with_prefix("crr_operator");
    let metrics = Metrics::register(&mut registry);
    let health = Arc::new(Health::default());

    let (elector, leader) = Elector::new(
        client.clone(),
        elector::Settings {
            namespace: args.lease_namespace.clone(),
            name: args.lease_name.clone(),
            identity: identity.clone(),
            lease_duration: Duration::from_secs(args.lease_duration_seconds),
            renew_deadline: Duration::from_secs(args.renew_deadline_seconds),
            retry_period: Duration::from_secs(args.retry_period_seconds),
        },
    );

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "crr-operator".to_owned(),
            instance: Some(identity.clone()),
        },
    );
    let context = Arc::new(Context {
        client: client.clone(),
        recorder,
        metrics: metrics.clone(),
        leader: leader.clone(),
    });

    let controller = controller::new_controller(
        client.clone(),
        args.watch_namespace.as_deref(),
        args.workers,
    );
    let store = controller.store();
    registry.register_collector(Box::new(PhaseCollector::new({
        let store = store.clone();
        move || store.state()
    })));
    tokio::spawn({
        let health = health.clone();
        async move {
            // kube-runtime's readiness future wakes only its most recent poller (a oneshot
            // underneath), and the controller's own runner waits on it too: poll again at
            // intervals instead of once, or this task may sleep forever.
            let ready = loop {
                match tokio::time::timeout(Duration::from_millis(250), store.wait_until_ready())
                    .await
                {
                    Ok(result) => break result,
                    Err(_) => continue,
                }
            };
            match ready {
                Ok(()) => {
                    health.requests_synced.store(true, Ordering::Relaxed);
                    info!("request cache synced");
                }
                Err(error) => error!(%error, "the request cache never synced"),
            }
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

    let (stop_admin, admin_stop) = watch::channel(false);
    let mut admin_task = tokio::spawn(admin::serve(
        args.admin_addr,
        admin::router(health.clone(), registry),
        stopped(admin_stop),
    ));
    let (stop_elector, elector_stop) = watch::channel(false);
    let mut elector_task = tokio::spawn(elector.run(elector_stop));
    let (stop_controller, controller_stop) = watch::channel(false);
    tokio::spawn({
        let health = health.clone();
        async move {
            if let Err(error) = signal().await {
                error!(%error, "cannot wait for signals");
            }
            info!("shutting down: finishing in-flight reconciles");
            health.shutting_down.store(true, Ordering::Relaxed);
            let _ = stop_controller.send(true);
            if signal().await.is_ok() {
                warn!("second signal: exiting at once");
                std::process::exit(130);
            }
        }
    });

    let pods_synced = {
        let health = health.clone();
        move || {
            if !health.pods_synced.swap(true, Ordering::Relaxed) {
                info!("pod metadata watch synced");
            }
        }
    };
    let requests = controller::run(
        controller,
        context,
        args.watch_namespace.as_deref(),
        pods_synced,
        became_leader(leader.clone()),
        stopped(controller_stop.clone()),
    );
    let gates = async {
        if let Some(selector) = &args.readiness_gate_selector {
            let ctx = Arc::new(GateContext {
                client: client.clone(),
                leader: leader.clone(),
            });
            gate::run(
                ctx,
                args.watch_namespace.as_deref(),
                selector,
                became_leader(leader.clone()),
                stopped(controller_stop.clone()),
            )
            .await;
        }
    };
    let run = async {
        tokio::join!(requests, gates);
    };
    let drained = shutdown::drain(
        run,
        stopped(controller_stop.clone()),
        Duration::from_secs(args.shutdown_drain_seconds),
    );
    tokio::select! {
        drain = drained => {
            if drain == shutdown::Drain::Abandoned {
                warn!(
                    seconds = args.shutdown_drain_seconds,
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
    let _ = stop_elector.send(true);
    if let Err(error) = elector_task.await {
        warn!(%error, "leader election task failed");
    }
    let _ = stop_admin.send(true);
    match admin_task.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => warn!(%error, "admin server failed"),
        Err(error) => warn!(%error, "admin server task failed"),
    }
    info!("stopped");
    Ok(())
}
