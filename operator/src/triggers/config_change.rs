//! The config-change decision: from what a workload's template uses, the hashes of those
//! objects now, the hashes recorded when they were last rolled out and whether a config-change
//! rollout of the workload still runs, what to do: create a rollout of the containers that use
//! what changed, only write the record, nothing, or wait for the running rollout.
//!
//! The record lives in the workload's TriggerRecord (`record`), so the operator's restart,
//! a new leader or an upgrade never restarts anything by itself: a workload seen for the first
//! time gets its record and no rollout. An object the template starts using is recorded, not
//! rolled out (the template change rolls new pods anyway). An object that is gone keeps its
//! recorded hash: created again with other data, it is a change. A change while an earlier
//! config-change rollout of the workload runs waits, record untouched, and makes a rollout of
//! its own once that one ends.
//!
//! It does not read the objects or write anything: `evaluate` does, from this decision.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::refs::{ConfigRef, References};

/// `configmap/<name>` or `secret/<name>` to the hash of its data, as recorded.
pub type Hashes = BTreeMap<String, String>;

/// A workload whose change waits for its running config-change rollout is looked at again this
/// often.
pub const WAIT_FOR_RUNNING: Duration = Duration::from_secs(5);

/// What to do about one workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing changed and the record is up to date.
    Nothing,
    /// Write `record` to the workload's record and restart nothing: first sight, an object newly used,
    /// no longer used or no longer counted.
    Record {
        /// The record to write.
        record: Hashes,
    },
    /// Create a rollout of `containers`, then write `record`.
    Rollout {
        /// The objects whose data changed since the record.
        changed: Vec<ConfigRef>,
        /// The containers that use them: what the rollout restarts (never empty).
        containers: BTreeSet<String>,
        /// The record to write once the rollout exists.
        record: Hashes,
    },
    /// Objects changed while a config-change rollout of the workload runs: change nothing now
    /// and look again after `again_after` (the change gets its own rollout after that one).
    Wait {
        /// When to look again.
        again_after: Duration,
    },
}

/// Decides for a workload whose template uses `references`, of which `counts` says which the
/// trigger watches (Secrets only when allowed; Reloader's lists), with `current` the hash of each
/// watched object that exists now, `recorded` the workload's record and `running` whether
/// a config-change rollout of the workload still runs.
pub fn decide(
    references: &References,
    counts: impl Fn(&ConfigRef) -> bool,
    current: &BTreeMap<ConfigRef, String>,
    recorded: Option<&Hashes>,
    running: bool,
) -> Decision {
    let mut changed = Vec::new();
    let mut containers = BTreeSet::new();
    let mut record = Hashes::new();
    for (object, users) in references.iter().filter(|(object, _)| counts(object)) {
        let key = object.to_string();
        let before = recorded.and_then(|recorded| recorded.get(&key));
        match (current.get(object), before) {
            (Some(now), Some(before)) if now != before => {
                changed.push(object.clone());
                containers.extend(users.iter().cloned());
                record.insert(key, now.clone());
            }
            (Some(now), _) => {
                record.insert(key, now.clone());
            }
            (None, Some(before)) => {
                record.insert(key, before.clone());
            }
            (None, None) => {}
        }
    }
    // First sight (no record) restarts nothing; a change no container uses neither.
    if recorded.is_some() && !containers.is_empty() {
        if running {
            return Decision::Wait {
                again_after: WAIT_FOR_RUNNING,
            };
        }
        return Decision::Rollout {
            changed,
            containers,
            record,
        };
    }
    if recorded == Some(&record) {
        Decision::Nothing
    } else {
        Decision::Record { record }
    }
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
            false,
        );
        assert_eq!(
            decision,
            Decision::Rollout {
                changed: vec![app_config],
                containers: BTreeSet::from(["app".to_owned()]),
                record: record(&[
                    ("configmap/app-config", "2"),
                    ("configmap/proxy-config", "7")
                ]),
            }
        );
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
            false,
        );
        assert_eq!(decision, Decision::Nothing);
    }

    #[test]
    fn first_sight_records_and_restarts_nothing() {
        let object = ConfigRef::config_map("app-config");
        let decision = decide(
            &uses(&[(object.clone(), &["app"])]),
            everything,
            &hashes(&[(&object, "1")]),
            None,
            false,
        );
        assert_eq!(
            decision,
            Decision::Record {
                record: record(&[("configmap/app-config", "1")])
            }
        );
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
            false,
        );
        assert_eq!(
            decision,
            Decision::Record {
                record: record(&[("configmap/new", "1"), ("secret/gone", "5")])
            },
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
            false,
        );
        assert_eq!(
            decision,
            Decision::Record {
                record: Hashes::new()
            }
        );
    }

    #[test]
    fn a_change_while_a_config_change_rollout_runs_waits_and_keeps_the_record() {
        let object = ConfigRef::config_map("app-config");
        let references = uses(&[(object.clone(), &["app"])]);
        let recorded = record(&[("configmap/app-config", "1")]);
        let decision = decide(
            &references,
            everything,
            &hashes(&[(&object, "2")]),
            Some(&recorded),
            true,
        );
        assert_eq!(
            decision,
            Decision::Wait {
                again_after: WAIT_FOR_RUNNING
            }
        );
    }

    #[test]
    fn a_running_rollout_holds_back_only_a_rollout() {
        let object = ConfigRef::config_map("app-config");
        let references = uses(&[(object.clone(), &["app"])]);
        let unchanged = record(&[("configmap/app-config", "1")]);
        assert_eq!(
            decide(
                &references,
                everything,
                &hashes(&[(&object, "1")]),
                Some(&unchanged),
                true
            ),
            Decision::Nothing
        );
        assert_eq!(
            decide(
                &references,
                everything,
                &hashes(&[(&object, "1")]),
                None,
                true
            ),
            Decision::Record {
                record: unchanged.clone()
            },
            "first sight records even while a rollout runs"
        );
        let newly_used = ConfigRef::config_map("new");
        assert_eq!(
            decide(
                &uses(&[(object.clone(), &["app"]), (newly_used.clone(), &["app"])]),
                everything,
                &hashes(&[(&object, "1"), (&newly_used, "9")]),
                Some(&unchanged),
                true
            ),
            Decision::Record {
                record: record(&[("configmap/app-config", "1"), ("configmap/new", "9")])
            }
        );
    }
}
