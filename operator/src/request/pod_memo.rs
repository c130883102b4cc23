//! The pods of requests in flight, slim (`pod_view::SlimPod`), as the pod watch last showed them.
//! The watch sends every pod's changes; a pod is kept only once a request in flight has asked for
//! it (its first reconcile reads it with one GET), and from then on every change the watch shows
//! replaces it, so the reconciles that follow read it from here: no GET per pod change. A copy a
//! reconcile kept late (read or written before the watch's newer one) is never served over the
//! watch's, and a pod the watch reports deleted is never served again (a tombstone until another
//! pod takes its name), so a gone pod is always read as gone. A request that no longer needs its
//! pod forgets it.
//!
//! A request the node daemon has not started on needs to know only that its pod is still there
//! (`reconcile::PodNeed::Existence`): its first reconcile asks for the pod without reading it
//! ([`want`](PodMemo::want)), and trusts the pod its admission saw unless the watch reported
//! that pod deleted, lately ([`RECENT_DELETIONS`]) or since it was asked for
//! ([`reported_deleted`](PodMemo::reported_deleted)).
//!
//! A relist (the watch lists every pod again after it was away) reports no deletion: a pod kept
//! or asked for that the relist does not show went while the watch was away, and is marked
//! deleted when the relist is complete ([`relisted`](PodMemo::relisted)).
//!
//! Only pods a request asked for are kept (the watch's other pods are dropped; of their
//! deletions, the last [`RECENT_DELETIONS`] of names and UIDs), so memory follows the requests
//! in flight, not the cluster. A copy is served only while the watch's newest
//! version is its very version: the operator sees a pod no older than its watch does (as a
//! controller reading an informer's cache would), every later change re-queues the request, and
//! every pod write is preconditioned on the resourceVersion it was computed from.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;

#[derive(Debug, Default)]
struct Entry {
    /// The newest resourceVersion the watch showed.
    reported: Option<String>,
    /// The pod as last read or written.
    read: Option<Arc<Pod>>,
    /// The UID of the pod the watch reported deleted: a copy of it read before, kept by a
    /// reconcile that was still running, must not bring it back. Empty: a pod of that name went
    /// while the watch was away, whichever it was (a relist no longer showed one).
    deleted: Option<String>,
}

/// How long the deletion of a pod no request asked for is remembered: longer than a request's
/// way from its admission (which saw the pod) to its first reconcile.
pub const RECENT_DELETIONS: Duration = Duration::from_secs(120);

/// The deletions the watch reported of pods no request had asked for, oldest first.
#[derive(Debug, Default)]
struct Deletions {
    /// `namespace/name` → the UID deleted last under that name, and when.
    uids: HashMap<String, (String, Instant)>,
    /// When each was reported, oldest first (a name deleted twice is listed twice).
    order: VecDeque<(Instant, String)>,
}

impl Deletions {
    fn record(&mut self, key: &str, uid: String, now: Instant) {
        self.expire(now);
        self.uids.insert(key.to_owned(), (uid, now));
        self.order.push_back((now, key.to_owned()));
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < RECENT_DELETIONS {
                break;
            }
            let Some((at, key)) = self.order.pop_front() else {
                break;
            };
            // Only its last deletion's turn removes a name deleted twice.
            if self.uids.get(&key).is_some_and(|(_, last)| *last == at) {
                self.uids.remove(&key);
            }
        }
    }
}

