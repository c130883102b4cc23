//! `crr-node-daemon`: recreates the containers of this node's ContainerRecreateRequests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use clap::Parser;
use crr_node_daemon::cri::{self, Runtime};
use crr_node_daemon::metrics::{self, Metrics};
use crr_node_daemon::worker::{Daemon, Watch};
use kube::runtime::events::{Recorder, Reporter};
use prometheus_client::registry::Registry;

/// Per-node agent that recreates ContainerRecreateRequest containers through CRI.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// This node's name (the DaemonSet passes it from the downward API).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,

    /// Watch requests of this namespace only (for tests; the DaemonSet watches all).
    #[arg(long, env = "CRR_NODE_DAEMON_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,

    /// The runtime's CRI socket; when unset, the usual containerd, CRI-O and cri-dockerd paths
    /// are tried.
    #[arg(long, env = "CRR_NODE_DAEMON_CRI_SOCKET")]
    cri_socket: Option<PathBuf>,

    /// Pods whose requests are worked on at once.
    #[arg(long, env = "CRR_NODE_DAEMON_MAX_PARALLEL_PODS", default_value_t = 16)]
    max_parallel_pods: usize,

    /// Address of /healthz, /readyz and /metrics.
    #[arg(
        long,
        env = "CRR_NODE_DAEMON_ADMIN_LISTEN",
        default_value = "0.0.0.0:10221"
    )]
    admin_listen: SocketAddr,

    /// Log format.
    #[arg(long, env = "CRR_NODE_DAEMON_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

struct Admin {
    synced: AtomicBool,
    stopping: AtomicBool,
    runtime: String,
    registry: Registry,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a TLS crypto provider was already installed"))?;

    let socket = cri::find_socket(args.cri_socket.as_deref())?;
    let runtime = Runtime::connect(&socket)
        .await
        .context("checking the container runtime")?;
    tracing::info!(socket = %socket.display(), runtime = %runtime.name, version = %runtime.version, node = %args.node_name, "connected to the runtime");

    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "crr-node-daemon".to_owned(),
            instance: Some(args.node_name.clone()),
        },
    );
    let admin = Arc::new(Admin {
        synced: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        runtime: format!("{} {}", runtime.name, runtime.version),
        registry,
    });
    let synced = admin.clone();
    let (daemon, feeder) = Daemon::new(
        client,
        runtime,
        Watch {
            node: args.node_name.clone(),
            namespace: args.watch_namespace.clone(),
        },
        recorder,
        metrics,
        move || {
            synced.synced.store(true, Ordering::Relaxed);
            tracing::info!("watch synced");
        },
    );
    tokio::spawn(feeder);

    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(admin): State<Arc<Admin>>| async move {
                if admin.synced.load(Ordering::Relaxed) && !admin.stopping.load(Ordering::Relaxed) {
                    (StatusCode::OK, format!("ready: runtime {}", admin.runtime))
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready".to_owned())
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(admin): State<Arc<Admin>>| async move {
                match metrics::encode(&admin.registry) {
                    Ok(body) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
                        .into_response(),
                    Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                }
            }),
        )
        .with_state(admin.clone());
    let listener = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("listening on {}", args.admin_listen))?;
    tokio::spawn(async move { axum::serve(listener, router).await });

    let stop = Arc::new(tokio::sync::Notify::new());
    {
        let (stop, admin) = (stop.clone(), admin.clone());
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down: finishing the kills under way");
            admin.stopping.store(true, Ordering::Relaxed);
            stop.notify_one();
            wait_for_signal().await;
            tracing::warn!("second signal: exiting now");
            std::process::exit(1);
        });
    }
    daemon.run(args.max_parallel_pods, stop).await;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
