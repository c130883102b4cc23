//! The ContainerRecreateRequest cluster operator.
//!
//! Pure decisions (`reconcile`, `readiness`, `snapshot`, `deadline`, `lease`, `metrics` counting)
//! are functions of values and an injected clock, tested beside the code. The thin shells
//! (`controller` executes a reconcile plan against the API server, `elector` holds the Lease,
//! `gate` starts readiness gates) wire them to Kubernetes; `run` wires the shells with the
//! shared runtime (`crr-runtime`: admin server, signals, drain, Events), and `main.rs` only
//! parses flags (`args`).

#![forbid(unsafe_code)]

pub mod args;
pub mod cache;
pub mod controller;
pub mod deadline;
pub mod elector;
pub mod gate;
pub mod lease;
pub mod metrics;
pub mod pod_memo;
pub mod readiness;
pub mod reconcile;
pub mod run;
pub mod snapshot;
pub mod trigger;
