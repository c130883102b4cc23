//! The command line: what `kubectl crr` accepts and how flag values are read (durations such as
//! `5s` or `1m30s`, `--max-unavailable 2` or `25%`, `--dry-run=client|server`, `-o json|yaml`).
//! It decides nothing about the cluster; `main` turns these values into API calls.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
pub use crr_crds::rollout::Limit;

/// Recreate containers of pods in place (ContainerRecreateRequests) and watch them come back.
#[derive(Parser, Debug, Clone, PartialEq)]
#[command(name = "kubectl-crr", bin_name = "kubectl crr", version)]
pub struct Cli {
    /// How to reach the cluster, like kubectl.
    #[command(flatten)]
    pub connection: Connection,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Kubeconfig, context and namespace, handled as kubectl handles them.
#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct Connection {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, env = "KUBECTL_CRR_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace (default: the context's namespace, then `default`).
    #[arg(
        short,
        long,
        global = true,
        env = "KUBECTL_CRR_NAMESPACE",
        value_name = "NS"
    )]
    pub namespace: Option<String>,
}

/// The subcommands.
#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum Command {
    /// Create a ContainerRecreateRequest for a pod (or one per pod matching -l) and optionally
    /// follow it until the containers are back.
    Recreate(RecreateArgs),
    /// List ContainerRecreateRequests: name, pod, node, phase, containers done/total, age.
    Get(GetArgs),
    /// Show one ContainerRecreateRequest: spec, per-container states, conditions and events.
    Describe(DescribeArgs),
    /// Restart containers of every pod of a workload in place, a few pods at a time, within its
    /// PodDisruptionBudgets (a ContainerRecreateRollout); or show, pause, resume, abort or retry one; or
    /// ask the crr operator for one without touching the pod template (`rollout restart`).
    Rollout(RolloutArgs),
    /// List the workloads that restart in place on a config change, a schedule or a request
    /// (annotations crr.dev/recreate-on-config-change, crr.dev/recreate-schedule,
    /// crr.dev/restart-requested-at): their triggers and restart window (crr.dev/recreate-window),
    /// last trigger rollout, the config change that waits for the window, and next scheduled run
    /// (marked when it falls outside the window).
    Triggers(TriggersArgs),
    /// Print a shell completion script for kubectl-crr (bash, zsh, fish, elvish, powershell).
    Completion(CompletionArgs),
}

/// `kubectl crr rollout`: `rollout deploy/web -c app [...]` creates one; `rollout status|pause|
/// resume|abort|retry NAME` acts on one; `rollout restart deploy/web` asks the operator for one. The
/// verbs are subcommands, so a verb is never read as a WORKLOAD (which is always KIND/NAME).
#[derive(Args, Debug, Clone, PartialEq)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct RolloutArgs {
    /// Act on an existing rollout instead of creating one.
    #[command(subcommand)]
    pub action: Option<RolloutAction>,
    /// What to create.
    #[command(flatten)]
    pub create: RolloutCreateArgs,
}

/// `kubectl crr rollout WORKLOAD|-l SELECTOR -c CONTAINER ...`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct RolloutCreateArgs {
    /// The workload whose pods are restarted: deploy/NAME, sts/NAME, ds/NAME or rs/NAME (or -l).
    #[arg(
        value_name = "WORKLOAD",
        required_unless_present = "selector",
        conflicts_with = "selector"
    )]
    pub workload: Option<String>,
    /// Restart the pods matching this selector instead of a workload's (app=web, env in (prod,qa), ...).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// A container to recreate in every pod; repeat for several. Default: every container of
    /// the workload's pod template (of the first pod -l matches) that the kubelet starts again.
    #[arg(short, long = "container", value_name = "CONTAINER")]
    pub containers: Vec<String>,
    /// How many pods may be unavailable at once: a number or a percentage of the target's pods
    /// (rounded down, at least 1).
    #[arg(long, default_value = "1", value_name = "N|N%")]
    pub max_unavailable: Limit,
    /// Do not wait for PodDisruptionBudgets to allow each pod.
    #[arg(long)]
    pub no_budgets: bool,
    /// End the rollout Failed once more pods than this have failed (default 0).
    #[arg(long, value_name = "N")]
    pub max_failed_pods: Option<u32>,
    /// Mark each pod not ready this long before stopping its containers (needs the pods'
    /// KruisePodReady readiness gate).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub unready_grace: Option<Duration>,
    /// Each pod's deadline (default 5m).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub deadline: Option<Duration>,
    /// Delete the rollout and its requests this long after it ends.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
    /// The rollout's name (default: generated from the workload and the first container).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Follow the rollout with a progress bar until it ends; exit 3 when a pod failed.
    #[arg(short, long)]
    pub wait: bool,
    /// Give up following after this long (exit code 4; the rollout goes on); implies --wait.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// Print the created rollout in this format instead of a one-line summary.
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    /// Create nothing; print the plan: the pods in the order they would restart, how many may
    /// start now, and the PodDisruptionBudgets over them (with -o, the rollout instead).
    /// `client` (the default) builds it here; `server` has the API server and the webhook check
    /// it too (dryRun=All).
    #[arg(long, value_enum, value_name = "MODE", require_equals = true, num_args = 0..=1,
          default_missing_value = "client", hide_possible_values = true,
          conflicts_with_all = ["wait", "timeout"])]
    pub dry_run: Option<DryRun>,
}

