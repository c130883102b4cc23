//! Creating requests and following them to the end: the one async loop of `recreate --wait`
//! and of `recreate -l`. It wires the [`Scheduler`] (who starts next), [`progress`] (what a
//! status means) and a [`Reporter`] (what the user sees) to two watches: the namespace's
//! requests and, for batches, the pods' Ready condition.
//!
//! Usable outside the CLI (the end-to-end suite calls [`run`] with its own reporter).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crr_crds::v1beta1::ContainerRecreateRequest;
use futures::{Stream, StreamExt as _, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};

use crate::batch::{PodState, Scheduler, Summary};
use crate::error::Error;
use crate::progress::{RequestProgress, kubelet_waiting, progress, with_kubelet_waiting};
use crate::render::Reporter;

/// What to create and how to pace it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub namespace: String,
    /// One request per pod (built by [`crate::request::build`]), in the order to run them.
    pub requests: Vec<ContainerRecreateRequest>,
    /// At most this many pods recreating at once (at least 1).
    pub max_unavailable: usize,
    /// Keep a pod's slot until it is Ready again after its request succeeded.
    pub wait_for_ready: bool,
    /// Label selector for the pod watch (readiness with `wait_for_ready`, and the kubelet's
    /// waiting reasons); without it one pod is watched by name.
    pub pod_selector: Option<String>,
    /// Give up after this long.
    pub timeout: Option<Duration>,
}

/// How it ended.
#[derive(Debug, Clone)]
pub struct Report {
    /// The last seen progress of every created request, in creation order.
    pub requests: Vec<RequestProgress>,
    /// Every pod's final state, in batch order.
    pub pods: Vec<(String, PodState)>,
    pub summary: Summary,
    pub timed_out: bool,
}

impl Report {
    /// Every pod recreated, in time.
    pub fn succeeded(&self) -> bool {
        !self.timed_out
            && self.summary.failed == 0
            && self.summary.not_started == 0
            && self.summary.in_flight == 0
    }
}

/// Creates one request, as a dry run when asked (`dryRun=All`: admission runs, nothing stored).
pub async fn create(
    api: &Api<ContainerRecreateRequest>,
    request: &ContainerRecreateRequest,
    dry_run: bool,
) -> Result<ContainerRecreateRequest, Error> {
    let params = PostParams {
        dry_run,
        field_manager: Some(crate::FIELD_MANAGER.to_owned()),
    };
    Ok(api.create(&params, request).await?)
}

// One value at a time, moved straight into the match: boxing would only add allocations.
#[allow(clippy::large_enum_variant)]
enum Seen {
    Request(watcher::Event<ContainerRecreateRequest>),
    Pod(watcher::Event<Pod>),
    WatchFailed(&'static str, watcher::Error),
}

/// Whether a watch error will not go away by retrying (no permission, resource missing).
pub(crate) fn is_permanent(error: &watcher::Error) -> bool {
    let code = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    matches!(code, 401 | 403 | 404)
}

/// Creates the plan's requests, at most `max_unavailable` pods at once, and follows them until
/// all are finished, the batch halted on a failure and drained, or the timeout passed.
pub async fn run(client: Client, plan: Plan, reporter: &mut dyn Reporter) -> Result<Report, Error> {
    let started = Instant::now();
    let deadline = plan
        .timeout
        .map(|timeout| tokio::time::Instant::now() + timeout);
    let api: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &plan.namespace);
    let mut pending: BTreeMap<String, ContainerRecreateRequest> = plan
        .requests
        .iter()
        .map(|request| (request.spec.pod_name.clone(), request.clone()))
        .collect();
    let mut scheduler = Scheduler::new(
        plan.requests
            .iter()
            .map(|request| request.spec.pod_name.clone())
            .collect(),
        plan.max_unavailable,
        plan.wait_for_ready,
    );

