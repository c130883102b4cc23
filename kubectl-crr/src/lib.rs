//! `kubectl crr`: create ContainerRecreateRequests from the command line and follow them.
//!
//! The plugin writes only what a user would write (the spec); the admission webhook adds labels,
//! `statusContext` and defaults, the node daemon recreates, the operator keeps time. Pure modules
//! decide (argument parsing, building a request, reading progress, batch pacing, rendering);
//! [`commands`], [`follow`] and [`kubeconfig`] talk to the API server.

#![forbid(unsafe_code)]

/// The field manager of every write the plugin makes (requests, rollouts, restart annotations).
pub const FIELD_MANAGER: &str = "kubectl-crr";

pub mod batch;
pub mod cli;
pub mod commands;
pub mod completion;
pub mod completion_names;
pub mod describe;
pub mod error;
pub mod exit;
pub mod follow;
pub mod kubeconfig;
pub mod output;
pub mod printable;
pub mod progress;
pub mod render;
pub mod request;
pub mod restart;
pub mod rollout;
pub mod rollout_list;
pub mod rollout_plan;
pub mod rollout_pods;
pub mod rollout_retry;
pub mod selector;
pub mod table;
pub mod triggers;
pub mod workload;

pub use error::Error;
