//! `kubectl crr triggers [-A]`: every Deployment, StatefulSet and DaemonSet with a trigger
//! annotation, what triggers it, its last trigger rollout, the config change that waits for its
//! restart window and its next scheduled run.
//!
//! NAMESPACE (with `-A`), WORKLOAD, TRIGGERS (with the restart window, and when it opens if it is
//! closed, and the value of `crr.dev/restart-requested-at`), LAST ROLLOUT (name, phase, age), PENDING (from the workload's TriggerRecord), NEXT RUN
//! (marked when the tick falls outside the window: the operator skips it). The annotations are
//! read by `crr_crds::triggers::annotations`, the operator's own parser, so a value the operator
//! refuses shows here as refused, with the reason. What is pending is what the operator wrote in
//! the record; this module does not work it out again.

use std::collections::BTreeMap;

use crr_crds::keys;
use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::trigger_record::{PendingChange, TriggerRecord, record_name};
use crr_crds::triggers::annotations::{self, Source};
use crr_crds::triggers::window::Window;
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
    /// The config change that waits for the restart window: `configmap/a since 5m, runs at ...`.
    pub pending: String,
    /// The next tick of its schedule, ` (outside window)` when the window is closed then.
    pub next_run: String,
}

/// The row of a workload of `kind` with these annotations and UID, given the trigger rollouts
/// and the TriggerRecords of its namespace.
pub fn row(
    kind: &str,
    workload: &DynamicObject,
    rollouts: &[ContainerRecreateRollout],
    records: &[TriggerRecord],
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
    if let Some(window) = &triggers.window {
        said.push(window_text(window, now));
    }
    if let Some(restart) = &triggers.restart {
        // A tenant's free text: kept on its line.
        said.push(format!(
            "restart-requested {}",
            crate::printable::printable(&restart.value)
        ));
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
    let name = record_name(kind, &workload.name_any());
    let pending = records
        .iter()
        .find(|record| record.name_any() == name && record.spec.workload.uid == uid)
        .and_then(|record| record.spec.pending_change.as_ref())
        .map_or_else(|| "<none>".to_owned(), |change| pending_text(change, now));
    let next_run = triggers
        .schedule
        .as_ref()
        .and_then(|schedule| schedule.next_after(now))
        .map_or_else(
            || "<none>".to_owned(),
            |next| match &triggers.window {
                Some(window) if !window.is_open(next) => format!("{next} (outside window)"),
                _ => next.to_string(),
            },
        );
    Row {
        namespace: workload.namespace().unwrap_or_default(),
        workload: format!("{}/{}", kind.to_lowercase(), workload.name_any()),
        triggers: if said.is_empty() {
            "<none>".to_owned()
        } else {
            said.join("; ")
        },
        last_rollout,
        pending,
        next_run,
    }
}

/// `window Mon-Fri 01:00-05:00 (UTC)`, and when it opens if it is closed at `now`.
fn window_text(window: &Window, now: jiff::Timestamp) -> String {
    if window.is_open(now) {
        return format!("window {window}");
    }
    match window.next_open(now) {
        Some(opens) => format!("window {window} (closed, opens {opens})"),
        None => format!("window {window} (closed)"),
    }
}

/// `configmap/a,secret/b since 5m, runs at 2026-11-30T01:00:00Z`.
fn pending_text(change: &PendingChange, now: jiff::Timestamp) -> String {
    let age = change.since.parse::<jiff::Timestamp>().map_or_else(
        |_| change.since.clone(),
        |since| format_age(now.duration_since(since).as_secs()),
    );
    format!(
        "{} since {age}, runs at {}",
        change.changed.join(","),
        change.runs_at
    )
}

/// `items` by namespace.
fn by_namespace<T: ResourceExt>(items: Vec<T>) -> BTreeMap<String, Vec<T>> {
    let mut grouped: BTreeMap<String, Vec<T>> = BTreeMap::new();
    for item in items {
        grouped
            .entry(item.namespace().unwrap_or_default())
            .or_default()
            .push(item);
    }
    grouped
}

/// The table of `rows`.
pub fn table(rows: &[Row], all_namespaces: bool) -> String {
    let mut lines = vec![
        [
            "NAMESPACE",
            "WORKLOAD",
            "TRIGGERS",
            "LAST ROLLOUT",
            "PENDING",
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
            row.pending.clone(),
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
    let rollouts_by_namespace = by_namespace(
        rollouts_api
            .list(&ListParams::default().labels(keys::LABEL_ROLLOUT_TRIGGER))
            .await?
            .items,
    );
    let records_api: Api<TriggerRecord> = if args.all_namespaces {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    };
    let records_by_namespace = match records_api.list(&ListParams::default()).await {
        Ok(list) => by_namespace(list.items),
        Err(error) => {
            let error = Error::from(error);
            // An install from before the TriggerRecord does not serve it: no records.
            if !error.is_not_found() {
                return Err(error);
            }
            BTreeMap::new()
        }
    };
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
            let namespace = workload.namespace().unwrap_or_default();
            let rollouts = rollouts_by_namespace
                .get(&namespace)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let records = records_by_namespace
                .get(&namespace)
                .map(Vec::as_slice)
                .unwrap_or_default();
            rows.push(row(kind, &workload, rollouts, records, args.reloader, now));
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
        let row = row("Deployment", &web, &rollouts, &[], false, now);
        assert_eq!(
            row,
            Row {
                namespace: "shop".to_owned(),
                workload: "deployment/web".to_owned(),
                triggers: "config-change; schedule \"0 3 * * *\" UTC".to_owned(),
                last_rollout: "web-config-new (Progressing, 2m)".to_owned(),
                pending: "<none>".to_owned(),
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
        let row = row("Deployment", &web, &[], &[], false, now);
        assert!(
            row.triggers
                .starts_with("refused: annotation crr.dev/recreate-schedule"),
            "{}",
            row.triggers
        );
        assert_eq!(
            (
                row.last_rollout.as_str(),
                row.pending.as_str(),
                row.next_run.as_str()
            ),
            ("<none>", "<none>", "<none>")
        );
    }

    #[test]
    fn a_window_is_shown_with_when_it_opens_while_closed() {
        let web = workload(json!({
            keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
            keys::ANNOTATION_RECREATE_WINDOW: "Mon-Fri 01:00-05:00",
        }));
        // 2026-11-30 is a Monday.
        let open: jiff::Timestamp = "2026-11-30T02:00:00Z".parse().unwrap();
        assert_eq!(
            row("Deployment", &web, &[], &[], false, open).triggers,
            "config-change; window Mon-Fri 01:00-05:00 (UTC)"
        );
        let closed: jiff::Timestamp = "2026-11-30T05:00:00Z".parse().unwrap();
        assert_eq!(
            row("Deployment", &web, &[], &[], false, closed).triggers,
            "config-change; window Mon-Fri 01:00-05:00 (UTC) (closed, opens 2026-12-01T01:00:00Z)"
        );
    }

    #[test]
    fn a_window_is_read_in_the_triggers_time_zone() {
        let web = workload(json!({
            keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
            keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE: "Europe/Berlin",
            keys::ANNOTATION_RECREATE_WINDOW: "Mon-Fri 01:00-05:00",
        }));
        // Monday 01:30 in Berlin (UTC+1 in winter).
        let now: jiff::Timestamp = "2026-11-30T00:30:00Z".parse().unwrap();
        assert_eq!(
            row("Deployment", &web, &[], &[], false, now).triggers,
            "config-change; window Mon-Fri 01:00-05:00 (Europe/Berlin)"
        );
    }

    #[test]
    fn a_requested_restart_shows_its_value() {
        let now: jiff::Timestamp = "2026-11-30T06:00:00Z".parse().unwrap();
        let web = workload(json!({
            keys::ANNOTATION_RESTART_REQUESTED_AT: "2026-11-29T20:00:00Z",
        }));
        assert!(annotations::has_trigger_annotations(
            web.annotations(),
            false
        ));
        assert_eq!(
            row("Deployment", &web, &[], &[], false, now).triggers,
            "restart-requested 2026-11-29T20:00:00Z"
        );
        let both = workload(json!({
            keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
            keys::ANNOTATION_RESTART_REQUESTED_AT: "release 42\u{1b}[2J",
        }));
        assert_eq!(
            row("Deployment", &both, &[], &[], false, now).triggers,
            "config-change; restart-requested release 42\\u{1b}[2J"
        );
        let long = workload(json!({
            keys::ANNOTATION_RESTART_REQUESTED_AT: "x".repeat(257),
        }));
        assert!(
            row("Deployment", &long, &[], &[], false, now)
                .triggers
                .starts_with("refused: annotation crr.dev/restart-requested-at"),
        );
    }

    fn record(name: &str, uid: &str, pending: Option<serde_json::Value>) -> TriggerRecord {
        serde_json::from_value(json!({
            "apiVersion": "crr.dev/v1alpha1", "kind": "TriggerRecord",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"workload": {"kind": "Deployment", "name": "web", "uid": uid},
                     "configHashes": {"configmap/app": "old"},
                     "pendingChange": pending},
        }))
        .unwrap()
    }

    #[test]
    fn a_pending_change_is_read_from_the_record_of_the_same_workload() {
        let now: jiff::Timestamp = "2026-11-30T06:00:00Z".parse().unwrap();
        let web = workload(json!({
            keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE: "true",
            keys::ANNOTATION_RECREATE_WINDOW: "Mon-Fri 01:00-05:00",
        }));
        let pending = json!({
            "since": "2026-11-30T05:55:00Z",
            "changed": ["configmap/app", "secret/tls"],
            "runsAt": "2026-12-01T01:00:00Z",
        });
        let records = [record("deployment-web", "uid-web", Some(pending.clone()))];
        assert_eq!(
            row("Deployment", &web, &[], &records, false, now).pending,
            "configmap/app,secret/tls since 5m, runs at 2026-12-01T01:00:00Z"
        );
        // A record of an earlier workload of the same name, of another kind's name, or without a
        // pending change says nothing of this one.
        for records in [
            [record(
                "deployment-web",
                "uid-earlier",
                Some(pending.clone()),
            )],
            [record("statefulset-web", "uid-web", Some(pending.clone()))],
            [record("deployment-web", "uid-web", None)],
        ] {
            assert_eq!(
                row("Deployment", &web, &[], &records, false, now).pending,
                "<none>"
            );
        }
    }

    #[test]
    fn a_tick_outside_the_window_is_marked() {
        let now: jiff::Timestamp = "2026-11-30T06:00:00Z".parse().unwrap();
        let inside = workload(json!({
            keys::ANNOTATION_RECREATE_SCHEDULE: "0 3 * * *",
            keys::ANNOTATION_RECREATE_WINDOW: "Mon-Fri 01:00-05:00",
        }));
        assert_eq!(
            row("Deployment", &inside, &[], &[], false, now).next_run,
            "2026-12-01T03:00:00Z"
        );
        // Saturday's tick: the window is closed at weekends.
        let saturday = workload(json!({
            keys::ANNOTATION_RECREATE_SCHEDULE: "0 3 * * 6",
            keys::ANNOTATION_RECREATE_WINDOW: "Mon-Fri 01:00-05:00",
        }));
        assert_eq!(
            row("Deployment", &saturday, &[], &[], false, now).next_run,
            "2026-12-05T03:00:00Z (outside window)"
        );
    }
}
