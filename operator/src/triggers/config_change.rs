//! The config-change decision: from what a workload's template uses, the hashes of those
//! objects now and the hashes recorded when they were last rolled out, which containers to
//! restart and what to record.
//!
//! The record lives on the workload (`crr.dev/config-hashes`), so the operator's restart,
//! a new leader or an upgrade never restarts anything by itself: a workload seen for the first
//! time gets its record and no rollout. An object the template starts using is recorded, not
//! rolled out (the template change rolls new pods anyway). An object that is gone keeps its
//! recorded hash: created again with other data, it is a change.

use std::collections::{BTreeMap, BTreeSet};

use crr_crds::keys;

use super::refs::{ConfigRef, References};

/// `configmap/<name>` or `secret/<name>` to the hash of its data, as recorded.
pub type Hashes = BTreeMap<String, String>;

/// The record on a workload: `None` when there is none or it cannot be read (then the
/// workload is seen as for the first time).
pub fn recorded(annotations: &BTreeMap<String, String>) -> Option<Hashes> {
    annotations
        .get(keys::ANNOTATION_CONFIG_HASHES)
        .and_then(|value| serde_json::from_str(value).ok())
}

/// What to do about one workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The objects whose data changed since the record.
    pub changed: Vec<ConfigRef>,
    /// The containers that use them: what the rollout restarts (empty: no rollout).
    pub containers: BTreeSet<String>,
    /// The record to write once the rollout exists (or at once, when there is none).
    pub record: Hashes,
}

impl Decision {
    /// Whether the record on the workload must be written.
    pub fn record_differs(&self, recorded: Option<&Hashes>) -> bool {
        recorded != Some(&self.record)
    }
}

/// Decides for a workload whose template uses `references`, of which `counts` says which the
/// trigger watches (Secrets only when allowed; Reloader's lists), with `current` the hash of each
/// watched object that exists now.
pub fn decide(
    references: &References,
    counts: impl Fn(&ConfigRef) -> bool,
    current: &BTreeMap<ConfigRef, String>,
    recorded: Option<&Hashes>,
) -> Decision {
    let mut decision = Decision::default();
    for (object, containers) in references.iter().filter(|(object, _)| counts(object)) {
        let key = object.to_string();
        let before = recorded.and_then(|recorded| recorded.get(&key));
        match (current.get(object), before) {
            (Some(now), Some(before)) if now != before => {
                decision.changed.push(object.clone());
                decision.containers.extend(containers.iter().cloned());
                decision.record.insert(key, now.clone());
            }
            (Some(now), _) => {
                decision.record.insert(key, now.clone());
            }
            (None, Some(before)) => {
                decision.record.insert(key, before.clone());
            }
            (None, None) => {}
        }
    }
    if recorded.is_none() {
        // First sight: record, restart nothing.
        decision.changed.clear();
        decision.containers.clear();
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uses(pairs: &[(ConfigRef, &[&str])]) -> References {
        pairs
            .iter()
            .map(|(object, containers)| {
                (
                    object.clone(),
                    containers.iter().map(|name| (*name).to_owned()).collect(),
                )
            })
            .collect()
    }

    fn hashes(pairs: &[(&ConfigRef, &str)]) -> BTreeMap<ConfigRef, String> {
        pairs
            .iter()
            .map(|(object, hash)| ((*object).clone(), (*hash).to_owned()))
            .collect()
    }

    fn record(pairs: &[(&str, &str)]) -> Hashes {
        pairs
            .iter()
            .map(|(key, hash)| ((*key).to_owned(), (*hash).to_owned()))
            .collect()
    }

    fn everything(_: &ConfigRef) -> bool {
        true
    }

    #[test]
    fn a_changed_object_restarts_only_the_containers_that_use_it() {
        let app_config = ConfigRef::config_map("app-config");
        let proxy_config = ConfigRef::config_map("proxy-config");
        let references = uses(&[
            (app_config.clone(), &["app"]),
            (proxy_config.clone(), &["proxy"]),
        ]);
        let recorded = record(&[
            ("configmap/app-config", "1"),
            ("configmap/proxy-config", "7"),
        ]);
        let decision = decide(
            &references,
            everything,
            &hashes(&[(&app_config, "2"), (&proxy_config, "7")]),
            Some(&recorded),
        );
        assert_eq!(decision.changed, [app_config]);
        assert_eq!(decision.containers, BTreeSet::from(["app".to_owned()]));
        assert_eq!(
            decision.record,
            record(&[
                ("configmap/app-config", "2"),
                ("configmap/proxy-config", "7")
            ])
        );
        assert!(decision.record_differs(Some(&recorded)));
    }

    #[test]
    fn nothing_changed_restarts_nothing_and_leaves_the_record() {
        let object = ConfigRef::config_map("app-config");
        let references = uses(&[(object.clone(), &["app"])]);
        let recorded = record(&[("configmap/app-config", "1")]);
        let decision = decide(
            &references,
            everything,
            &hashes(&[(&object, "1")]),
            Some(&recorded),
        );
        assert!(decision.containers.is_empty());
        assert!(!decision.record_differs(Some(&recorded)));
    }

    #[test]
    fn first_sight_records_and_restarts_nothing() {
        let object = ConfigRef::config_map("app-config");
        let decision = decide(
            &uses(&[(object.clone(), &["app"])]),
            everything,
            &hashes(&[(&object, "1")]),
            None,
        );
        assert!(decision.containers.is_empty() && decision.changed.is_empty());
        assert_eq!(decision.record, record(&[("configmap/app-config", "1")]));
        assert!(decision.record_differs(None));
    }

    #[test]
    fn a_newly_used_object_is_recorded_and_a_gone_one_keeps_its_hash() {
        let new = ConfigRef::config_map("new");
        let gone = ConfigRef::secret("gone");
        let references = uses(&[(new.clone(), &["app"]), (gone.clone(), &["app"])]);
        let recorded = record(&[("secret/gone", "5"), ("configmap/unused-now", "3")]);
        let decision = decide(
            &references,
            everything,
            &hashes(&[(&new, "1")]),
            Some(&recorded),
        );
        assert!(decision.containers.is_empty());
        assert_eq!(
            decision.record,
            record(&[("configmap/new", "1"), ("secret/gone", "5")]),
            "an object no longer used leaves the record"
        );
    }

    #[test]
    fn objects_the_trigger_does_not_watch_never_count() {
        let secret = ConfigRef::secret("password");
        let references = uses(&[(secret.clone(), &["app"])]);
        let recorded = record(&[("secret/password", "1")]);
        let decision = decide(
            &references,
            |object| object.kind != super::super::refs::ConfigKind::Secret,
            &hashes(&[(&secret, "2")]),
            Some(&recorded),
        );
        assert!(decision.containers.is_empty());
        assert!(decision.record.is_empty());
    }

    #[test]
    fn the_record_reads_back_and_a_bad_one_is_none() {
        let annotations = BTreeMap::from([(
            keys::ANNOTATION_CONFIG_HASHES.to_owned(),
            r#"{"configmap/a":"1"}"#.to_owned(),
        )]);
        assert_eq!(
            recorded(&annotations),
            Some(record(&[("configmap/a", "1")]))
        );
        let bad = BTreeMap::from([(keys::ANNOTATION_CONFIG_HASHES.to_owned(), "{".to_owned())]);
        assert_eq!(recorded(&bad), None);
    }
}
