//! The webhook's HTTP routes: one per hook, each a thin handler that hands the body to the
//! review layer (`review.rs`), records the verdict in the metrics and returns the review as
//! JSON. The TLS listener that serves them is `crr_runtime::server`.
//!
//! Admission never fails at the HTTP level: whatever the body, the answer is a review the API
//! server can read (an invalid one for unreadable input), except for bodies over their
//! endpoint's size cap, which get 413 before they are read.
//!
//! Memory is bounded per endpoint: each has its own body limit, its own number of bodies read at
//! once and its own number of requests handled at once (a request over a count waits its turn).
//! CRR reviews are small; a pod review carries the whole pod; a ConversionReview carries a whole
//! LIST, converted one raw object at a time (`review::review_conversion`).
//!
//! Time is bounded too, so that a few slow clients cannot starve the API server's calls: a body
//! is read under its own short deadline *before* a handling slot is taken (a body trickling in
//! holds no slot, and is cut off with 408), and each endpoint answers within a deadline below
//! the API server's own (`timeoutSeconds` of the admission webhooks, 30 s for CRD conversion),
//! with 503 past it. The serving loop caps connections in all and per peer (`crate::run`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, post};
use futures::StreamExt as _;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use tokio::sync::Semaphore;

use crr_runtime::server::ClientCertificate;

use crate::metrics::{Metrics, ReasonLabels};
use crate::review::{self, ClusterLookup, ConversionVerdict, Hook, Verdict};

/// Largest CRR AdmissionReview read: a CRR (and its old version, on UPDATE) is a few KiB even
/// with dozens of containers.
pub const CRR_BODY_LIMIT: usize = 256 * 1024;
/// Largest pod AdmissionReview read: one pod, which etcd caps at 1.5 MiB.
pub const POD_BODY_LIMIT: usize = 2 * 1024 * 1024;
/// Largest ConversionReview read: a LIST of about 10,000 v1alpha1 CRRs with status.
pub const CONVERT_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// Admission reviews (CRR and pod) handled at once.
pub const ADMISSION_CONCURRENCY: usize = 8;
/// ConversionReviews handled at once: each holds its body and its answer, both up to
/// [`CONVERT_BODY_LIMIT`].
pub const CONVERT_CONCURRENCY: usize = 1;
/// Admission bodies (CRR and pod) read at once.
pub const ADMISSION_READS: usize = 64;
/// ConversionReview bodies read at once (each up to [`CONVERT_BODY_LIMIT`]).
pub const CONVERT_READS: usize = 4;
/// How long an admission body may take to arrive: the API server sends it in one go.
pub const ADMISSION_BODY_DEADLINE: Duration = Duration::from_secs(2);
/// How long a ConversionReview body may take to arrive (up to 16 MiB).
pub const CONVERT_BODY_DEADLINE: Duration = Duration::from_secs(10);
/// An admission call is answered within this, below the webhooks' `timeoutSeconds` (10 in the
/// chart; its values schema refuses less than 9).
pub const ADMISSION_DEADLINE: Duration = Duration::from_secs(8);
/// A conversion is answered within this, below the API server's fixed 30 s.
pub const CONVERT_DEADLINE: Duration = Duration::from_secs(25);

/// Paths registered in the webhook configurations (manifests/helm/crr/templates/webhook.yaml).
pub const MUTATE_CRR: &str = "/mutate-apps-kruise-io-v1alpha1-containerrecreaterequest";
pub const VALIDATE_CRR: &str = "/validate-apps-kruise-io-v1alpha1-containerrecreaterequest";
pub const MUTATE_POD: &str = "/mutate-pod-readiness-gate";
pub const VALIDATE_ROLLOUT: &str = "/validate-crr-dev-v1alpha1-containerrecreaterollout";

/// Everything a handler needs.
pub struct AppState<L> {
    pub lookup: L,
    /// Workloads' pod templates, for rollouts.
    pub templates: Arc<dyn crate::rollout_review::TemplateLookup>,
    pub node_daemon_enabled: bool,
    /// Pods labelled `<this>: "true"` get the `KruisePodReady` readiness gate.
    pub readiness_gate_label: String,
    pub metrics: Metrics,
    /// Admission calls must come with a verified TLS client certificate (the API server's;
    /// `--client-ca-file`, `serving`). Conversion calls never need one.
    pub client_certificate_required: bool,
}

