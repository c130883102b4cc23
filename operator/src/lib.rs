//! The ContainerRecreateRequest cluster operator: three wings under one Lease.
//!
//! - [`request`]: the ContainerRecreateRequest controller (the pod out of endpoints through the
//!   `KruisePodReady` gate before anything is killed, status snapshots, deadlines, TTL).
//! - [`rollout`]: the ContainerRecreateRollout controller (a workload's pods a few at a time,
//!   within its PodDisruptionBudgets).
//! - [`triggers`]: rollouts started when a ConfigMap or Secret a workload uses changes, or on a
//!   schedule.
//!
//! Each wing has one `start`, which [`run`] calls; the wings meet only through API objects and
//! the caches `run` hands on. The ground they share: [`wing`] (what `run` hands each wing, and the field manager of every write),
//! [`reconcile_errors`], [`readiness`], [`deadline`], [`cache`] (the requests as kept),
//! [`pod_view`] (the pods as kept), [`lease`] and [`elector`] (the Lease), [`gate`] (starts
//! readiness gates). In every wing a pure decision is tested beside the
//! code and a thin executor carries it out against the API server; `main.rs` only parses flags
//! ([`args`]).

#![forbid(unsafe_code)]

#[cfg(test)]
mod api_mock;
pub mod args;
pub mod cache;
pub mod deadline;
pub mod elector;
pub mod gate;
pub mod lease;
pub mod pod_view;
pub mod readiness;
pub mod reconcile_errors;
pub mod request;
pub mod rollout;
pub mod run;
pub mod triggers;
pub mod wing;
