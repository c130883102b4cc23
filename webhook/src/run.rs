//! The webhook process, wired: API client, certificate, lookups, metrics, the admin server, the
//! TLS server and the signals. `main.rs` only parses flags into [`Settings`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use crr_runtime::admin::{self, Readiness};
use crr_runtime::client::ApiClient;
use crr_runtime::server::{self, Limits};
use crr_runtime::shutdown::Shutdown;
use prometheus_client::registry::Registry;

use crate::FIELD_MANAGER;
use crate::certs::generate::service_dns_names;
use crate::certs::publish::CaTargets;
use crate::certs::resolver::CertResolver;
use crate::certs::upkeep::{self, CertSource, Rotation};
use crate::lookup::ApiLookup;
use crate::metrics::Metrics;
use crate::rotation::Policy;
use crate::routes::{self, AppState};
use crate::serving;
use crr_runtime::events::EventPublisher;

/// Connections the webhook holds at once.
pub const WEBHOOK_CONNECTIONS: usize = 1024;
/// Connections the webhook holds at once from one address: room for an API server's busiest
/// moment (it opens one HTTP/1.1 connection per call in flight), while a flood from a few pods
/// cannot take every connection.
pub const WEBHOOK_CONNECTIONS_PER_PEER: usize = 256;

/// What the webhook process needs to know.
#[derive(Clone, Debug)]
pub struct Settings {
    /// HTTPS address the API server calls.
    pub listen: SocketAddr,
    /// Plain-HTTP address of /healthz, /readyz and /metrics.
    pub admin_listen: SocketAddr,
    /// Upstream's KruiseDaemon feature gate.
    pub node_daemon_enabled: bool,
    pub cert_source: CertSource,
    /// The CA of the API server's client certificate; set, admission calls must present one.
    pub client_ca_file: Option<std::path::PathBuf>,
    /// The Service the API server calls (the certificate's DNS names).
    pub service_namespace: String,
    pub service_name: String,
    /// Where the CA is published.
    pub ca_targets: CaTargets,
    /// Pod label that opts a pod into the KruisePodReady readiness gate.
    pub readiness_gate_label: String,
    /// How long in-flight requests get after SIGTERM.
    pub drain: Duration,
    /// Interval of the certificate upkeep.
    pub cert_resync: Duration,
    /// Lifetimes and overlaps of the self-managed certificates.
    pub cert_policy: Policy,
}

/// Runs the webhook until SIGTERM (drained) or a second signal.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    crr_runtime::tls::install_crypto_provider();
    let api = ApiClient::infer(FIELD_MANAGER)
        .await
        .context("connecting to the API server")?;
    let client = api.client();
    let dns_names = service_dns_names(&settings.service_namespace, &settings.service_name);
    let bundle = settings
        .cert_source
        .first(&client, &dns_names, &settings.cert_policy)
        .await
        .context("getting the serving certificate")?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let resolver = CertResolver::reporting(bundle, metrics.certificate_expiry.clone())
        .context("loading the serving certificate")?;
    // Events name this replica: the pod's name in a cluster.
    let instance = std::env::var("HOSTNAME").unwrap_or_else(|_| FIELD_MANAGER.to_owned());
    let rotation = Rotation {
        policy: settings.cert_policy,
        dns_names,
        events: Some(EventPublisher::new(client.clone(), FIELD_MANAGER, instance)),
        renewals: metrics.certificate_renewals.clone(),
    };
    tokio::spawn(upkeep::keep_up(
        client.clone(),
        resolver.clone(),
        settings.cert_source.clone(),
        settings.ca_targets.clone(),
        settings.cert_resync,
        rotation,
    ));

    tokio::spawn(crr_runtime::memory::release_freed_memory(
        crr_runtime::memory::RELEASE_INTERVAL,
    ));
    let shutdown = Shutdown::on_signals();
    let readiness = Readiness::default();
    readiness.follow(&shutdown);
    // Readiness waits for no cache: conversion needs none, and admission reads what the node
    // label cache does not hold yet with a GET.
    let templates = Arc::new(crate::rollout_review::ApiTemplates {
        client: client.clone(),
    });
    let lookup = ApiLookup::start(client);

    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("listening on {}", settings.listen))?;
    tracing::info!(listen = %settings.listen, admin = %settings.admin_listen, node_daemon_enabled = settings.node_daemon_enabled, "serving");
    let admin = tokio::spawn(admin::serve(
        settings.admin_listen,
        admin::router(readiness, registry, ""),
        std::future::pending(),
    ));
    let client_ca = settings
        .client_ca_file
        .as_deref()
        .map(serving::read_client_ca)
        .transpose()
        .context("--client-ca-file")?;
    if let Some(path) = &settings.client_ca_file {
        tracing::info!(client_ca = %path.display(), "admission calls must present a client certificate signed by this CA");
    }
    let state = Arc::new(AppState {
        lookup,
        templates,
        node_daemon_enabled: settings.node_daemon_enabled,
        readiness_gate_label: settings.readiness_gate_label,
        metrics,
        client_certificate_required: client_ca.is_some(),
    });
    let tls = serving::tls_config(resolver, client_ca).context("the client CA")?;
    server::serve(
        listener,
        Some(Arc::new(tls)),
        routes::router(state),
        shutdown.requested(),
        Limits {
            // A stalled handshake is cut off well within the API server's own timeout; each
            // endpoint bounds its body and its answer more tightly (`routes`). Headers get the
            // keep-alive allowance (hyper counts it from the previous answer): a shorter one
            // closed the API server's idle connections under its feet, failing creates with
            // "broken pipe" in a flood.
            handshake: Duration::from_secs(5),
            headers: crr_runtime::server::KEEP_ALIVE_IDLE,
            request: routes::CONVERT_DEADLINE,
            drain: settings.drain,
            connections: WEBHOOK_CONNECTIONS,
            connections_per_peer: WEBHOOK_CONNECTIONS_PER_PEER,
        },
    )
    .await
    .context("serving HTTPS")?;
    admin.abort();
    Ok(())
}
