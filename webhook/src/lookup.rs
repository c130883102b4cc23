//! Pod and node lookups for admission: watch-backed caches (kube-runtime reflectors), with a
//! direct GET on a miss (a pod created a moment ago may not have reached the cache yet). The
//! common case costs no API round trip.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};

use crate::admission::Lookup;
use crate::review::ClusterLookup;

/// Caches of every pod and node, fed by watches, plus a client for misses.
#[derive(Clone)]
pub struct CachedLookup {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    synced: Arc<AtomicBool>,
}

impl CachedLookup {
    /// Starts the pod and node watches on the current runtime.
    pub fn start(client: Client) -> Self {
        let (pods, pod_writer) = reflector::store();
        let (nodes, node_writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let pod_stream = reflector::reflector(
            pod_writer,
            watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()),
        )
        .default_backoff()
        .touched_objects();
        let node_stream = reflector::reflector(
            node_writer,
            watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
        )
        .default_backoff()
        .touched_objects();
        tokio::spawn(pod_stream.for_each(|event| async move {
            if let Err(error) = event {
                tracing::warn!(%error, "pod watch");
            }
        }));
        tokio::spawn(node_stream.for_each(|event| async move {
            if let Err(error) = event {
                tracing::warn!(%error, "node watch");
            }
        }));
        let lookup = Self {
            client,
            pods,
            nodes,
            synced: synced.clone(),
        };
        let (pods, nodes) = (lookup.pods.clone(), lookup.nodes.clone());
        tokio::spawn(async move {
            // Poll at intervals: kube-runtime's readiness future wakes only its latest poller.
            while tokio::time::timeout(Duration::from_millis(250), pods.wait_until_ready())
                .await
                .is_err()
            {}
            while tokio::time::timeout(Duration::from_millis(250), nodes.wait_until_ready())
                .await
                .is_err()
            {}
            synced.store(true, Ordering::Relaxed);
            tracing::info!("pod and node caches synced");
        });
        lookup
    }

    /// Both caches have been listed once.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }
}

fn from_get<T>(result: Result<Option<T>, kube::Error>) -> Lookup<Arc<T>> {
    match result {
        Ok(Some(object)) => Lookup::Found(Arc::new(object)),
        Ok(None) => Lookup::NotFound,
        Err(error) => Lookup::Failed(error.to_string()),
    }
}

impl ClusterLookup for CachedLookup {
    async fn pod(&self, namespace: &str, name: &str) -> Lookup<Arc<Pod>> {
        if let Some(pod) = self.pods.get(&ObjectRef::new(name).within(namespace)) {
            return Lookup::Found(pod);
        }
        from_get(
            Api::<Pod>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await,
        )
    }

    async fn node(&self, name: &str) -> Lookup<Arc<Node>> {
        if let Some(node) = self.nodes.get(&ObjectRef::new(name)) {
            return Lookup::Found(node);
        }
        from_get(Api::<Node>::all(self.client.clone()).get_opt(name).await)
    }
}
