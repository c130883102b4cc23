//! Delayed wake-ups, at most one per key: when a key is armed again, the earlier of the two
//! times stands and the later is dropped. The node daemon's work queue uses it to look at a pod
//! again after a poll interval or a grace period; the operator's trigger wing to evaluate a
//! workload after its debounce, its next schedule tick or a backoff.
//!
//! It decides only when a key fires, not what firing does (the caller's callback) and not
//! whether the key is still worth looking at: there is no cancel, so a key the queue took
//! meanwhile for another reason still fires, and the queue takes such a redundant add in its
//! stride. Time is tokio's, so tests run it paused.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Where a delay too long for the clock ends: about a century.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The armed keys and when each is due.
pub struct Timers<K> {
    due: Mutex<HashMap<K, Instant>>,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Self {
            due: Mutex::default(),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Timers<K> {
    /// Calls `fire(key)` once `after` has passed, unless the key is already due no later than
    /// that; a key armed for a later time is moved earlier. A key fires at most once per arming
    /// that stood, and may be armed again once it fired.
    pub fn arm(self: &Arc<Self>, key: K, after: Duration, fire: impl FnOnce(K) + Send + 'static) {
        let now = Instant::now();
        // However far `after` is, never an overflow: beyond a century is a century.
        let at = now
            .checked_add(after)
            .or_else(|| now.checked_add(FAR_FUTURE))
            .unwrap_or(now);
        {
            let mut due = self.due();
            if due.get(&key).is_some_and(|armed| *armed <= at) {
                return;
            }
            due.insert(key.clone(), at);
        }
        let timers = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let mut due = timers.due();
            // A timer moved earlier (and perhaps fired) leaves this one stale: it does nothing.
            if due.get(&key) == Some(&at) {
                due.remove(&key);
                drop(due);
                fire(key);
            }
        });
    }

    /// How many keys are armed and not fired yet.
    pub fn armed(&self) -> usize {
        self.due().len()
    }

    fn due(&self) -> MutexGuard<'_, HashMap<K, Instant>> {
        // Every change under the lock is a single insert or remove: a panicked holder left
        // the map consistent.
        self.due.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Armed keys and the fired ones, in firing order.
    struct Clock {
        timers: Arc<Timers<&'static str>>,
        fired: Arc<Mutex<Vec<&'static str>>>,
    }

    impl Clock {
        fn new() -> Self {
            Self {
                timers: Arc::default(),
                fired: Arc::default(),
            }
        }

        fn arm(&self, key: &'static str, after_secs: u64) {
            let fired = self.fired.clone();
            self.timers
                .arm(key, Duration::from_secs(after_secs), move |key| {
                    fired.lock().unwrap().push(key);
                });
        }

        /// Moves paused time on and lets the woken timers run; returns what fired meanwhile.
        async fn advance(&self, by: Duration) -> Vec<&'static str> {
            tokio::time::advance(by).await;
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
            std::mem::take(&mut *self.fired.lock().unwrap())
        }

        async fn advance_secs(&self, secs: u64) -> Vec<&'static str> {
            self.advance(Duration::from_secs(secs)).await
        }
    }

    const JUST_UNDER_A_SECOND: Duration = Duration::from_millis(999);

    #[tokio::test(start_paused = true)]
    async fn a_key_fires_at_its_time_and_not_before() {
        let clock = Clock::new();
        clock.arm("pod", 5);
        assert!(clock.advance_secs(4).await.is_empty());
        assert!(clock.advance(JUST_UNDER_A_SECOND).await.is_empty());
        assert_eq!(clock.advance(Duration::from_millis(1)).await, ["pod"]);
        assert!(clock.advance_secs(60).await.is_empty(), "once only");
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_delay_fires_on_the_next_turn() {
        let clock = Clock::new();
        clock.arm("pod", 0);
        assert_eq!(clock.advance(Duration::ZERO).await, ["pod"]);
    }

    #[tokio::test(start_paused = true)]
    async fn arming_earlier_replaces_the_later_time() {
        let clock = Clock::new();
        clock.arm("pod", 10);
        clock.arm("pod", 3);
        assert!(clock.advance_secs(2).await.is_empty());
        assert_eq!(clock.advance_secs(1).await, ["pod"]);
        assert!(
            clock.advance_secs(60).await.is_empty(),
            "the replaced time does not fire"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn arming_later_keeps_the_earlier_time() {
        let clock = Clock::new();
        clock.arm("pod", 3);
        clock.arm("pod", 10);
        assert!(clock.advance_secs(2).await.is_empty());
        assert_eq!(clock.advance_secs(1).await, ["pod"], "at the earlier time");
        assert!(clock.advance_secs(60).await.is_empty(), "and only then");
    }

    #[tokio::test(start_paused = true)]
    async fn arming_the_same_time_twice_fires_once() {
        let clock = Clock::new();
        clock.arm("pod", 3);
        clock.arm("pod", 3);
        assert_eq!(clock.advance_secs(3).await, ["pod"]);
        assert!(clock.advance_secs(60).await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_can_be_armed_again_once_it_fired() {
        let clock = Clock::new();
        clock.arm("pod", 1);
        assert_eq!(clock.advance_secs(1).await, ["pod"]);
        clock.arm("pod", 5);
        assert!(clock.advance_secs(4).await.is_empty());
        assert_eq!(clock.advance_secs(1).await, ["pod"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_replaced_time_armed_anew_fires_once() {
        let clock = Clock::new();
        clock.arm("pod", 10);
        clock.arm("pod", 3);
        assert_eq!(clock.advance_secs(3).await, ["pod"]);
        // Due at 10 s again: the same instant the replaced timer still sleeps until.
        clock.arm("pod", 7);
        assert!(clock.advance_secs(6).await.is_empty());
        assert_eq!(clock.advance_secs(1).await, ["pod"]);
        assert!(clock.advance_secs(60).await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn keys_keep_their_own_times() {
        let clock = Clock::new();
        clock.arm("slow", 5);
        clock.arm("fast", 2);
        assert_eq!(clock.advance_secs(2).await, ["fast"]);
        assert_eq!(clock.advance_secs(3).await, ["slow"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delay_beyond_the_clock_never_panics_and_never_fires_soon() {
        let clock = Clock::new();
        clock.arm("pod", u64::MAX);
        assert!(clock.advance_secs(3600).await.is_empty());
        clock.arm("pod", 1);
        assert_eq!(
            clock.advance_secs(1).await,
            ["pod"],
            "an earlier time still wins"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_due_at_once_all_fire() {
        let clock = Clock::new();
        clock.arm("a", 1);
        clock.arm("b", 2);
        let mut fired = clock.advance_secs(5).await;
        fired.sort_unstable();
        assert_eq!(fired, ["a", "b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn armed_counts_the_keys_not_fired_yet() {
        let clock = Clock::new();
        clock.arm("a", 1);
        clock.arm("b", 2);
        clock.arm("b", 5);
        assert_eq!(clock.timers.armed(), 2);
        assert_eq!(clock.advance_secs(1).await, ["a"]);
        assert_eq!(clock.timers.armed(), 1);
    }
}
