//! The layout rules (see the crate's docs) applied to this repository.

use std::path::{Path, PathBuf};

use crr_layout::{
    MAX_INLINE_TEST_LINES, MAX_PRODUCTION_LINES, circles, cites_the_missing, file_edges,
    module_path, modules, production_part, referenced_paths, wing_breaches, wing_of,
};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `src/` folders of the crates: the workspace's members (the fuzz oracles among them).
fn crate_sources() -> Vec<PathBuf> {
    [
        "crds",
        "runtime",
        "webhook",
        "operator",
        "node-daemon",
        "kubectl-crr",
        "tests/e2e",
        "tests/testbed",
        "tests/layout",
        "fuzz/oracles",
    ]
    .iter()
    .map(|member| root().join(member).join("src"))
    .collect()
}

/// Every file under `dir` whose name ends with one of `extensions`, build output and
/// dependencies left out.
fn files(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | ".git" | "docs" | "results" | "corpus" | "artifacts"
            ) {
                files(&path, extensions, out);
            }
        } else if extensions.iter().any(|extension| name.ends_with(extension)) {
            out.push(path);
        }
    }
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for src in crate_sources() {
        let modules = modules(&src).expect("reading the crate's sources");
        let edges = file_edges(&modules).expect("reading the crate's sources");
        for circle in circles(&edges) {
            found.push(format!("{}: {}", src.display(), circle.join(" -> ")));
        }
    }
    assert!(
        found.is_empty(),
        "files that import each other:\n{}",
        found.join("\n")
    );
}

/// The crates that ship: the size rules hold for them (the test crates' support code is free).
fn production_sources() -> Vec<PathBuf> {
    crate_sources()
        .into_iter()
        .filter(|src| {
            !src.starts_with(root().join("tests")) && !src.starts_with(root().join("fuzz"))
        })
        .collect()
}

#[test]
fn no_production_file_is_over_the_limit() {
    let mut found = Vec::new();
    for src in production_sources() {
        for file in modules(&src).expect("reading the crate's sources").values() {
            let text = std::fs::read_to_string(file).expect("reading a source file");
            let lines = production_part(&text).lines().count();
            if lines > MAX_PRODUCTION_LINES {
                found.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "production files over {MAX_PRODUCTION_LINES} lines:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_inline_test_module_is_over_the_limit() {
    let mut found = Vec::new();
    for src in production_sources() {
        for file in modules(&src).expect("reading the crate's sources").values() {
            let text = std::fs::read_to_string(file).expect("reading a source file");
            let lines = text.lines().count() - production_part(&text).lines().count();
            if lines > MAX_INLINE_TEST_LINES {
                found.push(format!("{} ({lines} lines of tests)", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "inline test modules over {MAX_INLINE_TEST_LINES} lines (move them to <module>/tests.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_code_or_script_cites_an_issue_number_or_a_document_outside_the_repository() {
    let mut sources = Vec::new();
    files(
        &root(),
        &[".rs", ".sh", "Makefile", ".toml", ".yaml"],
        &mut sources,
    );
    assert!(
        sources.len() > 50,
        "found only {} files under {}",
        sources.len(),
        root().display()
    );
    let mut found = Vec::new();
    for file in sources {
        if file.ends_with("tests/layout/src/tests.rs") || file.ends_with("tests/layout/src/lib.rs")
        {
            continue; // the rule itself, and the examples of what it catches
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if cites_the_missing(line) {
                found.push(format!(
                    "{}:{}: {}",
                    file.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "citations of what the repository lacks (use docs/behaviour.md, docs/decisions.md):\n{}",
        found.join("\n")
    );
}

/// The operator's wings, and the modules that start them.
const OPERATOR_WINGS: [&str; 3] = ["request", "rollout", "triggers"];
const OPERATOR_COMPOSERS: [&str; 2] = ["run", "args"];

#[test]
fn no_operator_wing_uses_another_and_the_ground_uses_none() {
    let src = root().join("operator/src");
    let mut sources = Vec::new();
    files(&src, &[".rs"], &mut sources);
    let mut found = Vec::new();
    let mut wings_seen = std::collections::BTreeSet::new();
    for file in sources {
        let relative = file.strip_prefix(&src).expect("under src");
        // `a/b/tests.rs` is the test module of `a::b`; `a/b.rs` is `a::b`.
        let module = module_path(&src, &file)
            .unwrap_or_else(|| panic!("{} is not a module of the operator", relative.display()));
        let text = std::fs::read_to_string(&file).expect("reading a source file");
        // A wing's files are checked whole, tests included; the ground's production part.
        let checked = match wing_of(&module, &OPERATOR_WINGS) {
            Some(wing) => {
                wings_seen.insert(wing);
                text.as_str()
            }
            None => production_part(&text),
        };
        for breach in wing_breaches(
            &module,
            &referenced_paths(&module, checked),
            &OPERATOR_WINGS,
            &OPERATOR_COMPOSERS,
        ) {
            found.push(format!("{}: uses {breach}", relative.display()));
        }
    }
    assert_eq!(
        wings_seen.into_iter().collect::<Vec<_>>(),
        OPERATOR_WINGS,
        "every wing has files"
    );
    assert!(
        found.is_empty(),
        "the operator's wings meet only in run.rs (docs/decisions.md, the operator's wings):\n{}",
        found.join("\n")
    );
}
