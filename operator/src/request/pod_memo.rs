//! The pods of requests in flight, as the operator last read them, with the newest
//! resourceVersion the pod metadata watch reported for each (one pod GET per pod change, not per reconcile). A reconcile
//! reuses the pod it read before while the watch has reported no change since; otherwise it
//! reads the pod again (one GET) and keeps that. A copy kept late by a reconcile that read it
//! earlier never hides a newer report, and a pod the watch reports deleted is never served again
//! (a tombstone until another pod takes its name), so a gone pod is always read as gone. A
//! request that no longer needs its pod forgets it.
//!
//! Only pods the operator has read are kept (the watch's reports for other pods are dropped), so
//! memory follows the requests in flight, not the cluster. A copy is served only while the
//! watch's newest report is its very version: the operator sees a pod no older than its watch
//! does (as a controller reading an informer's cache would), every later change re-queues the
//! request, and every pod write is preconditioned on the resourceVersion it was computed from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;

#[derive(Debug, Default)]
struct Entry {
    /// The newest resourceVersion the metadata watch reported.
    reported: Option<String>,
    /// The pod as last read or written.
    read: Option<Arc<Pod>>,
    /// The UID of the pod the watch reported deleted: a copy of it read before, kept by a
    /// reconcile that was still running, must not bring it back.
    deleted: Option<String>,
}

/// `namespace/name` → what is known of that pod.
#[derive(Debug, Default)]
pub struct PodMemo {
    entries: Mutex<HashMap<String, Entry>>,
}

impl PodMemo {
    /// The pod as last read, if the watch has since reported that very version and nothing
    /// newer.
    pub fn current(&self, key: &str) -> Option<Arc<Pod>> {
        let entries = self.entries();
        let entry = entries.get(key)?;
        let read = entry.read.as_ref()?;
        (entry.deleted.is_none()
            && entry.reported.is_some()
            && entry.reported == read.resource_version())
        .then(|| read.clone())
    }

    /// Keeps `pod` as read (or written). A pod read fresh (no entry yet, or another pod of the
    /// same name) is trusted as current; otherwise the watch's report decides. A copy of the pod
    /// the watch reported deleted is dropped.
    pub fn keep(&self, key: &str, pod: Arc<Pod>) {
        let mut entries = self.entries();
        let entry = entries.entry(key.to_owned()).or_default();
        if let Some(deleted) = &entry.deleted {
            if pod.metadata.uid.as_ref() == Some(deleted) {
                return;
            }
            *entry = Entry::default();
        }
        if entry.read.is_none() {
            entry.reported = pod.resource_version();
        }
        entry.read = Some(pod);
    }

    /// The metadata watch reports `version` of a pod; ignored for pods never read.
    pub fn reported(&self, key: &str, version: Option<String>) {
        if let Some(entry) = self.entries().get_mut(key)
            && entry.deleted.is_none()
        {
            entry.reported = version;
        }
    }

    /// The metadata watch reports the pod with `uid` deleted.
    pub fn deleted(&self, key: &str, uid: Option<String>) {
        if let Some(entry) = self.entries().get_mut(key) {
            *entry = Entry {
                deleted: Some(uid.unwrap_or_default()),
                ..Default::default()
            };
        }
    }

    /// No request needs the pod any more.
    pub fn forget(&self, key: &str) {
        self.entries().remove(key);
    }

    /// How many pods are kept.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether no pod is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Each change under the lock is one insert, update or remove: consistent after a panic.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, version: &str) -> Arc<Pod> {
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid.to_owned());
        pod.metadata.resource_version = Some(version.to_owned());
        Arc::new(pod)
    }

    fn version(memo: &PodMemo) -> Option<String> {
        memo.current("ns/web")
            .and_then(|pod| pod.resource_version())
    }

    #[test]
    fn a_pod_is_reused_until_the_watch_reports_another_version() {
        let memo = PodMemo::default();
        assert_eq!(version(&memo), None, "never read");
        memo.keep("ns/web", pod("u1", "5"));
        assert_eq!(
            version(&memo).as_deref(),
            Some("5"),
            "a fresh read is current"
        );
        memo.reported("ns/web", Some("5".into()));
        assert_eq!(version(&memo).as_deref(), Some("5"));
        memo.reported("ns/web", Some("6".into()));
        assert_eq!(version(&memo), None, "changed since: read again");
        memo.keep("ns/web", pod("u1", "6"));
        assert_eq!(version(&memo).as_deref(), Some("6"));
    }

    #[test]
    fn an_older_copy_kept_late_never_hides_a_newer_report() {
        let memo = PodMemo::default();
        memo.keep("ns/web", pod("u1", "5"));
        memo.reported("ns/web", Some("7".into()));
        // A reconcile that read version 5 ends after the watch reported 7.
        memo.keep("ns/web", pod("u1", "5"));
        assert_eq!(version(&memo), None);
    }

    #[test]
    fn a_deleted_pod_stays_deleted_until_another_pod_takes_its_name() {
        let memo = PodMemo::default();
        memo.keep("ns/web", pod("u1", "5"));
        memo.deleted("ns/web", Some("u1".into()));
        assert_eq!(version(&memo), None);
        // A reconcile still running keeps its copy of the deleted pod: dropped.
        memo.keep("ns/web", pod("u1", "5"));
        assert_eq!(version(&memo), None);
        memo.reported("ns/web", Some("5".into()));
        assert_eq!(version(&memo), None);
        // The StatefulSet's next pod of that name.
        memo.keep("ns/web", pod("u2", "9"));
        assert_eq!(version(&memo).as_deref(), Some("9"));
    }

    #[test]
    fn reports_of_pods_never_read_are_dropped() {
        let memo = PodMemo::default();
        memo.reported("ns/other", Some("1".into()));
        memo.deleted("ns/other", Some("u".into()));
        assert!(memo.is_empty());
        memo.keep("ns/web", pod("u1", "5"));
        memo.forget("ns/web");
        assert!(memo.is_empty());
    }
}
