//! The shells of the subcommands (`rollout` is `crate::rollout`'s): read from the API, call the pure modules, print.
//! Exit codes: 0 done, 1 error (before or while talking to the cluster), 2 usage (clap),
//! 3 a container was not recreated, 4 the timeout passed.

use std::io::IsTerminal as _;

use crr_crds::v1beta1::ContainerRecreateRequest;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};

use crate::cli::{
    Cli, Command, DescribeArgs, DryRun, GetArgs, RecreateArgs, RolloutAction, RolloutArgs,
};
use crate::error::Error;
use crate::follow::{self, Plan, Report};
use crate::kubeconfig::connect;
use crate::output::print;
use crate::render::{LineReporter, Reporter, TerminalReporter};
use crate::request::{self, RecreateOptions};
use crate::{completion, describe, output, table};

pub use crate::exit::Exit;

/// Runs a parsed command line.
pub async fn execute(cli: Cli) -> Result<Exit, Error> {
    if let Command::Completion(args) = &cli.command {
        print(&completion::script(args.shell))?;
        return Ok(Exit::Success);
    }
    if let Command::Recreate(args) = &cli.command {
        check_recreate_flags(args)?;
    }
    if let Command::Rollout(args) = &cli.command {
        check_rollout_flags(args)?;
    }
    let (client, namespace) = connect(&cli.connection).await?;
    match cli.command {
        Command::Recreate(args) => recreate(client, &namespace, &args).await,
        Command::Get(args) => get(client, &namespace, &args).await,
        Command::Describe(args) => describe_command(client, &namespace, &args).await,
        Command::Rollout(RolloutArgs {
            action:
                Some(RolloutAction::Retry {
                    name,
                    new_name,
                    wait,
                    timeout,
                    output,
                }),
            ..
        }) => {
            crate::rollout_retry::execute(
                client,
                &namespace,
                &name,
                new_name.as_deref(),
                wait,
                timeout,
                output,
            )
            .await
        }
        Command::Rollout(args) => crate::rollout::execute(client, &namespace, &args).await,
        Command::Triggers(args) => crate::triggers::execute(client, &namespace, &args).await,
        Command::Completion(_) => unreachable!("answered above without a cluster"),
    }
}

/// A rollout's flags checked before the cluster is asked: a workload the verb cannot act on, a
/// selector or a rollout the webhook would refuse (its containers aside when -c is left to
/// default from the pods).
pub fn check_rollout_flags(args: &RolloutArgs) -> Result<(), Error> {
    match &args.action {
        None => {
            let mut create = args.create.clone();
            if create.containers.is_empty() {
                create.containers.push("checked-later".to_owned());
            }
            crate::rollout::build("default", &create).map(|_| ())
        }
        Some(RolloutAction::Restart { workload, .. }) => {
            crate::restart::RestartTarget::parse(workload).map(|_| ())
        }
        Some(RolloutAction::Status { target, .. }) if target.contains('/') => {
            crate::workload::workload_ref(target).map(|_| ())
        }
        Some(RolloutAction::History { workload, .. })
        | Some(RolloutAction::List {
            workload: Some(workload),
            ..
        }) => crate::workload::workload_ref(workload).map(|_| ()),
        Some(_) => Ok(()),
    }
}

/// Flag combinations clap cannot express.
pub fn check_recreate_flags(args: &RecreateArgs) -> Result<(), Error> {
    if args.output.is_some() && args.follows() {
        return Err(Error::InvalidFlag {
            flag: "-o",
            message: "prints created requests; it cannot be combined with --wait, --timeout or \
                      -l (use it with --dry-run, or `kubectl crr get NAME -o yaml` afterwards)"
                .to_owned(),
        });
    }
    RecreateOptions::from(args).validate()
}

fn reporter() -> Box<dyn Reporter> {
    if std::io::stdout().is_terminal() {
        Box::new(TerminalReporter::new(
            indicatif::ProgressDrawTarget::stdout(),
        ))
    } else {
        Box::new(LineReporter::new(std::io::stdout()))
    }
}

