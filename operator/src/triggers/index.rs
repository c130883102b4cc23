//! The trigger wing's index of what its watches saw: the workloads with triggers (a small view of
//! each: UID, the triggers' annotations, its containers, which ConfigMaps and Secrets each
//! container uses), the resourceVersion each ConfigMap and Secret was last seen at, and the hash
//! of an object's data as last read, with the resourceVersion it was read at.
//!
//! Fed watch events as plain values ([`WorkloadEvent`], [`ConfigEvent`]), it says which workloads
//! to wake, which workloads use an object, and whether an object's data must be read again (its
//! resourceVersion moved since the hash was read). It does no I/O: the controller turns watch
//! events into these values, the evaluation reads data and records the hash here. What to do
//! about a workload is decided elsewhere (`config_change`, `schedule`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::refs::{ConfigRef, References};

/// A workload, by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey {
    /// `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl super::queue::Tenant for WorkloadKey {
    /// A namespace is a tenant: its workloads' evaluations take turns with other namespaces'.
    fn tenant(&self) -> &str {
        &self.namespace
    }
}

/// What the index keeps of a workload with triggers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadEntry {
    /// UID.
    pub uid: String,
    /// The annotations a trigger reads, only those (`workload_view::TRIGGER_ANNOTATIONS`).
    pub annotations: BTreeMap<String, String>,
    /// The template's regular containers.
    pub containers: Vec<String>,
    /// Which containers use which ConfigMap or Secret; empty when they are too many.
    pub references: References,
    /// Those that reach a container through a volume (`refs::mounted`): the kubelet writes their
    /// changes to the pods at its next sync, and a rollout of them waits for that.
    pub mounted: BTreeSet<ConfigRef>,
    /// How many ConfigMaps and Secrets the template uses, when more than [`MAX_REFERENCES`]:
    /// none of them is kept, and the config-change trigger refuses the workload.
    pub references_refused: Option<usize>,
}

/// The most ConfigMaps and Secrets a workload's template may use for its config-change trigger:
/// each is read when it changes, and one workload's evaluation must stay short beside other
/// tenants' (a template of thousands of `optional` references would hold an evaluation slot
/// for thousands of reads).
pub const MAX_REFERENCES: usize = 256;

/// A ConfigMap or Secret in a namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// Namespace.
    pub namespace: String,
    /// Kind and name.
    pub object: ConfigRef,
}

/// The hash of an object's data and the resourceVersion it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadHash {
    /// The resourceVersion read.
    pub version: String,
    /// The hash of its data (`hash`).
    pub hash: String,
}

