//! The settled index's entries, without a heap allocation of their own.
//!
//! A flood of requests settles while many others are still cached whole: each entry made then is
//! allocated among the request objects that are freed later, and three small strings per entry
//! (namespace, name, UID) were enough to keep nearly every page of that freed memory resident.
//! After a flood of 20,000 requests with 15,000 active at once, 37 MiB stayed in the process,
//! even after a `malloc_trim` (`examples/flood_sim.rs`). Here every entry's strings sit back to back
//! in one buffer and the table holds fixed-size entries pointing into it: two allocations in
//! all, each mapped on its own once it passes 1 MiB (`crr_runtime::memory::map_large_allocations`),
//! so the pages the requests leave behind are whole and free.
//!
//! A removed entry's strings stay in the buffer as garbage until it is more than half of it;
//! then the buffer is rewritten with the live ones (amortised: each byte is copied at most once
//! per byte removed).

use std::hash::BuildHasher;

use hashbrown::HashTable;
use jiff::Timestamp;

use super::Settled;

/// Below this many bytes the buffer is not compacted: a small one costs nothing worth a copy.
const COMPACT_AT_LEAST: usize = 64 * 1024;

/// One settled request: where its strings are in the buffer, and what the index keeps.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Offset of the namespace in the buffer; the name and the UID follow it.
    start: u32,
    namespace_len: u16,
    name_len: u16,
    /// `None`: no UID.
    uid_len: Option<u16>,
    has_ttl: bool,
    expiry: Option<Timestamp>,
}

impl Entry {
    fn len(&self) -> usize {
        usize::from(self.namespace_len)
            + usize::from(self.name_len)
            + usize::from(self.uid_len.unwrap_or(0))
    }
}

/// The fixed part of an entry (40 bytes): with its strings (namespace, name and UID, about 60
/// bytes), all an entry costs.
#[cfg(test)]
pub const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

/// What an entry says, borrowed from the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryView<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: Option<&'a str>,
    pub has_ttl: bool,
    pub expiry: Option<Timestamp>,
}

/// The entries by namespace and name.
#[derive(Default)]
pub struct Entries {
    table: HashTable<Entry>,
    strings: String,
    /// Bytes of `strings` no entry points at.
    garbage: usize,
    hasher: std::hash::RandomState,
}

/// Whether `namespace`, `name` and `uid` fit an entry (the API server's own limits are far
/// below: 63 and 253 characters).
pub fn fits(namespace: &str, name: &str, uid: Option<&str>) -> bool {
    let short = |text: &str| u16::try_from(text.len()).is_ok();
    short(namespace) && short(name) && uid.is_none_or(short)
}

fn view<'a>(strings: &'a str, entry: &Entry) -> EntryView<'a> {
    let start = entry.start as usize;
    let name_at = start + usize::from(entry.namespace_len);
    let uid_at = name_at + usize::from(entry.name_len);
    EntryView {
        namespace: &strings[start..name_at],
        name: &strings[name_at..uid_at],
        uid: entry
            .uid_len
            .map(|len| &strings[uid_at..uid_at + usize::from(len)]),
        has_ttl: entry.has_ttl,
        expiry: entry.expiry,
    }
}

/// Whether an entry is the one of `namespace/name`.
fn named<'a>(strings: &'a str, namespace: &'a str, name: &'a str) -> impl Fn(&Entry) -> bool + 'a {
    move |entry| {
        let seen = view(strings, entry);
        seen.namespace == namespace && seen.name == name
    }
}

/// The hash of an entry already in the table (when it grows or shrinks).
fn rehash<'a>(strings: &'a str, hasher: &'a std::hash::RandomState) -> impl Fn(&Entry) -> u64 + 'a {
    move |entry| {
        let seen = view(strings, entry);
        hasher.hash_one((seen.namespace, seen.name))
    }
}