async fn recreate(client: Client, namespace: &str, args: &RecreateArgs) -> Result<Exit, Error> {
    let options = RecreateOptions::from(args);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let requests = match (&args.pod, &args.selector) {
        (Some(name), _) => {
            let pod = pods
                .get_opt(name)
                .await?
                .ok_or_else(|| Error::PodNotFound {
                    namespace: namespace.to_owned(),
                    name: name.clone(),
                })?;
            let built = request::build(&pod, &options)?;
            warn(&request::warnings(&pod, &built));
            vec![built]
        }
        (None, Some(selector)) => {
            let mut matching = pods
                .list(&ListParams::default().labels(selector))
                .await?
                .items;
            if matching.is_empty() {
                return Err(Error::NoPodsMatch {
                    namespace: namespace.to_owned(),
                    selector: selector.clone(),
                });
            }
            matching.sort_by_key(|pod| pod.name_any());
            let mut requests = Vec::new();
            for pod in &matching {
                if let Some(reason) = request::pod_not_recreatable(pod) {
                    eprintln!("skipping pod {}: {reason}", pod.name_any());
                    continue;
                }
                let built = request::build(pod, &options)?;
                warn(&request::warnings(pod, &built));
                requests.push(built);
            }
            if requests.is_empty() {
                return Err(Error::NoPodsMatch {
                    namespace: namespace.to_owned(),
                    selector: format!("{selector} (none of them running)"),
                });
            }
            requests
        }
        (None, None) => unreachable!("clap requires POD or -l"),
    };
    let api: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), namespace);

    if let Some(dry_run) = args.dry_run {
        for request in &requests {
            let (object, suffix) = match dry_run {
                DryRun::Client => (request.clone(), "(dry run)"),
                DryRun::Server => (
                    follow::create(&api, request, true).await?,
                    "(server dry run)",
                ),
            };
            match args.output {
                Some(format) => print(&output::object(&object, format)?)?,
                None => print(&format!(
                    "containerrecreaterequest/{} created {suffix}\n",
                    object
                        .metadata
                        .name
                        .clone()
                        .or_else(|| object
                            .metadata
                            .generate_name
                            .clone()
                            .map(|n| n + "<generated>"))
                        .unwrap_or_default()
                ))?,
            }
        }
        return Ok(Exit::Success);
    }

    if !args.follows() {
        for request in &requests {
            let created = follow::create(&api, request, false).await?;
            match args.output {
                Some(format) => print(&output::object(&created, format)?)?,
                None => print(&format!(
                    "containerrecreaterequest/{} created\n",
                    created.name_any()
                ))?,
            }
        }
        return Ok(Exit::Success);
    }

    // At most every pod at once.
    let max_unavailable = args
        .max_unavailable
        .resolve(requests.len())
        .min(requests.len().max(1));
    let batch = args.selector.is_some();
    let plan = Plan {
        namespace: namespace.to_owned(),
        requests,
        max_unavailable,
        wait_for_ready: batch,
        pod_selector: args.selector.clone(),
        timeout: args.timeout,
    };
    let mut reporter = reporter();
    let report = follow::run(client, plan, reporter.as_mut()).await?;
    Ok(finish(&report, batch))
}

/// Prints what the admission webhook will warn about, as kubectl prints admission warnings.
fn warn(warnings: &[String]) {
    for warning in warnings {
        eprintln!("Warning: {}", crate::printable::printable(warning));
    }
}

fn finish(report: &Report, batch: bool) -> Exit {
    let lines = follow::summary_lines(report);
    let succeeded = report.succeeded();
    if batch || !succeeded {
        for line in &lines {
            if succeeded {
                println!("{line}");
            } else {
                eprintln!("{line}");
            }
        }
    }
    if succeeded {
        Exit::Success
    } else if report.timed_out {
        Exit::TimedOut
    } else {
        Exit::RecreateFailed
    }
}

