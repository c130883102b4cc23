//! What a workload's triggers last did, as the operator knows it: the workload's TriggerRecord
//! (`crr_crds::trigger_record`), an object crr owns beside the workload, owned by it. The
//! operator never writes the workload itself.
//!
//! [`Records`] is fed the record watch's events and the operator's own writes: a write is seen at
//! once, before its watch event comes back, so that an evaluation right after it (a second change
//! within the watch's lag) never decides on the record it replaced. The watch takes over when it
//! shows that write (its resourceVersion) or anything after.
//!
//! A workload without a record is read as the operator wrote it before records existed: its
//! annotations `crr.dev/config-hashes` and `crr.dev/last-scheduled` ([`recorded_hashes`],
//! [`last_scheduled`]). The first write makes its record; the annotations are never written again.
//!
//! Each trigger writes its own field with server-side apply under its own field manager
//! ([`apply`]), so that neither write takes the other's field away.

use std::collections::{BTreeMap, HashMap};

use crr_crds::keys;
use crr_crds::trigger_record::{
    PendingChange, RecordedWorkload, TriggerRecord, TriggerRecordSpec, record_name,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt as _;
use kube::api::ObjectMeta;
use kube::runtime::watcher;

use super::config_change::Hashes;
use super::index::WorkloadKey;

/// A record, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecordKey {
    pub namespace: String,
    pub name: String,
}

impl RecordKey {
    /// The key of the record of `workload`.
    pub fn of(workload: &WorkloadKey) -> Self {
        Self {
            namespace: workload.namespace.clone(),
            name: record_name(workload.kind, &workload.name),
        }
    }
}

/// What the operator keeps of a record: nothing a tenant could make large beyond the hashes, which
/// are bounded by the references a workload may have (`index::MAX_REFERENCES`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The resourceVersion it was seen or written at.
    pub version: String,
    /// The UID of the workload it is of.
    pub workload_uid: String,
    pub config_hashes: Option<Hashes>,
    /// Unparseable text reads as none.
    pub last_scheduled: Option<Timestamp>,
    /// A config change waiting for the restart window.
    pub pending_change: Option<PendingChange>,
    /// The `crr.dev/restart-requested-at` value last acted on.
    pub restart_requested: Option<String>,
}

impl Record {
    /// The record's key and slim view; `None` without a namespace or name.
    pub fn of(object: &TriggerRecord) -> Option<(RecordKey, Self)> {
        let key = RecordKey {
            namespace: object.namespace()?,
            name: object.metadata.name.clone()?,
        };
        let spec = &object.spec;
        Some((
            key,
            Self {
                version: object.resource_version().unwrap_or_default(),
                workload_uid: spec.workload.uid.clone(),
                config_hashes: spec.config_hashes.clone(),
                last_scheduled: spec
                    .last_scheduled
                    .as_deref()
                    .and_then(|text| text.parse().ok()),
                pending_change: spec.pending_change.clone(),
                restart_requested: spec.restart_requested.clone(),
            },
        ))
    }
}

/// The records the operator knows: from their watch, and its own writes the watch has not shown
/// yet.
#[derive(Debug, Default)]
pub struct Records {
    seen: HashMap<RecordKey, Record>,
    /// The records of a relist under way: they replace `seen` when it ends.
    relisting: Option<HashMap<RecordKey, Record>>,
    written: HashMap<RecordKey, Record>,
}

impl Records {
    /// Takes one event of the record watch.
    pub fn apply(&mut self, event: watcher::Event<TriggerRecord>) {
        match event {
            watcher::Event::Init => self.relisting = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                if let Some((key, record)) = Record::of(&object) {
                    self.shown(&key, &record);
                    self.relisting.get_or_insert_default().insert(key, record);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.relisting.take() {
                    self.seen = listed;
                }
            }
            watcher::Event::Apply(object) => {
                if let Some((key, record)) = Record::of(&object) {
                    self.shown(&key, &record);
                    self.seen.insert(key, record);
                }
            }
            watcher::Event::Delete(object) => {
                if let Some((key, _)) = Record::of(&object) {
                    self.written.remove(&key);
                    self.seen.remove(&key);
                }
            }
        }
    }

