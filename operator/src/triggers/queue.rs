//! The workloads due for evaluation, and their evaluation a few at a time, fairly across
//! tenants.
//!
//! [`WakeQueue::wake`] arms crr-runtime's keyed [`Timers`] (one wake-up per key, the earliest
//! asked for standing). A key that fires joins its tenant's line ([`Due`]): the lines are served
//! in turn, one key each, so a namespace with a thousand workloads due delays another
//! namespace's one workload by at most one evaluation per line ahead of it, never by the
//! thousand. [`evaluate_due_keys`] takes keys as they come and runs up to a bound of
//! evaluations at once, never two of one key: a slow evaluation (a tenant's many reads) holds
//! one slot, not the loop.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crr_runtime::timers::Timers;
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tokio::sync::Notify;

/// The tenant a key's evaluation is counted against for fairness.
pub trait Tenant {
    /// Keys with the same tenant wait behind each other, never behind another tenant's.
    fn tenant(&self) -> &str;
}

/// The keys that came due, in one line per tenant, served in turn.
#[derive(Debug)]
pub struct Due<K> {
    /// Tenants with keys waiting, in the order of their next turn.
    turns: VecDeque<String>,
    /// Each tenant's keys, in the order they came due.
    lines: HashMap<String, VecDeque<K>>,
    /// Every key waiting: a key waits once however often it comes due.
    waiting: HashSet<K>,
}

