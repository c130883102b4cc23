//! `kubectl crr rollout`: create a ContainerRecreateRollout of a workload (or of the pods a
//! selector matches) and follow it, or show, pause, resume or abort one. The pure parts (the
//! target, the object, the progress line, the exit code) are functions here with their tests;
//! the API calls are the `async` functions at the bottom.

use std::io::IsTerminal as _;
use std::time::Duration;

use crr_crds::rollout::{
    ContainerRecreateRollout, ContainerRecreateRolloutSpec, RolloutPhase, RolloutRecreateStrategy,
    RolloutTarget, target_name,
};
use crr_crds::rules::rollout::check_rollout;
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_crds::{keys, readiness_gate};
use futures::StreamExt as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};

use crate::cli::{DryRun, OutputFormat, RolloutAction, RolloutArgs, RolloutCreateArgs};
use crate::error::Error;
use crate::exit::Exit;

use crate::FIELD_MANAGER;

pub use crate::workload::workload_ref;

/// The rollout `kubectl crr rollout` creates: named by `--name`, else generated from the
/// workload (or `pods`) and the first container; checked by the rules the webhook applies.
pub fn build(namespace: &str, args: &RolloutCreateArgs) -> Result<ContainerRecreateRollout, Error> {
    let target = match (&args.workload, &args.selector) {
        (Some(workload), None) => RolloutTarget {
            workload_ref: Some(workload_ref(workload)?),
            selector: None,
        },
        (None, Some(selector)) => RolloutTarget {
            workload_ref: None,
            selector: Some(crate::selector::label_selector(selector)?),
        },
        _ => {
            return Err(Error::InvalidFlag {
                flag: "WORKLOAD",
                message: "name a workload (deploy/NAME, ...) or a selector (-l), not both"
                    .to_owned(),
            });
        }
    };
    let seconds = |duration: Option<Duration>| {
        duration.map(|duration| i64::try_from(duration.as_secs()).unwrap_or(i64::MAX))
    };
    let strategy = RolloutRecreateStrategy {
        request: crr_crds::v1beta1::ContainerRecreateRequestStrategy {
            unready_grace_period_seconds: seconds(args.unready_grace),
            ..Default::default()
        },
        active_deadline_seconds: seconds(args.deadline),
        ttl_seconds_after_finished: None,
    };
    let spec = ContainerRecreateRolloutSpec {
        target,
        containers: args.containers.clone(),
        max_unavailable: Some(args.max_unavailable.to_int_or_string()),
        respect_disruption_budgets: args.no_budgets.then_some(false),
        max_failed_pods: args
            .max_failed_pods
            .map(|count| i32::try_from(count).unwrap_or(i32::MAX)),
        recreate_strategy: (strategy != RolloutRecreateStrategy::default()).then_some(strategy),
        ttl_seconds_after_finished: args
            .ttl
            .map(|ttl| i32::try_from(ttl.as_secs()).unwrap_or(i32::MAX)),
        ..ContainerRecreateRolloutSpec::default()
    };
    let mut metadata = ObjectMeta {
        namespace: Some(namespace.to_owned()),
        ..ObjectMeta::default()
    };
    // The name the rules see: the given one, or the longest a generated one can be.
    let checked_name = match &args.name {
        Some(name) => {
            metadata.name = Some(name.clone());
            name.clone()
        }
        None => {
            let prefix = generated_prefix(&spec);
            let longest = format!("{prefix}xxxxx");
            metadata.generate_name = Some(prefix);
            longest
        }
    };
    check_rollout(&checked_name, &spec).map_err(|violation| Error::InvalidFlag {
        flag: "rollout",
        message: violation.to_string(),
    })?;
    Ok(ContainerRecreateRollout {
        metadata,
        spec,
        status: None,
    })
}

