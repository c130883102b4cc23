//! The ContainerRecreateRequest cluster operator.
//!
//! Pure decisions (`reconcile`, `readiness`, `snapshot`, `deadline`, `lease`, `metrics` counting)
//! are functions of values and an injected clock, tested beside the code. The thin shells
//! (`controller` wires the watches and the reconcile, `executor` carries out a plan against the
//! API server, `elector` holds the Lease,
//! `gate` starts readiness gates) wire them to Kubernetes; `run` wires the shells with the
//! shared runtime (`crr-runtime`: admin server, signals, drain, Events), and `main.rs` only
//! parses flags (`args`).

#![forbid(unsafe_code)]

#[cfg(test)]
mod api_mock;
pub mod args;
pub mod cache;
pub mod deadline;
pub mod elector;
pub mod gate;
pub mod lease;
pub mod readiness;
pub mod reconcile_errors;
pub mod request;
pub mod rollout;
pub mod run;
pub mod triggers;
pub mod wing;

/// Field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "crr-operator";
