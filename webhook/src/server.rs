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
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
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
            let patch = request
                .object
                .as_ref()
                .and_then(|pod| serde_json::to_value(pod).ok())
                .and_then(|pod| crate::readiness_gate::patch_for(&pod));
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

/// Serves `router` over TLS on `address` until `shutdown` is set and in-flight connections end.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: rustls::ServerConfig,
    router: Router,
    shutdown: Arc<tokio::sync::Notify>,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let connections = tokio_util_tracker();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = shutdown.notified() => break,
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let guard = connections.clone();
        tokio::spawn(async move {
            let _guard = guard;
            // A client that never finishes its handshake must not hold a task forever.
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(error) = builder.serve_connection(TokioIo::new(tls), service).await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    // Drain: wait (bounded) for the connections still open.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&connections) > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn tokio_util_tracker() -> Arc<()> {
    Arc::new(())
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
