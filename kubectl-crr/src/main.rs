//! `kubectl crr`: recreate containers in place from the command line.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser as _;
use kubectl_crr::cli::Cli;
use kubectl_crr::commands::{self, Exit};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Exactly one TLS crypto provider for the whole process (the API client uses rustls).
    crr_runtime::tls::install_crypto_provider();
    let exit = match commands::execute(cli).await {
        Ok(exit) => exit,
        Err(error @ kubectl_crr::Error::Server(_)) => {
            eprintln!("{error}");
            Exit::Error
        }
        Err(error) => {
            eprintln!("error: {error}");
            Exit::Error
        }
    };
    ExitCode::from(exit as u8)
}
