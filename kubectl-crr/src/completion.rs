//! `kubectl crr completion SHELL`: the shell completion script, generated from the command line
//! definition ([`crate::cli::Cli`]) by clap_complete, so it never lags behind the flags.
//!
//! The script completes the binary's own name, `kubectl-crr`. Completing `kubectl crr ...` goes
//! through kubectl's plugin completion instead: kubectl (>= 1.26) runs `kubectl_complete-crr`
//! from PATH with the words typed after `kubectl crr`, the last one being completed, and reads
//! one candidate per line and then `:<cobra directive>`. The same binary answers that when it is
//! started under that name (a symlink; README): [`plugin_candidates`].

use clap::CommandFactory as _;
use clap::builder::ValueHint;
use clap_complete::Shell;

use crate::cli::Cli;

/// The name the scripts complete: the executable on PATH.
pub const BIN_NAME: &str = "kubectl-crr";

/// The completion script for `shell`.
pub fn script(shell: Shell) -> String {
    // The executable's name throughout: the derived `kubectl crr` (how help spells it) would
    // give the subcommands' functions names the script's dispatcher does not use.
    let mut command = Cli::command().bin_name(BIN_NAME);
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, BIN_NAME, &mut script);
    let script = String::from_utf8(script).expect("clap_complete writes UTF-8");
    match shell {
        // clap_complete 4.6 names a subcommand's branch after the binary with its `-` turned
        // into the subcommand separator (`kubectl__subcmd__crr__subcmd__get`) while the
        // dispatcher sets `kubectl__crr__subcmd__get`: no subcommand's flags would complete.
        Shell::Bash => script.replace("kubectl__subcmd__crr__subcmd__", "kubectl__crr__subcmd__"),
        _ => script,
    }
}

/// The name kubectl looks up on PATH to complete `kubectl crr ...`.
pub const KUBECTL_COMPLETION_NAME: &str = "kubectl_complete-crr";

/// Cobra's ShellCompDirectiveDefault (the shell may also complete file names).
const DIRECTIVE_DEFAULT: u8 = 0;
/// Cobra's ShellCompDirectiveNoFileComp.
const DIRECTIVE_NO_FILES: u8 = 4;

/// kubectl's plugin completion: the candidates for the last of `words` (the words after
/// `kubectl crr`), from the command line definition, and cobra's directive. Subcommands, flags
/// and the values a flag or argument can take; nothing is asked of the cluster.
pub fn plugin_candidates(words: &[String]) -> (Vec<String>, u8) {
    let mut command = Cli::command().bin_name(BIN_NAME);
    command.build();
    let (partial, typed) = match words.split_last() {
        Some((partial, typed)) => (partial.as_str(), typed),
        None => ("", &[][..]),
    };
    let mut current = &command;
    let mut pending: Option<&clap::Arg> = None;
    for word in typed {
        if pending.take().is_some() {
            continue;
        }
        let flag = if let Some(long) = word.strip_prefix("--") {
            let (name, inline) = long
                .split_once('=')
                .map_or((long, false), |(n, _)| (n, true));
            current
                .get_arguments()
                .find(|arg| arg.get_long() == Some(name))
                .filter(|_| !inline)
        } else if let Some(short) = word.strip_prefix('-').filter(|short| short.len() == 1) {
            let short = short.chars().next();
            current.get_arguments().find(|arg| arg.get_short() == short)
        } else {
            if let Some(subcommand) = current.find_subcommand(word) {
                current = subcommand;
            }
            continue;
        };
        pending = flag.filter(|arg| arg.get_action().takes_values());
    }
    let matching = |candidates: Vec<String>| -> Vec<String> {
        candidates
            .into_iter()
            .filter(|candidate| candidate.starts_with(partial))
            .collect()
    };
    let values_of = |arg: &clap::Arg| -> Vec<String> {
        arg.get_possible_values()
            .iter()
            .filter(|value| !value.is_hide_set())
            .map(|value| value.get_name().to_owned())
            .collect()
    };
    if let Some(arg) = pending {
        let values = values_of(arg);
        // A file name (--kubeconfig): let the shell complete paths.
        let directive = match arg.get_value_hint() {
            ValueHint::FilePath | ValueHint::AnyPath | ValueHint::DirPath => DIRECTIVE_DEFAULT,
            _ => DIRECTIVE_NO_FILES,
        };
        return (matching(values), directive);
    }
    if partial.starts_with('-') {
        let flags = current
            .get_arguments()
            .filter(|arg| !arg.is_hide_set() && !arg.is_positional())
            .flat_map(|arg| {
                let long = arg.get_long().map(|long| format!("--{long}"));
                let short = arg.get_short().map(|short| format!("-{short}"));
                long.into_iter().chain(short)
            })
            .collect();
        return (matching(flags), DIRECTIVE_NO_FILES);
    }
    let mut candidates: Vec<String> = current
        .get_subcommands()
        .filter(|subcommand| !subcommand.is_hide_set() && subcommand.get_name() != "help")
        .map(|subcommand| subcommand.get_name().to_owned())
        .collect();
    candidates.extend(current.get_positionals().flat_map(values_of));
    (matching(candidates), DIRECTIVE_NO_FILES)
}

