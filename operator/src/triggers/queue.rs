//! The workloads due for evaluation: [`WakeQueue::wake`] arms crr-runtime's keyed [`Timers`]
//! (one wake-up per key, the earliest asked for standing), and a key that fires waits in a
//! channel until the evaluation loop takes it with [`WakeQueue::next`].

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crr_runtime::timers::Timers;
use tokio::sync::{Mutex, mpsc};

/// Keys, each due at one time, taken in the order they come due.
pub struct WakeQueue<K> {
    timers: Arc<Timers<K>>,
    due: mpsc::UnboundedSender<K>,
    taken: Mutex<mpsc::UnboundedReceiver<K>>,
}

impl<K> Default for WakeQueue<K> {
    fn default() -> Self {
        let (due, taken) = mpsc::unbounded_channel();
        Self {
            timers: Arc::default(),
            due,
            taken: Mutex::new(taken),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WakeQueue<K> {
    /// Makes `key` due `after` from now, or keeps it due sooner if it already is: wakes within
    /// a window fold into the first one's.
    pub fn wake(&self, key: K, after: Duration) {
        let due = self.due.clone();
        self.timers.arm(key, after, move |key| {
            // The receiver lives as long as the queue: a send fails only once it is gone.
            let _ = due.send(key);
        });
    }

    /// How many keys wait to come due.
    pub fn len(&self) -> usize {
        self.timers.armed()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next key to come due, once it is.
    pub async fn next(&self) -> K {
        self.taken
            .lock()
            .await
            .recv()
            .await
            .expect("the queue holds a sender as long as it lives")
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

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