/// What one endpoint group may take: a body size, bodies read at once and the time to read
/// one, requests handled at once, and the time to answer.
#[derive(Clone)]
struct EndpointLimits {
    body: usize,
    reads: Arc<Semaphore>,
    body_deadline: Duration,
    slots: Arc<Semaphore>,
    deadline: Duration,
    /// Refuse a connection without a verified client certificate (403), before the body.
    client_certificate_required: bool,
}

impl EndpointLimits {
    fn new(
        body: usize,
        reads: usize,
        body_deadline: Duration,
        slots: usize,
        deadline: Duration,
    ) -> Self {
        Self {
            body,
            reads: Arc::new(Semaphore::new(reads)),
            body_deadline,
            slots: Arc::new(Semaphore::new(slots)),
            deadline,
            client_certificate_required: false,
        }
    }

    fn requiring_client_certificates(self, required: bool) -> Self {
        Self {
            client_certificate_required: required,
            ..self
        }
    }

    fn with_body(&self, body: usize) -> Self {
        Self {
            body,
            ..self.clone()
        }
    }
}

/// The webhook routes.
pub fn router<L: ClusterLookup + 'static>(state: Arc<AppState<L>>) -> Router {
    let admission = EndpointLimits::new(
        CRR_BODY_LIMIT,
        ADMISSION_READS,
        ADMISSION_BODY_DEADLINE,
        ADMISSION_CONCURRENCY,
        ADMISSION_DEADLINE,
    )
    .requiring_client_certificates(state.client_certificate_required);
    let conversion = EndpointLimits::new(
        CONVERT_BODY_LIMIT,
        CONVERT_READS,
        CONVERT_BODY_DEADLINE,
        CONVERT_CONCURRENCY,
        CONVERT_DEADLINE,
    );
    let limited = |route: MethodRouter<Arc<AppState<L>>>, limits: EndpointLimits| {
        // `within_limits` enforces the limit; axum's own 2 MB default must not.
        route
            .layer(DefaultBodyLimit::disable())
            .layer(middleware::from_fn_with_state(limits, within_limits))
    };
    Router::new()
        .route(
            MUTATE_CRR,
            limited(post(mutate_crr::<L>), admission.clone()),
        )
        .route(
            VALIDATE_CRR,
            limited(post(validate_crr::<L>), admission.clone()),
        )
        .route(
            VALIDATE_ROLLOUT,
            limited(post(validate_rollout::<L>), admission.clone()),
        )
        .route(
            MUTATE_POD,
            limited(post(mutate_pod::<L>), admission.with_body(POD_BODY_LIMIT)),
        )
        .route(
            crr_crds::CONVERSION_PATH,
            limited(post(convert::<L>), conversion),
        )
        .with_state(state)
}

/// Answers within the endpoint's deadline (503 past it): reads the body under its own deadline
/// (408 past it) into one buffer of the announced size (413 when it is over the endpoint's
/// limit, refused before a byte is read when `Content-Length` says so), and only then holds one
/// of the endpoint's slots while the request is handled. The handler gets that buffer uncopied.
async fn within_limits(
    State(limits): State<EndpointLimits>,
    request: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    match tokio::time::timeout(limits.deadline, read_then_handle(&limits, request, next)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the webhook could not answer in time",
        )
            .into_response(),
    }
}

async fn read_then_handle(
    limits: &EndpointLimits,
    request: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    if limits.client_certificate_required
        && !request
            .extensions()
            .get::<ClientCertificate>()
            .is_some_and(|certificate| certificate.presented)
    {
        return (
            StatusCode::FORBIDDEN,
            "admission calls must present the API server's client certificate",
        )
            .into_response();
    }
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if announced.is_some_and(|length| length > limits.body) {
        return too_large();
    }
    let (parts, body) = request.into_parts();
    let buffer = {
        let Ok(_reading) = limits.reads.acquire().await else {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        };
        match tokio::time::timeout(
            limits.body_deadline,
            read_body(body, announced, limits.body),
        )
        .await
        {
            Ok(Ok(buffer)) => buffer,
            Ok(Err(response)) => return response,
            Err(_) => {
                return (
                    StatusCode::REQUEST_TIMEOUT,
                    "the request body took too long to arrive",
                )
                    .into_response();
            }
        }
    };
    let Ok(_slot) = limits.slots.acquire().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(buffer),
    ))
    .await
}

