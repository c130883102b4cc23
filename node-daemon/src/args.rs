//! The node daemon's command line: every flag with an environment fallback.

use std::path::PathBuf;

use clap::Parser;
use crr_runtime::args::{AdminArgs, AdminFlagNames};

/// Per-node agent that recreates ContainerRecreateRequest containers through CRI.
#[derive(Parser, Debug)]
#[command(version)]
pub struct Args {
    /// This node's name (the DaemonSet passes it from the downward API).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,

    /// Watch requests of these namespaces only (comma-separated or repeated; for tests: the
    /// DaemonSet watches all).
    #[arg(long, env = "CRR_NODE_DAEMON_WATCH_NAMESPACE", value_delimiter = ',')]
    pub watch_namespace: Vec<String>,

    /// The runtime's CRI socket; when unset, the usual containerd, CRI-O and cri-dockerd paths
    /// are tried.
    #[arg(long, env = "CRR_NODE_DAEMON_CRI_SOCKET")]
    pub cri_socket: Option<PathBuf>,

    /// Pods whose requests are worked on at once, shared fairly between namespaces.
    #[arg(long, env = "CRR_NODE_DAEMON_MAX_PARALLEL_PODS", default_value_t = 16)]
    pub max_parallel_pods: usize,

    /// The longest grace period a recreate gets, preStop hook and stop together, in seconds: the
    /// pod's terminationGracePeriodSeconds (a request's may only shorten it), never more than
    /// this, so that no tenant holds a slot for longer.
    #[arg(
        long,
        env = "CRR_NODE_DAEMON_MAX_GRACE_PERIOD_SECONDS",
        default_value_t = 300
    )]
    pub max_grace_period_seconds: u64,

    /// How long the runtime may stay unreachable through the mounted socket before the daemon
    /// exits, so that the kubelet starts it again with the runtime's current socket (a runtime
    /// that restarts binds a new one; the old mount keeps the dead one). Longer than a runtime
    /// restart takes.
    #[arg(
        long,
        env = "CRR_NODE_DAEMON_CRI_UNAVAILABLE_EXIT_SECONDS",
        default_value_t = 20
    )]
    pub cri_unavailable_exit_seconds: u64,

    /// `--admin-listen` and `--log-format`.
    #[command(flatten)]
    pub admin: AdminArgs<NodeDaemonFlagNames>,
}

/// The node daemon's spelling of the shared flags: its admin port is 10221.
#[derive(Debug)]
pub enum NodeDaemonFlagNames {}

impl AdminFlagNames for NodeDaemonFlagNames {
    const ADDRESS_ENV: &'static str = "CRR_NODE_DAEMON_ADMIN_LISTEN";
    const ADDRESS_DEFAULT: &'static str = "0.0.0.0:10221";
    const LOG_FORMAT_ENV: &'static str = "CRR_NODE_DAEMON_LOG_FORMAT";
}
