//! Writes the ContainerRecreateRequest CRD as YAML to stdout, or to the file given as the only
//! argument. `crds/crr.yaml` is produced this way and checked by a test.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let yaml = match crr_crds::crd_yaml() {
        Ok(yaml) => yaml,
        Err(error) => {
            eprintln!("crdgen: {error}");
            return ExitCode::FAILURE;
        }
    };
    match std::env::args().nth(1) {
        Some(path) => match std::fs::write(&path, yaml) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("crdgen: writing {path}: {error}");
                ExitCode::FAILURE
            }
        },
        None => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
    }
}
