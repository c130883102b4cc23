//! The daemon's loop: feeds watch events of this node's active requests into a work queue
//! keyed by pod (`queue`), runs pods' rounds in parallel up to a limit, one round per pod at a
//! time, and turns each round's outcome into when to look at the pod again.
//!
//! It decides only that wiring and the requeue delays; which request of a pod goes next is
//! `schedule`'s, what a round does is `round`'s, and the API server is behind `api_server`.

use std::sync::Arc;
use std::time::Duration;

use crr_crds::status::StatusPatch;
use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};
use crr_runtime::events::EventPublisher;
use futures::StreamExt as _;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use tokio::sync::Semaphore;
use tracing::Instrument as _;

pub use crate::api_server::Watch;
use crate::api_server::{ApiRequests, request_key, watch_requests};
use crate::cri::Runtime;
use crate::metrics::Metrics;
use crate::queue::WorkQueue;
use crate::round::{Outcome, Requests as _, Round, RoundError, WriteError};
use crate::schedule::{self, PodTurn};

/// The work key of a request: its pod, `namespace/podName`.
fn pod_key(crr: &ContainerRecreateRequest) -> String {
    format!(
        "{}/{}",
        crr.namespace().unwrap_or_default(),
        crr.spec.pod_name
    )
}

pub struct Daemon {
    requests: ApiRequests,
    runtime: Runtime,
    metrics: Metrics,
    store: Store<ContainerRecreateRequest>,
    queue: Arc<WorkQueue>,
}

impl Daemon {
    /// Starts the watch; returns the daemon and a future that feeds the queue.
    pub fn new(
        client: Client,
        runtime: Runtime,
        watch: Watch,
        events: EventPublisher,
        metrics: Metrics,
        on_synced: impl Fn() + Send + 'static,
    ) -> (Arc<Self>, impl std::future::Future<Output = ()>) {
        let (store, writer) = reflector::store();
        let daemon = Arc::new(Self {
            requests: ApiRequests::new(client.clone(), events),
            runtime,
            metrics,
            store,
            queue: Arc::default(),
        });
        let events = watch_requests(client, &watch, writer);
        let feeder = {
            let daemon = daemon.clone();
            let mut on_synced = Some(on_synced);
            async move {
                futures::pin_mut!(events);
                while let Some(event) = events.next().await {
                    match event {
                        Ok(watcher::Event::Apply(crr) | watcher::Event::InitApply(crr)) => {
                            daemon.queue.add(pod_key(&crr));
                        }
                        Ok(watcher::Event::Delete(crr)) => {
                            daemon.requests.forget(&crr);
                            daemon.queue.add(pod_key(&crr));
                        }
                        Ok(watcher::Event::InitDone) => {
                            for crr in daemon.store.state() {
                                daemon.queue.add(pod_key(&crr));
                            }
                            if let Some(callback) = on_synced.take() {
                                callback();
                            }
                        }
                        Ok(watcher::Event::Init) => {}
                        Err(error) => tracing::warn!(%error, "watch of ContainerRecreateRequests"),
                    }
                }
            }
        };
        (daemon, feeder)
    }

    /// Runs pods' rounds, at most `parallel` at once, until `stop` resolves; then waits for the
    /// running ones (a kill under way is finished, never abandoned halfway; a request not yet
    /// at its kill is picked up by the next daemon from its recorded states).
    pub async fn run(
        self: Arc<Self>,
        parallel: usize,
        stop: impl std::future::Future<Output = ()> + Send,
    ) {
        let mut stop = std::pin::pin!(stop);
        let parallel = parallel.clamp(1, Semaphore::MAX_PERMITS);
        let slots = Arc::new(Semaphore::new(parallel));
        'outer: loop {
            tokio::select! {
                () = self.queue.added() => {}
                () = &mut stop => break,
            }
            for key in self.queue.take() {
                let permit = tokio::select! {
                    permit = slots.clone().acquire_owned() => permit,
                    () = &mut stop => break 'outer,
                };
                let Ok(permit) = permit else {
                    break 'outer;
                };
                let daemon = self.clone();
                tokio::spawn(async move {
                    let requeue = daemon.reconcile(&key).await;
                    drop(permit);
                    if daemon.queue.done(&key) {
                        daemon.queue.add(key);
                    } else if let Some(after) = requeue {
                        if after.is_zero() {
                            daemon.queue.add(key);
                        } else {
                            daemon.queue.add_after(key, after);
                        }
                    }
                });
            }
        }
        let _ = slots
            .acquire_many(u32::try_from(parallel).unwrap_or(u32::MAX))
            .await;
    }

    /// One round for one pod; returns when to look again (None: on the next event).
    async fn reconcile(&self, key: &str) -> Option<Duration> {
        let (namespace, pod_name) = key.split_once('/')?;
        let of_pod = self
            .store
            .state()
            .into_iter()
            .filter(|crr| {
                crr.namespace().as_deref() == Some(namespace) && crr.spec.pod_name == pod_name
            })
            .map(|crr| self.requests.current(&crr));
        let PodTurn {
            next: crr,
            to_mark_pending,
        } = schedule::next_turn(of_pod)?;
        for waiting in to_mark_pending {
            let written = match StatusPatch::of(&waiting) {
                Ok(patch) => {
                    self.requests
                        .write_status(&patch.phase(Phase::Pending))
                        .await
                }
                Err(error) => Err(error.into()),
            };
            if let Err(error) = written {
                tracing::debug!(%error, crr = %request_key(&waiting), "marking Pending");
            }
        }
        let span = tracing::info_span!("round", crr = %request_key(&crr), pod = pod_name);
        let round = Round {
            requests: &self.requests,
            runtime: &self.runtime,
            metrics: &self.metrics,
        };
        match round.run(crr.clone()).instrument(span).await {
            Ok(Outcome::After(after)) => Some(after),
            Ok(Outcome::OnChange) => None,
            Ok(Outcome::Completed) => {
                self.requests.forget(&crr);
                Some(Duration::ZERO)
            }
            Err(RoundError::Write(WriteError::Conflict)) => {
                tracing::debug!("the request changed meanwhile; deciding again");
                Some(Duration::from_millis(200))
            }
            Err(error) => {
                tracing::warn!(%error, "round failed; retrying");
                Some(Duration::from_secs(1))
            }
        }
    }
}
