//! A document's commands, run by a suite as a user would run them: every ```` ```sh ```` block of
//! the document starts with `# step: <name>`, the suite runs the blocks by name as it reaches
//! them, and a block it never ran fails it ([`Doc::done`]). `docs/migrating-from-openkruise.md`
//! (tests/e2e/tests/migration.rs) and `docs/upgrading.md` (tests/e2e/tests/upgrade.rs) are
//! tested this way.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, ensure};

/// The repository's root (the commands of the documents run from a checkout).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs a shell script from the repository root with the test bed's kubectl and helm first on
/// PATH and its admin kubeconfig; returns (success, stdout, stderr).
pub async fn shell(script: &str, env: &[(&str, &str)]) -> anyhow::Result<(bool, String, String)> {
    let prelude = ". hack/versions.sh; . hack/cluster-env.sh; \
                   export PATH=\"$KUBE_BIN:$HELM_BIN:$PATH\" KUBECONFIG=\"$KUBECONFIG_ADMIN\"; ";
    let output = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &format!("{prelude}{script}")])
        .current_dir(repo_root())
        .envs(env.iter().copied())
        .output()
        .await
        .context("running bash")?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// The document's command blocks by step name, in the document's order.
pub fn steps(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut steps = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```sh" {
            continue;
        }
        let mut block = Vec::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            block.push(line);
        }
        let name = block
            .first()
            .and_then(|first| first.strip_prefix("# step: "))
            .ok_or_else(|| anyhow!("a sh block without `# step:`: {block:?}"))?;
        steps.push((name.trim().to_owned(), block[1..].join("\n")));
    }
    Ok(steps)
}

/// The document's steps, run by name as the test reaches them; every one must have run by the end.
pub struct Doc {
    /// Prefix of the lines printed for each step (the suite's name).
    suite: &'static str,
    steps: Vec<(String, String)>,
    ran: BTreeSet<String>,
    /// Environment of every step (the document's `$VARIABLES`).
    pub env: Vec<(String, String)>,
}

impl Doc {
    /// The steps of `text` (a document's Markdown), for suite `suite`.
    pub fn new(suite: &'static str, text: &str) -> anyhow::Result<Self> {
        Ok(Self {
            suite,
            steps: steps(text)?,
            ran: BTreeSet::new(),
            env: Vec::new(),
        })
    }

    /// Runs step `name`; returns its stdout. A failing command fails the test with its output.
    pub async fn run(&mut self, name: &str) -> anyhow::Result<String> {
        let script = self
            .steps
            .iter()
            .find(|(found, _)| found == name)
            .map(|(_, script)| script.clone())
            .ok_or_else(|| anyhow!("the document has no step {name}"))?;
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        let (ok, stdout, stderr) = shell(&script, &env).await?;
        println!(
            "{}:   step {name}: {}",
            self.suite,
            stdout.trim_end().replace('\n', " | ")
        );
        ensure!(ok, "step {name} failed: {stdout}{stderr}");
        self.ran.insert(name.to_owned());
        Ok(stdout)
    }

    /// Fails unless every step of the document ran.
    pub fn done(&self) -> anyhow::Result<()> {
        let never: Vec<&String> = self
            .steps
            .iter()
            .map(|(name, _)| name)
            .filter(|name| !self.ran.contains(*name))
            .collect();
        ensure!(
            never.is_empty(),
            "steps of the document the test never ran: {never:?}"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::steps;

    /// The documents the suites follow parse: every `sh` block is a named step, named once.
    #[test]
    fn the_documents_steps_parse() {
        for (document, text, expected) in [
            (
                "docs/migrating-from-openkruise.md",
                include_str!("../../../docs/migrating-from-openkruise.md"),
                "check-webhooks",
            ),
            (
                "docs/upgrading.md",
                include_str!("../../../docs/upgrading.md"),
                "upgrade-helm",
            ),
        ] {
            let steps = steps(text).unwrap_or_else(|error| panic!("{document}: {error:#}"));
            let mut names: Vec<&str> = steps.iter().map(|(name, _)| name.as_str()).collect();
            assert!(names.contains(&expected), "{document}: {names:?}");
            assert!(
                steps.iter().all(|(_, script)| !script.trim().is_empty()),
                "{document}: an empty step"
            );
            names.sort_unstable();
            let count = names.len();
            names.dedup();
            assert_eq!(names.len(), count, "{document}: a step named twice");
        }
    }
}
