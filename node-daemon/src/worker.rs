//! The daemon's loop: feeds watch events of this node's active requests into a work queue
//! keyed by pod (`queue`), runs pods' rounds in parallel up to a limit, one round per pod at a
//! time, the slots shared fairly between namespaces (`schedule::Slots`), and
//! turns each round's outcome into when to look at the pod again.
//!
//! Each round is supervised ([`serve_rounds`]): a round that panics is logged, counted
//! (`crr_node_daemon_round_panics_total`), and its pod's slot and queue entry are released, the
//! pod retried after [`RETRY_AFTER_PANIC`]. No panic of one pod's round stops another's.
//!
//! It decides only that wiring and the requeue delays; which request of a pod goes next is
//! `schedule`'s, what a round does is `round`'s, and the API server is behind `api_server`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crr_crds::status::StatusPatch;
use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_runtime::backoff::Backoff;
use crr_runtime::events::EventPublisher;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use prometheus_client::metrics::counter::Counter;
use tracing::Instrument as _;

pub use crate::api_server::Watch;
use crate::api_server::{ApiRequests, request_key, watch_pods, watch_requests};
use crate::cri::Runtime;
use crate::metrics::Metrics;
use crate::queue::WorkQueue;
use crate::round::{
    Outcome, Preemption, Requests as _, Round, RoundError, WriteError, timeline_key,
};
use crate::schedule::{self, PodTurn};

/// When a pod whose round panicked is looked at again.
pub const RETRY_AFTER_PANIC: Duration = Duration::from_secs(5);

/// The longest a pod waits for its next look, however far its grace period or deadline: level
/// triggered, a look too early only decides the same again.
pub const LONGEST_REQUEUE: Duration = Duration::from_secs(3600);

/// The work key of a request: its pod, `namespace/podName`.
fn pod_key(crr: &ContainerRecreateRequest) -> String {
    format!(
        "{}/{}",
        crr.namespace().unwrap_or_default(),
        crr.spec.pod_name
    )
}

