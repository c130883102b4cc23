//! The pods a rollout has in flight, listed under its bar while `kubectl crr rollout --wait` (or
//! `rollout status`) follows it on a terminal: one line per pod whose request has not finished,
//! with each container's phase and what it waits for (a queued request's reason, the node
//! daemon's message). Kept from a watch of the rollout's requests (label `crr.dev/rollout`);
//! pure here, fed by the follow loop.

use std::collections::BTreeMap;

use crr_crds::v1beta1::ContainerRecreateRequest;
use kube::ResourceExt as _;
use kube::runtime::watcher;

use crate::progress::{RequestProgress, progress};

/// At most this many pods are listed; the rest are counted.
pub const MAX_LISTED: usize = 10;

/// The rollout's unfinished requests, by name.
#[derive(Debug, Default)]
pub struct InFlight {
    requests: BTreeMap<String, RequestProgress>,
    relisting: Option<BTreeMap<String, RequestProgress>>,
}

impl InFlight {
    /// Takes one event of the request watch.
    pub fn apply(&mut self, event: watcher::Event<ContainerRecreateRequest>) {
        match event {
            watcher::Event::Apply(crr) => Self::put(&mut self.requests, &crr),
            watcher::Event::Delete(crr) => {
                self.requests.remove(&crr.name_any());
            }
            watcher::Event::Init => self.relisting = Some(BTreeMap::new()),
            watcher::Event::InitApply(crr) => match &mut self.relisting {
                Some(relisting) => Self::put(relisting, &crr),
                None => Self::put(&mut self.requests, &crr),
            },
            watcher::Event::InitDone => {
                if let Some(relisted) = self.relisting.take() {
                    self.requests = relisted;
                }
            }
        }
    }

    fn put(requests: &mut BTreeMap<String, RequestProgress>, crr: &ContainerRecreateRequest) {
        let seen = progress(crr);
        if seen.outcome.is_finished() {
            requests.remove(&seen.name);
        } else {
            requests.insert(seen.name.clone(), seen);
        }
    }

    /// The lines under the bar: `  <pod>: <container> <phase> (<message>), ...`, by pod name, at
    /// most [`MAX_LISTED`], then how many more.
    pub fn lines(&self) -> Vec<String> {
        let mut pods: Vec<&RequestProgress> = self.requests.values().collect();
        pods.sort_by(|a, b| a.pod.cmp(&b.pod));
        let mut lines: Vec<String> = pods
            .iter()
            .take(MAX_LISTED)
            .map(|request| {
                let containers: Vec<String> = request
                    .containers
                    .iter()
                    .map(|container| {
                        let message = container
                            .message
                            .as_deref()
                            .map(|message| format!(" ({message})"))
                            .unwrap_or_default();
                        format!("{} {}{message}", container.name, container.phase.as_str())
                    })
                    .collect();
                format!("  {}: {}", request.pod, containers.join(", "))
            })
            .collect();
        if pods.len() > MAX_LISTED {
            lines.push(format!(
                "  ... and {} more in flight",
                pods.len() - MAX_LISTED
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(pod: &str, status: serde_json::Value) -> ContainerRecreateRequest {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": format!("r-{pod}"), "namespace": "shop"},
            "spec": {"podName": pod, "containers": [{"name": "app"}]},
            "status": status,
        }))
        .expect("a request")
    }

    #[test]
    fn pods_in_flight_are_listed_by_name_and_leave_when_finished_or_deleted() {
        let mut in_flight = InFlight::default();
        in_flight.apply(watcher::Event::Apply(request(
            "web-2",
            json!({"phase": "Pending", "message": "queued: waiting for request x of the same pod to finish first"}),
        )));
        in_flight.apply(watcher::Event::Apply(request(
            "web-1",
            json!({"phase": "Recreating", "containerRecreateStates": [{"name": "app", "phase": "Recreating"}]}),
        )));
        assert_eq!(
            in_flight.lines(),
            [
                "  web-1: app Recreating",
                "  web-2: app Pending (queued: waiting for request x of the same pod to finish first)",
            ]
        );
        in_flight.apply(watcher::Event::Apply(request(
            "web-1",
            json!({"phase": "Completed", "completionTime": "2026-12-02T00:00:00Z"}),
        )));
        in_flight.apply(watcher::Event::Delete(request("web-2", json!({}))));
        assert!(in_flight.lines().is_empty());
    }

    #[test]
    fn a_relist_replaces_what_was_kept_and_a_long_list_is_counted() {
        let mut in_flight = InFlight::default();
        in_flight.apply(watcher::Event::Apply(request("gone", json!({}))));
        in_flight.apply(watcher::Event::Init);
        for index in 0..12 {
            in_flight.apply(watcher::Event::InitApply(request(
                &format!("web-{index:02}"),
                json!({}),
            )));
        }
        in_flight.apply(watcher::Event::InitDone);
        let lines = in_flight.lines();
        assert_eq!(lines.len(), MAX_LISTED + 1);
        assert_eq!(lines[0], "  web-00: app Pending");
        assert_eq!(lines[MAX_LISTED], "  ... and 2 more in flight");
    }
}
