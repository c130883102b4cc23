//! `crr-webhook`: admission (CRRs and the pod readiness gate) and CRD conversion over HTTPS.

#![forbid(unsafe_code)]

use clap::Parser as _;
use crr_webhook::args::Args;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    crr_runtime::logging::init(args.admin.log_format);
    crr_webhook::run::run(args.settings()?).await
}
