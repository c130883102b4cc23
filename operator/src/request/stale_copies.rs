//! The cached copies of requests that one of the operator's writes found stale (a 409 Conflict),
//! so that the next reconcile of the same copy reads the request from the API server instead of
//! deciding on it, and being refused, again.
//!
//! A conflict says the request changed after the cached copy, and its watch event usually wakes
//! the reconcile within a moment (`controller::CONFLICT_FALLBACK` is only the fallback). Under a
//! tenant's flood of large objects the API server's watch can run half a minute behind etcd
//! (BENCHMARKS.md, "A fat tenant: the backlog is a rate"): the fallback reconciled the same stale
//! copy every 5 s, and each refused write cost the API server a read of the whole object (89
//! refusals in 40 s of the chaos scenario `fat-tenant` in CI's order). With this, a conflict costs
//! one GET, without resourceVersion, which the API server answers from etcd, and the next write
//! is preconditioned on what it returned.

use std::collections::HashMap;
use std::sync::Mutex;

/// At most this many records are kept. A request deleted right after a conflict is never
/// reconciled again, so its record would stay: past this many the records start over. A record
/// lost costs one more conflict at the fallback, never a decision on a wrong copy.
pub const MOST_RECORDS: usize = 4096;

/// The resourceVersion of each request's copy that a write found stale, by `namespace/name`.
#[derive(Debug, Default)]
pub struct StaleCopies(Mutex<HashMap<String, String>>);

impl StaleCopies {
    /// Records that a write made on the copy `resource_version` of `key` was refused as stale.
    /// A copy without a resourceVersion is not recorded: no read would be preconditioned on it.
    pub fn mark(&self, key: &str, resource_version: Option<&str>) {
        if let Some(version) = resource_version {
            let mut copies = self.copies();
            if copies.len() >= MOST_RECORDS && !copies.contains_key(key) {
                copies.clear();
            }
            copies.insert(key.to_owned(), version.to_owned());
        }
    }

    /// Whether `resource_version` is the copy of `key` a write found stale; a newer copy (the
    /// watch caught up) forgets the record.
    pub fn is_stale(&self, key: &str, resource_version: Option<&str>) -> bool {
        let mut copies = self.copies();
        match copies.get(key) {
            Some(stale) if Some(stale.as_str()) == resource_version => true,
            Some(_) => {
                copies.remove(key);
                false
            }
            None => false,
        }
    }

    /// Forgets `key` (read again, or gone).
    pub fn forget(&self, key: &str) {
        self.copies().remove(key);
    }

    /// How many copies are recorded.
    pub fn len(&self) -> usize {
        self.copies().len()
    }

    /// Whether no copy is recorded.
    pub fn is_empty(&self) -> bool {
        self.copies().is_empty()
    }

    fn copies(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // A panic elsewhere while the map was held leaves it consistent (single inserts and
        // removals): keep using it.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_a_write_found_stale_is_stale_until_a_newer_one_comes() {
        let copies = StaleCopies::default();
        assert!(!copies.is_stale("ns/a", Some("7")));
        copies.mark("ns/a", Some("7"));
        assert!(copies.is_stale("ns/a", Some("7")));
        assert!(copies.is_stale("ns/a", Some("7")), "asking does not forget");
        assert!(!copies.is_stale("ns/b", Some("7")), "per request");
        assert!(!copies.is_stale("ns/a", Some("9")), "the watch caught up");
        assert!(
            !copies.is_stale("ns/a", Some("7")),
            "and the record is gone"
        );
        assert!(copies.is_empty());
    }

    #[test]
    fn a_copy_without_version_is_never_recorded_and_forget_forgets() {
        let copies = StaleCopies::default();
        copies.mark("ns/a", None);
        assert!(!copies.is_stale("ns/a", None));
        copies.mark("ns/a", Some("3"));
        copies.forget("ns/a");
        assert!(!copies.is_stale("ns/a", Some("3")));
        assert_eq!(copies.len(), 0);
    }

    #[test]
    fn the_records_are_bounded() {
        let copies = StaleCopies::default();
        for index in 0..MOST_RECORDS {
            copies.mark(&format!("ns/{index}"), Some("1"));
        }
        assert_eq!(copies.len(), MOST_RECORDS);
        copies.mark("ns/0", Some("2"));
        assert_eq!(
            copies.len(),
            MOST_RECORDS,
            "a known request is updated in place"
        );
        copies.mark("ns/new", Some("1"));
        assert_eq!(copies.len(), 1, "past the bound the records start over");
        assert!(copies.is_stale("ns/new", Some("1")));
    }
}
