//! `kubectl crr rollout list` and `rollout history`, and the rollout `rollout status KIND/NAME`
//! means: the tables and the choices are pure functions here with their tests; the API calls
//! are the `async` functions at the bottom.

use crr_crds::keys;
use crr_crds::rollout::{ContainerRecreateRollout, WorkloadRef, target_name};
use futures::StreamExt as _;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};

use crate::cli::OutputFormat;
use crate::error::Error;
use crate::exit::Exit;
use crate::table::{age, format_row, format_rows};

/// Whether `rollout` restarts `workload` (kind and name; the API version is not compared, as
/// `deploy/web` names no version).
pub fn targets(rollout: &ContainerRecreateRollout, workload: &WorkloadRef) -> bool {
    rollout
        .spec
        .target
        .workload_ref
        .as_ref()
        .is_some_and(|target| target.kind == workload.kind && target.name == workload.name)
}

/// The rollouts of `workload` among `rollouts`, oldest first (by creation, then name).
pub fn of_workload<'a>(
    rollouts: &'a [ContainerRecreateRollout],
    workload: &WorkloadRef,
) -> Vec<&'a ContainerRecreateRollout> {
    let mut found: Vec<_> = rollouts
        .iter()
        .filter(|rollout| targets(rollout, workload))
        .collect();
    found.sort_by(|a, b| {
        a.created()
            .cmp(&b.created())
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    found
}

/// The unfinished rollouts of `workload`: another one started beside them restarts the same
/// pods twice.
pub fn unfinished_of<'a>(
    rollouts: &'a [ContainerRecreateRollout],
    workload: &WorkloadRef,
) -> Vec<&'a ContainerRecreateRollout> {
    of_workload(rollouts, workload)
        .into_iter()
        .filter(|rollout| !rollout.phase().is_some_and(|phase| phase.is_finished()))
        .collect()
}

/// How a rollout started: by hand, by the trigger its label names, or as a retry of another
/// (`kubectl crr rollout retry`).
pub fn origin(rollout: &ContainerRecreateRollout) -> String {
    if let Some(trigger) = rollout.labels().get(keys::LABEL_ROLLOUT_TRIGGER) {
        return crate::printable::printable(trigger);
    }
    match rollout.annotations().get(keys::ANNOTATION_RETRY_OF) {
        Some(old) => crate::printable::printable(&format!("retry of {old}")),
        None => "manual".to_owned(),
    }
}

fn phase(rollout: &ContainerRecreateRollout) -> String {
    rollout
        .status
        .as_ref()
        .and_then(|status| status.phase.clone())
        .map_or_else(
            || "Pending".to_owned(),
            |phase| crate::printable::printable(&phase),
        )
}

fn recreated(rollout: &ContainerRecreateRollout) -> String {
    let status = rollout.status.clone().unwrap_or_default();
    format!("{}/{}", status.recreated, status.target_pods)
}

fn failed(rollout: &ContainerRecreateRollout) -> String {
    rollout
        .status
        .as_ref()
        .map_or(0, |status| status.failed)
        .to_string()
}

/// The `rollout list` header.
pub fn list_header(all_namespaces: bool) -> Vec<String> {
    let mut cells = Vec::new();
    if all_namespaces {
        cells.push("NAMESPACE");
    }
    cells.extend(["NAME", "TARGET", "PHASE", "RECREATED", "FAILED", "AGE"]);
    cells.into_iter().map(str::to_owned).collect()
}

/// One `rollout list` row.
pub fn list_row(
    rollout: &ContainerRecreateRollout,
    all_namespaces: bool,
    now: jiff::Timestamp,
) -> Vec<String> {
    let mut cells = Vec::new();
    if all_namespaces {
        cells.push(rollout.namespace().unwrap_or_default());
    }
    cells.extend([
        rollout.name_any(),
        crate::printable::printable(&target_name(&rollout.spec.target)),
        phase(rollout),
        recreated(rollout),
        failed(rollout),
        age(rollout, now),
    ]);
    cells
}

