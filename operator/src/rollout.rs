//! The ContainerRecreateRollout controller: restarts the named containers of a workload's pods
//! in place, a few pods at a time, through one ContainerRecreateRequest per pod.
//!
//! [`plan`] decides (pure) and [`request`] builds and reads the requests (pure); the controller
//! around them reads the world and carries the plan out.

pub mod plan;
pub mod request;

pub use request::request_state;
