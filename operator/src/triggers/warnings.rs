//! The warnings a workload was given, so that one problem is one Event, and memory stays bounded
//! whatever a tenant writes in its annotations: kept per workload UID and reason as a digest of
//! the note (never the note), replaced when the note changes, forgotten when the problem goes
//! (it warns again if it comes back) or the workload leaves the index.
//!
//! The API server's Event series collapse Events of one object and reason into one, whose note
//! stays the first: so every problem of one reason goes in one note ([`bad_annotations_note`]).

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use super::annotations::BadAnnotation;

/// The longest problem, in characters, a note quotes (a value a tenant wrote is cut there).
pub const MAX_PROBLEM_CHARS: usize = 256;

/// The reason of the Event that lists a workload's bad trigger annotations.
pub const BAD_ANNOTATION: &str = "BadTriggerAnnotation";
/// What a trigger's rollout refused at create (by admission: a container the template lacks,
/// say) is remembered as; its Event's reason is [`BAD_ANNOTATION`].
pub const ROLLOUT_REFUSED: &str = "RolloutRefused";
/// The reason of the Event that names the Secrets a workload's trigger may not read.
pub const SECRETS_IGNORED: &str = "SecretsIgnored";
/// The reason of the Event that says Reloader acts on a workload's annotations too.
pub const RELOADER_ALSO_ACTS: &str = "ReloaderAlsoActs";
/// The reason of the Event that says a workload's template uses too many ConfigMaps and Secrets
/// for the config-change trigger.
pub const TOO_MANY_REFERENCES: &str = "TooManyConfigReferences";
/// Reloader annotations on the workload that crr does not read.
pub const RELOADER_NOT_READ: &str = "ReloaderAnnotationNotRead";

/// The warnings given, per workload UID and reason.
#[derive(Debug, Default)]
pub struct Warnings {
    given: HashMap<(String, &'static str), u64>,
}

fn digest(note: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    note.hash(&mut hasher);
    hasher.finish()
}

impl Warnings {
    /// Whether `note` is news for the workload `uid` and `reason` (never given, or given with
    /// another note); records it as given.
    pub fn is_news(&mut self, uid: &str, reason: &'static str, note: &str) -> bool {
        let digest = digest(note);
        self.given.insert((uid.to_owned(), reason), digest) != Some(digest)
    }

    /// The problem of `reason` is gone from the workload `uid`: if it comes back, it is news.
    pub fn cleared(&mut self, uid: &str, reason: &'static str) {
        self.given.remove(&(uid.to_owned(), reason));
    }

    /// Forgets the workload `uid` (deleted, or without triggers now).
    pub fn forget_workload(&mut self, uid: &str) {
        self.given.retain(|(given, _), _| given != uid);
    }

    /// Forgets the workloads not in `live` (after a relist).
    pub fn retain_workloads(&mut self, live: &HashSet<&str>) {
        self.given.retain(|(uid, _), _| live.contains(uid.as_str()));
    }

    /// How many warnings are remembered.
    pub fn len(&self) -> usize {
        self.given.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty()
    }
}

/// One note for all of a workload's bad trigger annotations: `annotation A: problem; annotation
/// B: problem`, each problem cut to [`MAX_PROBLEM_CHARS`].
pub fn bad_annotations_note(problems: &[BadAnnotation]) -> String {
    problems
        .iter()
        .map(
            |BadAnnotation {
                 annotation,
                 problem,
             }| {
                let mut cut: String = problem.chars().take(MAX_PROBLEM_CHARS).collect();
                if cut.len() < problem.len() {
                    cut.push('…');
                }
                format!("annotation {annotation}: {cut}")
            },
        )
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_crds::keys;

    #[test]
    fn a_problem_is_news_once_until_its_note_changes_or_it_goes() {
        let mut warnings = Warnings::default();
        assert!(warnings.is_news("uid-a", BAD_ANNOTATION, "one"));
        assert!(!warnings.is_news("uid-a", BAD_ANNOTATION, "one"));
        assert!(
            warnings.is_news("uid-b", BAD_ANNOTATION, "one"),
            "per workload"
        );
        assert!(
            warnings.is_news("uid-a", SECRETS_IGNORED, "one"),
            "per reason"
        );
        assert!(
            warnings.is_news("uid-a", BAD_ANNOTATION, "two"),
            "a new note"
        );
        assert!(!warnings.is_news("uid-a", BAD_ANNOTATION, "two"));
        warnings.cleared("uid-a", BAD_ANNOTATION);
        assert!(
            warnings.is_news("uid-a", BAD_ANNOTATION, "two"),
            "back after it went"
        );
    }

    #[test]
    fn memory_follows_workloads_and_reasons_not_the_values_a_tenant_writes() {
        let mut warnings = Warnings::default();
        for value in 0..1_000 {
            let note = format!("{value}{}", "x".repeat(100_000));
            assert!(warnings.is_news("uid-a", BAD_ANNOTATION, &note));
        }
        assert_eq!(warnings.len(), 1, "one entry per workload and reason");
        warnings.is_news("uid-b", BAD_ANNOTATION, "x");
        warnings.is_news("uid-c", BAD_ANNOTATION, "x");
        warnings.retain_workloads(&["uid-b", "uid-c"].into());
        assert_eq!(warnings.len(), 2);
        warnings.forget_workload("uid-c");
        assert_eq!(warnings.len(), 1);
        assert!(!warnings.is_news("uid-b", BAD_ANNOTATION, "x"));
        assert!(warnings.is_news("uid-c", BAD_ANNOTATION, "x"), "forgotten");
    }

    #[test]
    fn every_bad_annotation_is_in_the_note_each_cut_to_its_bound() {
        let long = "x".repeat(10_000);
        let note = bad_annotations_note(&[
            BadAnnotation {
                annotation: keys::ANNOTATION_RECREATE_SCHEDULE,
                problem: format!("{long:?} is not a cron schedule"),
            },
            BadAnnotation {
                annotation: keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE,
                problem: "\"Mars/Olympus\" is not a known IANA time zone".to_owned(),
            },
        ]);
        assert!(note.starts_with(&format!(
            "annotation {}: \"xxx",
            keys::ANNOTATION_RECREATE_SCHEDULE
        )));
        assert!(note.contains(&format!(
            "…; annotation {}: \"Mars/Olympus\" is not a known IANA time zone",
            keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE
        )));
        assert!(
            note.chars().count() < 2 * MAX_PROBLEM_CHARS + 200,
            "{}",
            note.len()
        );
    }
}