    /// The watch showed `record`: an own write it reaches, or passes, is its to tell from now on.
    fn shown(&mut self, key: &RecordKey, record: &Record) {
        let reached = self.written.get(key).is_some_and(|written| {
            written.version == record.version || newer(&record.version, &written.version)
        });
        if reached {
            self.written.remove(key);
        }
    }

    /// Takes the operator's own write, as the API server answered it.
    pub fn wrote(&mut self, object: &TriggerRecord) {
        if let Some((key, record)) = Record::of(object) {
            self.written.insert(key, record);
        }
    }

    /// How many records hold a config change that waits for the restart window (an own write
    /// counted for its record until the watch shows it).
    pub fn pending_count(&self) -> usize {
        let waits = |record: &Record| record.pending_change.is_some();
        self.written.values().filter(|record| waits(record)).count()
            + self
                .seen
                .iter()
                .filter(|(key, record)| !self.written.contains_key(*key) && waits(record))
                .count()
    }

    /// The record of the workload `key` whose UID is `uid`; `None` when there is none, or when
    /// the one under its name is of an earlier workload of that name (deleted, made again).
    pub fn of(&self, key: &WorkloadKey, uid: &str) -> Option<&Record> {
        let key = RecordKey::of(key);
        self.written
            .get(&key)
            .or_else(|| self.seen.get(&key))
            .filter(|record| record.workload_uid == uid)
    }
}

/// Whether resourceVersion `a` is later than `b`. They are etcd revisions, compared as numbers as
/// the API server compares them; text that is not a number is never later.
fn newer(a: &str, b: &str) -> bool {
    matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a > b)
}

/// The hashes the config-change trigger compares with: the record's, or for a workload without a
/// record, its annotation of before; `None` when neither says (first sight).
pub fn recorded_hashes(
    record: Option<&Record>,
    annotations: &BTreeMap<String, String>,
) -> Option<Hashes> {
    match record {
        Some(record) => record.config_hashes.clone(),
        None => annotations
            .get(keys::ANNOTATION_CONFIG_HASHES)
            .and_then(|value| serde_json::from_str(value).ok()),
    }
}

/// The schedule tick last acted on: the record's, or for a workload without a record, its
/// annotation of before.
pub fn last_scheduled(
    record: Option<&Record>,
    annotations: &BTreeMap<String, String>,
) -> Option<Timestamp> {
    match record {
        Some(record) => record.last_scheduled,
        None => annotations
            .get(keys::ANNOTATION_LAST_SCHEDULED)
            .and_then(|value| value.parse().ok()),
    }
}

/// One trigger's fields of a record.
#[derive(Clone, Debug, PartialEq)]
pub enum Field<'a> {
    /// The config-change trigger's: the hashes rolled out, and the change that waits for the
    /// restart window, if one does.
    ConfigHashes {
        hashes: &'a Hashes,
        pending: Option<&'a PendingChange>,
    },
    LastScheduled(Timestamp),
    /// The requested restart's: the value acted on.
    RestartRequested(&'a str),
}

impl Field<'_> {
    /// The field manager the field is applied under: one per trigger.
    pub fn manager(&self) -> &'static str {
        match self {
            Self::ConfigHashes { .. } => "crr-operator-config-change",
            Self::LastScheduled(_) => "crr-operator-schedule",
            Self::RestartRequested(_) => "crr-operator-restart",
        }
    }
}

/// The change that waits for the restart window: the objects that changed, since when (the first
/// sight of the change `before` kept while one waits), and when the window opens.
pub fn pending_change(
    changed: &[super::refs::ConfigRef],
    before: Option<&PendingChange>,
    now: Timestamp,
    runs_at: Timestamp,
) -> PendingChange {
    PendingChange {
        since: before.map_or_else(|| now.to_string(), |before| before.since.clone()),
        changed: changed.iter().map(ToString::to_string).collect(),
        runs_at: runs_at.to_string(),
    }
}