/// `<workload>-<container>-` (or `pods-<container>-`), cut so that the API server's five random
/// characters keep the name within a label value's 63.
fn generated_prefix(spec: &ContainerRecreateRolloutSpec) -> String {
    let base = spec
        .target
        .workload_ref
        .as_ref()
        .map_or("pods", |workload| workload.name.as_str());
    let container = spec.containers.first().map_or("all", String::as_str);
    let mut prefix: String = format!("{base}-{container}")
        .chars()
        .take(crr_crds::rollout::MAX_NAME_LENGTH - 6)
        .collect();
    while prefix.ends_with('-') || prefix.ends_with('.') {
        prefix.pop();
    }
    prefix.push('-');
    prefix
}

/// One line of progress: phase, a bar, the counts, and what it waits on.
pub fn progress_line(rollout: &ContainerRecreateRollout) -> String {
    let status = rollout.status.clone().unwrap_or_default();
    let phase = status.phase.as_deref().unwrap_or("Pending");
    let total = usize::try_from(status.target_pods).unwrap_or(0);
    let done = usize::try_from(status.recreated + status.failed).unwrap_or(0);
    const WIDTH: usize = 20;
    let filled = (done * WIDTH).checked_div(total).unwrap_or(0).min(WIDTH);
    let bar = format!("[{}{}]", "#".repeat(filled), ".".repeat(WIDTH - filled));
    let waiting = status
        .conditions
        .iter()
        .find(|condition| {
            condition.type_ == keys::CONDITION_ROLLOUT_PROGRESSING
                && condition.status == "True"
                && (condition.reason.starts_with("Waiting") || condition.reason == "Aborting")
        })
        .map(|condition| format!("; {}", condition.message))
        .unwrap_or_default();
    let skipped = if status.skipped > 0 {
        format!(", {} skipped (not running)", status.skipped)
    } else {
        String::new()
    };
    crate::printable::printable(&format!(
        "{}: {phase} {bar} {}/{} recreated, {} in flight, {} failed{skipped}{waiting}",
        rollout.name_any(),
        status.recreated,
        status.target_pods,
        status.in_flight,
        status.failed,
    ))
}

/// How a finished rollout exits, as `recreate` does: 0 when every pod was recreated, 3 when one
/// failed; `None` while it runs.
pub fn exit_code(rollout: &ContainerRecreateRollout) -> Option<Exit> {
    let phase = rollout.phase()?;
    if !phase.is_finished() {
        return None;
    }
    let failed = rollout.status.as_ref().map_or(0, |status| status.failed);
    Some(if phase == RolloutPhase::Completed && failed == 0 {
        Exit::Success
    } else {
        Exit::RecreateFailed
    })
}

/// Runs `kubectl crr rollout ...`.
pub async fn execute(client: Client, namespace: &str, args: &RolloutArgs) -> Result<Exit, Error> {
    let api: Api<ContainerRecreateRollout> = Api::namespaced(client.clone(), namespace);
    match &args.action {
        None => create(client, namespace, &api, &args.create).await,
        Some(RolloutAction::Status {
            target,
            watch,
            timeout,
        }) => {
            let rollout = match target.split_once('/') {
                Some(_) => {
                    crate::rollout_list::newest(&api, namespace, &workload_ref(target)?).await?
                }
                None => get(&api, namespace, target).await?,
            };
            if *watch {
                return follow(&api, rollout, *timeout).await;
            }
            println!("{}", progress_line(&rollout));
            for failure in rollout.status.iter().flat_map(|status| &status.failures) {
                // Pod and container names are DNS labels: only the message can carry escapes.
                println!(
                    "  failed: {}",
                    crate::printable::printable(&failure.to_string())
                );
            }
            Ok(exit_code(&rollout).unwrap_or(Exit::Success))
        }
        Some(RolloutAction::List {
            workload,
            all_namespaces,
            watch,
            output,
        }) => {
            let workload = workload.as_deref().map(workload_ref).transpose()?;
            crate::rollout_list::list(
                client,
                namespace,
                workload.as_ref(),
                *all_namespaces,
                *watch,
                *output,
            )
            .await
        }
        Some(RolloutAction::History { workload, output }) => {
            crate::rollout_list::history(client, namespace, &workload_ref(workload)?, *output).await
        }
        Some(RolloutAction::Pause { name, output }) => {
            set_flag(&api, namespace, name, Flag::Paused(true), *output).await
        }
        Some(RolloutAction::Resume { name, output }) => {
            set_flag(&api, namespace, name, Flag::Paused(false), *output).await
        }
        Some(RolloutAction::Restart { workload, dry_run }) => {
            crate::restart::execute(client, namespace, workload, *dry_run).await
        }
        Some(RolloutAction::Abort { name, output }) => {
            set_flag(&api, namespace, name, Flag::Aborted, *output).await
        }
        Some(RolloutAction::Retry { .. }) => {
            unreachable!("retry is dispatched to rollout_retry by commands::execute")
        }
    }
}

