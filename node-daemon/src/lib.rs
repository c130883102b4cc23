//! The node daemon: recreates the containers a ContainerRecreateRequest names, through CRI.
//!
//! `recreate` decides (pure functions), `cri` talks to the runtime, `pre_stop` runs hooks,
//! `round` carries out one request's next step and writes its status, `worker` watches this
//! node's requests and schedules rounds per pod.

pub mod cri;
#[cfg(test)]
mod fake_runtime;
pub mod metrics;
pub mod pre_stop;
pub mod recreate;
pub mod round;
pub mod worker;

/// Code generated from proto/cri/runtime/v1/api.proto.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}
