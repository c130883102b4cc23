//! `crr_container_recreates_total{namespace,pod,container}`: the restarts crr caused, so that
//! monitoring can tell them from crashes.
//!
//! The kubelet's restart count (kube-state-metrics' `kube_pod_container_status_restarts_total`)
//! goes up by one for every container crr recreates, and every alert built on it fires during a
//! planned restart. This counter goes up by one when a container the daemon killed has come back
//! (its state `Succeeded` with `isKilled`), on the node the pod runs on; the recording rule of
//! `monitoring/restarts.yaml` subtracts it from the kubelet's count. A container that restarted
//! on its own before the daemon reached it (`Succeeded` without `isKilled`) is not counted: that
//! restart was not crr's.
//!
//! The labels are the pod's own `namespace` and `pod`, as kube-state-metrics names them, so a
//! scrape must keep them (`honor_labels: true` on the node daemon's job, monitoring/README.md).
//! A pod's series go when the pod is gone from this node: [`forget_gone_pods`] asks the runtime
//! (a local CRI call, not the API server) every [`SWEEP_INTERVAL`] whether any container of each
//! counted pod remains.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// How often the series of gone pods are looked for.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// The series' labels: the pod's, as kube-state-metrics has them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ContainerLabels {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name.
    pub container: String,
}

/// The series of one pod (by UID): its namespace, name and counted containers.
#[derive(Debug, Default)]
struct PodSeries {
    namespace: String,
    pod: String,
    containers: BTreeSet<String>,
}

/// The counter family and which pod each series belongs to.
#[derive(Clone, Debug, Default)]
pub struct ContainerRecreates {
    family: Family<ContainerLabels, Counter>,
    pods: Arc<Mutex<HashMap<String, PodSeries>>>,
}

impl ContainerRecreates {
    /// Registers `crr_container_recreates_total` at the root of `registry` (no daemon prefix:
    /// the name is the one the recording rule joins on).
    pub fn register(registry: &mut Registry) -> Self {
        let recreates = Self::default();
        registry.register(
            "crr_container_recreates",
            "Containers the node daemon killed for a ContainerRecreateRequest and saw come back, by the pod's namespace, pod and container; a pod's series go when the pod has left this node",
            recreates.family.clone(),
        );
        recreates
    }

    /// Counts one recreate of `container` of the pod `namespace/pod` (UID `pod_uid`).
    pub fn recreated(&self, pod_uid: &str, namespace: &str, pod: &str, container: &str) {
        let mut pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        let series = pods.entry(pod_uid.to_owned()).or_default();
        series.namespace = namespace.to_owned();
        series.pod = pod.to_owned();
        series.containers.insert(container.to_owned());
        // A new pod of the same name (a StatefulSet's) takes the series over: the older pod's
        // entry must not remove them when it goes.
        pods.retain(|uid, other| {
            uid == pod_uid || other.namespace != namespace || other.pod != pod
        });
        drop(pods);
        self.family
            .get_or_create(&ContainerLabels {
                namespace: namespace.to_owned(),
                pod: pod.to_owned(),
                container: container.to_owned(),
            })
            .inc();
    }

    /// The UIDs of the pods with series.
    pub fn pods(&self) -> Vec<String> {
        let pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        pods.keys().cloned().collect()
    }

    /// Removes the series of the pod `pod_uid`.
    pub fn forget_pod(&self, pod_uid: &str) {
        let removed = self
            .pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(pod_uid);
        if let Some(series) = removed {
            for container in series.containers {
                self.family.remove(&ContainerLabels {
                    namespace: series.namespace.clone(),
                    pod: series.pod.clone(),
                    container,
                });
            }
        }
    }
}

/// Every `interval`, removes the series of pods with no container left on this node:
/// `has_containers(pod_uid)` asks the runtime (`Runtime::pod_containers`). A runtime that does
/// not answer removes nothing.
pub async fn forget_gone_pods<F, Fut, E>(
    recreates: ContainerRecreates,
    has_containers: F,
    interval: Duration,
) where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<bool, E>>,
    E: std::fmt::Display,
{
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        sweep(&recreates, &has_containers).await;
    }
}

/// One look at every counted pod.
async fn sweep<F, Fut, E>(recreates: &ContainerRecreates, has_containers: &F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<bool, E>>,
    E: std::fmt::Display,
{
    for pod_uid in recreates.pods() {
        match has_containers(pod_uid.clone()).await {
            Ok(false) => {
                tracing::debug!(pod_uid, "pod gone from the node: its recreate series go");
                recreates.forget_pod(&pod_uid);
            }
            Ok(true) => {}
            Err(error) => {
                tracing::debug!(%error, "listing a counted pod's containers");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(registry: &Registry) -> String {
        crr_runtime::metrics::encode(registry).expect("encodes")
    }

    #[test]
    fn counts_per_container_under_the_pods_own_labels() {
        let mut registry = Registry::default();
        let recreates = ContainerRecreates::register(&mut registry);
        recreates.recreated("uid-1", "shop", "web-0", "app");
        recreates.recreated("uid-1", "shop", "web-0", "app");
        recreates.recreated("uid-1", "shop", "web-0", "sidecar");
        let text = scrape(&registry);
        assert!(
            text.contains("# TYPE crr_container_recreates counter"),
            "{text}"
        );
        assert!(
            text.contains(
                "crr_container_recreates_total{namespace=\"shop\",pod=\"web-0\",container=\"app\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "crr_container_recreates_total{namespace=\"shop\",pod=\"web-0\",container=\"sidecar\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_gone_pods_series_go_and_the_others_stay() {
        let mut registry = Registry::default();
        let recreates = ContainerRecreates::register(&mut registry);
        recreates.recreated("uid-1", "shop", "web-0", "app");
        recreates.recreated("uid-2", "shop", "web-1", "app");
        recreates.forget_pod("uid-1");
        let text = scrape(&registry);
        assert!(!text.contains("pod=\"web-0\""), "{text}");
        assert!(text.contains("pod=\"web-1\""), "{text}");
        assert_eq!(recreates.pods(), ["uid-2"]);
    }

    #[tokio::test]
    async fn a_sweep_forgets_the_pods_without_containers_and_stops_when_the_runtime_fails() {
        let mut registry = Registry::default();
        let recreates = ContainerRecreates::register(&mut registry);
        recreates.recreated("gone", "shop", "web-0", "app");
        recreates.recreated("here", "shop", "web-1", "app");
        sweep(&recreates, &|uid: String| async move {
            Ok::<_, String>(uid == "here")
        })
        .await;
        assert_eq!(recreates.pods(), ["here"]);
        sweep(&recreates, &|_: String| async {
            Err::<bool, _>("runtime away")
        })
        .await;
        assert_eq!(
            recreates.pods(),
            ["here"],
            "an unanswered question removes nothing"
        );
    }

    #[test]
    fn a_new_pod_of_the_same_name_keeps_its_series_when_the_old_one_goes() {
        let mut registry = Registry::default();
        let recreates = ContainerRecreates::register(&mut registry);
        recreates.recreated("old", "db", "db-0", "postgres");
        recreates.recreated("new", "db", "db-0", "postgres");
        recreates.forget_pod("old");
        let text = scrape(&registry);
        assert!(
            text.contains(
                "crr_container_recreates_total{namespace=\"db\",pod=\"db-0\",container=\"postgres\"} 2"
            ),
            "{text}"
        );
        recreates.forget_pod("new");
        assert!(!scrape(&registry).contains("db-0"));
    }
}