/// What applying `field` to the record of workload `key` (UID `uid`) sends: the record's identity,
/// its owner and the one field, and nothing of the other trigger's.
pub fn apply(key: &WorkloadKey, uid: &str, field: &Field<'_>) -> TriggerRecord {
    let mut spec = TriggerRecordSpec {
        workload: RecordedWorkload {
            kind: key.kind.to_owned(),
            name: key.name.clone(),
            uid: uid.to_owned(),
        },
        ..TriggerRecordSpec::default()
    };
    match field {
        Field::ConfigHashes { hashes, pending } => {
            spec.config_hashes = Some((*hashes).clone());
            spec.pending_change = pending.cloned();
        }
        Field::LastScheduled(at) => spec.last_scheduled = Some(at.to_string()),
        Field::RestartRequested(value) => spec.restart_requested = Some((*value).to_owned()),
    }
    let mut record = TriggerRecord::new(&RecordKey::of(key).name, spec);
    record.metadata = ObjectMeta {
        name: record.metadata.name.take(),
        namespace: Some(key.namespace.clone()),
        owner_references: Some(vec![OwnerReference {
            api_version: "apps/v1".to_owned(),
            kind: key.kind.to_owned(),
            name: key.name.clone(),
            uid: uid.to_owned(),
            ..OwnerReference::default()
        }]),
        ..ObjectMeta::default()
    };
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web() -> WorkloadKey {
        WorkloadKey {
            kind: "Deployment",
            namespace: "shop".to_owned(),
            name: "web".to_owned(),
        }
    }

    fn hashes(hash: &str) -> Hashes {
        [("configmap/app".to_owned(), hash.to_owned())].into()
    }

    fn object(version: &str, uid: &str, hash: &str) -> TriggerRecord {
        let hashes = hashes(hash);
        let mut record = apply(
            &web(),
            uid,
            &Field::ConfigHashes {
                hashes: &hashes,
                pending: None,
            },
        );
        record.metadata.resource_version = Some(version.to_owned());
        record
    }

    fn hash_of(records: &Records, uid: &str) -> Option<String> {
        records
            .of(&web(), uid)
            .and_then(|record| record.config_hashes.as_ref())
            .map(|hashes| hashes["configmap/app"].clone())
    }

    #[test]
    fn an_own_write_is_read_until_the_watch_shows_it_or_later() {
        let mut records = Records::default();
        records.apply(watcher::Event::Apply(object("10", "uid-web", "old")));
        records.wrote(&object("12", "uid-web", "new"));
        // The watch is behind: an event of before the write does not hide it.
        records.apply(watcher::Event::Apply(object("11", "uid-web", "older")));
        assert_eq!(hash_of(&records, "uid-web").as_deref(), Some("new"));
        // The watch shows the write: it tells from now on.
        records.apply(watcher::Event::Apply(object("12", "uid-web", "new")));
        records.apply(watcher::Event::Apply(object("13", "uid-web", "later")));
        assert_eq!(hash_of(&records, "uid-web").as_deref(), Some("later"));
    }

    #[test]
    fn a_record_of_an_earlier_workload_of_the_name_is_none() {
        let mut records = Records::default();
        records.apply(watcher::Event::Apply(object("10", "uid-old", "old")));
        assert_eq!(hash_of(&records, "uid-web"), None);
        assert_eq!(hash_of(&records, "uid-old").as_deref(), Some("old"));
    }

    #[test]
    fn a_relist_replaces_what_was_seen_and_a_delete_forgets() {
        let mut records = Records::default();
        records.apply(watcher::Event::Apply(object("10", "uid-web", "old")));
        records.apply(watcher::Event::Init);
        // Until the relist ends, what was seen stays readable.
        assert_eq!(hash_of(&records, "uid-web").as_deref(), Some("old"));
        records.apply(watcher::Event::InitDone);
        assert_eq!(hash_of(&records, "uid-web"), None, "gone meanwhile");
        assert!(records.seen.is_empty());
        records.apply(watcher::Event::Apply(object("20", "uid-web", "new")));
        records.apply(watcher::Event::Delete(object("21", "uid-web", "new")));
        assert_eq!(hash_of(&records, "uid-web"), None);
    }

    #[test]
    fn without_a_record_the_annotations_of_before_are_read_once_there_is_one_never() {
        let annotations: BTreeMap<String, String> = [
            (
                keys::ANNOTATION_CONFIG_HASHES.to_owned(),
                r#"{"configmap/app":"0000"}"#.to_owned(),
            ),
            (
                keys::ANNOTATION_LAST_SCHEDULED.to_owned(),
                "2026-01-01T03:00:00Z".to_owned(),
            ),
        ]
        .into();
        assert_eq!(recorded_hashes(None, &annotations), Some(hashes("0000")));
        assert_eq!(
            last_scheduled(None, &annotations),
            Some("2026-01-01T03:00:00Z".parse().expect("a time"))
        );
        let record = Record {
            workload_uid: "uid-web".to_owned(),
            ..Record::default()
        };
        assert_eq!(recorded_hashes(Some(&record), &annotations), None);
        assert_eq!(last_scheduled(Some(&record), &annotations), None);
        let bad: BTreeMap<String, String> =
            [(keys::ANNOTATION_CONFIG_HASHES.to_owned(), "{".to_owned())].into();
        assert_eq!(recorded_hashes(None, &bad), None);
    }

    #[test]
    fn an_apply_carries_the_owner_the_identity_and_only_its_own_field() {
        let hashes = hashes("abc");
        let record = apply(
            &web(),
            "uid-web",
            &Field::ConfigHashes {
                hashes: &hashes,
                pending: None,
            },
        );
        let body = serde_json::to_value(&record).expect("JSON");
        assert_eq!(body["apiVersion"], "crr.dev/v1alpha1");
        assert_eq!(body["kind"], "TriggerRecord");
        assert_eq!(body["metadata"]["name"], "deployment-web");
        assert_eq!(body["metadata"]["namespace"], "shop");
        assert_eq!(
            body["metadata"]["ownerReferences"],
            serde_json::json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web"}])
        );
        assert_eq!(
            body["spec"],
            serde_json::json!({"workload": {"kind": "Deployment", "name": "web", "uid": "uid-web"},
                               "configHashes": {"configmap/app": "abc"}})
        );
        let at: Timestamp = "2026-01-01T03:00:00Z".parse().expect("a time");
        let body = serde_json::to_value(apply(&web(), "uid-web", &Field::LastScheduled(at)))
            .expect("JSON");
        assert_eq!(body["spec"]["lastScheduled"], "2026-01-01T03:00:00Z");
        assert!(body["spec"].get("configHashes").is_none());
        assert_ne!(
            Field::ConfigHashes {
                hashes: &hashes,
                pending: None
            }
            .manager(),
            Field::LastScheduled(at).manager()
        );
    }

    #[test]
    fn a_pending_change_keeps_its_first_sight_and_says_when_it_runs() {
        let now: Timestamp = "2026-11-27T06:00:00Z".parse().expect("a time");
        let opens: Timestamp = "2026-11-30T01:00:00Z".parse().expect("a time");
        let changed = [super::super::refs::ConfigRef::config_map("app")];
        let first = pending_change(&changed, None, now, opens);
        assert_eq!(first.since, "2026-11-27T06:00:00Z");
        assert_eq!(first.changed, ["configmap/app"]);
        assert_eq!(first.runs_at, "2026-11-30T01:00:00Z");
        let later = now + jiff::SignedDuration::from_hours(2);
        let more = [
            super::super::refs::ConfigRef::config_map("app"),
            super::super::refs::ConfigRef::secret("token"),
        ];
        let again = pending_change(&more, Some(&first), later, opens);
        assert_eq!(again.since, first.since, "since the first change");
        assert_eq!(again.changed, ["configmap/app", "secret/token"]);
    }
}