/// The `rollout history` table of one workload's rollouts, oldest first: REVISION counts from 1
/// as `kubectl rollout history` does.
pub fn history_table(rollouts: &[&ContainerRecreateRollout], now: jiff::Timestamp) -> String {
    let mut rows = vec![
        [
            "REVISION",
            "NAME",
            "ORIGIN",
            "CONTAINERS",
            "PHASE",
            "RECREATED",
            "FAILED",
            "AGE",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for (index, rollout) in rollouts.iter().enumerate() {
        rows.push(vec![
            (index + 1).to_string(),
            rollout.name_any(),
            origin(rollout),
            crate::printable::printable(&rollout.spec.containers.join(",")),
            phase(rollout),
            recreated(rollout),
            failed(rollout),
            age(*rollout, now),
        ]);
    }
    format_rows(&rows)
}

/// The newest rollout of `workload`, for `rollout status KIND/NAME`.
pub async fn newest(
    api: &Api<ContainerRecreateRollout>,
    namespace: &str,
    workload: &WorkloadRef,
) -> Result<ContainerRecreateRollout, Error> {
    let rollouts = api.list(&ListParams::default()).await?.items;
    of_workload(&rollouts, workload)
        .last()
        .map(|rollout| (*rollout).clone())
        .ok_or_else(|| Error::NoRolloutOf {
            namespace: namespace.to_owned(),
            workload: format!("{}/{}", workload.kind.to_ascii_lowercase(), workload.name),
        })
}

/// `rollout list [KIND/NAME] [-A] [-w] [-o]`.
pub async fn list(
    client: Client,
    namespace: &str,
    workload: Option<&WorkloadRef>,
    all_namespaces: bool,
    watch: bool,
    output: Option<OutputFormat>,
) -> Result<Exit, Error> {
    let api: Api<ContainerRecreateRollout> = if all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, namespace)
    };
    let wanted = |rollout: &ContainerRecreateRollout| workload.is_none_or(|w| targets(rollout, w));
    let mut rollouts: Vec<ContainerRecreateRollout> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|rollout| wanted(rollout))
        .collect();
    rollouts.sort_by_key(|rollout| (rollout.namespace(), rollout.name_any()));
    let now = jiff::Timestamp::now();
    let mut rows = vec![list_header(all_namespaces)];
    rows.extend(
        rollouts
            .iter()
            .map(|rollout| list_row(rollout, all_namespaces, now)),
    );
    let mut widths = crate::table::column_widths(&rows);
    match output {
        Some(format) if watch => {
            for rollout in &rollouts {
                crate::output::print(&crate::output::streamed(rollout, format)?)?;
            }
        }
        Some(format) => crate::output::print(&crate::output::list(&rollouts, format)?)?,
        None if rollouts.is_empty() && !watch => {
            if all_namespaces {
                eprintln!("No resources found");
            } else {
                eprintln!("No resources found in {namespace} namespace.");
            }
        }
        None => crate::output::print(&format_rows(&rows))?,
    }
    if !watch {
        return Ok(Exit::Success);
    }
    // The changes after the list, a row (or an object) each. The watch starts with a list of
    // its own: what was printed already, at the same resourceVersion, is not printed again.
    let mut printed: std::collections::HashMap<String, String> = rollouts
        .iter()
        .filter_map(|rollout| Some((rollout.uid()?, rollout.resource_version()?)))
        .collect();
    let mut changes = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(change) = changes.next().await {
        match change {
            Ok(rollout) if wanted(&rollout) => {
                let (uid, version) = (
                    rollout.uid().unwrap_or_default(),
                    rollout.resource_version(),
                );
                if version.is_some() && printed.get(&uid) == version.as_ref() {
                    continue;
                }
                printed.insert(uid, version.unwrap_or_default());
                match output {
                    Some(format) => {
                        crate::output::print(&crate::output::streamed(&rollout, format)?)?;
                    }
                    None => {
                        let row = list_row(&rollout, all_namespaces, jiff::Timestamp::now());
                        crate::table::widen(&mut widths, &row);
                        crate::output::print(&format_row(&row, &widths))?;
                    }
                }
            }
            Ok(_) => {}
            Err(error) if crate::follow::is_permanent(&error) => {
                return Err(Error::Watch {
                    what: "containerrecreaterollouts".to_owned(),
                    message: error.to_string(),
                });
            }
            Err(error) => eprintln!("watch interrupted, retrying: {error}"),
        }
    }
    Ok(Exit::Success)
}

