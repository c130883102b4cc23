//! A wake-up queue: each key is due at one time, the earliest asked for; [`WakeQueue::next`]
//! returns keys as they come due.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Keys, each due at one time.
pub struct WakeQueue<K> {
    due: Mutex<HashMap<K, Instant>>,
    changed: Notify,
}

impl<K> Default for WakeQueue<K> {
    fn default() -> Self {
        Self {
            due: Mutex::default(),
            changed: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> WakeQueue<K> {
    /// Makes `key` due `after` from now, or keeps it due sooner if it already is: wakes within
    /// a window fold into the first one's.
    pub fn wake(&self, key: K, after: Duration) {
        let at = Instant::now() + after;
        let sooner = {
            let mut due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
            match due.get_mut(&key) {
                Some(existing) if *existing <= at => false,
                Some(existing) => {
                    *existing = at;
                    true
                }
                None => {
                    due.insert(key, at);
                    true
                }
            }
        };
        if sooner {
            self.changed.notify_one();
        }
    }

    /// How many keys wait.
    pub fn len(&self) -> usize {
        self.due
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next key to come due, once it is.
    pub async fn next(&self) -> K {
        loop {
            let earliest = {
                let mut due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
                let earliest = due
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(key, at)| (key.clone(), *at));
                if let Some((key, at)) = &earliest
                    && *at <= Instant::now()
                {
                    due.remove(key);
                    return key.clone();
                }
                earliest.map(|(_, at)| at)
            };
            match earliest {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.changed.notified() => {}
                    }
                }
                None => self.changed.notified().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn keys_come_due_in_order_and_wakes_fold() {
        let queue = WakeQueue::default();
        queue.wake("b", Duration::from_secs(2));
        queue.wake("a", Duration::from_secs(1));
        queue.wake("b", Duration::from_secs(5));
        assert_eq!(queue.len(), 2);
        let start = Instant::now();
        assert_eq!(queue.next().await, "a");
        assert_eq!(queue.next().await, "b");
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(2),
            "b kept its earlier time"
        );
        assert!(queue.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_sooner_wake_interrupts_the_wait() {
        let queue = std::sync::Arc::new(WakeQueue::default());
        queue.wake("late", Duration::from_secs(60));
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.next().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        queue.wake("soon", Duration::from_secs(1));
        let start = Instant::now();
        assert_eq!(waiting.await.unwrap(), "soon");
        assert!(start.elapsed() <= Duration::from_secs(1));
    }
}
