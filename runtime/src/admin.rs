//! The admin server every binary runs on its own plain-HTTP port: `/healthz` (the process
//! runs), `/readyz` (every cache synced and no shutdown under way) and `/metrics`.
//!
//! Readiness is a set of named gates, each opened once by the part it belongs to (a watch that
//! delivered its first list, a loaded certificate), plus the shutdown flag. `/readyz` names what
//! it still waits for. It says nothing about leadership: a follower with warm caches is ready to
//! take over.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::server::{self, Limits};
use crate::shutdown::Shutdown;

/// What `/readyz` reports on.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    gates: Arc<Mutex<Vec<ReadyGate>>>,
    shutting_down: Arc<AtomicBool>,
}

/// One thing readiness waits for; opened with [`ReadyGate::open`], closed again with
/// [`ReadyGate::close`] when what it stands for goes away (the node daemon's runtime).
#[derive(Clone, Debug)]
pub struct ReadyGate {
    what: &'static str,
    open: Arc<AtomicBool>,
}

impl ReadyGate {
    /// This part is ready (logged the first time).
    pub fn open(&self) {
        if !self.open.swap(true, Ordering::Relaxed) {
            tracing::info!(what = self.what, "ready");
        }
    }

    /// This part is no longer ready (logged when it was).
    pub fn close(&self) {
        if self.open.swap(false, Ordering::Relaxed) {
            tracing::warn!(what = self.what, "not ready");
        }
    }

    /// Whether the gate is open.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }
}

impl Readiness {
    /// A new closed gate that readiness waits for, named for `/readyz` and the logs.
    pub fn gate(&self, what: &'static str) -> ReadyGate {
        let gate = ReadyGate {
            what,
            open: Arc::default(),
        };
        self.gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(gate.clone());
        gate
    }

    /// Shutdown has started: unready from now on.
    pub fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Turns unready as soon as `shutdown` is requested.
    pub fn follow(&self, shutdown: &Shutdown) {
        let (readiness, requested) = (self.clone(), shutdown.requested());
        tokio::spawn(async move {
            requested.await;
            readiness.set_shutting_down();
        });
    }

    /// `Ok` when every gate is open and no shutdown is under way; otherwise what is missing.
    pub fn check(&self) -> Result<(), String> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err("shutting down".to_owned());
        }
        let gates = self
            .gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let waiting: Vec<&str> = gates
            .iter()
            .filter(|gate| !gate.is_open())
            .map(|gate| gate.what)
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!("waiting for: {}", waiting.join(", ")))
        }
    }

    /// Whether [`Readiness::check`] passes.
    pub fn is_ready(&self) -> bool {
        self.check().is_ok()
    }
}

struct AdminState {
    readiness: Readiness,
    registry: Registry,
    detail: String,
}

/// The admin routes. `detail` is appended to `/readyz`'s answer when ready (e.g. the runtime a
/// node daemon talks to).
pub fn router(readiness: Readiness, registry: Registry, detail: impl Into<String>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Arc::new(AdminState {
            readiness,
            registry,
            detail: detail.into(),
        }))
}

async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    match state.readiness.check() {
        Ok(()) if state.detail.is_empty() => (StatusCode::OK, "ready".to_owned()),
        Ok(()) => (StatusCode::OK, format!("ready: {}", state.detail)),
        Err(missing) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {missing}"),
        ),
    }
}

async fn metrics(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    match crate::metrics::encode(&state.registry) {
        Ok(body) => ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Time limits of the admin server: scrapes and probes are small and quick.
pub const LIMITS: Limits = Limits {
    handshake: Duration::from_secs(5),
    headers: Duration::from_secs(5),
    request: Duration::from_secs(10),
    drain: Duration::from_secs(1),
    // Prometheus, the kubelet's probes and an operator's curl.
    connections: 64,
    connections_per_peer: 16,
};

/// Binds `address` and serves `router` until `shutdown` resolves.
pub async fn serve(
    address: SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(%address, "admin server listening");
    server::serve(listener, None, router, shutdown, LIMITS).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_gate_is_open_and_not_shutting_down() {
        let readiness = Readiness::default();
        assert!(readiness.is_ready(), "no gates: ready");
        let requests = readiness.gate("request cache");
        let pods = readiness.gate("pod cache");
        assert_eq!(
            readiness.check(),
            Err("waiting for: request cache, pod cache".to_owned())
        );
        requests.open();
        assert_eq!(readiness.check(), Err("waiting for: pod cache".to_owned()));
        pods.open();
        pods.open();
        assert!(readiness.is_ready());
        readiness.set_shutting_down();
        assert_eq!(readiness.check(), Err("shutting down".to_owned()));
    }

    #[tokio::test]
    async fn readiness_follows_the_shutdown() {
        let readiness = Readiness::default();
        let (trigger, shutdown) = Shutdown::manual();
        readiness.follow(&shutdown);
        assert!(readiness.is_ready());
        trigger.request();
        for _ in 0..100 {
            if !readiness.is_ready() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("still ready after the shutdown request");
    }
}