/// The objects whose names complete a positional argument, read from the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    Pods,
    Requests,
    Rollouts,
    /// `deploy/NAME`, `sts/NAME`, `ds/NAME` (and `rs/NAME` unless a restart).
    Workloads {
        replica_sets: bool,
    },
    /// `rollout status`: a rollout's name, or a workload's KIND/NAME.
    RolloutsOrWorkloads,
}

/// Which names complete the last of `words` (the words after `kubectl crr`): the positional
/// argument of the subcommand typed, while it is still missing (a request's `get` takes several).
/// `None` where no object's name goes (a flag, a subcommand, a value given already).
pub fn names_wanted(words: &[String]) -> Option<Names> {
    let (partial, typed) = words.split_last()?;
    if partial.starts_with('-') {
        return None;
    }
    let mut command = Cli::command().bin_name(BIN_NAME);
    command.build();
    let mut path: Vec<String> = Vec::new();
    let mut current = &command;
    let mut pending = false;
    let mut positionals_typed = 0;
    for word in typed {
        if std::mem::take(&mut pending) {
            continue;
        }
        if let Some(long) = word.strip_prefix("--") {
            pending = !long.contains('=')
                && current
                    .get_arguments()
                    .find(|arg| arg.get_long() == Some(long))
                    .is_some_and(|arg| arg.get_action().takes_values());
        } else if let Some(short) = word.strip_prefix('-').filter(|short| short.len() == 1) {
            let short = short.chars().next();
            pending = current
                .get_arguments()
                .find(|arg| arg.get_short() == short)
                .is_some_and(|arg| arg.get_action().takes_values());
        } else if let Some(subcommand) = current.find_subcommand(word) {
            current = subcommand;
            path.push(word.clone());
            positionals_typed = 0;
        } else {
            positionals_typed += 1;
        }
    }
    if pending {
        return None;
    }
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    match (path.as_slice(), positionals_typed) {
        (["get"], _) | (["describe"], 0) => Some(Names::Requests),
        (["recreate"], 0) => Some(Names::Pods),
        (["rollout"], 0) => Some(Names::Workloads { replica_sets: true }),
        (["rollout", "status"], 0) => Some(Names::RolloutsOrWorkloads),
        (["rollout", "pause" | "resume" | "abort" | "retry"], 0) => Some(Names::Rollouts),
        (["rollout", "list" | "history"], 0) => Some(Names::Workloads { replica_sets: true }),
        (["rollout", "restart"], 0) => Some(Names::Workloads {
            replica_sets: false,
        }),
        _ => None,
    }
}

/// The workload kinds, as `deploy/` and its kin, that `partial` may still become.
pub fn workload_prefixes(replica_sets: bool) -> Vec<&'static str> {
    let mut kinds = vec!["deploy/", "sts/", "ds/"];
    if replica_sets {
        kinds.push("rs/");
    }
    kinds
}