impl Entries {
    fn hash(&self, namespace: &str, name: &str) -> u64 {
        self.hasher.hash_one((namespace, name))
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// The entry of `namespace/name`.
    #[cfg(test)]
    pub fn get(&self, namespace: &str, name: &str) -> Option<EntryView<'_>> {
        let hash = self.hash(namespace, name);
        self.table
            .find(hash, named(&self.strings, namespace, name))
            .map(|entry| view(&self.strings, entry))
    }

    /// Every entry, in no order.
    pub fn iter(&self) -> impl Iterator<Item = EntryView<'_>> {
        self.table.iter().map(|entry| view(&self.strings, entry))
    }

    /// Records `settled` for `namespace/name`, replacing what was there. The caller has checked
    /// that the strings [`fits`].
    pub fn insert(&mut self, namespace: &str, name: &str, settled: &Settled) {
        let uid = settled.uid.as_deref();
        debug_assert!(fits(namespace, name, uid));
        self.remove(namespace, name);
        // Offsets are u32: a buffer reaching 4 GiB is garbage but for a few MiB (the API server
        // keeps names to 253 characters), so compact it first.
        if u32::try_from(
            self.strings.len() + namespace.len() + name.len() + uid.map_or(0, str::len),
        )
        .is_err()
        {
            self.compact();
        }
        let entry = Entry {
            start: self.strings.len() as u32,
            namespace_len: namespace.len() as u16,
            name_len: name.len() as u16,
            uid_len: uid.map(|uid| uid.len() as u16),
            has_ttl: settled.has_ttl,
            expiry: settled.expiry,
        };
        self.strings.push_str(namespace);
        self.strings.push_str(name);
        self.strings.push_str(uid.unwrap_or_default());
        let hash = self.hash(namespace, name);
        let (strings, hasher) = (&self.strings, &self.hasher);
        self.table
            .insert_unique(hash, entry, rehash(strings, hasher));
    }

    /// Removes the entry of `namespace/name` when `remove` says yes to it; true when one was.
    pub fn remove_if(
        &mut self,
        namespace: &str,
        name: &str,
        remove: impl FnOnce(&EntryView<'_>) -> bool,
    ) -> bool {
        let hash = self.hash(namespace, name);
        let strings = &self.strings;
        let Ok(found) = self.table.find_entry(hash, named(strings, namespace, name)) else {
            return false;
        };
        if !remove(&view(strings, found.get())) {
            return false;
        }
        let (entry, _) = found.remove();
        self.garbage += entry.len();
        if self.garbage > COMPACT_AT_LEAST && self.garbage * 2 > self.strings.len() {
            self.compact();
        }
        true
    }

    /// Removes the entry of `namespace/name`; true when there was one.
    pub fn remove(&mut self, namespace: &str, name: &str) -> bool {
        self.remove_if(namespace, name, |_| true)
    }

    /// Sets the expiry of `namespace/name` when `matches` says yes to its entry.
    pub fn set_expiry_if(
        &mut self,
        namespace: &str,
        name: &str,
        expiry: Timestamp,
        matches: impl FnOnce(&EntryView<'_>) -> bool,
    ) {
        let hash = self.hash(namespace, name);
        let strings = &self.strings;
        if let Some(entry) = self.table.find_mut(hash, named(strings, namespace, name))
            && matches(&view(strings, entry))
        {
            entry.expiry = Some(expiry);
        }
    }

    /// Rewrites the buffer with the live entries' strings only, and fits both allocations to
    /// what is live.
    pub fn compact(&mut self) {
        let mut strings = String::with_capacity(self.strings.len() - self.garbage);
        for entry in self.table.iter_mut() {
            let start = entry.start as usize;
            let live = &self.strings[start..start + entry.len()];
            entry.start = strings.len() as u32;
            strings.push_str(live);
        }
        self.strings = strings;
        self.garbage = 0;
        let (strings, hasher) = (&self.strings, &self.hasher);
        self.table.shrink_to_fit(rehash(strings, hasher));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settled(uid: Option<&str>, expiry: Option<i64>) -> Settled {
        Settled {
            uid: uid.map(Into::into),
            has_ttl: expiry.is_some(),
            expiry: expiry.map(|second| Timestamp::from_second(second).expect("a time")),
        }
    }

    #[test]
    fn an_entry_reads_back_what_was_inserted_and_replaces_its_name() {
        let mut entries = Entries::default();
        entries.insert("tenant", "a", &settled(Some("uid-a"), Some(10)));
        entries.insert("tenant", "b", &settled(None, None));
        entries.insert("other", "a", &settled(Some(""), Some(20)));
        assert_eq!(entries.len(), 3);
        let a = entries.get("tenant", "a").expect("a");
        assert_eq!(
            (a.namespace, a.name, a.uid, a.has_ttl),
            ("tenant", "a", Some("uid-a"), true)
        );
        assert_eq!(entries.get("tenant", "b").expect("b").uid, None);
        assert_eq!(entries.get("other", "a").expect("other a").uid, Some(""));
        // The same name again: the newer entry replaces the older one.
        entries.insert("tenant", "a", &settled(Some("uid-a2"), None));
        assert_eq!(entries.len(), 3);
        assert_eq!(entries.get("tenant", "a").expect("a").uid, Some("uid-a2"));
        // Namespace and name are two strings, not their concatenation.
        assert_eq!(entries.get("tenan", "ta"), None);
    }

    #[test]
    fn removal_and_expiry_follow_the_caller_s_check() {
        let mut entries = Entries::default();
        entries.insert("tenant", "a", &settled(Some("uid-a"), Some(10)));
        assert!(!entries.remove_if("tenant", "a", |seen| seen.uid == Some("uid-other")));
        entries.set_expiry_if("tenant", "a", Timestamp::from_second(99).unwrap(), |seen| {
            seen.uid == Some("uid-other")
        });
        assert_eq!(
            entries.get("tenant", "a").unwrap().expiry,
            Some(Timestamp::from_second(10).unwrap())
        );
        entries.set_expiry_if("tenant", "a", Timestamp::from_second(99).unwrap(), |seen| {
            seen.uid == Some("uid-a")
        });
        assert_eq!(
            entries.get("tenant", "a").unwrap().expiry,
            Some(Timestamp::from_second(99).unwrap())
        );
        assert!(entries.remove_if("tenant", "a", |seen| seen.uid == Some("uid-a")));
        assert!(!entries.remove("tenant", "a"));
        assert_eq!(entries.len(), 0);
    }

    #[test]
    fn the_buffer_is_compacted_once_mostly_garbage_and_keeps_every_live_entry() {
        let mut entries = Entries::default();
        let uid = |index: usize| format!("0b1e7c5e-6a55-4f2e-9b1c-{index:012}");
        for index in 0..20_000 {
            entries.insert(
                "crr-scale-ttl",
                &format!("ttl-{index}"),
                &settled(Some(&uid(index)), Some(index as i64)),
            );
        }
        let full = entries.strings.len();
        for index in (0..20_000).filter(|index| index % 4 != 0) {
            assert!(entries.remove("crr-scale-ttl", &format!("ttl-{index}")));
        }
        assert!(
            entries.strings.len() < full / 2,
            "{} of {full} bytes",
            entries.strings.len()
        );
        assert!(
            entries.garbage * 2 <= entries.strings.len() || entries.garbage <= COMPACT_AT_LEAST
        );
        assert_eq!(entries.len(), 5_000);
        for index in 0..20_000 {
            let found = entries.get("crr-scale-ttl", &format!("ttl-{index}"));
            if index % 4 == 0 {
                let found = found.expect("a live entry");
                assert_eq!(found.uid, Some(uid(index).as_str()));
                assert_eq!(
                    found.expiry,
                    Some(Timestamp::from_second(index as i64).unwrap())
                );
            } else {
                assert_eq!(found, None);
            }
        }
        assert_eq!(entries.iter().count(), 5_000);
    }

    #[test]
    fn strings_past_an_entry_s_lengths_do_not_fit() {
        assert!(fits("tenant", &"n".repeat(253), Some("uid")));
        assert!(!fits("tenant", &"n".repeat(70_000), None));
        assert!(!fits("tenant", "n", Some(&"u".repeat(70_000))));
    }
}
