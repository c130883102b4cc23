//! The `describe` text: what was asked (pod, containers, strategy, deadline, TTL), what
//! happened (phase, outcome, per-container states, conditions) and the request's events.
//! A pure function of the object, its events and the time.

use std::fmt::Write as _;

use crr_crds::keys;
use crr_crds::v1beta1::ContainerRecreateRequest;
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt as _;

use crate::printable::printable;
use crate::progress::{Outcome, progress};
use crate::table::{format_age, format_rows};

fn seconds(value: Option<i64>) -> String {
    value.map_or_else(|| "<unset>".to_owned(), |value| format!("{value}s"))
}

fn time_and_age(time: Option<&jiff::Timestamp>, now: jiff::Timestamp) -> String {
    match time {
        Some(time) => format!(
            "{} ({} ago)",
            time.strftime("%Y-%m-%dT%H:%M:%SZ"),
            format_age(now.duration_since(*time).as_secs())
        ),
        None => "<none>".to_owned(),
    }
}

fn event_time(event: &Event) -> Option<jiff::Timestamp> {
    event
        .last_timestamp
        .as_ref()
        .map(|time| time.0)
        .or_else(|| event.event_time.as_ref().map(|time| time.0))
        .or_else(|| event.first_timestamp.as_ref().map(|time| time.0))
        .or_else(|| {
            event
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|time| time.0)
        })
}

