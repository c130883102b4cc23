//! The node daemon: recreates the containers a ContainerRecreateRequest names, through CRI.
//!
//! Decisions, as functions of values: `schedule` (which request of a pod goes next), `recreate`
//! (each container's state, the next step, grace arithmetic), `kill_marker` (the status text
//! with which earlier daemons announced a kill, read for requests in flight across an upgrade), `live_pod` (what a recreate takes from the live pod), `timeline`
//! (which phase durations of a request the metrics observe). Time: crr-runtime's `timers` (one
//! delayed wake-up per key) under `queue` (the work queue of pods), and `grace_clock` (when an
//! unready grace began, on this daemon's own clock). I/O: `cri` talks to the runtime,
//! `pre_stop` runs hooks (`http_hook`: httpGet through hyper), `api_server` watches and writes
//! requests through the slim views `view` declares. `round` carries out one request's next step; `worker` wires the watch, the queue
//! and rounds together; `run` wires the process with the shared runtime (`crr-runtime`), and
//! `main.rs` only parses flags (`args`).

#![forbid(unsafe_code)]

pub mod api_server;
pub mod args;
pub mod cri;
#[cfg(test)]
mod fake_runtime;
pub mod grace_clock;
pub mod hook_error;
pub mod http_hook;
pub mod kill_marker;
pub mod live_pod;
pub mod metrics;
pub mod pre_stop;
pub mod queue;
pub mod recreate;
pub mod recreates;
pub mod round;
pub mod run;
pub mod runtime_events;
pub mod schedule;
pub mod socket_watch;
pub mod timeline;
pub mod view;
pub mod watch_lag;
pub mod worker;

/// Code generated from proto/cri/runtime/v1/api.proto.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}
