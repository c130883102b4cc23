//! `crr-operator`: the cluster operator for ContainerRecreateRequests.

#![forbid(unsafe_code)]

use clap::Parser as _;
use crr_operator::args::Args;

/// Built with `--features mimalloc`: mimalloc in place of glibc's malloc (BENCHMARKS.md, "The
/// operator's allocator").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    crr_runtime::logging::init(args.admin.log_format);
    crr_operator::run::run(args.settings()?).await
}