/// What to do with an existing rollout.
#[derive(Subcommand, Debug, Clone, PartialEq)]
pub enum RolloutAction {
    /// Follow a rollout to its end, as `kubectl rollout status` does: exit 0 when every pod was
    /// recreated, 3 when one failed or the rollout failed, 4 at --timeout.
    Status {
        /// The rollout's NAME, or a workload's KIND/NAME (deploy/web) for its newest rollout.
        #[arg(value_name = "NAME|KIND/NAME")]
        target: String,
        /// Follow the rollout until it ends (the default); --watch=false prints it once.
        #[arg(short = 'w', long = "watch", alias = "wait", action = ArgAction::Set,
              default_value_t = true, default_missing_value = "true", num_args = 0..=1,
              require_equals = true, value_name = "BOOL")]
        watch: bool,
        /// Give up following after this long (exit code 4; the rollout goes on).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        timeout: Option<Duration>,
    },
    /// List rollouts: NAME, TARGET, PHASE, RECREATED, FAILED, AGE.
    List {
        /// Only the rollouts of this workload (deploy/NAME, sts/NAME, ds/NAME or rs/NAME).
        #[arg(value_name = "KIND/NAME")]
        workload: Option<String>,
        /// The rollouts of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// After the list, print each change until interrupted.
        #[arg(short, long)]
        watch: bool,
        /// Print the rollouts in this format instead of a table.
        #[arg(short, long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
    /// The rollouts of one workload, oldest first, numbered as `kubectl rollout history`
    /// numbers revisions, with how each started (by hand, a config change, a schedule, a
    /// restart request) and how it ended.
    History {
        /// The workload: deploy/NAME, sts/NAME, ds/NAME or rs/NAME.
        #[arg(value_name = "KIND/NAME")]
        workload: String,
        /// Print the rollouts in this format instead of a table.
        #[arg(short, long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
    /// Start no new pod until resumed; requests in flight finish. A finished rollout is refused.
    Pause {
        /// The rollout's name.
        #[arg(value_name = "NAME")]
        name: String,
        /// Print the paused rollout in this format.
        #[arg(short, long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
    /// Go on after a pause. A finished rollout is refused.
    Resume {
        /// The rollout's name.
        #[arg(value_name = "NAME")]
        name: String,
        /// Print the resumed rollout in this format.
        #[arg(short, long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
    /// End the rollout for good, keeping it as a record: no pod starts again, its requests not
    /// started yet are deleted, those under way finish, then its phase is Aborted. A finished
    /// rollout is refused; `rollout retry` starts what it left.
    Abort {
        /// The rollout's name.
        #[arg(value_name = "NAME")]
        name: String,
        /// Print the aborted rollout in this format.
        #[arg(short, long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
    /// Start a new rollout of the pods a finished rollout did not recreate (its failed pods,
    /// and those it never started when it failed or was aborted), with the same spec. The new
    /// rollout names them in spec.onlyPods and the old one in its crr.dev/retry-of annotation.
    Retry {
        /// The finished rollout's name.
        #[arg(value_name = "NAME")]
        name: String,
        /// The new rollout's name (default: generated, NAME-retry-xxxxx).
        #[arg(long = "name", value_name = "NEW_NAME")]
        new_name: Option<String>,
        /// Follow the new rollout until it ends; exit 3 when a pod failed.
        #[arg(short, long)]
        wait: bool,
        /// Give up following after this long (exit code 4; the rollout goes on); implies --wait.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        timeout: Option<Duration>,
        /// Print the created rollout in this format instead of a one-line summary.
        #[arg(short, long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
    /// Ask the crr operator to restart a workload's containers in place, without changing its
    /// pod template.
    ///
    /// Sets the workload's annotation crr.dev/restart-requested-at to the current time (a merge
    /// patch of that one annotation). The pod template is not changed: no new ReplicaSet, no new
    /// pods, nothing for a GitOps tool to see in the template. The operator restarts the
    /// containers crr.dev/recreate-containers names (default: every regular container) in one
    /// rollout, once per value, whatever the restart window, and names the rollout in a
    /// RestartRequested Event on the workload.
    Restart {
        /// The workload: deploy/NAME, sts/NAME or ds/NAME (deployment/, statefulset/, daemonset/).
        #[arg(value_name = "WORKLOAD")]
        workload: String,
        /// Set nothing: `client` (the default) only checks that the workload exists, `server`
        /// has the API server check the patch without storing it.
        #[arg(long, value_enum, value_name = "MODE", require_equals = true, num_args = 0..=1,
              default_missing_value = "client", hide_possible_values = true)]
        dry_run: Option<DryRun>,
    },
}

/// `kubectl crr recreate`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct RecreateArgs {
    /// The pod whose containers are recreated (or use -l).
    #[arg(
        value_name = "POD",
        required_unless_present = "selector",
        conflicts_with = "selector"
    )]
    pub pod: Option<String>,
    /// Recreate one request per pod matching this label selector, at most --max-unavailable at
    /// once; implies --wait.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// A container to recreate; repeat for several. Default: every container of the pod.
    #[arg(short, long = "container", value_name = "CONTAINER")]
    pub containers: Vec<String>,
    /// Recreate the next container only after the previous one is running again.
    #[arg(long)]
    pub ordered: bool,
    /// Kill the container even if it restarted since the request was made.
    #[arg(long)]
    pub force: bool,
    /// Whether to go on with the other containers when one fails to be recreated.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub failure_policy: Option<FailurePolicyArg>,
    /// Grace period for the old container to stop (default: the pod's).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub grace_period: Option<Duration>,
    /// Mark the pod not ready this long before stopping the containers (e.g. 5s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub unready_grace: Option<Duration>,
    /// A new container must run this long to count as recreated (e.g. 10s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub min_started: Option<Duration>,
    /// Fail the request if it has not finished this long after creation (at least 3s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub deadline: Option<Duration>,
    /// Delete the request this long after it finished (e.g. 30m).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
    /// Follow the request(s) until done; exit non-zero when a container failed.
    #[arg(short, long)]
    pub wait: bool,
    /// Give up waiting after this long (exit code 4); implies --wait.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// With -l: how many pods may be recreating at once, a number or a percentage of the
    /// matching pods (rounded down, at least 1).
    #[arg(long, default_value = "1", value_name = "N|N%")]
    pub max_unavailable: Limit,
    /// Only print the request (client) or have the API server check it without storing it
    /// (server).
    #[arg(long, value_enum, value_name = "MODE", require_equals = true, num_args = 0..=1,
          default_missing_value = "client")]
    pub dry_run: Option<DryRun>,
    /// Print the created request(s) in this format instead of a one-line summary.
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

