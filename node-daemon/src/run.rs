//! The node daemon process, wired: the CRI runtime, the API client, the request watch and its
//! workers, the admin server and the signals. `main.rs` only parses flags ([`Args`]).
//!
//! Shutdown (SIGTERM or Ctrl+C): `/readyz` turns unready and the kills under way finish; a
//! second signal exits at once. A runtime unreachable through the mounted socket for
//! `--cri-unavailable-exit-seconds` makes the process exit with an error (`socket_watch`), so the
//! kubelet mounts the runtime's new socket; `/readyz` is unready while the runtime is away.

use anyhow::Context as _;
use crr_runtime::admin::{self, Readiness};
use crr_runtime::client::ApiClient;
use crr_runtime::events::EventPublisher;
use crr_runtime::shutdown::Shutdown;
use prometheus_client::registry::Registry;

use crate::api_server::FIELD_MANAGER;
use crate::args::Args;
use crate::cri::{self, Runtime};
use crate::metrics::{InFlightCollector, Metrics};
use crate::worker::{Daemon, Watch};

/// Runs the daemon until SIGTERM (kills under way finished) or a second signal.
pub async fn run(args: Args) -> anyhow::Result<()> {
    crr_runtime::tls::install_crypto_provider();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let socket = cri::find_socket(args.cri_socket.as_deref())?;
    let runtime = Runtime::connect_reporting(&socket, metrics.cri.clone())
        .await
        .context("checking the container runtime")?;
    metrics.runtime_ready.set(1);
    tracing::info!(socket = %socket.display(), runtime = %runtime.name, version = %runtime.version, node = %args.node_name, "connected to the runtime");
    let runtime_name = format!("runtime {} {}", runtime.name, runtime.version);
    let follows_events = crate::runtime_events::broadcasts(&runtime.name, &runtime.version);
    let watched_runtime = runtime.clone();
    tokio::spawn({
        let runtime = runtime.clone();
        crate::recreates::forget_gone_pods(
            metrics.recreates.clone(),
            move |pod_uid: String| {
                let runtime = runtime.clone();
                async move {
                    runtime
                        .pod_containers(&pod_uid)
                        .await
                        .map(|containers| !containers.is_empty())
                }
            },
            crate::recreates::SWEEP_INTERVAL,
        )
    });

    let api = ApiClient::infer(FIELD_MANAGER)
        .await
        .context("connecting to the API server")?;
    let shutdown = Shutdown::on_signals();
    let readiness = Readiness::default();
    readiness.follow(&shutdown);
    let synced = readiness.gate("request watch");
    let runtime_reachable = readiness.gate("container runtime");
    runtime_reachable.open();
    let (daemon, feeder) = Daemon::new(
        api.client(),
        runtime,
        Watch {
            node: args.node_name.clone(),
            namespaces: args.watch_namespace.clone(),
        },
        EventPublisher::new(api.client(), FIELD_MANAGER, args.node_name.clone()),
        metrics.clone(),
        args.max_grace_period_seconds,
        move || synced.open(),
    );
    tokio::spawn(feeder);
    if follows_events {
        tokio::spawn(daemon.clone().follow_container_events());
    } else {
        tracing::info!(
            runtime = %runtime_name,
            "not following the runtime's container events (only containerd 2 sends them to every \
             subscriber): recreates in flight are looked at every 500 ms"
        );
    }
    tokio::spawn(crr_runtime::memory::release_freed_memory(
        crr_runtime::memory::RELEASE_INTERVAL,
    ));
    registry
        .sub_registry_with_prefix("crr_node_daemon")
        .register_collector(Box::new(InFlightCollector::new({
            let daemon = daemon.clone();
            move || daemon.in_flight()
        })));

    let admin_listen = args.admin.address;
    tokio::spawn(async move {
        let router = admin::router(readiness, registry, runtime_name);
        if let Err(error) = admin::serve(admin_listen, router, std::future::pending()).await {
            tracing::error!(%error, address = %admin_listen, "admin server failed");
        }
    });

    let budget = std::time::Duration::from_secs(args.cri_unavailable_exit_seconds);
    let runtime_ready = metrics.runtime_ready.clone();
    let socket_dead = crate::socket_watch::watch(watched_runtime, budget, move |reachable| {
        runtime_ready.set(i64::from(reachable));
        if reachable {
            runtime_reachable.open();
        } else {
            runtime_reachable.close();
        }
    });
    tokio::select! {
        () = daemon.run(args.max_parallel_pods, shutdown.requested()) => Ok(()),
        down = socket_dead => Err(anyhow::anyhow!(
            "the container runtime has not answered through {} for {} s; exiting so that the \
             kubelet starts this container again with the runtime's current socket",
            socket.display(),
            down.as_secs()
        )),
    }
}