/// What a watch of Deployments, StatefulSets or DaemonSets says.
#[derive(Clone, Debug)]
pub enum WorkloadEvent {
    /// The workload exists; `entry` is what is kept of it, `None` when it has no trigger.
    Seen {
        /// Which workload.
        key: WorkloadKey,
        /// Its view, when it has a trigger annotation.
        entry: Option<WorkloadEntry>,
    },
    /// The workload is gone.
    Gone(WorkloadKey),
    /// The watch of this kind lists everything again.
    Relisting(&'static str),
    /// The list of this kind is complete: those not listed are gone.
    Relisted(&'static str),
}

/// What a metadata watch of ConfigMaps or Secrets says.
#[derive(Clone, Debug)]
pub enum ConfigEvent {
    /// The object exists at this resourceVersion.
    Seen {
        /// Which object.
        object: ObjectKey,
        /// Its resourceVersion.
        version: String,
    },
    /// The object is gone.
    Gone(ObjectKey),
    /// The watch listed everything again: changes may have been missed meanwhile.
    Relisted,
}

/// The watch bookkeeping of the triggers.
#[derive(Debug, Default)]
pub struct TriggerIndex {
    workloads: HashMap<WorkloadKey, WorkloadEntry>,
    /// The resourceVersion of each ConfigMap and Secret seen.
    versions: HashMap<ObjectKey, String>,
    /// The hash of each object's data as last read, with the resourceVersion read.
    hashes: HashMap<ObjectKey, ReadHash>,
    /// Per kind, while its watch re-lists: the workloads listed so far (the others are gone).
    relisting: HashMap<&'static str, HashSet<WorkloadKey>>,
}

impl TriggerIndex {
    /// Takes one workload event; returns the workload to wake: one seen for the first time, or
    /// whose triggers' annotations or used objects changed.
    pub fn apply_workload(&mut self, event: WorkloadEvent) -> Option<WorkloadKey> {
        match event {
            WorkloadEvent::Seen { key, entry } => {
                if let Some(listed) = self.relisting.get_mut(key.kind) {
                    listed.insert(key.clone());
                }
                let Some(entry) = entry else {
                    self.workloads.remove(&key);
                    return None;
                };
                let changed = self.workloads.get(&key).is_none_or(|old| {
                    old.annotations != entry.annotations || old.references != entry.references
                });
                self.workloads.insert(key.clone(), entry);
                changed.then_some(key)
            }
            WorkloadEvent::Gone(key) => {
                self.workloads.remove(&key);
                None
            }
            WorkloadEvent::Relisting(kind) => {
                self.relisting.insert(kind, HashSet::new());
                None
            }
            WorkloadEvent::Relisted(kind) => {
                if let Some(listed) = self.relisting.remove(kind) {
                    self.workloads
                        .retain(|key, _| key.kind != kind || listed.contains(key));
                }
                None
            }
        }
    }

    /// Takes one ConfigMap or Secret event; returns the workloads to wake: those that use an
    /// object whose resourceVersion moved (or that is gone), every workload after a re-list.
    /// An object seen for the first time wakes none (nothing used it at a known version).
    pub fn apply_config(&mut self, event: &ConfigEvent) -> Vec<WorkloadKey> {
        let (object, moved) = match event {
            ConfigEvent::Relisted => return self.workload_keys(),
            ConfigEvent::Gone(object) => (object, self.versions.remove(object).is_some()),
            ConfigEvent::Seen { object, version } => {
                let before = self.versions.insert(object.clone(), version.clone());
                (object, before.is_some_and(|before| before != *version))
            }
        };
        if moved {
            self.users(object)
        } else {
            Vec::new()
        }
    }

    /// The workloads that use `object` (in its namespace).
    pub fn users(&self, object: &ObjectKey) -> Vec<WorkloadKey> {
        self.workloads
            .iter()
            .filter(|(key, entry)| {
                key.namespace == object.namespace && entry.references.contains_key(&object.object)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The hash of `object`'s data when it was read at the resourceVersion last seen; `None`
    /// when it must be read (never read, never seen, or its version moved since the read).
    pub fn fresh_hash(&self, object: &ObjectKey) -> Option<&str> {
        let seen = self.versions.get(object)?;
        self.hashes
            .get(object)
            .filter(|read| read.version == *seen)
            .map(|read| read.hash.as_str())
    }

    /// Whether `object`'s data must be read before its hash counts.
    pub fn needs_read(&self, object: &ObjectKey) -> bool {
        self.fresh_hash(object).is_none()
    }

    /// Records what a read of `object` found: its hash at a version, or `None` when it does not
    /// exist (the hash read before is forgotten).
    pub fn record_read(&mut self, object: ObjectKey, read: Option<ReadHash>) {
        match read {
            Some(read) => {
                self.hashes.insert(object, read);
            }
            None => {
                self.hashes.remove(&object);
            }
        }
    }

    /// The workload, when it has triggers.
    pub fn workload(&self, key: &WorkloadKey) -> Option<&WorkloadEntry> {
        self.workloads.get(key)
    }

    /// Every workload with triggers.
    pub fn workload_keys(&self) -> Vec<WorkloadKey> {
        self.workloads.keys().cloned().collect()
    }

    /// The UIDs of the workloads with triggers.
    pub fn workload_uids(&self) -> Vec<String> {
        self.workloads
            .values()
            .map(|entry| entry.uid.clone())
            .collect()
    }

    /// How many workloads have triggers.
    pub fn workload_count(&self) -> usize {
        self.workloads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: &'static str, namespace: &str, name: &str) -> WorkloadKey {
        WorkloadKey {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    fn web() -> WorkloadKey {
        key("Deployment", "shop", "web")
    }

    fn entry(uses: &[(ConfigRef, &str)]) -> WorkloadEntry {
        let mut references = References::new();
        for (object, container) in uses {
            references
                .entry(object.clone())
                .or_default()
                .insert((*container).to_owned());
        }
        WorkloadEntry {
            uid: "uid".to_owned(),
            annotations: BTreeMap::from([(
                "crr.dev/recreate-on-config-change".to_owned(),
                "true".to_owned(),
            )]),
            containers: vec!["app".to_owned()],
            references,
            mounted: Default::default(),
            references_refused: None,
        }
    }

    fn app_config() -> ConfigRef {
        ConfigRef::config_map("app-config")
    }

    fn object(namespace: &str, object: ConfigRef) -> ObjectKey {
        ObjectKey {
            namespace: namespace.to_owned(),
            object,
        }
    }

    fn seen(key: WorkloadKey, entry: Option<WorkloadEntry>) -> WorkloadEvent {
        WorkloadEvent::Seen { key, entry }
    }

    fn config_seen(object: ObjectKey, version: &str) -> ConfigEvent {
        ConfigEvent::Seen {
            object,
            version: version.to_owned(),
        }
    }

    fn sorted(mut keys: Vec<WorkloadKey>) -> Vec<WorkloadKey> {
        keys.sort();
        keys
    }

    fn read(version: &str, hash: &str) -> Option<ReadHash> {
        Some(ReadHash {
            version: version.to_owned(),
            hash: hash.to_owned(),
        })
    }

    #[test]
    fn a_workload_wakes_when_new_or_when_its_triggers_or_uses_change() {
        let mut index = TriggerIndex::default();
        let first = entry(&[(app_config(), "app")]);
        assert_eq!(
            index.apply_workload(seen(web(), Some(first.clone()))),
            Some(web())
        );
        assert_eq!(index.workload(&web()), Some(&first));

        // Another field of the workload changed (its UID stands for one): kept, not woken.
        let mut same_triggers = first.clone();
        same_triggers.uid = "other".to_owned();
        assert_eq!(
            index.apply_workload(seen(web(), Some(same_triggers.clone()))),
            None
        );
        assert_eq!(index.workload(&web()), Some(&same_triggers));

        let uses_more = entry(&[
            (app_config(), "app"),
            (ConfigRef::secret("password"), "app"),
        ]);
        assert_eq!(
            index.apply_workload(seen(web(), Some(uses_more))),
            Some(web())
        );

        let mut annotated = first;
        annotated
            .annotations
            .insert("crr.dev/recreate-schedule".to_owned(), "@daily".to_owned());
        assert_eq!(
            index.apply_workload(seen(web(), Some(annotated))),
            Some(web())
        );
    }

    #[test]
    fn a_workload_without_triggers_or_gone_is_forgotten() {
        let mut index = TriggerIndex::default();
        let api = key("StatefulSet", "shop", "api");
        index.apply_workload(seen(web(), Some(entry(&[]))));
        index.apply_workload(seen(api.clone(), Some(entry(&[]))));
        assert_eq!(index.workload_count(), 2);

        assert_eq!(index.apply_workload(seen(web(), None)), None);
        assert_eq!(index.workload(&web()), None);
        assert_eq!(index.apply_workload(WorkloadEvent::Gone(api.clone())), None);
        assert_eq!(index.workload(&api), None);
        assert_eq!(index.workload_count(), 0);
    }

    #[test]
    fn a_relist_forgets_the_workloads_of_its_kind_it_did_not_list() {
        let mut index = TriggerIndex::default();
        let stays = key("Deployment", "shop", "stays");
        let went = key("Deployment", "shop", "went");
        let other_kind = key("DaemonSet", "shop", "agent");
        for key in [&stays, &went, &other_kind] {
            index.apply_workload(seen(key.clone(), Some(entry(&[]))));
        }
        assert_eq!(
            index.apply_workload(WorkloadEvent::Relisting("Deployment")),
            None
        );
        assert_eq!(index.workload_count(), 3, "nothing is forgotten mid-list");
        // Listed again unchanged: kept, not woken.
        assert_eq!(
            index.apply_workload(seen(stays.clone(), Some(entry(&[])))),
            None
        );
        assert_eq!(
            index.apply_workload(WorkloadEvent::Relisted("Deployment")),
            None
        );
        assert_eq!(
            sorted(index.workload_keys()),
            sorted(vec![stays.clone(), other_kind.clone()])
        );

        // A later InitDone without its Init forgets nothing.
        index.apply_workload(WorkloadEvent::Relisted("Deployment"));
        assert_eq!(index.workload_count(), 2);
    }

    #[test]
    fn the_users_of_an_object_are_the_workloads_of_its_namespace_that_use_it() {
        let mut index = TriggerIndex::default();
        let api = key("StatefulSet", "shop", "api");
        let elsewhere = key("Deployment", "other", "web");
        index.apply_workload(seen(web(), Some(entry(&[(app_config(), "app")]))));
        index.apply_workload(seen(api.clone(), Some(entry(&[(app_config(), "api")]))));
        index.apply_workload(seen(elsewhere, Some(entry(&[(app_config(), "app")]))));
        index.apply_workload(seen(
            key("Deployment", "shop", "unrelated"),
            Some(entry(&[(ConfigRef::config_map("other"), "app")])),
        ));
        assert_eq!(
            sorted(index.users(&object("shop", app_config()))),
            sorted(vec![web(), api])
        );
        assert_eq!(
            index.users(&object("shop", ConfigRef::secret("app-config"))),
            [],
            "a Secret of the same name is another object"
        );
    }

    #[test]
    fn a_moved_version_or_a_deletion_wakes_the_users_and_first_sight_does_not() {
        let mut index = TriggerIndex::default();
        index.apply_workload(seen(web(), Some(entry(&[(app_config(), "app")]))));
        let used = object("shop", app_config());
        assert_eq!(index.apply_config(&config_seen(used.clone(), "1")), []);
        assert_eq!(
            index.apply_config(&config_seen(used.clone(), "1")),
            [],
            "the same version again"
        );
        assert_eq!(index.apply_config(&config_seen(used.clone(), "2")), [web()]);
        assert_eq!(
            index.apply_config(&ConfigEvent::Gone(used.clone())),
            [web()]
        );
        assert_eq!(
            index.apply_config(&ConfigEvent::Gone(used.clone())),
            [],
            "gone twice"
        );
        assert_eq!(
            index.apply_config(&config_seen(used, "3")),
            [],
            "created again: first sight"
        );
        let unused = object("shop", ConfigRef::config_map("unused"));
        index.apply_config(&config_seen(unused.clone(), "1"));
        assert_eq!(index.apply_config(&config_seen(unused, "2")), []);
    }

    #[test]
    fn a_config_relist_wakes_every_workload() {
        let mut index = TriggerIndex::default();
        let api = key("StatefulSet", "other", "api");
        index.apply_workload(seen(web(), Some(entry(&[]))));
        index.apply_workload(seen(api.clone(), Some(entry(&[]))));
        assert_eq!(
            sorted(index.apply_config(&ConfigEvent::Relisted)),
            sorted(vec![web(), api])
        );
    }

    #[test]
    fn an_object_needs_a_read_until_its_hash_is_read_at_the_version_last_seen() {
        let mut index = TriggerIndex::default();
        let used = object("shop", app_config());
        assert!(index.needs_read(&used), "never seen, never read");
        index.record_read(used.clone(), read("1", "hash-1"));
        assert_eq!(
            index.fresh_hash(&used),
            None,
            "no version seen: the watch has not caught up"
        );
        index.apply_config(&config_seen(used.clone(), "1"));
        assert!(!index.needs_read(&used));
        assert_eq!(index.fresh_hash(&used), Some("hash-1"));

        index.apply_config(&config_seen(used.clone(), "2"));
        assert!(index.needs_read(&used), "the version moved since the read");
        index.record_read(used.clone(), read("2", "hash-2"));
        assert_eq!(index.fresh_hash(&used), Some("hash-2"));

        // Read when the watch was behind: fresh once the watch reaches that version.
        index.record_read(used.clone(), read("3", "hash-3"));
        assert!(index.needs_read(&used));
        index.apply_config(&config_seen(used.clone(), "3"));
        assert_eq!(index.fresh_hash(&used), Some("hash-3"));
    }

    #[test]
    fn a_read_that_finds_nothing_forgets_the_hash() {
        let mut index = TriggerIndex::default();
        let used = object("shop", app_config());
        index.apply_config(&config_seen(used.clone(), "1"));
        index.record_read(used.clone(), read("1", "hash-1"));
        assert!(!index.needs_read(&used));
        index.record_read(used.clone(), None);
        assert!(index.needs_read(&used));
        assert_eq!(index.fresh_hash(&used), None);
    }
}
