//! `crr-node-daemon`: recreates the containers of this node's ContainerRecreateRequests.

#![forbid(unsafe_code)]

use clap::Parser as _;
use crr_node_daemon::args::Args;

// One thread: the daemon waits on the runtime and the API server, it does not compute.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    crr_runtime::logging::init(args.admin.log_format);
    crr_node_daemon::run::run(args).await
}