/// The work key of the pod a pod watch event reports changed or gone (a relist's pods are not,
/// one by one: its end wakes every pod at work).
fn changed_pod_key(event: &watcher::Event<Pod>) -> Option<String> {
    match event {
        watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => Some(format!(
            "{}/{}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        )),
        watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => None,
    }
}

pub struct Daemon {
    requests: ApiRequests,
    runtime: Runtime,
    metrics: Metrics,
    store: Store<ContainerRecreateRequest>,
    queue: Arc<WorkQueue>,
    /// The cap on a recreate's grace period (`--max-grace-period-seconds`).
    max_grace_seconds: u64,
    /// When each unready grace was first seen here.
    grace_clock: crate::grace_clock::GraceClock,
    restart_policies: crate::live_pod::RestartPolicies,
    /// The pods read past a lagging pod watch, per new container.
    lagging_reads: crate::watch_lag::LaggingPodReads,
    /// Failed rounds in a row, per request: their retries back off.
    backoff: Backoff,
    /// Whether the runtime's container events wake rounds (`runtime_events`).
    container_events: crate::runtime_events::ContainerEvents,
}

/// The first retry of a failed round comes after about this, doubling per failure in a row.
pub const RETRY_BASE: Duration = Duration::from_millis(500);
/// A failing request is retried at least this often.
pub const RETRY_CAP: Duration = Duration::from_secs(60);

impl Daemon {
    /// Starts the watch; returns the daemon and a future that feeds the queue.
    pub fn new(
        client: Client,
        runtime: Runtime,
        watch: Watch,
        events: EventPublisher,
        metrics: Metrics,
        max_grace_seconds: u64,
        on_synced: impl Fn() + Send + 'static,
    ) -> (Arc<Self>, impl std::future::Future<Output = ()>) {
        let (store, writer) = reflector::store();
        let (pods, pod_writer) = reflector::store();
        let pod_events = watch_pods(client.clone(), &watch, pod_writer);
        let container_events =
            crate::runtime_events::ContainerEvents::new(metrics.container_events_followed.clone());
        let daemon = Arc::new(Self {
            requests: ApiRequests::new(client.clone(), events, store.clone(), pods),
            runtime,
            metrics,
            store,
            queue: Arc::default(),
            max_grace_seconds,
            grace_clock: Default::default(),
            backoff: Backoff::new(RETRY_BASE, RETRY_CAP),
            restart_policies: Default::default(),
            lagging_reads: Default::default(),
            container_events,
        });
        let events = watch_requests(client, &watch, writer);
        // The node's pods fill their store (a round reads its pod there), and a change of a pod
        // with a request at work wakes that pod's round: the kubelet's report of a container
        // stopped, started or Ready is decided on when the watch delivers it, not at the next
        // look (`recreate::IN_FLIGHT_POLL`).
        let pod_watch = {
            let daemon = daemon.clone();
            pod_events.for_each(move |event| {
                match event {
                    // A relist reports no change by pod: the kubelet's reports it brought (while
                    // the watch was away) may concern any pod at work.
                    Ok(watcher::Event::InitDone) => daemon.wake_pods_at_work(),
                    Ok(event) => {
                        if let Some(key) =
                            changed_pod_key(&event).filter(|key| daemon.has_work(key))
                        {
                            daemon.queue.add(key);
                        }
                    }
                    Err(error) => tracing::warn!(%error, "watch of this node's pods"),
                }
                std::future::ready(())
            })
        };
        let feeder = {
            let daemon = daemon.clone();
            let mut on_synced = Some(on_synced);
            let requests = async move {
                futures::pin_mut!(events);
                while let Some(event) = events.next().await {
                    match event {
                        Ok(watcher::Event::Apply(crr) | watcher::Event::InitApply(crr)) => {
                            // When the watch first delivered it: what a request's pick-up
                            // took before any round of this daemon could start.
                            if daemon.metrics.timeline.seen(&timeline_key(&crr)) {
                                tracing::info!(crr = %request_key(&crr), "request seen");
                            }
                            daemon.queue.add(pod_key(&crr));
                        }
                        Ok(watcher::Event::Delete(crr)) => {
                            daemon.requests.forget(&crr);
                            daemon.metrics.timeline.forget(&timeline_key(&crr));
                            let uid = crr.metadata.uid.as_deref().unwrap_or_default();
                            daemon.grace_clock.forget(uid);
                            daemon.restart_policies.forget(uid);
                            daemon.queue.add(pod_key(&crr));
                        }
                        Ok(watcher::Event::InitDone) => {
                            let requests = daemon.store.state();
                            for crr in &requests {
                                daemon.queue.add(pod_key(crr));
                            }
                            // A relist does not report the requests that left meanwhile.
                            let watched: std::collections::HashSet<String> =
                                requests.iter().map(|crr| timeline_key(crr)).collect();
                            daemon.metrics.timeline.retain(|key| watched.contains(key));
                            if let Some(callback) = on_synced.take() {
                                callback();
                            }
                        }
                        Ok(watcher::Event::Init) => {}
                        Err(error) => tracing::warn!(%error, "watch of ContainerRecreateRequests"),
                    }
                    daemon.requests.watched();
                }
            };
            async move {
                futures::future::join(requests, pod_watch).await;
            }
        };
        (daemon, feeder)
    }

    /// Runs pods' rounds, at most `parallel` at once, shared fairly between namespaces, until
    /// `stop` resolves; then preempts the preStop hooks under way and waits for the running
    /// rounds (a kill under way is finished, never abandoned halfway; a request not yet at its
    /// kill is picked up by the next daemon from its recorded states).
    pub async fn run(
        self: Arc<Self>,
        parallel: usize,
        stop: impl std::future::Future<Output = ()> + Send,
    ) {
        let daemon = self.clone();
        let wants = self.clone();
        serve_rounds(
            self.queue.clone(),
            parallel,
            stop,
            self.metrics.round_panics.clone(),
            move |key: &str| wants.has_work(key),
            move |key, preemption| {
                let daemon = daemon.clone();
                async move { daemon.reconcile(&key, preemption).await }
            },
        )
        .await;
    }

    /// Follows the runtime's container events for good (`runtime_events`): an event about a pod
    /// with a request at work wakes that pod's round; when the stream opens or breaks, every such
    /// pod is looked at again, on the events' terms or the poll's.
    pub async fn follow_container_events(self: Arc<Self>) {
        let on_pod = {
            let daemon = self.clone();
            move |key: String| {
                if daemon.has_work(&key) {
                    daemon.queue.add(key);
                }
            }
        };
        let on_switch = {
            let daemon = self.clone();
            move || daemon.wake_pods_at_work()
        };
        crate::runtime_events::follow(
            self.runtime.clone(),
            &self.container_events,
            on_pod,
            on_switch,
        )
        .await;
    }

    /// Queues the round of every pod with a request at work (as [`has_work`](Self::has_work)
    /// says, in one pass over the cache).
    fn wake_pods_at_work(&self) {
        let keys: std::collections::BTreeSet<String> = self
            .store
            .state()
            .iter()
            .filter(|crr| self.at_work(crr))
            .map(|crr| pod_key(crr))
            .collect();
        for key in keys {
            self.queue.add(key);
        }
    }

    /// How many of this node's requests the daemon holds unfinished (neither completed nor being
    /// deleted), as its cache and its own writes show them: `crr_node_daemon_requests_in_flight`.
    pub fn in_flight(&self) -> usize {
        self.store
            .state()
            .iter()
            .filter(|crr| self.at_work(crr))
            .count()
    }

    /// Whether the daemon has work on `crr`: unfinished and not being deleted, as its cache and
    /// its own writes show it.
    fn at_work(&self, crr: &ContainerRecreateRequest) -> bool {
        !crate::round::must_leave_alone(&self.requests.current(crr))
    }

    /// Whether the pod `key` has a request to work on, as the cache shows it (a key queued by
    /// an event about a finished request has none, and preempts nobody).
    fn has_work(&self, key: &str) -> bool {
        self.store
            .state()
            .iter()
            .any(|crr| pod_key(crr) == key && self.at_work(crr))
    }

    /// One round for one pod; returns when to look again (None: on the next event).
    async fn reconcile(&self, key: &str, preemption: Preemption) -> Option<Duration> {
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
                    let patch = patch.queued_behind(
                        &crr,
                        jiff::Timestamp::now(),
                        waiting.metadata.generation,
                    );
                    self.requests.write_status(&patch).await
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
            max_grace_seconds: self.max_grace_seconds,
            preemption,
            grace_clock: &self.grace_clock,
            restart_policies: &self.restart_policies,
            lagging_reads: &self.lagging_reads,
            container_events: &self.container_events,
        };
        let request = request_key(&crr);
        tracing::debug!(parent: &span, "round starts");
        let outcome = round.run(crr.clone()).instrument(span.clone()).await;
        tracing::debug!(parent: &span, ?outcome, "round ended");
        if !matches!(
            outcome,
            Err(RoundError::Write(WriteError::Api(_)) | RoundError::Runtime(_))
        ) {
            self.backoff.succeeded(&request);
        }
        match outcome {
            Ok(Outcome::After(after)) => Some(after),
            Ok(Outcome::OnChange) => None,
            Ok(Outcome::Preempted) => Some(Duration::ZERO),
            // The completion's answer stays the request's current copy until the watch shows
            // it (or its deletion): forgotten here, the watch's older copy would be decided on
            // again, completed a second time and refused (a wasted write, a conflict).
            Ok(Outcome::Completed) => Some(Duration::ZERO),
            Err(RoundError::Write(WriteError::Conflict)) => {
                tracing::debug!("the request changed meanwhile; deciding again");
                Some(Duration::from_millis(200))
            }
            Err(RoundError::Write(WriteError::Refused(reason))) => {
                // Forbidden (a policy such as node-scope) or invalid: trying again changes
                // nothing. The request fails with the reason, if the API server lets us say so.
                tracing::warn!(parent: &span, %reason, "the API server refused the node daemon; the request fails");
                round.fail_refused(&crr, &reason).instrument(span).await;
                None
            }
            Err(error) => {
                let after = self.backoff.failed(&request);
                tracing::warn!(parent: &span, %error, failures = self.backoff.failures(&request), retry_in = ?after, "round failed; retrying");
                Some(after)
            }
        }
    }
}

/// A round that ended, as its supervisor reports it to the loop.
struct Ended {
    key: String,
    /// Which start of the key this was (a key may start again before the loop hears of this).
    run: u64,
    /// When to look at the pod again (`None`: on the next event).
    requeue: Option<Duration>,
}

/// A running round, as the loop tracks it.
struct Started {
    run: u64,
    preempt: tokio::sync::watch::Sender<bool>,
}

/// Runs `round(key, preemption)` for the keys `queue` hands out, at most `limit` at once, the
/// slots shared between namespaces by `schedule::Slots::to_start`, a namespace above its share
/// preempted by `Slots::to_preempt` when another waits; each round supervised: a panic is
/// logged, counted in `panics`, and the key released and retried after [`RETRY_AFTER_PANIC`].
/// Only waiting keys that `has_work` preempt anyone. When `stop` resolves, every running round is
/// preempted and waited for.
pub async fn serve_rounds<F, Fut>(
    queue: Arc<WorkQueue>,
    limit: usize,
    stop: impl Future<Output = ()> + Send,
    panics: Counter,
    has_work: impl Fn(&str) -> bool,
    round: F,
) where
    F: Fn(String, Preemption) -> Fut,
    Fut: Future<Output = Option<Duration>> + Send + 'static,
{
    let limit = limit.max(1);
    let mut stop = std::pin::pin!(stop);
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel::<Ended>();
    let mut waiting: Vec<String> = vec![];
    let mut running: HashMap<String, Started> = HashMap::new();
    let mut by_namespace = schedule::Running::new();
    let mut resting = std::collections::BTreeSet::new();
    let mut runs: u64 = 0;
    loop {
        let slots = schedule::Slots {
            limit,
            running: &by_namespace,
            waiting: &waiting,
            resting: &resting,
        };
        let mut to_preempt = slots.to_preempt();
        if !to_preempt.is_empty() {
            let demanding: Vec<String> = waiting
                .iter()
                .filter(|key| has_work(key))
                .cloned()
                .collect();
            to_preempt = schedule::Slots {
                waiting: &demanding,
                ..slots
            }
            .to_preempt();
        }
        let to_start = slots.to_start();
        for key in to_preempt {
            if let Some(started) = running.get(&key) {
                started.preempt.send_replace(true);
            }
        }
        for key in to_start {
            waiting.retain(|waiting| *waiting != key);
            runs = runs.wrapping_add(1);
            let (preempt, preemption) = Preemption::new();
            running.insert(key.clone(), Started { run: runs, preempt });
            by_namespace
                .entry(schedule::namespace_of(&key).to_owned())
                .or_default()
                .push(key.clone());
            let handle = tokio::spawn(round(key.clone(), preemption));
            let ended = ended_tx.clone();
            let panics = panics.clone();
            let run = runs;
            tokio::spawn(async move {
                let requeue = match handle.await {
                    Ok(requeue) => requeue,
                    Err(error) => {
                        if error.is_panic() {
                            let message = panic_message(error.into_panic());
                            tracing::error!(pod = %key, panic = %message, "round panicked; the pod is retried later");
                            panics.inc();
                        }
                        Some(RETRY_AFTER_PANIC)
                    }
                };
                let _ = ended.send(Ended { key, run, requeue });
            });
        }
        tokio::select! {
            () = queue.added() => {
                for key in queue.take() {
                    resting.remove(&key);
                    if !waiting.contains(&key) {
                        waiting.push(key);
                    }
                }
            }
            Some(ended) = ended_rx.recv() => {
                if let Some(resting_key) = release(&queue, &mut running, &mut by_namespace, ended) {
                    resting.insert(resting_key);
                }
            }
            () = &mut stop => break,
        }
    }
    for started in running.values() {
        started.preempt.send_replace(true);
    }
    while !running.is_empty() {
        let Some(ended) = ended_rx.recv().await else {
            break;
        };
        release(&queue, &mut running, &mut by_namespace, ended);
    }
}

/// A round ended: frees its slot and queues its key again as its outcome asks; returns the key
/// when it rests (is to be looked at again after a delay).
fn release(
    queue: &Arc<WorkQueue>,
    running: &mut HashMap<String, Started>,
    by_namespace: &mut schedule::Running,
    ended: Ended,
) -> Option<String> {
    if running
        .get(&ended.key)
        .is_none_or(|started| started.run != ended.run)
    {
        return None;
    }
    running.remove(&ended.key);
    let namespace = schedule::namespace_of(&ended.key);
    if let Some(keys) = by_namespace.get_mut(namespace) {
        keys.retain(|key| *key != ended.key);
        if keys.is_empty() {
            by_namespace.remove(namespace);
        }
    }
    let key = ended.key;
    if queue.done(&key) {
        queue.add(key);
    } else if let Some(after) = ended.requeue {
        if after.is_zero() {
            queue.add(key);
        } else {
            queue.add_after(key.clone(), after.min(LONGEST_REQUEUE));
            return Some(key);
        }
    }
    None
}

/// The message of a panic's payload (a `&str` or a `String`, as `panic!` makes them).
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn a_pod_changed_or_gone_names_its_work_key_and_a_relist_names_none() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ns", "name": "web-0"},
        }))
        .unwrap();
        assert_eq!(
            changed_pod_key(&watcher::Event::Apply(pod.clone())).as_deref(),
            Some("ns/web-0")
        );
        assert_eq!(
            changed_pod_key(&watcher::Event::Delete(pod.clone())).as_deref(),
            Some("ns/web-0")
        );
        // The work key of a request for that pod is the same key.
        let crr = crate::recreate::admitted_request(&["app"], Default::default());
        assert_eq!(
            changed_pod_key(&watcher::Event::Apply(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"namespace": crr.namespace(), "name": crr.spec.pod_name},
                }))
                .unwrap()
            )),
            Some(pod_key(&crr))
        );
        assert_eq!(changed_pod_key(&watcher::Event::InitApply(pod)), None);
        assert_eq!(changed_pod_key(&watcher::Event::<Pod>::InitDone), None);
    }

    /// The keys each call of a round function saw, in order.
    #[derive(Clone, Default)]
    struct Calls(Arc<Mutex<Vec<String>>>);

    impl Calls {
        fn record(&self, key: &str) -> usize {
            let mut calls = self.0.lock().unwrap();
            calls.push(key.to_owned());
            calls.iter().filter(|call| *call == key).count()
        }

        fn of(&self, key: &str) -> usize {
            self.0
                .lock()
                .unwrap()
                .iter()
                .filter(|call| *call == key)
                .count()
        }
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_round_is_counted_releases_its_slot_and_is_retried() {
        let queue = Arc::new(WorkQueue::default());
        let panics = Counter::default();
        let calls = Calls::default();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn({
            let (queue, panics, calls) = (queue.clone(), panics.clone(), calls.clone());
            async move {
                serve_rounds(
                    queue,
                    1,
                    async move {
                        let _ = stop_rx.await;
                    },
                    panics,
                    |_| true,
                    move |key, _| {
                        let nth = calls.record(&key);
                        async move {
                            assert!(
                                !(key == "ns/bad" && nth == 1),
                                "a bug in the round of {key}"
                            );
                            None
                        }
                    },
                )
                .await;
            }
        });
        queue.add("ns/bad".into());
        queue.add("ns/good".into());
        settle().await;
        assert_eq!(panics.get(), 1, "counted");
        assert_eq!(calls.of("ns/good"), 1, "the one slot was released");
        tokio::time::advance(RETRY_AFTER_PANIC).await;
        settle().await;
        assert_eq!(calls.of("ns/bad"), 2, "retried later");
        assert_eq!(panics.get(), 1);
        stop_tx.send(()).unwrap();
        serving.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_namespace_holding_every_slot_is_preempted_for_another() {
        let queue = Arc::new(WorkQueue::default());
        let calls = Calls::default();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn({
            let (queue, calls) = (queue.clone(), calls.clone());
            async move {
                serve_rounds(
                    queue,
                    2,
                    async move {
                        let _ = stop_rx.await;
                    },
                    Counter::default(),
                    |key| key != "idle/1",
                    move |key, preemption: Preemption| {
                        calls.record(&key);
                        async move {
                            if key.starts_with("hog/") {
                                // A hook that never returns, but yields to preemption.
                                preemption.requested_for_test().await;
                                return Some(Duration::ZERO);
                            }
                            None
                        }
                    },
                )
                .await;
            }
        });
        queue.add("hog/1".into());
        queue.add("hog/2".into());
        settle().await;
        queue.add("idle/1".into());
        settle().await;
        assert_eq!(calls.of("hog/2"), 1, "a key without work preempts nobody");
        queue.add("tenant/1".into());
        settle().await;
        assert_eq!(calls.of("tenant/1"), 1, "the other namespace got a slot");
        assert_eq!(
            calls.of("hog/2"),
            2,
            "the preempted round waits and runs again"
        );
        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("shutdown preempts the hooks and ends")
            .unwrap();
    }

    #[test]
    fn panic_messages_are_read_from_either_payload() {
        assert_eq!(panic_message(Box::new("static")), "static");
        assert_eq!(panic_message(Box::new(String::from("owned"))), "owned");
        assert_eq!(panic_message(Box::new(3)), "a panic without a message");
    }
}