async fn get(client: Client, namespace: &str, args: &GetArgs) -> Result<Exit, Error> {
    let api: Api<ContainerRecreateRequest> = if args.all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, namespace)
    };
    let mut params = ListParams::default();
    if let Some(selector) = &args.selector {
        params = params.labels(selector);
    }
    let wanted = |crr: &ContainerRecreateRequest| {
        args.names.is_empty() || args.names.iter().any(|name| *name == crr.name_any())
    };
    if args.watch {
        return watch(api, params, args, wanted).await;
    }
    let crrs: Vec<ContainerRecreateRequest> = if args.names.is_empty() {
        api.list(&params).await?.items
    } else {
        let mut found = Vec::new();
        for name in &args.names {
            found.push(
                api.get_opt(name)
                    .await?
                    .ok_or_else(|| Error::RequestNotFound {
                        namespace: namespace.to_owned(),
                        name: name.clone(),
                    })?,
            );
        }
        found
    };
    match args.output {
        Some(format) if args.names.len() == 1 && crrs.len() == 1 => {
            print(&output::object(&crrs[0], format)?)?;
        }
        Some(format) => print(&output::list(&crrs, format)?)?,
        None if crrs.is_empty() => {
            if args.all_namespaces {
                eprintln!("No resources found");
            } else {
                eprintln!("No resources found in {namespace} namespace.");
            }
        }
        None => print(&table::table(
            &crrs,
            args.all_namespaces,
            jiff::Timestamp::now(),
        ))?,
    }
    Ok(Exit::Success)
}

/// `get -w`: the current requests, then every change, until interrupted.
async fn watch(
    api: Api<ContainerRecreateRequest>,
    params: ListParams,
    args: &GetArgs,
    wanted: impl Fn(&ContainerRecreateRequest) -> bool,
) -> Result<Exit, Error> {
    let mut config = watcher::Config::default();
    if let Some(labels) = &params.label_selector {
        config = config.labels(labels);
    }
    if let [name] = args.names.as_slice() {
        config = config.fields(&format!("metadata.name={name}"));
    }
    let mut events = Box::pin(watcher(api, config).default_backoff());
    let mut initial: Vec<ContainerRecreateRequest> = Vec::new();
    let mut widths: Vec<usize> = Vec::new();
    let mut listed = false;
    let show = |crr: &ContainerRecreateRequest, widths: &mut Vec<usize>| -> Result<(), Error> {
        match args.output {
            Some(format) => print(&output::streamed(crr, format)?),
            None => {
                let row = table::row(crr, args.all_namespaces, jiff::Timestamp::now());
                table::widen(widths, &row);
                print(&table::format_row(&row, widths))
            }
        }
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => initial.clear(),
            Ok(watcher::Event::InitApply(crr)) => {
                if wanted(&crr) {
                    initial.push(crr);
                }
            }
            Ok(watcher::Event::InitDone) => {
                if !listed && args.output.is_none() {
                    let mut rows = vec![table::header(args.all_namespaces)];
                    let now = jiff::Timestamp::now();
                    rows.extend(
                        initial
                            .iter()
                            .map(|crr| table::row(crr, args.all_namespaces, now)),
                    );
                    widths = table::column_widths(&rows);
                    print(&table::format_row(&rows[0], &widths))?;
                }
                for crr in initial.drain(..) {
                    show(&crr, &mut widths)?;
                }
                listed = true;
            }
            Ok(watcher::Event::Apply(crr) | watcher::Event::Delete(crr)) => {
                if wanted(&crr) {
                    show(&crr, &mut widths)?;
                }
            }
            Err(error) => {
                let message = error.to_string();
                if follow::is_permanent(&error) {
                    return Err(Error::Watch {
                        what: "containerrecreaterequests".to_owned(),
                        message,
                    });
                }
                eprintln!("watch interrupted, retrying: {message}");
            }
        }
    }
    Ok(Exit::Success)
}

async fn describe_command(
    client: Client,
    namespace: &str,
    args: &DescribeArgs,
) -> Result<Exit, Error> {
    let api: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), namespace);
    let crr = api
        .get_opt(&args.name)
        .await?
        .ok_or_else(|| Error::RequestNotFound {
            namespace: namespace.to_owned(),
            name: args.name.clone(),
        })?;
    if let Some(format) = args.output {
        print(&output::object(&crr, format)?)?;
        return Ok(Exit::Success);
    }
    let events_api: Api<Event> = Api::namespaced(client, namespace);
    let mut events = Vec::new();
    if let Some(uid) = crr.uid() {
        match events_api
            .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
            .await
        {
            Ok(list) => events = list.items,
            Err(error) => eprintln!("cannot list events: {}", Error::from(error)),
        }
    }
    print(&describe::describe(&crr, &events, jiff::Timestamp::now()))?;
    Ok(Exit::Success)
}
