//! The crr admission webhook: defaulting and validation of ContainerRecreateRequests (both
//! versions, one set of rules), CRD conversion, served over rustls.

#![forbid(unsafe_code)]

pub mod admission;
pub mod args;
pub mod certs;
pub mod lookup;
pub mod metrics;
pub mod readiness_gate;
pub mod review;
pub mod rollout_review;
pub mod rotation;
pub mod routes;
pub mod run;
pub mod serving;
pub mod x509;

/// Field manager of the webhook's writes (caBundles, its certificate Secret).
pub const FIELD_MANAGER: &str = "crr-webhook";
