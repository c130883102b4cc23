//! Admin HTTP server: `/healthz` (the process runs), `/readyz` (caches synced and not shutting
//! down) and `/metrics` (Prometheus, OpenMetrics text).
//!
//! Readiness says nothing about leadership: a follower with warm caches is ready to take over.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// What `/readyz` reports on.
#[derive(Debug, Default)]
pub struct Health {
    /// The request cache has been listed.
    pub requests_synced: AtomicBool,
    /// The pod metadata watch has been listed.
    pub pods_synced: AtomicBool,
    /// Shutdown has started.
    pub shutting_down: AtomicBool,
}

impl Health {
    /// Ready = every watch delivered its first list and shutdown has not started.
    pub fn is_ready(&self) -> bool {
        self.requests_synced.load(Ordering::Relaxed)
            && self.pods_synced.load(Ordering::Relaxed)
            && !self.shutting_down.load(Ordering::Relaxed)
    }
}

struct AdminState {
    health: Arc<Health>,
    registry: Registry,
}

/// The admin routes.
pub fn router(health: Arc<Health>, registry: Registry) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Arc::new(AdminState { health, registry }))
}

async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    if state.health.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    match crate::metrics::encode(&state.registry) {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Serves the admin routes on `address` until `shutdown` resolves.
pub async fn serve(
    address: SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_synced_and_not_shutting_down() {
        let health = Health::default();
        assert!(!health.is_ready());
        health.requests_synced.store(true, Ordering::Relaxed);
        assert!(!health.is_ready());
        health.pods_synced.store(true, Ordering::Relaxed);
        assert!(health.is_ready());
        health.shutting_down.store(true, Ordering::Relaxed);
        assert!(!health.is_ready());
    }
}