async fn create(
    client: Client,
    namespace: &str,
    api: &Api<ContainerRecreateRollout>,
    args: &RolloutCreateArgs,
) -> Result<Exit, Error> {
    let TargetPods { template, selector } = target_pods(
        client.clone(),
        namespace,
        args.workload.as_deref(),
        args.selector.as_deref(),
    )
    .await?;
    let mut args = args.clone();
    if args.containers.is_empty() {
        // As `recreate` without -c: every container the kubelet would start again.
        let pod = template.clone().ok_or_else(|| no_pods(namespace, &args))?;
        args.containers = crate::request::recreatable_containers(&pod);
    }
    let rollout = build(namespace, &args)?;
    if let Some(workload) = &rollout.spec.target.workload_ref {
        let rollouts = api.list(&kube::api::ListParams::default()).await?.items;
        for running in crate::rollout_list::unfinished_of(&rollouts, workload) {
            eprintln!(
                "Warning: containerrecreaterollout/{} of {}/{} has not finished: its pods may be restarted twice",
                running.name_any(),
                workload.kind,
                workload.name
            );
        }
    }
    if rollout
        .spec
        .recreate_strategy
        .as_ref()
        .is_some_and(|strategy| strategy.request.unready_grace_period_seconds.is_some())
        && let Some(pod) = &template
    {
        warn_without_gate(&rollout.spec.target, pod);
    }
    if let Some(mode) = args.dry_run {
        // As kubectl's --dry-run: nothing is stored; `server` has the API server and the webhook
        // check the rollout too.
        let checked = match mode {
            DryRun::Client => rollout,
            DryRun::Server => {
                let params = PostParams {
                    dry_run: true,
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                };
                api.create(&params, &rollout).await?
            }
        };
        match args.output {
            Some(format) => crate::output::print(&crate::output::object(&checked, format)?)?,
            None => {
                let plan = match &selector {
                    Some(selector) => {
                        crate::rollout_plan::read(client, namespace, selector).await?
                    }
                    None => crate::rollout_plan::Plan {
                        pods: Vec::new(),
                        budgets: Vec::new(),
                    },
                };
                crate::output::print(&crate::rollout_plan::text(
                    &checked,
                    &plan,
                    args.max_unavailable,
                    if mode == DryRun::Server {
                        "server"
                    } else {
                        "client"
                    },
                ))?;
            }
        }
        return Ok(Exit::Success);
    }
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let created = api.create(&params, &rollout).await?;
    match args.output {
        Some(format) => crate::output::print(&crate::output::object(&created, format)?)?,
        None => println!(
            "containerrecreaterollout/{} created ({})",
            created.name_any(),
            target_name(&created.spec.target)
        ),
    }
    if args.wait || args.timeout.is_some() {
        return follow(api, created, args.timeout).await;
    }
    Ok(Exit::Success)
}

