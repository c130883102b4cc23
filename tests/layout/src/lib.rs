//! The layout rules of the repository, checked by `cargo test -p crr-layout` (part of
//! `make test`): what a new maintainer relies on when reading the code.
//!
//! - **No import circles between files.** Within each crate, a file that uses another
//!   (`crate::a::b`, `super::x`, `use crate::{a, b}`) must not be used by it back, directly or
//!   through others. Module declarations (`mod x;`) and inline `#[cfg(test)] mod tests` blocks
//!   do not count; test files (`tests.rs`, `tests/`) are left out.
//! - **No production file over [`MAX_PRODUCTION_LINES`] lines**, counted up to its inline test
//!   module, and no inline test module over [`MAX_INLINE_TEST_LINES`] (the shipped crates).
//! - **Wings meet only through their composer.** The operator's controllers live in wings
//!   (`request/`, `rollout/`, `triggers/`) over a shared ground floor: no file of a wing, its
//!   tests included, uses another wing's files, and no ground file's production code uses a wing
//!   (only `run` and `args`, which start them, do).
//! - **No comment cites what the repository does not have**: an issue number of our own tracker
//!   or a behaviour document outside the repository. Public upstream issues ("kruise issue 895")
//!   are fine; the behaviour is in `docs/behaviour.md` and `docs/decisions.md`.
//!
//! The functions here are plain text analysis, so their own tests need no repository.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a production `.rs` file may be.
pub const MAX_PRODUCTION_LINES: usize = 700;
/// The longest an inline `#[cfg(test)] mod tests` block may be; longer ones live in
/// `<module>/tests.rs`.
pub const MAX_INLINE_TEST_LINES: usize = 300;

/// A crate's source files: module path (`a::b`, empty for the crate root) to file.
pub type Modules = BTreeMap<String, PathBuf>;

/// The source files of the crate whose `src/` is `src`, by module path. `tests.rs` files are
/// left out: they are test code, whatever their place.
pub fn modules(src: &Path) -> std::io::Result<Modules> {
    let mut found = Modules::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                // A `bin/` folder holds crate roots of their own, not modules of this crate.
                if path.file_name().is_some_and(|name| name != "bin") {
                    pending.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|extension| extension != "rs")
                || path.file_name().is_some_and(|name| name == "tests.rs")
            {
                continue;
            }
            if let Some(module) = module_path(src, &path) {
                found.insert(module, path);
            }
        }
    }
    Ok(found)
}

/// The module path of `file` under `src`: `lib.rs`/`main.rs` → "", `a.rs` and `a/mod.rs` → "a",
/// `a/b.rs` → "a::b". `None` for files that are not modules (`build.rs`-like strays).
pub fn module_path(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    match stem {
        "lib" | "main" if parts.is_empty() => {}
        "mod" => {}
        _ => parts.push(stem.to_owned()),
    }
    Some(parts.join("::"))
}

/// The production part of a source text: everything before its inline test module.
pub fn production_part(text: &str) -> &str {
    for marker in ["#[cfg(test)]\nmod tests {", "#[cfg(test)]\nmod tests;"] {
        if let Some(at) = text.find(marker) {
            return &text[..at];
        }
    }
    text
}

/// The text without `//` comments and the contents of string literals (so neither adds an
/// import), line structure kept.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_string = false;
        let mut previous = ' ';
        let mut chars = line.chars().peekable();
        while let Some(character) = chars.next() {
            if in_string {
                if character == '"' && previous != '\\' {
                    in_string = false;
                    out.push('"');
                }
                previous = if previous == '\\' && character == '\\' {
                    ' '
                } else {
                    character
                };
                continue;
            }
            if character == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if character == '"' {
                in_string = true;
            }
            out.push(character);
            previous = character;
        }
        out.push('\n');
    }
    out
}

/// The module paths `text` (the file of module `module`) refers to: every `crate::…` and
/// `super::…` path, braces of `use` groups expanded. Paths are as written (`a::b::Item`);
/// [`file_edges`] maps them to files.
pub fn referenced_paths(module: &str, text: &str) -> BTreeSet<String> {
    let code = code_only(text);
    let mut paths = BTreeSet::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(start) {
            let at = from + found;
            from = at + start.len();
            // Only a path's first segment: `x::crate::` is something else.
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':')
            {
                continue;
            }
            let base = if start == "crate::" {
                Vec::new()
            } else {
                let mut base: Vec<&str> =
                    module.split("::").filter(|part| !part.is_empty()).collect();
                base.pop();
                base.into_iter().map(str::to_owned).collect()
            };
            for tail in expand(&code[from..]) {
                let mut full = base.clone();
                full.extend(
                    tail.split("::")
                        .filter(|part| !part.is_empty() && *part != "self")
                        .map(str::to_owned),
                );
                paths.insert(full.join("::"));
            }
        }
    }
    paths
}

