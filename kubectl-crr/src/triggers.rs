//! `kubectl crr triggers [-A]`: every Deployment, StatefulSet and DaemonSet with a trigger
//! annotation, what triggers it, its last trigger rollout and its next scheduled run.
//!
//! NAMESPACE (with `-A`), WORKLOAD, TRIGGERS, LAST ROLLOUT (name, phase, age), NEXT RUN. The
//! annotations are read by `crr_crds::triggers::annotations`, the operator's own parser, so a
//! value the operator refuses shows here as refused, with the reason.

use std::collections::BTreeMap;

use crr_crds::keys;
use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::triggers::annotations::{self, Source};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};

use crate::cli::TriggersArgs;
use crate::error::Error;
use crate::exit::Exit;
use crate::table::{format_age, format_rows};

/// One workload's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Namespace.
    pub namespace: String,
    /// `deployment/web`.
    pub workload: String,
    /// What triggers it.
    pub triggers: String,
    /// The newest trigger rollout: `name (Phase, age)`.
    pub last_rollout: String,
    /// The next tick of its schedule.
    pub next_run: String,
}

/// The row of a workload of `kind` with these annotations and UID, given the trigger rollouts
/// of its namespace.
pub fn row(
    kind: &str,
    workload: &DynamicObject,
    rollouts: &[ContainerRecreateRollout],
    reloader: bool,
    now: jiff::Timestamp,
) -> Row {
    let (triggers, problems) = annotations::parse(workload.annotations(), reloader);
    let mut said = Vec::new();
    if let Some(change) = &triggers.config_change {
        said.push(match (&change.source, &change.only) {
            (Source::Crr, _) => "config-change".to_owned(),
            (Source::Reloader, None) => "config-change (reloader auto)".to_owned(),
            (Source::Reloader, Some(only)) => format!(
                "config-change (reloader: {})",
                only.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        });
    }
    if let Some(schedule) = &triggers.schedule {
        let zone = schedule.time_zone.iana_name().unwrap_or("UTC");
        said.push(format!("schedule {:?} {zone}", schedule.expression));
    }
    for problem in &problems {
        said.push(format!("refused: {problem}"));
    }
    let uid = workload.uid().unwrap_or_default();
    let last = rollouts
        .iter()
        .filter(|rollout| rollout.labels().get(keys::LABEL_WORKLOAD_UID) == Some(&uid))
        .max_by_key(|rollout| {
            rollout
                .metadata
                .creation_timestamp
                .clone()
                .map(|time| time.0)
        });
    let last_rollout = last.map_or_else(
        || "<none>".to_owned(),
        |rollout| {
            let phase = rollout
                .status
                .as_ref()
                .and_then(|status| status.phase.clone())
                .unwrap_or_else(|| "Pending".to_owned());
            let age = rollout.metadata.creation_timestamp.as_ref().map_or_else(
                || "<unknown>".to_owned(),
                |created| format_age(now.duration_since(created.0).as_secs()),
            );
            format!("{} ({phase}, {age})", rollout.name_any())
        },
    );
    let next_run = triggers
        .schedule
        .as_ref()
        .and_then(|schedule| schedule.next_after(now))
        .map_or_else(|| "<none>".to_owned(), |next| next.to_string());
    Row {
        namespace: workload.namespace().unwrap_or_default(),
        workload: format!("{}/{}", kind.to_lowercase(), workload.name_any()),
        triggers: if said.is_empty() {
            "<none>".to_owned()
        } else {
            said.join("; ")
        },
        last_rollout,
        next_run,
    }
}

/// The table of `rows`.
pub fn table(rows: &[Row], all_namespaces: bool) -> String {
    let mut lines = vec![
        [
            "NAMESPACE",
            "WORKLOAD",
            "TRIGGERS",
            "LAST ROLLOUT",
            "NEXT RUN",
        ]
        .iter()
        .skip(usize::from(!all_namespaces))
        .map(|column| (*column).to_owned())
        .collect::<Vec<_>>(),
    ];
    for row in rows {
        let mut line = Vec::new();
        if all_namespaces {
            line.push(row.namespace.clone());
        }
        line.extend([
            row.workload.clone(),
            row.triggers.clone(),
            row.last_rollout.clone(),
            row.next_run.clone(),
        ]);
        lines.push(line);
    }
    format_rows(&lines)
}

/// Lists the workloads with triggers of the namespace (every namespace with `-A`).
pub async fn execute(client: Client, namespace: &str, args: &TriggersArgs) -> Result<Exit, Error> {
    let now = jiff::Timestamp::now();
    let rollouts_api: Api<ContainerRecreateRollout> = if args.all_namespaces {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    };
    let rollouts = rollouts_api
        .list(&ListParams::default().labels(keys::LABEL_ROLLOUT_TRIGGER))
        .await?
        .items;
    let mut by_namespace: BTreeMap<String, Vec<ContainerRecreateRollout>> = BTreeMap::new();
    for rollout in rollouts {
        by_namespace
            .entry(rollout.namespace().unwrap_or_default())
            .or_default()
            .push(rollout);
    }
    let mut rows = Vec::new();
    for (kind, plural) in [
        ("Deployment", "deployments"),
        ("StatefulSet", "statefulsets"),
        ("DaemonSet", "daemonsets"),
    ] {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("apps", "v1", kind), plural);
        let api: Api<DynamicObject> = if args.all_namespaces {
            Api::all_with(client.clone(), &resource)
        } else {
            Api::namespaced_with(client.clone(), namespace, &resource)
        };
        for workload in api.list(&ListParams::default()).await?.items {
            if !annotations::has_trigger_annotations(workload.annotations(), args.reloader) {
                continue;
            }
            let rollouts = by_namespace
                .get(&workload.namespace().unwrap_or_default())
                .map(Vec::as_slice)
                .unwrap_or_default();
            rows.push(row(kind, &workload, rollouts, args.reloader, now));
        }
    }
    rows.sort_by(|a, b| (&a.namespace, &a.workload).cmp(&(&b.namespace, &b.workload)));
    if rows.is_empty() {
        eprintln!("No workloads with triggers found");
    } else {
        print!("{}", table(&rows, args.all_namespaces));
    }
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workload(annotations: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "uid-web",
                         "annotations": annotations},
        }))
        .unwrap()
    }

    fn rollout(name: &str, uid: &str, created: &str, phase: &str) -> ContainerRecreateRollout {
        serde_json::from_value(json!({
            "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
            "metadata": {"name": name, "namespace": "shop", "creationTimestamp": created,
                         "labels": {keys::LABEL_ROLLOUT_TRIGGER: "config-change", keys::LABEL_WORKLOAD_UID: uid}},
            "spec": {"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
                     "containers": ["app"]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn a_row_shows_the_triggers_the_newest_rollout_and_the_next_run() {
        let now: jiff::Timestamp = "2026-11-27T10:00:00Z".parse().unwrap();
        let web = workload(json!({
            keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
            keys::ANNOTATION_RECREATE_SCHEDULE: "0 3 * * *",
        }));
        let rollouts = [
            rollout(
                "web-config-old",
                "uid-web",
                "2026-11-26T10:00:00Z",
                "Completed",
            ),
            rollout(
                "web-config-new",
                "uid-web",
                "2026-11-27T09:58:00Z",
                "Progressing",
            ),
            rollout("other", "uid-other", "2026-11-27T09:59:00Z", "Progressing"),
        ];
        let row = row("Deployment", &web, &rollouts, false, now);
        assert_eq!(
            row,
            Row {
                namespace: "shop".to_owned(),
                workload: "deployment/web".to_owned(),
                triggers: "config-change; schedule \"0 3 * * *\" UTC".to_owned(),
                last_rollout: "web-config-new (Progressing, 2m)".to_owned(),
                next_run: "2026-11-28T03:00:00Z".to_owned(),
            }
        );
        let text = table(&[row], true);
        assert!(text.starts_with("NAMESPACE   WORKLOAD"), "{text}");
    }

    #[test]
    fn a_refused_annotation_shows_why() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let web = workload(json!({keys::ANNOTATION_RECREATE_SCHEDULE: "every night"}));
        let row = row("Deployment", &web, &[], false, now);
        assert!(
            row.triggers
                .starts_with("refused: annotation crr.dev/recreate-schedule"),
            "{}",
            row.triggers
        );
        assert_eq!(
            (row.last_rollout.as_str(), row.next_run.as_str()),
            ("<none>", "<none>")
        );
    }
}
