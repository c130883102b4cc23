//! Writes a CRD as YAML to stdout, or to the file given as the last argument: the
//! ContainerRecreateRequest CRD, or with `--rollout` the ContainerRecreateRollout CRD.
//! `crds/crr.yaml` and `crds/rollout.yaml` are produced this way and checked by a test.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let rollout = args.first().is_some_and(|arg| arg == "--rollout");
    if rollout {
        args.remove(0);
    }
    let yaml = if rollout {
        crr_crds::rollout_crd_yaml()
    } else {
        crr_crds::crd_yaml()
    };
    let yaml = match yaml {
        Ok(yaml) => yaml,
        Err(error) => {
            eprintln!("crdgen: {error}");
            return ExitCode::FAILURE;
        }
    };
    match args.as_slice() {
        [path] => match std::fs::write(path, yaml) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("crdgen: writing {path}: {error}");
                ExitCode::FAILURE
            }
        },
        [] => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: crdgen [--rollout] [FILE]");
            ExitCode::FAILURE
        }
    }
}
