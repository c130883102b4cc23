//! The node daemon: recreates the containers a ContainerRecreateRequest names, through CRI.
//!
//! `recreate` decides (pure functions), `cri` talks to the runtime, `pre_stop` runs hooks,
//! `worker` reads the world, applies the decisions and writes the status.

pub mod cri;
pub mod metrics;
pub mod pre_stop;
pub mod recreate;
pub mod worker;

/// Code generated from proto/cri/runtime/v1/api.proto.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}
