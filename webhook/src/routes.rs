//! The webhook's HTTP routes: one per hook, each a thin handler that hands the body to the
//! review layer (`review.rs`), records the verdict in the metrics and returns the review as
//! JSON. The TLS listener that serves them is `crr_runtime::server`.
//!
//! Admission never fails at the HTTP level: whatever the body, the answer is a review the API
//! server can read (an invalid one for unreadable input), except for bodies over the size cap,
//! which get 413 before they are read.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use crate::metrics::{Metrics, ReasonLabels};
use crate::review::{self, ClusterLookup, Hook, Verdict};

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

impl<L> AppState<L> {
    fn record(&self, endpoint: &'static str, verdict: &Verdict, started: Instant) {
        self.metrics
            .observe(endpoint, verdict_label(verdict), started.elapsed());
        if let Verdict::Denied(reason) = verdict {
            self.metrics
                .rejections
                .get_or_create(&ReasonLabels { reason })
                .inc();
            tracing::info!(endpoint, reason, "denied");
        }
    }
}

async fn crr_review<L: ClusterLookup>(
    state: &AppState<L>,
    hook: Hook,
    endpoint: &'static str,
    body: &[u8],
) -> Response {
    let started = Instant::now();
    let (review, verdict) =
        review::review_crr(body, &state.lookup, state.node_daemon_enabled, hook).await;
    state.record(endpoint, &verdict, started);
    json_response(&review)
}

async fn mutate_crr<L: ClusterLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Response {
    crr_review(&state, Hook::Mutate, "mutate", &body).await
}

async fn validate_crr<L: ClusterLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Response {
    crr_review(&state, Hook::Validate, "validate", &body).await
}

async fn mutate_pod<L: ClusterLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let (review, verdict) = review::review_pod(&body, &state.readiness_gate_label);
    state.record("pod", &verdict, started);
    json_response(&review)
}

async fn convert<L: ClusterLookup>(State(state): State<Arc<AppState<L>>>, body: Bytes) -> Response {
    let started = Instant::now();
    let review = review::review_conversion(&body);
    state
        .metrics
        .observe("convert", "converted", started.elapsed());
    json_response(&review)
}
