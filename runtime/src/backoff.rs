//! Retry delays, per key: exponential from a base, capped, with jitter, so that a failing
//! request is retried soon at first and then ever more rarely, and many failing at once do not
//! retry in step. A success forgets the key's failures.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, RandomState};
use std::sync::Mutex;
use std::time::Duration;

/// Keys remembered at most; past it the oldest counts are dropped all at once (a key that fails
/// again starts over from the base delay, which is harmless).
const MAX_KEYS: usize = 50_000;

/// Failure counts per key, and the delays they give.
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: Mutex<HashMap<String, u32>>,
    random: RandomState,
}

impl Backoff {
    /// Delays from `base` doubling per failure, never above `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            failures: Mutex::default(),
            random: RandomState::new(),
        }
    }

    /// Records a failure of `key`; returns how long to wait before trying it again.
    pub fn failed(&self, key: &str) -> Duration {
        let failures = {
            let mut counts = self
                .failures
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if counts.len() >= MAX_KEYS && !counts.contains_key(key) {
                counts.clear();
            }
            let count = counts.entry(key.to_owned()).or_insert(0);
            *count = count.saturating_add(1);
            *count
        };
        // A fresh random draw per call: RandomState's keys are random per instance and the
        // hash of (key, failures, now) differs each time.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let draw = self.random.hash_one((key, failures, now));
        let jitter = (draw >> 11) as f64 / (1u64 << 53) as f64;
        delay(self.base, self.cap, failures, jitter)
    }

    /// Forgets `key`'s failures: it succeeded, or it is gone.
    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(key);
    }

    /// How many failures in a row `key` has now.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

/// The delay after `failures` failures in a row (1 for the first): `base · 2^(failures-1)`,
/// never above `cap`, of which the upper half is scaled by `jitter` (in `[0, 1)`): between half
/// the exponential delay and all of it.
pub fn delay(base: Duration, cap: Duration, failures: u32, jitter: f64) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    let full = base.saturating_mul(1u32 << exponent).min(cap);
    let half = full / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(500);
    const CAP: Duration = Duration::from_secs(60);

    #[test]
    fn delays_double_from_the_base_and_stop_at_the_cap() {
        let at = |failures, jitter| delay(BASE, CAP, failures, jitter);
        assert_eq!(at(1, 0.0), Duration::from_millis(250));
        assert_eq!(at(1, 1.0), BASE);
        assert_eq!(at(2, 1.0), Duration::from_secs(1));
        assert_eq!(at(4, 1.0), Duration::from_secs(4));
        assert_eq!(at(8, 1.0), CAP, "64 s is over the cap");
        assert_eq!(at(u32::MAX, 1.0), CAP);
        assert_eq!(at(u32::MAX, 0.0), CAP / 2);
        assert_eq!(at(0, 1.0), BASE, "no failure counts as the first");
    }

    #[test]
    fn a_key_backs_off_until_it_succeeds_and_keys_are_counted_apart() {
        let backoff = Backoff::new(BASE, CAP);
        let first = backoff.failed("a");
        assert!((BASE / 2..=BASE).contains(&first), "{first:?}");
        for _ in 0..10 {
            backoff.failed("a");
        }
        let late = backoff.failed("a");
        assert!((CAP / 2..=CAP).contains(&late), "{late:?}");
        assert_eq!(backoff.failures("a"), 12);
        let other = backoff.failed("b");
        assert!(other <= BASE, "{other:?}");
        backoff.succeeded("a");
        assert_eq!(backoff.failures("a"), 0);
        assert!(backoff.failed("a") <= BASE);
    }

    #[test]
    fn jitter_spreads_retries() {
        let backoff = Backoff::new(BASE, CAP);
        let delays: std::collections::BTreeSet<Duration> = (0..20)
            .map(|index| {
                let key = format!("k{index}");
                backoff.failed(&key)
            })
            .collect();
        assert!(
            delays.len() > 10,
            "twenty first retries at {} moments",
            delays.len()
        );
    }
}
