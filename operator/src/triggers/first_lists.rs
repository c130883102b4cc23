//! Which of the trigger controller's watches have finished their first list. Evaluation waits
//! for all of them: a workload evaluated before the TriggerRecords are listed looks seen for the
//! first time (its record would be written again, a change waiting for its window lost), and one
//! evaluated before the ConfigMaps are listed compares its hashes with an index that lacks
//! objects it uses. A relist after that keeps what was seen until it ends (`record`, `index`),
//! so only the first list gates.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::watch;

use super::context::locked;

/// The watches still in their first list, by name (`Deployment`, `ConfigMap`, `TriggerRecord`).
#[derive(Debug)]
pub struct FirstLists {
    waiting: Mutex<BTreeSet<String>>,
    all_listed: watch::Sender<bool>,
}

impl FirstLists {
    /// Waits for the first list of each of `watches`.
    pub fn new(watches: impl IntoIterator<Item = String>) -> Self {
        let waiting: BTreeSet<String> = watches.into_iter().collect();
        let (all_listed, _) = watch::channel(waiting.is_empty());
        Self {
            waiting: Mutex::new(waiting),
            all_listed,
        }
    }

    /// The watch `name` finished a list (the first or a later one).
    pub fn listed(&self, name: &str) {
        let mut waiting = locked(&self.waiting);
        if waiting.remove(name) && waiting.is_empty() {
            self.all_listed.send_replace(true);
        }
    }

    /// The watches whose first list has not finished.
    pub fn waiting(&self) -> Vec<String> {
        locked(&self.waiting).iter().cloned().collect()
    }

    /// Returns once every watch has finished its first list.
    pub async fn all_listed(&self) {
        let mut listed = self.all_listed.subscribe();
        // The sender lives in `self`, so the channel cannot close while this borrows it.
        let _ = listed.wait_for(|all| *all).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[tokio::test]
    async fn evaluation_waits_until_every_watch_listed_once() {
        let lists = FirstLists::new(names(&["Deployment", "ConfigMap", "TriggerRecord"]));
        lists.listed("ConfigMap");
        lists.listed("ConfigMap");
        lists.listed("Deployment");
        assert_eq!(lists.waiting(), ["TriggerRecord"]);
        let waited = tokio::time::timeout(Duration::from_millis(50), lists.all_listed()).await;
        assert!(waited.is_err(), "it returned with the records unlisted");
        lists.listed("TriggerRecord");
        tokio::time::timeout(Duration::from_secs(5), lists.all_listed())
            .await
            .expect("it returns once the last watch listed");
        assert!(lists.waiting().is_empty());
    }

    #[tokio::test]
    async fn a_waiter_from_before_the_last_list_is_woken() {
        let lists = std::sync::Arc::new(FirstLists::new(names(&["Secret"])));
        let waiter = tokio::spawn({
            let lists = lists.clone();
            async move { lists.all_listed().await }
        });
        tokio::task::yield_now().await;
        lists.listed("a watch it does not wait for");
        assert!(!waiter.is_finished());
        lists.listed("Secret");
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("the waiter ends");
    }

    #[tokio::test]
    async fn with_no_watches_nothing_waits() {
        tokio::time::timeout(
            Duration::from_secs(5),
            FirstLists::new(Vec::new()).all_listed(),
        )
        .await
        .expect("nothing to wait for");
    }
}