fn no_pods(namespace: &str, args: &RolloutCreateArgs) -> Error {
    match (&args.workload, &args.selector) {
        (_, Some(selector)) => Error::NoPodsMatch {
            namespace: namespace.to_owned(),
            selector: selector.clone(),
        },
        (workload, None) => Error::InvalidFlag {
            flag: "-c",
            message: format!(
                "{} has no pod template to take the containers from: name them with -c",
                workload.as_deref().unwrap_or_default()
            ),
        },
    }
}

/// What the rollout's pods look like (the workload's pod template as a pod, or the first pod
/// the selector matches; `None` when no pod matches) and the selector of its pods (the workload's,
/// or the rollout's). A workload that does not exist is an error.
pub(crate) struct TargetPods {
    pub(crate) template: Option<Pod>,
    pub(crate) selector: Option<kube::core::Selector>,
}

/// The [`TargetPods`] of a workload (`KIND/NAME`) or a selector, whichever is given.
pub(crate) async fn target_pods(
    client: Client,
    namespace: &str,
    workload: Option<&str>,
    selector: Option<&str>,
) -> Result<TargetPods, Error> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
    let selector_of =
        |selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>| {
            selector.and_then(|selector| kube::core::Selector::try_from(selector).ok())
        };
    if let Some(text) = selector {
        let selector = selector_of(Some(crate::selector::label_selector(text)?));
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let params = kube::api::ListParams::default().labels(text).limit(1);
        return Ok(TargetPods {
            template: pods.list(&params).await?.items.into_iter().next(),
            selector,
        });
    }
    let Some(text) = workload else {
        return Ok(TargetPods {
            template: None,
            selector: None,
        });
    };
    let workload = workload_ref(text)?;
    let name = workload.name.as_str();
    let found = match workload.kind.as_str() {
        "Deployment" => Api::<Deployment>::namespaced(client, namespace)
            .get_opt(name)
            .await?
            .map(|object| {
                object
                    .spec
                    .map(|spec| (Some(spec.template), Some(spec.selector)))
            }),
        "StatefulSet" => Api::<StatefulSet>::namespaced(client, namespace)
            .get_opt(name)
            .await?
            .map(|object| {
                object
                    .spec
                    .map(|spec| (Some(spec.template), Some(spec.selector)))
            }),
        "DaemonSet" => Api::<DaemonSet>::namespaced(client, namespace)
            .get_opt(name)
            .await?
            .map(|object| {
                object
                    .spec
                    .map(|spec| (Some(spec.template), Some(spec.selector)))
            }),
        _ => Api::<ReplicaSet>::namespaced(client, namespace)
            .get_opt(name)
            .await?
            .map(|object| object.spec.map(|spec| (spec.template, Some(spec.selector)))),
    };
    let (template, selector) = found
        .ok_or_else(|| Error::WorkloadNotFound {
            namespace: namespace.to_owned(),
            kind: workload.kind.to_ascii_lowercase(),
            name: name.to_owned(),
        })?
        .unwrap_or((None, None));
    Ok(TargetPods {
        template: template.map(|template| Pod {
            metadata: template.metadata.unwrap_or_default(),
            spec: template.spec,
            status: None,
        }),
        selector: selector_of(selector),
    })
}

/// Says once when an unready grace period cannot take the pods out of endpoints: the target's
/// pods have neither the `KruisePodReady` gate nor the opt-in label.
fn warn_without_gate(target: &RolloutTarget, pod: &Pod) {
    let gated = readiness_gate::declares_kruise_pod_ready(pod.spec.as_ref())
        || pod
            .labels()
            .get(keys::LABEL_READINESS_GATE)
            .is_some_and(|value| value == "true");
    if !gated {
        eprintln!(
            "Warning: the pods of {} have no {} readiness gate: --unready-grace cannot take them out of Service endpoints before the kill (label the pod template {}: \"true\")",
            target_name(target),
            keys::POD_CONDITION_KRUISE_POD_READY,
            keys::LABEL_READINESS_GATE
        );
    }
}