impl RecreateArgs {
    /// Whether the command follows the requests to the end.
    pub fn follows(&self) -> bool {
        self.dry_run.is_none() && (self.wait || self.timeout.is_some() || self.selector.is_some())
    }
}

/// `kubectl crr triggers`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct TriggersArgs {
    /// List the workloads of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Also show workloads with Reloader's annotations (when the operator honours them,
    /// chart value triggers.reloaderAnnotations).
    #[arg(long)]
    pub reloader: bool,
}

/// `kubectl crr get`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct GetArgs {
    /// Only these requests (default: all in the namespace).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// List requests of every namespace.
    #[arg(short = 'A', long, conflicts_with = "names")]
    pub all_namespaces: bool,
    /// Only requests whose labels match this selector.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// After listing, keep printing requests as they change.
    #[arg(short, long)]
    pub watch: bool,
    /// Print the objects in this format instead of a table.
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

/// `kubectl crr describe`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct DescribeArgs {
    /// The request's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Print the object in this format instead of the description.
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

/// `kubectl crr completion`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct CompletionArgs {
    /// The shell to print the completion script for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `--failure-policy`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicyArg {
    /// Stop at the first container that fails.
    #[value(name = "Fail")]
    Fail,
    /// Go on with the other containers.
    #[value(name = "Ignore")]
    Ignore,
}

