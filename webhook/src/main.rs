//! `crr-webhook`: admission (CRRs and the pod readiness gate) and CRD conversion over HTTPS.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use crr_webhook::certs::{self, Bundle, CaTargets, CertResolver};
use crr_webhook::lookup::ApiLookup;
use crr_webhook::metrics::Metrics;
use crr_webhook::server::{self, AppState, Health};
use prometheus_client::registry::Registry;

/// Admission and conversion webhook for ContainerRecreateRequests.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// HTTPS address the API server calls.
    #[arg(long, env = "CRR_WEBHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    listen: SocketAddr,

    /// Plain-HTTP address of /healthz, /readyz and /metrics.
    #[arg(long, env = "CRR_WEBHOOK_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    admin_listen: SocketAddr,

    /// Log format.
    #[arg(long, env = "CRR_WEBHOOK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Whether the node daemon runs (upstream's KruiseDaemon feature gate). When false, new
    /// ContainerRecreateRequests are refused with a message saying why.
    #[arg(long, env = "CRR_WEBHOOK_NODE_DAEMON_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    node_daemon_enabled: bool,

    /// Folder with tls.crt, tls.key (and ca.crt) to serve instead of a self-managed certificate
    /// (cert-manager style); re-read when the files change.
    #[arg(long, env = "CRR_WEBHOOK_CERT_DIR")]
    cert_dir: Option<PathBuf>,

    /// Secret `namespace/name` holding the self-managed CA and serving certificate.
    #[arg(
        long,
        env = "CRR_WEBHOOK_CERT_SECRET",
        default_value = "crr-system/crr-webhook-certs"
    )]
    cert_secret: String,

    /// Service `namespace/name` the API server calls; the certificate is made for its DNS names.
    #[arg(
        long,
        env = "CRR_WEBHOOK_SERVICE",
        default_value = "crr-system/crr-webhook"
    )]
    service: String,

    /// Name of the Mutating- and ValidatingWebhookConfiguration whose caBundle we keep (empty:
    /// none).
    #[arg(long, env = "CRR_WEBHOOK_CONFIGURATION", default_value = "crr-webhook")]
    webhook_configuration: String,

    /// MutatingWebhookConfiguration whose caBundle we keep, when it is not named
    /// --webhook-configuration.
    #[arg(long, env = "CRR_WEBHOOK_MUTATING_CONFIGURATION")]
    mutating_webhook_configuration: Option<String>,

    /// ValidatingWebhookConfiguration whose caBundle we keep, when it is not named
    /// --webhook-configuration.
    #[arg(long, env = "CRR_WEBHOOK_VALIDATING_CONFIGURATION")]
    validating_webhook_configuration: Option<String>,

    /// Pod label that opts a pod into the KruisePodReady readiness gate (value "true"). Must
    /// match the objectSelector of the pod webhook and the operator's --readiness-gate-selector.
    #[arg(long, env = "CRR_WEBHOOK_READINESS_GATE_LABEL", default_value = crr_crds::keys::LABEL_READINESS_GATE)]
    readiness_gate_label: String,

    /// Seconds to let in-flight requests finish after SIGTERM (a second signal exits at once).
    #[arg(long, env = "CRR_WEBHOOK_DRAIN_SECONDS", default_value_t = 20)]
    drain_seconds: u64,

    /// CRD whose conversion caBundle we keep (empty: none).
    #[arg(long, env = "CRR_WEBHOOK_CRD", default_value = crr_crds::keys::CRD_NAME)]
    crd: String,

    /// Seconds between checks of the certificate source and of the published caBundles.
    #[arg(long, env = "CRR_WEBHOOK_CERT_RESYNC_SECONDS", default_value_t = 10)]
    cert_resync_seconds: u64,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn split(value: &str, what: &str) -> anyhow::Result<(String, String)> {
    value
        .split_once('/')
        .map(|(namespace, name)| (namespace.to_owned(), name.to_owned()))
        .with_context(|| format!("{what} must be namespace/name, got {value:?}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a TLS crypto provider was already installed"))?;

    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    let (service_namespace, service_name) = split(&args.service, "--service")?;
    let (secret_namespace, secret_name) = split(&args.cert_secret, "--cert-secret")?;
    let named = |name: Option<&String>| {
        Some(name.unwrap_or(&args.webhook_configuration).clone()).filter(|name| !name.is_empty())
    };
    let targets = CaTargets {
        mutating: named(args.mutating_webhook_configuration.as_ref()),
        validating: named(args.validating_webhook_configuration.as_ref()),
        crd: Some(args.crd.clone()).filter(|name| !name.is_empty()),
    };

    let bundle: Bundle = match &args.cert_dir {
        Some(dir) => certs::read_dir(dir).context("reading --cert-dir")?,
        None => certs::ensure_secret(
            &client,
            &secret_namespace,
            &secret_name,
            &certs::service_dns_names(&service_namespace, &service_name),
        )
        .await
        .context("getting the serving certificate Secret")?,
    };
    let resolver = CertResolver::new(bundle).context("loading the serving certificate")?;

    let health = Arc::new(Health::default());
    health.cert_loaded.store(true, Ordering::Relaxed);
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let lookup = ApiLookup::start(client.clone());

    // Certificate upkeep: reload on change, keep the caBundles published (a re-applied manifest
    // has none).
    {
        let (client, resolver, targets, cert_dir) = (
            client.clone(),
            resolver.clone(),
            targets.clone(),
            args.cert_dir.clone(),
        );
        let interval = Duration::from_secs(args.cert_resync_seconds.max(1));
        tokio::spawn(async move {
            loop {
                let fresh = match &cert_dir {
                    Some(dir) => certs::read_dir(dir),
                    None => certs::read_secret(&client, &secret_namespace, &secret_name).await,
                };
                match fresh.map(|bundle| resolver.set(bundle)) {
                    Ok(Ok(true)) => tracing::info!("serving certificate reloaded"),
                    Ok(Ok(false)) => {}
                    Ok(Err(error)) | Err(error) => tracing::warn!(%error, "certificate reload"),
                }
                let ca = resolver.bundle().ca_pem;
                if !ca.is_empty() {
                    match certs::publish_ca(&client, &targets, &ca).await {
                        Ok(0) => {}
                        Ok(count) => tracing::info!(objects = count, "published caBundle"),
                        Err(error) => tracing::warn!(%error, "publishing caBundle"),
                    }
                }
                tokio::time::sleep(interval).await;
            }
        });
    }
    {
        let (health, lookup) = (health.clone(), lookup.clone());
        tokio::spawn(async move {
            while !lookup.is_synced() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            health.caches_synced.store(true, Ordering::Relaxed);
        });
    }

    let state = Arc::new(AppState {
        lookup,
        node_daemon_enabled: args.node_daemon_enabled,
        readiness_gate_label: args.readiness_gate_label.clone(),
        metrics,
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!(listen = %args.listen, admin = %args.admin_listen, node_daemon_enabled = args.node_daemon_enabled, "serving");
    let admin = tokio::spawn(server::serve_admin(
        args.admin_listen,
        server::admin_router(health.clone(), registry),
    ));
    let shutdown = Arc::new(tokio::sync::Notify::new());
    {
        let (shutdown, health) = (shutdown.clone(), health.clone());
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down: draining connections");
            health.shutting_down.store(true, Ordering::Relaxed);
            shutdown.notify_waiters();
            shutdown.notify_one();
            wait_for_signal().await;
            tracing::warn!("second signal: exiting now");
            std::process::exit(1);
        });
    }
    server::serve_tls(
        listener,
        server::tls_config(resolver),
        server::router(state),
        shutdown,
        server::Limits {
            drain: Duration::from_secs(args.drain_seconds),
            ..server::Limits::default()
        },
    )
    .await
    .context("serving HTTPS")?;
    admin.abort();
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