/// `rollout history KIND/NAME [-o]`.
pub async fn history(
    client: Client,
    namespace: &str,
    workload: &WorkloadRef,
    output: Option<OutputFormat>,
) -> Result<Exit, Error> {
    let api: Api<ContainerRecreateRollout> = Api::namespaced(client, namespace);
    let rollouts = api.list(&ListParams::default()).await?.items;
    let found = of_workload(&rollouts, workload);
    match output {
        Some(format) => {
            let owned: Vec<ContainerRecreateRollout> = found.into_iter().cloned().collect();
            crate::output::print(&crate::output::list(&owned, format)?)?;
        }
        None if found.is_empty() => eprintln!(
            "No rollouts of {}/{} in {namespace} namespace.",
            workload.kind.to_ascii_lowercase(),
            workload.name
        ),
        None => crate::output::print(&history_table(&found, jiff::Timestamp::now()))?,
    }
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout(
        name: &str,
        created: &str,
        workload: &str,
        phase: Option<&str>,
        trigger: Option<&str>,
    ) -> ContainerRecreateRollout {
        let mut labels = serde_json::Map::new();
        if let Some(trigger) = trigger {
            labels.insert(keys::LABEL_ROLLOUT_TRIGGER.to_owned(), json!(trigger));
        }
        serde_json::from_value(json!({
            "apiVersion": "crr.dev/v1alpha1",
            "kind": "ContainerRecreateRollout",
            "metadata": {"name": name, "namespace": "shop", "creationTimestamp": created,
                         "labels": labels},
            "spec": {
                "target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workload}},
                "containers": ["app", "sidecar"],
            },
            "status": phase.map(|phase| json!({
                "phase": phase, "targetPods": 4, "recreated": 3, "failed": 1,
            })),
        }))
        .unwrap()
    }

    fn web() -> WorkloadRef {
        crate::workload::workload_ref("deploy/web").unwrap()
    }

    #[test]
    fn a_workloads_rollouts_come_oldest_first_and_unfinished_ones_are_told_apart() {
        let rollouts = [
            rollout(
                "web-b",
                "2026-12-02T10:00:00Z",
                "web",
                Some("Progressing"),
                None,
            ),
            rollout("api-a", "2026-12-02T08:00:00Z", "api", None, None),
            rollout(
                "web-a",
                "2026-12-02T09:00:00Z",
                "web",
                Some("Completed"),
                None,
            ),
            rollout(
                "web-c",
                "2026-12-02T11:00:00Z",
                "web",
                None,
                Some("schedule"),
            ),
        ];
        let names = |found: Vec<&ContainerRecreateRollout>| -> Vec<String> {
            found.iter().map(|rollout| rollout.name_any()).collect()
        };
        assert_eq!(
            names(of_workload(&rollouts, &web())),
            ["web-a", "web-b", "web-c"]
        );
        assert_eq!(names(unfinished_of(&rollouts, &web())), ["web-b", "web-c"]);
        let statefulset = crate::workload::workload_ref("sts/web").unwrap();
        assert!(of_workload(&rollouts, &statefulset).is_empty());
    }

    #[test]
    fn the_list_shows_target_phase_counts_and_age() {
        let now: jiff::Timestamp = "2026-12-02T10:05:00Z".parse().unwrap();
        let row = list_row(
            &rollout("web-b", "2026-12-02T10:00:00Z", "web", Some("Failed"), None),
            true,
            now,
        );
        assert_eq!(
            row,
            [
                "shop",
                "web-b",
                "Deployment/web",
                "Failed",
                "3/4",
                "1",
                "5m"
            ]
        );
        let pending = list_row(
            &rollout("web-c", "2026-12-02T10:04:00Z", "web", None, None),
            false,
            now,
        );
        assert_eq!(
            pending,
            ["web-c", "Deployment/web", "Pending", "0/0", "0", "60s"]
        );
        assert_eq!(list_header(false).len(), pending.len());
    }

    #[test]
    fn history_numbers_the_rollouts_and_says_how_each_started() {
        let now: jiff::Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let rollouts = [
            rollout(
                "web-a",
                "2026-12-02T09:00:00Z",
                "web",
                Some("Completed"),
                None,
            ),
            rollout(
                "web-b",
                "2026-12-02T10:00:00Z",
                "web",
                Some("Failed"),
                Some("config-change"),
            ),
        ];
        let table = history_table(&of_workload(&rollouts, &web()), now);
        let lines: Vec<Vec<&str>> = table
            .lines()
            .map(|line| line.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines,
            [
                vec![
                    "REVISION",
                    "NAME",
                    "ORIGIN",
                    "CONTAINERS",
                    "PHASE",
                    "RECREATED",
                    "FAILED",
                    "AGE"
                ],
                vec![
                    "1",
                    "web-a",
                    "manual",
                    "app,sidecar",
                    "Completed",
                    "3/4",
                    "1",
                    "3h"
                ],
                vec![
                    "2",
                    "web-b",
                    "config-change",
                    "app,sidecar",
                    "Failed",
                    "3/4",
                    "1",
                    "120m"
                ],
            ]
        );
    }
}