pub(crate) async fn get(
    api: &Api<ContainerRecreateRollout>,
    namespace: &str,
    name: &str,
) -> Result<ContainerRecreateRollout, Error> {
    api.get(name)
        .await
        .map_err(|error| not_found(error, namespace, name))
}

fn not_found(error: kube::Error, namespace: &str, name: &str) -> Error {
    match error {
        kube::Error::Api(status) if status.code == 404 => Error::RolloutNotFound {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        },
        other => other.into(),
    }
}

/// A spec field `pause`, `resume` and `abort` set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flag {
    Paused(bool),
    Aborted,
}

impl Flag {
    fn verb(self) -> &'static str {
        match self {
            Self::Paused(true) => "paused",
            Self::Paused(false) => "resumed",
            Self::Aborted => "aborted",
        }
    }

    fn patch(self) -> serde_json::Value {
        match self {
            Self::Paused(paused) => serde_json::json!({"paused": paused}),
            Self::Aborted => serde_json::json!({"aborted": true}),
        }
    }
}

async fn set_flag(
    api: &Api<ContainerRecreateRollout>,
    namespace: &str,
    name: &str,
    flag: Flag,
    output: Option<OutputFormat>,
) -> Result<Exit, Error> {
    let verb = flag.verb();
    let rollout = get(api, namespace, name).await?;
    if let Some(phase) = rollout.phase().filter(|phase| phase.is_finished()) {
        return Err(Error::RolloutFinished {
            name: name.to_owned(),
            phase: phase.as_str().to_owned(),
            verb,
        });
    }
    // Preconditioned on the version read: a rollout that finished since is not written.
    let patched = api
        .patch(
            name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(serde_json::json!({
                "metadata": {"resourceVersion": rollout.resource_version()},
                "spec": flag.patch(),
            })),
        )
        .await
        .map_err(|error| not_found(error, namespace, name))?;
    match output {
        Some(format) => crate::output::print(&crate::output::object(&patched, format)?)?,
        None if flag == Flag::Aborted => println!(
            "containerrecreaterollout/{name} aborted: no pod starts; requests not started are deleted, those under way finish (kubectl crr rollout status {name})"
        ),
        None => println!("containerrecreaterollout/{name} {verb}"),
    }
    Ok(Exit::Success)
}

