//! The work queue of pod keys (`namespace/podName`): each key waits at most once, never runs
//! twice at once, and runs once more if it was added while it ran (the change it was added for
//! may have come after the round read the request). Delayed adds go through crr-runtime's
//! [`Timers`].
//!
//! It decides when a key is handed out, not what a round does with it nor how many run at once
//! (`worker` holds the limit).

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crr_runtime::timers::Timers;

#[derive(Default)]
pub struct WorkQueue {
    keys: Mutex<Keys>,
    timers: Arc<Timers<String>>,
    added: Notify,
}

/// Keys waiting, running, or to run again once their running round ends.
#[derive(Default)]
struct Keys {
    pending: BTreeSet<String>,
    running: HashSet<String>,
    rerun: HashSet<String>,
}

impl WorkQueue {
    /// Queues the key, or marks it to run again if it runs now; wakes the taker.
    pub fn add(&self, key: String) {
        let mut keys = self.keys();
        if keys.running.contains(&key) {
            keys.rerun.insert(key);
        } else {
            keys.pending.insert(key);
        }
        drop(keys);
        self.added.notify_one();
    }

    /// Adds the key after `after`, unless it is already due earlier.
    pub fn add_after(self: &Arc<Self>, key: String, after: Duration) {
        let queue = self.clone();
        self.timers.arm(key, after, move |key| queue.add(key));
    }

    /// Completes once a key was added since the last wake-up (at once if one was meanwhile).
    pub async fn added(&self) {
        self.added.notified().await;
    }

    /// Every waiting key, in key order; each is running from now on.
    pub fn take(&self) -> Vec<String> {
        let mut keys = self.keys();
        let taken: Vec<String> = std::mem::take(&mut keys.pending).into_iter().collect();
        for key in &taken {
            keys.running.insert(key.clone());
        }
        taken
    }

    /// The round of `key` ended; whether it must run again at once.
    pub fn done(&self, key: &str) -> bool {
        let mut keys = self.keys();
        keys.running.remove(key);
        keys.rerun.remove(key)
    }

    fn keys(&self) -> MutexGuard<'_, Keys> {
        // Every change under the lock leaves the sets consistent: a panicked holder did too.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> String {
        format!("ns/{name}")
    }

    #[test]
    fn a_key_added_twice_is_taken_once() {
        let queue = WorkQueue::default();
        queue.add(key("p"));
        queue.add(key("p"));
        assert_eq!(queue.take(), [key("p")]);
        assert!(queue.take().is_empty());
    }

    #[test]
    fn waiting_keys_are_taken_together_in_key_order() {
        let queue = WorkQueue::default();
        queue.add(key("b"));
        queue.add(key("a"));
        assert_eq!(queue.take(), [key("a"), key("b")]);
    }

    #[test]
    fn a_key_added_while_it_runs_is_not_handed_out_twice_but_runs_again_after() {
        let queue = WorkQueue::default();
        queue.add(key("p"));
        assert_eq!(queue.take(), [key("p")]);
        queue.add(key("p"));
        queue.add(key("p"));
        assert!(
            queue.take().is_empty(),
            "never two rounds of one pod at once"
        );
        assert!(queue.done(&key("p")), "runs again once");
        assert!(!queue.done(&key("p")));
    }

    #[test]
    fn a_key_not_added_while_it_ran_is_done() {
        let queue = WorkQueue::default();
        queue.add(key("p"));
        queue.take();
        assert!(!queue.done(&key("p")));
        queue.add(key("p"));
        assert_eq!(queue.take(), [key("p")], "waits again, not marked to rerun");
    }

    #[tokio::test]
    async fn an_add_wakes_a_taker_that_was_not_yet_waiting() {
        let queue = WorkQueue::default();
        queue.add(key("p"));
        tokio::time::timeout(Duration::from_secs(1), queue.added())
            .await
            .expect("woken");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_queues_the_key_when_due() {
        let queue = Arc::new(WorkQueue::default());
        queue.add_after(key("p"), Duration::from_secs(2));
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert!(queue.take().is_empty());
        tokio::time::timeout(Duration::from_secs(5), queue.added())
            .await
            .expect("woken by the timer");
        assert_eq!(queue.take(), [key("p")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_of_a_running_key_makes_it_run_again() {
        let queue = Arc::new(WorkQueue::default());
        queue.add(key("p"));
        queue.take();
        queue.add_after(key("p"), Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(queue.take().is_empty());
        assert!(queue.done(&key("p")));
    }
}