impl FailurePolicyArg {
    /// The API value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "Fail",
            Self::Ignore => "Ignore",
        }
    }
}

/// `--dry-run`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DryRun {
    /// Build the request locally and print it; nothing is sent.
    Client,
    /// Send the request with dryRun=All: admission runs, nothing is stored.
    Server,
}

/// `-o`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Json,
    Yaml,
    /// `KIND.GROUP/NAME`, a line per object.
    Name,
}

/// Parses a duration as kubectl flags write them: `30` (seconds), `500ms` is refused (the API
/// counts whole seconds), `5s`, `10m`, `1h30m`, `2h45m10s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".to_owned());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "invalid duration {text:?}: expected a number at {rest:?}"
            ));
        }
        let value: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("invalid duration {text:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let multiplier = match &rest[..unit_end] {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            "ms" | "us" | "µs" | "ns" => {
                return Err(format!(
                    "invalid duration {text:?}: requests count whole seconds"
                ));
            }
            "" => {
                return Err(format!(
                    "invalid duration {text:?}: missing unit after {value}"
                ));
            }
            unit => return Err(format!("invalid duration {text:?}: unknown unit {unit:?}")),
        };
        total = value
            .checked_mul(multiplier)
            .and_then(|seconds| total.checked_add(seconds))
            .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
        rest = &rest[unit_end..];
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-crr").chain(args.iter().copied()))
    }

    fn recreate(args: &[&str]) -> RecreateArgs {
        match parse(args).expect("valid arguments").command {
            Command::Recreate(recreate) => recreate,
            other => panic!("not a recreate: {other:?}"),
        }
    }

    #[test]
    fn durations_accept_seconds_and_units_and_refuse_fractions() {
        let table = [
            ("30", Ok(30)),
            ("5s", Ok(5)),
            ("10m", Ok(600)),
            ("1h30m", Ok(5400)),
            ("2h45m10s", Ok(9910)),
            ("1d", Ok(86_400)),
            ("0s", Ok(0)),
        ];
        for (text, expected) in table {
            assert_eq!(
                parse_duration(text).map(|d| d.as_secs()),
                expected,
                "{text}"
            );
        }
        for bad in [
            "",
            "s",
            "5x",
            "500ms",
            "1.5s",
            "-3s",
            "5s3",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn max_unavailable_is_a_count_or_a_percentage_resolved_to_at_least_one() {
        assert_eq!(
            recreate(&["recreate", "-l", "app=web"]).max_unavailable,
            Limit::Count(1)
        );
        assert_eq!(
            recreate(&["recreate", "-l", "app=web", "--max-unavailable", "25%"]).max_unavailable,
            Limit::Percent(25)
        );
        assert!(parse(&["recreate", "-l", "app=web", "--max-unavailable", "0"]).is_err());
        assert_eq!(Limit::Percent(25).resolve(10), 2);
        assert_eq!(Limit::Percent(25).resolve(3), 1);
        assert_eq!(Limit::Count(1).resolve(0), 1);
    }

    #[test]
    fn recreate_reads_every_strategy_flag() {
        let args = recreate(&[
            "recreate",
            "web-0",
            "-c",
            "app",
            "-c",
            "sidecar",
            "-n",
            "prod",
            "--ordered",
            "--force",
            "--failure-policy",
            "Ignore",
            "--unready-grace",
            "5s",
            "--min-started",
            "10s",
            "--deadline",
            "5m",
            "--ttl",
            "30m",
            "--grace-period",
            "20s",
            "--wait",
            "--timeout",
            "2m",
        ]);
        assert_eq!(args.pod.as_deref(), Some("web-0"));
        assert_eq!(args.containers, ["app", "sidecar"]);
        assert!(args.ordered && args.force && args.wait);
        assert_eq!(args.failure_policy, Some(FailurePolicyArg::Ignore));
        assert_eq!(args.unready_grace, Some(Duration::from_secs(5)));
        assert_eq!(args.min_started, Some(Duration::from_secs(10)));
        assert_eq!(args.deadline, Some(Duration::from_secs(300)));
        assert_eq!(args.ttl, Some(Duration::from_secs(1800)));
        assert_eq!(args.grace_period, Some(Duration::from_secs(20)));
        assert_eq!(args.timeout, Some(Duration::from_secs(120)));
        assert!(args.follows());
    }

    #[test]
    fn namespace_and_context_are_global_flags() {
        let cli = parse(&["-n", "prod", "get", "--context", "kind"]).unwrap();
        assert_eq!(cli.connection.namespace.as_deref(), Some("prod"));
        assert_eq!(cli.connection.context.as_deref(), Some("kind"));
    }

    #[test]
    fn recreate_needs_exactly_one_of_pod_and_selector() {
        assert!(parse(&["recreate"]).is_err());
        assert!(parse(&["recreate", "web-0", "-l", "app=web"]).is_err());
        let batch = recreate(&["recreate", "-l", "app=web", "--max-unavailable", "50%"]);
        assert_eq!(batch.selector.as_deref(), Some("app=web"));
        assert_eq!(batch.max_unavailable, Limit::Percent(50));
        assert!(batch.follows(), "a batch is always followed");
    }

    #[test]
    fn dry_run_takes_client_or_server_and_defaults_to_client() {
        assert_eq!(
            recreate(&["recreate", "p", "--dry-run=server"]).dry_run,
            Some(DryRun::Server)
        );
        assert_eq!(
            recreate(&["recreate", "p", "--dry-run"]).dry_run,
            Some(DryRun::Client)
        );
        assert!(parse(&["recreate", "p", "--dry-run=maybe"]).is_err());
        let dry = recreate(&["recreate", "p", "--dry-run=client", "--wait"]);
        assert!(!dry.follows(), "nothing to follow in a dry run");
    }

    #[test]
    fn unknown_failure_policy_and_bad_durations_are_usage_errors() {
        assert!(parse(&["recreate", "p", "--failure-policy", "Retry"]).is_err());
        assert!(parse(&["recreate", "p", "--deadline", "soon"]).is_err());
    }

    #[test]
    fn get_and_describe_take_output_formats() {
        let cli = parse(&["get", "-A", "-w", "-o", "yaml"]).unwrap();
        let Command::Get(get) = cli.command else {
            panic!("not get")
        };
        assert!(get.all_namespaces && get.watch);
        assert_eq!(get.output, Some(OutputFormat::Yaml));
        let cli = parse(&["describe", "web-0-abcde", "-o", "json"]).unwrap();
        let Command::Describe(describe) = cli.command else {
            panic!("not describe")
        };
        assert_eq!(describe.name, "web-0-abcde");
        assert_eq!(describe.output, Some(OutputFormat::Json));
        assert!(parse(&["get", "-o", "wide"]).is_err());
    }

    #[test]
    fn rollout_restart_is_a_verb_and_rollout_workload_still_creates() {
        for args in [
            &["rollout", "restart", "deploy/web", "-n", "shop"][..],
            &["-n", "shop", "rollout", "restart", "deploy/web"],
        ] {
            let cli = parse(args).expect("valid arguments");
            assert_eq!(cli.connection.namespace.as_deref(), Some("shop"));
            assert_eq!(
                cli.command,
                Command::Rollout(RolloutArgs {
                    action: Some(RolloutAction::Restart {
                        workload: "deploy/web".to_owned(),
                        dry_run: None,
                    }),
                    create: RolloutCreateArgs {
                        workload: None,
                        selector: None,
                        containers: Vec::new(),
                        max_unavailable: Limit::Count(1),
                        no_budgets: false,
                        max_failed_pods: None,
                        unready_grace: None,
                        deadline: None,
                        ttl: None,
                        name: None,
                        wait: false,
                        timeout: None,
                        output: None,
                        dry_run: None,
                    },
                })
            );
        }
        let restart = |args: &[&str]| match parse(args).expect("valid arguments").command {
            Command::Rollout(RolloutArgs {
                action: Some(RolloutAction::Restart { workload, dry_run }),
                ..
            }) => (workload, dry_run),
            other => panic!("not a restart: {other:?}"),
        };
        assert_eq!(
            restart(&["rollout", "restart", "--dry-run", "sts/db"]),
            ("sts/db".to_owned(), Some(DryRun::Client))
        );
        assert_eq!(
            restart(&["rollout", "restart", "ds/agent", "--dry-run=server"]),
            ("ds/agent".to_owned(), Some(DryRun::Server))
        );
        // A restart takes one workload and none of the create flags.
        assert!(parse(&["rollout", "restart"]).is_err());
        assert!(parse(&["rollout", "restart", "deploy/web", "-c", "app"]).is_err());
        // The create form is unchanged.
        let cli = parse(&["rollout", "deploy/web", "-c", "app"]).expect("valid arguments");
        assert!(matches!(
            cli.command,
            Command::Rollout(RolloutArgs { action: None, create })
                if create.workload.as_deref() == Some("deploy/web") && create.containers == ["app"]
        ));
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