/// Follows a rollout until it ends (or `timeout`, exit 4): a progress line per change, redrawn
/// in place on a terminal.
pub(crate) async fn follow(
    api: &Api<ContainerRecreateRollout>,
    rollout: ContainerRecreateRollout,
    timeout: Option<Duration>,
) -> Result<Exit, Error> {
    let terminal = std::io::stdout().is_terminal();
    // On a terminal the line is redrawn in place by indicatif, over every row it wraps to, with
    // the pods in flight listed under it.
    let live = if terminal {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
        bar.set_style(ProgressStyle::with_template("{msg}").expect("a fixed template"));
        bar
    } else {
        ProgressBar::hidden()
    };
    let name = rollout.name_any();
    let mut last = String::new();
    let mut current = rollout.clone();
    let mut in_flight = crate::rollout_pods::InFlight::default();
    let mut show = |rollout: &ContainerRecreateRollout,
                    in_flight: &crate::rollout_pods::InFlight| {
        let line = progress_line(rollout);
        if terminal {
            let finished = exit_code(rollout).is_some();
            let mut lines = vec![line];
            if !finished {
                lines.extend(in_flight.lines());
            }
            let frame = lines.join("\n");
            if frame != last {
                live.set_message(frame.clone());
                last = frame;
            }
        } else if line != last {
            println!("{line}");
            last = line;
        }
        exit_code(rollout)
    };
    if let Some(exit) = show(&rollout, &in_flight) {
        live.finish();
        return Ok(exit);
    }
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let rollouts = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects()
        .map(|change| Change::Rollout(Box::new(change)));
    // The requests are watched for the live list only: not when printing lines.
    let requests = if terminal {
        let requests: Api<ContainerRecreateRequest> = Api::namespaced(
            api.clone().into_client(),
            &rollout.namespace().unwrap_or_default(),
        );
        let mine = watcher::Config::default().labels(&format!("{}={name}", keys::LABEL_ROLLOUT));
        watcher(requests, mine)
            .default_backoff()
            .map(|event| Change::Request(Box::new(event)))
            .boxed()
    } else {
        futures::stream::pending().boxed()
    };
    let mut changes = futures::stream::select(rollouts.boxed(), requests);
    let watching = async {
        while let Some(change) = changes.next().await {
            match change {
                Change::Rollout(change) => match *change {
                    Ok(rollout) => {
                        current = rollout;
                        if let Some(exit) = show(&current, &in_flight) {
                            return Ok(exit);
                        }
                    }
                    Err(error) if crate::follow::is_permanent(&error) => {
                        return Err(Error::Watch {
                            what: format!("containerrecreaterollout/{name}"),
                            message: error.to_string(),
                        });
                    }
                    Err(_) => {}
                },
                Change::Request(event) => {
                    // The list of pods in flight is an aid: without it (no right to list
                    // requests, say) the bar goes on.
                    if let Ok(event) = *event {
                        in_flight.apply(event);
                        show(&current, &in_flight);
                    }
                }
            }
        }
        Err(Error::Watch {
            what: format!("containerrecreaterollout/{name}"),
            message: "the watch ended".to_owned(),
        })
    };
    let result = match timeout {
        Some(timeout) => tokio::time::timeout(timeout, watching)
            .await
            .unwrap_or(Ok(Exit::TimedOut)),
        None => watching.await,
    };
    live.finish();
    if result.as_ref().is_ok_and(|exit| *exit == Exit::TimedOut) {
        eprintln!("timed out: the rollout goes on (kubectl crr rollout status {name})");
    }
    result
}

/// What the follow loop hears: the rollout changed, or one of its requests.
enum Change {
    Rollout(Box<Result<ContainerRecreateRollout, watcher::Error>>),
    Request(Box<Result<watcher::Event<ContainerRecreateRequest>, watcher::Error>>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command, Limit};
    use clap::Parser as _;

    fn create_args(args: &[&str]) -> RolloutCreateArgs {
        let cli = Cli::try_parse_from(
            ["kubectl-crr", "rollout"]
                .into_iter()
                .chain(args.iter().copied()),
        )
        .expect("valid arguments");
        match cli.command {
            Command::Rollout(RolloutArgs {
                action: None,
                create,
            }) => create,
            other => panic!("not a rollout create: {other:?}"),
        }
    }

