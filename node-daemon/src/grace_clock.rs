//! When this daemon first saw each unready grace begin, on its own monotonic clock
//! ([`GraceClock`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
#[cfg(test)]
use std::time::Duration;

/// When this daemon first saw each unready grace begin (`recreate::UnreadyGrace::key`), on its
/// own monotonic clock: the grace is measured from there, whatever the other clocks say.
#[derive(Debug, Default)]
pub struct GraceClock {
    first_seen: Mutex<HashMap<String, std::time::Instant>>,
}

impl GraceClock {
    /// When `key` was first seen; `now` if this is the first time.
    pub fn first_seen(&self, key: &str, now: std::time::Instant) -> std::time::Instant {
        *self.seen().entry(key.to_owned()).or_insert(now)
    }

    /// Forgets the graces of the request with this UID (it is gone).
    pub fn forget(&self, uid: &str) {
        let prefix = format!("{uid}/");
        self.seen().retain(|key, _| !key.starts_with(&prefix));
    }

    fn seen(&self) -> MutexGuard<'_, HashMap<String, std::time::Instant>> {
        self.first_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod grace_clock_tests {
    use super::*;

    #[test]
    fn the_first_sighting_stands_until_forgotten() {
        let clock = GraceClock::default();
        let start = std::time::Instant::now();
        let later = start + Duration::from_secs(5);
        assert_eq!(clock.first_seen("uid-1/t1", start), start);
        assert_eq!(clock.first_seen("uid-1/t1", later), start);
        assert_eq!(clock.first_seen("uid-2/t1", later), later);
        clock.forget("uid-1");
        assert_eq!(clock.first_seen("uid-1/t1", later), later);
        assert_eq!(clock.first_seen("uid-2/t1", start), later);
    }
}
