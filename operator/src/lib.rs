//! The ContainerRecreateRequest cluster operator.
//!
//! Pure decisions (`reconcile`, `readiness`, `snapshot`, `deadline`, `lease`, `metrics` counting)
//! are functions of values and an injected clock, tested beside the code. The thin shells
//! (`controller` executes a reconcile plan against the API server, `elector` holds the Lease,
//! `admin` serves health and metrics) wire them to Kubernetes; `main.rs` wires the shells.

pub mod admin;
pub mod controller;
pub mod deadline;
pub mod elector;
pub mod gate;
pub mod lease;
pub mod metrics;
pub mod readiness;
pub mod reconcile;
pub mod shutdown;
pub mod snapshot;
pub mod trigger;