impl<K> Default for Due<K> {
    fn default() -> Self {
        Self {
            turns: VecDeque::new(),
            lines: HashMap::new(),
            waiting: HashSet::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Tenant> Due<K> {
    /// Puts `key` at the end of its tenant's line, unless it waits already.
    pub fn push(&mut self, key: K) {
        if !self.waiting.insert(key.clone()) {
            return;
        }
        let tenant = key.tenant().to_owned();
        let line = self.lines.entry(tenant.clone()).or_default();
        if line.is_empty() {
            self.turns.push_back(tenant);
        }
        line.push_back(key);
    }

    /// The first key of the tenant whose turn it is; that tenant's next turn comes after every
    /// other tenant waiting.
    pub fn pop(&mut self) -> Option<K> {
        let tenant = self.turns.pop_front()?;
        let line = self.lines.get_mut(&tenant)?;
        let key = line.pop_front()?;
        if line.is_empty() {
            self.lines.remove(&tenant);
        } else {
            self.turns.push_back(tenant);
        }
        self.waiting.remove(&key);
        Some(key)
    }

    /// How many keys wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Keys, each due at one time, taken fairly across tenants once due.
pub struct WakeQueue<K> {
    timers: Arc<Timers<K>>,
    due: Arc<Mutex<Due<K>>>,
    came_due: Arc<Notify>,
}

impl<K> Default for WakeQueue<K> {
    fn default() -> Self {
        Self {
            timers: Arc::default(),
            due: Arc::new(Mutex::new(Due::default())),
            came_due: Arc::default(),
        }
    }
}

fn locked<K>(due: &Mutex<Due<K>>) -> MutexGuard<'_, Due<K>> {
    // Every change under the lock leaves `Due` whole: a panicked holder left it consistent.
    due.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: Clone + Eq + Hash + Tenant + Send + 'static> WakeQueue<K> {
    /// Makes `key` due `after` from now, or keeps it due sooner if it already is: wakes within
    /// a window fold into the first one's.
    pub fn wake(&self, key: K, after: Duration) {
        let (due, came_due) = (self.due.clone(), self.came_due.clone());
        self.timers.arm(key, after, move |key| {
            locked(&due).push(key);
            came_due.notify_one();
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

    /// The next key due, by [`Due`]'s turns, once one is. Cancel-safe: a key is taken only
    /// when it is returned. Meant for one taker.
    pub async fn next(&self) -> K {
        loop {
            if let Some(key) = locked(&self.due).pop() {
                return key;
            }
            // A key that comes due between the look and here leaves a permit: no wake is lost.
            self.came_due.notified().await;
        }
    }
}

/// Takes keys from `queue` as they come due and runs `evaluate` on each, at most `at_once` at a
/// time and never two of one key: a key that comes due while its evaluation runs is evaluated
/// again once it ends. Runs until dropped.
pub async fn evaluate_due_keys<K, F, Fut>(queue: &WakeQueue<K>, at_once: usize, evaluate: F)
where
    K: Clone + Eq + Hash + Tenant + Send + 'static,
    F: Fn(K) -> Fut,
    Fut: Future<Output = ()>,
{
    let at_once = at_once.max(1);
    let mut running = FuturesUnordered::new();
    let mut busy: HashSet<K> = HashSet::new();
    let mut again: HashSet<K> = HashSet::new();
    loop {
        tokio::select! {
            key = queue.next(), if running.len() < at_once => {
                if busy.contains(&key) {
                    again.insert(key);
                    continue;
                }
                busy.insert(key.clone());
                let evaluation = evaluate(key.clone());
                running.push(async move {
                    evaluation.await;
                    key
                });
            }
            Some(done) = running.next() => {
                busy.remove(&done);
                if again.remove(&done) {
                    queue.wake(done, Duration::ZERO);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use tokio::time::Instant;

    use super::*;

    /// `tenant/name`.
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    struct Key(&'static str);

    impl Tenant for Key {
        fn tenant(&self) -> &str {
            self.0.split('/').next().unwrap_or_default()
        }
    }

    #[test]
    fn tenants_take_turns_and_a_key_waits_once() {
        let mut due = Due::default();
        for key in ["a/1", "a/2", "a/3", "b/1", "a/1", "c/1", "b/2"] {
            due.push(Key(key));
        }
        assert_eq!(due.len(), 6, "a/1 came due twice and waits once");
        let order: Vec<_> = std::iter::from_fn(|| due.pop()).map(|key| key.0).collect();
        assert_eq!(order, ["a/1", "b/1", "c/1", "a/2", "b/2", "a/3"]);
        assert!(due.is_empty());
        // A tenant whose line emptied joins the end of the turns when it has a key again.
        due.push(Key("b/3"));
        due.push(Key("a/4"));
        assert_eq!(due.pop(), Some(Key("b/3")));
    }

    #[tokio::test(start_paused = true)]
    async fn keys_come_due_in_order_and_wakes_fold() {
        let queue = WakeQueue::default();
        queue.wake(Key("x/b"), Duration::from_secs(2));
        queue.wake(Key("x/a"), Duration::from_secs(1));
        queue.wake(Key("x/b"), Duration::from_secs(5));
        assert_eq!(queue.len(), 2);
        let start = Instant::now();
        assert_eq!(queue.next().await, Key("x/a"));
        assert_eq!(queue.next().await, Key("x/b"));
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(2),
            "b kept its earlier time"
        );
        assert!(queue.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_sooner_wake_interrupts_the_wait() {
        let queue = Arc::new(WakeQueue::default());
        queue.wake(Key("x/late"), Duration::from_secs(60));
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.next().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        queue.wake(Key("x/soon"), Duration::from_secs(1));
        let start = Instant::now();
        assert_eq!(waiting.await.unwrap(), Key("x/soon"));
        assert!(start.elapsed() <= Duration::from_secs(1));
    }

    /// Runs [`evaluate_due_keys`] for `for_how_long` of paused time; each evaluation of a key
    /// takes `took(key)` and is recorded with its start and end.
    async fn evaluations(
        queue: &WakeQueue<Key>,
        at_once: usize,
        took: impl Fn(&Key) -> Duration,
        for_how_long: Duration,
    ) -> Vec<(&'static str, Duration, Duration)> {
        let start = Instant::now();
        let record = StdMutex::new(Vec::new());
        let evaluate = |key: Key| {
            let (record, took) = (&record, took(&key));
            async move {
                let began = start.elapsed();
                tokio::time::sleep(took).await;
                record.lock().unwrap().push((key.0, began, start.elapsed()));
            }
        };
        let _ =
            tokio::time::timeout(for_how_long, evaluate_due_keys(queue, at_once, evaluate)).await;
        record.into_inner().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn one_tenants_many_keys_do_not_hold_back_anothers() {
        let queue = WakeQueue::default();
        let names: Vec<&'static str> = (0..20)
            .map(|index| &*format!("big/{index}").leak())
            .collect();
        for name in &names {
            queue.wake(Key(name), Duration::ZERO);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        queue.wake(Key("small/1"), Duration::ZERO);
        let done = evaluations(
            &queue,
            1,
            |_| Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(done.len(), 21);
        let position = done
            .iter()
            .position(|(key, _, _)| *key == "small/1")
            .expect("evaluated");
        // When it came due, big/0 ran and the big tenant had the next turn: the small tenant's
        // key waits behind those two, not behind the other eighteen.
        assert_eq!(position, 2, "{done:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_evaluation_holds_one_slot_and_a_key_never_runs_twice_at_once() {
        let queue = Arc::new(WakeQueue::default());
        queue.wake(Key("slow/1"), Duration::ZERO);
        queue.wake(Key("fast/1"), Duration::from_millis(10));
        // The slow key comes due again while it runs: it runs once more, after.
        tokio::spawn({
            let queue = queue.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                queue.wake(Key("slow/1"), Duration::ZERO);
            }
        });
        let done = evaluations(
            &queue,
            2,
            |key| {
                if key.0 == "slow/1" {
                    Duration::from_secs(30)
                } else {
                    Duration::from_secs(1)
                }
            },
            Duration::from_secs(120),
        )
        .await;
        let fast = done.iter().find(|(key, _, _)| *key == "fast/1").unwrap();
        assert!(
            fast.2 <= Duration::from_secs(2),
            "not behind the slow one: {done:?}"
        );
        let slow: Vec<_> = done.iter().filter(|(key, _, _)| *key == "slow/1").collect();
        assert_eq!(slow.len(), 2, "{done:?}");
        assert!(
            slow[1].1 >= slow[0].2,
            "the second began after the first ended: {done:?}"
        );
    }
}