/// `namespace/name` → what is known of that pod.
#[derive(Debug, Default)]
pub struct PodMemo {
    entries: Mutex<HashMap<String, Entry>>,
    deletions: Mutex<Deletions>,
    /// While the watch relists: the names of the pods kept or asked for that it has shown (or
    /// that were read or asked for meanwhile).
    relisting: Mutex<Option<HashSet<String>>>,
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
        drop(entries);
        self.listed(key);
    }

    /// The watch shows `pod` (slim): kept as the current copy when a request asked for that
    /// pod before; dropped otherwise, and when it is a copy of the pod reported deleted.
    pub fn seen(&self, key: &str, pod: Arc<Pod>) {
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(key) else {
            return;
        };
        if let Some(deleted) = &entry.deleted {
            if pod.metadata.uid.as_ref() == Some(deleted) {
                return;
            }
            *entry = Entry::default();
        }
        entry.reported = pod.resource_version();
        entry.read = Some(pod);
        drop(entries);
        self.listed(key);
    }

    /// The watch starts listing every pod again.
    pub fn relist_started(&self) {
        *self.relist() = Some(HashSet::new());
    }

    /// The relist is complete: every pod kept or asked for that it did not show (and nobody
    /// read meanwhile) went while the watch was away, and is marked deleted. Returns those pods
    /// (the last copy, or name, namespace and no more), for the requests naming them to be
    /// looked at again.
    pub fn relisted(&self) -> Vec<Pod> {
        let Some(listed) = self.relist().take() else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        for (key, entry) in self.entries().iter_mut() {
            if listed.contains(key) || entry.deleted.is_some() {
                continue;
            }
            let mut pod = entry.read.as_deref().cloned().unwrap_or_default();
            if let Some((namespace, name)) = key.split_once('/') {
                pod.metadata.namespace = Some(namespace.to_owned());
                pod.metadata.name = Some(name.to_owned());
            }
            *entry = Entry {
                deleted: Some(pod.metadata.uid.clone().unwrap_or_default()),
                ..Default::default()
            };
            gone.push(pod);
        }
        gone
    }

    /// Notes that the pod `key` is known to be there, during a relist.
    fn listed(&self, key: &str) {
        if let Some(listed) = self.relist().as_mut() {
            listed.insert(key.to_owned());
        }
    }

    /// The watch reports the pod with `uid` deleted.
    pub fn deleted(&self, key: &str, uid: Option<String>) {
        self.deleted_at(key, uid, Instant::now());
    }

    fn deleted_at(&self, key: &str, uid: Option<String>, now: Instant) {
        let uid = uid.unwrap_or_default();
        if let Some(entry) = self.entries().get_mut(key) {
            *entry = Entry {
                deleted: Some(uid),
                ..Default::default()
            };
            return;
        }
        self.deletions().record(key, uid, now);
    }

    /// A request needs the pod but not read now: from here on, the watch's copies of it are
    /// kept (and its deletion marked) as for a pod read.
    pub fn want(&self, key: &str) {
        self.entries().entry(key.to_owned()).or_default();
        self.listed(key);
    }

    /// Whether a request asked for the pod ([`want`](Self::want)) and the watch has shown no
    /// change of it since (nor has anyone read it).
    pub fn unchanged_since_wanted(&self, key: &str) -> bool {
        self.entries().get(key).is_some_and(|entry| {
            entry.read.is_none() && entry.reported.is_none() && entry.deleted.is_none()
        })
    }

    /// Whether the watch reported the pod of `uid` deleted: since a request asked for it, or
    /// within the last [`RECENT_DELETIONS`].
    pub fn reported_deleted(&self, key: &str, uid: &str) -> bool {
        self.reported_deleted_at(key, uid, Instant::now())
    }

    fn reported_deleted_at(&self, key: &str, uid: &str, now: Instant) -> bool {
        if self
            .entries()
            .get(key)
            .and_then(|entry| entry.deleted.as_deref())
            .is_some_and(|deleted| deleted.is_empty() || deleted == uid)
        {
            return true;
        }
        let mut deletions = self.deletions();
        deletions.expire(now);
        deletions
            .uids
            .get(key)
            .is_some_and(|(deleted, _)| deleted == uid)
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

    fn relist(&self) -> MutexGuard<'_, Option<HashSet<String>>> {
        // One assignment or insert under the lock: consistent after a panic.
        self.relisting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn deletions(&self) -> MutexGuard<'_, Deletions> {
        // A panic between a record's two inserts leaves a name listed without its UID (or the
        // other way round): an entry that expires in its turn.
        self.deletions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
    fn a_pod_asked_for_is_then_served_from_the_watch() {
        let memo = PodMemo::default();
        assert_eq!(version(&memo), None, "never read");
        memo.seen("ns/web", pod("u1", "4"));
        assert_eq!(version(&memo), None, "not asked for: not kept");
        memo.keep("ns/web", pod("u1", "5"));
        assert_eq!(
            version(&memo).as_deref(),
            Some("5"),
            "a fresh read is current"
        );
        memo.seen("ns/web", pod("u1", "5"));
        assert_eq!(version(&memo).as_deref(), Some("5"));
        memo.seen("ns/web", pod("u1", "6"));
        assert_eq!(
            version(&memo).as_deref(),
            Some("6"),
            "the watch's copy, no read"
        );
    }

    #[test]
    fn an_older_copy_kept_late_never_hides_a_newer_report() {
        let memo = PodMemo::default();
        memo.keep("ns/web", pod("u1", "5"));
        memo.seen("ns/web", pod("u1", "7"));
        // A reconcile that read version 5 ends after the watch showed 7: read again.
        memo.keep("ns/web", pod("u1", "5"));
        assert_eq!(version(&memo), None);
        memo.seen("ns/web", pod("u1", "8"));
        assert_eq!(version(&memo).as_deref(), Some("8"));
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
        memo.seen("ns/web", pod("u1", "5"));
        assert_eq!(version(&memo), None);
        // The StatefulSet's next pod of that name, as the watch shows it.
        memo.seen("ns/web", pod("u2", "8"));
        assert_eq!(version(&memo).as_deref(), Some("8"));
        memo.deleted("ns/web", Some("u2".into()));
        // Or as a read shows it.
        memo.keep("ns/web", pod("u3", "9"));
        assert_eq!(version(&memo).as_deref(), Some("9"));
    }

    #[test]
    fn a_pod_wanted_unread_is_kept_from_the_watch_and_its_deletion_marked() {
        let memo = PodMemo::default();
        assert!(!memo.unchanged_since_wanted("ns/web"), "never asked for");
        memo.want("ns/web");
        assert!(memo.unchanged_since_wanted("ns/web"));
        assert_eq!(version(&memo), None, "nothing read or seen yet");
        assert!(!memo.reported_deleted("ns/web", "u1"));
        memo.seen("ns/web", pod("u1", "6"));
        assert!(!memo.unchanged_since_wanted("ns/web"));
        assert_eq!(version(&memo).as_deref(), Some("6"));
        memo.deleted("ns/web", Some("u1".into()));
        assert!(memo.reported_deleted("ns/web", "u1"));
        assert!(
            !memo.reported_deleted("ns/web", "u2"),
            "another pod of that name"
        );
        assert_eq!(version(&memo), None);
    }

    #[test]
    fn deletions_of_pods_nobody_asked_for_are_remembered_for_a_while() {
        let memo = PodMemo::default();
        let start = Instant::now();
        memo.deleted_at("ns/web", Some("u1".into()), start);
        memo.deleted_at("ns/db", Some("u9".into()), start + Duration::from_secs(60));
        assert!(memo.is_empty(), "no pod kept");
        let soon = start + Duration::from_secs(30);
        assert!(memo.reported_deleted_at("ns/web", "u1", soon));
        assert!(!memo.reported_deleted_at("ns/web", "u2", soon));
        assert!(!memo.reported_deleted_at("ns/other", "u1", soon));
        let later = start + RECENT_DELETIONS;
        assert!(
            !memo.reported_deleted_at("ns/web", "u1", later),
            "forgotten"
        );
        assert!(memo.reported_deleted_at("ns/db", "u9", later));
        // A name deleted again is remembered from its last deletion.
        memo.deleted_at("ns/db", Some("u10".into()), later);
        let after_first = start + Duration::from_secs(60) + RECENT_DELETIONS;
        assert!(memo.reported_deleted_at("ns/db", "u10", after_first));
        assert!(!memo.reported_deleted_at("ns/db", "u10", later + RECENT_DELETIONS));
        assert_eq!(memo.deletions().order.len(), 0);
        assert!(memo.deletions().uids.is_empty());
    }

    #[test]
    fn a_pod_a_relist_no_longer_shows_went_while_the_watch_was_away() {
        let memo = PodMemo::default();
        memo.keep("ns/web", pod("u1", "5"));
        memo.keep("ns/db", pod("u7", "2"));
        memo.want("ns/cache");
        memo.want("ns/queue");
        memo.relist_started();
        memo.seen("ns/db", pod("u7", "3"));
        // Read by a reconcile during the relist: known to be there.
        memo.keep("ns/queue", pod("u9", "4"));
        memo.seen("ns/other", pod("u8", "1"));
        let gone = memo.relisted();
        let mut names: Vec<_> = gone.iter().map(|pod| pod.name_any()).collect();
        names.sort();
        assert_eq!(names, ["cache", "web"]);
        assert_eq!(version(&memo), None, "web went");
        assert!(memo.reported_deleted("ns/web", "u1"));
        assert!(
            memo.reported_deleted("ns/cache", "any"),
            "never read: whichever pod it was"
        );
        assert_eq!(
            memo.current("ns/db")
                .and_then(|pod| pod.resource_version())
                .as_deref(),
            Some("3")
        );
        assert!(!memo.reported_deleted("ns/queue", "u9"));
        // A new pod of the name, read fresh, is served.
        memo.keep("ns/cache", pod("u10", "6"));
        assert!(!memo.reported_deleted("ns/cache", "u10"));
        // Outside a relist, nothing is marked.
        assert!(memo.relisted().is_empty());
    }

    #[test]
    fn reports_of_pods_never_read_are_dropped() {
        let memo = PodMemo::default();
        memo.seen("ns/other", pod("u", "1"));
        memo.deleted("ns/other", Some("u".into()));
        assert!(memo.is_empty());
        memo.keep("ns/web", pod("u1", "5"));
        memo.forget("ns/web");
        assert!(memo.is_empty());
    }
}
