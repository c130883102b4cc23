//! `crr-runtime`: the edges that crr's three binaries (operator, webhook, node daemon) share, in
//! one place: the admin server and readiness, the admin and log flags, retry backoff, the HTTP(S) serving loop with its time limits,
//! signals and the bounded drain, logging, metrics encoding, Event publishing, the wait for a
//! reflector store, the TLS crypto provider, giving freed memory back, the API client, and reading a workload's selector and pod template with its field manager.
//!
//! This crate does I/O and decides nothing about ContainerRecreateRequests: the decisions live
//! in `crr-crds` and in each binary's pure modules. A binary's `main.rs` parses its flags and
//! wires these parts around its own logic.

// One call needs `unsafe`: glibc's `malloc_trim` in `memory`, allowed there alone.
#![deny(unsafe_code)]

pub mod admin;
pub mod args;
pub mod backoff;
pub mod client;
pub mod events;
pub mod list_pages;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod timers;
pub mod tls;
pub mod workload;