fn too_large() -> Response {
    (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response()
}

/// The whole body, at most `limit` bytes.
async fn read_body(
    body: axum::body::Body,
    announced: Option<usize>,
    limit: usize,
) -> Result<Vec<u8>, Response> {
    let mut buffer = Vec::with_capacity(announced.unwrap_or(0));
    let mut frames = body.into_data_stream();
    while let Some(frame) = frames.next().await {
        let Ok(chunk) = frame else {
            return Err((
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            )
                .into_response());
        };
        if buffer.len() + chunk.len() > limit {
            return Err(too_large());
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer)
}

/// A large answer as a stream of slices of its one buffer. hyper copies a body into its own
/// write buffer when the connection cannot take vectored writes (TLS cannot); given one 24 MiB
/// chunk it would copy all of it at once, given slices it copies about one at a time.
fn in_slices(answer: Vec<u8>) -> axum::body::Body {
    const SLICE: usize = 64 * 1024;
    let answer = Bytes::from(answer);
    let slices = (0..answer.len())
        .step_by(SLICE)
        .map(move |start| {
            Ok::<_, std::convert::Infallible>(
                answer.slice(start..(start + SLICE).min(answer.len())),
            )
        })
        .collect::<Vec<_>>();
    axum::body::Body::from_stream(futures::stream::iter(slices))
}

fn json_response(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The `verdict` label of an admission review (one of `metrics::VERDICTS`): a denial whose
/// answer carries a 5xx code is `error`, the webhook could not decide (see `Verdict::Denied`).
fn verdict_label(verdict: &Verdict, code: u16) -> &'static str {
    match verdict {
        Verdict::Allowed => "allowed",
        Verdict::Patched => "patched",
        Verdict::Denied(_) if code >= 500 => "error",
        Verdict::Denied(_) => "denied",
        Verdict::Invalid => "invalid",
    }
}

/// The `verdict` label of a conversion (one of `metrics::VERDICTS`).
fn conversion_verdict_label(verdict: ConversionVerdict) -> &'static str {
    match verdict {
        ConversionVerdict::Converted => "converted",
        ConversionVerdict::Failed => "error",
        ConversionVerdict::Invalid => "invalid",
    }
}

impl<L> AppState<L> {
    fn record(
        &self,
        endpoint: &'static str,
        review: &AdmissionReview<DynamicObject>,
        verdict: &Verdict,
        started: Instant,
    ) {
        let code = review
            .response
            .as_ref()
            .map_or(0, |response| response.result.code);
        let label = verdict_label(verdict, code);
        self.metrics.observe(endpoint, label, started.elapsed());
        if let Verdict::Denied(reason) = verdict {
            self.metrics
                .rejections
                .get_or_create(&ReasonLabels { reason })
                .inc();
            if label == "error" {
                tracing::warn!(
                    endpoint,
                    reason,
                    code,
                    "denied: the webhook could not decide"
                );
            } else {
                tracing::info!(endpoint, reason, "denied");
            }
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
    state.record(endpoint, &review, &verdict, started);
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

async fn validate_rollout<L: ClusterLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let (review, verdict) =
        crate::rollout_review::review_rollout(&body, state.templates.as_ref()).await;
    state.record("rollout", &review, &verdict, started);
    json_response(&review)
}

async fn mutate_pod<L: ClusterLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let (review, verdict) = review::review_pod(&body, &state.readiness_gate_label);
    state.record("pod", &review, &verdict, started);
    json_response(&review)
}

async fn convert<L: ClusterLookup>(State(state): State<Arc<AppState<L>>>, body: Bytes) -> Response {
    let started = Instant::now();
    let (answer, verdict) = review::convert(&body);
    drop(body);
    state.metrics.observe(
        "convert",
        conversion_verdict_label(verdict),
        started.elapsed(),
    );
    let length = answer.len();
    (
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::CONTENT_LENGTH, length.to_string()),
        ],
        in_slices(answer),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::VERDICTS;

    #[test]
    fn verdict_labels_are_the_documented_set() {
        let admission = [
            (Verdict::Allowed, 200),
            (Verdict::Patched, 200),
            (Verdict::Denied("PodNameEmpty"), 400),
            (Verdict::Denied("PodLookupFailed"), 500),
            (Verdict::Invalid, 0),
        ]
        .map(|(verdict, code)| verdict_label(&verdict, code));
        assert_eq!(
            admission,
            ["allowed", "patched", "denied", "error", "invalid"]
        );
        let conversion = [
            ConversionVerdict::Converted,
            ConversionVerdict::Failed,
            ConversionVerdict::Invalid,
        ]
        .map(conversion_verdict_label);
        assert_eq!(conversion, ["converted", "error", "invalid"]);
        for label in admission.iter().chain(&conversion) {
            assert!(VERDICTS.contains(label), "{label}");
        }
    }
}
