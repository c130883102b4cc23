//! Pod and node lookups for admission.
//!
//! Memory must not grow with the number of pods in the cluster, so pods are not cached: a CRR
//! CREATE reads its one pod with a GET, in the mutating hook (a consistent read, so the container
//! IDs injected into `statusContext` are the current ones). The validating hook reads no pod: it
//! checks what the mutating hook wrote (`admission::validate_create` says why that is safe), so a
//! CREATE costs one pod GET in all. Only nodes are cached, and only the one thing
//! admission reads from them, their labels: a metadata-only watch with `managedFields` and
//! annotations dropped before the objects reach the store. A node missing from the cache (one
//! that joined a moment ago) is read with a metadata GET.
//!
//! Why not a pod cache: a full `Pod` decoded from the watch costs about 32 KiB of heap per pod
//! (most of it server-side-apply `managedFields`, decoded into `serde_json::Value` trees, and the
//! reflector's second copy during every relist), so 5,000 pods OOM-killed the webhook at its
//! 128 MiB limit. `bench/webhook-pods.sh` measures it on the test bed.

use std::sync::Arc;

use crr_runtime::backoff::WatchBackoffExt as _;
use crr_runtime::client::read_retrying_connect;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};

use crate::admission::Lookup;
use crate::review::ClusterLookup;

/// Pods by GET, nodes' labels from a metadata-only watch.
#[derive(Clone)]
pub struct ApiLookup {
    client: Client,
    nodes: Store<PartialObjectMeta<Node>>,
}

/// Keeps of a node's metadata only what admission reads: its name and labels.
fn keep_labels_only(node: &mut PartialObjectMeta<Node>) {
    let ObjectMeta {
        name,
        labels,
        resource_version,
        ..
    } = std::mem::take(&mut node.metadata);
    node.metadata = ObjectMeta {
        name,
        labels,
        resource_version,
        ..ObjectMeta::default()
    };
}

impl ApiLookup {
    /// Starts the node metadata watch on the current runtime. Readiness does not wait for it:
    /// until it has listed the nodes, a lookup misses and reads the node with a GET.
    pub fn start(client: Client) -> Self {
        let (nodes, node_writer) = reflector::store();
        let node_stream = reflector::reflector(
            node_writer,
            watcher(
                Api::<PartialObjectMeta<Node>>::all(client.clone()),
                watcher::Config::default(),
            )
            .watch_backoff()
            .modify(keep_labels_only),
        )
        .touched_objects();
        tokio::spawn(node_stream.for_each(|event| async move {
            if let Err(error) = event {
                tracing::warn!(%error, "node watch");
            }
        }));
        let store = nodes.clone();
        tokio::spawn(async move {
            if crr_runtime::store::wait_until_ready(&store).await.is_ok() {
                tracing::info!(nodes = store.len(), "node label cache synced");
            }
        });
        Self { client, nodes }
    }
}

fn from_get<T, U>(
    result: Result<Option<T>, kube::Error>,
    project: impl FnOnce(T) -> U,
) -> Lookup<Arc<U>> {
    match result {
        Ok(Some(object)) => Lookup::Found(Arc::new(project(object))),
        Ok(None) => Lookup::NotFound,
        Err(error) => Lookup::Failed(error.to_string()),
    }
}

impl ClusterLookup for ApiLookup {
    async fn pod(&self, namespace: &str, name: &str) -> Lookup<Arc<Pod>> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), namespace);
        from_get(read_retrying_connect(|| pods.get_opt(name)).await, |pod| {
            pod
        })
    }

    async fn node(&self, name: &str) -> Lookup<Arc<ObjectMeta>> {
        if let Some(node) = self.nodes.get(&ObjectRef::new(name)) {
            return Lookup::Found(Arc::new(node.metadata.clone()));
        }
        let nodes = Api::<Node>::all(self.client.clone());
        from_get(
            read_retrying_connect(|| nodes.get_metadata_opt(name)).await,
            |mut node| {
                keep_labels_only(&mut node);
                node.metadata
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_node_keeps_its_name_and_labels_only() {
        let mut node: PartialObjectMeta<Node> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "n1",
                "resourceVersion": "7",
                "uid": "u",
                "labels": {"type": "virtual-kubelet"},
                "annotations": {"big": "x".repeat(4096)},
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}],
            }
        }))
        .unwrap();
        keep_labels_only(&mut node);
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(node.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            node.metadata
                .labels
                .unwrap()
                .get("type")
                .map(String::as_str),
            Some("virtual-kubelet")
        );
        assert!(node.metadata.annotations.is_none());
        assert!(node.metadata.managed_fields.is_none());
        assert!(node.metadata.uid.is_none());
    }
}
