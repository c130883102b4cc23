//! Reflector stores: waiting for one to be filled by its first list.

use std::hash::Hash;
use std::time::Duration;

use kube::runtime::reflector::store::WriterDropped;
use kube::runtime::reflector::{Lookup, Store};

/// How often [`wait_until_ready`] polls again.
const POLL: Duration = Duration::from_millis(250);

/// Resolves once `store` has been listed (or fails when its writer is gone first).
///
/// kube-runtime's `Store::wait_until_ready` wakes only its most recent poller (a oneshot
/// underneath); a controller's own runner waits on the same store, so a second waiter can sleep
/// forever. Polling again at intervals instead of once makes every waiter see readiness.
pub async fn wait_until_ready<K>(store: &Store<K>) -> Result<(), WriterDropped>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    loop {
        if let Ok(ready) = tokio::time::timeout(POLL, store.wait_until_ready()).await {
            return ready;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    #[tokio::test(start_paused = true)]
    async fn two_waiters_both_see_the_store_become_ready() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let first = tokio::spawn({
            let store = store.clone();
            async move { wait_until_ready(&store).await }
        });
        let second = tokio::spawn({
            let store = store.clone();
            async move { wait_until_ready(&store).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!first.is_finished() && !second.is_finished());
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        assert!(first.await.unwrap().is_ok());
        assert!(second.await.unwrap().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_writer_is_an_error() {
        let (store, writer) = reflector::store::<ConfigMap>();
        drop(writer);
        assert!(wait_until_ready(&store).await.is_err());
    }
}