/// What `kubectl_complete-crr` prints: one candidate per line, then `:<directive>`.
pub fn plugin_completion_output(words: &[String]) -> String {
    let (candidates, directive) = plugin_candidates(words);
    let mut output = String::new();
    for candidate in candidates {
        output.push_str(&candidate);
        output.push('\n');
    }
    output.push_str(&format!(":{directive}\n"));
    output
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::Command;

    #[test]
    fn every_shell_gets_a_script_naming_the_subcommands_and_flags() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = script(shell);
            assert!(script.contains(BIN_NAME), "{shell}: binary name");
            for word in [
                "recreate",
                "get",
                "describe",
                "completion",
                "max-unavailable",
                "unready-grace",
            ] {
                assert!(script.contains(word), "{shell}: {word} missing");
            }
        }
    }

    #[test]
    fn bash_dispatches_to_the_subcommands_functions() {
        let script = script(Shell::Bash);
        assert!(script.contains("complete -F _kubectl__crr"), "registered");
        // Every subcommand the dispatcher names has its own branch.
        for subcommand in ["recreate", "get", "describe", "completion"] {
            let branch = format!("kubectl__crr__subcmd__{subcommand})");
            assert!(script.contains(&branch), "no branch {branch}");
        }
    }

    /// The bash script, sourced by bash, completes a subcommand's flags and the shells.
    #[test]
    fn bash_completes_a_subcommands_flags() {
        let script = script(Shell::Bash);
        assert!(
            !script.contains("kubectl__subcmd__crr"),
            "unpatched branch names"
        );
        let complete = |words: &str| {
            let probe = format!(
                "{script}\nCOMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n\
                 _kubectl__crr kubectl-crr \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
                 echo \"${{COMPREPLY[*]}}\""
            );
            let output = std::process::Command::new("bash")
                .args(["-c", &probe])
                .output()
                .expect("bash runs");
            String::from_utf8(output.stdout).expect("UTF-8")
        };
        assert_eq!(complete("kubectl-crr rec").trim(), "recreate");
        assert_eq!(
            complete("kubectl-crr recreate --max").trim(),
            "--max-unavailable"
        );
        assert!(complete("kubectl-crr completion ''").contains("fish"));
    }

    fn candidates(words: &[&str]) -> (Vec<String>, u8) {
        let words: Vec<String> = words.iter().map(|word| (*word).to_owned()).collect();
        plugin_candidates(&words)
    }

    #[test]
    fn kubectl_plugin_completion_offers_subcommands_flags_and_values() {
        assert_eq!(
            candidates(&[""]).0,
            [
                "recreate",
                "get",
                "describe",
                "rollout",
                "triggers",
                "completion"
            ]
        );
        assert_eq!(candidates(&["rec"]), (vec!["recreate".to_owned()], 4));
        // The rollout verbs, and its flags.
        let (verbs, _) = candidates(&["rollout", ""]);
        for verb in ["status", "pause", "resume", "abort", "retry", "restart"] {
            assert!(verbs.contains(&verb.to_owned()), "{verb} in {verbs:?}");
        }
        let (flags, _) = candidates(&["rollout", "deploy/web", "--no"]);
        assert_eq!(flags, ["--no-budgets"]);
        let (flags, _) = candidates(&["recreate", "web-0", "--max"]);
        assert_eq!(flags, ["--max-unavailable"]);
        // Global flags are offered in a subcommand too.
        assert!(
            candidates(&["get", "--"])
                .0
                .contains(&"--namespace".to_owned())
        );
        // A flag's value: its possible values, or nothing (and no files) for a free value.
        assert_eq!(
            candidates(&["recreate", "web-0", "--failure-policy", ""]).0,
            ["Fail", "Ignore"]
        );
        assert_eq!(candidates(&["get", "-o", "y"]).0, ["yaml"]);
        assert_eq!(
            candidates(&["-n", "prod", "get", "-o", ""]).0,
            ["json", "yaml", "name"]
        );
        assert_eq!(candidates(&["recreate", "-c", ""]), (vec![], 4));
        // A kubeconfig is a file.
        assert_eq!(candidates(&["--kubeconfig", ""]).1, 0);
        // A positional's values.
        assert_eq!(candidates(&["completion", "f"]).0, ["fish"]);
        assert_eq!(
            plugin_completion_output(&["completion".to_owned(), "z".to_owned()]),
            "zsh\n:4\n"
        );
    }

    #[test]
    fn completion_takes_a_shell_and_refuses_others() {
        let cli = Cli::try_parse_from(["kubectl-crr", "completion", "zsh"]).expect("parses");
        assert!(matches!(cli.command, Command::Completion(args) if args.shell == Shell::Zsh));
        assert!(Cli::try_parse_from(["kubectl-crr", "completion", "tcsh"]).is_err());
        assert!(Cli::try_parse_from(["kubectl-crr", "completion"]).is_err());
    }

    #[test]
    fn names_complete_the_positional_still_missing() {
        let wanted = |words: &[&str]| {
            names_wanted(
                &words
                    .iter()
                    .map(|word| (*word).to_owned())
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(wanted(&["recreate", "we"]), Some(Names::Pods));
        assert_eq!(
            wanted(&["-n", "shop", "recreate", "-c", "app", ""]),
            Some(Names::Pods)
        );
        assert_eq!(wanted(&["recreate", "web-0", ""]), None);
        assert_eq!(wanted(&["recreate", "-c", ""]), None);
        assert_eq!(wanted(&["recreate", "--"]), None);
        assert_eq!(wanted(&["get", "a", ""]), Some(Names::Requests));
        assert_eq!(wanted(&["describe", ""]), Some(Names::Requests));
        assert_eq!(wanted(&["rollout", "pause", ""]), Some(Names::Rollouts));
        assert_eq!(
            wanted(&["rollout", "status", "de"]),
            Some(Names::RolloutsOrWorkloads)
        );
        assert_eq!(
            wanted(&["rollout", "history", ""]),
            Some(Names::Workloads { replica_sets: true })
        );
        assert_eq!(
            wanted(&["rollout", "restart", "deploy/"]),
            Some(Names::Workloads {
                replica_sets: false
            })
        );
        assert_eq!(
            wanted(&["rollout", "--max-unavailable", "2", ""]),
            Some(Names::Workloads { replica_sets: true })
        );
        assert_eq!(wanted(&["triggers", ""]), None);
        assert_eq!(wanted(&[""]), None);
        assert!(workload_prefixes(false).iter().all(|kind| *kind != "rs/"));
    }
}