    let requests = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .map(|event| match event {
            Ok(event) => Seen::Request(event),
            Err(error) => Seen::WatchFailed("requests", error),
        });
    // The pods: for their readiness (a batch), and for the kubelet's waiting reasons shown
    // beside the containers crr stopped. One pod is watched by name, a batch by its selector.
    let pod_config = match (&plan.pod_selector, plan.requests.as_slice()) {
        (Some(selector), _) => Some(watcher::Config::default().labels(selector)),
        (None, [one]) => {
            Some(watcher::Config::default().fields(&format!("metadata.name={}", one.spec.pod_name)))
        }
        (None, _) if plan.wait_for_ready => Some(watcher::Config::default()),
        (None, _) => None,
    };
    let pods: std::pin::Pin<Box<dyn Stream<Item = Seen> + Send>> = match pod_config {
        Some(config) => {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &plan.namespace);
            Box::pin(
                watcher(pods, config)
                    .default_backoff()
                    .map(|event| match event {
                        Ok(event) => Seen::Pod(event),
                        Err(error) => Seen::WatchFailed("pods", error),
                    }),
            )
        }
        None => Box::pin(stream::pending()),
    };
    let mut events = stream::select(Box::pin(requests), pods);
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);

    let mut latest: Vec<RequestProgress> = Vec::new();
    let mut ready: BTreeMap<String, bool> = BTreeMap::new();
    // The kubelet's waiting reasons, by pod and container.
    let mut waiting: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut timed_out = false;

    loop {
        for pod in scheduler.admit() {
            let Some(request) = pending.remove(&pod) else {
                continue;
            };
            match create(&api, &request, false).await {
                Ok(created) => {
                    let name = created.name_any();
                    scheduler.created(&pod, &name);
                    reporter.note(
                        &format!("containerrecreaterequest/{name} created for pod {pod}"),
                        started.elapsed(),
                    );
                    let seen = progress(&created);
                    reporter.request(&seen, started.elapsed());
                    latest.push(seen);
                }
                Err(error) => {
                    let reason = error.to_string();
                    reporter.note(&format!("pod {pod}: {reason}"), started.elapsed());
                    scheduler.create_failed(&pod, &reason);
                }
            }
        }
        if scheduler.is_finished() {
            break;
        }
        let sleep = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        let seen = tokio::select! {
            seen = events.next() => seen,
            _ = ticker.tick() => {
                reporter.tick(started.elapsed());
                continue;
            }
            () = sleep => {
                timed_out = true;
                break;
            }
        };
        let Some(seen) = seen else {
            return Err(Error::Watch {
                what: "requests".to_owned(),
                message: "the watch ended".to_owned(),
            });
        };
        let now = started.elapsed();
        match seen {
            Seen::Request(watcher::Event::Apply(request) | watcher::Event::InitApply(request)) => {
                let Some(pod) = scheduler.pod_of(&request.name_any()).map(str::to_owned) else {
                    continue;
                };
                let mut seen = progress(&request);
                if let Some(reasons) = waiting.get(&pod) {
                    with_kubelet_waiting(&mut seen, reasons);
                }
                let pod_ready = ready.get(&pod).copied().unwrap_or(false);
                let waiting_before = matches!(
                    state_of(&scheduler, &pod),
                    Some(PodState::AwaitingReady { .. })
                );
                scheduler.observed(&pod, &seen.outcome, pod_ready);
                reporter.request(&seen, now);
                if !waiting_before
                    && matches!(
                        state_of(&scheduler, &pod),
                        Some(PodState::AwaitingReady { .. })
                    )
                {
                    reporter.note(&format!("pod {pod}: waiting for it to be Ready again"), now);
                }
                match latest.iter_mut().find(|known| known.name == seen.name) {
                    Some(known) => *known = seen,
                    None => latest.push(seen),
                }
            }
            Seen::Request(watcher::Event::Delete(request)) => {
                if let Some(pod) = scheduler.pod_of(&request.name_any()).map(str::to_owned)
                    && matches!(state_of(&scheduler, &pod), Some(PodState::InFlight { .. }))
                {
                    reporter.note(
                        &format!(
                            "containerrecreaterequest/{} was deleted before it completed",
                            request.name_any()
                        ),
                        now,
                    );
                    scheduler.request_gone(&pod);
                }
            }
            Seen::Pod(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                let name = pod.name_any();
                let reasons = kubelet_waiting(&pod);
                if waiting.get(&name) != Some(&reasons) {
                    for known in latest.iter_mut().filter(|known| known.pod == name) {
                        with_kubelet_waiting(known, &reasons);
                        reporter.request(known, now);
                    }
                    waiting.insert(name.clone(), reasons);
                }
                if plan.wait_for_ready {
                    let is_ready = crr_crds::rules::pod_ready(&pod);
                    ready.insert(name.clone(), is_ready);
                    scheduler.pod_ready(&name, is_ready);
                }
            }
            Seen::Pod(watcher::Event::Delete(pod)) => {
                // Nothing left to wait for.
                let name = pod.name_any();
                waiting.remove(&name);
                if plan.wait_for_ready {
                    ready.insert(name.clone(), true);
                    scheduler.pod_ready(&name, true);
                }
            }
            Seen::Request(_) | Seen::Pod(_) => {}
            Seen::WatchFailed(what, error) => {
                if is_permanent(&error) {
                    return Err(Error::Watch {
                        what: what.to_owned(),
                        message: error.to_string(),
                    });
                }
                reporter.note(
                    &format!("watch of {what} interrupted, retrying: {error}"),
                    now,
                );
            }
        }
    }
    reporter.finish(started.elapsed());
    Ok(Report {
        requests: latest,
        pods: scheduler.pods().to_vec(),
        summary: scheduler.summary(),
        timed_out,
    })
}

