//! The `get` table: NAME, POD, NODE, PHASE, CONTAINERS (succeeded/total), AGE, with NAMESPACE
//! first under `-A`. Ages read like kubectl's. Pure functions of the objects and the time.

use crr_crds::keys;
use crr_crds::v1beta1::ContainerRecreateRequest;
use kube::ResourceExt as _;

use crate::progress::{Outcome, progress};

/// kubectl's short age: `45s`, `3m12s`, `25m`, `5h3m`, `14h`, `3d4h`, `20d`, `2y40d`.
pub fn format_age(seconds: i64) -> String {
    if seconds < 0 {
        return "0s".to_owned();
    }
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    let days = hours / 24;
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            rest => format!("{minutes}m{rest}s"),
        }
    } else if hours < 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            rest => format!("{hours}h{rest}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            rest => format!("{days}d{rest}h"),
        }
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if days < 365 * 8 {
        match days % 365 {
            0 => format!("{}y", days / 365),
            rest => format!("{}y{rest}d", days / 365),
        }
    } else {
        format!("{}y", days / 365)
    }
}

/// Age of an object at `now`, `<unknown>` without a creation time.
pub fn age<K: kube::Resource>(object: &K, now: jiff::Timestamp) -> String {
    object.meta().creation_timestamp.as_ref().map_or_else(
        || "<unknown>".to_owned(),
        |created| format_age(now.duration_since(created.0).as_secs()),
    )
}

/// The PHASE column: the API phase, with the outcome once completed (upstream's phase is
/// `Completed` either way).
pub fn phase_text(crr: &ContainerRecreateRequest) -> String {
    let seen = progress(crr);
    match (&seen.outcome, seen.phase) {
        (Outcome::Succeeded, _) => "Completed".to_owned(),
        (Outcome::Failed(_), _) => "Completed(Failed)".to_owned(),
        (Outcome::Running, Some(phase)) => phase.as_str().to_owned(),
        (Outcome::Running, None) => "<none>".to_owned(),
    }
}

/// The table's cells for one request.
pub fn row(
    crr: &ContainerRecreateRequest,
    all_namespaces: bool,
    now: jiff::Timestamp,
) -> Vec<String> {
    let seen = progress(crr);
    let mut cells = Vec::new();
    if all_namespaces {
        cells.push(crr.namespace().unwrap_or_default());
    }
    cells.push(crr.name_any());
    cells.push(crr.spec.pod_name.clone());
    cells.push(
        crr.labels()
            .get(keys::LABEL_NODE_NAME)
            .cloned()
            .unwrap_or_else(|| "<none>".to_owned()),
    );
    cells.push(phase_text(crr));
    cells.push(format!("{}/{}", seen.succeeded(), seen.containers.len()));
    cells.push(age(crr, now));
    cells
}

/// The header cells.
pub fn header(all_namespaces: bool) -> Vec<String> {
    let mut cells = Vec::new();
    if all_namespaces {
        cells.push("NAMESPACE");
    }
    cells.extend(["NAME", "POD", "NODE", "PHASE", "CONTAINERS", "AGE"]);
    cells.into_iter().map(str::to_owned).collect()
}

/// The widest cell of each column.
pub fn column_widths(rows: &[Vec<String>]) -> Vec<usize> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..columns)
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// Widens `widths` to fit `row` (a watch's later rows, after the first ones set them).
pub fn widen(widths: &mut Vec<usize>, row: &[String]) {
    for (column, cell) in row.iter().enumerate() {
        match widths.get_mut(column) {
            Some(width) => *width = (*width).max(cell.chars().count()),
            None => widths.push(cell.chars().count()),
        }
    }
}

/// One row padded to `widths` (three spaces between columns, as kubectl), with a newline.
pub fn format_row(row: &[String], widths: &[usize]) -> String {
    let mut line = String::new();
    for (column, cell) in row.iter().enumerate() {
        if column + 1 == row.len() {
            line.push_str(cell);
        } else {
            let width = widths.get(column).copied().unwrap_or(0);
            line.push_str(&format!("{cell:<width$}   "));
        }
    }
    let mut line = line.trim_end().to_owned();
    line.push('\n');
    line
}

/// Rows padded into columns.
pub fn format_rows(rows: &[Vec<String>]) -> String {
    let widths = column_widths(rows);
    rows.iter().map(|row| format_row(row, &widths)).collect()
}

/// The whole table, header included.
pub fn table(
    crrs: &[ContainerRecreateRequest],
    all_namespaces: bool,
    now: jiff::Timestamp,
) -> String {
    let mut rows = vec![header(all_namespaces)];
    rows.extend(crrs.iter().map(|crr| row(crr, all_namespaces, now)));
    format_rows(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crr(name: &str, status: serde_json::Value) -> ContainerRecreateRequest {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "ContainerRecreateRequest",
            "metadata": {
                "name": name, "namespace": "prod",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"crr.apps.kruise.io/node-name": "node-1"},
            },
            "spec": {"podName": "web-0", "containers": [{"name": "app"}, {"name": "sidecar"}]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn ages_read_like_kubectl() {
        let table = [
            (5, "5s"),
            (119, "119s"),
            (192, "3m12s"),
            (180, "3m"),
            (25 * 60, "25m"),
            (5 * 3600 + 3 * 60, "5h3m"),
            (14 * 3600, "14h"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (20 * 86_400, "20d"),
            (-3, "0s"),
        ];
        for (seconds, expected) in table {
            assert_eq!(format_age(seconds), expected, "{seconds}");
        }
    }

    #[test]
    fn table_shows_pod_node_phase_progress_and_age() {
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let running = crr(
            "web-0-a",
            json!({"phase": "Recreating", "containerRecreateStates": [
                {"name": "app", "phase": "Succeeded"}, {"name": "sidecar", "phase": "Recreating"}]}),
        );
        let failed = crr(
            "web-0-b",
            json!({"phase": "Completed", "completionTime": "2026-01-01T00:00:30Z",
                   "message": "pod has gone"}),
        );
        let fresh = crr("web-0-c", json!({}));
        assert_eq!(
            table(&[running, failed, fresh], false, now),
            "NAME      POD     NODE     PHASE               CONTAINERS   AGE\n\
             web-0-a   web-0   node-1   Recreating          1/2          60s\n\
             web-0-b   web-0   node-1   Completed(Failed)   0/2          60s\n\
             web-0-c   web-0   node-1   <none>              0/2          60s\n"
        );
    }

    #[test]
    fn all_namespaces_adds_the_namespace_column() {
        let now: jiff::Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        let text = table(&[crr("a", json!({}))], true, now);
        assert!(text.starts_with("NAMESPACE   NAME"), "{text}");
        assert!(text.contains("\nprod        a "), "{text}");
    }
}
