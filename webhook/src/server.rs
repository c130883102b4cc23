//! The HTTPS server the API server calls (axum over rustls, TLS 1.2 and 1.3 only) and the
//! plain-HTTP admin server (`/healthz`, `/readyz`, `/metrics`).
//!
//! Admission never fails at the HTTP level: whatever the body, the answer is a review the API
//! server can read (an invalid one for unreadable input), except for bodies over the size cap,
//! which get 413 before they are read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use prometheus_client::registry::Registry;
use tokio_rustls::TlsAcceptor;

use crate::certs::CertResolver;
use crate::metrics::{Metrics, ReasonLabels};
use crate::review::{self, ClusterLookup, Verdict};

/// Largest body read; CRRs are small, pods rarely pass 1 MiB (etcd's own limit is 1.5 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Paths registered in the webhook configurations (manifests/helm/crr/templates/webhook.yaml).
pub const MUTATE_CRR: &str = "/mutate-apps-kruise-io-v1alpha1-containerrecreaterequest";
pub const VALIDATE_CRR: &str = "/validate-apps-kruise-io-v1alpha1-containerrecreaterequest";
pub const MUTATE_POD: &str = "/mutate-pod-readiness-gate";

/// Everything a handler needs.
pub struct AppState<L> {
    pub lookup: L,
    pub node_daemon_enabled: bool,
    /// Pods labelled `<this>: "true"` get the `KruisePodReady` readiness gate.
    pub readiness_gate_label: String,
    pub metrics: Metrics,
}

/// The webhook routes.
pub fn router<L: ClusterLookup + 'static>(state: Arc<AppState<L>>) -> Router {
    Router::new()
        .route(MUTATE_CRR, post(mutate_crr::<L>))
        .route(VALIDATE_CRR, post(validate_crr::<L>))
        .route(MUTATE_POD, post(mutate_pod::<L>))
        .route(crr_crds::CONVERSION_PATH, post(convert::<L>))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

fn json_response(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn verdict_label(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Allowed => "allowed",
        Verdict::Patched => "patched",
        Verdict::Denied(_) => "denied",
        Verdict::Invalid => "invalid",
    }
}

async fn crr_review<L: ClusterLookup>(
    state: &AppState<L>,
    endpoint: &'static str,
    body: &[u8],
) -> (AdmissionReview<DynamicObject>, Verdict) {
    let start = Instant::now();
    let (review, verdict) =
        review::review_crr(body, &state.lookup, state.node_daemon_enabled).await;
    state
        .metrics
        .observe(endpoint, verdict_label(&verdict), start.elapsed());
    if let Verdict::Denied(reason) = &verdict {
        state
            .metrics
            .rejections
            .get_or_create(&ReasonLabels { reason })
            .inc();
        tracing::info!(endpoint, reason, "denied");
    }
    (review, verdict)
}

async fn mutate_crr<L: ClusterLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Response {
    json_response(&crr_review(&state, "mutate", &body).await.0)
}

/// The checks that hold on the final object: the update rules (immutability) and the feature
/// gate. Creation rules ran in the mutating call, which also filled in the fields a user may
/// not set; re-running them here would refuse our own injection. A validating webhook may
/// not change the object, so any patch is dropped.
async fn validate_crr<L: ClusterLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Response {
    let is_create = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|review| {
            review
                .pointer("/request/operation")
                .and_then(|op| op.as_str().map(str::to_owned))
        })
        .is_some_and(|operation| operation == "CREATE");
    if is_create && state.node_daemon_enabled {
        let start = Instant::now();
        let request: Option<AdmissionRequest<DynamicObject>> =
            serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
                .ok()
                .and_then(|review| review.try_into().ok());
        let review = match request {
            Some(request) => AdmissionResponse::from(&request).into_review(),
            None => AdmissionResponse::invalid("cannot read AdmissionReview").into_review(),
        };
        state
            .metrics
            .observe("validate", "allowed", start.elapsed());
        return json_response(&review);
    }
    let (review, _) = crr_review(&state, "validate", &body).await;
    let mut review = serde_json::to_value(&review).unwrap_or_default();
    if let Some(response) = review
        .get_mut("response")
        .and_then(serde_json::Value::as_object_mut)
    {
        response.remove("patch");
        response.remove("patchType");
    }
    json_response(&review)
}