/// The description of `crr` with its `events`, at `now`.
pub fn describe(crr: &ContainerRecreateRequest, events: &[Event], now: jiff::Timestamp) -> String {
    let seen = progress(crr);
    let status = crr.status.clone().unwrap_or_default();
    let strategy = crr.strategy();
    let mut text = String::new();
    let mut field = |name: &str, value: String| {
        let _ = writeln!(text, "{:<22}{value}", format!("{name}:"));
    };
    field("Name", crr.name_any());
    field("Namespace", crr.namespace().unwrap_or_default());
    field("Pod", crr.spec.pod_name.clone());
    field(
        "Node",
        crr.labels()
            .get(keys::LABEL_NODE_NAME)
            .cloned()
            .unwrap_or_else(|| "<none>".to_owned()),
    );
    field(
        "Created",
        time_and_age(crr.metadata.creation_timestamp.as_ref().map(|t| &t.0), now),
    );
    field(
        "Phase",
        seen.phase
            .map_or_else(|| "<none>".to_owned(), |phase| phase.as_str().to_owned()),
    );
    field(
        "Result",
        match &seen.outcome {
            Outcome::Running => "in progress".to_owned(),
            Outcome::Succeeded => "Succeeded".to_owned(),
            Outcome::Failed(reason) => format!("Failed: {reason}"),
        },
    );
    field(
        "Message",
        status
            .message
            .as_deref()
            .map_or_else(|| "<none>".to_owned(), printable),
    );
    field(
        "Completed",
        time_and_age(status.completion_time.as_ref().map(|t| &t.0), now),
    );
    field("Active deadline", seconds(crr.spec.active_deadline_seconds));
    field(
        "TTL after finished",
        seconds(crr.spec.ttl_seconds_after_finished.map(i64::from)),
    );
    let _ = writeln!(text, "Strategy:");
    let mut strategy_rows = vec![
        vec![
            "  Failure policy:".to_owned(),
            strategy.failure_policy().as_str().to_owned(),
        ],
        vec![
            "  Ordered recreate:".to_owned(),
            strategy.ordered_recreate.to_string(),
        ],
        vec![
            "  Force recreate:".to_owned(),
            strategy.force_recreate.to_string(),
        ],
        vec![
            "  Grace period:".to_owned(),
            seconds(strategy.termination_grace_period_seconds),
        ],
        vec![
            "  Unready grace:".to_owned(),
            seconds(strategy.unready_grace_period_seconds),
        ],
        vec![
            "  Min started:".to_owned(),
            format!("{}s", strategy.min_started_seconds),
        ],
    ];
    strategy_rows
        .iter_mut()
        .for_each(|row| row[0] = format!("{:<19}", row[0]));
    text.push_str(&format_rows(&strategy_rows));

    let _ = writeln!(text, "Containers:");
    let mut rows = vec![
        [
            "  NAME",
            "PHASE",
            "RESTARTS",
            "KILLED",
            "CONTAINER ID",
            "MESSAGE",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for (container, spec) in seen.containers.iter().zip(&crr.spec.containers) {
        let killed = status
            .container_recreate_states
            .iter()
            .find(|state| state.name == container.name)
            .is_some_and(|state| state.is_killed);
        let container_id = status
            .container_status_snapshot
            .iter()
            .find(|snapshot| snapshot.name == container.name)
            .map(|snapshot| snapshot.container_id.clone())
            .filter(|id| !id.is_empty())
            .or_else(|| {
                spec.status_context
                    .as_ref()
                    .map(|context| context.container_id.clone())
            })
            .unwrap_or_else(|| "<none>".to_owned());
        rows.push(vec![
            format!("  {}", container.name),
            container.phase.as_str().to_owned(),
            container
                .restarts
                .map_or_else(|| "-".to_owned(), |count| count.to_string()),
            if killed { "yes" } else { "no" }.to_owned(),
            container_id,
            container.message.clone().unwrap_or_default(),
        ]);
    }
    text.push_str(&format_rows(&rows));

    let _ = writeln!(text, "Conditions:");
    if status.conditions.is_empty() {
        let _ = writeln!(text, "  <none>");
    } else {
        let mut rows = vec![
            ["  TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"]
                .map(str::to_owned)
                .to_vec(),
        ];
        for condition in &status.conditions {
            rows.push(vec![
                format!("  {}", condition.type_),
                condition.status.clone(),
                printable(&condition.reason),
                condition
                    .last_transition_time
                    .0
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string(),
                printable(&condition.message),
            ]);
        }
        text.push_str(&format_rows(&rows));
    }

    let _ = writeln!(text, "Events:");
    if events.is_empty() {
        let _ = writeln!(text, "  <none>");
    } else {
        let mut sorted: Vec<&Event> = events.iter().collect();
        sorted.sort_by_key(|event| event_time(event));
        let mut rows = vec![
            ["  TYPE", "REASON", "AGE", "FROM", "MESSAGE"]
                .map(str::to_owned)
                .to_vec(),
        ];
        for event in sorted {
            let from = event
                .reporting_component
                .clone()
                .filter(|component| !component.is_empty())
                .or_else(|| {
                    event
                        .source
                        .as_ref()
                        .and_then(|source| source.component.clone())
                })
                .unwrap_or_default();
            rows.push(vec![
                format!("  {}", event.type_.clone().unwrap_or_default()),
                printable(event.reason.as_deref().unwrap_or_default()),
                event_time(event).map_or_else(
                    || "<unknown>".to_owned(),
                    |time| format_age(now.duration_since(time).as_secs()),
                ),
                printable(&from),
                printable(event.message.as_deref().unwrap_or_default()),
            ]);
        }
        text.push_str(&format_rows(&rows));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn description_has_spec_states_conditions_and_events() {
        let crr: ContainerRecreateRequest = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "ContainerRecreateRequest",
            "metadata": {
                "name": "web-0-a", "namespace": "prod",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"crr.apps.kruise.io/node-name": "node-1"},
            },
            "spec": {
                "podName": "web-0",
                "containers": [{"name": "app", "statusContext": {"containerID": "containerd://old", "restartCount": 0}}],
                "strategy": {"failurePolicy": "Fail", "orderedRecreate": true, "minStartedSeconds": 10},
                "activeDeadlineSeconds": 300,
            },
            "status": {
                "phase": "Completed",
                "completionTime": "2026-01-01T00:00:20Z",
                "containerRecreateStates": [{"name": "app", "phase": "Succeeded", "isKilled": true}],
                "containerStatusSnapshot": [{"name": "app", "ready": true, "restartCount": 1, "containerID": "containerd://new"}],
                "conditions": [{"type": "Succeeded", "status": "True", "reason": "AllRecreated",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:20Z"}],
            },
        }))
        .unwrap();
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": "e1", "namespace": "prod"},
            "involvedObject": {"name": "web-0-a"},
            "type": "Warning", "reason": "FailedPreStopHook", "message": "exit code 1",
            "lastTimestamp": "2026-01-01T00:00:05Z",
            "source": {"component": "crr-node-daemon"},
        }))
        .unwrap();
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let text = describe(&crr, &[event], now);
        for expected in [
            "Name:                 web-0-a\n",
            "Pod:                  web-0\n",
            "Node:                 node-1\n",
            "Result:               Succeeded\n",
            "Active deadline:      300s\n",
            "TTL after finished:   <unset>\n",
            "Completed:            2026-01-01T00:00:20Z (40s ago)\n",
            "  Ordered recreate:   true\n",
            "  Min started:        10s\n",
            "  app    Succeeded   1          yes      containerd://new",
            "  Succeeded   True     AllRecreated",
            "  Warning   FailedPreStopHook   55s   crr-node-daemon   exit code 1",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    #[test]
    fn container_output_in_events_and_states_cannot_steer_the_terminal() {
        let crr: ContainerRecreateRequest = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "ContainerRecreateRequest",
            "metadata": {"name": "r", "namespace": "prod", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"podName": "web-0", "containers": [{"name": "app"}]},
            "status": {
                "phase": "Completed",
                "message": "container app failed: \u{1b}]0;pwned\u{7}",
                "containerRecreateStates": [{"name": "app", "phase": "Failed",
                                             "message": "kill container error: \u{1b}[2J"}],
                "conditions": [{"type": "Succeeded", "status": "False", "reason": "RecreateFailed",
                                "message": "line\r\nforged", "lastTransitionTime": "2026-01-01T00:00:20Z"}],
            },
        }))
        .unwrap();
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": "e1", "namespace": "prod"},
            "involvedObject": {"name": "r"},
            "type": "Warning", "reason": "FailedPreStopHook",
            "message": "preStop output: \u{1b}[1A\u{1b}[2Kall good\u{202e}",
            "lastTimestamp": "2026-01-01T00:00:05Z",
        }))
        .unwrap();
        let text = describe(&crr, &[event], "2026-01-01T00:01:00Z".parse().unwrap());
        assert!(
            !text.contains('\u{1b}') && !text.contains('\r') && !text.contains('\u{202e}'),
            "{text:?}"
        );
        for expected in [
            "\\u{1b}]0;pwned\\u{7}",
            "kill container error: \\u{1b}[2J",
            "line\\u{d}\\u{a}forged",
            "\\u{1b}[1A\\u{1b}[2Kall good\\u{202e}",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    #[test]
    fn fresh_request_describes_without_status() {
        let crr: ContainerRecreateRequest = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "ContainerRecreateRequest",
            "metadata": {"name": "web-0-a", "namespace": "prod"},
            "spec": {"podName": "web-0", "containers": [{"name": "app"}]},
        }))
        .unwrap();
        let text = describe(&crr, &[], jiff::Timestamp::UNIX_EPOCH);
        assert!(text.contains("Phase:                <none>\n"), "{text}");
        assert!(
            text.contains("Result:               in progress\n"),
            "{text}"
        );
        assert!(
            text.contains("Conditions:\n  <none>\nEvents:\n  <none>\n"),
            "{text}"
        );
    }
}
