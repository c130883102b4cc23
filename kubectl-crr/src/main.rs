//! `kubectl crr`: recreate containers in place from the command line.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser as _;
use kubectl_crr::cli::Cli;
use kubectl_crr::commands::{self, Exit};
use kubectl_crr::completion;

#[tokio::main]
async fn main() -> ExitCode {
    // Started as kubectl_complete-crr (a symlink): kubectl asks for completions of `kubectl crr`.
    let mut args = std::env::args();
    if args.next().is_some_and(|program| {
        std::path::Path::new(&program)
            .file_name()
            .is_some_and(|name| name == completion::KUBECTL_COMPLETION_NAME)
    }) {
        let words: Vec<String> = args.collect();
        let _ = rustls::crypto::ring::default_provider().install_default();
        print!("{}", kubectl_crr::completion_names::output(&words).await);
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    // Exactly one TLS crypto provider for the whole process (the API client uses rustls). An
    // error only says one is installed already, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exit = match commands::execute(cli).await {
        Ok(exit) => exit,
        // A bad flag value is a usage error, as clap's own: exit 2.
        Err(error @ kubectl_crr::Error::InvalidFlag { .. }) => {
            eprintln!("error: {error}");
            Exit::Usage
        }
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
