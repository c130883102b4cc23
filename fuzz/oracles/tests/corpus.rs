//! Every committed seed in `fuzz/corpus/<target>/` fed to its target's entry function, the
//! `crr_fuzz::<module>::run` that `fuzz/fuzz_targets/<target>.rs` hands libFuzzer's bytes to. A
//! seed that panics (an oracle that no longer holds, or a crash in the code under test) fails
//! `cargo test` on the stable toolchain, without libFuzzer: the regression value a short fuzz run
//! from the seeds had. Finding new inputs is still `make fuzz`'s work.
//!
//! The targets are read from the folder listing, so that no seed folder is skipped: every folder
//! of `corpus/` must be a target of [`TARGETS`] and hold at least one seed, and every target must
//! have its seed folder and a `fuzz_targets/` file that calls the same entry.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// A fuzz target.
struct Target {
    /// Its name: `fuzz_targets/<name>.rs`, `corpus/<name>/`.
    name: &'static str,
    /// The module of `crr_fuzz` whose `run` the target calls.
    module: &'static str,
    /// That `run`.
    run: fn(&[u8]),
}

/// crr's fuzz targets, as `fuzz/Cargo.toml` lists them.
const TARGETS: &[Target] = &[
    Target {
        name: "admission_create",
        module: "admission",
        run: crr_fuzz::admission::run,
    },
    Target {
        name: "certificate_validity",
        module: "certificate",
        run: crr_fuzz::certificate::run,
    },
    Target {
        name: "conversion_review",
        module: "conversion",
        run: crr_fuzz::conversion::run,
    },
    Target {
        name: "pre_stop_response",
        module: "pre_stop_response",
        run: crr_fuzz::pre_stop_response::run,
    },
    Target {
        name: "readiness_holders",
        module: "readiness",
        run: crr_fuzz::readiness::run,
    },
];

/// The cargo-fuzz folder, `fuzz/`.
fn fuzz_folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The entries of `folder`, sorted by name.
fn entries(folder: &Path) -> Vec<PathBuf> {
    let listing = std::fs::read_dir(folder)
        .unwrap_or_else(|error| panic!("reading {}: {error}", folder.display()));
    let mut entries: Vec<PathBuf> = listing
        .map(|entry| {
            entry
                .unwrap_or_else(|error| panic!("reading {}: {error}", folder.display()))
                .path()
        })
        .collect();
    entries.sort();
    entries
}

/// The last component of `path`.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The text a panic carried.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(message) = payload.downcast_ref::<&str>() {
        message
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message
    } else {
        "(not text)"
    }
}

#[test]
fn every_committed_seed_runs_through_its_fuzz_target_without_panicking() {
    let corpus = fuzz_folder().join("corpus");
    let mut problems = Vec::new();
    let mut fed = Vec::new();
    for folder in entries(&corpus) {
        let folder_name = file_name(&folder);
        if !folder.is_dir() {
            problems.push(format!(
                "corpus/{folder_name}: not a folder; seeds live in corpus/<target>/"
            ));
            continue;
        }
        let Some(target) = TARGETS.iter().find(|target| target.name == folder_name) else {
            problems.push(format!(
                "corpus/{folder_name}/: no fuzz target of that name (TARGETS in {})",
                file!()
            ));
            continue;
        };
        let seeds = entries(&folder);
        if seeds.is_empty() {
            problems.push(format!(
                "{}: corpus/{folder_name}/ holds no seed",
                target.name
            ));
            continue;
        }
        for seed in &seeds {
            let seed_name = file_name(seed);
            if !seed.is_file() {
                problems.push(format!(
                    "{}: corpus/{folder_name}/{seed_name} is not a file",
                    target.name
                ));
                continue;
            }
            let data = std::fs::read(seed)
                .unwrap_or_else(|error| panic!("reading {}: {error}", seed.display()));
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&data))) {
                problems.push(format!(
                    "{}: corpus/{folder_name}/{seed_name} panicked in crr_fuzz::{}::run: {}",
                    target.name,
                    target.module,
                    panic_message(payload.as_ref())
                ));
            }
        }
        fed.push(format!("{}: {} seeds", target.name, seeds.len()));
    }
    for target in TARGETS {
        if !corpus.join(target.name).is_dir() {
            problems.push(format!(
                "{}: no seed folder corpus/{}/",
                target.name, target.name
            ));
        }
    }
    println!("fed {}", fed.join(", "));
    assert!(
        problems.is_empty(),
        "seeds of fuzz/corpus/ that fail (replay one with `cargo +nightly fuzz run <target> \
         corpus/<target>/<file>` in fuzz/):\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_fuzz_target_calls_the_entry_its_seeds_are_fed_to() {
    let mut problems = Vec::new();
    let mut found = Vec::new();
    for file in entries(&fuzz_folder().join("fuzz_targets")) {
        let Some(name) = file_name(&file).strip_suffix(".rs").map(str::to_owned) else {
            continue;
        };
        let Some(target) = TARGETS.iter().find(|target| target.name == name) else {
            problems.push(format!(
                "fuzz_targets/{name}.rs: not in TARGETS ({}), so its seeds are not replayed",
                file!()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|error| panic!("reading {}: {error}", file.display()));
        let call = format!("crr_fuzz::{}::run(", target.module);
        if !text.contains(&call) {
            problems.push(format!("fuzz_targets/{name}.rs: does not call {call}data)"));
        }
        found.push(name);
    }
    for target in TARGETS {
        if !found.iter().any(|name| name == target.name) {
            problems.push(format!(
                "{}: no fuzz_targets/{}.rs",
                target.name, target.name
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