async fn mutate_pod<L: ClusterLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Response {
    let start = Instant::now();
    let request: Result<AdmissionRequest<DynamicObject>, String> =
        serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
            .map_err(|error| error.to_string())
            .and_then(|review| {
                review
                    .try_into()
                    .map_err(|_| "the AdmissionReview has no request".to_owned())
            });
    let (review, verdict) = match request {
        Err(error) => (
            AdmissionResponse::invalid(format!("cannot read AdmissionReview: {error}"))
                .into_review(),
            "invalid",
        ),
        Ok(request) => {
            let response = AdmissionResponse::from(&request);
            let is_pod = request.kind.group.is_empty() && request.kind.kind == "Pod";
            let patch = request
                .object
                .as_ref()
                .filter(|_| is_pod && request.operation == Operation::Create)
                .and_then(|pod| serde_json::to_value(pod).ok())
                .and_then(|pod| {
                    crate::readiness_gate::patch_for(&pod, &state.readiness_gate_label)
                });
            match patch {
                None => (response.into_review(), "allowed"),
                Some(patch) => match response.clone().with_patch(patch) {
                    Ok(patched) => (patched.into_review(), "patched"),
                    // Never block a pod over the gate: admit it unchanged.
                    Err(_) => (response.into_review(), "allowed"),
                },
            }
        }
    };
    state.metrics.observe("pod", verdict, start.elapsed());
    json_response(&review)
}

async fn convert<L: ClusterLookup>(State(state): State<Arc<AppState<L>>>, body: Bytes) -> Response {
    let start = Instant::now();
    let review = review::review_conversion(&body);
    state
        .metrics
        .observe("convert", "converted", start.elapsed());
    json_response(&review)
}

/// rustls settings: TLS 1.2+ (rustls offers nothing older), HTTP/1.1, the resolver's key pair.
pub fn tls_config(resolver: Arc<CertResolver>) -> rustls::ServerConfig {
    let mut config = rustls::ServerConfig::builder_with_protocol_versions(&[
        &rustls::version::TLS13,
        &rustls::version::TLS12,
    ])
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// Time limits of the TLS server. A client that stalls (handshake, headers or body) loses its
/// connection; it never holds the server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// TLS handshake.
    pub handshake: Duration,
    /// Request headers, from the first byte.
    pub headers: Duration,
    /// One request, body read and answer included.
    pub request: Duration,
    /// Draining open connections at shutdown.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake: Duration::from_secs(10),
            headers: Duration::from_secs(10),
            // The API server gives a webhook at most 30 s.
            request: Duration::from_secs(30),
            drain: Duration::from_secs(20),
        }
    }
}

/// Wraps every request of `router` in `limit`: a body that never arrives ends with 408.
pub fn with_request_timeout(router: Router, limit: Duration) -> Router {
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| async move {
            match tokio::time::timeout(limit, next.run(request)).await {
                Ok(response) => response,
                Err(_) => (StatusCode::REQUEST_TIMEOUT, "request took too long").into_response(),
            }
        },
    ))
}

/// Serves `router` over TLS until `shutdown` is notified, then drains: stops accepting, lets
/// in-flight requests finish (keep-alive connections are closed after their current request),
/// and returns once they are done or `limits.drain` has passed.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: rustls::ServerConfig,
    router: Router,
    shutdown: Arc<tokio::sync::Notify>,
    limits: Limits,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let router = with_request_timeout(router, limits.request);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: wait a moment rather than spin or die.
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.notified() => break,
        };
        // An answer leaves as several TLS records; with Nagle's algorithm the later ones wait
        // for the client's delayed ACK (tens of milliseconds on loopback).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "setting TCP_NODELAY");
        }
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(limits.handshake, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.headers);
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(after = ?limits.drain, "connections still open after the drain period");
    }
    Ok(())
}

/// What `/readyz` reports on.
#[derive(Debug, Default)]
pub struct Health {
    pub caches_synced: AtomicBool,
    pub cert_loaded: AtomicBool,
    pub shutting_down: AtomicBool,
}

impl Health {
    pub fn is_ready(&self) -> bool {
        self.caches_synced.load(Ordering::Relaxed)
            && self.cert_loaded.load(Ordering::Relaxed)
            && !self.shutting_down.load(Ordering::Relaxed)
    }
}

struct AdminState {
    health: Arc<Health>,
    registry: Registry,
}

pub fn admin_router(health: Arc<Health>, registry: Registry) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(state): State<Arc<AdminState>>| async move {
                if state.health.is_ready() {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(state): State<Arc<AdminState>>| async move {
                match crate::metrics::encode(&state.registry) {
                    Ok(body) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
                        .into_response(),
                    Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                }
            }),
        )
        .with_state(Arc::new(AdminState { health, registry }))
}

pub async fn serve_admin(address: SocketAddr, router: Router) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    axum::serve(listener, router).await
}