/// The paths a `use` tail stands for: `a::b::C` → ["a::b::C"]; `a::{b, c::D}` → ["a::b",
/// "a::c::D"]; `{a, b}` → ["a", "b"].
fn expand(rest: &str) -> Vec<String> {
    let mut prefix = String::new();
    for (index, character) in rest.char_indices() {
        if character.is_alphanumeric() || character == '_' || character == ':' {
            prefix.push(character);
        } else if character == '{' {
            let inner = &rest[index + 1..];
            let mut depth = 1;
            let mut end = inner.len();
            for (position, inner_character) in inner.char_indices() {
                match inner_character {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = position;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let group = &inner[..end];
            let mut items = Vec::new();
            let mut depth = 0;
            let mut current = String::new();
            for inner_character in group.chars() {
                match inner_character {
                    '{' => {
                        depth += 1;
                        current.push(inner_character);
                    }
                    '}' => {
                        depth -= 1;
                        current.push(inner_character);
                    }
                    ',' if depth == 0 => items.push(std::mem::take(&mut current)),
                    _ => current.push(inner_character),
                }
            }
            items.push(current);
            return items
                .iter()
                .map(|item| {
                    item.split(" as ")
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .to_owned()
                })
                .filter(|item| !item.is_empty())
                .flat_map(|item| {
                    expand(&item)
                        .into_iter()
                        .map(|tail| format!("{prefix}{tail}"))
                        .collect::<Vec<_>>()
                })
                .collect();
        } else {
            break;
        }
    }
    vec![prefix.trim_end_matches(':').to_owned()]
}

/// The files each file of `modules` uses, by module path: a referenced path belongs to the
/// longest module that is a prefix of it. References to the file itself or to the crate root
/// (`crate::CONSTANT` in `lib.rs`, which declares modules but imports none of them) are not
/// edges between files.
pub fn file_edges(modules: &Modules) -> std::io::Result<BTreeMap<String, BTreeSet<String>>> {
    let mut edges = BTreeMap::new();
    for (module, file) in modules {
        let text = std::fs::read_to_string(file)?;
        let mut targets = BTreeSet::new();
        for path in referenced_paths(module, production_part(&text)) {
            let segments: Vec<&str> = path.split("::").collect();
            let owner = (1..=segments.len())
                .rev()
                .map(|length| segments[..length].join("::"))
                .find(|candidate| modules.contains_key(candidate));
            if let Some(owner) = owner
                && owner != *module
                && !owner.is_empty()
            {
                targets.insert(owner);
            }
        }
        edges.insert(module.clone(), targets);
    }
    Ok(edges)
}

/// The wing a module path belongs to: its first segment, when that is one of `wings`.
pub fn wing_of<'a>(path: &str, wings: &[&'a str]) -> Option<&'a str> {
    let first = path.split("::").next()?;
    wings.iter().copied().find(|wing| *wing == first)
}

/// The paths among `referenced` (from the file of `module`) that break the wing layout: a
/// wing's file reaching into another wing, or a file of the shared ground reaching up into any
/// wing. `composers` (the modules that start the wings) may use them all.
pub fn wing_breaches(
    module: &str,
    referenced: &BTreeSet<String>,
    wings: &[&str],
    composers: &[&str],
) -> Vec<String> {
    if composers.contains(&module) {
        return Vec::new();
    }
    let own = wing_of(module, wings);
    referenced
        .iter()
        .filter(|path| match (own, wing_of(path, wings)) {
            (_, None) => false,
            (Some(own), Some(target)) => own != target,
            (None, Some(_)) => true,
        })
        .cloned()
        .collect()
}

/// The groups of two or more files that use each other in a circle (strongly connected
/// components of the edges), each sorted.
pub fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative enough for a crate's few dozen files.
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        let edges = state.edges;
        for target in edges.get(node).into_iter().flatten() {
            let target = target.as_str();
            if !state.index.contains_key(target) {
                visit(state, target);
                let low = state.low[node].min(state.low[target]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(target) {
                let low = state.low[node].min(state.index[target]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut group = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                group.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                state.found.push(group);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found.sort();
    state.found
}

/// Whether a line cites something the repository lacks: one of our own issue numbers, or the
/// behaviour document that lives outside it. Upstream's public issues ("kruise issue 895",
/// "kruise issues 1058") are fine.
pub fn cites_the_missing(line: &str) -> bool {
    let lower = line.to_lowercase();
    // Split so that a plain text search of the repository for these citations finds none here.
    if lower.contains(concat!("crr-behaviour", ".md"))
        || lower.contains(concat!("spec sec", "tion"))
    {
        return true;
    }
    let mut from = 0;
    while let Some(found) = lower[from..].find("issue") {
        let at = from + found;
        from = at + "issue".len();
        let rest = lower[from..].strip_prefix('s').unwrap_or(&lower[from..]);
        let upstream = lower[..at].trim_end().ends_with("kruise");
        if !upstream && rest.starts_with(' ') && rest[1..].starts_with(|c: char| c.is_ascii_digit())
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests;
