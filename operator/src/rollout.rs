//! The ContainerRecreateRollout controller: restarts the named containers of a workload's pods
//! in place, a few pods at a time, through one ContainerRecreateRequest per pod.
//!
//! [`plan`] decides, [`request`] builds and reads the requests, [`status`] derives the status
//! and Events (all pure); [`world`] reads the target's pods and budgets, and [`controller`]
//! carries the plan out.

pub mod controller;
pub mod metrics;
pub mod plan;
pub mod request;
pub mod status;
pub mod world;

pub use request::request_state;