    #[test]
    fn workloads_are_read_by_kubectl_short_names() {
        for (text, kind) in [
            ("deploy/web", "Deployment"),
            ("deployments/web", "Deployment"),
            ("sts/web", "StatefulSet"),
            ("StatefulSet/web", "StatefulSet"),
            ("ds/web", "DaemonSet"),
            ("rs/web", "ReplicaSet"),
        ] {
            let workload = workload_ref(text).expect(text);
            assert_eq!(
                (workload.kind.as_str(), workload.name.as_str()),
                (kind, "web")
            );
            assert_eq!(workload.api_version, "apps/v1");
        }
        for bad in ["web", "job/web", "deploy/", "pod/web"] {
            assert!(workload_ref(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn a_set_based_selector_is_the_rollouts_target() {
        let rollout = build(
            "shop",
            &create_args(&["-l", "app=web,env in (prod)", "-c", "app"]),
        )
        .expect("a rollout");
        let selector = rollout.spec.target.selector.expect("a selector");
        assert_eq!(selector.match_labels.map(|labels| labels.len()), Some(1));
        assert_eq!(
            selector
                .match_expressions
                .map(|expressions| expressions.len()),
            Some(1)
        );
        assert_eq!(rollout.metadata.generate_name.as_deref(), Some("pods-app-"));
        let error = build("shop", &create_args(&["-l", "app web", "-c", "app"]))
            .expect_err("not a selector");
        assert!(error.to_string().starts_with("invalid -l"), "{error}");
    }

    #[test]
    fn the_rollout_carries_every_flag() {
        let args = create_args(&[
            "deploy/web",
            "-c",
            "app",
            "-c",
            "proxy",
            "--max-unavailable",
            "25%",
            "--no-budgets",
            "--max-failed-pods",
            "2",
            "--unready-grace",
            "5s",
            "--deadline",
            "2m",
            "--ttl",
            "1h",
        ]);
        assert_eq!(args.max_unavailable, Limit::Percent(25));
        let rollout = build("shop", &args).expect("a rollout");
        assert_eq!(rollout.metadata.generate_name.as_deref(), Some("web-app-"));
        assert_eq!(rollout.metadata.namespace.as_deref(), Some("shop"));
        let spec = rollout.spec;
        assert_eq!(spec.containers, ["app", "proxy"]);
        assert_eq!(spec.respect_disruption_budgets, Some(false));
        assert_eq!(spec.max_failed_pods, Some(2));
        assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
        let strategy = spec.recreate_strategy.expect("a strategy");
        assert_eq!(strategy.request.unready_grace_period_seconds, Some(5));
        assert_eq!(strategy.active_deadline_seconds, Some(120));
        assert_eq!(
            serde_json::to_value(&spec.max_unavailable).unwrap(),
            serde_json::json!("25%")
        );
    }

    #[test]
    fn a_bad_rollout_is_refused_before_the_cluster_is_asked() {
        let named = create_args(&["deploy/web", "-c", "app", "--name", &"r".repeat(64)]);
        assert!(build("shop", &named).is_err());
        let twice = create_args(&["deploy/web", "-c", "app", "-c", "app"]);
        let error = build("shop", &twice).expect_err("a container named twice");
        assert!(error.to_string().contains("named twice"), "{error}");
        let long = create_args(&[&format!("deploy/{}", "w".repeat(80)), "-c", "app"]);
        let prefix = build("shop", &long)
            .expect("a rollout")
            .metadata
            .generate_name
            .unwrap();
        assert!(
            prefix.len() + 5 <= crr_crds::rollout::MAX_NAME_LENGTH,
            "{prefix}"
        );
    }

    #[test]
    fn verbs_parse_as_subcommands_and_need_no_container() {
        for (words, expected) in [
            (
                ["rollout", "pause", "r1"],
                RolloutAction::Pause {
                    name: "r1".into(),
                    output: None,
                },
            ),
            (
                ["rollout", "resume", "r1"],
                RolloutAction::Resume {
                    name: "r1".into(),
                    output: None,
                },
            ),
            (
                ["rollout", "abort", "r1"],
                RolloutAction::Abort {
                    name: "r1".into(),
                    output: None,
                },
            ),
        ] {
            let cli = Cli::try_parse_from(std::iter::once("kubectl-crr").chain(words))
                .expect("valid arguments");
            match cli.command {
                Command::Rollout(RolloutArgs {
                    action: Some(action),
                    ..
                }) => {
                    assert_eq!(action, expected);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            action(&["rollout", "retry", "r1", "--name", "r2", "-w"]),
            RolloutAction::Retry {
                name: "r1".into(),
                new_name: Some("r2".into()),
                wait: true,
                timeout: None,
                output: None,
            }
        );
        assert!(Cli::try_parse_from(["kubectl-crr", "rollout"]).is_err());
        // -c defaults, as `recreate`'s does: to the pods' containers, read when it runs.
        assert!(create_args(&["deploy/web"]).containers.is_empty());
    }

    fn action(words: &[&str]) -> RolloutAction {
        let cli = Cli::try_parse_from(std::iter::once("kubectl-crr").chain(words.iter().copied()))
            .expect("valid arguments");
        match cli.command {
            Command::Rollout(RolloutArgs {
                action: Some(action),
                ..
            }) => action,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn status_waits_unless_told_not_to_and_takes_a_workload() {
        let status = |words: &[&str]| match action(words) {
            RolloutAction::Status { target, watch, .. } => (target, watch),
            other => panic!("{other:?}"),
        };
        assert_eq!(status(&["rollout", "status", "r1"]), ("r1".into(), true));
        assert_eq!(
            status(&["rollout", "status", "deploy/web", "--watch=false"]),
            ("deploy/web".into(), false)
        );
        assert_eq!(
            status(&["rollout", "status", "r1", "-w"]),
            ("r1".into(), true)
        );
        assert_eq!(
            status(&["rollout", "status", "r1", "--wait"]),
            ("r1".into(), true)
        );
        assert!(
            Cli::try_parse_from(["kubectl-crr", "rollout", "status", "r1", "--watch=maybe"])
                .is_err()
        );
    }

    #[test]
    fn list_and_history_are_verbs_with_kubectls_flags() {
        assert_eq!(
            action(&["rollout", "list", "-A", "-w", "-o", "name"]),
            RolloutAction::List {
                workload: None,
                all_namespaces: true,
                watch: true,
                output: Some(OutputFormat::Name),
            }
        );
        assert_eq!(
            action(&["rollout", "list", "sts/db"]),
            RolloutAction::List {
                workload: Some("sts/db".into()),
                all_namespaces: false,
                watch: false,
                output: None,
            }
        );
        assert_eq!(
            action(&["rollout", "history", "deploy/web", "-o", "yaml"]),
            RolloutAction::History {
                workload: "deploy/web".into(),
                output: Some(OutputFormat::Yaml),
            }
        );
        assert!(Cli::try_parse_from(["kubectl-crr", "rollout", "history"]).is_err());
    }

    fn with_status(
        phase: &str,
        recreated: i32,
        failed: i32,
        target: i32,
    ) -> ContainerRecreateRollout {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
            "metadata": {"name": "web-app-x1"},
            "spec": {"target": {"selector": {"matchLabels": {"app": "web"}}}, "containers": ["app"]},
            "status": {"phase": phase, "recreated": recreated, "failed": failed, "targetPods": target,
                       "inFlight": 1,
                       "conditions": [{"type": "Progressing", "status": "True", "reason": "WaitingForBudget",
                                       "message": "pod web-3 waits: PodDisruptionBudget web allows no more disruptions",
                                       "lastTransitionTime": "2026-11-27T00:00:00Z"}]},
        }))
        .expect("a rollout")
    }

    #[test]
    fn progress_shows_a_bar_the_counts_and_the_wait() {
        let line = progress_line(&with_status("Progressing", 2, 0, 8));
        assert_eq!(
            line,
            "web-app-x1: Progressing [#####...............] 2/8 recreated, 1 in flight, 0 failed; pod web-3 waits: PodDisruptionBudget web allows no more disruptions"
        );
        let mut skipping = with_status("Completed", 1, 0, 1);
        if let Some(status) = skipping.status.as_mut() {
            status.skipped = 1;
            status.in_flight = 0;
            status.conditions.clear();
        }
        assert_eq!(
            progress_line(&skipping),
            "web-app-x1: Completed [####################] 1/1 recreated, 0 in flight, 0 failed, 1 skipped (not running)"
        );
        assert_eq!(exit_code(&with_status("Progressing", 2, 0, 8)), None);
        assert_eq!(
            exit_code(&with_status("Completed", 8, 0, 8)),
            Some(Exit::Success)
        );
        assert_eq!(
            exit_code(&with_status("Completed", 7, 1, 8)),
            Some(Exit::RecreateFailed)
        );
        assert_eq!(
            exit_code(&with_status("Failed", 1, 1, 8)),
            Some(Exit::RecreateFailed)
        );
        assert_eq!(
            exit_code(&with_status("Aborted", 3, 0, 8)),
            Some(Exit::RecreateFailed),
            "an aborted rollout did not recreate every pod"
        );
    }
}