fn state_of<'a>(scheduler: &'a Scheduler, pod: &str) -> Option<&'a PodState> {
    scheduler
        .pods()
        .iter()
        .find(|(name, _)| name == pod)
        .map(|(_, state)| state)
}

/// The final lines: counts and every failure with its reason.
pub fn summary_lines(report: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    for (pod, state) in &report.pods {
        match state {
            PodState::Failed { request, reason } => lines.push(match request {
                Some(request) => format!("pod {pod} (containerrecreaterequest/{request}): {reason}"),
                None => format!("pod {pod}: {reason}"),
            }),
            PodState::InFlight { request } if report.timed_out => lines.push(format!(
                "pod {pod} (containerrecreaterequest/{request}): not finished when the timeout passed"
            )),
            PodState::AwaitingReady { request } if report.timed_out => lines.push(format!(
                "pod {pod} (containerrecreaterequest/{request}): recreated but not Ready when the timeout passed"
            )),
            _ => {}
        }
    }
    let summary = report.summary;
    let mut counts = format!(
        "{} of {} pods recreated",
        summary.succeeded,
        report.pods.len()
    );
    if summary.failed > 0 {
        counts.push_str(&format!(", {} failed", summary.failed));
    }
    if summary.in_flight > 0 {
        counts.push_str(&format!(", {} unfinished", summary.in_flight));
    }
    if summary.not_started > 0 {
        counts.push_str(&format!(", {} not started", summary.not_started));
    }
    if report.timed_out {
        counts.push_str(" (timed out)");
    }
    lines.push(counts);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(pods: Vec<(String, PodState)>, summary: Summary, timed_out: bool) -> Report {
        Report {
            requests: Vec::new(),
            pods,
            summary,
            timed_out,
        }
    }

    #[test]
    fn summary_names_every_failure_and_the_counts() {
        let report = report(
            vec![
                (
                    "web-0".to_owned(),
                    PodState::Done {
                        request: "web-0-a".to_owned(),
                    },
                ),
                (
                    "web-1".to_owned(),
                    PodState::Failed {
                        request: Some("web-1-b".to_owned()),
                        reason: "pod has gone".to_owned(),
                    },
                ),
                ("web-2".to_owned(), PodState::Queued),
            ],
            Summary {
                succeeded: 1,
                failed: 1,
                in_flight: 0,
                not_started: 1,
            },
            false,
        );
        assert!(!report.succeeded());
        assert_eq!(
            summary_lines(&report),
            [
                "pod web-1 (containerrecreaterequest/web-1-b): pod has gone",
                "1 of 3 pods recreated, 1 failed, 1 not started",
            ]
        );
    }

    #[test]
    fn timeout_is_a_failure_naming_the_unfinished_requests() {
        let report = report(
            vec![(
                "web-0".to_owned(),
                PodState::InFlight {
                    request: "web-0-a".to_owned(),
                },
            )],
            Summary {
                in_flight: 1,
                ..Default::default()
            },
            true,
        );
        assert!(!report.succeeded());
        assert_eq!(
            summary_lines(&report)[0],
            "pod web-0 (containerrecreaterequest/web-0-a): not finished when the timeout passed"
        );
    }
}
